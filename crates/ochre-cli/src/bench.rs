//! `ochre bench` and `ochre study`: the benchmarks against peer runtimes and allocators
//! (`ochre-bench`), in builds with the `bench` feature only (the default).

use std::path::PathBuf;

use ochre_bench::Options;

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
    /// Kept repetitions per system and case.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    reps: u32,
    /// Worker counts to measure, comma-separated (default: 1 and 2, capped to the CPUs).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=4096))]
    workers: Option<Vec<u32>>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// `ochre study`'s arguments.
#[derive(clap::Args)]
pub(crate) struct StudyArgs {
    /// Smaller problem sizes: fits in a few minutes on 2 cores.
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// Larger problem sizes and more handler costs.
    #[arg(long)]
    full: bool,
    /// Where to write the report.
    #[arg(long, default_value = "target/ochre-report")]
    out: PathBuf,
    /// Run nothing: make report.md, report.html and the plots again from the JSON that a
    /// study left in --out.
    #[arg(long, conflicts_with_all = ["quick", "full"])]
    rerender: bool,
}

/// Runs `ochre bench`.
pub(crate) fn bench(args: &BenchArgs) -> Result<(), String> {
    let mut opts = Options::new(args.quick);
    opts.reps = args.reps as usize;
    if let Some(w) = &args.workers {
        opts.workers = w.iter().map(|&w| w as usize).collect();
    }
    let name = &args.name;
    let report =
        ochre_bench::run(name, &opts).ok_or_else(|| format!("no benchmark named {name}"))?;
    println!("{}", report.table());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Runs `ochre study`.
pub(crate) fn study(args: &StudyArgs) -> Result<(), String> {
    if args.rerender {
        return study::rerender(&args.out);
    }
    study::study(args.quick, &args.out)
}
