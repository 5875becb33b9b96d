//! A listener that runs out of descriptors backs off, counts it, and recovers when descriptors
//! are freed. Its own test binary: it lowers this process's descriptor limit.

#[path = "../examples/echo.rs"]
mod echo;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ochre::io::Listener;
use ochre::{Color, Runtime};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(64)
}

#[test]
fn a_listener_out_of_descriptors_backs_off_and_recovers() {
    let rt = Arc::new(Runtime::builder().workers(2).pin(false).build().unwrap());
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let r = rt.clone();
    let run = std::thread::spawn(move || {
        r.run(Color(1), move || tx.send(echo::serve(listener, Color(1)).unwrap()).unwrap()).unwrap()
    });
    let accepted = rx.recv_timeout(Duration::from_secs(10)).unwrap();

    // The client sockets are made first; then the limit leaves the server room for only a few
    // connections (connecting a socket takes no new descriptor).
    let sockets: Vec<_> = (0..30)
        .map(|_| {
            rustix::net::socket(
                rustix::net::AddressFamily::INET,
                rustix::net::SocketType::STREAM,
                None,
            )
            .unwrap()
        })
        .collect();
    let limit = (open_fds() + 5) as u64;
    let old = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit { current: Some(limit), maximum: old.maximum },
    )
    .unwrap();
    let mut clients: Vec<(usize, TcpStream)> = sockets
        .into_iter()
        .enumerate()
        .map(|(i, fd)| {
            rustix::net::connect(&fd, &addr).unwrap();
            let s = TcpStream::from(fd);
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            (i, s)
        })
        .collect();
    // Wait until the server hits the limit.
    let deadline = Instant::now() + Duration::from_secs(10);
    while rt.stats().iter().map(|s| s.accept_errors).sum::<u64>() == 0 {
        assert!(Instant::now() < deadline, "the server never ran out of descriptors");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Every client is served eventually: each one done frees a server descriptor.
    for (i, s) in clients.iter_mut() {
        let msg = format!("client {i}");
        s.write_all(msg.as_bytes()).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut back = String::new();
        s.read_to_string(&mut back).unwrap();
        assert_eq!(back, msg);
    }
    drop(clients);
    rustix::process::setrlimit(rustix::process::Resource::Nofile, old).unwrap();
    assert_eq!(accepted.load(std::sync::atomic::Ordering::Relaxed), 30);
    rt.handle().shutdown();
    let report = run.join().unwrap();
    let t = report.total();
    assert!(t.accept_errors >= 1, "{t:?}");
    assert!(t.accept_errors < 2_000, "backed off instead of spinning: {} errors", t.accept_errors);
}
