//! Peer runtimes set up the same way as ochre: the same number of worker threads, pinned to the
//! same CPUs, so that ratios compare schedulers and not placement. Whatever drives a peer (the
//! producer of producer-consumer) runs on those CPUs too, as ochre's runs on its worker 0: a
//! task of the peer's runtime, or a thread pinned with worker 0; never a thread of its own on a
//! free CPU (a channel-fed pool measured twice as fast at one worker that way).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ochre::topology;

/// The CPUs worker `i` of `n` is pinned to: the `i`-th allowed CPU, round robin.
pub fn cpu_for(i: usize) -> Option<usize> {
    let cpus = process_cpus();
    if cpus.is_empty() {
        None
    } else {
        Some(cpus[i % cpus.len()])
    }
}

/// The CPUs the benchmarks may use: the affinity of the thread that first asks (the one making
/// the benchmark `Options`, else the first thread pinned "as worker i"), kept. Read again from a
/// thread already pinned, or spawned by one (a thread inherits its creator's affinity), it would
/// be that one CPU, and every "worker `i`" would land on it.
pub(crate) fn process_cpus() -> &'static [usize] {
    static CPUS: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    CPUS.get_or_init(|| topology::allowed_cpus().unwrap_or_default())
}

/// Pins the calling thread as worker `i` (best effort: a failure leaves it unpinned).
pub fn pin_as(i: usize) {
    if let Some(cpu) = cpu_for(i) {
        let _ = topology::pin_current_thread(cpu);
    }
}

/// A tokio multi-thread runtime with `workers` pinned worker threads.
pub fn tokio_multi_thread(workers: usize) -> Result<tokio::runtime::Runtime, String> {
    tokio_pinned(workers).build().map_err(|e| e.to_string())
}

/// [`tokio_multi_thread`] with its I/O and timer drivers on (sockets, `tokio::time`), as a user's
/// server or timer program builds it (`#[tokio::main]`); the benchmarks above leave them off, so
/// that an idle worker parks on a condition variable, not in `epoll`.
pub fn tokio_multi_thread_with_drivers(workers: usize) -> Result<tokio::runtime::Runtime, String> {
    tokio_pinned(workers).enable_all().build().map_err(|e| e.to_string())
}

/// The builder of a multi-thread runtime whose `workers` threads are pinned as workers 0, 1, ..
fn tokio_pinned(workers: usize) -> tokio::runtime::Builder {
    let next = Arc::new(AtomicUsize::new(0));
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(workers).on_thread_start(move || pin_as(next.fetch_add(1, Ordering::Relaxed)));
    b
}

/// A rayon pool with `workers` pinned threads.
pub fn rayon_pool(workers: usize) -> Result<rayon::ThreadPool, String> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .start_handler(pin_as)
        .build()
        .map_err(|e| e.to_string())
}

/// Runs `f(i)` on `n` pinned threads at once and collects the results.
pub fn on_pinned_threads<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let f = &f;
                s.spawn(move || {
                    pin_as(i);
                    f(i)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("benchmark thread panicked")).collect()
    })
}

/// The `ochre_builds` configurations that use a general allocator for events instead of EMA.
pub const GENERAL_ALLOCATORS: [&str; 4] =
    ["ochre-sysalloc", "ochre-jemalloc", "ochre-mimalloc", "ochre-snmalloc"];

/// Builds one ochre runtime of a benchmarked configuration.
pub type BuildOchre = Box<dyn Fn() -> Result<ochre::Runtime, ochre::Error>>;

/// The ochre configurations the runtime benchmarks compare, each as a way to build it with
/// `workers` workers: `ochre` (default), `ochre-baseline` (libasync-smp), `ochre-sysalloc` (EMA
/// off: events from the global allocator), `ochre-jemalloc`, `ochre-mimalloc`, `ochre-snmalloc`
/// (EMA off, those as the event allocator: the allocator comparison of issue 5, in the same
/// process as the other systems).
pub fn ochre_builds(workers: usize) -> Vec<(&'static str, BuildOchre)> {
    ochre_builds_from(workers, ochre::Config::default())
}

/// [`ochre_builds`] with `config` in place of the default configuration (the baseline stays
/// [`ochre::Config::baseline`]).
pub fn ochre_builds_from(workers: usize, config: ochre::Config) -> Vec<(&'static str, BuildOchre)> {
    use ochre::{Config, Runtime};
    let no_ema = move |c: &Config| Runtime::builder().workers(workers).config(c.clone().ema(false));
    let (c1, c2, c3, c4) = (config.clone(), config.clone(), config.clone(), config.clone());
    vec![
        (
            "ochre",
            Box::new(move || Runtime::builder().workers(workers).config(config.clone()).build()),
        ),
        (
            "ochre-baseline",
            Box::new(move || {
                Runtime::builder().workers(workers).config(Config::baseline()).build()
            }),
        ),
        ("ochre-sysalloc", Box::new(move || no_ema(&c1).build())),
        (
            "ochre-jemalloc",
            Box::new(move || no_ema(&c2).event_allocator(&tikv_jemallocator::Jemalloc).build()),
        ),
        (
            "ochre-mimalloc",
            Box::new(move || no_ema(&c3).event_allocator(&mimalloc::MiMalloc).build()),
        ),
        (
            "ochre-snmalloc",
            Box::new(move || no_ema(&c4).event_allocator(&snmalloc_rs::SnMalloc).build()),
        ),
    ]
}

/// One sample on a runtime built for it: `run(rt, size / 8)` first as a warm-up (result
/// dropped), then `run(rt, size)`, the sample. Why a runtime per sample: an instance keeps its
/// draw of memory layout (thread stacks, heap addresses) for life, and on ping-pong, where an
/// event costs ~16 ns, one instance in six to ten here ran 5-15% slower than the others through
/// all of its runs; with one instance per sample the median is over instances, and two
/// configurations compared are not two single draws. The build and the warm-up are outside the
/// measure.
pub fn on_fresh_runtime(
    build: &dyn Fn() -> Result<ochre::Runtime, ochre::Error>,
    size: u64,
    mut run: impl FnMut(&ochre::Runtime, u64) -> Result<f64, String>,
) -> Result<f64, String> {
    let rt = build().map_err(|e| e.to_string())?;
    run(&rt, (size / 8).max(1))?;
    run(&rt, size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn workers_are_spread_over_the_cpus_even_from_a_pinned_thread() {
        let all = topology::allowed_cpus().unwrap();
        if all.len() < 2 {
            return;
        }
        // A pinned thread that pins the threads it spawns "as worker i" (the caller of
        // `on_pinned_threads` may be one): they must still spread over every CPU.
        let spread = std::thread::spawn(|| {
            let first = process_cpus().to_vec();
            topology::pin_current_thread(first[0]).unwrap();
            on_pinned_threads(first.len(), |_| topology::allowed_cpus().unwrap())
        })
        .join()
        .unwrap();
        let expect: Vec<Vec<usize>> = process_cpus().iter().map(|&c| vec![c]).collect();
        assert_eq!(spread, expect);
    }

    #[test]
    fn a_fresh_runtime_per_sample_is_warmed_up_then_measured() {
        let built = AtomicUsize::new(0);
        let build = || {
            built.fetch_add(1, Ordering::Relaxed);
            ochre::Runtime::builder().workers(2).pin(false).build()
        };
        let seen = RefCell::new(Vec::new());
        let sample = |size: u64| {
            on_fresh_runtime(&build, size, |rt, n| {
                // The warm-up ran on this same instance, and nothing else did.
                let phase = if n == size { "measure" } else { "warm" };
                seen.borrow_mut().push((phase, rt.stats()[0].events_run));
                rt.run(ochre::Color(0), || {}).map_err(|e| e.to_string())?;
                Ok(n as f64)
            })
        };
        assert_eq!(sample(16), Ok(16.0));
        assert_eq!(sample(24), Ok(24.0));
        assert_eq!(built.load(Ordering::Relaxed), 2, "one runtime per sample");
        assert_eq!(*seen.borrow(), [("warm", 0), ("measure", 1), ("warm", 0), ("measure", 1)]);
        let failing = on_fresh_runtime(&build, 16, |_, n| {
            if n < 16 {
                Err("warm-up failed".into())
            } else {
                Ok(3.0)
            }
        });
        assert_eq!(failing, Err("warm-up failed".to_string()));
    }
}
