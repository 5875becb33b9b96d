//! [`ColorBox`] and [`ColorBytes`]: user data placed, by EMA, for the worker that runs a color.
//!
//! A handler that prepares data for events of another color (a buffer a consumer will fill, a
//! request a connection's handlers will read) allocates it with `ColorBox::new(color, value)`:
//! the storage comes from the calling worker's EMA heap, from blocks reserved for that color's
//! home worker, so it never shares a cache line with data bound for another worker. Outside a
//! worker, with EMA off, or for values larger than EMA's largest class, the storage comes from
//! where the worker's event closures would come from in that case: the runtime's event allocator
//! ([`Builder::event_allocator`](crate::Builder::event_allocator)) if it was built with one, else
//! the global allocator. So a runtime built with another event allocator places the events *and*
//! the data they carry with it, which is what the allocator benchmarks compare.
//!
//! Why data a handler works on in place belongs in a box rather than in the closure: running an
//! event moves its closure out of the event's storage before calling it, so what the closure
//! captures by value is worked on in the handler's stack frame; where the event was allocated
//! matters for the single read of the move. Data reached through a box stays where the
//! allocator put it, and a handler that writes it there shares that line with whatever else the
//! allocator put beside it: with a general allocator, data the same producer allocated for
//! another worker (the false sharing of the thesis's producer-consumer, §5.2.2).
//!
//! If the color later runs elsewhere (stolen, or the box is moved to an event of another color),
//! the object stays valid wherever it goes; it was placed for the old home, and its free becomes a
//! remote free, batched back to the heap that allocated it. Dropping a `ColorBox` on any thread is
//! allowed.
//!
//! [`ColorBytes`] is the same for a byte buffer whose length is known only at run time (a
//! message, a response body): up to EMA's largest class it is placed, larger it comes from the
//! event or global allocator, as a `ColorBox`.

use std::alloc::Layout;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::alloc;
use crate::color::home_of;
use crate::context::with_current;
use crate::message::event_allocator;
use crate::runtime::EventAlloc;
use crate::Color;

/// Which allocator holds a box's storage, so that any thread can free it there.
#[derive(Clone, Copy)]
enum Storage {
    /// An EMA heap, placed for the color's home worker.
    Ema,
    /// The allocating worker's event allocator.
    Event(EventAlloc),
    /// The process's global allocator.
    Global,
}

impl Storage {
    /// EMA storage for `layout` (not zero-sized) placed for `color`'s home worker: `None` off a
    /// worker, with EMA off, past EMA's largest class, or at the heap's cap.
    fn placed(color: Color, layout: Layout) -> Option<NonNull<u8>> {
        with_current(|ctx| home_of(color, ctx.shared.placement))
            .and_then(|home| alloc::with_heap(|h| h.alloc(layout, home)).flatten())
    }

    /// Storage for `layout` (not zero-sized) when EMA does not hold it: from this thread's event
    /// allocator if it has one (and it does not fail), else from the global allocator.
    fn unplaced(layout: Layout) -> (NonNull<u8>, Storage) {
        if let Some(a) = event_allocator() {
            // SAFETY: a non-zero size.
            if let Some(p) = NonNull::new(unsafe { a.alloc(layout) }) {
                return (p, Storage::Event(a));
            }
        }
        // SAFETY: a non-zero size.
        let p = unsafe { std::alloc::alloc(layout) };
        let Some(p) = NonNull::new(p) else { std::alloc::handle_alloc_error(layout) };
        (p, Storage::Global)
    }

    /// Storage for `layout` (not zero-sized): placed by EMA if it can, else [`Storage::unplaced`].
    fn any(color: Color, layout: Layout) -> (NonNull<u8>, Storage) {
        match Storage::placed(color, layout) {
            Some(p) => (p, Storage::Ema),
            None => Storage::unplaced(layout),
        }
    }

    /// Frees `p`, storage of `layout` that this allocator handed out (nothing for a zero size).
    ///
    /// # Safety
    /// `p` came from this storage with this layout, and is freed once.
    unsafe fn free(self, p: NonNull<u8>, layout: Layout) {
        if layout.size() == 0 {
            return; // Never allocated (a dangling pointer).
        }
        match self {
            // SAFETY: an EMA object (the caller's contract); EMA frees from any thread.
            Storage::Ema => unsafe { alloc::free_here(p) },
            // SAFETY: allocated by `a` with `layout` (the caller's contract).
            Storage::Event(a) => unsafe { a.dealloc(p.as_ptr(), layout) },
            // SAFETY: allocated by the global allocator with `layout` (the caller's contract).
            Storage::Global => unsafe { std::alloc::dealloc(p.as_ptr(), layout) },
        }
    }
}

/// An owned value in memory placed for the worker that runs a color (module doc).
pub struct ColorBox<T> {
    ptr: NonNull<T>,
    /// Where the storage came from (a zero-sized `T` has none: `Global` at a dangling pointer).
    storage: Storage,
}

// SAFETY: a ColorBox owns its `T` like a `Box<T>`; its storage can be freed from any thread.
unsafe impl<T: Send> Send for ColorBox<T> {}
// SAFETY: shared access only hands out `&T`.
unsafe impl<T: Sync> Sync for ColorBox<T> {}

impl<T> ColorBox<T> {
    /// Moves `value` into storage placed for `color`'s home worker. If EMA does not hold it (off a
    /// worker, EMA off, `T` too large, or the worker's heap at its cap,
    /// [`Config::ema_cap`](crate::Config::ema_cap)), the value goes to the worker's event
    /// allocator or the global allocator instead (module doc); [`ColorBox::try_new`] refuses at
    /// the cap instead.
    pub fn new(color: Color, value: T) -> ColorBox<T> {
        let layout = Layout::new::<T>();
        if layout.size() == 0 {
            return Self::write(NonNull::dangling(), Storage::Global, value);
        }
        let (p, storage) = Storage::any(color, layout);
        Self::write(p.cast(), storage, value)
    }

    /// As [`ColorBox::new`], but hands `value` back if this worker's EMA heap is at its cap:
    /// for memory that must stay within the budget.
    pub fn try_new(color: Color, value: T) -> Result<ColorBox<T>, T> {
        let layout = Layout::new::<T>();
        if layout.size() == 0 {
            return Ok(Self::write(NonNull::dangling(), Storage::Global, value));
        }
        if let Some(p) = Storage::placed(color, layout) {
            return Ok(Self::write(p.cast(), Storage::Ema, value));
        }
        // Refused for the cap, not because EMA does not serve `T` or we are off a worker.
        if alloc::class_of(layout).is_some() && alloc::with_heap(|h| h.at_cap()).unwrap_or(false) {
            return Err(value);
        }
        let (p, storage) = Storage::unplaced(layout);
        Ok(Self::write(p.cast(), storage, value))
    }

    fn write(ptr: NonNull<T>, storage: Storage, value: T) -> ColorBox<T> {
        // SAFETY: fresh storage of `T`'s layout from `storage` (or dangling for a zero-sized `T`,
        // where writes touch no memory).
        unsafe { ptr.as_ptr().write(value) };
        ColorBox { ptr, storage }
    }

    /// Whether the storage came from EMA (else from an event allocator or the global one).
    pub fn is_placed(this: &ColorBox<T>) -> bool {
        matches!(this.storage, Storage::Ema)
    }

    /// Moves the value out, freeing the storage.
    pub fn into_inner(this: ColorBox<T>) -> T {
        let this = std::mem::ManuallyDrop::new(this);
        // SAFETY: the value is read once; the storage, from `this.storage` with `T`'s layout, is
        // freed once (`this` is never dropped).
        unsafe {
            let v = this.ptr.as_ptr().read();
            this.storage.free(this.ptr.cast(), Layout::new::<T>());
            v
        }
    }
}

impl<T> Drop for ColorBox<T> {
    fn drop(&mut self) {
        // SAFETY: the value is dropped once, then its storage, from `self.storage` with `T`'s
        // layout, freed once.
        unsafe {
            std::ptr::drop_in_place(self.ptr.as_ptr());
            self.storage.free(self.ptr.cast(), Layout::new::<T>());
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
    /// Where the storage came from (none at length 0: `Global` at a dangling pointer).
    storage: Storage,
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

    /// Whether the storage came from EMA (else from an event allocator or the global one, or
    /// none at length 0).
    pub fn is_placed(&self) -> bool {
        matches!(self.storage, Storage::Ema)
    }

    /// Storage for `len` bytes, not yet written.
    fn uninit(color: Color, len: usize) -> ColorBytes {
        if len == 0 {
            return ColorBytes { ptr: NonNull::dangling(), len, storage: Storage::Global };
        }
        let (ptr, storage) = Storage::any(color, Self::layout(len));
        ColorBytes { ptr, len, storage }
    }

    fn layout(len: usize) -> Layout {
        Layout::array::<u8>(len).expect("a byte buffer's size fits in isize")
    }
}

impl Drop for ColorBytes {
    fn drop(&mut self) {
        // SAFETY: storage from `self.storage` with this layout (none at length 0), freed once.
        unsafe { self.storage.free(self.ptr, Self::layout(self.len)) };
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
        f.debug_struct("ColorBytes")
            .field("len", &self.len)
            .field("placed", &self.is_placed())
            .finish()
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
