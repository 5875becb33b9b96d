//! Per-worker counters (the seeds' "lightProf": what made every result explainable).
//!
//! Each worker counts into a plain array it alone owns (no atomics on the hot path) and publishes
//! a copy into its padded, shared [`Published`] block at the end of every round, with relaxed
//! stores. A snapshot from any thread therefore costs no synchronization with the workers and is at
//! most one round old; the run report is exact because it is read after the workers have stopped.

use serde::{Deserialize, Serialize};

use crate::sync::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[$doc:meta])* $field:ident = $variant:ident, )*) => {
        /// One counter of a worker.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub(crate) enum Counter { $($variant,)* }

        pub(crate) const COUNTERS: usize = [$(Counter::$variant,)*].len();

        /// What one worker did (in a run report: during that run; in a snapshot: since the runtime
        /// was built).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct WorkerStats {
            $( $(#[$doc])* pub $field: u64, )*
        }

        impl WorkerStats {
            pub(crate) fn from_array(a: &[u64; COUNTERS]) -> Self {
                WorkerStats { $($field: a[Counter::$variant as usize],)* }
            }

            /// Field-wise `self - earlier`, saturating (for per-run deltas); the gauges
            /// (`ema_live_bytes`, `ema_blocks`, `ema_crumbs`, `cpu_share`, `unpinned`) keep
            /// `self`'s value.
            pub fn since(&self, earlier: &WorkerStats) -> WorkerStats {
                let mut d = WorkerStats { $($field: self.$field.saturating_sub(earlier.$field),)* };
                d.ema_live_bytes = self.ema_live_bytes;
                d.ema_blocks = self.ema_blocks;
                d.ema_crumbs = self.ema_crumbs;
                d.cpu_share = self.cpu_share;
                d.unpinned = self.unpinned;
                d
            }

            /// Field-wise sum.
            pub fn add(&self, other: &WorkerStats) -> WorkerStats {
                WorkerStats { $($field: self.$field + other.$field,)* }
            }
        }
    };
}

counters! {
    /// Events run (including those that panicked).
    events_run = EventsRun,
    /// Events posted by this worker's handlers and queued on this worker.
    posts_local = PostsLocal,
    /// Events posted by this worker's handlers to another worker.
    posts_remote = PostsRemote,
    /// Of the posts above, those posted urgent (head of the color's queue).
    posts_urgent = PostsUrgent,
    /// Local posts held until the home of the guest color they went to confirmed that nothing
    /// of their poster color was still on its way there (`queue`, "Order per poster color").
    posts_held = PostsHeld,
    /// Outgoing batches handed to other workers.
    batches_sent = BatchesSent,
    /// Messages in those batches (mean batch size = batched_msgs / batches_sent).
    batched_msgs = BatchedMsgs,
    /// Of the batches sent, those flushed by the safety timer in the middle of a round.
    safety_flushes = SafetyFlushes,
    /// Share of its CPU this worker got when it wanted to run, in thousandths, as last measured
    /// for placement (`place`; 1000 until measured, and where it cannot be).
    cpu_share = CpuShare,
    /// 1 if this worker, pinned, had left its CPU's pin at the end of the run because other
    /// processes shared the CPUs (`Config::unpin_when_shared`); 0 otherwise.
    #[serde(default)]
    unpinned = Unpinned,
    /// Turns that posted a burst to other workers and flushed every buffer at their end.
    burst_flushes = BurstFlushes,
    /// Buffers this worker allocated for outgoing batches; the others were reused: buffers of
    /// received batches, or given back by the workers it sent them to (`outbox`).
    batch_buffers = BatchBuffers,
    /// Messages taken from this worker's inbox.
    msgs_received = MsgsReceived,
    /// Events this worker, as home of a lent color, passed on to the borrower.
    forwards = Forwards,
    /// Rounds of the run loop (inbox look, events, flush).
    rounds = Rounds,
    /// Times this worker spun while idle.
    spins = Spins,
    /// Of those, the times work arrived while spinning (a sleep avoided).
    spin_wins = SpinWins,
    /// Spins cut short because the CPU was found shared with another thread.
    spins_cut = SpinsCut,
    /// Times this worker went to sleep.
    sleeps = Sleeps,
    /// Wake-ups this worker sent to sleeping workers.
    wakeups_sent = WakeupsSent,
    /// Colors this worker, their home, moved to another worker for good (`follow`): to one
    /// posting to them, or off this worker's shared CPU.
    colors_moved_out = ColorsMovedOut,
    /// Colors moved to this worker by their homes because it posted to them.
    colors_moved_in = ColorsMovedIn,
    /// Of those, the colors this worker gave back home because their posts came from elsewhere.
    colors_given_back = ColorsGivenBack,
    /// Steal requests this worker made.
    steal_attempts = StealAttempts,
    /// Colors this worker received by stealing (asked, or lent unasked behind a long turn).
    steals_in = StealsIn,
    /// Colors this worker lent to thieves (asked, or unasked after long turns).
    steals_out = StealsOut,
    /// Long turns before or after which this worker lent waiting colors unasked, to an idle
    /// worker or one color to a busier one (`steal::share_behind_long_turn`).
    #[serde(default)]
    long_turn_shares = LongTurnShares,
    /// Times an idle worker stood in for this one while this one was stuck in a handler
    /// (descheduled, or in a long one) or asleep and waiting for its CPU, with work waiting:
    /// the stand-in routed this worker's inbox and lent itself its waiting colors
    /// (`stand_in`).
    #[serde(default)]
    stood_in_for = StoodInFor,
    /// Colors lent to this worker that a stand-in took back to their home (itself) while this
    /// worker's thread was stuck (`Core::stand_in`).
    #[serde(default)]
    stood_in_give_backs = StoodInGiveBacks,
    /// Handlers after which this worker waited for a stand-in to leave its core (`stand_in`).
    #[serde(default)]
    stand_in_waits = StandInWaits,
    /// Colors this worker, their home, took back with their events from the thief they were
    /// lent to, idle itself while colors waited there (`steal::recall`).
    #[serde(default)]
    recalls = Recalls,
    /// Run ends this worker, finding its run quiescent or shutting it down from a handler,
    /// counted for workers asleep on CPUs shared with other processes (measured, or late to an
    /// end lately), which slept through them (`Config::sleep_through_ends`).
    #[serde(default)]
    ends_slept_through = EndsSleptThrough,
    /// Events that came with the colors this worker stole.
    stolen_events = StolenEvents,
    /// Steal requests answered with nothing (the victim had nothing lendable any more).
    steal_failures = StealFailures,
    /// Sum over the colors stolen of the victim's tier (1 = nearest group of workers in the
    /// topology); mean distance = steal_tiers / steals_in.
    steal_tiers = StealTiers,
    /// Time spent searching: from each steal request to its answer, in microseconds.
    steal_wait_us = StealWaitMicros,
    /// Handlers that panicked on this worker.
    panics = Panics,
    /// Descriptors this worker started watching.
    watches = Watches,
    /// Polls of this worker's epoll set (non-blocking and blocking).
    polls = Polls,
    /// Readiness events delivered to handlers (after coalescing).
    io_events = IoEvents,
    /// Timers fired on this worker.
    timers_fired = TimersFired,
    /// Timers cancelled before firing.
    timers_cancelled = TimersCancelled,
    /// Signals delivered as events.
    signals = Signals,
    /// Accept errors (descriptor or buffer exhaustion) that made a listener back off.
    accept_errors = AcceptErrors,
    /// Gauge: bytes of EMA objects this worker's heap has handed out and not got back. Exact at
    /// the end of a run the worker ended; one that slept through the run's end on a shared CPU
    /// (`Config::sleep_through_ends`) takes back what others freed for it at its next end.
    ema_live_bytes = EmaLiveBytes,
    /// Gauge: EMA blocks (16 KiB each) this worker's heap holds.
    ema_blocks = EmaBlocks,
    /// Gauge: objects of other workers' heaps freed here and not handed back yet.
    ema_crumbs = EmaCrumbs,
    /// Objects other threads freed and handed back to this worker's heap.
    ema_remote_frees = EmaRemoteFrees,
    /// Allocations the EMA cap refused (they fell back to the global allocator).
    ema_refused = EmaRefused,
}

impl WorkerStats {
    /// Mean events per outgoing batch (0 if none was sent).
    pub fn mean_batch(&self) -> f64 {
        if self.batches_sent == 0 {
            0.0
        } else {
            self.batched_msgs as f64 / self.batches_sent as f64
        }
    }
}

/// A worker's counters as it owns them.
#[derive(Clone, Debug)]
pub(crate) struct Counters(pub(crate) [u64; COUNTERS]);

impl Counters {
    pub(crate) fn new() -> Self {
        Counters([0; COUNTERS])
    }

    #[inline]
    pub(crate) fn add(&mut self, c: Counter, n: u64) {
        self.0[c as usize] += n;
    }

    #[inline]
    pub(crate) fn get(&self, c: Counter) -> u64 {
        self.0[c as usize]
    }

    /// Sets a gauge, or a counter kept elsewhere.
    #[inline]
    pub(crate) fn set(&mut self, c: Counter, v: u64) {
        self.0[c as usize] = v;
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn snapshot(&self) -> WorkerStats {
        WorkerStats::from_array(&self.0)
    }
}

/// The copy of a worker's counters that other threads read.
pub(crate) struct Published {
    values: [AtomicU64; COUNTERS],
}

impl Published {
    pub(crate) fn new() -> Self {
        Published { values: std::array::from_fn(|_| AtomicU64::new(0)) }
    }

    pub(crate) fn publish(&self, c: &Counters) {
        for (slot, v) in self.values.iter().zip(c.0.iter()) {
            // Relaxed: a snapshot needs no ordering with the worker's other memory.
            slot.store(*v, Ordering::Relaxed);
        }
    }

    pub(crate) fn read(&self) -> WorkerStats {
        let mut a = [0u64; COUNTERS];
        for (v, slot) in a.iter_mut().zip(self.values.iter()) {
            *v = slot.load(Ordering::Relaxed);
        }
        WorkerStats::from_array(&a)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn counters_map_to_named_fields() {
        let mut c = Counters::new();
        c.add(Counter::EventsRun, 5);
        c.add(Counter::StealsIn, 2);
        c.add(Counter::Panics, 1);
        let s = c.snapshot();
        assert_eq!((s.events_run, s.steals_in, s.panics, s.posts_local), (5, 2, 1, 0));
        let p = Published::new();
        p.publish(&c);
        assert_eq!(p.read(), s);
        let later = s.add(&s);
        assert_eq!(later.since(&s), s);
        assert_eq!(later.events_run, 10);
    }

    #[test]
    fn mean_batch() {
        let s = WorkerStats { batches_sent: 4, batched_msgs: 10, ..Default::default() };
        assert_eq!(s.mean_batch(), 2.5);
        assert_eq!(WorkerStats::default().mean_batch(), 0.0);
    }

    #[test]
    fn stats_serialize_to_json_with_named_fields() {
        let s = WorkerStats { events_run: 3, ..Default::default() };
        let v = serde_json::to_value(s).unwrap();
        assert_eq!(v["events_run"], 3);
        assert_eq!(v.as_object().unwrap().len(), COUNTERS);
    }
}
