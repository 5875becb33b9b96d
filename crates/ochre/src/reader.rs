//! Reader colors: events of a color that may run beside each other, never beside the color's
//! exclusive events (a reader-writer color; the *tints* of Jannotti et al. that the thesis cites
//! in §2.2.2).
//!
//! ## The mode is per color, the kind of event per post
//!
//! A color admits readers when it is made with [`Color::with_readers`](crate::Color): the mode is
//! in the color's value (bit 62 of an ungrouped color), like the group bit, so every worker knows
//! it without reading shared state. Each post then says what it is: [`post_read`] posts a
//! *read* (shared), [`post`](crate::post) an exclusive event, as for any color. Why not any color,
//! chosen per post: an exclusive turn of a color that admits readers must first take the color's
//! reader-writer word, and a color that could start admitting readers at any moment would make
//! every turn of every color look the color up in a shared table (a cost on the hot path of
//! programs that never read), or make the first read wait for a hand-shake with whichever worker
//! runs the color. With the mode in the value, a turn of an ordinary color pays one bit test, and
//! [`post_read`] on an ordinary color simply posts an exclusive event (a read may always run
//! alone: correct, without the parallelism).
//!
//! ## Where a read runs
//!
//! A read runs on the worker that posts it. **At once** when it can: posted from an event (not
//! from a read), and admitted then (no exclusive turn of the color runs or waits), it runs
//! inside [`post_read`], before it returns, as a read of the lane (below), not as its poster:
//! the poster's color is not [`current_color`](crate::current_color) meanwhile, so the read
//! opens no [`ColorCell`](crate::ColorCell) of it (no `&mut` of the poster's state can alias).
//! Why: a lookup of tens of nanoseconds costs less than the event that would carry it (queue,
//! turn, task); callgrind, `bench readers`' busy lookups at 2 workers: 1,949 instructions a
//! request queued, 1,344 at once (exclusive colors: 1,770-1,870); 1,154 once the post looked
//! the worker and the color's state up once each, not three times and twice (1,245 before, in
//! the same run: `examples/readers_probe`; exclusive 1,685-1,922). A read may run at any time
//! after its post, on any worker's lane, so running it before the rest of the posting event
//! is one of the orders it already had with outside threads' reads. Reads posted from a read
//! are queued (no nesting, a bounded stack).
//!
//! Otherwise it is queued as an event of that worker's *lane*, a
//! reserved color homed there and pinned when the runtime is built (`Readers::lane`), so posting a read is a local push
//! (no cross-core hop, no wait behind the color's home), and reads of one color posted on
//! different workers run at the same time. Reads posted from outside threads
//! ([`Handle::post_read`](crate::Handle::post_read)) go to the lanes round robin. Inside a read,
//! [`current_read`] is the color read and [`current_color`](crate::current_color) the lane, so a
//! [`ColorCell`](crate::ColorCell) of the color opens for reading ([`ColorCell::read`]) and
//! refuses writing.
//!
//! ## The protocol (`ReadState`, one per color that admits readers)
//!
//! One word: `WAITING` (an exclusive turn waits for the reads to drain), `WRITER` (an exclusive
//! turn runs), `PARKED` (reads wait for the turn's end) and the count of *granted* reads; one
//! count of admitted reads per worker, each in its own cache line (a read writes only its
//! worker's line: reads on two workers pass no line between them, the "big-reader" layout of
//! per-CPU reader-writer locks; and only that worker's thread writes it, so a read changes it
//! with a load and a store, not a locked read-modify-write, as Linux's per-CPU reader counts
//! are plain increments); and a list of parked reads under a mutex. Only the worker that
//! holds the color starts its exclusive turns, so at most one writer contends at a time.
//!
//! * **A read** on worker `w` adds one to `w`'s count (a store: `w` is its only writer), then
//!   (a SeqCst fence between) reads the word (Acquire): with neither `WRITER` nor `WAITING` set
//!   it runs, and leaves (count - 1, Release). With one set it takes its one back and parks:
//!   under the mutex, it sets `PARKED` if a flag is still set (else it tries again) and joins
//!   the list, with the worker it was posted on.
//! * **An exclusive turn** of the color (worker loop, `worker::run_round`) sets `WAITING`, then
//!   (a SeqCst fence between) reads every worker's count and the granted count (Acquire: pairs
//!   with the reads' Release, their reads happen before the turn). All zero: it takes `WRITER`.
//!   Otherwise `WAITING` stays and the color goes to the back of the worker's ready list with
//!   its events untouched (a turn of zero events); the worker runs its other colors and tries
//!   again, leaving its round when every ready color was tried, to take its inbox (granted
//!   reads may be in it). The two fences make a store-load pair: a read and a turn that race
//!   cannot both miss each other (either the read sees `WAITING` or the turn sees its count).
//! * **The end of that turn** clears the word with one compare-and-swap from exactly `WRITER`
//!   (no mutex: the common case). If `PARKED` is set, under the mutex, the parked reads are
//!   *granted* (the word's count set to their number, the flags cleared, Release) and posted
//!   back to the lanes of their workers, where they run without asking again and leave the
//!   word's count.
//!
//! Why this is correct:
//!
//! * **Exclusion.** A read runs only counted; a turn starts only after it saw every count zero
//!   with `WAITING` set, and while `WRITER` or `WAITING` is set no read is admitted (the fence
//!   pair; granted reads were counted before `WRITER` was cleared). A read that finds a flag parks under the mutex and
//!   marks the word `PARKED` there; the turn's end either clears the word before that mark (the
//!   read, checking again, is admitted) or finds the mark, fails its lock-free clear and takes
//!   the same mutex (the read is granted). (`loom_models`: `loom_reader_*`.)
//! * **No starvation of writers.** Reads that come while a turn waits park behind it (the
//!   fairness rule of tokio's `RwLock`: write-preferring, first come first served by phase), so
//!   the count only falls and the waiting turn starts once the reads running at the time end.
//!   **Nor of readers**: the reads parked during a turn are granted at its end, before the next
//!   turn can start, so a stream of writes lets the parked reads through after each turn.
//! * **Exactly once.** A read run at once is a call; a queued read is a task that moves from
//!   the lane to the parked list and back to a lane, by value; every queued read is counted as
//!   an event of the lane (parked reads are not: [`RunReport::pending`](crate::RunReport) does
//!   not count them; reads run at once are no events).
//! * **Order.** Exclusive events keep their order per poster (a waiting turn keeps its queue).
//!   Reads are ordered with nothing: a read posted after the poster's exclusive event of the
//!   color may run before it (post the read from the write when it must see it).
//! * **Shutdown.** A turn that waits at a shutdown keeps its color queued and `WAITING` set; the
//!   reads parked behind it stay parked and are granted when that turn runs at the next
//!   [`Runtime::run`](crate::Runtime::run). Dropping the runtime drops them unrun, like queued
//!   events. Quiescence cannot end a run with a read parked: a read parks only behind a turn
//!   that is queued or running, and that worker is not idle. This holds because only a turn
//!   with events to run takes the word: a turn may be empty (a guest that stayed only while a
//!   fence held its posts is scheduled with no event, to be given back), and an empty turn
//!   that tried the word and found reads would leave `WAITING` set with its color queued
//!   nowhere (with colors that follow their messages, `bench readers`' few-clients case lost
//!   its parked reads that way: `tests/readers.rs`, `few_clients_*`).
//! * **Stealing and following.** Nothing of the protocol is tied to a worker: a color stolen or
//!   moved while its turn waits takes its queue along, and its new holder tries the word; a
//!   color moves idle only (no event queued, so no turn waits). Lanes are pinned (reads stay
//!   where posted); a granted read goes to its own worker's lane.
//! * **Panics** in a read are caught around it, counted and reported with the color read; the
//!   read leaves the count all the same.
//!
//! Cost: a color's state lives in a table sharded by color, created at its first read or turn
//! and kept for the runtime's life (a cache line per worker per color: 256 bytes a color at 2
//! workers, 2 KiB at 16); each worker caches the states it used, so a read costs one lookup in
//! a worker-local map, two plain stores to its worker's line, a fence and a load of the word
//! (and, queued, an event of its lane); an exclusive turn, a read of every worker's line and
//! three atomic operations on the word. Ordinary colors' turns pay a bit test.

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use rustc_hash::{FxBuildHasher, FxHashMap};

use crate::color::{first_homed_on, Placement};
use crate::context::with_current;
use crate::padding::Padded;
use crate::sync::{fence, lock, AtomicU64, Mutex, Ordering};
use crate::{Color, Error};

/// An exclusive turn of the color runs.
const WRITER: u64 = 1 << 63;
/// An exclusive turn of the color waits for the admitted reads to end.
const WAITING: u64 = 1 << 62;
/// Reads are parked: the turn's end must take the mutex to grant them.
const PARKED: u64 = 1 << 61;
/// The count of admitted reads (running, or granted and on their way to run).
const COUNT: u64 = PARKED - 1;

/// A color's reader-writer word, unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Word(u64);

impl Word {
    pub(crate) fn readers(self) -> u64 {
        self.0 & COUNT
    }
    pub(crate) fn writer(self) -> bool {
        self.0 & WRITER != 0
    }
    #[cfg(any(test, loom))]
    pub(crate) fn waiting(self) -> bool {
        self.0 & WAITING != 0
    }
    #[cfg(all(test, not(loom)))]
    pub(crate) fn parked(self) -> bool {
        self.0 & PARKED != 0
    }
    /// A read may be admitted: no turn runs or waits.
    fn admits_reads(self) -> bool {
        self.0 & (WRITER | WAITING) == 0
    }
}

/// A read that found a turn running or waiting, kept until that turn ends.
pub(crate) struct Parked {
    /// The worker it was posted on (`usize::MAX` for an outside thread: any lane).
    pub(crate) origin: usize,
    pub(crate) read: Box<dyn FnOnce() + Send>,
}

/// The reader-writer state of one color (module doc, "The protocol").
pub(crate) struct ReadState {
    /// The flags, and the count of granted reads.
    word: AtomicU64,
    /// The reads admitted on each worker, each count in its own cache line: a read writes only
    /// its worker's line, so reads on two workers do not pass a line between them.
    slots: Box<[Padded<AtomicU64>]>,
    parked: Mutex<Vec<Parked>>,
}

/// How an admitted read leaves: from its worker's slot, or from the word's count (granted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admitted {
    Slot(usize),
    Granted,
}

impl ReadState {
    /// The state of a color of a runtime of `workers` workers.
    pub(crate) fn new(workers: usize) -> ReadState {
        ReadState {
            word: AtomicU64::new(0),
            slots: (0..workers.max(1)).map(|_| Padded::new(AtomicU64::new(0))).collect(),
            parked: Mutex::new(Vec::new()),
        }
    }

    #[cfg(any(test, loom))]
    pub(crate) fn word(&self) -> Word {
        Word(self.word.load(Ordering::SeqCst))
    }

    /// Reads admitted and not ended, granted ones included.
    #[cfg(any(test, loom))]
    pub(crate) fn reads(&self) -> u64 {
        let slots: u64 = self.slots.iter().map(|s| s.load(Ordering::SeqCst)).sum();
        slots + self.word().readers()
    }

    /// Admits a read on worker `slot` if no turn runs or waits. Called on worker `slot`'s
    /// thread only (its slot has one writer).
    #[inline]
    pub(crate) fn try_read(&self, slot: usize) -> bool {
        let count = &self.slots[slot];
        // One writer (this worker): a load and a store, not a locked read-modify-write (two
        // fewer serializing instructions a read, with `end_read`'s).
        count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        // A store-load pair against the turn's (`try_write`), each side with a SeqCst fence
        // between its write and its read: either this read sees `WAITING`, or the turn sees
        // this count. (A fence, not SeqCst accesses: loom checks fences exactly.) Acquire: pairs
        // with the Release of the last turn's end (its writes are seen).
        fence(Ordering::SeqCst);
        if Word(self.word.load(Ordering::Acquire)).admits_reads() {
            return true;
        }
        // A turn runs or waits: back off (it tries again).
        count.store(count.load(Ordering::Relaxed) - 1, Ordering::Release);
        false
    }

    /// An admitted read ended (`Admitted::Slot(w)`: on worker `w`'s thread, as its admission).
    #[inline]
    pub(crate) fn end_read(&self, how: Admitted) {
        // Release: pairs with the turn's loads that see the count zero (`try_write`).
        let before = match how {
            Admitted::Slot(slot) => {
                let count = &self.slots[slot];
                let before = count.load(Ordering::Relaxed);
                count.store(before.wrapping_sub(1), Ordering::Release);
                before
            }
            Admitted::Granted => Word(self.word.fetch_sub(1, Ordering::Release)).readers(),
        };
        debug_assert!(before > 0, "a read left a count of zero");
    }

    /// Admits `read` on worker `slot` now (returned, to run) or parks it behind the running or
    /// waiting turn.
    #[cold]
    pub(crate) fn read_or_park(&self, slot: usize, read: Parked) -> Option<Parked> {
        let mut parked = lock(&self.parked);
        // Under the mutex, `PARKED` is set only while a flag is: the turn's end then fails its
        // lock-free clear and takes the mutex, so it grants this read; or that clear came
        // first, and the read is admitted here.
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            if Word(w).admits_reads() {
                if self.try_read(slot) {
                    return Some(read);
                }
                w = self.word.load(Ordering::Relaxed);
                continue;
            }
            match self.word.compare_exchange_weak(
                w,
                w | PARKED,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        parked.push(read);
        None
    }

    /// Starts an exclusive turn if no read is admitted; else leaves the turn marked waiting
    /// (reads that come now park) and returns false.
    pub(crate) fn try_write(&self) -> bool {
        // The store-load pair of `try_read`, from this side. Acquire (here and on the slots):
        // pairs with the Release of the reads' ends (they happen before the turn).
        let w = self.word.fetch_or(WAITING, Ordering::Acquire);
        debug_assert!(!Word(w).writer(), "two exclusive turns of one color");
        fence(Ordering::SeqCst);
        if Word(w).readers() > 0 || self.slots.iter().any(|s| s.load(Ordering::Acquire) != 0) {
            return false;
        }
        // No read is admitted, and none can be while `WAITING` is set (only this turn grants):
        // take the color, keeping `PARKED` (reads parked while the turn waited).
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            let next = WRITER | (w & PARKED);
            match self.word.compare_exchange_weak(w, next, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => w = now,
            }
        }
    }

    /// Ends the exclusive turn: the parked reads are admitted (granted) and returned, for the
    /// caller to post to their lanes.
    pub(crate) fn end_write(&self) -> Vec<Parked> {
        // Nothing parked (the common case): one compare-and-swap, no mutex. Release: pairs with
        // the next reads' and turn's SeqCst loads of the word.
        if self.word.compare_exchange(WRITER, 0, Ordering::Release, Ordering::Relaxed).is_ok() {
            return Vec::new();
        }
        self.end_write_granting()
    }

    #[cold]
    fn end_write_granting(&self) -> Vec<Parked> {
        let mut parked = lock(&self.parked);
        let granted = std::mem::take(&mut *parked);
        // Release: as above. Under the mutex: a read parking now is either in `granted` or sees
        // the cleared word (`read_or_park`). Clears `WRITER` and `PARKED`; the granted reads
        // are counted in the word.
        self.word.store(granted.len() as u64, Ordering::Release);
        drop(parked);
        granted
    }
}

/// Ungrouped colors reserved for lanes start here (bit 62 clear: lanes admit no readers).
const LANE_BASE: u64 = 0x3fff_ff00_0000_0000;

/// How many reserved colors are tried for one homed on a given worker: ample below 65,536
/// workers (`color::first_homed_on`'s bound; past it the lane may be homed elsewhere: reads of
/// that worker then cross to it, still correct).
const LANE_TRIES: u64 = 1 << 20;

/// States are sharded by color; a shard's mutex is taken once per color and worker (each
/// worker caches what it found). A guess: enough that a burst of new colors on many workers
/// rarely meets on one.
const SHARDS: usize = 16;

/// One shard of the table: the states of some colors.
type States = FxHashMap<Color, Arc<ReadState>>;

/// The runtime's table of reader-writer states and its workers' lanes.
pub(crate) struct Readers {
    /// Tells the tables of two runtimes apart in the worker-local caches.
    id: u64,
    shards: Box<[Mutex<States>]>,
    lanes: Box<[Color]>,
    /// Round robin over lanes for reads posted from outside threads.
    next_lane: AtomicU64,
}

impl Readers {
    pub(crate) fn new(placement: Placement) -> Readers {
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let lanes = (0..placement.workers)
            .map(|w| {
                if w >= placement.homes {
                    // No color is homed on a worker beyond the homes (more workers than CPUs,
                    // `Config::home_on_every_worker`): a lane of its own, homed elsewhere and
                    // run where it is (moved by `follow` or stealing like any color).
                    return Color(LANE_BASE + LANE_TRIES + w as u64);
                }
                first_homed_on(LANE_BASE, LANE_TRIES, w, placement)
                    .unwrap_or(Color(LANE_BASE + w as u64))
            })
            .collect();
        Readers {
            id: IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            shards: (0..SHARDS).map(|_| Mutex::new(FxHashMap::default())).collect(),
            lanes,
            next_lane: AtomicU64::new(0),
        }
    }

    /// The lane of worker `w` (a worker id: below the number of workers): the color its reads
    /// run as. Indexed: no division on a read's path.
    #[inline]
    pub(crate) fn lane(&self, w: usize) -> Color {
        self.lanes[w]
    }

    /// The state of `color`, created at first use.
    fn state(&self, color: Color) -> Arc<ReadState> {
        let shard = &self.shards[(color.0 as usize ^ (color.0 >> 32) as usize) % SHARDS];
        lock(shard)
            .entry(color)
            .or_insert_with(|| Arc::new(ReadState::new(self.lanes.len())))
            .clone()
    }
}

/// Entries of a worker's direct-mapped memo of states ([`Cache::recent`]): a power of two, more
/// than the colors a program usually reads at once (`bench readers` reads 64).
const RECENT: usize = 128;

/// The states a worker used, by color, for one runtime's table.
struct Cache {
    owner: u64,
    /// A memo in front of `states`, indexed by a hash of the color: a look is an index and a
    /// compare, where the map's was a probe (about 20 instructions a read under callgrind,
    /// `examples/readers_probe` at 1 worker). Key 0: empty (a color that admits readers has bit
    /// 62 set, so none is 0).
    recent: [(u64, *const ReadState); RECENT],
    states: FxHashMap<Color, Arc<ReadState>>,
}

impl Cache {
    const EMPTY: Cache = Cache {
        owner: 0,
        recent: [(0, std::ptr::null()); RECENT],
        states: FxHashMap::with_hasher(FxBuildHasher),
    };
}

/// The memo's entry for `color`.
#[inline]
fn recent_index(color: Color) -> usize {
    color.table_index(RECENT)
}

thread_local! {
    static CACHE: RefCell<Cache> = const { RefCell::new(Cache::EMPTY) };
    /// The color of the running read, if a read runs.
    static READING: Cell<Option<Color>> = const { Cell::new(None) };
}

/// The state of `color` (a color that admits readers) in `readers`, through this thread's cache
/// (a look in a worker-local memo, else one hash lookup in a worker-local map; the shared
/// table's mutex only at a color's first use on this thread).
#[inline]
fn cached(readers: &Readers, color: Color) -> &ReadState {
    debug_assert!(color.0 != 0, "0 marks an empty memo entry");
    let i = recent_index(color);
    let state: *const ReadState = CACHE.with(|c| {
        let mut cache = c.borrow_mut();
        if cache.owner == readers.id && cache.recent[i].0 == color.0 {
            return cache.recent[i].1;
        }
        cached_slow(&mut cache, readers, color, i)
    });
    // SAFETY: `readers.shards` holds an `Arc` of every state it made and never removes one, so
    // the state lives as long as `readers` does, whatever becomes of this thread's cache (which
    // a read that runs another runtime's worker code could clear; the memo is cleared with the
    // map, and both are of `readers` while `owner` says so); the state is only shared
    // (`ReadState` is `Sync`), never mutably borrowed.
    unsafe { &*state }
}

#[cold]
#[inline(never)]
fn cached_slow(cache: &mut Cache, readers: &Readers, color: Color, i: usize) -> *const ReadState {
    if cache.owner != readers.id {
        *cache = Cache { owner: readers.id, ..Cache::EMPTY };
    }
    let state = Arc::as_ptr(cache.states.entry(color).or_insert_with(|| readers.state(color)));
    cache.recent[i] = (color.0, state);
    state
}

/// Starts an exclusive turn of `color`, a color that admits readers (worker loop): false if
/// reads of it run; the turn must then wait (module doc).
pub(crate) fn begin_write(shared: &crate::shared::Shared, color: Color) -> bool {
    cached(&shared.readers, color).try_write()
}

/// Ends the exclusive turn of `color` begun by [`begin_write`]; returns the reads parked behind
/// it, granted, for [`grant`]. Called before the color may leave this worker: its next holder's
/// turn must find the word clear.
pub(crate) fn end_write(shared: &crate::shared::Shared, color: Color) -> Vec<Parked> {
    cached(&shared.readers, color).end_write()
}

/// Posts reads granted by [`end_write`] to their workers' lanes.
pub(crate) fn grant(
    shared: &crate::shared::Shared,
    core: &mut crate::worker::Core,
    color: Color,
    granted: Vec<Parked>,
) {
    for p in granted {
        let lane = match p.origin {
            usize::MAX => shared.readers.lane(core.id),
            w => shared.readers.lane(w),
        };
        let read = p.read;
        core.post(shared, lane, crate::message::Task::new(move || run_granted(color, read)), false);
    }
}

/// A worker whose ready colors all wait for reads leaves its round: if it ran nothing, it
/// yields its CPU first, for the reads it waits for (with more workers than CPUs they may be
/// preempted), and its loop comes back to take its inbox (granted reads may be there).
#[cold]
pub(crate) fn wait_for_reads(ran: usize) {
    if ran == 0 {
        std::thread::yield_now();
    }
}

/// The read of `color` as posted: admitted or parked when it runs.
fn run_read<F: FnOnce() + Send + 'static>(color: Color, origin: usize, f: F) {
    let ran = with_current(move |ctx| {
        let state = cached(&ctx.shared.readers, color);
        if state.try_read(ctx.id) {
            return run_admitted(ctx, state, color, Admitted::Slot(ctx.id), f);
        }
        let parked = Parked { origin, read: Box::new(f) };
        if let Some(p) = state.read_or_park(ctx.id, parked) {
            run_admitted(ctx, state, color, Admitted::Slot(ctx.id), p.read);
        }
    });
    // Reads run on workers only (their lanes).
    debug_assert!(ran.is_some(), "a read ran outside a worker");
}

/// A read granted at the end of a turn (already counted).
fn run_granted(color: Color, read: Box<dyn FnOnce() + Send>) {
    let ran = with_current(move |ctx| {
        let state = cached(&ctx.shared.readers, color);
        run_admitted(ctx, state, color, Admitted::Granted, read);
    });
    debug_assert!(ran.is_some(), "a read ran outside a worker");
}

/// Runs an admitted read, then leaves the count, whatever `f` does; a panic is reported with
/// the color read. Inlined into each caller: a call saved 20 instructions a read at once
/// (callgrind, `examples/readers_probe` at 1 worker).
#[inline(always)]
fn run_admitted<F: FnOnce()>(
    ctx: &crate::worker::WorkerCtx,
    state: &ReadState,
    color: Color,
    how: Admitted,
    f: F,
) {
    let previous = READING.with(|r| r.replace(Some(color)));
    let result = catch_unwind(AssertUnwindSafe(f));
    READING.with(|r| r.set(previous));
    state.end_read(how);
    if let Err(payload) = result {
        ctx.panicked(color, payload);
    }
}

/// Posts `f` as a *read* of `color`: it may run at the same time as other reads of `color`, never
/// at the same time as an exclusive event of `color` ([`post`](crate::post)). It runs on this
/// worker: at once, before `post_read` returns, if no exclusive event of `color` runs or waits
/// (and this is not a read itself), else later, as an event. For a color made without
/// [`Color::with_readers`] it is an ordinary exclusive post.
///
/// Reads are not ordered with the poster's other posts: a read posted after an exclusive event
/// of the color may run before it. Inside the read, [`current_read`] is `color`, and a
/// [`ColorCell`](crate::ColorCell) of `color` opens with [`ColorCell::read`](crate::ColorCell).
///
/// ```
/// use std::sync::Arc;
/// use ochre::{Color, ColorCell, Runtime};
///
/// let rt = Runtime::builder().workers(2).pin(false).build()?;
/// let table = Color::with_readers(7);
/// let cell = Arc::new(ColorCell::new(table, vec![1u64, 2, 3]));
/// let c = cell.clone();
/// rt.run(Color::DEFAULT, move || {
///     let w = c.clone();
///     // Exclusive: may change the value.
///     ochre::post(table, move || w.with(|v| v.push(4)).unwrap());
///     for _ in 0..4 {
///         let r = c.clone();
///         // Reads: may run beside each other, never beside the push.
///         ochre::post_read(table, move || {
///             let len = r.read(|v| v.len()).unwrap();
///             assert!(len == 3 || len == 4);
///         });
///     }
/// })?;
/// # Ok::<(), ochre::Error>(())
/// ```
///
/// # Panics
///
/// If called outside an ochre handler: use [`Handle::post_read`](crate::Handle::post_read) from
/// other threads, or [`try_post_read`].
pub fn post_read<F: FnOnce() + Send + 'static>(color: Color, f: F) {
    if try_post_read(color, f).is_err() {
        panic!("ochre::post_read: {}", Error::NotInRuntime);
    }
}

/// Like [`post_read`], but returns [`Error::NotInRuntime`] instead of panicking outside a
/// handler.
pub fn try_post_read<F: FnOnce() + Send + 'static>(color: Color, f: F) -> Result<(), Error> {
    if !color.admits_readers() {
        return crate::try_post(color, f);
    }
    // One look at the worker and one at the color's state: a read run at once goes no further.
    let queued = with_current(move |ctx| {
        // At once: from an event (not from inside a read: no nesting), if admitted now.
        if ctx.current.get().is_some() && READING.with(Cell::get).is_none() {
            let state = cached(&ctx.shared.readers, color);
            if state.try_read(ctx.id) {
                run_at_once(ctx, state, color, f);
                return None;
            }
        }
        Some((ctx.shared.readers.lane(ctx.id), ctx.id, f))
    })
    .ok_or(Error::NotInRuntime)?;
    match queued {
        Some((lane, origin, f)) => crate::try_post(lane, move || run_read(color, origin, f)),
        None => Ok(()),
    }
}

/// Runs a read admitted at its post, inside the posting event, as a read of the lane (module
/// doc, "Where a read runs"): the poster's color is not the current one meanwhile, so the read
/// opens no cell of it.
#[inline]
fn run_at_once<F: FnOnce()>(ctx: &crate::worker::WorkerCtx, state: &ReadState, color: Color, f: F) {
    let poster = ctx.current.replace(Some(ctx.shared.readers.lane(ctx.id)));
    run_admitted(ctx, state, color, Admitted::Slot(ctx.id), f);
    ctx.current.set(poster);
}

/// Posts a read from an outside thread, on a lane chosen round robin ([`crate::Handle`]).
pub(crate) fn post_read_outside<F: FnOnce() + Send + 'static>(
    handle: &crate::Handle,
    shared: &crate::shared::Shared,
    color: Color,
    f: F,
) -> Result<(), Error> {
    if !color.admits_readers() {
        return handle.try_post(color, f);
    }
    let w = shared.readers.next_lane.fetch_add(1, Ordering::Relaxed) as usize % shared.workers;
    handle.try_post(shared.readers.lane(w), move || run_read(color, usize::MAX, f))
}

/// Runs `f` as if inside a read of `color` (tests of `ColorCell::read` without a runtime).
#[cfg(all(test, not(loom)))]
pub(crate) fn reading<R>(color: Color, f: impl FnOnce() -> R) -> R {
    let previous = READING.with(|r| r.replace(Some(color)));
    let r = f();
    READING.with(|r| r.set(previous));
    r
}

/// The color whose read is running, or `None` outside a read ([`post_read`]).
#[inline]
pub fn current_read() -> Option<Color> {
    READING.with(|r| r.get())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::color::home_of;

    #[test]
    fn the_word_packs_count_and_flags_apart() {
        assert_eq!(COUNT & (WRITER | WAITING | PARKED), 0);
        assert_eq!([WRITER, WAITING, PARKED].iter().fold(COUNT, |a, b| a ^ b), u64::MAX);
        assert!(Word(WAITING | PARKED | 2).parked() && !Word(WAITING | 2).parked());
        let w = Word(WAITING | 3);
        assert_eq!((w.readers(), w.waiting(), w.writer()), (3, true, false));
        assert!(!w.admits_reads() && !Word(WRITER).admits_reads() && Word(5).admits_reads());
    }

    #[test]
    fn a_waiting_turn_stops_new_reads_and_starts_when_the_count_drains() {
        let s = ReadState::new(2);
        assert!(s.try_read(0) && s.try_read(1));
        assert_eq!(s.reads(), 2);
        assert!(!s.try_write(), "two reads run");
        assert_eq!(s.word(), Word(WAITING));
        assert!(!s.try_read(0), "a read after a waiting turn waits for it");
        assert_eq!(s.reads(), 2, "and backs off its count");
        let parked = s.read_or_park(0, Parked { origin: 1, read: Box::new(|| {}) });
        assert!(parked.is_none());
        assert_eq!(s.word(), Word(WAITING | PARKED));
        s.end_read(Admitted::Slot(0));
        assert!(!s.try_write());
        s.end_read(Admitted::Slot(1));
        assert!(s.try_write());
        assert_eq!(s.word(), Word(WRITER | PARKED), "the turn keeps the mark of parked reads");
        let granted = s.end_write();
        assert_eq!(granted.len(), 1);
        assert_eq!(granted[0].origin, 1);
        assert_eq!(s.word(), Word(1), "the parked read is counted when granted");
        assert!(!s.try_write(), "the next turn waits for the granted read");
        s.end_read(Admitted::Granted);
        assert!(s.try_write());
        assert!(s.end_write().is_empty());
        assert_eq!(s.word(), Word(0));
        assert!(s.read_or_park(1, Parked { origin: 1, read: Box::new(|| {}) }).is_some());
        assert_eq!(s.reads(), 1, "a clear word admits a read on the slow path too");
    }

    #[test]
    fn the_memo_gives_each_color_and_each_runtime_its_own_state() {
        let (a, b) = (Readers::new(Placement::flat(2)), Readers::new(Placement::flat(2)));
        // Two colors on one entry of the memo.
        let c1 = Color::with_readers(1);
        let i = recent_index(c1);
        let c2 = (2..).map(Color::with_readers).find(|&c| recent_index(c) == i).unwrap();
        let s1: *const ReadState = cached(&a, c1);
        let s2: *const ReadState = cached(&a, c2);
        assert_ne!(s1, s2);
        assert_eq!(s1, Arc::as_ptr(&a.state(c1)), "the table's state");
        assert_eq!(cached(&a, c1) as *const ReadState, s1, "after another color took the entry");
        assert_ne!(cached(&b, c1) as *const ReadState, s1, "another runtime's table");
        assert_eq!(cached(&a, c1) as *const ReadState, s1, "and back");
    }

    #[test]
    fn lanes_are_homed_on_their_workers_and_admit_no_readers() {
        for n in [1, 2, 3, 16, 64] {
            let p = Placement::flat(n);
            let r = Readers::new(p);
            for w in 0..n {
                assert_eq!(home_of(r.lane(w), p), w);
                assert!(!r.lane(w).admits_readers());
            }
        }
    }
}
