//! Diagnostic: programs written as users write them, on a runtime of more workers than the
//! machine has CPUs (`Runtime::builder().workers(W)`, default settings), against tokio-mt of as
//! many workers, alternated in one process: the user's sum, short jobs, divide and conquer.
//!
//! `oversub_probe [W] [REPS]` (defaults 8, 7). `BUSY=1` spins a thread on CPU 1 meanwhile;
//! `PIN=0`, `SPIN=never`, `STANDIN=0`, `FOLLOW=0`, `STEAL=off`, `ANYCPU=1` (sleep through every
//! run's end) change the ochre runtime's settings; `REPORT=1` / `REPORT=fib` print what each
//! worker did in one job / one divide and conquer.
//!
//! Found (session 54, 2 CPUs): every color homed over all workers, ochre / tokio-mt at 4 and 8
//! workers: sum 0.82-0.85 and 0.58-0.65, short jobs 0.44-0.79 and 0.20-0.23, divide and
//! conquer 0.38-0.41 and 0.24-0.31 (two processes): three posts in four went to a worker not
//! running, and every worker was woken at each run's start and end. No single switch helped.
//! With colors homed on as many workers as CPUs, the other workers standing by (no stealing, no
//! wake-up for runs' ends: `Config::home_on_every_worker`), in the same two processes' turns:
//! sum 1.17-1.54 and 1.33-1.52, jobs 1.19 and 1.14-1.17, divide and conquer 1.06-1.24 and
//! 1.27-1.47. Beside a busy thread on CPU 1 at 4 workers: sum 0.51-0.58 -> 0.72-0.79, jobs
//! 0.46-1.12 -> 0.60-0.73, divide and conquer 0.24-0.40 -> 0.82-1.07.

use std::sync::Arc;
use std::time::Instant;

use ochre::Runtime;
use ochre_bench::{divide, usersum};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let w: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(8);
    let reps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(7);
    let only = std::env::var("ONLY").unwrap_or_default();
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let mut config = ochre::Config::default();
    if env("SPIN") == "never" {
        config = config.spin(ochre::Spin::Never);
    }
    if env("STANDIN") == "0" {
        config = config.stand_in(false);
    }
    if env("FOLLOW") == "0" {
        config = config.follow(false);
    }
    if env("ANYCPU") == "1" {
        config.sleep_through_any_cpu = true;
    }
    if env("STEAL") == "off" {
        config = config.steal(ochre::Steal::Off);
    }
    let rt =
        Runtime::builder().workers(w).pin(env("PIN") != "0").config(config).build().expect("ochre");
    let tk = tokio::runtime::Builder::new_multi_thread().worker_threads(w).build().expect("tokio");
    if env("REPORT") == "1" {
        for _ in 0..3 {
            let s = Instant::now();
            let r = rt
                .run(ochre::Color::DEFAULT, || {
                    for i in 1..=8u64 {
                        ochre::post(ochre::Color(i), move || {
                            std::hint::black_box(i);
                        });
                    }
                })
                .unwrap();
            println!("one job: {:?}", s.elapsed());
            for (i, w) in r.workers.iter().enumerate() {
                println!(
                    "  w{i}: run {} sent {} recv {} wakeups {} sleeps {} spins {} wins {} steals {} stood {}",
                    w.events_run, w.batches_sent, w.msgs_received, w.wakeups_sent, w.sleeps,
                    w.spins, w.spin_wins, w.steals_in, w.stood_in_for
                );
            }
        }
    }
    if env("REPORT") == "fib" {
        for _ in 0..4 {
            let s = Instant::now();
            let (_, r) = divide::on_ochre(&rt, 25, 10).unwrap();
            println!("fib: {:?}", s.elapsed());
            for (i, w) in r.workers.iter().enumerate() {
                println!(
                    "  w{i}: run {} local {} remote {} sent {} recv {} wakeups {} sleeps {} spins {} wins {} steals {}/{} stood {} share {} moved {}/{}",
                    w.events_run, w.posts_local, w.posts_remote, w.batches_sent, w.msgs_received, w.wakeups_sent, w.sleeps,
                    w.spins, w.spin_wins, w.steals_in, w.steal_attempts, w.stood_in_for, w.cpu_share, w.colors_moved_in, w.colors_moved_out
                );
            }
        }
    }
    let data = Arc::new(usersum::numbers(4_000_000));
    let chunk = 1024;
    type Case<'a> = (&'a str, Box<dyn Fn() + 'a>, Box<dyn Fn() + 'a>);
    let cases: Vec<Case> = vec![
        (
            "sum",
            Box::new(|| {
                usersum::sum_on_ochre(&rt, &data, chunk).unwrap();
            }),
            Box::new(|| {
                usersum::sum_on_tokio(&tk, &data, chunk);
            }),
        ),
        (
            "jobs",
            Box::new(|| {
                usersum::jobs_on_ochre(&rt, 2000).unwrap();
            }),
            Box::new(|| {
                usersum::jobs_on_tokio(&tk, 2000);
            }),
        ),
        (
            "fib",
            Box::new(|| {
                divide::on_ochre(&rt, 25, 10).unwrap();
            }),
            Box::new(|| {
                divide::on_tokio(&tk, 25, 10).unwrap();
            }),
        ),
    ];
    // `BUSY=1`: a thread spins on CPU 1 during every case (a machine shared with a busy process).
    let busy = (env("BUSY") == "1").then_some(1);
    for (name, o, t) in &cases {
        if !only.is_empty() && !only.split(',').any(|s| s == *name) {
            continue;
        }
        ochre_bench::actors::with_busy_cpu(busy, || {
            o();
            t();
            let (mut os, mut ts, mut rs) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..reps {
                let time = |f: &dyn Fn()| {
                    let s = Instant::now();
                    f();
                    s.elapsed().as_secs_f64() * 1e3
                };
                let (a, b) = if i % 2 == 0 {
                    let a = time(o.as_ref());
                    (a, time(t.as_ref()))
                } else {
                    let b = time(t.as_ref());
                    (time(o.as_ref()), b)
                };
                os.push(a);
                ts.push(b);
                rs.push(b / a);
            }
            println!(
            "{name:6} {w}w  ochre {:8.2} ms  tokio-mt {:8.2} ms  ochre/tokio speed {:.3} (pairs {:.2?})",
            median(os),
            median(ts),
            median(rs.clone()),
            rs
        );
        });
    }
}
