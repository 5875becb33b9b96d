//! `ochre`: the command-line front of the ochre runtime and its benchmarks.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[cfg(feature = "bench")]
mod bench;
mod duration;
mod load;
mod logger;
mod machine;
mod mr;
#[cfg(feature = "bench")]
mod sim;
#[cfg(feature = "bench")]
mod study;
mod trace;

#[derive(Parser)]
#[command(
    name = "ochre",
    version,
    about = "A multicore event-driven runtime: colored events on pinned per-core workers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Describe this machine as the runtime sees it: CPUs, wake-up latencies, spin threshold.
    Info {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Serve static files over HTTP/1.1 (SWS), until SIGINT or SIGTERM.
    ///
    /// Settings come from the defaults, then the --config file, then these flags.
    Serve {
        /// The directory to serve (required here, as --root or in the config file). Nothing
        /// outside it is ever served.
        #[arg(value_name = "DIR", conflicts_with = "root")]
        dir: Option<PathBuf>,
        /// The directory to serve (the same as DIR).
        #[arg(long)]
        root: Option<PathBuf>,
        /// Address and port to listen on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// Listen on 127.0.0.1 at this port (instead of --listen).
        #[arg(short, long, conflicts_with = "listen")]
        port: Option<u16>,
        /// Worker threads (default: one per CPU available).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
        workers: Option<u32>,
        /// A TOML file with server settings; `--print-config` prints one with every setting,
        /// its default and its meaning.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print every setting of the configuration file with its default and meaning, and exit.
        #[arg(long)]
        print_config: bool,
        /// Concurrent connections; beyond, new ones get 503 (default 10000).
        #[arg(long)]
        max_connections: Option<usize>,
        /// Listen backlog: connections the kernel queues before they are accepted (default: the
        /// system's maximum, net.core.somaxconn).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        backlog: Option<u32>,
        /// Seconds a client has to send a whole request head (default 10).
        #[arg(long, allow_negative_numbers = true)]
        read_timeout: Option<f64>,
        /// Seconds an idle keep-alive connection is kept (default 30).
        #[arg(long, allow_negative_numbers = true)]
        keepalive_timeout: Option<f64>,
        /// Append a common-log-format line per response to this file.
        #[arg(long)]
        access_log: Option<PathBuf>,
        /// Serve the counters as JSON at this path, to loopback clients (e.g. /.ochre/status).
        #[arg(long)]
        status_path: Option<String>,
        /// Record the runtime's trace and write it to this file as Chrome trace JSON when the
        /// server stops (open it in ui.perfetto.dev).
        #[arg(long)]
        trace: Option<PathBuf>,
        /// N-COPY: run this many independent server processes sharing the port
        /// (SO_REUSEPORT), each on its own subset of the CPUs.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
        copies: u32,
        /// Internal: this process is copy number N of --copies.
        #[arg(long, hide = true)]
        copy: Option<u32>,
    },
    Load(Box<load::LoadArgs>),
    Mr(mr::MrArgs),
    /// Generate a SPECweb99-like static file set and its request mix (mix.txt) in a directory.
    Fileset {
        /// Where to write it (created).
        #[arg(long)]
        dir: PathBuf,
        /// Total size in MiB (about 5 MiB per directory of 36 files).
        #[arg(long, default_value_t = 100)]
        size_mib: u64,
        /// Zipf exponent of directory and file popularity (1.0 in SPECweb99).
        #[arg(long, default_value_t = 1.0)]
        zipf: f64,
        /// Seed of the file contents.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Instead of the SPECweb99-like set: this many files of --file-size bytes each,
        /// requested uniformly (the fixed set for runtime stress).
        #[arg(long, requires = "file_size", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        files: Option<u64>,
        /// Size of each file of a --files set, in bytes.
        #[arg(long, requires = "files")]
        file_size: Option<u64>,
    },
    /// Run one benchmark against its peers in this process and print its table.
    #[cfg(feature = "bench")]
    Bench(bench::BenchArgs),
    /// Run every benchmark and write a report (Markdown + JSON) to a directory.
    #[cfg(feature = "bench")]
    Study(bench::StudyArgs),
    #[cfg(not(feature = "bench"))]
    #[command(hide = true, disable_help_flag = true)]
    Bench(Lacking),
    #[cfg(not(feature = "bench"))]
    #[command(hide = true, disable_help_flag = true)]
    Study(Lacking),
    /// Simulate N-core machines running ochre's own policies (speed, calibrate, validate,
    /// predict).
    #[cfg(feature = "bench")]
    Sim(sim::SimArgs),
    #[cfg(not(feature = "bench"))]
    #[command(hide = true, disable_help_flag = true)]
    Sim(Lacking),
}

fn main() -> ExitCode {
    logger::init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info { json } => info(json),
        #[cfg(feature = "bench")]
        Command::Bench(args) => bench::bench(&args),
        #[cfg(feature = "bench")]
        Command::Study(args) => bench::study(&args),
        #[cfg(not(feature = "bench"))]
        Command::Bench(_) => Err(Lacking::message("bench")),
        #[cfg(not(feature = "bench"))]
        Command::Study(_) => Err(Lacking::message("study")),
        #[cfg(feature = "bench")]
        Command::Sim(args) => sim::run(&args),
        #[cfg(not(feature = "bench"))]
        Command::Sim(_) => Err(Lacking::message("sim")),
        Command::Fileset { dir, size_mib, zipf, seed, files, file_size } => {
            let uniform = files.zip(file_size);
            fileset(&dir, size_mib, zipf, seed, uniform)
        }
        Command::Load(args) => load::run(&args),
        Command::Mr(args) => mr::run(&args),
        Command::Serve {
            dir,
            root,
            listen,
            port,
            workers,
            config,
            max_connections,
            backlog,
            read_timeout,
            keepalive_timeout,
            access_log,
            status_path,
            trace,
            copies,
            copy,
            print_config,
        } => {
            if print_config {
                print!("{}", ochre_http::ServerConfig::sample_toml());
                return ExitCode::SUCCESS;
            }
            if copies > 1 && copy.is_none() {
                return exit(run_copies(copies));
            }
            let listen = port.map_or(listen, |p| format!("127.0.0.1:{p}"));
            let flags = ServeFlags {
                root: dir.or(root),
                max_connections,
                backlog,
                read_timeout,
                keepalive_timeout,
                access_log,
                status_path,
            };
            let placement = Placement { copies, copy: copy.unwrap_or(0), workers };
            serve_config(config.as_deref(), flags)
                .and_then(|c| serve(c, &listen, placement, trace.as_deref()))
        }
    };
    exit(result)
}

/// The arguments of a subcommand this build lacks (`bench` and `study` without the `bench`
/// feature): taken whatever they are, so that the answer is the missing feature.
#[cfg(not(feature = "bench"))]
#[derive(clap::Args)]
struct Lacking {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    _args: Vec<String>,
}

#[cfg(not(feature = "bench"))]
impl Lacking {
    fn message(command: &str) -> String {
        format!(
            "`ochre {command}` is not in this build (built without the `bench` feature, which \
             brings the benchmark peers); build the full tool with `cargo build --release -p \
             ochre-cli`"
        )
    }
}

fn exit(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ochre: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Where one server process runs: copy `copy` of `copies`, on its share of the CPUs.
struct Placement {
    copies: u32,
    copy: u32,
    workers: Option<u32>,
}

impl Placement {
    /// This copy's CPUs: the allowed CPUs cut into `copies` contiguous groups (neighbouring CPU
    /// numbers usually share caches), or all of them for a single copy.
    fn cpus(&self) -> Result<Vec<usize>, String> {
        let all =
            ochre::topology::allowed_cpus().map_err(|e| format!("reading CPU affinity: {e}"))?;
        let n = self.copies as usize;
        if n <= 1 || all.is_empty() {
            return Ok(all);
        }
        let per = (all.len() / n).max(1);
        let start = (self.copy as usize * per) % all.len();
        Ok((0..per).map(|k| all[(start + k) % all.len()]).collect())
    }
}

/// N-COPY parent: starts the copies with the same arguments, forwards SIGINT/SIGTERM to them,
/// and returns when they have all exited. Its signals are watched before the first copy starts,
/// and a copy ended by a signal it forwarded (one that came before the copy watched its own) has
/// stopped as asked, not failed.
fn run_copies(copies: u32) -> Result<(), String> {
    use ochre::io::signal;
    use std::sync::{Arc, Mutex};
    let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = ochre::Runtime::builder().workers(1).pin(false).build().map_err(|e| e.to_string())?;
    let handle = rt.handle();
    // The copies' pids, and the signal forwarded to them if one came (copies started after it get
    // it at once).
    let started: Arc<Mutex<(Vec<i32>, Option<i32>)>> = Arc::new(Mutex::new((Vec::new(), None)));
    let forward = |pid: i32, s: i32| {
        // SAFETY: `kill` with a child's pid and a valid signal number.
        unsafe { libc::kill(pid, s) };
    };
    let mut watches = Vec::new();
    for sig in [signal::SIGINT, signal::SIGTERM] {
        let started = started.clone();
        let on_signal = move |s: i32| {
            let mut started = started.lock().unwrap_or_else(|e| e.into_inner());
            started.1 = Some(s);
            for &pid in &started.0 {
                forward(pid, s);
            }
        };
        watches
            .push(handle.watch_signal(sig, ochre::Color(1), on_signal).map_err(|e| e.to_string())?);
    }
    let mut children = Vec::new();
    for i in 0..copies {
        let mut started = started.lock().unwrap_or_else(|e| e.into_inner());
        let mut command = std::process::Command::new(&exe);
        command.args(&args).arg("--copy").arg(i.to_string());
        // A copy gets SIGTERM when this parent ends, however it ends (even SIGKILL): no orphan
        // keeps serving the port.
        let parent = rustix::process::getpid();
        // SAFETY: the closure runs in the forked child before exec and makes only two system
        // calls (prctl, getppid), both async-signal-safe; it allocates nothing.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                use rustix::process::{getppid, set_parent_process_death_signal, Signal};
                set_parent_process_death_signal(Some(Signal::TERM))?;
                if getppid() != Some(parent) {
                    // The parent ended before the death signal was set.
                    return Err(std::io::ErrorKind::BrokenPipe.into());
                }
                Ok(())
            });
        }
        let child = command.spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                for &pid in &started.0 {
                    forward(pid, signal::SIGTERM);
                }
                drop(started);
                for mut c in children {
                    let _ = std::process::Child::wait(&mut c);
                }
                return Err(format!("starting copy {i}: {e}"));
            }
        };
        started.0.push(child.id() as i32);
        if let Some(s) = started.1 {
            forward(child.id() as i32, s);
        }
        children.push(child);
    }
    let h = handle.clone();
    let forwarded = started.clone();
    let waiter = std::thread::spawn(move || {
        use std::os::unix::process::ExitStatusExt;
        let mut failed = 0;
        for mut c in children {
            let stopped = match c.wait() {
                Ok(s) => {
                    let asked = forwarded.lock().unwrap_or_else(|e| e.into_inner()).1;
                    s.success() || (s.signal().is_some() && s.signal() == asked)
                }
                Err(_) => false,
            };
            if !stopped {
                failed += 1;
            }
        }
        h.shutdown();
        failed
    });
    rt.run(ochre::Color(1), || {}).map_err(|e| e.to_string())?;
    drop(watches);
    let failed = waiter.join().map_err(|_| "waiting for the copies failed".to_string())?;
    if failed > 0 {
        return Err(format!("{failed} of {copies} copies failed"));
    }
    Ok(())
}

fn seconds(name: &str, v: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(v)
        .map_err(|_| format!("--{name} must be a non-negative number of seconds"))
}

fn fileset(
    dir: &Path,
    size_mib: u64,
    zipf: f64,
    seed: u64,
    uniform: Option<(u64, u64)>,
) -> Result<(), String> {
    if !(zipf.is_finite() && zipf >= 0.0) {
        return Err("--zipf must be a non-negative number".into());
    }
    let dirs = ochre_load::fileset::FileSet::dirs_for(size_mib << 20);
    let set = match uniform {
        Some((files, size)) => ochre_load::fileset::FileSet::uniform(files as usize, size),
        None => ochre_load::fileset::FileSet::describe(dirs, zipf, 1.0),
    };
    set.write(dir, seed).map_err(|e| format!("writing {}: {e}", dir.display()))?;
    let total: u64 = set.sizes.iter().sum();
    eprintln!(
        "ochre fileset: {} files{}, {:.1} MiB, mix in {}",
        set.paths.len(),
        if uniform.is_some() { String::new() } else { format!(" in {dirs} directories") },
        total as f64 / (1u64 << 20) as f64,
        dir.join("mix.txt").display()
    );
    Ok(())
}

/// `serve` flags that override the configuration file.
struct ServeFlags {
    root: Option<PathBuf>,
    max_connections: Option<usize>,
    backlog: Option<u32>,
    read_timeout: Option<f64>,
    keepalive_timeout: Option<f64>,
    access_log: Option<PathBuf>,
    status_path: Option<String>,
}

fn serve_config(file: Option<&Path>, f: ServeFlags) -> Result<ochre_http::ServerConfig, String> {
    let mut c = match file {
        Some(p) => ochre_http::ServerConfig::from_toml_file(p).map_err(|e| e.to_string())?,
        None => {
            if f.root.is_none() {
                return Err(
                    "the directory to serve is required: `ochre serve DIR`, --root DIR, or a \
                     --config file with root = ..."
                        .into(),
                );
            }
            ochre_http::ServerConfig::default()
        }
    };
    if let Some(r) = f.root {
        c.root = r;
    }
    if let Some(n) = f.max_connections {
        c.max_connections = n;
    }
    if f.backlog.is_some() {
        c.backlog = f.backlog;
    }
    if let Some(t) = f.read_timeout {
        c.read_timeout = seconds("read-timeout", t)?;
    }
    if let Some(t) = f.keepalive_timeout {
        c.keepalive_timeout = seconds("keepalive-timeout", t)?;
    }
    if f.access_log.is_some() {
        c.access_log = f.access_log;
    }
    if f.status_path.is_some() {
        c.status_path = f.status_path;
    }
    Ok(c)
}

fn serve(
    config: ochre_http::ServerConfig,
    listen: &str,
    place: Placement,
    trace_file: Option<&Path>,
) -> Result<(), String> {
    use ochre::io::{signal, Listener};
    let root = config.root.clone();
    let backlog = config.backlog.unwrap_or_else(ochre::io::net::max_backlog);
    let workers = place.workers;
    let server = ochre_http::Server::new(config, ochre::Color(1))
        .map_err(|e| format!("cannot serve {}: {e}", root.display()))?;
    let trace_file = trace::create(trace_file)?;
    let mut builder = ochre::Runtime::builder()
        .cpus(place.cpus()?)
        .config(trace::config(ochre::Config::default(), trace_file.as_ref()));
    if let Some(w) = workers {
        builder = builder.workers(w as usize);
    }
    let rt = builder.build().map_err(|e| e.to_string())?;
    let handle = rt.handle();
    let server = std::sync::Arc::new(server);
    // Signals are watched before the port is bound: a server that answers can be stopped (an
    // N-COPY parent forwards SIGTERM as soon as it gets one, maybe while this copy starts). A
    // signal before the listener serves leaves `accepting` marked stopped, and the listener is
    // then cancelled as soon as it exists.
    let accepting = std::sync::Arc::new(std::sync::Mutex::new((false, None::<ochre::io::Watch>)));
    let mut signals = Vec::new();
    for sig in [signal::SIGINT, signal::SIGTERM] {
        let (h, a, s) = (handle.clone(), accepting.clone(), server.clone());
        let on_signal = move |_| {
            // Graceful: stop accepting, let in-flight responses finish, at most 10 s.
            let mut accepting = a.lock().unwrap_or_else(|e| e.into_inner());
            accepting.0 = true;
            if let Some(w) = accepting.1.take() {
                w.cancel();
            }
            s.shutdown_when_idle(&h, std::time::Instant::now() + Duration::from_secs(10));
        };
        signals
            .push(handle.watch_signal(sig, ochre::Color(1), on_signal).map_err(|e| e.to_string())?);
    }
    let listener = if place.copies > 1 {
        Listener::bind_reuseport_with_backlog(listen, backlog)
    } else {
        Listener::bind_with_backlog(listen, backlog)
    }
    .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    {
        let mut accepting = accepting.lock().unwrap_or_else(|e| e.into_inner());
        if !accepting.0 {
            accepting.1 = Some(server.serve_with(&handle, listener).map_err(|e| e.to_string())?);
        }
    }
    let copy = if place.copies > 1 {
        format!(" (copy {} of {})", place.copy, place.copies)
    } else {
        String::new()
    };
    eprintln!(
        "ochre serve: {} on http://{addr}/ with {} workers{copy} (Ctrl-C to stop)",
        root.display(),
        rt.workers()
    );
    let report = rt.run(ochre::Color(1), || {}).map_err(|e| e.to_string())?;
    drop(signals);
    let t = report.total();
    eprintln!(
        "ochre serve: stopped after {:.1} s; {} events, {} connections watched, {} panics",
        report.elapsed.as_secs_f64(),
        t.events_run,
        t.watches.saturating_sub(1),
        t.panics
    );
    let status = server.status();
    let lat = &status["latency_us"];
    eprintln!(
        "ochre serve: {} requests, {} body bytes; latency (parsed to written) p50 {} us, p99 {} \
         us, p99.9 {} us, max {} us; by status {}",
        status["requests"],
        status["body_bytes"],
        lat["p50"],
        lat["p99"],
        lat["p99.9"],
        lat["p100"],
        status["status"]
    );
    for c in report.top_colors.iter().take(5) {
        eprintln!(
            "ochre serve: color {}: ~{} events, ~{:.1} ms run (p99 {} us)",
            c.color.0,
            c.events,
            c.run_ns as f64 / 1e6,
            c.run_p99_ns / 1000
        );
    }
    if let Some(file) = trace_file {
        file.write(&rt)?;
    }
    Ok(())
}

fn info(json: bool) -> Result<(), String> {
    let m = machine::machine_info()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&m).map_err(|e| e.to_string())?);
        return Ok(());
    }
    println!("ochre {}", m.ochre_version);
    println!("CPUs available: {:?}", m.cpus);
    println!("padded build: {}", m.padded_build);
    for (k, v) in m.system.iter().chain(&m.versions) {
        println!("{k}: {v}");
    }
    for (kind, us) in &m.wakeup_latency_us {
        println!("wake-up latency ({kind}): {us:.1} us (median, one way)");
    }
    println!(
        "reasoned-spinning threshold (10x futex wake-up, clamped): {:.0} us",
        m.default_spin_threshold_us
    );
    Ok(())
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}
