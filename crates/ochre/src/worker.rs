//! A worker: the state it alone owns ([`Core`]) and its run loop.
//!
//! One thread per worker, pinned when asked. The loop, one *round* at a time:
//!
//! 1. take every message in the inbox (one synchronization for all pending batches) and route
//!    each: new events to their color's queue, forwards to guest slots, loans, returns;
//! 2. answer a steal request, if a thief left one (one kept for a turn's end waits for it);
//! 3. run ready colors, a turn each (up to `turn_budget` events of one color back to back), up to
//!    `round_budget` events, answering steal requests between turns (a turn ends early when a
//!    thief asks: `steal::cuts_turn`) and doing the safety flush check every few events; after
//!    a turn over a millisecond (`steal::long_turn`), take the inbox again and share what waits
//!    with a less loaded worker;
//! 4. flush every outgoing buffer and publish counters;
//! 5. with nothing to run, go idle (`idle`): steal, spin, or sleep.
//!
//! Nothing a handler does touches another worker's memory except through `send` (buffered) and
//! wake-ups; a post to a color held here is a push on an unsynchronized queue.
//!
//! Handlers run with no borrow of the `Core` held: the core is in a `RefCell` (within
//! `stand_in::CoreCell`) and every runtime step borrows it briefly, so a handler's `post` can
//! borrow it in turn; while a handler runs, the core is open to a stand-in (an idle worker that
//! routes and lends for this one when its thread is stuck: `stand_in`). A panicking handler is
//! caught around the call, counted and recorded, and the loop goes on (or the run is aborted, by
//! configuration).

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::color::home_of;
use crate::color_stats::{self, Event};
use crate::cpu_share::CpuShare;
use crate::follow;
use crate::idle;
use crate::inbox::{Sender, OUTSIDE};
use crate::io::IoCore;
use crate::message::{InlineTask, Msg, Task};
use crate::outbox::Outbox;
use crate::queue::{ColorQueue, Dest, Route, Shed, TurnEnd};
use crate::shared::{PanicRecord, Shared};
use crate::stats::{Counter, Counters};
use crate::steal;
use crate::sync::Ordering;
use crate::{Color, Error};

/// Rounds between two publications of the heap's gauges (live bytes, blocks, crumbs): computing
/// them walks the heap's bins, and a gauge read by a person need not move every round. Exact at
/// the end of a run (see also [`EVENTS_PER_WALKED_BLOCK`]).
const HEAP_GAUGES_EVERY: u32 = 64;

/// Events a worker runs, per block of its heap's walk, between two walks (in rounds and idle
/// spells; the end of a run always walks): a program that queued a flood of events lists
/// thousands of partly freed blocks, a cache miss each, and a walk every 64 rounds and at each
/// idle spell took 7% of a fan-out's time (`fanout_probe local data`). A heap of at most
/// [`WALKED_FREELY`] listed blocks is walked whenever due.
const EVENTS_PER_WALKED_BLOCK: u64 = 256;

/// Listed blocks a walk of the heap may pass without waiting for events (see
/// [`EVENTS_PER_WALKED_BLOCK`]).
const WALKED_FREELY: u64 = 64;

/// Posts a fence may hold during one turn between two filings of the inbox (for the home's
/// `Synced` that lets them in): a batch's worth, as a full batch to another worker files it.
pub(crate) const HELD_FILE_EVERY: u32 = 32;

/// Longest a worker waits, at a run's end, for the others to hand back their crumbs before it
/// takes its own back ([`wait_for_every_flush`]): every worker ends every run within
/// microseconds of the others, unless one crashed or is descheduled.
const FLUSH_WAIT: Duration = Duration::from_millis(50);

/// At the end of run number `run`, after this worker handed back its crumbs: waits until every
/// worker did, for at most [`FLUSH_WAIT`] (a worker that crashed never comes; the gauges are then
/// inexact, nothing else). Every worker ends every run, so run `run` has ended everywhere once
/// `run * workers` ends were counted.
fn wait_for_every_flush(shared: &Shared, run: u64, share: u32) {
    let all = run.saturating_mul(shared.workers as u64);
    // AcqRel: the flushes before each count are seen by whoever reads the total after.
    shared.ends_flushed.fetch_add(1, Ordering::AcqRel);
    let start = Instant::now();
    let spin = if on_shared_cpu(shared, share) { FLUSH_SPIN } else { Duration::ZERO };
    while shared.ends_flushed.load(Ordering::Acquire) < all {
        let waited = start.elapsed();
        if waited >= FLUSH_WAIT {
            break;
        }
        if waited < spin {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Whether worker `w` shows itself idle (`Status::idle`, a relaxed hint): what a tuned batch
/// size asks when a batch to it leaves before it is full (`Outbox::take`).
fn is_idle(shared: &Shared, w: usize) -> bool {
    shared.remotes[w].status.idle.load(Ordering::Relaxed)
}

/// How long [`wait_for_every_flush`] spins, on a CPU shared with another process
/// ([`on_shared_cpu`]), before it yields its CPU at each look: a wake-up of the other
/// workers (the run's end wakes the sleepers), tens of microseconds on a virtual machine. A
/// yield there gives the other process's thread the CPU for the rest of its time slice,
/// milliseconds: `Runtime::run` of eight empty events beside a thread spinning on CPU 1 took
/// 7.9 ms, the worker there yielding here after it had run the run's last events and found it
/// quiescent (the first 3.9 ms waited for its first time slice). On a CPU of its own a yield
/// returns at once: the wait yields, as before.
const FLUSH_SPIN: Duration = Duration::from_micros(200);

/// Whether a worker getting `share` of its CPU shares it with another process
/// (`follow::has_its_cpu`), where every worker may spin at once (one CPU each, or as
/// configured: `idle::max_spinners`; with more workers than CPUs they share CPUs with each
/// other, and those not at a wait's end yet need the CPUs spinners would hold). There a yield
/// gives the other process's thread its time slice, which a run then waits for: the worker
/// spins, rather than yields, in the short wait at a run's end ([`wait_for_every_flush`],
/// where the caller of `run` waits for it), blocks at once rather than watch for the next
/// run (`runtime`'s `GATE_SPIN`: a spin there held the CPU that caller needed where the share
/// was stale), and, asleep when its run is found quiescent, sleeps through the run's end
/// (`run_end`, `Config::sleep_through_ends`). Not `Spin`'s idle spinning: a wait of
/// microseconds at a run's edge, bounded, which the baseline's runs pay too.
pub(crate) fn on_shared_cpu(shared: &Shared, share: u32) -> bool {
    !follow::has_its_cpu(share) && shared.max_spinners >= shared.workers
}

/// What one worker owns. Moved into its thread for a run and back into the runtime after.
pub(crate) struct Core {
    pub(crate) id: usize,
    pub(crate) queue: ColorQueue,
    outbox: Outbox,
    pub(crate) counters: Counters,
    /// Messages sent and received, mirrored into `Status` for quiescence detection.
    sent: u64,
    received: u64,
    /// How long the last sleep lasted (reasoned spinning); `None` before the first.
    pub(crate) last_sleep: Option<Duration>,
    /// The idle gaps measured, for `Spin::Adaptive` (`idle`, `tune`).
    pub(crate) spin_tuner: crate::tune::SpinTuner,
    /// No spinning before this instant: the CPU was found shared (`idle`).
    pub(crate) no_spin_until: Option<Instant>,
    /// A steal request of ours is waiting for its grant.
    pub(crate) steal_pending: bool,
    /// When that request was made (time spent searching).
    pub(crate) steal_asked_at: Option<Instant>,
    /// Idle spells to skip before asking again, after empty answers (doubles up to 64).
    pub(crate) steal_backoff: steal::Backoff,
    /// A thief's request waits in the slot for the next turn's end (`steal::defers`).
    pub(crate) answer_deferred: bool,
    /// A home's recall (the color, the home) waits for the next turn's end
    /// (`steal::recall_waits_a_turn`).
    pub(crate) recall_deferred: Option<(Color, usize)>,
    pub(crate) rng: u64,
    /// Rounds before this worker may wake a sleeper to steal from it again (`steal`).
    pub(crate) nudge_cooldown: u32,
    events_since_check: u32,
    /// Posts to other workers' colors made by the running event, and where the last went
    /// (`follow`: an event that made exactly one is a step of a chain of messages).
    event_remote_posts: u32,
    event_remote_dest: usize,
    /// The turns whose posts are counted in their color's traffic (`follow`).
    partners: follow::TurnSample,
    /// The buffer swapped with the outside posts waiting for this worker (`shared::Outside`).
    outside_spare: Vec<Msg>,
    /// Messages buffered for other workers during the current turn (see `end_of_turn_flush`).
    turn_sends: u32,
    /// True while the inbox is being filed in the middle of a handler ([`Core::send`]).
    filing: bool,
    /// Posts held by a guest's fence during the current turn (filed every `HELD_FILE_EVERY`).
    held_in_turn: u32,
    /// The ready count last written to this worker's status (`publish_ready`).
    published_ready: usize,
    /// The last backlog flag published (`publish_backlog`).
    published_backlog: bool,
    /// Rounds until the heap's gauges are published again (`publish_round`).
    heap_gauges_in: u32,
    /// Events run when the heap's gauges were last computed.
    events_at_walk: u64,
    /// This worker's CPU share measure (`cpu_share`), sampled with the heap gauges.
    pub(crate) cpu_share: CpuShare,
    /// Where this worker may leave its pin when its CPU is shared ([`unpin`](Self::unpin)):
    /// the CPU it is pinned to, and the runtime's CPUs it then runs on.
    pub(crate) unpin_to: Option<(usize, std::sync::Arc<[usize]>)>,
    /// While this worker has left its pin: when it takes it again (`cpu_share::REPIN_AFTER`).
    repin_at: Option<Instant>,
    /// Credits of the smooth weighted round robin of [`Core::place`].
    place_credit: Vec<i64>,
    /// Turns to start before the next one whose duration is sampled (0: none are), and the
    /// sampling period it starts again from (`steal::turn_sample`).
    turns: u32,
    turn_period: u32,
    overdue: Vec<usize>,
    /// Watched descriptors and timers (`io`).
    pub(crate) io: IoCore,
    /// User values released while the core is borrowed (cancelled handlers and timers), dropped
    /// once the borrow ends: their destructors may post.
    graveyard: Vec<Box<dyn std::any::Any + Send>>,
    /// Per-color statistics recorded here since their last flush (`color_stats`).
    pub(crate) colors: color_stats::Local,
    /// This worker's trace recorder (`trace`; off unless configured).
    pub(crate) trace: crate::trace::Recorder,
    /// This worker's heartbeat for the stall watchdog (`stall`).
    pub(crate) beat: crate::stall::Beat,
    /// Idle, this worker's watch over peers stuck in a handler (`stand_in`).
    pub(crate) watcher: crate::stand_in::Watcher,
    /// Open to stand-ins while asleep (not in a handler: `Core::stand_in`), in run number
    /// `asleep_in`.
    pub(crate) asleep: bool,
    pub(crate) asleep_in: u64,
    /// A stand-in took this worker, asleep, out of the parked state (`Core::stand_in`): it
    /// does not leave it again when it wakes.
    pub(crate) unparked: bool,
    /// The last sleep ended to look at a peer it watched (`stand_in`), with nothing to do.
    pub(crate) woke_to_look: bool,
    /// A stand-in works in this core (`Core::stand_in`): requests and recalls routed here are
    /// answered at once, not kept for the end of a turn of the stuck thread.
    pub(crate) standing_in: bool,
    /// Its late run ends: one makes it sleep through the next ones (`run_end::Late`).
    pub(crate) late: crate::run_end::Late,
}

impl Core {
    /// Worker `id`'s core, with its stall heartbeat (`Stalls::beat`): passed in, so that no core
    /// built for a runtime can leave it out.
    pub(crate) fn new(
        id: usize,
        placement: crate::color::Placement,
        config: &crate::Config,
        beat: crate::stall::Beat,
    ) -> Self {
        let shared_workers = placement.workers;
        let turn_period = crate::steal::turn_sample(config).unwrap_or(0);
        Core {
            id,
            queue: ColorQueue::new(id, placement)
                .with_backlog_turns(config.backlog_turns)
                .with_newest_first(config.newest_first),
            outbox: Outbox::new(shared_workers, config.batch_size, config.safety_flush_factor)
                .sized(config.batch_sizing),
            counters: Counters::new(),
            sent: 0,
            received: 0,
            last_sleep: None,
            spin_tuner: Default::default(),
            no_spin_until: None,
            steal_pending: false,
            steal_asked_at: None,
            steal_backoff: steal::Backoff::default(),
            answer_deferred: false,
            recall_deferred: None,
            rng: 0x9e37_79b9_7f4a_7c15 ^ (id as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9),
            nudge_cooldown: 0,
            events_since_check: 0,
            event_remote_posts: 0,
            event_remote_dest: 0,
            partners: follow::TurnSample::new(),
            outside_spare: Vec::new(),
            turn_sends: 0,
            filing: false,
            held_in_turn: 0,
            published_ready: 0,
            published_backlog: false,
            heap_gauges_in: 0,
            events_at_walk: 0,
            turns: turn_period,
            turn_period,
            overdue: Vec::new(),
            io: IoCore::new(),
            graveyard: Vec::new(),
            cpu_share: CpuShare::none(),
            unpin_to: None,
            repin_at: None,
            place_credit: vec![0; shared_workers],
            colors: color_stats::Local::new(config.color_stats),
            trace: crate::trace::Recorder::new(config.trace_events, crate::trace::epoch()),
            beat,
            watcher: Default::default(),
            asleep: false,
            asleep_in: 0,
            unparked: false,
            woke_to_look: false,
            standing_in: false,
            late: crate::run_end::Late::default(),
        }
    }

    /// Keeps a user value to drop after the current borrow of the core.
    pub(crate) fn bury(&mut self, value: Box<dyn std::any::Any + Send>) {
        self.graveyard.push(value);
    }

    /// The buried values, for the caller to drop once it released the core.
    pub(crate) fn take_garbage(&mut self) -> Vec<Box<dyn std::any::Any + Send>> {
        std::mem::take(&mut self.graveyard)
    }

    /// A post made by a handler running on this worker.
    #[inline]
    pub(crate) fn post(&mut self, shared: &Shared, color: Color, task: Task, urgent: bool) {
        if !shared.config.batching {
            return self.post_locked(shared, color, task, urgent);
        }
        let dest = self.queue.route(color);
        self.post_to(shared, color, dest, task, urgent);
    }

    /// Posts closure `f`, its memory placed (EMA) for the worker that will run it: the route is
    /// decided first, so the placement costs no second lookup.
    #[inline]
    pub(crate) fn post_closure<F: FnOnce() + Send + 'static>(
        &mut self,
        shared: &Shared,
        color: Color,
        f: F,
        urgent: bool,
    ) {
        if !shared.config.batching {
            let task = Task::new_for(f, home_of(color, shared.placement));
            return self.post_locked(shared, color, task, urgent);
        }
        let dest = self.queue.route(color);
        if let Dest::Remote { home } = dest {
            if InlineTask::wanted::<F>(&shared.config) {
                if urgent {
                    self.counters.add(Counter::PostsUrgent, 1);
                }
                let msg = Msg::PostInline { color, task: InlineTask::new(f), urgent, step: false };
                return self.post_remote(shared, home, msg);
            }
        }
        let task = Task::new_for(f, dest.runs_on());
        self.post_to(shared, color, dest, task, urgent);
    }

    /// A post to a color whose home is worker `home`, another one (urgent posts counted by the
    /// caller, as local ones are).
    #[inline]
    fn post_remote(&mut self, shared: &Shared, home: usize, msg: Msg) {
        self.counters.add(Counter::PostsRemote, 1);
        self.event_remote_posts += 1;
        self.event_remote_dest = home;
        self.send(shared, home, msg);
    }

    fn post_to(&mut self, shared: &Shared, color: Color, dest: Dest, task: Task, urgent: bool) {
        if urgent {
            self.counters.add(Counter::PostsUrgent, 1);
        }
        match self.queue.post_to(dest, task, urgent) {
            Route::Queued => self.counters.add(Counter::PostsLocal, 1),
            Route::Forward { to, task } => {
                self.counters.add(Counter::PostsLocal, 1);
                self.forward(shared, to, color, task, urgent);
            }
            Route::Remote { home, task } => {
                self.post_remote(shared, home, Msg::Post { color, task, urgent, step: false })
            }
            Route::Held(ask) => {
                self.counters.add(Counter::PostsLocal, 1);
                self.counters.add(Counter::PostsHeld, 1);
                self.ask_sync(shared, ask);
                // A handler streaming to a color that just moved here (a producer's loop, its
                // counter pulled over by `follow`) would hold every post until it returns: the
                // home's `Synced` waits in the inbox. File it now and then, as a full batch does.
                self.held_in_turn += 1;
                if self.held_in_turn.is_multiple_of(HELD_FILE_EVERY) {
                    self.file_mid_turn(shared);
                }
            }
            Route::Move { .. } => unreachable!("only a received post moves a color"),
        }
    }

    /// Sends an event of `color`, homed here and lent to worker `to`, on to it (counted).
    #[inline]
    fn forward(&mut self, shared: &Shared, to: usize, color: Color, task: Task, urgent: bool) {
        self.counters.add(Counter::Forwards, 1);
        let home = crate::message::worker_id(self.id);
        self.send(shared, to, Msg::Forward { color, home, task, urgent });
    }

    /// Asks a guest color's home to sync (`queue`, "Order per poster color"), if the queue asked.
    fn ask_sync(&mut self, shared: &Shared, ask: Option<crate::queue::SyncAsk>) {
        let Some(ask) = ask else { return };
        let from = crate::message::worker_id(self.id);
        self.send(shared, ask.home, Msg::Sync { color: ask.color, from, epoch: ask.epoch });
        // Posts wait on the answer: the request leaves now, not with the buffer's batch at the
        // end of the turn (as a steal grant does).
        if shared.config.batching {
            self.flush_to(shared, ask.home);
        }
    }

    /// libasync-smp's post: lock the queue of the worker that holds the color, once per event,
    /// even when that worker is this one.
    #[cold]
    fn post_locked(&mut self, shared: &Shared, color: Color, task: Task, urgent: bool) {
        if self.queue.lease(color).is_some() {
            // This worker holds the color: the event goes into the color's queue here, under the
            // locks libasync-smp took even for its own queue. Not through this worker's FIFO: a
            // post made as a color's guest and taken from the FIFO after the guest gave the
            // color back (and perhaps got it again with a forward) would leave for the home while
            // a later post of the same poster stayed here, out of order (the stress test
            // `stress_baseline_libasync_smp` found it, 1 run in 12).
            shared.remotes[self.id].poke.inbox.touch_locked();
            let dest = self.queue.route(color);
            return self.post_to(shared, color, dest, task, urgent);
        }
        if urgent {
            self.counters.add(Counter::PostsUrgent, 1);
        }
        self.counters.add(Counter::PostsRemote, 1);
        let msg = Msg::Post { color, task, urgent, step: false };
        self.send(shared, home_of(color, shared.placement), msg);
    }

    /// Sends a message to another worker (or, on the locked transport, possibly to this one).
    pub(crate) fn send(&mut self, shared: &Shared, dest: usize, msg: Msg) {
        if shared.config.batching {
            if msg.hands_over_a_color() {
                // Everything the color posted here goes out before it does (`queue`, "Order per
                // poster color").
                self.flush_all_but(shared, dest);
            }
            self.turn_sends += 1;
            if let Some(batch) = self.outbox.push(dest, msg, || &shared.remotes[self.id].returns) {
                // Read before delivery, which wakes it (`BatchSize::Adaptive`, `tune`).
                self.outbox.left_full(dest, || shared.remotes[dest].status.receiver());
                self.deliver(shared, dest, batch);
                // A handler that posts a full batch may post many more before it returns (a
                // producer's loop): the messages it received meanwhile are filed now, once per
                // batch, so that a color moved here (`follow`) or given back home takes this
                // handler's next posts, instead of the old home forwarding all of them until the
                // handler ends. Filing only queues events; none runs.
                self.file_mid_turn(shared);
            } else if self.outbox.offers_early(dest)
                && shared.remotes[dest].status.idle.load(Ordering::Relaxed)
            {
                self.flush_to(shared, dest);
            }
        } else {
            self.count_sent(shared, 1);
            if shared.remotes[dest].deliver_locked(msg) {
                self.counters.add(Counter::WakeupsSent, 1);
            }
        }
    }

    /// Files the inbox in the middle of a running handler (not within a filing): queues what
    /// arrived, runs nothing.
    fn file_mid_turn(&mut self, shared: &Shared) {
        if self.queue.is_running() {
            self.file(shared);
        }
    }

    /// Takes the inbox and routes it, unless a filing is under way (a handler's post made
    /// while routing, or a stand-in's routing into a core mid-turn: `stand_in`).
    fn file(&mut self, shared: &Shared) {
        if !self.filing {
            self.filing = true;
            self.take_inbox(shared);
            self.filing = false;
        }
    }

    /// Hands a batch to `dest`'s inbox in one synchronization and wakes `dest` if it sleeps.
    fn deliver(&mut self, shared: &Shared, dest: usize, batch: Vec<Msg>) {
        if batch.is_empty() {
            return;
        }
        self.count_sent(shared, batch.len() as u64);
        self.counters.add(Counter::BatchesSent, 1);
        self.trace.flush(dest, batch.len());
        self.counters.add(Counter::BatchedMsgs, batch.len() as u64);
        // Quiet: nothing else to run here, so the receiver may move colors here (`follow`).
        // Waiting: the ready colors and the running one, which a batch flushed before a long
        // turn leaves behind (`run_round`): the step it carries must not move its color here.
        let waiting = self.queue.ready_len() + usize::from(self.queue.is_running());
        let ready = u32::try_from(waiting).unwrap_or(u32::MAX);
        let from = Sender { id: self.id, quiet: self.queue.is_quiet(), ready };
        if shared.remotes[dest].deliver_batch(batch, from) {
            self.counters.add(Counter::WakeupsSent, 1);
        }
    }

    fn count_sent(&mut self, shared: &Shared, n: u64) {
        self.sent += n;
        // Published before delivery (SeqCst: read by the quiescence detector, `idle`), so a
        // message is never seen received but not sent.
        shared.remotes[self.id].status.sent.store(self.sent, Ordering::SeqCst);
    }

    /// Messages buffered for other workers, not yet delivered.
    pub(crate) fn has_outgoing(&self) -> bool {
        self.outbox.has_pending()
    }

    /// Sends every outgoing buffer.
    pub(crate) fn flush_all(&mut self, shared: &Shared) {
        while let Some(&d) = self.outbox.pending_dests().first() {
            let batch = self.outbox.take(d, || is_idle(shared, d));
            self.deliver(shared, d, batch);
        }
    }

    /// Sends every outgoing buffer but `dest`'s.
    #[cold]
    fn flush_all_but(&mut self, shared: &Shared, dest: usize) {
        while let Some(d) = self.outbox.pending_other_than(dest) {
            let batch = self.outbox.take(d, || is_idle(shared, d));
            self.deliver(shared, d, batch);
        }
    }

    /// At the end of every turn: sends every buffer if the turn was a burst (it posted at
    /// least a quarter of a batch to other workers, of `Outbox::burst_size`: a fan-out, whose
    /// receivers are about to run out of the part already sent, and whose batches are already
    /// large), else the buffers whose destination is idle.
    #[inline]
    fn end_of_turn_flush(&mut self, shared: &Shared) {
        let burst = self.outbox.ends_burst(self.turn_sends);
        self.turn_sends = 0;
        self.held_in_turn = 0;
        self.outbox.end_turn();
        if burst && self.outbox.has_pending() {
            self.counters.add(Counter::BurstFlushes, 1);
            self.flush_all(shared);
        } else {
            self.flush_to_idle(shared);
        }
    }

    /// Sends the buffers whose destination is idle: holding work back from a worker with
    /// nothing to do buys no batching, only latency. The look for pending buffers is inlined at
    /// every caller, the rest out of line: most turns post nothing elsewhere, and a call only to
    /// find that out cost a one-event turn about 29 instructions (callgrind, a ring of actors).
    #[inline(always)]
    fn flush_to_idle(&mut self, shared: &Shared) {
        if self.outbox.has_pending() {
            self.flush_pending_to_idle(shared);
        }
    }

    #[inline(never)]
    fn flush_pending_to_idle(&mut self, shared: &Shared) {
        let mut due = std::mem::take(&mut self.overdue);
        due.clear();
        due.extend(
            self.outbox
                .pending_dests()
                .iter()
                .copied()
                .filter(|&d| shared.remotes[d].status.idle.load(Ordering::Relaxed)),
        );
        for &d in &due {
            self.flush_to(shared, d);
        }
        self.overdue = due;
    }

    /// Sends the buffer for one destination now (used for steal grants, which a thief waits on).
    pub(crate) fn flush_to(&mut self, shared: &Shared, dest: usize) {
        let batch = self.outbox.take(dest, || is_idle(shared, dest));
        self.deliver(shared, dest, batch);
    }

    /// Per-event bookkeeping after an event of the color in slot `key` (`popped`: its next
    /// event was taken already): the chain step's mark, the safety flush of outgoing buffers
    /// (thesis §5.3.2).
    #[inline]
    fn after_event(&mut self, shared: &Shared, key: usize, popped: bool) {
        if self.event_remote_posts != 0 {
            // One post to another worker by a color with nothing left to run, or a cheap one
            // (`follow::is_step`): the event handed its work on, a step of a chain (not a
            // producer streaming or fanning out, nor a stage of a pipeline passing one item on
            // with more to come): mark it while it still waits in the buffer.
            let queue = &self.queue;
            if self.event_remote_posts == 1
                && follow::is_step(popped, || queue.has_events(key), || queue.event_cost(key))
            {
                self.outbox.mark_step(self.event_remote_dest);
            }
            self.event_remote_posts = 0;
        }
        self.events_since_check += 1;
        if self.events_since_check < crate::outbox::SAFETY_CHECK_EVERY || !self.outbox.has_pending()
        {
            return;
        }
        self.events_since_check = 0;
        self.safety_flush(shared);
    }

    #[cold]
    fn safety_flush(&mut self, shared: &Shared) {
        let mut due = std::mem::take(&mut self.overdue);
        self.outbox.overdue(Instant::now(), &mut due);
        for &d in &due {
            self.counters.add(Counter::SafetyFlushes, 1);
            self.flush_to(shared, d);
        }
        self.overdue = due;
    }

    /// Takes everything in the inbox and routes it. Returns the number of messages taken.
    pub(crate) fn take_inbox(&mut self, shared: &Shared) -> u64 {
        let remote = &shared.remotes[self.id];
        let mut taken = 0u64;
        if shared.config.batching {
            let mut batches = remote.poke.inbox.take_batches();
            while let Some((from, mut batch)) = batches.next_with_sender() {
                taken += batch.len() as u64;
                // One color per batch may move, as tokio's LIFO slot holds one task: the poster
                // takes its partner, not every receiver of a fan-out. None by a stand-in: its
                // senders look quiet (idle beside a stuck worker), and moved for good to them,
                // the colors of a divide and conquer gathered on the stand-in and stayed there
                // when the stuck thread ran again (runs of 2-8 ms where those without stand-ins
                // took 1.3, beside a busy thread); lent, they go home after their turn.
                let mut may_move = !self.standing_in;
                let stream = if shared.config.follow { follow::stream(&batch) } else { None };
                for msg in batch.drain(..) {
                    self.receive(shared, msg, from, &mut may_move, stream);
                }
                if from.id == OUTSIDE {
                    taken += self.receive_outside(shared, from);
                }
                // The emptied buffer serves this worker's next outgoing batch, or goes back.
                self.outbox.recycle(batch, shared.remotes.get(from.id).map(|r| &*r.returns));
            }
        }
        // The locked transport (libasync-smp): one lock per message.
        if !shared.config.batching {
            while let Some(msg) = remote.poke.inbox.pop_locked() {
                taken += 1;
                // The locked FIFO does not say who sent what: colors stay where they are.
                self.receive(shared, msg, Sender::worker(OUTSIDE), &mut false, None);
            }
        }
        if taken > 0 {
            self.received += taken;
            self.counters.add(Counter::MsgsReceived, taken);
            // After routing (SeqCst, read by the quiescence detector): never counted received
            // before the events are in the queue.
            remote.status.received.store(self.received, Ordering::SeqCst);
        }
        taken
    }

    /// Routes what other threads posted behind the batch from outside this worker just took
    /// (`shared::Outside`), swapped with this worker's spare buffer. Returns how many.
    #[cold]
    fn receive_outside(&mut self, shared: &Shared, from: Sender) -> u64 {
        let mut behind = std::mem::take(&mut self.outside_spare);
        shared.remotes[self.id].take_outside(&mut behind);
        let n = behind.len() as u64;
        for msg in behind.drain(..) {
            self.receive(shared, msg, from, &mut false, None);
        }
        self.outside_spare = behind;
        n
    }

    /// Routes one message of a batch from `sender`; while `may_move`, a post may move its color
    /// to the sender (then no more of this batch may). `stream`: the color the whole batch posts
    /// to, if it is a stream (`follow::stream`).
    ///
    /// Posts, nearly every message, go to [`route_received_post`](Self::route_received_post);
    /// the other kinds to [`receive_control`](Self::receive_control), out of line. One function
    /// for all of them, an inline post handled by converting it and calling that function again,
    /// paid the large function's frame twice for the commonest message (callgrind of a worker
    /// routing 200,000 posts from outside: 407 -> 401 instructions a post).
    #[inline]
    fn receive(
        &mut self,
        shared: &Shared,
        msg: Msg,
        sender: Sender,
        may_move: &mut bool,
        stream: Option<Color>,
    ) {
        let (color, task, urgent, step) = match msg {
            // Stored here, by the worker that runs it, then filed as any post.
            Msg::PostInline { color, task, urgent, step } => {
                (color, task.into_task(self.id), urgent, step)
            }
            Msg::Post { color, task, urgent, step } => (color, task, urgent, step),
            other => return self.receive_control(shared, other),
        };
        self.route_received_post(shared, color, task, urgent, step, sender, may_move, stream);
    }

    /// A post received (see [`receive`](Self::receive)).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn route_received_post(
        &mut self,
        shared: &Shared,
        color: Color,
        task: Task,
        urgent: bool,
        step: bool,
        sender: Sender,
        may_move: &mut bool,
        stream: Option<Color>,
    ) {
        // Only quiet batches, chain steps and streams can move a color
        // (`follow::worth_asking`): the posts of a fan-out take the plain path, uncounted.
        let stream = stream == Some(color);
        let follow = *may_move
            && (sender.quiet || step || stream)
            && shared.config.follow
            && sender.id < shared.workers;
        let from = follow.then_some((sender, step, stream));
        match self.receive_post(shared, color, task, urgent, from) {
            Route::Queued => {}
            // Received posts are for colors homed here, never guests; should one be, its
            // fence holds it like a local post.
            Route::Held(ask) => self.ask_sync(shared, ask),
            Route::Move { to, task } => {
                *may_move = false;
                self.counters.add(Counter::ColorsMovedOut, 1);
                let home = crate::message::worker_id(self.id);
                let task = Some(task);
                self.send(shared, to, Msg::Move { color, home, task, urgent });
            }
            Route::Forward { to, task } => self.forward(shared, to, color, task, urgent),
            // Posts reach a worker that is the color's home (or holds it: batched transport),
            // where the route is never remote. Should one arrive elsewhere, the home takes it.
            Route::Remote { home, task } => {
                debug_assert!(false, "a post for {color:?} reached a worker that is not its home");
                self.send(shared, home, Msg::Post { color, task, urgent, step: false });
            }
        }
    }

    /// Routes a message that is not a post (see [`receive`](Self::receive)).
    #[inline(never)]
    fn receive_control(&mut self, shared: &Shared, msg: Msg) {
        match msg {
            Msg::Post { .. } | Msg::PostInline { .. } => {
                unreachable!("posts are routed by `receive`")
            }
            Msg::Forward { color, home, task, urgent } => {
                self.queue.accept_forward(color, home as usize, task, urgent)
            }
            Msg::Move { color, home, task, urgent } => {
                self.counters.add(Counter::ColorsMovedIn, 1);
                self.note(color, Event::MovedIn, Some(home as usize));
                let home = home as usize;
                // Read once a move (rare beside posts): whether it came for the home's CPU.
                let mine = self.cpu_share.share();
                let relieved = follow::relieved(mine, peer(shared, home));
                self.queue.adopt_moved(color, home, task, urgent, relieved);
            }
            Msg::Grant { from, loans, asked } => {
                if asked {
                    self.settle_steal(!loans.is_empty());
                }
                let tier = u64::from(shared.tier[self.id][from as usize]);
                for loan in loans {
                    self.counters.add(Counter::StealsIn, 1);
                    self.note(loan.color, Event::StolenIn, Some(from as usize));
                    self.counters.add(Counter::StealTiers, tier);
                    self.counters.add(Counter::StolenEvents, loan.events.len() as u64);
                    self.queue.adopt(from as usize, loan);
                }
            }
            Msg::Return { color, ran } => {
                self.queue.returned(color, ran);
                self.answer_syncs(shared, color);
            }
            Msg::Recall { color, from } => {
                // Not kept for a turn's end by a stand-in: the turn is the stuck thread's.
                self.answer_recall(shared, color, from as usize, !self.standing_in);
            }
            Msg::GiveBack { ran, loan } => {
                self.settle_steal(true);
                self.counters.add(Counter::Recalls, 1);
                let color = loan.color;
                self.queue.given_back(ran, *loan);
                self.answer_syncs(shared, color);
            }
            Msg::Kept { color } => {
                self.settle_steal(false);
                if let Some((to, parked)) = self.queue.kept(color) {
                    for (task, urgent) in parked {
                        self.forward(shared, to, color, task, urgent);
                    }
                }
                self.answer_syncs(shared, color);
            }
            Msg::Sync { color, from, epoch } => {
                // Behind every forward of the posts received before it, on the same channel;
                // those parked by a recall first go on (`ColorQueue::sync_waits`).
                if !self.queue.sync_waits(color, from as usize, epoch) {
                    self.send(shared, from as usize, Msg::Synced { color, epoch });
                }
            }
            Msg::Synced { color, epoch } => {
                let ask = self.queue.synced(color, epoch);
                self.ask_sync(shared, ask);
            }
            Msg::StealRequest => {
                if steal::answers_outside_turns(self.answer_deferred, self.queue.ready_len()) {
                    steal::answer_request(self, shared);
                }
            }
            Msg::Pin { color } => self.queue.pin(color),
            Msg::Io(msg) => self.io_receive(shared, *msg),
        }
    }

    /// Answers `home`'s recall of `color` (`steal::answer_to_recall`; `may_wait`: it may keep
    /// it for the next turn's end).
    pub(crate) fn answer_recall(
        &mut self,
        shared: &Shared,
        color: Color,
        home: usize,
        may_wait: bool,
    ) {
        let deferred = &mut self.recall_deferred;
        let Some(answer) =
            steal::answer_to_recall(&mut self.queue, deferred, color, home, may_wait)
        else {
            return;
        };
        self.send(shared, home, answer);
        // At once, as a steal request's answer: the home waits for it, idle.
        if shared.config.batching {
            self.flush_to(shared, home);
        }
    }

    /// Answers the `Sync`s of `color` that waited for its recall to end.
    fn answer_syncs(&mut self, shared: &Shared, color: Color) {
        for (from, epoch) in self.queue.syncs_due(color) {
            self.send(shared, from, Msg::Synced { color, epoch });
        }
    }

    /// This worker's steal request or recall (`steal::request`) was answered, with work
    /// (`granted`) or not.
    fn settle_steal(&mut self, granted: bool) {
        self.steal_pending = false;
        if let Some(t) = self.steal_asked_at.take() {
            let us = t.elapsed().as_micros() as u64;
            self.counters.add(Counter::StealWaitMicros, us);
        }
        if !granted {
            self.counters.add(Counter::StealFailures, 1);
        }
        let events_run = self.counters.get(Counter::EventsRun);
        self.steal_backoff.settle(granted, events_run);
    }

    /// Routes a post received as the color's home; from a `sender` worker, with whether the
    /// post was a chain step and whether it came in a stream to the color (`None`: colors do
    /// not follow), the color may move to it (`follow::moves`).
    #[inline]
    fn receive_post(
        &mut self,
        shared: &Shared,
        color: Color,
        task: Task,
        urgent: bool,
        from: Option<(Sender, bool, bool)>,
    ) -> Route {
        let me = self.id;
        let home_ready = self.queue.ready_len();
        let mine = self.cpu_share.share();
        let io = &self.io;
        self.queue.receive_post(
            color,
            task,
            urgent,
            from.map(|(s, ..)| s.id),
            |traffic, cost, idle| {
                if !follow::judged(idle, from.is_some_and(|(_, step, _)| step)) {
                    return None;
                }
                let to = moves_to(shared, me, mine, home_ready, from, traffic, cost);
                // A color whose descriptors this worker's poller watches stays (`IoCore::anchors`).
                to.filter(|_| !io.anchors(shared, color))
            },
        )
    }

    /// What a worker does first when it finds itself idle (an idle spell, or a wake-up between
    /// runs): with its CPU found shared, is it still (`CpuShare::probe`)? Then it publishes its
    /// counters, its share and its load ([`publish_idle`](Self::publish_idle)).
    pub(crate) fn recheck_idle(&mut self, shared: &Shared) {
        self.cpu_share.probe();
        self.publish_idle(shared);
    }

    /// Publishes counters and load for other threads, at the end of a round: the heap's gauges
    /// only every [`HEAP_GAUGES_EVERY`] rounds (they walk the heap's bins).
    pub(crate) fn publish_round(&mut self, shared: &Shared) {
        let due = self.heap_gauges_in == 0;
        self.heap_gauges_in = if due { HEAP_GAUGES_EVERY } else { self.heap_gauges_in - 1 };
        let walk = due && self.walk_due();
        self.publish_with(shared, due, walk);
    }

    /// Publishes counters, the heap's gauges and load for other threads, when the worker goes
    /// idle: the heap's gauges if [`walk_due`](Self::walk_due).
    pub(crate) fn publish_idle(&mut self, shared: &Shared) {
        let walk = self.walk_due();
        self.publish_with(shared, true, walk);
    }

    /// Publishes counters, the heap's gauges and load for other threads (the end of a run: the
    /// gauges are exact).
    pub(crate) fn publish(&mut self, shared: &Shared) {
        self.publish_with(shared, true, true);
    }

    /// Lets this worker's thread run on the runtime's CPUs for [`cpu_share::REPIN_AFTER`]
    /// (`Config::unpin_when_shared`): when its measure says so (`measured`), or at its start
    /// where another worker of the process left its pin a moment ago. False if the worker may
    /// not leave a pin (or has left it), or the system refused (then it keeps its pin for good).
    ///
    /// [`cpu_share::REPIN_AFTER`]: crate::cpu_share::REPIN_AFTER
    #[cold]
    pub(crate) fn unpin(&mut self, measured: bool) -> bool {
        let Some((_, cpus)) = self.unpin_to.as_ref().filter(|_| self.repin_at.is_none()) else {
            return false;
        };
        if crate::topology::allow_current_thread(cpus).is_err() {
            self.unpin_to = None;
            return false;
        }
        self.cpu_share.unpinned(measured);
        self.counters.set(Counter::Unpinned, 1);
        self.repin_at = Some(Instant::now() + crate::cpu_share::REPIN_AFTER);
        true
    }

    /// Takes the pin again once [`cpu_share::REPIN_AFTER`] has passed since the worker left
    /// it, and measures its CPU anew: the other process may be gone, and where it is not the
    /// measure leaves the pin again. If the system refuses, the worker stays unpinned for good.
    ///
    /// [`cpu_share::REPIN_AFTER`]: crate::cpu_share::REPIN_AFTER
    fn repin_if_due(&mut self) {
        let (Some(at), Some((cpu, _))) = (self.repin_at, &self.unpin_to) else { return };
        if Instant::now() < at {
            return;
        }
        let cpu = *cpu;
        self.repin_at = None;
        if crate::topology::pin_current_thread(cpu).is_ok() {
            self.cpu_share.repinned(cpu);
            self.counters.set(Counter::Unpinned, 0);
            log::info!("worker {} takes its pin to CPU {cpu} again", self.id);
        } else {
            self.unpin_to = None;
        }
    }

    /// Whether the heap's gauges may be computed now: its walk is short, or the events run since
    /// the last one paid for it ([`EVENTS_PER_WALKED_BLOCK`]).
    fn walk_due(&self) -> bool {
        let events = self.counters.0[Counter::EventsRun as usize];
        crate::alloc::with_heap(|h| h.listed_blocks() as u64).is_none_or(|listed| {
            listed <= WALKED_FREELY
                || events.saturating_sub(self.events_at_walk) >= listed * EVENTS_PER_WALKED_BLOCK
        })
    }

    /// `sample`: the CPU share's sample and the colors' statistics too; `walk`: the heap's
    /// gauges too (a walk of its partly used blocks).
    fn publish_with(&mut self, shared: &Shared, sample: bool, walk: bool) {
        let allocated = self.outbox.take_allocated();
        self.counters.add(Counter::BatchBuffers, allocated);
        if let Some(h) = walk.then(|| crate::alloc::with_heap(|h| h.stats())).flatten() {
            self.events_at_walk = self.counters.0[Counter::EventsRun as usize];
            self.counters.set(Counter::EmaLiveBytes, h.live_bytes as u64);
            self.counters.set(Counter::EmaBlocks, h.blocks as u64);
            self.counters.set(Counter::EmaCrumbs, h.crumbs_pending as u64);
            self.counters.set(Counter::EmaRemoteFrees, h.remote_frees as u64);
            self.counters.set(Counter::EmaRefused, h.refused as u64);
        }
        if sample {
            self.sample_share(shared);
        }
        shared.remotes[self.id].stats.publish(&self.counters);
        if sample {
            self.colors.flush(shared.color_stats.slot(self.id), false);
        }
        self.publish_ready(shared);
        // A backlog is advertised by the nudge (`steal::nudge_sleepers`, every few turns) and
        // withdrawn here, at the end of the round that ran it down: a thief never asks on a
        // stale advertisement for long, and a round of one-event turns over many waiting colors
        // (a mall's) does not scan them all each time (200 instructions a round).
        if shared.config.steal == crate::Steal::Backlog && self.published_backlog {
            self.publish_backlog(shared);
        }
    }

    /// Samples this worker's CPU share if a window has passed (`cpu_share`), leaves the pin if
    /// it says so, and publishes the share.
    pub(crate) fn sample_share(&mut self, shared: &Shared) {
        self.repin_if_due();
        let _ = self.cpu_share.sample();
        let long = self.cpu_share.long_shared();
        // Relaxed: a hint for the other workers' `leaves_pin`; only a change is written.
        let published = &shared.remotes[self.id].status.long_shared;
        if published.load(Ordering::Relaxed) != long {
            published.store(long, Ordering::Relaxed);
        }
        if self.unpin_to.is_some() && self.repin_at.is_none() {
            let others = (0..shared.workers).filter(|&w| w != self.id).map(|w| {
                let long = shared.remotes[w].status.long_shared.load(Ordering::Relaxed);
                (peer(shared, w).share, long)
            });
            if self.cpu_share.leaves_pin(others) && self.unpin(true) {
                let share = self.cpu_share.share();
                log::info!("worker {} leaves its pin: {share} thousandths of its CPU", self.id);
            }
        }
        let share = self.cpu_share.share() as usize;
        // Relaxed: a hint for placement (`place`, `follow`, stealing from shared CPUs).
        let published = &shared.remotes[self.id].status.cpu_share;
        if published.load(Ordering::Relaxed) != share {
            published.store(share, Ordering::Relaxed);
        }
        self.counters.set(Counter::CpuShare, share as u64);
    }

    /// Publishes whether a color waiting here holds a backlog a thief may take
    /// (`Steal::Backlog`); only a change is written. Returns it.
    pub(crate) fn publish_backlog(&mut self, shared: &Shared) -> bool {
        let backlog = self.queue.has_backlog(steal::BACKLOG_FLOOR);
        if backlog != self.published_backlog {
            self.published_backlog = backlog;
            // Relaxed: a hint; a stale value costs a wasted or a missed request.
            shared.remotes[self.id].status.backlog.store(backlog, Ordering::Relaxed);
        }
        backlog
    }

    /// The color for new long-lived work (see [`crate::place`]).
    pub(crate) fn place(&mut self, shared: &Shared, seed: u64) -> Color {
        let first = Color(seed);
        if !shared.config.placement || shared.placement.homes < 2 {
            return first;
        }
        // Among the workers that home colors (`Config::home_on_every_worker`).
        let shares = shared.remotes[..shared.placement.homes]
            .iter()
            .map(|r| r.status.cpu_share.load(Ordering::Relaxed) as u32);
        let worker = crate::cpu_share::pick(shares, &mut self.place_credit);
        crate::color::first_homed_on(seed, crate::context::PLACE_TRIES, worker, shared.placement)
            .unwrap_or(first)
    }

    /// Publishes how many colors wait here, for thieves choosing a victim; only a change is
    /// written (called after every turn when stealing is on).
    #[inline]
    fn publish_ready(&mut self, shared: &Shared) {
        let ready = self.queue.ready_len();
        if ready != self.published_ready {
            self.published_ready = ready;
            // Relaxed: a hint; a stale value costs a wasted or missed request, never correctness.
            shared.remotes[self.id].status.ready.store(ready, Ordering::Relaxed);
        }
    }

    /// What an idle worker, `thief`, does in this core while its own thread is stuck in a
    /// handler (`stand_in`), as that thread does between two events of a turn and before a long
    /// one: routes the inbox (`file_mid_turn`), answers a request or recall kept for the stuck
    /// thread's turn's end (`steal::answer_held`: that end is the stuck thread's), lends the
    /// stand-in colors (`steal::lend_to_stand_in`, which also answers its request if it waits in
    /// the slot), flushes every buffer (the loans, the forwards and answers routing made, and
    /// whatever the handler posted so far), takes back to the stand-in the colors it lent here
    /// ([`give_back_to`](Self::give_back_to)) and publishes the line. Returns whether the
    /// stand-in got work: colors taken back, or messages for it (a loan, an answer, a color
    /// moved to it), or anything routed into its own core by the take-back.
    ///
    /// Into a worker asleep (woken, its thread waiting for its CPU), only in the stand-in's own
    /// run `run`, whether the worker slept in it (its run-end word Awake) or was carried into it
    /// asleep through the last one's end (Claimable in it: held meanwhile, `run_end::hold`),
    /// and not while the run stops. If what was routed there is not all lent (events, a timer
    /// or a watch, buffered messages), it then takes the worker out of the parked state as the
    /// worker does when it wakes (`idle::leave_parked`), and marks that it did (a worker counted
    /// parked has nothing to do: quiescence, `idle`); its word then stays Held, which no
    /// stopper claims (it wakes the worker, which ends the run itself: a stopper whose look
    /// came just before the stand-in left the parked state would otherwise count the end of a
    /// worker taken out of the parked state).
    pub(crate) fn stand_in(&mut self, shared: &Shared, run: u64, thief: &mut Core) -> bool {
        debug_assert!(
            self.queue.is_running() || self.asleep,
            "a stand-in enters only while a handler runs or the worker sleeps"
        );
        let sleeper = &shared.remotes[self.id].poke.sleeper;
        let held = self.asleep && crate::run_end::hold(sleeper, run);
        let in_run = held || (self.asleep_in == run && crate::run_end::is_awake(sleeper));
        if self.asleep && (!in_run || shared.stopping()) {
            if held {
                crate::run_end::release(sleeper, run);
            }
            return false;
        }
        self.counters.add(Counter::StoodInFor, 1);
        self.standing_in = true;
        self.file(shared);
        if steal::answer_held(self, shared) {
            self.flush_all(shared);
        }
        steal::lend_to_stand_in(self, shared, thief.id);
        self.flush_all(shared);
        let (taken, routed) = self.give_back_to(thief, shared);
        self.publish_ready(shared);
        let status = &shared.remotes[self.id].status;
        // What makes a worker not quiet (`idle`): events, descriptors or timers (a `Watch` or a
        // timer routed here), buffered messages.
        let left = self.queue.pending() > 0
            || !self.queue.is_quiet()
            || self.io.active()
            || self.has_outgoing();
        if self.asleep && left && !self.unparked && status.parked.load(Ordering::SeqCst) {
            idle::unpark_worker(shared, self.id);
            self.unparked = true;
        }
        if held && !self.unparked {
            crate::run_end::release(sleeper, run);
        }
        self.standing_in = false;
        // Not whatever this core sent: a stuck producer's own posts, flushed here, would make
        // every entry look of use and the next due at once, each a `membarrier`.
        let for_thief = !shared.remotes[thief.id].poke.inbox.is_empty(false);
        taken || routed || for_thief
    }

    /// A stand-in's take-back (`Core::stand_in`): the colors `home` (the stand-in) lent this
    /// worker, waiting here for this worker's stuck thread, go back to it with their events.
    /// A borrowed color is never lent on, so the stand-in's loan cannot take them; a user's
    /// sum beside a busy process lent 512 of its chunks to the worker on the shared CPU, which
    /// then waited 3-5 ms for its CPU while the lender idled. This is a recall (`queue`,
    /// "Recalls") whose messages the one thread that holds both cores carries at once, after
    /// making the counts agree as the recall's channel does: every forward the home sent here
    /// is received (its buffers flushed, this inbox routed after), and every return from here
    /// is routed there (these buffers flushed, its inbox routed after). Both ends of the
    /// channel are this thread's meanwhile: the home sends nothing here, and this worker,
    /// stuck, sends nothing there. The hand-over comes after everything this worker buffered
    /// (flushed first), as any hand-over's. Unlike the rest of a stand-in's work, this is not a
    /// state the stuck thread reaches by itself: it is a recall answered for it. Returns
    /// whether any came back, and whether the home's inbox had anything (routed into the home:
    /// it has work, and must not sleep on it).
    fn give_back_to(&mut self, home: &mut Core, shared: &Shared) -> (bool, bool) {
        if !self.queue.waits_lent_by(home.id) {
            return (false, false);
        }
        let routed = home.take_inbox(shared) > 0;
        home.flush_all(shared);
        self.file(shared);
        self.flush_all(shared);
        let back = self.queue.give_back_waiting(home.id, steal::BACKLOG_FLOOR);
        let n = back.len() as u64;
        for (ran, loan) in back {
            home.queue.given_back(ran, loan);
        }
        home.counters.add(Counter::Recalls, n);
        self.counters.add(Counter::StoodInGiveBacks, n);
        (n > 0, routed)
    }

    /// A cheap pseudo-random number (xorshift64*), for victim selection.
    pub(crate) fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// A turn's events to run (`WorkerCtx::run_turn`): the color's slot, the color, its first event,
/// the most it runs, whether it looks for thieves, whether its events are timed (and the turn
/// sampled).
struct Turn {
    key: usize,
    color: Color,
    first: Option<Task>,
    budget: usize,
    looks: bool,
    timed_events: bool,
    sampled: bool,
    /// With windows (`run_turn::<true>`), how many of the turn's events open one
    /// (`stand_in::open_events`).
    opens: usize,
    /// The least cost of an event that opens, ns (`stand_in::window_from`).
    window_from: u64,
}

/// A worker thread's view of the runtime while it runs: its core and the shared state. Lives on
/// the worker's stack for the duration of a run; `context` points the thread-local at it.
pub(crate) struct WorkerCtx {
    pub(crate) shared: Arc<Shared>,
    pub(crate) core: crate::stand_in::CoreCell,
    pub(crate) id: usize,
    /// The color of the running event, for `current_color`.
    pub(crate) current: Cell<Option<Color>>,
    /// The run this worker takes part in: the one it entered, or a later one that carried it
    /// in asleep (`run_end`).
    pub(crate) run: Cell<u64>,
    /// The run's end was counted by the worker that stopped it, this worker asleep
    /// (`run_end`): it leaves for the gate without counting it.
    pub(crate) claimed: Cell<bool>,
}

impl WorkerCtx {
    pub(crate) fn new(shared: Arc<Shared>, core: Core) -> Self {
        let id = core.id;
        WorkerCtx {
            core: crate::stand_in::CoreCell::new(core, &shared),
            shared,
            id,
            current: Cell::new(None),
            run: Cell::new(0),
            claimed: Cell::new(false),
        }
    }

    /// The run loop of the runtime's `run`th run (counted from 1 by its gate); returns when the
    /// run stops, or a later one that carried this worker in (`run_end`: then `self.run` says
    /// which, and `self.claimed` whether its end was counted for it).
    pub(crate) fn run(&self, run: u64) {
        let shared = &*self.shared;
        self.run.set(run);
        self.claimed.set(false);
        // Empty answers of a run before tell nothing of this one (`steal::Backoff`).
        self.core.borrow_mut().steal_backoff = steal::Backoff::default();
        self.core.publish();
        loop {
            if shared.stopping() {
                break;
            }
            // No borrow alive, the core closed: windows may start here (`stand_in`).
            self.core.enable_when_registered();
            let garbage = {
                let mut core = self.core.borrow_mut();
                core.counters.add(Counter::Rounds, 1);
                core.take_inbox(shared);
                if core.io.active() {
                    core.poll_io(shared, Some(std::time::Duration::ZERO));
                }
                let kept = core.answer_deferred || core.recall_deferred.is_some();
                if steal::answers_outside_turns(kept, core.queue.ready_len()) {
                    steal::answer(&mut core, shared);
                }
                core.take_garbage()
            };
            drop(garbage);
            let ran = self.run_round();
            let idle = {
                let mut core = self.core.borrow_mut();
                core.flush_all(shared);
                // (Sleepers were nudged after the round's last turn: `run_round`.)
                core.publish_round(shared);
                // A request or recall kept for a turn's end has none to wait for: answered, and
                // a round again (its answer may have sent messages) before idling.
                let empty = ran == 0 && core.queue.ready_len() == 0;
                let held = empty && steal::answer_held(&mut core, shared);
                if held {
                    core.flush_all(shared);
                }
                empty && !held
            };
            if idle && idle::idle(self) == idle::Flow::Stop {
                break;
            }
        }
        // How late this end is (`run_end::Late`), before the flushes below: the stamp of the
        // stop this worker saw (acquired with the flag).
        if !self.claimed.get()
            && shared.control.stop.load(Ordering::Acquire) != crate::shared::RUNNING
        {
            let stopped = shared.control.stopped_at.load(Ordering::Relaxed);
            self.core.borrow_mut().late.ended(stopped, crate::run_end::stamp());
        }
        // Hand back what we freed for others, then, once every worker did, take back what
        // others freed for us: so the heaps' gauges are exact for the run (a worker that was
        // spinning when the run stopped still held crumbs: `idle`).
        crate::alloc::with_heap(|h| {
            h.flush_hot();
            h.flush_crumbs();
        });
        if !self.claimed.get() {
            let share = self.core.borrow().cpu_share.share();
            wait_for_every_flush(shared, self.run.get(), share);
        }
        crate::alloc::with_heap(|h| h.drain_remote());
        let mut core = self.core.borrow_mut();
        core.flush_all(shared);
        core.publish(shared);
        core.colors.flush(shared.color_stats.slot(self.id), true);
        core.trace.publish(shared.trace.slot(self.id));
    }

    /// Runs ready colors, a turn each, up to the round budget. Returns the events run.
    fn run_round(&self) -> usize {
        let shared = &*self.shared;
        // Alone, a worker has no thief to wake nor backlog to advertise: the look every few
        // turns cost a one-worker producer-consumer over 100 colors 6% (`bench prodcons`).
        let stealing = shared.config.steal != crate::Steal::Off && shared.workers > 1;
        let mut ran = 0;
        // Turns of colors that admit readers that had to wait for reads, this round (`reader`).
        let mut waited = 0;
        // The last turn was long and shared what waited behind it.
        let mut shared_before_next = false;
        while ran < shared.config.round_budget {
            let (key, color, mut next, turn_timer, sampled, timed_events, writes, watched, posts) = {
                let mut core = self.core.borrow_mut();
                let Some((key, color)) = core.queue.start_turn() else {
                    break;
                };
                // An empty turn (a guest given back) runs nothing of the color and takes no
                // turn of the word: one that waited would leave `WAITING` set with no turn to
                // come, and the reads parked behind it would never run.
                let writes = color.admits_readers() && core.queue.has_events(key);
                if writes && !crate::reader::begin_write(shared, color) {
                    // Reads of it run: back of the ready list, events untouched; run the other
                    // colors, and once each was tried, leave the round to take the inbox.
                    core.queue.end_turn_shedding(key, |_, _| false, |_, _, _, _| None);
                    waited += 1;
                    if waited > core.queue.ready_len() {
                        // No turn ends this round: a request or recall kept for a turn's end is
                        // answered now, or a thief would wait as long as the reads do.
                        if steal::answer_held(&mut core, shared) {
                            core.flush_all(shared);
                        }
                        drop(core);
                        crate::reader::wait_for_reads(ran);
                        break;
                    }
                    continue;
                }
                let first = core.queue.pop(key);
                let core_ref = &mut *core;
                let counters = &core_ref.counters;
                let posts_before = core_ref.partners.start(|| post_totals(counters));
                // A countdown, not `turns % n`: a division a turn cost a ring's one-event turns
                // more than the rest of the sampling.
                let sample = match core.turns {
                    0 => false,
                    1 => {
                        core.turns = core.turn_period;
                        true
                    }
                    _ => {
                        core.turns -= 1;
                        false
                    }
                };
                core.beat.start_turn(color);
                let sampled = core.colors.sample_turn();
                let timed = sampled || core.trace.on();
                // A turn of a color not known to be short is timed (`steal::WATCHED_ABOVE_NS`),
                // and batches do not wait behind it (`steal::flushes_all_before`).
                let watched =
                    shared.workers > 1 && !core.queue.known_within(key, steal::WATCHED_ABOVE_NS);
                if watched && shared.config.batching && core.outbox.has_pending() {
                    if steal::flushes_all_before(&core.queue, key) {
                        core.flush_all(shared);
                    } else {
                        core.flush_to_idle(shared);
                    }
                }
                // Not right after the last turn's share: the same lines, judged again, would
                // lend a busy worker a second color, an idle one half of the rest.
                let after_share = std::mem::take(&mut shared_before_next);
                if watched
                    && stealing
                    && !after_share
                    && core.queue.known_over(key, steal::LONG_EVENT_NS)
                {
                    steal::share_behind_long_turn(&mut core, shared, 1);
                }
                let turn_timer = match (sample, watched) {
                    (true, _) => Some(TurnTimer::Sampled(crate::turn_clock::now())),
                    (false, true) => Some(TurnTimer::Watched(crate::turn_clock::now())),
                    (false, false) => None,
                };
                (key, color, first, turn_timer, sampled, timed, writes, watched, posts_before)
            };
            let (cost, share) = match stealing || self.core.stand_ins() {
                true => {
                    let core = self.core.borrow();
                    (Some(core.queue.event_cost(key)), core.cpu_share.share())
                }
                false => (None, crate::cpu_share::FULL),
            };
            let looks = steal::looks_in_turn(stealing, || cost.unwrap_or(0));
            let from = crate::stand_in::window_from(share);
            let opens = match cost {
                Some(ns) if self.core.stand_ins() => crate::stand_in::open_events(ns, from),
                _ => 0,
            };
            let windows = opens > 0;
            self.current.set(Some(color));
            let first = next.take();
            let budget = shared.config.turn_budget;
            let turn = Turn {
                key,
                color,
                first,
                budget,
                looks,
                timed_events,
                sampled,
                opens,
                window_from: from,
            };
            // Stand-ins may route and lend while the handlers run (`stand_in`): a loop of its
            // own, not a branch an event, for colors that open nothing (a local ping-pong's
            // events are 15 ns, and its loop's every instruction is 1% of it).
            let n =
                if windows { self.run_turn::<true>(turn) } else { self.run_turn::<false>(turn) };
            self.current.set(None);
            ran += n;
            let mut core = self.core.borrow_mut();
            core.beat.end_turn();
            core.counters.add(Counter::EventsRun, n as u64);
            if let Some(before) = posts {
                let now = post_totals(&core.counters);
                if let Some(elsewhere) = follow::TurnSample::posted_elsewhere(before, now) {
                    core.queue.count_turn_posts(key, elsewhere);
                }
            }
            // An empty turn (a guest given back) tells nothing of the color's cost.
            // The turn's events at their measured cost (before the color may leave), for the
            // nudge's countdown (`steal::nudge_due`), which runs only while stealing is on.
            let turn_ns =
                if stealing { core.queue.event_cost(key).saturating_mul(n as u64) } else { 0 };
            let long = match turn_timer.filter(|_| n > 0) {
                Some(TurnTimer::Sampled(t0)) => {
                    let ns = crate::turn_clock::ns_since(t0);
                    core.queue.record_turn(key, ns, n);
                    watched && steal::long_turn(ns, n)
                }
                Some(TurnTimer::Watched(t0)) => {
                    let ns = crate::turn_clock::ns_since(t0);
                    core.queue.record_watched_turn(key, ns, n);
                    steal::long_turn(ns, n)
                }
                None => false,
            };
            let (me, mine) = (core.id, core.cpu_share.share());
            let held = &mut *core;
            let io = &held.io;
            let shed = |home: Option<usize>, ready, cost, what: Shed| {
                if what.loan {
                    // A stolen color goes home, unless colors follow and its home's CPU is
                    // clearly worse (`follow::keeps_loan`).
                    let keeps =
                        |h| shared.config.follow && follow::keeps_loan(mine, || peer(shared, h));
                    return home.filter(|&h| !keeps(h));
                }
                if !shared.config.follow {
                    return None;
                }
                let peer = |w: usize| peer(shared, w);
                match home {
                    Some(h) => {
                        let (moved_on, relieved) = (what.moved_on, what.relieved);
                        follow::goes_home(moved_on, relieved, ready, mine, cost, || peer(h))
                            .then_some(h)
                    }
                    // Colors whose descriptors are watched here stay (`IoCore::anchors`).
                    None => relief(shared, me, mine).filter(|_| !io.anchors(shared, color)),
                }
            };
            // Before the color may leave (a return or move below can reach its next holder at
            // once, and its next turn must find the word clear).
            let granted = writes.then(|| crate::reader::end_write(shared, color));
            let keeps = |ready, cost| follow::keeps(shared.config.follow, ready, mine, cost);
            match held.queue.end_turn_shedding(key, keeps, shed) {
                Some(TurnEnd::Return(ret)) => {
                    if ret.resident {
                        core.counters.add(Counter::ColorsGivenBack, 1);
                    }
                    core.send(shared, ret.home, Msg::Return { color: ret.color, ran: ret.ran });
                }
                Some(TurnEnd::Push { to, color }) => {
                    core.counters.add(Counter::ColorsMovedOut, 1);
                    core.note(color, Event::MovedOut, Some(to));
                    let home = crate::message::worker_id(me);
                    core.send(shared, to, Msg::Move { color, home, task: None, urgent: false });
                }
                None => {}
            }
            if let Some(granted) = granted {
                crate::reader::grant(shared, &mut core, color, granted);
            }
            core.end_of_turn_flush(shared);
            if long {
                // The share is otherwise sampled every `HEAP_GAUGES_EVERY` rounds and when idle:
                // two workers busy with 1 ms events on CPUs each shared with a spinning thread
                // measured nothing in 300 ms, and neither left its pin nor shed its colors. A
                // long turn pays for the look (a clock read until a window has passed).
                core.sample_share(shared);
            }
            if long && stealing {
                // A worker in long turns takes its inbox and publishes its line once a round,
                // a round of long turns late; after one it does both at once, so loans and posts
                // are routed a turn late at most and shares are judged on fresh lines (two
                // workers running 10 ms chunks lent each other colors on lines a round old, and
                // loans waited 10 to 60 ms to be seen). The share first: it takes a waiting
                // thief's request from the slot as its answer, and the request's message, routed
                // after, finds it answered (routed first, it answered with half of the line and
                // the share lent the same thief half of the rest).
                steal::share_behind_long_turn(&mut core, shared, 2);
                core.take_inbox(shared);
                core.publish_ready(shared);
                shared_before_next = true;
                // Advertise what is left now, not `NUDGE_EVERY` long turns later.
                core.nudge_cooldown = 0;
            }
            if stealing {
                // Thieves judge victims by the ready count (by the advertised backlog with
                // `Steal::Backlog`, refreshed by the nudge), and a sleeper is woken to steal:
                // after every turn, so both hold through a long round, not only at its end.
                if shared.config.steal != crate::Steal::Backlog {
                    core.publish_ready(shared);
                }
                steal::nudge_sleepers(&mut core, shared, turn_ns);
            }
            steal::answer(&mut core, shared);
            if shared.stopping() {
                break;
            }
        }
        ran
    }

    /// Runs the events of a turn (up to the turn's budget, cut short for a thief's request
    /// when `turn.looks`); with `OPEN`, each with the core open to stand-ins (`stand_in`).
    /// Returns how many ran.
    #[inline(always)]
    fn run_turn<const OPEN: bool>(&self, turn: Turn) -> usize {
        let shared = &*self.shared;
        let Turn {
            key,
            color,
            first,
            budget,
            looks,
            timed_events,
            sampled,
            mut opens,
            window_from,
        } = turn;
        let mut next = first;
        let mut n = 0;
        while let Some(task) = next {
            let started = timed_events.then(Instant::now);
            // The handler's time ends with it, not after a wait for a stand-in to leave (a
            // stand-in descheduled there made an empty event of a busy test's measure 2.4 ms).
            let (waited, ended) = if OPEN && n < opens {
                let waiting = self.core.borrow().queue.ready_len() > 0;
                // A turn's first event is timed when all of them would open: the color's cost
                // is its turns', and a turn's time holds what the worker did between its
                // events (the inbox it routed), which a collector's turns of 40 ns events,
                // routing a fan-in's messages, measured at 1-60 us an event.
                let probe =
                    (n == 0 && opens == usize::MAX).then(|| started.unwrap_or_else(Instant::now));
                self.core.open(waiting);
                self.run_task(color, task);
                let ended = (started.is_some() || probe.is_some()).then(Instant::now);
                let waited = self.core.close();
                if let (Some(t0), Some(t1)) = (probe, ended) {
                    let took = t1.saturating_duration_since(t0);
                    opens = crate::stand_in::open_after_first(took, window_from);
                }
                (waited, ended.filter(|_| started.is_some()))
            } else {
                self.run_task(color, task);
                (false, started.map(|_| Instant::now()))
            };
            n += 1;
            let mut core = self.core.borrow_mut();
            if waited {
                core.counters.add(Counter::StandInWaits, 1);
            }
            if let (Some(t), Some(e)) = (started, ended) {
                core.ran_timed(color, t, e, sampled);
            }
            let me = core.id;
            let asked = || {
                // Relaxed: a look; the answer takes the request with a swap.
                let poke = &shared.remotes[me].poke;
                poke.steal_request.load(Ordering::Relaxed) != 0
                    || poke.recall.load(Ordering::Relaxed)
            };
            let cut = looks && steal::cuts_turn(n, asked);
            next = if n < budget && !cut { core.queue.pop(key) } else { None };
            core.after_event(shared, key, next.is_some());
        }
        n
    }

    fn run_task(&self, color: Color, task: Task) {
        let Err(payload) = catch_unwind(AssertUnwindSafe(|| task.run())) else {
            return;
        };
        self.panicked(color, payload);
    }

    /// Counts and records a handler's panic (or aborts the run, by configuration); also for
    /// reads, which catch their own to name the color read (`reader`).
    pub(crate) fn panicked(&self, color: Color, payload: Box<dyn std::any::Any + Send>) {
        let message = panic_message(payload.as_ref());
        // Dropping a payload can itself panic; keep that from unwinding into the run loop.
        let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
        self.core.borrow_mut().counters.add(Counter::Panics, 1);
        let shared = &*self.shared;
        if shared.config.abort_on_panic {
            shared.abort(Error::HandlerPanicked {
                color,
                worker: self.id,
                message: message.clone(),
            });
        }
        shared.record_panic(PanicRecord { color, worker: self.id, message });
    }
}

/// Where an idle color at home on worker `me` (getting `mine` of its CPU, `home_ready` colors
/// waiting), posted to by `from` with this `traffic`, goes (`Core::receive_post`).
#[inline]
fn moves_to(
    shared: &Shared,
    me: usize,
    mine: u32,
    home_ready: usize,
    from: Option<(Sender, bool, bool)>,
    traffic: follow::Traffic,
    cost: u64,
) -> Option<usize> {
    // Relaxed: hints, published by each worker at the end of its rounds.
    let status = |w: usize| &shared.remotes[w].status;
    let share = |w: usize| status(w).cpu_share.load(Ordering::Relaxed) as u32;
    if let Some((sender, step, stream)) = from {
        let cheap = follow::cheap(cost);
        let moves = follow::worth_asking(&traffic, sender.quiet, step, stream && cheap)
            && follow::moves(&follow::Offer {
                traffic,
                quiet: sender.quiet,
                step,
                stream,
                cheap,
                poster_ready: sender.ready as usize,
                home_ready,
                poster_share: share(sender.id),
                home_share: share(me),
            });
        if moves {
            return Some(sender.id);
        }
    }
    // Off a shared CPU, with the post (`follow::relief`).
    if !shared.config.follow {
        return None;
    }
    relief(shared, me, mine)
}

/// Posts made on a worker so far to colors on it and to colors elsewhere (forwards included),
/// from its counters (`follow::TurnSample`).
#[inline]
fn post_totals(counters: &Counters) -> follow::PostTotals {
    let (local, forwards) = (counters.get(Counter::PostsLocal), counters.get(Counter::Forwards));
    // Wrapping: forwards of posts received from elsewhere count too, so the difference may pass
    // below zero; within a turn it only grows (`TurnSample::posted_elsewhere`).
    (local.wrapping_sub(forwards), counters.get(Counter::PostsRemote).wrapping_add(forwards))
}

/// What this worker knows of worker `w` for `follow`'s decisions and the shares behind long
/// turns (`steal::long_turn_thief`; Relaxed: hints other workers publish).
pub(crate) fn peer(shared: &Shared, w: usize) -> follow::Peer {
    let status = &shared.remotes[w].status;
    follow::Peer {
        id: w,
        idle: status.idle.load(Ordering::Relaxed),
        share: status.cpu_share.load(Ordering::Relaxed) as u32,
    }
}

/// Where worker `me`, getting `mine` of its CPU, should send an idle color (`follow::relief`).
#[inline]
fn relief(shared: &Shared, me: usize, mine: u32) -> Option<usize> {
    // Among the homes: a standby's share is never measured (`steal::steals`).
    let homes = 0..shared.placement.homes;
    follow::relief(mine, || homes.filter(|&w| w != me).map(|w| peer(shared, w)))
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic payload>".to_string()
    }
}

/// How a turn is timed: a cost sample (`steal::turn_sample`), which stands for every color not
/// timed yet (the worker's average) as well as its own, or a watched turn (a color not known to
/// be short), its color's own cost only (first turns and long colors would lift the average).
#[derive(Clone, Copy)]
enum TurnTimer {
    Sampled(crate::turn_clock::Stamp),
    Watched(crate::turn_clock::Stamp),
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::color::Placement;
    use crate::Config;

    fn color_on(w: usize, n: usize) -> Color {
        (1..).map(Color).find(|&c| home_of(c, Placement::flat(n)) == w).unwrap()
    }

    /// A handler on worker 0 streams to a color of worker 1 that has just moved here (its
    /// fence not synced yet): its first post is held and asks the home to sync, and that request
    /// is delivered at once (not with the end of the turn); the home's answer is filed within
    /// the handler after a batch's worth of held posts, and the later posts are not held.
    #[test]
    fn posts_held_by_a_fresh_guest_are_let_in_during_the_handler() {
        let config = Config::default();
        let topology = crate::topology::Topology::flat(vec![0, 1]);
        let shared = Shared::new(
            config.clone(),
            2,
            2,
            crate::wakeup_latency::Threshold::Set(Duration::ZERO),
            1,
            &topology,
        )
        .unwrap();
        let mut core = Core::new(0, Placement::flat(2), &config, crate::stall::Beat::off());
        let (producer, counter) = (color_on(0, 2), color_on(1, 2));
        core.queue.adopt_moved(counter, 1, None, false, false);
        let _ = core.queue.post(producer, Task::new(|| {}), false);
        let (key, _) = core.queue.start_turn().unwrap();
        drop(core.queue.pop(key));
        let post = |core: &mut Core| core.post(&shared, counter, Task::new(|| {}), false);
        post(&mut core);
        let at_home: Vec<Msg> = shared.remotes[1].poke.inbox.take_batches().flatten().collect();
        let epoch = match at_home.as_slice() {
            [Msg::Sync { color, from: 0, epoch }] if *color == counter => *epoch,
            other => panic!("the home got {} messages, not the Sync alone", other.len()),
        };
        // The home's answer arrives while the handler goes on posting.
        let answer = vec![Msg::Synced { color: counter, epoch }];
        shared.remotes[0].deliver_batch(answer, crate::inbox::Sender::worker(1));
        for _ in 1..100 {
            post(&mut core);
        }
        let held = core.counters.snapshot().posts_held;
        assert_eq!(held, u64::from(HELD_FILE_EVERY), "filed after a batch's worth, then let in");
    }
}
