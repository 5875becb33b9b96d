//! Reads benchmark JSON files (any `ochre bench NAME --json FILE`) of several processes and
//! builds, and prints, for each case, the paired ratio of one system over another in each file,
//! grouped by build, then each file's geometric mean over the cases.
//!
//! `paired_ratios DIR [SYSTEM] [PEER]` (defaults `ochre` and `tokio-mt`). The files in DIR are
//! named `LABEL-N.json` (`scripts/ab-bench.sh` writes them so: the label is the build, N the
//! process). A file's ratio for a case is the median over the repetitions of SYSTEM's sample
//! over PEER's sample of the same repetition (the benchmarks alternate the systems within a
//! repetition): the figure this project compares builds by, since absolute rates on a shared
//! machine move from one process to the next (`BenchReport::paired_ratio`, as the benchmarks'
//! own checks compute it).

use std::collections::BTreeMap;
use std::path::Path;

use ochre_bench::harness::geomean;
use ochre_bench::BenchReport;

/// A file's build label and process number (`LABEL-N.json`; N 0 when the name has none).
type Process = (String, u32);

fn process_of(path: &Path) -> Process {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    match stem.rsplit_once('-') {
        Some((label, n)) if n.parse::<u32>().is_ok() => (label.to_string(), n.parse().unwrap_or(0)),
        _ => (stem.to_string(), 0),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: paired_ratios DIR [SYSTEM] [PEER]");
        std::process::exit(2);
    };
    let system = args.next().unwrap_or_else(|| "ochre".into());
    let peer = args.next().unwrap_or_else(|| "tokio-mt".into());
    let files: Vec<_> = match std::fs::read_dir(Path::new(&dir)) {
        Ok(d) => d.filter_map(Result::ok).map(|e| e.path()).collect(),
        Err(e) => {
            eprintln!("paired_ratios: {dir}: {e}");
            std::process::exit(1);
        }
    };
    // Per case, per process (label, then number: `base-10` after `base-2`), the ratio.
    let mut table: BTreeMap<String, BTreeMap<Process, f64>> = BTreeMap::new();
    for path in files.iter().filter(|p| p.extension().is_some_and(|x| x == "json")) {
        let report: BenchReport = match std::fs::read(path).map(|b| serde_json::from_slice(&b)) {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                eprintln!("paired_ratios: {}: not benchmark JSON ({e}); skipped", path.display());
                continue;
            }
            Err(e) => {
                eprintln!("paired_ratios: {}: {e}; skipped", path.display());
                continue;
            }
        };
        let process = process_of(path);
        for row in report.rows.iter().filter(|r| r.system == system) {
            if let Some(r) = report.paired_ratio(&system, &peer, &row.case) {
                table.entry(row.case.clone()).or_default().insert(process.clone(), r);
            }
        }
    }
    if table.is_empty() {
        eprintln!("paired_ratios: no case in {dir} has both {system} and {peer}");
        std::process::exit(1);
    }
    println!("{system} / {peer}, paired medians, one figure per process:");
    // Each process's ratios over the cases it measured, for its geometric mean.
    let mut by_process: BTreeMap<&Process, Vec<f64>> = BTreeMap::new();
    for (case, ratios) in &table {
        let mut line = String::new();
        let mut label = None;
        for (process, &r) in ratios {
            if label != Some(&process.0) {
                label = Some(&process.0);
                line.push_str(&format!("   {}:", process.0));
            }
            line.push_str(&format!(" {r:.2}"));
            by_process.entry(process).or_default().push(r);
        }
        println!("{case:28}{line}");
    }
    let mut label = None;
    for (process, ratios) in &by_process {
        if label != Some(&process.0) {
            label = Some(&process.0);
            print!("\n{}: geometric mean per process", process.0);
        }
        print!(" {:.3}", geomean(ratios));
    }
    println!();
}
