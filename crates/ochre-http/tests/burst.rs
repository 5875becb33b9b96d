//! A connection storm: 3000 connects issued at once to SWS on loopback, each timed from its
//! `connect` call to its completion. A connect whose SYN finds the accept queue full is dropped
//! by the kernel and retried after the 1 s SYN timeout, so a short listen backlog shows as
//! connects of a second or more; with the system's maximum (the default) none takes 100 ms.
//! Its own test binary: it raises this process's descriptor limit.

mod common;

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::event::epoll::{self, CreateFlags, EventData, EventFlags};
use rustix::net::{AddressFamily, SocketFlags, SocketType};

const CONNECTS: usize = 3000;
const SLOW: Duration = Duration::from_millis(100);

/// Issues `CONNECTS` non-blocking connects to `addr` as fast as it can, noting each one's
/// completion as soon as epoll reports it; returns each connect's duration (`None`: not done
/// after 3 s) and the sockets (kept open until the caller drops them).
fn storm(addr: SocketAddr) -> (Vec<Option<Duration>>, Vec<OwnedFd>) {
    let poll = epoll::create(CreateFlags::CLOEXEC).unwrap();
    let mut started = Vec::with_capacity(CONNECTS);
    let mut took: Vec<Option<Duration>> = vec![None; CONNECTS];
    let mut sockets = Vec::with_capacity(CONNECTS);
    let mut events = Vec::with_capacity(1024);
    let mut harvest = |took: &mut Vec<Option<Duration>>, started: &[Instant], wait_ms: i64| {
        events.clear();
        let ts = rustix::time::Timespec { tv_sec: 0, tv_nsec: wait_ms * 1_000_000 };
        let _ = epoll::wait(&poll, rustix::buffer::spare_capacity(&mut events), Some(&ts));
        let now = Instant::now();
        for ev in events.iter() {
            let i = ev.data.u64() as usize;
            took[i].get_or_insert(now - started[i]);
        }
    };
    for i in 0..CONNECTS {
        let fd = rustix::net::socket_with(
            AddressFamily::INET,
            SocketType::STREAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        started.push(Instant::now());
        match rustix::net::connect(&fd, &addr) {
            Ok(()) => took[i] = Some(started[i].elapsed()),
            Err(rustix::io::Errno::INPROGRESS) => {
                let flags = EventFlags::OUT | EventFlags::ET;
                epoll::add(&poll, &fd, EventData::new_u64(i as u64), flags).unwrap();
            }
            Err(e) => panic!("connect {i}: {e}"),
        }
        sockets.push(fd);
        harvest(&mut took, &started, 0);
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while took.iter().any(Option::is_none) && Instant::now() < deadline {
        harvest(&mut took, &started, 10);
    }
    (took, sockets)
}

#[test]
fn a_burst_of_3000_connects_has_no_connect_slower_than_100_ms() {
    // Both ends of every connection live in this process.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let want = (2 * CONNECTS + 200) as u64;
    if limit.current.is_some_and(|c| c < want) {
        let raised =
            rustix::process::Rlimit { current: limit.maximum.map(|m| m.min(want * 2)), ..limit };
        rustix::process::setrlimit(rustix::process::Resource::Nofile, raised).unwrap();
    }
    let root = std::env::temp_dir().join(format!("sws-burst-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "hi\n").unwrap();
    let live = common::serve(&root);
    let addr = live.addr;

    let (took, sockets) = storm(addr);
    let unfinished = took.iter().filter(|t| t.is_none()).count();
    let slow = took.iter().flatten().filter(|&&t| t >= SLOW).count();
    let max = took.iter().flatten().max().copied().unwrap_or_default();
    eprintln!("slowest of {CONNECTS} connects: {max:?}");
    drop(sockets);
    live.stop();
    std::fs::remove_dir_all(root).unwrap();
    assert_eq!(
        (unfinished, slow),
        (0, 0),
        "{unfinished} connects unfinished after 3 s, {slow} of {CONNECTS} took 100 ms or more \
         (slowest {max:?})"
    );
}
