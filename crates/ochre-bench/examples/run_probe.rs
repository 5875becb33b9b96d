//! Diagnostic: the cost of one `Runtime::run` of a single empty event, against tokio's
//! `block_on` of a spawned empty task, 2 workers each, in one process, alternated.
//!
//! `run_probe [RUNS] [ROUNDS]` (defaults 2000, 5): each round times RUNS runs of each system and
//! prints the microseconds per run, then the medians and their ratio.

use std::time::Instant;

use ochre::{Color, Runtime};

fn main() {
    let mut args = std::env::args().skip(1);
    let runs: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    // `SPIN=never`: workers sleep at once when idle; `SPIN=always`: they spin up to 200 us
    // first (diagnostics of where the time goes).
    let mut config = ochre::Config::default();
    match std::env::var("SPIN").as_deref() {
        Ok("never") => config = config.spin(ochre::Spin::Never),
        Ok("always") => {
            let limit = std::time::Duration::from_micros(200);
            config = config.spin(ochre::Spin::Always { limit });
        }
        _ => {}
    }
    let rt = Runtime::builder().workers(2).config(config).build().expect("runtime");
    let tokio =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().expect("tokio");
    let (mut o, mut t) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let start = Instant::now();
        let mut inside = 0.0;
        let mut idle = [0u64; 4];
        for i in 0..runs {
            let report = rt.run(Color(1 + u64::from(i % 16)), || {}).expect("run");
            inside += report.elapsed.as_secs_f64();
            let all = report.total();
            for (n, v) in idle.iter_mut().zip([all.spins, all.spin_wins, all.spins_cut, all.sleeps])
            {
                *n += v;
            }
        }
        let us = start.elapsed().as_secs_f64() * 1e6 / f64::from(runs);
        let inside = inside * 1e6 / f64::from(runs);
        let start = Instant::now();
        for _ in 0..runs {
            tokio.block_on(async { tokio::spawn(async {}).await.expect("task") });
        }
        let tus = start.elapsed().as_secs_f64() * 1e6 / f64::from(runs);
        let [spins, wins, cut, sleeps] = idle.map(|n| n as f64 / f64::from(runs));
        println!(
            "ochre {us:.1} us/run ({inside:.1} from opening the gate to the last worker's end; \
             per run: spins {spins:.2}, found work {wins:.2}, cut by a taken CPU {cut:.2}, sleeps \
             {sleeps:.2})   tokio {tus:.1} us/run"
        );
        o.push(us);
        t.push(tus);
    }
    o.sort_by(f64::total_cmp);
    t.sort_by(f64::total_cmp);
    let (om, tm) = (o[o.len() / 2], t[t.len() / 2]);
    println!("median: ochre {om:.1} us, tokio {tm:.1} us, ochre/tokio time {:.2}", om / tm);
}
