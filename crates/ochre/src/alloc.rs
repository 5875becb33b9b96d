//! EMA, the event memory allocator: small objects placed by the worker that will use them.
//!
//! Each worker owns a [`Heap`]. A heap carves 16 KiB blocks (aligned on their size) into objects
//! of one size class, and keeps its blocks per size class **and per destination worker**: an
//! object allocated for a color that runs on worker `d` comes from a block that holds only objects
//! for `d`. Blocks are cache-line aligned and never share a line, so objects bound for different
//! workers never share one either: the false sharing that the thesis (§5.2) found in every general
//! allocator on producer-consumer traffic cannot happen here.
//!
//! Freeing: the block of any object is found by masking its address, and the block header names
//! the heap that carved it (its *owner*).
//! - Freed by its owner: if its bin has no *hot* object, the object becomes it, kept aside for
//!   the bin's next allocation; otherwise it goes back on its block's free list. No lock, no
//!   atomic. Why: an event's storage is mostly freed just before the next event of its bin is
//!   allocated (a handler posting as it runs); handing the same object straight back touches no
//!   block header, where the free list is a load-store chain through the header and the object
//!   on both sides (ping-pong, 1 worker: 2-4% more events/s; a local allocate+free pair 2.6 ->
//!   1.8 ns; alternating builds). A hot object is not displaced by later frees: in a run of
//!   frees (a fan-out's events finishing) that would add a header update per free. It still
//!   counts as out for its block, so it keeps at most one more block per bin from being
//!   recycled (a bounded cost, like the empty block a bin keeps); [`Heap::flush_hot`] puts the
//!   hot objects back at the end of a run and at drop, not at every idle spell.
//! - Freed by another heap: the object joins that heap's *crumbs* for the owner, a private array;
//!   at [`CRUMB_BATCH`] objects the array is handed to the owner in one atomic push onto the
//!   owner's remote stack ([`Heap::flush_crumbs`] does it for all owners; a worker calls it before
//!   it parks, so freed memory never waits on an idle worker).
//! - Freed by a thread without a heap ([`free_remote`]): a one-object batch, one atomic push.
//!
//! A worker that never idles hands crumbs back only when a batch fills, so it may hold up to
//! `CRUMB_BATCH - 1` objects per owner at a time: bounded, and handed back the moment it idles
//! or its run ends.
//!
//! The owner drains its remote stack when a size class runs out, and in [`Heap::drain_remote`].
//! A block whose objects all came back stays while it is its bin's only block; otherwise it goes
//! to a cache of [`CACHED_BLOCKS`] empty blocks (any bin), beyond that to a pool of empty blocks
//! shared by the process (bounded, taken by any heap before it allocates; what waits unused in it
//! for a second beyond 32 MiB goes back, `decay_pool`), and beyond that back to the global
//! allocator.
//!
//! Lifetime: every block holds a strong count on its owner's [`HeapShared`], so a remote free can
//! always reach the owner's stack. When a `Heap` is dropped with objects still out, it marks its
//! shared half *abandoned*; from then on whoever pushes to the stack also drains it (under a lock)
//! and releases blocks as they empty, so the last free of the last object releases everything.
//! The dropping heap sets `abandoned`, then drains with a release swap; a push ordered before the
//! swap is drained by it, and a push ordered after it reads the swap's value, so it sees
//! `abandoned` and drains itself (the loom model `loom_abandoned_heap_is_released_by_the_last_free`
//! found the version where the swap was only an acquire).
//!
//! Invariants: an object is handed out by exactly one `alloc` and comes back by exactly one free;
//! `used` in a block header counts objects handed out and not yet back on the owner's lists (hot
//! objects included: they are not on a list); a hot object belongs to its slot's bin; only
//! the owner thread (or, once abandoned, the holder of `orphan`) touches a block's header. A block
//! of the heap with objects out is either listed in its bin or full; `full_bytes` sums the full
//! ones, so the live bytes are `full_bytes` plus `used` of the listed blocks, minus the hot
//! objects: the fast paths update no heap-wide counter (one such update per allocation and per
//! free cost a quarter of a local allocate+free pair), and [`Heap::stats`] walks the bins
//! instead.

use std::alloc::{alloc, dealloc, Layout};
use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::sync::{lock, AtomicBool, AtomicPtr, AtomicUsize, Mutex, Ordering};

/// Size of a block, also its alignment (the mask that finds a block from an object).
pub const BLOCK: usize = 16 << 10;
/// Size classes, in bytes. Objects larger than the last one are not EMA's.
pub const CLASSES: [usize; 12] = [16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024];
/// The largest object EMA serves.
pub const MAX_SMALL: usize = CLASSES[CLASSES.len() - 1];
/// Objects a heap holds for one owner before handing them back in one push.
pub const CRUMB_BATCH: usize = 64;
/// Empty blocks a heap keeps for reuse (any class, any destination) before giving them back to
/// the system: producer-consumer traffic empties and refills blocks constantly, and a 16 KiB
/// aligned allocation from the system costs far more than an object.
pub const CACHED_BLOCKS: usize = 32;

/// Where objects start in a block: the header's size, rounded to a cache line.
pub const HEADER: usize = 128;
const LINE: usize = 64;

/// A free object: its first word links it to the next.
struct FreeObj {
    next: *mut FreeObj,
}

/// A block's header: two cache lines. The first is written once, when the block is carved, and
/// read by every thread that frees one of its objects; the second is written by the owner on
/// every allocation and free. Keeping them apart keeps remote frees from missing on a line the
/// owner keeps writing (true sharing on one header line cost the remote pattern dearly).
#[repr(C, align(128))]
struct BlockHeader {
    owner: *const HeapShared,
    /// The owner's id (read by remote freers, so that they need not touch the owner's state).
    owner_id: usize,
    /// The owner's bin (destination and class) this block serves.
    bin: usize,
    /// Object size (the class's).
    size: usize,
    capacity: usize,
    _immutable_line: [u8; LINE - 5 * std::mem::size_of::<usize>()],
    /// Objects returned to the owner and not reused yet.
    free: *mut FreeObj,
    /// Objects handed out and not yet back on the owner's lists.
    used: usize,
    /// Objects never handed out start at this index.
    bump: usize,
    /// The bin's list of blocks with free objects (doubly linked so an emptied block can leave).
    prev: *mut BlockHeader,
    next: *mut BlockHeader,
    in_bin: bool,
}

const _: () = assert!(std::mem::size_of::<BlockHeader>() <= HEADER);
const _: () = assert!(std::mem::offset_of!(BlockHeader, free) == LINE);

fn block_layout() -> Layout {
    // BLOCK is a power of two and non-zero.
    Layout::from_size_align(BLOCK, BLOCK).expect("block layout")
}

/// The size class serving `layout`, if EMA serves it: size up to [`MAX_SMALL`]; alignment up to
/// 16 from any class, up to a cache line from classes that are multiples of it.
#[inline]
pub fn class_of(layout: Layout) -> Option<usize> {
    let (size, align) = (layout.size(), layout.align());
    if size <= MAX_SMALL && align <= 16 {
        // The smallest class holding `size`, from a table by 16-byte step (no search).
        return Some(CLASS_BY_STEP[size.div_ceil(16)] as usize);
    }
    class_of_aligned(size, align)
}

/// `class_of` for the rare layouts: too large, or aligned beyond 16 (out of line, so that the
/// common case inlines into the allocation fast path).
#[cold]
#[inline(never)]
fn class_of_aligned(size: usize, align: usize) -> Option<usize> {
    if size > MAX_SMALL || align > LINE {
        return None;
    }
    let class = CLASS_BY_STEP[size.div_ceil(16)] as usize;
    CLASSES[class..].iter().position(|&c| c % align == 0).map(|i| class + i)
}

/// `CLASS_BY_STEP[k]`: the smallest class of at least `16 k` bytes.
const CLASS_BY_STEP: [u8; MAX_SMALL / 16 + 1] = {
    let mut t = [0u8; MAX_SMALL / 16 + 1];
    let (mut k, mut c) = (0, 0);
    while k < t.len() {
        while CLASSES[c] < k * 16 {
            c += 1;
        }
        t[k] = c as u8;
        k += 1;
    }
    t
};

fn block_of(obj: *mut u8) -> *mut BlockHeader {
    // Keeps the object's provenance, which is its block's (objects are carved from blocks).
    obj.map_addr(|a| a & !(BLOCK - 1)).cast()
}

/// Objects freed by one thread for one owner, handed over whole: an array, not a chain through
/// the objects, so that the owner reads their addresses from a few contiguous lines instead of
/// chasing one remote cache line per object (a latency-bound walk).
struct Batch {
    next: *mut Batch,
    len: usize,
    objs: [*mut FreeObj; CRUMB_BATCH],
}

impl Batch {
    /// An empty batch: a spare one if there is, else a new allocation.
    fn new() -> *mut Batch {
        #[cfg(not(loom))]
        if let Some(SpareBatch(mut b)) = spare_batches().pop() {
            b.next = ptr::null_mut();
            b.len = 0;
            return Box::into_raw(b);
        }
        Box::into_raw(Box::new(Batch {
            next: ptr::null_mut(),
            len: 0,
            objs: [ptr::null_mut(); CRUMB_BATCH],
        }))
    }

    /// Gives back a batch whose objects were taken: kept as a spare (up to a bound) for the
    /// next [`Batch::new`], on any thread.
    fn retire(b: Box<Batch>) {
        #[cfg(not(loom))]
        let _ = spare_batches().push(SpareBatch(b)); // full: dropped
        #[cfg(loom)]
        drop(b);
    }
}

/// An emptied batch in the spare pool.
#[cfg(not(loom))]
struct SpareBatch(Box<Batch>);

// SAFETY: a spare batch's object pointers are stale values of a buffer, never read before being
// overwritten (`len` is reset to 0 when it is taken); moving the buffer between threads is moving
// plain memory.
#[cfg(not(loom))]
unsafe impl Send for SpareBatch {}

/// Emptied crumb batches, shared by every heap of the process. The thread that frees another's
/// objects allocates the batches and their owner retires them, so without a pool every batch
/// was a cross-thread malloc/free pair of 528 bytes: in glibc, contention on the allocating
/// thread's arena lock. At most `SPARE_BATCHES` (about half a megabyte) are kept.
#[cfg(not(loom))]
fn spare_batches() -> &'static crossbeam_queue::ArrayQueue<SpareBatch> {
    static POOL: std::sync::OnceLock<crossbeam_queue::ArrayQueue<SpareBatch>> =
        std::sync::OnceLock::new();
    POOL.get_or_init(|| crossbeam_queue::ArrayQueue::new(SPARE_BATCHES))
}

/// Spare batches kept at most.
#[cfg(not(loom))]
const SPARE_BATCHES: usize = 1024;

/// The half of a heap that other threads reach: the remote stack and the abandonment protocol.
pub struct HeapShared {
    id: usize,
    /// Batches of objects freed elsewhere.
    remote: AtomicPtr<Batch>,
    abandoned: AtomicBool,
    /// Serializes drains once abandoned.
    orphan: Mutex<()>,
    /// Objects received through the remote stack (statistics).
    remote_frees: AtomicUsize,
}

impl HeapShared {
    /// Pushes a batch (from [`Batch::new`]) onto the remote stack.
    ///
    /// # Safety
    /// The batch's objects are EMA objects of this heap, each freed exactly once and owned by the
    /// caller, as is the batch; this heap is alive (the objects' blocks keep it so).
    unsafe fn push(this: *const HeapShared, batch: *mut Batch) {
        // SAFETY: the caller's batch.
        let count = unsafe { (*batch).len };
        // SAFETY: the objects' blocks hold strong counts, so `this` is alive now; the extra count
        // keeps it alive past the push, when another thread may drain and release those blocks.
        unsafe { Arc::increment_strong_count(this) };
        // SAFETY: as just said, `this` stays alive until the decrement below.
        let shared = unsafe { &*this };
        let mut top = shared.remote.load(Ordering::Relaxed);
        loop {
            // SAFETY: the batch is the caller's, not yet published.
            unsafe { (*batch).next = top };
            match shared.remote.compare_exchange_weak(
                top,
                batch,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(t) => top = t,
            }
        }
        shared.remote_frees.fetch_add(count, Ordering::Relaxed);
        if shared.abandoned.load(Ordering::SeqCst) {
            let _g = lock(&shared.orphan);
            // SAFETY: abandoned: no owner drains any more, and we hold the orphan lock.
            unsafe { drain_orphan(shared) };
        }
        // SAFETY: the count taken above.
        unsafe { Arc::decrement_strong_count(this) };
    }
}

/// Frees `obj`, an EMA object, from a thread that has no heap: one atomic push to its owner.
///
/// # Safety
/// `obj` came from [`Heap::alloc`] of a heap (alive or dropped) and is freed exactly once.
pub unsafe fn free_remote(obj: NonNull<u8>) {
    // SAFETY: the block of a live object is alive and its header immutable in `owner`.
    let owner = unsafe { (*block_of(obj.as_ptr())).owner };
    let batch = Batch::new();
    // SAFETY: a fresh batch, ours.
    unsafe {
        (*batch).objs[0] = obj.as_ptr().cast();
        (*batch).len = 1;
    }
    // SAFETY: a one-object batch of an object the caller owns.
    unsafe { HeapShared::push(owner, batch) };
}

/// Drains the stack of an abandoned heap, releasing blocks as they empty.
///
/// # Safety
/// Caller holds `shared.orphan` and the heap is abandoned (no owner touches its blocks).
unsafe fn drain_orphan(shared: &HeapShared) {
    // AcqRel, not just Acquire: a pusher whose push comes after this swap reads the value it
    // wrote, and must then also see `abandoned` (stored before), so that it drains itself.
    let mut batch = shared.remote.swap(ptr::null_mut(), Ordering::AcqRel);
    while !batch.is_null() {
        // SAFETY: batches on the stack were handed over whole by their pushers; now ours.
        let bx = unsafe { Box::from_raw(batch) };
        for &o in &bx.objs[..bx.len] {
            let b = block_of(o.cast());
            // SAFETY: the block is alive (it holds `o`, counted in `used`); serialized by the
            // lock.
            unsafe {
                (*b).used -= 1;
                if (*b).used == 0 {
                    release_block(b);
                }
            }
        }
        batch = bx.next;
        Batch::retire(bx);
    }
}

#[cfg(not(loom))]
mod pool;

/// The pool under loom: the model has none, and blocks go back to the global allocator.
#[cfg(loom)]
mod pool {
    pub(super) fn take() -> Option<*mut u8> {
        None
    }
    pub(super) fn put(_: *mut u8) -> bool {
        false
    }
    pub(crate) fn decay() {}
}

pub(crate) use pool::decay as decay_pool;

/// Gives a block back to the process-wide pool of empty blocks, or, that full, to the system,
/// and drops its count on the owner.
///
/// # Safety
/// No object of `b` is in use or listed anywhere; `b` is unlinked from any bin.
unsafe fn release_block(b: *mut BlockHeader) {
    // SAFETY: the header is valid until the block is pooled or deallocated below.
    let owner = unsafe { (*b).owner };
    let pooled = pool::put(b.cast());
    if !pooled {
        // SAFETY: `b` came from `alloc(block_layout())`.
        unsafe { dealloc(b.cast(), block_layout()) };
    }
    // SAFETY: the count this block took when it was carved. If it was the last one, the owner's
    // shared half is dropped here; callers never touch it afterwards (pushers hold their own).
    unsafe { Arc::decrement_strong_count(owner) };
}

/// Per-heap counters, read by the stats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// Bytes of objects handed out and not yet back (by class size).
    pub live_bytes: usize,
    /// Blocks held.
    pub blocks: usize,
    /// Objects freed here for other owners and not handed back yet.
    pub crumbs_pending: usize,
    /// Objects this heap received back through its remote stack.
    pub remote_frees: usize,
    /// Allocations refused by the cap.
    pub refused: usize,
}

struct Crumbs {
    owner: *const HeapShared,
    /// The batch being filled for `owner` (null: none yet).
    batch: *mut Batch,
}

const NO_CRUMBS: Crumbs = Crumbs { owner: ptr::null(), batch: ptr::null_mut() };

/// A heap's state for one destination and size class.
#[derive(Clone, Copy)]
struct Bin {
    /// Head of the list of blocks with free objects.
    head: *mut BlockHeader,
    /// An object of this bin the heap freed, kept aside (still counted out by its block) for
    /// the bin's next allocation (module doc). Beside `head`: both fast paths read one line.
    hot: *mut FreeObj,
}

const EMPTY_BIN: Bin = Bin { head: ptr::null_mut(), hot: ptr::null_mut() };

/// One worker's allocator. Not `Sync`: only its owner thread uses it.
pub struct Heap {
    shared: Arc<HeapShared>,
    /// `bins[dest * CLASSES.len() + class]`.
    bins: Vec<Bin>,
    /// Empty blocks, unlinked, ready to be carved for any bin (at most [`CACHED_BLOCKS`]).
    cache: Vec<*mut BlockHeader>,
    dests: usize,
    /// Crumbs per owner, indexed by owner id (an entry for another heap of the same id is flushed
    /// first: ids are unique within a runtime, not across runtimes).
    crumbs: Vec<Crumbs>,
    cap: Option<usize>,
    /// Object bytes of full blocks (unlisted, every object out).
    full_bytes: usize,
    /// Blocks listed in the bins: what [`Heap::stats`] walks.
    listed: usize,
    /// Counters (`live_bytes` is computed by `stats`).
    stats: HeapStats,
}

// SAFETY: a Heap is used by one thread at a time (its owner); its raw pointers are to blocks it
// owns or to other heaps' shared halves, which are `Sync`. Moving it to its worker thread at
// start-up is the only transfer.
unsafe impl Send for Heap {}
// SAFETY: all fields are atomics or a mutex; the raw pointers in blocks are not reached through
// `HeapShared`.
unsafe impl Sync for HeapShared {}
// SAFETY: as above.
unsafe impl Send for HeapShared {}

impl Heap {
    /// A heap with id `id` (unique within its runtime), serving `dests` destination workers,
    /// holding at most `cap` bytes of blocks if given.
    pub fn new(id: usize, dests: usize, cap: Option<usize>) -> Heap {
        let dests = dests.max(1);
        Heap {
            shared: Arc::new(HeapShared {
                id,
                remote: AtomicPtr::new(ptr::null_mut()),
                abandoned: AtomicBool::new(false),
                orphan: Mutex::new(()),
                remote_frees: AtomicUsize::new(0),
            }),
            bins: vec![EMPTY_BIN; dests * CLASSES.len()],
            cache: Vec::new(),
            dests,
            crumbs: Vec::new(),
            cap,
            full_bytes: 0,
            listed: 0,
            stats: HeapStats::default(),
        }
    }

    /// This heap's id.
    pub fn id(&self) -> usize {
        self.shared.id
    }

    /// A weak reference to the shared half: gone once the heap and all its blocks are.
    #[cfg(test)]
    pub(crate) fn shared_weak(&self) -> std::sync::Weak<HeapShared> {
        Arc::downgrade(&self.shared)
    }

    /// Whether carving one more block would pass the cap (allocations that need a new block are
    /// refused).
    pub fn at_cap(&self) -> bool {
        self.cache.is_empty() && self.block_over_cap()
    }

    /// Whether carving a new block from the system would pass the cap.
    fn block_over_cap(&self) -> bool {
        self.cap.is_some_and(|cap| (self.stats.blocks + 1) * BLOCK > cap)
    }

    /// Blocks listed in the bins (partly used, or a bin's one empty block): the length of
    /// [`stats`](Self::stats)'s walk, a cache line each.
    pub fn listed_blocks(&self) -> usize {
        self.listed
    }

    /// Counters.
    pub fn stats(&self) -> HeapStats {
        let mut listed = 0;
        for bin in &self.bins {
            let mut b = bin.head;
            while !b.is_null() {
                // SAFETY: listed blocks of this heap, on its thread.
                unsafe {
                    listed += (*b).used * (*b).size;
                    b = (*b).next;
                }
            }
        }
        let hot: usize = (self.bins.iter().enumerate())
            .filter(|(_, b)| !b.hot.is_null())
            .map(|(bin, _)| CLASSES[bin % CLASSES.len()])
            .sum();
        HeapStats {
            live_bytes: self.full_bytes + listed - hot,
            remote_frees: self.shared.remote_frees.load(Ordering::Relaxed),
            ..self.stats
        }
    }

    /// An object for `layout`, to be used mostly by worker `dest`; `None` if EMA does not serve
    /// this layout (see [`class_of`]) or the cap is reached.
    // Always inlined: the fast path is a few instructions once `class_of` folds for a constant
    // layout, and a call would cost as much as the rest.
    #[inline(always)]
    pub fn alloc(&mut self, layout: Layout, dest: usize) -> Option<NonNull<u8>> {
        let class = class_of(layout)?;
        // No division on the fast path: `dest` is a worker index, almost always in range.
        let dest = if dest < self.dests { dest } else { dest % self.dests };
        let bin = dest * CLASSES.len() + class;
        let slot = &mut self.bins[bin];
        if let Some(o) = NonNull::new(slot.hot) {
            slot.hot = ptr::null_mut();
            return Some(o.cast());
        }
        let b = slot.head;
        if b.is_null() {
            return self.alloc_slow(bin, class);
        }
        // SAFETY: `b` is a block of this heap, listed in `bin`, so it has a free object.
        Some(unsafe { self.take_from(bin, b) })
    }

    /// The fast path missed (no block listed for `bin`): take back what others freed, then
    /// carve a block if still needed. Kept out of line so that `alloc` stays small enough to
    /// inline.
    #[cold]
    #[inline(never)]
    fn alloc_slow(&mut self, bin: usize, class: usize) -> Option<NonNull<u8>> {
        self.drain_remote();
        let mut b = self.bins[bin].head;
        if b.is_null() {
            b = self.new_block(bin, class)?;
        }
        // SAFETY: as in `alloc`.
        Some(unsafe { self.take_from(bin, b) })
    }

    /// Takes one object from block `b`, listed in `bin`, unlisting the block if that was its
    /// last free one.
    ///
    /// No prefetch of the next free object for writing: tried (PREFETCHW, one allocation
    /// ahead), it sped the producer's remote posts up ~13% on one host (Intel) and on another (AMD
    /// EPYC) cost 2-3% of producer-consumer throughput with payloads at 1 and 2 workers for no
    /// gain on remote posting, measured with alternating builds.
    ///
    /// # Safety
    /// `b` is a block of this heap listed in `bin` (so it has a free object).
    #[inline]
    unsafe fn take_from(&mut self, bin: usize, b: *mut BlockHeader) -> NonNull<u8> {
        // SAFETY: per the contract.
        unsafe {
            let obj = if !(*b).free.is_null() {
                let o = (*b).free;
                (*b).free = (*o).next;
                o.cast::<u8>()
            } else {
                let o = b.cast::<u8>().add(HEADER + (*b).bump * (*b).size);
                (*b).bump += 1;
                o
            };
            (*b).used += 1;
            if (*b).free.is_null() && (*b).bump == (*b).capacity {
                self.unlink(bin, b);
                self.full_bytes += (*b).capacity * (*b).size;
            }
            NonNull::new_unchecked(obj)
        }
    }

    /// Frees `obj`, allocated by this heap or any other.
    ///
    /// # Safety
    /// `obj` came from [`Heap::alloc`] and is freed exactly once.
    #[inline]
    pub unsafe fn free(&mut self, obj: NonNull<u8>) {
        let o = obj.as_ptr().cast::<FreeObj>();
        let b = block_of(obj.as_ptr());
        // SAFETY: the block of a live object is alive; `owner` never changes.
        let owner = unsafe { (*b).owner };
        if ptr::eq(owner, Arc::as_ptr(&self.shared)) {
            // SAFETY: `bin` is on the block's immutable line; our own block, on our thread.
            unsafe {
                let hot = &mut self.bins[(*b).bin].hot;
                if hot.is_null() {
                    *hot = o;
                } else {
                    self.take_back(b, o);
                }
            }
            return;
        }
        // SAFETY: forwarded contract; `b` is `o`'s block (`block_of`) and `owner` was read
        // from it above.
        unsafe { self.free_foreign(b, o, owner) }
    }

    /// [`free`](Self::free) of object `o` of block `b`, which another heap (`owner`) owns: a
    /// crumb for that heap. Out of line, so that the common free (an event's closure, freed as
    /// it runs on the worker that allocated it) is small enough to be inlined where it is
    /// called (callgrind, one worker, instructions a message: the 64-token ring 772 -> 765,
    /// fork-join empty 514 -> 508, big 601 -> 596).
    ///
    /// # Safety
    /// As [`free`](Self::free); `b` is `o`'s block and `owner` its owner.
    #[inline(never)]
    unsafe fn free_foreign(
        &mut self,
        b: *mut BlockHeader,
        o: *mut FreeObj,
        owner: *const HeapShared,
    ) {
        // SAFETY: the block of a live object is alive; `owner_id` never changes.
        let id = unsafe { (*b).owner_id };
        if self.crumbs.len() <= id {
            self.crumbs.resize_with(id + 1, || NO_CRUMBS);
        }
        if !ptr::eq(self.crumbs[id].owner, owner) {
            self.flush_one(id);
            self.crumbs[id].owner = owner;
        }
        let c = &mut self.crumbs[id];
        if c.batch.is_null() {
            c.batch = Batch::new();
        }
        // SAFETY: our batch, not yet published; `len < CRUMB_BATCH` (full batches are flushed).
        let full = unsafe {
            let b = &mut *c.batch;
            b.objs[b.len] = o;
            b.len += 1;
            b.len == CRUMB_BATCH
        };
        self.stats.crumbs_pending += 1;
        if full {
            self.flush_one(id);
        }
    }

    /// Puts the hot objects back on their blocks' free lists (at the end of a run, and at drop),
    /// so that blocks whose other objects all came back can be cached or released.
    pub fn flush_hot(&mut self) {
        for bin in 0..self.bins.len() {
            let o = std::mem::replace(&mut self.bins[bin].hot, ptr::null_mut());
            if !o.is_null() {
                // SAFETY: a hot object is one of ours, freed, not on any list.
                unsafe { self.take_back(block_of(o.cast()), o) };
            }
        }
    }

    /// Hands every pending crumb back to its owner (before parking, and at drop).
    pub fn flush_crumbs(&mut self) {
        for id in 0..self.crumbs.len() {
            self.flush_one(id);
        }
    }

    fn flush_one(&mut self, id: usize) {
        let c = std::mem::replace(&mut self.crumbs[id], NO_CRUMBS);
        if !c.batch.is_null() {
            // SAFETY: our batch, with at least one object (created on the first crumb).
            self.stats.crumbs_pending -= unsafe { (*c.batch).len };
            // SAFETY: objects freed once each, all of `c.owner`'s blocks.
            unsafe { HeapShared::push(c.owner, c.batch) };
        }
    }

    /// Takes back the objects other threads freed.
    pub fn drain_remote(&mut self) {
        let mut batch = self.shared.remote.swap(ptr::null_mut(), Ordering::Acquire);
        while !batch.is_null() {
            // SAFETY: batches on our stack were handed over whole by their pushers; the Acquire
            // swap makes their contents visible. Now ours.
            let bx = unsafe { Box::from_raw(batch) };
            for &o in &bx.objs[..bx.len] {
                // SAFETY: our freed objects; our blocks, our thread.
                unsafe { self.take_back(block_of(o.cast()), o) };
            }
            batch = bx.next;
            Batch::retire(bx);
        }
    }

    /// Puts `o` back on its block `b` (ours), relisting or releasing the block.
    ///
    /// # Safety
    /// `b` is a block of this heap and `o` one of its objects, out and now freed.
    #[inline]
    unsafe fn take_back(&mut self, b: *mut BlockHeader, o: *mut FreeObj) {
        // SAFETY: per the contract.
        unsafe {
            let bin = (*b).bin;
            (*o).next = (*b).free;
            (*b).free = o;
            (*b).used -= 1;
            if !(*b).in_bin {
                // Unlisted with an object out: it was full.
                self.full_bytes -= (*b).capacity * (*b).size;
                self.link(bin, b);
            }
            // An empty block stays while it is its bin's only one (so a class that breathes
            // does not go to the system each time); otherwise it goes to the cache or back.
            if (*b).used == 0 && !((*b).prev.is_null() && (*b).next.is_null()) {
                self.unlink(bin, b);
                if self.cache.len() < CACHED_BLOCKS {
                    self.cache.push(b);
                } else {
                    self.stats.blocks -= 1;
                    release_block(b);
                }
            }
        }
    }

    fn new_block(&mut self, bin: usize, class: usize) -> Option<*mut BlockHeader> {
        let (b, owner) = if let Some(b) = self.cache.pop() {
            // A cached block keeps the count it took on our shared half when first carved.
            // SAFETY: cached blocks are ours, empty and unlinked.
            (b, unsafe { (*b).owner })
        } else {
            if self.block_over_cap() {
                self.stats.refused += 1;
                return None;
            }
            let pooled = pool::take();
            // SAFETY: non-zero size.
            let b =
                pooled.unwrap_or_else(|| unsafe { alloc(block_layout()) }).cast::<BlockHeader>();
            if b.is_null() {
                self.stats.refused += 1;
                return None;
            }
            self.stats.blocks += 1;
            (b, Arc::into_raw(self.shared.clone()))
        };
        // SAFETY: `b` is a block of BLOCK bytes, aligned for the header, with no object out.
        unsafe {
            b.write(BlockHeader {
                owner,
                owner_id: self.shared.id,
                bin,
                size: CLASSES[class],
                _immutable_line: [0; LINE - 5 * std::mem::size_of::<usize>()],
                free: ptr::null_mut(),
                used: 0,
                bump: 0,
                capacity: (BLOCK - HEADER) / CLASSES[class],
                prev: ptr::null_mut(),
                next: ptr::null_mut(),
                in_bin: false,
            });
        }
        self.link(bin, b);
        Some(b)
    }

    fn link(&mut self, bin: usize, b: *mut BlockHeader) {
        let head = self.bins[bin].head;
        // SAFETY: `b` and `head` are blocks of this heap.
        unsafe {
            (*b).prev = ptr::null_mut();
            (*b).next = head;
            (*b).in_bin = true;
            if !head.is_null() {
                (*head).prev = b;
            }
        }
        self.bins[bin].head = b;
        self.listed += 1;
    }

    fn unlink(&mut self, bin: usize, b: *mut BlockHeader) {
        // SAFETY: `b` is listed in `bin`; its neighbours are blocks of this heap.
        unsafe {
            let (p, n) = ((*b).prev, (*b).next);
            if p.is_null() {
                self.bins[bin].head = n;
            } else {
                (*p).next = n;
            }
            if !n.is_null() {
                (*n).prev = p;
            }
            (*b).prev = ptr::null_mut();
            (*b).next = ptr::null_mut();
            (*b).in_bin = false;
        }
        self.listed -= 1;
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        self.flush_hot();
        self.flush_crumbs();
        self.drain_remote();
        // Empty listed blocks go back now; blocks with objects out are left to the last free.
        for bin in 0..self.bins.len() {
            let mut b = self.bins[bin].head;
            while !b.is_null() {
                // SAFETY: listed blocks of this heap.
                let (next, used) = unsafe { ((*b).next, (*b).used) };
                self.unlink(bin, b);
                if used == 0 {
                    self.stats.blocks -= 1;
                    // SAFETY: no object of `b` is out; unlinked.
                    unsafe { release_block(b) };
                }
                b = next;
            }
        }
        for b in std::mem::take(&mut self.cache) {
            self.stats.blocks -= 1;
            // SAFETY: cached blocks are empty and unlinked.
            unsafe { release_block(b) };
        }
        if self.stats.blocks > 0 {
            self.shared.abandoned.store(true, Ordering::SeqCst);
            let _g = lock(&self.shared.orphan);
            // SAFETY: abandoned, lock held. A push that raced with the store above either landed
            // before this drain or will see `abandoned` and drain itself.
            unsafe { drain_orphan(&self.shared) };
        }
    }
}

thread_local! {
    /// The heap of the worker running on this thread, while it runs (`HeapEnter`).
    static CURRENT: Cell<*mut Heap> = const { Cell::new(ptr::null_mut()) };
}

/// Makes `heap` this thread's heap until the guard drops; the guard borrows the heap mutably, so
/// nothing else touches it meanwhile.
pub(crate) struct HeapEnter<'a> {
    previous: *mut Heap,
    _heap: PhantomData<&'a mut Heap>,
}

impl<'a> HeapEnter<'a> {
    pub(crate) fn new(heap: &'a mut Heap) -> HeapEnter<'a> {
        let previous = CURRENT.with(|c| c.replace(heap as *mut Heap));
        HeapEnter { previous, _heap: PhantomData }
    }
}

impl Drop for HeapEnter<'_> {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.previous));
    }
}

/// Runs `f` on this thread's heap, if it has one. Always inlined: an event's allocation and
/// free are each a call of their own otherwise (callgrind, one worker, instructions a message:
/// the 64-token ring 765 -> 761, fork-join empty 508 -> 504, big 596 -> 591).
#[inline(always)]
pub(crate) fn with_heap<R>(f: impl FnOnce(&mut Heap) -> R) -> Option<R> {
    let p = CURRENT.try_with(|c| c.get()).unwrap_or(ptr::null_mut());
    if p.is_null() {
        return None;
    }
    // SAFETY: set by a live `HeapEnter` of this thread, which holds the heap's unique borrow;
    // heap operations never call out to code that could reach the heap again, so this `&mut` is
    // the only one while `f` runs (`f` here is always a single heap operation).
    Some(f(unsafe { &mut *p }))
}

/// Frees an EMA object on this thread's heap if it has one, else by a remote push.
///
/// # Safety
/// As [`Heap::free`].
#[inline]
pub(crate) unsafe fn free_here(obj: NonNull<u8>) {
    // SAFETY: forwarded contract.
    if with_heap(|h| unsafe { h.free(obj) }).is_none() {
        // SAFETY: forwarded contract.
        unsafe { free_remote(obj) };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn l(size: usize) -> Layout {
        Layout::from_size_align(size, 8).unwrap()
    }

    #[test]
    fn classes_cover_sizes_and_alignments() {
        assert_eq!(class_of(l(1)), Some(0));
        assert_eq!(class_of(l(17)), Some(1));
        assert_eq!(class_of(l(1024)), Some(11));
        assert_eq!(class_of(l(1025)), None);
        let a64 = Layout::from_size_align(40, 64).unwrap();
        assert_eq!(CLASSES[class_of(a64).unwrap()], 64);
        assert_eq!(class_of(Layout::from_size_align(8, 128).unwrap()), None);
        for size in 1..=MAX_SMALL {
            for align in [1, 8, 16, 32, 64] {
                let lay = Layout::from_size_align(size, align).unwrap();
                let want =
                    CLASSES.iter().position(|&c| c >= size && (align <= 16 || c % align == 0));
                assert_eq!(class_of(lay), want, "size {size} align {align}");
            }
        }
    }

    #[test]
    fn objects_never_overlap_and_respect_alignment() {
        let mut h = Heap::new(0, 2, None);
        let mut spans = Vec::new();
        for i in 0..600 {
            let size = CLASSES[i % CLASSES.len()] - (i % 7);
            let align = if i % 5 == 0 { 64 } else { 8 };
            let lay = Layout::from_size_align(size, align).unwrap();
            let p = h.alloc(lay, i % 2).unwrap();
            assert_eq!(p.as_ptr() as usize % align, 0);
            // Write the whole object: Miri checks it is in bounds of its block.
            unsafe { ptr::write_bytes(p.as_ptr(), i as u8, size) };
            spans.push((p.as_ptr() as usize, size, p));
        }
        let mut sorted: Vec<_> = spans.iter().map(|&(a, s, _)| (a, s)).collect();
        sorted.sort();
        for w in sorted.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "objects overlap");
        }
        for (_, _, p) in spans {
            unsafe { h.free(p) };
        }
        assert_eq!(h.stats().live_bytes, 0);
        assert_eq!(h.listed_blocks(), listed_by_walk(&h));
    }

    /// Blocks listed in `h`'s bins, counted along the lists.
    fn listed_by_walk(h: &Heap) -> usize {
        let mut n = 0;
        for bin in &h.bins {
            let mut b = bin.head;
            while !b.is_null() {
                n += 1;
                b = unsafe { (*b).next };
            }
        }
        n
    }

    /// Live bytes are computed from full blocks and listed ones: checked against a model at every
    /// step of allocations and frees that fill blocks, empty them and fill them again, in
    /// several classes and destinations, in a shuffled order.

    #[test]
    fn live_bytes_follow_every_allocation_and_free() {
        let mut h = Heap::new(0, 2, None);
        let mut out: Vec<(NonNull<u8>, usize)> = Vec::new();
        let mut live = 0;
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for step in 0..20_000 {
            // Grow for a while, then shrink, then grow: blocks go full, partial, empty, full.
            let grow = (step / 5_000) % 2 == 0;
            if out.is_empty() || (grow && next() % 4 != 0) || (!grow && next() % 4 == 0) {
                let size = [16, 64, 200, 1024][(next() % 4) as usize];
                let p = h.alloc(l(size), (next() % 2) as usize).unwrap();
                let class = CLASSES[class_of(l(size)).unwrap()];
                out.push((p, class));
                live += class;
            } else {
                let (p, class) = out.swap_remove((next() as usize) % out.len());
                unsafe { h.free(p) };
                live -= class;
            }
            if step % 97 == 0 {
                assert_eq!(h.stats().live_bytes, live, "step {step}");
                assert_eq!(h.listed_blocks(), listed_by_walk(&h), "step {step}");
            }
        }
        assert!(h.stats().blocks > 4, "blocks were filled");
        for (p, _) in out {
            unsafe { h.free(p) };
        }
        assert_eq!(h.stats().live_bytes, 0);
    }

    #[test]
    fn destinations_never_share_a_cache_line() {
        let mut h = Heap::new(0, 4, None);
        let mut lines = std::collections::HashMap::new();
        let mut ps = Vec::new();
        for i in 0..400 {
            let dest = i % 4;
            let p = h.alloc(l(24), dest).unwrap();
            let first = p.as_ptr() as usize / LINE;
            let last = (p.as_ptr() as usize + 31) / LINE;
            for line in first..=last {
                let d = *lines.entry(line).or_insert(dest);
                assert_eq!(d, dest, "a cache line holds objects for two workers");
            }
            ps.push(p);
        }
        for p in ps {
            unsafe { h.free(p) };
        }
    }

    #[test]
    fn freed_objects_are_reused_and_empty_blocks_cached_then_released() {
        let mut h = Heap::new(0, 1, None);
        let per_block = (BLOCK - HEADER) / 64;
        let n = CACHED_BLOCKS + 4;
        let ps: Vec<_> = (0..per_block * n).map(|_| h.alloc(l(64), 0).unwrap()).collect();
        assert_eq!(h.stats().blocks, n);
        assert_eq!(h.stats().live_bytes, per_block * n * 64);
        for p in ps {
            unsafe { h.free(p) };
        }
        // The first object freed is hot: its block is not empty until the hot objects go back.
        assert_eq!(h.stats().live_bytes, 0);
        h.flush_hot();
        // The last empty block stays in its bin, CACHED_BLOCKS are cached, the others went back.
        assert_eq!(h.stats().blocks, 1 + CACHED_BLOCKS);
        let p = h.alloc(l(64), 0).unwrap();
        let q = h.alloc(l(512), 0).unwrap();
        assert_eq!(h.stats().blocks, 1 + CACHED_BLOCKS, "the spare and a cached block are reused");
        unsafe { ptr::write_bytes(q.as_ptr(), 1, 512) };
        unsafe { h.free(p) };
        unsafe { h.free(q) };
    }

    #[test]
    fn a_freed_object_is_kept_for_its_bins_next_allocation_until_a_flush() {
        let mut h = Heap::new(0, 2, None);
        let a = h.alloc(l(64), 0).unwrap();
        let b = h.alloc(l(64), 0).unwrap();
        let c = h.alloc(l(64), 1).unwrap();
        unsafe { h.free(a) };
        unsafe { h.free(b) };
        assert_eq!(h.stats().live_bytes, 64, "hot objects are not live");
        // a is hot (b, freed while a was, went back on its block's list): the next allocation
        // of its bin is a, then b; the other destination's bin gets neither.
        let c2 = h.alloc(l(64), 1).unwrap();
        assert!(c2 != a && c2 != b);
        assert_eq!(h.alloc(l(64), 0).unwrap(), a);
        assert_eq!(h.alloc(l(64), 0).unwrap(), b);
        for p in [a, b, c, c2] {
            unsafe { h.free(p) };
        }
        assert_eq!(h.stats().live_bytes, 0);
        // Two blocks (one per destination), each with its hot object still counted out by the
        // block: flushing puts them back, and an empty block that is its bin's only one stays.
        assert_eq!(h.stats().blocks, 2);
        h.flush_hot();
        assert_eq!(h.stats().live_bytes, 0);
        assert!(h.bins.iter().all(|b| b.hot.is_null()));
        // Every block is now empty and listed: a new allocation carves nothing.
        let d = h.alloc(l(64), 0).unwrap();
        assert_eq!(h.stats().blocks, 2);
        unsafe { h.free(d) };
    }

    #[test]
    fn remote_frees_come_back_in_batches_and_on_flush() {
        let mut a = Heap::new(0, 2, None);
        let mut b = Heap::new(1, 2, None);
        let ps: Vec<_> = (0..CRUMB_BATCH + 10).map(|_| a.alloc(l(32), 1).unwrap()).collect();
        for p in &ps[..CRUMB_BATCH - 1] {
            unsafe { b.free(*p) };
        }
        assert_eq!(b.stats().crumbs_pending, CRUMB_BATCH - 1);
        assert_eq!(a.stats().remote_frees, 0, "below the batch, crumbs stay with the freer");
        unsafe { b.free(ps[CRUMB_BATCH - 1]) };
        assert_eq!(b.stats().crumbs_pending, 0);
        assert_eq!(a.stats().remote_frees, CRUMB_BATCH, "a full batch goes back in one push");
        for p in &ps[CRUMB_BATCH..] {
            unsafe { b.free(*p) };
        }
        b.flush_crumbs();
        assert_eq!(a.stats().remote_frees, CRUMB_BATCH + 10);
        assert_eq!(a.stats().live_bytes, (CRUMB_BATCH + 10) * 32, "not drained yet");
        a.drain_remote();
        assert_eq!(a.stats().live_bytes, 0);
    }

    #[test]
    fn drained_batches_are_reused_clean() {
        // Retired batches go to the process-wide pool; new batches come from it, emptied. (Other
        // tests use the pool at the same time, so only "some of ours came back" is certain.)
        let ours: Vec<*mut Batch> = (0..8)
            .map(|_| {
                let b = Batch::new();
                unsafe {
                    (*b).len = 3;
                    (*b).next = b;
                }
                b
            })
            .collect();
        for &b in &ours {
            Batch::retire(unsafe { Box::from_raw(b) });
        }
        let again: Vec<*mut Batch> = (0..8).map(|_| Batch::new()).collect();
        assert!(again.iter().any(|b| ours.contains(b)), "no retired batch was reused");
        for &b in &again {
            assert!(unsafe { (*b).len == 0 && (*b).next.is_null() }, "a reused batch is empty");
            drop(unsafe { Box::from_raw(b) });
        }
    }

    #[test]
    fn the_cap_refuses_cleanly() {
        let mut h = Heap::new(0, 1, Some(2 * BLOCK));
        let mut ps = Vec::new();
        while let Some(p) = h.alloc(l(1024), 0) {
            ps.push(p);
        }
        assert_eq!(ps.len(), 2 * ((BLOCK - HEADER) / 1024));
        assert_eq!(h.stats().refused, 1);
        unsafe { h.free(ps.pop().unwrap()) };
        ps.push(h.alloc(l(1024), 0).expect("freed room is usable again"));
        for p in ps {
            unsafe { h.free(p) };
        }
    }

    #[test]
    fn objects_outliving_their_heap_are_released_by_their_last_free() {
        let mut a = Heap::new(0, 1, None);
        let mut b = Heap::new(1, 1, None);
        let ps: Vec<_> = (0..10).map(|_| a.alloc(l(48), 0).unwrap()).collect();
        let weak = a.shared_weak();
        drop(a);
        assert!(weak.upgrade().is_some(), "blocks with objects out keep the heap's shared half");
        for p in &ps[..5] {
            unsafe { b.free(*p) };
        }
        b.flush_crumbs();
        for p in &ps[5..9] {
            unsafe { free_remote(*p) };
        }
        assert!(weak.upgrade().is_some());
        unsafe { free_remote(ps[9]) };
        assert!(weak.upgrade().is_none(), "the last free released the block and the heap");
    }

    #[test]
    fn threads_exchange_objects_and_every_one_comes_back() {
        // Each thread allocates objects for the next and frees what the previous sent it; the
        // payload checks that no object was handed out twice.
        struct Sent(NonNull<u8>, usize);
        // SAFETY (test): the object moves with its only reference.
        unsafe impl Send for Sent {}
        const T: usize = 4;
        const N: usize = if cfg!(miri) { 300 } else { 20_000 };
        let (txs, rxs): (Vec<_>, Vec<_>) =
            (0..T).map(|_| std::sync::mpsc::channel::<Sent>()).unzip();
        let mut rxs: Vec<_> = rxs.into_iter().map(Some).collect();
        let weaks = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..T {
                let tx = txs[(t + 1) % T].clone();
                let rx = rxs[t].take().unwrap();
                let weaks = &weaks;
                s.spawn(move || {
                    let mut h = Heap::new(t, T, None);
                    weaks.lock().unwrap().push(Arc::downgrade(&h.shared));
                    for i in 0..N {
                        let p = h.alloc(l(8 + i % 200), (t + 1) % T).unwrap();
                        unsafe { p.as_ptr().cast::<usize>().write(t * N + i) };
                        tx.send(Sent(p, t * N + i)).unwrap();
                        while let Ok(Sent(p, tag)) = rx.try_recv() {
                            assert_eq!(unsafe { p.as_ptr().cast::<usize>().read() }, tag);
                            unsafe { h.free(p) };
                        }
                        if i % 1000 == 0 {
                            h.drain_remote();
                        }
                    }
                    drop(tx);
                    for Sent(p, tag) in rx {
                        assert_eq!(unsafe { p.as_ptr().cast::<usize>().read() }, tag);
                        unsafe { h.free(p) };
                    }
                    h.flush_crumbs();
                });
            }
            drop(txs);
        });
        for w in weaks.into_inner().unwrap() {
            assert!(w.upgrade().is_none(), "every object came back and every block was released");
        }
    }
}
