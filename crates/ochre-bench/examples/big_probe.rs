//! Diagnostic: Savina's "big" written with plain colors, as `bench actors` does: 100 actors each
//! ping a random other and wait for its pong, printing each run's rate and where its events
//! ran (per-worker counters): whether the colors gathered on one worker, split, or left a few
//! stragglers on the other (`follow`'s module doc).
//!
//! `big_probe [WORKERS] [RUNS]` (one runtime serves every run, so placement carries over);
//! `PINGS=n` pings per actor per run (default 3000); `FOLLOW=0` keeps colors where their hash
//! puts them; `HAND=1` homes every actor on worker `HAND_ON` (default 0) with
//! `Runtime::home_of`; `KNOBS=steal-off,spin-never,...` switches runtime features off (see
//! `main`); `FULL=1` prints every counter; `TRACE=n` records n events per worker and writes the
//! Chrome trace of the last runs to `big_trace.json`.
//!
//! Found with it: gathered on one worker of two by `follow`, half of the actors being guests
//! there (homed on the other), big ran at 18-19M msg/s, and homed on that worker by hand
//! (`HAND=1`) at 24.5M, as on one worker alone, with the same counters: the run queue branched
//! on each color's lease, and the mix mispredicted it (`queue::ColorQueue::route`'s comment);
//! now both run at 24.5M.

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
    for knob in std::env::var("KNOBS").unwrap_or_default().split(',') {
        config = match knob {
            "steal-off" => config.steal(ochre::Steal::Off),
            "spin-never" => config.spin(ochre::Spin::Never),
            "no-placement" => config.placement(false),
            "no-unpin" => config.unpin_when_shared(false),
            "no-stall" => config.stall_threshold(None),
            "no-stats" => config.color_stats(0),
            "no-follow" => config.follow(false),
            _ => config,
        };
    }
    let trace = std::env::var("TRACE").ok().and_then(|v| v.parse().ok());
    if let Some(n) = trace {
        config = config.trace_events(n);
    }
    let rt = Runtime::builder().workers(workers).config(config).build().expect("runtime");
    let hand_on = std::env::var("HAND_ON").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let colors: Vec<ochre::Color> = if std::env::var("HAND").is_ok_and(|v| v == "1") {
        ochre_bench::actors::colors_homed_on(&rt, ACTORS, |_| hand_on)
    } else {
        (0..ACTORS).map(ochre_bench::actors::plain_color).collect()
    };
    let _ = ACTORS_STATE.set(colors.into_iter().map(|c| ColorCell::new(c, (0, 0))).collect());
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
            if std::env::var("FULL").is_ok() {
                println!("  {s:?}");
            }
        }
    }
    if trace.is_some() {
        let json = serde_json::to_string(&rt.trace()).expect("a trace serializes");
        std::fs::write("big_trace.json", json).expect("write big_trace.json");
    }
}
