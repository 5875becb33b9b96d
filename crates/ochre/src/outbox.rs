//! A worker's outgoing buffers: one per destination worker (thesis §5.3.2, batched posting).
//!
//! Owned by one worker, never shared. A post to another worker appends to the buffer for that
//! worker; the worker hands a whole buffer to the destination's inbox in one synchronization when
//! (a) it is full ([`Config::batch_size`](crate::Config)), (b) the worker ends a round or goes
//! idle, so progress never waits for a timer, (c) at the end of a turn, if the destination is
//! idle (holding work back from an idle worker saves nothing: `worker`), or if the turn posted a
//! burst (a quarter of a batch or more, of [`Outbox::burst_size`]: the tail of a fan-out would
//! otherwise wait for the end of the round while its receivers run dry), (d) the *safety
//! flush*: a buffer seen pending for longer than `safety_flush_factor` times the mean interval
//! between natural (full-buffer) flushes is sent even in the middle of a long round, or (e) it
//! is a turn's first buffer to a destination, has reached an eighth of a batch, and the
//! destination is idle: a fan-out then starts an idle receiver after a few posts instead of a
//! whole batch ([`Outbox::offers_early`]).
//!
//! Buffers of received batches are kept (a few) and reused for outgoing ones; past that, they go
//! back to the worker that sent them, into its [`Returns`] queue (one push per buffer, a batch of
//! messages), where it looks before it allocates. So a batch costs no allocation where messages
//! flow both ways, nor where they flow one way (a producer streaming to a counter, a fan-out):
//! the buffers circulate between the two workers instead of being allocated by one and freed by
//! the other, batch after batch: with glibc, a free on another thread than the allocation's takes
//! the arena's lock that the allocating thread holds, and the two threads then meet in futex
//! waits (measured: a sixth of a one-way stream's time). A worker keeps at most `MAX_SPARES`
//! spares, and its returns queue holds at most `MAX_RETURNS`, whatever the number of workers.
//!
//! With [`BatchSize::Adaptive`] (the default) each destination's size is tuned: when its
//! buffer leaves full, the worker tells [`Outbox::left_full`] whether the destination was idle
//! and how many colors wait there, and `tune::next_batch_size` gives the next size (the rule and its reasons are in `tune`).
//! Buffers then have the capacity of the largest size, so that none reallocates as it grows.
//! With the environment variable `OCHRE_TUNE_DEBUG` set, each outbox prints at its drop what
//! the rule saw and decided per destination (a developer's view of the rule on a real run;
//! counted only when a batch leaves full, never on a post).
//!
//! The safety check reads the clock only every few events and only when something is pending; a
//! buffer's age is counted from the first check that saw it pending, so posting itself never reads
//! the clock. The age is thus underestimated by at most one check interval.

use std::time::{Duration, Instant};

use crate::config::BatchSize;
use crate::message::Msg;
use crate::tune;

/// Starting guess for the mean interval between natural flushes, before any was seen.
const INITIAL_INTERVAL: Duration = Duration::from_micros(50);
/// Bounds of the measured mean interval, so one odd gap cannot disable or spin the safety flush.
const MIN_INTERVAL: Duration = Duration::from_micros(1);
const MAX_INTERVAL: Duration = Duration::from_millis(10);

struct OutSlot {
    msgs: Vec<Msg>,
    /// When a safety check first saw this buffer pending.
    seen_pending: Option<Instant>,
    last_natural: Option<Instant>,
    /// Exponential moving average (weight 1/8) of intervals between natural flushes.
    mean_interval: Duration,
    /// The turn in which this buffer last offered an early batch ([`Outbox::offers_early`]).
    early_turn: u64,
    /// Messages at which this buffer leaves full: the configured size, or the tuned one.
    size: usize,
    /// How the last full batch filled, for the size tuning (`tune::Fill`).
    fill: tune::Fill,
    /// No batch left this buffer before it was full since the last one that left full: the
    /// time between the two full ones is then how long the last one took to fill.
    filled_whole: bool,
    /// The turn in which the last full batch left.
    full_turn: u64,
    /// Full batches that left earlier in that turn.
    in_turn: u32,
}

/// Emptied batch buffers given back to a worker by those it sent them to, taken by the worker
/// when it has no spare of its own (`Remote::returns`): the one piece of an outbox that other
/// workers touch, a bounded lock-free queue.
pub(crate) type Returns = crossbeam_queue::ArrayQueue<Vec<Msg>>;

/// An empty [`Returns`] queue.
pub(crate) fn returns() -> Returns {
    Returns::new(MAX_RETURNS)
}

/// Outgoing buffers of one worker, indexed by destination.
pub(crate) struct Outbox {
    slots: Vec<OutSlot>,
    batch_size: usize,
    /// How sizes are chosen, and the capacity of a new buffer (the largest size).
    sizing: BatchSize,
    capacity: usize,
    /// Where sizes start, and where a grown one comes back to (`tune::after_partial_batch`).
    start: usize,
    factor: f64,
    /// Destinations whose buffers are non-empty, so that flushing costs nothing when there is
    /// nothing to flush and visits only what is pending otherwise.
    pending: Vec<usize>,
    /// Emptied buffers of received batches, reused for outgoing ones: a batch buffer is a
    /// `batch_size`-message allocation, too large for the allocator's thread caches, that the
    /// receiver would otherwise free (a cross-thread free) and the sender allocate anew, per
    /// batch. Where messages flow both ways no batch allocates at all.
    spares: Vec<Vec<Msg>>,
    /// Buffers allocated since the last [`Outbox::take_allocated`] (a statistic).
    allocated: u64,
    /// Size of a turn's early batch to a destination ([`Outbox::offers_early`]).
    early_at: usize,
    /// Turns ended so far (starts at 1 so that no slot has offered in the current turn).
    turn: u64,
    /// With `OCHRE_TUNE_DEBUG` set and tuned sizes: what the size rule saw and decided, printed
    /// when the outbox is dropped (a developer's view of the rule on a real run).
    debug: Option<Box<TuneDebug>>,
}

/// What the size rule saw and decided, per destination (`OCHRE_TUNE_DEBUG`).
#[derive(Default)]
struct TuneDebug {
    to: Vec<RuleSeen>,
}

/// What the size rule saw and decided for one destination, over the full batches sent there.
#[derive(Clone, Copy, Default)]
struct RuleSeen {
    batches: u64,
    grew: u64,
    kept_busy: u64,
    kept_idle: u64,
    shrank: u64,
    /// Sums, for the means: batch sizes, colors waiting at the receiver, fill times (ns).
    sizes: u64,
    ready: u64,
    fill_ns: u64,
}

/// A turn's first batch to a destination may go early, at `batch_size / EARLY_FRACTION`
/// messages, and at [`EARLY_MIN`] at least (see [`Outbox::offers_early`]).
const EARLY_FRACTION: usize = 8;

/// The smallest early batch. An early batch of one message leaves as the handler posts it,
/// before the handler returns and the worker knows whether that post was its only one to
/// another worker (a chain's step, `mark_step`), so it travels unmarked and `follow` never
/// moves the next color of the chain: with `batch_size(8)` (an early batch of one) a
/// one-token ring of 1000 plain colors stayed spread over two workers and ran at 2.0-2.1M hops
/// a second against 16.9-17.0M with 16 or 32 (`ring_probe 1 4`, `FRESH=1`, `BATCH=n`).
const EARLY_MIN: usize = 2;

/// The smallest batch that leaves full, whatever `Config::batch_size` says: a batch of one left
/// as its handler posted it, unmarked as a chain's step for the reason [`EARLY_MIN`] gives, and
/// with `batch_size(1)` the one-token ring of 1000 plain colors ran at 2.3M hops a second (17M
/// with 2). A message of a batch of two that its handler does not fill leaves at the end of
/// the handler's round, as any batch's last.
const SMALLEST_BATCH: usize = 2;

/// Whether a turn that sent `turn_sends` messages to other workers was a burst, after which
/// every outgoing buffer leaves at once (a fan-out, whose receivers are about to run out of the
/// part already sent, and whose batches are already large): a quarter of `batch_size`
/// ([`Outbox::burst_size`]), at least 2. The policy of the worker's end-of-turn flush, shared
/// with the simulator (`sim`).
pub(crate) fn is_burst(turn_sends: u32, batch_size: usize) -> bool {
    turn_sends as usize >= (batch_size / 4).max(2)
}

/// How many events run between two safety-flush checks (each check may read the clock). The
/// worker and the simulator check as often.
pub(crate) const SAFETY_CHECK_EVERY: u32 = 16;

/// Spare buffers kept at most.
const MAX_SPARES: usize = 8;

/// Buffers a worker's returns queue holds at most. A fan-out's receiver can fall behind by many
/// batches, and gives them back all at once when it files them; with room for 8, the rest were
/// freed there and allocated anew by the poster, and the two threads met on glibc's arena lock
/// (futex wakes on the poster, 3% of its time in a 60-color fan-out at 2 workers).
const MAX_RETURNS: usize = 64;

impl Outbox {
    pub(crate) fn new(workers: usize, batch_size: usize, factor: f64) -> Self {
        let batch_size = batch_size.max(SMALLEST_BATCH);
        Outbox {
            slots: (0..workers)
                .map(|_| OutSlot {
                    msgs: Vec::new(),
                    seen_pending: None,
                    last_natural: None,
                    mean_interval: INITIAL_INTERVAL,
                    early_turn: 0,
                    size: batch_size,
                    fill: tune::Fill::default(),
                    filled_whole: false,
                    full_turn: 0,
                    in_turn: 0,
                })
                .collect(),
            batch_size,
            sizing: BatchSize::Fixed,
            capacity: batch_size,
            start: batch_size,
            factor,
            pending: Vec::with_capacity(workers),
            spares: Vec::new(),
            allocated: 0,
            early_at: (batch_size / EARLY_FRACTION).max(EARLY_MIN),
            turn: 1,
            debug: None,
        }
    }

    /// The same outbox with its batch sizes chosen by `sizing` (fixed until this is called).
    pub(crate) fn sized(mut self, sizing: BatchSize) -> Self {
        let (start, capacity) = match sizing {
            BatchSize::Fixed => (self.batch_size, self.batch_size),
            BatchSize::Adaptive => (
                self.batch_size.clamp(tune::MIN_BATCH, tune::MAX_BATCH),
                tune::MAX_BATCH.max(self.batch_size),
            ),
        };
        (self.sizing, self.capacity, self.start) = (sizing, capacity, start);
        for slot in &mut self.slots {
            slot.size = start;
        }
        if sizing == BatchSize::Adaptive && std::env::var_os("OCHRE_TUNE_DEBUG").is_some() {
            let n = self.slots.len();
            self.debug = Some(Box::new(TuneDebug { to: vec![RuleSeen::default(); n] }));
        }
        self
    }

    /// Called when the buffer for `dest` has just left full ([`push`](Self::push) returned
    /// it), before it is delivered: with tuned sizes, what the sender sees of the destination
    /// (`receiver`, read only then) sets its next size (`tune::next_batch_size`).
    #[inline]
    pub(crate) fn left_full(&mut self, dest: usize, receiver: impl FnOnce() -> tune::Receiver) {
        if self.sizing == BatchSize::Adaptive {
            let slot = &mut self.slots[dest];
            let seen = receiver();
            let next = tune::next_batch_size(slot.size, seen, slot.fill);
            if let Some(d) = self.debug.as_deref_mut() {
                let r = &mut d.to[dest];
                *(if next > slot.size {
                    &mut r.grew
                } else if next < slot.size {
                    &mut r.shrank
                } else if seen.idle {
                    &mut r.kept_idle
                } else {
                    &mut r.kept_busy
                }) += 1;
                r.batches += 1;
                r.sizes += slot.size as u64;
                r.ready += seen.ready as u64;
                r.fill_ns += slot.fill.took.map_or(0, |t| t.as_nanos() as u64);
            }
            slot.size = next;
        }
    }

    /// True if some buffer holds messages.
    #[inline]
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Appends a message for `dest`; returns the buffer to deliver if that filled it. A new
    /// buffer is a spare, else one given back to this worker (`returned`, its own queue), else
    /// a new allocation.
    ///
    /// `returned` is asked only when a new buffer is needed: the sender's look-up of its own
    /// queue, made before every push, was a bounds check and an index a remote post.
    #[inline]
    pub(crate) fn push<'r>(
        &mut self,
        dest: usize,
        msg: Msg,
        returned: impl FnOnce() -> &'r Returns,
    ) -> Option<Vec<Msg>> {
        self.push_at(dest, msg, returned, Instant::now)
    }

    /// [`push`](Self::push) with the clock given: `now` is read only when the buffer fills (the
    /// simulator passes its virtual clock).
    #[inline]
    pub(crate) fn push_at<'r>(
        &mut self,
        dest: usize,
        msg: Msg,
        returned: impl FnOnce() -> &'r Returns,
        now: impl FnOnce() -> Instant,
    ) -> Option<Vec<Msg>> {
        let slot = &mut self.slots[dest];
        if slot.msgs.is_empty() {
            self.pending.push(dest);
            if slot.msgs.capacity() == 0 {
                slot.msgs = self.spares.pop().or_else(|| returned().pop()).unwrap_or_else(|| {
                    self.allocated += 1;
                    Vec::with_capacity(self.capacity)
                });
            }
        }
        slot.msgs.push(msg);
        if slot.msgs.len() < slot.size {
            return None;
        }
        let now = now();
        let mut took = None;
        if let Some(last) = slot.last_natural {
            let gap = now.saturating_duration_since(last);
            let clamped = gap.clamp(MIN_INTERVAL, MAX_INTERVAL);
            slot.mean_interval = (slot.mean_interval * 7 + clamped) / 8;
            took = slot.filled_whole.then_some(gap);
        }
        slot.in_turn = if slot.full_turn == self.turn { slot.in_turn.saturating_add(1) } else { 0 };
        slot.fill = tune::Fill { took, in_turn: slot.in_turn };
        slot.full_turn = self.turn;
        slot.last_natural = Some(now);
        // Full: the size rule is `left_full`'s.
        let batch = self.take(dest, || false);
        self.slots[dest].filled_whole = true;
        Some(batch)
    }

    /// Marks the last message buffered for `dest`, if it is a post, as a chain step (`follow`).
    #[inline]
    pub(crate) fn mark_step(&mut self, dest: usize) {
        if let Some(step) = self.slots[dest].msgs.last_mut().and_then(Msg::post_step_mut) {
            *step = true;
        }
    }

    /// True once per turn and destination, when the buffer for `dest` has just reached the early
    /// batch size: the caller sends it now if `dest` is idle. Without it, a receiver idle at the
    /// start of a fan-out waits for a full batch (and then files all of it before it runs the
    /// first event): 3-4 us of a producer-consumer round at 2 workers, against 1.5 with it.
    /// Batches stay large: only a turn's first one to a destination can be small, and the
    /// destination's idle flag (a line it writes) is read at most once per turn and destination.
    #[inline]
    pub(crate) fn offers_early(&mut self, dest: usize) -> bool {
        let slot = &mut self.slots[dest];
        if slot.msgs.len() != self.early_at || slot.early_turn == self.turn {
            return false;
        }
        slot.early_turn = self.turn;
        true
    }

    /// Ends the current turn (for [`offers_early`](Self::offers_early)).
    #[inline]
    pub(crate) fn end_turn(&mut self) {
        self.turn += 1;
    }

    /// Keeps an emptied buffer for a later outgoing batch, or, with spares enough here, gives
    /// it back to `sender`, the [`Returns`] queue of the worker whose batch it carried (dropped
    /// if that is full, or if there is none). A worker that mostly receives would otherwise
    /// free, batch after batch, the buffers that its sender allocates anew.
    pub(crate) fn recycle(&mut self, buf: Vec<Msg>, sender: Option<&Returns>) {
        debug_assert!(buf.is_empty());
        if buf.capacity() < self.capacity {
            return;
        }
        if self.spares.len() < MAX_SPARES {
            self.spares.push(buf);
        } else if let Some(queue) = sender {
            let _ = queue.push(buf);
        }
    }

    /// The batch size a turn's sends are measured against to tell a burst ([`is_burst`]): the
    /// configured size, or, with tuned sizes, the largest size of a destination with messages
    /// waiting if that is larger.
    ///
    /// Why the tuned one: a size grows where its receiver is busy, and there a burst's flush
    /// splits each turn's sends into more, smaller batches than the size asks for. Bank's
    /// account turns (about 32 credits each to the other worker) were all bursts at the
    /// configured 32, so their batches left at each turn's end whatever the tuned size. `bench
    /// tuning --quick`, medians of six processes of each variant, bank's tuned / fixed default
    /// and tuned / fixed 128: with `tune::after_partial_batch`'s idle-receiver rule alone 0.97
    /// and 0.94; with this size too 1.03 and 0.97, the 64-token ring unchanged (1.00, 1.01);
    /// with a quarter of `MAX_BATCH` whatever the destinations, bank 1.07 but the ring 0.96.
    ///
    /// Left as they are, two effects a review pointed out: a size grown for a busy receiver
    /// keeps itself (turns of fewer sends are no longer bursts, their batches fill and leave
    /// full, and a partial one shrinks it only once the receiver is idle); and one destination
    /// with a grown size and an old message waiting raises the threshold for the turn's other
    /// destinations (their idle ones still get their buffers at the turn's end). Producer-
    /// consumer's receiver, which the shrinking was made for, is idle at its producer's turn's
    /// end, and the study's other cases did not move.
    pub(crate) fn burst_size(&self) -> usize {
        // Not on every turn: `ends_burst` asks only when the configured size says burst.
        let mut size = self.batch_size;
        if self.sizing == BatchSize::Adaptive {
            for &d in &self.pending {
                size = size.max(self.slots[d].size);
            }
        }
        size
    }

    /// Whether a turn that sent `turn_sends` messages to other workers was a burst
    /// ([`is_burst`] against [`burst_size`](Self::burst_size)): the policy of the end-of-turn
    /// flush, called by the worker and the simulator. The configured size is asked first (the
    /// tuned ones are never smaller), so a turn that posted little elsewhere, most turns, costs
    /// a comparison and no look at the destinations.
    pub(crate) fn ends_burst(&self, turn_sends: u32) -> bool {
        is_burst(turn_sends, self.batch_size) && is_burst(turn_sends, self.burst_size())
    }

    /// Takes the buffer for `dest` (possibly empty); `idle`: whether `dest` shows itself idle,
    /// asked only when a tuned size may come down because the batch leaves before it is full.
    pub(crate) fn take(&mut self, dest: usize, idle: impl FnOnce() -> bool) -> Vec<Msg> {
        let slot = &mut self.slots[dest];
        if !slot.msgs.is_empty() {
            if let Some(i) = self.pending.iter().position(|&d| d == dest) {
                self.pending.swap_remove(i);
            }
            slot.filled_whole = false;
            if self.sizing == BatchSize::Adaptive
                && slot.msgs.len() < slot.size
                && slot.size > self.start
            {
                // Leaving before it is full: the size the rule grew may be more than the turns
                // post now (`tune::after_partial_batch`).
                let sent = slot.msgs.len();
                slot.size = tune::after_partial_batch(slot.size, sent, self.start, idle());
            }
        }
        slot.seen_pending = None;
        std::mem::take(&mut slot.msgs)
    }

    /// Buffers allocated since the last call.
    pub(crate) fn take_allocated(&mut self) -> u64 {
        std::mem::take(&mut self.allocated)
    }

    /// Destinations whose buffers are non-empty.
    pub(crate) fn pending_dests(&self) -> &[usize] {
        &self.pending
    }

    /// A destination other than `dest` whose buffer is non-empty (to send them all before a
    /// message that hands a color over to `dest`: `Msg::hands_over_a_color`).
    pub(crate) fn pending_other_than(&self, dest: usize) -> Option<usize> {
        self.pending.iter().copied().find(|&d| d != dest)
    }

    /// Destinations whose buffers are overdue for a safety flush at `now`; starts the age of
    /// buffers seen pending for the first time.
    pub(crate) fn overdue(&mut self, now: Instant, out: &mut Vec<usize>) {
        out.clear();
        let factor = self.factor;
        for (d, slot) in self.slots.iter_mut().enumerate() {
            if slot.msgs.is_empty() {
                continue;
            }
            match slot.seen_pending {
                None => slot.seen_pending = Some(now),
                Some(since) => {
                    if now.saturating_duration_since(since) > slot.mean_interval.mul_f64(factor) {
                        out.push(d);
                    }
                }
            }
        }
    }
}

impl Drop for Outbox {
    /// Prints what the size rule decided (`OCHRE_TUNE_DEBUG`), at the end of a run.
    fn drop(&mut self) {
        let Some(d) = self.debug.as_deref() else { return };
        for (dest, r) in d.to.iter().enumerate() {
            if r.batches == 0 {
                continue;
            }
            let mean = |sum: u64| sum as f64 / r.batches as f64;
            eprintln!(
                "tune: batches to worker {dest}: {} full batches, mean size {:.1}, final {}, \
                 grow {} keep-busy {} keep-idle {} shrink {}, mean ready {:.1}, mean fill {:.1} us",
                r.batches,
                mean(r.sizes),
                self.slots[dest].size,
                r.grew,
                r.kept_busy,
                r.kept_idle,
                r.shrank,
                mean(r.ready),
                mean(r.fill_ns) / 1000.0,
            );
        }
    }
}

impl Outbox {
    #[cfg(all(test, not(loom)))]
    fn size(&self, dest: usize) -> usize {
        self.slots[dest].size
    }

    #[cfg(all(test, not(loom)))]
    fn mean_interval(&self, dest: usize) -> Duration {
        self.slots[dest].mean_interval
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::message::Task;
    use crate::Color;

    fn msg() -> Msg {
        let task = Task::new(|| {});
        Msg::Post { color: Color(1), task, urgent: false, step: false }
    }

    #[test]
    fn full_buffer_is_returned_for_delivery() {
        let r = returns();
        let mut o = Outbox::new(3, 4, 1.1);
        for _ in 0..3 {
            assert!(o.push(2, msg(), || &r).is_none());
        }
        assert!(o.has_pending());
        assert_eq!(o.pending_dests(), &[2]);
        let full = o.push(2, msg(), || &r).expect("fourth message fills the batch");
        assert_eq!(full.len(), 4);
        assert!(!o.has_pending());
    }

    #[test]
    fn an_early_batch_is_offered_once_per_turn_and_destination() {
        let r = returns();
        let mut o = Outbox::new(3, 32, 1.1);
        let early = 32 / EARLY_FRACTION;
        let offers = |o: &mut Outbox, dest: usize, n: usize| {
            (0..n).filter(|_| o.push(dest, msg(), || &r).is_none() && o.offers_early(dest)).count()
        };
        // Offered when the buffer reaches the early size, not before, not after.
        assert_eq!(offers(&mut o, 1, early - 1), 0);
        assert_eq!(offers(&mut o, 1, 1), 1);
        assert_eq!(offers(&mut o, 1, 5), 0);
        // Sent: the buffer refills to the early size in the same turn, no second offer.
        o.take(1, || true);
        assert_eq!(offers(&mut o, 1, early + 1), 0);
        // Another destination has its own offer in this turn.
        assert_eq!(offers(&mut o, 2, early), 1);
        // A new turn offers again once the buffer (emptied) reaches the size again.
        o.take(1, || true);
        o.end_turn();
        assert_eq!(offers(&mut o, 1, early), 1);
    }

    #[test]
    fn received_buffers_serve_later_batches() {
        let r = returns();
        let mut o = Outbox::new(2, 4, 1.1);
        o.push(1, msg(), || &r);
        let mut received = o.take(1, || true);
        let addr = received.as_ptr();
        received.clear();
        o.recycle(received, None);
        // The next batch, to any destination, is written into the recycled buffer.
        o.push(0, msg(), || &r);
        let again = o.take(0, || true);
        assert_eq!(again.as_ptr(), addr);
        // Too small a buffer is not kept, and at most MAX_SPARES are.
        o.recycle(Vec::with_capacity(1), None);
        for _ in 0..MAX_SPARES + 3 {
            o.recycle(Vec::with_capacity(4), None);
        }
        assert_eq!(o.spares.len(), MAX_SPARES);
        assert_eq!(o.take_allocated(), 1);
    }

    #[test]
    fn a_one_way_stream_circulates_its_buffers_instead_of_allocating() {
        // Worker 0 streams to worker 1, which never sends back.
        let (back0, back1) = (returns(), returns());
        let (mut producer, mut consumer) = (Outbox::new(2, 4, 1.1), Outbox::new(2, 4, 1.1));
        let mut addrs = std::collections::HashSet::new();
        for _ in 0..100 {
            let batch = (0..4).find_map(|_| producer.push(1, msg(), || &back0)).expect("full");
            addrs.insert(batch.as_ptr());
            let mut batch = batch;
            batch.clear();
            consumer.recycle(batch, Some(&back0));
        }
        // The consumer kept MAX_SPARES for batches of its own and gave the rest back; the
        // producer allocated only until the first came back.
        assert_eq!(consumer.spares.len(), MAX_SPARES);
        assert_eq!(producer.take_allocated() as usize, MAX_SPARES + 1);
        assert_eq!(addrs.len(), MAX_SPARES + 1);
        assert!(back1.is_empty());
        // A full returns queue drops what does not fit: a worker holds a bounded number.
        for _ in 0..MAX_RETURNS + 3 {
            consumer.recycle(Vec::with_capacity(4), Some(&back0));
        }
        assert_eq!(back0.len(), MAX_RETURNS);
    }

    #[test]
    fn take_empties_and_counts() {
        let r = returns();
        let mut o = Outbox::new(2, 8, 1.1);
        let _ = o.push(0, msg(), || &r);
        let _ = o.push(1, msg(), || &r);
        assert_eq!(o.take(0, || true).len(), 1);
        assert!(o.has_pending());
        assert_eq!(o.take(1, || true).len(), 1);
        assert!(!o.has_pending());
        assert!(o.take(1, || true).is_empty());
        assert!(!o.has_pending());
    }

    #[test]
    fn safety_flush_after_factor_times_mean_interval() {
        let r = returns();
        let mut o = Outbox::new(1, 1000, 1.1);
        let _ = o.push(0, msg(), || &r);
        let t0 = Instant::now();
        let mut due = vec![];
        o.overdue(t0, &mut due);
        assert!(due.is_empty(), "first sighting only starts the clock");
        o.overdue(t0 + INITIAL_INTERVAL, &mut due);
        assert!(due.is_empty(), "not yet 110% of the mean interval");
        o.overdue(t0 + INITIAL_INTERVAL.mul_f64(1.2), &mut due);
        assert_eq!(due, vec![0]);
    }

    #[test]
    fn tuned_sizes_follow_each_destination_and_fixed_ones_do_not_move() {
        let r = returns();
        let mut o = Outbox::new(3, 32, 1.1).sized(BatchSize::Adaptive);
        let fill = |o: &mut Outbox, dest: usize| {
            let batch = (0..1000).find_map(|_| o.push(dest, msg(), || &r)).expect("full");
            if o.sizing == BatchSize::Adaptive {
                assert!(batch.capacity() >= tune::MAX_BATCH, "no reallocation as sizes grow");
            }
            batch.len()
        };
        // Destination 1 is backlogged at every full batch, 2 is idle: their sizes part. Filled
        // at once, one per turn, 2's batches come down to the idle floor; filled slowly, below
        // it. The
        // clock is given (`push_at`): under Miri, or on a loaded machine, a real one would make
        // every fill slow.
        let idle = || tune::Receiver { idle: true, ready: 0 };
        let fill_at = |o: &mut Outbox, dest: usize, at: Instant| {
            let n = o.size(dest);
            (0..n).find_map(|_| o.push_at(dest, msg(), || &r, || at)).expect("full");
        };
        let t0 = Instant::now();
        for i in 0..20u32 {
            let n = fill(&mut o, 1);
            assert_eq!(n, o.size(1));
            o.left_full(1, || tune::Receiver { idle: false, ready: 1000 });
            fill_at(&mut o, 2, t0 + Duration::from_micros(u64::from(i)));
            o.left_full(2, idle);
            o.end_turn();
        }
        assert_eq!(o.size(1), tune::MAX_BATCH);
        assert_eq!(o.size(2), tune::IDLE_FLOOR, "an idle receiver of quickly filled batches");
        let t1 = t0 + Duration::from_secs(1);
        for i in 0..20u32 {
            fill_at(&mut o, 2, t1 + tune::LONG_FILL * 2 * i);
            o.left_full(2, idle);
        }
        assert!(o.size(2) < tune::IDLE_FLOOR && o.size(2) >= tune::MIN_BATCH, "{}", o.size(2));
        assert_eq!(fill(&mut o, 1), tune::MAX_BATCH);
        let mut fixed = Outbox::new(2, 32, 1.1);
        for _ in 0..5 {
            assert_eq!(fill(&mut fixed, 1), 32);
            fixed.left_full(1, || unreachable!("a fixed size reads nothing of the receiver"));
        }
    }

    #[test]
    fn the_rule_sees_a_fill_time_only_between_two_full_batches_and_whether_a_turn_made_both() {
        let r = returns();
        let mut o = Outbox::new(2, 32, 1.1).sized(BatchSize::Adaptive);
        let t0 = Instant::now();
        let fill_at = |o: &mut Outbox, at: Instant| {
            let n = o.size(1) - o.slots[1].msgs.len();
            (0..n).find_map(|_| o.push_at(1, msg(), || &r, || at)).expect("full");
        };
        fill_at(&mut o, t0);
        assert_eq!(o.slots[1].fill, tune::Fill { took: None, in_turn: 0 }, "the first");
        // Two full batches in one turn, 5 us apart.
        fill_at(&mut o, t0 + Duration::from_micros(5));
        let fill = o.slots[1].fill;
        assert_eq!(fill, tune::Fill { took: Some(Duration::from_micros(5)), in_turn: 1 });
        // A turn ends; a few messages leave early (end of the turn, an early batch); long
        // after, the next batch leaves full: its fill time is unknown (it would count the wait
        // with an empty buffer) and it is not the same turn's.
        o.end_turn();
        assert!(o.push_at(1, msg(), || &r, || t0).is_none(), "not full");
        assert_eq!(o.take(1, || true).len(), 1);
        fill_at(&mut o, t0 + Duration::from_secs(1));
        assert_eq!(o.slots[1].fill, tune::Fill { took: None, in_turn: 0 });
        // Its receiver idle: an unknown fill time takes the size down to the idle floor only.
        let idle = || tune::Receiver { idle: true, ready: 0 };
        for _ in 0..10 {
            o.left_full(1, idle);
        }
        assert_eq!(o.size(1), tune::IDLE_FLOOR, "an unknown fill time stops at the floor");
        // An empty buffer taken (a flush with nothing pending) leaves the next fill known.
        o.end_turn();
        assert!(o.take(1, || true).is_empty());
        fill_at(&mut o, t0 + Duration::from_secs(1) + tune::LONG_FILL * 2);
        assert_eq!(o.slots[1].fill.took, Some(tune::LONG_FILL * 2));
        o.left_full(1, idle);
        assert!(o.size(1) < tune::IDLE_FLOOR, "a slow fill to an idle receiver goes below");
    }

    /// A fan-out grows the size to the maximum; then each turn posts 50 messages, which used to
    /// leave whole at its end for good (a review's case: 5,000, then 10,000 turns of 50, kept
    /// 128). Now the size comes back until batches leave mid-turn again, once the receiver is
    /// idle when they leave (while it is busy, the size cost it nothing).
    #[test]
    // Thousands of posts: minutes under Miri, and no unsafe code of its own.
    #[cfg_attr(miri, ignore)]
    fn a_size_grown_by_a_fan_out_comes_back_when_turns_post_less() {
        let r = returns();
        let mut o = Outbox::new(2, 32, 1.1).sized(BatchSize::Adaptive);
        let t0 = Instant::now();
        let busy = || tune::Receiver { idle: false, ready: 4 };
        for _ in 0..5_000 {
            if o.push_at(1, msg(), || &r, || t0).is_some() {
                o.left_full(1, busy);
            }
        }
        assert_eq!(o.size(1), tune::MAX_BATCH, "the fan-out grew it");
        let _ = o.take(1, || false);
        // While the receiver is busy at every turn's end, it lost nothing to the size: kept.
        for turn in 0..50 {
            o.end_turn();
            for _ in 0..50 {
                assert!(o.push_at(1, msg(), || &r, || t0 + Duration::from_secs(turn)).is_none());
            }
            assert_eq!(o.take(1, || false).len(), 50);
        }
        assert_eq!(o.size(1), tune::MAX_BATCH, "kept while the receiver is busy");
        // Idle at the turns' ends (it ran what came early, and waits): the size comes back.
        for turn in 0..200 {
            o.end_turn();
            for _ in 0..50 {
                if o.push_at(1, msg(), || &r, || t0 + Duration::from_secs(turn)).is_some() {
                    o.left_full(1, busy);
                }
            }
            let _ = o.take(1, || true);
        }
        assert_eq!(o.size(1), 32, "back to the configured size");
    }

    #[test]
    fn a_burst_is_told_against_the_largest_tuned_size_with_messages_waiting() {
        let r = returns();
        let mut o = Outbox::new(3, 32, 1.1).sized(BatchSize::Adaptive);
        assert_eq!(o.burst_size(), 32);
        // Destination 1's receiver is backlogged: its size grows.
        for _ in 0..4 {
            let n = o.size(1);
            (0..n).find_map(|_| o.push(1, msg(), || &r)).expect("full");
            o.left_full(1, || tune::Receiver { idle: false, ready: 1000 });
        }
        let grown = o.size(1);
        assert!(grown > 32, "{grown}");
        assert!(!o.has_pending());
        assert_eq!(o.burst_size(), 32, "nothing waits for the grown destination");
        assert!(o.push(2, msg(), || &r).is_none());
        assert_eq!(o.burst_size(), 32, "the other destination is at the configured size");
        assert!(o.push(1, msg(), || &r).is_none());
        assert_eq!(o.burst_size(), grown);
        assert!(!is_burst(16, o.burst_size()) && is_burst(16, 32));
        assert!(!o.ends_burst(16) && o.ends_burst(grown as u32 / 4) && !o.ends_burst(7));
        // Fixed sizes: the configured one.
        let mut fixed = Outbox::new(3, 32, 1.1);
        assert!(fixed.push(1, msg(), || &r).is_none());
        assert_eq!(fixed.burst_size(), 32);
        assert!(fixed.ends_burst(8) && !fixed.ends_burst(7));
    }

    #[test]
    fn mean_interval_follows_natural_flushes() {
        let r = returns();
        // A batch of one is two (`SMALLEST_BATCH`): each pair leaves full.
        let mut o = Outbox::new(1, 1, 1.1);
        assert!(o.push(0, msg(), || &r).is_none());
        assert!(o.push(0, msg(), || &r).is_some());
        std::thread::sleep(Duration::from_millis(2));
        assert!(o.push(0, msg(), || &r).is_none());
        assert!(o.push(0, msg(), || &r).is_some());
        assert!(o.mean_interval(0) > INITIAL_INTERVAL, "a 2 ms gap raises the mean");
    }
}
