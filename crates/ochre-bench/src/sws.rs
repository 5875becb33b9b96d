//! The web server against nginx: SWS (optimized and libasync-smp configurations) and nginx
//! serve the same files to the same injector, keep-alive, in the same run: a 1 KiB file, and a
//! SPECweb99-like set (`ochre fileset`: Zipf popularity over directories and files, the class mix).
//!
//! The injector is `ochre load` (closed loop, 50 keep-alive connections), which reaches at least
//! wrk's rate against nginx (`bench loadgen`) and gives latency percentiles; it runs in this
//! process on the last CPU. The servers get the others; when they are given every CPU they share
//! the injector's, alike for all. nginx runs from a generated configuration on loopback, with
//! as many worker processes as the servers' workers, pinned likewise. A missing nginx is a note,
//! not a failure (`scripts/install-peers.sh` installs it).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ochre::io::Listener;
use ochre::{Color, Config, Runtime};
use ochre_http::{Revalidate, Server, ServerConfig};
use ochre_load::fileset::{FileSet, Mix};
use ochre_load::{LoadReport, Target};

use crate::harness::{measure_case, BenchReport, Options, System};
use crate::loadgen::drive;

/// Connections the injector keeps open.
pub const CONNECTIONS: usize = 50;

/// Whether the command `cmd` can be started (it is on the PATH).
fn have(cmd: &str) -> bool {
    Command::new(cmd).arg("-v").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

pub(crate) fn nginx_path() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/bin/nginx"].iter().map(PathBuf::from).find(|p| p.exists())
}

/// The peer programs the HTTP benchmarks use, as found on this machine. `scripts/install-peers.sh`
/// installs nginx and wrk; taskset (util-linux) pins wrk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerPrograms {
    /// nginx, the web-server peer of `sws` and the server `loadgen` drives.
    pub nginx: Option<PathBuf>,
    /// wrk, the reference injector of `loadgen`.
    pub wrk: bool,
    /// taskset, which pins wrk to the injector's CPU.
    pub taskset: bool,
}

impl PeerPrograms {
    /// What this machine has.
    pub fn detect() -> Self {
        PeerPrograms { nginx: nginx_path(), wrk: have("wrk"), taskset: have("taskset") }
    }

    /// The peers missing, by the name of their command.
    pub fn missing(&self) -> Vec<&'static str> {
        [("nginx", self.nginx.is_some()), ("wrk", self.wrk), ("taskset", self.taskset)]
            .into_iter()
            .filter(|p| !p.1)
            .map(|p| p.0)
            .collect()
    }
}

/// An SWS instance in this process, on `cpus`.
pub(crate) struct Sws {
    rt: Arc<Runtime>,
    pub(crate) url: String,
    run: Option<std::thread::JoinHandle<()>>,
}

impl Sws {
    pub(crate) fn start(
        root: &Path,
        cpus: &[usize],
        config: Config,
        revalidate: Revalidate,
    ) -> Result<Sws, String> {
        let rt = Arc::new(
            Runtime::builder()
                .cpus(cpus.iter().copied())
                .config(config)
                .build()
                .map_err(|e| e.to_string())?,
        );
        let listener = Listener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let url = format!("http://{}/1k.bin", listener.local_addr().map_err(|e| e.to_string())?);
        let cfg = ServerConfig { root: root.to_path_buf(), revalidate, ..ServerConfig::default() };
        let server = Server::new(cfg, Color(1)).map_err(|e| e.to_string())?;
        server.serve_with(&rt.handle(), listener).map_err(|e| e.to_string())?;
        let r = rt.clone();
        let run = std::thread::spawn(move || {
            let _ = r.run(Color(2), || {});
        });
        Ok(Sws { rt, url, run: Some(run) })
    }
}

impl Drop for Sws {
    fn drop(&mut self) {
        self.rt.handle().shutdown();
        if let Some(r) = self.run.take() {
            let _ = r.join();
        }
    }
}

/// nginx from a generated configuration, stopped on drop.
pub(crate) struct Nginx {
    dir: PathBuf,
    bin: PathBuf,
    pub(crate) url: String,
    child: Option<Child>,
}

impl Nginx {
    pub(crate) fn start(
        bin: &Path,
        root: &Path,
        dir: &Path,
        cpus: &[usize],
    ) -> Result<Nginx, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        std::fs::create_dir_all(dir.join("logs")).map_err(|e| e.to_string())?;
        let affinity: Vec<String> = cpus.iter().map(|&c| format!("{:b}", 1u64 << c)).collect();
        let conf = format!(
            "worker_processes {n};\nworker_cpu_affinity {aff};\ndaemon off;\nmaster_process on;\n\
             pid {dir}/nginx.pid;\nerror_log {dir}/logs/error.log;\n\
             events {{ worker_connections 4096; }}\n\
             http {{ access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000;\n\
               open_file_cache max=1000;\n\
               server {{ listen 127.0.0.1:{port}; root {root}; }} }}\n",
            n = cpus.len(),
            aff = affinity.join(" "),
            dir = dir.display(),
            root = root.display(),
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).map_err(|e| e.to_string())?;
        let child = Command::new(bin)
            .args(["-c", conf_path.to_str().unwrap_or(""), "-p", dir.to_str().unwrap_or("")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting nginx: {e}"))?;
        let url = format!("http://127.0.0.1:{port}/1k.bin");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err("nginx did not start".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Nginx { dir: dir.to_path_buf(), bin: bin.to_path_buf(), url, child: Some(child) })
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let conf = self.dir.join("nginx.conf");
        let _ = Command::new(&self.bin)
            .args([
                "-c",
                conf.to_str().unwrap_or(""),
                "-p",
                self.dir.to_str().unwrap_or(""),
                "-s",
                "stop",
            ])
            .stderr(Stdio::null())
            .status();
        if let Some(mut c) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What an HTTP benchmark needs: a CPU for the injector (shared with the servers on a machine of
/// one CPU), a directory with `www/1k.bin`. No peer program: SWS and `ochre load` are in this
/// process.
pub(crate) struct Setup {
    /// The CPUs allowed.
    pub(crate) cpus: Vec<usize>,
    /// The injector's CPU: the last one.
    pub(crate) injector: usize,
    /// Scratch directory (removed by the benchmark when done).
    pub(crate) dir: PathBuf,
    /// The document root, holding `1k.bin`.
    pub(crate) root: PathBuf,
}

/// Finds the CPUs and makes the file set, or says in `report` why not.
pub(crate) fn setup(report: &mut BenchReport, tag: &str) -> Option<Setup> {
    let cpus = match ochre::topology::allowed_cpus() {
        Ok(cpus) if !cpus.is_empty() => cpus,
        Ok(_) => {
            report.notes.push("no CPU allowed to this process: skipped".into());
            return None;
        }
        Err(e) => {
            report.notes.push(format!("cannot read this process's CPUs ({e}): skipped"));
            return None;
        }
    };
    let dir = std::env::temp_dir().join(format!("ochre-bench-{tag}-{}", std::process::id()));
    let root = dir.join("www");
    if let Err(e) = std::fs::create_dir_all(&root)
        .and_then(|_| std::fs::write(root.join("1k.bin"), vec![b'x'; 1024]))
    {
        report.notes.push(format!("cannot make the file set: {e}"));
        return None;
    }
    let injector = cpus[cpus.len() - 1];
    Some(Setup { cpus, injector, dir, root })
}

impl Setup {
    /// The runtime `ochre load` runs on: one worker, on the injector's CPU.
    pub(crate) fn load_runtime(&self) -> Result<Runtime, String> {
        Runtime::builder().cpus([self.injector]).build().map_err(|e| e.to_string())
    }

    /// [`load_runtime`](Self::load_runtime), or `None` with the reason noted in `report` and the
    /// scratch directory removed (for a benchmark that cannot go on without it).
    pub(crate) fn load_runtime_or_note(&self, report: &mut BenchReport) -> Option<Runtime> {
        self.load_runtime()
            .map_err(|e| {
                report.notes.push(format!("no injector runtime: {e}"));
                let _ = std::fs::remove_dir_all(&self.dir);
            })
            .ok()
    }
}

/// The SPECweb99-like set the benchmark serves: `dirs` directories under `root/specweb`.
pub(crate) fn specweb(root: &Path, dirs: usize) -> std::io::Result<FileSet> {
    let mut set = FileSet::describe(dirs, 1.0, 1.0);
    set.write(&root.join("specweb"), 1)?;
    for p in &mut set.paths {
        p.insert_str(0, "/specweb");
    }
    Ok(set)
}

/// The CPUs of servers with `w` workers: off the injector's CPU when there are enough others;
/// with as many workers as CPUs they share it (alike for every server).
pub(crate) fn server_cpus(cpus: &[usize], injector: usize, w: usize) -> Vec<usize> {
    let others: Vec<usize> = cpus.iter().copied().filter(|&c| c != injector).collect();
    if w <= others.len() {
        others[..w].to_vec()
    } else {
        cpus[..w.min(cpus.len())].to_vec()
    }
}

/// The target of one workload on the server at `url` (whose path is the 1 KiB file).
pub(crate) fn target_of(url: &str, mix: Option<&FileSet>) -> Result<Target, String> {
    let mut t = ochre_load::parse_url(url).map_err(|e| e.to_string())?;
    if let Some(set) = mix {
        t.paths = set.paths.clone();
        t.mix = Some(Mix::new(&set.weights));
    }
    Ok(t)
}

/// Seconds of one sample. Quick: 0.75 s keeps `ochre study --quick` short (four servers, four
/// cases, five samples each).
pub(crate) fn sample_seconds(opts: &Options) -> f64 {
    if opts.quick {
        0.75
    } else {
        5.0
    }
}

/// Runs the SWS benchmark.
pub fn run(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(
        "sws",
        "Web server: requests/s, keep-alive, 50 connections, `ochre load` as the injector (>= wrk, \
         bench loadgen): a 1 KiB file, and a SPECweb99-like set (Zipf popularity, class mix).",
    );
    let Some(setup) = setup(&mut report, "sws") else { return report };
    let load = setup.load_runtime();
    let Setup { cpus, injector, dir, root } = setup;
    let secs = sample_seconds(opts);
    let set = match specweb(&root, if opts.quick { 4 } else { 20 }) {
        Ok(set) => Some(set),
        Err(e) => {
            report.notes.push(format!("cannot write the SPECweb99-like set ({e}): skipped"));
            None
        }
    };
    let nginx = nginx_path();
    if nginx.is_none() {
        report.notes.push(
            "nginx is not installed (scripts/install-peers.sh installs it): the nginx rows and \
             the SWS >= nginx checks are skipped; SWS's own configurations are measured"
                .into(),
        );
    }
    for w in opts.workers.iter().copied().filter(|&w| w <= cpus.len()) {
        let server_cpus = server_cpus(&cpus, injector, w);
        let sws = Sws::start(&root, &server_cpus, Config::default(), Revalidate::Inotify);
        let base = Sws::start(&root, &server_cpus, Config::baseline(), Revalidate::Inotify);
        // The same server, revalidating its cache by a `stat` per request instead of inotify.
        let stat = Sws::start(&root, &server_cpus, Config::default(), Revalidate::Stat);
        let ngx = nginx
            .as_ref()
            .map(|bin| Nginx::start(bin, &root, &dir.join(format!("nginx-{w}")), &server_cpus));
        let servers: Vec<(&str, Result<String, String>)> = [
            ("ochre", sws.as_ref().map(|s| s.url.clone()).map_err(|e| e.clone())),
            ("ochre-baseline", base.as_ref().map(|s| s.url.clone()).map_err(|e| e.clone())),
            ("ochre-stat", stat.as_ref().map(|s| s.url.clone()).map_err(|e| e.clone())),
        ]
        .into_iter()
        .chain(
            ngx.as_ref()
                .map(|n| ("nginx", n.as_ref().map(|n| n.url.clone()).map_err(|e| e.clone()))),
        )
        .collect();
        let workloads = [("1 KiB", None), ("SPECweb99", set.as_ref())];
        for (label, mix) in workloads.into_iter().filter(|(l, m)| *l == "1 KiB" || m.is_some()) {
            let case = format!("{label}, {w}w");
            let latencies = RefCell::new(Vec::<(String, LoadReport)>::new());
            let systems = servers
                .iter()
                .map(|(name, url)| {
                    let (latencies, load) = (&latencies, &load);
                    System::new(*name, move || {
                        let url = url.as_ref().map_err(|e| e.clone())?;
                        let rt = load.as_ref().map_err(|e| e.clone())?;
                        let r = drive(rt, &target_of(url, mix)?, secs)?;
                        let rate = r.throughput;
                        latencies.borrow_mut().push((name.to_string(), r));
                        Ok(rate)
                    })
                })
                .collect();
            measure_case(&mut report, &case, w, "req/s", opts.reps, systems);
            latency_notes(&mut report, &case, latencies.into_inner());
            if let (Some(o), Some(n)) =
                (report.median_of("ochre", &case), report.median_of("nginx", &case))
            {
                report.check(format!("[{case}] SWS >= nginx"), o / n, o >= n);
            }
            if let (Some(o), Some(s)) =
                (report.median_of("ochre", &case), report.median_of("ochre-stat", &case))
            {
                report.notes.push(format!(
                    "[{case}] cache kept current by inotify vs a stat per request: {:.3}x",
                    o / s
                ));
            }
            match (report.median_of("ochre", &case), report.median_of("ochre-baseline", &case)) {
                // One worker posts nothing across cores: the optimizations have nothing to act on.
                (Some(o), Some(b)) if w == 1 => report.notes.push(format!(
                    "[{case}] optimized vs libasync-smp configuration at one worker: {:.3}x \
                     (no cross-core posting, stealing or remote frees to optimize)",
                    o / b
                )),
                (Some(o), Some(b)) => report.check(
                    format!("[{case}] SWS optimized >= 1.5x the libasync-smp configuration"),
                    o / b,
                    o / b >= 1.5,
                ),
                _ => {}
            }
            // The checks above are ratios of medians; beside them, the same comparisons
            // repetition by repetition (samples of one repetition are taken back to back), which
            // the load of a shared host drifting over the run's seconds does not move.
            let paired: Vec<String> =
                [("nginx", "SWS / nginx"), ("ochre-baseline", "optimized / baseline")]
                    .iter()
                    .filter_map(|(other, label)| {
                        report
                            .paired_ratio("ochre", other, &case)
                            .map(|r| format!("{label} {r:.3}"))
                    })
                    .collect();
            if !paired.is_empty() {
                report.notes.push(format!(
                    "[{case}] median of per-repetition ratios: {}",
                    paired.join(", ")
                ));
            }
        }
        if server_cpus.contains(&injector) {
            report.notes.push(format!(
                "[{w}w] the servers use every CPU ({server_cpus:?}): the injector shares CPU \
                 {injector} with them, alike for every server"
            ));
        }
    }
    report.notes.push(format!(
        "injector: ochre load, {CONNECTIONS} keep-alive connections, pinned to CPU {injector}"
    ));
    let _ = std::fs::remove_dir_all(&dir);
    report
}

/// Notes each system's latency percentiles at its median sample (the sample whose throughput
/// is the median).
fn latency_notes(report: &mut BenchReport, case: &str, mut samples: Vec<(String, LoadReport)>) {
    samples.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.throughput.total_cmp(&b.1.throughput)));
    let mut names: Vec<String> = samples.iter().map(|(n, _)| n.clone()).collect();
    names.dedup();
    for name in names {
        let mine: Vec<&LoadReport> =
            samples.iter().filter(|(n, _)| *n == name).map(|(_, r)| r).collect();
        let median = mine[mine.len() / 2];
        let p = |q| median.percentile(q).unwrap_or(0);
        report.notes.push(format!(
            "[{case}] {name} latency at its median run: p50 {} us, p90 {} us, p99 {} us, p99.9 {} us",
            p(50.0),
            p(90.0),
            p(99.0),
            p(99.9)
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_setup_needs_no_peer_program() {
        // Whatever this machine has installed (wrk, nginx or neither), SWS and `ochre load` run
        // in this process: the setup is made, with its file, and nothing is skipped.
        let mut report = BenchReport::new("t", "t");
        let setup = setup(&mut report, "setup-test").expect("a setup without peers");
        assert!(report.notes.is_empty(), "{:?}", report.notes);
        assert_eq!(std::fs::read(setup.root.join("1k.bin")).unwrap().len(), 1024);
        assert_eq!(setup.injector, *setup.cpus.last().unwrap());
        std::fs::remove_dir_all(&setup.dir).unwrap();
    }

    #[test]
    fn missing_peers_are_named_by_their_command() {
        let none = PeerPrograms { nginx: None, wrk: false, taskset: false };
        assert_eq!(none.missing(), ["nginx", "wrk", "taskset"]);
        let all = PeerPrograms { nginx: Some("/usr/sbin/nginx".into()), wrk: true, taskset: true };
        assert!(all.missing().is_empty());
    }

    #[test]
    fn servers_leave_the_injector_its_cpu_when_they_can() {
        assert_eq!(server_cpus(&[0, 1, 2], 2, 2), [0, 1]);
        // As many workers as CPUs: they share the injector's.
        assert_eq!(server_cpus(&[0, 1], 1, 2), [0, 1]);
        // One CPU: server and injector share it.
        assert_eq!(server_cpus(&[0], 0, 1), [0]);
    }
}
