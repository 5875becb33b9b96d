//! State that threads other than its owner read or write: one [`Remote`] per worker and the
//! runtime-wide [`Control`] block.
//!
//! The split follows tokio's `Core` / `Remote`: everything a worker alone touches is in its
//! `Core` (`worker`), unsynchronized; everything here is atomic or locked, and grouped by *who
//! writes it* into separately padded blocks, so that a write by one party never invalidates a line
//! another party is reading for an unrelated reason:
//!
//! * `poke`: written by other workers and outside threads (inbox and its sleep mark, steal
//!   requests);
//! * `parker`: written by the owner and its wakers, only around sleeps;
//! * `status`: written by the owner (quiescence counters, load), read by others;
//! * `stats`: written by the owner once per round, read by snapshots;
//! * `stand_in`: written by the owner at every handler, read by idle workers (`stand_in`); the
//!   owner's core holds it directly (an `Arc`), not through this table.

use std::sync::Arc;

use crate::config::Config;
use crate::inbox::Inbox;
use crate::io::poller::PollerHandle;
use crate::message::Msg;
use crate::padding::Padded;
use crate::park::Parker;
use crate::stats::Published;
use crate::sync::{lock, AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering};
use crate::{Color, Error};

/// Why a run is ending (the value of [`Control::stop`]).
pub(crate) const RUNNING: usize = 0;
pub(crate) const QUIESCENT: usize = 1;
pub(crate) const SHUTDOWN: usize = 2;
pub(crate) const ABORTED: usize = 3;

/// Written by others to reach a worker.
pub(crate) struct Poke {
    pub(crate) inbox: Inbox,
    /// 0, or 1 + the id of the thief that asked this worker for a color.
    pub(crate) steal_request: AtomicUsize,
    /// A home recalled a color this worker holds (`steal::recall`): its `Recall` waits in the
    /// inbox, which this worker takes at its next turn's end, as it answers a steal request,
    /// not at its round's end (a round of a loop's turns is milliseconds).
    pub(crate) recall: AtomicBool,
    /// Whether the owner sleeps through its run's end (`run_end`: the run and the state).
    pub(crate) sleeper: AtomicU64,
}

/// Written by the owner, read by others: flags first, on lines of their own, then the counts.
///
/// Why two groups (`repr(C)`, a padding between them): the counts (`sent`, `received`,
/// `ready`) change at every batch and turn of a busy worker, while the flags change when its
/// state does (idle, asleep, its CPU's share); the flags are what a sender reads at every
/// early offer of a batch and every flush to idle workers (`idle`), and a home at every move
/// it weighs (`cpu_share`). On one line, each count the owner wrote took that line from every
/// reader, and each reader's look took it back: a miss a look, for a flag that had not
/// changed. `ready` stays with the counts: it changes as often, and its readers (a sender
/// whose batch left full, a thief choosing a victim) look once a batch or a steal.
#[repr(C)]
pub(crate) struct Status {
    /// Incremented each time the worker wakes from a sleep (quiescence detection, `idle`).
    pub(crate) epoch: AtomicU64,
    /// Asleep with nothing queued (quiescence detection).
    pub(crate) parked: AtomicBool,
    /// The worker has nothing to run (spinning or asleep): senders flush to it at once.
    pub(crate) idle: AtomicBool,
    /// The worker sleeps in its poller (it watches descriptors or has timers), not its parker.
    /// Stored before it announces its sleep on the inbox, so a waker that sees the announcement
    /// sees this too (the inbox's compare-and-swap orders them).
    pub(crate) parks_in_poller: AtomicBool,
    /// This worker's CPU has been shared for long (`cpu_share::CpuShare::long_shared`): the
    /// other workers leave their pins only where every CPU is (`CpuShare::leaves_pin`).
    pub(crate) long_shared: AtomicBool,
    /// `Steal::Backlog`: a color waiting here holds a backlog worth lending, as of the worker's
    /// last look (every few turns and at the end of each round); thieves ask only such workers.
    pub(crate) backlog: AtomicBool,
    /// The share of its CPU this worker gets when it wants to run, in thousandths (`cpu_share`).
    pub(crate) cpu_share: AtomicUsize,
    /// Keeps the counts below off the flags' lines: no bytes of its own, but aligned to a
    /// line pair (`padding`), so the counts start on the next one (a plain field with the
    /// `unpadded` feature: the baseline's layout, back to back).
    _counts_apart: Padded<()>,
    /// Messages this worker has sent to other workers, counted before delivery.
    pub(crate) sent: AtomicU64,
    /// Messages this worker has taken from its inbox, counted after taking.
    pub(crate) received: AtomicU64,
    /// Colors waiting to run on this worker (besides the running one), as of its last round.
    pub(crate) ready: AtomicUsize,
}

impl Status {
    /// What a sender sees of this worker when a batch to it leaves full (`tune`): relaxed
    /// loads of hints, which a stale value only makes tune less well.
    pub(crate) fn receiver(&self) -> crate::tune::Receiver {
        crate::tune::Receiver {
            idle: self.idle.load(Ordering::Relaxed),
            ready: self.ready.load(Ordering::Relaxed),
        }
    }
}

/// Everything other threads may touch of one worker.
pub(crate) struct Remote {
    pub(crate) poke: Padded<Poke>,
    pub(crate) parker: Padded<Parker>,
    /// The worker's epoll set and its waker (`io`).
    pub(crate) poller: Padded<PollerHandle>,
    pub(crate) status: Padded<Status>,
    pub(crate) stats: Padded<Published>,
    /// Emptied batch buffers given back to this worker by the workers it sent them to.
    pub(crate) returns: Padded<crate::outbox::Returns>,
    /// Messages from threads outside the runtime, behind the one that announced them
    /// ([`Shared::post_external`]).
    pub(crate) outside: Padded<Mutex<Outside>>,
    /// The gate a stand-in enters while the worker runs a handler (`stand_in`): written by the
    /// owner at every handler, alone on its lines. Shared with the owner's core
    /// (`stand_in::CoreCell`), which reaches it in one load: through this table, the owner's
    /// look-ups at each post in a window (to close it, and to reopen it) cost a fork-join of
    /// empty messages at two workers 23 instructions a message (callgrind).
    pub(crate) stand_in: Arc<Padded<crate::stand_in::StandIn>>,
}

/// Messages of room a worker's spare outside buffer keeps ([`Remote::take_outside`]): a burst
/// of outside posts (2M events posted before a run: 96 MB of messages) does not stay allocated
/// for the runtime's life.
pub(crate) const OUTSIDE_KEPT: usize = 4096;

/// Messages posted to a worker from threads outside the runtime (`Handle::post`), waiting for
/// the worker to take them.
///
/// Invariant: while `announced`, a batch from [`OUTSIDE`](crate::inbox::OUTSIDE) is in the
/// worker's inbox or being pushed there, and the worker takes `msgs` right after it (in that
/// order: the announcing message first); `msgs` is empty when not `announced`. So a message
/// waits here only behind an announcement the worker will take, and one poster's messages are
/// taken in the order posted.
///
/// Why: each outside post was a batch of its own (a buffer and an inbox node allocated by the
/// poster, freed by the worker in the poster's allocator arena) and a push on the inbox. Posting
/// 2M events from the main thread to 16 colors, then running them, 2 workers: about 2M events a
/// second in all, the workers' time mostly in glibc's `free` and arena consolidation; tokio
/// (unbounded channels to 16 tasks) ran the same at 15-18M.
#[derive(Default)]
pub(crate) struct Outside {
    pub(crate) msgs: Vec<Msg>,
    pub(crate) announced: bool,
}

impl Remote {
    pub(crate) fn new(parker: Parker, poller: PollerHandle) -> Self {
        Remote {
            poller: Padded::new(poller),
            poke: Padded::new(Poke {
                inbox: Inbox::new(),
                steal_request: AtomicUsize::new(0),
                recall: AtomicBool::new(false),
                sleeper: AtomicU64::new(0),
            }),
            parker: Padded::new(parker),
            status: Padded::new(Status {
                epoch: AtomicU64::new(0),
                parked: AtomicBool::new(false),
                sent: AtomicU64::new(0),
                received: AtomicU64::new(0),
                ready: AtomicUsize::new(0),
                idle: AtomicBool::new(false),
                parks_in_poller: AtomicBool::new(false),
                cpu_share: AtomicUsize::new(crate::cpu_share::FULL as usize),
                long_shared: AtomicBool::new(false),
                backlog: AtomicBool::new(false),
                _counts_apart: Padded::new(()),
            }),
            stats: Padded::new(Published::new()),
            returns: Padded::new(crate::outbox::returns()),
            outside: Padded::new(Mutex::new(Outside::default())),
            stand_in: Arc::new(Padded::new(crate::stand_in::StandIn::default())),
        }
    }

    /// Delivers a batch from `from` ([`OUTSIDE`](crate::inbox::OUTSIDE) for another thread)
    /// in one synchronization and unparks the worker if it was asleep. Returns true if this call
    /// woke it.
    #[inline]
    pub(crate) fn deliver_batch(&self, msgs: Vec<Msg>, from: crate::inbox::Sender) -> bool {
        let asleep = self.poke.inbox.push_batch(msgs, from);
        if asleep {
            self.unpark();
        }
        asleep
    }

    /// Delivers a message from a thread outside the runtime ([`Outside`]): behind the pending
    /// announcement if there is one, else as a batch of its own that announces what follows.
    pub(crate) fn deliver_outside(&self, msg: Msg) {
        {
            let mut outside = lock(&self.outside);
            if outside.announced {
                outside.msgs.push(msg);
                return;
            }
            outside.announced = true;
        }
        self.deliver_batch(vec![msg], crate::inbox::Sender::worker(crate::inbox::OUTSIDE));
    }

    /// The worker's side of [`Outside`], after it took a batch from
    /// [`OUTSIDE`](crate::inbox::OUTSIDE): the messages posted behind it, swapped into `into`
    /// (empty; it becomes the buffer later posts wait in, so past [`OUTSIDE_KEPT`] messages
    /// of room it is given back first). Later posts announce themselves again.
    pub(crate) fn take_outside(&self, into: &mut Vec<Msg>) {
        debug_assert!(into.is_empty());
        if into.capacity() > OUTSIDE_KEPT {
            *into = Vec::new();
        }
        let mut outside = lock(&self.outside);
        outside.announced = false;
        std::mem::swap(&mut outside.msgs, into);
    }

    /// The start of a run, once it carried this worker in asleep (`run_end::carry`), wakes it
    /// unless its inbox holds the sleep mark. A worker parks between runs without the mark when
    /// messages wait in its inbox (`runtime`'s `park_between_runs`), and its inbox's head then
    /// says "awake" to senders: a push does not wake it. Its messages are not enough to tell:
    /// a stand-in (`stand_in`), in the new run as soon as the worker is carried, may route them
    /// before this look, and an empty inbox without the mark would leave the worker asleep for
    /// the whole run, the posts that come later waiting in its inbox, counted in flight, the run
    /// never quiescent (`run_end`'s test of outside posts racing with runs hung so, 1 time in
    /// 80). Woken, it takes what waits and sleeps again with the mark. With the mark in place, a
    /// push wakes it as any sleeper.
    pub(crate) fn wake_carried_unless_marked(&self, locked_transport: bool) {
        if !self.poke.inbox.marked_asleep(locked_transport) {
            self.parker.unpark();
        }
    }

    /// Wakes the worker from whichever sleep it announced.
    pub(crate) fn unpark(&self) {
        if self.status.parks_in_poller.load(Ordering::Relaxed) {
            self.poller.wake();
        } else {
            self.parker.unpark();
        }
    }

    /// Delivers one message on the locked transport and unparks the worker if it was asleep.
    pub(crate) fn deliver_locked(&self, msg: Msg) -> bool {
        let asleep = self.poke.inbox.push_locked(msg);
        if asleep {
            self.unpark();
        }
        asleep
    }

    /// Wakes the worker if it sleeps, delivering nothing (a hint: see `Inbox::rouse`).
    pub(crate) fn rouse(&self, locked_transport: bool) -> bool {
        let asleep = self.poke.inbox.rouse(locked_transport);
        if asleep {
            self.unpark();
        }
        asleep
    }
}

/// A handler panic, as reported.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PanicRecord {
    /// The color of the event.
    pub color: Color,
    /// The worker it ran on.
    pub worker: usize,
    /// The panic message (or a placeholder if the payload was not a string).
    pub message: String,
}

/// How many panic records a run keeps (all are counted).
pub(crate) const PANIC_RECORDS_KEPT: usize = 64;

/// Runtime-wide state.
pub(crate) struct Control {
    /// `RUNNING` or why the run ends. Read at every turn by every worker, written once per run.
    pub(crate) stop: Padded<AtomicUsize>,
    /// The runtime was dropped.
    pub(crate) closed: Padded<AtomicBool>,
    /// Workers asleep with nothing to do, and workers spinning: written on idle transitions.
    pub(crate) parked: Padded<AtomicUsize>,
    pub(crate) spinners: Padded<AtomicUsize>,
    /// Messages delivered by outside threads (through a `Handle`), counted before delivery
    /// (quiescence detection).
    pub(crate) external_msgs: Padded<AtomicU64>,
    /// Of those, the events (run-report accounting of pending events).
    pub(crate) external_events: Padded<AtomicU64>,
    /// Registration tokens, unique in the runtime (`io`).
    pub(crate) next_token: Padded<AtomicU64>,
    /// Live [`Hold`](crate::runtime::Hold)s: while any, a run does not end as quiescent.
    pub(crate) holds: Padded<AtomicUsize>,
    /// Ends of the current run counted for workers asleep through it (`run_end::claim`), not
    /// yet added to the gate's count (the next worker to end the run adds them).
    pub(crate) claimed_ends: Padded<AtomicUsize>,
    /// When the current run was stopped (`run_end::stamp`): a worker that ends it much later
    /// sleeps through the next ends (`run_end::Late`).
    pub(crate) stopped_at: Padded<AtomicU64>,
}

/// What the runtime shares between its workers and its handles.
pub(crate) struct Shared {
    /// This runtime's number, unique in the process (an actor's address names its runtime).
    pub(crate) id: u64,
    /// The actors' states (`actor`).
    pub(crate) actors: crate::actor::Actors,
    pub(crate) config: Config,
    pub(crate) workers: usize,
    /// Where colors live (`color::home_of`).
    pub(crate) placement: crate::color::Placement,
    /// More workers than CPUs: workers share CPUs with each other (their wake-ups wait for a
    /// sibling's time slice), so they sleep through runs' ends (`idle::sleeps_through`).
    pub(crate) oversubscribed: bool,
    pub(crate) remotes: Box<[Remote]>,
    pub(crate) control: Control,
    /// Reasoned-spinning threshold (0 if the policy does not use one): read at each idle
    /// spell, since a measured one is published after the process's first build.
    pub(crate) spin_threshold: crate::wakeup_latency::Threshold,
    pub(crate) max_spinners: usize,
    pub(crate) panics: Mutex<Vec<PanicRecord>>,
    /// The error that aborted the current run, if any.
    pub(crate) abort: Mutex<Option<Error>>,
    /// For each worker, the other workers grouped by topology distance, nearest first (one group
    /// of all others when locality is off): the order a thief asks victims in.
    pub(crate) victims: Box<[Vec<Vec<usize>>]>,
    /// `tier[thief][victim]`: 1 + the index of the victim's group for that thief.
    pub(crate) tier: Box<[Box<[u8]>]>,
    /// Each worker's published per-color statistics (`color_stats`).
    pub(crate) color_stats: crate::color_stats::Published,
    /// Each worker's published trace records (`trace`).
    pub(crate) trace: crate::trace::Published,
    /// Heartbeats and reported stalls (`stall`).
    pub(crate) stalls: crate::stall::Stalls,
    /// Reader-writer states of the colors that admit readers, and the lanes reads run on
    /// (`reader`).
    pub(crate) readers: crate::reader::Readers,
    /// Ends of runs at which a worker had handed back its crumbs (`worker`, at a run's end).
    pub(crate) ends_flushed: Padded<AtomicU64>,
}

impl Shared {
    /// The shared state of a runtime of `workers` workers on `cpus` CPUs, with a parker each.
    pub(crate) fn new(
        config: Config,
        workers: usize,
        cpus: usize,
        spin_threshold: crate::wakeup_latency::Threshold,
        max_spinners: usize,
        topology: &crate::topology::Topology,
    ) -> std::io::Result<Shared> {
        let victims: Box<[Vec<Vec<usize>>]> = (0..workers)
            .map(|w| crate::steal::victim_tiers(topology, w, workers, config.steal_locality))
            .collect();
        let tier = victims
            .iter()
            .map(|tiers| {
                let mut t = vec![0u8; workers];
                for (i, group) in tiers.iter().enumerate() {
                    for &v in group {
                        t[v] = (i + 1).min(255) as u8;
                    }
                }
                t.into_boxed_slice()
            })
            .collect();
        let remotes = (0..workers)
            .map(|_| Ok(Remote::new(Parker::new(config.wakeup)?, PollerHandle::new()?)))
            .collect::<std::io::Result<Vec<_>>>()?;
        let color_stats = crate::color_stats::Published::new(workers, config.color_stats);
        let homes = if config.home_on_every_worker { workers } else { workers.min(cpus) };
        let placement =
            crate::color::Placement::new(workers, homes, topology.domain_size(homes.max(1)));
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Ok(Shared {
            id: IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            actors: crate::actor::Actors::default(),
            config,
            workers,
            oversubscribed: workers > cpus,
            placement,
            remotes: remotes.into_boxed_slice(),
            control: Control {
                stop: Padded::new(AtomicUsize::new(RUNNING)),
                closed: Padded::new(AtomicBool::new(false)),
                parked: Padded::new(AtomicUsize::new(0)),
                spinners: Padded::new(AtomicUsize::new(0)),
                external_msgs: Padded::new(AtomicU64::new(0)),
                external_events: Padded::new(AtomicU64::new(0)),
                next_token: Padded::new(AtomicU64::new(0)),
                holds: Padded::new(AtomicUsize::new(0)),
                claimed_ends: Padded::new(AtomicUsize::new(0)),
                stopped_at: Padded::new(AtomicU64::new(0)),
            },
            spin_threshold,
            max_spinners,
            panics: Mutex::new(Vec::new()),
            abort: Mutex::new(None),
            victims,
            tier,
            color_stats,
            trace: crate::trace::Published::new(workers),
            stalls: crate::stall::Stalls::new(workers),
            readers: crate::reader::Readers::new(placement),
            ends_flushed: Padded::new(AtomicU64::new(0)),
        })
    }

    #[inline]
    pub(crate) fn stopping(&self) -> bool {
        self.control.stop.load(Ordering::Relaxed) != RUNNING
    }

    /// Ends the current run for `reason` (the first reason wins) and wakes every worker.
    pub(crate) fn stop(&self, reason: usize) {
        self.begin_stop(reason);
        // Unconditional unparks: a worker checks `stop` after announcing its sleep, and the
        // parker's sticky token wakes it if it parks after our unpark.
        self.wake_all();
    }

    /// Ends run `run` for `reason` (quiescent, found so by worker `me`; or a shutdown by a
    /// handler on worker `me`) and wakes the workers, but those asleep in it (with
    /// `Config::sleep_through_ends`): they sleep on, their ends counted here
    /// (`run_end::claim`). Returns how many slept on.
    pub(crate) fn stop_from_worker(&self, reason: usize, run: u64, me: usize) -> usize {
        if !self.begin_stop(reason) {
            // Stopped already: whoever stopped it woke everyone, or claimed them.
            return 0;
        }
        let through = self.config.sleep_through_ends;
        let claimed = self
            .wake_all_but(|w, r| through && w != me && crate::run_end::claim(&r.poke.sleeper, run));
        if claimed > 0 {
            // Their heaps handed back what they held for others before they slept (`idle`).
            self.ends_flushed.fetch_add(claimed as u64, Ordering::AcqRel);
            self.control.claimed_ends.fetch_add(claimed, Ordering::SeqCst);
        }
        claimed
    }

    /// Sets the stop flag to `reason` if the run is running; true if this call stopped it. The
    /// stop's time is stamped first (`Control::stopped_at`, which a reader that acquires the
    /// flag sees), by a stopper that still finds the run running: a second one (a handler's
    /// second shutdown) would make late workers look on time.
    fn begin_stop(&self, reason: usize) -> bool {
        let stop = &self.control.stop;
        if stop.load(Ordering::Relaxed) == RUNNING {
            self.control.stopped_at.store(crate::run_end::stamp(), Ordering::Relaxed);
        }
        stop.compare_exchange(RUNNING, reason, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// Wakes every worker, asleep in its parker or its poller (a sticky token: one that parks
    /// after this wakes at once).
    pub(crate) fn wake_all(&self) {
        self.wake_all_but(|_, _| false);
    }

    /// [`wake_all`](Self::wake_all), but the workers `skip` says (by index); returns how many
    /// it skipped.
    fn wake_all_but(&self, mut skip: impl FnMut(usize, &Remote) -> bool) -> usize {
        let mut skipped = 0;
        for (w, r) in self.remotes.iter().enumerate() {
            if skip(w, r) {
                skipped += 1;
                continue;
            }
            r.parker.unpark();
            r.poller.wake();
        }
        skipped
    }

    pub(crate) fn record_panic(&self, record: PanicRecord) {
        let mut log = lock(&self.panics);
        if log.len() < PANIC_RECORDS_KEPT {
            log.push(record);
        }
    }

    pub(crate) fn abort(&self, error: Error) {
        lock(&self.abort).get_or_insert(error);
        self.stop(ABORTED);
    }

    /// Delivers a message from a thread that is not one of this runtime's workers; `event`
    /// says whether it carries a new event (for the count of pending events).
    pub(crate) fn post_external(&self, dest: usize, msg: Msg, event: bool) {
        if event {
            self.control.external_events.fetch_add(1, Ordering::Relaxed);
        }
        // Counted before delivery, so quiescence detection never sees it received but not sent.
        self.control.external_msgs.fetch_add(1, Ordering::SeqCst);
        let remote = &self.remotes[dest];
        if self.config.batching {
            remote.deliver_outside(msg);
        } else {
            remote.deliver_locked(msg);
        }
    }
}
