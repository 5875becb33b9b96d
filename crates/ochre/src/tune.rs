//! Online tuning of the spin threshold and the batch size (thesis §5.5, future work): the
//! policies, as plain functions of what a worker measured. The mechanism around them lives where
//! it did: `idle` measures idle gaps and asks [`SpinTuner`] how long to spin; `outbox` asks
//! [`next_batch_size`] for a destination's next size when a batch leaves full. Neither rule
//! reads a clock or an atomic of its own, so the unit tests below drive them with given
//! measurements, without threads, and the simulator can call them as the workers do.
//!
//! ## The spin threshold ([`Spin::Adaptive`](crate::Spin))
//!
//! Measured: the length of every idle spell of the worker (a *gap*: from finding nothing to do
//! to having work again, whether the spin caught it or a sleep and a wake-up ended it), kept as
//! a histogram by powers of two of microseconds whose weights decay by 1/[`GAP_MEMORY`] per
//! gap, so that it describes the last few dozen gaps. The fixed rule's threshold (10x the
//! process's wake-up latency, `idle::threshold_for`, `wakeup_latency`) is the yardstick `fixed`.
//!
//! - Which gaps are worth catching: those up to [`CATCH_FACTOR`]`x fixed` (20x the wake-up
//!   latency), for which a wake-up would add 5% or more. Longer ones are left to sleep: a
//!   wake-up costs them little, a spin through them burns a CPU for nothing.
//! - The threshold: the upper edge of the histogram bucket that holds [`COVER`] (90%) of the
//!   gaps worth catching (the edge is up to 2x the gaps it covers: a margin), within
//!   `[fixed / MIN_DIVISOR, CATCH_FACTOR x fixed]`. With no gap worth catching in memory, the
//!   fixed rule's threshold. Why: the fixed 10x misses every gap between 10x and 20x the
//!   wake-up latency (a handler of a few hundred microseconds on the other worker), paying a
//!   full spin and a wake-up for each; and spins 10x where all gaps are a few microseconds.
//! - Whether to spin: as the fixed rule, when the previous gap was shorter than the threshold;
//!   and also when at least [`SHORT_SHARE`] of the remembered gaps were worth catching. The
//!   fixed rule sleeps at once after every long sleep: where short and long gaps alternate (a
//!   round-based job, a server between bursts) that is a wake-up on each short gap that
//!   follows a long one.
//!
//! ## The batch size ([`BatchSize::Adaptive`](crate::BatchSize))
//!
//! Measured: whenever a destination's buffer leaves full, whether that destination was idle
//! (its `Status::idle` flag) and how many colors wait there (its `Status::ready`, as of its
//! last round): two relaxed loads of one line per full batch; and, by the sender, how the
//! batch filled ([`Fill`]): how long it took (the time since the destination's previous full
//! batch, which the safety flush already measures, known only if no batch left that buffer
//! before it was full in between) and whether the previous full batch left in the same turn.
//!
//! - Backlogged receiver (at least a batch's worth of colors waiting): it will not run dry
//!   before a larger batch fills, so a larger batch delays nothing it could run and saves a
//!   synchronization (and a batch's filing) per batch: grow by a quarter.
//! - A turn that fills batch after batch to one destination, each within [`LONG_FILL`] (a
//!   producer's loop, a fan-out of thousands), from its fourth full batch ([`LOOP_BATCHES`]
//!   before it), the receiver busy or idle (it keeps up with the loop): the receiver gets a
//!   batch every fill whatever the size, so a larger one only saves synchronizations: grow by
//!   a quarter. Not from the second for a busy receiver, as before session 57: a turn of two
//!   or three batches is no loop, and the receiver busy with the first when the second leaves
//!   is what a short turn looks like. Producer-consumer 2w empty (50 messages a round to the
//!   other worker, whose consumer ran the first batch when the second left) grew there in a
//!   third of its batches and shrank (idle) in the rest: mean size 21.6 (`OCHRE_TUNE_DEBUG=1`,
//!   no full batch a turn past the second), where the fixed 16 ran 4-10% faster (the round's
//!   tail: 2 messages left to run after the producer's 50th, against 25); from the fourth:
//!   16.0, and tuned / best fixed 0.934, 0.948 -> 0.960, 0.973 (`bench tuning --quick`, two
//!   processes of each build), the other cases within their run-to-run spread. (Idle receivers shrinking in every loop took a
//!   320-post loop of empty events to batches of 16: `tests/api.rs`'s
//!   `batching_sends_whole_buffers` saw a mean of 15.2.) Why:
//!   fork-join empty (one handler posts 720 000 messages to 60 actors) lost 35% to the fixed
//!   128 (quiet machine, paired); `OCHRE_TUNE_DEBUG=1` showed its receiver busy with 4-10
//!   colors queued at 70% of the full batches and idle at the rest, so the backlog rule never
//!   grew it (25 growths in 62 692 batches). (Had the idle receiver's batches shrunk by an
//!   eighth, the idle rules below, the busy ones' quarter would still climb to [`MAX_BATCH`].)
//!   With the idle floor below and this loop rule, `bench tuning --quick` twice, tuned over
//!   the fixed default: producer-consumer 2w empty 1.10 and 1.00, fork-join empty 1.06 and
//!   1.09, the other cases 0.92-1.12 (session 34).
//! - Busy receiver with less queued, otherwise: keep the size. It will soon run dry, and the
//!   batch that leaves in the middle of a turn is what keeps it fed. The first version grew
//!   here: producer-consumer at 2 workers (50 messages a round to the other worker) then sent
//!   4 early and 46 at the end of the producer's turn instead of 4, 32 and 14, and lost 38-46%
//!   (paired ratios 0.54, 0.58, 0.62 against the fixed size in three processes). Its one full
//!   batch a turn is never the same turn's second, so the loop rule leaves it alone too.
//! - Idle receiver, and the batch is known to have taken long to fill (more than
//!   [`LONG_FILL`]): it waited that long for the first of these messages: shrink by an eighth,
//!   down to [`MIN_BATCH`].
//!   The version before this one took the time since the previous full batch as the fill time even
//!   when batches had left before they were full in between (ends of turns, early batches):
//!   the time then counted waits with an empty buffer, between turns and between runs, and
//!   every such batch to an idle receiver shrank the size; sizes drifted down to means of 8-10
//!   on producer-consumer, the thread rings, fork-join and bank (`OCHRE_TUNE_DEBUG=1`), and
//!   the thread ring of 64 tokens lost 5% to the fixed 32.
//! - Idle receiver otherwise (the batch filled quickly, or its fill time is unknown, outside a
//!   loop as above): it waits
//!   for this sender, and a smaller batch reaches it sooner: shrink by an eighth, down to
//!   [`IDLE_FLOOR`] (16, half the default size) and no further. Producer-consumer at 2 workers
//!   with empty handlers (50 messages a round, a consumer idle at every full batch) ran best
//!   at the fixed 16, whose batches the consumer runs while the next fill: the size kept at
//!   32 here ran 0.86-0.90 of it (`bench tuning --quick`, sessions 33-34), and shrinking to
//!   the floor 0.99 (two runs); tuned over the fixed default 0.97, 0.99, 0.97 before and
//!   1.00, 1.04, 1.05 after (three processes of each build alternated, session 34), the
//!   other cases within their spread (bank 0.94-0.96 -> 0.94-1.02, big 0.91-0.98 ->
//!   0.99-1.00, fork-join empty 1.01-1.15 -> 1.05-1.09), and `bench actors --quick`
//!   (ochre over tokio-mt, quiet 2.03-2.06 both builds) and `bench prodcons --quick`
//!   (2 workers empty 11.9-12.0M -> 12.4-12.7M events/s) unchanged or better. The floor:
//!   the first version of the rules shrank on every idle receiver to [`MIN_BATCH`], and a
//!   one-way fan-out of 100 events a round then sent batches of 8 and allocated 1121 buffers
//!   where the fixed 32 needs a few (`tests/api.rs`, `a_fan_out_reuses_its_batch_buffers...`,
//!   which holds at 16); and a version that read an unknown fill time as a long one drifted
//!   to 8-10 (above), where the 64-token ring lost 5%.
//!
//! Growth is faster than shrinking: a producer faster than its consumer keeps it busy and the
//! size climbs to [`MAX_BATCH`] within a dozen batches; a slow stream (a message every few
//! microseconds or less often) shrinks it slowly, one full batch at a time. In a loop, the two
//! meet where a batch takes about [`LONG_FILL`] to fill.
//! - Bounds [`MIN_BATCH`]..[`MAX_BATCH`]: 8 keeps a batch worth a synchronization (the thesis
//!   found 20-50 best on its applications); 128 is the largest fixed size the study measures,
//!   the best of the grid on fork-join empty (1.16x the fixed 32, quiet) and within 3% of the
//!   32 elsewhere but on big (0.95x) and the thread ring of 64 tokens (0.88x), where this rule
//!   keeps 32 (few full batches, none in a loop): growth past it would be unmeasured (the bound was 256 before, a guess; 128 messages
//!   of 48 bytes is a 6 KiB buffer).
//!
//! The size is per destination (a fan-out to a busy worker and a chain to an idle one tune
//! apart). The turn's early-batch rule (`outbox`) keeps reading the configured size: it is
//! about the shape of a fan-out, not about amortizing a synchronization. The burst rule (a turn
//! that posted a quarter of a batch to other workers sends every buffer at its end) reads the
//! largest tuned size among the destinations with messages waiting (`Outbox::burst_size`):
//! a size grown for a busy receiver would otherwise be cut at every turn's end into the turn's
//! share. A size a batch leaving before it is full brings back ([`after_partial_batch`]) comes
//! back only if the receiver was idle then.
//!
//! ## Status: the default
//!
//! `ochre bench tuning` (the tuned default against the fixed default of before and a grid of
//! fixed settings, paired ratios per repetition, 13 cases: ping-pong, producer-consumer empty /
//! 1 µs / 10 µs, the nine actor programs), 2-CPU machine:
//! - Quiet (nothing else running), the version before this one, one process of 5 repetitions:
//!   tuned / best fixed >= 0.97 on 8 of 13 cases; missed on fork-join empty (0.645 against the
//!   fixed 128; each tuner alone: batch 0.67, spin 0.99 of the fixed default), the thread ring
//!   of 64 tokens (0.951), counting (0.963), producer-consumer empty (0.967) and 1 µs (0.967);
//!   better than the fixed default by 4.7% on bank. `OCHRE_TUNE_DEBUG=1` then showed why the
//!   batch tuner lost: sizes drifted down (means 8-10 on producer-consumer, the thread rings,
//!   fork-join empty, one destination of bank) from the fill-time error, and fork-join's never
//!   grew (the two fixes above).
//! - This version, `OCHRE_TUNE_DEBUG=1`, one run of each case (counts, not speeds, so the load
//!   matters little): mean batch sizes 32 on producer-consumer and the thread rings (a few dozen
//!   full batches where there were thousands; 32-38 on big and chameneos), 127-128 (the
//!   maximum) on fork-join (empty and 1 µs) and counting, 58-128 on bank by destination.
//! - This version, speeds, loaded by other helpers' builds (load 4.5-13: hints, not results):
//!   at the 256 bound, fork-join empty tuned / fixed default 1.105 and 1.031 (paired medians,
//!   two processes of 5 repetitions at load 5-7; the version before lost 0.83 in the same
//!   conditions), and the full benchmark at load 8-12 ranged 0.66-1.13 on cases where no
//!   setting differs in a quiet run (ping-pong 2w has no full batch at all). At the 128 bound,
//!   two processes of 7 repetitions at load 4.5-6.5, tuned / fixed default: fork-join empty
//!   1.069, 0.953; counting 1.009, 0.833; the thread rings 1.083, 1.425 (1 token) and 1.017,
//!   0.993 (64); fork-join 1 µs 1.006, 1.030; bank 1.017, 1.133; producer-consumer empty
//!   0.974, 0.781 (and 0.628 in a third process), 1 µs 0.988, 1.104, 1.063, 10 µs 0.952,
//!   0.818, 1.047, where the batch sizes never left 32 (`OCHRE_TUNE_DEBUG`, five processes):
//!   the spin tuner or the load, not the batch rule. Two processes of all 13 cases (5
//!   repetitions, the benchmark's own two workers the most of a load of 2.3-3.4), tuned /
//!   fixed default: fork-join empty 1.193, 0.953; bank 1.050, 0.970; chameneos 1.057, 0.969;
//!   counting 1.055, 1.010; the thread rings 0.969, 1.391 (1 token) and 0.978, 0.956 (64);
//!   big 1.016, 1.223; ping-pong 2w 0.905, 1.002; the other five 0.979-1.028. Against the
//!   best fixed setting of each case 8 and 7 of 13 were within 3%, the misses different in
//!   the two. The load moved these figures as much as the settings; the quiet re-measure
//!   decides. `Config::baseline()` and every fixed setting remain.

use std::time::Duration;

/// Gap histogram buckets: bucket 0 holds gaps under 2 µs, bucket `i` gaps in `[2^i, 2^(i+1))`
/// µs, the last one everything from 2^15 µs (33 ms) on.
pub(crate) const GAP_BUCKETS: usize = 16;
/// Decay of the gap histogram: each new gap scales the others by `1 - 1/GAP_MEMORY`, so the
/// histogram describes about the last 16 gaps and a change of pattern takes over within a few.
pub(crate) const GAP_MEMORY: f32 = 16.0;
/// Gaps up to this many fixed thresholds (10x the wake-up latency) are worth catching: a
/// wake-up adds 5% or more to them.
pub(crate) const CATCH_FACTOR: u32 = 2;
/// Share of the gaps worth catching that the threshold covers.
pub(crate) const COVER: f32 = 0.9;
/// The tuned threshold is at least the fixed one divided by this (5x the wake-up latency):
/// below it, the CPU a lost spin saves is too little to risk missing a gap.
pub(crate) const MIN_DIVISOR: u32 = 2;
/// Spin after a long gap too when this share of the remembered gaps was worth catching.
pub(crate) const SHORT_SHARE: f32 = 0.5;

/// A batch that took longer than this to fill, while its receiver was idle, kept the receiver
/// waiting long enough to matter: about a wake-up on the study's machine (`ochre info`: the
/// futex wake-up latency measures tens of microseconds there; `idle::threshold_for`'s floor is
/// 50 µs too). A guess at the scale, not a tuned figure.
pub(crate) const LONG_FILL: Duration = Duration::from_micros(50);

/// Full batches a turn sends one destination, each filled within [`LONG_FILL`], before its next
/// ones grow: a producer's loop, which the receiver keeps up with or not (module doc).
pub(crate) const LOOP_BATCHES: u32 = 3;
/// Smallest batch an idle receiver shrinks the size to when its batches are not known to fill
/// slowly (half the default size): see the module doc.
pub(crate) const IDLE_FLOOR: usize = 16;
/// Smallest tuned batch.
pub(crate) const MIN_BATCH: usize = 8;
/// Largest tuned batch (and the capacity of a buffer when sizes are tuned, so that no batch
/// reallocates as its size grows).
pub(crate) const MAX_BATCH: usize = 128;

/// The bucket of a gap.
pub(crate) fn gap_bucket(gap: Duration) -> usize {
    let us = gap.as_micros().min(u64::MAX as u128) as u64;
    (64 - us.max(1).leading_zeros() as usize - 1).min(GAP_BUCKETS - 1)
}

/// The exclusive upper edge of bucket `b`.
fn bucket_edge(b: usize) -> Duration {
    Duration::from_micros(2u64 << b)
}

/// What a worker remembers of its idle gaps, and the threshold it derived from them.
#[derive(Clone, Debug)]
pub(crate) struct SpinTuner {
    weights: [f32; GAP_BUCKETS],
    last_gap: Option<Duration>,
}

impl Default for SpinTuner {
    fn default() -> Self {
        SpinTuner { weights: [0.0; GAP_BUCKETS], last_gap: None }
    }
}

impl SpinTuner {
    /// Records an idle gap.
    pub(crate) fn record(&mut self, gap: Duration) {
        let keep = 1.0 - 1.0 / GAP_MEMORY;
        for w in &mut self.weights {
            *w *= keep;
        }
        self.weights[gap_bucket(gap)] += 1.0;
        self.last_gap = Some(gap);
    }

    /// The tuned threshold, given the fixed rule's `fixed`.
    pub(crate) fn threshold(&self, fixed: Duration) -> Duration {
        tuned_threshold(&self.weights, fixed)
    }

    /// How long to spin at the start of an idle spell, given the fixed rule's `fixed`.
    pub(crate) fn budget(&self, fixed: Duration) -> Duration {
        let threshold = self.threshold(fixed);
        if should_spin(&self.weights, self.last_gap, threshold, fixed) {
            threshold
        } else {
            Duration::ZERO
        }
    }
}

/// The last bucket worth catching for the fixed threshold `fixed`.
fn catch_bucket(fixed: Duration) -> usize {
    gap_bucket(fixed * CATCH_FACTOR)
}

/// The spin threshold for a gap histogram (module doc): the edge of the bucket covering
/// [`COVER`] of the gaps worth catching, within `[fixed / MIN_DIVISOR, CATCH_FACTOR x fixed]`;
/// `fixed` when no gap worth catching is remembered.
pub(crate) fn tuned_threshold(weights: &[f32; GAP_BUCKETS], fixed: Duration) -> Duration {
    let last = catch_bucket(fixed);
    let catchable: f32 = weights[..=last].iter().sum();
    if catchable < 0.5 {
        return fixed;
    }
    let mut seen = 0.0;
    let mut edge = bucket_edge(last);
    for (b, w) in weights[..=last].iter().enumerate() {
        seen += w;
        if seen >= COVER * catchable {
            edge = bucket_edge(b);
            break;
        }
    }
    edge.clamp(fixed / MIN_DIVISOR, fixed * CATCH_FACTOR)
}

/// Whether to spin (module doc): the last gap was under `threshold`, or at least
/// [`SHORT_SHARE`] of the remembered gaps were worth catching. Never before any gap is known
/// (the first idle spell of a worker sleeps, as with the fixed rule).
pub(crate) fn should_spin(
    weights: &[f32; GAP_BUCKETS],
    last_gap: Option<Duration>,
    threshold: Duration,
    fixed: Duration,
) -> bool {
    let Some(last_gap) = last_gap else { return false };
    if last_gap < threshold {
        return true;
    }
    let total: f32 = weights.iter().sum();
    let catchable: f32 = weights[..=catch_bucket(fixed)].iter().sum();
    total > 0.0 && catchable >= SHORT_SHARE * total
}

/// What a sender sees of a destination when a batch to it leaves full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Receiver {
    /// It had nothing to run (`Status::idle`).
    pub(crate) idle: bool,
    /// Colors waiting to run there (`Status::ready`).
    pub(crate) ready: usize,
}

/// How a batch that left full had filled, as its sender saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Fill {
    /// How long it took to fill: the time since the previous batch to the same destination
    /// left full, if none left before it was full in between (else unknown: the time would
    /// count a wait with an empty buffer, between turns or runs).
    pub(crate) took: Option<Duration>,
    /// Full batches to the same destination that left earlier in the same turn: one handler
    /// posting batch after batch to it (a producer's loop, a fan-out) when more than 0.
    pub(crate) in_turn: u32,
}

/// The next size of a destination's batches after one left full at `size` (module doc): a
/// quarter larger in a loop (the batch filled within [`LONG_FILL`] after [`LOOP_BATCHES`] full
/// ones of the same turn) or if the
/// busy receiver had at least `size` colors waiting; else, the receiver idle, an eighth smaller,
/// not below [`IDLE_FLOOR`] unless the batch took longer than [`LONG_FILL`] to fill; else the
/// same; within [`MIN_BATCH`]..[`MAX_BATCH`].
pub(crate) fn next_batch_size(size: usize, receiver: Receiver, fill: Fill) -> usize {
    let slow = fill.took.is_some_and(|t| t > LONG_FILL);
    let quick = fill.took.is_some_and(|t| t <= LONG_FILL);
    let grows =
        (quick && fill.in_turn >= LOOP_BATCHES) || (!receiver.idle && receiver.ready >= size);
    let next = if grows {
        size + (size / 4).max(1)
    } else if receiver.idle {
        // It waits for this sender: a smaller batch reaches it sooner. Down to the minimum
        // when the wait is known to be long, else to `IDLE_FLOOR` only.
        let floor = if slow { MIN_BATCH } else { IDLE_FLOOR };
        (size - size / 8).max(floor).min(size)
    } else {
        size
    };
    next.clamp(MIN_BATCH, MAX_BATCH)
}

/// The next size of a destination's batches after one left before it was full (at the end of
/// a turn or a round, early, or by the safety flush) with `sent` messages at `size`: an eighth
/// closer to `start` (the configured size), not below it, if the receiver was `idle`; the same
/// if it was busy.
///
/// Why: [`next_batch_size`] runs only when a batch leaves full. A size grown above what a turn
/// posts to that destination (a fan-out, then a producer posting 50 messages a round) is never
/// full again, so it would stay: the producer's batch would leave whole at the end of its turn
/// instead of in part mid-turn, which cost producer-consumer 38-46% (the second version of the
/// rule, above). Found by a review: a 5,000-message fan-out, then 10,000 turns of 50 messages,
/// kept 128. Not below `start`: shrinking further is the idle receiver's rule, which sees how
/// long a batch took to fill.
///
/// Only for an idle receiver: one that was busy lost nothing to the larger size, and with the
/// size kept, a turn that posts a few dozen messages to a busy worker sends them as one batch
/// at its end, not as a full one and the rest. Bank (`bench tuning`: each account's turn of up
/// to 64 debits posts about 32 credits to the other, busy worker) had its sizes brought back to
/// 32 at every turn's end and ran at 0.88-0.95 of the fixed 128 (seven processes; the sizes
/// there now reach 80-127 on average by destination, `OCHRE_TUNE_DEBUG`). Producer-consumer's
/// case above is an idle receiver: the consumer ran the turn's early batch long before the
/// producer's turn ends.
pub(crate) fn after_partial_batch(size: usize, sent: usize, start: usize, idle: bool) -> usize {
    if idle && size > start && sent < size {
        (size - size / 8).max(start)
    } else {
        size
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn a_grown_size_comes_back_when_batches_leave_before_they_fill() {
        // A fan-out grew the size to the maximum; then each turn posts 50 messages, which leave
        // at its end: the size comes down until 50 fill a batch mid-turn again.
        let mut size = MAX_BATCH;
        let mut turns = 0;
        while size > 50 {
            size = after_partial_batch(size, 50, 32, true);
            turns += 1;
            assert!(turns < 20, "the size stays at {size}");
        }
        // Then each turn's full batch of `size` leaves mid-turn and its rest at the end:
        // the rest keeps bringing it down, to the configured size and not below.
        for _ in 0..20 {
            size = after_partial_batch(size, 50 % size, 32, true);
        }
        assert_eq!(size, 32);
        assert_eq!(after_partial_batch(32, 1, 32, true), 32, "not below the configured size");
        assert_eq!(after_partial_batch(64, 64, 32, true), 64, "a full batch is the other rule's");
        // A busy receiver had work: the size it lost nothing to stays.
        assert_eq!(after_partial_batch(64, 40, 32, false), 64);
        // A fan-out's last partial batch of a turn costs an eighth; its full ones grow a quarter.
        assert_eq!(after_partial_batch(128, 10, 32, true), 112);
    }

    fn tuner(gaps: impl IntoIterator<Item = Duration>) -> SpinTuner {
        let mut t = SpinTuner::default();
        for g in gaps {
            t.record(g);
        }
        t
    }

    #[test]
    fn gaps_fall_in_power_of_two_buckets() {
        assert_eq!(gap_bucket(Duration::ZERO), 0);
        assert_eq!(gap_bucket(US), 0);
        assert_eq!(gap_bucket(US * 2), 1);
        assert_eq!(gap_bucket(US * 3), 1);
        assert_eq!(gap_bucket(US * 300), 8);
        assert!(US * 300 < bucket_edge(8) && US * 300 >= bucket_edge(7));
        assert_eq!(gap_bucket(Duration::from_secs(10)), GAP_BUCKETS - 1);
    }

    #[test]
    fn short_gaps_lower_the_threshold_to_its_floor() {
        let fixed = US * 300;
        let t = tuner(std::iter::repeat_n(US * 3, 50));
        assert_eq!(t.threshold(fixed), fixed / MIN_DIVISOR);
        assert_eq!(t.budget(fixed), fixed / MIN_DIVISOR, "short gaps: spin");
    }

    #[test]
    fn gaps_just_past_the_fixed_threshold_are_caught() {
        // A wake-up of 30 us; gaps of 400 us: the fixed 300 us misses every one of them.
        let fixed = US * 300;
        let t = tuner(std::iter::repeat_n(US * 400, 50));
        let th = t.threshold(fixed);
        assert!(th > US * 400 && th <= fixed * CATCH_FACTOR, "{th:?}");
        assert_eq!(t.budget(fixed), th);
    }

    #[test]
    fn long_gaps_are_slept_through() {
        let fixed = US * 300;
        let t = tuner(std::iter::repeat_n(Duration::from_millis(20), 50));
        assert_eq!(t.threshold(fixed), fixed, "nothing worth catching: the fixed rule");
        assert_eq!(t.budget(fixed), Duration::ZERO, "last gap long, none short: sleep");
        assert_eq!(SpinTuner::default().budget(fixed), Duration::ZERO, "first spell sleeps");
    }

    #[test]
    fn mostly_short_gaps_spin_even_after_a_long_one() {
        let fixed = US * 300;
        let mut t = tuner(std::iter::repeat_n(US * 20, 30));
        t.record(Duration::from_millis(50));
        assert!(t.budget(fixed) > Duration::ZERO, "one long gap among short ones");
        // The fixed rule would sleep at once after that sleep.
        let spin = crate::Spin::Reasoned { threshold: None };
        let slept = Some(Duration::from_millis(50));
        assert_eq!(crate::idle::spin_budget(spin, fixed, slept, &t), Duration::ZERO);
    }

    #[test]
    fn the_threshold_follows_a_change_of_pattern_within_a_few_dozen_gaps() {
        let fixed = US * 300;
        let mut t = tuner(std::iter::repeat_n(US * 3, 100));
        assert_eq!(t.threshold(fixed), fixed / MIN_DIVISOR);
        for _ in 0..40 {
            t.record(US * 500);
        }
        assert!(t.threshold(fixed) > US * 500, "{:?}", t.threshold(fixed));
        for _ in 0..40 {
            t.record(Duration::from_millis(30));
        }
        assert_eq!(t.budget(fixed), Duration::ZERO, "now the gaps are long");
    }

    #[test]
    fn the_threshold_stays_within_its_bounds_whatever_the_gaps() {
        let fixed = US * 300;
        let mut t = SpinTuner::default();
        let mut x = 12345u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t.record(Duration::from_nanos(x % 50_000_000));
            let th = t.threshold(fixed);
            assert!(th >= fixed / MIN_DIVISOR && th <= fixed * CATCH_FACTOR, "{th:?}");
            assert!(t.budget(fixed) <= fixed * CATCH_FACTOR);
        }
    }

    const IDLE: Receiver = Receiver { idle: true, ready: 0 };
    const BACKLOGGED: Receiver = Receiver { idle: false, ready: 1000 };

    /// A batch that followed a full one (not in the same turn) and took `t` to fill.
    fn took(t: Duration) -> Fill {
        Fill { took: Some(t), in_turn: 0 }
    }

    #[test]
    fn a_backlogged_receiver_grows_batches_to_the_maximum_and_an_idle_one_shrinks_them() {
        let (quick, slow) = (took(US * 5), took(US * 500));
        let mut size = 32;
        let mut steps = 0;
        while size < MAX_BATCH {
            size = next_batch_size(size, BACKLOGGED, quick);
            steps += 1;
        }
        assert_eq!(size, MAX_BATCH);
        assert!(steps <= 12, "{steps} full batches to reach the maximum");
        assert_eq!(next_batch_size(size, BACKLOGGED, slow), MAX_BATCH, "stays at the maximum");
        assert_eq!(next_batch_size(size, IDLE, quick), size - size / 8, "idle, filled quickly");
        let mut steps = 0;
        while size > MIN_BATCH {
            size = next_batch_size(size, IDLE, slow);
            steps += 1;
        }
        assert_eq!(next_batch_size(size, IDLE, slow), MIN_BATCH, "stays at the minimum");
        assert!(steps > 12, "shrinking is slower than growing: {steps}");
        // From any size, the size stays in bounds and moves the way the receiver says.
        for s in 1..=400 {
            let (up, down) = (next_batch_size(s, BACKLOGGED, slow), next_batch_size(s, IDLE, slow));
            assert!(
                (MIN_BATCH..=MAX_BATCH).contains(&up) && (MIN_BATCH..=MAX_BATCH).contains(&down)
            );
            if (MIN_BATCH..MAX_BATCH).contains(&s) {
                assert!(up > s, "{s}");
            }
            if s > MIN_BATCH + 7 && s <= MAX_BATCH {
                assert!(down < s, "{s}");
            }
            // Filled quickly, the idle receiver's size comes down to its floor only.
            let quick_down = next_batch_size(s, IDLE, quick);
            if s <= IDLE_FLOOR {
                assert_eq!(quick_down, s.clamp(MIN_BATCH, MAX_BATCH), "{s}");
            } else if s <= MAX_BATCH {
                assert!(quick_down < s && quick_down >= IDLE_FLOOR, "{s}");
            }
        }
    }

    #[test]
    fn a_busy_receiver_with_less_than_a_batch_queued_keeps_the_size() {
        // Producer-consumer: the receiver runs the early batch (4 colors) when 32 more leave.
        let busy = |ready| Receiver { idle: false, ready };
        assert_eq!(next_batch_size(32, busy(4), took(US * 5)), 32);
        assert_eq!(next_batch_size(32, busy(31), took(US * 500)), 32);
        assert_eq!(next_batch_size(32, busy(32), took(US * 5)), 40);
    }

    #[test]
    fn an_idle_receiver_brings_the_size_to_its_floor_unless_its_batches_fill_slowly() {
        // Producer-consumer at 2 workers: the consumer is idle at every full batch, one a
        // round, after an early batch or the end of the last round (the fill time unknown).
        // Kept at 32, it ran 0.86-0.90 of the fixed 16. An unknown fill time goes no lower:
        // the version that read it as the fill time drifted to 8-10 on producer-consumer,
        // the thread rings and fork-join (OCHRE_TUNE_DEBUG counts).
        let unknown = Fill { took: None, in_turn: 0 };
        // Producer-consumer at 16: three full batches a round, the second and third in a turn.
        let short_loop = Fill { took: Some(US * 5), in_turn: LOOP_BATCHES - 1 };
        for fill in [unknown, Fill { took: None, in_turn: 5 }, took(US * 5), short_loop] {
            let mut size = 32;
            let mut batches = 0;
            while size > IDLE_FLOOR {
                size = next_batch_size(size, IDLE, fill);
                batches += 1;
                assert!(batches <= 8, "still {size} after {batches} full batches: {fill:?}");
            }
            assert_eq!(size, IDLE_FLOOR, "{fill:?}");
            assert_eq!(next_batch_size(size, IDLE, fill), IDLE_FLOOR, "stays: {fill:?}");
        }
        for s in MIN_BATCH..=IDLE_FLOOR {
            assert_eq!(next_batch_size(s, IDLE, unknown), s, "not below the floor");
        }
        // A slow fill takes it under the floor.
        assert!(next_batch_size(IDLE_FLOOR, IDLE, took(LONG_FILL * 2)) < IDLE_FLOOR);
    }

    #[test]
    fn a_turn_that_fills_batch_after_batch_quickly_grows_them_to_the_maximum() {
        // Fork-join: one handler posts hundreds of thousands of messages; the receiver runs
        // each at once (a few colors queued, often idle) and the fixed 128 beat the fixed 32
        // by 16%: growth on a backlog alone never happened there.
        let loop_fill = |t| Fill { took: Some(t), in_turn: LOOP_BATCHES };
        let few = Receiver { idle: false, ready: 5 };
        // Busy or idle: an idle receiver keeps up with the loop (a stream of empty events).
        for receiver in [few, IDLE] {
            let mut size = 32;
            for _ in 0..12 {
                size = next_batch_size(size, receiver, loop_fill(US * 5));
            }
            assert_eq!(size, MAX_BATCH, "{receiver:?}");
        }
        // The first full batches of a turn are no loop yet: to an idle receiver they shrink
        // (producer-consumer's three a round at 16 stay there), to a busy one (running the
        // turn's first batch) they keep their size.
        for in_turn in 1..LOOP_BATCHES {
            let fill = Fill { took: Some(US * 5), in_turn };
            assert!(next_batch_size(64, IDLE, fill) < 64, "{in_turn}");
            assert_eq!(next_batch_size(64, few, fill), 64, "{in_turn}");
        }
        // The same turn but slow to fill, the receiver idle: it waits, shrink.
        assert!(next_batch_size(64, IDLE, loop_fill(LONG_FILL * 2)) < 64);
        // Slow to fill, the receiver busy: nothing waits, nothing to gain: kept.
        assert_eq!(next_batch_size(64, few, loop_fill(LONG_FILL * 2)), 64);
        // Quick but across turns (producer-consumer's one full batch a round): kept.
        assert_eq!(next_batch_size(64, few, took(US * 5)), 64);
    }
}
