//! The runtimes [`Job::run`](crate::Job::run) keeps between calls, by the settings they were
//! built with, so that a program that runs job after job the way the crate's first example
//! does (`Job::new(app).run()`) pays for building a runtime once, not at every job.
//!
//! Why: building a runtime (threads started, pinned, their heaps made) and dropping it
//! (threads joined) took 130-170 us a job after the process's first (4 ms); a job on a 64 x 64
//! matrix takes 45 us on a runtime kept by its caller, and rayon's global pool, which
//! `par_iter` uses without being asked, keeps its threads the same way. A program that wants
//! its runtime's life in its own hands builds one and calls [`Job::run_on`](crate::Job::run_on).
//!
//! Invariants:
//! - A runtime is in the list only while no job runs on it: [`take`] removes it for the job's
//!   run, [`give_back`] returns it after a run that ended without an error. One that failed (a
//!   panicking handler, a crashed worker) is dropped: events of its aborted run may be queued.
//!   Two threads running jobs with the same settings at once each get a runtime of their own.
//! - At most [`MAX_IDLE`] idle runtimes per settings and [`MAX_SETTINGS`] settings are kept
//!   (the least recently used settings go first); runtimes are dropped outside the lock (a
//!   drop joins the runtime's threads).
//! - Kept runtimes live until the process exits: their workers sleep between jobs, woken by
//!   the next run.

use std::sync::{Mutex, MutexGuard};

use ochre::{Config, Runtime};

/// How a [`Job`](crate::Job) asks its runtime to be built.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Settings {
    pub(crate) workers: Option<usize>,
    pub(crate) pin: bool,
    pub(crate) config: Option<Config>,
}

impl Settings {
    fn build(&self) -> Result<Runtime, ochre::Error> {
        let mut b = Runtime::builder().pin(self.pin);
        if let Some(w) = self.workers {
            b = b.workers(w);
        }
        if let Some(c) = &self.config {
            b = b.config(c.clone());
        }
        // After the configuration: a panicking handler aborts the job's run.
        b.abort_on_panic(true).build()
    }
}

/// Idle runtimes kept per settings.
const MAX_IDLE: usize = 2;
/// Settings whose runtimes are kept.
const MAX_SETTINGS: usize = 8;

/// The runtimes of one settings.
struct Kept {
    settings: Settings,
    idle: Vec<Runtime>,
    /// Runtimes built for these settings (a count for tests).
    built: usize,
}

/// Kept runtimes, the most recently used settings last.
static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

fn lock() -> MutexGuard<'static, Vec<Kept>> {
    KEPT.lock().unwrap_or_else(|e| e.into_inner())
}

/// A runtime for `settings`: an idle kept one, or a new one.
pub(crate) fn take(settings: &Settings) -> Result<Runtime, ochre::Error> {
    {
        let mut kept = lock();
        if let Some(i) = kept.iter().position(|k| k.settings == *settings) {
            // The most recently used settings go last.
            let mut k = kept.remove(i);
            let rt = k.idle.pop();
            kept.push(k);
            if let Some(rt) = rt {
                return Ok(rt);
            }
        }
    }
    // Built outside the lock: milliseconds the first time in a process.
    let rt = settings.build()?;
    let evicted = {
        let mut kept = lock();
        match kept.iter_mut().find(|k| k.settings == *settings) {
            Some(k) => {
                k.built += 1;
                None
            }
            None => {
                kept.push(Kept { settings: settings.clone(), idle: Vec::new(), built: 1 });
                (kept.len() > MAX_SETTINGS).then(|| kept.remove(0))
            }
        }
    };
    drop(evicted);
    Ok(rt)
}

/// Returns `rt`, built for `settings`, after a run that ended without an error; dropped if
/// enough runtimes of these settings are kept already.
pub(crate) fn give_back(settings: &Settings, rt: Runtime) {
    let extra = {
        let mut kept = lock();
        match kept.iter_mut().find(|k| k.settings == *settings) {
            Some(k) if k.idle.len() < MAX_IDLE => {
                k.idle.push(rt);
                None
            }
            _ => Some(rt),
        }
    };
    drop(extra);
}

/// Runtimes built so far for `settings`.
#[cfg(test)]
fn built(settings: &Settings) -> usize {
    lock().iter().find(|k| k.settings == *settings).map_or(0, |k| k.built)
}

#[cfg(test)]
mod tests {
    use std::ops::Range;
    use std::sync::{Arc, Barrier};

    use super::*;
    use crate::{Emitter, Job, MapReduce};

    /// Counts its bytes; waits at `meet` in every map task if given; panics on a 0 byte.
    struct Bytes {
        data: Vec<u8>,
        meet: Option<Arc<Barrier>>,
    }

    impl MapReduce for Bytes {
        type Split = Range<usize>;
        type Key = u8;
        type Value = u64;
        fn split(&self, _: usize) -> Vec<Range<usize>> {
            crate::byte_ranges(self.data.len(), self.data.len().max(1))
        }
        fn map(&self, r: &Range<usize>, out: &mut Emitter<'_, Self>) {
            if let Some(b) = &self.meet {
                b.wait();
            }
            for &b in &self.data[r.clone()] {
                assert!(b != 0, "a zero byte");
                out.emit(b, 1);
            }
        }
        fn combine(&self, a: &mut u64, v: u64) {
            *a += v;
        }
    }

    /// Settings no other test uses (each test its own batch size), so that counts are theirs.
    fn job(data: &[u8], meet: Option<Arc<Barrier>>, batch: usize) -> (Job<Bytes>, Settings) {
        let config = Config::default().batch_size(batch);
        let job = Job::new(Bytes { data: data.to_vec(), meet }).workers(2).pin(false);
        let job = job.config(config);
        let settings = job.settings();
        (job, settings)
    }

    #[test]
    fn jobs_run_one_after_another_share_one_runtime() {
        let (j, settings) = job(b"abca", None, 29);
        for _ in 0..3 {
            assert_eq!(j.run().unwrap().pairs, vec![(b'a', 2), (b'b', 1), (b'c', 1)]);
        }
        assert_eq!(built(&settings), 1);
    }

    #[test]
    fn jobs_run_at_once_get_a_runtime_each() {
        // Both maps wait for each other: on one runtime the second job could not start.
        let meet = Arc::new(Barrier::new(2));
        let (j, settings) = job(b"xy", Some(meet), 27);
        let j = Arc::new(j);
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let j = j.clone();
                std::thread::spawn(move || j.run().map(|o| o.pairs))
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap().unwrap(), vec![(b'x', 1), (b'y', 1)]);
        }
        assert_eq!(built(&settings), 2);
    }

    #[test]
    fn a_failed_job_drops_its_runtime() {
        let (bad, settings) = job(b"a\0", None, 25);
        assert!(bad.run().is_err());
        let (good, _) = job(b"aa", None, 25);
        assert_eq!(good.run().unwrap().pairs, vec![(b'a', 2)]);
        assert_eq!(good.run().unwrap().pairs, vec![(b'a', 2)]);
        assert_eq!(built(&settings), 2, "the failed job's runtime was not reused");
    }
}
