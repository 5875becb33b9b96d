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
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct Color(pub u64);

impl Color {
    /// The color of events posted without one: a program that never colors anything is serial,
    /// and therefore correct, and parallelism is added one color at a time.
    pub const DEFAULT: Color = Color(0);
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

/// The home worker of `color` among `workers` workers.
///
/// The color is mixed (the 64-bit finalizer of MurmurHash3) before the modulo, so that colors
/// derived from pointers, file descriptors or strided ids spread evenly instead of piling onto one
/// worker (users of Asio strands hit exactly that, asio #1240). Use
/// [`Runtime::home_of`](crate::Runtime::home_of) to choose colors for a given worker.
#[inline]
pub(crate) fn home_of(color: Color, workers: usize) -> usize {
    let mut x = color.0;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    // Multiply-shift instead of `%`: no division on the posting path.
    ((u128::from(x) * workers as u128) >> 64) as usize
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn home_is_stable_and_in_range() {
        let colors = if cfg!(miri) { 50 } else { 1000 };
        for n in 1..20 {
            for c in 0..colors {
                let h = home_of(Color(c), n);
                assert!(h < n);
                assert_eq!(h, home_of(Color(c), n));
            }
        }
    }

    #[test]
    fn strided_colors_spread_evenly() {
        // Colors that are multiples of 64 (pointers, aligned ids) must not collide.
        let n = 8;
        let mut per = vec![0usize; n];
        for i in 0..8000u64 {
            per[home_of(Color(i * 64), n)] += 1;
        }
        for (w, &k) in per.iter().enumerate() {
            assert!((800..1200).contains(&k), "worker {w} got {k} of 8000 strided colors");
        }
    }
}
