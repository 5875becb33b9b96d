//! Stages with thread pools and queues between them (SEDA, Watpipe: thesis §6.2): accept, poll,
//! read/parse, write. A connection travels between stages by value through queues (crossbeam
//! channels): it is owned by exactly one stage at a time, so its state needs no lock.
//!
//! ```text
//!   accept ──▶ poller ──▶ read/parse pool ──▶ write pool
//!                ▲   ◀─────────┘  ▲               │
//!                └────────────────┴───────────────┘
//! ```
//!
//! - The accept stage (one thread) blocks in `accept` and hands new connections to the poller.
//! - The poller (one thread, epoll through mio, edge-triggered) keeps the connections that wait
//!   for their socket; readiness sends a connection to the write pool if it has answers queued,
//!   else to the read pool. An edge that comes while the connection is in a stage is remembered
//!   (`missed`) and the connection is sent on again when it comes back, so no readiness is lost.
//! - The read pool reads, parses and answers (file cache per thread) and passes the connection
//!   to the write pool, or back to the poller if no request is complete.
//! - The write pool sends (`writev`, `sendfile`); a full socket sends the connection back to the
//!   poller, and a connection with pipelined requests left goes back to the read pool.
//!
//! The pools' sizes are the model's knobs ([`Plan::pool`]); every thread may run on any CPU of the
//! plan. Invariants: at most `max_connections` connections (beyond, closed at once); one
//! connection is in one stage at a time; idle connections are closed after `keepalive_timeout`
//! by the poller, and a parked connection whose request head is incomplete `read_timeout`
//! after its first byte gets 408 from the poller and is closed, as SWS does; stopping closes every connection the poller holds and joins every thread.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use ochre_http::site::Site;
use ochre_http::ServerConfig;

use crate::conn::{Conn, Io};
use crate::{pin_to, Plan, Running, Source};

const WAKE: Token = Token(usize::MAX);
/// How often idle connections are looked for, and stage threads check the stop flag.
const TICK: Duration = Duration::from_millis(200);

/// What a stage says when it hands a connection back to the poller.
enum Back {
    /// A new connection from the accept stage.
    New(Conn),
    /// Waiting for its socket.
    Park(usize, Conn),
    /// Done: close it.
    Close(usize, Conn),
}

struct Shared {
    site: Site,
    stop: AtomicBool,
    active: Arc<AtomicUsize>,
    to_poller: Sender<Back>,
    waker: Waker,
    to_read: Sender<(usize, Conn)>,
    to_write: Sender<(usize, Conn)>,
}

impl Shared {
    fn back(&self, b: Back) {
        let _ = self.to_poller.send(b);
        let _ = self.waker.wake();
    }
}

/// Starts the server (see the module doc), with pools of `plan.pool` threads.
pub fn start(config: ServerConfig, source: Source, plan: &Plan) -> io::Result<Running> {
    let addr = source.addr()?;
    let poll = Poll::new()?;
    let (to_poller, from_stages) = unbounded();
    let (to_read, read_queue) = unbounded();
    let (to_write, write_queue) = unbounded();
    let shared = Arc::new(Shared {
        site: Site::new(config)?,
        stop: AtomicBool::new(false),
        active: Arc::new(AtomicUsize::new(0)),
        to_poller,
        waker: Waker::new(poll.registry(), WAKE)?,
        to_read,
        to_write,
    });
    let mut threads = Vec::new();
    let stop_all = move |shared: &Arc<Shared>, threads: Vec<std::thread::JoinHandle<()>>| {
        shared.stop.store(true, Ordering::SeqCst);
        let _ = shared.waker.wake();
        for t in threads {
            let _ = t.join();
        }
    };
    let cpus = plan.cpus.clone();
    let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
        let cpus = cpus.clone();
        std::thread::Builder::new().name(name).spawn(move || {
            pin_to(&cpus);
            f()
        })
    };
    let mut plan_threads: Vec<(String, Box<dyn FnOnce() + Send>)> = Vec::new();
    let s = shared.clone();
    plan_threads.push(("staged-accept".into(), Box::new(move || accept_stage(&s, &source))));
    let s = shared.clone();
    plan_threads.push(("staged-poll".into(), Box::new(move || poller(&s, poll, &from_stages))));
    for i in 0..plan.pool {
        let (s, q) = (shared.clone(), read_queue.clone());
        plan_threads.push((format!("staged-read-{i}"), Box::new(move || read_stage(&s, &q))));
        let (s, q) = (shared.clone(), write_queue.clone());
        plan_threads.push((format!("staged-write-{i}"), Box::new(move || write_stage(&s, &q))));
    }
    for (name, f) in plan_threads {
        match spawn(name, f) {
            Ok(t) => threads.push(t),
            Err(e) => {
                stop_all(&shared, threads);
                return Err(e);
            }
        }
    }
    let open = shared.active.clone();
    Ok(Running::new(addr, open, move || stop_all(&shared, threads)))
}

fn accept_stage(shared: &Shared, source: &Source) {
    let max = shared.site.config().max_connections;
    while let Some(stream) = source.next(&shared.stop) {
        if shared.active.load(Ordering::SeqCst) >= max || stream.set_nonblocking(true).is_err() {
            continue; // Over the cap: closed at once.
        }
        shared.active.fetch_add(1, Ordering::SeqCst);
        shared.back(Back::New(Conn::new(stream, false)));
    }
}

struct Entry {
    /// `None` while the connection is in a stage.
    conn: Option<Conn>,
    /// Readiness came while it was in a stage.
    missed: bool,
    /// The peer's end was reported (sticky: it stays closed).
    peer_closed: bool,
    last: Instant,
}

fn dispatch(shared: &Shared, key: usize, conn: Conn) {
    let q = if conn.has_output() { &shared.to_write } else { &shared.to_read };
    let _ = q.send((key, conn));
}

fn poller(shared: &Shared, mut poll: Poll, from_stages: &Receiver<Back>) {
    let mut conns: slab::Slab<Entry> = slab::Slab::new();
    let mut events = Events::with_capacity(256);
    let idle = shared.site.config().keepalive_timeout;
    let head = shared.site.config().read_timeout;
    let tick = TICK.min(crate::sweep_every(shared.site.config()));
    let mut swept = Instant::now();
    let close = |poll: &Poll, conn: Conn| {
        let fd = conn.stream.as_raw_fd();
        let _ = poll.registry().deregister(&mut SourceFd(&fd));
        conn.close();
        shared.active.fetch_sub(1, Ordering::SeqCst);
    };
    while !shared.stop.load(Ordering::Relaxed) {
        if let Err(e) = poll.poll(&mut events, Some(tick)) {
            if e.kind() != io::ErrorKind::Interrupted {
                break;
            }
        }
        let now = Instant::now();
        for ev in events.iter() {
            let Token(key) = ev.token();
            if key == WAKE.0 {
                continue;
            }
            let Some(e) = conns.get_mut(key) else { continue };
            e.last = now;
            // The peer's end reported: reads go on to the end of file (`Conn::read`); remembered
            // for a connection in a stage, whose edge this is.
            e.peer_closed |= ev.is_read_closed() || ev.is_error();
            match e.conn.take() {
                Some(mut c) => {
                    if e.peer_closed {
                        c.note_peer_closed();
                    }
                    dispatch(shared, key, c)
                }
                None => e.missed = true,
            }
        }
        while let Ok(b) = from_stages.try_recv() {
            match b {
                Back::New(conn) => {
                    let entry = conns.vacant_entry();
                    let fd = conn.stream.as_raw_fd();
                    let interest = Interest::READABLE | Interest::WRITABLE;
                    if poll
                        .registry()
                        .register(&mut SourceFd(&fd), Token(entry.key()), interest)
                        .is_ok()
                    {
                        entry.insert(Entry {
                            conn: Some(conn),
                            missed: false,
                            peer_closed: false,
                            last: now,
                        });
                    } else {
                        conn.close();
                        shared.active.fetch_sub(1, Ordering::SeqCst);
                    }
                }
                Back::Park(key, mut conn) => {
                    let Some(e) = conns.get_mut(key) else { continue };
                    e.last = now;
                    if e.peer_closed {
                        conn.note_peer_closed();
                    }
                    if std::mem::take(&mut e.missed) {
                        dispatch(shared, key, conn);
                    } else {
                        e.conn = Some(conn);
                    }
                }
                Back::Close(key, conn) => {
                    if conns.contains(key) {
                        conns.remove(key);
                    }
                    close(&poll, conn);
                }
            }
        }
        if now.duration_since(swept) >= tick {
            swept = now;
            // Parked connections (a connection in a stage is busy, not late) to close.
            let stale: Vec<usize> = conns
                .iter()
                .filter(|(_, e)| {
                    e.conn.as_ref().is_some_and(|c| {
                        c.head_overdue(now, head) || now.duration_since(e.last) >= idle
                    })
                })
                .map(|(k, _)| k)
                .collect();
            for k in stale {
                if let Some(mut c) = conns.remove(k).conn {
                    if c.head_overdue(now, head) {
                        c.time_out(&shared.site);
                    }
                    close(&poll, c);
                }
            }
        }
    }
    // Connections in a stage are dropped (closed) by the stage when it sees the stop flag.
    for e in conns.drain() {
        if let Some(c) = e.conn {
            close(&poll, c);
        }
    }
}

fn read_stage(shared: &Shared, queue: &Receiver<(usize, Conn)>) {
    let site = &shared.site;
    loop {
        let (key, mut conn) = match queue.recv_timeout(TICK) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) if !shared.stop.load(Ordering::Relaxed) => continue,
            Err(_) => return,
        };
        let r = conn.read(site);
        conn.answer(site, None);
        if conn.has_output() {
            let _ = shared.to_write.send((key, conn));
        } else if r == Io::Closed || conn.done() {
            shared.back(Back::Close(key, conn));
        } else {
            shared.back(Back::Park(key, conn));
        }
    }
}

fn write_stage(shared: &Shared, queue: &Receiver<(usize, Conn)>) {
    loop {
        let (key, mut conn) = match queue.recv_timeout(TICK) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) if !shared.stop.load(Ordering::Relaxed) => continue,
            Err(_) => return,
        };
        match conn.write() {
            Io::Closed => shared.back(Back::Close(key, conn)),
            Io::WouldBlock | Io::Drained => shared.back(Back::Park(key, conn)),
            Io::Ok if conn.done() => shared.back(Back::Close(key, conn)),
            Io::Ok if conn.has_input() => {
                let _ = shared.to_read.send((key, conn));
            }
            Io::Ok => shared.back(Back::Park(key, conn)),
        }
    }
}
