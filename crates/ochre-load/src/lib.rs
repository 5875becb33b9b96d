//! `ochre load`: an HTTP/1.1 load injector on the ochre runtime.
//!
//! How a run flows: [`closed_loop`] (and [`open_loop`]) make one client per connection slot, each a color of its
//! own (`client`): the clients connect, send, read, record latencies into their own HDR
//! histogram (no shared counter on the hot path), and reconnect after a number of requests.
//! A warm-up phase is not recorded; the measured phase is; then no new request is sent, every
//! outstanding one finishes or times out, the runtime goes quiescent and the run returns. The
//! per-client tallies are merged into a [`LoadReport`] (throughput, latency percentiles, errors
//! by kind), printable as a table or JSON.
//!
//! Models: the closed loop, the open loop (fixed or Poisson arrivals, latency from the intended
//! send time) and the semi-open loop (sessions arriving at a rate, leaving with a probability
//! after each reply). Requests follow a URL list in turn or a file set's weighted mix
//! (`fileset`); bodies can be checked against the files ([`Target::verify_against`]).
//! [`rate_search`] finds the highest open-loop rate under a p99 objective. `remote` spreads a
//! run over several injectors (a master and `ochre load --worker` processes) and merges their
//! histograms. A run can report its progress once per second ([`Phases::progress`]).
//!
//! Every fallible public function returns an [`Error`] whose variant says what failed (a URL, a
//! model, a file, a worker) and whose message says what to fix. The library prints nothing: what
//! a worker cannot serve goes to the `log` facade as a warning (the `ochre` command prints it).

mod client;
mod error;
pub mod fileset;
pub mod remote;
pub mod report;
mod response;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ochre::{Color, Runtime};

use client::Pacing;
pub use client::Target;
pub use error::Error;
pub use report::{ErrorKind, Interval, LoadReport, Tally};

/// Colors of the clients start here (below SWS's connection colors and grouped colors).
const CLIENT_COLORS: u64 = 1 << 61;

/// The closed loop (Banga & Druschel): `clients` clients, each sending requests one after the
/// other on a connection, `requests_per_connection` per connection, with `think` between a
/// response and the next request.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ClosedLoop {
    /// Concurrent clients (connections).
    pub clients: usize,
    /// Requests per connection before it is closed and a new one opened (150 in the thesis).
    pub requests_per_connection: u32,
    /// Pause between a response and the next request.
    pub think: Duration,
}

/// The open loop (httperf style): requests at `rate` per second over `connections` keep-alive
/// connections, whatever the server does; latency counts from each request's intended time.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct OpenLoop {
    /// Requests per second in all.
    pub rate: f64,
    /// Connections the requests are spread over (each has at most one request outstanding;
    /// later ones wait for it, and their wait is part of their latency).
    pub connections: usize,
    /// Exponential gaps (Poisson arrivals) instead of fixed ones.
    pub poisson: bool,
}

/// The semi-open loop (Schroeder et al.): sessions arrive at `arrival_rate` per second
/// (Poisson or fixed); after each reply a session leaves with probability `leave`, else thinks
/// and sends again. Mean requests per session: 1 / `leave`.
///
/// Two think times, as in Pariag et al. and the thesis (§6.2): a session's requests come in
/// bursts (a page and its embedded objects) of `requests_per_burst` on average; within a burst
/// the pause is the *active* think time `think` (0.343 s there), and after the burst's last
/// reply the *inactive* one, `inactive_think` (3.0 s there, the user reading the page). Both are
/// exponential. `requests_per_burst` of 0 or less than 1 (the default): no bursts, every pause
/// is `think`. [`SemiOpenLoop::PARIAG_THINK`] and [`SemiOpenLoop::PARIAG_INACTIVE`] are the
/// thesis's values.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SemiOpenLoop {
    /// Sessions starting per second.
    pub arrival_rate: f64,
    /// Probability of leaving after each reply.
    pub leave: f64,
    /// Mean think time between a reply and the session's next request (within a burst).
    pub think: Duration,
    /// Exponential inter-arrival times instead of fixed ones.
    pub poisson: bool,
    /// Mean think time after the last request of a burst (inactive).
    #[serde(default)]
    pub inactive_think: Duration,
    /// Mean requests per burst (geometric); below 1: no bursts.
    #[serde(default)]
    pub requests_per_burst: f64,
}

impl SemiOpenLoop {
    /// The active think time of Pariag et al. and the thesis: 0.343 s.
    pub const PARIAG_THINK: Duration = Duration::from_millis(343);
    /// The inactive think time of Pariag et al. and the thesis: 3.0 s.
    pub const PARIAG_INACTIVE: Duration = Duration::from_secs(3);

    /// Probability that a reply ends its burst (0: no bursts).
    pub(crate) fn burst_end(&self) -> f64 {
        if self.requests_per_burst >= 1.0 && !self.inactive_think.is_zero() {
            1.0 / self.requests_per_burst
        } else {
            0.0
        }
    }
}

/// Phases of a run.
#[derive(Clone, Debug)]
pub struct Phases {
    /// Not recorded.
    pub warmup: Duration,
    /// Recorded.
    pub measure: Duration,
    /// A request without its complete response after this counts as a timeout.
    pub timeout: Duration,
    /// Load goes on this long after the measured phase, not recorded, so that the end of the
    /// measurement is not the moment clients leave.
    pub cooldown: Duration,
    /// End the measured phase after this many responses and errors (or at `measure`, if
    /// sooner); throughput is then over the time it took.
    pub requests: Option<u64>,
    /// Called about once per second while the run goes.
    pub progress: Option<Progress>,
}

impl Phases {
    /// A warm-up, a measured phase, no cool-down, no request limit, no progress reports.
    pub fn new(warmup: Duration, measure: Duration, timeout: Duration) -> Phases {
        Phases {
            warmup,
            measure,
            timeout,
            cooldown: Duration::ZERO,
            requests: None,
            progress: None,
        }
    }
}

/// What a progress report says.
#[derive(Clone, Copy, Debug)]
pub struct ProgressLine {
    /// Since the run started (warm-up included).
    pub elapsed: Duration,
    /// Still in the warm-up (nothing recorded yet).
    pub warming_up: bool,
    /// Successful responses in the last complete interval of the measured phase.
    pub last_interval_ok: u64,
    /// Successful responses recorded so far.
    pub ok: u64,
    /// Errors recorded so far.
    pub errors: u64,
}

/// A progress callback.
#[derive(Clone)]
pub struct Progress(pub Arc<dyn Fn(&ProgressLine) + Send + Sync>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress(..)")
    }
}

/// Parses `http://host[:port]/path?query` into a target (only `http`), with the `url` crate:
/// names are resolved (the first address is used), IPv6 literals are written in brackets
/// (`http://[::1]:8080/`), the port defaults to 80, the fragment is not sent.
pub fn parse_url(text: &str) -> Result<Target, Error> {
    let bad = |reason: &dyn std::fmt::Display| Error::Url {
        url: text.into(),
        reason: reason.to_string(),
    };
    let url = url::Url::parse(text).map_err(|e| bad(&e))?;
    if url.scheme() != "http" {
        return Err(bad(&"only http:// URLs"));
    }
    // WHATWG parsing reads `http:///x` as host `x`: a URL written without a host is refused.
    if text.trim_start().get(7..).is_some_and(|rest| rest.starts_with('/')) {
        return Err(bad(&"no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad(&"credentials in URLs are not supported"));
    }
    let host = url.host_str().ok_or_else(|| bad(&"no host"))?;
    let addr = url
        .socket_addrs(|| Some(80))
        .map_err(|e| bad(&e))?
        .into_iter()
        .next()
        .ok_or_else(|| bad(&"no address"))?;
    let authority = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    let path = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    };
    Ok(Target { addr, host: authority, paths: vec![path], mix: None, bodies: None })
}

/// Runs a closed loop against `target` on `rt` and reports the measured phase.
pub fn closed_loop(
    rt: &Runtime,
    target: &Target,
    model: &ClosedLoop,
    phases: &Phases,
) -> Result<LoadReport, Error> {
    if model.requests_per_connection == 0 {
        return Err(Error::Invalid("requests per connection must not be zero".into()));
    }
    let name = Model::Closed(model.clone()).describe();
    let pacing = Pacing::Closed { think: model.think };
    drive(rt, target, model.clients, model.requests_per_connection, pacing, phases, name)
}

/// Runs an open loop against `target` on `rt` and reports the measured phase.
pub fn open_loop(
    rt: &Runtime,
    target: &Target,
    model: &OpenLoop,
    phases: &Phases,
) -> Result<LoadReport, Error> {
    if !(model.rate.is_finite() && model.rate > 0.0) {
        return Err(Error::Invalid("the rate must be a positive number".into()));
    }
    let gap = Duration::from_secs_f64(model.connections as f64 / model.rate);
    let name = Model::Open(model.clone()).describe();
    let pacing = Pacing::Open { gap, poisson: model.poisson };
    drive(rt, target, model.connections, u32::MAX, pacing, phases, name)
}

/// Runs a semi-open loop against `target` on `rt` and reports the measured phase.
pub fn semi_open_loop(
    rt: &Runtime,
    target: &Target,
    model: &SemiOpenLoop,
    phases: &Phases,
) -> Result<LoadReport, Error> {
    if !(model.arrival_rate.is_finite() && model.arrival_rate > 0.0) {
        return Err(Error::Invalid("the arrival rate must be a positive number".into()));
    }
    if !(model.leave > 0.0 && model.leave <= 1.0) {
        return Err(Error::Invalid("the leave probability must be in (0, 1]".into()));
    }
    if target.paths.is_empty() {
        return Err(Error::Invalid("no path to request".into()));
    }
    let pacing = Pacing::Session {
        leave: model.leave,
        think: model.think,
        inactive: model.inactive_think,
        burst_end: model.burst_end(),
    };
    let run = Arc::new(client::Run::new(target, pacing, u32::MAX, phases, TALLY_SLOTS));
    let r = run.clone();
    let gap = Duration::from_secs_f64(1.0 / model.arrival_rate);
    let poisson = model.poisson;
    let (total, measured) =
        execute(rt, &run, phases, move || arrive(r, 0, gap, poisson, 0x2545_f491_4f6c_dd1d))?;
    Ok(LoadReport::from_tally(Model::SemiOpen(model.clone()).describe(), &total, measured))
}

/// Runs the clients `start` makes until the run is quiescent, reporting progress meanwhile,
/// and merges their tallies.
fn execute(
    rt: &Runtime,
    run: &Arc<client::Run>,
    phases: &Phases,
    start: impl FnOnce() + Send + 'static,
) -> Result<(Tally, Duration), Error> {
    let (stop, stopped) = mpsc::channel::<()>();
    let reporter = phases.progress.clone().map(|p| {
        let run = run.clone();
        std::thread::spawn(move || report_progress(&run, &p, &stopped))
    });
    let result = rt.run(Color(CLIENT_COLORS), start);
    drop(stop);
    if let Some(r) = reporter {
        let _ = r.join();
    }
    result?;
    let mut total = Tally::new();
    for t in &run.tallies {
        let t = t.lock().map_err(|_| Error::Poisoned)?;
        total.merge(&t);
    }
    Ok((total, run.measured()))
}

/// Calls `progress` every second until `stop` is dropped.
fn report_progress(run: &client::Run, progress: &Progress, stop: &mpsc::Receiver<()>) {
    let begin = Instant::now();
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(Duration::from_secs(1)) {
        let now = Instant::now();
        let mut line = ProgressLine {
            elapsed: now - begin,
            warming_up: now < run.measure_from,
            last_interval_ok: 0,
            ok: 0,
            errors: 0,
        };
        let done = (now.saturating_duration_since(run.measure_from).as_nanos()
            / report::INTERVAL.as_nanos()) as usize;
        for t in &run.tallies {
            if let Ok(t) = t.lock() {
                line.ok += t.ok;
                line.errors += t.errors.iter().sum::<u64>();
                if let Some(i) = done.checked_sub(1).and_then(|i| t.series.get(i)) {
                    line.last_interval_ok += i.ok;
                }
            }
        }
        (progress.0)(&line);
    }
}

/// A load model: what [`Model::run`] runs.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum Model {
    /// [`closed_loop`].
    Closed(ClosedLoop),
    /// [`open_loop`].
    Open(OpenLoop),
    /// [`semi_open_loop`].
    SemiOpen(SemiOpenLoop),
}

impl Model {
    /// A one-line description.
    pub fn describe(&self) -> String {
        let poisson = |p: bool| if p { " (Poisson)" } else { "" };
        match self {
            Model::Closed(m) => format!(
                "closed loop, {} clients, {} requests/connection, think {:?}",
                m.clients, m.requests_per_connection, m.think
            ),
            Model::Open(m) => format!(
                "open loop, {} req/s{} over {} connections",
                m.rate,
                poisson(m.poisson),
                m.connections
            ),
            Model::SemiOpen(m) if m.burst_end() > 0.0 => format!(
                "semi-open loop, {} sessions/s{}, leave {}, think {:?} active / {:?} inactive \
                 ({} requests per burst)",
                m.arrival_rate,
                poisson(m.poisson),
                m.leave,
                m.think,
                m.inactive_think,
                m.requests_per_burst
            ),
            Model::SemiOpen(m) => format!(
                "semi-open loop, {} sessions/s{}, leave {}, think {:?}",
                m.arrival_rate,
                poisson(m.poisson),
                m.leave,
                m.think
            ),
        }
    }

    /// Runs this model against `target` on `rt`.
    pub fn run(&self, rt: &Runtime, target: &Target, phases: &Phases) -> Result<LoadReport, Error> {
        match self {
            Model::Closed(m) => closed_loop(rt, target, m, phases),
            Model::Open(m) => open_loop(rt, target, m, phases),
            Model::SemiOpen(m) => semi_open_loop(rt, target, m, phases),
        }
    }

    /// Share `i` of `n` of this load, for one of `n` injectors running at once: clients,
    /// connections and rates divided so that the shares add up to the whole.
    pub fn share(&self, i: usize, n: usize) -> Result<Model, Error> {
        let part = |total: usize| total * (i + 1) / n - total * i / n;
        Ok(match self {
            Model::Closed(m) => {
                if m.clients < n {
                    return Err(Error::Invalid(format!(
                        "{} clients cannot be spread over {n} injectors",
                        m.clients
                    )));
                }
                Model::Closed(ClosedLoop { clients: part(m.clients), ..m.clone() })
            }
            Model::Open(m) => {
                if m.connections < n {
                    return Err(Error::Invalid(format!(
                        "{} connections cannot be spread over {n} injectors",
                        m.connections
                    )));
                }
                let connections = part(m.connections);
                let rate = m.rate * connections as f64 / m.connections as f64;
                Model::Open(OpenLoop { rate, connections, ..m.clone() })
            }
            Model::SemiOpen(m) => Model::SemiOpen(SemiOpenLoop {
                arrival_rate: m.arrival_rate / n as f64,
                ..m.clone()
            }),
        })
    }
}

/// The result of a rate search: the highest rate that met the objective, and every probe.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RateSearch {
    /// The highest open-loop rate whose p99 stayed under the objective (0 if none did).
    pub best_rate: f64,
    /// Each probe: the rate tried and its report.
    pub probes: Vec<(f64, LoadReport)>,
}

/// Finds the highest open-loop rate in `[low, high]` whose p99 latency stays under `p99_slo`,
/// with no error and the rate actually delivered (>= 95%), by bisection over `probes` runs.
pub fn rate_search(
    rt: &Runtime,
    target: &Target,
    connections: usize,
    p99_slo: Duration,
    (mut low, mut high): (f64, f64),
    probes: usize,
    phases: &Phases,
) -> Result<RateSearch, Error> {
    if !(low > 0.0 && high > low && high.is_finite()) {
        return Err(Error::Invalid("the rate range must be 0 < low < high".into()));
    }
    let mut out = RateSearch { best_rate: 0.0, probes: Vec::new() };
    for i in 0..probes.max(1) {
        // Probe the top first (often met), then bisect.
        let rate = if i == 0 { high } else { (low + high) / 2.0 };
        let r = open_loop(rt, target, &OpenLoop { rate, connections, poisson: true }, phases)?;
        let met = r.percentile(99.0).is_some_and(|p| p <= p99_slo.as_micros() as u64)
            && r.errors.iter().all(|&e| e == 0)
            && r.throughput >= 0.95 * rate;
        out.probes.push((rate, r));
        if met {
            out.best_rate = out.best_rate.max(rate);
            low = rate;
            if i == 0 {
                break;
            }
        } else {
            high = rate;
        }
    }
    Ok(out)
}

/// Tallies the sessions of a semi-open loop share (a session uses `id % TALLY_SLOTS`).
const TALLY_SLOTS: usize = 64;

/// The arrival process (an event of the first client color): starts session `n`, then schedules
/// the next arrival, until the measured phase ends.
fn arrive(run: Arc<client::Run>, n: u64, gap: Duration, poisson: bool, mut rng: u64) {
    if run.stopping(Instant::now()) {
        return;
    }
    let color = Color(CLIENT_COLORS + 1 + n);
    let c = client::Client::new(n as usize, color, run.clone());
    ochre::post(color, move || client::start(c));
    let next = if poisson { gap.mul_f64(-client::uniform(&mut rng).ln()) } else { gap };
    if run.stops_within(next) {
        return; // The next session would arrive after the end: no timer to wait for.
    }
    let _ = ochre::io::post_after(next, Color(CLIENT_COLORS), move || {
        arrive(run, n + 1, gap, poisson, rng)
    });
}

fn drive(
    rt: &Runtime,
    target: &Target,
    clients: usize,
    per_connection: u32,
    pacing: Pacing,
    phases: &Phases,
    name: String,
) -> Result<LoadReport, Error> {
    if clients == 0 || target.paths.is_empty() {
        return Err(Error::Invalid("clients (connections) and paths must not be zero".into()));
    }
    let run = Arc::new(client::Run::new(target, pacing, per_connection, phases, clients));
    let r = run.clone();
    let (total, measured) = execute(rt, &run, phases, move || {
        for i in 0..clients {
            let color = Color(CLIENT_COLORS + 1 + i as u64);
            let c = client::Client::new(i, color, r.clone());
            ochre::post(color, move || client::start(c));
        }
    })?;
    Ok(LoadReport::from_tally(name, &total, measured))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = parse_url("http://127.0.0.1:8080/a/b?c").unwrap();
        assert_eq!(t.addr.port(), 8080);
        assert_eq!(t.paths, vec!["/a/b?c"]);
        assert_eq!(t.host, "127.0.0.1:8080");
        assert_eq!(parse_url("http://127.0.0.1:9").unwrap().paths, vec!["/"]);
        assert!(parse_url("https://x/").unwrap_err().to_string().contains("only http://"));
        assert!(
            matches!(parse_url("http:///x"), Err(Error::Url { reason, .. }) if reason == "no host")
        );
    }

    #[test]
    fn ipv6_literals_default_ports_queries_and_bad_urls() {
        let t = parse_url("http://[::1]:8080/x?y=1#frag").unwrap();
        assert_eq!(t.addr, "[::1]:8080".parse().unwrap());
        assert_eq!(t.host, "[::1]:8080");
        assert_eq!(t.paths, vec!["/x?y=1"]);
        let t = parse_url("http://[::1]/").unwrap();
        assert_eq!((t.addr.port(), t.host.as_str()), (80, "[::1]"));
        // The default port written out is the default port.
        let t = parse_url("HTTP://127.0.0.1:80").unwrap();
        assert_eq!((t.addr.port(), t.host.as_str(), t.paths[0].as_str()), (80, "127.0.0.1", "/"));
        let t = parse_url("http://localhost:9/a%20b").unwrap();
        assert_eq!((t.addr.port(), t.host.as_str()), (9, "localhost:9"));
        assert_eq!(t.paths, vec!["/a%20b"]);
        for (bad, says) in [
            ("127.0.0.1:8080/", "127.0.0.1:8080/"),
            ("http://[::1/", "invalid IPv6"),
            ("http://127.0.0.1:99999/", "invalid port"),
            ("http://u:p@127.0.0.1/", "credentials"),
            ("http://", "empty host"),
        ] {
            let e = parse_url(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
