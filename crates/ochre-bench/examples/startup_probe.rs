//! Diagnostic: what a process pays to start: its first `Runtime::build` and its first
//! `Runtime::run` against the same later in the process, and tokio's first build beside them.
//! A program run once (a command, a test, a job) pays the firsts and nothing else, and every
//! benchmark here measures runtimes already built and warmed up; run this several times, each
//! a fresh process.
//!
//! `startup_probe [CHUNKS] [RUNS]` (defaults 10 and 3): each run sums CHUNKS chunks of 1024
//! numbers, a plain color a chunk posting its partial sum to a collector (`usersum`'s shape).
//!
//! Found (session 53, two workers, six processes of each build, alternated): the first build
//! took 16.4-34.5 ms, two once-per-process steps one after the other: the wake-up latency's
//! measurement (10.5 ms: nine round trips between two threads, each after a 1 ms sleep) and the
//! registration stand-ins need (`membarrier`, 12.5 ms: it waits for an RCU grace period). The
//! registration started on a thread of its own before the measurement: 11.7-15.0 ms; then
//! waited for nowhere (workers open windows once it is done) and the measurement of five rounds
//! instead of nine (the same latency within its spread): 7.5-8.0 ms (tokio-mt's first build:
//! 0.06-0.08 ms; later builds of either 0.25-0.5 ms). The first run of 10 chunks took
//! 0.78-1.53 ms against 0.02-0.10 ms later: the turn timers' clock was calibrated
//! (`quanta::Clock::new`, 0.63 ms) by the first timed turn, on a worker, inside the run;
//! calibrated by the build now: 0.13-0.18 ms.
//!
//! Session 57 (another host: first builds 4.1-4.8 ms there, first runs 70-97 us): the
//! measurement and the calibration leave the build for threads of their own, and nothing
//! waits for them (`wakeup_latency`, `turn_clock`): first build 0.60-0.98 ms, six processes of
//! each alternated. The calibration's thread, started beside the builder, first held the build
//! (a new thread runs on its parent's CPU: 0.68 ms), then, moved to another CPU, the start of
//! the worker pinned there (0.5 ms): it runs at nice 19 on another CPU than the builder's.
//! The first run of 10 chunks 84-105 us (the OS clock read until the calibration is done, two
//! threads measuring beside it), the second build 0.34-0.57 ms (0.14-0.17) while the
//! calibration goes on.

use std::sync::Arc;
use std::time::Instant;

use ochre::Runtime;

fn main() {
    let mut args = std::env::args().skip(1);
    let chunks: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let chunk = 1024;
    let data: Arc<Vec<u64>> = Arc::new((0..(chunks * chunk) as u64).collect());
    let want = ochre_bench::usersum::sum_of_squares(&data);
    let t = Instant::now();
    let rt = Runtime::builder().workers(2).build().expect("runtime");
    let first_build = t.elapsed();
    let t = Instant::now();
    let again = Runtime::builder().workers(2).build().expect("runtime");
    let second_build = t.elapsed();
    drop(again);
    let t = Instant::now();
    let tokio = ochre_bench::peers::tokio_multi_thread(2).expect("tokio");
    let tokio_build = t.elapsed();
    drop(tokio);
    let mut times = Vec::new();
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        assert_eq!(ochre_bench::usersum::sum_on_ochre(&rt, &data, chunk), Ok(want));
        times.push(t.elapsed());
    }
    println!(
        "build: first {first_build:?}, second {second_build:?} (tokio-mt's first {tokio_build:?}); \
         runs of {chunks} chunks: {times:?}"
    );
}
