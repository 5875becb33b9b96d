//! `ochre mr`: the Phoenix applications on ochre (`ochre-mr`): generate an input, run an
//! application with its phase breakdown (and check it against its sequential reference), or
//! act as a Hadoop Streaming mapper or reducer.

use std::path::PathBuf;

use ochre::{Config, Runtime};
use ochre_mr::apps::{self, streaming, Size};

/// Run a Phoenix MapReduce application on ochre, generate its input, or act as a Hadoop
/// Streaming mapper or reducer.
///
/// Examples: `ochre mr gen word-count --size small --out /tmp/wc.txt`, then
/// `ochre mr word-count --input /tmp/wc.txt --verify`; with Hadoop Streaming,
/// `-mapper "ochre mr word-count --streaming map" -reducer "ochre mr word-count --streaming
/// reduce"`.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct MrArgs {
    #[command(subcommand)]
    gen: Option<MrCommand>,
    /// The application.
    #[arg(required = true, value_parser = clap::builder::PossibleValuesParser::new(apps::NAMES))]
    app: Option<String>,
    /// Its input: a file, or a directory for reverse-index and matrix-multiply (as
    /// `ochre mr gen` writes them).
    #[arg(long, required_unless_present = "streaming")]
    input: Option<PathBuf>,
    /// Worker threads (default: one per CPU available).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    workers: Option<u32>,
    /// Run on the libasync-smp baseline configuration of the runtime.
    #[arg(long)]
    baseline: bool,
    /// Also run the sequential reference and fail unless the results agree.
    #[arg(long)]
    verify: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Record the runtime's trace and write it to this file as Chrome trace JSON at the end
    /// (open it in ui.perfetto.dev).
    #[arg(long, conflicts_with = "streaming")]
    trace: Option<PathBuf>,
    /// Hadoop Streaming: be the mapper (input on stdin, `key TAB value` lines out) or the
    /// reducer (sorted `key TAB value` lines in, one line per key out).
    #[arg(long, value_parser = ["map", "reduce"], conflicts_with_all = ["input", "verify", "json"])]
    streaming: Option<String>,
}

#[derive(clap::Subcommand)]
enum MrCommand {
    /// Write a seeded input for an application, in Phoenix's format.
    Gen {
        /// The application.
        #[arg(value_parser = clap::builder::PossibleValuesParser::new(apps::NAMES))]
        app: String,
        /// small (tests), medium (benchmarks) or large.
        #[arg(long, default_value = "small", value_parser = ["small", "medium", "large"])]
        size: String,
        /// Where to write it (a file, or a directory for reverse-index and matrix-multiply).
        #[arg(long)]
        out: PathBuf,
        /// Seed of the generator.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

pub(crate) fn run(args: &MrArgs) -> Result<(), String> {
    if let Some(MrCommand::Gen { app, size, out, seed }) = &args.gen {
        let size = Size::parse(size).ok_or_else(|| format!("unknown size {size}"))?;
        apps::generate(app, size, *seed, out).map_err(|e| e.to_string())?;
        eprintln!("wrote {} input for {app} at {}", size_name(size), out.display());
        return Ok(());
    }
    let app = args.app.as_deref().ok_or("an application is needed")?;
    let trace = crate::trace::create(args.trace.as_deref())?;
    let rt = || {
        let config = if args.baseline { Config::baseline() } else { Config::default() };
        let config = crate::trace::config(config, trace.as_ref());
        let mut b = Runtime::builder().config(config).abort_on_panic(true);
        if let Some(w) = args.workers {
            b = b.workers(w as usize);
        }
        b.build().map_err(|e| format!("starting the runtime: {e}"))
    };
    match args.streaming.as_deref() {
        Some("map") => {
            let rt = rt()?;
            let (mut stdin, mut stdout) = (std::io::stdin().lock(), std::io::stdout().lock());
            return streaming::map(app, &mut stdin, &mut stdout, &rt).map_err(|e| e.to_string());
        }
        Some(_) => {
            let (mut stdin, mut stdout) = (std::io::stdin().lock(), std::io::stdout().lock());
            return streaming::reduce(app, &mut stdin, &mut stdout).map_err(|e| e.to_string());
        }
        None => {}
    }
    let input = args.input.as_deref().ok_or("--input is needed")?;
    let runtime = rt()?;
    let report = apps::run(app, input, &runtime, args.verify).map_err(|e| e.to_string())?;
    if let Some(file) = trace {
        file.write(&runtime)?;
    }
    let mut text = String::new();
    if args.json {
        text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())? + "\n";
    } else {
        text += &format!("{app}:\n");
        for line in &report.summary {
            text += &format!("  {line}\n");
        }
        text += &format!("phases: {}\n", report.phases.line());
        if let (Some(ok), Some(s)) = (report.verified, report.sequential_seconds) {
            let verdict = if ok { "equal to" } else { "DIFFERENT from" };
            text += &format!("verify: {verdict} the sequential reference ({:.1} ms)\n", s * 1e3);
        }
    }
    // A reader that stops early (`| head`) is not an error of the job: ignore a broken pipe.
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            return Err(format!("writing the report: {e}"));
        }
        _ => {}
    }
    match report.verified {
        Some(false) => Err(format!("{app}: the result differs from the sequential reference")),
        _ => Ok(()),
    }
}

fn size_name(size: Size) -> &'static str {
    match size {
        Size::Small => "a small",
        Size::Medium => "a medium",
        Size::Large => "a large",
    }
}
