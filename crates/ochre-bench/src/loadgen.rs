//! The injector against wrk: `ochre load` and `wrk` drive the same nginx, with the same
//! connections, on the same CPU, in the same run; the figure is the requests/s each reaches.
//!
//! nginx (one worker process) serves a 1 KiB file on the first CPU; the injector gets the last
//! one. Both injectors keep their connections open (wrk's way: `ochre load` with one connection
//! per client for the whole run). An injector that is slower than wrk shows here as a ratio
//! below 1: the server is the same, only the injector differs.
//!
//! A missing peer leaves out only what needs it (`plan`): without nginx the injectors drive
//! SWS (one worker, default configuration) instead; without wrk (or taskset, which pins it)
//! `ochre load` is measured alone. Each omission is a note naming what was skipped and why.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use ochre::{Config, Runtime};
use ochre_http::Revalidate;
use ochre_load::{ClosedLoop, LoadReport, Phases, Target};

use crate::harness::{measure_case, BenchReport, Options, System};
use crate::sws::{setup, Nginx, PeerPrograms, Setup, Sws, CONNECTIONS};

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

/// The server the injectors drive.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Served {
    /// nginx, the program at this path.
    Nginx(PathBuf),
    /// SWS in this process, where nginx is missing.
    Sws,
}

impl Served {
    /// The case's name: the server and its one worker.
    fn case(&self) -> &'static str {
        match self {
            Served::Nginx(_) => "nginx 1 worker",
            Served::Sws => "SWS 1 worker",
        }
    }
}

/// What the benchmark measures with the peers at hand.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Plan {
    served: Served,
    /// Whether wrk runs beside `ochre load`.
    wrk: bool,
    /// What is left out and why, for the report.
    notes: Vec<String>,
}

/// The plan for the peers `peers` has: every row that does not need a missing peer.
fn plan(peers: &PeerPrograms) -> Plan {
    let mut notes = Vec::new();
    let served = match &peers.nginx {
        Some(path) => Served::Nginx(path.clone()),
        None => {
            notes.push(
                "nginx is not installed (scripts/install-peers.sh installs it): the injectors \
                 drive SWS (one worker, default configuration) instead"
                    .into(),
            );
            Served::Sws
        }
    };
    let missing = match (peers.wrk, peers.taskset) {
        (true, true) => None,
        (false, _) => Some("wrk is not installed (scripts/install-peers.sh installs it)"),
        (true, false) => {
            Some("taskset is not installed (util-linux): wrk cannot be pinned to its CPU")
        }
    };
    if let Some(why) = missing {
        notes.push(format!(
            "{why}: the wrk row and the ochre load >= wrk check are skipped; ochre load is \
             measured alone"
        ));
    }
    Plan { served, wrk: missing.is_none(), notes }
}

/// A server started for the benchmark, stopped on drop.
enum Running {
    Nginx(Nginx),
    Sws(Sws),
}

impl Running {
    fn url(&self) -> &str {
        match self {
            Running::Nginx(n) => &n.url,
            Running::Sws(s) => &s.url,
        }
    }
}

/// Runs the injector benchmark.
pub fn run(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(
        "loadgen",
        "Load injector: requests/s that ochre load and wrk get from the same nginx (SWS where \
         nginx is missing; 1 KiB file, keep-alive, 50 connections, one CPU each).",
    );
    let plan = plan(&PeerPrograms::detect());
    report.notes.extend(plan.notes.iter().cloned());
    let Some(setup) = setup(&mut report, "loadgen") else { return report };
    let rt = setup.load_runtime();
    let Setup { cpus, injector, dir, root } = setup;
    let server_cpu = cpus[0];
    let secs = if opts.quick { 2 } else { 5 };
    let server = match &plan.served {
        Served::Nginx(bin) => {
            Nginx::start(bin, &root, &dir.join("nginx"), &[server_cpu]).map(Running::Nginx)
        }
        Served::Sws => Sws::start(&root, &[server_cpu], Config::default(), Revalidate::Inotify)
            .map(Running::Sws),
    };
    let url = server.as_ref().map(|s| s.url().to_string()).map_err(|e| e.clone());
    let mut systems = vec![System::new("ochre", || {
        let (rt, url) = (rt.as_ref().map_err(|e| e.clone())?, url.as_ref().map_err(|e| e.clone())?);
        ochre_load(rt, url, secs)
    })];
    if plan.wrk {
        systems
            .push(System::new("wrk", || wrk(url.as_ref().map_err(|e| e.clone())?, injector, secs)));
    }
    let case = plan.served.case();
    measure_case(&mut report, case, 1, "req/s", opts.reps, systems);
    if let (Some(o), Some(w)) = (report.median_of("ochre", case), report.median_of("wrk", case)) {
        let server = if plan.served == Served::Sws { "SWS" } else { "nginx" };
        report.check(
            format!("ochre load reaches >= wrk's requests/s against {server}"),
            o / w,
            o >= w,
        );
    }
    report.notes.push(format!(
        "server on CPU {server_cpu}, injectors on CPU {injector}, {CONNECTIONS} connections, \
         {secs} s each"
    ));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(nginx: bool, wrk: bool, taskset: bool) -> PeerPrograms {
        PeerPrograms { nginx: nginx.then(|| PathBuf::from("/usr/sbin/nginx")), wrk, taskset }
    }

    #[test]
    fn with_every_peer_both_injectors_drive_nginx() {
        let p = plan(&peers(true, true, true));
        assert_eq!(p.served, Served::Nginx(PathBuf::from("/usr/sbin/nginx")));
        assert!(p.wrk);
        assert!(p.notes.is_empty(), "{:?}", p.notes);
        assert_eq!(p.served.case(), "nginx 1 worker");
    }

    #[test]
    fn without_nginx_the_injectors_drive_sws() {
        let p = plan(&peers(false, true, true));
        assert_eq!((p.served.case(), p.wrk), ("SWS 1 worker", true));
        assert_eq!(p.notes.len(), 1);
        assert!(p.notes[0].starts_with("nginx is not installed"), "{:?}", p.notes);
    }

    #[test]
    fn without_wrk_or_taskset_ochre_load_is_measured_alone() {
        for (wrk, taskset, name) in
            [(false, true, "wrk"), (true, false, "taskset"), (false, false, "wrk")]
        {
            let p = plan(&peers(true, wrk, taskset));
            assert!(!p.wrk);
            assert_eq!(p.served.case(), "nginx 1 worker", "nginx is still the server");
            assert_eq!(p.notes.len(), 1, "{:?}", p.notes);
            assert!(p.notes[0].starts_with(&format!("{name} is not installed")), "{:?}", p.notes);
            assert!(p.notes[0].contains("ochre load is measured alone"));
        }
        // Nothing installed: still one row, ochre load against SWS, and both omissions named.
        let bare = plan(&peers(false, false, false));
        assert_eq!((bare.served, bare.wrk, bare.notes.len()), (Served::Sws, false, 2));
    }
}
