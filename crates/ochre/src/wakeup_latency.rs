//! The process's wake-up latency, measured in the background: what the reasoned-spinning
//! threshold is made of (10x it, [`idle::threshold_for`](crate::idle), thesis §5.3.1).
//!
//! In the background (`background`): the first build of a runtime that spins by a measured
//! threshold starts the measurement ([`start`]) and returns; its workers read the threshold at
//! each idle spell ([`Threshold::get`]), which is 10x [`PRIOR`] (200 µs) until the measurement
//! is published.
//!
//! Invariants:
//! - One measurement per process and wake-up mechanism ([`Wakeup`]); its result, once
//!   published, never changes, and every runtime of the process reads it.
//! - A round trip is kept only if the process was idle ([`Calm`]: its threads used less than
//!   [`CALM_SHARE`] of a CPU over the last [`WINDOW`]) before it and after it, as when the build
//!   measured before any run: a wake-up onto a CPU a worker keeps busy measures the scheduler's
//!   preemption, not an idle CPU's wake-up. Other processes are not seen (nor were they then).
//!   The measurement looks at every round for [`PATIENCE`], then every [`SLOW_LOOK`]; a process
//!   that has not let it take its rounds [`GIVE_UP`] after the first build keeps [`PRIOR`]
//!   (rounds already kept are dropped: a median of fewer is not the measurement's).
//! - A measurement that fails (threads or parkers refused) publishes [`PRIOR`]: nothing waits
//!   for it for good. (A failed measurement failed the build before; the threshold has a
//!   sensible value without it.)

use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

use crate::config::Wakeup;

/// Wake-up latency assumed until the process's measurement is published: 20 µs, about what
/// this project's virtual machines measure (11-25 µs a futex wake-up across CPUs; bare metal
/// a few µs). Its threshold, 200 µs, is what idle workers spin for in the first milliseconds
/// of a process.
pub(crate) const PRIOR: Duration = Duration::from_micros(20);

/// How long the measurement looks for an idle moment at every round (each after a 500 µs
/// sleep) before it looks only every [`SLOW_LOOK`].
#[cfg(not(loom))]
const PATIENCE: Duration = Duration::from_millis(100);
/// How long [`Threshold::settled`] waits for the measurement: an idle process publishes it
/// some 15 ms after its first build; one busy for [`PATIENCE`] and a second after is given
/// the threshold in force.
const SETTLE_LIMIT: Duration = Duration::from_millis(1100);
/// How often it looks after [`PATIENCE`].
#[cfg(not(loom))]
const SLOW_LOOK: Duration = Duration::from_millis(20);
/// When it gives up (the threshold stays [`PRIOR`]'s).
#[cfg(not(loom))]
const GIVE_UP: Duration = Duration::from_secs(10);
/// The share of a CPU (thousandths) the process may use over a [`WINDOW`] for it to count
/// as idle; the measurement's own threads use 3-4% of one (a few µs a wake-up, a round trip
/// every 0.55 ms).
#[cfg(not(loom))]
const CALM_SHARE: u32 = 100;
/// The least time over which the process's CPU time is compared with the wall clock's: the
/// kernel adds a thread running on another CPU into the process's clock at its scheduler
/// ticks (every 1-10 ms by the kernel's HZ) or when it stops running, so a shorter window may
/// see nothing of a thread that runs throughout.
#[cfg(not(loom))]
const WINDOW: Duration = Duration::from_millis(12);

/// Round trips a measurement keeps (each after a 500 µs sleep, `park::measure_wakeup`): five.
/// Nine took 10.5 ms of a first build; five and nine alternated in one process, six pairs:
/// 19.2-25.4 µs and 19.9-23.7 µs.
#[cfg(not(loom))]
const ROUNDS: usize = 5;

/// Whether the process was idle lately: its CPU time against the wall clock's, over the
/// last [`WINDOW`] at least.
#[cfg(not(loom))]
struct Calm {
    since: Instant,
    /// Readings (wall clock, process CPU time), oldest first; the first at least `WINDOW` old
    /// once there is one.
    readings: std::sync::Mutex<std::collections::VecDeque<(Instant, Duration)>>,
}

#[cfg(not(loom))]
impl Calm {
    fn new() -> Self {
        let now = (Instant::now(), process_cpu_time());
        Calm { since: now.0, readings: std::sync::Mutex::new([now].into()) }
    }

    /// `Some(idle over the last WINDOW or more)` (no while there is no such window yet), or
    /// `None` once it is time to give up. Past [`PATIENCE`], a look that says busy sleeps
    /// [`SLOW_LOOK`] before it returns: the measurement then looks that often.
    fn look(&self) -> Option<bool> {
        let (now, cpu) = (Instant::now(), process_cpu_time());
        let calm = {
            let mut r = self.readings.lock().unwrap_or_else(|e| e.into_inner());
            r.push_back((now, cpu));
            while r.len() > 2 && now - r[1].0 >= WINDOW {
                r.pop_front();
            }
            let (then, used) = (r[0].0, cpu.saturating_sub(r[0].1));
            now - then >= WINDOW && used <= (now - then) * CALM_SHARE / 1000
        };
        let waited = now - self.since;
        if !calm && waited > GIVE_UP {
            return None;
        }
        if !calm && waited > PATIENCE {
            std::thread::sleep(SLOW_LOOK);
        }
        Some(calm)
    }
}

/// CPU time used by all of the process's threads so far.
#[cfg(not(loom))]
fn process_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec.max(0) as u64, t.tv_nsec.clamp(0, 999_999_999) as u32)
}

/// One mechanism's measurement: started once, published once.
pub(crate) struct Slot {
    started: Once,
    latency: OnceLock<Duration>,
}

impl Slot {
    pub(crate) const fn new() -> Self {
        Slot { started: Once::new(), latency: OnceLock::new() }
    }

    /// The latency measured, or [`PRIOR`] until it is published.
    fn latency(&self) -> Duration {
        self.latency.get().copied().unwrap_or(PRIOR)
    }

    /// Whether the measurement is published.
    pub(crate) fn measured(&self) -> bool {
        self.latency.get().is_some()
    }

    /// Starts `measure` on a thread of its own, the first time only; its result (or
    /// [`PRIOR`], if it gave none) is published when it returns. If no thread can be started,
    /// `PRIOR` is published at once.
    pub(crate) fn start<M>(&'static self, measure: M)
    where
        M: FnOnce() -> Option<Duration> + Send + 'static,
    {
        let job = move || {
            let _ = self.latency.set(measure().unwrap_or(PRIOR));
        };
        crate::background::start_once(&self.started, "ochre-wakeup", job, || {
            let _ = self.latency.set(PRIOR);
        });
    }

    /// The latency once published, waiting up to `limit` for it (then [`PRIOR`]).
    pub(crate) fn settled(&self, limit: Duration) -> Duration {
        let deadline = Instant::now() + limit;
        while !self.measured() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        self.latency()
    }
}

static SLOTS: [Slot; 3] = [Slot::new(), Slot::new(), Slot::new()];

fn slot(kind: Wakeup) -> &'static Slot {
    &SLOTS[kind as usize]
}

/// Starts the process's measurement of `kind`'s wake-up latency, if not started yet; returns
/// at once.
pub(crate) fn start(kind: Wakeup) {
    slot(kind).start(move || {
        #[cfg(not(loom))]
        {
            let calm = Calm::new();
            crate::park::measure_wakeup_when(kind, ROUNDS, &|| calm.look()).ok()
        }
        #[cfg(loom)]
        {
            Some(Duration::from_micros(30))
        }
    });
}

/// A runtime's reasoned-spinning threshold.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Threshold {
    /// Configured (or zero, for the spin policies without one).
    Set(Duration),
    /// The process's measurement of this mechanism's wake-up latency, 10x.
    Measured(Wakeup),
}

impl Threshold {
    /// The threshold in force now.
    #[inline]
    pub(crate) fn get(self) -> Duration {
        match self {
            Threshold::Set(d) => d,
            Threshold::Measured(kind) => crate::idle::threshold_for(slot(kind).latency()),
        }
    }

    /// The threshold once the process's measurement is published (waiting for it: some 15 ms
    /// after the first build in an idle process; at most 1.1 s, then the threshold in force,
    /// which may still change).
    pub(crate) fn settled(self) -> Duration {
        match self {
            Threshold::Set(d) => d,
            Threshold::Measured(kind) => {
                crate::idle::threshold_for(slot(kind).settled(SETTLE_LIMIT))
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn the_prior_holds_until_the_measurement_is_published_and_start_does_not_wait_for_it() {
        static SLOT: Slot = Slot::new();
        let (release, held) = mpsc::channel::<()>();
        let t = Instant::now();
        SLOT.start(move || {
            held.recv().ok();
            Some(Duration::from_micros(7))
        });
        // Returned with the measurement held: nothing waited for it.
        assert!(!SLOT.measured());
        assert_eq!(SLOT.latency(), PRIOR);
        assert!(t.elapsed() < Duration::from_secs(5));
        // A second start is no second measurement.
        SLOT.start(|| Some(Duration::from_secs(1)));
        release.send(()).unwrap();
        assert_eq!(SLOT.settled(Duration::from_secs(30)), Duration::from_micros(7));
        assert!(SLOT.measured());
    }

    #[test]
    fn a_failed_measurement_publishes_the_prior() {
        static SLOT: Slot = Slot::new();
        SLOT.start(|| None);
        assert_eq!(SLOT.settled(Duration::from_secs(30)), PRIOR);
        assert!(SLOT.measured());
    }

    #[test]
    fn a_busy_thread_makes_the_process_not_calm() {
        let calm = Calm::new();
        // 50 ms of CPU: more than a tenth of the wall time it takes, however loaded the machine
        // (it would take over half a second to pass for idle).
        let thread_cpu = || {
            let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
            Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
        };
        let start = thread_cpu();
        let t = Instant::now();
        while thread_cpu() - start < Duration::from_millis(50)
            && t.elapsed() < Duration::from_secs(5)
        {
            std::hint::spin_loop();
        }
        if t.elapsed() >= Duration::from_millis(500) {
            eprintln!("skipped: 50 ms of CPU took {:?} of wall time here", t.elapsed());
            return;
        }
        assert_eq!(calm.look(), Some(false));
    }

    #[test]
    fn a_set_threshold_is_not_measured() {
        let t = Threshold::Set(Duration::from_micros(123));
        assert_eq!(t.get(), Duration::from_micros(123));
        assert_eq!(t.settled(), Duration::from_micros(123));
    }
}
