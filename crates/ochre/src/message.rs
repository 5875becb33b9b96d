//! What travels between workers.
//!
//! An event is a boxed closure plus its color. Between workers, events and the control messages of
//! color lending travel as [`Msg`]. The lending protocol (see `queue`) relies on one property of
//! the transport: messages from one sender to one receiver arrive in the order they were sent.

use std::alloc::Layout;
use std::cell::Cell;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::alloc;
use crate::runtime::EventAlloc;
use crate::Color;

thread_local! {
    /// The allocator for closures EMA does not hold, on a worker built with one.
    static EVENT_ALLOC: Cell<Option<EventAlloc>> = const { Cell::new(None) };
}

/// Sets this thread's event allocator (a worker thread, once, at start).
pub(crate) fn set_event_allocator(a: Option<EventAlloc>) {
    EVENT_ALLOC.with(|c| c.set(a));
}

/// This thread's event allocator, if its worker was built with one (see `color_box`, which
/// places user data the same way as closures).
pub(crate) fn event_allocator() -> Option<EventAlloc> {
    EVENT_ALLOC.try_with(|c| c.get()).ok().flatten()
}

/// A closure with the allocator that holds it, so that any thread can free it there.
#[repr(C)]
struct Custom<F> {
    alloc: EventAlloc,
    f: F,
}

/// A handler with its arguments captured: what the thesis calls an event.
///
/// A thin owned closure: a pointer to the closure's storage and a table of two functions. The
/// storage comes from the posting thread's EMA heap when it has one and the closure fits a size
/// class (placed for the worker that will run it), else from the global allocator; a closure
/// without captures takes no storage at all. Running the task moves the closure out and frees its
/// storage *before* calling it, so the storage goes back while the closure runs (and a panicking
/// closure leaks nothing).
///
/// Why two words, and small closures not held in the task itself (measured, session 53): a task
/// of a table and three words of closure (the closure in the task when it fits, as a message
/// carries it, else a pointer; no EMA object for small closures) took a one-worker fork-join of
/// empty messages from 508 to 453 instructions a message (callgrind), but every program of
/// `bench actors` ran 23-33% slower at one worker (five alternated processes of each build,
/// medians; fork-join empty alone 11% faster), and so did a task of a table and one word whose
/// word was an array (`MaybeUninit<[u64; 1]>`). Two pointers are a scalar pair, moved in
/// registers from the post to the queue and from the queue to the run; any other shape is an
/// aggregate, copied through memory at each of those moves (and a copy read wider than it was
/// written waits for the stores: the likely cost, not measured on this machine without
/// hardware counters). With the word a plain `MaybeUninit<u64>` (closures of one word held)
/// the speeds came back, but no program here sends one-word closures (an actor's message and
/// its address are two at least): not kept.
pub(crate) struct Task {
    data: NonNull<u8>,
    table: &'static TaskTable,
}

struct TaskTable {
    /// Moves the closure out, frees the storage, calls the closure.
    run: unsafe fn(NonNull<u8>),
    /// Drops the closure in place and frees the storage.
    drop: unsafe fn(NonNull<u8>),
}

// SAFETY: a Task owns a `F: Send` closure; its storage can be freed from any thread (EMA frees
// from a thread that did not allocate go back to the owner by the remote path).
unsafe impl Send for Task {}

struct Tables<F>(PhantomData<F>);

impl<F: FnOnce() + Send + 'static> Tables<F> {
    const EMA: TaskTable = TaskTable { run: run_ema::<F>, drop: drop_ema::<F> };
    const BOXED: TaskTable = TaskTable { run: run_boxed::<F>, drop: drop_boxed::<F> };
    const INLINE: TaskTable = TaskTable { run: run_inline::<F>, drop: drop_inline::<F> };
    const CUSTOM: TaskTable = TaskTable { run: run_custom::<F>, drop: drop_custom::<F> };
}

impl Task {
    /// Wraps `f`, with storage placed for worker `dest` if this thread has an EMA heap.
    #[inline]
    pub(crate) fn new_for<F: FnOnce() + Send + 'static>(f: F, dest: usize) -> Task {
        let layout = Layout::new::<F>();
        if layout.size() == 0 {
            std::mem::forget(f);
            return Task { data: NonNull::dangling(), table: &Tables::<F>::INLINE };
        }
        if let Some(Some(p)) = alloc::with_heap(|h| h.alloc(layout, dest)) {
            // SAFETY: a fresh EMA object of at least `layout`'s size and alignment.
            unsafe { p.as_ptr().cast::<F>().write(f) };
            return Task { data: p, table: &Tables::<F>::EMA };
        }
        if let Some(a) = event_allocator() {
            // SAFETY: `Custom<F>` is not zero-sized (it holds a reference).
            let p = unsafe { a.alloc(Layout::new::<Custom<F>>()) }.cast::<Custom<F>>();
            if let Some(p) = NonNull::new(p) {
                // SAFETY: fresh memory for one `Custom<F>`.
                unsafe { p.as_ptr().write(Custom { alloc: a, f }) };
                return Task { data: p.cast(), table: &Tables::<F>::CUSTOM };
            }
        }
        let p = Box::into_raw(Box::new(f));
        // SAFETY: `Box::into_raw` never returns null.
        Task { data: unsafe { NonNull::new_unchecked(p.cast()) }, table: &Tables::<F>::BOXED }
    }

    /// Wraps `f`, with storage placed for the current worker.
    pub(crate) fn new<F: FnOnce() + Send + 'static>(f: F) -> Task {
        let here = crate::context::with_current(|ctx| ctx.id).unwrap_or(0);
        Task::new_for(f, here)
    }

    /// Asks the CPU to bring the closure's storage into every cache level: a flood's closures
    /// are read long after they were written, one color at a time, and each is a miss otherwise.
    #[inline]
    pub(crate) fn prefetch(&self) {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        // SAFETY: SSE is part of every x86_64 target, and a prefetch reads nothing the program
        // sees: it never faults, whatever the address (a closure without captures has a
        // dangling one).
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                self.data.as_ptr().cast_const().cast(),
            )
        };
    }

    /// Runs the closure.
    #[inline]
    pub(crate) fn run(self) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: the table matches the storage `new_for` chose; `this` is never used again.
        unsafe { (this.table.run)(this.data) }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // SAFETY: the table matches the storage; the task was not run (run forgets it).
        unsafe { (self.table.drop)(self.data) }
    }
}

unsafe fn run_ema<F: FnOnce()>(p: NonNull<u8>) {
    // SAFETY: `p` holds an `F` written by `new_for`, read once here.
    let f = unsafe { p.as_ptr().cast::<F>().read() };
    // SAFETY: an EMA object, freed once; its `F` was moved out.
    unsafe { alloc::free_here(p) };
    f();
}

unsafe fn drop_ema<F: FnOnce()>(p: NonNull<u8>) {
    // SAFETY: `p` holds an `F`; dropped once, then its storage freed once.
    unsafe {
        std::ptr::drop_in_place(p.as_ptr().cast::<F>());
        alloc::free_here(p);
    }
}

unsafe fn run_boxed<F: FnOnce()>(p: NonNull<u8>) {
    // SAFETY: `p` came from `Box::<F>::into_raw`.
    let f = *unsafe { Box::from_raw(p.as_ptr().cast::<F>()) };
    f();
}

unsafe fn drop_boxed<F: FnOnce()>(p: NonNull<u8>) {
    // SAFETY: `p` came from `Box::<F>::into_raw`.
    drop(unsafe { Box::from_raw(p.as_ptr().cast::<F>()) });
}

unsafe fn run_custom<F: FnOnce()>(p: NonNull<u8>) {
    let p = p.as_ptr().cast::<Custom<F>>();
    // SAFETY: `p` holds a `Custom<F>` written by `new_for`, read once; then its memory is given
    // back to the allocator that gave it, with the same layout.
    let c = unsafe { p.read() };
    // SAFETY: as just said.
    unsafe { c.alloc.dealloc(p.cast(), Layout::new::<Custom<F>>()) };
    (c.f)();
}

unsafe fn drop_custom<F: FnOnce()>(p: NonNull<u8>) {
    let p = p.as_ptr().cast::<Custom<F>>();
    // SAFETY: `p` holds a `Custom<F>`; dropped once, then its memory freed once where it came
    // from.
    unsafe {
        let a = (*p).alloc;
        std::ptr::drop_in_place(p);
        a.dealloc(p.cast(), Layout::new::<Custom<F>>());
    }
}

unsafe fn run_inline<F: FnOnce()>(_: NonNull<u8>) {
    // SAFETY: `F` is zero-sized: any aligned non-null pointer reads one (the one `new_for` forgot).
    let f = unsafe { NonNull::<F>::dangling().as_ptr().read() };
    f();
}

unsafe fn drop_inline<F: FnOnce()>(_: NonNull<u8>) {
    // SAFETY: as in `run_inline`; dropped once.
    unsafe { std::ptr::drop_in_place(NonNull::<F>::dangling().as_ptr()) };
}

/// Bytes of closure a message carries inline ([`InlineTask`]): three words, enough for an actor
/// reference and a two-word message (fork-join's `Arc` and enum are 24 bytes).
pub(crate) const INLINE_BYTES: usize = 24;

/// A closure carried by value inside a message to another worker: no storage of its own until
/// the receiver files it ([`InlineTask::into_task`] stores it in the receiver's own heap).
///
/// Why: a closure stored by the poster (EMA, placed for the receiver) is written on the poster's
/// core, read and freed on the receiver's, and its storage comes back to the poster to be
/// written again: two more cache lines crossing per message than the batch slot that carries a
/// pointer to it, and the poster drains the freed objects. Carried inline, the closure crosses
/// once, in the batch buffer, and its storage is allocated and freed on one core. One event
/// posting 720K events round robin to 60 colors, 2 workers, closures taking an `Arc` clone
/// (`fanout_probe`): 12.4-12.7M -> 19.3-21.4M events/s. The cost moves to the receiver, which
/// now stores each closure: a stream to one color, whose receiver is the slower side, lost 5-8%
/// (`bench actors` counting).
pub(crate) struct InlineTask {
    table: &'static InlineTable,
    bytes: std::mem::MaybeUninit<[u64; INLINE_BYTES / 8]>,
}

struct InlineTable {
    /// Moves the closure out of the bytes into a [`Task`] stored for worker `dest`.
    into_task: unsafe fn(*const u8, usize) -> Task,
    /// Drops the closure in place.
    drop: unsafe fn(*mut u8),
}

// SAFETY: an InlineTask owns a `F: Send` closure, by value.
unsafe impl Send for InlineTask {}

struct InlineTables<F>(PhantomData<F>);

impl<F: FnOnce() + Send + 'static> InlineTables<F> {
    const TABLE: InlineTable =
        InlineTable { into_task: inline_into_task::<F>, drop: inline_drop::<F> };
}

unsafe fn inline_into_task<F: FnOnce() + Send + 'static>(p: *const u8, dest: usize) -> Task {
    // SAFETY: `p` holds an `F` written by `InlineTask::new`, read once (the caller forgets it).
    let f = unsafe { p.cast::<F>().read() };
    Task::new_for(f, dest)
}

unsafe fn inline_drop<F>(p: *mut u8) {
    // SAFETY: `p` holds an `F` written by `InlineTask::new`, dropped once.
    unsafe { std::ptr::drop_in_place(p.cast::<F>()) }
}

impl InlineTask {
    /// True if closures of type `F` travel inline: they take storage (not zero-sized: those
    /// take none anyway) and fit the bytes, alignment included.
    #[inline]
    pub(crate) const fn fits<F>() -> bool {
        Self::fits_layout(std::mem::size_of::<F>(), std::mem::align_of::<F>())
    }

    /// Whether a closure of type `F` posted to another worker (or from outside the runtime)
    /// travels inline under `config`: it [fits](Self::fits), inline posts are on, and posts
    /// are batched (the libasync-smp transport stores every closure).
    #[inline]
    pub(crate) fn wanted<F>(config: &crate::Config) -> bool {
        Self::fits::<F>() && config.inline_posts && config.batching
    }

    /// [`fits`](Self::fits) for a closure of `size` bytes aligned to `align` (the simulator's
    /// workloads give their closures' sizes).
    #[inline]
    pub(crate) const fn fits_layout(size: usize, align: usize) -> bool {
        size > 0 && size <= INLINE_BYTES && align <= 8
    }

    /// [`fits`](Self::fits) for the type of `_f`.
    #[cfg(all(test, not(loom)))]
    pub(crate) const fn fits_value<F>(_f: &F) -> bool {
        Self::fits::<F>()
    }

    /// Carries `f`. Only for closures that [`fit`](Self::fits) (checked in debug builds).
    #[inline]
    pub(crate) fn new<F: FnOnce() + Send + 'static>(f: F) -> InlineTask {
        debug_assert!(Self::fits::<F>());
        let mut t =
            InlineTask { table: &InlineTables::<F>::TABLE, bytes: std::mem::MaybeUninit::uninit() };
        // SAFETY: `F` fits the bytes in size and alignment (`fits`); written once, owned by `t`.
        unsafe { t.bytes.as_mut_ptr().cast::<F>().write(f) };
        t
    }

    /// Stores the closure for worker `dest` (the receiver: its own heap), as a [`Task`].
    #[inline]
    pub(crate) fn into_task(self, dest: usize) -> Task {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: the table matches the closure in the bytes; `this` is never used again.
        unsafe { (this.table.into_task)(this.bytes.as_ptr().cast(), dest) }
    }
}

impl Drop for InlineTask {
    fn drop(&mut self) {
        // SAFETY: the table matches the closure in the bytes, not moved out (`into_task` forgets).
        unsafe { (self.table.drop)(self.bytes.as_mut_ptr().cast()) }
    }
}

/// A message to a worker.
pub(crate) enum Msg {
    /// A new event for a color whose home is the receiver. `step`: the only post to another
    /// worker of the event that made it, a step of a chain of messages (`follow`).
    Post { color: Color, task: Task, urgent: bool, step: bool },
    /// [`Msg::Post`] with a small closure carried inline; the receiver stores it and goes on as
    /// for a `Post`.
    PostInline { color: Color, task: InlineTask, urgent: bool, step: bool },
    /// An event that the color's home passes on to the receiver, which holds the color on loan.
    Forward { color: Color, home: WorkerId, task: Task, urgent: bool },
    /// The color, idle at its home (the sender), moves to the receiver for good (`follow`), with
    /// its first event (the one the receiver had posted to it), or none (pushed off a worker
    /// whose CPU is shared).
    Move { color: Color, home: WorkerId, task: Option<Task>, urgent: bool },
    /// Answer to a steal request (`asked`), or colors lent unasked behind a long turn
    /// (`steal::share_behind_long_turn`): colors on loan with all their pending events
    /// (possibly none). Only an answer settles the receiver's request and its back-off.
    Grant { from: WorkerId, loans: Vec<Loan>, asked: bool },
    /// The borrower ran `ran` of the events its home sent it for `color` and holds none of them
    /// any more.
    Return { color: Color, ran: u64 },
    /// The color's home `from`, idle, asks the receiver, which holds the color on loan, for it
    /// back with its events (`queue`, "Recalls"): answer [`Msg::GiveBack`] or [`Msg::Kept`].
    Recall { color: Color, from: WorkerId },
    /// The answer to a [`Msg::Recall`]: the color, with the events left of it (`loan`), after
    /// `ran` events received from the home in all; the receiver runs it again.
    GiveBack { ran: u64, loan: Box<Loan> },
    /// The answer to a [`Msg::Recall`]: the sender keeps the color (or holds it no longer).
    Kept { color: Color },
    /// A thief asks for a color (it also left its id in the receiver's steal-request slot; the
    /// message is what wakes a sleeping victim).
    StealRequest,
    /// Never lend this color, homed on the receiver.
    Pin { color: Color },
    /// Worker `from`, which holds `color` (homed on the receiver) as a guest, holds back posts
    /// made there until everything sent to the home before this message has been passed on
    /// (`queue`, "Order per poster color"): answer [`Msg::Synced`] once routed.
    Sync { color: Color, from: WorkerId, epoch: u64 },
    /// The home's answer to [`Msg::Sync`]: every post it received before the `Sync` of `epoch`
    /// was forwarded ahead of this message.
    Synced { color: Color, epoch: u64 },
    /// I/O and timers for the receiver's poller and wheel (`io`). Boxed: the largest variant by
    /// far (64 bytes against 40), it made every message, and so every slot of a batch buffer,
    /// a whole cache line, on the path of every cross-worker post.
    Io(Box<crate::io::IoMsg>),
}

/// A worker's index in a message: 32 bits keep the variants that name a worker within the size
/// of the largest ([`Msg::PostInline`]).
pub(crate) type WorkerId = u32;

/// The index of worker `id` for a message (worker counts are far below 2^32: each is a thread).
#[inline]
pub(crate) fn worker_id(id: usize) -> WorkerId {
    id as WorkerId
}

impl Msg {
    /// The color of a post, inline or not.
    #[inline]
    pub(crate) fn post_color(&self) -> Option<Color> {
        match self {
            Msg::Post { color, .. } | Msg::PostInline { color, .. } => Some(*color),
            _ => None,
        }
    }

    /// A post's `step` flag, inline or not.
    #[inline]
    pub(crate) fn post_step_mut(&mut self) -> Option<&mut bool> {
        match self {
            Msg::Post { step, .. } | Msg::PostInline { step, .. } => Some(step),
            _ => None,
        }
    }

    /// True if the message hands a color's execution to another worker (a move, a loan, a
    /// return home): everything the color's events posted here must be pushed to the other
    /// inboxes before it, so that the color's posts made over there come after them
    /// (`queue`, "Order per poster color"). The sender flushes its other buffers first.
    pub(crate) fn hands_over_a_color(&self) -> bool {
        match self {
            Msg::Move { .. } | Msg::Return { .. } | Msg::GiveBack { .. } => true,
            Msg::Grant { loans, .. } => !loans.is_empty(),
            _ => false,
        }
    }
}

// Checked where it matters: the size of every message in a batch buffer (an inline post: color,
// table and closure, 40 bytes, plus the flags and the tag).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Msg>() == 48);

/// A color lent by its home to a thief, with everything pending for it.
pub(crate) struct Loan {
    pub(crate) color: Color,
    pub(crate) events: VecDeque<Task>,
    /// How many of `events`, at the front, were posted urgent.
    pub(crate) urgent: usize,
    /// The lender's measured cost of an event of the color, ns, or, for a color lent from a
    /// light backlog before it was timed, the lender's estimate (`ColorQueue::light_backlog`;
    /// 0: neither): the borrower starts from it instead of watching the color's first turn as a
    /// newcomer's.
    pub(crate) event_ns: u64,
}

/// The simulator's events (`sim`): a [`Task`] or [`InlineTask`] that holds a number (the
/// engine's index of the event) where the runtime's hold a closure, so that the simulated run
/// queues and messages hold the runtime's own types with no storage per event. Creating, running
/// and freeing a boxed closure per simulated event was about a sixth of the host time of a
/// message-heavy simulation (callgrind, `ochre sim speed`'s thread ring). Running one does
/// nothing; the engine reads the number back ([`Task::sim_number`]) instead of running it.
#[cfg(all(any(test, feature = "sim"), not(loom)))]
mod sim_tasks {
    use std::num::NonZeroUsize;
    use std::ptr::NonNull;

    use super::{InlineTable, InlineTask, Task, TaskTable};

    /// One static each (not a `const`): its address tells a simulated task from a closure.
    static NUMBER: TaskTable = TaskTable { run: nothing, drop: nothing };
    static INLINE_NUMBER: InlineTable =
        InlineTable { into_task: inline_into_task, drop: inline_drop };

    unsafe fn nothing(_: NonNull<u8>) {}

    unsafe fn inline_into_task(p: *const u8, _dest: usize) -> Task {
        // SAFETY: `p` holds the number `InlineTask::sim` wrote (a plain value, read as often as
        // wanted).
        Task::sim(unsafe { p.cast::<NonZeroUsize>().read() })
    }

    unsafe fn inline_drop(_: *mut u8) {}

    impl Task {
        /// A task that stands for number `n` (never dereferenced: the pointer is the number).
        pub(crate) fn sim(n: NonZeroUsize) -> Task {
            let data = NonNull::new(std::ptr::without_provenance_mut(n.get()))
                .unwrap_or(NonNull::dangling());
            Task { data, table: &NUMBER }
        }

        /// The number of a task made by [`Task::sim`], left in it; `None` for a closure.
        pub(crate) fn sim_number_of(&self) -> Option<NonZeroUsize> {
            std::ptr::eq(self.table, &NUMBER).then(|| self.data.addr())
        }

        /// The number of a task made by [`Task::sim`]; `None` (the task dropped) for a closure.
        pub(crate) fn sim_number(self) -> Option<NonZeroUsize> {
            let n = self.sim_number_of()?;
            std::mem::forget(self);
            Some(n)
        }
    }

    impl InlineTask {
        /// An inline task that stands for number `n`: the receiver's
        /// [`into_task`](InlineTask::into_task) gives `Task::sim(n)`.
        pub(crate) fn sim(n: NonZeroUsize) -> InlineTask {
            let mut t =
                InlineTask { table: &INLINE_NUMBER, bytes: std::mem::MaybeUninit::uninit() };
            // SAFETY: a `NonZeroUsize` fits the bytes in size and alignment.
            unsafe { t.bytes.as_mut_ptr().cast::<NonZeroUsize>().write(n) };
            t
        }
    }

    #[cfg(test)]
    #[test]
    fn a_simulated_task_gives_its_number_back_inline_or_not() {
        let n = NonZeroUsize::new(42).expect("not zero");
        assert_eq!(Task::sim(n).sim_number(), Some(n));
        assert_eq!(Task::sim(n).sim_number_of(), Some(n));
        assert_eq!(Task::new_for(|| {}, 0).sim_number_of(), None, "nor is it here");
        assert_eq!(InlineTask::sim(n).into_task(3).sim_number(), Some(n));
        assert_eq!(Task::new_for(|| {}, 0).sim_number(), None, "a closure is not a number");
        drop(Task::sim(n));
        drop(InlineTask::sim(n));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::alloc::{Heap, HeapEnter};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts drops of what a closure captured.
    struct Probe(Arc<AtomicUsize>);
    impl Drop for Probe {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn exercise() {
        let drops = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        // Run: the closure runs once and its captures drop once.
        let (p, r) = (Probe(drops.clone()), ran.clone());
        Task::new_for(
            move || {
                let _p = p;
                r.fetch_add(1, Ordering::Relaxed);
            },
            1,
        )
        .run();
        // Dropped unrun: captures drop, nothing runs.
        let (p, r) = (Probe(drops.clone()), ran.clone());
        drop(Task::new_for(
            move || {
                let _p = p;
                r.fetch_add(1, Ordering::Relaxed);
            },
            0,
        ));
        // Too big for EMA: the global allocator, same behaviour.
        let (big, r) = ([7u8; 4096], ran.clone());
        Task::new_for(
            move || {
                r.fetch_add(big[4095] as usize, Ordering::Relaxed);
            },
            0,
        )
        .run();
        // Zero-sized closure.
        Task::new_for(|| {}, 0).run();
        // A panicking closure frees its storage and drops its captures while unwinding.
        let p = Probe(drops.clone());
        let t = Task::new_for(
            move || {
                let _p = p;
                panic!("boom");
            },
            0,
        );
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.run())).is_err());
        assert_eq!(ran.load(Ordering::Relaxed), 1 + 7);
        assert_eq!(drops.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn tasks_run_once_and_drop_once_with_and_without_a_heap() {
        exercise();
        let mut heap = Heap::new(0, 2, None);
        {
            let _e = HeapEnter::new(&mut heap);
            exercise();
        }
        let s = heap.stats();
        assert!(s.blocks > 0, "tasks came from the heap");
        assert_eq!(s.live_bytes, 0, "and all their storage came back");

        struct Counting(AtomicUsize, AtomicUsize);
        // SAFETY: forwards to the system allocator unchanged.
        unsafe impl std::alloc::GlobalAlloc for Counting {
            unsafe fn alloc(&self, l: Layout) -> *mut u8 {
                self.0.fetch_add(1, Ordering::Relaxed);
                // SAFETY: forwarded contract.
                unsafe { std::alloc::System.alloc(l) }
            }
            unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
                self.1.fetch_add(1, Ordering::Relaxed);
                // SAFETY: forwarded contract.
                unsafe { std::alloc::System.dealloc(p, l) }
            }
        }
        static COUNTING: Counting = Counting(AtomicUsize::new(0), AtomicUsize::new(0));
        set_event_allocator(Some(&COUNTING));
        exercise();
        set_event_allocator(None);
        // Four closures capture something (the zero-sized one takes no storage).
        assert_eq!(COUNTING.0.load(Ordering::Relaxed), 4);
        assert_eq!(COUNTING.1.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn inline_tasks_run_once_and_drop_once_and_store_at_the_receiver() {
        static RAN: AtomicUsize = AtomicUsize::new(0);
        let drops = Arc::new(AtomicUsize::new(0));
        // Fits: an `Arc` and two words (what fork-join's actors send).
        let (p, words) = (Probe(drops.clone()), [5u64, 6]);
        let f = move || {
            let _p = &p;
            RAN.fetch_add((words[0] + words[1]) as usize, Ordering::Relaxed);
        };
        assert!(InlineTask::fits_value(&f));
        assert!(!InlineTask::fits::<[u64; 4]>(), "four words do not fit");
        assert!(!InlineTask::fits::<()>(), "zero-sized closures take no storage anyway");
        let mut heap = Heap::new(1, 2, None);
        {
            let _e = HeapEnter::new(&mut heap);
            // Carried in a message, stored by the receiver (worker 1, this heap), run once.
            let msg = Msg::PostInline {
                color: Color(3),
                task: InlineTask::new(f),
                urgent: false,
                step: false,
            };
            assert_eq!(msg.post_color(), Some(Color(3)));
            let Msg::PostInline { task, .. } = msg else { unreachable!() };
            let task = task.into_task(1);
            assert!(heap_live_bytes() > 0, "stored in the receiver's heap");
            task.run();
            // Dropped unrun, still in its message: the captures drop, nothing runs.
            let p = Probe(drops.clone());
            let mut msg = Msg::PostInline {
                color: Color(4),
                task: InlineTask::new(move || {
                    let _p = p;
                    RAN.fetch_add(100, Ordering::Relaxed);
                }),
                urgent: false,
                step: false,
            };
            *msg.post_step_mut().expect("a post") = true;
            assert!(matches!(msg, Msg::PostInline { step: true, .. }));
            drop(msg);
        }
        assert_eq!(RAN.load(Ordering::Relaxed), 11);
        assert_eq!(drops.load(Ordering::Relaxed), 2);
        assert_eq!(heap.stats().live_bytes, 0, "the stored closure's storage came back");
    }

    /// Live bytes of the current thread's heap.
    fn heap_live_bytes() -> usize {
        crate::alloc::with_heap(|h| h.stats().live_bytes).unwrap_or(0)
    }
}
