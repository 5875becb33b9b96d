//! The handler graph of SWS (thesis Fig 5.18), one function per handler:
//!
//! ```text
//!  accept ──post──▶ register_fd ──watch──▶ read_request ─▶ parse_request ─▶ get_from_cache
//!    ▲                                          ▲                                 │
//!    │                                          └──────── write_response ◀───────┘
//!  dec_accepted_clients ◀──post── close ◀───────────────────────┘
//! ```
//!
//! `accept` and `dec_accepted_clients` run as events of the accept color (pinned) and share the
//! active-connection counter in a [`ColorCell`] of that color: no lock, no atomic. Every other
//! handler runs as events of the connection's own color, so connections are served in parallel
//! and each one's state (a `ColorCell` too) needs no lock either. `accept` picks each new
//! connection's color with `ochre::place`, so connections go to workers in proportion to the
//! CPU share each gets (a worker sharing its CPU with a load injector gets fewer). `read_request`,
//! `parse_request`, `get_from_cache` and `write_response` follow one another within one event of
//! the connection's color: the thesis posts each as an event of that same color, which orders
//! them the same way; calling them directly saves the queue operations.
//!
//! Closing after a response (an error, `Connection: close`) is *lingering*, as in nginx: the
//! server shuts its sending side, then reads and discards what the client still sends for up to
//! `LINGER`, and only then closes. Closing a socket with unread input makes the kernel send a
//! reset, which can destroy the response before the client reads it.
//!
//! Timeouts: one timer per connection, re-armed lazily. A request head must arrive whole within
//! `read_timeout` of its first byte (else 408: a slow-loris client holds a connection for that
//! long at most); an idle keep-alive connection is closed after `keepalive_timeout`; a response
//! that does not drain within `write_timeout` of its last progress closes the connection.
//!
//! At the descriptor limit (`shed`), the accept color asks the oldest idle connections to close:
//! each connection publishes since when it is idle in `Conn::idle_since` (two relaxed stores per
//! request to its own connection's memory, read by the accept color only at the limit: no
//! allocation, no shared counter on the request path), and the accept color keeps the admitted connections in
//! `AcceptState::live`, added by `accept` and removed by `dec_accepted_clients`, which it already
//! runs. `shed_if_idle` closes a connection only if it is still idle when asked.

use std::collections::VecDeque;
use std::fs::File;
use std::io::IoSlice;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Instant, SystemTime};

use ochre::io::{self, Event, Interest, Progress, Timer, Watch};
use ochre::{Color, ColorCell};

use crate::cache::{with_worker_cache, Body, FileCache, FileInfo, Lookup};
use crate::framing;
use crate::metrics;
use crate::path::{decode_target, TargetError};
use crate::response::{error_response, Head};
use crate::ServerShared;

/// Output queued beyond this stops reading further pipelined requests until it drains.
const OUT_HIGH_WATER: usize = 256 * 1024;
/// Most header fields parsed, whatever the configuration says (stack space per parse).
const MAX_HEADERS: usize = 128;
/// Read buffer growth step.
const READ_CHUNK: usize = 16 * 1024;
/// How long a closing connection keeps draining its input (module doc).
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// What the accept color owns.
pub(crate) struct AcceptState {
    pub(crate) active: usize,
    pub(crate) accepted: u64,
    /// The admitted connections by id, for shedding idle ones at the descriptor limit.
    pub(crate) live: rustc_hash::FxHashMap<u64, Weak<Conn>>,
}

/// `Conn::idle_since` of a connection with a request in progress.
pub(crate) const BUSY: u64 = 0;
/// `Conn::idle_since` of an idle connection already asked to close.
pub(crate) const SHED_ASKED: u64 = u64::MAX;

enum Chunk {
    Bytes {
        data: Vec<u8>,
        pos: usize,
    },
    Shared {
        data: Arc<[u8]>,
        pos: usize,
        end: usize,
    },
    File {
        /// The cache's descriptor, shared (sendfile takes the offset explicitly).
        file: Arc<File>,
        offset: u64,
        end: u64,
    },
    /// The end of a response whose request head was parsed at this instant: when the writer
    /// reaches it, the response is out and its latency is recorded.
    End(Instant),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Between requests (keep-alive), or before the first byte.
    Idle,
    /// A request head has started arriving.
    Reading,
}

struct ConnState {
    inbuf: Vec<u8>,
    out: VecDeque<Chunk>,
    out_bytes: usize,
    requests: u32,
    phase: Phase,
    /// Request body bytes still to discard.
    discard: u64,
    deadline: Instant,
    close_after_write: bool,
    /// Sending side shut: draining input until end of file or `LINGER`.
    lingering: bool,
    closed: bool,
    watch: Option<Watch>,
    timer: Option<Timer>,
}

pub(crate) struct Conn {
    /// The accept count when it was accepted: its key in `AcceptState::live`.
    id: u64,
    /// Nanoseconds from the server's epoch, plus one, to when the connection last became idle
    /// (between requests, or since accept); `BUSY` while a request is read or answered;
    /// `SHED_ASKED` once the accept color asked it to close. Written by the connection's color,
    /// read by the accept color: a hint, checked again by `shed_if_idle`.
    pub(crate) idle_since: AtomicU64,
    stream: TcpStream,
    peer: SocketAddr,
    /// Admitted under the cap (false: it is only told 503), so `close` decrements the count.
    counted: bool,
    color: Color,
    server: Arc<ServerShared>,
    state: ColorCell<ConnState>,
}

impl Conn {
    pub(crate) fn color(&self) -> Color {
        self.color
    }

    fn mark_idle(&self, now: Instant) {
        let since = now.saturating_duration_since(self.server.epoch).as_nanos() as u64 + 1;
        self.idle_since.store(since.min(SHED_ASKED - 1), Ordering::Relaxed);
    }
}

/// A parsed request: what the rest of the graph (and `site`) needs of it.
pub(crate) struct Request {
    /// The request line, for the access log (empty when the server keeps none).
    pub(crate) line: String,
    pub(crate) head_only: bool,
    pub(crate) http10: bool,
    pub(crate) keep_alive: bool,
    pub(crate) target: String,
    pub(crate) if_none_match: Option<String>,
    pub(crate) if_modified_since: Option<String>,
    pub(crate) range: Option<String>,
    pub(crate) if_range: Option<String>,
}

/// Accept (accept color): admit the connection under the cap, give it a color, register it.
pub(crate) fn accept(server: &Arc<ServerShared>, stream: TcpStream, peer: SocketAddr) {
    let admitted = server.accept_state.with(|a| {
        a.accepted += 1;
        let counted = a.active < server.config.max_connections;
        if counted {
            a.active += 1;
            server.open.store(a.active, Ordering::Relaxed);
        }
        (a.accepted, counted)
    });
    let Ok((n, counted)) = admitted else { return };
    // Connection `n` gets a color among the 4096 from its seed, on the worker `place` picks by
    // the workers' CPU shares (hash placement in the libasync-smp configuration). Seeds cycle
    // within the server's 2^40 colors: a color is reused after 2^28 connections, long closed.
    let color = ochre::place(server.color_base + ((n & ((1 << 28) - 1)) << 12));
    let now = Instant::now();
    let conn = Arc::new(Conn {
        id: n,
        idle_since: AtomicU64::new(BUSY),
        stream,
        peer,
        counted,
        color,
        server: server.clone(),
        state: ColorCell::new(
            color,
            ConnState {
                inbuf: Vec::new(),
                out: VecDeque::new(),
                out_bytes: 0,
                requests: 0,
                phase: Phase::Idle,
                discard: 0,
                deadline: now + server.config.read_timeout,
                close_after_write: false,
                lingering: false,
                closed: false,
                watch: None,
                timer: None,
            },
        ),
    });
    conn.mark_idle(now);
    if counted {
        let _ = server.accept_state.with(|a| a.live.insert(n, Arc::downgrade(&conn)));
    }
    ochre::post(color, move || register_fd(conn));
}

/// RegisterFd (connection color): watch the socket and arm the timer.
fn register_fd(conn: Arc<Conn>) {
    let c = conn.clone();
    let watch =
        io::watch(&conn.stream, Interest::READ_WRITE, conn.color, move |ev| on_ready(&c, ev));
    let _ = conn.state.with(|st| match watch {
        Ok(w) => {
            st.watch = Some(w);
            arm_timer(&conn, st);
            if !conn.counted {
                // Over the connection cap: 503, then a lingering close.
                respond(&conn, st, 503, error_response(503, false, false, false), 0, "-");
                st.close_after_write = true;
                write_response(&conn, st);
            }
        }
        Err(_) => close(&conn, st),
    });
}

fn arm_timer(conn: &Arc<Conn>, st: &mut ConnState) {
    let c = conn.clone();
    let delay = st.deadline.saturating_duration_since(Instant::now());
    st.timer = io::post_after(delay, conn.color, move || on_timer(&c)).ok();
}

/// The timer (connection color): time out, or re-arm for the current deadline.
fn on_timer(conn: &Arc<Conn>) {
    let _ = conn.state.with(|st| {
        st.timer = None;
        if st.closed {
            return;
        }
        if Instant::now() < st.deadline {
            arm_timer(conn, st);
            return;
        }
        if st.lingering {
            close(conn, st);
        } else if st.phase == Phase::Reading && st.out.is_empty() && !st.close_after_write {
            // The head did not arrive in time: 408, then close.
            respond(conn, st, 408, error_response(408, false, false, false), 0, "-");
            st.close_after_write = true;
            write_response(conn, st);
            if !st.out.is_empty() {
                close(conn, st); // Nobody reads: do not wait any longer.
            }
        } else {
            close(conn, st);
        }
    });
}

/// A readiness event of the socket (connection color).
fn on_ready(conn: &Arc<Conn>, ev: &mut Event) {
    // The peer's end (or an error) was reported: reads go on to the end of file, which no
    // later edge would announce (`read_request`).
    let ready = ev.ready();
    let hangup = ready.hangup || ready.error;
    let _ = conn.state.with(|st| {
        if st.closed {
            ev.cancel();
            return;
        }
        if st.lingering {
            drain_input(conn, st);
        } else {
            write_response(conn, st);
            if !st.closed && !st.lingering {
                read_request(conn, st, hangup);
            }
        }
        if st.closed {
            ev.cancel();
        }
    });
}

/// ReadRequest: read what the socket has (up to the head limit), then parse.
///
/// A short read (fewer bytes than asked) ends the reading, as in nginx: the socket's queue was
/// empty when it returned, so any byte that comes later is a new edge and a new event (the
/// poller is edge-triggered and merges edges that come while the handler runs); reading again
/// would only return `EAGAIN`, one system call a request for nothing (3 reads a request
/// before, 2 after: the request's and the file cache's inotify check, strace at 1 core). The
/// exception is a `hangup` event: the end of file may already be queued behind the bytes, and
/// it has had its edge, so the reading goes on until it or `EAGAIN`.
///
/// One clock read serves what this event reads: it starts a head's `read_timeout` and, as the
/// time its requests were parsed, their responses' latencies (a microsecond apart at most).
fn read_request(conn: &Arc<Conn>, st: &mut ConnState, hangup: bool) {
    let limit = conn.server.config.max_header_bytes + READ_CHUNK;
    let mut now = None;
    loop {
        if st.close_after_write || st.out_bytes >= OUT_HIGH_WATER || st.inbuf.len() >= limit {
            break;
        }
        let r = io::net::read_into(&conn.stream, &mut st.inbuf, READ_CHUNK);
        match r {
            Ok(Progress::Done(0)) => {} // Interrupted: again.
            Ok(Progress::Done(n)) => {
                let at = *now.get_or_insert_with(Instant::now);
                if st.phase == Phase::Idle {
                    st.phase = Phase::Reading;
                    conn.idle_since.store(BUSY, Ordering::Relaxed);
                    st.deadline = at + conn.server.config.read_timeout;
                }
                parse_request(conn, st, &mut now);
                if st.closed {
                    return;
                }
                if n < READ_CHUNK && !hangup {
                    break; // Drained: the next bytes bring their own edge (doc above).
                }
            }
            Ok(Progress::WouldBlock) => break,
            Ok(Progress::Closed) | Err(_) => {
                // The peer is gone (or reset): finish what can be sent, then close.
                st.close_after_write = true;
                break;
            }
        }
    }
    parse_request(conn, st, &mut now);
    write_response(conn, st);
}

pub(crate) fn header<'a>(req: &'a httparse::Request<'_, '_>, name: &str) -> Option<&'a str> {
    req.headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .map(str::trim)
}

pub(crate) fn has_token(value: Option<&str>, token: &str) -> bool {
    value.is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

/// ParseRequest: parse every complete request in the buffer (pipelining), in order. `now`: the
/// caller's clock reading, taken here if it has none and a request is complete.
fn parse_request(conn: &Arc<Conn>, st: &mut ConnState, now: &mut Option<Instant>) {
    let cfg = &conn.server.config;
    loop {
        if st.closed || st.close_after_write || st.out_bytes >= OUT_HIGH_WATER {
            return;
        }
        if !crate::site::discard_body(&mut st.inbuf, &mut st.discard) {
            return;
        }
        if st.inbuf.is_empty() {
            return;
        }
        // Uninitialized header slots on the stack: no allocation, no zeroing per request.
        let mut headers =
            [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut []);
        let parsed = req
            .parse_with_uninit_headers(&st.inbuf, &mut headers[..cfg.max_headers.min(MAX_HEADERS)]);
        let (used, request) = match parsed {
            Ok(httparse::Status::Partial) => {
                if st.inbuf.len() > cfg.max_header_bytes {
                    let line_done = st.inbuf.contains(&b'\n');
                    let code = if line_done { 431 } else { 414 };
                    return fail(conn, st, code);
                }
                return;
            }
            Err(httparse::Error::Version) => return fail(conn, st, 505),
            Err(httparse::Error::TooManyHeaders) => return fail(conn, st, 431),
            Err(_) => return fail(conn, st, 400),
            Ok(httparse::Status::Complete(used)) => {
                if used > cfg.max_header_bytes {
                    return fail(conn, st, 431);
                }
                let http10 = req.version == Some(0);
                let method = req.method.unwrap_or("");
                let target = req.path.unwrap_or("");
                if target.len() > cfg.max_target_len {
                    return fail(conn, st, 414);
                }
                let Ok(body) = framing::check(req.headers, http10) else {
                    return fail(conn, st, 400);
                };
                if body > cfg.max_body_bytes {
                    return fail(conn, st, 413);
                }
                st.discard = body;
                let connection = header(&req, "connection");
                let keep_alive = if http10 {
                    has_token(connection, "keep-alive")
                } else {
                    !has_token(connection, "close")
                };
                // The line is for the access log only: without one, no formatting and no
                // allocation per request (0.15 us of a 1 KiB request's 6.6, perf cpu-clock).
                let line = if conn.server.access_log.is_some() {
                    format!("{method} {target} HTTP/1.{}", if http10 { 0 } else { 1 })
                } else {
                    String::new()
                };
                let request = Request {
                    line,
                    head_only: method == "HEAD",
                    http10,
                    keep_alive,
                    target: target.to_string(),
                    if_none_match: header(&req, "if-none-match").map(String::from),
                    if_modified_since: header(&req, "if-modified-since").map(String::from),
                    range: header(&req, "range").map(String::from),
                    if_range: header(&req, "if-range").map(String::from),
                };
                if method != "GET" && method != "HEAD" {
                    (used, Err((405, request)))
                } else {
                    (used, Ok(request))
                }
            }
        };
        let parsed_at = *now.get_or_insert_with(Instant::now);
        st.inbuf.drain(..used);
        st.requests += 1;
        st.phase = Phase::Idle;
        let last = st.requests >= cfg.max_requests_per_connection;
        match request {
            Ok(mut r) => {
                r.keep_alive &= !last;
                get_from_cache(conn, st, r);
            }
            Err((code, r)) => {
                let keep = r.keep_alive && !last;
                respond(
                    conn,
                    st,
                    code,
                    error_response(code, keep, r.http10, r.head_only),
                    0,
                    &r.line,
                );
                st.close_after_write |= !keep;
            }
        }
        if !st.closed {
            st.out.push_back(Chunk::End(parsed_at));
        }
        if !st.inbuf.is_empty() {
            // The next pipelined request has started: its head has `read_timeout` to complete.
            st.phase = Phase::Reading;
            st.deadline = parsed_at + cfg.read_timeout;
        }
    }
}

/// A malformed or over-limit request: the error, then close (the stream cannot be trusted).
fn fail(conn: &Arc<Conn>, st: &mut ConnState, code: u16) {
    respond(conn, st, code, error_response(code, false, false, false), 0, "-");
    st.out.push_back(Chunk::End(Instant::now()));
    st.close_after_write = true;
    st.inbuf.clear();
    write_response(conn, st);
}

/// Queues a response head (and any inline body), counting and logging the response.
fn respond(conn: &Conn, st: &mut ConnState, code: u16, bytes: Vec<u8>, body: u64, line: &str) {
    conn.server.counters.count(code, body);
    if let Some(log) = &conn.server.access_log {
        crate::stats::log_access(log, conn.peer, line, code, body);
    }
    queue(st, bytes);
}

fn queue(st: &mut ConnState, bytes: Vec<u8>) {
    st.out_bytes += bytes.len();
    st.out.push_back(Chunk::Bytes { data: bytes, pos: 0 });
}

fn etag_matches(list: &str, etag: &str) -> bool {
    let strip = |t: &str| t.trim().trim_start_matches("W/").to_string();
    list.trim() == "*" || list.split(',').any(|t| strip(t) == strip(etag))
}

pub(crate) fn not_modified(r: &Request, info: &FileInfo) -> bool {
    if let Some(inm) = &r.if_none_match {
        return etag_matches(inm, &info.etag);
    }
    if let Some(ims) =
        r.if_modified_since.as_deref().and_then(|v| httpdate::parse_http_date(v).ok())
    {
        let secs = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
        };
        return secs(info.mtime) <= secs(ims);
    }
    false
}

/// The answer to a request for a found file, as SWS and the servers built on its semantics
/// (`site`) give it: 304 when not modified, 416 with its page for a range beyond the file, else
/// 200 or 206 with the file's heads.
pub(crate) struct FileAnswer {
    pub(crate) code: u16,
    /// The head, finished (with the page of a 416).
    pub(crate) head: Vec<u8>,
    /// Bytes of content that follow the head's line and headers (the access log's size).
    pub(crate) sent: u64,
    /// The file's bytes to send after the head, first and last (inclusive), if any.
    pub(crate) body: Option<(u64, u64)>,
}

/// Answers `r` for the file `info` (see [`FileAnswer`]).
pub(crate) fn file_answer(r: &Request, info: &FileInfo) -> FileAnswer {
    if not_modified(r, info) {
        let head = Head::new(304)
            .header("ETag", &info.etag)
            .header("Last-Modified", &info.last_modified)
            .finish(r.keep_alive, r.http10);
        return FileAnswer { code: 304, head, sent: 0, body: None };
    }
    let (code, first, last) = match if r.head_only { None } else { byte_range(r, info) } {
        Some(Err(())) => {
            let page = crate::response::error_page(416);
            let mut head = Head::new(416)
                .header("Content-Range", format!("bytes */{}", info.size))
                .header("Content-Type", "text/html; charset=utf-8")
                .header("Content-Length", page.len())
                .finish(r.keep_alive, r.http10);
            head.extend_from_slice(&page);
            return FileAnswer { code: 416, head, sent: page.len() as u64, body: None };
        }
        Some(Ok((a, b))) => (206, a, b),
        None => (200, 0, info.size.saturating_sub(1)),
    };
    let len = if info.size == 0 { 0 } else { last - first + 1 };
    let mut head = Head::new(code)
        .header("Content-Type", &info.content_type)
        .header("Content-Length", len)
        .header("Last-Modified", &info.last_modified)
        .header("ETag", &info.etag)
        .header("Accept-Ranges", "bytes");
    if code == 206 {
        head = head.header("Content-Range", format!("bytes {first}-{last}/{}", info.size));
    }
    let send_body = !r.head_only && len > 0;
    FileAnswer {
        code,
        head: head.finish(r.keep_alive, r.http10),
        sent: if r.head_only { 0 } else { len },
        body: send_body.then_some((first, last)),
    }
}

/// The byte range asked for: `Some(Ok((first, last)))`, `Some(Err(()))` if unsatisfiable,
/// `None` to serve the whole file (no range, or one the server may ignore).
pub(crate) fn byte_range(r: &Request, info: &FileInfo) -> Option<Result<(u64, u64), ()>> {
    let spec = r.range.as_deref()?.trim().strip_prefix("bytes=")?;
    if let Some(ir) = &r.if_range {
        if ir.trim() != info.etag && ir.trim() != info.last_modified {
            return None;
        }
    }
    if spec.contains(',') {
        return None; // Several ranges: the whole file is a valid answer.
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    let size = info.size;
    if a.is_empty() {
        let n: u64 = b.parse().ok()?;
        if n == 0 || size == 0 {
            return Some(Err(()));
        }
        return Some(Ok((size - n.min(size), size - 1)));
    }
    let first: u64 = a.parse().ok()?;
    let last: u64 = if b.is_empty() { u64::MAX } else { b.parse().ok()? };
    if last < first {
        return None; // Invalid: ignored.
    }
    if first >= size {
        return Some(Err(()));
    }
    Some(Ok((first, last.min(size - 1))))
}

/// GetFromCache: resolve the target, build the response and queue it.
fn get_from_cache(conn: &Arc<Conn>, st: &mut ConnState, r: Request) {
    let server = &conn.server;
    let error = |st: &mut ConnState, code: u16| {
        respond(
            conn,
            st,
            code,
            error_response(code, r.keep_alive, r.http10, r.head_only),
            0,
            &r.line,
        );
        st.close_after_write |= !r.keep_alive;
    };
    let path = r.target.split('?').next().unwrap_or_default();
    let status = server.config.status_path.as_deref();
    let metrics = status.and_then(|p| path.strip_prefix(p)) == Some("/metrics");
    if status == Some(path) || metrics {
        if !conn.peer.ip().is_loopback() {
            return error(st, 404);
        }
        let (body, kind) = if metrics {
            let handle = ochre::current_handle();
            let text =
                metrics::render(&server.counters, &server.counters.latency(), handle.as_ref());
            (text.into_bytes(), metrics::CONTENT_TYPE)
        } else {
            let mut json = server.counters.to_json();
            if let Some(h) = ochre::current_handle() {
                json["top_colors"] = serde_json::json!(h.color_stats().top(metrics::TOP_COLORS));
            }
            (serde_json::to_vec_pretty(&json).unwrap_or_default(), "application/json")
        };
        let mut head = Head::new(200)
            .header("Content-Type", kind)
            .header("Content-Length", body.len())
            .header("Cache-Control", "no-store")
            .finish(r.keep_alive, r.http10);
        let len = body.len() as u64;
        if !r.head_only {
            head.extend_from_slice(&body);
        }
        respond(conn, st, 200, head, len, &r.line);
        st.close_after_write |= !r.keep_alive;
        return;
    }
    let target = match decode_target(&r.target) {
        Ok(t) => t,
        Err(TargetError::Malformed) => return error(st, 400),
        Err(TargetError::Outside) => return error(st, 403),
    };
    let make = || {
        FileCache::new(
            server.root.clone(),
            server.config.cache_bytes_per_worker,
            server.config.small_file_bytes,
            server.config.revalidate,
        )
    };
    let mut lookup = with_worker_cache(server.id, make, |c| c.lookup(&target.path));
    if matches!(lookup, Lookup::Directory) {
        if !target.dir {
            let head = Head::new(301)
                .header("Location", target.directory_location())
                .header("Content-Length", 0)
                .finish(r.keep_alive, r.http10);
            respond(conn, st, 301, head, 0, &r.line);
            st.close_after_write |= !r.keep_alive;
            return;
        }
        let index = target.path.join(&server.config.index);
        lookup = match with_worker_cache(server.id, make, |c| c.lookup(&index)) {
            Lookup::NotFound | Lookup::Directory => Lookup::Forbidden, // No listings.
            other => other,
        };
    }
    let info = match lookup {
        Lookup::File(info) => info,
        Lookup::NotFound => return error(st, 404),
        Lookup::Forbidden | Lookup::Directory => return error(st, 403),
        Lookup::Error(e) => {
            log::warn!("{:?}: {e}", target.decoded); // Debug: control bytes escaped
            return error(st, 500);
        }
    };
    let answer = file_answer(&r, &info);
    respond(conn, st, answer.code, answer.head, answer.sent, &r.line);
    st.close_after_write |= !r.keep_alive;
    let Some((first, last)) = answer.body else {
        return;
    };
    let len = last + 1 - first;
    match &info.body {
        Body::Memory(data) => {
            st.out_bytes += len as usize;
            st.out.push_back(Chunk::Shared {
                data: data.clone(),
                pos: first as usize,
                end: last as usize + 1,
            });
        }
        Body::Disk(file) => {
            st.out_bytes += len as usize;
            st.out.push_back(Chunk::File { file: file.clone(), offset: first, end: last + 1 });
        }
    }
}

/// WriteResponse: send queued output until done or the socket is full.
fn write_response(conn: &Arc<Conn>, st: &mut ConnState) {
    let mut progressed = false;
    // One clock read for the latencies ended here and the deadline set below: a response's
    // end is timed when the write loop reaches it, a few system calls before the deadline.
    let mut now = None;
    while let Some(chunk) = st.out.front() {
        let r = match chunk {
            Chunk::End(parsed_at) => {
                let end = *now.get_or_insert_with(Instant::now);
                conn.server.counters.record_latency(end.saturating_duration_since(*parsed_at));
                st.out.pop_front();
                continue;
            }
            Chunk::Bytes { data, pos } => {
                // Gather this head with a following in-memory body in one system call.
                let rest = &data[*pos..];
                match st.out.get(1) {
                    Some(Chunk::Shared { data: body, pos: bp, end }) => {
                        let slices = [IoSlice::new(rest), IoSlice::new(&body[*bp..*end])];
                        io::net::writev(&conn.stream, &slices)
                    }
                    _ => io::net::write(&conn.stream, rest),
                }
            }
            Chunk::Shared { data, pos, end } => io::net::write(&conn.stream, &data[*pos..*end]),
            Chunk::File { file, offset, end } => {
                let want = (*end - *offset).min(1 << 30) as usize;
                // A copy: the bookkeeping below advances the chunk's offset.
                let mut at = *offset;
                io::net::sendfile(&conn.stream, &**file, &mut at, want)
            }
        };
        let mut n = match r {
            Ok(Progress::Done(0)) | Ok(Progress::Closed) => {
                // A file shrank under us, or nothing could be written.
                st.close_after_write = true;
                st.out.clear();
                break;
            }
            Ok(Progress::Done(n)) => n,
            Ok(Progress::WouldBlock) => break,
            Err(_) => {
                st.out.clear();
                st.out_bytes = 0;
                close(conn, st);
                return;
            }
        };
        progressed = true;
        st.out_bytes = st.out_bytes.saturating_sub(n);
        // Consume `n` bytes from the front chunks.
        while n > 0 {
            let Some(front) = st.out.front_mut() else { break };
            let done = match front {
                Chunk::Bytes { data, pos } => {
                    let k = n.min(data.len() - *pos);
                    *pos += k;
                    n -= k;
                    *pos == data.len()
                }
                Chunk::Shared { pos, end, .. } => {
                    let k = n.min(*end - *pos);
                    *pos += k;
                    n -= k;
                    *pos == *end
                }
                Chunk::File { offset, end, .. } => {
                    let k = (n as u64).min(*end - *offset);
                    *offset += k;
                    n -= k as usize;
                    *offset == *end
                }
                Chunk::End(_) => break, // recorded by the loop above when it reaches the front
            };
            if done {
                st.out.pop_front();
            } else {
                break;
            }
        }
    }
    // The clock is read only for a deadline to set (a call with nothing to send reads none).
    if !st.out.is_empty() {
        if progressed {
            st.deadline = now.unwrap_or_else(Instant::now) + conn.server.config.write_timeout;
        }
        return;
    }
    st.out_bytes = 0;
    if st.close_after_write {
        linger(conn, st);
    } else if progressed && st.phase == Phase::Idle {
        let now = now.unwrap_or_else(Instant::now);
        st.deadline = now + conn.server.config.keepalive_timeout;
        conn.mark_idle(now);
    }
}

/// The response is out and the connection must end: shut the sending side, then drain the
/// input for a while before closing (module doc).
fn linger(conn: &Arc<Conn>, st: &mut ConnState) {
    if st.lingering || st.closed {
        return;
    }
    st.lingering = true;
    st.inbuf = Vec::new();
    st.discard = 0;
    let _ = conn.stream.shutdown(std::net::Shutdown::Write);
    st.deadline = Instant::now() + LINGER.min(conn.server.config.read_timeout);
    drain_input(conn, st);
}

/// Reads and drops input until the socket would block; closes at end of file or on errors.
fn drain_input(conn: &Arc<Conn>, st: &mut ConnState) {
    let mut buf = [0u8; 4096];
    loop {
        match io::net::read(&conn.stream, &mut buf) {
            Ok(Progress::Done(_)) => {}
            Ok(Progress::WouldBlock) => return,
            Ok(Progress::Closed) | Err(_) => return close(conn, st),
        }
    }
}

/// Close: stop watching, stop the timer, shut the socket, tell the accept color.
fn close(conn: &Arc<Conn>, st: &mut ConnState) {
    if st.closed {
        return;
    }
    st.closed = true;
    if let Some(w) = st.watch.take() {
        w.cancel();
    }
    if let Some(t) = st.timer.take() {
        t.cancel();
    }
    st.out.clear();
    st.inbuf = Vec::new();
    let _ = conn.stream.shutdown(std::net::Shutdown::Both);
    if conn.counted {
        let server = conn.server.clone();
        let id = conn.id;
        ochre::post(server.accept_color, move || dec_accepted_clients(&server, id));
    }
}

/// DecAcceptedClients (accept color): one connection fewer.
fn dec_accepted_clients(server: &Arc<ServerShared>, id: u64) {
    let _ = server.accept_state.with(|a| {
        a.active = a.active.saturating_sub(1);
        server.open.store(a.active, Ordering::Relaxed);
        a.live.remove(&id);
    });
}

/// Asked by the accept color at the descriptor limit (connection color): closes the connection
/// if it is still idle (no request begun, nothing to send); a keep-alive client may see its
/// idle connection closed at any time (RFC 9112 §9.5).
pub(crate) fn shed_if_idle(conn: &Arc<Conn>) {
    let _ = conn.state.with(|st| {
        let idle = st.phase == Phase::Idle && st.out.is_empty() && st.inbuf.is_empty();
        if idle && !st.closed && !st.lingering && !st.close_after_write {
            close(conn, st);
        }
    });
}
