//! One HTTP/1.1 client connection on colored events, and the closed loop made of them.
//!
//! Each client is a color. Its connection's readiness, its request timeout and its think time are
//! all events of that color, so a client's state lives in a [`ColorCell`] with no lock, and
//! clients run in parallel on every worker. A client: connects; sends a request (prepared once
//! per path, not formatted per request); reads the response (any framing: `response`);
//! records the latency from the moment the request was sent; after `requests_per_connection`
//! responses it closes and connects again (Banga & Druschel's closed loop, 150 requests per
//! connection in the thesis). Errors are counted by kind and the client reconnects.
//!
//! The request timeout is one lazy timer per client, not one per request: it is armed when a
//! request goes out and none is pending, and when it fires before the current request's deadline
//! it re-arms for that deadline. A client under load thus touches the timing wheel about once per
//! timeout period instead of twice per request.
//!
//! In the open loop (httperf style), a client sends at *intended* times, one every `gap`
//! (fixed, or exponentially distributed for a Poisson arrival process), whatever the server does:
//! if the previous response is late, the next request goes out as soon as it arrives, and its
//! latency is counted from its intended time, so queueing at a stalled server shows in the
//! percentiles instead of being hidden (coordinated omission).
//!
//! Everything is bounded in time and memory: a client's buffer holds at most a response head
//! (64 KiB), or about `RELEASE_AT` bytes of body.
//!
//! In time: no request is sent after the measured phase ends, every request and every connect
//! has a timeout, so a dead or hung server ends the run with errors counted. No pause outlives
//! the run either (the run lasts until no timer is left): a session whose think time would end
//! after the run leaves at once, and no session arrival is planned after it. Connects do not
//! block: a client waits for its socket to become writable as an event (the request timer
//! bounds the wait), so a server whose accept queue is full stalls only the
//! clients connecting to it, one timeout each, never the other clients of their worker.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ochre::io::{self, Event, Interest, Progress, Timer, Watch};
use ochre::{Color, ColorCell};

use crate::report::{ErrorKind, Tally};
use crate::response::{ResponseReader, Step};

/// A buffer longer than this gives back the body bytes already read (`ResponseReader::release`):
/// a large or endless body costs about this much memory, not its length. Large enough that
/// ordinary responses never pay for the move of what follows.
const RELEASE_AT: usize = 256 * 1024;

/// What to load: an address, the `Host` header, the paths to request (in turn, or drawn from a
/// request mix), and optionally the bodies they must answer with.
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
    /// Verification: the body of each path (same order as `paths`); a 200 response with
    /// another body counts as a [`ErrorKind::Mismatch`].
    pub bodies: Option<Arc<Vec<Vec<u8>>>>,
}

impl Target {
    /// Loads the expected body of every path from the files under `root` (the server's
    /// document root, or the directory `ochre fileset` wrote): `/a/b?q` is `root/a/b`, a path
    /// ending in `/` is its `index.html`.
    pub fn verify_against(&mut self, root: &std::path::Path) -> Result<(), crate::Error> {
        let mut bodies = Vec::with_capacity(self.paths.len());
        for p in &self.paths {
            let path = p.split(['?', '#']).next().unwrap_or("");
            let mut file = root.join(path.trim_start_matches('/'));
            if path.ends_with('/') || path.is_empty() {
                file = file.join("index.html");
            }
            let body = std::fs::read(&file).map_err(|source| crate::Error::Verify {
                request: p.clone(),
                path: file.clone(),
                source,
            })?;
            bodies.push(body);
        }
        self.bodies = Some(Arc::new(bodies));
        Ok(())
    }
}

/// When a client sends its next request.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Pacing {
    /// Closed loop: after each response, wait `think`, then send.
    Closed { think: Duration },
    /// Open loop: at intended times `gap` apart (mean gap for Poisson arrivals).
    Open { gap: Duration, poisson: bool },
    /// Semi-open loop: a session; after each reply it leaves with probability `leave`, else
    /// thinks and sends again: exponential, mean `inactive` with probability `burst_end` (the
    /// burst's last reply), else mean `think`.
    Session { leave: f64, think: Duration, inactive: Duration, burst_end: f64 },
}

/// Shared by every client of a run.
pub(crate) struct Run {
    pub(crate) target: Target,
    pub(crate) pacing: Pacing,
    pub(crate) per_connection: u32,
    pub(crate) timeout: Duration,
    pub(crate) measure_from: Instant,
    pub(crate) measure_until: Instant,
    /// No request is sent from here on (the end of the cool-down).
    stop_at: Instant,
    /// Stop after this many measured responses and errors (`Phases::requests`).
    limit: Option<u64>,
    /// Measured responses and errors so far, when there is a limit.
    counted: AtomicU64,
    /// When the limit was reached, in nanoseconds after `measure_from` (0: not reached).
    ended_after: AtomicU64,
    pub(crate) tallies: Vec<Mutex<Tally>>,
    /// The request of each path, keep-alive and closing (the last one on a connection).
    requests: Vec<[Vec<u8>; 2]>,
}

impl Run {
    pub(crate) fn new(
        target: &Target,
        pacing: Pacing,
        per_connection: u32,
        phases: &crate::Phases,
        tallies: usize,
    ) -> Run {
        let start = Instant::now();
        let requests = target
            .paths
            .iter()
            .map(|path| {
                let head = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n", target.host);
                [format!("{head}\r\n"), format!("{head}Connection: close\r\n\r\n")]
                    .map(String::into_bytes)
            })
            .collect();
        Run {
            target: target.clone(),
            pacing,
            per_connection,
            timeout: phases.timeout,
            measure_from: start + phases.warmup,
            measure_until: start + phases.warmup + phases.measure,
            stop_at: start + phases.warmup + phases.measure + phases.cooldown,
            limit: phases.requests,
            counted: AtomicU64::new(0),
            ended_after: AtomicU64::new(0),
            tallies: (0..tallies).map(|_| Mutex::new(Tally::new())).collect(),
            requests,
        }
    }

    fn measuring(&self, at: Instant) -> bool {
        self.in_window(at) && !self.limit_reached()
    }

    fn in_window(&self, at: Instant) -> bool {
        at >= self.measure_from && at <= self.measure_until
    }

    fn limit_reached(&self) -> bool {
        self.ended_after.load(Ordering::Relaxed) != 0
    }

    /// Whether clients stop sending at `now`.
    pub(crate) fn stopping(&self, now: Instant) -> bool {
        now >= self.stop_at || self.limit_reached()
    }

    /// Whether clients stop sending within `delay` from now: an event planned that far ahead
    /// would find the run over.
    pub(crate) fn stops_within(&self, delay: Duration) -> bool {
        Instant::now().checked_add(delay).is_none_or(|at| self.stopping(at))
    }

    /// The measured phase's length: as planned, or until the request limit was reached.
    pub(crate) fn measured(&self) -> Duration {
        match self.ended_after.load(Ordering::Relaxed) {
            0 => self.measure_until - self.measure_from,
            n => Duration::from_nanos(n),
        }
    }

    /// Counts one measured outcome against the limit; false if it comes after the limit.
    fn count(&self, now: Instant) -> bool {
        let Some(limit) = self.limit else { return true };
        let n = self.counted.fetch_add(1, Ordering::Relaxed) + 1;
        if n == limit {
            let after = now.saturating_duration_since(self.measure_from).as_nanos().max(1);
            self.ended_after.store(u64::try_from(after).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
        n <= limit
    }
}

struct Conn {
    stream: TcpStream,
}

struct ClientState {
    conn: Option<Arc<Conn>>,
    /// The connection's connect is under way (its deadline is `deadline`).
    connecting: bool,
    watch: Option<Watch>,
    /// The lazy request timer (see the module doc).
    timer: Option<Timer>,
    /// When the outstanding request times out.
    deadline: Option<Instant>,
    buf: Vec<u8>,
    reader: ResponseReader,
    /// When the outstanding request was sent (or meant to be, in the open loop).
    inflight: Option<Instant>,
    /// Path index of the outstanding request.
    inflight_path: usize,
    /// Requests sent on the current connection.
    on_conn: u32,
    next_path: usize,
    /// Requests sent in the measured phase and not yet added to the tally.
    unrecorded_sends: u64,
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
                    connecting: false,
                    watch: None,
                    timer: None,
                    deadline: None,
                    buf: Vec::with_capacity(16 * 1024),
                    reader: ResponseReader::new(),
                    inflight: None,
                    inflight_path: 0,
                    on_conn: 0,
                    next_path: id,
                    unrecorded_sends: 0,
                    done: false,
                    intended: None,
                    rng: 0x9e37_79b9_7f4a_7c15
                        ^ (id as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9),
                },
            ),
        })
    }

    /// Applies `f` to this client's tally if `at` is in the measured phase.
    fn tally(&self, at: Instant, f: impl FnOnce(&mut Tally)) {
        if self.run.measuring(at) {
            self.tally_now(f);
        }
    }

    fn tally_now(&self, f: impl FnOnce(&mut Tally)) {
        if let Ok(mut t) = self.run.tallies[self.id % self.run.tallies.len()].lock() {
            f(&mut t);
        }
    }

    fn count_error(&self, st: &mut ClientState, kind: ErrorKind) {
        let now = Instant::now();
        let (since, sends) =
            (now - self.run.measure_from, std::mem::take(&mut st.unrecorded_sends));
        self.tally(now, |t| {
            t.record_error(since, kind);
            t.sent += sends;
        });
        if sends > 0 && !self.run.measuring(now) {
            // Sent in the measured phase, failed after it: offered all the same (else a phase
            // whose every request failed late would say it offered nothing).
            self.tally(self.run.measure_until, |t| t.sent += sends);
        }
    }
}

/// Starts (or restarts) a client: a non-blocking connect, watched (an event of the client's
/// color); `connected` goes on when the socket is writable, `on_timer` gives up at the timeout.
pub(crate) fn start(client: Arc<Client>) {
    let _ = client.state.with(|st| {
        let now = Instant::now();
        if st.done || client.run.stopping(now) {
            st.done = true;
            return;
        }
        let Ok(stream) = connect_nonblocking(client.run.target.addr) else {
            return retry_later(&client, st, ErrorKind::Connect);
        };
        let conn = Arc::new(Conn { stream });
        let (c, k) = (client.clone(), conn.clone());
        match io::watch(&conn.stream, Interest::READ_WRITE, client.color, move |ev| {
            on_ready(&c, &k, ev)
        }) {
            Ok(w) => {
                st.watch = Some(w);
                st.conn = Some(conn);
                st.connecting = true;
                st.on_conn = 0;
                st.buf.clear();
                st.reader.reset();
                st.deadline = Some(now + client.run.timeout);
                if st.timer.is_none() {
                    arm_timer(&client, st, now + client.run.timeout);
                }
            }
            Err(_) => retry_later(&client, st, ErrorKind::Connect),
        }
    });
}

/// A socket connecting to `addr` without blocking (the connect completes, or fails, later).
fn connect_nonblocking(addr: SocketAddr) -> std::io::Result<TcpStream> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let family = if addr.is_ipv4() { AddressFamily::INET } else { AddressFamily::INET6 };
    let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
    let fd = rustix::net::socket_with(family, SocketType::STREAM, flags, None)?;
    match rustix::net::connect(&fd, &addr) {
        Ok(()) | Err(rustix::io::Errno::INPROGRESS) => {}
        Err(e) => return Err(e.into()),
    }
    let stream = TcpStream::from(fd);
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// The socket of a connecting client is writable or in error: connected, or a connect error.
fn connected(client: &Arc<Client>, st: &mut ClientState, conn: &Conn) {
    match rustix::net::sockopt::socket_error(&conn.stream) {
        Ok(Ok(())) => {}
        _ => {
            close(st);
            return retry_later(client, st, ErrorKind::Connect);
        }
    }
    st.connecting = false;
    st.deadline = None;
    if let Pacing::Session { .. } = client.run.pacing {
        client.tally(Instant::now(), |t| t.sessions += 1);
        // A session's first request goes at once.
        send_request(client, st);
    } else {
        next_send(client, st);
    }
}

fn retry_later(client: &Arc<Client>, st: &mut ClientState, kind: ErrorKind) {
    client.count_error(st, kind);
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
    send_when_due(client, st, false);
}

/// Open loop: sends now if the intended time has come. `woken`: called by the send timer, so
/// lateness is the injector's own, not the connection's.
fn send_when_due(client: &Arc<Client>, st: &mut ClientState, woken: bool) {
    match client.run.pacing {
        Pacing::Closed { think } if think.is_zero() => send_request(client, st),
        Pacing::Session { think, inactive, burst_end, .. } => {
            let ends_burst = burst_end > 0.0 && uniform(&mut st.rng) < burst_end;
            let pause = gap(st, if ends_burst { inactive } else { think }, true);
            if client.run.stops_within(pause) {
                // Its next request would come after the last one allowed: the session ends
                // now, instead of keeping the run alive with a think timer of seconds (with the
                // thesis's 3 s inactive pauses, runs ended some 15-19 s after their phase).
                return finish(client, st);
            }
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
                    client.tally(due, |t| {
                        t.late += 1;
                        t.injector_late += u64::from(woken);
                    });
                }
                send_request(client, st);
            } else {
                let c = client.clone();
                let _ = io::post_after(due - now, client.color, move || {
                    let _ = c.state.with(|st| {
                        if st.inflight.is_none() && st.conn.is_some() {
                            send_when_due(&c, st, true);
                        }
                    });
                });
            }
        }
    }
}

fn send_request(client: &Arc<Client>, st: &mut ClientState) {
    let run = &client.run;
    let now = Instant::now();
    if run.stopping(now) {
        return finish(client, st);
    }
    let Some(conn) = st.conn.clone() else { return };
    let index = match &run.target.mix {
        Some(mix) => mix.pick(uniform(&mut st.rng)),
        None => st.next_path,
    } % run.requests.len();
    st.next_path += 1;
    let last = st.on_conn + 1 >= run.per_connection;
    let req = &run.requests[index][usize::from(last)];
    // A request is far smaller than a socket buffer: one write sends it, or the connection is
    // in trouble.
    match io::net::write(&conn.stream, req) {
        Ok(Progress::Done(n)) if n == req.len() => {}
        _ => return reconnect(client, st, ErrorKind::Reset),
    }
    st.on_conn += 1;
    st.inflight_path = index;
    if run.measuring(now) {
        st.unrecorded_sends += 1;
    }
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
    st.deadline = Some(now + run.timeout);
    if st.timer.is_none() {
        arm_timer(client, st, now + run.timeout);
    }
}

fn arm_timer(client: &Arc<Client>, st: &mut ClientState, at: Instant) {
    let c = client.clone();
    st.timer = io::post_at(at, client.color, move || on_timer(&c)).ok();
}

/// The lazy request timer: a timeout if the outstanding request is past its deadline, else
/// re-armed for that deadline (or left unarmed when nothing is outstanding).
fn on_timer(client: &Arc<Client>) {
    let _ = client.state.with(|st| {
        st.timer = None;
        let Some(deadline) = st.deadline.filter(|_| st.inflight.is_some() || st.connecting) else {
            return;
        };
        if Instant::now() < deadline {
            arm_timer(client, st, deadline);
        } else if st.connecting {
            close(st);
            retry_later(client, st, ErrorKind::Connect);
        } else {
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
        if st.connecting {
            let r = ev.ready();
            if r.writable || r.error || r.hangup {
                connected(client, st, conn);
            }
            return; // The request goes out now: no response can be waiting yet.
        }
        const READ: usize = 16 * 1024;
        let hangup = ev.ready().hangup;
        let eof = loop {
            // Read until the socket is drained, or until the buffer is worth releasing: a fast
            // server could otherwise fill it with a whole large body within one event.
            let (eof, more) = loop {
                match io::net::read_into(&conn.stream, &mut st.buf, READ) {
                    // A short read drained the socket: a later arrival is a new edge, so no need
                    // to pay a read that would only say WouldBlock. Unless the peer hung up: that
                    // edge is this one, and only reading on finds the end of file.
                    Ok(Progress::Done(n)) if n < READ && !hangup => break (false, false),
                    Ok(Progress::Done(_)) if st.buf.len() >= RELEASE_AT => break (false, true),
                    Ok(Progress::Done(_)) => continue,
                    Ok(Progress::WouldBlock) => break (false, false),
                    Ok(Progress::Closed) | Err(_) => break (true, false),
                }
            };
            // Everything complete in the buffer counts, even when the server closed.
            while st.conn.is_some() && !st.buf.is_empty() && parse(client, st, eof) {}
            if st.buf.len() >= RELEASE_AT {
                // A large body: drop what the reader has framed and checked (module doc). A
                // head this long was refused by the reader (and the connection closed).
                let k = st.reader.release();
                st.buf.drain(..k);
            }
            if !more || st.conn.is_none() {
                break eof;
            }
        };
        if eof && st.conn.is_some() {
            let kind = if st.buf.is_empty() && st.inflight.is_none() {
                None // closed between requests: reconnect quietly unless a request was out
            } else if st.buf.is_empty() {
                Some(ErrorKind::Reset)
            } else {
                Some(ErrorKind::ShortBody)
            };
            match kind {
                Some(k) => reconnect(client, st, k),
                None => {
                    close(st);
                    let c = client.clone();
                    ochre::post(client.color, move || start(c));
                }
            }
        }
    });
}

/// Consumes a complete response from the buffer, if there is one; true if it did and the
/// connection goes on.
fn parse(client: &Arc<Client>, st: &mut ClientState, eof: bool) -> bool {
    let run = &client.run;
    let expected = run.target.bodies.as_ref().map(|b| b[st.inflight_path].as_slice());
    let resp = match st.reader.advance(&st.buf, eof, expected) {
        Step::Need => return false,
        Step::Bad(kind) => {
            reconnect(client, st, kind);
            return false;
        }
        Step::Done(r) => r,
    };
    st.buf.drain(..resp.drain);
    st.reader.reset();
    let now = Instant::now();
    let Some(sent) = st.inflight.take() else {
        // A response nobody asked for.
        reconnect(client, st, ErrorKind::Malformed);
        return false;
    };
    st.deadline = None;
    let since = now.saturating_duration_since(run.measure_from);
    let sends = std::mem::take(&mut st.unrecorded_sends);
    if sent >= run.measure_from && run.measuring(now) && run.count(now) {
        client.tally_now(|t| {
            t.sent += sends;
            t.record_status(resp.code);
            if resp.mismatch {
                t.record_error(since, ErrorKind::Mismatch);
            } else if (200..400).contains(&resp.code) {
                t.record_ok(since, now - sent, resp.bytes as u64);
            } else {
                t.record_error(since, ErrorKind::Status);
            }
        });
    } else {
        st.unrecorded_sends = sends;
    }
    if !st.buf.is_empty() {
        // One request is out at a time, and the next is sent only now: bytes that came after
        // this response (in the same reads) answer no request.
        reconnect(client, st, ErrorKind::Malformed);
        return false;
    }
    if let Pacing::Session { leave, .. } = run.pacing {
        if uniform(&mut st.rng) < leave || resp.closes || run.stopping(now) {
            // The session ends: it does not come back.
            finish(client, st);
            return false;
        }
        next_send(client, st);
        return true;
    }
    if resp.closes || st.on_conn >= run.per_connection || run.stopping(now) {
        if run.stopping(now) {
            finish(client, st);
        } else {
            close(st);
            let c = client.clone();
            ochre::post(client.color, move || start(c));
        }
        return false;
    }
    next_send(client, st);
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
    st.deadline = None;
    st.connecting = false;
    st.buf.clear();
    st.reader.reset();
    if let Some(c) = st.conn.take() {
        let _ = c.stream.shutdown(std::net::Shutdown::Both);
    }
}

fn reconnect(client: &Arc<Client>, st: &mut ClientState, kind: ErrorKind) {
    close(st);
    client.count_error(st, kind);
    if client.run.stopping(Instant::now()) || matches!(client.run.pacing, Pacing::Session { .. }) {
        st.done = true;
        return;
    }
    let c = client.clone();
    ochre::post(client.color, move || start(c));
}

fn finish(client: &Arc<Client>, st: &mut ClientState) {
    close(st);
    st.done = true;
    let sends = std::mem::take(&mut st.unrecorded_sends);
    if sends > 0 {
        // Counted at the end of the measured phase, where these sends belong.
        client.tally(client.run.measure_until, |t| t.sent += sends);
    }
}
