//! Every server answers a request head that does not arrive whole within `read_timeout` of its
//! first byte with 408 and closes the connection, as SWS does; an idle keep-alive connection is
//! not a late head (no 408: it waits for `keepalive_timeout`).
//!
//! The timeout is a behaviour here, not a speed: the tests wait for the server to act (bounded
//! by a generous client timeout so that a server that never answers fails instead of hanging),
//! and check only that it did not act before the head's time was up.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ochre_http::ServerConfig;
use ochre_servers::{loopback_listener, start, Arch, Plan, Running};

/// The head timeout of these tests: short, so that they stay short.
const HEAD: Duration = Duration::from_millis(300);
/// How long a client waits for anything before failing the test.
const PATIENCE: Duration = Duration::from_secs(20);

fn root(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ochre-408-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("a.txt"), b"hello, servers\n").unwrap();
    d
}

fn server(arch: Arch, root: &std::path::Path) -> Running {
    let config = ServerConfig {
        root: root.to_path_buf(),
        read_timeout: HEAD,
        keepalive_timeout: Duration::from_secs(30),
        ..ServerConfig::default()
    };
    start(arch, config, loopback_listener().unwrap(), &Plan::new(Vec::new(), 1)).unwrap()
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s
}

/// Reads until the server closes; panics on a timeout or a reset.
fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("the server closes the connection (no timeout, no reset)");
    got
}

/// The status code of the first response in `bytes`.
fn status(bytes: &[u8]) -> Option<u16> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    resp.parse(bytes).ok()?;
    resp.code
}

fn late_head_gets_408_and_close(arch: Arch) {
    let root = root(arch.name());
    let server = server(arch, &root);
    let mut s = connect(server.addr());
    let t = Instant::now();
    s.write_all(b"GET /a.txt HTTP/1.1\r\nHost: loc").unwrap();
    let got = read_to_close(&mut s);
    assert!(t.elapsed() >= HEAD, "{arch:?} answered a head before its time was up");
    assert_eq!(status(&got), Some(408), "{arch:?} sent {:?}", String::from_utf8_lossy(&got));
    // Served before, and still serving after: the timeout closed one connection only.
    let mut s = connect(server.addr());
    s.write_all(b"GET /a.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    assert_eq!(status(&read_to_close(&mut s)), Some(200), "{arch:?} after a 408");
    server.stop();
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn threads_408() {
    late_head_gets_408_and_close(Arch::Threads);
}

#[test]
fn symped_408() {
    late_head_gets_408_and_close(Arch::Symped);
}

#[test]
fn staged_408() {
    late_head_gets_408_and_close(Arch::Staged);
}

#[test]
fn hyper_408() {
    late_head_gets_408_and_close(Arch::Hyper);
}

#[test]
fn sws_408() {
    late_head_gets_408_and_close(Arch::Sws);
}

/// A keep-alive connection idle for longer than the head timeout is still served (hyper is left
/// out: its one timer bounds the idle wait too, see `hyper_server`).
#[test]
fn idle_keepalive_is_not_a_late_head() {
    let root = root("idle");
    for arch in [Arch::Threads, Arch::Symped, Arch::Staged, Arch::Sws] {
        let server = server(arch, &root);
        let mut s = connect(server.addr());
        let req = b"GET /a.txt HTTP/1.1\r\nHost: localhost\r\n\r\n";
        let mut buf = [0u8; 4096];
        for round in 0..2 {
            s.write_all(req).unwrap();
            let n = s.read(&mut buf).unwrap();
            assert_eq!(status(&buf[..n]), Some(200), "{arch:?}, round {round}");
            std::thread::sleep(HEAD * 2);
        }
        server.stop();
    }
    std::fs::remove_dir_all(root).unwrap();
}
