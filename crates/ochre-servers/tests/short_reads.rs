//! Every server stops reading after a short read and waits for the next edge of readiness (one
//! system call a request fewer, as nginx): these tests check that nothing is lost by it.
//!
//! - A request head split across two writes (the server reads the first part short, then must
//!   be woken by the rest) is served, with the pipelined request that came with its rest, and
//!   the connection goes on serving.
//! - Requests that fill more than one read (pipelined, beyond a read's chunk) are all served.
//! - A request sent with the client's end (`shutdown(Write)` right after it, so the data and the
//!   end of file often reach the server in one edge) is answered and the connection closed at
//!   once, not after the keep-alive timeout: a hang-up event makes the server read on to the
//!   end of file, which no later edge would announce.
//!
//! Waits are bounded by a client timeout well below the servers' keep-alive timeout, so a
//! server that missed an edge fails the test instead of hanging it.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use ochre_http::ServerConfig;
use ochre_servers::{loopback_listener, start, Arch, Plan, Running};

mod common;
use common::read_replies;

/// How long a client waits for anything before failing the test (the servers' keep-alive
/// timeout is 60 s: a connection left open until then fails here).
const PATIENCE: Duration = Duration::from_secs(10);
/// Served by every test.
const BODY: &[u8] = b"hello, short reads\n";
const REQUEST: &[u8] = b"GET /a.txt HTTP/1.1\r\nHost: localhost\r\n\r\n";

fn root(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ochre-short-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("a.txt"), BODY).unwrap();
    d
}

/// Every architecture here (hyper reads as hyper does; it is checked all the same).
fn servers(root: &std::path::Path) -> Vec<(Arch, Running)> {
    let config = ServerConfig {
        root: root.to_path_buf(),
        keepalive_timeout: Duration::from_secs(60),
        read_timeout: Duration::from_secs(60),
        ..ServerConfig::default()
    };
    Arch::ALL
        .into_iter()
        .map(|arch| {
            let listener = loopback_listener().unwrap();
            (arch, start(arch, config.clone(), listener, &Plan::new(Vec::new(), 2)).unwrap())
        })
        .collect()
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Reads `n` responses (status and body) from `s`, and nothing beyond them.
fn responses(s: &mut TcpStream, n: usize, what: &str) -> Vec<(u16, Vec<u8>)> {
    let (replies, rest) = read_replies(s, n, false, what);
    assert!(rest.is_empty(), "{what}: bytes beyond the responses");
    replies.into_iter().map(|r| (r.status, r.body)).collect()
}

#[test]
fn a_head_split_across_reads_is_served_with_the_request_pipelined_behind_it() {
    let root = root("split");
    for (arch, server) in servers(&root) {
        let mut s = connect(server.addr());
        for round in 0..3 {
            let what = format!("{arch:?}, round {round}");
            let (first, rest) = REQUEST.split_at(17);
            s.write_all(first).unwrap();
            // The server reads the first part alone (a short read), and must be woken again.
            std::thread::sleep(Duration::from_millis(30));
            let mut more = rest.to_vec();
            more.extend_from_slice(REQUEST);
            s.write_all(&more).unwrap();
            for (code, body) in responses(&mut s, 2, &what) {
                assert_eq!((code, body.as_slice()), (200, BODY), "{what}");
            }
        }
        server.stop();
    }
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn requests_beyond_one_read_are_all_served() {
    let root = root("many");
    // 600 requests: about 24 KiB, more than one 16 KiB read.
    let n = 600;
    let all: Vec<u8> = REQUEST.repeat(n);
    for (arch, server) in servers(&root) {
        let mut s = connect(server.addr());
        s.write_all(&all).unwrap();
        let got = responses(&mut s, n, &format!("{arch:?}"));
        assert!(got.iter().all(|(code, body)| *code == 200 && body == BODY), "{arch:?}");
        server.stop();
    }
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn a_request_sent_with_the_clients_end_is_answered_and_the_connection_closed() {
    let root = root("fin");
    for (arch, server) in servers(&root) {
        // Many at once, so that the server is often busy when a request and its end of file
        // both arrive (one edge for both).
        let mut clients: Vec<TcpStream> = (0..32).map(|_| connect(server.addr())).collect();
        for s in &mut clients {
            s.write_all(REQUEST).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
        }
        for (i, s) in clients.iter_mut().enumerate() {
            let what = format!("{arch:?}, client {i}");
            let got = responses(s, 1, &what);
            assert_eq!((got[0].0, got[0].1.as_slice()), (200, BODY), "{what}");
            // The server closes: end of file, well before its keep-alive timeout.
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap_or_else(|e| panic!("{what}: not closed ({e})"));
            assert!(rest.is_empty(), "{what}");
        }
        server.stop();
    }
    std::fs::remove_dir_all(root).unwrap();
}
