//! The process's once-only work, started by a build on a thread of its own and waited for by
//! nobody: the registration stand-ins need (`stand_in`), the turn timers' clock calibration
//! (`turn_clock`), the wake-up latency's measurement (`wakeup_latency`). Each made by the
//! build, they held a process's first build 16-35 ms, then 4.1-4.8 ms (`startup_probe`'s
//! doc has the figures); here they leave it 0.6-1.0 ms.
//!
//! Invariant: each job runs once per process (its `Once`), on a named thread; if no thread can
//! be started, `instead` runs on the caller's (it must not block for long: the caller is a
//! build), so a job's waiters always get an answer.

use std::sync::Once;

/// Runs `job` on a thread named `name`, the first time `once` is passed here in the process;
/// `instead`, on this thread, if no thread can be started.
pub(crate) fn start_once<J, I>(once: &'static Once, name: &str, job: J, instead: I)
where
    J: FnOnce() + Send + 'static,
    I: FnOnce(),
{
    once.call_once(|| {
        if std::thread::Builder::new().name(name.into()).spawn(job).is_err() {
            instead();
        }
    });
}
