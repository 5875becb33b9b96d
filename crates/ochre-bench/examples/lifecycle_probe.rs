//! Diagnostic: what a runtime's whole life costs, as a program that makes one per job pays it:
//! `Runtime::builder().build()`, a first and a second `run` of one empty event, and the drop,
//! against tokio-mt (build, `block_on` of an empty future, drop) and a rayon pool (build,
//! `install` of an empty closure, drop), default settings, in one process.
//!
//! `lifecycle_probe [N] [ROUNDS]` (defaults 200 lives a round, 5 rounds): medians over the
//! rounds of each round's mean, in microseconds.
//!
//! Found (session 34, 2 CPUs, quiet): ochre's build 330-570 us (its topology read from sysfs
//! twice, ~14 files a CPU, and each worker's timer wheel of 4096 empty slots, 96 KiB, written),
//! first run 125-140, drop 100-115: about 0.6-0.8 ms a life against tokio's 0.11-0.13 and
//! rayon's 0.11-0.13. With the tree read once per affinity mask (`Topology::discover`) and the
//! slots made at a wheel's first timer: build 60-65 us, first run 120-130 (the workers'
//! start: spawn, pin, a share file, the heap), second run 28-30, drop 66-74.
//!
//! Session 41: the first run, called as soon as `build` returned, waited for the workers' starts
//! (a pin moves each thread to its CPU): first run 137-141 us, second 30. `build` now returns
//! once every worker is started and at the gate: build 77 -> 142-181 us, first run 30-43, the
//! same life (318-331 us against 325; a slow period of the host: tokio 145, rayon 115).
//!
//! Session 57: the CPU quota read once per process (`std::thread::available_parallelism` reads
//! the cgroup's files at every call, 11 us here): build 84-86 -> 71-73 us, a life 144-146 ->
//! 128-130 us (three processes of each build alternated; tokio 52-57, rayon 49-50). Left:
//! each worker makes its poller (an epoll and its registrations) at its start, used or not.

use std::time::{Duration, Instant};

use ochre_bench::harness::median;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    // [build, first run, second run, drop] of ochre; whole lives of tokio and rayon.
    let mut ochre: [Vec<f64>; 4] = Default::default();
    let (mut tokio, mut rayon) = (Vec::new(), Vec::new());
    let us = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(n);
    for _ in 0..rounds {
        let mut parts = [Duration::ZERO; 4];
        for _ in 0..n {
            let t = Instant::now();
            let rt = ochre::Runtime::builder().build().expect("ochre");
            parts[0] += t.elapsed();
            for part in &mut parts[1..3] {
                let t = Instant::now();
                rt.run(ochre::Color(0), || {}).expect("run");
                *part += t.elapsed();
            }
            let t = Instant::now();
            drop(rt);
            parts[3] += t.elapsed();
        }
        for (v, p) in ochre.iter_mut().zip(parts) {
            v.push(us(p));
        }
        let t = Instant::now();
        for _ in 0..n {
            let rt = tokio::runtime::Builder::new_multi_thread().build().expect("tokio");
            rt.block_on(async {});
        }
        tokio.push(us(t.elapsed()));
        let t = Instant::now();
        for _ in 0..n {
            let pool = rayon::ThreadPoolBuilder::new().build().expect("rayon");
            pool.install(|| {});
        }
        rayon.push(us(t.elapsed()));
    }
    let m: Vec<f64> = ochre.iter().map(|v| median(v)).collect();
    let life: f64 = m.iter().sum();
    println!(
        "ochre: build {:.0} us, first run {:.0}, second run {:.0}, drop {:.0}: {life:.0} us a \
         life; tokio {:.0} us, rayon {:.0} us",
        m[0],
        m[1],
        m[2],
        m[3],
        median(&tokio),
        median(&rayon)
    );
}
