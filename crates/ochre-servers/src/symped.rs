//! SYMPED (µserver's symmetric multi-process event-driven model, thesis §6.2): one event loop per
//! core, each on its own thread pinned to its CPU, all watching one shared listening socket;
//! whichever loop accepts a connection serves it for life. No colors, no queues between loops:
//! a loop's connections never move, so its cache and its connections' state stay in its core's
//! caches, and an unbalanced accept stays unbalanced (what N-COPY and SWS's colors address).
//!
//! Each loop is an epoll instance (mio, edge-triggered) with the listener, a waker (to stop) and
//! its connections; readiness of a connection drives it (`Conn::drive`: write what is queued,
//! read, answer, until the socket would block). Each loop has its own file cache (the calling
//! thread's, from `Site::step`), as SWS's workers do.
//!
//! Invariants: at most `max_connections` connections over all loops (beyond, a new connection
//! is closed at once); a connection idle for `keepalive_timeout` is closed by a sweep once a
//! second; stopping closes every connection and joins every loop.

use std::io;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use ochre_http::site::Site;
use ochre_http::ServerConfig;

use crate::conn::{Conn, Io};
use crate::{pin_to, Plan, Running};

const LISTENER: Token = Token(usize::MAX - 1);
const WAKE: Token = Token(usize::MAX);
/// How often idle connections are looked for.
const SWEEP: Duration = Duration::from_secs(1);

struct Shared {
    site: Site,
    stop: AtomicBool,
    /// Connections open over all loops.
    active: AtomicUsize,
}

/// Starts the server (see the module doc): one loop per CPU of `plan`.
pub fn start(config: ServerConfig, listener: TcpListener, plan: &Plan) -> io::Result<Running> {
    let shared = Arc::new(Shared {
        site: Site::new(config)?,
        stop: AtomicBool::new(false),
        active: AtomicUsize::new(0),
    });
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let mut wakers = Vec::new();
    let mut loops = Vec::new();
    for i in 0..plan.loops() {
        let poll = Poll::new()?;
        wakers.push(Waker::new(poll.registry(), WAKE)?);
        let l = listener.try_clone()?;
        let cpu: Vec<usize> = plan.cpus.get(i).copied().into_iter().collect();
        let s = shared.clone();
        let spawned = std::thread::Builder::new().name(format!("symped-{i}")).spawn(move || {
            pin_to(&cpu);
            event_loop(&s, poll, &l)
        });
        match spawned {
            Ok(t) => loops.push(t),
            Err(e) => {
                shared.stop.store(true, Ordering::SeqCst);
                wakers.iter().for_each(|w| drop(w.wake()));
                loops.into_iter().for_each(|t| drop(t.join()));
                return Err(e);
            }
        }
    }
    Ok(Running::new(addr, move || {
        shared.stop.store(true, Ordering::SeqCst);
        for w in &wakers {
            let _ = w.wake();
        }
        for t in loops {
            let _ = t.join();
        }
    }))
}

struct Entry {
    conn: Conn,
    last: Instant,
}

fn event_loop(shared: &Shared, mut poll: Poll, listener: &TcpListener) -> io::Result<()> {
    let fd = listener.as_raw_fd();
    poll.registry().register(&mut SourceFd(&fd), LISTENER, Interest::READABLE)?;
    let mut conns: slab::Slab<Entry> = slab::Slab::new();
    let mut events = Events::with_capacity(256);
    let site = &shared.site;
    let max = site.config().max_connections;
    let idle = site.config().keepalive_timeout;
    let mut swept = Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        if let Err(e) = poll.poll(&mut events, Some(SWEEP)) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        let now = Instant::now();
        for ev in events.iter() {
            match ev.token() {
                WAKE => {}
                LISTENER => loop {
                    let stream = match listener.accept() {
                        Ok((s, _)) => s,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        // Would block, or out of descriptors: the next edge retries.
                        Err(_) => break,
                    };
                    if shared.active.load(Ordering::Relaxed) >= max
                        || stream.set_nonblocking(true).is_err()
                    {
                        continue; // Over the cap: closed at once.
                    }
                    let entry = conns.vacant_entry();
                    let key = entry.key();
                    let sfd = stream.as_raw_fd();
                    let interest = Interest::READABLE | Interest::WRITABLE;
                    if poll.registry().register(&mut SourceFd(&sfd), Token(key), interest).is_ok() {
                        shared.active.fetch_add(1, Ordering::Relaxed);
                        entry.insert(Entry { conn: Conn::new(stream, false), last: now });
                    }
                },
                Token(key) => {
                    let Some(e) = conns.get_mut(key) else { continue };
                    e.last = now;
                    if e.conn.drive(site, None) == Io::Closed {
                        close(shared, &poll, conns.remove(key));
                    }
                }
            }
        }
        if now.duration_since(swept) >= SWEEP {
            swept = now;
            let stale: Vec<usize> = conns
                .iter()
                .filter(|(_, e)| now.duration_since(e.last) >= idle)
                .map(|(k, _)| k)
                .collect();
            for k in stale {
                close(shared, &poll, conns.remove(k));
            }
        }
    }
    for e in conns.drain() {
        close(shared, &poll, e);
    }
    Ok(())
}

fn close(shared: &Shared, poll: &Poll, e: Entry) {
    let fd = e.conn.stream.as_raw_fd();
    let _ = poll.registry().deregister(&mut SourceFd(&fd));
    e.conn.close();
    shared.active.fetch_sub(1, Ordering::Relaxed);
}
