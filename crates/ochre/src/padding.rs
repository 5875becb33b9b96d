//! Cache-line padding of state that several workers touch.
//!
//! Invariant: every `Padded<T>` starts on its own 128-byte boundary and no other `Padded` value
//! shares its lines, so a line written by one worker is never invalidated by another worker's
//! writes to unrelated data (thesis §5.2.1: padding alone raised ping-pong throughput 2.6x at 8
//! cores). 128 bytes, not 64, because x86's adjacent-line prefetcher pulls lines in pairs
//! (crossbeam's `CachePadded` makes the same choice).
//!
//! With the `unpadded` cargo feature, `Padded<T>` is a plain wrapper: per-worker state is laid out
//! back to back as in the original libasync-smp, which is what the ablation study measures.

use std::ops::Deref;

/// A value alone on its cache lines (unless the `unpadded` feature is on).
#[cfg(not(feature = "unpadded"))]
#[derive(Default)]
pub(crate) struct Padded<T>(crossbeam_utils::CachePadded<T>);

#[cfg(not(feature = "unpadded"))]
impl<T> Padded<T> {
    pub(crate) fn new(value: T) -> Self {
        Padded(crossbeam_utils::CachePadded::new(value))
    }
}

/// A value laid out without padding (the `unpadded` feature: libasync-smp's layout).
#[cfg(feature = "unpadded")]
#[derive(Default)]
pub(crate) struct Padded<T>(T);

#[cfg(feature = "unpadded")]
impl<T> Padded<T> {
    pub(crate) fn new(value: T) -> Self {
        Padded(value)
    }
}

impl<T> Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Whether this build pads shared per-worker state (false with the `unpadded` feature).
pub const PADDED: bool = cfg!(not(feature = "unpadded"));

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn padded_values_do_not_share_lines() {
        let pair = [Padded::new(1u64), Padded::new(2u64)];
        let a = &*pair[0] as *const u64 as usize;
        let b = &*pair[1] as *const u64 as usize;
        if PADDED {
            assert!(b - a >= 128, "padded neighbours {a:#x} and {b:#x} are closer than 128 bytes");
            assert_eq!(a % 128, 0);
        } else {
            assert_eq!(b - a, 8);
        }
    }
}
