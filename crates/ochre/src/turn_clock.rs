//! The clock of a worker's turn timers: the time-stamp counter where the CPU's is invariant
//! (`quanta`, calibrated against the OS clock once per process), else the OS clock.
//!
//! Why: a color's first turn on a worker is timed (a *watched* turn, `worker`), so a program
//! that makes a color per task (a divide and conquer, a job's chunks) reads the clock twice a
//! task. `clock_gettime` took 22 ns a read on this project's virtual machines, `rdtsc` 8.6, and
//! `perf` found 7-8% of a fork-join's worker time (`fib_probe`, leaves of `seq(10)`) in
//! `__vdso_clock_gettime`. Readings are raw ticks, scaled only for the difference at a turn's
//! end. Under Miri and loom, which cannot execute `rdtsc`, the OS clock.
//!
//! The calibration is started when the process's first runtime is built ([`calibrate`], from
//! `Builder::build`), on a thread of its own: it takes about 0.6 ms here (`quanta::Clock::new`,
//! 630 us the first time in a process, five processes). Read first by a worker's first watched
//! turn, it held that worker for as long in the process's first run (a user's sum of 3907
//! chunks took 5.7 ms, 2.1-2.8 later); made by the build, it held the build (a quarter of a
//! first build's 1.3 ms once the wake-up measurement left it, `wakeup_latency`). Until it is
//! done, readings are the OS clock's, marked as such ([`Stamp`]'s top bit: a time-stamp counter
//! reaches it after a century): a turn timed across the calibration's end is measured on the
//! clock it started on.

#[cfg(not(any(miri, loom)))]
mod imp {
    use std::sync::{Once, OnceLock};
    use std::time::Instant;

    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
    /// The origin of readings taken on the OS clock before the calibration is done.
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    /// Marks a reading of the OS clock (nanoseconds since [`ORIGIN`]).
    const OS: u64 = 1 << 63;

    /// Starts the calibration on a thread of its own, if not started yet in this process
    /// (made here if no thread can be started).
    pub(crate) fn calibrate() {
        static STARTED: Once = Once::new();
        let here = crate::topology::current_cpu();
        let away = move || {
            // Away from the builder's CPU: a new thread starts beside its parent, and this
            // one's 0.6 ms loop held the build there as long.
            let others: Vec<usize> = crate::topology::allowed_cpus()
                .unwrap_or_default()
                .into_iter()
                .filter(|&c| c != here)
                .collect();
            if !others.is_empty() {
                let _ = crate::topology::allow_current_thread(&others);
            }
            let _ = rustix::process::nice(19);
            CLOCK.get_or_init(quanta::Clock::new);
        };
        crate::background::start_once(&STARTED, "ochre-clock", away, || {
            CLOCK.get_or_init(quanta::Clock::new);
        });
    }

    /// Whether the clock is calibrated.
    #[cfg(test)]
    pub(crate) fn calibrated() -> bool {
        CLOCK.get().is_some()
    }

    fn os_ns() -> u64 {
        let ns = ORIGIN.get_or_init(Instant::now).elapsed().as_nanos();
        (ns.min(u128::from(OS - 1))) as u64
    }

    /// A reading: the time-stamp counter's raw ticks, or the OS clock's nanoseconds marked
    /// [`OS`] before the calibration is done.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Stamp(u64);

    /// Now.
    #[inline]
    pub(crate) fn now() -> Stamp {
        match CLOCK.get() {
            Some(c) => Stamp(c.raw()),
            None => Stamp(OS | os_ns()),
        }
    }

    /// Nanoseconds since `start`, on the clock it was read on.
    #[inline]
    pub(crate) fn ns_since(start: Stamp) -> u64 {
        match CLOCK.get() {
            Some(c) if start.0 & OS == 0 => c.delta_as_nanos(start.0, c.raw()),
            _ => os_ns().saturating_sub(start.0 & !OS),
        }
    }

    /// A reading on the OS clock, as taken before the calibration.
    #[cfg(test)]
    pub(crate) fn os_now() -> Stamp {
        Stamp(OS | os_ns())
    }
}

#[cfg(any(miri, loom))]
mod imp {
    use std::time::Instant;

    /// Nothing to calibrate: the OS clock.
    pub(crate) fn calibrate() {}

    /// A reading.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Stamp(Instant);

    /// Now.
    pub(crate) fn now() -> Stamp {
        Stamp(Instant::now())
    }

    /// Nanoseconds since `start`.
    pub(crate) fn ns_since(start: Stamp) -> u64 {
        start.0.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64
    }
}

pub(crate) use imp::{calibrate, now, ns_since, Stamp};

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    #[cfg(not(miri))]
    fn building_a_runtime_calibrates_the_clock_without_a_reading() {
        // Meaningful run alone (`cargo test -p ochre --lib building_a_runtime`): other tests of
        // the process may have calibrated it first, never uncalibrated it.
        let rt = crate::Runtime::builder().workers(1).pin(false).build().expect("runtime");
        let t = Instant::now();
        while !imp::calibrated() && t.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(imp::calibrated(), "started by the build, not left to a worker's first turn");
        drop(rt);
    }

    #[test]
    #[cfg(not(miri))]
    fn a_stamp_read_before_the_calibration_measures_on_the_os_clock() {
        calibrate();
        let (t0, s0) = (Instant::now(), imp::os_now());
        std::thread::sleep(Duration::from_millis(20));
        let (ours, os) = (ns_since(s0), t0.elapsed().as_nanos() as u64);
        // Both on the OS clock: ours started after t0 and ended before the second reading.
        assert!(ours <= os, "{ours} ns against the OS clock's {os}");
        assert!(ours >= 20_000_000, "{ours} ns for a sleep of 20 ms");
    }

    #[test]
    fn a_stamp_measures_what_the_os_clock_measures() {
        // On the calibrated clock: started, and waited for.
        calibrate();
        #[cfg(not(miri))]
        {
            let t = Instant::now();
            while !imp::calibrated() && t.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(imp::calibrated());
        }
        // Ours is read second at the start and first at the end: its interval lies within the
        // OS clock's, however long the thread waits between two reads (a busy machine), and
        // covers the sleep; the slack is the calibration's error.
        let (t0, s0) = (Instant::now(), now());
        std::thread::sleep(Duration::from_millis(20));
        let (ours, os) = (ns_since(s0), t0.elapsed().as_nanos() as u64);
        assert!(ours <= os + os / 50, "{ours} ns against the OS clock's {os}");
        assert!(ours >= 20_000_000 - 20_000_000 / 50, "{ours} ns for a sleep of 20 ms");
    }
}
