//! Colors and their placement on workers.
//!
//! A color names a serialization domain: two events of one color never run at the same time.
//! Every color has a *home* worker, a pure function of the color and the worker count, so that
//! any thread can find it without reading shared state. The home keeps the color's queue; when
//! the color is lent to another worker by stealing, the home forwards later events to it (see
//! `queue`), so the mapping itself never changes under the feet of a poster.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The color of an event. Events of one color never run concurrently; events of different colors
/// may run in parallel on different workers.
///
/// The two top bits of the value name a mode: bit 63 a [grouped](Color::grouped) color, bit 62
/// (ungrouped) one that [admits readers](Color::with_readers), whose every exclusive turn takes
/// a reader-writer word. A color made from a hash or a wide counter should keep to the low 62
/// bits ([`Color::plain`]), or a quarter of its colors pay for reads they never get and half of
/// them are grouped.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct Color(pub u64);

/// Colors with this bit set are grouped: bits 32-62 hold the group, bits 0-31 the member.
const GROUPED: u64 = 1 << 63;

/// Ungrouped colors with this bit set admit readers (`reader`).
const READERS: u64 = 1 << 62;

impl Color {
    /// The color of events posted without one: a program that never colors anything is serial,
    /// and therefore correct, and parallelism is added one color at a time.
    pub const DEFAULT: Color = Color(0);

    /// A plain color (neither grouped nor admitting readers) from any 64-bit value: a hash, a
    /// wide counter, an address. The value's two top bits are dropped; `Color(n)` is the same
    /// color for `n` below 2^62.
    ///
    /// ```
    /// use ochre::Color;
    /// let c = Color::plain(u64::MAX);
    /// assert!(!c.admits_readers() && c.group().is_none());
    /// assert_eq!(Color::plain(7), Color(7));
    /// ```
    pub const fn plain(value: u64) -> Color {
        Color(value & !(GROUPED | READERS))
    }

    /// Member `member` of color group `group` (a "bubble" of the memory-aware scheduling work: a
    /// connection and its helpers, a MapReduce task and its buffers). The members of a group are
    /// placed on the workers of one cache domain, groups are spread over the domains, and
    /// stealing moves the waiting members of a group together. Grouped colors have the top bit
    /// set; `group` keeps 31 bits.
    pub const fn grouped(group: u32, member: u32) -> Color {
        Color(GROUPED | ((group as u64 & 0x7fff_ffff) << 32) | member as u64)
    }

    /// Color `id` (its low 62 bits) in the mode that admits readers: besides its exclusive
    /// events ([`post`](crate::post)) it takes reads ([`post_read`](crate::post_read)), which may
    /// run at the same time as each other and never at the same time as its exclusive events.
    /// The mode is part of the color's value (bit 62), so `Color::with_readers(5)` and
    /// `Color(5)` are two colors.
    pub const fn with_readers(id: u64) -> Color {
        Color((id & (READERS - 1)) | READERS)
    }

    /// True for a color made by [`with_readers`](Color::with_readers) (bit 62 set, not grouped):
    /// its exclusive turns take its reader-writer word.
    #[inline]
    pub const fn admits_readers(self) -> bool {
        self.0 & (GROUPED | READERS) == READERS
    }

    /// The entry of this color in a direct-mapped table of `entries` (a power of two): the top
    /// bits of a multiplicative (Fibonacci) hash, so that strided colors spread. The run
    /// queue's cache of recent routes and the reader colors' memo index by it.
    #[inline]
    pub(crate) const fn table_index(self, entries: usize) -> usize {
        debug_assert!(entries.is_power_of_two() && entries > 1);
        (self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - entries.trailing_zeros())) as usize
    }

    /// The group of a grouped color.
    pub const fn group(self) -> Option<u32> {
        if self.0 & GROUPED != 0 {
            Some(((self.0 >> 32) & 0x7fff_ffff) as u32)
        } else {
            None
        }
    }
}

/// Where colors live: the worker count, how many of them (the first ones) are homes of colors,
/// and the size of a cache domain (consecutive workers share caches, since workers are placed in
/// tree order). Homes: every worker, or with more workers than CPUs as many as there are CPUs
/// (`Config::home_on_every_worker`). Invariant: `1 <= homes <= workers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) workers: usize,
    pub(crate) homes: usize,
    pub(crate) domain: usize,
    /// `homes`' reciprocal for [`home_of`]'s runs, `u64::MAX / homes + 1` (0 for one home):
    /// a 32-bit number divided by `homes` is then a multiplication (the high half of the
    /// 128-bit product, exact for every 32-bit dividend: Lemire, Kaser and Kurz, "Faster
    /// remainder by direct computation", 2019), no division on the posting path.
    per_home: u64,
}

impl Placement {
    /// `workers` workers, of which the first `homes` (at least one) are homes of colors.
    pub(crate) fn new(workers: usize, homes: usize, domain: usize) -> Placement {
        let homes = homes.clamp(1, workers.max(1));
        let per_home = if homes > 1 { u64::MAX / homes as u64 + 1 } else { 0 };
        Placement { workers, homes, domain, per_home }
    }

    /// Workers that share nothing worth grouping for, each a home.
    #[cfg(test)]
    pub(crate) fn flat(workers: usize) -> Placement {
        Placement::new(workers, workers, 1)
    }
}

impl fmt::Debug for Color {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Color({})", self.0)
    }
}

impl fmt::Display for Color {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<u64> for Color {
    fn from(v: u64) -> Self {
        Color(v)
    }
}

/// Plain colors from this one on are placed in runs of [`RUN`] consecutive colors (below it,
/// one by one).
pub(crate) const RUNS_FROM: u64 = 64;

/// Consecutive colors that share a home, from [`RUNS_FROM`] on (`8k .. 8k + 7`); a power of
/// two, so that finding a color's run is a shift.
pub(crate) const RUN: u64 = 8;

/// The 64-bit finalizer of MurmurHash3: every input bit moves every output bit.
#[inline]
const fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

/// A worker below `workers` from a mixed value: multiply-shift instead of `%`, so that there
/// is no division on the posting path.
#[inline]
fn scaled(x: u64, workers: usize) -> usize {
    ((u128::from(x) * workers as u128) >> 64) as usize
}

/// The home worker of `color`: for a grouped color, a worker of its group's cache domain (groups
/// spread round robin over the domains, members round robin within one); for others, a hash,
/// one color at a time below [`RUNS_FROM`] and in runs of [`RUN`] consecutive colors above.
///
/// The color is mixed (the 64-bit finalizer of MurmurHash3) before the modulo, so that colors
/// derived from pointers, file descriptors or strided ids spread evenly instead of piling onto one
/// worker (users of Asio strands hit exactly that, asio #1240). Use
/// [`Runtime::home_of`](crate::Runtime::home_of) to choose colors for a given worker.
///
/// Runs: a program that makes thousands of colors numbers them in order, a chunk of an array
/// each (`Color(1 + i)` for chunk `i`), and hashing them one by one gives each worker every
/// other piece of the array in a random order, which the memory reads at a fraction of the
/// speed of whole stretches (prefetchers and pages follow stretches; on this project's host
/// one thread read half of a 32 MB array in 8 KB pieces in 0.56-0.73 ms contiguous, 0.8-1.2 in
/// runs of eight pieces, 1.4-1.7 scattered at random). tokio's workers take the spawned tasks
/// from its injection queue in batches of consecutive ones, and rayon halves the range, so
/// both read stretches. So from [`RUNS_FROM`] on colors go in runs of [`RUN`], and runs in
/// *cycles* of `homes` consecutive runs (run `r` in cycle `r / homes`), the runs of a cycle on
/// every worker once, in order from a start hashed from the cycle. Invariants: the colors of
/// a run share a home; the runs of a cycle have distinct homes, so `8 * homes` consecutive
/// colors that begin a cycle are spread evenly over every worker, and any stretch of colors is
/// within two runs a worker of even (its partial cycles at either end); strided colors, whose
/// runs fall in different cycles, still spread by the hash; the mode that admits readers
/// (bit 62) is part of what is hashed, so `Color::with_readers(n)` is homed apart from
/// `Color(n)`. Below [`RUNS_FROM`] a program's few colors spread one by one, so that two or
/// four chunks or actors land on different workers as often as a hash puts them there.
///
/// Measured (session 58, 2 workers, against hashing one by one, alternated processes): a
/// user's sum of 4M numbers in 1,024-number chunks (`bench steal --quick`, 8 processes) 0.84
/// -> 1.03 of tokio-mt, 1.08 -> 1.30 at 8 workers; the stealing case's light colors
/// (`Color(100_000 + l)`) spread evenly, 149K -> 192K events/s; the 64-token ring over 1,000
/// actors (`bench actors`) 0-13% slower (medians of 6-8 processes, inside this host's spread:
/// its runs' first colors are settled, so `follow` joins stretches later).
#[inline]
pub(crate) fn home_of(color: Color, placement: Placement) -> usize {
    let Placement { homes: workers, domain, per_home, .. } = placement;
    if let Some(group) = color.group() {
        let domain = domain.clamp(1, workers);
        let domains = workers.div_ceil(domain);
        let first = (group as usize % domains) * domain;
        let size = domain.min(workers - first);
        return first + (color.0 as u32 as usize) % size;
    }
    if color.0 & (READERS - 1) < RUNS_FROM || workers == 1 {
        return scaled(mix(color.0), workers);
    }
    let run = color.0 / RUN;
    // The cycle and the run's place in it, from the run's low 32 bits (`per_home`); the high
    // bits (the mode, colors past 2^35) join the cycle's hash.
    let low = u64::from(run as u32);
    let cycle = ((u128::from(per_home) * u128::from(low)) >> 64) as u64;
    let place = (low - cycle * workers as u64) as usize;
    let home = scaled(mix(cycle | (run >> 32) << 32), workers) + place;
    // Both terms are below `workers`.
    if home >= workers {
        home - workers
    } else {
        home
    }
}

/// The first of the `tries` colors `Color(first)`, `Color(first + 1)`, ... homed on `worker`
/// (`place`'s and the reader lanes' search), or `None`. Below [`RUNS_FROM`] one color in
/// `homes` is, by the hash; from it on, every cycle of `homes` runs has one on each worker, so
/// `16 * homes` tries (to the end of the first color's cycle and through the next) always
/// find one.
pub(crate) fn first_homed_on(
    first: u64,
    tries: u64,
    worker: usize,
    placement: Placement,
) -> Option<Color> {
    (0..tries).map(|k| Color(first.wrapping_add(k))).find(|&c| home_of(c, placement) == worker)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn home_is_stable_and_in_range() {
        let colors = if cfg!(miri) { 50 } else { 1000 };
        for n in 1..20 {
            for c in 0..colors {
                let h = home_of(Color(c), Placement::flat(n));
                assert!(h < n);
                assert_eq!(h, home_of(Color(c), Placement::flat(n)));
            }
        }
    }

    #[test]
    fn groups_stay_in_one_domain_and_spread_over_domains() {
        let p = Placement::new(8, 8, 2);
        for g in 0..8u32 {
            let homes: Vec<usize> = (0..6).map(|m| home_of(Color::grouped(g, m), p)).collect();
            let first = (g as usize % 4) * 2;
            assert!(homes.iter().all(|&h| h == first || h == first + 1), "group {g}: {homes:?}");
            assert!(
                homes.contains(&first) && homes.contains(&(first + 1)),
                "both cores of the pair"
            );
        }
        assert_eq!(Color::grouped(7, 3).group(), Some(7));
        assert_eq!(Color(5).group(), None);
        assert!(Color::with_readers(5).admits_readers() && !Color(5).admits_readers());
        assert!(!Color::grouped(u32::MAX, 1).admits_readers(), "group bits are not the mode");
        assert_eq!(Color::with_readers(u64::MAX), Color::with_readers((1 << 62) - 1));
        // A last, smaller domain.
        let p = Placement::new(5, 5, 2);
        assert!((0..10).all(|m| home_of(Color::grouped(2, m), p) == 4));
    }

    #[test]
    fn many_colors_are_homed_in_runs_spread_evenly() {
        // Miri interprets every call: a sample of it there (the module's unsafe-free checks).
        let (counts, runs, cycles, bases): (&[usize], u64, u64, u64) = if cfg!(miri) {
            (&[1, 2, 3, 6], 20, 12, 400)
        } else {
            (&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 64, 100, 300], 400, 200, 3_000)
        };
        for &n in counts {
            let p = Placement::flat(n);
            // Runs of eight consecutive colors share a home from RUNS_FROM on.
            for run in (RUNS_FROM / RUN)..(RUNS_FROM / RUN + runs) {
                let first = home_of(Color(run * RUN), p);
                assert!(first < n);
                for c in run * RUN..(run + 1) * RUN {
                    assert_eq!(home_of(Color(c), p), first, "{n} workers, color {c}");
                }
            }
            // The runs of a cycle of `n` have distinct homes.
            let first = (RUNS_FROM / RUN).div_ceil(n as u64);
            for cycle in first..first + cycles {
                let mut seen = vec![false; n];
                for run in cycle * n as u64..(cycle + 1) * n as u64 {
                    seen[home_of(Color(run * RUN), p)] = true;
                }
                assert!(seen.iter().all(|&s| s), "{n} workers, cycle {cycle}");
            }
            // Any stretch of colors is within two runs a worker of even: 64 objects a program
            // numbers from any base.
            for base in (RUNS_FROM..bases).step_by(7) {
                let mut per = vec![0u64; n];
                for c in base..base + 64 {
                    per[home_of(Color(c), p)] += 1;
                }
                let (min, max) = (per.iter().min().unwrap(), per.iter().max().unwrap());
                assert!(max - min <= 2 * RUN, "{n} workers, base {base}: {per:?}");
            }
        }
    }

    /// The reciprocal's division is exact: the same homes as dividing.
    #[test]
    fn runs_divide_by_the_homes_exactly() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let (homes, tries) = if cfg!(miri) { (2..12usize, 10) } else { (2..300, 200) };
        for n in homes {
            let p = Placement::flat(n);
            for _ in 0..tries {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let color = Color(x >> 2 | RUNS_FROM);
                let run = color.0 / RUN;
                let low = u64::from(run as u32);
                let (cycle, place) = (low / n as u64, (low % n as u64) as usize);
                let want = (scaled(mix(cycle | (run >> 32) << 32), n) + place) % n;
                assert_eq!(home_of(color, p), want, "{n} workers, {color:?}");
            }
            // The ends of the 32-bit range.
            for low in [0u64, 1, u64::from(u32::MAX) - 1, u64::from(u32::MAX)] {
                let color = Color((low | 1 << 40) * RUN);
                let want =
                    (scaled(mix((low / n as u64) | (1 << 40)), n) + (low % n as u64) as usize) % n;
                assert_eq!(home_of(color, p), want, "{n} workers, {color:?}");
            }
        }
    }

    #[test]
    fn reader_mode_and_few_colors_spread_apart() {
        let p = Placement::flat(8);
        let differ = (64..6400)
            .step_by(8)
            .filter(|&i| home_of(Color(i), p) != home_of(Color::with_readers(i), p))
            .count();
        assert!(differ > 600, "the reader mode hashed apart: {differ} of 800 runs differ");
        // Below RUNS_FROM colors are hashed one by one: neighbours part.
        let p = Placement::flat(2);
        let parted = (1..RUNS_FROM).filter(|&c| home_of(Color(c), p) != home_of(Color(c - 1), p));
        assert!(parted.count() > 16);
    }

    /// `first_homed_on`'s bound: from `RUNS_FROM` on, `16 * homes` tries find every worker
    /// from any first color.
    #[test]
    fn a_search_from_any_color_finds_every_worker_within_its_bound() {
        let (counts, firsts): (&[usize], u64) =
            if cfg!(miri) { (&[2, 3], 100) } else { (&[2, 3, 5, 6, 8, 12, 100], 2_000) };
        for &n in counts {
            let p = Placement::flat(n);
            for first in (RUNS_FROM..RUNS_FROM + firsts).step_by(3) {
                for w in 0..n {
                    let c = first_homed_on(first, 16 * n as u64, w, p);
                    assert!(c.is_some_and(|c| home_of(c, p) == w), "{n} workers, {first}, {w}");
                }
            }
        }
    }

    #[test]
    fn strided_colors_spread_evenly() {
        // Colors that are multiples of 64 (pointers, aligned ids) must not collide.
        let n = 8;
        let mut per = vec![0usize; n];
        for i in 0..8000u64 {
            per[home_of(Color(i * 64), Placement::flat(n))] += 1;
        }
        for (w, &k) in per.iter().enumerate() {
            assert!((800..1200).contains(&k), "worker {w} got {k} of 8000 strided colors");
        }
    }
}
