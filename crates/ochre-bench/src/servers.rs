//! The comparative study of server architectures (issue 19, thesis chapter 6): a thread per
//! connection (`threads`), one event loop per core (`symped`), stages with pools (`staged`),
//! SWS on colored events (`sws`), hyper + tower-http on tokio (`hyper`) and nginx, all serving
//! the same files to the same injector in the same run, on 1 and 2 cores.
//!
//! Each server is measured at its best point, found by a search and not set by hand: for every
//! number of client connections in [`CONNECTIONS`] (and, for `staged`, every pool size in
//! [`POOLS`]), a short closed-loop probe; the best rate's point is the one measured. The probes
//! are the server's throughput-vs-load curve, kept in the notes. The measurement proper is
//! `harness::measure_case`: every system in turn, alternated, a warm-up and `reps` kept samples;
//! the table shows medians and each median's ratio to SWS's (the `vs ochre` column).
//!
//! Beside the closed-loop curves, each server's throughput-vs-load curve under the semi-open
//! loop with the thesis's two think times (§6.2: 0.343 s active within a burst, 3.0 s inactive
//! after it): sessions arrive (Poisson) at [`SESSION_RAMP_START`] per second, then twice as
//! many at each next point, until the server saturates (errors, or the
//! throughput no longer follows the load) or the descriptor limit stops the ramp; a few
//! requests per burst and per session ([`SEMI_BURST`], [`SEMI_LEAVE`]), one probe per rate, on
//! the 1 KiB file at each core count (`--quick`: shorter probes, 1 core only, where the server
//! and the injector have a CPU each). Each point says how busy the injector's thread was
//! ([`INJECTOR_BOUND`]), so that a knee of the injector's is not read as the server's. Many
//! connections, mostly idle: what the closed loop does not show. Both kinds of curves are in
//! the JSON (`curves`) and the notes; each probe is bounded (warm-up, measure, a request
//! timeout) and stops by itself. Measured (`--quick`, 1 core, loaded 2-CPU machine): every
//! server followed the load up to 3,200 sessions/s (1,970-2,490 req/s, p99 6-14 ms), where the
//! injector's one thread was 93-94% busy: a session opens a connection for about 2.5 requests
//! in a 1.5 s probe, and the injector pays for the connects; so the knee of these curves is the
//! injector's, not the servers' (`threads` alone flattened before it: 431 then 451 req/s at
//! 400 and 800 sessions/s). The busy share is the injector's demand (run, or wait for its
//! CPU), so on the loaded machine it includes waiting and its runtime's spinning: `ochre load`
//! alone against SYMPED on 1 core at 200, 800 and 3,200 sessions/s ran 8, 21 and 31% of the
//! time and waited 9, 23 and 39% (215, 153, 89 us of CPU per request, a connect and a close
//! for every ~2.5 requests; its worker's spinning ~10% of its samples). The descriptor limit
//! (20,000, a hard limit here) stops the ramp after 3,200 sessions/s anyway (1,600 with the
//! full mode's longer probes): the servers' knee lies beyond what this machine lets one
//! process offer.
//!
//! The diagnosis (PPG, thesis §6.4): the servers profiled with `perf record -e cpu-clock` at 1
//! and 2 cores, each function's cost per request and what it would give back if it scaled
//! perfectly, in the JSON (`ppg`) and the study (`--quick`: SWS and SYMPED only).
//!
//! N-COPY (thesis §6.3, Table 6.4): on the 1 KiB file at each core count, every architecture
//! is also measured as [`SWEEP_COPIES`] independent copies (`sws-ncopy-2`, ...), placed along
//! the discovered topology and spread by the load-aware balancer, each at its best point found
//! by the same search; with one core the copies share it. At 2 cores, the balancing case: two
//! copies of each architecture, one copy's CPU shared with a busy process ([`Competitor`]),
//! the load-aware balancer (`X-ncopy-2`) against `SO_REUSEPORT` hashing
//! (`X-ncopy-2-reuseport`), each also with the busy process paused (`-alone` rows), all in one
//! alternated, paired measurement. Balancing can win back only what the busy process takes
//! from hashing, so the 1.15x goal is judged where it took that much (hashing alone / busy >=
//! 1.15); elsewhere the copy kept its speed and what is judged is that balancing costs nothing
//! (>= 0.95x). Measured in 4 processes (`examples/ncopy_balance 5 --quick` twice, `bench
//! servers --quick` twice; load average 7-15), medians of paired ratios: the busy process
//! slowed hashing 1.17-1.35x (symped) and 1.17-1.41x (sws), and balancing gave 1.45-2.05x and
//! 1.41-2.18x over it, itself slowed only 1.00-1.05x by the busy process (balancing also beat
//! hashing with the busy process paused, 1.20-1.49x: with reconnections, hashing's
//! connections pile up on the slower copy); but the busy process slowed hashing only
//! 0.99-1.01x for staged, 1.01-1.16x for threads and 1.04-1.20x for hyper, beside which it got
//! 4-18% of its CPU (24-39% beside symped and sws), and balancing gave 0.98-1.05x, 0.90-0.98x
//! and 0.90-1.24x. Alone on CPU 0 beside it, one copy of any architecture (the injector in
//! another process) left it 33-45%: the number of threads alone does not explain the
//! difference; what differs in the benchmark is two copies and the injector in one process
//! (one scheduling group under autogroup), not measured further.
//!
//! The injector (`ochre load`'s closed loop, keep-alive) runs in this process on the last CPU;
//! servers get the others, and share the injector's CPU only when they are given every CPU
//! (alike for all). Each server's threads are pinned to its CPUs (`ochre_servers::Plan`).
//! At 2 cores, then, where a server's connections land decides much: on the loaded 2-vCPU
//! machine (load average 8-11, other processes on both CPUs), connections served beside the
//! injector on CPU 1 went faster than on CPU 0 (whose worker waited for its CPU most of the
//! time). SYMPED, whose loops race for the accepts, was bimodal: 133-146K req/s when its
//! connections landed on CPU 1, 60-80K when on CPU 0 (6 alternated repetitions, 64
//! connections); SWS, which places connections by the CPU share each worker measures, gave
//! 110-128K in the same runs. A server's median at 2 cores can land on either of SYMPED's modes.
//! Later (load average 8-14, CPU 0 crowded: each server's thread there waited 85-89% of the
//! time), SYMPED's loop beside the injector won nearly every accept and served 150-170K, while
//! SWS's placement by CPU share gave the worker on CPU 0 (share 12-15%) about a fifth of the
//! connections (20-26K of 92-101K requests/s, its status counters): fewer connections beside
//! the injector mean fewer requests per switch between it and the server (SWS's worker there
//! 3.7 µs of CPU a request with every connection, 5.4-5.7 µs with four fifths of them). Every
//! connection on that worker (a test build choosing colors homed there) gave SWS 1.47x
//! [1.28-1.52] (5 paired repetitions; SYMPED unchanged, 0.98), 0.81-0.83 of SYMPED.
//!
//! Stall warnings (`ochre::stall: color 2305843009213693959 has been running for 100 ms on
//! worker 0`) printed during a run are the injector's: those colors are `ochre_load`'s clients
//! (`1 << 61` and up; SWS's connections are `1 << 60` and up) on the injector runtime's one
//! worker. A client's handlers are non-blocking and take microseconds (the connect too is
//! non-blocking), so such a report is the injector's thread kept from running for 100 ms in the
//! middle of a turn: the notes count them by run ("stalls of the injector's runtime"). In a quick
//! run on the loaded 2-CPU machine, 6 of 6 came in runs against servers of hundreds of threads
//! (`threads` and `hyper` searched at 256 connections) or in an N-COPY sweep run, none in SWS's
//! own runs; no SWS handler was reported.
//!
use std::path::Path;
use std::time::Duration;

use ochre::Runtime;
use ochre_http::ServerConfig;
use ochre_load::fileset::FileSet;
use ochre_load::{ClosedLoop, LoadReport, Phases, SemiOpenLoop, Target};
use ochre_servers::ncopy::{start_copies, Balance};
use ochre_servers::{Arch, Plan, Running};

use crate::harness::{measure_case, BenchReport, Curve, CurvePoint, Options, System};
use crate::sws::{nginx_path, sample_seconds, server_cpus, setup, specweb, target_of, Nginx};

/// Client connections tried by the search for each server's best point.
pub const CONNECTIONS: [usize; 3] = [16, 64, 256];
/// Pool sizes (read/parse and write stages) tried for `staged`.
pub const POOLS: [usize; 3] = [1, 2, 4];

/// Sessions per second at the first point of each semi-open curve; each next point doubles it,
/// up to saturation or to what the descriptor limit allows
/// (`session_rate_cap`).
pub const SESSION_RAMP_START: f64 = 200.0;
/// A point is past the knee when doubling the sessions per second gave less than this much more
/// throughput (an unsaturated server gives about 2x; one at its limit, about 1x).
pub const SATURATION_GROWTH: f64 = 1.3;
/// The injector is the limit when its thread wanted its CPU (ran or waited to) this share of a
/// probe's time: later points would measure the injector, not the server.
pub const INJECTOR_BOUND: f64 = 0.9;
/// Mean requests per burst of the semi-open loop (a page and its embedded objects).
pub const SEMI_BURST: f64 = 5.0;
/// Probability that a session leaves after a reply: 5 requests per session on average.
pub const SEMI_LEAVE: f64 = 0.2;

/// The systems, in table order.
pub const SYSTEMS: [&str; 6] = ["threads", "symped", "staged", "sws", "hyper", "nginx"];

/// One closed-loop run of `clients` keep-alive connections for `secs`: the report, or the
/// errors by kind.
fn drive(
    rt: &Runtime,
    target: &Target,
    clients: usize,
    secs: f64,
    label: &str,
) -> Result<LoadReport, String> {
    drive_reconnecting(rt, target, clients, u32::MAX, secs, label)
}

/// [`drive`] with connections closed and reopened after `per_connection` requests.
fn drive_reconnecting(
    rt: &Runtime,
    target: &Target,
    clients: usize,
    per_connection: u32,
    secs: f64,
    label: &str,
) -> Result<LoadReport, String> {
    let model =
        ClosedLoop { clients, requests_per_connection: per_connection, think: Duration::ZERO };
    let phases = Phases::new(
        Duration::from_millis(200),
        Duration::from_secs_f64(secs),
        Duration::from_secs(5),
    );
    let r = injector_stalls(rt, label, || ochre_load::closed_loop(rt, target, &model, &phases))
        .map_err(|e| e.to_string())?;
    match error_kinds(&r) {
        Some(e) => Err(e),
        None => Ok(r),
    }
}

std::thread_local! {
    /// Stalls of the injector's runtime (a client's handler seen running for the stall
    /// threshold, 100 ms, on its one worker), by the run they happened in: where the
    /// runtime's stall warnings printed during this benchmark come from.
    static INJECTOR_STALLS: std::cell::RefCell<Vec<(String, u64)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` (a run of the injector on `rt`), counting the stalls `rt` reports meanwhile under
/// `label`.
fn injector_stalls<T>(rt: &Runtime, label: &str, f: impl FnOnce() -> T) -> T {
    let before = rt.stall_count();
    let out = f();
    let n = rt.stall_count().saturating_sub(before);
    if n > 0 {
        INJECTOR_STALLS.with_borrow_mut(|v| match v.iter_mut().find(|(l, _)| l == label) {
            Some((_, count)) => *count += n,
            None => v.push((label.to_string(), n)),
        });
    }
    out
}

/// The injector's stalls counted so far, as a note (and the count forgotten).
fn injector_stalls_note() -> String {
    let counted = INJECTOR_STALLS.with_borrow_mut(std::mem::take);
    if counted.is_empty() {
        return "the injector's runtime reported no stall".into();
    }
    let runs: Vec<String> = counted.iter().map(|(l, n)| format!("{l}: {n}")).collect();
    format!(
        "stalls of the injector's runtime (a client handler of microseconds seen running for \
         100 ms on its worker: its thread was not run, the runtime's warning says \"a handler \
         blocks\"), by run: {}",
        runs.join("; ")
    )
}

/// The errors of a run by kind, if it had any.
fn error_kinds(r: &LoadReport) -> Option<String> {
    let errors: u64 = r.errors.iter().sum();
    if errors == 0 {
        return None;
    }
    let kinds: Vec<String> = ochre_load::ErrorKind::ALL
        .iter()
        .zip(r.errors)
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k:?} {n}"))
        .collect();
    Some(format!("{errors} errors ({})", kinds.join(", ")))
}

/// One semi-open probe: `sessions` per second for `warmup` then `secs` measured. Errors are the
/// report's (by kind), not a failure: overload is what the curve is about.
fn semi_open(
    rt: &Runtime,
    target: &Target,
    sessions: f64,
    window: &SemiWindow,
    label: &str,
) -> Result<LoadReport, String> {
    let model = SemiOpenLoop {
        arrival_rate: sessions,
        leave: SEMI_LEAVE,
        think: SemiOpenLoop::PARIAG_THINK,
        poisson: true,
        inactive_think: SemiOpenLoop::PARIAG_INACTIVE,
        requests_per_burst: SEMI_BURST,
    };
    let phases = Phases::new(
        Duration::from_secs_f64(window.warmup),
        Duration::from_secs_f64(window.measure),
        Duration::from_secs_f64(window.timeout),
    );
    injector_stalls(rt, label, || ochre_load::semi_open_loop(rt, target, &model, &phases))
        .map_err(|e| e.to_string())
}

/// A curve's point from a probe at `load`: its throughput, what it offered (requests sent per
/// second of the measured phase, semi-open only), its p99 and its errors.
fn point(load: f64, r: &Result<LoadReport, String>, offered: bool) -> CurvePoint {
    match r {
        Ok(r) => {
            let secs = r.measured.as_secs_f64();
            CurvePoint {
                load,
                offered: (offered && secs > 0.0).then(|| r.sent as f64 / secs),
                throughput: Some(r.throughput),
                p99_ms: r.percentile(99.0).map(|us| us as f64 / 1000.0),
                error: error_kinds(r),
                injector_busy: None,
            }
        }
        Err(e) => CurvePoint {
            load,
            offered: None,
            throughput: None,
            p99_ms: None,
            error: Some(e.clone()),
            injector_busy: None,
        },
    }
}

/// A curve as a note: `load unit -> req/s (offered, p99, errors)` per point.
fn curve_note(case: &str, c: &Curve) -> String {
    let points: Vec<String> = c
        .points
        .iter()
        .map(|p| {
            let mut s = match p.throughput {
                Some(t) => format!("{} {}: {t:.0}", p.load, c.load_unit),
                None => format!("{} {}: failed", p.load, c.load_unit),
            };
            let mut extra = Vec::new();
            if let Some(o) = p.offered {
                extra.push(format!("offered {o:.0}"));
            }
            if let Some(ms) = p.p99_ms {
                extra.push(format!("p99 {ms:.1} ms"));
            }
            if let Some(e) = &p.error {
                extra.push(e.clone());
            }
            if let Some(b) = p.injector_busy {
                extra.push(format!("injector {:.0}% busy", b * 100.0));
            }
            if !extra.is_empty() {
                s += &format!(" ({})", extra.join(", "));
            }
            s
        })
        .collect();
    format!("[{case}] {} {} curve (req/s by load): {}", c.system, c.model, points.join("; "))
}

/// A server under test: one of `ochre_servers`' architectures, or nginx.
enum Live {
    Arch(Running),
    Nginx(Nginx),
}

impl Live {
    fn url(&self) -> String {
        match self {
            Live::Arch(r) => format!("http://{}/1k.bin", r.addr()),
            Live::Nginx(n) => n.url.clone(),
        }
    }
}

/// A server started at its best point, with that point's connections; or why not.
type Started = Result<(Live, usize), String>;

/// Starts `system` on `cpus` with stage pools of `pool` threads.
fn start(
    system: &str,
    root: &Path,
    dir: &Path,
    cpus: &[usize],
    pool: usize,
) -> Result<Live, String> {
    if system == "nginx" {
        let bin = nginx_path().ok_or("nginx is not installed")?;
        let dir = dir.join(format!("nginx-{}", cpus.len()));
        return Nginx::start(&bin, root, &dir, cpus).map(Live::Nginx);
    }
    let (arch, copies) = arch_and_copies(system).ok_or_else(|| format!("no system {system}"))?;
    let config = ServerConfig { root: root.to_path_buf(), ..ServerConfig::default() };
    let started = if copies > 1 {
        let topology = ochre::topology::Topology::discover()
            .unwrap_or_else(|_| ochre::topology::Topology::flat(cpus.to_vec()));
        start_copies(arch, &config, &topology, cpus, copies, pool, Balance::LoadAware)
    } else {
        let listener = ochre_servers::loopback_listener().map_err(|e| e.to_string())?;
        ochre_servers::start(arch, config, listener, &Plan::new(cpus.to_vec(), pool))
    };
    started.map(Live::Arch).map_err(|e| format!("starting {system}: {e}"))
}

/// The architecture and number of copies of a system named `arch` or `arch-ncopy-N` (N-COPY,
/// spread by the load-aware balancer).
fn arch_and_copies(system: &str) -> Option<(Arch, usize)> {
    match system.split_once("-ncopy-") {
        Some((arch, n)) => Some((Arch::from_name(arch)?, n.parse().ok().filter(|&n| n > 0)?)),
        None => Some((Arch::from_name(system)?, 1)),
    }
}

/// The N-COPY sweep (Table 6.4): besides each server as one copy, this many copies of every
/// architecture, placed along the topology and spread by the load-aware balancer, on the
/// 1 KiB file at each core count (on 1 core the copies share it).
pub const SWEEP_COPIES: [usize; 1] = [2];

/// A server's best point: the pool size and connections of its best probe, and its curve (rate
/// at each probe).
struct Best {
    pool: usize,
    clients: usize,
    curve: Vec<(usize, usize, Result<LoadReport, String>)>,
    /// Probes taken again because the first served nothing and counted no error.
    retried: usize,
}

/// Probes `system` at every point of the search and keeps the best.
#[allow(clippy::too_many_arguments)]
fn search(
    system: &str,
    root: &Path,
    dir: &Path,
    cpus: &[usize],
    load: &Runtime,
    mix: Option<&FileSet>,
    secs: f64,
    label: &str,
) -> Result<Best, String> {
    let staged = arch_and_copies(system).is_some_and(|(a, _)| a == Arch::Staged);
    let pools: &[usize] = if staged { &POOLS } else { &[1] };
    let mut curve = Vec::new();
    let mut retried = 0;
    for &pool in pools {
        let live = start(system, root, dir, cpus, pool)?;
        let target = target_of(&live.url(), mix)?;
        for clients in CONNECTIONS {
            let label = format!("{label} search, {clients} connections");
            let mut r = drive(load, &target, clients, secs, &label);
            if r.as_ref().is_ok_and(|r| r.throughput == 0.0) {
                // Nothing served and no error: this process did not run for the whole probe
                // (seen in quick runs on the loaded machine, between probes of 40-160K req/s
                // of the same server): not a point of the curve, so taken again once.
                retried += 1;
                r = drive(load, &target, clients, secs, &label);
            }
            curve.push((pool, clients, r));
        }
    }
    let best = curve
        .iter()
        .filter_map(|(p, c, r)| r.as_ref().ok().map(|r| (*p, *c, r.throughput)))
        .max_by(|a, b| a.2.total_cmp(&b.2))
        .ok_or_else(|| {
            let why: Vec<String> = curve
                .iter()
                .filter_map(|(_, c, r)| r.as_ref().err().map(|e| format!("{c} clients: {e}")))
                .collect();
            format!("every probe failed: {}", why.join("; "))
        })?;
    Ok(Best { pool: best.0, clients: best.1, curve, retried })
}

/// Runs the benchmark.
pub fn run(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(
        "servers",
        "Server architectures: requests/s of each at its best point (connections and pool sizes \
         found by a search), keep-alive closed loop, `ochre load` as the injector: a 1 KiB file, \
         and a SPECweb99-like set. vs ochre: ratio to SWS. Curves (closed and semi-open loops) \
         in the notes and the JSON.",
    );
    let Some(setup) = setup(&mut report, "servers") else { return report };
    let Some(load) = setup.load_runtime_or_note(&mut report) else { return report };
    let (cpus, injector, dir, root) = (&setup.cpus, setup.injector, &setup.dir, &setup.root);
    let secs = sample_seconds(opts);
    let probe_secs = if opts.quick { 0.3 } else { 0.6 };
    let set = match specweb(root, if opts.quick { 4 } else { 20 }) {
        Ok(set) => Some(set),
        Err(e) => {
            report.notes.push(format!("cannot write the SPECweb99-like set ({e}): skipped"));
            None
        }
    };
    let mut systems: Vec<String> = SYSTEMS.iter().map(|s| s.to_string()).collect();
    if nginx_path().is_none() {
        systems.retain(|s| s != "nginx");
        report.notes.push(
            "nginx is not installed (scripts/install-peers.sh installs it): its rows and the \
             SWS >= nginx checks are skipped"
                .into(),
        );
    }
    for w in opts.workers.iter().copied().filter(|&w| w <= cpus.len()) {
        let server_cpus = server_cpus(cpus, injector, w);
        let workloads = [("1 KiB", None), ("SPECweb99", set.as_ref())];
        for (label, mix) in workloads.into_iter().filter(|(l, m)| *l == "1 KiB" || m.is_some()) {
            let case = format!("{label}, {w}c");
            // The search, then every server started at its best point for the measurement.
            let began = std::time::Instant::now();
            let mut case_systems = systems.clone();
            if mix.is_none() {
                for n in SWEEP_COPIES {
                    case_systems
                        .extend(Arch::ALL.iter().map(|a| format!("{}-ncopy-{n}", a.name())));
                }
            }
            let mut lives = Vec::new();
            for system in &case_systems {
                let system = system.as_str();
                let staged = arch_and_copies(system).is_some_and(|(a, _)| a == Arch::Staged);
                let label = format!("[{case}] {system}");
                let best = search(system, root, dir, &server_cpus, &load, mix, probe_secs, &label);
                let live = best.and_then(|b| {
                    let curve: Vec<String> = b
                        .curve
                        .iter()
                        .map(|(p, c, r)| {
                            let pool = if staged { format!("pool {p}, ") } else { String::new() };
                            match r {
                                Ok(r) => format!("{pool}{c} conns {:.0}", r.throughput),
                                Err(e) => format!("{pool}{c} conns failed ({e})"),
                            }
                        })
                        .collect();
                    report.notes.push(format!(
                        "[{case}] {system} curve (req/s by load): {}; best: {} connections{}{}",
                        curve.join(", "),
                        b.clients,
                        if staged { format!(", pools of {}", b.pool) } else { String::new() },
                        match b.retried {
                            0 => String::new(),
                            n => format!(" ({n} probes served nothing and were taken again)"),
                        }
                    ));
                    report.curves.push(Curve {
                        system: system.to_string(),
                        case: case.clone(),
                        model: "closed".into(),
                        load_unit: "connections".into(),
                        points: b
                            .curve
                            .iter()
                            .filter(|(p, _, _)| *p == b.pool)
                            .map(|(_, c, r)| point(*c as f64, r, false))
                            .collect(),
                    });
                    let live = start(system, root, dir, &server_cpus, b.pool)?;
                    Ok((live, b.clients))
                });
                lives.push((system, live));
            }
            let runs = lives
                .iter()
                .map(|(system, live)| {
                    let load = &load;
                    let label = format!("[{case}] {system}");
                    System::new(*system, move || {
                        let (live, clients) = live.as_ref().map_err(|e| e.clone())?;
                        let target = target_of(&live.url(), mix)?;
                        Ok(drive(load, &target, *clients, secs, &label)?.throughput)
                    })
                })
                .collect();
            measure_case(&mut report, &case, w, "req/s", opts.reps, runs);
            let took = began.elapsed().as_secs_f64();
            report.notes.push(format!("[{case}] the search and the measurement took {took:.0} s"));
            // Under --quick, one core only: the server alone on its CPU and the injector alone
            // on its own, so that the knee of each curve is the server's.
            let narrowest = opts.workers.iter().copied().filter(|&w| w <= cpus.len()).min();
            if mix.is_none() && (!opts.quick || Some(w) == narrowest) {
                let began = std::time::Instant::now();
                semi_open_curves(&mut report, opts, &case, &load, &lives);
                let took = began.elapsed().as_secs_f64();
                report.notes.push(format!("[{case}] the semi-open curves took {took:.0} s"));
            }
            drop(lives);
            relative_to_sws(&mut report, &case);
            checks(&mut report, &case);
        }
        if w == 2 {
            let began = std::time::Instant::now();
            ncopy(&mut report, opts, root, &load, cpus, injector, &Arch::ALL);
            let took = began.elapsed().as_secs_f64();
            report.notes.push(format!("[N-COPY 2] the balancing case took {took:.0} s"));
        }
        if server_cpus.contains(&injector) {
            report.notes.push(format!(
                "[{w}c] the servers use every CPU ({server_cpus:?}): the injector shares CPU \
                 {injector} with them, alike for every server"
            ));
        }
    }
    report
        .notes
        .push(format!("injector: ochre load, closed loop, keep-alive, pinned to CPU {injector}"));
    report.notes.push(injector_stalls_note());
    let began = std::time::Instant::now();
    diagnosis(&mut report, opts, root, cpus, injector);
    let took = began.elapsed().as_secs_f64();
    report.notes.push(format!("PPG: the profiles took {took:.0} s"));
    let _ = std::fs::remove_dir_all(dir);
    report
}

/// The phases of a semi-open probe, in seconds.
struct SemiWindow {
    warmup: f64,
    measure: f64,
    /// A request's timeout: at saturation, requests time out (errors), and the probe ends at
    /// most this long after its phase.
    timeout: f64,
}

impl SemiWindow {
    fn of(opts: &Options) -> SemiWindow {
        if opts.quick {
            SemiWindow { warmup: 0.5, measure: 1.0, timeout: 2.0 }
        } else {
            SemiWindow { warmup: 1.5, measure: 2.5, timeout: 5.0 }
        }
    }
}

/// The highest session rate a probe of `window` may offer: every session of a probe ends with
/// it, so at most rate x (warm-up + measure) connections are open at once, each two
/// descriptors of this process (the client's and the server's), within what the descriptor
/// limit leaves (less a margin for Poisson bursts and the servers' own files). `None` if the
/// limit cannot be read.
fn session_rate_cap(window: &SemiWindow) -> Option<f64> {
    use rustix::process::{getrlimit, Resource};
    let limit = getrlimit(Resource::Nofile).current?;
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    let free = limit.saturating_sub(open + 1000);
    Some(free as f64 / (2.0 * (window.warmup + window.measure)))
}

/// Whether a probe's point is at or past saturation, given the throughput of the point before
/// (at half its rate): it failed, it had errors (requests lost or timed out: the load exceeds
/// what the server takes), doubling the rate gave less than [`SATURATION_GROWTH`] times more,
/// or the injector was the limit.
fn saturated(p: &CurvePoint, before: Option<f64>) -> bool {
    let Some(t) = p.throughput else { return true };
    p.error.is_some()
        || before.is_some_and(|b| t < SATURATION_GROWTH * b)
        || p.injector_busy.is_some_and(|b| b >= INJECTOR_BOUND)
}

/// The injector runtime's worker thread (its id, for its `schedstat`).
fn injector_thread(load: &Runtime) -> Option<i32> {
    let (tx, rx) = std::sync::mpsc::channel();
    load.run(ochre::Color(1), move || {
        let _ = tx.send(rustix::thread::gettid().as_raw_nonzero().get());
    })
    .ok()?;
    rx.try_recv().ok()
}

/// How long thread `tid` of this process has run or waited to run (`schedstat`'s first two
/// fields): its demand for its CPU, whether it got it or not.
fn thread_demand(tid: i32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let mut f = stat.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some(Duration::from_nanos(f.next()??.checked_add(f.next()??)?))
}

/// How long thread `tid` of this process has run (`schedstat`'s first field).
fn thread_run(tid: i32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    stat.split_whitespace().next()?.parse().ok().map(Duration::from_nanos)
}

/// One server's semi-open curve: from [`SESSION_RAMP_START`] sessions per second, doubling,
/// until a point is [`saturated`] or the next would pass `cap`.
fn semi_open_ramp(
    load: &Runtime,
    target: &Target,
    window: &SemiWindow,
    cap: f64,
    injector: Option<i32>,
    label: &str,
) -> Vec<CurvePoint> {
    let mut points: Vec<CurvePoint> = Vec::new();
    let mut rate = SESSION_RAMP_START;
    loop {
        let before = injector.and_then(thread_demand);
        let began = std::time::Instant::now();
        let label = format!("{label}, {rate} sessions/s");
        let mut p = point(rate, &semi_open(load, target, rate, window, &label), true);
        if let Some((b, a)) = before.zip(injector.and_then(thread_demand)) {
            p.injector_busy = Some((a - b).as_secs_f64() / began.elapsed().as_secs_f64());
        }
        let last = saturated(&p, points.last().and_then(|q| q.throughput));
        points.push(p);
        if last || rate * 2.0 > cap {
            return points;
        }
        rate *= 2.0;
    }
}

/// The semi-open curve of every server started for `case` (at its best closed-loop point: the
/// pool size matters to `staged`; the connections are the sessions'), up to saturation.
fn semi_open_curves(
    report: &mut BenchReport,
    opts: &Options,
    case: &str,
    load: &Runtime,
    lives: &[(&str, Started)],
) {
    let window = SemiWindow::of(opts);
    let cap = session_rate_cap(&window).unwrap_or(SESSION_RAMP_START * 8.0);
    let injector = injector_thread(load);
    // One copy each: the N-COPY sweep's copies are in the closed-loop table only.
    for (system, live) in lives.iter().filter(|(s, _)| !s.contains("-ncopy-")) {
        let Ok((live, _)) = live else { continue };
        let label = format!("[{case}] {system} semi-open");
        let points = match target_of(&live.url(), None) {
            Ok(target) => semi_open_ramp(load, &target, &window, cap, injector, &label),
            Err(e) => vec![point(SESSION_RAMP_START, &Err(e), true)],
        };
        let curve = Curve {
            system: system.to_string(),
            case: case.to_string(),
            model: "semi-open".into(),
            load_unit: "sessions/s".into(),
            points,
        };
        report.notes.push(curve_note(case, &curve));
        report.curves.push(curve);
    }
    report.notes.push(format!(
        "[{case}] semi-open loop: Poisson session arrivals, {SEMI_BURST} requests per burst and \
         {} per session on average, think times {:?} within a burst and {:?} after it; \
         {} s warm-up and {} s measured per point, requests time out after {} s (sessions \
         last ~3.5 s, so a short warm-up sees them still building up: `offered` is what was \
         sent); from {SESSION_RAMP_START} sessions/s, doubling until a point is saturated \
         (errors, less than {SATURATION_GROWTH}x the throughput of the point before, or the \
         injector's thread busy {:.0}% of the time) or the next point would pass {cap:.0} \
         sessions/s (the descriptor limit: two per open session)",
        1.0 / SEMI_LEAVE,
        SemiOpenLoop::PARIAG_THINK,
        SemiOpenLoop::PARIAG_INACTIVE,
        window.warmup,
        window.measure,
        window.timeout,
        INJECTOR_BOUND * 100.0,
    ));
}

/// Sets every row's ratio column of `case` to its median over SWS's (the harness's column is
/// relative to a system named `ochre`; here SWS is ochre's server).
fn relative_to_sws(report: &mut BenchReport, case: &str) {
    let Some(sws) = report.median_of("sws", case) else { return };
    for row in report.rows.iter_mut().filter(|r| r.case == case) {
        row.vs_ochre = Some(row.median / sws).filter(|r| r.is_finite());
    }
}

/// The goals of issue 19 on `case`: SWS the best architecture, at least nginx and hyper.
fn checks(report: &mut BenchReport, case: &str) {
    let Some(sws) = report.median_of("sws", case) else { return };
    for peer in ["nginx", "hyper"] {
        if let Some(p) = report.median_of(peer, case) {
            report.check(format!("[{case}] SWS >= {peer}"), sws / p, sws >= p);
        }
    }
    let others: Vec<&str> = SYSTEMS.iter().copied().filter(|s| *s != "sws").collect();
    if let Some((best, rate)) = report.best_of(&others, case) {
        report.check(format!("[{case}] SWS best of all (next: {best})"), sws / rate, sws >= rate);
    }
}

/// Clients of the N-COPY comparison, and requests per connection (the thesis's 150: connections
/// come and go, so the balancer has new ones to place all along).
const NCOPY_CLIENTS: usize = 64;
const NCOPY_PER_CONNECTION: u32 = 150;

/// A busy process: a shell spinning in a loop, pinned to one CPU, started and stopped by the
/// benchmark (killed and reaped when dropped). A process of its own session, as another
/// program would be: the kernel's autogroups share a CPU between sessions first, so the
/// competitor takes its share of the CPU whatever the number of threads the server on it runs
/// (in the benchmark's session, it got less beside a server of many threads: `threads`,
/// `hyper`'s blocking pool).
pub struct Competitor {
    child: std::process::Child,
}

impl Competitor {
    /// Starts spinning on `cpu`. The child inherits the affinity of the thread that spawns
    /// it: a short-lived thread pinned to `cpu`.
    pub fn start(cpu: usize) -> Result<Competitor, String> {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        let child = std::thread::scope(|s| {
            s.spawn(|| {
                ochre::topology::pin_current_thread(cpu).map_err(|e| e.to_string())?;
                let mut command = Command::new("sh");
                command
                    .args(["-c", "while :; do :; done"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                // SAFETY: between fork and exec the child only calls setsid(2), which is
                // async-signal-safe, allocates nothing and touches no state of the parent.
                unsafe {
                    command.pre_exec(|| {
                        rustix::process::setsid().map(drop).map_err(std::io::Error::from)
                    });
                }
                command.spawn().map_err(|e| format!("starting the busy process: {e}"))
            })
            .join()
            .map_err(|_| "the busy process's starter panicked".to_string())?
        })?;
        Ok(Competitor { child })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Pauses it (`SIGSTOP`) or lets it run again (`SIGCONT`): the balancing case's reference
    /// runs, hashing without the busy process, are taken with it paused.
    pub fn pause(&self, paused: bool) -> Result<(), String> {
        use rustix::process::{kill_process, Pid, Signal};
        let pid = Pid::from_raw(self.pid() as i32).ok_or("no pid")?;
        let signal = if paused { Signal::STOP } else { Signal::CONT };
        kill_process(pid, signal).map_err(|e| format!("signalling the busy process: {e}"))
    }

    /// The CPU time it has run so far (`/proc/PID/schedstat`'s first field), if readable.
    pub fn cpu_time(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/schedstat", self.pid())).ok()?;
        stat.split_whitespace().next()?.parse().ok().map(Duration::from_nanos)
    }
}

impl Drop for Competitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the N-COPY balancing case alone (what `ochre bench servers` runs at 2 cores), for
/// looking at it without the whole study.
pub fn run_ncopy(opts: &Options) -> BenchReport {
    run_ncopy_of(opts, &Arch::ALL)
}

/// [`run_ncopy`] for the architectures `archs` only.
pub fn run_ncopy_of(opts: &Options, archs: &[Arch]) -> BenchReport {
    let mut report = BenchReport::new(
        "servers",
        "N-COPY: load-aware balancing against SO_REUSEPORT hashing, one copy's CPU busy",
    );
    let Some(setup) = setup(&mut report, "servers-ncopy") else { return report };
    let Some(load) = setup.load_runtime_or_note(&mut report) else { return report };
    ncopy(&mut report, opts, &setup.root, &load, &setup.cpus, setup.injector, archs);
    report.notes.push(injector_stalls_note());
    let _ = std::fs::remove_dir_all(&setup.dir);
    report
}

/// Runs the semi-open curves alone (what `ochre bench servers` runs after each 1 KiB case),
/// every server started with stage pools of 2 instead of its searched best point, for looking
/// at them without the whole study.
pub fn run_semi_open(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(
        "servers",
        "Semi-open throughput-vs-load curves of the server architectures, up to saturation",
    );
    let Some(setup) = setup(&mut report, "servers-semi") else { return report };
    let Some(load) = setup.load_runtime_or_note(&mut report) else { return report };
    let (cpus, injector) = (&setup.cpus, setup.injector);
    let mut systems: Vec<&str> = SYSTEMS.to_vec();
    if nginx_path().is_none() {
        systems.retain(|s| *s != "nginx");
    }
    let counts: Vec<usize> = opts.workers.iter().copied().filter(|&w| w <= cpus.len()).collect();
    let counts = if opts.quick { counts.into_iter().min().into_iter().collect() } else { counts };
    for w in counts {
        let server_cpus = server_cpus(cpus, injector, w);
        let lives: Vec<(&str, Started)> = systems
            .iter()
            .map(|&s| (s, start(s, &setup.root, &setup.dir, &server_cpus, 2).map(|l| (l, 0))))
            .collect();
        semi_open_curves(&mut report, opts, &format!("1 KiB, {w}c"), &load, &lives);
    }
    report.notes.push(injector_stalls_note());
    let _ = std::fs::remove_dir_all(&setup.dir);
    report
}

/// N-COPY: two copies of each architecture, one per CPU, one copy's CPU shared with a busy
/// process ([`Competitor`]) pinned to it for the whole case; the load-aware balancer
/// (`X-ncopy-2`) against the kernel's `SO_REUSEPORT` hashing (`X-ncopy-2-reuseport`), 1 KiB
/// file, closed loop with reconnections. Every architecture in one `measure_case` (alternated
/// order, paired repetitions), so each pair saw the same machine.
fn ncopy(
    report: &mut BenchReport,
    opts: &Options,
    root: &Path,
    load: &Runtime,
    cpus: &[usize],
    injector: usize,
    archs: &[Arch],
) {
    if cpus.len() < 2 {
        report.notes.push("N-COPY needs 2 CPUs: skipped".into());
        return;
    }
    let copy_cpus = &cpus[..2];
    // The busy CPU: the copy's CPU that the injector does not use, if there is one.
    let busy_cpu = copy_cpus.iter().copied().find(|&c| c != injector).unwrap_or(copy_cpus[0]);
    let topology = ochre::topology::Topology::discover()
        .unwrap_or_else(|_| ochre::topology::Topology::flat(copy_cpus.to_vec()));
    let config = ServerConfig { root: root.to_path_buf(), ..ServerConfig::default() };
    let secs = sample_seconds(opts);
    let case = format!("1 KiB, N-COPY 2, CPU {busy_cpu} busy");
    let busy = match Competitor::start(busy_cpu) {
        Ok(b) => b,
        Err(e) => {
            report.notes.push(format!("[{case}] skipped: {e}"));
            return;
        }
    };
    // Per architecture: balanced and hashed, each with the busy process running and with it
    // paused (the references: what the busy process cost each).
    let mut lives = Vec::new();
    for &arch in archs {
        for (balance, suffix) in [(Balance::LoadAware, ""), (Balance::Kernel, "-reuseport")] {
            let name = format!("{}-ncopy-2{suffix}", arch.name());
            let live = start_copies(arch, &config, &topology, copy_cpus, 2, 2, balance)
                .map_err(|e| format!("starting {name}: {e}"));
            lives.push((name, live));
        }
    }
    let systems: Vec<(String, usize, bool)> = (0..lives.len())
        .flat_map(|i| {
            let name = &lives[i].0;
            [(name.clone(), i, false), (format!("{name}{ALONE}"), i, true)]
        })
        .collect();
    // The busy process's CPU time and the wall time of each system's runs: how much of the
    // busy CPU the competitor kept (a copy of many runnable threads takes more of it).
    let shares = vec![std::cell::Cell::new((Duration::ZERO, Duration::ZERO)); systems.len()];
    // And the injector's: with it on a copy's CPU, how much of that CPU the copy left it.
    let injector_tid = injector_thread(load);
    let injected = vec![std::cell::Cell::new(Duration::ZERO); systems.len()];
    let runs = systems
        .iter()
        .zip(shares.iter().zip(&injected))
        .map(|((name, i, paused), (share, injected))| {
            let (busy, case, live) = (&busy, &case, &lives[*i].1);
            System::new(name.clone(), move || {
                let live = live.as_ref().map_err(|e| e.clone())?;
                let target = target_of(&format!("http://{}/1k.bin", live.addr()), None)?;
                if *paused {
                    busy.pause(true)?;
                }
                let (began, before) = (std::time::Instant::now(), busy.cpu_time());
                let ran = injector_tid.and_then(thread_run);
                let (per, label) = (NCOPY_PER_CONNECTION, format!("[{case}] {name}"));
                let r = drive_reconnecting(load, &target, NCOPY_CLIENTS, per, secs, &label);
                if let Some((b, a)) = ran.zip(injector_tid.and_then(thread_run)) {
                    injected.set(injected.get() + (a - b));
                }
                if let Some((b, a)) = before.zip(busy.cpu_time()) {
                    let (cpu, wall) = share.get();
                    share.set((cpu + (a - b), wall + began.elapsed()));
                }
                if *paused {
                    busy.pause(false)?;
                }
                Ok(r?.throughput)
            })
        })
        .collect();
    measure_case(report, &case, 2, "req/s", opts.reps, runs);
    drop(lives);
    let competitor: Vec<String> = systems
        .iter()
        .zip(&shares)
        .filter(|((_, _, paused), s)| !paused && !s.get().1.is_zero())
        .map(|((name, _, _), s)| {
            let (cpu, wall) = s.get();
            format!("{name} {:.0}%", cpu.as_secs_f64() / wall.as_secs_f64() * 100.0)
        })
        .collect();
    let injector_share: Vec<String> = systems
        .iter()
        .zip(shares.iter().zip(&injected))
        .filter(|((_, _, paused), (s, _))| !paused && !s.get().1.is_zero())
        .map(|((name, _, _), (s, ran))| {
            let wall = s.get().1.as_secs_f64();
            format!("{name} {:.0}%", ran.get().as_secs_f64() / wall * 100.0)
        })
        .collect();
    let busy_pid = busy.pid();
    drop(busy);
    let mut spreads = Vec::new();
    for &arch in archs {
        let lb = format!("{}-ncopy-2", arch.name());
        let kernel = format!("{lb}-reuseport");
        let alone = format!("{kernel}{ALONE}");
        let spread = |a: &str, b: &str| {
            paired_quotients(report, a, b, &case)
                .map(|q| q.iter().fold((f64::INFINITY, 0.0f64), |(l, h), &x| (l.min(x), h.max(x))))
        };
        let lb_alone = format!("{lb}{ALONE}");
        if let (Some((lo, hi)), Some((slo, shi)), Some((alo, ahi))) =
            (spread(&lb, &kernel), spread(&alone, &kernel), spread(&lb_alone, &alone))
        {
            spreads.push(format!(
                "{} {lo:.2}-{hi:.2} (hashing without / with the busy process {slo:.2}-{shi:.2}; \
                 balanced / hashed without it {alo:.2}-{ahi:.2})",
                arch.name()
            ));
        }
        let (Some(gain), Some(slowed)) =
            (report.paired_ratio(&lb, &kernel, &case), report.paired_ratio(&alone, &kernel, &case))
        else {
            continue;
        };
        let (goal, held) = balance_check(arch.name(), gain, slowed);
        report.check(format!("[{case}] {goal}"), gain, held);
    }
    report.notes.push(format!(
        "[{case}] copies placed along the topology on CPUs {copy_cpus:?}, one per copy; a busy \
         process (pid {busy_pid}) pinned to CPU {busy_cpu} for the case (paused, SIGSTOP, \
         during the runs of the `{ALONE}` rows); the injector on CPU \
         {injector}; {NCOPY_CLIENTS} clients, {NCOPY_PER_CONNECTION} requests per connection; \
         staged copies have pools of 2; paired ratios balanced / SO_REUSEPORT per \
         repetition, min-max: {}; the busy process's share of CPU {busy_cpu} during each \
         system's runs: {}; the injector's thread ran (share of CPU {injector}): {}",
        spreads.join(", "),
        competitor.join(", "),
        injector_share.join(", "),
    ));
}

/// The balancing goal of `arch` and whether it held, from the paired ratios balanced / hashed
/// (`gain`) and hashed without / with the busy process (`slowed`). Balancing can win back only
/// what the busy process took from hashing: where that is less than the goal, the goal cannot
/// be reached and is not judged; what is judged is that the balancer costs nothing.
fn balance_check(arch: &str, gain: f64, slowed: f64) -> (String, bool) {
    if slowed >= BALANCE_GOAL {
        let goal = format!(
            "{arch}: load-aware balancing >= {BALANCE_GOAL}x kernel hashing (paired; the busy \
             process slowed hashing {slowed:.2}x)"
        );
        (goal, gain >= BALANCE_GOAL)
    } else {
        let goal = format!(
            "{arch}: the busy process slowed hashing only {slowed:.2}x (< {BALANCE_GOAL}x: its \
             copy kept its speed, nothing for balancing to win back); load-aware balancing >= \
             {BALANCE_NO_LOSS}x kernel hashing (paired)"
        );
        (goal, gain >= BALANCE_NO_LOSS)
    }
}

/// Suffix of the balancing case's reference rows: hashing with the busy process paused.
const ALONE: &str = "-alone";
/// The balancing goal of issue 19: load-aware balancing over kernel hashing, one copy's CPU
/// busy.
const BALANCE_GOAL: f64 = 1.15;
/// Where the busy process did not slow hashing down by the goal (its copy kept its CPU),
/// balancing must at least not lose: within the paired noise of a loaded 2-CPU machine
/// (per-repetition ratios of equal systems spread about +-5%).
const BALANCE_NO_LOSS: f64 = 0.95;

/// `a`'s sample over `b`'s of the same repetition on `case`, for every repetition (what
/// [`BenchReport::paired_ratio`] takes the median of); `None` unless both have as many samples.
fn paired_quotients(report: &BenchReport, a: &str, b: &str, case: &str) -> Option<Vec<f64>> {
    let samples = |s: &str| {
        report.rows.iter().find(|r| r.system == s && r.case == case).map(|r| r.samples.clone())
    };
    let (sa, sb) = (samples(a)?, samples(b)?);
    (!sa.is_empty() && sa.len() == sb.len())
        .then(|| sa.iter().zip(&sb).map(|(x, y)| x / y).collect())
}

/// Per-function cost per request, from `perf record -e cpu-clock` of this process (the servers
/// run in it; the injector is an `ochre load` child process, so its samples are not counted),
/// at 1 and 2 cores, and the PPG (potential performance gain, thesis §6.4): for each function,
/// how much of a request's cost at 2 cores it would give back if its cost per request stayed
/// what it is at 1 core. Every architecture, or under `--quick` SWS and SYMPED only
/// ([`PPG_QUICK`]). Tables in the report's `ppg` (and the study), the top of each in a note.
/// Skipped with a note where perf cannot sample, or where this process is not the `ochre` tool
/// (the injector is started as `ochre load`).
fn diagnosis(
    report: &mut BenchReport,
    opts: &Options,
    root: &Path,
    cpus: &[usize],
    injector: usize,
) {
    let exe = match std::env::current_exe() {
        Ok(e) if e.file_name().is_some_and(|n| n == "ochre") => e,
        _ => {
            report.notes.push(
                "PPG: not run from the ochre tool (its injector is `ochre load`): skipped".into(),
            );
            return;
        }
    };
    let probe = std::process::Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-o", "/dev/null", "--", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        report.notes.push("PPG: perf cannot sample cpu-clock here: skipped".into());
        return;
    }
    let secs = if opts.quick { 2.0 } else { 4.0 };
    let dir = std::env::temp_dir().join(format!("ochre-ppg-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let archs: &[Arch] = if opts.quick { &PPG_QUICK } else { &Arch::ALL };
    for &arch in archs {
        // Cost per request (us) by function, in all, and requests, at 1 and 2 cores.
        let mut costs: Vec<Profile> = Vec::new();
        for w in [1usize, 2].into_iter().filter(|&w| w <= cpus.len()) {
            match profile(&exe, &dir, arch, root, &server_cpus(cpus, injector, w), injector, secs) {
                Ok(c) => costs.push(c),
                Err(e) => {
                    report.notes.push(format!("PPG [{} {w}c]: {e}", arch.name()));
                    break;
                }
            }
        }
        let [one, two] = costs.as_slice() else { continue };
        let table = ppg_table(arch.name(), one, two);
        let top: Vec<String> = table
            .functions
            .iter()
            .take(6)
            .map(|f| {
                format!(
                    "{} {:+.1}% ({:.2} -> {:.2} us)",
                    f.function,
                    f.gain * 100.0,
                    f.us[0],
                    f.us[1]
                )
            })
            .collect();
        report.notes.push(format!(
            "PPG [1 KiB] {}: cost per request {:.1} us at 1 core, {:.1} us at 2; what each \
             function would give back if it scaled perfectly: {}",
            arch.name(),
            table.total_us[0],
            table.total_us[1],
            top.join(", ")
        ));
        report.ppg.push(table);
    }
    report.notes.push(format!(
        "PPG: each profile is `perf record -e cpu-clock -F {PPG_HZ} -p <this process> -- sleep \
         {secs}` while `ochre load -c 64 --requests-per-connection 1000000 -t 1 --warmup 500ms \
         -d {}s URL` (a child process pinned to the injector's CPU, so not sampled) loads the \
         server alone in this process, then `perf report --stdio --no-children --sort sym -n -t \
         '|'`; cost per request = samples / {PPG_HZ} Hz / requests served while sampling",
        secs + 1.0
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The architectures profiled under `--quick`: ochre's server and the other event loop.
const PPG_QUICK: [Arch; 2] = [Arch::Sws, Arch::Symped];
/// perf's sampling frequency for the PPG profiles (samples per second of CPU time).
const PPG_HZ: u32 = 999;
/// A function's line is kept in a PPG table if it gains at least this share...
const PPG_MIN_GAIN: f64 = 0.005;
/// ...or is among this many of the largest gains.
const PPG_TOP: usize = 12;

/// One profile: cost per request (us of CPU) by function, in all, and requests served while
/// sampling.
struct Profile {
    by_fn: std::collections::HashMap<String, f64>,
    total: f64,
    requests: u64,
}

/// The PPG table of `system` from its profiles at 1 and 2 cores: every function of either,
/// largest gain first.
fn ppg_table(system: &str, one: &Profile, two: &Profile) -> crate::harness::Ppg {
    let mut names: Vec<&String> = two.by_fn.keys().chain(one.by_fn.keys()).collect();
    names.sort();
    names.dedup();
    let mut functions: Vec<crate::harness::PpgFunction> = names
        .into_iter()
        .map(|f| {
            let c1 = one.by_fn.get(f).copied().unwrap_or(0.0);
            let c2 = two.by_fn.get(f).copied().unwrap_or(0.0);
            crate::harness::PpgFunction {
                function: f.clone(),
                us: [c1, c2],
                gain: if two.total > 0.0 { (c2 - c1) / two.total } else { 0.0 },
            }
        })
        .collect();
    functions.sort_by(|a, b| b.gain.total_cmp(&a.gain).then_with(|| a.function.cmp(&b.function)));
    let mut kept = 0;
    functions.retain(|f| {
        kept += 1;
        kept <= PPG_TOP || f.gain >= PPG_MIN_GAIN
    });
    crate::harness::Ppg {
        system: system.to_string(),
        case: "1 KiB".into(),
        total_us: [one.total, two.total],
        requests: [one.requests, two.requests],
        functions,
    }
}

/// One profiled run of `arch` on `server_cpus`: cost per request (us of CPU) by function, and
/// in all.
fn profile(
    exe: &Path,
    dir: &Path,
    arch: Arch,
    root: &Path,
    server_cpus: &[usize],
    injector: usize,
    secs: f64,
) -> Result<Profile, String> {
    use std::process::Command;
    let hz = f64::from(PPG_HZ);
    let config = ServerConfig { root: root.to_path_buf(), ..ServerConfig::default() };
    let listener = ochre_servers::loopback_listener().map_err(|e| e.to_string())?;
    let server = ochre_servers::start(arch, config, listener, &Plan::new(server_cpus.to_vec(), 2))
        .map_err(|e| e.to_string())?;
    let url = format!("http://{}/1k.bin", server.addr());
    let json = dir.join(format!("{}-{}.json", arch.name(), server_cpus.len()));
    let data = dir.join(format!("{}-{}.data", arch.name(), server_cpus.len()));
    let (exe2, json2) = (exe.to_path_buf(), json.clone());
    let load_secs = secs + 1.0;
    // The child inherits the spawning thread's affinity: the injector's CPU.
    let load = std::thread::spawn(move || {
        let _ = ochre::topology::pin_current_thread(injector);
        Command::new(exe2)
            .args(["load", "-c", "64", "--requests-per-connection", "1000000", "-t", "1"])
            .args(["--warmup", "500ms", "-d", &format!("{load_secs}s"), "--json"])
            .arg(&json2)
            .arg(&url)
            .output()
    });
    std::thread::sleep(Duration::from_millis(700));
    let rec = Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-F", &PPG_HZ.to_string()])
        .args(["-p", &std::process::id().to_string()])
        .arg("-o")
        .arg(&data)
        .args(["--", "sleep", &format!("{secs}")])
        .output()
        .map_err(|e| format!("perf record: {e}"))?;
    let out =
        load.join().map_err(|_| "the injector thread panicked")?.map_err(|e| e.to_string())?;
    drop(server);
    if !rec.status.success() {
        return Err(format!("perf record failed: {}", String::from_utf8_lossy(&rec.stderr)));
    }
    if !out.status.success() {
        return Err(format!("ochre load failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let r: LoadReport =
        serde_json::from_str(&std::fs::read_to_string(&json).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    let requests = r.throughput * secs;
    if requests < 1.0 {
        return Err("no request served".into());
    }
    let rep = Command::new("perf")
        .args(["report", "--stdio", "--no-children", "--sort", "sym", "-n", "-t", "|", "-i"])
        .arg(&data)
        .output()
        .map_err(|e| format!("perf report: {e}"))?;
    let mut by_fn = std::collections::HashMap::new();
    let mut total = 0.0;
    for line in String::from_utf8_lossy(&rep.stdout).lines().filter(|l| !l.starts_with('#')) {
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(samples), Some(sym)) =
            (cols.get(1).and_then(|s| s.parse::<f64>().ok()), cols.get(2))
        else {
            continue;
        };
        let us = samples / hz * 1e6 / requests;
        let name = sym.trim_start_matches("[.] ").trim_start_matches("[k] ");
        // Generic instances and closures fold into their function's path.
        let name = name.split("::{{closure}}").next().unwrap_or(name).to_string();
        *by_fn.entry(name).or_insert(0.0) += us;
        total += us;
    }
    Ok(Profile { by_fn, total, requests: requests as u64 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Row;

    fn row(system: &str, case: &str, median: f64) -> Row {
        Row {
            bench: "servers".into(),
            system: system.into(),
            case: case.into(),
            workers: 2,
            unit: "req/s".into(),
            samples: vec![median],
            median,
            min: median,
            max: median,
            vs_ochre: None,
        }
    }

    #[test]
    fn a_probe_becomes_a_point_with_its_offered_load_latency_and_errors() {
        let mut t = ochre_load::Tally::new();
        for i in 0..400u64 {
            t.record_ok(Duration::from_millis(i), Duration::from_micros(1000 + i), 1024);
        }
        t.sent = 450;
        t.record_error(Duration::from_millis(5), ochre_load::ErrorKind::ALL[0]);
        let r = LoadReport::from_tally("semi-open".into(), &t, Duration::from_secs(2));
        let p = point(100.0, &Ok(r.clone()), true);
        assert_eq!((p.load, p.throughput, p.offered), (100.0, Some(200.0), Some(225.0)));
        let p99 = p.p99_ms.unwrap();
        assert!((1.3..1.5).contains(&p99), "p99 {p99} ms");
        assert!(p.error.as_deref().unwrap().starts_with("1 errors"), "{:?}", p.error);
        // A closed loop's offered load is what the server allowed: not reported.
        assert_eq!(point(16.0, &Ok(r), false).offered, None);
        let failed = point(400.0, &Err("refused".into()), true);
        assert_eq!((failed.throughput, failed.error.as_deref()), (None, Some("refused")));
        let c = Curve {
            system: "sws".into(),
            case: "1 KiB, 1c".into(),
            model: "semi-open".into(),
            load_unit: "sessions/s".into(),
            points: vec![
                point(
                    100.0,
                    &Ok(LoadReport::from_tally(
                        "m".into(),
                        &ochre_load::Tally::new(),
                        Duration::from_secs(1),
                    )),
                    true,
                ),
                failed,
            ],
        };
        let note = curve_note("1 KiB, 1c", &c);
        assert!(note.starts_with("[1 KiB, 1c] sws semi-open curve"), "{note}");
        assert!(note.contains("100 sessions/s: 0 (offered 0"), "{note}");
        assert!(note.contains("400 sessions/s: failed (refused)"), "{note}");
    }

    #[test]
    fn a_ramp_stops_at_errors_a_flat_throughput_or_a_busy_injector() {
        let p = |t: Option<f64>, error: bool, busy: f64| CurvePoint {
            load: 400.0,
            offered: t,
            throughput: t,
            p99_ms: None,
            error: error.then(|| "1 errors (Timeout 1)".into()),
            injector_busy: Some(busy),
        };
        assert!(!saturated(&p(Some(800.0), false, 0.5), None), "the first point, unloaded");
        assert!(!saturated(&p(Some(800.0), false, 0.5), Some(420.0)), "doubled with the load");
        assert!(saturated(&p(Some(500.0), false, 0.5), Some(420.0)), "flat: past the knee");
        assert!(saturated(&p(Some(800.0), true, 0.5), Some(420.0)), "requests lost");
        assert!(saturated(&p(Some(800.0), false, 0.95), Some(420.0)), "the injector's limit");
        assert!(saturated(&p(None, true, 0.1), None), "a failed probe");
        let window = SemiWindow { warmup: 0.5, measure: 1.0, timeout: 2.0 };
        // Two descriptors per session open over the 1.5 s window, within the limit.
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        if let (Some(limit), Some(cap)) = (limit, session_rate_cap(&window)) {
            assert!(cap >= 0.0 && cap * 2.0 * 1.5 <= limit as f64, "{cap} for {limit}");
        }
    }

    #[test]
    fn the_ppg_table_gives_each_function_its_gain_over_the_cost_at_2_cores() {
        let prof = |fns: &[(&str, f64)], requests| Profile {
            by_fn: fns.iter().map(|(f, c)| (f.to_string(), *c)).collect(),
            total: fns.iter().map(|(_, c)| c).sum(),
            requests,
        };
        let one = prof(&[("parse", 2.0), ("lock", 1.0), ("gone", 1.0)], 1000);
        let two = prof(&[("parse", 2.0), ("lock", 5.0), ("spin", 3.0)], 1500);
        let t = ppg_table("sws", &one, &two);
        assert_eq!((t.total_us, t.requests), ([4.0, 10.0], [1000, 1500]));
        let rows: Vec<(&str, f64)> =
            t.functions.iter().map(|f| (f.function.as_str(), f.gain)).collect();
        // lock: (5 - 1) / 10; spin: (3 - 0) / 10; parse scaled; gone: (0 - 1) / 10.
        assert_eq!(rows, [("lock", 0.4), ("spin", 0.3), ("parse", 0.0), ("gone", -0.1)]);
        assert_eq!(t.functions[0].us, [1.0, 5.0]);
    }

    #[test]
    fn curves_are_in_the_json_and_reports_without_them_still_read() {
        let mut r = BenchReport::new("servers", "t");
        let old = serde_json::to_string(&r).unwrap();
        assert!(!old.contains("curves"), "no empty curves in the JSON: {old}");
        r.curves.push(Curve {
            system: "threads".into(),
            case: "1 KiB, 2c".into(),
            model: "closed".into(),
            load_unit: "connections".into(),
            points: vec![point(16.0, &Err("x".into()), false)],
        });
        let back: BenchReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.curves.len(), 1);
        assert_eq!(back.curves[0].points[0].error.as_deref(), Some("x"));
        let read: BenchReport = serde_json::from_str(&old).unwrap();
        assert!(read.curves.is_empty());
    }

    #[test]
    fn balancing_is_judged_on_the_goal_only_where_the_busy_process_slowed_hashing_that_much() {
        // Slowed enough: the goal itself.
        let (goal, held) = balance_check("sws", 1.4, 1.3);
        assert!(goal.contains(">= 1.15x kernel hashing") && goal.contains("1.30x"), "{goal}");
        assert!(held);
        assert!(!balance_check("sws", 1.1, 1.3).1, "short of the goal");
        // Not slowed: the balancer must not lose.
        let (goal, held) = balance_check("staged", 0.97, 1.01);
        assert!(goal.contains("slowed hashing only 1.01x") && goal.contains(">= 0.95x"), "{goal}");
        assert!(held);
        assert!(!balance_check("staged", 0.9, 1.01).1, "the balancer lost");
    }

    #[test]
    fn systems_name_their_architecture_and_copies() {
        assert_eq!(arch_and_copies("sws"), Some((Arch::Sws, 1)));
        assert_eq!(arch_and_copies("staged-ncopy-2"), Some((Arch::Staged, 2)));
        assert_eq!(arch_and_copies("hyper-ncopy-3"), Some((Arch::Hyper, 3)));
        for bad in ["nginx", "sws-ncopy-0", "sws-ncopy-x", "x-ncopy-2", "sws-ncopy-2-reuseport"] {
            assert_eq!(arch_and_copies(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_busy_process_spins_on_its_cpu_and_is_gone_once_dropped() {
        let cpu = *ochre::topology::allowed_cpus().unwrap().last().unwrap();
        let busy = Competitor::start(cpu).unwrap();
        let pid = busy.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let allowed = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).unwrap();
        assert_eq!(allowed.split_whitespace().nth(1), Some(cpu.to_string().as_str()), "{allowed}");
        // Its own session (field 6 of /proc/PID/stat, after the command's parenthesis).
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let session = stat.rsplit(')').next().unwrap().split_whitespace().nth(3).unwrap();
        assert_eq!(session, pid.to_string(), "{stat}");
        // It spins: 20 ms of CPU within 20 s, however loaded the machine.
        let (start, deadline) = (busy.cpu_time().unwrap(), std::time::Instant::now());
        while busy.cpu_time().unwrap() < start + Duration::from_millis(20) {
            assert!(deadline.elapsed() < Duration::from_secs(20), "the busy process does not run");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Paused, it is stopped (state T) and runs no more; resumed, it spins again.
        let state = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            stat.rsplit(')').next().unwrap().split_whitespace().next().unwrap().to_string()
        };
        busy.pause(true).unwrap();
        let deadline = std::time::Instant::now();
        while state() != "T" {
            assert!(deadline.elapsed() < Duration::from_secs(5), "not stopped: {}", state());
            std::thread::sleep(Duration::from_millis(1));
        }
        let stopped = busy.cpu_time().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(busy.cpu_time().unwrap(), stopped, "it ran while paused");
        busy.pause(false).unwrap();
        let deadline = std::time::Instant::now();
        while busy.cpu_time().unwrap() < stopped + Duration::from_millis(5) {
            assert!(deadline.elapsed() < Duration::from_secs(20), "it does not run again");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(busy);
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "still there after the drop");
    }

    #[test]
    fn ratios_are_to_sws_and_the_goals_name_the_next_best() {
        let mut r = BenchReport::new("servers", "t");
        for (s, m) in [("threads", 50.0), ("sws", 100.0), ("hyper", 40.0), ("nginx", 120.0)] {
            r.rows.push(row(s, "1 KiB, 2c", m));
        }
        relative_to_sws(&mut r, "1 KiB, 2c");
        let ratio = |s: &str| r.rows.iter().find(|x| x.system == s).and_then(|x| x.vs_ochre);
        assert_eq!(
            (ratio("threads"), ratio("sws"), ratio("nginx")),
            (Some(0.5), Some(1.0), Some(1.2))
        );
        checks(&mut r, "1 KiB, 2c");
        let held: Vec<(String, bool)> = r.checks.iter().map(|c| (c.goal.clone(), c.held)).collect();
        assert_eq!(
            held,
            [
                ("[1 KiB, 2c] SWS >= nginx".to_string(), false),
                ("[1 KiB, 2c] SWS >= hyper".to_string(), true),
                ("[1 KiB, 2c] SWS best of all (next: nginx)".to_string(), false),
            ]
        );
    }
}
