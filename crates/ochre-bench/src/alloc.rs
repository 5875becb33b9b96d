//! Allocator costs (issue 5, thesis §5.2.2-5.2.3): nanoseconds per allocate+free pair of one
//! object, for the two patterns of an event runtime.
//!
//! - `local`: one thread allocates and frees (ping-pong: a core uses what it allocates).
//! - `remote`: a thread pinned on one CPU allocates, a thread pinned on another frees
//!   (producer-consumer: what one core allocates, another uses and frees). Objects travel in
//!   batches of 64 through a bounded channel; the batch vectors are recycled, so the channel adds
//!   the same small cost to every allocator.
//!
//! Systems: `ochre` (EMA: a heap per thread; the producer allocates for the consumer's worker,
//! the consumer's frees go back in batches), `glibc` (the system allocator), `jemalloc`,
//! `mimalloc`, `snmalloc` (built from source by its crate, with the C++ compiler). Lower is better; ratios are to EMA.

use std::alloc::{GlobalAlloc, Layout, System as SystemAlloc};
use std::time::Instant;

use ochre::alloc::Heap;

use crate::harness::{measure_case, BenchReport, Options, System};
use crate::peers;

/// An allocator as this benchmark drives it: one instance per thread.
trait Arena {
    fn alloc(&mut self, l: Layout, dest: usize) -> *mut u8;
    /// # Safety
    /// `p` came from `alloc` (of this arena or, for `remote`, of its peer) with `l`.
    unsafe fn free(&mut self, p: *mut u8, l: Layout);
    /// Hands back anything held for others (EMA's crumbs).
    fn finish(&mut self) {}
}

struct Global<A: GlobalAlloc>(A);

impl<A: GlobalAlloc> Arena for Global<A> {
    #[inline]
    fn alloc(&mut self, l: Layout, _: usize) -> *mut u8 {
        // SAFETY: non-zero size.
        let p = unsafe { self.0.alloc(l) };
        assert!(!p.is_null(), "out of memory");
        p
    }
    #[inline]
    unsafe fn free(&mut self, p: *mut u8, l: Layout) {
        // SAFETY: per the contract.
        unsafe { self.0.dealloc(p, l) }
    }
}

struct Ema(Heap);

impl Arena for Ema {
    #[inline]
    fn alloc(&mut self, l: Layout, dest: usize) -> *mut u8 {
        self.0.alloc(l, dest).expect("EMA serves small layouts").as_ptr()
    }
    #[inline]
    unsafe fn free(&mut self, p: *mut u8, _: Layout) {
        // SAFETY: an EMA object, freed once (per the contract).
        unsafe { self.0.free(std::ptr::NonNull::new_unchecked(p)) }
    }
    fn finish(&mut self) {
        self.0.flush_crumbs();
    }
}

/// ns per pair, one thread.
fn local<A: Arena>(mut a: A, l: Layout, n: usize) -> f64 {
    let t = Instant::now();
    for i in 0..n {
        let p = a.alloc(l, 0);
        // SAFETY: a fresh object of at least one byte.
        unsafe { p.write_volatile(i as u8) };
        // SAFETY: allocated just above.
        unsafe { a.free(std::hint::black_box(p), l) };
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

const BATCH: usize = 64;

/// Receives by spinning: the two threads have a CPU each, and a blocking hand-off would make
/// the figure a measure of futex wake-ups (whichever side is faster keeps blocking), not of
/// the allocators.
fn spin_recv<T>(rx: &crossbeam_channel::Receiver<T>) -> Option<T> {
    loop {
        match rx.try_recv() {
            Ok(v) => return Some(v),
            Err(crossbeam_channel::TryRecvError::Empty) => std::hint::spin_loop(),
            Err(crossbeam_channel::TryRecvError::Disconnected) => return None,
        }
    }
}

/// ns per pair, allocated on thread 0, freed on thread 1.
fn remote<A: Arena + Send>(make: impl Fn(usize) -> A + Sync, l: Layout, n: usize) -> f64 {
    // Unbounded: with the 32 recycled vectors, at most 32 batches are ever in flight.
    let (full_tx, full_rx) = crossbeam_channel::unbounded::<Vec<usize>>();
    let (empty_tx, empty_rx) = crossbeam_channel::unbounded::<Vec<usize>>();
    for _ in 0..32 {
        empty_tx.send(Vec::with_capacity(BATCH)).expect("receiver alive");
    }
    let times = peers::on_pinned_threads(2, |i| {
        let mut a = make(i);
        let t = Instant::now();
        if i == 0 {
            for _ in 0..n / BATCH {
                let mut v = spin_recv(&empty_rx).expect("consumer alive");
                for k in 0..BATCH {
                    let p = a.alloc(l, 1);
                    // SAFETY: a fresh object of at least one byte.
                    unsafe { p.write_volatile(k as u8) };
                    v.push(p as usize);
                }
                full_tx.send(v).expect("consumer alive");
            }
        } else {
            for _ in 0..n / BATCH {
                let mut v = spin_recv(&full_rx).expect("producer alive");
                for p in v.drain(..) {
                    // SAFETY: allocated by the producer with `l`, sent here once.
                    unsafe { a.free(p as *mut u8, l) };
                }
                let _ = empty_tx.send(v);
            }
        }
        a.finish();
        let elapsed = t.elapsed();
        // Keep the producer's arena (EMA heap) until the consumer is done with its objects.
        (elapsed, a)
    });
    let worst = times.iter().map(|(t, _)| *t).max().expect("two threads");
    drop(times);
    worst.as_nanos() as f64 / (n / BATCH * BATCH) as f64
}

/// Runs the allocator benchmark.
pub fn run(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(
        "alloc",
        "Allocator cost: ns per allocate+free pair of one object (lower is better).",
    );
    let n = if opts.quick { 2_000_000 } else { 10_000_000 };
    for size in [64usize, 512] {
        let l = Layout::from_size_align(size, 8).expect("layout");
        let case = format!("local {size} B");
        let systems = vec![
            System::new("ochre", || Ok(local(Ema(Heap::new(0, 1, None)), l, n))),
            System::new("glibc", || Ok(local(Global(SystemAlloc), l, n))),
            System::new("jemalloc", || Ok(local(Global(tikv_jemallocator::Jemalloc), l, n))),
            System::new("mimalloc", || Ok(local(Global(mimalloc::MiMalloc), l, n))),
            System::new("snmalloc", || Ok(local(Global(snmalloc_rs::SnMalloc), l, n))),
        ];
        measure_case(&mut report, &case, 1, "ns", opts.reps, systems);
        if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
            report.notes.push(format!("alloc [remote {size} B]: skipped: needs 2 CPUs"));
            continue;
        }
        let case = format!("remote {size} B");
        let systems = vec![
            System::new("ochre", || Ok(remote(|i| Ema(Heap::new(i, 2, None)), l, n))),
            System::new("glibc", || Ok(remote(|_| Global(SystemAlloc), l, n))),
            System::new("jemalloc", || Ok(remote(|_| Global(tikv_jemallocator::Jemalloc), l, n))),
            System::new("mimalloc", || Ok(remote(|_| Global(mimalloc::MiMalloc), l, n))),
            System::new("snmalloc", || Ok(remote(|_| Global(snmalloc_rs::SnMalloc), l, n))),
        ];
        measure_case(&mut report, &case, 2, "ns", opts.reps, systems);
    }
    for case in
        report.rows.iter().map(|r| r.case.clone()).collect::<std::collections::BTreeSet<_>>()
    {
        let ema = report.median_of("ochre", &case);
        let best = ["glibc", "jemalloc", "mimalloc", "snmalloc"]
            .iter()
            .filter_map(|s| report.median_of(s, &case))
            .fold(f64::INFINITY, f64::min);
        if let Some(ema) = ema.filter(|_| best.is_finite()) {
            report.check(
                format!("[{case}] EMA at least as fast as the best general allocator"),
                best / ema,
                ema <= best,
            );
        }
    }
    report
}
