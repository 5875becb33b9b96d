//! How many idle colors a worker keeps: a bound that starts small and grows only for colors
//! that come back.
//!
//! A worker's color queue keeps the slot of a color whose events all ran (its measured cost,
//! who posts to it), so that the color's next post finds it: no table churn, and `follow`
//! remembers its traffic. Under [`Recurrence::keep_idle`] slots in the table, every idle slot
//! stays; over it, a slot is dropped as soon as it empties (`queue`'s `release_idle`), and its
//! event queue's buffer serves the next new color.
//!
//! The bound is this module's policy. Kept high (16384 before), a program that makes a fresh
//! color per task (a divide and conquer, as a user writes it: `bench steal`'s) filled the table
//! with colors that never came back, 200 bytes each plus a buffer of their own: a new color
//! took new memory (an allocation for its queue, a cold slot at the table's end), and the
//! table outgrew the caches. Kept low, a ring of more colors than the bound (a server's
//! connections, an actor system) churned: every post made a slot and every turn's end dropped
//! it, and `follow` never learned where the colors' messages came from (`turn_probe`, one
//! worker, 2000 colors: 19.4M hops/s with 1024 against 28.7M with 16384; two workers, 30000
//! colors, 3.3M against 9.8M).
//!
//! So the bound starts at [`KEEP_IDLE_MIN`] and doubles (up to [`KEEP_IDLE_MAX`]) when many
//! distinct colors that it drops come back again and again. Time is counted in *epochs* of
//! [`EPOCH_DROPS`] sampled drops. A sample of the dropped colors (one in eight, by a hash of
//! the color) is remembered exactly in a table of [`SAMPLE_ENTRIES`], with the number of epochs
//! in which each was dropped. A sampled color dropped in [`RECURRING_EPOCHS`] epochs or more is
//! *recurring*; its new slot is a *return*, counted once per epoch, and only if the color was
//! dropped since the bound last grew. When [`GROW_RETURNERS`] distinct colors return in one
//! epoch (about 64 colors of the whole, as one in eight is sampled), the bound doubles and an
//! epoch begins. The colors the smaller bound dropped come back after it grew, and do not
//! count: a ring larger than the new bound still drops colors, whose returns a lap later
//! double it again (a doubling a lap), and a ring it keeps drops none (a ring of 1500 colors
//! takes the bound to 2048, not further).
//!
//! Why distinct colors over epochs, not events: a divide and conquer's call comes back for
//! each of its answers, which come while its subtree runs, then never (its drops fall in one
//! epoch or two but for the few calls near the root); a collector posted between fresh colors comes back forever but is one color; a ring's
//! colors come back every lap, many of them. And a recurring color keeps its entry from colors
//! seen in fewer epochs (until it goes unseen for [`STALE_EPOCHS`]), so that fresh colors
//! mixed with a ring do not wipe the ring's entries before they are known.
//!
//! Invariants: [`keep_idle`](Recurrence::keep_idle) never decreases and stays within
//! `[KEEP_IDLE_MIN, KEEP_IDLE_MAX]`; the sample's memory is fixed once made (at the first
//! sampled drop); only colors dropped while idle count (a guest given back or moved on is not
//! dropped for the bound). The bound never shrinks: slots kept idle above a lower bound would
//! stay until they next empty, so shrinking would free nothing at once.

use crate::color::Color;

/// The bound a worker starts with: 1024 slots, about 200 KB, within a core's L2 with the rest
/// of the worker's state. Measured (`fib_probe 27 12 21`, two workers, ochre / tokio-mt in
/// one process, alternated builds): the bound 16384 0.70-0.84, 2048 0.89-0.95, 256 0.88-1.02.
pub(crate) const KEEP_IDLE_MIN: usize = 1024;

/// The most slots kept idle (the bound of before), about 3 MB of slots plus their buffers.
pub(crate) const KEEP_IDLE_MAX: usize = 16384;

/// One color in this many is sampled.
const SAMPLE_ONE_IN: usize = 8;

/// Entries of the sample (24 bytes each: 96 KB a worker, touched only when a sampled color is
/// dropped or comes back). With one color in eight sampled, it covers a ring of 32768.
const SAMPLE_ENTRIES: usize = 4096;

/// Sampled drops in an epoch: 512 drops of all colors. Short, so that a ring a little over
/// the bound (a lap drops only the colors the table cannot keep: `bench steal`'s sum of 3907
/// chunk colors on two workers drops about 900 a lap on each, 112 sampled: about two epochs a
/// lap) is known in four laps, as a larger one is; long enough that a divide and conquer's
/// call, whose answers come while its subtree runs, is dropped in one epoch or two: only calls
/// whose subtrees run more than an epoch's drops straddle three, one in hundreds of calls.
const EPOCH_DROPS: u32 = 64;

/// Epochs in which a sampled color was dropped before it is recurring: a divide and conquer's
/// call is dropped in one, two when its answers straddle an epoch's end (module doc).
const RECURRING_EPOCHS: u16 = 3;

/// Distinct returns in one epoch that double the bound (and begin the next epoch).
const GROW_RETURNERS: u32 = 8;

/// Epochs after which a recurring color not dropped since gives its entry to any color: 131072
/// drops, four laps of the largest ring the sample covers.
const STALE_EPOCHS: u32 = 256;

/// A sampled color, the epochs it was dropped in, and the last epoch its return counted.
#[derive(Clone, Copy)]
struct Entry {
    color: Color,
    /// Epochs in which the color was dropped (0: an entry never used).
    epochs: u16,
    /// The epoch of its last drop.
    last_drop: u32,
    /// The epoch of its last counted return (0: none; epochs start at 1).
    last_return: u32,
}

const UNUSED: Entry = Entry { color: Color(0), epochs: 0, last_drop: 0, last_return: 0 };

/// One worker's bound on idle slots, and the sample it is judged from (module doc).
pub(crate) struct Recurrence {
    /// Idle slots kept in the table (over it, a slot is dropped when it empties).
    keep_idle: usize,
    /// The sample: empty until the first sampled drop (a worker whose table stays under the
    /// bound, nearly all, never allocates it).
    sample: Vec<Entry>,
    /// The current epoch (from 1).
    epoch: u32,
    /// Sampled drops in the current epoch.
    drops: u32,
    /// Distinct returns in the current epoch.
    returners: u32,
    /// The epoch that began when the bound last grew (0: never). A return counts only if the
    /// color was dropped since: the colors the smaller bound dropped come back after it grew,
    /// and counted, they would double it again and again past the working set.
    grown_at: u32,
}

impl Default for Recurrence {
    fn default() -> Self {
        Recurrence {
            keep_idle: KEEP_IDLE_MIN,
            sample: Vec::new(),
            epoch: 1,
            drops: 0,
            returners: 0,
            grown_at: 0,
        }
    }
}

impl Recurrence {
    /// How many slots the table keeps with idle ones among them.
    #[inline]
    pub(crate) fn keep_idle(&self) -> usize {
        self.keep_idle
    }

    /// The sample's entry for `color`, if the color is sampled: the colors whose entry in a
    /// table [`SAMPLE_ONE_IN`] times the sample's falls in its first part (the table index's
    /// multiplicative hash spreads consecutive and strided colors alike).
    #[inline]
    fn entry_of(color: Color) -> Option<usize> {
        let i = color.table_index(SAMPLE_ENTRIES * SAMPLE_ONE_IN);
        (i < SAMPLE_ENTRIES).then_some(i)
    }

    /// True if `color` is in the sample (tests pick colors that count).
    #[cfg(test)]
    pub(crate) fn sampled(color: Color) -> bool {
        Self::entry_of(color).is_some()
    }

    /// `color`'s idle slot was dropped for the bound.
    pub(crate) fn dropped(&mut self, color: Color) {
        let Some(i) = Self::entry_of(color) else { return };
        if self.sample.is_empty() {
            self.sample = vec![UNUSED; SAMPLE_ENTRIES];
        }
        let epoch = self.epoch;
        let e = &mut self.sample[i];
        if e.epochs > 0 && e.color == color {
            if e.last_drop != epoch {
                e.epochs = e.epochs.saturating_add(1);
                e.last_drop = epoch;
            }
        } else if e.epochs < RECURRING_EPOCHS || epoch.wrapping_sub(e.last_drop) > STALE_EPOCHS {
            *e = Entry { color, epochs: 1, last_drop: epoch, last_return: 0 };
        }
        self.drops += 1;
        if self.drops == EPOCH_DROPS {
            self.next_epoch();
        }
    }

    /// Starts an epoch. Epochs wrap (after 2^41 drops): they are only compared for equality
    /// and by distance.
    fn next_epoch(&mut self) {
        self.drops = 0;
        self.returners = 0;
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// A home slot is made for `color` (its first post here, or its first since it was
    /// dropped).
    #[inline]
    pub(crate) fn created(&mut self, color: Color) {
        let epoch = self.epoch;
        let Some(e) = Self::entry_of(color).and_then(|i| self.sample.get_mut(i)) else { return };
        if e.color == color
            && e.epochs >= RECURRING_EPOCHS
            && e.last_return != epoch
            // Dropped since the bound last grew (`grown_at`, read for sampled colors only).
            && epoch.wrapping_sub(e.last_drop) <= epoch.wrapping_sub(self.grown_at)
        {
            e.last_return = epoch;
            self.returners += 1;
            if self.returners == GROW_RETURNERS {
                // Many colors the bound dropped are a working set larger than it.
                self.keep_idle = (self.keep_idle * 2).min(KEEP_IDLE_MAX);
                self.next_epoch();
                self.grown_at = self.epoch;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drops and re-creates every color of a ring of `colors` (each followed by `fresh` colors
    /// made and dropped once), `laps` times.
    fn churn_ring(r: &mut Recurrence, colors: u64, fresh: u64, laps: u64) {
        for lap in 0..laps {
            for c in 0..colors {
                r.created(Color(c));
                r.dropped(Color(c));
                for f in 0..fresh {
                    let f = Color((1 << 40) | ((lap * colors + c) * fresh + f));
                    r.created(f);
                    r.dropped(f);
                }
            }
        }
    }

    /// Sampled colors from `from` on.
    fn sampled(from: u64) -> impl Iterator<Item = Color> {
        (from..).map(Color).filter(|&c| Recurrence::entry_of(c).is_some())
    }

    #[test]
    fn a_ring_larger_than_the_bound_raises_it_after_a_few_laps() {
        let mut r = Recurrence::default();
        // 10000 colors: 1250 sampled drops a lap, about twenty epochs.
        churn_ring(&mut r, 10_000, 0, 3);
        assert_eq!(r.keep_idle(), KEEP_IDLE_MIN, "three epochs' drops before a return counts");
        churn_ring(&mut r, 10_000, 0, 1);
        assert_eq!(r.keep_idle(), 2 * KEEP_IDLE_MIN, "a doubling a lap");
        churn_ring(&mut r, 10_000, 0, 3);
        assert_eq!(r.keep_idle(), KEEP_IDLE_MAX, "every sampled color came back");
    }

    #[test]
    fn a_ring_a_little_over_the_bound_raises_it_after_a_few_laps_too() {
        let mut r = Recurrence::default();
        // A lap drops only the 900 colors the table cannot keep (module doc: a user's sum).
        churn_ring(&mut r, 900, 0, 3);
        assert_eq!(r.keep_idle(), KEEP_IDLE_MIN, "three epochs' drops before a return counts");
        churn_ring(&mut r, 900, 0, 2);
        assert!(r.keep_idle() > KEEP_IDLE_MIN, "the ring's colors came back");
    }

    #[test]
    fn a_ring_mixed_with_many_fresh_colors_raises_it_too() {
        let mut r = Recurrence::default();
        // Four fresh colors after each of the ring's: they take the sample's entries, but not
        // those of colors seen in three epochs.
        churn_ring(&mut r, 4000, 4, 12);
        assert_eq!(r.keep_idle(), KEEP_IDLE_MAX);
    }

    /// A call of a binary divide and conquer `depth` levels deep, run depth first as a
    /// worker runs it: the call dropped after its own turn and after each of its two answers,
    /// each of which comes once the child's whole subtree has run. Colors from `next` on.
    fn call(r: &mut Recurrence, next: &mut u64, depth: u32) {
        let c = Color(*next);
        *next += 1;
        r.created(c);
        r.dropped(c);
        if depth > 0 {
            for _ in 0..2 {
                call(r, next, depth - 1);
                r.created(c);
                r.dropped(c);
            }
        }
    }

    #[test]
    fn a_divide_and_conquer_keeps_the_bound_low() {
        let mut r = Recurrence::default();
        // Four trees of 131071 calls: two thirds of the calls come back, twice each, most in
        // the epoch they were made in; those near the root, over many epochs, are few.
        let mut next = 0;
        for _ in 0..4 {
            call(&mut r, &mut next, 16);
        }
        assert_eq!(r.keep_idle(), KEEP_IDLE_MIN);
    }

    #[test]
    fn a_hot_color_among_fresh_ones_is_one_color() {
        let mut r = Recurrence::default();
        // A few collectors, sampled, each dropped and back between fresh colors forever.
        let hot: Vec<Color> = sampled(1 << 40).take(GROW_RETURNERS as usize - 1).collect();
        for c in 0..400_000u64 {
            let c = Color(c);
            r.created(c);
            r.dropped(c);
            let h = hot[c.0 as usize % hot.len()];
            r.created(h);
            r.dropped(h);
        }
        assert_eq!(r.keep_idle(), KEEP_IDLE_MIN);
        for h in hot {
            let e = r.sample[Recurrence::entry_of(h).unwrap()];
            assert!(e.color == h && e.epochs >= RECURRING_EPOCHS, "{h:?} is recurring");
        }
    }

    #[test]
    fn the_bound_never_passes_its_maximum_and_colors_not_sampled_cost_nothing() {
        let mut r = Recurrence::default();
        churn_ring(&mut r, 30_000, 0, 12);
        assert_eq!(r.keep_idle(), KEEP_IDLE_MAX);
        let unsampled = (0..).map(Color).find(|&c| Recurrence::entry_of(c).is_none()).unwrap();
        let (drops, returners) = (r.drops, r.returners);
        r.created(unsampled);
        r.dropped(unsampled);
        assert_eq!((r.drops, r.returners), (drops, returners));
    }

    #[test]
    fn the_sample_is_one_color_in_eight_and_spread_over_the_entries() {
        // Consecutive colors and colors strided by a power of two.
        for stride in [1u64, 64, 1 << 32] {
            let picked: Vec<usize> =
                (0..80_000u64).filter_map(|i| Recurrence::entry_of(Color(i * stride))).collect();
            assert!((9_000..11_000).contains(&picked.len()), "stride {stride}: {}", picked.len());
            let used: std::collections::HashSet<usize> = picked.iter().copied().collect();
            assert!(used.len() > SAMPLE_ENTRIES * 3 / 4, "stride {stride}: {} entries", used.len());
        }
    }
}
