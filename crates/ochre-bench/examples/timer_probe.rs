//! Diagnostic: many timers as a user writes them, ochre against tokio-mt in one process,
//! alternated: `N` actors (a plain color each in ochre, a task each in tokio) each wait `D` µs
//! `K` times in a row (`io::post_after` re-armed by its own event; `tokio::time::sleep` in a
//! loop), with a little work after each wake-up. Prints, per system, the wall time (the ideal
//! is `K x D`), how late the timers fired on average (wall time over `K x D`), and the CPU time
//! the process spent (what a machine shared with other programs pays).
//!
//! `timer_probe [N] [K] [D_US] [REPS]` (defaults 10000 actors, 20 waits, 1000 µs, 5).
//! `BUSY=1`: a thread spins on CPU 1 throughout.
//!
//! Found (session 34, 2 workers, quiet, medians of 5; 0.5 us of work a wake-up): 1,000 actors
//! x 20 waits of 1 ms: ochre 23.1 ms (1.16x the ideal 20), tokio 46.9 ms (2.34x), CPU 45 and
//! 40 ms; 100 x 50 waits of 200 us: 15.3 ms (1.53x the ideal 10) against 67.4 ms (tokio's
//! timers have a millisecond's resolution, ochre's wheel 100 us), CPU 30.5 and 12.4 ms (ochre's
//! workers spin through gaps this short); 10 x 20 waits of 10 ms, a sparse load: 202.8 ms
//! (1.01x) against 223.7 ms, CPU 7.9 and 2.9 ms (the workers sleep through long gaps); 10,000
//! x 20 x 1 ms: 120 ms against 223, CPU 239 and 409 ms. Beside a thread spinning on CPU 1,
//! 1,000 x 20 x 1 ms: 23.3 ms against 49.8.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ochre::{io, Color, Runtime};
use ochre_bench::harness::{median, work};

/// The process's CPU time so far, ms.
fn cpu_ms() -> f64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

/// Work after each wake-up: what a timeout handler or a periodic tick does.
const TICK_WORK_NS: u64 = 500;

fn waits_ochre(rt: &Runtime, actors: usize, waits: usize, delay: Duration) {
    fn step(color: Color, left: usize, delay: Duration, done: Arc<AtomicUsize>) {
        work(TICK_WORK_NS);
        if left == 0 {
            done.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let d = done.clone();
        io::post_after(delay, color, move || step(color, left - 1, delay, d)).expect("timer");
    }
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    rt.run(Color(0), move || {
        for i in 0..actors {
            let color = Color(1 + i as u64);
            let d = d.clone();
            ochre::post(color, move || step(color, waits, delay, d));
        }
    })
    .expect("run");
    assert_eq!(done.load(Ordering::Relaxed), actors);
}

fn waits_tokio(rt: &tokio::runtime::Runtime, actors: usize, waits: usize, delay: Duration) {
    rt.block_on(async move {
        let tasks: Vec<_> = (0..actors)
            .map(|_| {
                tokio::spawn(async move {
                    work(TICK_WORK_NS);
                    for _ in 0..waits {
                        tokio::time::sleep(delay).await;
                        work(TICK_WORK_NS);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
    });
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut arg = |d: u64| args.next().and_then(|a| a.parse().ok()).unwrap_or(d);
    let (actors, waits, delay_us, reps) = (arg(10_000), arg(20), arg(1000), arg(5));
    let (actors, waits) = (actors as usize, waits as usize);
    let delay = Duration::from_micros(delay_us);
    let rt = Runtime::builder().workers(2).build().expect("ochre");
    let tokio = ochre_bench::peers::tokio_multi_thread_with_drivers(2).expect("tokio");
    let busy = std::env::var("BUSY").is_ok_and(|v| v == "1").then_some(1);
    // [system][wall ms, cpu ms]
    let mut t: [[Vec<f64>; 2]; 2] = Default::default();
    ochre_bench::actors::with_busy_cpu(busy, || {
        for rep in 0..=reps {
            let order = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
            for s in order {
                let (w0, c0) = (Instant::now(), cpu_ms());
                match s {
                    0 => waits_ochre(&rt, actors, waits, delay),
                    _ => waits_tokio(&tokio, actors, waits, delay),
                }
                let (wall, cpu) = (w0.elapsed().as_secs_f64() * 1e3, cpu_ms() - c0);
                if rep > 0 {
                    t[s][0].push(wall);
                    t[s][1].push(cpu);
                }
            }
        }
    });
    let ideal = waits as f64 * delay.as_secs_f64() * 1e3;
    for (s, name) in ["ochre", "tokio"].iter().enumerate() {
        let (wall, cpu) = (median(&t[s][0]), median(&t[s][1]));
        println!(
            "{name}: {actors} actors x {waits} waits of {delay_us} us{}: wall {wall:.1} ms \
             ({:.2}x the ideal {ideal:.0} ms), CPU {cpu:.1} ms",
            if busy.is_some() { ", CPU 1 busy" } else { "" },
            wall / ideal,
        );
    }
    let (o, k) = (median(&t[0][0]), median(&t[1][0]));
    println!(
        "ochre/tokio speed {:.3}, CPU ochre/tokio {:.3}",
        k / o,
        median(&t[0][1]) / median(&t[1][1])
    );
}
