//! Every architecture serves the same bytes for the same requests: a small text file, a 1 KiB
//! file, a file above the in-memory limit (sent with `sendfile`), a directory's index, a missing
//! file, HEAD, and two requests pipelined in one write on a keep-alive connection.
//!
//! The servers built on `ochre_http::site` (threads, symped, staged) must send exactly SWS's
//! responses apart from the `Date` value. hyper + tower-http has its own headers and error
//! pages: for it the status, the body of files, `Content-Length` and the media type must agree.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ochre_http::ServerConfig;
use ochre_servers::{loopback_listener, start, Arch, Plan};

mod common;
use common::{read_replies, Reply};

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

fn root(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ochre-servers-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("dir")).unwrap();
    std::fs::write(d.join("a.txt"), b"hello, servers\n").unwrap();
    std::fs::write(d.join("1k.bin"), vec![b'x'; 1024]).unwrap();
    let big: Vec<u8> = (0..600 * 1024).map(|i| (i % 251) as u8).collect();
    std::fs::write(d.join("big.bin"), big).unwrap();
    std::fs::write(d.join("dir/index.html"), b"<p>index</p>\n").unwrap();
    d
}

/// Sends `request` in one write and reads `n` responses (bodies as `Content-Length` says, none
/// for `head`).
fn exchange(addr: SocketAddr, request: &str, n: usize, head: bool) -> Vec<Reply> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    read_replies(&mut s, n, head, request).0
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n")
}

/// The requests, each with how many responses it expects and whether they are to HEAD.
fn requests() -> Vec<(String, usize, bool)> {
    vec![
        (get("/a.txt"), 1, false),
        (get("/1k.bin"), 1, false),
        (get("/big.bin"), 1, false),
        (get("/dir/"), 1, false),
        (get("/missing.txt"), 1, false),
        ("HEAD /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n".into(), 1, true),
        (format!("{}{}", get("/1k.bin"), get("/a.txt")), 2, false),
    ]
}

fn replies_of(arch: Arch, root: &Path) -> Vec<Vec<Reply>> {
    let config = ServerConfig { root: root.to_path_buf(), ..ServerConfig::default() };
    let plan = Plan::new(Vec::new(), 2);
    let server = start(arch, config, loopback_listener().unwrap(), &plan).unwrap();
    let out = requests().iter().map(|(r, n, head)| exchange(server.addr(), r, *n, *head)).collect();
    server.stop();
    out
}

#[test]
fn every_server_sends_what_sws_sends() {
    let root = root("same");
    let sws = replies_of(Arch::Sws, &root);
    let big = std::fs::read(root.join("big.bin")).unwrap();
    assert_eq!(sws[2][0].body, big, "SWS's large file");
    assert_eq!(sws[4][0].status, 404);
    assert_eq!(sws[5][0].header("content-length"), Some("614400"));
    assert_eq!(sws[6].len(), 2);
    for arch in [Arch::Threads, Arch::Symped, Arch::Staged, Arch::Hyper] {
        let theirs = replies_of(arch, &root);
        for (i, (want, got)) in sws.iter().zip(&theirs).enumerate() {
            assert_eq!(want.len(), got.len(), "{arch:?}, request {i}");
            for (w, g) in want.iter().zip(got) {
                let what = format!("{arch:?}, request {i}: {:?}", requests()[i].0);
                assert_eq!(w.status, g.status, "{what}");
                if arch == Arch::Hyper {
                    if w.status == 200 {
                        assert_eq!(w.body, g.body, "{what}");
                        assert_eq!(
                            w.header("content-length"),
                            g.header("content-length"),
                            "{what}"
                        );
                        let essence = |r: &Reply| {
                            r.header("content-type")
                                .map(|v| v.split(';').next().unwrap().trim().to_string())
                        };
                        assert_eq!(essence(w), essence(g), "{what}");
                    }
                } else {
                    assert_eq!(w.headers, g.headers, "{what}");
                    assert_eq!(w.body, g.body, "{what}");
                }
            }
        }
    }
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn servers_stop_with_connections_open() {
    let root = root("stop");
    for arch in Arch::ALL {
        let config = ServerConfig { root: root.clone(), ..ServerConfig::default() };
        let server =
            start(arch, config, loopback_listener().unwrap(), &Plan::new(Vec::new(), 1)).unwrap();
        // An idle keep-alive connection, and one with half a request: stopping must not wait
        // for either.
        let idle = exchange(server.addr(), &get("/a.txt"), 1, false);
        assert_eq!(idle[0].status, 200);
        let mut half = TcpStream::connect(server.addr()).unwrap();
        half.write_all(b"GET /a.txt HTTP/1.1\r\nHo").unwrap();
        let t = std::time::Instant::now();
        server.stop();
        assert!(t.elapsed() < Duration::from_secs(8), "{arch:?} took {:?} to stop", t.elapsed());
    }
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn copies_serve_alike_however_connections_are_spread() {
    use ochre_servers::ncopy::{start_copies, Balance};
    let root = root("copies");
    let config = ServerConfig { root: root.clone(), ..ServerConfig::default() };
    let want = std::fs::read(root.join("1k.bin")).unwrap();
    for arch in Arch::ALL {
        for balance in [Balance::Kernel, Balance::LoadAware] {
            // Two copies sharing CPU 0 (every machine has it... unless this process may not use
            // it: then the first allowed CPU).
            let cpu = ochre::topology::allowed_cpus().unwrap()[0];
            let topology = ochre::topology::Topology::flat(vec![cpu]);
            let server = start_copies(arch, &config, &topology, &[cpu], 2, 1, balance).unwrap();
            for _ in 0..6 {
                let r = exchange(server.addr(), &get("/1k.bin"), 1, false);
                assert_eq!((r[0].status, &r[0].body), (200, &want), "{arch:?} {balance:?}");
            }
            server.stop();
        }
    }
    std::fs::remove_dir_all(root).unwrap();
}
