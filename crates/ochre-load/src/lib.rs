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
//! (`fileset`). [`rate_search`] finds the highest open-loop rate under a p99 objective.
//! Master/workers come next.

mod client;
pub mod fileset;
pub mod report;

use std::net::ToSocketAddrs;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ochre::{Color, Runtime};

use client::Pacing;
pub use client::Target;
pub use report::{ErrorKind, LoadReport, Tally};

/// Colors of the clients start here (below SWS's connection colors and grouped colors).
const CLIENT_COLORS: u64 = 1 << 61;

/// The closed loop (Banga & Druschel): `clients` clients, each sending requests one after the
/// other on a connection, `requests_per_connection` per connection, with `think` between a
/// response and the next request.
#[derive(Clone, Debug)]
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
#[derive(Clone, Debug)]
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
/// (exponential, mean `think`; Pariag et al. use 0.343 s between requests of an active session)
/// and sends again. Mean requests per session: 1 / `leave`.
#[derive(Clone, Debug)]
pub struct SemiOpenLoop {
    /// Sessions starting per second.
    pub arrival_rate: f64,
    /// Probability of leaving after each reply.
    pub leave: f64,
    /// Mean think time between a reply and the session's next request.
    pub think: Duration,
    /// Exponential inter-arrival times instead of fixed ones.
    pub poisson: bool,
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
}

/// Parses `http://host[:port]/path` into a target (only `http`).
pub fn parse_url(url: &str) -> Result<Target, String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| format!("{url}: only http:// URLs"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(format!("{url}: no host"));
    }
    let with_port =
        if authority.contains(':') { authority.to_string() } else { format!("{authority}:80") };
    let addr = with_port
        .to_socket_addrs()
        .map_err(|e| format!("{url}: {e}"))?
        .next()
        .ok_or_else(|| format!("{url}: no address"))?;
    Ok(Target { addr, host: authority.to_string(), paths: vec![path.to_string()], mix: None })
}

/// Runs a closed loop against `target` on `rt` and reports the measured phase.
pub fn closed_loop(
    rt: &Runtime,
    target: &Target,
    model: &ClosedLoop,
    phases: &Phases,
) -> Result<LoadReport, String> {
    if model.requests_per_connection == 0 {
        return Err("requests per connection must not be zero".into());
    }
    let name = format!(
        "closed loop, {} clients, {} requests/connection, think {:?}",
        model.clients, model.requests_per_connection, model.think
    );
    let pacing = Pacing::Closed { think: model.think };
    drive(rt, target, model.clients, model.requests_per_connection, pacing, phases, name)
}

/// Runs an open loop against `target` on `rt` and reports the measured phase.
pub fn open_loop(
    rt: &Runtime,
    target: &Target,
    model: &OpenLoop,
    phases: &Phases,
) -> Result<LoadReport, String> {
    if !(model.rate.is_finite() && model.rate > 0.0) {
        return Err("the rate must be a positive number".into());
    }
    let gap = Duration::from_secs_f64(model.connections as f64 / model.rate);
    let name = format!(
        "open loop, {} req/s{} over {} connections",
        model.rate,
        if model.poisson { " (Poisson)" } else { "" },
        model.connections
    );
    let pacing = Pacing::Open { gap, poisson: model.poisson };
    drive(rt, target, model.connections, u32::MAX, pacing, phases, name)
}

/// Runs a semi-open loop against `target` on `rt` and reports the measured phase.
pub fn semi_open_loop(
    rt: &Runtime,
    target: &Target,
    model: &SemiOpenLoop,
    phases: &Phases,
) -> Result<LoadReport, String> {
    if !(model.arrival_rate.is_finite() && model.arrival_rate > 0.0) {
        return Err("the arrival rate must be a positive number".into());
    }
    if !(model.leave > 0.0 && model.leave <= 1.0) {
        return Err("the leave probability must be in (0, 1]".into());
    }
    if target.paths.is_empty() {
        return Err("no path to request".into());
    }
    let start = Instant::now();
    let run = Arc::new(client::Run {
        target: target.clone(),
        pacing: Pacing::Session { leave: model.leave, think: model.think },
        per_connection: u32::MAX,
        timeout: phases.timeout,
        measure_from: start + phases.warmup,
        measure_until: start + phases.warmup + phases.measure,
        tallies: (0..TALLY_SLOTS).map(|_| Mutex::new(Tally::new())).collect(),
    });
    let r = run.clone();
    let gap = Duration::from_secs_f64(1.0 / model.arrival_rate);
    let poisson = model.poisson;
    rt.run(Color(CLIENT_COLORS), move || arrive(r, 0, gap, poisson, 0x2545_f491_4f6c_dd1d))
        .map_err(|e| e.to_string())?;
    let mut total = Tally::new();
    for t in &run.tallies {
        let t = t.lock().map_err(|_| "a session's tally was poisoned".to_string())?;
        total.merge(&t);
    }
    let name = format!(
        "semi-open loop, {} sessions/s{}, leave {}, think {:?}",
        model.arrival_rate,
        if poisson { " (Poisson)" } else { "" },
        model.leave,
        model.think
    );
    Ok(LoadReport::from_tally(name, &total, phases.measure))
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
) -> Result<RateSearch, String> {
    if !(low > 0.0 && high > low && high.is_finite()) {
        return Err("the rate range must be 0 < low < high".into());
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
    if Instant::now() >= run.measure_until {
        return;
    }
    let color = Color(CLIENT_COLORS + 1 + n);
    let c = client::Client::new(n as usize, color, run.clone());
    ochre::post(color, move || client::start(c));
    let next = if poisson { gap.mul_f64(-client::uniform(&mut rng).ln()) } else { gap };
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
) -> Result<LoadReport, String> {
    if clients == 0 || target.paths.is_empty() {
        return Err("clients (connections) and paths must not be zero".into());
    }
    let start = Instant::now();
    let run = Arc::new(client::Run {
        target: target.clone(),
        pacing,
        per_connection,
        timeout: phases.timeout,
        measure_from: start + phases.warmup,
        measure_until: start + phases.warmup + phases.measure,
        tallies: (0..clients).map(|_| Mutex::new(Tally::new())).collect(),
    });
    let r = run.clone();
    rt.run(Color(CLIENT_COLORS), move || {
        for i in 0..clients {
            let color = Color(CLIENT_COLORS + 1 + i as u64);
            let c = client::Client::new(i, color, r.clone());
            ochre::post(color, move || client::start(c));
        }
    })
    .map_err(|e| e.to_string())?;
    let mut total = Tally::new();
    for t in &run.tallies {
        let t = t.lock().map_err(|_| "a client's tally was poisoned".to_string())?;
        total.merge(&t);
    }
    Ok(LoadReport::from_tally(name, &total, phases.measure))
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
        assert!(parse_url("https://x/").is_err());
        assert!(parse_url("http:///x").is_err());
    }
}
