//! The study's progress line: before each benchmark, which one of how many, the time taken so
//! far and an estimate of the time left, on stderr.
//!
//! The estimate: each benchmark has a fixed expected duration ([`QUICK_SECONDS`], measured on
//! the project's 2-CPU machine with nginx and wrk installed, scaled for the run's sizes,
//! repetitions and worker counts). Before anything has run, the time left is the sum of those.
//! Once benchmarks have run, the expected durations of those left are scaled by how much longer
//! (or shorter) the benchmarks already run took than expected: a slower machine, or a machine
//! shared with a build, shows in the first benchmarks and corrects the rest.

use std::time::Duration;

use ochre_bench::Options;

/// Seconds each benchmark of `study --quick` took on the project's 2-CPU virtual machine,
/// shared with other builds (load about 5), nginx and wrk installed (a study of 531 s). An
/// unknown benchmark counts as [`UNKNOWN_SECONDS`].
const QUICK_SECONDS: &[(&str, f64)] = &[
    ("pingpong", 87.0),
    ("prodcons", 94.0),
    ("wakeup", 7.0),
    ("steal", 4.0),
    ("alloc", 30.0),
    ("costs", 4.0),
    ("ablation", 67.0),
    ("sws", 102.0),
    ("loadgen", 26.0),
    ("actors", 111.0),
    ("mr", 1.0),
    // Not measured in a study yet: `bench servers --quick` (3 repetitions) took 268 s; with 5,
    // about this.
    ("servers", 330.0),
    // Not measured in a study yet: `bench color-stats --quick` alone took 122 s with its cases
    // of colors in place (15 pairs each; load 10 on the 2 CPUs), 3 s before them.
    ("color-stats", 60.0),
    // Not measured in a study yet: `bench readers --quick` alone took about 8 s (loaded).
    ("readers", 8.0),
    // Not measured in a study yet: `bench tuning --quick --workers 2` alone took 191 s (load 9
    // on the 2 CPUs).
    ("tuning", 190.0),
];

/// Expected seconds of a benchmark missing from [`QUICK_SECONDS`].
const UNKNOWN_SECONDS: f64 = 20.0;

/// How much longer the full problem sizes take than the quick ones (a rough figure: the
/// measured durations correct it after the first benchmark).
const FULL_SIZES_FACTOR: f64 = 4.0;

/// The scale applied to the expected durations is kept within these bounds, so that one
/// benchmark far off its estimate (a peer missing, a disturbed run) does not swing the rest.
const SCALE_BOUNDS: (f64, f64) = (0.2, 5.0);

/// The expected seconds of benchmark `name` under `opts`: its quick figure, times the full
/// sizes' factor, times the repetitions (with the warm-up) over the quick run's 5 + 1, times the
/// worker counts measured over the quick run's 2.
pub(crate) fn expected_seconds(name: &str, opts: &Options) -> f64 {
    let quick = QUICK_SECONDS.iter().find(|(n, _)| *n == name).map_or(UNKNOWN_SECONDS, |p| p.1);
    let sizes = if opts.quick { 1.0 } else { FULL_SIZES_FACTOR };
    let reps = (opts.reps + 1) as f64 / 6.0;
    let workers = opts.workers.len().max(1) as f64 / 2.0;
    quick * sizes * reps * workers
}

/// The time left: the expected seconds of the benchmarks not run yet (`left`), scaled by the
/// actual over the expected seconds of those run (`done`: (expected, actual) pairs), within
/// [`SCALE_BOUNDS`]; unscaled before any has run.
pub(crate) fn time_left(left: &[f64], done: &[(f64, f64)]) -> Duration {
    let expected: f64 = done.iter().map(|d| d.0).sum();
    let actual: f64 = done.iter().map(|d| d.1).sum();
    let scale = if expected > 0.0 && actual > 0.0 {
        (actual / expected).clamp(SCALE_BOUNDS.0, SCALE_BOUNDS.1)
    } else {
        1.0
    };
    Duration::from_secs_f64(left.iter().sum::<f64>() * scale)
}

/// A duration as people read it: "45 s", "3 min 05 s", "1 h 02 min".
pub(crate) fn human(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    match s {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min {:02} s", s / 60, s % 60),
        s => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
    }
}

/// The progress of a study over its benchmarks, in order.
pub(crate) struct Progress {
    /// Each benchmark's name and expected seconds.
    expected: Vec<(String, f64)>,
    /// Actual seconds of the benchmarks run, in order.
    took: Vec<f64>,
}

impl Progress {
    pub(crate) fn new(names: &[&str], opts: &Options) -> Self {
        let expected = names.iter().map(|n| (n.to_string(), expected_seconds(n, opts))).collect();
        Progress { expected, took: Vec::new() }
    }

    /// The line printed before the next benchmark runs (`elapsed`: since the study started).
    pub(crate) fn line(&self, elapsed: Duration) -> String {
        let i = self.took.len();
        let name = self.expected.get(i).map_or("?", |e| e.0.as_str());
        let done: Vec<(f64, f64)> =
            self.expected.iter().zip(&self.took).map(|(e, &t)| (e.1, t)).collect();
        let left: Vec<f64> = self.expected.iter().skip(i).map(|e| e.1).collect();
        format!(
            "study [{}/{}] {name}: {} so far, about {} left{}",
            i + 1,
            self.expected.len(),
            human(elapsed),
            human(time_left(&left, &done)),
            if done.is_empty() { " (fixed estimates until a benchmark has run)" } else { "" }
        )
    }

    /// The benchmark just run took `d`.
    pub(crate) fn finished(&mut self, d: Duration) {
        self.took.push(d.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(quick: bool, reps: usize, workers: Vec<usize>) -> Options {
        Options { reps, quick, workers }
    }

    #[test]
    fn before_any_run_the_fixed_estimates_add_up() {
        assert_eq!(time_left(&[10.0, 20.0], &[]), Duration::from_secs(30));
        assert_eq!(time_left(&[], &[]), Duration::ZERO);
    }

    #[test]
    fn the_estimates_left_follow_how_the_runs_went() {
        // Two benchmarks expected at 10 s each took 30 s together: the rest takes 1.5x.
        assert_eq!(time_left(&[20.0], &[(10.0, 10.0), (10.0, 20.0)]), Duration::from_secs(30));
        // Faster than expected: the rest shrinks alike.
        assert_eq!(time_left(&[40.0], &[(10.0, 5.0)]), Duration::from_secs(20));
        // One far-off run does not swing the rest beyond the bounds.
        assert_eq!(time_left(&[10.0], &[(1.0, 100.0)]), Duration::from_secs(50));
        assert_eq!(time_left(&[10.0], &[(100.0, 1.0)]), Duration::from_secs(2));
    }

    #[test]
    fn expected_durations_grow_with_sizes_repetitions_and_workers() {
        let quick = expected_seconds("prodcons", &opts(true, 5, vec![1, 2]));
        assert_eq!(quick, 94.0);
        assert_eq!(expected_seconds("prodcons", &opts(false, 5, vec![1, 2])), 4.0 * quick);
        assert_eq!(expected_seconds("prodcons", &opts(true, 11, vec![1, 2])), 2.0 * quick);
        assert_eq!(expected_seconds("prodcons", &opts(true, 5, vec![1, 2, 4, 8])), 2.0 * quick);
        assert_eq!(expected_seconds("no such", &opts(true, 5, vec![1, 2])), UNKNOWN_SECONDS);
        for name in ochre_bench::BENCHES {
            assert!(QUICK_SECONDS.iter().any(|(n, _)| n == name), "{name} has an estimate");
        }
    }

    #[test]
    fn the_progress_line_counts_benchmarks_and_corrects_its_estimate() {
        let o = opts(true, 5, vec![1, 2]);
        let mut p = Progress::new(&["pingpong", "wakeup"], &o);
        let first = p.line(Duration::ZERO);
        assert_eq!(
            first,
            "study [1/2] pingpong: 0 s so far, about 1 min 34 s left (fixed estimates until a \
             benchmark has run)"
        );
        // pingpong (87 s expected) took 174 s: wakeup (7 s expected) should take 14.
        p.finished(Duration::from_secs(174));
        assert_eq!(
            p.line(Duration::from_secs(175)),
            "study [2/2] wakeup: 2 min 55 s so far, about 14 s left"
        );
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human(Duration::from_secs(45)), "45 s");
        assert_eq!(human(Duration::from_secs(185)), "3 min 05 s");
        assert_eq!(human(Duration::from_secs(3720)), "1 h 02 min");
    }
}
