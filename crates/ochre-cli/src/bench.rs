//! `ochre bench` and `ochre study`: the benchmarks against peer runtimes and allocators
//! (`ochre-bench`), in builds with the `bench` feature only (the default).

use std::path::PathBuf;

use ochre_bench::{BenchReport, Options};

use crate::{study, write_json};

/// `ochre bench`'s arguments.
#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    /// Which benchmark.
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(ochre_bench::BENCHES))]
    name: String,
    /// Smaller problem sizes.
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    measure: MeasureArgs,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Exit with a failure when a goal of the benchmark is missed (the table says which).
    #[arg(long)]
    strict: bool,
    /// Record every ochre runtime the benchmark builds and write the newest ones' traces to
    /// this file as Chrome trace JSON at the end, a process of the viewer each (open it in
    /// ui.perfetto.dev)
    #[arg(long)]
    trace: Option<PathBuf>,
}

/// How much measuring: what `bench` and `study` share.
#[derive(clap::Args)]
struct MeasureArgs {
    /// Kept repetitions per system and case (default 5; 9 for `study --full`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    reps: Option<u32>,
    /// Worker counts to measure, comma-separated (default: 1 and 2, capped to the CPUs; for
    /// `study --full`, every power of two up to the CPUs, and their number).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=4096))]
    workers: Option<Vec<u32>>,
}

/// Repetitions of `study --full`: the median of 9 moves less with one disturbed sample.
const FULL_REPS: usize = 9;

impl MeasureArgs {
    /// The options: `quick` sizes, the defaults of `full` or of an ordinary run, then the
    /// flags given.
    fn options(&self, quick: bool, full: bool) -> Result<Options, String> {
        let mut opts = Options::new(quick);
        if full {
            opts.reps = FULL_REPS;
            let cpus = ochre::topology::allowed_cpus()
                .map_err(|e| format!("reading CPU affinity: {e}"))?
                .len()
                .max(1);
            opts.workers = full_workers(cpus);
        }
        if let Some(reps) = self.reps {
            opts.reps = reps as usize;
        }
        if let Some(w) = &self.workers {
            opts.workers = w.iter().map(|&w| w as usize).collect();
        }
        Ok(opts)
    }
}

/// The worker counts of `study --full` on `cpus` CPUs: 1, 2, 4, ... below `cpus`, and `cpus`.
fn full_workers(cpus: usize) -> Vec<usize> {
    let mut w: Vec<usize> =
        std::iter::successors(Some(1), |&w| Some(w * 2)).take_while(|&w| w < cpus).collect();
    w.push(cpus);
    w
}

/// `ochre study`'s arguments.
#[derive(clap::Args)]
pub(crate) struct StudyArgs {
    /// Smaller problem sizes: fits in a few minutes on 2 cores.
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// More measuring than the default run (which has the full problem sizes): 9 repetitions
    /// instead of 5, and every power of two of workers up to the CPUs instead of 1 and 2.
    #[arg(long)]
    full: bool,
    #[command(flatten)]
    measure: MeasureArgs,
    /// Do not install missing peers (nginx, wrk). By default a study run as root with apt-get
    /// installs them with scripts/install-peers.sh; either way the rows that need a missing
    /// peer are skipped and every other row is measured.
    #[arg(long)]
    no_install_peers: bool,
    /// Where to write the report.
    #[arg(long, default_value = "target/ochre-report")]
    out: PathBuf,
    /// Run nothing: make report.md, report.html and the plots again from the JSON that a
    /// study left in --out.
    #[arg(long, conflicts_with_all = ["quick", "full", "reps", "workers", "no_install_peers"])]
    rerender: bool,
}

/// Runs `ochre bench`.
pub(crate) fn bench(args: &BenchArgs) -> Result<(), String> {
    let opts = args.measure.options(args.quick, false)?;
    let name = &args.name;
    let trace = crate::trace::create(args.trace.as_deref())?;
    if trace.is_some() {
        crate::trace::every_runtime();
    }
    let report =
        ochre_bench::run(name, &opts).ok_or_else(|| format!("no benchmark named {name}"))?;
    println!("{}", report.table());
    if let Some(file) = trace {
        file.write_every_runtime()?;
    }
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    if args.strict {
        goals_held(&report)?;
    }
    Ok(())
}

/// Ok when every goal checked in `report` held; else which ones were missed.
fn goals_held(report: &BenchReport) -> Result<(), String> {
    let missed: Vec<String> = report
        .checks
        .iter()
        .filter(|c| !c.held)
        .map(|c| format!("{} (measured {:.3})", c.goal, c.measured))
        .collect();
    if missed.is_empty() {
        return Ok(());
    }
    Err(format!(
        "--strict: {} of {} goals of {} missed: {}",
        missed.len(),
        report.checks.len(),
        report.bench,
        missed.join("; ")
    ))
}

/// Runs `ochre study`.
pub(crate) fn study(args: &StudyArgs) -> Result<(), String> {
    if args.rerender {
        return study::rerender(&args.out);
    }
    let opts = args.measure.options(args.quick, args.full)?;
    study::study(opts, &args.out, !args.no_install_peers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ochre_bench::harness::Check;

    #[test]
    fn strict_fails_on_a_missed_goal_only() {
        let check = |goal: &str, held| Check { goal: goal.into(), measured: 0.5, held };
        let mut report = BenchReport { bench: "b".into(), ..BenchReport::default() };
        assert_eq!(goals_held(&report), Ok(()), "no goal, nothing missed");
        report.checks = vec![check("a", true), check("b", true)];
        assert_eq!(goals_held(&report), Ok(()));
        report.checks.push(check("c >= 1", false));
        let e = goals_held(&report).unwrap_err();
        assert!(e.contains("1 of 3 goals of b missed: c >= 1 (measured 0.500)"), "{e}");
    }

    #[test]
    fn full_measures_every_power_of_two_of_workers() {
        assert_eq!(full_workers(1), vec![1]);
        assert_eq!(full_workers(2), vec![1, 2]);
        assert_eq!(full_workers(6), vec![1, 2, 4, 6]);
        assert_eq!(full_workers(8), vec![1, 2, 4, 8]);
    }

    #[test]
    fn study_modes_differ_and_flags_override_them() {
        let none = MeasureArgs { reps: None, workers: None };
        let default = none.options(false, false).unwrap();
        let full = none.options(false, true).unwrap();
        assert_eq!((default.quick, default.reps), (false, 5));
        assert_eq!((full.quick, full.reps), (false, FULL_REPS));
        assert!(full.workers.len() >= default.workers.len());
        assert!(none.options(true, false).unwrap().quick);
        let given = MeasureArgs { reps: Some(3), workers: Some(vec![1]) };
        let o = given.options(false, true).unwrap();
        assert_eq!((o.reps, o.workers), (3, vec![1]));
    }
}
