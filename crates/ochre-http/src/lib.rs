//! SWS, the static-file web server of the thesis (§5.4.1), on ochre's colored events.
//!
//! How a request flows: the listening socket is watched as events of the *accept color*, pinned
//! to one worker; `accept` admits the connection under the connection cap and gives it a color of
//! its own, homed on some worker by the color hash. Everything about that connection then runs
//! as events of its color on that worker: readiness of its socket calls `read_request`, which
//! parses every complete request in the buffer (`parse_request`, pipelining included), looks the
//! file up in the worker's cache (`get_from_cache`) and queues the response, which
//! `write_response` sends (`writev` for heads and cached bodies, `sendfile` for large files).
//! `close` ends the connection and posts `dec_accepted_clients` to the accept color. The handler
//! graph and its timeouts are in `conn`; framing and header rules (RFC 9112) in `framing`; what
//! the server does at the descriptor limit in `shed`; the path checks in `path`; the cache in
//! `cache`, its change notification in `notify`.
//!
//! HTTP/1.1 (RFC 9110/9112) for static content: GET and HEAD, keep-alive and pipelining,
//! `Content-Type` from the extension, `Date`, `Last-Modified`, `ETag`, conditional requests
//! (`If-None-Match`, `If-Modified-Since` -> 304), one byte range (206, 416, `If-Range`), `index.html`
//! for directories (no listings), HTTP/1.0 clients. Errors are answered, never crash the server:
//! 400, 403, 404, 405 (with `Allow`), 408, 413, 414, 431, 500, 503 (connection cap or descriptor
//! limit, with `Retry-After`), 505.

mod cache;
pub mod config;
mod conn;
mod framing;
mod metrics;
mod notify;
pub mod path;
mod response;
mod shed;
pub mod site;
mod stats;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ochre::io::{Listener, Watch};
use ochre::{Color, ColorCell, Handle};

pub use config::{ConfigError, Revalidate, ServerConfig};

/// What every handler of a server shares.
pub(crate) struct ServerShared {
    id: u64,
    config: ServerConfig,
    /// The canonical root.
    root: PathBuf,
    accept_color: Color,
    /// Connection colors are `color_base` plus less than 2^40 (`conn::accept`).
    color_base: u64,
    accept_state: ColorCell<conn::AcceptState>,
    /// Origin of `Conn::idle_since`.
    epoch: Instant,
    counters: stats::Counters,
    /// `AcceptState::active`, published by the accept color for readers on other threads (a
    /// balancer in front of several servers): a relaxed store per accept and close.
    open: Arc<std::sync::atomic::AtomicUsize>,
    access_log: Option<std::fs::File>,
}

/// A configured server, ready to serve listeners on a runtime.
pub struct Server {
    shared: Arc<ServerShared>,
}

pub(crate) static NEXT_SERVER: AtomicU64 = AtomicU64::new(1);

/// Connection colors start here, away from small colors applications pick by hand and below
/// the colors whose top bits name a mode (bit 63 grouped, bit 62 admits readers): at `1 << 62`
/// every connection was a reader color, and each turn took a reader-writer word (two atomic
/// operations and a read of every worker's line) that nothing read; 2 workers, `bench sws`,
/// 1 KiB: 176-185K requests/s there, 210-215K before colors that admit readers followed.
/// Servers number up to 2^20 (`id << 40`), so connection colors stay below `1 << 61`.
const CONNECTION_COLORS: u64 = 1 << 60;

/// The first connection color of server `id`; its connections add less than 2^40 to it.
fn connection_colors(id: u64) -> u64 {
    CONNECTION_COLORS + ((id & ((1 << 20) - 1)) << 40)
}

impl Server {
    /// A server for `config`, accepting as events of `accept_color`. Fails if the root is not a
    /// readable directory.
    pub fn new(config: ServerConfig, accept_color: Color) -> std::io::Result<Server> {
        let root = std::fs::canonicalize(&config.root)?;
        if !root.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                format!("{} is not a directory", root.display()),
            ));
        }
        std::fs::read_dir(&root)?;
        let access_log = match &config.access_log {
            Some(p) => Some(std::fs::OpenOptions::new().create(true).append(true).open(p)?),
            None => None,
        };
        let id = NEXT_SERVER.fetch_add(1, Ordering::Relaxed);
        Ok(Server {
            shared: Arc::new(ServerShared {
                id,
                config,
                root,
                accept_color,
                color_base: connection_colors(id),
                accept_state: ColorCell::new(
                    accept_color,
                    conn::AcceptState { active: 0, accepted: 0, live: Default::default() },
                ),
                counters: stats::Counters::new(stats::BLOCKS),
                open: Default::default(),
                access_log,
                epoch: Instant::now(),
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.shared.config
    }

    /// The counters (requests, body bytes, per status, latency percentiles, per worker) as
    /// JSON; also served at `status_path` when configured.
    pub fn status(&self) -> serde_json::Value {
        self.shared.counters.to_json()
    }

    /// Serves `listener` (call from a handler, typically the run's first event).
    pub fn serve(&self, listener: Listener) -> Result<Watch, ochre::Error> {
        if let Some(n) = ochre::current_workers() {
            self.shared.counters.show_workers(n);
        }
        let shared = self.shared.clone();
        let listener = listener.shed_with(shed::Shedder::new(shared.clone()));
        listener.serve(self.shared.accept_color, move |s, peer| conn::accept(&shared, s, peer))
    }

    /// Ends the run once no connection is left, or at `deadline`, whichever comes first. Call it
    /// after cancelling the listener's watch (graceful shutdown: in-flight responses finish).
    pub fn shutdown_when_idle(&self, handle: &Handle, deadline: Instant) {
        let shared = self.shared.clone();
        let h = handle.clone();
        handle.post(self.shared.accept_color, move || check_idle(shared, h, deadline));
    }

    /// The connections open now (admitted under the cap), as the accept color last published
    /// it: what a balancer in front of several servers reads.
    pub fn open_connections(&self) -> Arc<std::sync::atomic::AtomicUsize> {
        self.shared.open.clone()
    }

    /// Serves a connection accepted elsewhere (by a balancer in front of several servers), as
    /// if a listener of this server had accepted it.
    pub fn adopt(&self, handle: &Handle, stream: std::net::TcpStream) -> std::io::Result<()> {
        stream.set_nonblocking(true)?;
        let peer = stream.peer_addr()?;
        let shared = self.shared.clone();
        handle.post(self.shared.accept_color, move || conn::accept(&shared, stream, peer));
        Ok(())
    }

    /// Serves `listener` from any thread.
    pub fn serve_with(&self, handle: &Handle, listener: Listener) -> Result<Watch, ochre::Error> {
        self.shared.counters.show_workers(handle.workers());
        let shared = self.shared.clone();
        let listener = listener.shed_with(shed::Shedder::new(shared.clone()));
        handle.serve(listener, self.shared.accept_color, move |s, peer| {
            conn::accept(&shared, s, peer)
        })
    }
}

fn check_idle(shared: Arc<ServerShared>, handle: Handle, deadline: Instant) {
    let active = shared.accept_state.with(|a| a.active).unwrap_or(0);
    if active == 0 || Instant::now() >= deadline {
        handle.shutdown();
        return;
    }
    let color = shared.accept_color;
    let h = handle.clone();
    if handle
        .post_after(Duration::from_millis(20), color, move || check_idle(shared, h, deadline))
        .is_err()
    {
        handle.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_colors_are_plain_colors() {
        for id in [0, 1, 2, (1 << 20) - 1, 1 << 20, u64::MAX] {
            for offset in [0, (1 << 40) - 1] {
                let c = Color(connection_colors(id) + offset);
                assert!(!c.admits_readers(), "server {id}: {c:?} admits readers");
                assert_eq!(c.group(), None, "server {id}: {c:?} is grouped");
            }
        }
    }
}
