//! The web server against nginx: SWS (optimized and libasync-smp configurations) and nginx
//! serve the same 1 KiB file to the same injector, keep-alive, in the same run.
//!
//! The injector is `wrk` for now (the project's own, `ochre load`, replaces it when it lands),
//! pinned to the last CPU; the servers get the others (with 2 CPUs: one each, as the issue's
//! anchor measurement did). nginx runs from a generated configuration on loopback, with as many
//! worker processes as the servers' workers, pinned likewise. A missing nginx or wrk is a note,
//! not a failure (`scripts/install-peers.sh` installs them).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ochre::io::Listener;
use ochre::{Color, Config, Runtime};
use ochre_http::{Server, ServerConfig};

use crate::harness::{measure_case, BenchReport, Options, System};

/// Connections the injector keeps open.
pub const CONNECTIONS: usize = 50;

fn have(cmd: &str) -> bool {
    Command::new(cmd).arg("-v").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

pub(crate) fn nginx_path() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/bin/nginx"].iter().map(PathBuf::from).find(|p| p.exists())
}

/// One wrk measurement: requests/s, or why it failed.
pub(crate) fn wrk(url: &str, cpu: usize, secs: u64) -> Result<f64, String> {
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

/// An SWS instance in this process, on `cpus`.
struct Sws {
    rt: Arc<Runtime>,
    url: String,
    run: Option<std::thread::JoinHandle<()>>,
}

impl Sws {
    fn start(root: &Path, cpus: &[usize], config: Config) -> Result<Sws, String> {
        let rt = Arc::new(
            Runtime::builder()
                .cpus(cpus.iter().copied())
                .config(config)
                .build()
                .map_err(|e| e.to_string())?,
        );
        let listener = Listener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let url = format!("http://{}/1k.bin", listener.local_addr().map_err(|e| e.to_string())?);
        let cfg = ServerConfig { root: root.to_path_buf(), ..ServerConfig::default() };
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

/// What an HTTP benchmark needs: wrk and taskset, two CPUs, a directory with `www/1k.bin`.
pub(crate) struct Setup {
    /// The CPUs allowed.
    pub(crate) cpus: Vec<usize>,
    /// Scratch directory (removed by the benchmark when done).
    pub(crate) dir: PathBuf,
    /// The document root, holding `1k.bin`.
    pub(crate) root: PathBuf,
}

/// Checks the tools and CPUs and makes the file set, or says in `report` why not.
pub(crate) fn setup(report: &mut BenchReport, tag: &str) -> Option<Setup> {
    if !have("wrk") || !have("taskset") {
        report.notes.push(
            "wrk (or taskset) is not installed: scripts/install-peers.sh installs it; skipped"
                .into(),
        );
        return None;
    }
    let cpus = ochre::topology::allowed_cpus().unwrap_or_default();
    if cpus.len() < 2 {
        report.notes.push("needs 2 CPUs (one for the injector): skipped".into());
        return None;
    }
    let dir = std::env::temp_dir().join(format!("ochre-bench-{tag}-{}", std::process::id()));
    let root = dir.join("www");
    if let Err(e) = std::fs::create_dir_all(&root)
        .and_then(|_| std::fs::write(root.join("1k.bin"), vec![b'x'; 1024]))
    {
        report.notes.push(format!("cannot make the file set: {e}"));
        return None;
    }
    Some(Setup { cpus, dir, root })
}

/// Runs the SWS benchmark.
pub fn run(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(
        "sws",
        "Web server: requests/s for a 1 KiB file, keep-alive, 50 connections, wrk as the injector.",
    );
    let Some(Setup { cpus, dir, root }) = setup(&mut report, "sws") else { return report };
    let injector = *cpus.last().unwrap_or(&0);
    let server_cpus: Vec<usize> = cpus.iter().copied().filter(|&c| c != injector).collect();
    let secs = if opts.quick { 2 } else { 5 };
    let nginx = nginx_path();
    if nginx.is_none() {
        report.notes.push(
            "nginx is not installed: scripts/install-peers.sh installs it; nginx skipped".into(),
        );
    }
    let workers: Vec<usize> =
        opts.workers.iter().copied().filter(|&w| w <= server_cpus.len()).collect();
    for w in workers {
        let cpus = &server_cpus[..w];
        let case = format!("{w} worker{}", if w > 1 { "s" } else { "" });
        let sws = Sws::start(&root, cpus, Config::default());
        let base = Sws::start(&root, cpus, Config::baseline());
        let ngx = nginx
            .as_ref()
            .map(|bin| Nginx::start(bin, &root, &dir.join(format!("nginx-{w}")), cpus));
        let mut systems = vec![
            System::new("ochre", || {
                sws.as_ref().map_err(|e| e.clone()).and_then(|s| wrk(&s.url, injector, secs))
            }),
            System::new("ochre-baseline", || {
                base.as_ref().map_err(|e| e.clone()).and_then(|s| wrk(&s.url, injector, secs))
            }),
        ];
        if let Some(n) = &ngx {
            systems.push(System::new("nginx", || {
                n.as_ref().map_err(|e| e.clone()).and_then(|n| wrk(&n.url, injector, secs))
            }));
        }
        measure_case(&mut report, &case, w, "req/s", opts.reps, systems);
        if let (Some(o), Some(n)) =
            (report.median_of("ochre", &case), report.median_of("nginx", &case))
        {
            report.check(format!("[{case}] SWS >= nginx"), o / n, o >= n);
        }
        if let (Some(o), Some(b)) =
            (report.median_of("ochre", &case), report.median_of("ochre-baseline", &case))
        {
            report.check(
                format!("[{case}] SWS optimized >= 1.5x the libasync-smp configuration"),
                o / b,
                o / b >= 1.5,
            );
        }
    }
    report.notes.push(format!("injector wrk -t1 -c{CONNECTIONS} pinned to CPU {injector}; servers on CPUs {server_cpus:?}"));
    let _ = std::fs::remove_dir_all(&dir);
    report
}
