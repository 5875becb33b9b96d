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
//! So the bound starts at [`KEEP_IDLE_MIN`] and doubles (up to [`KEEP_IDLE_MAX`]) when the
//! colors it drops come back again and again. A sample of the dropped colors (one in
//! [`SAMPLE_ONE_IN`], by a hash of the color) is remembered exactly, with how many times each
//! was dropped, in a table of [`SAMPLE_ENTRIES`] (a newer color takes an entry from an older
//! one). A new slot of a sampled color that was dropped [`RECURRING_DROPS`] times or more is a
//! *return*; every [`WINDOW`] sampled drops, if a quarter or more of them were matched by
//! returns, the bound doubles. Why three drops: a divide and conquer's call comes back twice at
//! most after its slot was dropped (the two halves' answers, each to its own event, the slot
//! dropped after each turn), then never; a ring's colors come back every lap.
//!
//! Invariants: [`keep_idle`](Recurrence::keep_idle) never decreases and stays within
//! `[KEEP_IDLE_MIN, KEEP_IDLE_MAX]`; the sample's memory is fixed once made (at the first sampled drop); only colors
//! dropped while idle count (a guest given back or moved on is not dropped for the bound).
//! The bound never shrinks: slots kept idle above a lower bound would stay until they next
//! empty, so shrinking would free nothing at once.

use crate::color::Color;

/// The bound a worker starts with: 1024 slots, about 200 KB, within a core's L2 with the rest
/// of the worker's state. Measured (`fib_probe 27 12 21`, two workers, ochre / tokio-mt in
/// one process, alternated builds): the bound 16384 0.70-0.84, 2048 0.89-0.95, 256 0.88-1.02.
pub(crate) const KEEP_IDLE_MIN: usize = 1024;

/// The most slots kept idle (the bound of before), about 3 MB of slots plus their buffers.
pub(crate) const KEEP_IDLE_MAX: usize = 16384;

/// One dropped color in this many is remembered (by a hash of the color): a sample that covers
/// a ring of [`SAMPLE_ENTRIES`] times this many colors.
const SAMPLE_ONE_IN: u64 = 8;

/// Entries of the sample (16 bytes each: 64 KB a worker, touched only when a sampled color is
/// dropped or comes back).
const SAMPLE_ENTRIES: usize = 4096;

/// Drops of a sampled color before its return counts: more than a divide and conquer's call
/// ever has (module doc).
const RECURRING_DROPS: u32 = 3;

/// Sampled drops between two looks at the returns.
const WINDOW: u32 = 64;

/// A sampled color and how many times it was dropped (0: an entry never used).
#[derive(Clone, Copy)]
struct Entry {
    color: Color,
    drops: u32,
}

const UNUSED: Entry = Entry { color: Color(0), drops: 0 };

/// One worker's bound on idle slots, and the sample it is judged from (module doc).
pub(crate) struct Recurrence {
    /// Idle slots kept in the table (over it, a slot is dropped when it empties).
    keep_idle: usize,
    /// The sample: empty until the first sampled drop (a worker whose table stays under the
    /// bound, nearly all, never allocates it).
    sample: Vec<Entry>,
    /// Sampled drops in the current window.
    drops: u32,
    /// Returns of sampled colors in the current window.
    returns: u32,
}

impl Default for Recurrence {
    fn default() -> Self {
        Recurrence { keep_idle: KEEP_IDLE_MIN, sample: Vec::new(), drops: 0, returns: 0 }
    }
}

impl Recurrence {
    /// How many slots the table keeps with idle ones among them.
    #[inline]
    pub(crate) fn keep_idle(&self) -> usize {
        self.keep_idle
    }

    /// The sample's entry for `color`, if the color is sampled.
    #[inline]
    fn entry_of(color: Color) -> Option<usize> {
        // A multiplicative hash: plain colors are often consecutive numbers.
        let h = color.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let h = h ^ (h >> 29);
        h.is_multiple_of(SAMPLE_ONE_IN).then_some((h / SAMPLE_ONE_IN) as usize % SAMPLE_ENTRIES)
    }

    /// `color`'s idle slot was dropped for the bound.
    pub(crate) fn dropped(&mut self, color: Color) {
        let Some(i) = Self::entry_of(color) else { return };
        if self.sample.is_empty() {
            self.sample = vec![UNUSED; SAMPLE_ENTRIES];
        }
        let e = self.sample[i];
        let drops = if e.color == color { e.drops.saturating_add(1) } else { 1 };
        self.sample[i] = Entry { color, drops };
        self.drops += 1;
        if self.drops >= WINDOW {
            // A quarter or more of the drops came back as returns: the colors dropped are a
            // working set larger than the bound, not one-off colors.
            if self.returns * 4 >= self.drops {
                self.keep_idle = (self.keep_idle * 2).min(KEEP_IDLE_MAX);
            }
            self.drops = 0;
            self.returns = 0;
        }
    }

    /// A home slot is made for `color` (its first post here, or its first since it was
    /// dropped).
    #[inline]
    pub(crate) fn created(&mut self, color: Color) {
        let Some(e) = Self::entry_of(color).and_then(|i| self.sample.get(i)) else { return };
        if e.color == color && e.drops >= RECURRING_DROPS {
            self.returns += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drops and re-creates every color of a ring of `colors`, `laps` times.
    fn churn_ring(r: &mut Recurrence, colors: u64, laps: u32) {
        for _ in 0..laps {
            for c in 0..colors {
                r.created(Color(c));
                r.dropped(Color(c));
            }
        }
    }

    #[test]
    fn a_ring_larger_than_the_bound_raises_it_after_a_few_laps() {
        let mut r = Recurrence::default();
        churn_ring(&mut r, 10_000, 3);
        assert_eq!(r.keep_idle(), KEEP_IDLE_MIN, "three drops before a return counts");
        churn_ring(&mut r, 10_000, 1);
        assert_eq!(r.keep_idle(), KEEP_IDLE_MAX, "every sampled color came back");
    }

    #[test]
    fn fresh_colors_and_short_lived_ones_keep_the_bound_low() {
        let mut r = Recurrence::default();
        // A divide and conquer's calls: each dropped after its own turn and after each of its
        // two answers, coming back for each answer; leaves dropped once, never back.
        for call in 0..200_000u64 {
            let c = Color(call);
            r.created(c);
            r.dropped(c);
            if call % 2 == 0 {
                for _ in 0..2 {
                    r.created(c);
                    r.dropped(c);
                }
            }
        }
        assert_eq!(r.keep_idle(), KEEP_IDLE_MIN);
    }

    #[test]
    fn the_bound_never_passes_its_maximum_and_colors_not_sampled_cost_nothing() {
        let mut r = Recurrence::default();
        churn_ring(&mut r, 50_000, 12);
        assert_eq!(r.keep_idle(), KEEP_IDLE_MAX);
        let unsampled = (0..).map(Color).find(|&c| Recurrence::entry_of(c).is_none()).unwrap();
        let (drops, returns) = (r.drops, r.returns);
        r.created(unsampled);
        r.dropped(unsampled);
        assert_eq!((r.drops, r.returns), (drops, returns));
    }
}
