//! Storage for the simulator's tasks: every simulated event is a real `Task` (the run queues
//! hold nothing else), a closure of a few words that the engine creates and runs once per
//! event. On a thread without an EMA heap, `Task` boxes it with the global allocator, a
//! `malloc` and a `free` per event, a tenth of the host time of a message-heavy run. While a
//! simulation runs, its thread's event allocator (`message::set_event_allocator`) is
//! [`BLOCKS`]: a per-thread free list of equal blocks, reused last in, first out.
//!
//! Invariants: every block [`BLOCKS`] hands out has the layout [`BLOCK`] and comes from the
//! global allocator, so any thread may free it (a block freed on another thread joins that
//! thread's list, or goes back to the global allocator); requests that do not fit a block go to
//! the global allocator unchanged; a thread keeps at most [`MAX_FREE`] free blocks and gives
//! them back when it exits. Which storage holds a task changes no decision of the simulation.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::RefCell;
use std::ptr::NonNull;

use crate::message;
use crate::runtime::EventAlloc;

/// The free-list allocator of the simulator's tasks.
pub(super) struct Blocks;

/// The one instance (an [`EventAlloc`] is a `'static` reference).
pub(super) static BLOCKS: Blocks = Blocks;

/// The layout of every block: larger than the engine's task closure with its allocator
/// reference (48 bytes).
const BLOCK: Layout = match Layout::from_size_align(64, 16) {
    Ok(l) => l,
    Err(_) => panic!("64 is a multiple of 16"),
};

/// Free blocks kept per thread at most (4 MiB): as many as tasks once pending at the same time.
const MAX_FREE: usize = 1 << 16;

/// A thread's free blocks, given back to the global allocator when the thread exits.
struct FreeList(Vec<NonNull<u8>>);

impl Drop for FreeList {
    fn drop(&mut self) {
        for p in self.0.drain(..) {
            // SAFETY: every block in the list came from `alloc(BLOCK)` and is freed once.
            unsafe { std::alloc::dealloc(p.as_ptr(), BLOCK) };
        }
    }
}

thread_local! {
    static FREE: RefCell<FreeList> = const { RefCell::new(FreeList(Vec::new())) };
}

fn fits(layout: Layout) -> bool {
    layout.size() <= BLOCK.size() && layout.align() <= BLOCK.align()
}

// SAFETY: blocks come from the global allocator with one layout large and aligned enough for
// every request given one; other requests are forwarded with their own layout.
unsafe impl GlobalAlloc for Blocks {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !fits(layout) {
            // SAFETY: forwarded contract (`layout` has a non-zero size).
            return unsafe { std::alloc::alloc(layout) };
        }
        match FREE.try_with(|f| f.borrow_mut().0.pop()) {
            Ok(Some(p)) => p.as_ptr(),
            // SAFETY: `BLOCK` has a non-zero size.
            _ => unsafe { std::alloc::alloc(BLOCK) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !fits(layout) {
            // SAFETY: forwarded contract: `ptr` came from `alloc(layout)` above.
            return unsafe { std::alloc::dealloc(ptr, layout) };
        }
        let Some(p) = NonNull::new(ptr) else { return };
        let kept = FREE
            .try_with(|f| {
                let mut f = f.borrow_mut();
                let keep = f.0.len() < MAX_FREE;
                if keep {
                    f.0.push(p);
                }
                keep
            })
            .unwrap_or(false);
        if !kept {
            // SAFETY: a block that fitted came from `alloc(BLOCK)`.
            unsafe { std::alloc::dealloc(ptr, BLOCK) };
        }
    }
}

/// Makes [`BLOCKS`] this thread's event allocator until dropped, then restores the previous
/// one (also when a simulation panics).
pub(super) struct Installed(Option<EventAlloc>);

impl Installed {
    pub(super) fn new() -> Installed {
        let prev = message::event_allocator();
        message::set_event_allocator(Some(&BLOCKS));
        Installed(prev)
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        message::set_event_allocator(self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_block_is_reused_and_large_requests_pass_through() {
        let small = Layout::from_size_align(40, 8).unwrap();
        // SAFETY: each pointer is freed once with the layout it was allocated with.
        unsafe {
            let a = BLOCKS.alloc(small);
            assert!(!a.is_null());
            BLOCKS.dealloc(a, small);
            let b = BLOCKS.alloc(small);
            assert_eq!(a, b, "the block just freed is handed out again");
            BLOCKS.dealloc(b, small);
            let big = Layout::from_size_align(4096, 64).unwrap();
            let c = BLOCKS.alloc(big);
            assert!(!c.is_null());
            assert_eq!(c as usize % 64, 0);
            BLOCKS.dealloc(c, big);
        }
    }

    #[test]
    fn installing_restores_the_previous_allocator() {
        assert!(message::event_allocator().is_none());
        {
            let _g = Installed::new();
            assert!(message::event_allocator().is_some());
        }
        assert!(message::event_allocator().is_none());
    }
}
