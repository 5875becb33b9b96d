//! The server architectures of the comparative study (thesis chapter 6, issue 19), each a fast
//! and honest implementation of its model, all with SWS's static-file semantics:
//!
//! - [`Arch::Threads`]: a thread per connection, blocking I/O (Knot, Apache's worker model);
//!   the file cache is one, shared under a lock (threads come and go with connections).
//! - [`Arch::Symped`]: one epoll loop per core on a shared listening socket, no colors
//!   (µserver's SYMPED); each loop has its own cache, as SWS's workers do.
//! - [`Arch::Staged`]: stages with thread pools and queues between them (Watpipe, SEDA): accept,
//!   a poller, read/parse, write; the read threads have their own caches.
//! - [`Arch::Hyper`]: what a Rust user writes today: hyper's HTTP/1 server with tower-http's
//!   `ServeDir` on tokio's multi-thread runtime. Its bytes are its own (headers, error pages);
//!   the others answer through [`ochre_http::site`], so they send what SWS sends.
//!
//! SWS itself is `ochre_http::Server` on ochre, started here as [`Arch::Sws`]. All of them answer
//! a request head not complete within `read_timeout` of its first byte with 408 and close, as
//! SWS does (hyper through its `header_read_timeout`, see [`hyper_server`]). Every server here listens on loopback only,
//! bounds its connections (`max_connections`; beyond, a connection is closed at once) and its
//! memory per connection, pins its threads to the CPUs it is given, and stops cleanly when its
//! [`Running`] is stopped or dropped: listeners closed, connections shut, threads joined.

#![warn(missing_docs)]

mod conn;
pub mod hyper_server;
pub mod ncopy;
pub mod staged;
pub mod sws;
pub mod symped;
pub mod threads;

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};

use ochre_http::ServerConfig;

/// A server architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// A thread per connection, blocking I/O.
    Threads,
    /// One event loop per core on a shared listening socket.
    Symped,
    /// Stages with thread pools and queues.
    Staged,
    /// hyper + tower-http `ServeDir` on tokio.
    Hyper,
    /// SWS: `ochre_http::Server` on ochre.
    Sws,
}

impl Arch {
    /// Every architecture of the study.
    pub const ALL: [Arch; 5] = [Arch::Threads, Arch::Symped, Arch::Staged, Arch::Sws, Arch::Hyper];

    /// Its name in benchmark tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Threads => "threads",
            Arch::Symped => "symped",
            Arch::Staged => "staged",
            Arch::Hyper => "hyper",
            Arch::Sws => "sws",
        }
    }

    /// The architecture called `name`.
    pub fn from_name(name: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// How a server is laid out on the machine.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The CPUs its threads may run on (an event loop or worker per CPU where the model has
    /// them); empty: not pinned, one per allowed CPU.
    pub cpus: Vec<usize>,
    /// Threads of each pool of the staged server (read/parse and write stages); unused by the
    /// others. At least 1.
    pub pool: usize,
}

impl Plan {
    /// On `cpus`, with pools of `pool` threads.
    pub fn new(cpus: Vec<usize>, pool: usize) -> Plan {
        Plan { cpus, pool: pool.max(1) }
    }

    /// Event loops or runtime workers: one per CPU.
    pub(crate) fn loops(&self) -> usize {
        if self.cpus.is_empty() {
            ochre::topology::allowed_cpus().map(|c| c.len()).unwrap_or(1).max(1)
        } else {
            self.cpus.len()
        }
    }
}

/// Where a server's connections come from.
pub enum Source {
    /// Accepted from this listener.
    Listen(TcpListener),
    /// Handed over by a balancer in front of several copies (N-COPY), until it hangs up.
    Handoff(Receiver<TcpStream>),
}

impl Source {
    /// The listener's address; for a hand-off, an unspecified loopback address.
    pub(crate) fn addr(&self) -> io::Result<SocketAddr> {
        match self {
            Source::Listen(l) => l.local_addr(),
            Source::Handoff(_) => Ok(SocketAddr::from(([127, 0, 0, 1], 0))),
        }
    }

    /// The next connection, blocking; `None` once `stop` is set or the balancer hung up. Both
    /// kinds are polled with a timeout ([`STOP_POLL`]) rather than woken: a connection made to
    /// wake an `accept` could go to another copy's listener on the same port (`SO_REUSEPORT`).
    pub(crate) fn next(&self, stop: &AtomicBool) -> Option<TcpStream> {
        if let Source::Listen(l) = self {
            let _ = l.set_nonblocking(true);
        }
        loop {
            if stop.load(Ordering::SeqCst) {
                return None;
            }
            match self {
                Source::Listen(l) => match l.accept() {
                    Ok((s, _)) => return Some(s),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        let mut fds = [rustix::event::PollFd::new(l, rustix::event::PollFlags::IN)];
                        let timeout = rustix::event::Timespec::try_from(STOP_POLL).ok();
                        let _ = rustix::event::poll(&mut fds, timeout.as_ref());
                    }
                    // Out of descriptors or the like: back off instead of spinning.
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                },
                Source::Handoff(rx) => match rx.recv_timeout(STOP_POLL) {
                    Ok(s) => return Some(s),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return None,
                },
            }
        }
    }
}

/// How often a thread waiting for connections looks at its stop flag.
pub(crate) const STOP_POLL: Duration = Duration::from_millis(100);

/// How often an event-driven server looks for idle connections and late heads: a second, or
/// a quarter of `read_timeout` when that is shorter (so a 408 is at most that late), at
/// least every 10 ms.
pub(crate) fn sweep_every(config: &ServerConfig) -> Duration {
    Duration::from_secs(1).min(config.read_timeout / 4).max(Duration::from_millis(10))
}

/// A running server. Stopping it (or dropping it) closes its listener, shuts its connections
/// and joins its threads.
pub struct Running {
    addr: SocketAddr,
    open: Arc<AtomicUsize>,
    stop: Option<Box<dyn FnOnce() + Send>>,
}

impl Running {
    pub(crate) fn new(
        addr: SocketAddr,
        open: Arc<AtomicUsize>,
        stop: impl FnOnce() + Send + 'static,
    ) -> Running {
        Running { addr, open, stop: Some(Box::new(stop)) }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its connections open now: what the load-aware balancer of N-COPY compares (0 for a
    /// group of copies, whose copies count their own).
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Stops it and waits for its threads.
    pub fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            s();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            s();
        }
    }
}

/// A loopback listener on an ephemeral port.
pub fn loopback_listener() -> io::Result<TcpListener> {
    TcpListener::bind("127.0.0.1:0")
}

/// Starts `arch` serving `config` on `listener` (loopback), laid out as `plan`.
pub fn start(
    arch: Arch,
    config: ServerConfig,
    listener: TcpListener,
    plan: &Plan,
) -> io::Result<Running> {
    start_from(arch, config, Source::Listen(listener), plan)
}

/// Starts `arch` serving `config` on the connections of `source`, laid out as `plan`.
pub fn start_from(
    arch: Arch,
    config: ServerConfig,
    source: Source,
    plan: &Plan,
) -> io::Result<Running> {
    match arch {
        Arch::Threads => threads::start(config, source, plan),
        Arch::Symped => symped::start(config, source, plan),
        Arch::Staged => staged::start(config, source, plan),
        Arch::Hyper => hyper_server::start(config, source, plan),
        Arch::Sws => sws::start(config, source, plan),
    }
}

/// Pins the calling thread to `cpus` (any of them; best effort: nothing when empty or refused).
pub(crate) fn pin_to(cpus: &[usize]) {
    if cpus.is_empty() {
        return;
    }
    let mut set = rustix::thread::CpuSet::new();
    for &c in cpus.iter().filter(|&&c| c < rustix::thread::CpuSet::MAX_CPU) {
        set.set(c);
    }
    let _ = rustix::thread::sched_setaffinity(None, &set);
}
