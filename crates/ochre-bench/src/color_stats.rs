//! The cost of per-color statistics (`Config::color_stats`): ping-pong and producer-consumer
//! with them at their default sample period (`ochre`), off, and sampled 16 times as often.
//!
//! Each sample runs on a runtime built for it and warmed up (`peers::on_fresh_runtime`), the
//! three configurations interleaved; the check is on the paired ratio (per repetition, default
//! over off), which cancels the drift of a shared machine. Goal (issue 23): with statistics on,
//! at most 3% loss.

use ochre::{Config, Runtime};

use crate::harness::{measure_case, BenchReport, Options, System};
use crate::peers::{self, BuildOchre};
use crate::{pingpong, prodcons};

/// The configurations compared: name and sample period.
const SETTINGS: [(&str, u32); 3] = [("ochre", 1024), ("stats off", 0), ("stats 1 in 64", 64)];

fn builds(workers: usize) -> Vec<(&'static str, BuildOchre)> {
    SETTINGS
        .iter()
        .map(|&(name, period)| {
            let build: BuildOchre = Box::new(move || {
                Runtime::builder()
                    .workers(workers)
                    .config(Config::default().color_stats(period))
                    .build()
            });
            (name, build)
        })
        .collect()
}

/// Runs the benchmark.
pub fn run(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(
        "color-stats",
        "Per-color statistics: default sample period (ochre) vs off vs 1 in 64, higher is better.",
    );
    debug_assert_eq!(Config::default().color_stats, SETTINGS[0].1, "ochre is the default");
    for &w in &opts.workers {
        let builds = builds(w);
        let epw = pingpong::events_per_worker(opts);
        let case = format!("pingpong {w}w");
        let systems = builds
            .iter()
            .map(|(name, build)| {
                System::new(*name, move || {
                    peers::on_fresh_runtime(build.as_ref(), epw, pingpong::ochre_pingpong)
                })
            })
            .collect();
        measure_case(&mut report, &case, w, "ev/s/worker", opts.reps, systems);
        check(&mut report, &case);
        let rounds = prodcons::rounds(opts, 0, w);
        let case = format!("prodcons {w}w empty");
        let systems = builds
            .iter()
            .map(|(name, build)| System::new(*name, prodcons::ochre_fresh_system(build, 0, rounds)))
            .collect();
        measure_case(&mut report, &case, w, "ev/s", opts.reps, systems);
        check(&mut report, &case);
    }
    report
}

fn check(report: &mut BenchReport, case: &str) {
    if let Some(r) = report.paired_ratio("ochre", "stats off", case) {
        report.check(format!("[{case}] statistics on lose <= 3% (paired on/off)"), r, r >= 0.97);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_configuration_is_the_first_setting() {
        assert_eq!(Config::default().color_stats, SETTINGS[0].1);
        assert_eq!(SETTINGS[1].1, 0, "off is measured");
    }
}
