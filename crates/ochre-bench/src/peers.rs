//! Peer runtimes set up the same way as ochre: the same number of worker threads, pinned to the
//! same CPUs, so that ratios compare schedulers and not placement.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ochre::topology;

/// The CPUs worker `i` of `n` is pinned to: the `i`-th allowed CPU, round robin.
pub fn cpu_for(i: usize) -> Option<usize> {
    let cpus = topology::allowed_cpus().ok()?;
    if cpus.is_empty() {
        None
    } else {
        Some(cpus[i % cpus.len()])
    }
}

/// Pins the calling thread as worker `i` (best effort: a failure leaves it unpinned).
pub fn pin_as(i: usize) {
    if let Some(cpu) = cpu_for(i) {
        let _ = topology::pin_current_thread(cpu);
    }
}

/// A tokio multi-thread runtime with `workers` pinned worker threads.
pub fn tokio_multi_thread(workers: usize) -> Result<tokio::runtime::Runtime, String> {
    let next = Arc::new(AtomicUsize::new(0));
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .on_thread_start(move || pin_as(next.fetch_add(1, Ordering::Relaxed)))
        .build()
        .map_err(|e| e.to_string())
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

/// The ochre configurations the runtime benchmarks compare, built with `workers` workers:
/// `ochre` (default), `ochre-baseline` (libasync-smp), `ochre-sysalloc` (EMA off: events from the
/// global allocator), `ochre-jemalloc`, `ochre-mimalloc`, `ochre-snmalloc` (EMA off, those as the event
/// allocator: the allocator comparison of issue 5, in the same process as the other systems).
pub fn ochre_variants(workers: usize) -> Vec<(&'static str, Result<ochre::Runtime, ochre::Error>)> {
    use ochre::{Config, Runtime};
    let no_ema = || Runtime::builder().workers(workers).config(Config::default().ema(false));
    vec![
        ("ochre", Runtime::builder().workers(workers).build()),
        ("ochre-baseline", Runtime::builder().workers(workers).config(Config::baseline()).build()),
        ("ochre-sysalloc", no_ema().build()),
        ("ochre-jemalloc", no_ema().event_allocator(&tikv_jemallocator::Jemalloc).build()),
        ("ochre-mimalloc", no_ema().event_allocator(&mimalloc::MiMalloc).build()),
        ("ochre-snmalloc", no_ema().event_allocator(&snmalloc_rs::SnMalloc).build()),
    ]
}
