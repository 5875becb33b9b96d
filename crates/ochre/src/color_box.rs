//! [`ColorBox`] and [`ColorBytes`]: user data placed, by EMA, for the worker that runs a color.
//!
//! A handler that prepares data for events of another color (a buffer a consumer will fill, a
//! request a connection's handlers will read) allocates it with `ColorBox::new(color, value)`:
//! the storage comes from the calling worker's EMA heap, from blocks reserved for that color's
//! home worker, so it never shares a cache line with data bound for another worker. Outside a
//! worker, with EMA off, or for values larger than EMA's largest class, it is an ordinary `Box`.
//!
//! If the color later runs elsewhere (stolen, or the box is moved to an event of another color),
//! the object stays valid wherever it goes; it was placed for the old home, and its free becomes a
//! remote free, batched back to the heap that allocated it. Dropping a `ColorBox` on any thread is
//! allowed.
//!
//! [`ColorBytes`] is the same for a byte buffer whose length is known only at run time (a
//! message, a response body): up to EMA's largest class it is placed, larger it comes from the
//! global allocator.

use std::alloc::Layout;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::alloc;
use crate::color::home_of;
use crate::context::with_current;
use crate::Color;

/// An owned value in memory placed for the worker that runs a color (module doc).
pub struct ColorBox<T> {
    ptr: NonNull<T>,
    /// Where the storage came from: an EMA heap (`true`) or the global allocator.
    ema: bool,
}

// SAFETY: a ColorBox owns its `T` like a `Box<T>`; its storage can be freed from any thread.
unsafe impl<T: Send> Send for ColorBox<T> {}
// SAFETY: shared access only hands out `&T`.
unsafe impl<T: Sync> Sync for ColorBox<T> {}

impl<T> ColorBox<T> {
    /// Moves `value` into storage placed for `color`'s home worker. If the worker's heap is at
    /// its cap ([`Config::ema_cap`](crate::Config::ema_cap)), the value goes to the global
    /// allocator instead; [`ColorBox::try_new`] refuses instead.
    pub fn new(color: Color, value: T) -> ColorBox<T> {
        match Self::place(color, value) {
            Ok(b) => b,
            Err(value) => Self::boxed(value),
        }
    }

    /// As [`ColorBox::new`], but hands `value` back if this worker's EMA heap is at its cap:
    /// for memory that must stay within the budget.
    pub fn try_new(color: Color, value: T) -> Result<ColorBox<T>, T> {
        match Self::place(color, value) {
            Ok(b) => Ok(b),
            // Refused for the cap, not because EMA does not serve `T` or we are off a worker.
            Err(value)
                if std::mem::size_of::<T>() > 0
                    && alloc::class_of(Layout::new::<T>()).is_some()
                    && alloc::with_heap(|h| h.at_cap()).unwrap_or(false) =>
            {
                Err(value)
            }
            Err(value) => Ok(Self::boxed(value)),
        }
    }

    fn place(color: Color, value: T) -> Result<ColorBox<T>, T> {
        let layout = Layout::new::<T>();
        if layout.size() == 0 {
            return Err(value);
        }
        let placed = with_current(|ctx| home_of(color, ctx.shared.placement))
            .and_then(|home| alloc::with_heap(|h| h.alloc(layout, home)).flatten());
        match placed {
            Some(p) => {
                let ptr = p.cast::<T>();
                // SAFETY: a fresh EMA object of at least `T`'s size and alignment.
                unsafe { ptr.as_ptr().write(value) };
                Ok(ColorBox { ptr, ema: true })
            }
            None => Err(value),
        }
    }

    fn boxed(value: T) -> ColorBox<T> {
        // SAFETY: `Box::into_raw` never returns null.
        let ptr = unsafe { NonNull::new_unchecked(Box::into_raw(Box::new(value))) };
        ColorBox { ptr, ema: false }
    }

    /// Whether the storage came from EMA (else from the global allocator).
    pub fn is_placed(this: &ColorBox<T>) -> bool {
        this.ema
    }

    /// Moves the value out, freeing the storage.
    pub fn into_inner(this: ColorBox<T>) -> T {
        let this = std::mem::ManuallyDrop::new(this);
        if this.ema {
            // SAFETY: the value is read once; the storage, an EMA object, is freed once.
            unsafe {
                let v = this.ptr.as_ptr().read();
                alloc::free_here(this.ptr.cast());
                v
            }
        } else {
            // SAFETY: the pointer came from `Box::into_raw`.
            *unsafe { Box::from_raw(this.ptr.as_ptr()) }
        }
    }
}

impl<T> Drop for ColorBox<T> {
    fn drop(&mut self) {
        if self.ema {
            // SAFETY: the value is dropped once, then its EMA storage freed once.
            unsafe {
                std::ptr::drop_in_place(self.ptr.as_ptr());
                alloc::free_here(self.ptr.cast());
            }
        } else {
            // SAFETY: the pointer came from `Box::into_raw`.
            drop(unsafe { Box::from_raw(self.ptr.as_ptr()) });
        }
    }
}

impl<T> Deref for ColorBox<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the box owns a live `T`.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> DerefMut for ColorBox<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the box owns a live `T`, borrowed uniquely through `&mut self`.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T: fmt::Debug> fmt::Debug for ColorBox<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// A byte buffer in memory placed for the worker that runs a color (module doc): zeroed, or a
/// copy of a slice; it dereferences to `[u8]` and may be dropped on any thread.
pub struct ColorBytes {
    ptr: NonNull<u8>,
    len: usize,
    /// Where the storage came from: an EMA heap (`true`) or the global allocator.
    ema: bool,
}

// SAFETY: a ColorBytes owns its bytes like a `Box<[u8]>`; its storage can be freed anywhere.
unsafe impl Send for ColorBytes {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for ColorBytes {}

impl ColorBytes {
    /// `len` zero bytes placed for `color`'s home worker.
    pub fn zeroed(color: Color, len: usize) -> ColorBytes {
        let b = Self::uninit(color, len);
        // SAFETY: `len` writable bytes (none when `len` is 0, at a dangling but aligned pointer).
        unsafe { b.ptr.as_ptr().write_bytes(0, len) };
        b
    }

    /// A copy of `bytes` placed for `color`'s home worker.
    pub fn from_slice(color: Color, bytes: &[u8]) -> ColorBytes {
        let b = Self::uninit(color, bytes.len());
        // SAFETY: `len` writable bytes, not overlapping the fresh storage.
        unsafe { b.ptr.as_ptr().copy_from_nonoverlapping(bytes.as_ptr(), bytes.len()) };
        b
    }

    /// Whether the storage came from EMA (else from the global allocator, or none at length 0).
    pub fn is_placed(&self) -> bool {
        self.ema
    }

    /// Storage for `len` bytes, not yet written.
    fn uninit(color: Color, len: usize) -> ColorBytes {
        if len == 0 {
            return ColorBytes { ptr: NonNull::dangling(), len, ema: false };
        }
        let layout = Self::layout(len);
        let placed = with_current(|ctx| home_of(color, ctx.shared.placement))
            .and_then(|home| alloc::with_heap(|h| h.alloc(layout, home)).flatten());
        if let Some(ptr) = placed {
            return ColorBytes { ptr, len, ema: true };
        }
        // SAFETY: a non-zero size.
        let p = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(p) else { std::alloc::handle_alloc_error(layout) };
        ColorBytes { ptr, len, ema: false }
    }

    fn layout(len: usize) -> Layout {
        Layout::array::<u8>(len).expect("a byte buffer's size fits in isize")
    }
}

impl Drop for ColorBytes {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        if self.ema {
            // SAFETY: an EMA object, freed once.
            unsafe { alloc::free_here(self.ptr) };
        } else {
            // SAFETY: allocated by the global allocator with this layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) };
        }
    }
}

impl Deref for ColorBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialized bytes owned by this buffer (or none, at a dangling pointer).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for ColorBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, borrowed uniquely through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl fmt::Debug for ColorBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ColorBytes").field("len", &self.len).field("placed", &self.ema).finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn bytes_off_a_worker_come_from_the_global_allocator() {
        let z = ColorBytes::zeroed(Color(1), 300);
        assert!(!z.is_placed());
        assert!(z.iter().all(|&b| b == 0) && z.len() == 300);
        let mut c = ColorBytes::from_slice(Color(1), b"hello");
        c[0] = b'j';
        assert_eq!(&*c, b"jello");
        let empty = ColorBytes::zeroed(Color(1), 0);
        assert!(empty.is_empty());
        let big = ColorBytes::from_slice(Color(2), &vec![7u8; 5000]);
        assert_eq!(big.len(), 5000);
        assert!(big.iter().all(|&b| b == 7));
    }
}
