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
//! Connections handed over by an N-COPY balancer (a [`Source::Handoff`]) go to the loops in
//! turn, through a queue and the waker of each.
//!
//! Invariants: at most `max_connections` connections over all loops (beyond, a new connection
//! is closed at once); a connection idle for `keepalive_timeout` is closed, and one whose request
//! head is incomplete `read_timeout` after its first byte gets 408 and is closed, by a sweep
//! every `sweep_every` (lib.rs); stopping closes every connection and joins every loop.

use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{unbounded, Receiver};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use ochre_http::site::Site;
use ochre_http::ServerConfig;

use crate::conn::{Conn, Io};
use crate::{pin_to, Plan, Running, Source};

const LISTENER: Token = Token(usize::MAX - 1);
const WAKE: Token = Token(usize::MAX);

struct Shared {
    site: Site,
    stop: AtomicBool,
    /// Connections open over all loops.
    active: Arc<AtomicUsize>,
}

/// Starts the server (see the module doc): one loop per CPU of `plan`.
pub fn start(config: ServerConfig, source: Source, plan: &Plan) -> io::Result<Running> {
    let shared = Arc::new(Shared {
        site: Site::new(config)?,
        stop: AtomicBool::new(false),
        active: Arc::new(AtomicUsize::new(0)),
    });
    let addr = source.addr()?;
    if let Source::Listen(l) = &source {
        l.set_nonblocking(true)?;
    }
    let mut wakers = Vec::new();
    let mut inboxes = Vec::new();
    let mut loops = Vec::new();
    let stop = |shared: &Shared, wakers: &[Waker], loops: Vec<std::thread::JoinHandle<()>>| {
        shared.stop.store(true, Ordering::SeqCst);
        for w in wakers {
            let _ = w.wake();
        }
        for t in loops {
            let _ = t.join();
        }
    };
    for i in 0..plan.loops() {
        let poll = Poll::new()?;
        wakers.push(Waker::new(poll.registry(), WAKE)?);
        let listener = match &source {
            Source::Listen(l) => Some(l.try_clone()?),
            Source::Handoff(_) => None,
        };
        let (tx, inbox) = unbounded();
        inboxes.push(tx);
        let cpu: Vec<usize> = plan.cpus.get(i).copied().into_iter().collect();
        let s = shared.clone();
        let spawned = std::thread::Builder::new().name(format!("symped-{i}")).spawn(move || {
            pin_to(&cpu);
            let _ = event_loop(&s, poll, listener.as_ref(), &inbox);
        });
        match spawned {
            Ok(t) => loops.push(t),
            Err(e) => {
                stop(&shared, &wakers, loops);
                return Err(e);
            }
        }
    }
    let wakers = Arc::new(wakers);
    if let Source::Handoff(_) = &source {
        // Hand-offs go to the loops in turn.
        let (s, w) = (shared.clone(), wakers.clone());
        let spawned = std::thread::Builder::new().name("symped-inbox".into()).spawn(move || {
            let mut i = 0;
            while let Some(stream) = source.next(&s.stop) {
                let _ = inboxes[i % inboxes.len()].send(stream);
                let _ = w[i % w.len()].wake();
                i += 1;
            }
        });
        match spawned {
            Ok(t) => loops.push(t),
            Err(e) => {
                stop(&shared, &wakers, loops);
                return Err(e);
            }
        }
    }
    let open = shared.active.clone();
    Ok(Running::new(addr, open, move || stop(&shared, &wakers, loops)))
}

struct Entry {
    conn: Conn,
    last: Instant,
}

fn event_loop(
    shared: &Shared,
    mut poll: Poll,
    listener: Option<&TcpListener>,
    inbox: &Receiver<TcpStream>,
) -> io::Result<()> {
    if let Some(l) = listener {
        poll.registry().register(&mut SourceFd(&l.as_raw_fd()), LISTENER, Interest::READABLE)?;
    }
    let mut conns: slab::Slab<Entry> = slab::Slab::new();
    let mut events = Events::with_capacity(256);
    let site = &shared.site;
    let max = site.config().max_connections;
    let idle = site.config().keepalive_timeout;
    let head = site.config().read_timeout;
    let sweep = crate::sweep_every(site.config());
    let mut swept = Instant::now();
    let admit = |conns: &mut slab::Slab<Entry>, poll: &Poll, stream: TcpStream, now: Instant| {
        if shared.active.load(Ordering::Relaxed) >= max || stream.set_nonblocking(true).is_err() {
            return; // Over the cap: closed at once.
        }
        let entry = conns.vacant_entry();
        let key = entry.key();
        let sfd = stream.as_raw_fd();
        let interest = Interest::READABLE | Interest::WRITABLE;
        if poll.registry().register(&mut SourceFd(&sfd), Token(key), interest).is_ok() {
            shared.active.fetch_add(1, Ordering::Relaxed);
            entry.insert(Entry { conn: Conn::new(stream, false), last: now });
        }
    };
    while !shared.stop.load(Ordering::Relaxed) {
        if let Err(e) = poll.poll(&mut events, Some(sweep)) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        let now = Instant::now();
        for ev in events.iter() {
            match ev.token() {
                WAKE => {
                    while let Ok(stream) = inbox.try_recv() {
                        admit(&mut conns, &poll, stream, now);
                    }
                }
                LISTENER => {
                    let Some(l) = listener else { continue };
                    loop {
                        match l.accept() {
                            Ok((stream, _)) => admit(&mut conns, &poll, stream, now),
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            // Would block, or out of descriptors: the next edge retries.
                            Err(_) => break,
                        }
                    }
                }
                Token(key) => {
                    let Some(e) = conns.get_mut(key) else { continue };
                    e.last = now;
                    if ev.is_read_closed() || ev.is_error() {
                        e.conn.note_peer_closed();
                    }
                    if e.conn.drive(site, None) == Io::Closed {
                        close(shared, &poll, conns.remove(key));
                    }
                }
            }
        }
        if now.duration_since(swept) >= sweep {
            swept = now;
            // (key, its head is late) of the connections to close.
            let stale: Vec<(usize, bool)> = conns
                .iter()
                .filter_map(|(k, e)| {
                    if e.conn.head_overdue(now, head) {
                        Some((k, true))
                    } else {
                        (now.duration_since(e.last) >= idle).then_some((k, false))
                    }
                })
                .collect();
            for (k, late) in stale {
                let mut e = conns.remove(k);
                if late {
                    e.conn.time_out(site);
                }
                close(shared, &poll, e);
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
