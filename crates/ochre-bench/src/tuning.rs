//! Online tuning (issue 23, thesis §5.5) against fixed settings: the default runtime, which
//! tunes its spin threshold and batch sizes online (`ochre`: `Spin::Adaptive`,
//! `BatchSize::Adaptive`, the rules in the runtime's `tune` module), beside the fixed setting
//! that was the default before (`fixed`: 10x the measured wake-up latency, batches of 32) and a
//! small grid of fixed settings around it: spin thresholds (no spinning, 50 µs, 1 ms) at the
//! fixed batch size, and batch sizes (8, 16, 64, 128) at the fixed threshold; plus each tuner
//! alone on the fixed setting (the ablation of each).
//!
//! Cases: ping-pong and producer-consumer (empty, 1 µs and 10 µs handlers) at the largest
//! worker count, each sample on a runtime built for it and warmed up
//! (`peers::on_fresh_runtime`), and the actor programs (`actors`, quiet;
//! `OCHRE_ACTORS_MODE=busy` for the busy half, `OCHRE_ACTORS=...` for some programs). All in one
//! process, interleaved by the harness; the checks are on paired ratios (per repetition),
//! which cancel the drift of a shared machine. Goals (issue 23): tuned >= the best fixed
//! setting within 3% on every case, and better than the fixed default on at least one.
//!
//! `OCHRE_TUNING=pingpong,prodcons,actors` runs only those parts, `OCHRE_TUNING_SYSTEMS=ochre,
//! fixed` only those configurations (A/B comparisons).

use std::time::Duration;

use ochre::{BatchSize, Config, Runtime, Spin};

use crate::harness::{measure_case, BenchReport, Options, System};
use crate::peers::{self, BuildOchre};
use crate::{actors, pingpong, prodcons};

/// The runtime tuned online (spin threshold and batch sizes): the default.
pub const TUNED: &str = "ochre";
/// The fixed setting that was the default before online tuning.
pub const FIXED: &str = "fixed";

/// The configurations compared, by name: `ochre` (the default: tuned online) first, then
/// `fixed`, the grid of fixed settings around it, and each tuner alone on `fixed`.
pub fn configs() -> Vec<(String, Config)> {
    let fixed = |spin: Spin, batch: usize| {
        Config::default().spin(spin).batch_size(batch).batch_sizing(BatchSize::Fixed)
    };
    let reasoned = |t: Option<Duration>| Spin::Reasoned { threshold: t };
    let mut v = vec![
        (TUNED.to_string(), Config::default()),
        (FIXED.to_string(), fixed(reasoned(None), 32)),
        ("spin never".to_string(), fixed(Spin::Never, 32)),
        ("spin 50us".to_string(), fixed(reasoned(Some(Duration::from_micros(50))), 32)),
        ("spin 1ms".to_string(), fixed(reasoned(Some(Duration::from_millis(1))), 32)),
    ];
    for b in [8, 16, 64, 128] {
        v.push((format!("batch {b}"), fixed(reasoned(None), b)));
    }
    v.push(("tuned spin only".to_string(), fixed(Spin::Adaptive, 32)));
    let batch_only = fixed(reasoned(None), 32).batch_sizing(BatchSize::Adaptive);
    v.push(("tuned batch only".to_string(), batch_only));
    v
}

/// Runs the benchmark.
pub fn run(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(
        "tuning",
        "Online tuning (ochre, the default) vs the fixed default of before (fixed) and other \
         fixed spin thresholds and batch sizes, higher is better.",
    );
    let w = opts.workers.iter().copied().max().unwrap_or(1);
    let mut configs = configs();
    if let Ok(only) = std::env::var("OCHRE_TUNING_SYSTEMS") {
        configs.retain(|(n, _)| only.split(',').any(|s| s.trim() == n));
    }
    let only = std::env::var("OCHRE_TUNING").unwrap_or_default();
    let wanted = |part: &str| only.is_empty() || only.split(',').any(|p| p.trim() == part);
    let builds: Vec<(String, BuildOchre)> = configs
        .iter()
        .map(|(n, c)| {
            let c = c.clone();
            let build: BuildOchre =
                Box::new(move || Runtime::builder().workers(w).config(c.clone()).build());
            (n.clone(), build)
        })
        .collect();
    if wanted("pingpong") {
        let epw = pingpong::events_per_worker(opts);
        let case = format!("pingpong {w}w");
        let systems = builds
            .iter()
            .map(|(name, build)| {
                System::new(name.clone(), move || {
                    peers::on_fresh_runtime(build.as_ref(), epw, pingpong::ochre_pingpong)
                })
            })
            .collect();
        measure_case(&mut report, &case, w, "ev/s/worker", opts.reps, systems);
    }
    if wanted("prodcons") {
        for cost in [0u64, 1_000, 10_000] {
            let rounds = prodcons::rounds(opts, cost, w);
            let label = if cost == 0 { "empty".into() } else { format!("{} us", cost / 1000) };
            let case = format!("prodcons {w}w {label}");
            let systems = builds
                .iter()
                .map(|(name, build)| {
                    System::new(name.clone(), prodcons::ochre_fresh_system(build, cost, rounds))
                })
                .collect();
            measure_case(&mut report, &case, w, "ev/s", opts.reps, systems);
        }
    }
    if wanted("actors") {
        actors::programs(&mut report, opts, w, Some(&configs));
    }
    checks(&mut report, &configs);
    report
}

/// The goals, on paired ratios. "Best fixed" is chosen for each repetition among the fixed
/// settings by their medians over the other repetitions (`BenchReport::paired_ratio_to_best`):
/// the best of a dozen noisy medians is high by chance, and compared on the samples that chose
/// it, a tuned runtime equal to every fixed setting measured 0.91-0.97 of it (the goals missed
/// moved from row to row between studies: ring, bank, chameneos, fork-join). The notes give the
/// ratio to the default (`ochre`) too.
fn checks(report: &mut BenchReport, configs: &[(String, Config)]) {
    let mut cases: Vec<String> = Vec::new();
    for r in &report.rows {
        if !cases.contains(&r.case) {
            cases.push(r.case.clone());
        }
    }
    let fixed: Vec<&str> = configs
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| *n != TUNED && !n.starts_with("tuned"))
        .collect();
    let mut to_default = Vec::new();
    let mut best_gain: Option<(String, f64)> = None;
    for case in &cases {
        if let Some((best, r)) = report.paired_ratio_to_best(TUNED, &fixed, case) {
            let goal = format!(
                "[{case}] tuned / best fixed ({best}, chosen on the other repetitions) >= 0.97 \
                 (paired)"
            );
            report.check(goal, r, r >= 0.97);
        }
        if let Some(r) = report.paired_ratio(TUNED, FIXED, case) {
            to_default.push(format!("{case} {r:.3}"));
            if best_gain.as_ref().is_none_or(|(_, g)| r > *g) {
                best_gain = Some((case.clone(), r));
            }
        }
    }
    if let Some((case, r)) = best_gain {
        let goal = format!("tuned > the fixed default by > 3% on at least one case (best: {case})");
        report.check(goal, r, r > 1.03);
    }
    report.notes.push(format!("paired ratios tuned (ochre) / fixed: {}", to_default.join("; ")));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ochre_is_the_tuned_default_and_the_others_fix_what_they_name() {
        let c = configs();
        assert_eq!(c[0], (TUNED.to_string(), Config::default()));
        assert_eq!((c[0].1.spin, c[0].1.batch_sizing), (Spin::Adaptive, BatchSize::Adaptive));
        let (name, fixed) = &c[1];
        assert_eq!(name, FIXED);
        assert_eq!(fixed.spin, Spin::Reasoned { threshold: None });
        assert_eq!((fixed.batch_size, fixed.batch_sizing), (32, BatchSize::Fixed));
        for (name, config) in &c[2..] {
            let (spin, sizing) = (config.spin, config.batch_sizing);
            match name.as_str() {
                "tuned spin only" => assert_eq!((spin, sizing), (Spin::Adaptive, BatchSize::Fixed)),
                "tuned batch only" => assert!(spin != Spin::Adaptive && sizing != BatchSize::Fixed),
                _ => assert!(spin != Spin::Adaptive && sizing == BatchSize::Fixed, "{name}"),
            }
        }
        let names: Vec<&str> = c.iter().map(|(n, _)| n.as_str()).collect();
        for (i, (a, x)) in c.iter().enumerate() {
            for (b, y) in &c[i + 1..] {
                assert_ne!(x, y, "{a} and {b} are the same setting ({names:?})");
            }
        }
    }
}
