//! The injector against wrk: `ochre load` and `wrk` drive the same nginx, with the same
//! connections, on the same CPU, in the same run; the figure is the requests/s each reaches.
//!
//! nginx (one worker process) serves a 1 KiB file on the first CPU; the injector gets the last
//! one. Both injectors keep their connections open (wrk's way: `ochre load` with one connection
//! per client for the whole run). An injector that is slower than wrk shows here as a ratio
//! below 1: the server is the same, only the injector differs. nginx or wrk missing is a note.

use std::process::Command;
use std::time::Duration;

use ochre::Runtime;
use ochre_load::{ClosedLoop, LoadReport, Phases, Target};

use crate::harness::{measure_case, BenchReport, Options, System};
use crate::sws::{nginx_path, setup, Nginx, Setup, CONNECTIONS};

/// One `ochre load` run on `rt` against `target`: `CONNECTIONS` keep-alive clients (one
/// connection each for the whole run, as wrk does), a short warm-up, `secs` measured; an error if
/// any request failed.
pub(crate) fn drive(rt: &Runtime, target: &Target, secs: f64) -> Result<LoadReport, String> {
    let model = ClosedLoop {
        clients: CONNECTIONS,
        requests_per_connection: u32::MAX,
        think: Duration::ZERO,
    };
    let phases = Phases::new(
        Duration::from_millis(300),
        Duration::from_secs_f64(secs),
        Duration::from_secs(5),
    );
    let r = ochre_load::closed_loop(rt, target, &model, &phases).map_err(|e| e.to_string())?;
    let errors: u64 = r.errors.iter().sum();
    if errors > 0 {
        return Err(format!("ochre load saw {errors} errors: {}", r.table()));
    }
    Ok(r)
}

/// One `ochre load` measurement of `url` on `rt`: requests/s.
fn ochre_load(rt: &Runtime, url: &str, secs: u64) -> Result<f64, String> {
    let target = ochre_load::parse_url(url).map_err(|e| e.to_string())?;
    Ok(drive(rt, &target, secs as f64)?.throughput)
}

/// One wrk measurement: requests/s, or why it failed.
fn wrk(url: &str, cpu: usize, secs: u64) -> Result<f64, String> {
    let out = Command::new("taskset")
        .args([
            "-c",
            &cpu.to_string(),
            "wrk",
            "-t1",
            &format!("-c{CONNECTIONS}"),
            &format!("-d{secs}s"),
            url,
        ])
        .output()
        .map_err(|e| format!("running wrk: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("Non-2xx") || text.contains("Socket errors") {
        return Err(format!(
            "wrk saw errors: {}",
            text.lines()
                .filter(|l| l.contains("rror") || l.contains("2xx"))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no rate in wrk's output: {text}"))
}

/// Runs the injector benchmark.
pub fn run(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(
        "loadgen",
        "Load injector: requests/s that ochre load and wrk get from the same nginx (1 KiB file, \
         keep-alive, 50 connections, one CPU each).",
    );
    let Some(nginx) = nginx_path() else {
        report
            .notes
            .push("nginx is not installed: scripts/install-peers.sh installs it; skipped".into());
        return report;
    };
    let Some(setup) = setup(&mut report, "loadgen") else { return report };
    let rt = setup.load_runtime();
    let Setup { cpus, injector, dir, root } = setup;
    let server_cpu = cpus[0];
    let secs = if opts.quick { 2 } else { 5 };
    let server = Nginx::start(&nginx, &root, &dir.join("nginx"), &[server_cpu]);
    let url = server.as_ref().map(|n| n.url.clone()).map_err(|e| e.clone());
    let systems = vec![
        System::new("ochre", || {
            let (rt, url) =
                (rt.as_ref().map_err(|e| e.clone())?, url.as_ref().map_err(|e| e.clone())?);
            ochre_load(rt, url, secs)
        }),
        System::new("wrk", || wrk(url.as_ref().map_err(|e| e.clone())?, injector, secs)),
    ];
    let case = "nginx 1 worker";
    measure_case(&mut report, case, 1, "req/s", opts.reps, systems);
    if let (Some(o), Some(w)) = (report.median_of("ochre", case), report.median_of("wrk", case)) {
        report.check("ochre load reaches >= wrk's requests/s against nginx", o / w, o >= w);
    }
    report.notes.push(format!(
        "nginx on CPU {server_cpu}, injectors on CPU {injector}, {CONNECTIONS} connections, {secs} s each"
    ));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    report
}
