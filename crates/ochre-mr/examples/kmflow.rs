//! K-means as one flow (every iteration in one run) against one run per iteration, on the
//! default configuration and on the baseline, alternating, in one process:
//! `cargo run --release -p ochre-mr --example kmflow -- POINTS_FILE [REPS]`.
use std::sync::Arc;
use std::time::Instant;

use ochre::{Config, Runtime};
use ochre_mr::apps::{kmeans::Kmeans, Application};
use ochre_mr::{Error, Phases};

type Runner =
    fn(&Arc<Kmeans>, &Runtime) -> Result<(ochre_mr::apps::kmeans::Clusters, Phases), Error>;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(input), reps) = (args.next(), args.next().and_then(|r| r.parse().ok()).unwrap_or(7))
    else {
        eprintln!("usage: kmflow POINTS_FILE [REPS]");
        std::process::exit(2);
    };
    let app = match Kmeans::load(input.as_ref()) {
        Ok(app) => Arc::new(app),
        Err(e) => {
            eprintln!("kmflow: {e}");
            std::process::exit(1);
        }
    };
    let want = app.sequential();
    let runners: [(&str, Runner); 2] =
        [("flow", Kmeans::run), ("run per iteration", Kmeans::run_per_iteration)];
    for (cname, config) in [("default", Config::default()), ("baseline", Config::baseline())] {
        let workers = std::env::var("WORKERS").ok().and_then(|w| w.parse().ok()).unwrap_or(2);
        let rt = match Runtime::builder().workers(workers).config(config).build() {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("kmflow: {e}");
                std::process::exit(1);
            }
        };
        let mut times = vec![Vec::new(); runners.len()];
        for _ in 0..reps {
            for (i, (_, run)) in runners.iter().enumerate() {
                let t = Instant::now();
                match run(&app, &rt) {
                    Ok((got, p)) if got == want => {
                        times[i].push(t.elapsed().as_secs_f64() * 1e3);
                        if std::env::var_os("PHASES").is_some() {
                            eprintln!("{cname} {}: {}", runners[i].0, p.line());
                        }
                    }
                    Ok(_) => eprintln!("kmflow: a result differs from the reference"),
                    Err(e) => eprintln!("kmflow: {e}"),
                }
            }
        }
        let median = |t: &mut Vec<f64>| {
            t.sort_by(f64::total_cmp);
            t.get(t.len() / 2).copied().unwrap_or(f64::NAN)
        };
        let m: Vec<f64> = times.iter_mut().map(median).collect();
        println!(
            "{cname}: {} {:.1} ms, {} {:.1} ms (medians of {reps}, {} iterations), ratio {:.3}",
            runners[0].0,
            m[0],
            runners[1].0,
            m[1],
            want.iterations,
            m[1] / m[0]
        );
    }
}
