//! The process's pool of empty EMA blocks, shared by every heap, and its decay.
//!
//! A heap releases a block past its own cache here; any heap takes one here before it asks the
//! global allocator. The pool holds at most [`POOLED_BLOCKS`]; at the end of each
//! [`POOL_DECAY`] period the blocks beyond [`POOL_KEEP`] that waited unused through the whole
//! period go back to the global allocator ([`decay`]).
//!
//! Invariants: a pooled block is plain memory of `block_layout()` with no header and no owner;
//! only a block popped from the pool is given back, so the decay's hints (atomics read and
//! written without a lock, `PoolDecay`) may be stale but never free memory in use. Not under
//! loom: the model has no pool (`alloc` gives it stubs).

use std::alloc::dealloc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::OnceLock;
use std::time::Duration;

use super::block_layout;

/// An empty block's memory in the pool (no header: it is written anew when a heap takes it).
struct EmptyBlock(*mut u8);

// SAFETY: plain memory of `block_layout()`, owned by whoever holds the value.
unsafe impl Send for EmptyBlock {}

/// Empty blocks, shared by every heap of the process: a block released by a heap (past its
/// cache) or by a dropped runtime serves the next heap that needs one, on any thread, instead
/// of going back to glibc, which gives its pages back to the system (a worker's arena is trimmed
/// as its top chunk grows) so that the next burst of events page-faults them in again: a third
/// of the time of a program that queues a million messages, run after run.
///
/// How much it keeps follows use, as jemalloc's decay does: up to [`POOLED_BLOCKS`] (256 MiB),
/// of which whatever waited unused through a whole [`POOL_DECAY`] beyond [`POOL_KEEP`] (32 MiB)
/// goes back to the global allocator (`decay`; glibc keeps some of it, and gives the rest
/// of its pages back to the system as it trims). A fixed bound sized the reuse to one burst: a
/// producer queueing 4 million messages to its counter (128 MiB of closures) page-faulted a
/// quarter of its time with the 32 MiB bound, and ran 1.25x faster with this one (`bench actors`
/// counting, paired against tokio: 0.81-0.84 -> 1.03-1.05).
fn empty_blocks() -> &'static crossbeam_queue::ArrayQueue<EmptyBlock> {
    static POOL: OnceLock<crossbeam_queue::ArrayQueue<EmptyBlock>> = OnceLock::new();
    POOL.get_or_init(|| crossbeam_queue::ArrayQueue::new(POOLED_BLOCKS))
}

/// Empty blocks the process keeps at most.
const POOLED_BLOCKS: usize = 16384;

/// Empty blocks the pool keeps however long they wait.
const POOL_KEEP: usize = 2048;

/// The pool's decay period: blocks beyond [`POOL_KEEP`] that none took during a whole period go
/// back to the global allocator at its end.
const POOL_DECAY: Duration = Duration::from_secs(1);

/// The pool's decay state: when the current period started (`trace::epoch_ms`)
/// and the fewest blocks the pool held during it (the ones that waited through all of it).
/// Atomics: any thread takes, puts and ends a period; a race costs a block kept or given back a
/// period early, never memory (only a block popped from the pool is freed).
struct PoolDecay {
    since_ms: AtomicU64,
    low: AtomicUsize,
}

impl PoolDecay {
    const fn new() -> Self {
        PoolDecay { since_ms: AtomicU64::new(0), low: AtomicUsize::new(0) }
    }

    /// A block was taken, leaving `len` in the pool.
    fn taken(&self, len: usize) {
        self.low.fetch_min(len, Relaxed);
    }

    /// At `now_ms`, with `len` blocks pooled: if the period is over, starts the next one and
    /// returns how many blocks to give back (those beyond [`POOL_KEEP`] that waited through
    /// the whole period); else 0.
    fn tick(&self, now_ms: u64, len: usize) -> usize {
        let since = self.since_ms.load(Relaxed);
        let period = POOL_DECAY.as_millis() as u64;
        if now_ms < since.saturating_add(period)
            || self.since_ms.compare_exchange(since, now_ms, Relaxed, Relaxed).is_err()
        {
            return 0;
        }
        let give = self.low.load(Relaxed).min(len).saturating_sub(POOL_KEEP);
        // The next period starts from what stays pooled.
        self.low.store(len - give, Relaxed);
        give
    }
}

static POOL_DECAY_STATE: PoolDecay = PoolDecay::new();

/// Takes an empty block from the pool.
pub(super) fn take() -> Option<*mut u8> {
    let pool = empty_blocks();
    let EmptyBlock(b) = pool.pop()?;
    POOL_DECAY_STATE.taken(pool.len());
    Some(b)
}

/// Puts an empty block in the pool; false (the caller keeps it) if the pool is full.
pub(super) fn put(b: *mut u8) -> bool {
    let pooled = empty_blocks().push(EmptyBlock(b)).is_ok();
    decay();
    pooled
}

/// Ends the pool's decay period if it is over, giving back to the global allocator the blocks
/// beyond [`POOL_KEEP`] that waited unused through all of it. Called when blocks come back to
/// the pool and by the process's stall watchdog at each of its wake-ups (`stall`), so that idle
/// runtimes return their memory too.
pub(crate) fn decay() {
    let pool = empty_blocks();
    for _ in 0..POOL_DECAY_STATE.tick(crate::trace::epoch_ms(), pool.len()) {
        let Some(EmptyBlock(b)) = pool.pop() else { break };
        // SAFETY: pooled blocks came from `alloc(block_layout())` and belong to the pool.
        unsafe { dealloc(b, block_layout()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_gives_back_only_what_waited_unused_through_a_whole_period() {
        let d = PoolDecay::new();
        let p = POOL_DECAY.as_millis() as u64;
        let burst = POOL_KEEP + 5000;
        // A burst comes back mid-period: it did not wait through the period, so it stays.
        assert_eq!(d.tick(p / 2, burst), 0, "the first period is not over");
        assert_eq!(d.tick(p, burst), 0, "blocks pooled mid-period are kept");
        // The next burst takes 1000 of them; the rest waited through the whole period.
        d.taken(burst - 1000);
        assert_eq!(d.tick(p + p / 2, burst - 1000), 0, "not at the end of the period");
        assert_eq!(d.tick(2 * p, burst - 1000), 4000, "beyond the kept ones, the idle ones go");
        // Blocks that come back during the next period were in use: none goes, the kept stay.
        assert_eq!(d.tick(3 * p, POOL_KEEP + 3000), 0);
        assert_eq!(d.tick(4 * p, POOL_KEEP + 3000), 3000);
        assert_eq!(d.tick(5 * p, POOL_KEEP), 0, "the kept blocks stay however long they wait");
    }
}
