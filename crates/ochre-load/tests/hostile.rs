//! The injector against hostile servers (small `std` servers on 127.0.0.1, one thread each): a
//! server that resets, stays silent, never accepts, sends garbage, closes early or streams a head
//! without end never hangs a run; every failure is counted under its kind, and the client's
//! buffer stays bounded. Each run is given a few seconds at most, or the test fails.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use ochre::Runtime;
use ochre_load::report::ERROR_KINDS;
use ochre_load::{closed_loop, ClosedLoop, ErrorKind, LoadReport, Phases, Target};

/// Serves every connection with `behave`, one at a time, on a thread of its own.
fn hostile(behave: impl FnMut(TcpStream) + Send + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut behave = behave;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            behave(stream);
        }
    });
    addr
}

/// Reads the request head (or gives up after a while).
fn read_request(s: &mut TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A 600 ms closed-loop run (2 clients, `timeout` per request) against `addr`, which must end
/// within `WITHIN`. Where the server answers at once, the timeout is long, so that a hostile
/// server thread starved of CPU for a moment on a busy machine is not counted a timeout.
fn run_against(addr: SocketAddr, timeout: Duration) -> LoadReport {
    run_with(addr, timeout, 2, 2)
}

/// `run_against` with `clients` clients on `workers` workers.
fn run_with(addr: SocketAddr, timeout: Duration, clients: usize, workers: usize) -> LoadReport {
    let within = WITHIN;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = Runtime::builder().workers(workers).pin(false).build().unwrap();
        let target =
            Target { addr, host: "test".into(), paths: vec!["/a".into()], mix: None, bodies: None };
        let model = ClosedLoop { clients, requests_per_connection: 10, think: Duration::ZERO };
        let phases = Phases::new(Duration::ZERO, Duration::from_millis(600), timeout);
        let _ = tx.send(closed_loop(&rt, &target, &model, &phases));
    });
    match rx.recv_timeout(within) {
        Ok(report) => report.unwrap(),
        Err(_) => panic!("the run did not end within {within:?}"),
    }
}

/// The report shows `kind` errors and no successes.
fn only(report: &LoadReport, kind: ErrorKind) {
    assert_eq!(report.ok, 0, "{}", report.table());
    assert!(report.errors[kind as usize] > 0, "no {kind:?}: {}", report.table());
    let others: u64 =
        (0..ERROR_KINDS).filter(|&k| k != kind as usize).map(|k| report.errors[k]).sum();
    assert_eq!(others, 0, "errors of other kinds: {:?} {}", report.errors, report.table());
}

/// Every run ends within this (600 ms of load, then at most one request timeout).
const WITHIN: Duration = Duration::from_secs(8);
/// The request timeout where the server answers at once.
const LONG: Duration = Duration::from_secs(2);

#[test]
fn a_server_that_resets_gives_reset_errors() {
    let addr = hostile(|mut s| {
        read_request(&mut s);
        ochre::io::net::abort(s).unwrap();
    });
    only(&run_against(addr, LONG), ErrorKind::Reset);
}

#[test]
fn a_server_that_closes_before_answering_gives_reset_errors() {
    let addr = hostile(|mut s| {
        read_request(&mut s);
        let _ = s.shutdown(std::net::Shutdown::Both);
    });
    only(&run_against(addr, LONG), ErrorKind::Reset);
}

#[test]
fn a_silent_server_gives_timeouts() {
    let mut held = Vec::new();
    let addr = hostile(move |mut s| {
        read_request(&mut s);
        held.push(s); // Open, never answered.
    });
    only(&run_against(addr, Duration::from_millis(200)), ErrorKind::Timeout);
}

#[test]
fn a_server_that_never_accepts_gives_connect_errors() {
    // A listener whose queue (one connection) is full and that never accepts: connects stall.
    let listener = ochre::io::Listener::bind_with_backlog("127.0.0.1:0", 1).unwrap();
    let addr = listener.local_addr().unwrap();
    let _fill: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let t0 = Instant::now();
    let report = run_against(addr, Duration::from_millis(200));
    drop(listener);
    assert!(t0.elapsed() < WITHIN);
    only(&report, ErrorKind::Connect);
}

/// A client's connect waits on its own: others on the same worker go on. Six clients on one
/// worker against a listener that never accepts, 150 ms per attempt over 600 ms: each client
/// fails about four times (a blocking connect would make them wait in turn: four in all).
#[test]
fn a_stalled_connect_does_not_hold_up_the_other_clients() {
    let listener = ochre::io::Listener::bind_with_backlog("127.0.0.1:0", 1).unwrap();
    let addr = listener.local_addr().unwrap();
    let _fill: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let report = run_with(addr, Duration::from_millis(150), 6, 1);
    drop(listener);
    only(&report, ErrorKind::Connect);
    let failed = report.errors[ErrorKind::Connect as usize];
    assert!(failed >= 12, "{failed} connect errors: the clients waited for each other");
}

#[test]
fn garbage_gives_malformed_errors() {
    let addr = hostile(|mut s| {
        read_request(&mut s);
        let _ = s.write_all(b"\x00\x01 not http at all\r\n\r\n");
    });
    only(&run_against(addr, LONG), ErrorKind::Malformed);
}

#[test]
fn an_answer_to_nothing_gives_malformed_errors() {
    // Two responses for one request: the second answers no request.
    let addr = hostile(|mut s| {
        read_request(&mut s);
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        let _ = s.write_all(&[&ok[..], &ok[..]].concat());
        std::thread::sleep(Duration::from_millis(20)); // both arrive before the next request
    });
    let report = run_against(addr, LONG);
    assert!(report.errors[ErrorKind::Malformed as usize] > 0, "{}", report.table());
    let others = report.errors.iter().sum::<u64>() - report.errors[ErrorKind::Malformed as usize];
    assert_eq!(others, 0, "{:?}", report.errors);
}

#[test]
fn closing_mid_head_or_mid_body_gives_short_body_errors() {
    for answer in [
        &b"HTTP/1.1 200 OK\r\nContent-Le"[..],
        &b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc"[..],
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"[..],
    ] {
        let addr = hostile(move |mut s| {
            read_request(&mut s);
            let _ = s.write_all(answer);
        });
        only(&run_against(addr, LONG), ErrorKind::ShortBody);
    }
}

#[test]
fn a_head_without_end_is_malformed_and_given_up_at_once() {
    // Streams one header line without end (64 KiB a write, up to 64 MiB) and records how long
    // the longest connection lasted before the client gave up and the writes failed. Reading on
    // until the request timeout (2 s) grows the client's buffer without bound, and parsing it
    // again at each read costs time quadratic in its length.
    let longest = Arc::new(AtomicU64::new(0));
    let l = longest.clone();
    let addr = hostile(move |mut s| {
        read_request(&mut s);
        let start = Instant::now();
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nX-Endless: ");
        let piece = vec![b'a'; 64 * 1024];
        let mut sent = 0;
        while sent < 64 << 20 && s.write_all(&piece).is_ok() {
            sent += piece.len();
        }
        l.fetch_max(start.elapsed().as_millis() as u64, Ordering::Relaxed);
    });
    let report = run_against(addr, LONG);
    only(&report, ErrorKind::Malformed);
    let longest = longest.load(Ordering::Relaxed);
    assert!(longest < 500, "a connection lasted {longest} ms: the client read on");
}

/// The test process's peak resident memory, in kB.
fn peak_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn an_endless_body_times_out_in_a_bounded_buffer() {
    // Announces 64 GiB, streams up to 256 MiB per connection, then holds it: the client frames
    // and drops the body as it comes instead of keeping it until the (400 ms) timeout.
    let mut held = Vec::new();
    let addr = hostile(move |mut s| {
        read_request(&mut s);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 68719476736\r\n\r\n");
        let piece = vec![b'b'; 64 * 1024];
        let mut sent = 0;
        while sent < 256 << 20 && s.write_all(&piece).is_ok() {
            sent += piece.len();
        }
        held.push(s);
    });
    let before = peak_kb();
    let report = run_against(addr, Duration::from_millis(400));
    let grown = peak_kb().saturating_sub(before);
    eprintln!("endless body: peak resident memory grew by {grown} kB");
    only(&report, ErrorKind::Timeout);
    assert_eq!(report.bytes, 0, "bytes of unfinished responses are not counted");
    assert!(grown < 64 * 1024, "the peak resident memory grew by {grown} kB");
}
