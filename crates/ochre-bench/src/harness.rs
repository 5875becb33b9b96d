//! Measuring systems side by side: repetitions, medians, spread, ratios, JSON.
//!
//! Every benchmark measures all its systems in the same process, interleaved (repetition 1 of
//! every system, then repetition 2, ..., in alternating order) so that drift of the shared machine
//! hits them alike, with a warm-up repetition first that is not kept. A result row holds every
//! sample; the table shows the median, the min-max spread and the ratio of each system's median
//! to ochre's on the same case, which is the figure that means something on a shared machine.

use std::time::Instant;

use serde::{Deserialize, Serialize};

/// How much measuring to do.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Options {
    /// Kept repetitions per system and case (at least 5 for a result worth reporting).
    pub reps: usize,
    /// Smaller problem sizes (for `study --quick` and tests).
    pub quick: bool,
    /// Worker counts to measure.
    pub workers: Vec<usize>,
}

impl Options {
    /// Defaults for a run: 5 repetitions, 1 and 2 workers (capped to the CPUs available).
    pub fn new(quick: bool) -> Self {
        // Also fixes the CPUs "worker i" threads are pinned to, from this (the caller's) thread.
        let cpus = crate::peers::process_cpus().len().max(1);
        let workers = [1, 2].into_iter().filter(|&w| w <= cpus).collect();
        Options { reps: 5, quick, workers }
    }
}

/// One system on one case: its samples and their summary.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// The benchmark.
    pub bench: String,
    /// The system measured (`ochre`, `tokio-mt`, ...).
    pub system: String,
    /// The case: what varies within the benchmark (workers, handler cost...).
    pub case: String,
    /// Worker threads used.
    pub workers: usize,
    /// Unit of the samples (higher is better unless it ends in `ns`).
    pub unit: String,
    /// Every kept sample.
    pub samples: Vec<f64>,
    /// Median of the samples.
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// This row's median over ochre's median on the same case (None if ochre was not measured).
    pub vs_ochre: Option<f64>,
}

/// The result of one benchmark.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BenchReport {
    /// Benchmark name.
    pub bench: String,
    /// What is measured, in a sentence.
    pub what: String,
    /// All rows.
    pub rows: Vec<Row>,
    /// Goals checked on this run, each with whether it held.
    pub checks: Vec<Check>,
    /// Things the reader should know (skipped peers...).
    pub notes: Vec<String>,
    /// Throughput against load, one curve per system, case and load model (benchmarks that
    /// sweep a load; absent from the JSON of the others, and from older reports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub curves: Vec<Curve>,
    /// Per-function costs per request at 1 and 2 cores and their potential performance gain,
    /// one table per system (benchmarks that profile; absent elsewhere).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ppg: Vec<Ppg>,
}

/// The potential performance gain table of one system (thesis §6.4): for each function, its
/// CPU cost per request at 1 and at 2 cores (software-clock sampling), and what share of a
/// request's cost at 2 cores it would give back if its cost per request stayed what it is at
/// 1 core (scaled perfectly).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Ppg {
    /// The system.
    pub system: String,
    /// The case (file set).
    pub case: String,
    /// CPU cost of a request in all, microseconds, at 1 and at 2 cores.
    pub total_us: [f64; 2],
    /// Requests served while sampling, at 1 and at 2 cores.
    pub requests: [u64; 2],
    /// The functions, largest gain first (only those that gain at least 0.5%, or the first few).
    pub functions: Vec<PpgFunction>,
}

/// One function's line of a [`Ppg`] table.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PpgFunction {
    /// The symbol (closures folded into their function).
    pub function: String,
    /// CPU cost per request, microseconds, at 1 and at 2 cores.
    pub us: [f64; 2],
    /// (cost at 2 cores - cost at 1 core) / total cost at 2 cores.
    pub gain: f64,
}

/// A system's throughput at each load of a sweep (one probe each, not repeated: the shape of
/// the curve, not a figure to compare to a tenth).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Curve {
    /// The system.
    pub system: String,
    /// The case (as the rows name it).
    pub case: String,
    /// The load model: `closed` (keep-alive clients, no think time) or `semi-open` (sessions
    /// with active and inactive think times).
    pub model: String,
    /// What the load counts: `connections`, `sessions/s`...
    pub load_unit: String,
    /// The points, by increasing load.
    pub points: Vec<CurvePoint>,
}

/// One probe of a [`Curve`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CurvePoint {
    /// The load, in the curve's unit.
    pub load: f64,
    /// Requests per second it offered, where the model fixes it (semi-open: sessions per second
    /// times requests per session); `None` for a closed loop, whose offered load is what the
    /// server allows.
    pub offered: Option<f64>,
    /// Successful responses per second; `None` if the probe failed.
    pub throughput: Option<f64>,
    /// The 99th percentile of latency, in milliseconds, when measured.
    pub p99_ms: Option<f64>,
    /// Why the probe failed (errors by kind), if it did.
    pub error: Option<String>,
    /// Share of the probe's time the injector's thread wanted its CPU (ran or waited to run),
    /// where measured: near 1, the injector, not the server, was the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injector_busy: Option<f64>,
}

/// A goal stated by an issue, checked on the measured medians.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Check {
    /// The goal.
    pub goal: String,
    /// The measured value it is judged on.
    pub measured: f64,
    /// Whether the goal held on this run.
    pub held: bool,
}

/// Geometric mean of a non-empty slice of positive figures (ratios).
pub fn geomean(v: &[f64]) -> f64 {
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

/// Median of a non-empty slice.
pub fn median(samples: &[f64]) -> f64 {
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// A system under test: a name and a function that runs one repetition and returns its figure.
pub struct System<'a> {
    /// Name shown in tables.
    pub name: String,
    /// Runs once; returns the sample (throughput or time) or an error to skip the system.
    pub run: Box<dyn FnMut() -> Result<f64, String> + 'a>,
}

impl<'a> System<'a> {
    /// A system from a name and a closure.
    pub fn new(name: impl Into<String>, run: impl FnMut() -> Result<f64, String> + 'a) -> Self {
        System { name: name.into(), run: Box::new(run) }
    }
}

/// Measures `systems` on one case, interleaved, and appends a row per system to `report`.
/// A system whose run fails is reported in the notes and left out.
pub fn measure_case(
    report: &mut BenchReport,
    case: &str,
    workers: usize,
    unit: &str,
    reps: usize,
    mut systems: Vec<System<'_>>,
) {
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); systems.len()];
    let mut failed: Vec<Option<String>> = vec![None; systems.len()];
    let n = systems.len();
    for rep in 0..=reps {
        // Forward on even repetitions, backward on odd ones (A B, B A, ...): each system follows
        // a different one from one repetition to the next, so no system always runs in the wake
        // of the same neighbour (its threads, its caches, the CPU's frequency after it), and a
        // drift that is linear over a pair of repetitions hits every system alike.
        for k in 0..n {
            let i = if rep % 2 == 0 { k } else { n - 1 - k };
            let sys = &mut systems[i];
            if failed[i].is_some() {
                continue;
            }
            match (sys.run)() {
                Ok(v) if rep > 0 => samples[i].push(v),
                Ok(_) => {} // warm-up
                Err(e) => failed[i] = Some(e),
            }
        }
    }
    let ochre_median = systems
        .iter()
        .zip(&samples)
        .find(|(s, v)| s.name == "ochre" && !v.is_empty())
        .map(|(_, v)| median(v));
    for ((sys, s), err) in systems.iter().zip(samples).zip(failed) {
        if let Some(e) = err {
            report.notes.push(format!("{} [{case}]: {} skipped: {e}", report.bench, sys.name));
            continue;
        }
        let m = median(&s);
        report.rows.push(Row {
            bench: report.bench.clone(),
            system: sys.name.clone(),
            case: case.to_string(),
            workers,
            unit: unit.to_string(),
            min: s.iter().copied().fold(f64::INFINITY, f64::min),
            max: s.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            median: m,
            vs_ochre: ochre_median.map(|o| m / o).filter(|r| r.is_finite()),
            samples: s,
        });
    }
}

impl BenchReport {
    /// An empty report.
    pub fn new(bench: &str, what: &str) -> Self {
        BenchReport { bench: bench.into(), what: what.into(), ..Default::default() }
    }

    /// The median of `system` on `case`, if measured.
    pub fn median_of(&self, system: &str, case: &str) -> Option<f64> {
        self.row(system, case).map(|r| r.median)
    }

    fn row(&self, system: &str, case: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.system == system && r.case == case)
    }

    /// Of `systems`, the one with the highest median on `case`, with that median.
    pub fn best_of<'a>(&self, systems: &[&'a str], case: &str) -> Option<(&'a str, f64)> {
        systems
            .iter()
            .filter_map(|s| self.median_of(s, case).map(|m| (*s, m)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// The median over repetitions of `a`'s sample divided by `b`'s sample of the same
    /// repetition, on `case`: `measure_case` interleaves systems within each repetition, so
    /// repetition `i` of both saw the same state of the machine, and drift between repetitions
    /// (a shared host's load moving over seconds) cancels in each quotient, which it does not in
    /// a ratio of medians. `None` unless both were measured with as many samples.
    pub fn paired_ratio(&self, a: &str, b: &str, case: &str) -> Option<f64> {
        self.paired_quotients(a, b, case).map(|q| median(&q))
    }

    /// The quotients behind [`paired_ratio`](Self::paired_ratio), one per repetition, sorted
    /// (for their spread). `None` unless both were measured with as many samples.
    pub fn paired_quotients(&self, a: &str, b: &str, case: &str) -> Option<Vec<f64>> {
        let (sa, sb) = (&self.row(a, case)?.samples, &self.row(b, case)?.samples);
        if sa.is_empty() || sa.len() != sb.len() {
            return None;
        }
        let mut quotients: Vec<f64> = sa.iter().zip(sb).map(|(x, y)| x / y).collect();
        quotients.sort_by(f64::total_cmp);
        Some(quotients)
    }

    /// `a` over the best of `others` on `case`, the best chosen without the repetition it is
    /// compared on: for each repetition, the system of `others` with the highest median over
    /// the *other* repetitions, and `a`'s sample over that system's sample of this one; the
    /// median of those quotients, with the system chosen most often. The best of several noisy
    /// medians is high by chance (the winner's curse), and a quotient against it on the samples
    /// that chose it is low by as much: `a` equal to every one of eight settings measured 0.91-0.97
    /// of "the best" in a study. `None` unless `a` and every one of `others` have the same
    /// number of samples, two at least.
    pub fn paired_ratio_to_best<'s>(
        &self,
        a: &str,
        others: &[&'s str],
        case: &str,
    ) -> Option<(&'s str, f64)> {
        let sa = &self.row(a, case)?.samples;
        let rows: Vec<(&'s str, &Vec<f64>)> = others
            .iter()
            .map(|o| self.row(o, case).map(|r| (*o, &r.samples)))
            .collect::<Option<_>>()?;
        let n = sa.len();
        if n < 2 || rows.is_empty() || rows.iter().any(|(_, s)| s.len() != n) {
            return None;
        }
        let mut quotients = Vec::with_capacity(n);
        let mut chosen = vec![0usize; rows.len()];
        for (i, &x) in sa.iter().enumerate() {
            let held_out = |s: &Vec<f64>| {
                let rest: Vec<f64> =
                    s.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, &x)| x).collect();
                median(&rest)
            };
            let (k, _) = rows
                .iter()
                .enumerate()
                .map(|(k, (_, s))| (k, held_out(s)))
                .max_by(|x, y| x.1.total_cmp(&y.1))?;
            chosen[k] += 1;
            quotients.push(x / rows[k].1[i]);
        }
        let most = (0..rows.len()).max_by_key(|&k| chosen[k])?;
        Some((rows[most].0, median(&quotients)))
    }

    /// Records a goal check.
    pub fn check(&mut self, goal: impl Into<String>, measured: f64, held: bool) {
        self.checks.push(Check { goal: goal.into(), measured, held });
    }

    /// The report as a plain-text table.
    pub fn table(&self) -> String {
        let mut out = format!("## {}\n{}\n\n", self.bench, self.what);
        out += &format!(
            "{:<22} {:<16} {:>14} {:>27} {:>9}\n",
            "case", "system", "median", "min - max", "vs ochre"
        );
        for r in &self.rows {
            out += &format!(
                "{:<22} {:<16} {:>14} {:>27} {:>9}\n",
                r.case,
                r.system,
                format!("{} {}", si(r.median), r.unit),
                format!("{} - {}", si(r.min), si(r.max)),
                r.vs_ochre.map(|v| format!("{v:.2}x")).unwrap_or_default()
            );
        }
        for c in &self.checks {
            out += &format!(
                "[{}] {} (measured {:.3})\n",
                if c.held { "ok" } else { "MISSED" },
                c.goal,
                c.measured
            );
        }
        for n in &self.notes {
            out += &format!("note: {n}\n");
        }
        out
    }
}

/// A number with an SI suffix, 3 significant digits.
pub fn si(v: f64) -> String {
    let (x, suffix) = match v.abs() {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "K"),
        _ => (v, ""),
    };
    if x.abs() >= 100.0 {
        format!("{x:.0}{suffix}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}{suffix}")
    } else {
        format!("{x:.2}{suffix}")
    }
}

/// The default configuration with what a diagnostic probe's environment switches off or sets:
/// `FOLLOW=0` (colors stay where their hash puts them), `STEAL=off`, `TURN=n` (the turn
/// budget; a value that does not parse is ignored).
pub fn probe_config() -> ochre::Config {
    let mut c = ochre::Config::default();
    if std::env::var("FOLLOW").as_deref() == Ok("0") {
        c.follow = false;
    }
    if std::env::var("STEAL").as_deref() == Ok("off") {
        c.steal = ochre::Steal::Off;
    }
    if let Some(n) = std::env::var("TURN").ok().and_then(|n| n.parse().ok()) {
        c.turn_budget = n;
    }
    c
}

/// Busy work of about `ns` nanoseconds (a handler's cost). Reads the clock, so costs below
/// ~50 ns are approximate; 0 does nothing.
#[inline]
pub fn work(ns: u64) {
    if ns == 0 {
        return;
    }
    let t = Instant::now();
    while (t.elapsed().as_nanos() as u64) < ns {
        std::hint::spin_loop();
    }
}

/// One line of what worker `w` did in a run (its counters, as the diagnostic probes print them).
pub fn worker_line(w: usize, s: &ochre::WorkerStats) -> String {
    format!(
        "worker {w}: events {} local {} remote {} batches {} (mean {:.1}) wakeups {} sleeps {} \
         spins {} hits {} moves out {} in {} steals {} lent {} recalls {} inbox {} steal asks {} \
         failed {} waited {} us share {} stood in for {} times (waits {}){}",
        s.events_run,
        s.posts_local,
        s.posts_remote,
        s.batches_sent,
        s.batched_msgs as f64 / s.batches_sent.max(1) as f64,
        s.wakeups_sent,
        s.sleeps,
        s.spins,
        s.spin_wins,
        s.colors_moved_out,
        s.colors_moved_in,
        s.steals_in,
        s.steals_out,
        s.recalls,
        s.msgs_received,
        s.steal_attempts,
        s.steal_failures,
        s.steal_wait_us,
        s.cpu_share,
        s.stood_in_for,
        s.stand_in_waits,
        if s.unpinned > 0 { " unpinned" } else { "" },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_ratios_cancel_drift_between_repetitions() {
        // `a` is 1.5x `b` on the same machine state; the machine doubles its speed during the
        // third repetition, between `a`'s sample and `b`'s. Warm-up values first (dropped).
        let seq = |values: Vec<f64>| {
            let mut it = values.into_iter();
            move || Ok(it.next().expect("one value per run"))
        };
        let systems = vec![
            System::new("a", seq(vec![1.0, 150.0, 150.0, 150.0, 300.0, 300.0])),
            System::new("b", seq(vec![1.0, 100.0, 100.0, 200.0, 200.0, 200.0])),
        ];
        let mut r = BenchReport::new("t", "t");
        measure_case(&mut r, "c", 1, "x", 5, systems);
        // The ratio of medians follows which repetitions the medians fall in; the paired one
        // follows the quotients of each repetition.
        assert_eq!(r.median_of("a", "c").zip(r.median_of("b", "c")), Some((150.0, 200.0)));
        assert_eq!(r.paired_ratio("a", "b", "c"), Some(1.5));
        assert_eq!(r.paired_ratio("a", "missing", "c"), None);
    }

    #[test]
    fn the_best_of_noisy_equals_is_chosen_on_the_other_repetitions() {
        // Nine systems drawn alike (5 repetitions, +-10% noise), over 300 cases: against the best
        // median among eight, `a` (the ninth) looks slower than it is; against the best chosen
        // on the other repetitions, it does not.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut noise = move || {
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            let u = (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64;
            1.0 + 0.2 * (u - 0.5)
        };
        let names = ["a", "f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7"];
        let mut r = BenchReport::new("t", "t");
        for c in 0..300 {
            for name in names {
                let samples: Vec<f64> = (0..5).map(|_| 100.0 * noise()).collect();
                r.rows.push(Row {
                    bench: "t".into(),
                    system: name.into(),
                    case: format!("c{c}"),
                    workers: 1,
                    unit: "x".into(),
                    median: median(&samples),
                    min: 0.0,
                    max: 0.0,
                    samples,
                    vs_ochre: None,
                });
            }
        }
        let (mut naive, mut held_out) = (0.0, 0.0);
        for c in 0..300 {
            let case = format!("c{c}");
            let (best, _) = r.best_of(&names[1..], &case).unwrap();
            naive += r.paired_ratio("a", best, &case).unwrap() / 300.0;
            held_out += r.paired_ratio_to_best("a", &names[1..], &case).unwrap().1 / 300.0;
        }
        assert!(naive < 0.975, "the best of eight medians, on its own samples: {naive:.3}");
        assert!((held_out - 1.0).abs() < 0.01, "chosen on the other repetitions: {held_out:.3}");
        assert_eq!(r.paired_ratio_to_best("a", &["missing"], "c0"), None);
    }

    #[test]
    fn median_and_si() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(si(1_234_000.0), "1.23M");
        assert_eq!(si(56_700.0), "56.7K");
        assert_eq!(si(12.0), "12.0");
    }

    #[test]
    fn measure_case_interleaves_and_computes_ratios() {
        let mut report = BenchReport::new("t", "test");
        let mut calls = Vec::new();
        let log = std::cell::RefCell::new(&mut calls);
        let mut a = 0.0;
        measure_case(
            &mut report,
            "c",
            1,
            "ops/s",
            3,
            vec![
                System::new("ochre", || {
                    log.borrow_mut().push("o");
                    a += 10.0;
                    Ok(a)
                }),
                System::new("peer", || {
                    log.borrow_mut().push("p");
                    Ok(5.0)
                }),
                System::new("broken", || Err("not installed".into())),
            ],
        );
        assert_eq!(
            calls,
            vec!["o", "p", "p", "o", "o", "p", "p", "o"],
            "warm-up + 3, interleaved, order alternating"
        );
        assert_eq!(report.rows.len(), 2);
        let o = &report.rows[0];
        assert_eq!(o.samples, vec![20.0, 30.0, 40.0], "the warm-up sample is dropped");
        assert_eq!(o.median, 30.0);
        assert_eq!((o.min, o.max), (20.0, 40.0));
        assert_eq!(report.rows[1].vs_ochre, Some(5.0 / 30.0));
        assert!(report.notes[0].contains("broken") && report.notes[0].contains("not installed"));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["rows"][0]["samples"].as_array().unwrap().len(), 3);
        assert!(report.table().contains("0.17x"));
    }
}
