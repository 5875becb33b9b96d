//! SWS over loopback with a raw client: every status code, HEAD, ranges, conditional requests,
//! keep-alive, pipelining, path escapes, slow clients, resets, files changed while served.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ochre::io::Listener;
use ochre::{Color, Runtime};
use ochre_http::{Server, ServerConfig};

struct Fixture {
    rt: Arc<Runtime>,
    addr: SocketAddr,
    root: PathBuf,
    run: Option<std::thread::JoinHandle<ochre::RunReport>>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.rt.handle().shutdown();
        if let Some(r) = self.run.take() {
            let _ = r.join();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn root(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sws-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("dir/sub")).unwrap();
    std::fs::write(d.join("index.html"), "<h1>home</h1>\n").unwrap();
    std::fs::write(d.join("hello.txt"), "hello, world\n").unwrap();
    std::fs::write(d.join("dir/index.html"), "dir index\n").unwrap();
    std::fs::write(d.join("dir/sub/file.css"), "body{}\n").unwrap();
    let big: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(d.join("big.bin"), big).unwrap();
    std::fs::write(d.join("with space.txt"), "spaced\n").unwrap();
    std::fs::create_dir_all(d.join("odd %?#\r\nSet-Cookie: x")).unwrap();
    d
}

fn start(tag: &str, tweak: impl FnOnce(&mut ServerConfig)) -> Fixture {
    let root = root(tag);
    let mut cfg = ServerConfig { root: root.clone(), ..ServerConfig::default() };
    tweak(&mut cfg);
    let rt = Arc::new(Runtime::builder().workers(3).pin(false).build().unwrap());
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::new(cfg, Color(1)).unwrap();
    server.serve_with(&rt.handle(), listener).unwrap();
    let r = rt.clone();
    let run = std::thread::spawn(move || r.run(Color(2), || {}).unwrap());
    Fixture { rt, addr, root, run: Some(run) }
}

#[derive(Debug)]
struct Response {
    code: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Parses the responses in `bytes`; `heads` tells which were to HEAD requests (no body).
fn parse_all(mut bytes: &[u8], heads: &[bool]) -> Vec<Response> {
    let mut out = Vec::new();
    let mut i = 0;
    while !bytes.is_empty() {
        let end = bytes.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete head") + 4;
        let head = std::str::from_utf8(&bytes[..end]).unwrap();
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap();
        let code: u16 = status.split(' ').nth(1).unwrap().parse().unwrap();
        let mut headers = HashMap::new();
        for l in lines.filter(|l| !l.is_empty()) {
            let (k, v) = l.split_once(':').unwrap();
            headers.insert(k.to_ascii_lowercase(), v.trim().to_string());
        }
        let len: usize = if heads.get(i).copied().unwrap_or(false) || code == 304 {
            0
        } else {
            headers.get("content-length").map(|v| v.parse().unwrap()).unwrap_or(0)
        };
        let body = bytes[end..end + len].to_vec();
        bytes = &bytes[end + len..];
        out.push(Response { code, headers, body });
        i += 1;
    }
    out
}

/// Sends `raw` on a new connection, reads until the server closes it.
fn exchange(addr: SocketAddr, raw: &str, heads: &[bool]) -> Vec<Response> {
    let mut s = connect(addr);
    s.write_all(raw.as_bytes()).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    parse_all(&all, heads)
}

fn get(addr: SocketAddr, path: &str, extra: &str) -> Response {
    let raw = format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n");
    exchange(addr, &raw, &[false]).pop().unwrap()
}

#[test]
fn files_directories_and_metadata() {
    let f = start("basic", |_| {});
    let r = get(f.addr, "/hello.txt", "");
    assert_eq!(r.code, 200);
    assert_eq!(r.body, b"hello, world\n");
    assert_eq!(r.headers["content-type"], "text/plain; charset=utf-8");
    assert_eq!(r.headers["content-length"], "13");
    assert!(r.headers.contains_key("etag") && r.headers.contains_key("last-modified"));
    assert!(httpdate::parse_http_date(&r.headers["date"]).is_ok());
    assert_eq!(r.headers["connection"], "close");
    assert_eq!(get(f.addr, "/", "").body, b"<h1>home</h1>\n");
    assert_eq!(get(f.addr, "/dir/", "").body, b"dir index\n");
    let moved = get(f.addr, "/dir", "");
    assert_eq!((moved.code, moved.headers["location"].as_str()), (301, "/dir/"));
    // Never a protocol-relative address (an open redirect to a host named like a directory).
    let slashes = get(f.addr, "//dir", "");
    assert_eq!((slashes.code, slashes.headers["location"].as_str()), (301, "/dir/"));
    // Built from the encoded path: '%', '?', '#', space, CR and LF cannot break the header.
    let odd = get(f.addr, "/odd%20%25%3F%23%0D%0ASet-Cookie:%20x", "");
    assert_eq!(odd.code, 301);
    assert_eq!(odd.headers["location"], "/odd%20%25%3F%23%0D%0ASet-Cookie:%20x/");
    assert!(!odd.headers.contains_key("set-cookie"), "{:?}", odd.headers);
    assert_eq!(get(f.addr, "/dir/sub/", "").code, 403, "no listing");
    assert_eq!(
        get(f.addr, "/dir/sub/file.css", "").headers["content-type"],
        "text/css; charset=utf-8"
    );
    assert_eq!(get(f.addr, "/with%20space.txt", "").body, b"spaced\n");
    assert_eq!(get(f.addr, "/missing", "").code, 404);
    let big = get(f.addr, "/big.bin", "");
    assert_eq!(big.body.len(), 600_000, "large files go through sendfile");
    assert!(big.body.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
}

#[test]
fn head_conditional_and_ranges() {
    let f = start("cond", |_| {});
    let full = get(f.addr, "/big.bin", "");
    let etag = full.headers["etag"].clone();
    let lm = full.headers["last-modified"].clone();
    let head = exchange(
        f.addr,
        "HEAD /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        &[true],
    );
    assert_eq!((head[0].code, head[0].headers["content-length"].as_str()), (200, "13"));
    assert!(head[0].body.is_empty());
    assert_eq!(get(f.addr, "/big.bin", &format!("If-None-Match: {etag}\r\n")).code, 304);
    assert_eq!(get(f.addr, "/big.bin", "If-None-Match: \"other\"\r\n").code, 200);
    assert_eq!(get(f.addr, "/big.bin", &format!("If-Modified-Since: {lm}\r\n")).code, 304);
    let r = get(f.addr, "/big.bin", "Range: bytes=10-19\r\n");
    assert_eq!(r.code, 206);
    assert_eq!(r.headers["content-range"], "bytes 10-19/600000");
    assert_eq!(r.body, full.body[10..20]);
    let tail = get(f.addr, "/big.bin", "Range: bytes=-5\r\n");
    assert_eq!(tail.body, full.body[599_995..]);
    let open = get(f.addr, "/hello.txt", "Range: bytes=7-\r\n");
    assert_eq!(open.body, b"world\n");
    let bad = get(f.addr, "/hello.txt", "Range: bytes=100-200\r\n");
    assert_eq!((bad.code, bad.headers["content-range"].as_str()), (416, "bytes */13"));
    let stale = get(f.addr, "/hello.txt", "Range: bytes=0-4\r\nIf-Range: \"stale\"\r\n");
    assert_eq!((stale.code, stale.body.len()), (200, 13), "a stale If-Range gets the whole file");
}

#[test]
fn keep_alive_pipelining_and_http10() {
    let f = start("pipe", |_| {});
    let raw = "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n\
               HEAD /dir/ HTTP/1.1\r\nHost: t\r\n\r\n\
               GET /missing HTTP/1.1\r\nHost: t\r\n\r\n\
               GET /dir/sub/file.css HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let rs = exchange(f.addr, raw, &[false, true, false, false]);
    let codes: Vec<u16> = rs.iter().map(|r| r.code).collect();
    assert_eq!(codes, vec![200, 200, 404, 200], "in order, on one connection");
    assert_eq!(rs[3].body, b"body{}\n");
    // HTTP/1.0: closes unless asked to keep alive.
    let r = exchange(f.addr, "GET /hello.txt HTTP/1.0\r\n\r\n", &[false]);
    assert_eq!(r[0].code, 200);
    let mut s = connect(f.addr);
    s.write_all(b"GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.contains("Connection: keep-alive"), "{text}");
    s.write_all(b"GET /missing HTTP/1.0\r\n\r\n").unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(String::from_utf8_lossy(&rest).starts_with("HTTP/1.1 404"));
}

#[test]
fn errors_are_answered() {
    let f = start("errors", |c| {
        c.max_header_bytes = 2048;
        c.max_target_len = 512;
        c.max_body_bytes = 100;
    });
    let code = |raw: &str| exchange(f.addr, raw, &[false])[0].code;
    assert_eq!(code("garbage\r\n\r\n"), 400);
    assert_eq!(code("GET /hello.txt HTTP/1.1\r\n\r\n"), 400, "HTTP/1.1 needs Host");
    let post = exchange(
        f.addr,
        "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        &[false],
    );
    assert_eq!((post[0].code, post[0].headers["allow"].as_str()), (405, "GET, HEAD"));
    assert_eq!(code("GET /x HTTP/2.0\r\nHost: t\r\n\r\n"), 505);
    assert_eq!(code(&format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(600))), 414);
    assert_eq!(code(&format!("GET / HTTP/1.1\r\nHost: t\r\nX: {}\r\n\r\n", "b".repeat(3000))), 431);
    assert_eq!(code("GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n"), 413);
    for p in ["/../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/dir/..%2f..%2fetc"] {
        assert_eq!(get(f.addr, p, "").code, 403, "{p}");
    }
    assert_eq!(get(f.addr, "/a%00b", "").code, 400);
    // A small body is read and discarded, and the connection goes on.
    let raw = "GET /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nabcde\
               GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let rs = exchange(f.addr, raw, &[false, false]);
    assert_eq!(rs.iter().map(|r| r.code).collect::<Vec<_>>(), vec![200, 200]);
}

#[test]
fn symlinks_out_of_the_root_are_refused() {
    let f = start("links", |_| {});
    let outside = f.root.with_extension("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "secret").unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), f.root.join("leak")).unwrap();
    std::os::unix::fs::symlink(f.root.join("hello.txt"), f.root.join("inside")).unwrap();
    assert_eq!(get(f.addr, "/leak", "").code, 403);
    assert_eq!(get(f.addr, "/inside", "").body, b"hello, world\n");
    std::fs::remove_dir_all(outside).unwrap();
}

#[test]
fn a_changed_file_is_served_fresh_at_once() {
    let f = start("fresh", |_| {});
    assert_eq!(get(f.addr, "/hello.txt", "").body, b"hello, world\n");
    let p: &Path = &f.root.join("hello.txt");
    std::fs::write(p.with_extension("tmp"), "changed!\n").unwrap();
    std::fs::rename(p.with_extension("tmp"), p).unwrap();
    assert_eq!(get(f.addr, "/hello.txt", "").body, b"changed!\n");
    std::fs::remove_file(p).unwrap();
    assert_eq!(get(f.addr, "/hello.txt", "").code, 404);
}

/// Reads one response (with a Content-Length) from a keep-alive connection.
fn read_one(s: &mut TcpStream) -> Response {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= end + 4 + len {
                assert_eq!(buf.len(), end + 4 + len, "one response at a time");
                return parse_all(&buf, &[false]).pop().unwrap();
            }
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed mid-response");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Each change, made just before a request, is what that request gets: on a kept-alive
/// connection (the same worker each time) and on new ones (any worker), whether the file was
/// rewritten in place with the same size, or its directory replaced.
#[test]
fn every_change_is_served_at_once_by_every_worker() {
    let f = start("fresh-many", |_| {});
    let mut kept = connect(f.addr);
    for round in 0..150u32 {
        let body = format!("version {round:05}\n");
        if round % 10 == 9 {
            std::fs::remove_dir_all(f.root.join("dir")).unwrap();
            std::fs::create_dir_all(f.root.join("dir/sub")).unwrap();
        }
        std::fs::write(f.root.join("dir/sub/file.css"), &body).unwrap();
        kept.write_all(b"GET /dir/sub/file.css HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let r = read_one(&mut kept);
        assert_eq!((r.code, String::from_utf8_lossy(&r.body)), (200, body.as_str().into()));
        assert_eq!(get(f.addr, "/dir/sub/file.css", "").body, body.as_bytes(), "round {round}");
    }
}

#[test]
fn slow_clients_time_out_and_the_connection_cap_answers_503() {
    let f = start("slow", |c| {
        c.read_timeout = Duration::from_millis(200);
        c.max_connections = 2;
    });
    // A slow-loris client: a partial head, never finished.
    let mut loris = connect(f.addr);
    loris.write_all(b"GET /hello.txt HTTP/1.1\r\nHo").unwrap();
    let mut idle = connect(f.addr);
    std::thread::sleep(Duration::from_millis(50));
    // The cap is reached: a third connection gets 503.
    let busy = exchange(f.addr, "GET / HTTP/1.1\r\nHost: t\r\n\r\n", &[false]);
    assert_eq!(busy[0].code, 503);
    assert_eq!(busy[0].headers["retry-after"], "1");
    let mut got = Vec::new();
    loris.read_to_end(&mut got).unwrap();
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    // The connection that never sent a byte is closed at the same deadline; both slots return.
    let mut rest = Vec::new();
    let _ = idle.read_to_end(&mut rest);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(get(f.addr, "/hello.txt", "").code, 200, "slots freed");
}

#[test]
fn a_client_resetting_mid_response_does_not_hurt_the_server() {
    let f = start("reset", |_| {});
    for _ in 0..20 {
        let mut s = connect(f.addr);
        s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let mut buf = [0u8; 1000];
        let _ = s.read(&mut buf);
        ochre::io::net::abort(s).unwrap();
    }
    assert_eq!(get(f.addr, "/big.bin", "").body.len(), 600_000);
}

#[test]
fn access_log_and_status_endpoint() {
    let log = std::env::temp_dir().join(format!("sws-access-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let l = log.clone();
    let f = start("status", move |c| {
        c.access_log = Some(l);
        c.status_path = Some("/.ochre/status".into());
    });
    assert_eq!(get(f.addr, "/hello.txt", "").code, 200);
    assert_eq!(get(f.addr, "/missing", "").code, 404);
    let status = get(f.addr, "/.ochre/status", "");
    assert_eq!((status.code, status.headers["content-type"].as_str()), (200, "application/json"));
    let text = String::from_utf8(status.body).unwrap();
    assert!(text.contains("\"404\": 1"), "{text}");
    assert!(text.contains("\"requests\": 2"), "{text}");
    // Both earlier responses were written in full: both latencies are in the histogram.
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(j["latency_us"]["count"], 2, "{text}");
    // One entry per worker of the serving runtime (3), and they add up to the total.
    let per_worker = j["workers"].as_array().unwrap();
    assert_eq!(per_worker.len(), 3, "{text}");
    let sum: u64 = per_worker.iter().map(|w| w["requests"].as_u64().unwrap()).sum();
    assert_eq!(sum, 2, "{text}");
    assert!(j["latency_us"]["p100"].as_u64().unwrap() >= 1, "{text}");
    // Three pipelined requests on one connection: three latencies more (the status one too).
    let raw =
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /index.html HTTP/1.1\r\nHost: t\r\n\r\n\
               GET /big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    assert_eq!(exchange(f.addr, raw, &[]).len(), 3);
    let again = get(f.addr, "/.ochre/status", "");
    let j: serde_json::Value = serde_json::from_slice(&again.body).unwrap();
    assert_eq!(j["latency_us"]["count"], 6, "{j}");
    let lines = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 7, "{lines:?}");
    assert!(lines[0].starts_with("127.0.0.1 - - ["), "{}", lines[0]);
    assert!(lines[0].ends_with("\"GET /hello.txt HTTP/1.1\" 200 13"), "{}", lines[0]);
    assert!(lines[1].ends_with("\"GET /missing HTTP/1.1\" 404 0"), "{}", lines[1]);
    std::fs::remove_file(log).unwrap();
}
