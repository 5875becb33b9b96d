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
//! The calibration is made when the process's first runtime is built ([`calibrate`], from
//! `Builder::build`), not at the first reading: it takes about 0.6 ms here (`quanta::Clock::new`,
//! 630 us the first time in a process, five processes), and read first by a worker's first
//! watched turn it held that worker for as long in the process's first run, where a user's sum
//! of 3907 chunks took 5.7 ms (2.1-2.8 later).

#[cfg(not(any(miri, loom)))]
mod imp {
    use std::sync::OnceLock;

    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();

    fn clock() -> &'static quanta::Clock {
        CLOCK.get_or_init(quanta::Clock::new)
    }

    /// Calibrates the clock, if not yet done in this process.
    pub(crate) fn calibrate() {
        clock();
    }

    /// Whether the clock is calibrated.
    #[cfg(test)]
    pub(crate) fn calibrated() -> bool {
        CLOCK.get().is_some()
    }

    /// A reading, in the clock's own ticks.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Stamp(u64);

    /// Now.
    #[inline]
    pub(crate) fn now() -> Stamp {
        Stamp(clock().raw())
    }

    /// Nanoseconds since `start`.
    #[inline]
    pub(crate) fn ns_since(start: Stamp) -> u64 {
        let c = clock();
        c.delta_as_nanos(start.0, c.raw())
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
    fn building_a_runtime_calibrates_the_clock_before_any_run() {
        // Meaningful run alone (`cargo test -p ochre --lib building_a_runtime`): other tests of
        // the process may have calibrated it first, never uncalibrated it.
        let rt = crate::Runtime::builder().workers(1).pin(false).build().expect("runtime");
        assert!(imp::calibrated(), "calibrated by the build, not left to a worker's first turn");
        drop(rt);
    }

    #[test]
    fn a_stamp_measures_what_the_os_clock_measures() {
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
