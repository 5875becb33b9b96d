//! A user's divide and conquer, as a newcomer to each library writes it: `fib(n)` where each call
//! above a cutoff splits in two calls and adds their results, below it computes sequentially.
//!
//! - ochre: a new plain color per call (`Color(next id)`, from a process-wide counter), posted
//!   by its parent; a call waiting for its halves is an `Arc<Mutex<Join>>`, and each half posts
//!   its result to its parent's color, whose event adds it (the last one answers upwards); the
//!   root's result leaves through a channel after the run.
//! - tokio-mt: a spawned task per call, awaiting both handles (`block_on` of the root).
//! - rayon: `rayon::join` of the two halves (no task per call: rayon runs a half inline unless
//!   another thread steals it).
//!
//! Every system's result is checked against the sequential one. A tree of fresh colors is what
//! stresses placement: each new color is hashed to a home, so half of every call's halves go to
//! the other worker, and the tree's last calls and its answers run wherever their colors' homes
//! are. `examples/fib_probe` is the diagnostic of this program (per-worker counters, options).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use ochre::{Color, RunReport, Runtime};

/// `fib(n)`, sequentially, the exponential way (each call two calls): the leaves' work.
pub fn seq(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        seq(n - 1) + seq(n - 2)
    }
}

/// The calls a tree of `fib(n)` with leaves at `cutoff` makes (split calls and leaves), the
/// unit of the benchmark's rate.
pub fn calls(n: u64, cutoff: u64) -> u64 {
    if n <= cutoff {
        1
    } else {
        1 + calls(n - 1, cutoff) + calls(n - 2, cutoff)
    }
}

/// The next color a call takes: fresh for the process, as a user's counter would hand them out.
static NEXT: AtomicU64 = AtomicU64::new(1);

fn fresh_color() -> Color {
    Color::plain(NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A call waiting for its two halves.
struct Join {
    sum: u64,
    answered: u32,
    /// Where the result goes (`None` once sent).
    to: Option<Upward>,
}

/// Where a call's result goes: its parent's color and join, or the caller's channel (the root).
enum Upward {
    Parent(Color, Arc<Mutex<Join>>),
    Caller(mpsc::Sender<u64>),
}

impl Upward {
    fn send(self, v: u64) {
        match self {
            Upward::Parent(color, join) => ochre::post(color, move || answer(join, v)),
            // The caller waits on the other end for as long as the run lasts.
            Upward::Caller(tx) => _ = tx.send(v),
        }
    }
}

/// Adds a half's result `v` to `join` (in the join's own color); the second answer sends the
/// sum upwards.
fn answer(join: Arc<Mutex<Join>>, v: u64) {
    let mut j = join.lock().expect("no answer panicked");
    j.sum += v;
    j.answered += 1;
    if j.answered == 2 {
        let sum = j.sum;
        j.to.take().expect("a join answers once").send(sum);
    }
}

/// The call `fib(n)` in color `me`, its result going `to`.
fn call(n: u64, cutoff: u64, me: Color, to: Upward) {
    if n <= cutoff {
        to.send(seq(n));
        return;
    }
    let join = Arc::new(Mutex::new(Join { sum: 0, answered: 0, to: Some(to) }));
    for k in [1, 2] {
        let (c, up) = (fresh_color(), Upward::Parent(me, join.clone()));
        ochre::post(c, move || call(n - k, cutoff, c, up));
    }
}

/// `fib(n)` with leaves at `cutoff` on ochre (module doc): the result and the run's report.
pub fn on_ochre(rt: &Runtime, n: u64, cutoff: u64) -> Result<(u64, RunReport), String> {
    let (tx, rx) = mpsc::channel();
    let root = fresh_color();
    let report = rt
        .run(root, move || call(n, cutoff, root, Upward::Caller(tx)))
        .map_err(|e| e.to_string())?;
    let report = report.check().map_err(|e| e.to_string())?;
    let got = rx.try_recv().map_err(|_| "the run ended without the root's answer".to_string())?;
    Ok((got, report))
}

/// `fib(n)` with leaves at `cutoff` on tokio (module doc).
pub fn on_tokio(rt: &tokio::runtime::Runtime, n: u64, cutoff: u64) -> Result<u64, String> {
    rt.block_on(tokio_call(n, cutoff)).map_err(|e| e.to_string())
}

type BoxedCall = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<u64, tokio::task::JoinError>> + Send>,
>;

fn tokio_call(n: u64, cutoff: u64) -> BoxedCall {
    Box::pin(async move {
        if n <= cutoff {
            return Ok(seq(n));
        }
        let a = tokio::spawn(tokio_call(n - 1, cutoff));
        let b = tokio::spawn(tokio_call(n - 2, cutoff));
        Ok(a.await?? + b.await??)
    })
}

/// `fib(n)` with leaves at `cutoff` on rayon (module doc).
pub fn on_rayon(pool: &rayon::ThreadPool, n: u64, cutoff: u64) -> u64 {
    fn fib(n: u64, cutoff: u64) -> u64 {
        if n <= cutoff {
            return seq(n);
        }
        let (a, b) = rayon::join(|| fib(n - 1, cutoff), || fib(n - 2, cutoff));
        a + b
    }
    pool.install(|| fib(n, cutoff))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_system_adds_up_the_whole_tree() {
        let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
        let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        // A tree, a tree whose root is a leaf, and a tree of one split.
        for (n, cutoff) in [(20, 8), (10, 12), (9, 8)] {
            let want = seq(n);
            let (got, report) = on_ochre(&rt, n, cutoff).unwrap();
            assert_eq!(got, want, "fib({n}) cutoff {cutoff} on ochre");
            // The root's event, then each other call's event and its answer to its parent.
            let events = 2 * calls(n, cutoff) - 1;
            assert_eq!(report.total().events_run, events, "fib({n}) cutoff {cutoff}");
            assert_eq!(on_tokio(&tokio, n, cutoff).unwrap(), want);
            assert_eq!(on_rayon(&pool, n, cutoff), want);
        }
        assert_eq!(calls(9, 8), 3);
        assert_eq!(calls(10, 12), 1);
    }
}
