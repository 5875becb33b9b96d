//! TCP on the runtime, with real clients over loopback: the colored echo server of
//! `examples/echo.rs` under a thousand concurrent connections, half-closed and reset peers.

#[path = "../examples/echo.rs"]
mod echo;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use ochre::io::Listener;
use ochre::{Color, RunEnd, Runtime};

/// Starts an echo server on `workers` workers in a background run; returns the runtime, its
/// address and the run's thread.
fn start(
    workers: usize,
) -> (
    Arc<Runtime>,
    SocketAddr,
    std::thread::JoinHandle<ochre::RunReport>,
    Arc<std::sync::atomic::AtomicU64>,
) {
    let rt = Arc::new(Runtime::builder().workers(workers).pin(false).build().unwrap());
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let r = rt.clone();
    let run = std::thread::spawn(move || {
        r.run(Color(1), move || {
            tx.send(echo::serve(listener, Color(1)).unwrap()).unwrap();
        })
        .unwrap()
    });
    let accepted = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    (rt, addr, run, accepted)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

fn payload(conn: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (conn * 31 + i * 7) as u8).collect()
}

#[test]
fn echo_a_thousand_concurrent_connections_over_four_workers() {
    let (rt, addr, run, accepted) = start(4);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                // All 250 connections of this thread are open at once.
                let mut conns: Vec<(usize, TcpStream)> =
                    (0..250).map(|k| (t * 250 + k, connect(addr))).collect();
                for (id, s) in conns.iter_mut() {
                    s.write_all(&payload(*id, 3000)).unwrap();
                    s.shutdown(Shutdown::Write).unwrap(); // half-close: the server must finish
                }
                for (id, s) in conns.iter_mut() {
                    let mut back = Vec::new();
                    s.read_to_end(&mut back).unwrap();
                    assert_eq!(back, payload(*id, 3000), "connection {id} got other bytes back");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(accepted.load(Ordering::Relaxed), 1000);
    rt.handle().shutdown();
    let report = run.join().unwrap();
    assert_eq!(report.end, RunEnd::Shutdown);
    let busy = report.workers.iter().filter(|w| w.io_events > 0).count();
    // Served where the connections' colors are homed: four workers, or on a machine of fewer
    // CPUs as many as it has (`Config::home_on_every_worker`).
    let homes = rt.homes();
    assert!(
        busy >= homes.min(3),
        "connections were served on {busy} of {homes} homes: {:?}",
        report.workers
    );
    assert_eq!(report.total().watches, 1001, "the listener and every connection");
}

#[test]
fn reset_and_vanishing_peers_do_not_disturb_the_others() {
    let (rt, addr, run, _) = start(2);
    // Peers that reset mid-stream, or connect and vanish without a byte.
    for i in 0..50 {
        let mut s = connect(addr);
        if i % 2 == 0 {
            s.write_all(&payload(i, 100_000)).ok();
        }
        ochre::io::net::abort(s).unwrap();
    }
    // A well-behaved client is still served, completely.
    let mut s = connect(addr);
    s.write_all(&payload(7, 200_000)).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut back = Vec::new();
    s.read_to_end(&mut back).unwrap();
    assert_eq!(back, payload(7, 200_000));
    rt.handle().shutdown();
    let report = run.join().unwrap();
    assert_eq!(report.total().panics, 0);
}
