//! Diagnostic for issue 23's reader-color goal: `bench readers`' program at 2 workers, exclusive
//! colors against reader colors, paired in one process (a fresh runtime per sample, warmed up,
//! order alternated A B / B A), printing each pair's ratio (readers / exclusive) and the median.
//! `readers_probe [busy|few] [uniform|zipf] [PAIRS]`; with `one:exclusive` or `one:readers` as
//! the last argument it runs that system alone (for callgrind: instructions per request).
//! Environment: `PROBE_WORKERS` (2), `PROBE_NOFOLLOW` (colors stay home), `PROBE_ROUND` (the
//! round budget), `PROBE_COUNTERS` (per-worker events and other counters per sample),
//! `PROBE_STATS=N` (per-color statistics 1 in N: the busiest colors' event cost and moves).

use ochre::{Config, Runtime};
use ochre_bench::harness::median;
use ochre_bench::peers;
use ochre_bench::readers::{self, Case, Load, Mode, Pick, Read};

/// Requests per sample (`bench readers`' full size; a quarter of it for the few case).
const REQUESTS: u64 = 800_000;

fn sample(mode: Mode, case: Case, requests: u64) -> Result<f64, String> {
    // PROBE_NOFOLLOW: colors stay where they are homed (no following, no relief).
    let follow = std::env::var_os("PROBE_NOFOLLOW").is_none();
    // PROBE_WORKERS: another number of workers (1: both programs on one CPU).
    let workers = std::env::var("PROBE_WORKERS").ok().and_then(|w| w.parse().ok()).unwrap_or(2);
    // PROBE_ROUND: another round budget (events a worker runs between two looks at its inbox
    // and flushes of its batches): the latency of a request that crosses to another worker.
    let round = std::env::var("PROBE_ROUND").ok().and_then(|r| r.parse().ok());
    // PROBE_STATS=N: per-color statistics sampled 1 in N, the busiest colors printed per sample.
    let stats: u32 = std::env::var("PROBE_STATS").ok().and_then(|r| r.parse().ok()).unwrap_or(0);
    let config = Config::default().follow(follow).color_stats(stats);
    let config = match round {
        Some(r) => config.round_budget(r),
        None => config,
    };
    let build = move || Runtime::builder().workers(workers).config(config.clone()).build();
    let mut counters = String::new();
    let rate = peers::on_fresh_runtime(&build, requests, |rt, n| {
        let before = rt.stats();
        let rate = readers::run_program(rt, mode, case, n);
        if stats > 0 {
            for c in rt.color_stats().top(4) {
                println!(
                    "  {mode:?} color {:#x}: {} events, run p50 {} ns p99 {} ns, moves in {} out {}",
                    c.color.0, c.events, c.run_p50_ns, c.run_p99_ns, c.moves_in, c.moves_out
                );
            }
        }
        let d: Vec<_> = rt.stats().iter().zip(&before).map(|(a, b)| a.since(b)).collect();
        let sum = |f: fn(&ochre::WorkerStats) -> u64| d.iter().map(f).sum::<u64>();
        counters = format!(
            "events {:?} batches {} msgs {} safety flushes {} moves {} steals {} sleeps {} rounds {}",
            d.iter().map(|s| s.events_run).collect::<Vec<_>>(),
            sum(|s| s.batches_sent),
            sum(|s| s.batched_msgs),
            sum(|s| s.safety_flushes),
            sum(|s| s.colors_moved_in),
            sum(|s| s.steals_in),
            sum(|s| s.sleeps),
            sum(|s| s.rounds),
        );
        rate
    })?;
    if std::env::var_os("PROBE_COUNTERS").is_some() {
        println!("  {mode:?}: {:.3} M req/s; {counters}", rate / 1e6);
    }
    Ok(rate)
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let few = args.first().is_some_and(|a| a == "few");
    let pick = if args.get(1).is_some_and(|a| a == "zipf") { Pick::Zipf } else { Pick::Uniform };
    let pairs: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(11);
    let load = if few { Load { clients: 4, window: 1 } } else { Load { clients: 16, window: 8 } };
    let case = Case { pick, read: Read::Lookup, load };
    let requests = if few { REQUESTS / 8 } else { REQUESTS };
    // Fixes the CPUs workers are pinned to (as the benchmarks do).
    let _ = ochre_bench::harness::Options::new(false);
    if let Some(which) = args.get(3).and_then(|a| a.strip_prefix("one:")) {
        let mode = if which == "readers" { Mode::Readers } else { Mode::Exclusive };
        for _ in 0..pairs {
            println!("{case:?} {mode:?}: {:.3} M req/s", sample(mode, case, requests)? / 1e6);
        }
        return Ok(());
    }
    let (mut ratios, mut ex, mut rd) = (Vec::new(), Vec::new(), Vec::new());
    sample(Mode::Exclusive, case, requests)?; // warm-up of the process
    for k in 0..pairs {
        let (a, b) = if k % 2 == 0 {
            let a = sample(Mode::Exclusive, case, requests)?;
            (a, sample(Mode::Readers, case, requests)?)
        } else {
            let b = sample(Mode::Readers, case, requests)?;
            (sample(Mode::Exclusive, case, requests)?, b)
        };
        println!(
            "pair {k}: exclusive {:.3} M/s, readers {:.3} M/s, ratio {:.3}",
            a / 1e6,
            b / 1e6,
            b / a
        );
        ratios.push(b / a);
        ex.push(a);
        rd.push(b);
    }
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ratios.iter().copied().fold(0.0, f64::max);
    println!(
        "{} {:?} 2w: median exclusive {:.3} M req/s, readers {:.3}; paired readers/exclusive median {:.3} (min {min:.3}, max {max:.3}, {pairs} pairs)",
        if few { "few" } else { "busy" },
        pick,
        median(&ex) / 1e6,
        median(&rd) / 1e6,
        median(&ratios)
    );
    Ok(())
}
