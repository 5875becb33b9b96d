//! `ochre study`: every benchmark in one run, and the report made of them.
//!
//! How the report is made: each benchmark's [`BenchReport`] is written as JSON as soon as it
//! is measured (so a failure later loses nothing), then [`write_report`] turns the list into
//! `report.md`, `report.html` and SVG plots under `plots/` (plotters), one per question a
//! benchmark asks (see [`charts`]): mostly the ratio of each system's median to ochre's, case by
//! case, with the min-max spread as error bars; for producer-consumer, four charts (runtimes,
//! the thesis's Fig 5.16, event allocators, shared cache lines). The report is a function of
//! the JSON alone: a fixture in the tests makes every file.
//!
//! While a study runs, a progress line per benchmark with the time left goes to stderr
//! ([`progress`]); before it, missing peers are installed when possible and Phoenix is built ([`peers`]).

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use ochre_bench::harness::{si, Check, Row};
use ochre_bench::{BenchReport, Options};
use plotters::prelude::*;

use crate::machine::{machine_info, MachineInfo};
use crate::write_json;

mod peers;
mod progress;

/// Runs every benchmark and writes the report under `out`, after installing the peer programs
/// when `install_peers` allows it and this process can (see [`peers::prepare`]).
pub(crate) fn study(opts: Options, out: &Path, install_peers: bool) -> Result<(), String> {
    peers::prepare(install_peers);
    peers::prepare_phoenix(install_peers);
    let started = std::time::Instant::now();
    std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let machine = machine_info()?;
    write_json(&out.join("machine.json"), &machine)?;
    let mut reports: Vec<BenchReport> = Vec::new();
    let mut progress = progress::Progress::new(ochre_bench::BENCHES, &opts);
    let mut bench_seconds = Vec::new();
    for name in ochre_bench::BENCHES {
        eprintln!("{}", progress.line(started.elapsed()));
        let began = std::time::Instant::now();
        let report = ochre_bench::run(name, &opts).ok_or(format!("no benchmark {name}"))?;
        progress.finished(began.elapsed());
        bench_seconds.push((name.to_string(), began.elapsed().as_secs_f64()));
        println!("{}", report.table());
        write_json(&out.join(format!("{name}.json")), &report)?;
        reports.push(report);
    }
    // The simulator (issue 20), calibrated on the figures just written: validation, predictions.
    let budget = std::time::Duration::from_secs(if opts.quick { 60 } else { 240 });
    for report in crate::sim::study_reports(out, opts.quick, budget) {
        println!("{}", report.table());
        write_json(&out.join(format!("{}.json", report.bench)), &report)?;
        reports.push(report);
    }
    let run =
        StudyRun { options: opts.clone(), seconds: started.elapsed().as_secs_f64(), bench_seconds };
    write_json(&out.join("study.json"), &run)?;
    write_report(out, &machine, &opts, &reports, started.elapsed())?;
    eprintln!(
        "study: report in {} (report.md, report.html, plots/) after {:.0} s",
        out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// How a study ran (`study.json`), so that its report can be made again.
#[derive(serde::Serialize, serde::Deserialize)]
struct StudyRun {
    options: Options,
    seconds: f64,
    /// Seconds each benchmark took, in order (what the progress line's estimates come from).
    #[serde(default)]
    bench_seconds: Vec<(String, f64)>,
}

/// Makes the report again from the JSON a study left in `out` (no benchmark is run): after
/// a change to the report's form, or with a benchmark's JSON replaced by a newer run.
pub(crate) fn rerender(out: &Path) -> Result<(), String> {
    let read = |name: &str| -> Result<String, String> {
        let p = out.join(name);
        std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
    };
    let machine: MachineInfo =
        serde_json::from_str(&read("machine.json")?).map_err(|e| format!("machine.json: {e}"))?;
    let run: StudyRun =
        serde_json::from_str(&read("study.json")?).map_err(|e| format!("study.json: {e}"))?;
    let mut reports = Vec::new();
    for name in ochre_bench::BENCHES {
        let file = format!("{name}.json");
        if out.join(&file).exists() {
            reports.push(serde_json::from_str(&read(&file)?).map_err(|e| format!("{file}: {e}"))?);
        }
    }
    if reports.is_empty() {
        return Err(format!("no benchmark JSON in {}", out.display()));
    }
    write_report(out, &machine, &run.options, &reports, Duration::from_secs_f64(run.seconds))?;
    eprintln!("study: report made again in {}", out.display());
    Ok(())
}

/// Writes `report.md`, `report.html` and `plots/<bench>.svg` (and `plots/prodcons-costs.svg`)
/// under `out`.
pub(crate) fn write_report(
    out: &Path,
    m: &MachineInfo,
    opts: &Options,
    reports: &[BenchReport],
    took: Duration,
) -> Result<(), String> {
    let plots = out.join("plots");
    std::fs::create_dir_all(&plots).map_err(|e| format!("creating {}: {e}", plots.display()))?;
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
    };
    let mut figures: Vec<(String, Vec<String>)> = Vec::new();
    for r in reports {
        let mut names = Vec::new();
        for (name, svg) in charts(r)? {
            write(&plots.join(&name), &svg)?;
            names.push(name);
        }
        figures.push((r.bench.clone(), names));
    }
    let report = Report { m, opts, reports, took, figures };
    write(&out.join("report.md"), &render_markdown(&report))?;
    write(&out.join("report.html"), &render_html(&report))
}

/// What both renderings show.
struct Report<'a> {
    m: &'a MachineInfo,
    opts: &'a Options,
    reports: &'a [BenchReport],
    took: Duration,
    /// Per benchmark, the file names of its plots.
    figures: Vec<(String, Vec<String>)>,
}

impl Report<'_> {
    fn figures_of(&self, bench: &str) -> &[String] {
        self.figures.iter().find(|(b, _)| b == bench).map(|(_, f)| f.as_slice()).unwrap_or(&[])
    }
}

fn summary(m: &MachineInfo, opts: &Options, took: Duration) -> String {
    let pairs = |v: &[(String, String)]| {
        v.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
    };
    let mut s = format!(
        "Machine: CPUs {:?}; padded build: {}; wake-up latency (us): {}. Repetitions: {} (+1 \
         warm-up), workers: {:?}, {} sizes. ochre {}. Took {:.0} s.",
        m.cpus,
        m.padded_build,
        m.wakeup_latency_us
            .iter()
            .map(|(k, v)| format!("{k} {v:.1}"))
            .collect::<Vec<_>>()
            .join(", "),
        opts.reps,
        opts.workers,
        if opts.quick { "quick" } else { "full" },
        m.ochre_version,
        took.as_secs_f64()
    );
    if !m.system.is_empty() {
        s += &format!(" System: {}.", pairs(&m.system));
    }
    if !m.versions.is_empty() {
        s += &format!(" Versions: {}.", pairs(&m.versions));
    }
    s
}

/// A result row's cells, as both report formats show them: case, system, median with its unit,
/// min - max, ratio to ochre.
fn cells(row: &Row) -> [String; 5] {
    [
        row.case.clone(),
        row.system.clone(),
        format!("{} {}", si(row.median), row.unit),
        format!("{} - {}", si(row.min), si(row.max)),
        row.vs_ochre.map(|v| format!("{v:.2}x")).unwrap_or_default(),
    ]
}

/// What a goal check came to.
fn verdict(c: &Check) -> &'static str {
    if c.held {
        "held"
    } else {
        "missed"
    }
}

fn render_markdown(report: &Report) -> String {
    let mut md = String::from("# ochre study\n\n");
    md += &summary(report.m, report.opts, report.took);
    md += "\n\n";
    for r in report.reports {
        md += &format!("## {}\n\n{}\n\n", r.bench, r.what);
        for f in report.figures_of(&r.bench) {
            md += &format!("![{f}](plots/{f})\n\n");
        }
        if r.bench == "servers" {
            md += &servers_table(r);
            md += &ppg_tables(r);
        }
        md += "| case | system | median | min - max | vs ochre |\n|---|---|---:|---:|---:|\n";
        for row in &r.rows {
            md += &format!("| {} |\n", cells(row).join(" | "));
        }
        if !r.checks.is_empty() {
            md += "\nGoals:\n\n";
            for c in &r.checks {
                md += &format!("- {} **{}** (measured {:.3})\n", c.goal, verdict(c), c.measured);
            }
        }
        for n in &r.notes {
            md += &format!("\nNote: {n}\n");
        }
        md += "\n";
    }
    md
}

/// The thesis's Table 6.4 for the servers benchmark: the best throughput of each architecture
/// (rows) per case and number of copies (columns: a case's systems `X`, `X-ncopy-N`, and in the
/// balancing case `X-ncopy-2-reuseport`), in kreq/s; `-` where not measured.
fn servers_table(r: &BenchReport) -> String {
    // A system's name: its architecture, then its copies' suffix ("" for one copy).
    let split = |system: &str| match system.find("-ncopy") {
        Some(i) => (system[..i].to_string(), system[i..].to_string()),
        None => (system.to_string(), String::new()),
    };
    let mut archs: Vec<String> = Vec::new();
    for row in &r.rows {
        let (arch, _) = split(&row.system);
        if !archs.contains(&arch) {
            archs.push(arch);
        }
    }
    let mut columns: Vec<(String, &str, String)> = Vec::new(); // (title, case, system suffix)
    for c in distinct(r.rows.iter().map(|row| row.case.as_str())) {
        let suffixes: Vec<String> = {
            let mut v: Vec<String> = Vec::new();
            for row in r.rows.iter().filter(|row| row.case == c) {
                let (_, suffix) = split(&row.system);
                if !v.contains(&suffix) {
                    v.push(suffix);
                }
            }
            v
        };
        for suffix in &suffixes {
            let title = match suffix.as_str() {
                "-ncopy-2" if c.contains("N-COPY") => format!("{c}, balanced"),
                "-ncopy-2-reuseport" => format!("{c}, SO_REUSEPORT"),
                "" if suffixes.len() > 1 => format!("{c}, 1 copy"),
                "" => c.to_string(),
                s => format!("{c}, {} copies", s.trim_start_matches("-ncopy-")),
            };
            columns.push((title, c, suffix.clone()));
        }
    }
    let mut md = String::from(
        "Best throughput per server, cores and copies (kreq/s; Table 6.4 of the thesis):\n\n| server |",
    );
    for (title, _, _) in &columns {
        md += &format!(" {title} |");
    }
    md += "\n|---|";
    md += &"---:|".repeat(columns.len());
    md += "\n";
    for a in &archs {
        md += &format!("| {a} |");
        for (_, case, suffix) in &columns {
            let cell = r
                .median_of(&format!("{a}{suffix}"), case)
                .map_or("-".to_string(), |v| format!("{:.1}", v / 1000.0));
            md += &format!(" {cell} |");
        }
        md += "\n";
    }
    md + "\n"
}

/// The servers' PPG tables (thesis §6.4): per system, each function's CPU cost per request at
/// 1 and 2 cores and what it would give back if it scaled perfectly, largest gain first (the
/// first [`PPG_LINES`]; the JSON has more).
fn ppg_tables(r: &BenchReport) -> String {
    let mut md = String::new();
    for t in &r.ppg {
        md += &format!(
            "Potential performance gain of {} ({}): {:.1} us of CPU per request at 1 core, \
             {:.1} us at 2 ({} and {} requests sampled):\n\n\
             | function | us/request, 1 core | us/request, 2 cores | gain |\n|---|---:|---:|---:|\n",
            t.system, t.case, t.total_us[0], t.total_us[1], t.requests[0], t.requests[1]
        );
        for f in t.functions.iter().take(PPG_LINES) {
            md += &format!(
                "| `{}` | {:.2} | {:.2} | {:+.1}% |\n",
                f.function.replace('|', "\\|"),
                f.us[0],
                f.us[1],
                f.gain * 100.0
            );
        }
        md += "\n";
    }
    md
}

/// Lines of each PPG table in the report.
const PPG_LINES: usize = 10;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn render_html(report: &Report) -> String {
    let mut h = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ochre study</title>\n<style>\
         body{font-family:sans-serif;max-width:70em;margin:auto;padding:1em}\
         table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em}\
         td.n{text-align:right}.held{color:#070}.missed{color:#b00}img{max-width:100%}\
         </style></head><body>\n<h1>ochre study</h1>\n",
    );
    let _ = writeln!(h, "<p>{}</p>", esc(&summary(report.m, report.opts, report.took)));
    for r in report.reports {
        let _ = writeln!(h, "<h2 id=\"{0}\">{0}</h2>\n<p>{1}</p>", esc(&r.bench), esc(&r.what));
        for f in report.figures_of(&r.bench) {
            let _ = writeln!(h, "<p><img src=\"plots/{0}\" alt=\"{0}\"></p>", esc(f));
        }
        h += "<table><tr><th>case</th><th>system</th><th>median</th><th>min - max</th>\
              <th>vs ochre</th></tr>\n";
        for row in &r.rows {
            let [case, system, numbers @ ..] = cells(row).map(|c| esc(&c));
            let numbers: String =
                numbers.iter().map(|c| format!("<td class=\"n\">{c}</td>")).collect();
            let _ = writeln!(h, "<tr><td>{case}</td><td>{system}</td>{numbers}</tr>");
        }
        h += "</table>\n";
        if !r.checks.is_empty() {
            h += "<ul>\n";
            for c in &r.checks {
                let word = verdict(c);
                let _ = writeln!(
                    h,
                    "<li>{} <b class=\"{word}\">{word}</b> (measured {:.3})</li>",
                    esc(&c.goal),
                    c.measured
                );
            }
            h += "</ul>\n";
        }
        for n in &r.notes {
            let _ = writeln!(h, "<p><i>Note: {}</i></p>", esc(n));
        }
    }
    h += "</body></html>\n";
    h
}

/// Distinct values in first-seen order.
fn distinct<'a>(it: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for s in it {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

fn plot_error(e: impl std::fmt::Display) -> String {
    format!("drawing a plot: {e}")
}

/// Draws each named line of points, a dot on every point, with its legend entry.
fn draw_lines<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<
        'a,
        DB,
        plotters::coord::cartesian::Cartesian2d<
            plotters::coord::combinators::LogCoord<f64>,
            plotters::coord::types::RangedCoordf64,
        >,
    >,
    lines: &[(String, Vec<(f64, f64)>)],
) -> Result<(), String> {
    for (i, (name, pts)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(plot_error)?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(plot_error)?;
    }
    Ok(())
}

/// The series' legend, boxed, at `at`.
fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)
}

/// A benchmark's charts, each as (file name, SVG): one per question. Most benchmarks ask one
/// (how each system compares with ochre: `<bench>.svg`); producer-consumer asks four, each its
/// own chart, as one axis with every case of all four could not be read:
/// - `prodcons-runtimes.svg`: ochre against the other runtimes, case by case (handler cost and
///   workers);
/// - `prodcons-costs.svg`: the share of the ideal rate each runtime reaches, against the handler
///   cost (the thesis's Fig 5.16);
/// - `prodcons-allocators.svg`: EMA against general allocators as ochre's event allocator, on
///   the allocator workload and its per-worker scaling;
/// - `prodcons-shared-lines.svg`: the cache lines holding arrays bound for two workers, per
///   allocator and worker count (absolute: EMA's 0 has no ratio).
///
/// Servers asks four too: `servers.svg` (each server at its best point), `servers-ncopy.svg`
/// (balanced vs kernel hashing), and `servers-closed.svg` and `servers-semi-open.svg`
/// (throughput vs load of each server, closed and semi-open loops).
fn charts(r: &BenchReport) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut add = |name: String, svg: Option<String>| {
        if let Some(svg) = svg {
            out.push((name, svg));
        }
    };
    if r.bench == "servers" {
        // No `ochre` row to compare with: the rates themselves, best point of each server.
        add(
            "servers.svg".into(),
            value_plot(r, "server architectures at their best point", "req/s", |row| {
                row.unit == "req/s" && !row.case.contains("N-COPY")
            })?,
        );
        add(
            "servers-ncopy.svg".into(),
            value_plot(
                r,
                "N-COPY, one copy's CPU busy: balanced vs kernel hashing",
                "req/s",
                |row| row.case.contains("N-COPY"),
            )?,
        );
        for (model, file) in
            [("closed", "servers-closed.svg"), ("semi-open", "servers-semi-open.svg")]
        {
            add(file.into(), curve_plot(r, model)?);
        }
        return Ok(out);
    }
    if r.bench == "sim-validate" {
        let title = "the simulator against the benchmarks: simulated / measured (1: exact)";
        add("sim-validate.svg".into(), ratio_plot_against(r, title, "measured", |_| true)?);
        return Ok(out);
    }
    if r.bench == "sim-predict" {
        // The comparisons that have a figure in the seeds, on the thesis's machines (8 and 16
        // cores): the simulated ratio beside the seeds' (above 1: a gain).
        let title = "simulated comparisons and the seeds' figures, 8 and 16 cores (above 1: gain)";
        add(
            "sim-predict.svg".into(),
            ratio_plot_of(r, title, None, |row| {
                row.bench == crate::sim::THESIS_SIGNS && row.workers <= 16
            })?,
        );
        return Ok(out);
    }
    if r.bench != "prodcons" {
        add(format!("{}.svg", r.bench), ratio_plot(r)?);
        return Ok(out);
    }
    let runtimes = ["ochre", "ochre-baseline", "rayon", "tokio-mt", "channels", "one-core"];
    add(
        "prodcons-runtimes.svg".into(),
        ratio_plot_against(
            r,
            "producer-consumer: each runtime against ochre, by handler cost (above 1: faster)",
            "ochre",
            |row| {
                row.unit == "ev/s"
                    && runtimes.contains(&row.system.as_str())
                    && !row.case.contains("sort")
            },
        )?,
    );
    add("prodcons-costs.svg".into(), cost_plot(r, &runtimes)?);
    let allocators: Vec<&str> = std::iter::once("ochre")
        .chain(ochre_bench::peers::GENERAL_ALLOCATORS)
        .chain(["all-cores"])
        .collect();
    add(
        "prodcons-allocators.svg".into(),
        ratio_plot_against(
            r,
            "event allocators: each against EMA (ochre), sort workload and 2w/1w scaling",
            "ochre",
            |row| {
                allocators.contains(&row.system.as_str())
                    && (row.case.contains("sort") && row.unit == "ev/s"
                        || row.unit == "x per worker")
            },
        )?,
    );
    add(
        "prodcons-shared-lines.svg".into(),
        value_plot(
            r,
            "cache lines holding arrays bound for two workers or more (lower is better)",
            "% of the round's lines",
            |row| row.unit == "% of lines",
        )?,
    );
    Ok(out)
}

/// Each system's median over ochre's, case by case, with min-max bars: the figure that means
/// something on a shared machine. None when the benchmark has no ochre row to compare with.
fn ratio_plot(r: &BenchReport) -> Result<Option<String>, String> {
    let title = format!("{}: each system against ochre (above 1: faster)", r.bench);
    ratio_plot_against(r, &title, "ochre", |_| true)
}

/// [`ratio_plot`] of the rows `keep` keeps, against system `base`, under `title`.
fn ratio_plot_against(
    r: &BenchReport,
    title: &str,
    base: &str,
    keep: impl Fn(&Row) -> bool,
) -> Result<Option<String>, String> {
    ratio_plot_of(r, title, Some(base), keep)
}

/// Bars on a log axis around 1, case by case, one per system with its min-max: each row's
/// median over that of system `base` for its case, or the medians themselves (already ratios)
/// when `base` is `None`.
fn ratio_plot_of(
    r: &BenchReport,
    title: &str,
    base: Option<&str>,
    keep: impl Fn(&Row) -> bool,
) -> Result<Option<String>, String> {
    let rows: Vec<&Row> = r.rows.iter().filter(|row| keep(row)).collect();
    let cases = distinct(rows.iter().map(|row| row.case.as_str()));
    let systems = distinct(rows.iter().map(|row| row.system.as_str()));
    let points: Vec<(usize, usize, f64, f64, f64)> = rows
        .iter()
        .filter_map(|row| {
            let ochre = match base {
                Some(b) => r.median_of(b, &row.case).filter(|&o| o > 0.0)?,
                None => 1.0,
            };
            // For times (lower is better) the ratio is inverted so that above 1 is better.
            let lower_better = row.unit.ends_with("ns")
                || row.unit.ends_with("µs")
                || row.unit.ends_with("us")
                || row.unit.contains("CPU");
            let ratio = |v: f64| if lower_better { ochre / v.max(1e-12) } else { v / ochre };
            let c = cases.iter().position(|&c| c == row.case)?;
            let s = systems.iter().position(|&s| s == row.system)?;
            Some((c, s, ratio(row.median), ratio(row.min), ratio(row.max)))
        })
        .filter(|p| p.2.is_finite() && p.3.is_finite() && p.4.is_finite())
        .collect();
    if points.is_empty() {
        return Ok(None);
    }
    // Log scale around 1: a bar goes up from 1 for a system faster than ochre, down for a
    // slower one, and a 300x outlier does not flatten the rest.
    let top = points.iter().map(|p| p.2.max(p.4)).fold(1.0f64, f64::max) * 1.3;
    let bottom = points.iter().map(|p| p.2.min(p.3)).fold(1.0f64, f64::min) / 1.3;
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, (900, 420)).into_drawing_area();
        area.fill(&WHITE).map_err(plot_error)?;
        let n = cases.len() as f64;
        let mut chart = ChartBuilder::on(&area)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5f64..n - 0.5, (bottom..top).log_scale())
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_labels(cases.len().max(2))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    cases.get(i as usize).map(|c| c.to_string()).unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| format!("{y:.2}x"))
            .y_desc("relative to ochre (log)")
            .draw()
            .map_err(plot_error)?;
        let width = 0.8 / systems.len().max(1) as f64;
        for (s, name) in systems.iter().enumerate() {
            let color = Palette99::pick(s).to_rgba();
            let offset = |c: usize| c as f64 - 0.4 + width * (s as f64 + 0.5);
            let mine: Vec<_> = points.iter().filter(|p| p.1 == s).collect();
            chart
                .draw_series(mine.iter().map(|p| {
                    let x = offset(p.0);
                    Rectangle::new([(x - width * 0.4, 1.0), (x + width * 0.4, p.2)], color.filled())
                }))
                .map_err(plot_error)?
                .label(name.to_string())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
            chart
                .draw_series(mine.iter().map(|p| {
                    let x = offset(p.0);
                    PathElement::new(vec![(x, p.3), (x, p.4)], BLACK.stroke_width(1))
                }))
                .map_err(plot_error)?;
            // The ratio written on each bar: a log axis around 1 has few labels of its own.
            chart
                .draw_series(mine.iter().filter(|p| p.1 != 0 || p.2 != 1.0).map(|p| {
                    Text::new(
                        format!("{:.2}", p.2),
                        (offset(p.0) - width * 0.4, p.2),
                        ("sans-serif", 11),
                    )
                }))
                .map_err(plot_error)?;
        }
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(-0.5, 1.0), (n - 0.5, 1.0)],
                BLACK.mix(0.5),
            )))
            .map_err(plot_error)?;
        // The legend goes in the right-hand corner with more room over the last group's bars.
        let last: Vec<_> = points.iter().filter(|p| p.0 + 1 == cases.len()).collect();
        let high = last.iter().map(|p| p.2.max(p.4)).fold(1.0f64, f64::max);
        let low = last.iter().map(|p| p.2.min(p.3)).fold(1.0f64, f64::min);
        let corner = if (top / high).ln() >= (low / bottom).ln() {
            SeriesLabelPosition::UpperRight
        } else {
            SeriesLabelPosition::LowerRight
        };
        legend(&mut chart, corner)?;
        area.present().map_err(plot_error)?;
    }
    Ok(Some(svg))
}

/// The medians themselves (linear axis from 0), case by case, one bar per system with its
/// min-max: for figures where a ratio to ochre means nothing (ochre's is 0). None when `keep`
/// keeps no row.
fn value_plot(
    r: &BenchReport,
    title: &str,
    y_desc: &str,
    keep: impl Fn(&Row) -> bool,
) -> Result<Option<String>, String> {
    let rows: Vec<&Row> = r.rows.iter().filter(|row| keep(row)).collect();
    if rows.is_empty() {
        return Ok(None);
    }
    let cases = distinct(rows.iter().map(|row| row.case.as_str()));
    let systems = distinct(rows.iter().map(|row| row.system.as_str()));
    let top =
        rows.iter().map(|row| row.max.max(row.median)).fold(0.0f64, f64::max).max(1e-9) * 1.25;
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, (900, 420)).into_drawing_area();
        area.fill(&WHITE).map_err(plot_error)?;
        let n = cases.len() as f64;
        let mut chart = ChartBuilder::on(&area)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5f64..n - 0.5, 0f64..top)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_labels(cases.len().max(2))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    cases.get(i as usize).map(|c| c.to_string()).unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc(y_desc)
            .draw()
            .map_err(plot_error)?;
        let width = 0.8 / systems.len().max(1) as f64;
        for (s, name) in systems.iter().enumerate() {
            let color = Palette99::pick(s).to_rgba();
            let mine: Vec<(f64, &Row)> = rows
                .iter()
                .filter(|row| row.system == *name)
                .filter_map(|row| {
                    let c = cases.iter().position(|&c| c == row.case)?;
                    Some((c as f64 - 0.4 + width * (s as f64 + 0.5), *row))
                })
                .collect();
            chart
                .draw_series(mine.iter().map(|(x, row)| {
                    Rectangle::new(
                        [(x - width * 0.4, 0.0), (x + width * 0.4, row.median)],
                        color.filled(),
                    )
                }))
                .map_err(plot_error)?
                .label(name.to_string())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
            chart
                .draw_series(mine.iter().map(|(x, row)| {
                    PathElement::new(vec![(*x, row.min), (*x, row.max)], BLACK.stroke_width(1))
                }))
                .map_err(plot_error)?;
            chart
                .draw_series(mine.iter().map(|(x, row)| {
                    Text::new(
                        format!("{:.0}", row.median),
                        (x - width * 0.4, row.median),
                        ("sans-serif", 11),
                    )
                }))
                .map_err(plot_error)?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        area.present().map_err(plot_error)?;
    }
    Ok(Some(svg))
}

/// Throughput against load of the curves of `model` (`closed`: against connections;
/// `semi-open`: against sessions per second), one line per server and case, log-scaled load.
/// Failed probes are left out of their line; None when no curve has two points.
fn curve_plot(r: &BenchReport, model: &str) -> Result<Option<String>, String> {
    let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    let mut unit = String::new();
    for c in r.curves.iter().filter(|c| c.model == model) {
        let pts: Vec<(f64, f64)> = c
            .points
            .iter()
            .filter_map(|p| Some((p.load, p.throughput?)))
            .filter(|(l, t)| *l > 0.0 && t.is_finite())
            .collect();
        if pts.len() >= 2 {
            unit.clone_from(&c.load_unit);
            lines.push((format!("{} [{}]", c.system, c.case), pts));
        }
    }
    if lines.is_empty() {
        return Ok(None);
    }
    let all = || lines.iter().flat_map(|(_, p)| p.iter());
    let lo = all().map(|q| q.0).fold(f64::INFINITY, f64::min);
    let hi = all().map(|q| q.0).fold(0.0f64, f64::max);
    let top = all().map(|q| q.1).fold(0.0f64, f64::max).max(1e-9) * 1.15;
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, (900, 520)).into_drawing_area();
        area.fill(&WHITE).map_err(plot_error)?;
        let mut chart = ChartBuilder::on(&area)
            .caption(format!("servers: throughput vs load, {model} loop"), ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((lo / 1.3..hi * 1.3).log_scale(), 0f64..top)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc(format!("load ({unit}, log)"))
            .y_desc("req/s")
            .draw()
            .map_err(plot_error)?;
        draw_lines(&mut chart, &lines)?;
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        area.present().map_err(plot_error)?;
    }
    Ok(Some(svg))
}

/// Producer-consumer as the thesis's Fig 5.16: share of the ideal rate (workers / cost) that
/// each of `systems` reaches, against the handler cost, one line per system and worker count.
fn cost_plot(r: &BenchReport, systems: &[&str]) -> Result<Option<String>, String> {
    // Cases read "2w 10 us" (cost in µs) or "2w 100 ns".
    let parse = |case: &str| -> Option<(usize, f64)> {
        let mut it = case.split_whitespace();
        let w: usize = it.next()?.strip_suffix('w')?.parse().ok()?;
        let v: f64 = it.next()?.parse().ok()?;
        let unit = it.next()?;
        let us = match unit {
            "us" | "µs" => v,
            "ns" => v / 1000.0,
            "ms" => v * 1000.0,
            _ => return None,
        };
        it.next().is_none().then_some((w, us))
    };
    // The most workers measured: the multicore case the figure is about.
    let most = r.rows.iter().filter_map(|row| parse(&row.case)).map(|(w, _)| w).max();
    let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for row in r.rows.iter().filter(|row| systems.contains(&row.system.as_str())) {
        let Some((w, us)) = parse(&row.case).filter(|&(w, _)| Some(w) == most) else { continue };
        let share = row.median * us * 1e-6 / w as f64;
        let key = format!("{} {}w", row.system, w);
        match lines.iter_mut().find(|(k, _)| *k == key) {
            Some((_, pts)) => pts.push((us, share)),
            None => lines.push((key, vec![(us, share)])),
        }
    }
    lines.retain(|(_, pts)| pts.len() >= 2);
    if lines.is_empty() {
        return Ok(None);
    }
    for (_, pts) in &mut lines {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let lo = lines.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)).fold(f64::INFINITY, f64::min);
    let hi = lines.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)).fold(0.0f64, f64::max);
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, (900, 480)).into_drawing_area();
        area.fill(&WHITE).map_err(plot_error)?;
        let mut chart = ChartBuilder::on(&area)
            .caption(
                format!(
                    "producer-consumer at {} workers: share of the ideal rate vs handler cost \
                     (thesis Fig 5.16)",
                    most.unwrap_or(1)
                ),
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d((lo / 1.5..hi * 1.5).log_scale(), 0f64..1.1)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("handler cost (µs, log)")
            .y_desc("events/s x cost / workers")
            .draw()
            .map_err(plot_error)?;
        draw_lines(&mut chart, &lines)?;
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        area.present().map_err(plot_error)?;
    }
    Ok(Some(svg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ochre_bench::harness::{Check, Curve, CurvePoint, Row};

    fn curve(system: &str, model: &str, points: &[(f64, Option<f64>)]) -> Curve {
        Curve {
            system: system.into(),
            case: "1 KiB, 1c".into(),
            model: model.into(),
            load_unit: if model == "closed" { "connections" } else { "sessions/s" }.into(),
            points: points
                .iter()
                .map(|&(load, throughput)| CurvePoint {
                    load,
                    offered: None,
                    throughput,
                    p99_ms: None,
                    error: throughput.is_none().then(|| "refused".into()),
                    injector_busy: None,
                })
                .collect(),
        }
    }

    #[test]
    fn servers_curves_are_drawn_per_loop_and_server() {
        let mut r = BenchReport::new("servers", "t");
        r.curves.push(curve("sws", "closed", &[(16.0, Some(9000.0)), (64.0, Some(12000.0))]));
        r.curves.push(curve("threads", "closed", &[(16.0, Some(7000.0)), (64.0, None)]));
        r.curves.push(curve("sws", "semi-open", &[(100.0, Some(480.0)), (400.0, Some(1900.0))]));
        let charts = charts(&r).unwrap();
        let names: Vec<&str> = charts.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["servers-closed.svg", "servers-semi-open.svg"]);
        let (closed, semi) = (&charts[0].1, &charts[1].1);
        assert!(closed.contains("sws [1 KiB, 1c]"));
        // One point left after its failed probe: no line for threads.
        assert!(!closed.contains("threads"));
        assert!(semi.contains("sessions/s") && !semi.contains("connections"));
    }

    fn row(bench: &str, system: &str, case: &str, unit: &str, median: f64) -> Row {
        Row {
            bench: bench.into(),
            system: system.into(),
            case: case.into(),
            workers: 1,
            unit: unit.into(),
            samples: vec![median * 0.5, median, median * 1.5],
            median,
            min: median * 0.5,
            max: median * 1.5,
            vs_ochre: None,
        }
    }

    #[test]
    fn the_ppg_tables_list_each_systems_functions_by_gain() {
        let mut r = BenchReport::new("servers", "t");
        assert_eq!(ppg_tables(&r), "", "no table without profiles");
        let f = |name: &str, us: [f64; 2], gain: f64| ochre_bench::harness::PpgFunction {
            function: name.into(),
            us,
            gain,
        };
        r.ppg.push(ochre_bench::harness::Ppg {
            system: "sws".into(),
            case: "1 KiB".into(),
            total_us: [10.0, 12.5],
            requests: [1000, 1800],
            functions: (0..15)
                .map(|i| f(&format!("f{i}"), [1.0, 1.5], 0.04 - 0.001 * i as f64))
                .chain([f("a|b", [2.0, 1.0], -0.08)])
                .collect(),
        });
        let md = ppg_tables(&r);
        assert!(md.starts_with("Potential performance gain of sws (1 KiB): 10.0 us"), "{md}");
        let lines: Vec<&str> = md.lines().filter(|l| l.starts_with("| `")).collect();
        assert_eq!(lines.len(), PPG_LINES, "{md}");
        assert_eq!(lines[0], "| `f0` | 1.00 | 1.50 | +4.0% |");
    }

    #[test]
    fn the_servers_table_has_a_column_per_case_and_number_of_copies() {
        let mut r = BenchReport::new("servers", "t");
        let n = "1 KiB, N-COPY 2, CPU 0 busy";
        for (system, case, median) in [
            ("sws", "1 KiB, 1c", 10_000.0),
            ("threads", "1 KiB, 1c", 8_000.0),
            ("sws-ncopy-2", "1 KiB, 1c", 9_000.0),
            ("sws", "SPECweb99, 1c", 7_000.0),
            ("sws-ncopy-2", n, 20_000.0),
            ("sws-ncopy-2-reuseport", n, 15_000.0),
        ] {
            r.rows.push(row("servers", system, case, "req/s", median));
        }
        let md = servers_table(&r);
        let lines: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(
            lines[0],
            "| server | 1 KiB, 1c, 1 copy | 1 KiB, 1c, 2 copies | SPECweb99, 1c | \
             1 KiB, N-COPY 2, CPU 0 busy, balanced | 1 KiB, N-COPY 2, CPU 0 busy, SO_REUSEPORT |"
        );
        assert_eq!(lines[2], "| sws | 10.0 | 9.0 | 7.0 | 20.0 | 15.0 |");
        assert_eq!(lines[3], "| threads | 8.0 | - | - | - | - |");
    }

    fn fixture() -> (MachineInfo, Vec<BenchReport>) {
        let m = MachineInfo {
            cpus: vec![0, 1],
            padded_build: true,
            wakeup_latency_us: vec![("Futex".into(), 30.0)],
            default_spin_threshold_us: 300.0,
            default_config: ochre::Config::default(),
            ochre_version: "test".into(),
            system: vec![("kernel".into(), "6.1".into())],
            versions: vec![("tokio".into(), "1.0".into())],
        };
        let mut pingpong = BenchReport {
            bench: "pingpong".into(),
            what: "what <it> measures".into(),
            rows: vec![
                row("pingpong", "ochre", "1 worker", "ev/s/worker", 2e6),
                row("pingpong", "tokio-mt", "1 worker", "ev/s/worker", 5e5),
            ],
            checks: vec![Check { goal: "a goal".into(), measured: 0.7, held: true }],
            notes: vec!["a note".into()],
            ..BenchReport::default()
        };
        pingpong.rows[0].vs_ochre = Some(1.0);
        let mut prodcons = BenchReport { bench: "prodcons".into(), ..BenchReport::default() };
        for (system, shares) in [("ochre", [0.7, 0.9, 0.99]), ("rayon", [0.5, 0.8, 0.9])] {
            for (cost, share) in [1.0, 10.0, 100.0].iter().zip(shares) {
                // events/s = share x workers / cost
                let rate = share * 2.0 / (cost * 1e-6);
                prodcons.rows.push(row("prodcons", system, &format!("2w {cost} us"), "ev/s", rate));
            }
        }
        prodcons.rows.push(row("prodcons", "ochre", "2w empty", "ev/s", 8e6));
        for (system, v) in [("ochre", 4e4), ("ochre-jemalloc", 3e4), ("rayon", 2e4)] {
            prodcons.rows.push(row("prodcons", system, "2w 22 B sort x50", "ev/s", v));
        }
        for (system, v) in [("ochre", 0.98), ("ochre-jemalloc", 0.9), ("all-cores", 0.99)] {
            prodcons.rows.push(row("prodcons", system, "22 B sort x50 2w/1w", "x per worker", v));
        }
        for (system, v) in [("ochre", 0.0), ("ochre-jemalloc", 60.0)] {
            for w in [2, 4] {
                let case = format!("shared lines {w}w");
                prodcons.rows.push(row("prodcons", system, &case, "% of lines", v));
            }
        }
        // An allocator variant on the cost sweep (its own chart, not the runtimes').
        for case in ["2w 1 us", "2w 10 us"] {
            prodcons.rows.push(row("prodcons", "ochre-jemalloc", case, "ev/s", 9e4));
        }
        let alloc = BenchReport {
            bench: "alloc".into(),
            rows: vec![
                row("alloc", "ochre", "local", "ns", 6.0),
                row("alloc", "jemalloc", "local", "ns", 3.0),
            ],
            ..BenchReport::default()
        };
        (m, vec![pingpong, prodcons, alloc])
    }

    #[test]
    fn the_report_files_are_made_from_a_fixture() {
        let (m, reports) = fixture();
        let out = std::env::temp_dir().join(format!("ochre-study-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        write_report(&out, &m, &Options::new(true), &reports, Duration::from_secs(3)).unwrap();
        let read = |p: &str| std::fs::read_to_string(out.join(p)).unwrap();

        let md = read("report.md");
        assert!(md.contains("## pingpong"));
        assert!(md.contains("| 1 worker | ochre | 2.00M ev/s/worker | 1.00M - 3.00M | 1.00x |"));
        assert!(md.contains("a goal **held** (measured 0.700)"));
        assert!(md.contains("Note: a note"));
        assert!(md.contains("System: kernel 6.1. Versions: tokio 1.0."), "{md}");
        assert!(md.contains("![pingpong.svg](plots/pingpong.svg)"));
        assert!(md.contains("![prodcons-costs.svg](plots/prodcons-costs.svg)"));
        // Producer-consumer: a chart per question, none with every case on one axis.
        assert!(md.contains("![prodcons-runtimes.svg](plots/prodcons-runtimes.svg)"));
        assert!(md.contains("![prodcons-allocators.svg](plots/prodcons-allocators.svg)"));
        assert!(md.contains("![prodcons-shared-lines.svg](plots/prodcons-shared-lines.svg)"));
        assert!(!md.contains("plots/prodcons.svg"), "{md}");

        let html = read("report.html");
        assert!(html.contains("<h2 id=\"pingpong\">pingpong</h2>"));
        assert!(html.contains("what &lt;it&gt; measures"), "text is escaped");
        assert!(html.contains("<img src=\"plots/alloc.svg\""));
        assert!(html.contains("<b class=\"held\">held</b>"));

        let svg = read("plots/pingpong.svg");
        assert!(svg.starts_with("<svg") && svg.contains("tokio-mt"), "{svg}");
        // Times: a faster peer (jemalloc, 3 ns against 6) has a bar above 1, at 2.
        let alloc = read("plots/alloc.svg");
        assert!(alloc.contains("jemalloc"));
        let costs = read("plots/prodcons-costs.svg");
        assert!(costs.contains("ochre 2w") && costs.contains("rayon 2w"), "{costs}");
        assert!(!costs.contains("empty"), "the empty case has no cost to plot");
        assert!(!costs.contains("ochre-jemalloc"), "allocators have their own chart");
        let runtimes = read("plots/prodcons-runtimes.svg");
        assert!(runtimes.contains("rayon") && !runtimes.contains("ochre-jemalloc"), "{runtimes}");
        assert!(!runtimes.contains("sort"), "the allocator workload is in its own chart");
        let allocators = read("plots/prodcons-allocators.svg");
        assert!(allocators.contains("ochre-jemalloc") && !allocators.contains("rayon"));
        assert!(allocators.contains("2w/1w") && allocators.contains("2w 22 B sort x50"));
        let lines = read("plots/prodcons-shared-lines.svg");
        assert!(lines.contains("shared lines 4w") && lines.contains("ochre-jemalloc"), "{lines}");
        std::fs::remove_dir_all(&out).unwrap();
    }

    #[test]
    fn the_simulator_sections_plot_against_the_measured_and_the_seeds_figures() {
        let mut v = BenchReport { bench: "sim-validate".into(), ..BenchReport::default() };
        v.rows.push(row("sim-validate", "measured", "bank 2w", "msg/s", 10.0));
        v.rows.push(row("sim-validate", "simulated", "bank 2w", "msg/s", 12.0));
        let drawn = charts(&v).unwrap();
        assert_eq!(drawn.len(), 1);
        assert_eq!(drawn[0].0, "sim-validate.svg");
        assert!(drawn[0].1.contains("1.20"), "simulated / measured written on its bar");
        let mut p = BenchReport { bench: "sim-predict".into(), ..BenchReport::default() };
        let mut pair = |cores: usize, system: &str, v: f64| {
            let mut r = row(crate::sim::THESIS_SIGNS, system, &format!("{cores}c spin"), "x", v);
            r.workers = cores;
            p.rows.push(r);
        };
        pair(8, "simulated", 3.5);
        pair(8, "thesis", 8.1);
        pair(64, "simulated", 77.7);
        let drawn = charts(&p).unwrap();
        assert_eq!(drawn[0].0, "sim-predict.svg");
        let svg = &drawn[0].1;
        assert!(svg.contains("3.50") && svg.contains("8.10") && svg.contains("thesis"), "{svg}");
        assert!(!svg.contains("77.70"), "only the thesis's machines, 8 and 16 cores");
    }

    #[test]
    fn nothing_to_compare_makes_no_plot() {
        let r = BenchReport {
            bench: "x".into(),
            rows: vec![row("x", "tokio", "a", "ev/s", 1.0)],
            ..BenchReport::default()
        };
        assert!(ratio_plot(&r).unwrap().is_none());
        assert!(cost_plot(&r, &["tokio"]).unwrap().is_none());
        assert_eq!(charts(&r).unwrap(), vec![], "no chart without an ochre row");
    }
}
