//! Standing in for a worker stuck in a handler: an idle worker routes its inbox and lends its
//! waiting colors, while the stuck worker's thread is descheduled or runs a long handler.
//!
//! A worker's run queue, its inbox and the directory role for the colors homed on it belong to
//! its own thread (`queue`, `worker`): only that thread routes what others send it, and lends
//! what waits in its line (a steal is *requested*: `steal`). When that thread does not run (the
//! kernel gave its CPU to another process for a time slice: 3-5 ms here), or runs one handler
//! for long, everything homed there waits: the posts to its colors in its inbox, the colors in
//! its line, the answers to steal requests. Beside a busy process on one CPU, a user's sum ran at
//! 0.37-0.45 of tokio-mt (whose idle worker takes the tasks of a descheduled one from its queue)
//! and a divide and conquer of fresh colors at 0.3-1.3 of it, varying with where the other
//! process's time slices fell (`bench steal`, `fib_probe`).
//!
//! So a worker *opens* its core while it runs a handler (it touches none of it then, `worker`),
//! and while it sleeps in its parker (woken, its thread may wait for its CPU as long): an idle
//! worker that sees a peer in the same window for [`Watcher`]'s wait, with messages in its
//! inbox or colors waiting, may *enter* the peer's core and do what the peer does between
//! two events of a turn (`Core::file_mid_turn`) and before a long one
//! (`steal::share_behind_long_turn`): route the inbox, lend itself half of the waiting colors
//! (`steal::lend_to_stand_in`), flush, publish ([`Core::stand_in`](crate::worker::Core::stand_in)). The
//! loans are ordinary loans of the peer's (the same lease, forwards and return): only the thread
//! that made them differs. Every state the stand-in leaves is one the peer's own thread reaches
//! mid-turn, so the protocol's invariants (`queue`) hold as they are.
//!
//! ## The gate
//!
//! [`Gate`] is a lock the owner takes for free: the owner's word says whether its core is open
//! (even: open, in the window it names; odd: closed), the stand-in's flag whether a stand-in is
//! in. The owner opens with a store; it closes with a store, then reads the flag (and waits for
//! the stand-in to leave if it is set). A stand-in sets the flag (one at a time, by a
//! compare-and-swap), then reads the word, and enters only if it still names the window it
//! watched. This is Dekker's mutual exclusion: each party writes its own variable, then reads
//! the other's; with a full fence between on both sides, at least one of them sees the other,
//! so they are never both in. The owner's side is the hot one (every handler opens and closes),
//! so its fence is a compiler fence and the stand-in's is a process-wide one, `membarrier`
//! (`MEMBARRIER_CMD_PRIVATE_EXPEDITED`): it makes every thread of the process that is running
//! at that moment execute a full fence; one that is not running passed a full fence when it was
//! switched out. The owner's window therefore costs two plain stores and a load a handler; a
//! stand-in's entry costs a system call, and it enters rarely. Where `membarrier` is missing,
//! no window opens (stand-ins are off). Under loom and Miri, both fences are `SeqCst` fences,
//! which `membarrier` stands for.
//!
//! Invariants: (1) the stand-in touches the core only between its entry and its exit, and the
//! owner only while its word is odd, so never both (Dekker); (2) the stand-in's entry sees every
//! write the owner made before it opened (the open word is stored with release, read with
//! acquire), and the owner, leaving its wait, every write of the stand-in (the flag is cleared
//! with release, read with acquire); (3) a window is opened only inside a handler of a turn
//! (`WorkerCtx::run_round`) or around an idle sleep in the parker (`idle::park`), the worker's
//! context alive and its core unborrowed, and a handler's own borrows of the core (a post)
//! close it first and open it again after ([`CoreCell`]); so a stand-in finds a core mid-turn,
//! its running color out of the line (never lent), or a core asleep with nothing queued;
//! (4) no run is found quiescent with events a stand-in routed: the stand-in is out of the
//! parked state while it is in, and a worker asleep that it leaves with events queued is taken
//! out of the parked state before the stand-in leaves (`Core::stand_in`; one asleep in another
//! run than the stand-in's, through a run's end, is left alone: `run_end`).

use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::padding::Padded;
use crate::shared::Shared;
use crate::sync::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use crate::worker::Core;

/// How long an idle worker watches a peer in one handler, with work waiting behind it, before it
/// stands in: well above a handler of a short turn (a steal's answer waits for one), well
/// under a time slice of the scheduler (3-5 ms), and the system call of an entry (about a
/// microsecond here) is small beside it.
pub(crate) const WAIT_FIRST: Duration = Duration::from_micros(50);

/// The longest wait between two stand-ins for the same stuck peer after entries that lent
/// nothing (the wait doubles after each): a peer in a long handler whose waiting colors may not
/// be lent (borrowed, pinned) is not interrupted every 50 us for nothing.
pub(crate) const WAIT_MOST: Duration = Duration::from_millis(2);

/// How long an idle worker sleeps at most while a peer is busy, though none is stuck with work
/// waiting when it looks: it looks again then. A peer can get stuck after the look (its next
/// handler, or its CPU taken), and nothing it does can wake the sleeper then; a look a
/// millisecond is a wake-up of a few microseconds (0.5% of a CPU), only while a peer works.
pub(crate) const RECHECK: Duration = Duration::from_millis(1);

/// The least cost of an event (ns, as measured: `ColorQueue::event_cost`) of a color whose
/// handlers open the core ([`open_events`]) on a worker whose CPU is its own.
pub(crate) const WINDOW_FROM_NS: u64 = 1_000;

/// [`WINDOW_FROM_NS`] on a worker that measures its CPU shared with another process: there its
/// thread is descheduled for time slices (3-5 ms), in a handler as often as the handlers fill
/// its time, and a stand-in is worth their windows.
pub(crate) const WINDOW_FROM_NS_SHARED: u64 = 200;

/// How many events of a turn open the core when the color's cost is not known yet (0): a
/// handler that blocks is most often a color's first (its turn, timed, then tells its cost),
/// and a turn of a million short events behind it pays for no window.
pub(crate) const UNKNOWN_OPENS: usize = 4;

/// The least cost of an event (ns) that opens the core on a worker getting `share` of its CPU
/// (thousandths, `CpuShare::share`).
#[inline]
pub(crate) fn window_from(share: u32) -> u64 {
    if share < crate::cpu_share::FULL * 9 / 10 {
        WINDOW_FROM_NS_SHARED
    } else {
        WINDOW_FROM_NS
    }
}

/// How many events of a turn of a color whose events cost `event_ns` open their worker's core
/// (0: none), from events of `from` ns ([`window_from`]). Not the short ones: a window is two
/// stores and a load, and each post inside it a close and an open again: a local ping-pong of
/// 30 ns events lost 13% to them (`bench steal`'s ping-pong, stealing on against off:
/// 0.85-0.88, 0.98-1.00 before), the actor programs 3-5% with windows from 200 ns on CPUs of
/// their own (`bench actors`, stand-ins on against off in one process, 6 processes: counting
/// 0.86-0.96, the 1-token ring 0.94-0.96, whose one-event turns measure 100-500 ns an event
/// with the turn's own cost in it; 0.99-1.01 with no handler's window). A worker descheduled
/// in short events is caught between them about as often as in one, and its sleeps still
/// open its core. Of a color not measured yet, the first [`UNKNOWN_OPENS`].
#[inline]
pub(crate) fn open_events(event_ns: u64, from: u64) -> usize {
    match event_ns {
        0 => UNKNOWN_OPENS,
        ns if ns >= from => usize::MAX,
        _ => 0,
    }
}

/// How many events of a turn open the core, all of whose events would by their color's cost
/// ([`open_events`]), now that its first one's handler took `first`: all of them if it took
/// `from` ns at least, else that first one alone.
#[inline]
pub(crate) fn open_after_first(first: Duration, from: u64) -> usize {
    if first >= Duration::from_nanos(from) {
        usize::MAX
    } else {
        1
    }
}

/// [`RECHECK`] for a peer busy outside any window, on a CPU of its own: it may enter a long
/// handler after the look (a blocked one), but rarely; the timed sleeps of a look again each
/// millisecond cost a cross-worker ping-pong of actors, whose workers sleep between messages.
pub(crate) const RECHECK_LATER: Duration = Duration::from_millis(10);

/// The word of a gate whose owner has not opened yet (window 0, closed).
const CLOSED_AT_START: u64 = 1;

/// Whether `word` is an open window.
#[inline]
pub(crate) fn is_open(word: u64) -> bool {
    word & 1 == 0
}

/// Whether colors waited in the line of the worker when it opened window `word` (its published
/// ready count is a round old: `Steal::Backlog` publishes it at rounds' ends).
#[inline]
pub(crate) fn colors_wait(word: u64) -> bool {
    word & 2 != 0
}

/// The owner's side of the fence pair (see the module doc).
#[inline]
fn light_fence() {
    #[cfg(any(loom, miri))]
    crate::sync::fence(Ordering::SeqCst);
    #[cfg(not(any(loom, miri)))]
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
}

/// The stand-in's side of the fence pair: false if it could not be made (then it must not
/// enter).
fn heavy_fence() -> bool {
    #[cfg(any(loom, miri))]
    {
        crate::sync::fence(Ordering::SeqCst);
        true
    }
    #[cfg(not(any(loom, miri)))]
    {
        use rustix::thread::{membarrier, MembarrierCommand};
        membarrier(MembarrierCommand::PrivateExpedited).is_ok()
    }
}

/// Whether the workers of a runtime with `config` and `workers` workers open windows to
/// stand-ins, if the heavy fence is [`available`].
pub(crate) fn wanted(config: &crate::Config, workers: usize) -> bool {
    config.stand_in && config.batching && config.steal != crate::Steal::Off && workers > 1
}

/// The process's registration for the heavy fence, once made (`available`).
#[cfg(not(any(loom, miri)))]
static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Whether this process may use the heavy fence: registered once for the process, on first
/// use. False on kernels without `membarrier`'s private expedited command (before 4.14) or
/// where a sandbox refuses it: then no gate opens.
pub(crate) fn available() -> bool {
    #[cfg(any(loom, miri))]
    {
        true
    }
    #[cfg(not(any(loom, miri)))]
    {
        use rustix::thread::{membarrier, MembarrierCommand};
        *REGISTERED.get_or_init(|| membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok())
    }
}

/// Whether the process's registration for the heavy fence is done (`Some(true)`), was refused
/// (`Some(false)`) or is not made yet (`None`): [`available`] without waiting.
pub(crate) fn registered_now() -> Option<bool> {
    #[cfg(any(loom, miri))]
    {
        Some(true)
    }
    #[cfg(not(any(loom, miri)))]
    {
        REGISTERED.get().copied()
    }
}

/// Starts the process's registration for the heavy fence on a thread of its own, if no
/// registration was made or started: `Builder::build` calls it, and waits for it nowhere. The
/// registration waits for an RCU grace period (12.5 ms on this project's virtual machines,
/// `strace` of a first build); made by the first worker's start, after the wake-up latency's
/// measurement (10.5 ms), it made a process's first build take 16-35 ms. A worker that starts
/// before it is done opens no window until it is ([`CoreCell::enable_when_registered`], between
/// its rounds): for the first milliseconds of a process, its workers run as with
/// `Config::stand_in` off.
pub(crate) fn register_in_background() {
    #[cfg(not(any(loom, miri)))]
    {
        static START: std::sync::Once = std::sync::Once::new();
        // Without a thread, here: no worker waits for it, and none would open a window
        // without it.
        let register = || {
            available();
        };
        crate::background::start_once(&START, "ochre-membarrier", register, register);
    }
}

/// The lock between a worker and its stand-ins (module doc).
pub(crate) struct Gate {
    /// The owner's: odd while its core is closed, even while open, the next bit whether colors
    /// waited ([`colors_wait`]), the rest the window's number (a window's value is never
    /// reused).
    word: AtomicU64,
    /// A stand-in is in, or entering.
    entered: AtomicBool,
}

impl Default for Gate {
    fn default() -> Self {
        Gate { word: AtomicU64::new(CLOSED_AT_START), entered: AtomicBool::new(false) }
    }
}

impl Gate {
    /// The owner opens a new window after `closed` (its word now), saying whether colors
    /// wait in its line, and returns its word.
    #[inline]
    pub(crate) fn open(&self, closed: u64, waiting: bool) -> u64 {
        debug_assert!(!is_open(closed));
        let open = ((closed >> 2) + 1) << 2 | u64::from(waiting) << 1;
        // Release: a stand-in that reads this word sees the core as the owner left it.
        self.word.store(open, Ordering::Release);
        open
    }

    /// The owner opens window `open` again (after a borrow inside the window closed it).
    #[inline]
    pub(crate) fn reopen(&self, open: u64) {
        self.word.store(open, Ordering::Release);
    }

    /// The owner closes window `open`: once this returns, no stand-in is in, nor will enter
    /// before the next open or reopen. Returns whether it had to wait for one to leave.
    #[inline]
    pub(crate) fn close(&self, open: u64) -> bool {
        self.word.store(open | 1, Ordering::Relaxed);
        light_fence();
        // Acquire: a stand-in that left published its writes to the core with its release.
        if !self.entered.load(Ordering::Acquire) {
            return false;
        }
        self.wait_for_exit();
        true
    }

    #[cold]
    fn wait_for_exit(&self) {
        let mut spins = 0u32;
        while self.entered.load(Ordering::Acquire) {
            spins += 1;
            if spins < 256 && !cfg!(loom) {
                std::hint::spin_loop();
            } else {
                // The stand-in may itself be descheduled: give it the CPU.
                crate::sync::yield_now();
            }
        }
    }

    /// What a would-be stand-in sees: the owner's word (a hint: it decides nothing alone).
    #[inline]
    pub(crate) fn look(&self) -> u64 {
        self.word.load(Ordering::Relaxed)
    }

    /// A stand-in enters window `seen` (an open word it looked at), if the owner is still in it
    /// and no other stand-in is in.
    pub(crate) fn enter(&self, seen: u64) -> Option<Entered<'_>> {
        debug_assert!(is_open(seen));
        if self.entered.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err()
        {
            return None;
        }
        let entered = Entered { gate: self };
        // Acquire: pairs with the owner's open (module doc, invariant 2).
        if !heavy_fence() || self.word.load(Ordering::Acquire) != seen {
            return None; // `entered` drops: the flag is cleared.
        }
        Some(entered)
    }
}

/// A stand-in's stay in a gate; leaving clears the flag.
pub(crate) struct Entered<'a> {
    gate: &'a Gate,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        // Release: the owner, closing, sees every write made to its core meanwhile.
        self.gate.entered.store(false, Ordering::Release);
    }
}

// A stand-in works on another thread's core (`stand_in`).
const _: fn() = || {
    fn moves<T: Send>() {}
    moves::<Core>();
};

/// A worker's gate and where a stand-in finds its core (in the worker's `Remote`).
pub(crate) struct StandIn {
    pub(crate) gate: Gate,
    /// The core of the worker's current run (set at the run's start, valid while a window of
    /// the run is open: the context lives on the worker's stack for the run).
    core: AtomicPtr<Core>,
}

impl Default for StandIn {
    fn default() -> Self {
        StandIn { gate: Gate::default(), core: AtomicPtr::new(std::ptr::null_mut()) }
    }
}

impl StandIn {
    /// The owner, at its run's start: where its core is.
    pub(crate) fn publish_core(&self, core: *mut Core) {
        // Release, and before any window of the run opens (the open's release carries it).
        self.core.store(core, Ordering::Release);
    }
}

/// The borrow state of a [`CoreCell`] whose core is free and open to stand-ins.
const OPEN: isize = isize::MIN;

/// Added to the borrow state by a shared borrow that closed an open window: the last shared
/// borrow to end finds the state at this value and opens the window again (a mutable borrow
/// that closed one says so in its guard).
const REOPEN: isize = 1 << 40;

/// A worker's core as its own thread borrows it (a `RefCell`'s checks, on a flag of its own),
/// and as it opens it to stand-ins while a handler runs or it sleeps (module doc, invariant 3):
/// a borrow made inside the window closes it for the borrow's length. The flag says both at
/// once, so that a borrow outside a window (every post of a handler that opened none, every
/// step of the run loop) costs what a `RefCell`'s does: 0 free, above 0 that many shared
/// borrows, -1 one mutable borrow, [`OPEN`] free and open; [`REOPEN`] added while the shared
/// borrows alive closed a window. A wrapper around a `RefCell` with the window's state beside it cost
/// a local ping-pong of 15 ns events ten instructions a post (callgrind), 4% of its rate.
pub(crate) struct CoreCell {
    core: std::cell::UnsafeCell<Core>,
    flag: Cell<isize>,
    /// The worker's gate and where stand-ins find its core (its `Remote`'s).
    stand_in: Arc<Padded<StandIn>>,
    /// Windows open: the gate is usable here (`Config::stand_in`, and `membarrier` works).
    /// Never turned off.
    enabled: Cell<bool>,
    /// Windows are [`wanted`] and the process's registration was under way when the worker
    /// started: `enabled` turns on between rounds once it is done
    /// ([`CoreCell::enable_when_registered`]); pending no more once it is done or refused.
    pending: Cell<bool>,
    /// The gate's word as the owner left it (odd: closed).
    word: Cell<u64>,
}

impl CoreCell {
    pub(crate) fn new(core: Core, shared: &Shared) -> CoreCell {
        let id = core.id;
        let wanted = wanted(&shared.config, shared.workers);
        let registered = registered_now();
        let stand_in = Arc::clone(&shared.remotes[id].stand_in);
        let word = stand_in.gate.look();
        CoreCell {
            core: std::cell::UnsafeCell::new(core),
            flag: Cell::new(0),
            stand_in,
            enabled: Cell::new(wanted && registered == Some(true)),
            pending: Cell::new(wanted && registered.is_none()),
            word: Cell::new(word),
        }
    }

    /// Whether this runtime's workers open their cores (and so stand in for each other).
    pub(crate) fn stand_ins(&self) -> bool {
        self.enabled.get()
    }

    /// Opens windows from now on if the process's registration, under way when the worker
    /// started, is done. Called by the owner between rounds, with no borrow alive and its core
    /// closed: windows were never opened before, so the gate's word is the closed one the cell
    /// started with.
    #[inline]
    pub(crate) fn enable_when_registered(&self) {
        if self.pending.get() {
            self.enable_if_registered();
        }
    }

    #[cold]
    #[inline(never)]
    fn enable_if_registered(&self) {
        let Some(ok) = registered_now() else { return };
        debug_assert!(self.flag.get() == 0 && !is_open(self.word.get()));
        // Refused: no windows, and no more looks.
        self.enabled.set(ok);
        self.pending.set(false);
    }

    /// Publishes where the core is, for this run's windows.
    pub(crate) fn publish(&self) {
        self.stand_in.publish_core(self.core.get());
    }

    /// Opens the core to stand-ins: a handler is about to run, or the worker to sleep, and no
    /// borrow is alive; `waiting`: colors wait in the line.
    #[inline]
    pub(crate) fn open(&self, waiting: bool) {
        if self.enabled.get() {
            debug_assert!(self.flag.get() == 0 && !is_open(self.word.get()));
            self.word.set(self.stand_in.gate.open(self.word.get(), waiting));
            self.flag.set(OPEN);
        }
    }

    /// Closes the core after a handler; returns whether a stand-in was in (the caller counts).
    #[inline]
    pub(crate) fn close(&self) -> bool {
        let word = self.word.get();
        if !self.enabled.get() || !is_open(word) {
            return false;
        }
        debug_assert_eq!(self.flag.get(), OPEN, "closed with a borrow alive");
        self.flag.set(0);
        self.word.set(word | 1);
        self.stand_in.gate.close(word)
    }

    /// A borrow found the core open: closes the window for it (a shared borrow's state then
    /// counts from [`REOPEN`]; the last borrow reopens it). Inlined, as its reopening: a
    /// handler's every post in a window takes both (a user's producer posting a million
    /// increments from one handler ran 0.86-0.92 of its rate without stand-ins with two calls
    /// a post, 0.96-0.99 without them).
    #[inline]
    fn close_for_borrow(&self) -> isize {
        self.stand_in.gate.close(self.word.get());
        REOPEN
    }

    /// The last borrow inside a window ended: opens it again.
    #[inline]
    fn reopen_after_borrow(&self) {
        self.flag.set(OPEN);
        self.stand_in.gate.reopen(self.word.get());
    }

    #[cold]
    #[inline(never)]
    fn already_borrowed() -> ! {
        panic!("the worker's core is already borrowed")
    }

    /// The end of a borrow that left the flag at `left`.
    #[inline]
    fn release(&self, left: isize) {
        if left == REOPEN {
            self.reopen_after_borrow();
        } else {
            self.flag.set(left);
        }
    }

    /// Borrows the core mutably (a `RefCell`'s `borrow_mut`), closing an open window for the
    /// borrow's length.
    #[inline]
    pub(crate) fn borrow_mut(&self) -> CoreMut<'_> {
        match self.try_borrow_mut() {
            Some(b) => b,
            None => Self::already_borrowed(),
        }
    }

    /// A mutable borrow unless one is alive already.
    #[inline]
    pub(crate) fn try_borrow_mut(&self) -> Option<CoreMut<'_>> {
        let opened = match self.flag.get() {
            0 => false,
            OPEN => {
                self.close_for_borrow();
                true
            }
            _ => return None,
        };
        self.flag.set(-1);
        Some(CoreMut { cell: self, opened })
    }

    /// Borrows the core shared (a `RefCell`'s `borrow`), closing an open window for the
    /// borrow's length.
    #[inline]
    pub(crate) fn borrow(&self) -> CoreRef<'_> {
        let f = match self.flag.get() {
            OPEN => self.close_for_borrow(),
            // Shared borrows alive (from 0, or from REOPEN), or none.
            f if f >= 0 => f,
            _ => Self::already_borrowed(),
        };
        self.flag.set(f + 1);
        CoreRef { cell: self }
    }
}

/// A mutable borrow of a [`CoreCell`]; `opened`: it closed an open window, which its end
/// opens again (in the guard, not the flag: the common end is then one store, as a
/// `RefCell`'s).
pub(crate) struct CoreMut<'a> {
    cell: &'a CoreCell,
    opened: bool,
}

impl Deref for CoreMut<'_> {
    type Target = Core;
    #[inline]
    fn deref(&self) -> &Core {
        // SAFETY: the flag says this is the only borrow, and no stand-in is in (a borrow closes
        // the window first: `CoreCell::try_borrow_mut`).
        unsafe { &*self.cell.core.get() }
    }
}

impl DerefMut for CoreMut<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Core {
        // SAFETY: as for `deref`.
        unsafe { &mut *self.cell.core.get() }
    }
}

impl Drop for CoreMut<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.opened {
            self.cell.reopen_after_borrow();
        } else {
            self.cell.flag.set(0);
        }
    }
}

/// A shared borrow of a [`CoreCell`].
pub(crate) struct CoreRef<'a> {
    cell: &'a CoreCell,
}

impl Deref for CoreRef<'_> {
    type Target = Core;
    #[inline]
    fn deref(&self) -> &Core {
        // SAFETY: the flag says no mutable borrow is alive, and no stand-in is in (a borrow
        // closes the window first: `CoreCell::borrow`).
        unsafe { &*self.cell.core.get() }
    }
}

impl Drop for CoreRef<'_> {
    #[inline]
    fn drop(&mut self) {
        self.cell.release(self.cell.flag.get() - 1);
    }
}

/// What an idle worker watches: a peer seen in one window, work waiting behind it, since when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Watch {
    peer: usize,
    word: u64,
    since: Instant,
}

/// An idle worker's watch over its peers' gates (in its `Core`): the policy of when to stand
/// in ([`Watcher::due`]), apart from the mechanism ([`stand_in`]).
#[derive(Debug)]
pub(crate) struct Watcher {
    watch: Option<Watch>,
    /// No peer was stuck at the last look, but one was busy ([`RECHECK`]).
    recheck: Option<Duration>,
    /// The wait before standing in, [`WAIT_FIRST`] and doubling after entries that lent
    /// nothing, up to [`WAIT_MOST`].
    wait: Duration,
}

impl Default for Watcher {
    fn default() -> Self {
        Watcher { watch: None, recheck: None, wait: WAIT_FIRST }
    }
}

/// What a watcher sees of a peer: its gate's word, and whether work waits there (messages in
/// its inbox, colors in its line).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen {
    pub(crate) word: u64,
    pub(crate) waiting: bool,
    /// The peer is busy: a look again after this long ([`RECHECK`], or [`RECHECK_LATER`]).
    pub(crate) busy: Option<Duration>,
}

impl Watcher {
    /// Whether a peer is watched, or busy at the last look: an idle worker looks again when it
    /// wakes.
    pub(crate) fn watching(&self) -> bool {
        self.watch.is_some() || self.recheck.is_some()
    }

    /// The policy, given what the peers look like now (`see`, by peer id, `peers` in the order
    /// to look): the peer and window to stand in for, if the watched peer stayed in its window
    /// for the wait with work waiting; else it watches (again, or anew) the first peer in a
    /// window with work waiting.
    pub(crate) fn due(
        &mut self,
        now: Instant,
        peers: impl IntoIterator<Item = usize>,
        mut see: impl FnMut(usize) -> Seen,
    ) -> Option<(usize, u64)> {
        if let Some(w) = self.watch {
            let seen = see(w.peer);
            if seen.word == w.word && seen.waiting {
                if now.saturating_duration_since(w.since) >= self.wait {
                    // Watched anew from the entry: another one at most a wait later.
                    self.watch = Some(Watch { since: now, ..w });
                    return Some((w.peer, w.word));
                }
                return None;
            }
            // Out of that window (or nothing waits): a new stay starts at the first wait.
            self.watch = None;
        }
        self.recheck = None;
        for peer in peers {
            let seen = see(peer);
            if is_open(seen.word) && seen.waiting {
                self.watch = Some(Watch { peer, word: seen.word, since: now });
                self.wait = WAIT_FIRST;
                self.recheck = None;
                break;
            }
            if let Some(after) = seen.busy {
                self.recheck = Some(self.recheck.map_or(after, |r| r.min(after)));
            }
        }
        None
    }

    /// How long the watcher may sleep before it looks again (`None`: it watches no one).
    pub(crate) fn sleep_limit(&self, now: Instant) -> Option<Duration> {
        let Some(w) = self.watch else {
            return self.recheck;
        };
        Some((w.since + self.wait).saturating_duration_since(now).max(Duration::from_micros(1)))
    }

    /// What an entry gave: colors lent (the peer is stuck in that window: the next entry is due
    /// as soon as this worker is idle again) or none (the wait doubles, from [`WAIT_FIRST`]).
    ///
    /// At once after a loan: a divide and conquer whose parents' colors are homed on the stuck
    /// worker posts each answer there, and waited a whole first wait per level of the tree
    /// (`fib_probe` beside a busy thread: runs with stand-ins took 3-8 ms where those without
    /// took 1.3).
    pub(crate) fn entered(&mut self, lent: bool) {
        self.wait =
            if lent { Duration::ZERO } else { (self.wait * 2).clamp(WAIT_FIRST, WAIT_MOST) };
    }
}

/// What worker `peer` looks like to a watcher.
fn see(shared: &Shared, peer: usize) -> Seen {
    let remote = &shared.remotes[peer];
    let word = remote.stand_in.gate.look();
    let posted = !remote.poke.inbox.is_empty(false);
    let waiting = colors_wait(word) || posted;
    // Relaxed: hints (`shared::Status`). A worker with messages waiting is about to be busy:
    // it clears its idle mark before it takes its inbox, so one that took what this worker
    // posted it is seen busy, and one that did not yet is seen with messages. One counted
    // parked is not busy (a worker parked between runs and carried into this one asleep
    // never set its idle mark). A busy one is looked at again soon if it can get stuck with
    // work waiting (in a handler that opened its core, not one of the shortest, or on a CPU
    // another process shares), later otherwise.
    let status = &remote.status;
    let working = !(status.idle.load(Ordering::Relaxed) || status.parked.load(Ordering::Relaxed));
    let share = status.cpu_share.load(Ordering::Relaxed) as u32;
    let busy = if posted || working && (is_open(word) || share < crate::cpu_share::FULL * 9 / 10) {
        Some(RECHECK)
    } else {
        working.then_some(RECHECK_LATER)
    };
    Seen { word, waiting, busy }
}

/// Worker `me` (idle) looks at its peers with `watcher` (its own); returns the peer and window
/// due for a stand-in, if any.
pub(crate) fn look(watcher: &mut Watcher, shared: &Shared, me: usize) -> Option<(usize, u64)> {
    if shared.workers < 2 {
        return None;
    }
    let peers = (1..shared.workers).map(|i| (me + i) % shared.workers);
    watcher.due(Instant::now(), peers, |p| see(shared, p))
}

/// Worker `me` stands in for worker `peer` in window `seen`, if it can enter, in run `run` (its
/// own): routes the peer's inbox and lends itself half of its waiting colors
/// (`Core::stand_in`). `None` if it could not enter, else whether it
/// lent anything.
pub(crate) fn stand_in(
    shared: &Shared,
    me: &mut Core,
    peer: usize,
    seen: u64,
    run: u64,
) -> Option<bool> {
    let remote = &shared.remotes[peer];
    let entered = remote.stand_in.gate.enter(seen)?;
    // Acquire (after the gate's acquire): the core of the run whose window is open.
    let core = remote.stand_in.core.load(Ordering::Acquire);
    if core.is_null() {
        return None;
    }
    // SAFETY: the gate is entered in an open window of the owner's run: the owner's context,
    // which holds this core, lives on its stack until the run ends, and its thread neither
    // borrows the core nor touches it until it closed the window, which waits for `entered`
    // to drop (module doc, invariants 1-3). A `Core` moves between threads (it is `Send`).
    let core = unsafe { &mut *core };
    let lent = core.stand_in(shared, run, me);
    drop(entered);
    Some(lent)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn peers(n: usize) -> std::ops::Range<usize> {
        0..n
    }

    #[test]
    fn short_handlers_open_nothing_on_a_cpu_of_their_own_and_do_on_a_shared_one() {
        let own = window_from(crate::cpu_share::FULL);
        let shared = window_from(crate::cpu_share::FULL / 2);
        assert!(shared < own, "a shared CPU opens for shorter events");
        // A one-event turn of an actor measures its turn's cost: hundreds of ns.
        assert_eq!(open_events(400, own), 0);
        assert_eq!(open_events(400, shared), usize::MAX);
        assert_eq!(open_events(own, own), usize::MAX, "a long handler's every event opens");
        // Not measured yet: its first events only (a blocked handler is most often the first).
        assert_eq!(open_events(0, own), UNKNOWN_OPENS);
        assert!((1..64).contains(&UNKNOWN_OPENS));
    }

    #[test]
    fn a_turn_whose_first_handler_was_short_opens_no_more() {
        let from = WINDOW_FROM_NS;
        // A collector's turns measure the inbox routed between its events, not its handlers.
        assert_eq!(open_after_first(Duration::from_nanos(40), from), 1);
        assert_eq!(open_after_first(Duration::from_nanos(from), from), usize::MAX);
        assert_eq!(open_after_first(Duration::from_millis(5), from), usize::MAX);
    }

    #[test]
    fn a_peer_is_stood_in_for_only_after_staying_in_one_window_with_work_waiting() {
        let t0 = Instant::now();
        let mut w = Watcher::default();
        let open = Seen { word: 4, waiting: true, busy: Some(RECHECK) };
        assert_eq!(w.due(t0, peers(1), |_| open), None, "first seen: watched, not due");
        assert!(w.watching());
        let early = t0 + WAIT_FIRST / 2;
        assert_eq!(w.due(early, peers(1), |_| open), None, "not yet");
        let late = t0 + WAIT_FIRST;
        assert_eq!(w.due(late, peers(1), |_| open), Some((0, 4)));
        assert_eq!(w.due(late, peers(1), |_| open), None, "a wait again after an entry");
        // A new window: the handler ended and another began, the peer is not stuck.
        let next = Seen { word: 6, waiting: true, busy: Some(RECHECK) };
        assert_eq!(w.due(late + WAIT_FIRST * 3, peers(1), |_| next), None);
        assert_eq!(w.due(late + WAIT_FIRST * 3, peers(1), |_| next), None);
        assert_eq!(w.due(late + WAIT_FIRST * 4, peers(1), |_| next), Some((0, 6)));
    }

    #[test]
    fn no_watch_on_a_closed_core_nor_on_one_with_nothing_waiting() {
        let t0 = Instant::now();
        let mut w = Watcher::default();
        let closed = Seen { word: 5, waiting: true, busy: Some(RECHECK) };
        let idle = Seen { word: 4, waiting: false, busy: None };
        assert_eq!(w.due(t0, peers(2), |p| if p == 0 { closed } else { idle }), None);
        assert!(w.watching(), "not stuck, but busy: a look again after a sleep of at most");
        assert_eq!(w.sleep_limit(t0), Some(RECHECK));
        let idle_too = Seen { busy: None, ..closed };
        assert_eq!(w.due(t0, peers(2), |p| if p == 0 { idle_too } else { idle }), None);
        assert!(!w.watching(), "every peer idle: no look before something wakes it");
        assert_eq!(w.sleep_limit(t0), None);
        let open = Seen { word: 8, waiting: true, busy: Some(RECHECK) };
        assert_eq!(w.due(t0, peers(2), |p| if p == 0 { closed } else { open }), None);
        assert!(w.watching(), "the second peer is");
        // Its work was taken meanwhile (by its own thread): no entry.
        let later = t0 + WAIT_MOST;
        assert_eq!(w.due(later, peers(2), |p| if p == 0 { idle_too } else { idle }), None);
        assert!(!w.watching());
    }

    #[test]
    fn entries_that_lend_nothing_wait_longer_each_time_up_to_a_bound() {
        let mut w = Watcher::default();
        w.entered(false);
        assert_eq!(w.wait, WAIT_FIRST * 2);
        for _ in 0..20 {
            w.entered(false);
        }
        assert_eq!(w.wait, WAIT_MOST);
        let t0 = Instant::now();
        let stuck = Seen { word: 2, waiting: true, busy: Some(RECHECK) };
        w.due(t0, peers(1), |_| stuck);
        assert_eq!(w.sleep_limit(t0), Some(WAIT_FIRST), "a new window: the first wait");
        assert_eq!(w.due(t0 + WAIT_FIRST, peers(1), |_| stuck), Some((0, 2)));
        w.entered(true);
        assert_eq!(w.due(t0 + WAIT_FIRST, peers(1), |_| stuck), Some((0, 2)), "again at once");
        w.entered(false);
        assert_eq!(w.wait, WAIT_FIRST, "nothing lent: a wait again");
    }

    /// A worker's cell for worker 0 of two (stand-ins on where `membarrier` works), and the
    /// runtime's shared state, where stand-ins find its gate.
    fn cell() -> (CoreCell, Arc<Shared>) {
        let config = crate::Config::default();
        let topology = crate::topology::Topology::flat(vec![0, 1]);
        let shared = Shared::new(
            config.clone(),
            2,
            2,
            crate::wakeup_latency::Threshold::Set(Duration::ZERO),
            1,
            &topology,
        )
        .unwrap();
        let core =
            Core::new(0, crate::color::Placement::flat(2), &config, crate::stall::Beat::off());
        (CoreCell::new(core, &shared), Arc::new(shared))
    }

    #[test]
    #[cfg_attr(miri, ignore = "a worker's core makes a timerfd, which Miri cannot")]
    fn a_borrow_inside_a_window_closes_it_for_its_length_and_the_last_reopens_it() {
        let (cell, shared) = cell();
        if !cell.stand_ins() {
            eprintln!("membarrier unavailable: no windows on this kernel");
            return;
        }
        // The gate stand-ins see, in the runtime's table: the one the cell closes and opens.
        let gate = &shared.remotes[0].stand_in.gate;
        cell.open(false);
        let open = gate.look();
        assert!(is_open(open));
        {
            let a = cell.borrow();
            assert!(!is_open(gate.look()), "closed by the borrow");
            let b = cell.borrow();
            assert!(cell.try_borrow_mut().is_none(), "shared borrows alive");
            drop(a);
            assert!(!is_open(gate.look()), "one borrow still alive");
            drop(b);
        }
        assert_eq!(gate.look(), open, "the same window again");
        {
            let mut m = cell.borrow_mut();
            m.counters.add(crate::stats::Counter::Spins, 1);
            assert!(!is_open(gate.look()));
            assert!(cell.try_borrow_mut().is_none(), "one at a time");
        }
        assert_eq!(gate.look(), open);
        assert!(!cell.close(), "no stand-in came");
        assert!(!is_open(gate.look()));
        let m = cell.borrow_mut();
        assert!(cell.try_borrow_mut().is_none());
        drop(m);
        assert!(cell.try_borrow_mut().is_some(), "free again, outside any window");
    }

    #[test]
    #[cfg_attr(miri, ignore = "a worker's core makes a timerfd, which Miri cannot")]
    fn a_stand_in_finds_the_core_as_the_owner_left_it_and_the_owner_finds_its_writes() {
        let (cell, shared) = cell();
        if !cell.stand_ins() {
            return;
        }
        cell.publish();
        cell.borrow_mut().counters.add(crate::stats::Counter::Spins, 1);
        cell.open(true);
        let seen = shared.remotes[0].stand_in.gate.look();
        std::thread::scope(|s| {
            s.spawn(|| {
                let remote = &shared.remotes[0];
                let entered = remote.stand_in.gate.enter(seen).expect("the window it saw");
                let core = remote.stand_in.core.load(Ordering::Acquire);
                // SAFETY: the gate is entered in the owner's open window (the test's).
                let core = unsafe { &mut *core };
                assert_eq!(core.counters.get(crate::stats::Counter::Spins), 1);
                core.counters.add(crate::stats::Counter::Spins, 1);
                drop(entered);
            });
        });
        // The owner closes (the stand-in left already, or it waits), then sees its write.
        cell.close();
        assert_eq!(cell.borrow().counters.get(crate::stats::Counter::Spins), 2);
    }

    #[test]
    fn the_gate_lets_a_stand_in_in_only_in_the_window_it_saw_and_the_owner_waits_for_it() {
        if !available() {
            eprintln!("membarrier unavailable: no stand-ins on this kernel");
            return;
        }
        let gate = Gate::default();
        assert!(!is_open(gate.look()));
        let open = gate.open(gate.look(), true);
        assert!(is_open(open) && colors_wait(open));
        let e = gate.enter(open).expect("the window it saw, no one in");
        assert!(gate.enter(open).is_none(), "one stand-in at a time");
        drop(e);
        assert!(!gate.close(open), "no one in: no wait");
        assert!(gate.enter(open).is_none(), "closed: that window is gone");
        let again = gate.open(gate.look(), true);
        assert_ne!(again, open, "a window's word is never reused");
        assert!(gate.enter(open).is_none(), "an old window is not this one");
        // The owner closing while a stand-in is in waits for it to leave.
        let e = gate.enter(again).expect("in");
        let left = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                left.store(true, Ordering::SeqCst);
                drop(e);
            });
            // (It waited, unless this thread was descheduled for the whole 20 ms.)
            gate.close(again);
            assert!(left.load(Ordering::SeqCst), "not before the stand-in left");
        });
    }
}
