//! What a worker does with nothing to run: steal, spin (reasoned), sleep, and detect that the
//! whole runtime is quiescent.
//!
//! ## Sleeping without losing a wake-up
//!
//! A worker announces its sleep on its own inbox (`Inbox::try_sleep`, a compare-and-swap that
//! fails if anything was delivered), and every sender learns from its own push whether the worker
//! sleeps and must be unparked: one location, so no wake-up can be lost (`inbox` module doc). The
//! stop flag is the one other thing that wakes a worker: it is checked after the announcement,
//! and whoever sets it unparks every worker unconditionally.

//! ## Reasoned spinning (thesis §5.3.1)
//!
//! A worker sleeps at once unless its previous sleep was shorter than the threshold (10x the
//! measured wake-up latency by default): a short sleep means the wake-up cost was a large share of
//! it, so it spins up to the threshold first, watching its inbox. At most `max_spinners` workers
//! spin at once, so spinners never take the CPUs of workers that have work. A spinner yields its
//! CPU every few microseconds (`sched_yield`, which returns at once when nothing else is
//! runnable there), so that it never takes the CPU from other threads sharing it either: another
//! process, an injector, another runtime. If the yield took long (another thread ran), the CPU
//! is shared: the worker stops spinning and sleeps, and does not spin again for a few
//! milliseconds. Without this, a web server spinning next to its load injector on the same CPU
//! ran at half speed (`bench sws`, 2 workers on 2 CPUs).
//!
//! With [`Spin::Adaptive`] (the default) the threshold and the decision to spin come from the
//! idle gaps this worker measured (`tune::SpinTuner`, whose module doc gives the rules): each
//! idle spell that ends with work is timed (two clock reads a spell) and recorded.
//!
//! ## Quiescence without a per-event global counter
//!
//! Each worker counts the messages it sent and received (per batch, in its own `Status`), and
//! outside posters count theirs in one runtime-wide counter. A worker with nothing to do (queue
//! empty, buffers flushed, no descriptors or timers) marks itself `parked` before it sleeps, or
//! once it has spun a little without work (so that a run whose workers spin at its end ends
//! then, not when their spin budgets run out); one that finds every worker parked collects,
//! twice, every worker's `(epoch, parked, sent, received)` (epoch first; a worker increments
//! its epoch before doing anything after a wake, or after its spin found work) and the outside
//! count. If both collections agree, every worker was parked throughout the
//! interval between them, with the counters read; if moreover sent equals received, no message
//! was in flight then either: nothing can ever run again, and the run ends. A parked worker has an
//! empty queue and flushed buffers by construction.

use std::time::{Duration, Instant};

use crate::config::Spin;
use crate::shared::Shared;
use crate::stats::Counter;
use crate::steal;
use crate::sync::Ordering;
use crate::worker::WorkerCtx;

/// What the run loop does after an idle spell.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Stop,
}

/// How long to spin before sleeping, given the policy, the fixed rule's `threshold`, the length of
/// the previous sleep and the idle gaps measured (`tuner`, which [`Spin::Adaptive`] asks). The
/// workers ([`idle_spell`]) and the simulator's cores ask the same.
pub(crate) fn spin_budget(
    spin: Spin,
    threshold: Duration,
    last_sleep: Option<Duration>,
    tuner: &crate::tune::SpinTuner,
) -> Duration {
    match spin {
        Spin::Never => Duration::ZERO,
        Spin::Always { limit } => limit,
        Spin::Adaptive => tuner.budget(threshold),
        Spin::Reasoned { .. } => match last_sleep {
            Some(slept) if slept < threshold => threshold,
            _ => Duration::ZERO,
        },
    }
}

/// Whether an idle worker may spin at all: not while `paused` (a spin's yield lately took long:
/// the CPU is shared), and, unless it `watches` descriptors or timers, not while it measures
/// less than [`SPIN_MIN_SHARE`] of its CPU (`share`, thousandths). The runtime and the
/// simulator use it.
///
/// Beside a busy thread, a spinner uses up its due and the scheduler then hands that thread a
/// whole time slice (milliseconds) before the worker runs again, where a sleeper woken by work
/// runs at once: `Runtime::run` of one empty event, 2 workers, both CPUs shared with busy
/// loops, 0.2-0.35 ms a run spinning, 72-76 us not (`run_probe`; tokio 3-6 us); `bench actors`
/// busy, 64-token ring 0.72-1.07 -> 1.03-1.91 of tokio. A worker that watches descriptors
/// spins still: the thread beside it is often the peer it exchanges with (a client, an
/// injector), and not spinning there cost `bench sws` at 2 workers 13-20%.
pub(crate) fn may_spin(paused: bool, watches: bool, share: u32) -> bool {
    !paused && (watches || share >= SPIN_MIN_SHARE)
}

/// Least share of its CPU (thousandths, `cpu_share`) at which a worker without descriptors
/// spins ([`may_spin`]).
const SPIN_MIN_SHARE: u32 = crate::cpu_share::FULL * 9 / 10;

/// The reasoned-spinning threshold for a measured wake-up `latency`: 10x it (thesis §5.3.1),
/// clamped to [50 µs, 5 ms] so that a noisy probe cannot disable spinning or make it burn a core
/// (the thesis's 200K cycles is 70-100 µs at 2-3 GHz). The runtime and the simulator use it.
pub(crate) fn threshold_for(latency: Duration) -> Duration {
    (latency * 10).clamp(Duration::from_micros(50), Duration::from_millis(5))
}

/// How many workers may spin at once: `limit` if configured; else all `workers` when each has a
/// CPU of its own among `cpus` (a pinned spinner takes nobody's CPU), else half the CPUs (at
/// least 1; tokio bounds its searchers likewise).
pub(crate) fn max_spinners(limit: Option<usize>, workers: usize, cpus: usize) -> usize {
    limit.unwrap_or(if workers <= cpus { workers } else { (cpus / 2).max(1) })
}

/// Something for this worker to do (or the run is ending): what a spinner polls for.
fn has_work(ctx: &WorkerCtx) -> bool {
    let shared = &*ctx.shared;
    let poke = &shared.remotes[ctx.id].poke;
    !poke.inbox.is_empty(!shared.config.batching)
        || poke.steal_request.load(Ordering::Relaxed) != 0
        || shared.stopping()
}

/// The idle path: called when a round ran nothing and nothing is ready.
pub(crate) fn idle(ctx: &WorkerCtx) -> Flow {
    let status = &ctx.shared.remotes[ctx.id].status;
    // Relaxed: a hint for senders' flush decisions (`worker`), not part of any protocol.
    status.idle.store(true, Ordering::Relaxed);
    let traced = ctx.core.borrow().trace.start();
    let tuned = ctx.shared.config.spin == Spin::Adaptive;
    let started = tuned.then(Instant::now);
    let flow = idle_spell(ctx);
    let mut core = ctx.core.borrow_mut();
    // A sleep cut short to look at a peer (`stand_in`) that found nothing is no idle gap.
    let looked = std::mem::take(&mut core.woke_to_look);
    if let (Some(started), Flow::Continue, false) = (started, &flow, looked) {
        core.spin_tuner.record(started.elapsed());
    }
    core.cpu_share.busy_again();
    core.trace.span_since(crate::trace::Kind::Idle, traced);
    drop(core);
    status.idle.store(false, Ordering::Relaxed);
    flow
}

fn idle_spell(ctx: &WorkerCtx) -> Flow {
    let shared = &*ctx.shared;
    // A peer watched in an earlier spell may be due for a stand-in now (its sleep was cut
    // short for it).
    if stand_in_if_due(ctx, false, &mut false) {
        return Flow::Continue;
    }
    let (budget, try_steal, watches) = {
        let mut core = ctx.core.borrow_mut();
        core.recheck_idle(shared);
        steal::request(&mut core, shared);
        let paused = core.no_spin_until.is_some_and(|t| Instant::now() < t);
        if !paused {
            core.no_spin_until = None; // over: no clock read in later idle spells
        }
        let watches = core.io.active();
        let budget = match shared.config.spin {
            _ if !may_spin(paused, watches, core.cpu_share.share()) => Duration::ZERO,
            spin => {
                spin_budget(spin, shared.spin_threshold.get(), core.last_sleep, &core.spin_tuner)
            }
        };
        (budget, shared.config.steal != crate::Steal::Off, watches)
    };
    // A worker without descriptors or timers counts as parked for quiescence while it sleeps,
    // and also once it has spun 64 rounds (a microsecond or two) without work: a run whose
    // workers spin at its end ends then, not when their spin budgets run out (a threshold, 350
    // us here). Not at once: the shortest idle spells are the common ones under load, and
    // entering and leaving the parked state writes lines other workers read. Not later either:
    // it was at the first yield (256 rounds), and beside a busy thread that yield, or the
    // scheduler taking back a spinner that used up its due, held the end of every run for the
    // other thread's time slice: `Runtime::run` of one empty event, both CPUs shared with busy
    // loops, 0.9-1.4 ms a run, 0.2-0.35 ms after (`run_probe`; quiet: 45-49 -> 42 us).
    let quiet = !watches;
    let mut parked = false;
    let flow = if budget > Duration::ZERO && spin(ctx, budget, try_steal, quiet, &mut parked) {
        Flow::Continue
    } else {
        // Memory freed here for other workers goes back before we sleep, so it never waits on a
        // sleeping worker (at a run's end, `worker` hands back the rest before any heap takes
        // its own back). Not before every spin, as it was: per-color statistics at 1 in 1024
        // then cost producer-consumer at 2 workers 9-16% (its consumers idle between rounds,
        // and spin; paired on/off in one process, `stats_probe prodcons 12 1024`, 4 processes:
        // 0.84-0.91 of the rate with statistics off before, 0.94-1.00 after). Why that flush
        // costs with statistics on is not known: any rare post whose memory another worker
        // frees in another way than the rest did the same (a sampled post's closure in a
        // `Box`, or stored by EMA in another size class). Held through a spin, crumbs wait at
        // most the spin budget, at most `alloc::CRUMB_BATCH` per owner.
        crate::alloc::with_heap(|h| h.flush_crumbs());
        // Quiet again if the spin's polls fired the last timer (or ended the last watch): a
        // worker that sleeps in its parker, not its poller, must be counted parked, or the
        // run never ends (the detector waits for it, and nothing wakes it).
        let quiet = quiet || !ctx.core.borrow().io.active();
        // Before a sleep: a peer stuck in a handler with work waiting behind it is watched (the
        // sleep then lasts the watch's wait at most), or stood in for if it was already.
        if stand_in_if_due(ctx, true, &mut parked) {
            return Flow::Continue;
        }
        if quiet && !parked {
            parked = true;
            if enter_parked(ctx) {
                leave_parked(ctx);
                return Flow::Stop;
            }
        }
        sleep(ctx)
    };
    // A worker whose run's end was counted while it slept leaves the parked state to the next
    // run's start, which resets it (`run_end`); one a stand-in took out of it while it slept
    // has left it (`Core::stand_in`).
    let unparked = std::mem::take(&mut ctx.core.borrow_mut().unparked);
    if parked && !ctx.claimed.get() && !unparked {
        leave_parked(ctx);
    }
    // (A spin that ended because the run is stopping says Continue: the run loop checks.)
    flow
}

/// Marks this worker parked (idle, queue empty, buffers flushed; it acts again only after
/// `leave_parked`) and, if it is the last one, runs the double collection. True if that found
/// the runtime quiescent (the run is stopping).
fn enter_parked(ctx: &WorkerCtx) -> bool {
    let shared = &*ctx.shared;
    shared.remotes[ctx.id].status.parked.store(true, Ordering::SeqCst);
    let parked = shared.control.parked.fetch_add(1, Ordering::SeqCst) + 1;
    if parked == shared.workers && quiescent(shared) {
        let slept_on = shared.stop_from_worker(crate::shared::QUIESCENT, ctx.run.get(), ctx.id);
        ctx.core.borrow_mut().counters.add(Counter::EndsSleptThrough, slept_on as u64);
        return true;
    }
    false
}

/// Ends a parked spell, before this worker does anything: epoch first, so that a detector
/// that saw it parked sees that it woke.
pub(crate) fn leave_parked(ctx: &WorkerCtx) {
    unpark_worker(&ctx.shared, ctx.id);
}

/// Takes worker `w` out of the parked state: the worker itself, or a stand-in for it
/// (`Core::stand_in`).
pub(crate) fn unpark_worker(shared: &Shared, w: usize) {
    let status = &shared.remotes[w].status;
    status.epoch.fetch_add(1, Ordering::SeqCst);
    status.parked.store(false, Ordering::SeqCst);
    shared.control.parked.fetch_sub(1, Ordering::SeqCst);
}

/// Spin rounds between two yields of the CPU (about 10 µs of spinning).
const YIELD_EVERY: u32 = 256;
/// A yield that takes this long means another thread ran: the CPU is shared.
const SHARED_CPU: Duration = Duration::from_micros(50);
/// How long a worker that found its CPU shared sleeps at once instead of spinning.
pub(crate) const SHARED_CPU_PAUSE: Duration = Duration::from_millis(1);

/// Spins up to `budget` watching for work. Returns true if work came (or the run is stopping).
/// With `quiet`, enters the parked state after its first 64 rounds (`parked` says
/// whether it did; the caller leaves it).
fn spin(
    ctx: &WorkerCtx,
    budget: Duration,
    try_steal: bool,
    quiet: bool,
    parked: &mut bool,
) -> bool {
    let shared = &*ctx.shared;
    let spinners = &shared.control.spinners;
    if spinners.fetch_add(1, Ordering::AcqRel) >= shared.max_spinners {
        spinners.fetch_sub(1, Ordering::AcqRel);
        return false;
    }
    ctx.core.borrow_mut().counters.add(Counter::Spins, 1);
    // Not quiet: it watches descriptors or timers, which it polls while it spins.
    let io = !quiet;
    let start = Instant::now();
    let mut found = false;
    let mut shared_cpu = false;
    let mut round = 0u32;
    loop {
        if has_work(ctx) {
            found = true;
            break;
        }
        round = round.wrapping_add(1);
        if round.is_multiple_of(64) {
            if quiet && !*parked {
                // Quiescence, if found, stops the run: `has_work` sees it next round.
                *parked = true;
                enter_parked(ctx);
            }
            if start.elapsed() >= budget {
                break;
            }
            if io && poll_while_spinning(ctx) {
                found = true;
                break;
            }
            if try_steal && round.is_multiple_of(1024) {
                steal::request(&mut ctx.core.borrow_mut(), shared);
                if stand_in_if_due(ctx, true, parked) {
                    found = true;
                    break;
                }
            }
            if round.is_multiple_of(YIELD_EVERY) {
                // Give the CPU to whatever else is runnable on it (another process, another
                // runtime's worker): spinning pays for a wake-up only when the CPU is free.
                // With nothing else runnable this returns at once; if it took long, another
                // thread ran: the CPU is shared, so stop spinning and sleep instead. What it
                // waits in these yields is the idle worker's, not the share it gets with work
                // (`CpuShare::idle_from_here`).
                if round == YIELD_EVERY {
                    ctx.core.borrow_mut().cpu_share.idle_from_here();
                }
                let t = Instant::now();
                std::thread::yield_now();
                if t.elapsed() >= SHARED_CPU {
                    shared_cpu = true;
                    break;
                }
            }
        }
        std::hint::spin_loop();
    }
    spinners.fetch_sub(1, Ordering::AcqRel);
    if found {
        ctx.core.borrow_mut().counters.add(Counter::SpinWins, 1);
    }
    if shared_cpu {
        let mut core = ctx.core.borrow_mut();
        core.counters.add(Counter::SpinsCut, 1);
        core.no_spin_until = Some(Instant::now() + SHARED_CPU_PAUSE);
    }
    found
}

/// A spinner that watches descriptors or timers polls them too (every 64 spins, a non-blocking
/// `epoll_wait`). True if that made work.
fn poll_while_spinning(ctx: &WorkerCtx) -> bool {
    let garbage = {
        let mut core = ctx.core.borrow_mut();
        core.poll_io(&ctx.shared, Some(Duration::ZERO));
        // Readiness of a color held elsewhere (moved or lent away from its poller's worker), or
        // a timer of a color homed elsewhere, was posted as a message: it leaves now. Left in
        // the buffer, it would wait for this worker's next round, and a spinner that finds
        // nothing to run here sleeps in its poller next, the message still buffered, the edge
        // that made it consumed: the color's holder would wait for it forever.
        if core.has_outgoing() {
            core.flush_all(&ctx.shared);
        }
        if core.queue.ready_len() == 0 {
            return false;
        }
        core.take_garbage()
    };
    drop(garbage);
    true
}

/// Stands in for a peer stuck in a handler or woken and waiting for its CPU, if one is due
/// (`stand_in`); with `look`, also watches one anew if none is watched. True if it lent this
/// worker work (a round then). A stand-in leaves the parked state first, if `parked` (and says
/// so there): while it routes into a peer, no detector may find the run quiescent.
fn stand_in_if_due(ctx: &WorkerCtx, look: bool, parked: &mut bool) -> bool {
    let shared = &*ctx.shared;
    if !ctx.core.stand_ins() {
        return false;
    }
    let due = {
        let mut core = ctx.core.borrow_mut();
        if !look && !core.watcher.watching() {
            return false;
        }
        crate::stand_in::look(&mut core.watcher, shared, ctx.id)
    };
    let Some((peer, window)) = due else {
        return false;
    };
    if std::mem::take(parked) {
        leave_parked(ctx);
    }
    if shared.stopping() {
        return false;
    }
    let mut core = ctx.core.borrow_mut();
    let Some(lent) = crate::stand_in::stand_in(shared, &mut core, peer, window, ctx.run.get())
    else {
        return false;
    };
    core.watcher.entered(lent);
    lent
}

/// Sleeps until woken (counted parked by the caller unless it watches descriptors or timers).
fn sleep(ctx: &WorkerCtx) -> Flow {
    let shared = &*ctx.shared;
    let remote = &shared.remotes[ctx.id];
    let locked = !shared.config.batching;
    let io = ctx.core.borrow().io.active();
    // Before the announcement on the inbox, which publishes it to wakers (`shared::Status`).
    remote.status.parks_in_poller.store(io, Ordering::Relaxed);
    // Nothing it sent may wait in its buffers while it sleeps (its round flushed them, and so
    // does a spinner's poll): a message left there would be delivered by no one.
    debug_assert!(
        !ctx.core.borrow().has_outgoing(),
        "worker {} sleeps with messages buffered",
        ctx.id
    );
    if !remote.poke.inbox.try_sleep(locked) {
        return Flow::Continue; // Messages arrived.
    }
    // Parked in its parker (not its poller), on a CPU shared with another process, it may sleep
    // through the run's end (`run_end`).
    let through = !io && sleeps_through(ctx);
    if through {
        publish_before_sleeping_through(ctx);
        crate::run_end::announce(&remote.poke.sleeper, ctx.run.get());
    }
    if shared.stopping() {
        remote.poke.inbox.woke(locked);
        // Its word first: claimed meanwhile and carried into the next run, the stop it saw was
        // the last run's.
        return if through { after_word(ctx) } else { Flow::Stop };
    }
    if io {
        return sleep_in_poller(ctx);
    }
    let watch = {
        let mut core = ctx.core.borrow_mut();
        core.counters.add(Counter::Sleeps, 1);
        core.watcher.sleep_limit(Instant::now())
    };
    let t = park(ctx, watch, true);
    let woke_to_look = watch.is_some_and(|w| t.elapsed() >= w) && !has_work(ctx);
    let mut core = ctx.core.borrow_mut();
    core.woke_to_look = woke_to_look;
    // A sleep cut short to look (`stand_in`) says nothing of the wake-up's cost.
    if !woke_to_look {
        core.last_sleep = Some(t.elapsed());
    }
    core.trace.span_since(crate::trace::Kind::Sleep, Some(t));
    drop(core);
    if through {
        return after_word(ctx);
    }
    if shared.stopping() {
        Flow::Stop
    } else {
        Flow::Continue
    }
}

/// Parks in its parker until woken (or until a worker whose CPU was found shared is due to
/// measure it again: `CpuShare::sleep_limit`; or until `watch`, a peer it watches for a
/// stand-in), then marks its inbox awake; returns when it
/// began. What it waited in an idle spin's yields is left out of its CPU share; what it waits
/// to run once woken counts (it is woken for work, or to measure). An idle spell's sleep and a
/// wait between runs (`runtime`'s `park_between_runs`) alike.
pub(crate) fn park(ctx: &WorkerCtx, watch: Option<Duration>, stand_ins: bool) -> Instant {
    let remote = &ctx.shared.remotes[ctx.id];
    let limit = {
        let mut core = ctx.core.borrow_mut();
        core.cpu_share.busy_again();
        core.asleep = stand_ins;
        core.asleep_in = ctx.run.get();
        // A worker sleeping through ends after a late one (`run_end::Late`), or among more
        // workers than CPUs, looks again as one measured shared does: a wake-up missed at a
        // run's start costs a recheck, not a hang.
        let late = (ctx.shared.oversubscribed || core.late.sleeps_through(crate::run_end::stamp()))
            .then_some(crate::cpu_share::RECHECK);
        let own = core.cpu_share.sleep_limit().or(late);
        match (own, watch) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    };
    let t = Instant::now();
    if stand_ins {
        // Woken, its thread may wait for its CPU (another process's time slice) while posts
        // to its colors wait in its inbox: a stand-in routes and lends them meanwhile.
        ctx.core.open(false);
    }
    remote.parker.park(limit);
    if stand_ins {
        ctx.core.close();
        ctx.core.borrow_mut().asleep = false;
    }
    remote.poke.inbox.woke(!ctx.shared.config.batching);
    t
}

/// Whether this worker sleeps through run ends (`run_end`): on a CPU measured shared with
/// another process (`worker::on_shared_cpu`) or with another worker (more workers than CPUs:
/// a runtime of eight workers on two CPUs ran short jobs, a `run` of eight empty events each, in
/// 60-64 us a job, every worker woken at each start and end, against 6.5-8 us with two
/// workers; 11-12 us with the standbys sleeping through and colors homed on two workers,
/// tokio-mt 12-14 us: `oversub_probe 8`), or after a late end (`run_end::Late`), with
/// `Config::sleep_through_ends`.
pub(crate) fn sleeps_through(ctx: &WorkerCtx) -> bool {
    let config = &ctx.shared.config;
    config.sleep_through_ends && {
        let core = ctx.core.borrow();
        config.sleep_through_any_cpu
            || ctx.shared.oversubscribed
            || crate::worker::on_shared_cpu(&ctx.shared, core.cpu_share.share())
            || core.late.sleeps_through(crate::run_end::stamp())
    }
}

/// What a worker that may sleep through its run's end publishes first, since it may not wake
/// before the run's report is read: its per-color figures and its trace, when they are on (its
/// counters went out as it idled).
fn publish_before_sleeping_through(ctx: &WorkerCtx) {
    let shared = &*ctx.shared;
    let mut core = ctx.core.borrow_mut();
    core.colors.flush(shared.color_stats.slot(ctx.id), true);
    if core.trace.on() {
        core.trace.publish(shared.trace.slot(ctx.id));
    }
}

/// A worker that announced it may sleep through its run's end takes its word back
/// (`run_end::resolve`) and goes on as it says (`run_end::stops`): in the run it names, its own
/// or a later one that carried it in, unless that run is stopping; or, its run's end counted
/// by the worker that stopped it, to the gate without counting it (`WorkerCtx::claimed`).
fn after_word(ctx: &WorkerCtx) -> Flow {
    let woke = crate::run_end::resolve(&ctx.shared.remotes[ctx.id].poke.sleeper, ctx.run.get());
    match woke {
        crate::run_end::Woke::InRun(run) => ctx.run.set(run),
        crate::run_end::Woke::Claimed(run) => {
            ctx.run.set(run);
            ctx.claimed.set(true);
        }
    }
    if crate::run_end::stops(woke, || ctx.shared.stopping()) {
        Flow::Stop
    } else {
        Flow::Continue
    }
}

/// Sleeps in the poller until a descriptor is ready, a timer is due or a wake-up comes. Not a
/// quiescent sleep: watched descriptors and timers keep the run going.
fn sleep_in_poller(ctx: &WorkerCtx) -> Flow {
    let shared = &*ctx.shared;
    let remote = &shared.remotes[ctx.id];
    let garbage = {
        let mut core = ctx.core.borrow_mut();
        core.counters.add(Counter::Sleeps, 1);
        core.cpu_share.busy_again();
        let limit = core.io.sleep_limit();
        let t = Instant::now();
        core.poll_io(shared, limit);
        core.last_sleep = Some(t.elapsed());
        core.trace.span_since(crate::trace::Kind::Sleep, Some(t));
        core.take_garbage()
    };
    drop(garbage);
    remote.poke.inbox.woke(!shared.config.batching);
    if shared.stopping() {
        Flow::Stop
    } else {
        Flow::Continue
    }
}

#[derive(PartialEq, Eq)]
struct Collect {
    epochs: Vec<u64>,
    sent: u64,
    received: u64,
    external: u64,
}

fn collect(shared: &Shared) -> Option<Collect> {
    let mut c =
        Collect { epochs: Vec::with_capacity(shared.workers), sent: 0, received: 0, external: 0 };
    for r in shared.remotes.iter() {
        c.epochs.push(r.status.epoch.load(Ordering::SeqCst));
        if !r.status.parked.load(Ordering::SeqCst) {
            return None;
        }
        c.sent += r.status.sent.load(Ordering::SeqCst);
        c.received += r.status.received.load(Ordering::SeqCst);
    }
    c.external = shared.control.external_msgs.load(Ordering::SeqCst);
    Some(c)
}

/// The double collection described in the module doc.
pub(crate) fn quiescent(shared: &Shared) -> bool {
    // A hold keeps the run going (`Handle::hold`); its release wakes every worker, and the last
    // to park again looks once more.
    if shared.control.holds.load(Ordering::SeqCst) > 0 {
        return false;
    }
    let Some(first) = collect(shared) else {
        return false;
    };
    if first.sent + first.external != first.received {
        return false;
    }
    collect(shared).is_some_and(|second| second == first)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn reasoned_spinning_spins_only_after_a_short_sleep() {
        let spin = Spin::Reasoned { threshold: None };
        let th = Duration::from_micros(300);
        let spin_budget = |spin, th, slept| spin_budget(spin, th, slept, &Default::default());
        assert_eq!(spin_budget(spin, th, None), Duration::ZERO, "first sleep is immediate");
        assert_eq!(spin_budget(spin, th, Some(Duration::from_micros(50))), th);
        assert_eq!(spin_budget(spin, th, Some(Duration::from_millis(5))), Duration::ZERO);
        assert_eq!(spin_budget(Spin::Never, th, Some(Duration::ZERO)), Duration::ZERO);
        let limit = Duration::from_millis(2);
        assert_eq!(spin_budget(Spin::Always { limit }, th, None), limit);
    }

    #[test]
    fn a_worker_without_descriptors_spins_only_on_a_cpu_it_has_to_itself() {
        let full = crate::cpu_share::FULL;
        assert!(may_spin(false, false, full));
        assert!(may_spin(false, false, SPIN_MIN_SHARE));
        assert!(!may_spin(false, false, full / 2), "next to a busy thread it sleeps at once");
        assert!(may_spin(false, true, full / 2), "unless it watches descriptors");
        assert!(!may_spin(true, true, full), "and none right after a long yield");
    }
}
