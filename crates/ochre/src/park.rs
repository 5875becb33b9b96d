//! How one worker thread sleeps and how another wakes it.
//!
//! A [`Parker`] is a binary semaphore with a sticky token: `unpark` before `park` makes the next
//! `park` return at once, so a wake-up sent between a worker's last look at its inbox and its call
//! to `park` is never lost. `park` may also return spuriously; callers re-check their condition.
//! The `sleeping` flag that decides *whether* to call `unpark` lives in `idle`.
//!
//! Three mechanisms, the [`Wakeup`] setting: a futex word (default), a condition variable, and a
//! pipe polled with `poll` (libasync-smp). Under `cfg(loom)` only the condition variable exists,
//! since loom cannot model system calls.

use std::time::Duration;
#[cfg(not(loom))]
use std::time::Instant;

use crate::config::Wakeup;
use crate::sync::{lock, Condvar, Mutex};
#[cfg(not(loom))]
use crate::sync::{AtomicU32, Ordering};

/// A sleeping place for one thread.
pub(crate) enum Parker {
    #[cfg(not(loom))]
    Futex(FutexParker),
    Condvar(CondvarParker),
    #[cfg(not(loom))]
    Pipe(PipeParker),
}

impl Parker {
    pub(crate) fn new(kind: Wakeup) -> std::io::Result<Parker> {
        Ok(match kind {
            #[cfg(not(loom))]
            Wakeup::Futex => Parker::Futex(FutexParker::new()),
            #[cfg(not(loom))]
            Wakeup::Pipe => Parker::Pipe(PipeParker::new()?),
            #[cfg(loom)]
            Wakeup::Futex | Wakeup::Pipe => Parker::Condvar(CondvarParker::new()),
            Wakeup::Condvar => Parker::Condvar(CondvarParker::new()),
        })
    }

    /// Sleeps until unparked (or spuriously), or until `timeout` passes.
    pub(crate) fn park(&self, timeout: Option<Duration>) {
        match self {
            #[cfg(not(loom))]
            Parker::Futex(p) => p.park(timeout),
            Parker::Condvar(p) => p.park(timeout),
            #[cfg(not(loom))]
            Parker::Pipe(p) => p.park(timeout),
        }
    }

    /// Wakes the sleeper, or makes its next `park` return at once.
    pub(crate) fn unpark(&self) {
        match self {
            #[cfg(not(loom))]
            Parker::Futex(p) => p.unpark(),
            Parker::Condvar(p) => p.unpark(),
            #[cfg(not(loom))]
            Parker::Pipe(p) => p.unpark(),
        }
    }
}

/// States of the futex word.
#[cfg(not(loom))]
const EMPTY: u32 = 0;
#[cfg(not(loom))]
const NOTIFIED: u32 = 1;
#[cfg(not(loom))]
const PARKED: u32 = 2;

/// A futex-backed parker: EMPTY -> PARKED (sleeping) -> NOTIFIED -> EMPTY (token consumed).
#[cfg(not(loom))]
pub(crate) struct FutexParker {
    state: AtomicU32,
}

#[cfg(not(loom))]
impl FutexParker {
    fn new() -> Self {
        FutexParker { state: AtomicU32::new(EMPTY) }
    }

    fn park(&self, timeout: Option<Duration>) {
        // Consume a pending token without sleeping. Acquire pairs with `unpark`'s Release swap.
        if self
            .state
            .compare_exchange(NOTIFIED, EMPTY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        if self.state.compare_exchange(EMPTY, PARKED, Ordering::Acquire, Ordering::Acquire).is_err()
        {
            // A token arrived between the two exchanges.
            self.state.store(EMPTY, Ordering::Relaxed);
            return;
        }
        let ts = timeout.map(|d| rustix::thread::futex::Timespec {
            tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
            tv_nsec: i64::from(d.subsec_nanos()),
        });
        // The kernel sleeps only while the word is still PARKED, so an `unpark` that already
        // stored NOTIFIED makes this return at once. Errors (EINTR, EAGAIN, ETIMEDOUT) are all
        // "wake up and re-check", which the caller does anyway.
        let _ = rustix::thread::futex::wait(
            &self.state,
            rustix::thread::futex::Flags::PRIVATE,
            PARKED,
            ts.as_ref(),
        );
        // Whatever woke us, leave the word EMPTY: a token that came is consumed by this return.
        self.state.swap(EMPTY, Ordering::Acquire);
    }

    fn unpark(&self) {
        // Release pairs with `park`'s Acquire: what the waker wrote before is seen after waking.
        if self.state.swap(NOTIFIED, Ordering::Release) == PARKED {
            let _ =
                rustix::thread::futex::wake(&self.state, rustix::thread::futex::Flags::PRIVATE, 1);
        }
    }
}

/// A condition-variable parker: a `notified` flag under a mutex.
pub(crate) struct CondvarParker {
    notified: Mutex<bool>,
    cond: Condvar,
}

impl CondvarParker {
    fn new() -> Self {
        CondvarParker { notified: Mutex::new(false), cond: Condvar::new() }
    }

    fn park(&self, timeout: Option<Duration>) {
        let mut notified = lock(&self.notified);
        if !*notified {
            notified = match timeout {
                #[cfg(not(loom))]
                Some(d) => match self.cond.wait_timeout(notified, d) {
                    Ok((g, _)) => g,
                    Err(e) => e.into_inner().0,
                },
                _ => self.cond.wait(notified).unwrap_or_else(|e| e.into_inner()),
            };
        }
        *notified = false;
    }

    fn unpark(&self) {
        *lock(&self.notified) = true;
        self.cond.notify_one();
    }
}

/// A pipe parker, libasync-smp's: sleep in `poll` on the read end, wake by writing a byte.
#[cfg(not(loom))]
pub(crate) struct PipeParker {
    read: std::os::fd::OwnedFd,
    write: std::os::fd::OwnedFd,
}

#[cfg(not(loom))]
impl PipeParker {
    fn new() -> std::io::Result<Self> {
        use rustix::pipe::{pipe_with, PipeFlags};
        let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        Ok(PipeParker { read, write })
    }

    fn park(&self, timeout: Option<Duration>) {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&self.read, PollFlags::IN)];
        let ts = timeout.map(|d| Timespec {
            tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
            tv_nsec: i64::from(d.subsec_nanos()),
        });
        let _ = poll(&mut fds, ts.as_ref());
        // Drain the pipe so that the next poll blocks (what libasync-smp did after waking).
        let mut buf = [0u8; 64];
        while let Ok(n) = rustix::io::read(&self.read, &mut buf) {
            if n < buf.len() {
                break;
            }
        }
    }

    fn unpark(&self) {
        // A full pipe (EAGAIN) already holds a wake-up: nothing is lost by ignoring it.
        let _ = rustix::io::write(&self.write, &[1]);
    }
}

/// Measures the one-way wake-up latency of a mechanism: the median time from `unpark` on one
/// thread to the return of `park` on another, over `rounds` round trips.
///
/// The two threads are pinned to two different CPUs when the process may use two, since a
/// wake-up on the waker's own CPU is only a context switch (about 1 µs here, against 25-35 µs
/// across CPUs on this virtual machine) and is not what an idle worker costs; and the sleeper
/// sleeps 500 µs before each wake-up, past the hypervisor's halt-polling window.
#[cfg(not(loom))]
pub fn measure_wakeup(kind: Wakeup, rounds: usize) -> std::io::Result<Duration> {
    measure_wakeup_when(kind, rounds, &|| Some(true))
}

/// [`measure_wakeup`], keeping only the round trips for which `calm` said yes when they
/// started and when they ended (`wakeup_latency`: the process idle meanwhile); the others are
/// made again. `calm` saying `None` gives up: an error.
#[cfg(not(loom))]
pub(crate) fn measure_wakeup_when(
    kind: Wakeup,
    rounds: usize,
    calm: &(dyn Fn() -> Option<bool> + Sync),
) -> std::io::Result<Duration> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    struct Side {
        parker: Parker,
        // Round number the other side last sent; the sleeper re-checks it after every wake.
        seen: AtomicU64,
    }
    fn wait_for(side: &Side, round: u64) {
        while side.seen.load(Ordering::Acquire) < round {
            side.parker.park(Some(Duration::from_millis(100)));
        }
    }
    let cpus = crate::topology::allowed_cpus().unwrap_or_default();
    let pin = |k: usize| {
        if cpus.len() >= 2 {
            let _ = crate::topology::pin_current_thread(cpus[k]);
        }
    };
    let a = Arc::new(Side { parker: Parker::new(kind)?, seen: AtomicU64::new(0) });
    let b = Arc::new(Side { parker: Parker::new(kind)?, seen: AtomicU64::new(0) });
    let rounds = rounds.max(1);
    // What the probe sends the echo when it has its rounds.
    const DONE: u64 = u64::MAX;
    std::thread::scope(|s| -> std::io::Result<Duration> {
        let (a2, b2) = (a.clone(), b.clone());
        let echo = std::thread::Builder::new().name("ochre-wakeup-echo".into()).spawn_scoped(
            s,
            move || {
                pin(1);
                // Round trips until the probe says it has enough (`DONE`).
                for r in 1.. {
                    wait_for(&b2, r);
                    if b2.seen.load(Ordering::Acquire) == DONE {
                        break;
                    }
                    a2.seen.store(r, Ordering::Release);
                    a2.parker.unpark();
                }
            },
        )?;
        let (b3, done) = (b.clone(), |side: &Side| {
            side.seen.store(DONE, Ordering::Release);
            side.parker.unpark();
        });
        let probe = std::thread::Builder::new().name("ochre-wakeup-probe".into()).spawn_scoped(
            s,
            move || {
                pin(0);
                let mut samples = Vec::with_capacity(rounds);
                let mut r = 0;
                while samples.len() < rounds {
                    // Let the echo thread fall asleep for real: a CPU idle for less than the
                    // hypervisor's halt-polling window (KVM's default: up to 200 µs) wakes in
                    // ~1 µs, which is not what a worker idle for a while costs. 500 µs, not the
                    // 1 ms of before: a process's first build waited for these rounds, and five
                    // rounds after sleeps of 1000, 500 and 300 µs measured the same here
                    // (11.3-19.7, 11.5-14.0 and 12.1-17.7 µs, six measurements of each,
                    // alternated; 150 and 50 µs measured 10-15% lower).
                    std::thread::sleep(Duration::from_micros(500));
                    match calm() {
                        Some(true) => {}
                        Some(false) => continue,
                        None => break,
                    }
                    r += 1;
                    let t = Instant::now();
                    b.seen.store(r, Ordering::Release);
                    b.parker.unpark();
                    wait_for(&a, r);
                    let sample = t.elapsed() / 2;
                    match calm() {
                        Some(true) => samples.push(sample),
                        Some(false) => {}
                        None => break,
                    }
                }
                done(&b);
                if samples.len() < rounds {
                    return Err(std::io::Error::other("never calm enough to measure"));
                }
                samples.sort();
                Ok(samples[samples.len() / 2])
            },
        );
        // Without a probe, the echo is told to end: the scope waits for it.
        let probe = probe.inspect_err(|_| done(&b3))?;
        echo.join().map_err(|_| std::io::Error::other("wake-up echo thread panicked"))?;
        probe.join().map_err(|_| std::io::Error::other("wake-up probe thread panicked"))?
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn each_kind() -> [Wakeup; 3] {
        [Wakeup::Futex, Wakeup::Condvar, Wakeup::Pipe]
    }

    #[test]
    fn token_is_sticky() {
        for kind in each_kind() {
            let p = Parker::new(kind).unwrap();
            p.unpark();
            let t = Instant::now();
            p.park(Some(Duration::from_secs(5)));
            assert!(t.elapsed() < Duration::from_secs(4), "{kind:?}: a pending token was lost");
        }
    }

    #[test]
    fn park_times_out() {
        for kind in each_kind() {
            let p = Parker::new(kind).unwrap();
            let t = Instant::now();
            p.park(Some(Duration::from_millis(20)));
            assert!(t.elapsed() >= Duration::from_millis(15), "{kind:?} returned early");
        }
    }

    #[test]
    fn unpark_from_another_thread_wakes_the_sleeper() {
        for kind in each_kind() {
            let p = Arc::new(Parker::new(kind).unwrap());
            let p2 = p.clone();
            let t = Instant::now();
            let waker = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                p2.unpark();
            });
            p.park(Some(Duration::from_secs(10)));
            waker.join().unwrap();
            assert!(t.elapsed() < Duration::from_secs(5), "{kind:?} slept through its wake-up");
        }
    }

    #[test]
    fn a_measurement_keeps_only_the_rounds_made_while_calm() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let calm = AtomicBool::new(false);
        let looks = AtomicUsize::new(0);
        let calmed_at = std::sync::Mutex::new(None);
        let d = std::thread::scope(|s| {
            let m = s.spawn(|| {
                let look = || {
                    looks.fetch_add(1, Ordering::Relaxed);
                    Some(calm.load(Ordering::Acquire))
                };
                let d = measure_wakeup_when(Wakeup::Futex, 3, &look).unwrap();
                (d, Instant::now())
            });
            // Rounds are made meanwhile (the predicate is looked at), and none kept.
            let t = Instant::now();
            while looks.load(Ordering::Relaxed) < 10
                && !m.is_finished()
                && t.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            *calmed_at.lock().unwrap() = Some(Instant::now());
            calm.store(true, Ordering::Release);
            m.join().unwrap()
        });
        let calmed = calmed_at.lock().unwrap().unwrap();
        assert!(d.1 > calmed, "the measurement ended before any round was calm");
        assert!(d.0 > Duration::ZERO && d.0 < Duration::from_secs(1), "{:?}", d.0);
    }

    #[test]
    fn a_measurement_that_gives_up_is_an_error() {
        let looks = std::sync::atomic::AtomicUsize::new(0);
        let look =
            || (looks.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 4).then_some(false);
        assert!(measure_wakeup_when(Wakeup::Futex, 3, &look).is_err());
    }

    #[test]
    fn wakeup_latency_is_measured() {
        for kind in each_kind() {
            let d = measure_wakeup(kind, 5).unwrap();
            assert!(d > Duration::ZERO && d < Duration::from_millis(100), "{kind:?}: {d:?}");
        }
    }
}
