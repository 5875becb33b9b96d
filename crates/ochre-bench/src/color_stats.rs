//! The cost of per-color statistics (`Config::color_stats`): ping-pong and producer-consumer
//! with them off (the default, `ochre`), sampled 1 in 1024 and 1 in 64; and with the stall
//! watchdog's heartbeat off too (`Config::stall_threshold`).
//!
//! Each sample runs on a runtime built for it and warmed up (`peers::on_fresh_runtime`), the
//! three configurations interleaved; the check is on the paired ratio (per repetition, default
//! over off), which cancels the drift of a shared machine. Goal (issue 23): with statistics on,
//! at most 3% loss.

use ochre::{Config, Runtime};

use crate::harness::{measure_case, BenchReport, Options, System};
use crate::peers::{self, BuildOchre};
use crate::{pingpong, prodcons};

/// The configurations compared: name, sample period, stall watchdog on.
const SETTINGS: [(&str, u32, bool); 4] = [
    ("ochre", 0, true),
    ("stats 1 in 1024", 1024, true),
    ("stats 1 in 64", 64, true),
    ("stats and stall watch off", 0, false),
];

fn builds(workers: usize) -> Vec<(&'static str, BuildOchre)> {
    SETTINGS
        .iter()
        .map(|&(name, period, stall)| {
            let stall = stall.then_some(std::time::Duration::from_millis(100));
            let config = Config::default().color_stats(period).stall_threshold(stall);
            let build: BuildOchre = Box::new(move || {
                Runtime::builder().workers(workers).config(config.clone()).build()
            });
            (name, build)
        })
        .collect()
}

/// Runs the benchmark.
pub fn run(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(
        "color-stats",
        "Per-color statistics: off (the default, ochre) vs 1 in 1024 vs 1 in 64, higher is better.",
    );
    debug_assert_eq!(Config::default().color_stats, SETTINGS[0].1, "ochre is the default (off)");
    report.notes.push(
        "`stats and stall watch off` also turns off the stall watchdog's heartbeat (three stores \
         a turn): its ratio to `ochre` (statistics off by default) is that heartbeat's cost"
            .into(),
    );
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
    if let Some(r) = report.paired_ratio("stats 1 in 1024", "ochre", case) {
        report.check(format!("[{case}] statistics on lose <= 3% (paired on/off)"), r, r >= 0.97);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_configuration_is_the_first_setting() {
        assert_eq!(Config::default().color_stats, SETTINGS[0].1);
        assert!(Config::default().stall_threshold.is_some() && SETTINGS[0].2);
        assert_eq!(SETTINGS[0].1, 0, "the default is off");
        assert!(SETTINGS[1].1 > 0, "a sampled period is measured against it");
    }
}
