//! Diagnostic: divide and conquer as a user writes it, one fresh color per task: `fib(N)`
//! where each call above a cutoff posts its two halves to two new colors (`Color(next id)`)
//! and adds their results in its own color when both answered; against tokio (a spawned task
//! per call, awaiting both handles) and rayon (`join`), alternated in one process.
//!
//! `fib_probe [N] [CUTOFF] [REPS]` (defaults 30, 10, 7); `ONLY=ochre,tokio,rayon,ochre-line`
//! runs those systems (`ochre-line`: ochre with `Config::newest_first` off), `W=n` gives ochre n workers, `TW=n` tokio, `FOLLOW=0`, `STEAL=off`, `TURN=n` change its
//! configuration (`harness::probe_config`), `PIN=0` leaves its workers unpinned, `BUSY=1` spins
//! a thread on CPU 1 throughout, `FIBSTATS=1` prints each ochre run's per-worker counters. The
//! program itself is `ochre_bench::divide` (`bench steal`'s divide and conquer).
//!
//! Found (session 31, 2 workers, quiet, medians of 7-9): `fib(30)` with leaves of `seq(10)`
//! ran in 37-42 ms on two workers, 25 ms on one, 21-23 ms in tokio-mt. Every color's first
//! turn is timed, and every batch was flushed before such a turn: the posts to the other
//! worker (half of them: fresh colors hash anywhere) left in batches of 1.2-2.3 messages.
//! Holding them for busy workers when this worker's first turns are known short
//! (`ColorQueue::likely_within`): 20.8-23.2 ms. With leaves of `seq(15)` and `seq(20)` (runs of
//! 1-5 ms) the run's own cost showed: an empty `run` took 91-102 us (`run_probe`); with the
//! gate's wake-ups gone (`runtime`), over tokio-mt cutoff 20 / 15 / 10: 0.90 / 0.99 / 1.13,
//! where the session began at 0.78 / 0.69 / 0.57. rayon's `join` runs this without a task per
//! call, 3x faster than both at cutoff 15 and 20x at cutoff 10: not this program's peer as
//! written.
//!
//! Session 38 (another host period; medians of 11, alternated with tokio-mt in one process):
//! ochre / tokio-mt 0.76-0.97 at cutoff 10, 0.81-0.85 at 15, 0.89-0.94 at 20. `perf record`
//! of 300 runs at cutoff 15: 7% of the workers' time in `clock_gettime` (22 ns a read on this
//! host; `rdtsc` 8.6): every turn of a color not timed yet is watched (timed, with a flush of
//! the buffered batches before it), and here every color is new. Watching one new color in
//! eight while the worker's last first turn was short: 0.77 -> 0.90 at cutoff 10, 0.81 ->
//! 0.83 at 15; not kept, since colors left untimed are not known cheap to `follow` (the
//! simulator's 64-token ring ran 8% slower) and cost-aware stealing lends only timed colors.
//!
//! Session 39: turn timers read the time-stamp counter (`ochre`'s `turn_clock`, `quanta`) in
//! place of `clock_gettime`: 3-5% at cutoff 10 (`ONLY=ochre`, 21 repetitions, three processes
//! alternated, in a slow period of the host: 16.8-17.5 ms -> 15.6-16.9). `perf` of the same
//! then: `hashbrown`'s `remove_entry` on the queue's color index 5.4% (cache misses: a color
//! per task spreads over a large table), `_int_free`/`_int_malloc` 8.7% (the program's own
//! `Arc<Mutex<Join>>` per call).
//!
//! Session 44: `fib(30)` cutoff 10 on one worker took 34-60 ms (tokio-mt on two: 16-23), and
//! two workers beside a busy thread no better than one. `perf`: 37% of the run loop's time on
//! the load of the next closure from a color's queue, 32% on its slot, 12% in the index's
//! removals: in line order the tree ran a level at a time and kept ~11,000 calls live. Running
//! new colors newest first (`Config::newest_first`, `queue`'s "Turns: newest first"; the
//! `ochre-line` system here is the runtime without it): one worker 12-17 ms; two workers
//! 1.40-1.55x `ochre-line` (medians of 9, one process each); beside a busy thread
//! (`BUSY=1`) 1.1-1.3x, still 0.4-0.6 of tokio-mt: half of the new colors are homed on the
//! worker whose CPU is shared, and wait for its time slices.
use std::time::Instant;

use ochre::Runtime;
use ochre_bench::divide;
use ochre_bench::harness::{median, probe_config};

fn main() {
    let a: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let n = *a.first().unwrap_or(&30);
    let cutoff = *a.get(1).unwrap_or(&10);
    let reps = *a.get(2).unwrap_or(&7) as usize;
    let w = std::env::var("W").ok().and_then(|w| w.parse().ok()).unwrap_or(2);
    let pin = std::env::var("PIN").as_deref() != Ok("0");
    let rt = Runtime::builder().workers(w).pin(pin).config(probe_config()).build().unwrap();
    let line_config = probe_config().newest_first(false);
    let rt_line = Runtime::builder().workers(w).pin(pin).config(line_config).build().unwrap();
    let tw = std::env::var("TW").ok().and_then(|w| w.parse().ok()).unwrap_or(2);
    let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(tw).build().unwrap();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let want = divide::seq(n);
    let mut t: [Vec<f64>; 4] = Default::default();
    let busy = std::env::var("BUSY").is_ok_and(|v| v == "1").then_some(1);
    ochre_bench::actors::with_busy_cpu(busy, || {
        for rep in 0..reps {
            let order: Vec<usize> = if rep % 2 == 0 { vec![0, 1, 2, 3] } else { vec![3, 2, 1, 0] };
            for s in order {
                let name = ["ochre", "tokio", "rayon", "ochre-line"][s];
                if std::env::var("ONLY").is_ok_and(|o| !o.split(',').any(|o| o == name)) {
                    continue;
                }
                let t0 = Instant::now();
                let got = match s {
                    0 | 3 => {
                        let rt = if s == 0 { &rt } else { &rt_line };
                        let (got, report) = divide::on_ochre(rt, n, cutoff).unwrap();
                        if std::env::var("FIBSTATS").is_ok() {
                            for (w, s) in report.workers.iter().enumerate() {
                                eprintln!(
                                    "  {} ({:.2} ms)",
                                    ochre_bench::harness::worker_line(w, s),
                                    report.elapsed.as_secs_f64() * 1e3
                                );
                            }
                        }
                        got
                    }
                    1 => divide::on_tokio(&tokio, n, cutoff).unwrap(),
                    _ => divide::on_rayon(&pool, n, cutoff),
                };
                assert_eq!(got, want);
                t[s].push(t0.elapsed().as_secs_f64() * 1e3);
            }
        }
    });
    let m: Vec<f64> = t.iter().map(|v| if v.is_empty() { f64::NAN } else { median(v) }).collect();
    println!(
        "fib({n}) cutoff {cutoff}: ochre {:.2} ms, tokio {:.2} ms, rayon {:.2} ms, ochre-line {:.2} ms; ochre/tokio speed {:.2}, ochre/rayon {:.2}, ochre/ochre-line {:.2}",
        m[0], m[1], m[2], m[3], m[1] / m[0], m[2] / m[0], m[3] / m[0]
    );
}
