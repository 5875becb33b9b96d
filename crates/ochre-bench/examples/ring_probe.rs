//! Diagnostic: a thread ring of plain colors (as `bench actors` writes it), printing where its
//! messages went (local, remote, forwarded) and how colors moved.
//!
//! `ring_probe [TOKENS] [RUNS]`; `HOPS=n` hops per run (default 1M); `FRESH=1` builds a runtime
//! for each run and warms it with a run of an eighth of the hops first, as `bench actors` does
//! (without it, one runtime serves every run and keeps where its colors went);
//! `STEAL=backlog` or `STEAL=off` sets the stealing mode; `BUSY=1` spins a thread on worker 1's
//! CPU during every run (as `bench actors`' busy cases); `HAND=1` chooses the colors so that
//! each half of the ring is homed on one worker (`bench actors`' `ochre-hand`); `FOLLOW=0`
//! keeps colors where they are homed; `BATCH=n` fixes the batch size at `n` (no online tuning);
//! `PLACE=1` records the worker that last ran each actor and prints, after each run, how many
//! boundaries between workers the ring has, how often actors changed worker, and its stretches
//! (`worker x length`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use ochre::{Color, ColorCell, RunReport, Runtime};

const ACTORS: usize = 1000;

struct Actor {
    /// Weak: the ring's actors are owned by `ring`'s vector, not by each other.
    next: OnceLock<Weak<Actor>>,
    cell: ColorCell<u64>,
    /// 1 + the worker that last ran this actor (`PLACE=1`), and how often that changed.
    last: std::sync::atomic::AtomicU8,
    switches: std::sync::atomic::AtomicU32,
}

fn place_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("PLACE").is_ok_and(|v| v == "1"))
}

fn hop(a: Arc<Actor>, left: u64, done: Arc<AtomicU64>) {
    let _ = a.cell.with(|n| *n += 1);
    if place_on() {
        let w = ochre::current_worker().unwrap_or(0) as u8 + 1;
        if a.last.swap(w, Ordering::Relaxed) != w {
            a.switches.fetch_add(1, Ordering::Relaxed);
        }
    }
    if left == 0 {
        done.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let Some(next) = a.next.get().and_then(Weak::upgrade) else { return };
    ochre::post(next.cell.color(), move || hop(next, left - 1, done));
}

/// One run of `hops` hops in all: hops per second and the run's report.
fn ring(rt: &Runtime, tokens: usize, hops: u64) -> (f64, RunReport) {
    let colors: Vec<Color> = if std::env::var("HAND").is_ok_and(|v| v == "1") {
        ochre_bench::actors::colors_homed_on(rt, ACTORS, |i| i * rt.homes() / ACTORS)
    } else {
        (0..ACTORS).map(ochre_bench::actors::plain_color).collect()
    };
    let actors: Vec<Arc<Actor>> = colors
        .into_iter()
        .map(|c| {
            Arc::new(Actor {
                next: OnceLock::new(),
                cell: ColorCell::new(c, 0),
                last: Default::default(),
                switches: Default::default(),
            })
        })
        .collect();
    for i in 0..ACTORS {
        let _ = actors[i].next.set(Arc::downgrade(&actors[(i + 1) % ACTORS]));
    }
    let done = Arc::new(AtomicU64::new(0));
    let per_token = hops / tokens as u64;
    let starts: Vec<Arc<Actor>> =
        (0..tokens).map(|t| actors[t * ACTORS / tokens].clone()).collect();
    let d = done.clone();
    let report = rt
        .run(Color(1), move || {
            for a in starts {
                let d = d.clone();
                ochre::post(a.cell.color(), move || hop(a, per_token, d));
            }
        })
        .expect("run");
    assert_eq!(done.load(Ordering::Relaxed), tokens as u64);
    if place_on() {
        let ws: Vec<u8> = actors.iter().map(|a| a.last.load(Ordering::Relaxed)).collect();
        let bounds = (0..ACTORS).filter(|&i| ws[i] != ws[(i + 1) % ACTORS]).count();
        let sw: u32 = actors.iter().map(|a| a.switches.load(Ordering::Relaxed)).sum();
        let mut runs = Vec::new();
        let mut i = 0;
        while i < ACTORS {
            let mut j = i;
            while j < ACTORS && ws[j] == ws[i] {
                j += 1;
            }
            runs.push(format!("{}x{}", ws[i].wrapping_sub(1), j - i));
            i = j;
        }
        println!("placement: {bounds} boundaries, {sw} switches; runs {}", runs.join(" "));
    }
    drop(actors);
    ((per_token * tokens as u64) as f64 / report.elapsed.as_secs_f64(), report)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let tokens: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let hops: u64 = std::env::var("HOPS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let fresh = std::env::var("FRESH").is_ok_and(|v| v == "1");
    let mut config = ochre::Config::default();
    match std::env::var("STEAL").as_deref() {
        Ok("backlog") => config = config.steal(ochre::Steal::Backlog),
        Ok("off") => config = config.steal(ochre::Steal::Off),
        _ => {}
    }
    if let Some(n) = std::env::var("BATCH").ok().and_then(|v| v.parse().ok()) {
        config = config.batch_size(n).batch_sizing(ochre::BatchSize::Fixed);
    }
    if std::env::var("FOLLOW").is_ok_and(|v| v == "0") {
        config = config.follow(false);
    }
    let busy = std::env::var("BUSY").is_ok_and(|v| v == "1").then_some(1);
    let build = || Runtime::builder().workers(2).config(config.clone()).build().expect("runtime");
    let mut rt = build();
    let mut rates = Vec::new();
    for run in 0..runs {
        if fresh {
            rt = build();
            let _ = ochre_bench::actors::with_busy_cpu(busy, || ring(&rt, tokens, hops / 8));
        }
        let (rate, report) = ochre_bench::actors::with_busy_cpu(busy, || ring(&rt, tokens, hops));
        rates.push(rate);
        let t = report.total();
        println!(
            "run {run}: {:.1}M hops/s; local {} remote {} forwards {} moved in {} out {} given back {} steals {}; per worker events {:?}",
            rate / 1e6,
            t.posts_local,
            t.posts_remote,
            t.forwards,
            t.colors_moved_in,
            t.colors_moved_out,
            t.colors_given_back,
            t.steals_in,
            report.workers.iter().map(|w| (w.events_run, w.cpu_share, w.unpinned)).collect::<Vec<_>>(),
        );
        // Its spin spells: how often it ran out of tokens (they travel in convoys).
        for (w, s) in report.workers.iter().enumerate() {
            println!("  {}", ochre_bench::harness::worker_line(w, s));
        }
    }
    rates.sort_by(f64::total_cmp);
    println!("median {:.1}M hops/s over {runs} runs", rates[runs / 2] / 1e6);
}
