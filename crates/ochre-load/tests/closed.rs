//! The closed loop against a test server whose response delay is set: throughput follows
//! clients / (service time + think time), every request is accounted for, a dead server ends
//! the run with errors rather than a hang.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ochre::io::{self, Interest, Listener, Progress};
use ochre::{Color, Runtime};
use ochre_load::{closed_loop, ClosedLoop, ErrorKind, Phases, Target};

/// A server that answers every request after `delay`, on its own runtime; returns its address.
fn delaying_server(delay: Duration) -> (SocketAddr, Arc<Runtime>) {
    let rt = Arc::new(Runtime::builder().workers(1).pin(false).build().unwrap());
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(10));
    rt.handle()
        .serve(listener, Color(1), move |stream, _| {
            let color = Color(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            let stream = Arc::new(stream);
            let s = stream.clone();
            let mut buf = Vec::new();
            let _ = io::watch(&*stream, Interest::READ, color, move |ev| loop {
                match io::net::read_into(&*s, &mut buf, 4096) {
                    Ok(Progress::Done(_)) => {
                        // One response per complete request head.
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let close =
                                String::from_utf8_lossy(&buf[..end]).contains("Connection: close");
                            buf.drain(..end + 4);
                            let s2 = s.clone();
                            let _ = io::post_after(delay, color, move || {
                                let _ = io::net::write(
                                    &*s2,
                                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                                );
                                if close {
                                    let _ = s2.shutdown(std::net::Shutdown::Write);
                                }
                            });
                        }
                    }
                    Ok(Progress::WouldBlock) => return,
                    _ => {
                        ev.cancel();
                        return;
                    }
                }
            });
        })
        .unwrap();
    let r = rt.clone();
    std::thread::spawn(move || {
        let _ = r.run(Color(2), || {});
    });
    (addr, rt)
}

fn target(addr: SocketAddr) -> Target {
    Target { addr, host: "test".into(), paths: vec!["/a".into(), "/b".into()] }
}

#[test]
fn closed_loop_throughput_follows_clients_over_service_time() {
    let (addr, server) = delaying_server(Duration::from_millis(10));
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let model = ClosedLoop { clients: 4, requests_per_connection: 5, think: Duration::ZERO };
    let phases = Phases {
        warmup: Duration::from_millis(100),
        measure: Duration::from_millis(1000),
        timeout: Duration::from_secs(2),
    };
    let t0 = Instant::now();
    let report = closed_loop(&rt, &target(addr), &model, &phases).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5), "the run ends by itself");
    // 4 clients / 10 ms = 400 req/s (timers have 1 ms resolution: each response takes 10-12 ms).
    assert!((300.0..=420.0).contains(&report.throughput), "{}", report.table());
    let p50 = report.percentile(50.0).unwrap();
    assert!((9_000..=15_000).contains(&p50), "p50 {p50} us: {}", report.table());
    assert_eq!(report.errors, [0; 5], "{}", report.table());
    server.handle().shutdown();
}

#[test]
fn think_time_lowers_the_rate_as_the_closed_loop_law_says() {
    let (addr, server) = delaying_server(Duration::from_millis(5));
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let model =
        ClosedLoop { clients: 4, requests_per_connection: 150, think: Duration::from_millis(15) };
    let phases = Phases {
        warmup: Duration::from_millis(100),
        measure: Duration::from_secs(1),
        timeout: Duration::from_secs(2),
    };
    let report = closed_loop(&rt, &target(addr), &model, &phases).unwrap();
    // 4 / (5 ms + 15 ms) = 200 req/s.
    assert!((140.0..=215.0).contains(&report.throughput), "{}", report.table());
    server.handle().shutdown();
}

#[test]
fn a_dead_server_ends_the_run_with_connect_errors() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // closed again
    let rt = Runtime::builder().workers(1).pin(false).build().unwrap();
    let model = ClosedLoop { clients: 2, requests_per_connection: 10, think: Duration::ZERO };
    let phases = Phases {
        warmup: Duration::ZERO,
        measure: Duration::from_millis(300),
        timeout: Duration::from_millis(200),
    };
    let t0 = Instant::now();
    let report = closed_loop(&rt, &target(addr), &model, &phases).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(report.ok, 0);
    assert!(report.errors[ErrorKind::Connect as usize] > 0, "{}", report.table());
}
