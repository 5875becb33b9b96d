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

use ochre_bench::BenchReport;

/// Per case, per label, one ratio per file (in the files' order).
type Table = BTreeMap<String, BTreeMap<String, Vec<f64>>>;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: paired_ratios DIR [SYSTEM] [PEER]");
        std::process::exit(2);
    };
    let system = args.next().unwrap_or_else(|| "ochre".into());
    let peer = args.next().unwrap_or_else(|| "tokio-mt".into());
    let mut files: Vec<_> = match std::fs::read_dir(Path::new(&dir)) {
        Ok(d) => d.filter_map(Result::ok).map(|e| e.path()).collect(),
        Err(e) => {
            eprintln!("paired_ratios: {dir}: {e}");
            std::process::exit(1);
        }
    };
    files.retain(|p| p.extension().is_some_and(|x| x == "json"));
    files.sort();
    let mut table = Table::new();
    for path in &files {
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let label = stem.rsplit_once('-').map_or(stem, |(l, _)| l).to_string();
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
        for row in report.rows.iter().filter(|r| r.system == system) {
            if let Some(r) = report.paired_ratio(&system, &peer, &row.case) {
                table
                    .entry(row.case.clone())
                    .or_default()
                    .entry(label.clone())
                    .or_default()
                    .push(r);
            }
        }
    }
    if table.is_empty() {
        eprintln!("paired_ratios: no case in {dir} has both {system} and {peer}");
        std::process::exit(1);
    }
    println!("{system} / {peer}, paired medians, one figure per process:");
    let mut logs: BTreeMap<String, Vec<(f64, usize)>> = BTreeMap::new();
    for (case, by_label) in &table {
        let cells: Vec<String> = by_label
            .iter()
            .map(|(label, rs)| {
                let slots = logs.entry(label.clone()).or_default();
                slots.resize(slots.len().max(rs.len()), (0.0, 0));
                for (slot, r) in slots.iter_mut().zip(rs) {
                    slot.0 += r.ln();
                    slot.1 += 1;
                }
                let figures: Vec<String> = rs.iter().map(|r| format!("{r:.2}")).collect();
                format!("{label}: {}", figures.join(" "))
            })
            .collect();
        println!("{case:28} {}", cells.join("   "));
    }
    for (label, slots) in &logs {
        let means: Vec<String> =
            slots.iter().map(|(sum, n)| format!("{:.3}", (sum / *n as f64).exp())).collect();
        println!("{label}: geometric mean per process {}", means.join(" "));
    }
}
