//! Thread per connection, blocking I/O (Knot's model; Apache's worker MPM without its pool).
//!
//! One accept thread takes connections and starts a thread for each, which reads, answers and
//! writes with blocking calls until the connection ends. Concurrency is the kernel's scheduler:
//! a connection waiting for its client costs a sleeping thread and its stack. The file cache is
//! shared by the threads, in [`SHARDS`] shards behind a lock each, a connection using the shard
//! of its number: threads live as long as their connection, so a cache per thread would be
//! rebuilt for every connection, and one lock for all made a convoy (many runnable threads on
//! one core, the holder preempted: 64 connections on one core served less than half of 16's).
//!
//! Invariants: at most `max_connections` connection threads (beyond, a new connection is closed
//! at once); a connection thread ends at the client's close, at the keep-alive timeout (a read
//! timeout) or the write timeout, or when stopping shuts its socket; stopping waits for all.
//! While a request head is incomplete the read timeout is what is left of `read_timeout` since
//! its first byte, and when it expires the thread sends 408 and closes, as SWS does.

use std::collections::HashMap;
use std::io;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ochre_http::site::{FileCache, Site};
use ochre_http::ServerConfig;

use crate::conn::{Conn, Io};
use crate::{pin_to, Plan, Running, Source};

/// Stack of a connection thread: parsing keeps 4 KiB of header slots on the stack; the rest is
/// small. Many threads must fit.
const STACK: usize = 256 * 1024;
/// The shortest read or write timeout set (zero would mean none).
const MIN_WAIT: Duration = Duration::from_millis(1);
/// Shards of the file cache.
pub const SHARDS: usize = 16;

struct Shared {
    site: Site,
    cache: Vec<Mutex<FileCache>>,
    stop: AtomicBool,
    /// Connection threads running.
    active: Arc<AtomicUsize>,
    /// Their sockets, to shut when stopping.
    live: Mutex<HashMap<u64, TcpStream>>,
    next: AtomicU64,
    cpus: Vec<usize>,
}

/// Starts the server (see the module doc).
pub fn start(config: ServerConfig, source: Source, plan: &Plan) -> io::Result<Running> {
    let site = Site::new(config)?;
    let addr = source.addr()?;
    let shared = Arc::new(Shared {
        cache: (0..SHARDS).map(|_| Mutex::new(site.new_cache())).collect(),
        site,
        stop: AtomicBool::new(false),
        active: Arc::new(AtomicUsize::new(0)),
        live: Mutex::new(HashMap::new()),
        next: AtomicU64::new(0),
        cpus: plan.cpus.clone(),
    });
    let s = shared.clone();
    let acceptor = std::thread::Builder::new()
        .name("threads-accept".into())
        .spawn(move || accept_loop(&s, &source))?;
    let open = shared.active.clone();
    Ok(Running::new(addr, open, move || {
        shared.stop.store(true, Ordering::SeqCst);
        let _ = acceptor.join();
        for s in shared.live.lock().unwrap_or_else(|e| e.into_inner()).values() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while shared.active.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }))
}

fn accept_loop(shared: &Arc<Shared>, source: &Source) {
    pin_to(&shared.cpus);
    let max = shared.site.config().max_connections;
    while let Some(stream) = source.next(&shared.stop) {
        if shared.active.load(Ordering::SeqCst) >= max {
            continue; // Over the cap: closed at once (dropped).
        }
        let id = shared.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(clone) = stream.try_clone() {
            shared.live.lock().unwrap_or_else(|e| e.into_inner()).insert(id, clone);
        }
        shared.active.fetch_add(1, Ordering::SeqCst);
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("threads-conn".into())
            .stack_size(STACK)
            .spawn(move || serve(&s, id, stream));
        if spawned.is_err() {
            shared.live.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            shared.active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A connection thread: read, answer, write, until the connection ends.
fn serve(shared: &Shared, id: u64, stream: TcpStream) {
    pin_to(&shared.cpus);
    let cfg = shared.site.config();
    let _ = stream.set_nonblocking(false); // A balancer's hand-off may be either.
    let keepalive = cfg.keepalive_timeout.max(MIN_WAIT);
    let _ = stream.set_read_timeout(Some(keepalive));
    let _ = stream.set_write_timeout(Some(cfg.write_timeout.max(MIN_WAIT)));
    let mut waiting = keepalive;
    let mut conn = Conn::new(stream, true);
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        // Between requests the read waits for keep-alive; within a head, for what is left of
        // its time. The socket option is set only when that changes (mostly never: a head
        // comes whole in one read).
        let want = match conn.head_deadline(cfg.read_timeout) {
            Some(d) => d.saturating_duration_since(Instant::now()).max(MIN_WAIT),
            None => keepalive,
        };
        if want != waiting {
            waiting = want;
            let _ = conn.stream.set_read_timeout(Some(want));
        }
        // A blocking read that would block is a timeout: keep-alive, or the head's.
        let r = conn.read(&shared.site);
        {
            let shard = &shared.cache[id as usize % SHARDS];
            let mut cache = shard.lock().unwrap_or_else(|e| e.into_inner());
            conn.answer(&shared.site, Some(&mut cache));
        }
        if conn.head_overdue(Instant::now(), cfg.read_timeout) {
            conn.time_out(&shared.site);
            break;
        }
        let answered = conn.has_output();
        if conn.write() != Io::Ok || conn.done() || (r != Io::Ok && !answered) {
            break;
        }
    }
    conn.close();
    shared.live.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    shared.active.fetch_sub(1, Ordering::SeqCst);
}
