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
//! wake-up latency measured at start, `idle::threshold_for`) is the yardstick `fixed`.
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
//! last round): two relaxed loads of one line per full batch; and how long the batch took to
//! fill (the time since the destination's previous full batch, which the safety flush already
//! measures).
//!
//! - Backlogged receiver (at least a batch's worth of colors waiting): it will not run dry
//!   before a larger batch fills, so a larger batch delays nothing it could run and saves a
//!   synchronization (and a batch's filing) per batch: grow by a quarter.
//! - Busy receiver with less queued: keep the size. It will soon run dry, and the batch that
//!   leaves in the middle of a turn is what keeps it fed. The first version grew here:
//!   producer-consumer at 2 workers (50 messages a round to the other worker) then sent 4
//!   early and 46 at the end of the producer's turn instead of 4, 32 and 14, and lost 38-46%
//!   (paired ratios 0.54, 0.58, 0.62 against the fixed size in three processes).
//! - Idle receiver, and the batch took long to fill (more than [`LONG_FILL`] since the
//!   destination's previous full batch): it waited that long for the first of these messages:
//!   shrink by an eighth.
//! - Idle receiver, batch filled quickly: keep the size. A receiver that keeps up with a fast
//!   producer is idle at every full batch, and there a smaller batch only adds
//!   synchronizations: the first version of this rule shrank on every idle receiver, and a
//!   one-way fan-out of 100 events a round then sent batches of 8 and allocated 1121 buffers
//!   where the fixed 32 needs a few (`tests/api.rs`, `a_fan_out_reuses_its_batch_buffers...`).
//!
//! Growth is faster than shrinking: a producer faster than its consumer keeps it busy and the
//! size climbs to [`MAX_BATCH`] within a dozen batches; a slow stream (a message every few
//! microseconds or less often) shrinks it slowly, one full batch at a time.
//! - Bounds [`MIN_BATCH`]..[`MAX_BATCH`]: 8 keeps a batch worth a synchronization (the thesis
//!   found 20-50 best on its applications); 256 messages of 32 bytes is 8 KiB, a buffer that
//!   stays in the L1/L2 of both workers.
//!
//! The size is per destination (a fan-out to a busy worker and a chain to an idle one tune
//! apart). The turn's burst and early-batch rules (`outbox`) keep reading the configured size:
//! they are about the shape of a fan-out, not about amortizing a synchronization.

//!
//! ## Status: an option, not the default
//!
//! `ochre bench tuning` (tuned against the default and a grid of fixed settings, paired ratios
//! per repetition, 13 cases: ping-pong, producer-consumer empty / 1 µs / 10 µs, the nine actor
//! programs) on the 2-CPU machine at load 8-10 (other builds and benchmarks), three processes
//! of 5 repetitions each: the geometric mean over the 39 case-processes of tuned / default
//! was 1.008 with the second version of the batch rule and 0.903 with this one (each tuner
//! alone: 1.008 for the spin threshold, 0.982 for the batch size), while fixed settings that
//! cannot all be better than each other ranged 0.96-1.13 against the default in the same
//! runs: the load, not the settings, moved those figures. Single case-processes ranged
//! 0.5-1.8. Two more processes of this version (one at load 3): geometric means 1.088 and
//! 0.969. One loss held in all five processes: fork-join empty (0.66-0.91; counting lost in
//! four of five, 0.53-0.96): the case to study first. Neither goal (>= the best fixed setting
//! within 3% everywhere, better than the default somewhere) is shown by that, so the default
//! stays fixed until a quiet machine measures it.
//!
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

/// Smallest tuned batch.
pub(crate) const MIN_BATCH: usize = 8;
/// Largest tuned batch (and the capacity of a buffer when sizes are tuned, so that no batch
/// reallocates as its size grows).
pub(crate) const MAX_BATCH: usize = 256;

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

/// The next size of a destination's batches after one left full at `size`, having taken `fill`
/// to fill (module doc): a quarter larger if the receiver had at least `size` colors waiting,
/// an eighth smaller if it was idle and the fill took longer than [`LONG_FILL`], else the same;
/// within [`MIN_BATCH`]..[`MAX_BATCH`].
pub(crate) fn next_batch_size(size: usize, receiver: Receiver, fill: Duration) -> usize {
    let next = if receiver.idle {
        if fill > LONG_FILL {
            size - size / 8
        } else {
            size
        }
    } else if receiver.ready >= size {
        size + (size / 4).max(1)
    } else {
        size
    };
    next.clamp(MIN_BATCH, MAX_BATCH)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

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
        assert_eq!(crate::idle::spin_budget(spin, fixed, slept), Duration::ZERO);
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

    #[test]
    fn a_backlogged_receiver_grows_batches_to_the_maximum_and_an_idle_one_shrinks_them() {
        let (quick, slow) = (US * 5, US * 500);
        let mut size = 32;
        let mut steps = 0;
        while size < MAX_BATCH {
            size = next_batch_size(size, BACKLOGGED, quick);
            steps += 1;
        }
        assert_eq!(size, MAX_BATCH);
        assert!(steps <= 12, "{steps} full batches to reach the maximum");
        assert_eq!(next_batch_size(size, BACKLOGGED, slow), MAX_BATCH, "stays at the maximum");
        assert_eq!(next_batch_size(size, IDLE, quick), size, "idle but quickly filled: kept");
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
            assert_eq!(next_batch_size(s, IDLE, quick), s.clamp(MIN_BATCH, MAX_BATCH));
        }
    }

    #[test]
    fn a_busy_receiver_with_less_than_a_batch_queued_keeps_the_size() {
        // Producer-consumer: the receiver runs the early batch (4 colors) when 32 more leave.
        let busy = |ready| Receiver { idle: false, ready };
        assert_eq!(next_batch_size(32, busy(4), US * 5), 32);
        assert_eq!(next_batch_size(32, busy(31), US * 500), 32);
        assert_eq!(next_batch_size(32, busy(32), US * 5), 40);
    }
}
