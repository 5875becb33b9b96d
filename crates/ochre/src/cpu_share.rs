//! How much of its CPU each worker gets when it wants to run, and where new long-lived work
//! (a connection) should live by it.
//!
//! A worker's CPU may be shared with threads the runtime does not know: another process, a load
//! injector on the same machine, another runtime. Hashing colors over workers then loads the
//! shared worker as much as the others, and it becomes the bottleneck of the whole server
//! (measured, `bench sws` at 2 workers with the injector on CPU 1: 158K requests/s with colors
//! hashed, 183K with two thirds of the connections on the worker that has its CPU alone).
//!
//! **Measure.** Linux accounts, per thread, the time spent running and the time spent runnable
//! but waiting for a CPU (`/proc/thread-self/schedstat`: run time, run-queue delay). Over a
//! window, `run / (run + delay)` is the share of its CPU a worker gets *when it wants one*: 1 on
//! a CPU of its own, about 1/2 next to one busy thread. The yields of an idle worker's spin and
//! its time between runs are left out ([`CpuShare::idle_from_here`]; not a wake-up's wait, which
//! is work's): what it waits for then is not what it gets with work, and a process that runs
//! another runtime between ochre's runs would otherwise be measured as sharing its CPUs. It does
//! not depend on how much work the worker has (an idle worker simply measures nothing), so
//! placing less work on a shared worker
//! does not make its share look better and the placement does not oscillate. Each worker samples
//! its own file at most every [`SAMPLE_EVERY`] (one `pread`, from its publication path and after
//! each long turn, whose rounds are too long to count on the publication's), smooths the share
//! (exponential average) and publishes it; windows with too little running or waiting time are
//! skipped. Where the file cannot be read (another OS, a kernel without schedstats), every share
//! stays 1: hashing's even placement.
//!
//! **Follow changes both ways.** What a pinned worker measured is kept per CPU for the life of
//! the process, and a worker pinned to that CPU later (another runtime, the next run of a
//! benchmark) starts from it: the other process is usually still there, and a fresh runtime
//! would otherwise load that CPU as much as the others until its first windows tell. The first
//! window a worker measures counts whole. A worker whose work left because its CPU was shared
//! (`follow`) then measures nothing: each quiet window moves its share a quarter of the way back
//! to 1 (to 0.9 of it in seven windows, ~70 ms), and such a worker sleeps at most [`RECHECK`] at
//! a time, so that its share recovers when the other process is gone, work comes back, and is
//! measured again. Faster, an idle worker whose share is low *probes* its CPU ([`probe`]): it
//! yields it a few times; a yield that returns at once found nothing else runnable there, so
//! the CPU is its own again (with another thread runnable, the yield lasts that thread's time
//! slice, milliseconds).
//!
//! [`probe`]: CpuShare::probe
//!
//! **Leave the pin, for a while.** A pinned worker whose share stays below [`UNPIN_BELOW`] for
//! [`UNPIN_AFTER`] measured windows while every other worker's does too and none gets clearly
//! more of its CPU (every CPU busy: there is no worker to move colors to) lets the scheduler
//! place its thread ([`CpuShare::leaves_pin`], `Config::unpin_when_shared`), and the workers
//! the process starts in the next [`REPIN_AFTER`] start unpinned ([`machine_shared`]). Its
//! measure is then no longer its CPU's and is not remembered for it, and a worker that starts
//! unpinned starts from a whole CPU, not from what was remembered for the CPU it would have
//! been pinned to. After [`REPIN_AFTER`] the worker takes its pin again and measures anew
//! (`worker::Core::repin_if_due`): the load may be gone, and where it is not, the measure
//! leaves the pin again [`UNPIN_AFTER`] windows later.
//!
//! **Place.** [`pick`] is a smooth weighted round robin (nginx's upstream balancing) over the
//! published shares: each worker receives new work in proportion to its share, interleaved, with
//! no randomness; a worker's weight never drops below [`MIN_SHARE`] so that none is starved of
//! new work if its measure is stale.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Shortest window between two samples: a few scheduler time slices (3-4 ms each when two
/// threads share a CPU), so that one window sees both.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// Longest sleep of a worker whose share is below [`FULL`]: it wakes to let its share recover
/// (see the module doc). Two windows.
pub(crate) const RECHECK: Duration = Duration::from_millis(20);
/// A window counts only if the worker ran or waited this long in it (else it says nothing).
const MIN_ACTIVE: Duration = Duration::from_millis(2);
/// Published shares are in thousandths.
pub(crate) const FULL: u32 = 1000;
/// A pinned worker that measures less than this (thousandths) in [`UNPIN_AFTER`] windows in a
/// row, its smoothed share below it too, may leave its pin (`Config::unpin_when_shared`,
/// [`CpuShare::leaves_pin`]): next to one busy thread a CPU gives about half, and another
/// process busy there for that long (30 ms or more) is one the scheduler should move the
/// worker away from; a dip of a window or two (a short command) is not.
pub(crate) const UNPIN_BELOW: u32 = 700;
/// See [`UNPIN_BELOW`].
pub(crate) const UNPIN_AFTER: u32 = 3;
/// Lowest weight a worker gets in placement, in thousandths.
const MIN_SHARE: u32 = 50;
/// A yield that returns within this found no other thread runnable on the CPU (the same bound
/// as a spinner's, `idle`).
const FREE_YIELD: Duration = Duration::from_micros(50);
/// Shortest interval between two probes of a worker's CPU.
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// CPUs whose last measured share is remembered (those with a higher number start at 1).
const REMEMBERED_CPUS: usize = 1024;

/// The last share measured on each CPU by a worker pinned there, in thousandths; 0: none yet.
static REMEMBERED: [AtomicU32; REMEMBERED_CPUS] = [const { AtomicU32::new(0) }; REMEMBERED_CPUS];

fn remembered(cpu: Option<usize>) -> Option<&'static AtomicU32> {
    cpu.and_then(|c| REMEMBERED.get(c))
}

/// How long a worker that left its pin stays unpinned before it takes its pin again and
/// measures anew, and how long after a worker of the process left its pin later workers start
/// unpinned ([`machine_shared`]). Left for good, one burst of load on every CPU unpinned a
/// process for its life, and next to a thread busy on one CPU (the other free) the scheduler
/// then ran both workers of a fork-join on the free CPU: 0.80-0.87 M messages/s against
/// 1.10-1.14 M pinned (`bench actors`, busy). A second: a worker beside a load that stays
/// spends 3 windows in 100 pinned where that load is.
pub(crate) const REPIN_AFTER: Duration = Duration::from_secs(1);

/// When a worker of this process last left its pin because its CPU was shared (a
/// [`crate::trace::epoch_ms`] stamp; 0: never). Workers started within [`REPIN_AFTER`] of
/// it (another runtime, the next run of a benchmark) start unpinned instead of each paying
/// the windows it takes to tell again: unpinned workers measured as fast as pinned ones on a
/// quiet machine (`Config`'s `unpin_when_shared`), so a wrong guess costs little, and a late
/// one costs every message that waits for a shared CPU's time slice.
static UNPINNED_AT: AtomicU64 = AtomicU64::new(0);

/// Whether a worker of this process left its pin because its CPU was shared, less than
/// [`REPIN_AFTER`] ago.
pub(crate) fn machine_shared() -> bool {
    // Relaxed: a hint; a worker that misses it measures for itself.
    let at = UNPINNED_AT.load(Ordering::Relaxed);
    at != 0 && crate::trace::epoch_ms().saturating_sub(at) < REPIN_AFTER.as_millis() as u64
}

/// One worker's measure of its CPU share. Owned by the worker; opened on the worker's thread.
pub(crate) struct CpuShare {
    file: Option<File>,
    last: Option<(Instant, u64, u64)>,
    /// Run time and run-queue delay when the idle spell in progress was marked
    /// ([`idle_from_here`](Self::idle_from_here)).
    idle_mark: Option<(u64, u64)>,
    /// Run time and run-queue delay of the marked idle spells since the window began: not
    /// counted in it.
    idle: (u64, u64),
    /// Run time and run-queue delay with work in the windows since the last one that had enough
    /// of it to tell ([`take_window`](Self::take_window)).
    carry: (u64, u64),
    /// Smoothed share, in thousandths.
    share: u32,
    /// A window has been measured (the next ones are smoothed).
    measured: bool,
    /// Measured windows in a row whose own share was below [`UNPIN_BELOW`].
    low_streak: u32,
    /// When this worker last probed its CPU ([`CpuShare::probe`]).
    probed: Option<Instant>,
    /// The CPU the thread is pinned to, if any (its share is remembered).
    cpu: Option<usize>,
}

impl CpuShare {
    /// A measure that never samples (before the worker's thread opens its own).
    pub(crate) fn none() -> Self {
        CpuShare {
            file: None,
            last: None,
            idle_mark: None,
            idle: (0, 0),
            carry: (0, 0),
            share: FULL,
            measured: false,
            low_streak: 0,
            probed: None,
            cpu: None,
        }
    }

    /// The measure of the calling thread, to be pinned to `cpu` if given: it starts from the
    /// share last measured there.
    pub(crate) fn of_this_thread(cpu: Option<usize>) -> Self {
        CpuShare { file: open_schedstat(), ..CpuShare::of_cpu(cpu) }
    }

    /// A measure without its file, starting from the share last remembered for `cpu`.
    fn of_cpu(cpu: Option<usize>) -> Self {
        // Relaxed: a hint; any value once stored is a share that was measured.
        let share = match remembered(cpu).map(|r| r.load(Ordering::Relaxed)) {
            Some(s) if s > 0 => s,
            _ => FULL,
        };
        CpuShare { share, cpu, ..CpuShare::none() }
    }

    /// The thread is no longer pinned: what it measures from now on is not its CPU's, and is
    /// not remembered for that CPU. `measured`: it left its pin by this measure (not at its
    /// start, by [`machine_shared`]), which later workers follow.
    pub(crate) fn unpinned(&mut self, measured: bool) {
        self.cpu = None;
        if measured {
            UNPINNED_AT.store(crate::trace::epoch_ms(), Ordering::Relaxed);
        }
    }

    /// The thread is pinned to `cpu` again ([`REPIN_AFTER`]): the measure starts anew there,
    /// from the share last remembered for that CPU.
    pub(crate) fn repinned(&mut self, cpu: usize) {
        let file = self.file.take();
        *self = CpuShare { file, ..CpuShare::of_cpu(Some(cpu)) };
    }

    /// Whether the share has stayed low long enough for a pinned worker to leave its pin
    /// ([`UNPIN_BELOW`], [`UNPIN_AFTER`]).
    pub(crate) fn long_shared(&self) -> bool {
        // The share too: quiet windows raise it without ending the streak.
        self.low_streak >= UNPIN_AFTER && self.share < UNPIN_BELOW
    }

    /// Whether a pinned worker measuring this leaves its pin, given what the other workers
    /// published (each one's share, and whether its CPU has been shared for long): its CPU has
    /// been shared for long ([`long_shared`](Self::long_shared)), every other worker's too, and
    /// none gets clearly more of its CPU (`follow::clearly_more`). Where one does, or its CPU
    /// is shared only now and then, the colors leave instead (`follow::relief`), and the
    /// workers stay one to a CPU: unpinned next to a thread spinning on one CPU, the scheduler
    /// put both workers on the free CPU at times, and a 64-token ring ran at 0.39 of tokio
    /// against 0.87 pinned (`bench actors`, same process); and a ping-pong between a worker on
    /// the free CPU and one on the busy CPU left its pins when the free CPU's worker dipped for
    /// a window (the process's own thread building the next runtime): the unpinned worker
    /// joined it there, its share fell in turn, and every later runtime of the process started
    /// unpinned. Where every CPU is busy (a compile beside it), the colors have nowhere to go
    /// and the scheduler does better than any pin.
    pub(crate) fn leaves_pin(&self, mut others: impl Iterator<Item = (u32, bool)>) -> bool {
        self.long_shared()
            && others.all(|(s, long)| long && !crate::follow::clearly_more(s, self.share))
    }

    /// The smoothed share, in thousandths.
    pub(crate) fn share(&self) -> u32 {
        self.share
    }

    /// An idle worker whose share is below 0.9 checks, at most every [`PROBE_EVERY`], whether
    /// its CPU is still shared: three yields that each return within [`FREE_YIELD`] mean nothing
    /// else wants that CPU, and the share is 1 again. Returns true if the share changed.
    pub(crate) fn probe(&mut self) -> bool {
        if self.file.is_none() || self.share >= FULL - FULL / 10 {
            return false;
        }
        // Rarely: where another thread is runnable, a yield gives it a whole time slice (3-4
        // ms). Probing at every idle spell of a worker whose partner is on another worker
        // starved it (one exchange per time slice of the other thread).
        let now = Instant::now();
        if self.probed.is_some_and(|t| now.duration_since(t) < PROBE_EVERY) {
            return false;
        }
        self.probed = Some(now);
        for _ in 0..3 {
            let t = Instant::now();
            std::thread::yield_now();
            if t.elapsed() >= FREE_YIELD {
                return false;
            }
        }
        self.measured = false;
        self.last = None;
        (self.idle, self.carry) = ((0, 0), (0, 0));
        self.share = FULL;
        if let Some(r) = remembered(self.cpu) {
            r.store(FULL, Ordering::Relaxed);
        }
        true
    }

    /// How long this worker may sleep before it should measure again: [`RECHECK`] while its
    /// share is below [`FULL`], else as long as it likes.
    pub(crate) fn sleep_limit(&self) -> Option<Duration> {
        (self.file.is_some() && self.share < FULL).then_some(RECHECK)
    }

    /// A measure that never samples and says `share` (tests of the policies that read it).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn fixed(share: u32) -> Self {
        CpuShare { share, ..CpuShare::none() }
    }

    /// Samples if the last sample is older than [`SAMPLE_EVERY`]; returns the new smoothed
    /// share (thousandths) when it changed.
    /// Reads the clock only when it can sample at all: it runs at every idle spell.
    pub(crate) fn sample(&mut self) -> Option<u32> {
        let file = self.file.as_ref()?;
        let now = Instant::now();
        if self.last.is_some_and(|(t, ..)| now.duration_since(t) < SAMPLE_EVERY) {
            return None;
        }
        let (run, delay) = read_schedstat(file)?;
        let previous = self.last.replace((now, run, delay));
        let idle = std::mem::take(&mut self.idle);
        let (_, run0, delay0) = previous?;
        self.take_window((run.saturating_sub(run0), delay.saturating_sub(delay0)), idle)
    }

    /// Takes one window, its whole run time and run-queue delay (ns) and what its idle spells
    /// took of them (`idle`), into the smoothed share; returns the new share when it changed.
    /// The share is taken from the window's time with work, with that of earlier windows that
    /// had too little of it to tell (`carry`) until it adds up to [`MIN_ACTIVE`]; a window of
    /// idle spells only leaves the share as it is, and a quiet one lets it recover (what little
    /// work was carried is then too old to count). Why not the whole window: a worker whose
    /// colors left a CPU shared with a busy thread (`follow`'s relief) has little work there;
    /// taken from its work or quiet windows alone, with the waits of its idle spells left out,
    /// its share went back to whole in a few windows, the colors came back to the shared CPU and
    /// left again (a ping-pong beside a busy thread: 25-28M messages/s against 30-33M); its
    /// probe tells when the CPU is its own again. The policy part of the measure:
    /// [`sample`](Self::sample) feeds the kernel's figures, the simulator (`sim`) its own.
    pub(crate) fn take_window(&mut self, whole: (u64, u64), idle: (u64, u64)) -> Option<u32> {
        let min = MIN_ACTIVE.as_nanos() as u64;
        let carry = std::mem::take(&mut self.carry);
        let busy =
            (whole.0.saturating_sub(idle.0) + carry.0, whole.1.saturating_sub(idle.1) + carry.1);
        if busy.0 + busy.1 >= min {
            self.window(busy.0, busy.1)
        } else if whole.0 + whole.1 >= min {
            self.carry = busy;
            None
        } else {
            self.window(0, 0)
        }
    }

    /// The worker's idle spell from here on (from its first yield while spinning, or the end of
    /// a run) is not counted in the window, until [`busy_again`](Self::busy_again) (the spell's
    /// end, or the worker blocks: a wake-up's wait to run is work's): the share is what the
    /// worker gets of its CPU when it has work. Its spin's yields wait for whatever else runs
    /// on the CPU when the worker itself has nothing to run, and a program that runs ochre and
    /// another runtime in turn (a tokio runtime's phase between two of ochre's: a user
    /// comparing them, or alternating an I/O runtime with a compute one) made both workers
    /// measure 0.6-0.9 of CPUs that were free whenever ochre had work; a thief on such a worker took no backlog
    /// from the other one (`steal::worth_asking`), and four self-feeding loops ran three on
    /// one worker for 12.2 ms against 8.6 without the other runtime. One read of the file per
    /// spell that gets this far (a spin of ten microseconds or a sleep), none for shorter ones.
    /// The probe ([`probe`](Self::probe)) still counts: it measures on purpose.
    pub(crate) fn idle_from_here(&mut self) {
        if self.idle_mark.is_some() || self.last.is_none() {
            return;
        }
        if let Some(file) = &self.file {
            self.idle_mark = read_schedstat(file);
        }
    }

    /// The idle spell is over (the worker has work, looks again, or blocks: what it waits to run
    /// once woken counts, a wake-up for work): what it took since
    /// [`idle_from_here`](Self::idle_from_here) is left out of the window. Left in, the wake-ups
    /// of a worker beside a busy thread (each waits for that thread's time slice) kept no
    /// work there: with them out, Savina's big beside a spinning thread sent its actors to that
    /// worker for whole runs (7-17M messages/s against 22-27M).
    pub(crate) fn busy_again(&mut self) {
        let (Some((run0, delay0)), Some(file)) = (self.idle_mark.take(), &self.file) else {
            return;
        };
        if let Some((run, delay)) = read_schedstat(file) {
            self.idle.0 += run.saturating_sub(run0);
            self.idle.1 += delay.saturating_sub(delay0);
        }
    }

    /// Takes the run time and run-queue delay (ns) of one window's time with work into the
    /// smoothed share ([`take_window`](Self::take_window)); returns the new share when it
    /// changed.
    fn window(&mut self, run_ns: u64, delay_ns: u64) -> Option<u32> {
        let before = self.share;
        let after = self.update(window_share(run_ns, delay_ns));
        (after != before).then_some(after)
    }

    /// A measure fed by its owner through [`window`](Self::window) (the simulator), starting
    /// from `share` as a worker pinned to a CPU whose share was remembered does.
    #[cfg(all(any(test, feature = "sim"), not(loom)))]
    pub(crate) fn fed(share: u32) -> Self {
        CpuShare { share: share.clamp(1, FULL), ..CpuShare::none() }
    }

    /// Takes one window's share (`None`: too quiet to tell) into the smoothed one; returns it.
    fn update(&mut self, window: Option<u32>) -> u32 {
        self.share = match window {
            // Weight 1/2: two or three windows (~30 ms) to follow a change.
            Some(share) if self.measured => (self.share + share) / 2,
            Some(share) => {
                self.measured = true;
                share
            }
            // Too quiet to tell: a quarter of the way back to a CPU of its own.
            None => self.share + (FULL - self.share).div_ceil(4),
        };
        if let Some(share) = window {
            // Each window's own share, not the smoothed one: that carries a dip into the next
            // windows, and two windows of another thread on a CPU (a process building its next
            // runtime) made three of a streak there.
            self.low_streak = if share < UNPIN_BELOW { self.low_streak + 1 } else { 0 };
        }
        if let Some(r) = remembered(self.cpu) {
            r.store(self.share.max(1), Ordering::Relaxed);
        }
        self.share
    }
}

/// The share of one window (thousandths), or `None` if the window was too quiet to tell.
fn window_share(run_ns: u64, delay_ns: u64) -> Option<u32> {
    let active = run_ns + delay_ns;
    if active < MIN_ACTIVE.as_nanos() as u64 {
        return None;
    }
    Some((run_ns * u64::from(FULL) / active) as u32)
}

/// The calling thread's `schedstat` (its run time and run-queue delay): the file stays that
/// thread's whichever thread reads it later (`stall`'s watchdog reads the workers'). `None`
/// where the system has none.
pub(crate) fn open_schedstat() -> Option<File> {
    File::open("/proc/thread-self/schedstat").ok()
}

/// Run time and run-queue delay, in ns, read from a `schedstat` file ([`open_schedstat`]).
pub(crate) fn read_schedstat(file: &File) -> Option<(u64, u64)> {
    let mut buf = [0u8; 96];
    let n = file.read_at(&mut buf, 0).ok()?;
    parse_schedstat(std::str::from_utf8(&buf[..n]).ok()?)
}

/// Run time and run-queue delay, in ns, from the text of a `schedstat` file.
fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_ascii_whitespace().map(str::parse::<u64>);
    Some((fields.next()?.ok()?, fields.next()?.ok()?))
}

/// Smooth weighted round robin: the next worker for new work, given each worker's share and
/// the running credits (one per worker, kept by the caller between calls).
pub(crate) fn pick(shares: impl Iterator<Item = u32>, credit: &mut [i64]) -> usize {
    let mut total = 0i64;
    let mut best = 0;
    for (w, s) in shares.enumerate() {
        let weight = i64::from(s.clamp(MIN_SHARE, FULL));
        total += weight;
        credit[w] += weight;
        if credit[w] > credit[best] {
            best = w;
        }
    }
    credit[best] -= total;
    best
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn schedstat_text_parses_and_garbage_does_not() {
        assert_eq!(parse_schedstat("1755495 42 2\n"), Some((1_755_495, 42)));
        assert_eq!(parse_schedstat("12"), None);
        assert_eq!(parse_schedstat("a b c"), None);
    }

    #[test]
    fn a_window_share_is_run_over_run_plus_wait_and_quiet_windows_say_nothing() {
        assert_eq!(window_share(10_000_000, 0), Some(FULL));
        assert_eq!(window_share(5_000_000, 5_000_000), Some(500));
        assert_eq!(window_share(100_000, 0), None);
    }

    #[test]
    fn the_first_window_counts_whole_later_ones_half_and_quiet_ones_recover() {
        let mut m = CpuShare::none();
        let mut step = |run: u64, delay: u64| m.update(window_share(run, delay));
        assert_eq!(step(5_000_000, 5_000_000), 500, "first window: as measured");
        assert_eq!(step(10_000_000, 0), 750, "then half way");
        assert_eq!(step(0, 0), 813, "a quiet window: a quarter of the way back");
        assert_eq!(step(0, 0), 860);
    }

    #[test]
    fn only_a_share_low_for_several_windows_in_a_row_says_leave_the_pin() {
        let mut m = CpuShare::none();
        let step = |m: &mut CpuShare, run: u64, delay: u64| {
            m.update(window_share(run, delay));
            m.long_shared()
        };
        // One dip (a short command beside the worker), then its own CPU again.
        assert!(!step(&mut m, 2_000_000, 8_000_000));
        assert!(!step(&mut m, 10_000_000, 0));
        assert!(!step(&mut m, 10_000_000, 0));
        // Half of the CPU, window after window: the third says so.
        assert!(!step(&mut m, 5_000_000, 5_000_000));
        assert!(!step(&mut m, 5_000_000, 5_000_000));
        assert!(step(&mut m, 5_000_000, 5_000_000));
        // A quiet window measures nothing: the share recovers a quarter of the way (625) and
        // the streak stands; a second takes the share above the bound.
        assert!(step(&mut m, 0, 0));
        assert!(!step(&mut m, 0, 0), "recovered to {}", m.share());
        assert!(step(&mut m, 2_000_000, 8_000_000), "low again, the streak unbroken");
        assert!(!step(&mut m, 10_000_000, 0), "a window at full share ends it");
        // Two windows of another thread, then the CPU alone: the smoothed share is still low
        // (650) in the third window, but that window's own is not, and it ends the streak.
        let mut m = CpuShare::none();
        assert!(!step(&mut m, 3_000_000, 7_000_000));
        assert!(!step(&mut m, 3_000_000, 7_000_000));
        assert!(!step(&mut m, 10_000_000, 0), "a dip of two windows; share {}", m.share());
        assert_eq!(m.share(), 650);
    }

    #[test]
    fn a_worker_leaves_its_pin_only_where_every_cpu_is_shared_for_long() {
        let mut m = CpuShare::none();
        for _ in 0..UNPIN_AFTER {
            m.update(window_share(5_000_000, 5_000_000));
        }
        assert_eq!(m.share(), 500);
        assert!(m.leaves_pin([(550, true), (450, true)].into_iter()), "every CPU about as busy");
        assert!(m.leaves_pin(std::iter::empty()), "no other worker");
        assert!(!m.leaves_pin([(550, true), (1000, false)].into_iter()), "one free: colors go");
        assert!(
            !m.leaves_pin([(550, true), (650, false)].into_iter()),
            "one CPU shared for a window only: not every CPU is busy"
        );
        let mut fresh = CpuShare::none();
        fresh.update(window_share(5_000_000, 5_000_000));
        assert!(!fresh.leaves_pin([(500, true)].into_iter()), "not shared for long yet");
    }

    #[test]
    fn a_shared_worker_sleeps_briefly_to_measure_again() {
        let mut m = CpuShare::fixed(FULL);
        assert_eq!(m.sleep_limit(), None);
        m.share = FULL / 2;
        assert_eq!(m.sleep_limit(), None, "nothing to measure with: no limit");
        m.file = File::open("/proc/self/stat").ok();
        if m.file.is_some() {
            assert_eq!(m.sleep_limit(), Some(RECHECK));
        }
    }

    #[test]
    fn placement_follows_the_shares_interleaved() {
        let mut credit = vec![0; 2];
        let picks: Vec<usize> =
            (0..6).map(|_| pick([1000, 500].into_iter(), &mut credit)).collect();
        // Two for worker 0 for each one for worker 1, spread out.
        assert_eq!(picks, vec![0, 1, 0, 0, 1, 0]);
        let mut credit = vec![0; 3];
        let mut counts = [0; 3];
        for _ in 0..300 {
            counts[pick([1000, 1000, 1000].into_iter(), &mut credit)] += 1;
        }
        assert_eq!(counts, [100, 100, 100]);
    }

    #[test]
    fn a_worker_with_no_measured_share_still_gets_some_work() {
        let mut credit = vec![0; 2];
        let ones = (0..1000).filter(|_| pick([1000, 0].into_iter(), &mut credit) == 1).count();
        assert!(ones > 0 && ones < 100, "{ones}");
    }

    #[test]
    fn a_window_is_judged_by_its_time_with_work() {
        let ms = 1_000_000;
        let mut m = CpuShare::fed(FULL);
        // Idle spells waited 9 ms for another thread; half a millisecond of work: no change,
        // the work carried.
        assert_eq!(m.take_window((ms, 9 * ms), (ms / 2, 9 * ms)), None);
        assert_eq!(m.share(), FULL);
        // With the carried work, enough to tell: 2.5 ms run of 4.5 ms wanted.
        assert_eq!(m.take_window((2 * ms, 2 * ms), (0, 0)), Some(555));
        // Quiet (a tenth of a millisecond of work): a quarter of the way back to a whole CPU,
        // and the little work is not carried.
        assert_eq!(m.take_window((ms / 10, 0), (0, 0)), Some(555 + (FULL - 555).div_ceil(4)));
        assert_eq!(m.carry, (0, 0));
    }

    /// Runs `measure` on a thread pinned to the last CPU this process may use, beside a
    /// neighbour pinned there too, which spins while `neighbour` is 1, sleeps while 0, and ends
    /// at 2 (set when `measure` returns). `None` where the threads cannot be pinned, or
    /// `measure` says so (no schedstat).
    fn beside_a_neighbour<T: Send>(
        neighbour: &std::sync::atomic::AtomicU8,
        measure: impl FnOnce() -> Option<T> + Send,
    ) -> Option<T> {
        let cpu = *crate::topology::allowed_cpus().ok()?.last()?;
        std::thread::scope(|s| {
            s.spawn(|| {
                if crate::topology::pin_current_thread(cpu).is_err() {
                    return;
                }
                loop {
                    match neighbour.load(Ordering::Relaxed) {
                        0 => std::thread::sleep(Duration::from_micros(200)),
                        1 => std::hint::spin_loop(),
                        _ => return,
                    }
                }
            });
            let measured = s
                .spawn(|| {
                    crate::topology::pin_current_thread(cpu).ok()?;
                    measure()
                })
                .join()
                .unwrap();
            neighbour.store(2, Ordering::Relaxed);
            measured
        })
    }

    #[test]
    fn what_a_worker_waits_while_idle_is_not_its_share() {
        let neighbour = std::sync::atomic::AtomicU8::new(0);
        let measured = beside_a_neighbour(&neighbour, || {
            // Both measures on this thread, over the same time: one told of the idle spells,
            // one not (what the measure was before it was told).
            let mut told = CpuShare::of_this_thread(None);
            let mut blind = CpuShare::of_this_thread(None);
            told.file.as_ref()?;
            let _ = (told.sample(), blind.sample());
            let t0 = Instant::now();
            while t0.elapsed() < SAMPLE_EVERY * 12 {
                // Work, alone on the CPU.
                let busy = Instant::now();
                while busy.elapsed() < Duration::from_millis(4) {
                    std::hint::spin_loop();
                }
                let _ = (told.sample(), blind.sample());
                // Idle, yielding to the other thread while it runs there.
                told.idle_from_here();
                neighbour.store(1, Ordering::Relaxed);
                let idle = Instant::now();
                while idle.elapsed() < Duration::from_millis(4) {
                    std::thread::yield_now();
                }
                neighbour.store(0, Ordering::Relaxed);
                told.busy_again();
            }
            Some((told.share, blind.share))
        });
        if let Some((told, blind)) = measured {
            // The idle yields waited for the neighbour's slices: the blind measure counts them
            // (here: 355 and 997 thousandths; a busy machine lowers both: 172 and 271 beside
            // another busy thread on the CPU, which takes its part of the working phases too;
            // 78 and 129 beside that and a loop of test binaries: the ratio holds, 1.58-1.65
            // loaded, 2.8 quiet).
            assert!(
                told >= blind + FULL / 40 && told * 5 >= blind * 7,
                "told of idle spells {told}, not told {blind}"
            );
        }
    }

    #[test]
    fn a_thread_sharing_its_cpu_with_a_busy_one_measures_about_half() {
        // The busy neighbour.
        let neighbour = std::sync::atomic::AtomicU8::new(1);
        let measured = beside_a_neighbour(&neighbour, || {
            let mut m = CpuShare::of_this_thread(None);
            m.file.as_ref()?; // No schedstat on this kernel: nothing to measure.
            assert_eq!(m.sample(), None, "a first sample starts a window");
            let t0 = Instant::now();
            while t0.elapsed() < SAMPLE_EVERY * 12 {
                let _ = m.sample();
                std::hint::spin_loop();
            }
            Some(m.share)
        });
        if let Some(share) = measured {
            // Alone it would stay at FULL; sharing, each window says ~500 and the average follows.
            assert!(share < 800, "measured {share} thousandths while sharing a CPU");
        }
    }
}
