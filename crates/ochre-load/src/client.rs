//! One HTTP/1.1 client connection on colored events, and the closed loop made of them.
//!
//! Each client is a color. Its connection's readiness, its request timeout and its think time are
//! all events of that color, so a client's state lives in a [`ColorCell`] with no lock, and
//! clients run in parallel on every worker. A client: connects; sends a request; reads the
//! response (`Content-Length` bodies; `Connection: close` ends the connection after it); records
//! the latency from the moment the request was sent; after `requests_per_connection` responses
//! it closes and connects again (Banga & Druschel's closed loop, 150 requests per connection in
//! the thesis). Errors are counted by kind and the client reconnects.
//!
//! In the open loop (httperf style), a client sends at *intended* times, one every `gap`
//! (fixed, or exponentially distributed for a Poisson arrival process), whatever the server does:
//! if the previous response is late, the next request goes out as soon as it arrives, and its
//! latency is counted from its intended time, so queueing at a stalled server shows in the
//! percentiles instead of being hidden (coordinated omission).
//!
//! Everything is bounded in time: no request is sent after the measured phase ends, every
//! request has a timeout, so a dead or hung server ends the run with errors counted.

use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ochre::io::{self, Event, Interest, Progress, Timer, Watch};
use ochre::{Color, ColorCell};

use crate::report::{ErrorKind, Tally};

/// What to load: an address, the `Host` header, the paths to request (in turn, or drawn from a
/// request mix).
#[derive(Clone, Debug)]
pub struct Target {
    /// Server address.
    pub addr: SocketAddr,
    /// `Host` header value.
    pub host: String,
    /// Paths requested.
    pub paths: Vec<String>,
    /// Draw the paths by these weights (a file set's mix) instead of in turn.
    pub mix: Option<crate::fileset::Mix>,
}

/// Shared by every client of a run.
/// When a client sends its next request.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Pacing {
    /// Closed loop: after each response, wait `think`, then send.
    Closed { think: Duration },
    /// Open loop: at intended times `gap` apart (mean gap for Poisson arrivals).
    Open { gap: Duration, poisson: bool },
    /// Semi-open loop: a session; after each reply it leaves with probability `leave`, else
    /// thinks (exponential, mean `think`) and sends again.
    Session { leave: f64, think: Duration },
}

pub(crate) struct Run {
    pub(crate) target: Target,
    pub(crate) pacing: Pacing,
    pub(crate) per_connection: u32,
    pub(crate) timeout: Duration,
    pub(crate) measure_from: Instant,
    pub(crate) measure_until: Instant,
    pub(crate) tallies: Vec<Mutex<Tally>>,
}

struct Conn {
    stream: TcpStream,
}

struct ClientState {
    conn: Option<Arc<Conn>>,
    watch: Option<Watch>,
    timer: Option<Timer>,
    buf: Vec<u8>,
    /// When the outstanding request was sent.
    inflight: Option<Instant>,
    /// Requests sent on the current connection.
    on_conn: u32,
    next_path: usize,
    /// Bumped per request, so a stale timeout is recognized.
    seq: u64,
    done: bool,
    /// Open loop: the intended time of the next request.
    intended: Option<Instant>,
    rng: u64,
}

pub(crate) struct Client {
    id: usize,
    color: Color,
    run: Arc<Run>,
    state: ColorCell<ClientState>,
}

impl Client {
    pub(crate) fn new(id: usize, color: Color, run: Arc<Run>) -> Arc<Client> {
        Arc::new(Client {
            id,
            color,
            run,
            state: ColorCell::new(
                color,
                ClientState {
                    conn: None,
                    watch: None,
                    timer: None,
                    buf: Vec::with_capacity(16 * 1024),
                    inflight: None,
                    on_conn: 0,
                    next_path: id,
                    seq: 0,
                    done: false,
                    intended: None,
                    rng: 0x9e37_79b9_7f4a_7c15
                        ^ (id as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9),
                },
            ),
        })
    }

    fn count_late(&self, intended: Instant) {
        if intended >= self.run.measure_from && intended <= self.run.measure_until {
            if let Ok(mut t) = self.run.tallies[self.slot()].lock() {
                t.late += 1;
            }
        }
    }

    fn count_session(&self) {
        let now = Instant::now();
        if now >= self.run.measure_from && now <= self.run.measure_until {
            if let Ok(mut t) = self.run.tallies[self.slot()].lock() {
                t.sessions += 1;
            }
        }
    }

    fn slot(&self) -> usize {
        self.id % self.run.tallies.len()
    }

    fn count_error(&self, kind: ErrorKind) {
        let now = Instant::now();
        if now >= self.run.measure_from && now <= self.run.measure_until {
            if let Ok(mut t) = self.run.tallies[self.slot()].lock() {
                t.errors[kind as usize] += 1;
            }
        }
    }
}

/// Starts (or restarts) a client: connect, watch, send (an event of the client's color).
pub(crate) fn start(client: Arc<Client>) {
    let _ = client.state.with(|st| {
        if st.done || Instant::now() >= client.run.measure_until {
            st.done = true;
            return;
        }
        match TcpStream::connect_timeout(&client.run.target.addr, client.run.timeout) {
            Ok(stream) => {
                if stream.set_nonblocking(true).is_err() {
                    return retry_later(&client, ErrorKind::Connect);
                }
                let _ = stream.set_nodelay(true);
                let conn = Arc::new(Conn { stream });
                let (c, k) = (client.clone(), conn.clone());
                match io::watch(&conn.stream, Interest::READ, client.color, move |ev| {
                    on_ready(&c, &k, ev)
                }) {
                    Ok(w) => {
                        st.watch = Some(w);
                        st.conn = Some(conn);
                        st.on_conn = 0;
                        st.buf.clear();
                        if let Pacing::Session { .. } = client.run.pacing {
                            client.count_session();
                            // A session's first request goes at once.
                            send_request(&client, st);
                        } else {
                            next_send(&client, st);
                        }
                    }
                    Err(_) => retry_later(&client, ErrorKind::Connect),
                }
            }
            Err(_) => retry_later(&client, ErrorKind::Connect),
        }
    });
}

fn retry_later(client: &Arc<Client>, kind: ErrorKind) {
    client.count_error(kind);
    if let Pacing::Session { .. } = client.run.pacing {
        return; // A session that cannot connect is lost, as a user would be.
    }
    let c = client.clone();
    let _ = io::post_after(Duration::from_millis(10), client.color, move || start(c));
}

/// A uniform number in (0, 1) from a xorshift64 state (never 0: the state is odd-seeded).
pub(crate) fn uniform(rng: &mut u64) -> f64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    ((*rng >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// Open loop: the gap to the next intended send.
fn gap(st: &mut ClientState, mean: Duration, poisson: bool) -> Duration {
    if !poisson {
        return mean;
    }
    mean.mul_f64(-uniform(&mut st.rng).ln())
}

/// Sends the next request now (closed loop), or at its intended time (open loop).
fn next_send(client: &Arc<Client>, st: &mut ClientState) {
    match client.run.pacing {
        Pacing::Closed { think } if think.is_zero() => send_request(client, st),
        Pacing::Session { think, .. } => {
            let pause = gap(st, think, true);
            let c = client.clone();
            let _ = io::post_after(pause, client.color, move || {
                let _ = c.state.with(|st| send_request(&c, st));
            });
        }
        Pacing::Closed { think } => {
            let c = client.clone();
            let _ = io::post_after(think, client.color, move || {
                let _ = c.state.with(|st| send_request(&c, st));
            });
        }
        Pacing::Open { .. } => {
            let due = st.intended.unwrap_or_else(Instant::now);
            let now = Instant::now();
            if due <= now {
                if now.saturating_duration_since(due) > Duration::from_millis(1) {
                    client.count_late(due);
                }
                send_request(client, st);
            } else {
                let c = client.clone();
                let _ = io::post_after(due - now, client.color, move || {
                    let _ = c.state.with(|st| {
                        if st.inflight.is_none() && st.conn.is_some() {
                            send_request(&c, st);
                        }
                    });
                });
            }
        }
    }
}

fn send_request(client: &Arc<Client>, st: &mut ClientState) {
    let run = &client.run;
    if Instant::now() >= run.measure_until {
        return finish(client, st);
    }
    let Some(conn) = st.conn.clone() else { return };
    let index = match &run.target.mix {
        Some(mix) => mix.pick(uniform(&mut st.rng)),
        None => st.next_path,
    };
    st.next_path += 1;
    let path = &run.target.paths[index % run.target.paths.len()];
    let last = st.on_conn + 1 >= run.per_connection;
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\n{}\r\n",
        run.target.host,
        if last { "Connection: close\r\n" } else { "" }
    );
    // A request is far smaller than a socket buffer: one write sends it, or the connection is
    // in trouble.
    match io::net::write(&conn.stream, req.as_bytes()) {
        Ok(Progress::Done(n)) if n == req.len() => {}
        _ => return reconnect(client, st, ErrorKind::Reset),
    }
    st.on_conn += 1;
    st.seq += 1;
    let now = Instant::now();
    st.inflight = Some(match run.pacing {
        // Latency counts from the intended time: queueing behind a slow response shows.
        Pacing::Open { gap: mean, poisson } => {
            let intended = st.intended.unwrap_or(now).min(now);
            let g = gap(st, mean, poisson);
            st.intended = Some(intended + g);
            intended
        }
        Pacing::Closed { .. } | Pacing::Session { .. } => now,
    });
    let (c, seq) = (client.clone(), st.seq);
    if let Some(t) = st.timer.take() {
        t.cancel();
    }
    st.timer = io::post_after(run.timeout, client.color, move || on_timeout(&c, seq)).ok();
}

fn on_timeout(client: &Arc<Client>, seq: u64) {
    let _ = client.state.with(|st| {
        st.timer = None;
        if st.seq == seq && st.inflight.is_some() {
            reconnect(client, st, ErrorKind::Timeout);
        }
    });
}

fn on_ready(client: &Arc<Client>, conn: &Arc<Conn>, ev: &mut Event) {
    let _ = client.state.with(|st| {
        if !st.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            ev.cancel(); // A connection already given up.
            return;
        }
        loop {
            match io::net::read_into(&conn.stream, &mut st.buf, 16 * 1024) {
                Ok(Progress::Done(_)) => continue,
                Ok(Progress::WouldBlock) => break,
                Ok(Progress::Closed) | Err(_) => {
                    // Whatever is complete in the buffer still counts.
                    let _ = parse(client, st);
                    if st.conn.is_some() {
                        reconnect(client, st, ErrorKind::Reset);
                    }
                    return;
                }
            }
        }
        let _ = parse(client, st);
    });
}

/// Consumes a complete response from the buffer, if there is one.
fn parse(client: &Arc<Client>, st: &mut ClientState) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    let head = match resp.parse(&st.buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return false,
        Err(_) => {
            reconnect(client, st, ErrorKind::Malformed);
            return false;
        }
    };
    let code = resp.code.unwrap_or(0);
    let value = |name: &str| {
        resp.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(str::trim)
    };
    let Some(len) = value("content-length").and_then(|v| v.parse::<usize>().ok()) else {
        // No length (chunked or close-delimited): not supported yet.
        reconnect(client, st, ErrorKind::Malformed);
        return false;
    };
    let closes = value("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
    if st.buf.len() < head + len {
        return false;
    }
    st.buf.drain(..head + len);
    let now = Instant::now();
    let sent = st.inflight.take().unwrap_or(now);
    if let Some(t) = st.timer.take() {
        t.cancel();
    }
    let run = &client.run;
    if sent >= run.measure_from && now <= run.measure_until {
        if let Ok(mut t) = run.tallies[client.slot()].lock() {
            if (200..400).contains(&code) {
                t.ok += 1;
                t.latency_us.saturating_record((now - sent).as_micros().max(1) as u64);
            } else {
                t.errors[ErrorKind::Status as usize] += 1;
            }
            t.bytes += (head + len) as u64;
        }
    }
    if let Pacing::Session { leave, .. } = run.pacing {
        if uniform(&mut st.rng) < leave || closes || now >= run.measure_until {
            // The session ends: it does not come back.
            close(st);
            st.done = true;
            return true;
        }
        next_send(client, st);
        return true;
    }
    if closes || st.on_conn >= run.per_connection || now >= run.measure_until {
        close(st);
        if now >= run.measure_until {
            st.done = true;
        } else {
            let c = client.clone();
            ochre::post(client.color, move || start(c));
        }
    } else {
        next_send(client, st);
    }
    true
}

fn close(st: &mut ClientState) {
    if let Some(w) = st.watch.take() {
        w.cancel();
    }
    if let Some(t) = st.timer.take() {
        t.cancel();
    }
    st.inflight = None;
    st.buf.clear();
    if let Some(c) = st.conn.take() {
        let _ = c.stream.shutdown(std::net::Shutdown::Both);
    }
}

fn reconnect(client: &Arc<Client>, st: &mut ClientState, kind: ErrorKind) {
    close(st);
    client.count_error(kind);
    if Instant::now() >= client.run.measure_until
        || matches!(client.run.pacing, Pacing::Session { .. })
    {
        st.done = true;
        return;
    }
    let c = client.clone();
    ochre::post(client.color, move || start(c));
}

fn finish(_client: &Arc<Client>, st: &mut ClientState) {
    close(st);
    st.done = true;
}
