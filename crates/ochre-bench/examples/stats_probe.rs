//! Diagnostic for issue 23's statistics goal: producer-consumer (empty handlers) and ping-pong
//! at 2 workers with per-color statistics off and sampled 1 in 1024, paired in one process (a
//! fresh runtime per sample, warmed up, order alternated A B / B A), printing each pair's ratio
//! (on / off) and the median. `stats_probe [prodcons|pingpong] [PAIRS] [PERIOD]`; with
//! `one:PERIOD` as the last argument it runs that configuration alone (for callgrind/cachegrind).
//! Environment: `PROBE_NOFOLLOW` keeps colors in place, `PROBE_WORKERS` sets the workers (2),
//! `PROBE_CPU` divides by the process's CPU time instead of the run's wall time (a loaded
//! machine's descheduled time does not count; the paired ratio over wall time is printed too),
//! `PROBE_SNAP` times a statistics snapshot after each run, `PROBE_COUNTERS` prints counters.

use ochre::{Config, Runtime};
use ochre_bench::harness::median;
use ochre_bench::{peers, pingpong, prodcons};

/// Ping-pong events per worker and producer-consumer rounds per sample (`bench color-stats`'s
/// full sizes at 2 workers).
const PINGPONG_EVENTS: u64 = 3_000_000;
const PRODCONS_ROUNDS: u64 = 10_000;

fn sample(bench: &str, period: u32) -> Result<f64, String> {
    // PROBE_NOFOLLOW: colors stay where the benchmark put them (no following, no relief).
    let follow = std::env::var_os("PROBE_NOFOLLOW").is_none();
    let config = Config::default().color_stats(period).follow(follow);
    // PROBE_WORKERS: another number of workers (2 by default).
    let workers = std::env::var("PROBE_WORKERS").ok().and_then(|w| w.parse().ok()).unwrap_or(2);
    let build = move || Runtime::builder().workers(workers).config(config.clone()).build();
    let mut counters = None;
    let mut round = None;
    // PROBE_CPU: events per second of the process's CPU time (not of wall time): on a loaded
    // machine, time spent descheduled does not count.
    let per_cpu = std::env::var_os("PROBE_CPU").is_some();
    // Read only with PROBE_CPU: rustix's first clock read parses the auxiliary vector, which
    // faults under valgrind (callgrind runs leave PROBE_CPU unset).
    let cpu = || {
        per_cpu.then(|| {
            let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
            t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
        })
    };
    let rate = peers::on_fresh_runtime(&build, PINGPONG_EVENTS, |rt, n| {
        let (cpu0, wall0) = (cpu(), std::time::Instant::now());
        let rate = sample_on(rt, bench, n, &mut round, &mut counters);
        let wall_s = wall0.elapsed().as_secs_f64();
        let cpu_s = cpu().zip(cpu0).map_or(wall_s, |(b, a)| b - a);
        if let Ok(r) = rate {
            WALL.with(|w| w.set(r));
        }
        rate.map(|r| if per_cpu { r * wall_s / cpu_s } else { r })
    })?;
    if std::env::var_os("PROBE_COUNTERS").is_some() {
        println!("  period {period}: {:.3} M/s; {}", rate / 1e6, counters.unwrap_or_default());
    }
    Ok(rate)
}

thread_local! {
    /// The last sample's rate over the run's wall time (`RunReport::elapsed`), whatever
    /// `PROBE_CPU` says.
    static WALL: std::cell::Cell<f64> = const { std::cell::Cell::new(0.0) };
}

fn sample_on(
    rt: &Runtime,
    bench: &str,
    n: u64,
    round: &mut Option<&'static prodcons::Round>,
    counters: &mut Option<String>,
) -> Result<f64, String> {
    {
        let before = rt.stats();
        let rate = match bench {
            "pingpong" => pingpong::ochre_pingpong(rt, n),
            _ => {
                let r = round.get_or_insert_with(|| prodcons::Round::leak(rt, 0));
                prodcons::ochre_prodcons(rt, r, n * PRODCONS_ROUNDS / PINGPONG_EVENTS)
            }
        };
        if std::env::var_os("PROBE_SNAP").is_some() {
            let t = std::time::Instant::now();
            let snap = rt.color_stats();
            let t1 = t.elapsed();
            let top = rt.color_stats().top_since(&snap, 10);
            let t2 = t.elapsed() - t1;
            println!(
                "  snapshot of {} colors: {t1:?}; snapshot + top_since: {t2:?} ({})",
                snap.colors.len(),
                top.len()
            );
        }
        let d: Vec<_> = rt.stats().iter().zip(&before).map(|(a, b)| a.since(b)).collect();
        let sum = |f: fn(&ochre::WorkerStats) -> u64| d.iter().map(f).sum::<u64>();
        *counters = Some(format!(
            "steals {} moves {} given back {} sleeps {} spins {} rounds {} batches {}",
            sum(|s| s.steals_in),
            sum(|s| s.colors_moved_in),
            sum(|s| s.colors_given_back),
            sum(|s| s.sleeps),
            sum(|s| s.spins),
            sum(|s| s.rounds),
            sum(|s| s.batches_sent),
        ));
        rate
    }
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench = args.first().map_or("prodcons", String::as_str).to_string();
    let pairs: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(11);
    // Fixes the CPUs workers are pinned to (as the benchmarks do).
    let _ = ochre_bench::harness::Options::new(false);
    if let Some(p) = args.get(2).and_then(|a| a.strip_prefix("one:")) {
        let period: u32 = p.parse().map_err(|_| "period".to_string())?;
        for _ in 0..pairs {
            println!("{bench} period {period}: {:.3} M/s", sample(&bench, period)? / 1e6);
        }
        return Ok(());
    }
    let period: u32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1024);
    let (mut ratios, mut on, mut off) = (Vec::new(), Vec::new(), Vec::new());
    let mut wall_ratios = Vec::new();
    let wall = || WALL.with(std::cell::Cell::get);
    sample(&bench, 0)?; // warm-up of the process
    for k in 0..pairs {
        let ((a, wa), (b, wb)) = if k % 2 == 0 {
            let a = (sample(&bench, 0)?, wall());
            (a, (sample(&bench, period)?, wall()))
        } else {
            let b = (sample(&bench, period)?, wall());
            ((sample(&bench, 0)?, wall()), b)
        };
        wall_ratios.push(wb / wa);
        println!("pair {k}: off {:.3} M/s, on {:.3} M/s, on/off {:.3}", a / 1e6, b / 1e6, b / a);
        ratios.push(b / a);
        off.push(a);
        on.push(b);
    }
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ratios.iter().copied().fold(0.0, f64::max);
    println!(
        "{bench} {}w, stats 1 in {period} vs off: median off {:.3} M/s, on {:.3} M/s; paired on/off median {:.3} (min {min:.3}, max {max:.3}, {pairs} pairs)",
        std::env::var("PROBE_WORKERS").ok().and_then(|w| w.parse().ok()).unwrap_or(2),
        median(&off) / 1e6,
        median(&on) / 1e6,
        median(&ratios)
    );
    println!("  over the runs' wall time: paired on/off median {:.3}", median(&wall_ratios));
    Ok(())
}
