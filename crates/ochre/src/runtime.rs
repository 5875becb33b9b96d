//! The public face: [`Builder`], [`Runtime`], [`Handle`], [`RunReport`].
//!
//! Worker threads are created by [`Builder::build`], pinned once (a pinned worker leaves its pin
//! for a second at a time when other processes share every CPU: [`Config::unpin_when_shared`]),
//! and live as long as the `Runtime`: each owns its `Core` (queues, buffers, counters) for its
//! whole life, so everything a worker allocates stays in memory its own thread allocated (a
//! worker re-created per run would inherit another thread's heap and share cache lines with
//! it). Between runs the workers wait on a gate; [`Runtime::run`] opens it, and waits until
//! every worker has left its run loop.
//!
//! Shutdown semantics: `ochre::shutdown()` / [`Handle::shutdown`] end the current run after each
//! worker's current turn; nothing is lost: undelivered batches are flushed to their inboxes and
//! every accepted event runs at the next `run` ([`RunReport::pending`] counts them). Dropping the
//! `Runtime` stops the workers and drops the events that never ran, without running them; later
//! posts through a [`Handle`] fail with [`Error::Closed`].

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::actor::Addr;
use crate::color::home_of;
use crate::config::{Config, Spin};
use crate::context::{with_current, Enter};
use crate::message::{InlineTask, Msg, Task};
use crate::shared::{PanicRecord, Shared, QUIESCENT, RUNNING, SHUTDOWN};
use crate::stats::WorkerStats;
use crate::sync::{lock, AtomicBool, AtomicU64, Condvar, Mutex, Ordering};
use crate::wakeup_latency::Threshold;
use crate::worker::{Core, WorkerCtx};
use crate::{topology, Color, Error};

/// Builds a [`Runtime`].
///
/// ```
/// let rt = ochre::Runtime::builder().workers(2).pin(false).build()?;
/// let report = rt.run(ochre::Color(1), || {
///     ochre::post(ochre::Color(2), || println!("hello from a colored event"));
/// })?;
/// assert_eq!(report.total().events_run, 2);
/// # Ok::<(), ochre::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Builder {
    workers: Option<usize>,
    pin: bool,
    cpus: Option<Vec<usize>>,
    config: Config,
    topology: Option<topology::Topology>,
    event_alloc: EventAllocSlot,
}

/// An allocator for events' closures, as [`Builder::event_allocator`] takes it.
pub type EventAlloc = &'static (dyn std::alloc::GlobalAlloc + Sync);

/// The builder's event allocator, shown without its (opaque) contents.
#[derive(Clone, Copy, Default)]
struct EventAllocSlot(Option<EventAlloc>);

impl std::fmt::Debug for EventAllocSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(<allocator>)" } else { "None" })
    }
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            workers: None,
            pin: true,
            cpus: None,
            config: Config::default(),
            topology: None,
            event_alloc: EventAllocSlot(None),
        }
    }
}

impl Builder {
    /// Number of worker threads. Default: one per CPU in the process's affinity mask (or per CPU
    /// given to [`cpus`](Builder::cpus)), but no more than the CPUs' worth of time a CPU quota
    /// gives the process (a container's cgroup `cpu.max`, as
    /// [`std::thread::available_parallelism`] reads it); the quota also bounds the workers that
    /// are homes of colors. More workers than CPUs is allowed and costs little:
    /// colors are then homed on as many workers as there are CPUs and the others stand by
    /// ([`Config::home_on_every_worker`]): they take colors moved to them and stand in for a
    /// worker stuck in a handler, but do not steal, and sleep through the ends of runs.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// Pin worker `i` to the `i`-th CPU (round robin when there are more workers than CPUs).
    /// Default: true. A pinned worker that finds every CPU shared with other processes leaves
    /// its pin for a second at a time, and the workers the process starts meanwhile start
    /// unpinned ([`Config::unpin_when_shared`], on by default).
    pub fn pin(mut self, pin: bool) -> Self {
        self.pin = pin;
        self
    }

    /// The CPUs to place workers on, in order. Each must be in the process's affinity mask.
    /// Default: the whole mask.
    pub fn cpus(mut self, cpus: impl IntoIterator<Item = usize>) -> Self {
        self.cpus = Some(cpus.into_iter().collect());
        self
    }

    /// The topology that locality-aware stealing follows (worker `i` at tree position
    /// `i % len`). Default: the machine's, discovered from sysfs, with workers pinned in tree
    /// order. A synthetic one ([`Topology::synthetic`](topology::Topology::synthetic)) studies
    /// policies for machines we do not have; pinning still uses the real CPUs.
    pub fn topology(mut self, topology: topology::Topology) -> Self {
        self.topology = Some(topology);
        self
    }

    /// Where events' closures live when EMA does not hold them ([`Config::ema`] off, an
    /// object larger than EMA's classes, or the EMA cap reached): this allocator instead of the
    /// process's global one. For comparing allocators inside one process (the benchmarks run
    /// ochre with jemalloc and mimalloc as its event allocator this way).
    pub fn event_allocator(mut self, alloc: EventAlloc) -> Self {
        self.event_alloc = EventAllocSlot(Some(alloc));
        self
    }

    /// The tunables (default: the optimized runtime; [`Config::baseline`] for libasync-smp).
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// Make a panicking handler end the run with [`Error::HandlerPanicked`] instead of being
    /// counted and skipped. Default: false.
    pub fn abort_on_panic(mut self, abort: bool) -> Self {
        self.config.abort_on_panic = abort;
        self
    }

    /// Checks the settings, starts the workers' threads and returns once every worker is
    /// through its start (pinned, its heap made) and waits for a run, so that the first
    /// [`Runtime::run`] starts as later ones do. What a process does once is started here and
    /// waited for nowhere, each on a thread of its own: the wake-up latency's measurement,
    /// which the reasoned-spinning threshold is made of (`wakeup_latency`: a latency of 20 µs, a
    /// threshold of 200 µs, assumed until the process is idle long enough to measure it), the calibration of the turn timers' clock (`turn_clock`: the
    /// OS clock until then) and the registration stand-ins need (`membarrier`, 12.5 ms here:
    /// workers open windows once it is done). A process's first build of two workers takes
    /// 0.6-1.0 ms here (4.1-4.8 ms when it measured and calibrated before returning, six
    /// processes of each alternated, `startup_probe`; tokio-mt's 0.04-0.06 ms); later builds
    /// 0.15-0.5 ms (most of it the threads' starts).
    pub fn build(mut self) -> Result<Runtime, Error> {
        self.config.validate().map_err(Error::Config)?;
        // Once per process, here rather than in the first run's first timed turn (`turn_clock`).
        crate::turn_clock::calibrate();
        if self.config.trace_events == 0 {
            // Every runtime of the process traced (`trace::trace_every_runtime`), or 0.
            self.config.trace_events = crate::trace::every_runtime_records();
        }
        let allowed = topology::allowed_cpus().map_err(|e| Error::os("reading CPU affinity", e))?;
        let discovered = topology::Topology::discover();
        let cpus = match self.cpus {
            Some(list) => {
                if let Some(&cpu) = list.iter().find(|c| !allowed.contains(c)) {
                    return Err(Error::CpuUnavailable { cpu, allowed });
                }
                list
            }
            // Tree order: consecutive workers fill a cache domain before the next.
            None => {
                discovered.as_ref().map(|t| t.cpus().to_vec()).unwrap_or_else(|_| allowed.clone())
            }
        };
        // The CPU time the process may use: a container's CPU quota (cgroup `cpu.max`, or
        // `cpu.cfs_quota_us`) below its affinity mask gives it that many CPUs' worth, however
        // many CPUs it may run on; std reads it (as rayon does, and tokio through num_cpus). A
        // worker per CPU of the mask would then share the quota's time slices: spinning burns
        // them, and a color homed on a worker waits for them. Measured (`user_probe`,
        // `DEFAULTS=1`, a v1 cgroup with a one-CPU quota on two CPUs, 3 processes each): a
        // 200 ms word count 207-220 ms with two workers, 166-170 ms with one (rayon 150-165 ms,
        // one thread); but a 5 ms sum ran 5-6 ms with two workers, 9-10 ms with one: the
        // quota is an average over 100 ms periods, and a job shorter than a period may still use
        // both CPUs. Sustained work is what a quota is set for (Go 1.25's GOMAXPROCS, rayon and
        // tokio follow it too).
        let quota = cpu_quota();
        let workers = self.workers.unwrap_or(cpus.len().min(quota));
        let tree = match self.topology {
            Some(t) if !t.is_empty() => t,
            Some(_) => return Err(Error::Config("the topology has no CPU".into())),
            None => discovered
                .map(|t| {
                    // Follow the workers' CPUs, in their order.
                    let flat = topology::Topology::flat(cpus.clone());
                    if t.cpus() == cpus.as_slice() {
                        t
                    } else {
                        flat
                    }
                })
                .unwrap_or_else(|_| topology::Topology::flat(cpus.clone())),
        };
        if workers == 0 || cpus.is_empty() {
            return Err(Error::ZeroWorkers);
        }
        let pins: Vec<Option<usize>> =
            (0..workers).map(|i| self.pin.then(|| cpus[i % cpus.len()])).collect();
        if crate::stand_in::wanted(&self.config, workers) {
            // Waited for nowhere (`stand_in::register_in_background`).
            crate::stand_in::register_in_background();
        }
        // Measured in the background, waited for by nobody (`wakeup_latency`).
        let spin_threshold = match self.config.spin {
            Spin::Reasoned { threshold: Some(t) } => Threshold::Set(t),
            Spin::Reasoned { threshold: None } | Spin::Adaptive => {
                crate::wakeup_latency::start(self.config.wakeup);
                Threshold::Measured(self.config.wakeup)
            }
            _ => Threshold::Set(Duration::ZERO),
        };
        // The CPUs the workers run on (a CPU given twice counts once): homes of colors for as
        // many workers (`Config::home_on_every_worker`).
        let cpu_count = {
            let mut distinct = cpus.clone();
            distinct.sort_unstable();
            distinct.dedup();
            distinct.len().min(allowed.len()).min(quota)
        };
        // Pinned workers that each have a CPU of their own take nobody's CPU by spinning; with
        // more workers than CPUs, at most half the CPUs spin (tokio bounds searchers likewise).
        let max_spinners = crate::idle::max_spinners(self.config.max_spinners, workers, cpu_count);
        let shared = Arc::new(
            Shared::new(self.config, workers, cpu_count, spin_threshold, max_spinners, &tree)
                .map_err(|e| Error::os("creating a wake-up channel", e))?,
        );
        crate::stall::start(&shared).map_err(|e| Error::os("starting the stall watchdog", e))?;
        let gate = Arc::new(Gate {
            state: Mutex::new(GateState {
                finished: 0,
                started: 0,
                crashed: None,
                warnings: Vec::new(),
            }),
            start: Condvar::new(),
            done: Condvar::new(),
            latest: AtomicU64::new(0),
            ended: AtomicU64::new(0),
        });
        let mut rt = Runtime {
            shared: shared.clone(),
            gate: gate.clone(),
            threads: Vec::with_capacity(workers),
            pins: pins.clone(),
            running: AtomicBool::new(false),
        };
        let config = &shared.config;
        let may_unpin = config.unpin_when_shared && uses_shares(config) && workers > 1 && self.pin;
        let runtime_cpus: Arc<[usize]> = cpus.clone().into();
        for (i, pin) in pins.into_iter().enumerate() {
            let beat = shared.stalls.beat(i, &shared.config);
            let mut core = Core::new(i, shared.placement, &shared.config, beat);
            core.unpin_to = pin.filter(|_| may_unpin).map(|cpu| (cpu, runtime_cpus.clone()));
            // Reads run where they are posted: each worker's lane never moves (`reader`).
            let lane = shared.readers.lane(i);
            if crate::color::home_of(lane, shared.placement) == i {
                core.queue.pin(lane);
            }
            let (shared, gate) = (shared.clone(), gate.clone());
            let event_alloc = self.event_alloc.0;
            let spawned =
                std::thread::Builder::new().name(format!("ochre-w{i}")).spawn(move || {
                    crate::message::set_event_allocator(event_alloc);
                    worker_thread(shared, gate, core, pin)
                });
            match spawned {
                Ok(t) => rt.threads.push(t),
                // Dropping `rt` stops and joins the workers already started.
                Err(e) => return Err(Error::os("starting a worker thread", e)),
            }
        }
        rt.wait_for_starts()?;
        Ok(rt)
    }
}

/// Where workers wait between runs, and report the end of a run.
struct Gate {
    state: Mutex<GateState>,
    /// Signalled when `latest` changes.
    start: Condvar,
    /// Signalled when `ended` changes.
    done: Condvar,
    /// The number of the latest run started ([`EXIT`] once the runtime is dropped); written
    /// under `state`'s lock, read there and by workers watching it before they wait.
    latest: AtomicU64,
    /// The number of the latest run all workers finished; written under `state`'s lock, read
    /// there and by the caller of `run` watching it before it waits.
    ended: AtomicU64,
}

/// [`Gate::latest`] once the workers are to exit.
const EXIT: u64 = u64::MAX;

/// How long a worker that ended a run watches for the next before it blocks on the gate: a
/// program that runs short jobs back to back (each `run` a few microseconds of events) then
/// finds its workers there, where each blocked worker costs the next run a wake-up, tens of
/// microseconds on a virtual machine. The watch yields its CPU at each look, so a worker on a
/// CPU shared with another process where every worker has a CPU of its own
/// (`worker::on_shared_cpu`) does not watch: it blocks at once. There a yield hands the
/// other thread the rest of its time slice, and the next run waited for it, where a blocked
/// worker's wake-up takes the CPU back at once. Beside a thread spinning on CPU 1,
/// `Runtime::run` of eight empty events took 3.9 ms a run (after the end of a run stopped
/// yielding too: `worker`'s `wait_for_every_flush`), 28-29 us blocking at once (medians of 300
/// runs, each after a tokio `block_on`; tokio-mt 65 us; a scratch program of session 39).
/// Spinning without yielding instead did as well there, but where the share was stale (the
/// other thread gone, the worker's windows too short to measure again) it held the CPU the
/// caller of `run` needed: 89 us a run against 19 us blocking.
#[cfg(not(loom))]
const GATE_SPIN: Duration = Duration::from_micros(50);

/// Watches `count` for up to [`GATE_SPIN`] from `since` while it reads `unchanged`, yielding
/// the CPU at each look (before blocking on the gate's condition variable; not under loom).
fn watch_gate(count: &AtomicU64, unchanged: u64, since: Instant) {
    #[cfg(not(loom))]
    while count.load(Ordering::Acquire) == unchanged && since.elapsed() < GATE_SPIN {
        std::thread::yield_now();
    }
    #[cfg(loom)]
    let _ = (count, unchanged, since);
}

struct GateState {
    /// Workers done with the current run.
    finished: usize,
    /// Workers through their start (pinned, their heap made): `build` returns once all are.
    started: usize,
    /// A worker's run loop panicked (a runtime bug): the runtime is unusable.
    crashed: Option<String>,
    /// Pinning failures, reported in every run report.
    warnings: Vec<String>,
}

/// Whether workers measure their CPU shares under `config`: a policy reads them.
fn uses_shares(config: &Config) -> bool {
    config.placement || config.follow || config.steal != crate::Steal::Off
}

/// A worker thread: pin once, then serve runs until the runtime is dropped.
fn worker_thread(shared: Arc<Shared>, gate: Arc<Gate>, mut core: Core, pin: Option<usize>) {
    let config = &shared.config;
    if config.stall_threshold.is_some() {
        // Opened by this thread: the watchdog reads this thread's waits for a CPU from it.
        shared.stalls.register_thread(core.id);
    }
    // A worker that may leave its pin does not take it where another worker of this process
    // already found the machine shared (`cpu_share::machine_shared`): it runs on the runtime's
    // CPUs, not on whatever the spawning thread was pinned to.
    let pin = pin.filter(|_| !(crate::cpu_share::machine_shared() && core.unpin(false)));
    if uses_shares(config) && shared.workers > 1 {
        // Opened here: the file is this thread's. (One worker has nowhere else to place.)
        // Only a pinned worker starts from its CPU's remembered share: an unpinned one's CPU
        // is the scheduler's choice, and what a pinned worker measured there says nothing of it.
        core.cpu_share = crate::cpu_share::CpuShare::of_this_thread(pin);
        let share = core.cpu_share.share() as usize;
        shared.remotes[core.id].status.cpu_share.store(share, crate::sync::Ordering::Relaxed);
    }
    if let Some(cpu) = pin {
        if let Err(e) = topology::pin_current_thread(cpu) {
            let id = core.id;
            lock(&gate.state).warnings.push(format!("worker {id}: pinning to CPU {cpu}: {e}"));
        }
    }
    // The heap lives as long as the thread, across runs: objects it carved may outlive a run.
    let mut heap = shared
        .config
        .ema
        .then(|| crate::alloc::Heap::new(core.id, shared.workers, shared.config.ema_cap));
    let ctx = WorkerCtx::new(shared, core);
    lock(&gate.state).started += 1;
    // `build` waits on it for the last worker's start.
    gate.done.notify_all();
    let mut seen = 0;
    // The run that carried this worker in while it slept between runs (`run_end`).
    let mut carried = None;
    loop {
        if let Some(run) = carried.take() {
            // Counted parked by the carry: it leaves that state as any sleeper woken for work,
            // unless a stand-in took it out of it while it slept (`Core::stand_in`).
            seen = run;
            if !std::mem::take(&mut ctx.core.borrow_mut().unparked) {
                crate::idle::leave_parked(&ctx);
            }
        } else {
            // On a CPU shared with another process, a yield gives its thread the rest of its
            // time slice (milliseconds), and the next run waits for it: no watch there
            // (`GATE_SPIN`).
            let share = ctx.core.borrow().cpu_share.share();
            if !crate::worker::on_shared_cpu(&ctx.shared, share) {
                watch_gate(&gate.latest, seen, Instant::now());
            }
            // Blocked from here, it waits for nothing; its wake-up starts a run (work).
            ctx.core.borrow_mut().cpu_share.busy_again();
            let mut g = lock(&gate.state);
            while gate.latest.load(Ordering::Acquire) == seen {
                g = gate.start.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            seen = gate.latest.load(Ordering::Acquire);
            if seen == EXIT {
                break;
            }
        }
        let outcome = {
            let _enter = Enter::new(&ctx);
            let _heap = heap.as_mut().map(crate::alloc::HeapEnter::new);
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.run(seen)))
        };
        // Between runs the worker is idle: what the caller of `run`, woken below, runs on its
        // CPU before the worker gets to the gate (another runtime's phase of a program that
        // alternates the two: up to 6 ms a run), and its watch of the gate, are not its CPU
        // share with work (`CpuShare::idle_from_here`).
        ctx.core.borrow_mut().cpu_share.idle_from_here();
        // The run it ended: a later one than it entered if one carried it in asleep.
        seen = ctx.run.get();
        if outcome.is_ok() && ctx.claimed.get() {
            // Asleep at the run's end, which the worker that stopped it counted (`run_end`).
            carried = park_between_runs(&ctx, &gate, &mut seen);
            continue;
        }
        let last = {
            let mut g = lock(&gate.state);
            // With the ends counted for workers asleep through it (`run_end`).
            g.finished += 1 + ctx.shared.control.claimed_ends.swap(0, Ordering::SeqCst);
            if outcome.is_err() {
                g.crashed.get_or_insert_with(|| format!("worker {} crashed", ctx.id));
            }
            let last = g.finished == ctx.shared.workers;
            if last {
                gate.ended.store(seen, Ordering::Release);
            }
            last
        };
        // The caller waits for the last worker only: one wake-up a run, not one per worker.
        if last {
            gate.done.notify_all();
        }
        if outcome.is_err() {
            break;
        }
        carried = park_between_runs(&ctx, &gate, &mut seen);
    }
}

/// After run `seen`, a worker that sleeps through run ends (`run_end`; `idle::sleeps_through`)
/// waits for the next run in its parker, marked parked and its word Claimed, so that the next
/// run carries it in rather than waking it at the gate, where its wake-up would wait for the
/// other process's time slice. Returns the run that carried it in, or `None` to go through the
/// gate (a run started first, events wait in its queue, or it does not sleep through). Claimed
/// asleep in a run it was carried into, it waits for the next one after that (`seen` moves on).
///
/// Messages waiting in its inbox do not keep it from parking: a run that a handler shut down
/// before this worker got its CPU (each of a flow's small jobs ends its run so, `ochre-mr`)
/// left them there, and at the gate every later run would wait for its wake-up again (runs of
/// 100 us took 4 ms, every one). It parks without its inbox's sleep mark then, and the next
/// run's start, which finds the mark missing as it carries it in, wakes it
/// (`Remote::wake_carried_unless_marked`); until it takes them they are counted in flight, so
/// no run ends quiescent without them (`idle::quiescent`), and a run shut down meanwhile
/// claims it asleep.
fn park_between_runs(ctx: &WorkerCtx, gate: &Gate, seen: &mut u64) -> Option<u64> {
    let shared = &*ctx.shared;
    let remote = &shared.remotes[ctx.id];
    let locked = !shared.config.batching;
    loop {
        // Only with nothing to do, as any sleeper a run may carry (`idle`): a run that ended by
        // a shutdown leaves its events queued, and carried asleep, the worker would hold them
        // through the next run, which would then end quiescent without them.
        let idle = {
            let core = ctx.core.borrow();
            core.queue.pending() == 0 && !core.has_outgoing() && !core.io.active()
        };
        if !idle || !crate::idle::sleeps_through(ctx) {
            return None;
        }
        // It parks in its parker: a post's wake-up must come there, not to its poller (where a
        // sleep in a run of timers or descriptors left it announced).
        remote.status.parks_in_poller.store(false, Ordering::Relaxed);
        {
            let _g = lock(&gate.state);
            if gate.latest.load(Ordering::Acquire) != *seen {
                return None;
            }
            // Fails with messages waiting: those stay in the inbox, without the mark (above).
            let _ = remote.poke.inbox.try_sleep(locked);
            remote.status.parked.store(true, Ordering::SeqCst);
            crate::run_end::park_between(&remote.poke.sleeper, *seen);
        }
        // Open to stand-ins: carried into a run asleep, a post to it waits for its CPU (a time
        // slice of the other process) like any sleeper's (`stand_in`, `run_end::hold`).
        crate::idle::park(ctx, None, true);
        match crate::run_end::resolve(&remote.poke.sleeper, *seen) {
            crate::run_end::Woke::InRun(run) => return Some(run),
            // Not carried (no run started since), or carried into one and claimed asleep at
            // its end: it waits for the next, once it did what an idle worker does when it
            // wakes (`Core::recheck_idle`: a worker that left its pin takes it again there), or
            // it would sleep on a stale measure for good.
            crate::run_end::Woke::Claimed(run) => {
                *seen = run;
                ctx.core.borrow_mut().recheck_idle(shared);
            }
        }
    }
}

/// The CPUs' worth of time the process may use ([`std::thread::available_parallelism`]: the
/// affinity mask bounded by a cgroup quota), read once per process: std reads the cgroup's
/// files at every call (11 µs here), a tenth of a later build's time, and a process that builds
/// a runtime per job paid it each time. A quota changed while the process runs is seen by the
/// next process (rayon reads it once too).
fn cpu_quota() -> usize {
    static QUOTA: OnceLock<usize> = OnceLock::new();
    *QUOTA.get_or_init(|| std::thread::available_parallelism().map_or(usize::MAX, |n| n.get()))
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunEnd {
    /// Nothing was queued, running or in flight any more.
    Quiescent,
    /// `shutdown()` was called.
    Shutdown,
}

/// What a run did: returned by [`Runtime::run`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunReport {
    /// How the run ended.
    pub end: RunEnd,
    /// Wall-clock time of the run.
    pub elapsed: Duration,
    /// What each worker did during this run.
    pub workers: Vec<WorkerStats>,
    /// Handler panics during this run (the first 64; `total().panics` counts all).
    pub panics: Vec<PanicRecord>,
    /// Events accepted and not yet run when the run ended (0 after a quiescent end; after a
    /// shutdown, they run at the next `run`).
    pub pending: u64,
    /// Reasoned-spinning threshold in force at the run's end (a measured one may have been
    /// published during the run: [`Runtime::spin_threshold`]).
    pub spin_threshold: Duration,
    /// Things that did not go as configured but did not stop the run (a failed pinning).
    pub warnings: Vec<String>,
    /// The colors that took the most run time during this run (at most [`TOP_COLORS`]; empty
    /// with [`Config::color_stats`] off).
    #[serde(default)]
    pub top_colors: Vec<crate::ColorSummary>,
}

/// How many colors a [`RunReport`] names in `top_colors`.
pub const TOP_COLORS: usize = 10;

impl RunReport {
    /// The report, or the run's first handler panic as an error ([`Error::HandlerPanicked`]): a
    /// run whose handlers panicked returns `Ok` (the panics are caught, counted and listed in
    /// [`panics`](Self::panics), and the run goes on), which `rt.run(color, init)?.check()?`
    /// turns into an error for a program whose result would be wrong.
    pub fn check(self) -> Result<RunReport, Error> {
        if let Some(p) = self.panics.first() {
            let (color, worker, message) = (p.color, p.worker, p.message.clone());
            return Err(Error::HandlerPanicked { color, worker, message });
        }
        Ok(self)
    }

    /// Sum over workers.
    pub fn total(&self) -> WorkerStats {
        self.workers.iter().fold(WorkerStats::default(), |a, w| a.add(w))
    }
}

/// A runtime: worker state and the configuration, ready to [`run`](Runtime::run).
pub struct Runtime {
    shared: Arc<Shared>,
    gate: Arc<Gate>,
    threads: Vec<std::thread::JoinHandle<()>>,
    pins: Vec<Option<usize>>,
    running: AtomicBool,
}

impl Runtime {
    /// Waits until every worker is through its start (pinned, its CPU-share file open, its heap
    /// made) and at the gate, so that `build` returns a runtime whose first run starts as its
    /// later ones do. Started and run at once, a runtime's first `run` of one empty event took
    /// 104 us against 15 for its second (`lifecycle_probe`): the run waited for the workers'
    /// starts, a pin moving each thread to its CPU among them. A worker that ended during its
    /// start (a panic there: a runtime bug) fails the build.
    fn wait_for_starts(&self) -> Result<(), Error> {
        let mut g = lock(&self.gate.state);
        while g.started < self.threads.len() {
            if self.threads.iter().any(|t| t.is_finished()) {
                let e = std::io::Error::other("a worker thread ended during its start");
                return Err(Error::os("starting a worker thread", e));
            }
            // A timeout, not a bare wait: a worker that dies before counting itself never
            // notifies. (Under loom a timed wait is a plain wait; no model builds a runtime.)
            g = self
                .gate
                .done
                .wait_timeout(g, Duration::from_millis(10))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(())
    }

    /// A builder with the default (optimized) configuration.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.shared.workers
    }

    /// Number of workers that are homes of colors (the first ones): every worker, or with more
    /// workers than CPUs as many as there are CPUs ([`Config::home_on_every_worker`]). Every
    /// worker in `0..homes()` homes colors; the others run colors lent to them.
    pub fn homes(&self) -> usize {
        self.shared.placement.homes
    }

    /// The worker a color lives on (its home), unless lent by stealing. With more workers than
    /// CPUs, only the first [`Runtime::homes`] workers are homes (`Config::home_on_every_worker`).
    pub fn home_of(&self, color: Color) -> usize {
        home_of(color, self.shared.placement)
    }

    /// The reasoned-spinning threshold (zero if the spin policy has none). A measured one
    /// (10x the wake-up latency, the default) is measured once per process in the background,
    /// from the first build on, while the process is idle, and is 200 µs (10x an assumed 20
    /// µs) until then: this waits for the measurement, some 15 ms after the process's first
    /// build in an idle process, at most 1.1 s (then it says the threshold in force, which may
    /// still change).
    pub fn spin_threshold(&self) -> Duration {
        self.shared.spin_threshold.settled()
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// A new actor of `color` holding `state` (see [`Addr`]).
    pub fn actor<S: Send + 'static>(&self, color: Color, state: S) -> Addr<S> {
        self.handle().actor(color, state)
    }

    /// A handle to post to this runtime from any thread.
    pub fn handle(&self) -> Handle {
        Handle { shared: self.shared.clone() }
    }

    /// Counters of each worker since the runtime was built (at most one round old while running).
    pub fn stats(&self) -> Vec<WorkerStats> {
        self.handle().stats()
    }

    /// Per-color statistics since the runtime was built, merged over the workers (at most
    /// [`FLUSH_EVERY`](crate::color_stats::FLUSH_EVERY) old for a busy worker while running;
    /// empty with [`Config::color_stats`] off). [`ColorStats::top`](crate::ColorStats::top)
    /// gives the colors that took the most time.
    pub fn color_stats(&self) -> crate::ColorStats {
        self.handle().color_stats()
    }

    /// What the workers recorded with [`Config::trace_events`] on, as of the end of the last
    /// run (empty when off); [`Trace::chrome`](crate::trace::Trace::chrome) makes it a Chrome
    /// trace.
    pub fn trace(&self) -> crate::trace::Trace {
        self.handle().trace()
    }

    /// The last stalls reported, as [`Handle::stalls`].
    pub fn stalls(&self) -> Vec<crate::Stall> {
        self.handle().stalls()
    }

    /// Stalls reported since the runtime was built, as [`Handle::stall_count`].
    pub fn stall_count(&self) -> u64 {
        self.handle().stall_count()
    }

    /// Closes the runtime: stops its workers and drops the events that never ran, without
    /// running them. Returns how many there were. Dropping the runtime does the same.
    pub fn close(self) -> u64 {
        let left = pending(&self.handle().stats(), &self.shared);
        drop(self);
        left
    }

    /// Runs `init` as an event of `color`, and everything it leads to, on the workers. Returns when
    /// the runtime is quiescent (no event queued, running or in flight) or `shutdown()` was called.
    ///
    /// Errors: [`Error::AlreadyRunning`] if a run is going on (or from inside a handler),
    /// [`Error::HandlerPanicked`] if a handler panicked with `abort_on_panic` set (the events
    /// still queued stay for the next run), [`Error::Os`] if a worker thread crashed (a runtime
    /// bug: the runtime is unusable).
    pub fn run<F>(&self, color: Color, init: F) -> Result<RunReport, Error>
    where
        F: FnOnce() + Send + 'static,
    {
        if with_current(|_| ()).is_some() || self.running.swap(true, Ordering::SeqCst) {
            return Err(Error::AlreadyRunning);
        }
        let result = self.run_inner(color, Task::new(init));
        self.running.store(false, Ordering::SeqCst);
        result
    }

    fn run_inner(&self, color: Color, init: Task) -> Result<RunReport, Error> {
        let shared = &self.shared;
        if let Some(crash) = &lock(&self.gate.state).crashed {
            return Err(Error::os("worker thread", std::io::Error::other(crash.clone())));
        }
        // Reset the per-run state: every worker waits at the gate, or sleeps through the last
        // run's end (`run_end`), so nothing races with this but such a sleeper's wake-up. Under
        // the gate's lock: a worker parks between runs under it (`park_between_runs`).
        let mut g = lock(&self.gate.state);
        let run = self.gate.latest.load(Ordering::Relaxed) + 1;
        // Before any carry: a sleeper carried in may wake at once (a post made between runs)
        // and run events of this run, its panics and counters this run's.
        lock(&shared.panics).clear();
        *lock(&shared.abort) = None;
        let before = self.handle().stats();
        let colors_before = (shared.config.color_stats != 0).then(|| self.color_stats());
        shared.control.stop.store(RUNNING, Ordering::SeqCst);
        shared.control.parked.store(0, Ordering::SeqCst);
        shared.control.spinners.store(0, Ordering::SeqCst);
        shared.control.claimed_ends.store(0, Ordering::SeqCst);
        // Before any carry: once every worker is carried in parked, one woken at once (by a
        // post made between runs) could find the run quiescent before its init was sent; sent,
        // it is counted in flight until received (`idle::quiescent`). A sleeper it wakes before
        // its carry leaves for the gate, or, carried, takes part in the run (below).
        let init_home = home_of(color, shared.placement);
        shared.post_external(
            init_home,
            Msg::Post { color, task: init, urgent: false, step: false },
            true,
        );
        let mut carried = vec![false; shared.workers];
        for (w, r) in shared.remotes.iter().enumerate() {
            // A sleeper carried into this run stays parked, its inbox's sleep mark kept (a post
            // to it wakes it; but see below).
            if crate::run_end::carry(&r.poke.sleeper, run, &shared.control.parked) {
                carried[w] = true;
                continue;
            }
            r.status.parked.store(false, Ordering::SeqCst);
            r.poke.inbox.woke(!shared.config.batching);
        }
        // One that parked with messages waiting (no mark: a run that a shutdown ended left
        // them, `park_between_runs`) is woken, once every sleeper is carried: woken before a
        // later one's carry, it could run them and park as the last worker not parked, with
        // that one not counted yet, and nobody would find the run quiescent. Woken by its
        // missing mark, not by its messages, which a stand-in may have routed already
        // (`Remote::wake_carried_unless_marked`).
        for (r, _) in shared.remotes.iter().zip(&carried).filter(|(_, &c)| c) {
            r.wake_carried_unless_marked(!shared.config.batching);
        }
        // Every worker counted parked now: the init's home, woken by the init's post and carried
        // before a later sleeper, may have run it and parked again while that one was not
        // counted yet, the last to park finding no quiescence to look for. Woken again, it parks
        // once more, as the last. (Asleep still, this wake-up is the one it has.)
        if shared.control.parked.load(Ordering::SeqCst) == shared.workers {
            shared.remotes[init_home].unpark();
        }

        let started = Instant::now();
        let last = {
            g.finished = 0;
            let last = self.gate.latest.load(Ordering::Relaxed);
            self.gate.latest.store(last + 1, Ordering::Release);
            drop(g);
            last
        };
        // After the lock is released: woken while it was held, every worker blocked on it again
        // at once (a wake-up more per worker and run: `run_probe`).
        self.gate.start.notify_all();
        watch_gate(&self.gate.ended, last, started);
        let mut g = lock(&self.gate.state);
        while self.gate.ended.load(Ordering::Acquire) == last {
            g = self.gate.done.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        let elapsed = started.elapsed();
        if let Some(crash) = &g.crashed {
            return Err(Error::os("worker thread", std::io::Error::other(crash.clone())));
        }
        let warnings = g.warnings.clone();
        drop(g);
        if let Some(e) = lock(&shared.abort).take() {
            return Err(e);
        }
        // Workers publish their counters before reporting done; the gate's lock orders those
        // writes before these reads, so the figures are exact.
        let after = self.handle().stats();
        let workers: Vec<WorkerStats> =
            after.iter().zip(&before).map(|(a, b)| a.since(b)).collect();
        let end = match shared.control.stop.load(Ordering::SeqCst) {
            QUIESCENT => RunEnd::Quiescent,
            _ => RunEnd::Shutdown,
        };
        Ok(RunReport {
            end,
            elapsed,
            workers,
            panics: std::mem::take(&mut *lock(&shared.panics)),
            pending: pending(&after, shared),
            spin_threshold: shared.spin_threshold.get(),
            warnings,
            // Every worker flushed its table before reporting done: exact for the run.
            top_colors: colors_before
                .map(|b| self.color_stats().top_since(&b, TOP_COLORS))
                .unwrap_or_default(),
        })
    }
}

/// Pins `color` on its home worker: directly or through our buffers from one of the runtime's
/// workers, as an outside message otherwise.
pub(crate) fn pin_on(shared: &Arc<Shared>, color: Color) {
    let on_worker = with_current(|ctx| Arc::ptr_eq(&ctx.shared, shared)).unwrap_or(false);
    if on_worker {
        let _ = crate::context::pin(color);
    } else {
        shared.post_external(home_of(color, shared.placement), Msg::Pin { color }, false);
    }
}

/// Events accepted and not run: all posts (by handlers and outside threads) minus events run.
/// Exact when no worker runs; forwards and loans move events without counting as posts.
fn pending(stats: &[WorkerStats], shared: &Shared) -> u64 {
    let mut posted = shared.control.external_events.load(Ordering::SeqCst);
    let mut ran = 0;
    for s in stats {
        posted += s.posts_local + s.posts_remote;
        ran += s.events_run;
    }
    posted.saturating_sub(ran)
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shared.control.closed.store(true, Ordering::SeqCst);
        // Stop the workers; each drops its core, and with it the events that never ran.
        {
            let _g = lock(&self.gate.state);
            self.gate.latest.store(EXIT, Ordering::Release);
        }
        self.gate.start.notify_all();
        // Workers that slept through the last run's end sleep in their run loops (`run_end`).
        self.shared.wake_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // The workers published their records at each run's end (`trace`).
        if self.shared.config.trace_events > 0 {
            crate::trace::collect(self.shared.id, || self.shared.trace.snapshot());
        }
        // Drop what is left in inboxes now, not when the last handle goes: a closure in an inbox
        // may hold a handle, and would otherwise keep the runtime's memory alive forever.
        for r in self.shared.remotes.iter() {
            drop(r.poke.inbox.take_batches());
            while r.poke.inbox.pop_locked().is_some() {}
            let mut behind = Vec::new();
            r.take_outside(&mut behind);
            drop(behind);
        }
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("workers", &self.shared.workers)
            .field("pins", &self.pins)
            .field("config", &self.shared.config)
            .finish()
    }
}

/// Keeps the runtime's runs from ending as quiescent while it lives ([`Handle::hold`]).
#[must_use = "a hold dropped at once keeps nothing going"]
pub struct Hold {
    shared: Arc<Shared>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.shared.control.holds.fetch_sub(1, Ordering::SeqCst) == 1 {
            // The workers may all be parked, their last look at quiescence refused by this
            // hold: wake them, and the last to park again looks once more.
            self.shared.wake_all();
        }
    }
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold").finish_non_exhaustive()
    }
}

/// Posts to a runtime from any thread; cheap to clone.
///
/// Events of one color posted by one thread through handles run in the order posted. A post made
/// while no run is going on waits for the next run.
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

impl Handle {
    pub(crate) fn from_shared(shared: Arc<Shared>) -> Handle {
        Handle { shared }
    }

    /// A new actor of `color` holding `state` (see [`Addr`]).
    pub fn actor<S: Send + 'static>(&self, color: Color, state: S) -> Addr<S> {
        Addr::new(&self.shared.actors, self.shared.id, color, state)
    }

    /// Sends `f` to the actor at `to` (see [`Addr::send`]), from any thread. [`Error::Closed`]
    /// if the runtime was dropped, [`Error::NotInRuntime`] if the actor belongs to another
    /// runtime.
    pub fn send<S: Send + 'static>(
        &self,
        to: Addr<S>,
        f: impl FnOnce(&mut S) + Send + 'static,
    ) -> Result<(), Error> {
        self.owns(to)?;
        self.try_post(to.color(), to.message(f))
    }

    /// Stops the actor at `to` (see [`Addr::stop`]), from any thread; errors as
    /// [`send`](Handle::send).
    pub fn stop_actor<S: Send + 'static>(&self, to: Addr<S>) -> Result<(), Error> {
        self.owns(to)?;
        self.try_post(to.color(), to.stopping())
    }

    /// [`Error::NotInRuntime`] unless the actor at `to` belongs to this runtime.
    fn owns<S: Send + 'static>(&self, to: Addr<S>) -> Result<(), Error> {
        (to.runtime() == self.shared.id).then_some(()).ok_or(Error::NotInRuntime)
    }

    /// Posts `f` as an event of `color`.
    ///
    /// # Panics
    ///
    /// If the runtime was dropped; [`try_post`](Handle::try_post) returns an error instead.
    pub fn post<F: FnOnce() + Send + 'static>(&self, color: Color, f: F) {
        if let Err(e) = self.try_post(color, f) {
            panic!("ochre::Handle::post: {e}");
        }
    }

    /// Posts `f` as an event of `color`; [`Error::Closed`] if the runtime was dropped.
    pub fn try_post<F: FnOnce() + Send + 'static>(&self, color: Color, f: F) -> Result<(), Error> {
        self.try_post_closure(color, f, false)
    }

    /// Posts `f` as a read of `color` (see [`post_read`](crate::post_read)), from any thread: on
    /// one of this runtime's workers, as `post_read` there; from another thread, on the workers
    /// round robin.
    ///
    /// # Panics
    ///
    /// If the runtime was dropped; [`try_post_read`](Handle::try_post_read) returns an error
    /// instead.
    pub fn post_read<F: FnOnce() + Send + 'static>(&self, color: Color, f: F) {
        if let Err(e) = self.try_post_read(color, f) {
            panic!("ochre::Handle::post_read: {e}");
        }
    }

    /// Posts `f` as a read of `color`; [`Error::Closed`] if the runtime was dropped.
    pub fn try_post_read<F: FnOnce() + Send + 'static>(
        &self,
        color: Color,
        f: F,
    ) -> Result<(), Error> {
        let on_worker = with_current(|ctx| Arc::ptr_eq(&ctx.shared, &self.shared)).unwrap_or(false);
        if on_worker && !self.is_closed() {
            return crate::reader::try_post_read(color, f);
        }
        crate::reader::post_read_outside(self, &self.shared, color, f)
    }

    /// Posts `f` as an urgent event of `color` (see [`post_urgent`](crate::post_urgent)).
    ///
    /// # Panics
    ///
    /// If the runtime was dropped; [`try_post_urgent`](Handle::try_post_urgent) returns an error
    /// instead.
    pub fn post_urgent<F: FnOnce() + Send + 'static>(&self, color: Color, f: F) {
        if let Err(e) = self.try_post_urgent(color, f) {
            panic!("ochre::Handle::post_urgent: {e}");
        }
    }

    /// Keeps runs from ending for want of work while the returned [`Hold`] lives: a thread that
    /// feeds a run from outside (reading a file, a socket, a channel) takes one before the run
    /// starts and drops it after its last post, and the run ends once that work is done. Without
    /// it a run ends as soon as nothing is queued, running or in flight, which may be between
    /// two of the feeder's posts (`run` returns, and the posts left wait for the next run).
    /// Held, no run ends by itself (only by [`shutdown`](Handle::shutdown)): a hold dropped
    /// only after `run` returns on the same thread never lets it return, and a hold leaked
    /// keeps every later run going.
    ///
    /// ```
    /// # use std::sync::atomic::{AtomicU64, Ordering};
    /// # use std::sync::Arc;
    /// use ochre::{Color, Runtime};
    ///
    /// let rt = Runtime::builder().workers(2).build()?;
    /// let (handle, sum) = (rt.handle(), Arc::new(AtomicU64::new(0)));
    /// let hold = handle.hold();
    /// let s = sum.clone();
    /// let feeder = std::thread::spawn(move || {
    ///     for i in 1..=1000 {
    ///         let s = s.clone();
    ///         handle.post(Color(1), move || {
    ///             s.fetch_add(i, Ordering::Relaxed);
    ///         });
    ///     }
    ///     drop(hold); // the run may end once these are done
    /// });
    /// rt.run(Color(1), || {})?;
    /// feeder.join().unwrap();
    /// assert_eq!(sum.load(Ordering::Relaxed), 500_500);
    /// # Ok::<(), ochre::Error>(())
    /// ```
    pub fn hold(&self) -> Hold {
        self.shared.control.holds.fetch_add(1, Ordering::SeqCst);
        Hold { shared: self.shared.clone() }
    }

    /// Posts `f` as an urgent event of `color` (see [`post_urgent`](crate::post_urgent)).
    pub fn try_post_urgent<F: FnOnce() + Send + 'static>(
        &self,
        color: Color,
        f: F,
    ) -> Result<(), Error> {
        self.try_post_closure(color, f, true)
    }

    fn try_post_closure<F: FnOnce() + Send + 'static>(
        &self,
        color: Color,
        f: F,
        urgent: bool,
    ) -> Result<(), Error> {
        if self.shared.control.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        // On one of this runtime's workers, post as the running handler does (its order, its
        // buffers, its placement of the closure).
        let on_worker = with_current(|ctx| Arc::ptr_eq(&ctx.shared, &self.shared)).unwrap_or(false);
        if on_worker {
            return crate::context::post_closure(color, f, urgent).ok_or(Error::NotInRuntime);
        }
        let dest = home_of(color, self.shared.placement);
        let config = &self.shared.config;
        // A small closure travels in the message and the worker stores it (no allocation here,
        // and no free on the worker into this thread's allocator arena), as between workers.
        let msg = if InlineTask::wanted::<F>(config) {
            Msg::PostInline { color, task: InlineTask::new(f), urgent, step: false }
        } else {
            Msg::Post { color, task: Task::new(f), urgent, step: false }
        };
        self.shared.post_external(dest, msg, true);
        Ok(())
    }

    /// Watches `fd` from any thread; see [`io::watch`](crate::io::watch).
    pub fn watch<Fd, F>(
        &self,
        fd: &Fd,
        interest: crate::io::Interest,
        color: Color,
        handler: F,
    ) -> Result<crate::io::Watch, Error>
    where
        Fd: std::os::fd::AsFd + ?Sized,
        F: FnMut(&mut crate::io::Event) + Send + 'static,
    {
        crate::io::watch_on(&self.shared, fd.as_fd(), interest, color, Box::new(handler))
    }

    /// Watches an owned I/O object from any thread; see [`io::watch_with`](crate::io::watch_with).
    pub fn watch_with<S, F>(
        &self,
        source: S,
        interest: crate::io::Interest,
        color: Color,
        handler: F,
    ) -> Result<crate::io::Watch, Error>
    where
        S: std::os::fd::AsFd + Send + 'static,
        F: FnMut(&mut S, &mut crate::io::Event) + Send + 'static,
    {
        crate::io::watch_with_on(&self.shared, source, interest, color, handler)
    }

    /// Accepts connections on `listener` as events of `color`, from any thread; see
    /// [`Listener::serve`](crate::io::Listener::serve).
    pub fn serve<F>(
        &self,
        listener: crate::io::Listener,
        color: Color,
        on_accept: F,
    ) -> Result<crate::io::Watch, Error>
    where
        F: FnMut(std::net::TcpStream, std::net::SocketAddr) + Send + 'static,
    {
        listener.serve_on(&self.shared, color, on_accept)
    }

    /// Delivers a signal as events of `color`, from any thread; see
    /// [`io::watch_signal`](crate::io::watch_signal).
    pub fn watch_signal<F>(
        &self,
        signal: i32,
        color: Color,
        handler: F,
    ) -> Result<crate::io::SignalWatch, Error>
    where
        F: FnMut(i32) + Send + 'static,
    {
        crate::io::signal::watch_signal_on(&self.shared, signal, color, handler)
    }

    /// Posts `f` as an event of `color` after `delay`, from any thread (the timer lives on the
    /// color's home worker); see [`io::post_after`](crate::io::post_after).
    pub fn post_after<F>(
        &self,
        delay: Duration,
        color: Color,
        f: F,
    ) -> Result<crate::io::Timer, Error>
    where
        F: FnOnce() + Send + 'static,
    {
        self.post_at(Instant::now() + delay, color, f)
    }

    /// Posts `f` as an event of `color` at `at`, from any thread.
    pub fn post_at<F>(&self, at: Instant, color: Color, f: F) -> Result<crate::io::Timer, Error>
    where
        F: FnOnce() + Send + 'static,
    {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        Ok(crate::io::timer_on(&self.shared, at, color, Task::new(f)))
    }

    /// Pins `color` to its home worker, from any thread; see [`pin`](crate::pin).
    pub fn pin(&self, color: Color) -> Result<(), Error> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        pin_on(&self.shared, color);
        Ok(())
    }

    /// Ends the current run, as [`shutdown`](crate::shutdown) does from a handler (from a
    /// handler of this runtime, it is that).
    pub fn shutdown(&self) {
        let on_worker = with_current(|ctx| {
            let ours = Arc::ptr_eq(&ctx.shared, &self.shared);
            if ours {
                crate::context::shutdown_from(ctx);
            }
            ours
        });
        if on_worker != Some(true) {
            self.shared.stop(SHUTDOWN);
        }
    }

    /// Counters of each worker since the runtime was built (at most one round old while running).
    pub fn stats(&self) -> Vec<WorkerStats> {
        self.shared.remotes.iter().map(|r| r.stats.read()).collect()
    }

    /// Per-color statistics, as [`Runtime::color_stats`].
    pub fn color_stats(&self) -> crate::ColorStats {
        self.shared.color_stats.snapshot()
    }

    /// The last stalls reported (handlers found running longer than
    /// [`Config::stall_threshold`]), oldest first, at most
    /// [`STALLS_KEPT`](crate::stall::STALLS_KEPT).
    pub fn stalls(&self) -> Vec<crate::Stall> {
        self.shared.stalls.recent()
    }

    /// Stalls reported since the runtime was built.
    pub fn stall_count(&self) -> u64 {
        self.shared.stalls.count()
    }

    /// The trace, as [`Runtime::trace`].
    pub fn trace(&self) -> crate::trace::Trace {
        self.shared.trace.snapshot()
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.shared.workers
    }

    /// Number of workers that are homes of colors, as [`Runtime::homes`].
    pub fn homes(&self) -> usize {
        self.shared.placement.homes
    }

    /// The home worker of a color (one of the first [`Runtime::homes`] workers).
    pub fn home_of(&self, color: Color) -> usize {
        home_of(color, self.shared.placement)
    }

    /// True once the runtime was dropped.
    pub fn is_closed(&self) -> bool {
        self.shared.control.closed.load(Ordering::SeqCst)
    }
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").field("workers", &self.shared.workers).finish()
    }
}
