//! [`ColorVec`]: a growable sequence whose storage EMA places for the worker of a color, for
//! the intermediate runs a map lane hands to a reduce partition (Phoenix's intermediate
//! buffers, which the thesis kept in EMA).
//!
//! EMA serves objects up to 1 KiB ([`ochre::ColorBox`]), and Rust's collections take another
//! allocator only with the unstable `allocator_api`; so a `ColorVec` is a list of 1 KiB slabs,
//! each a [`ColorBox`] made for the color, holding `SLAB / size_of::<T>()` elements. A lane
//! pushes a partition's pairs into slabs placed for the partition's worker (from the lane's EMA
//! heap, in blocks reserved for that worker: never on a line shared with the lane's own data
//! or another partition's), and the reduce event reads them there and frees them back (remote
//! frees, batched). Off a worker, with EMA off, or for elements too large or too aligned for a
//! slab, the slabs come from the event or global allocator, as `ColorBox` does, or (too large)
//! the elements go to a plain `Vec`.
//!
//! Invariants: elements `0..len` are initialized and no other; element `i` is in slab
//! `i / per`, at offset `(i % per) * size_of::<T>()`; slabs are only added at the end, and
//! every slab but the last is full. Elements are dropped exactly once: by [`ColorVec::drain`]
//! as it hands them out (its iterator drops the ones it did not hand out), or by `Drop`.

use std::marker::PhantomData;
use std::mem::{align_of, size_of, MaybeUninit};

use ochre::{Color, ColorBox};

/// Bytes of one slab: EMA's largest class.
const SLAB: usize = 1024;
/// A slab's alignment: the largest EMA serves (its classes' objects are cache-line aligned).
const SLAB_ALIGN: usize = 64;

/// One slab's storage.
#[repr(C, align(64))]
struct Slab([MaybeUninit<u8>; SLAB]);

const _: () = assert!(align_of::<Slab>() == SLAB_ALIGN && size_of::<Slab>() == SLAB);

/// A sequence of `T` in slabs placed by EMA for a color's worker (module doc).
pub(crate) struct ColorVec<T> {
    color: Color,
    slabs: Vec<ColorBox<Slab>>,
    /// Elements too large or too aligned for a slab.
    plain: Vec<T>,
    len: usize,
    _own: PhantomData<T>,
}

impl<T> ColorVec<T> {
    /// Elements per slab; 0 when `T` does not fit a slab (then `plain` holds them).
    const PER: usize = if size_of::<T>() == 0 {
        usize::MAX
    } else if size_of::<T>() <= SLAB && align_of::<T>() <= SLAB_ALIGN {
        SLAB / size_of::<T>()
    } else {
        0
    };

    /// An empty sequence whose slabs will be placed for `color`'s worker.
    pub(crate) fn new(color: Color) -> Self {
        ColorVec { color, slabs: Vec::new(), plain: Vec::new(), len: 0, _own: PhantomData }
    }

    /// Elements held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether every slab came from EMA (vacuously true with none).
    pub(crate) fn is_placed(&self) -> bool {
        self.slabs.iter().all(ColorBox::is_placed)
    }

    /// Adds `value` at the end.
    #[inline]
    pub(crate) fn push(&mut self, value: T) {
        if Self::PER == 0 {
            self.len += 1;
            return self.plain.push(value);
        }
        let at = self.len % Self::PER;
        if at == 0 && size_of::<T>() != 0 {
            self.slabs.push(ColorBox::new(self.color, Slab([MaybeUninit::uninit(); SLAB])));
        }
        if let Some(slab) = self.slabs.last_mut() {
            let p = slab.0.as_mut_ptr().cast::<T>();
            // SAFETY: slot `at` of the last slab is within it (`at < PER`, `PER * size <=
            // SLAB`), aligned (the slab is aligned on 64 >= align_of::<T>(), and `at * size`
            // is a multiple of the alignment), and not initialized (elements `0..len` only,
            // module doc).
            unsafe { p.add(at).write(value) };
        } else {
            // A zero-sized `T`: nothing to store; forget it as a write into a slab would.
            std::mem::forget(value);
        }
        self.len += 1;
    }

    /// Hands the elements out in order, leaving the sequence empty (its slabs are freed as the
    /// iterator is dropped).
    pub(crate) fn drain(&mut self) -> Drain<T> {
        let len = std::mem::take(&mut self.len);
        Drain {
            slabs: std::mem::take(&mut self.slabs),
            plain: std::mem::take(&mut self.plain).into_iter(),
            next: 0,
            len: if Self::PER == 0 { 0 } else { len },
            _own: PhantomData,
        }
    }
}

impl<T> Drop for ColorVec<T> {
    fn drop(&mut self) {
        drop(self.drain());
    }
}

/// The elements of a [`ColorVec`], handed out by [`ColorVec::drain`].
pub(crate) struct Drain<T> {
    slabs: Vec<ColorBox<Slab>>,
    plain: std::vec::IntoIter<T>,
    /// Index of the next element to hand out; elements `next..len` are still initialized.
    next: usize,
    len: usize,
    _own: PhantomData<T>,
}

impl<T> Iterator for Drain<T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        if self.next >= self.len {
            return self.plain.next();
        }
        let (i, per) = (self.next, ColorVec::<T>::PER);
        self.next += 1;
        if size_of::<T>() == 0 {
            // SAFETY: a zero-sized `T` is read from no memory; `len` such values were pushed
            // and forgotten, and each is handed out once.
            return Some(unsafe { std::ptr::NonNull::<T>::dangling().as_ptr().read() });
        }
        let p = self.slabs[i / per].0.as_ptr().cast::<T>();
        // SAFETY: element `i < len` is initialized, at this slot (module doc), and read once:
        // `next` moved past it.
        Some(unsafe { p.add(i % per).read() })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.len - self.next + self.plain.len();
        (n, Some(n))
    }
}

impl<T> ExactSizeIterator for Drain<T> {}

impl<T> Drop for Drain<T> {
    fn drop(&mut self) {
        // Drop what was not handed out; the slabs, plain storage, are freed after.
        for _ in self.by_ref() {}
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;

    #[test]
    fn elements_come_back_in_order_across_slabs() {
        let mut v = ColorVec::new(Color(3));
        let n = 3 * ColorVec::<(Vec<u8>, u64)>::PER + 5;
        for i in 0..n {
            v.push((vec![i as u8; i % 7], i as u64));
        }
        assert_eq!(v.len(), n);
        assert_eq!(v.slabs.len(), 4);
        let back: Vec<_> = v.drain().collect();
        assert!(v.is_empty());
        assert_eq!(back.len(), n);
        for (i, (k, x)) in back.into_iter().enumerate() {
            assert_eq!((k.len(), x), (i % 7, i as u64));
        }
    }

    #[test]
    fn every_element_is_dropped_once_whether_drained_or_not() {
        let token = Rc::new(());
        {
            let mut v = ColorVec::new(Color(1));
            for _ in 0..100 {
                v.push(token.clone());
            }
            let mut d = v.drain();
            let taken: Vec<_> = d.by_ref().take(40).collect();
            assert_eq!(Rc::strong_count(&token), 101);
            drop(d);
            assert_eq!(Rc::strong_count(&token), 41);
            drop(taken);
            for _ in 0..10 {
                v.push(token.clone());
            }
        }
        assert_eq!(Rc::strong_count(&token), 1);
    }

    #[test]
    fn large_and_zero_sized_elements_are_kept_too() {
        let mut big = ColorVec::new(Color(1));
        big.push([7u8; 2000]);
        big.push([8u8; 2000]);
        assert!(big.slabs.is_empty(), "too large for a slab: a plain Vec");
        assert_eq!(big.drain().map(|a| a[1999]).collect::<Vec<_>>(), vec![7, 8]);
        let mut unit = ColorVec::new(Color(1));
        for _ in 0..3000 {
            unit.push(());
        }
        assert_eq!(unit.drain().count(), 3000);
    }
}
