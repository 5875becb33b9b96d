//! K-means (one flow) on the ablation's steps around batching (`ochre bench mr`'s `ochre 3
//! +spinning`, `ochre 4 +batching`, `ochre 5 +EMA`, and the default), alternating in one
//! process, with the phases and the per-worker counters of each configuration:
//! `cargo run --release -p ochre-mr --example kmsteps -- POINTS_FILE [REPS]`.
//! `TRACE=DIR`: also writes a Chrome trace of one run per configuration into `DIR`.
use std::sync::Arc;
use std::time::Instant;

use ochre::{Config, Runtime, Spin, Steal, Wakeup, WorkerStats};
use ochre_mr::apps::{kmeans::Kmeans, Application};

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(input), reps) = (args.next(), args.next().and_then(|r| r.parse().ok()).unwrap_or(7))
    else {
        eprintln!("usage: kmsteps POINTS_FILE [REPS]");
        std::process::exit(2);
    };
    let app = match Kmeans::load(input.as_ref()) {
        Ok(app) => Arc::new(app),
        Err(e) => {
            eprintln!("kmsteps: {e}");
            std::process::exit(1);
        }
    };
    let want = app.sequential();
    let spin = Config::baseline().wakeup(Wakeup::Futex).spin(Spin::Reasoned { threshold: None });
    let configs = [
        ("3 +spinning", spin.clone()),
        ("4 +batching", spin.clone().batching(true)),
        ("4 +batching steal off", spin.clone().batching(true).steal(Steal::Off)),
        ("5 +EMA", spin.batching(true).ema(true)),
        ("default", Config::default()),
    ];
    let trace = std::env::var_os("TRACE").map(std::path::PathBuf::from);
    let workers = std::env::var("WORKERS").ok().and_then(|w| w.parse().ok()).unwrap_or(2);
    let runtimes: Vec<Runtime> = configs
        .iter()
        .map(|(_, c)| {
            let c = if trace.is_some() { c.clone().trace_events(1 << 16) } else { c.clone() };
            Runtime::builder().workers(workers).config(c).build().expect("runtime")
        })
        .collect();
    let mut times = vec![Vec::new(); configs.len()];
    let mut stats: Vec<Vec<WorkerStats>> = vec![Vec::new(); configs.len()];
    for rep in 0..reps {
        for (i, rt) in runtimes.iter().enumerate() {
            let before = rt.stats();
            let t = Instant::now();
            match Kmeans::run(&app, rt) {
                Ok((got, p)) if got == want => {
                    times[i].push(t.elapsed().as_secs_f64() * 1e3);
                    if std::env::var_os("PHASES").is_some() {
                        eprintln!("{}: {}", configs[i].0, p.line());
                    }
                }
                Ok(_) => eprintln!("kmsteps: a result differs from the reference"),
                Err(e) => eprintln!("kmsteps: {e}"),
            }
            let after = rt.stats();
            let d: Vec<WorkerStats> = after.iter().zip(&before).map(|(a, b)| a.since(b)).collect();
            stats[i] = if stats[i].is_empty() {
                d
            } else {
                stats[i].iter().zip(&d).map(|(a, b)| a.add(b)).collect()
            };
            if rep == 0 {
                if let Some(dir) = &trace {
                    let path = dir.join(format!("kmeans-{i}.json"));
                    let f = std::fs::File::create(&path).expect("trace file");
                    serde_json::to_writer(f, &rt.trace().chrome()).expect("trace");
                }
            }
        }
    }
    // Paired: each repetition's time over the first configuration's in the same repetition.
    let paired: Vec<f64> = (0..configs.len())
        .map(|i| {
            let mut r: Vec<f64> = times[i].iter().zip(&times[0]).map(|(a, b)| a / b).collect();
            r.sort_by(f64::total_cmp);
            r.get(r.len() / 2).copied().unwrap_or(f64::NAN)
        })
        .collect();
    for (i, (name, _)) in configs.iter().enumerate() {
        println!("{name:24} time / {}'s, paired median {:.3}", configs[0].0, paired[i]);
        let t = &mut times[i];
        t.sort_by(f64::total_cmp);
        let med = t.get(t.len() / 2).copied().unwrap_or(f64::NAN);
        let (lo, hi) = (t.first().copied().unwrap_or(f64::NAN), t.last().copied().unwrap_or(0.0));
        println!(
            "{name:24} median {med:7.1} ms  [{lo:.1} .. {hi:.1}]  ({} iterations)",
            want.iterations
        );
        for (w, s) in stats[i].iter().enumerate() {
            println!(
                "    w{w}: events {} remote {} batches {} safety {} burst {} sleeps {} spins {} \
                 spin_wins {} wakeups {} steals in {} out {} fail {} rounds {}",
                s.events_run,
                s.posts_remote,
                s.batches_sent,
                s.safety_flushes,
                s.burst_flushes,
                s.sleeps,
                s.spins,
                s.spin_wins,
                s.wakeups_sent,
                s.steals_in,
                s.steals_out,
                s.steal_failures,
                s.rounds
            );
        }
    }
}
