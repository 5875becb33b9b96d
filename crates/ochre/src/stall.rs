//! Stall detection: a handler that runs longer than a threshold is reported while it runs,
//! with its color and its worker (a log warning, at most one every [`STALL_LOG_EVERY`] with the
//! number of the others; a counter; the last few in [`Handle::stalls`](crate::Handle::stalls)).
//! Handlers must not block; this finds the ones that do.
//!
//! The protocol (one word per worker, written by its owner only, read by one watchdog thread):
//!
//! * **Heartbeat, per turn.** Each worker publishes a sequence number: odd while it runs a turn
//!   (up to `turn_budget` events of one color back to back), even between turns. At the start
//!   of a turn it stores the turn's color, then an odd number; at its end, an even one: three
//!   stores a turn, to a line only its owner writes, and no clock read (the watchdog keeps
//!   time). Not per event: a store per event cost ping-pong (28 ns an event, 64-event turns)
//!   about 5% (`bench color-stats`, 41 paired reps, 0.945-0.954), per turn nothing measurable.
//!   So what is reported is a color that has held its worker that long: one blocking handler,
//!   or a turn of handlers slow enough to add up to the threshold (64 of 1.6 ms at 100 ms),
//!   which is no better.
//! * **Watchdog.** Every quarter of the threshold it reads each worker's number. An odd number
//!   seen unchanged for at least the threshold is an event that has run that long (at least:
//!   it started before the watchdog first saw it, at most a quarter of the threshold before):
//!   it is reported once. The color is read between two reads of the number (a sequence lock:
//!   the color is stored before the number with release ordering, the watchdog reads the number
//!   with acquire ordering, then the color, then the number again after an acquire fence): if
//!   the number did not change, the color is the running event's.
//! * **Lifetime.** One watchdog thread serves every runtime of the process (started with the
//!   first); it holds each runtime weakly and forgets it once it is dropped.
//!
//! * **Waiting for a CPU is not running.** A worker thread that the system does not run for a
//!   while (a machine busier than its CPUs, a `nice`d process) is not in a stalled handler. Each
//!   worker opens its thread's `schedstat` at start; when the watchdog first sees a turn, it
//!   reads the thread's run-queue delay (time runnable but not running), and a turn counts as a
//!   stall only when its wall time *less the delay since* reaches the threshold; the delay is
//!   reported with it ([`Stall::waited`]). A handler that blocks in a system call waits for no
//!   CPU and is reported as before. On the shared 2-CPU study machine, `bench actors` beside
//!   builds wrote 19 warnings in one run (fork-join's driver, 75 ms of posting, stretched past
//!   100 ms by preemption). Where the file cannot be read, time is wall-clock time.

use std::collections::VecDeque;
use std::fs::File;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::padding::Padded;
use crate::shared::Shared;
use crate::sync::{AtomicU64, Ordering};
use crate::Color;

/// Stalls kept for [`Handle::stalls`](crate::Handle::stalls) (all are counted).
pub const STALLS_KEPT: usize = 64;

/// A handler found running longer than the threshold.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stall {
    /// The worker it runs on.
    pub worker: usize,
    /// Its color.
    pub color: Color,
    /// How long it had been running when reported, at least (the watchdog's view), wall-clock
    /// time.
    pub running_for: Duration,
    /// Of `running_for`, how long its worker's thread waited for a CPU (runnable, not run: the
    /// machine was busier than its CPUs); zero where the system does not say.
    #[serde(default)]
    pub waited: Duration,
}

/// One worker's heartbeat, written by the worker.
#[derive(Default)]
pub(crate) struct Word {
    seq: AtomicU64,
    color: AtomicU64,
    /// The worker thread's `schedstat`, opened by that thread ([`Stalls::register_thread`]):
    /// the watchdog reads the thread's run-queue delay from it.
    schedstat: OnceLock<File>,
}

impl Word {
    /// The worker thread's run-queue delay so far (ns), if the system says.
    fn delay_ns(&self) -> Option<u64> {
        let (_, delay) = crate::cpu_share::read_schedstat(self.schedstat.get()?)?;
        Some(delay)
    }
}

/// Of a turn seen for `running_for`, the time that counts towards a stall: less the run-queue
/// delay its thread accumulated since it was first seen (`delay_then` to `delay_now`, ns),
/// which is returned too.
fn held(
    running_for: Duration,
    delay_then: Option<u64>,
    delay_now: Option<u64>,
) -> (Duration, Duration) {
    let waited = match (delay_then, delay_now) {
        (Some(a), Some(b)) => Duration::from_nanos(b.saturating_sub(a)).min(running_for),
        _ => Duration::ZERO,
    };
    (running_for - waited, waited)
}

/// At most one stall is logged in this long (the others are counted, kept in
/// [`Handle::stalls`](crate::Handle::stalls), and their number is logged with the next one): a
/// job whose turns of slow handlers pass the threshold one after another (MapReduce's map
/// lanes on a loaded machine) otherwise wrote a warning every few hundred milliseconds.
pub const STALL_LOG_EVERY: Duration = Duration::from_secs(10);

/// The runtime's stall state: heartbeats, count, recent stalls.
pub(crate) struct Stalls {
    /// Shared with each worker's [`Beat`], which writes its own without a look-up.
    words: Box<[Arc<Padded<Word>>]>,
    count: AtomicU64,
    recent: Mutex<VecDeque<Stall>>,
    /// When a stall was last logged, and the stalls not logged since.
    logged: Mutex<(Option<Instant>, u64)>,
}

impl Stalls {
    pub(crate) fn new(workers: usize) -> Self {
        Stalls {
            words: (0..workers).map(|_| Arc::new(Padded::new(Word::default()))).collect(),
            count: AtomicU64::new(0),
            recent: Mutex::new(VecDeque::new()),
            logged: Mutex::new((None, 0)),
        }
    }

    /// Called by worker `worker`'s thread at its start: opens the thread's own `schedstat`, so
    /// that the watchdog can tell waiting for a CPU from running (a file of
    /// `/proc/thread-self` stays that thread's, whoever reads it).
    pub(crate) fn register_thread(&self, worker: usize) {
        if let Some(w) = self.words.get(worker) {
            if let Some(f) = crate::cpu_share::open_schedstat() {
                let _ = w.schedstat.set(f);
            }
        }
    }

    /// Worker `worker`'s heartbeat: writing its word if `config` turns the watchdog on.
    pub(crate) fn beat(&self, worker: usize, config: &crate::Config) -> Beat {
        let word = config.stall_threshold.map(|_| self.words[worker].clone());
        Beat { word, seq: 0 }
    }

    /// Stalls reported since the runtime was built.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The last [`STALLS_KEPT`] stalls, oldest first.
    pub(crate) fn recent(&self) -> Vec<Stall> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }

    fn report(&self, stall: Stall) {
        let now = Instant::now();
        let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
        match logged.0 {
            Some(last) if now.duration_since(last) < STALL_LOG_EVERY => logged.1 += 1,
            _ => {
                let more = std::mem::take(&mut logged.1);
                let more = match more {
                    0 => String::new(),
                    n => format!(" ({n} more since the last warning, not logged)"),
                };
                let waited = match stall.waited.as_millis() {
                    0 => String::new(),
                    ms => format!(" ({ms} ms of it waiting for a CPU)"),
                };
                log::warn!(
                    "color {} has been running for {} ms{waited} on worker {}: a handler blocks, \
                     or a turn of slow ones (handlers must not block){more}",
                    stall.color.0,
                    stall.running_for.as_millis(),
                    stall.worker
                );
                logged.0 = Some(now);
            }
        }
        drop(logged);
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() >= STALLS_KEPT {
            recent.pop_front();
        }
        recent.push_back(stall);
    }
}

/// A worker's side of the heartbeat (in its `Core`): its word, if the watchdog is on, and its
/// sequence number. The word is held, not looked up in `Shared` at each turn: the look-up (the
/// runtime's table, a bounds check) was half of the heartbeat's cost, about 14 instructions of
/// a one-event turn (callgrind, a ring of actors).
pub(crate) struct Beat {
    word: Option<Arc<Padded<Word>>>,
    seq: u64,
}

impl Beat {
    /// A heartbeat no watchdog reads (a test's core); a runtime's workers get theirs from
    /// [`Stalls::beat`].
    #[cfg(all(test, not(loom)))]
    pub(crate) fn off() -> Self {
        Beat { word: None, seq: 0 }
    }

    /// A turn of `color` starts with its first event.
    #[inline]
    pub(crate) fn start_turn(&mut self, color: Color) {
        if let Some(w) = &self.word {
            // Relaxed: published by the release store of the number just after.
            w.color.store(color.0, Ordering::Relaxed);
            self.seq = (self.seq | 1) + 2;
            // Release: pairs with the watchdog's acquire load, which then sees this color.
            w.seq.store(self.seq, Ordering::Release);
        }
    }

    /// The turn ended: nothing runs.
    #[inline]
    pub(crate) fn end_turn(&mut self) {
        if let Some(w) = &self.word {
            self.seq += 1;
            w.seq.store(self.seq, Ordering::Release);
        }
    }
}

/// What the watchdog remembers of a worker.
#[derive(Clone, Copy)]
struct Seen {
    seq: u64,
    since: Instant,
    reported: bool,
    /// The worker thread's run-queue delay when the turn was first seen (ns).
    delay: Option<u64>,
}

/// A runtime the watchdog watches.
struct Watched {
    shared: Weak<Shared>,
    threshold: Duration,
    /// How often it is looked at: a quarter of the threshold, a millisecond at least.
    tick: Duration,
    next: Instant,
    seen: Vec<Seen>,
}

/// The process's watchdog: the runtimes it watches, and whether its thread runs.
struct Watchdog {
    watched: Vec<Watched>,
    started: bool,
}

/// One watchdog thread for every runtime of the process, started with the first one that has
/// a threshold. One per runtime, its spawn was a tenth of a `build` (and a thread that outlived
/// its runtime by up to a tick): programs that make a runtime per job paid it each time.
static WATCHDOG: Mutex<Watchdog> = Mutex::new(Watchdog { watched: Vec::new(), started: false });

/// Wakes the watchdog when a runtime is added (its first look may be due before the watchdog's
/// planned wake-up: a runtime watched every 15 s made a new one with a 100 ms threshold wait
/// for it).
static ADDED: Condvar = Condvar::new();

/// How long the watchdog sleeps while it watches no runtime: it still lets the process's pool
/// of event memory decay (`alloc::decay_pool`). The thread lives as long as the process.
const IDLE_TICK: Duration = Duration::from_millis(100);

/// `d` after `now`, or a year after it where that overflows (a threshold of `Duration::MAX`).
fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(365 * 24 * 3600)))
        .unwrap_or(now)
}

fn watchdog() -> MutexGuard<'static, Watchdog> {
    WATCHDOG.lock().unwrap_or_else(|e| e.into_inner())
}

/// Has the process's watchdog watch `shared` if its configuration has a threshold (starting
/// the watchdog's thread with the first such runtime).
pub(crate) fn start(shared: &Arc<Shared>) -> std::io::Result<()> {
    let Some(threshold) = shared.config.stall_threshold else { return Ok(()) };
    let tick = (threshold / 4).max(Duration::from_millis(1));
    let mut dog = watchdog();
    if !dog.started {
        std::thread::Builder::new().name("ochre-watchdog".into()).spawn(watch)?;
        dog.started = true;
    }
    let next = after(Instant::now(), tick);
    dog.watched.push(Watched {
        shared: Arc::downgrade(shared),
        threshold,
        tick,
        next,
        seen: Vec::new(),
    });
    ADDED.notify_one();
    Ok(())
}

/// The watchdog's thread: looks at each runtime every tick of its own, forgets the dropped
/// ones, and reports stalls with its lock released.
fn watch() {
    // Should the thread end (a panic: a logger's), the next runtime built starts another.
    struct Ended;
    impl Drop for Ended {
        fn drop(&mut self) {
            watchdog().started = false;
        }
    }
    let _ended = Ended;
    // The runtimes looked at, held until the lock is released: the last hold of one being
    // dropped meanwhile drops it here, and its events' closures with it, which may do anything
    // (build a runtime, and so lock the watchdog). With the stalls found (an index in `held`).
    let (mut held, mut found) = (Vec::new(), Vec::new());
    loop {
        {
            let mut dog = watchdog();
            let now = Instant::now();
            dog.watched.retain_mut(|w| {
                if w.next > now {
                    return true;
                }
                w.next = after(now, w.tick);
                let Some(shared) = w.shared.upgrade() else { return false };
                let open = !shared.control.closed.load(Ordering::Relaxed);
                if open {
                    let k = held.len();
                    look(&shared, w.threshold, &mut w.seen, now, |s| found.push((k, s)));
                }
                held.push(shared);
                open
            });
        }
        // Logged here, not under the lock every `build` takes.
        for (k, stall) in found.drain(..) {
            let shared: &Arc<Shared> = &held[k];
            shared.stalls.report(stall);
        }
        held.clear();
        // The process's pool of empty event memory gives back what waited unused (`alloc`),
        // even while nothing allocates.
        crate::alloc::decay_pool();
        let dog = watchdog();
        let now = Instant::now();
        let wake = dog.watched.iter().map(|w| w.next).min().unwrap_or(after(now, IDLE_TICK));
        // Woken early by a runtime added meanwhile (or spuriously): the loop looks at what is
        // due only.
        drop(ADDED.wait_timeout(dog, wake.saturating_duration_since(now)));
    }
}

/// One look of the watchdog at a runtime's workers at `now` (`seen`: what it saw of each at
/// its last look), handing each stall found to `stalled`.
fn look(
    shared: &Shared,
    threshold: Duration,
    seen: &mut Vec<Seen>,
    now: Instant,
    mut stalled: impl FnMut(Stall),
) {
    if seen.is_empty() {
        *seen = vec![Seen { seq: 0, since: now, reported: false, delay: None }; shared.workers];
    }
    for (worker, (w, s)) in shared.stalls.words.iter().zip(seen.iter_mut()).enumerate() {
        // Acquire: pairs with the worker's release store (the color stored before it).
        let seq = w.seq.load(Ordering::Acquire);
        if seq != s.seq {
            // A turn's baseline delay; between turns none is needed (a read a tick for each
            // worker in a turn: a pread per worker every quarter threshold).
            let delay = if seq % 2 == 1 { w.delay_ns() } else { None };
            *s = Seen { seq, since: now, reported: false, delay };
            continue;
        }
        let running_for = now.duration_since(s.since);
        if seq % 2 == 0 || s.reported || running_for < threshold {
            continue;
        }
        let (held, waited) = held(running_for, s.delay, w.delay_ns());
        if held < threshold {
            continue; // Preempted, not stalled (yet).
        }
        let color = Color(w.color.load(Ordering::Relaxed));
        // The color load stays before the second read of the number.
        std::sync::atomic::fence(Ordering::Acquire);
        if w.seq.load(Ordering::Relaxed) != seq {
            continue; // The event ended meanwhile.
        }
        s.reported = true;
        stalled(Stall { worker, color, running_for, waited });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn stalls_are_all_counted_and_kept_but_logged_at_most_once_a_period() {
        let stalls = Stalls::new(2);
        for k in 0..3 {
            let running_for = Duration::from_millis(100 + k);
            stalls.report(Stall {
                worker: 1,
                color: Color(k),
                running_for,
                waited: Duration::ZERO,
            });
        }
        assert_eq!(stalls.count(), 3);
        assert_eq!(stalls.recent().len(), 3);
        let logged = stalls.logged.lock().unwrap();
        assert!(logged.0.is_some(), "the first was logged");
        assert_eq!(logged.1, 2, "the next two, within the period, were not");
    }

    #[test]
    fn time_waiting_for_a_cpu_does_not_count_towards_a_stall() {
        let ms = Duration::from_millis;
        let ns = |d: Duration| Some(d.as_nanos() as u64);
        // 150 ms seen, 80 of them waiting for a CPU: 70 held.
        assert_eq!(held(ms(150), ns(ms(5)), ns(ms(85))), (ms(70), ms(80)));
        // Nothing known: wall time.
        assert_eq!(held(ms(150), None, ns(ms(85))), (ms(150), ms(0)));
        assert_eq!(held(ms(150), ns(ms(5)), None), (ms(150), ms(0)));
        // Never more waiting than seen (the delay read a little later than the clock).
        assert_eq!(held(ms(100), ns(ms(0)), ns(ms(130))), (ms(0), ms(100)));
    }

    #[test]
    fn the_watchdog_reads_the_registered_threads_schedstat_not_its_own() {
        let stalls = Arc::new(Stalls::new(1));
        let s = stalls.clone();
        let (ready, go) = std::sync::mpsc::channel();
        let (done, finish) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            s.register_thread(0);
            // 40 ms on the CPU (a runnable thread accumulates run time or delay, both read
            // from its own file).
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_millis(40) {
                std::hint::spin_loop();
            }
            ready.send(()).unwrap();
            finish.recv().unwrap();
        });
        go.recv().unwrap();
        let file = stalls.words[0].schedstat.get();
        if let Some(file) = file {
            let (run, delay) = crate::cpu_share::read_schedstat(file).unwrap();
            // This (reading) thread ran far less than 40 ms; the spinner ran or waited 40.
            assert!(run + delay >= 30_000_000, "read another thread's file: {run} {delay}");
            assert!(stalls.words[0].delay_ns().is_some());
        } else {
            // No schedstat here (another OS or kernel): wall time, as before.
            assert!(crate::cpu_share::open_schedstat().is_none());
        }
        done.send(()).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn the_beat_is_odd_while_an_event_runs() {
        let shared = Arc::new(
            Shared::new(
                crate::Config::default(),
                1,
                1,
                crate::wakeup_latency::Threshold::Set(Duration::ZERO),
                1,
                &crate::topology::Topology::flat(vec![0]),
            )
            .unwrap(),
        );
        let seq = || shared.stalls.words[0].seq.load(Ordering::Relaxed);
        // With the watchdog off, a worker's beat writes nothing.
        let off = crate::Config::default().stall_threshold(None);
        let mut silent = shared.stalls.beat(0, &off);
        silent.start_turn(Color(5));
        assert_eq!(seq(), 0);
        silent.end_turn();
        let mut b = shared.stalls.beat(0, &shared.config);
        b.start_turn(Color(7));
        let first = seq();
        assert_eq!(first % 2, 1);
        assert_eq!(shared.stalls.words[0].color.load(Ordering::Relaxed), 7);
        b.end_turn();
        assert_eq!(seq() % 2, 0);
        b.start_turn(Color(8));
        assert!(seq() % 2 == 1 && seq() != first, "a new turn is a new number");
        b.end_turn();
        assert_eq!(seq() % 2, 0);
    }
}
