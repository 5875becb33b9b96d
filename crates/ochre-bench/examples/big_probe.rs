//! Diagnostic: Savina's "big" written with plain colors, as `bench actors` does: 100 actors each
//! ping a random other and wait for its pong, printing each run's rate and where its events
//! ran (per-worker counters): whether the colors gathered on one worker, split, or left a few
//! stragglers on the other (`follow`'s module doc).
//!
//! `big_probe [WORKERS] [RUNS]` (one runtime serves every run, so placement carries over);
//! `PINGS=n` pings per actor per run (default 3000); `FOLLOW=0` keeps colors where their hash
//! puts them; `TRACE=n` records n events per worker and writes the Chrome trace of the last
//! runs to `big_trace.json`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use ochre::{ColorCell, Runtime};

const ACTORS: usize = 100;

/// Each actor's state: pings left to send, and its random generator.
static ACTORS_STATE: OnceLock<Vec<ColorCell<(u64, u64)>>> = OnceLock::new();

fn actor(i: usize) -> &'static ColorCell<(u64, u64)> {
    &ACTORS_STATE.get().expect("actors are made before the first run")[i]
}

/// Actor `me` got its pong (or starts): pings a random other actor, whose handler pongs back.
fn pong(me: usize, done: Arc<AtomicU64>) {
    let next = actor(me).with(|(left, rng)| {
        if *left == 0 {
            return None;
        }
        *left -= 1;
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        let o = (*rng % (ACTORS as u64 - 1)) as usize;
        Some(if o >= me { o + 1 } else { o })
    });
    match next.expect("runs on its actor's color") {
        None => {
            done.fetch_add(1, Ordering::Relaxed);
        }
        Some(o) => ochre::post(actor(o).color(), move || {
            let _ = actor(o).with(|_| ());
            ochre::post(actor(me).color(), move || pong(me, done));
        }),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let workers: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let pings: u64 = std::env::var("PINGS").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    let mut config = ochre::Config::default();
    if std::env::var("FOLLOW").is_ok_and(|v| v == "0") {
        config = config.follow(false);
    }
    let trace = std::env::var("TRACE").ok().and_then(|v| v.parse().ok());
    if let Some(n) = trace {
        config = config.trace_events(n);
    }
    let rt = Runtime::builder().workers(workers).config(config).build().expect("runtime");
    let cells = (0..ACTORS).map(|i| ColorCell::new(ochre_bench::actors::plain_color(i), (0, 0)));
    let _ = ACTORS_STATE.set(cells.collect());
    for run in 0..runs {
        let done = Arc::new(AtomicU64::new(0));
        let d = done.clone();
        let report = rt
            .run(ochre::Color(1000), move || {
                for me in 0..ACTORS {
                    let d = d.clone();
                    ochre::post(actor(me).color(), move || {
                        let seed = 0x9e37_79b9_7f4a_7c15 ^ (me as u64 + 1);
                        let _ = actor(me).with(|s| *s = (pings, seed));
                        pong(me, d)
                    });
                }
            })
            .expect("run");
        assert_eq!(done.load(Ordering::Relaxed), ACTORS as u64);
        let rate = (2 * pings * ACTORS as u64) as f64 / report.elapsed.as_secs_f64();
        println!("run {run}: {:.1}M msg/s", rate / 1e6);
        for (w, s) in report.workers.iter().enumerate() {
            println!("  {}", ochre_bench::harness::worker_line(w, s));
        }
    }
    if trace.is_some() {
        let json = serde_json::to_string(&rt.trace()).expect("a trace serializes");
        std::fs::write("big_trace.json", json).expect("write big_trace.json");
    }
}
