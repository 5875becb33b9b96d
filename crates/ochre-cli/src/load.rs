//! `ochre load`: the command line of the load injector (`ochre-load`), including its worker
//! mode for distributed runs.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ochre_load::remote::{self, Job};
use ochre_load::{ClosedLoop, LoadReport, Model, OpenLoop, Phases, SemiOpenLoop};

use crate::{duration, seconds, write_json};

/// Load an HTTP server: a closed loop of clients (Banga & Druschel); with --rate an open
/// loop (latency from each request's intended send time); with --sessions a semi-open loop
/// (Schroeder et al.). Latency percentiles, responses by status code, errors by kind, a
/// per-second series. Every run is bounded in time. With --remote, the load is spread over
/// this process and `ochre load --worker` processes (other hosts), and their histograms are
/// merged. Durations take a unit (10s, 500ms, 2m); a bare number is seconds.
#[derive(clap::Args)]
pub(crate) struct LoadArgs {
    /// The URL to request, e.g. http://127.0.0.1:8080/index.html or http://[::1]:8080/
    /// (repeat for several paths of the same server, requested in turn).
    #[arg(required_unless_present = "worker")]
    urls: Vec<String>,
    /// Concurrent clients (connections), in all.
    #[arg(short, long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    clients: u32,
    /// Requests per connection before it is closed and reopened (150 in the thesis).
    #[arg(long, default_value_t = 150, value_parser = clap::value_parser!(u32).range(1..))]
    requests_per_connection: u32,
    /// Pause between a response and the next request of a client (e.g. 5ms).
    #[arg(long, value_parser = duration::parse, conflicts_with = "think_ms")]
    think: Option<Duration>,
    /// The same in milliseconds (the older spelling of --think).
    #[arg(long, hide = true)]
    think_ms: Option<f64>,
    /// Open loop: requests per second in all, over --clients connections.
    #[arg(short = 'R', long)]
    rate: Option<f64>,
    /// Semi-open loop: sessions arriving per second (each session thinks --think on
    /// average between requests; Pariag et al. use 343ms).
    #[arg(long, conflicts_with = "rate")]
    sessions: Option<f64>,
    /// Semi-open loop: probability that a session leaves after each reply.
    #[arg(long, default_value_t = 0.2, requires = "sessions")]
    leave: f64,
    /// Semi-open loop: the inactive think time after a burst of requests (Pariag et al. and the
    /// thesis: 3s; --think is then the active one within a burst, 343ms there).
    #[arg(long, value_parser = duration::parse, requires_all = ["sessions", "burst"])]
    inactive_think: Option<Duration>,
    /// Semi-open loop: mean requests per burst (a page and its objects) before the inactive
    /// think time.
    #[arg(long, requires_all = ["sessions", "inactive_think"])]
    burst: Option<f64>,
    /// Poisson arrivals (exponential gaps) instead of fixed gaps, for --rate or --sessions.
    #[arg(long)]
    poisson: bool,
    /// Rate search: the highest open-loop rate (up to --rate, default 100000) whose p99
    /// stays under this latency (e.g. 5ms), in 8 probes of --duration each.
    #[arg(long, value_parser = duration::parse, conflicts_with_all = ["sessions", "remote", "search_p99_ms"])]
    search_p99: Option<Duration>,
    /// The same in milliseconds (the older spelling of --search-p99).
    #[arg(long, hide = true, conflicts_with_all = ["sessions", "remote"])]
    search_p99_ms: Option<f64>,
    /// Measured load.
    #[arg(short, long, default_value = "10s", value_parser = duration::parse)]
    duration: Duration,
    /// Load before measuring, not recorded.
    #[arg(long, default_value = "1s", value_parser = duration::parse)]
    warmup: Duration,
    /// Load after the measured phase, not recorded (so the measurement does not end as
    /// clients leave).
    #[arg(long, default_value = "500ms", value_parser = duration::parse)]
    cooldown: Duration,
    /// End the measured phase after this many responses and errors (or at --duration, if
    /// sooner); throughput is over the time they took.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    requests: Option<u64>,
    /// Time a request may take before it counts as a timeout.
    #[arg(long, default_value = "5s", value_parser = duration::parse)]
    timeout: Duration,
    /// Worker threads of the injector (default: one per CPU).
    #[arg(short = 't', long, visible_alias = "threads", value_parser = clap::value_parser!(u32).range(1..=4096))]
    workers: Option<u32>,
    /// Also write the report as JSON to this file (histogram included: reports merge).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also write the per-second series as CSV to this file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Request paths drawn from this mix (`mix.txt` of `ochre fileset`) instead of the URLs'.
    #[arg(long)]
    mix: Option<PathBuf>,
    /// Check every 200 response's body against the file of the same path under this
    /// directory (the server's root, or the directory of `ochre fileset`); a different body
    /// counts as a `mismatch` error.
    #[arg(long)]
    verify: Option<PathBuf>,
    /// No progress line each second (they go to standard error, on a terminal by default).
    #[arg(long)]
    quiet: bool,
    /// Print progress lines even when standard error is not a terminal.
    #[arg(long, conflicts_with = "quiet")]
    progress: bool,
    /// Spread the load over this process and an `ochre load --worker` at HOST:PORT (repeat
    /// for several); clients, connections and rates are divided among them.
    #[arg(long)]
    remote: Vec<SocketAddr>,
    /// Worker mode: wait for jobs from a master (`ochre load ... --remote`) on --listen.
    #[arg(long)]
    worker: bool,
    /// Worker mode: where to wait for the master.
    #[arg(long, default_value = "127.0.0.1:7979", requires = "worker")]
    listen: SocketAddr,
    /// Worker mode: stop after this many jobs (default: serve until killed).
    #[arg(long, requires = "worker")]
    jobs: Option<usize>,
}

impl LoadArgs {
    fn runtime(&self) -> Result<ochre::Runtime, ochre::Error> {
        let mut builder = ochre::Runtime::builder();
        if let Some(w) = self.workers {
            builder = builder.workers(w as usize);
        }
        builder.build()
    }

    fn model(&self) -> Result<Model, String> {
        let think = match (self.think, self.think_ms) {
            (Some(d), _) => d,
            (None, Some(ms)) => seconds("think-ms", ms / 1000.0)?,
            (None, None) => Duration::ZERO,
        };
        Ok(match (self.rate, self.sessions) {
            (Some(rate), _) => Model::Open(OpenLoop {
                rate,
                connections: self.clients as usize,
                poisson: self.poisson,
            }),
            (None, Some(arrival_rate)) => Model::SemiOpen(SemiOpenLoop {
                arrival_rate,
                leave: self.leave,
                think,
                poisson: self.poisson,
                inactive_think: self.inactive_think.unwrap_or(Duration::ZERO),
                requests_per_burst: self.burst.unwrap_or(0.0),
            }),
            (None, None) => Model::Closed(ClosedLoop {
                clients: self.clients as usize,
                requests_per_connection: self.requests_per_connection,
                think,
            }),
        })
    }

    /// The job as a worker would run it: target, model, phases.
    fn job(&self) -> Result<Job, String> {
        let first = ochre_load::parse_url(&self.urls[0]).map_err(text)?;
        let mut job = Job {
            addr: first.addr,
            host: first.host,
            paths: first.paths,
            weights: None,
            verify: self.verify.clone(),
            model: self.model()?,
            warmup: self.warmup,
            measure: self.duration,
            timeout: self.timeout,
            cooldown: self.cooldown,
            requests: self.requests,
        };
        if let Some(m) = &self.mix {
            if self.urls.len() > 1 {
                return Err("with --mix, give one URL (the server)".into());
            }
            let set = ochre_load::fileset::FileSet::read_mix(m).map_err(text)?;
            job.paths = set.paths;
            job.weights = Some(set.weights);
        }
        for u in &self.urls[1..] {
            let t = ochre_load::parse_url(u).map_err(text)?;
            if t.addr != job.addr {
                return Err(format!("{u}: all URLs must name the same server"));
            }
            job.paths.extend(t.paths);
        }
        Ok(job)
    }

    fn phases(&self, job: &Job) -> Phases {
        let mut phases = job.phases();
        let show = self.progress || (!self.quiet && std::io::stderr().is_terminal());
        if show {
            phases.progress = Some(ochre_load::Progress(Arc::new(|p| {
                if p.warming_up {
                    eprintln!("[{:>5.1} s] warming up", p.elapsed.as_secs_f64());
                } else {
                    eprintln!(
                        "[{:>5.1} s] {:>9} req/s in the last second, {} responses, {} errors",
                        p.elapsed.as_secs_f64(),
                        p.last_interval_ok,
                        p.ok,
                        p.errors
                    );
                }
            })));
        }
        phases
    }
}

/// Runs `ochre load`.
pub(crate) fn run(args: &LoadArgs) -> Result<(), String> {
    if args.worker {
        let listener = std::net::TcpListener::bind(args.listen)
            .map_err(|e| format!("--listen {}: {e}", args.listen))?;
        eprintln!("ochre load --worker: waiting for a master on {}", args.listen);
        return remote::serve_worker(listener, args.jobs, || args.runtime()).map_err(text);
    }
    let job = args.job()?;
    let phases = args.phases(&job);
    let slo = match (args.search_p99, args.search_p99_ms) {
        (Some(d), _) => Some(d),
        (None, Some(ms)) => Some(seconds("search-p99-ms", ms / 1000.0)?),
        (None, None) => None,
    };
    if let Some(slo) = slo {
        return search(args, &job, slo, &phases);
    }
    let rt = args.runtime().map_err(text)?;
    let cpu = CpuClock::start(rt.workers());
    let mut report = if args.remote.is_empty() {
        job.run(&rt, &phases)
    } else {
        remote::run_distributed(&job, &args.remote, &rt, &phases)
    }
    .map_err(text)?;
    if args.remote.is_empty() {
        // Only this process's figure is known; workers report their own warnings.
        report.injector_cpu = cpu.share();
    }
    print!("{}", report.table());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
    }
    if let Some(path) = &args.csv {
        write_csv(path, &report)?;
    }
    Ok(())
}

/// The message of a library error, as the command's errors are.
fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn write_csv(path: &Path, report: &LoadReport) -> Result<(), String> {
    std::fs::write(path, report.csv()).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn search(args: &LoadArgs, job: &Job, slo: Duration, phases: &Phases) -> Result<(), String> {
    let target = job.target().map_err(text)?;
    let rt = args.runtime().map_err(text)?;
    let high = args.rate.unwrap_or(100_000.0);
    let connections = args.clients as usize;
    let s =
        ochre_load::rate_search(&rt, &target, connections, slo, (high / 1000.0, high), 8, phases)
            .map_err(text)?;
    for (rate, r) in &s.probes {
        println!(
            "{rate:>10.0} req/s: delivered {:>10.0}, p99 {:>8}",
            r.throughput,
            ochre_load::report::latency(r.percentile(99.0).unwrap_or(0) as f64)
        );
    }
    println!("highest rate with p99 <= {slo:?}: {:.0} req/s", s.best_rate);
    if let Some(path) = &args.json {
        write_json(path, &s)?;
    }
    Ok(())
}

/// This process's CPU time over a run, as a share of its workers' capacity: the injector's
/// self-monitoring (this process is the injector and nothing else).
struct CpuClock {
    wall: Instant,
    cpu: Option<Duration>,
    workers: usize,
}

fn process_cpu() -> Option<Duration> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Some(Duration::new(u64::try_from(t.tv_sec).ok()?, u32::try_from(t.tv_nsec).ok()?))
}

impl CpuClock {
    fn start(workers: usize) -> CpuClock {
        CpuClock { wall: Instant::now(), cpu: process_cpu(), workers }
    }

    fn share(&self) -> Option<f64> {
        let used = process_cpu()?.checked_sub(self.cpu?)?;
        let wall = self.wall.elapsed().as_secs_f64() * self.workers.max(1) as f64;
        (wall > 0.0).then(|| used.as_secs_f64() / wall)
    }
}
