//! SWS at the descriptor limit: a new client gets an answer within a second while kept-alive
//! connections hold every descriptor: 200 after the oldest idle connections are closed, or 503
//! with `Retry-After` (from the listener's reserve descriptor) when none is idle; and the server
//! serves normally once descriptors are back. Its own test binary: it lowers this process's
//! descriptor limit and fills the descriptor table itself, so that the server has exactly the
//! room the test decides.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ochre::io::Listener;
use ochre::{Color, Runtime};
use ochre_http::{Server, ServerConfig};
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Idle keep-alive connections that fill the server's descriptors.
const KEEPERS: usize = 20;
/// How long a new client may wait for its answer at the limit.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(64)
}

fn socket() -> OwnedFd {
    rustix::net::socket(rustix::net::AddressFamily::INET, rustix::net::SocketType::STREAM, None)
        .unwrap()
}

fn connect(fd: OwnedFd, addr: SocketAddr) -> TcpStream {
    rustix::net::connect(&fd, &addr).unwrap();
    let s = TcpStream::from(fd);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// Waits until the process's descriptor count holds still (the server closes the descriptors of
/// finished connections asynchronously: one closing after the table is filled would give the
/// server room the test did not plan).
fn settle() {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut last = (open_fds(), 0);
    while last.1 < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(30));
        let n = open_fds();
        last = if n == last.0 { (n, last.1 + 1) } else { (n, 0) };
    }
}

/// Opens `/dev/null` until the descriptor table is full.
fn fill() -> Vec<File> {
    std::iter::from_fn(|| File::open("/dev/null").ok()).collect()
}

/// Reads one response with a Content-Length from a kept-alive connection: (status, head).
fn read_one(s: &mut TcpStream) -> (u16, String) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let len: usize = head
                .to_ascii_lowercase()
                .lines()
                .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return (head[9..12].parse().unwrap(), head);
            }
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "closed mid-response");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A new client's whole exchange: its status, its head, and how long it took.
fn newcomer(fd: OwnedFd, addr: SocketAddr) -> (u16, String, Duration) {
    let start = Instant::now();
    let mut s = connect(fd, addr);
    s.set_read_timeout(Some(ANSWER_WITHIN * 3)).unwrap();
    s.write_all(b"GET /a.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = Vec::new();
    // A reset after the answer is acceptable; what was read before it is kept.
    let _ = s.read_to_end(&mut out);
    let took = start.elapsed();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, text, took)
}

#[test]
fn at_the_descriptor_limit_new_clients_are_answered_within_a_second() {
    let root = std::env::temp_dir().join(format!("sws-exhaustion-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "aaaa\n").unwrap();
    let rt = Arc::new(Runtime::builder().workers(2).pin(false).build().unwrap());
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = ServerConfig { root: root.clone(), ..ServerConfig::default() };
    let server = Server::new(cfg, Color(1)).unwrap();
    server.serve_with(&rt.handle(), listener).unwrap();
    let r = rt.clone();
    let run = std::thread::spawn(move || r.run(Color(2), || {}).unwrap());
    // Every worker's cache holds the file: serving it needs no descriptor.
    for _ in 0..20 {
        let (status, _, _) = newcomer(socket(), addr);
        assert_eq!(status, 200);
    }
    // Sockets first (connecting one takes no descriptor), then the table is filled, then
    // exactly KEEPERS descriptors are freed for the server.
    let keeper_fds: Vec<OwnedFd> = (0..KEEPERS).map(|_| socket()).collect();
    let newcomer_fds: Vec<OwnedFd> = (0..3).map(|_| socket()).collect();
    settle();
    let old = getrlimit(Resource::Nofile);
    let limit = (open_fds() + KEEPERS + 64) as u64;
    setrlimit(Resource::Nofile, Rlimit { current: Some(limit), maximum: old.maximum }).unwrap();
    let mut fillers = fill();
    fillers.truncate(fillers.len() - KEEPERS);
    let mut newcomer_fds = newcomer_fds.into_iter();

    // 1. Every descriptor is held by an idle keep-alive connection: the oldest are closed and
    // the new client is served.
    let mut keepers: Vec<TcpStream> = keeper_fds
        .into_iter()
        .map(|fd| {
            let mut s = connect(fd, addr);
            s.write_all(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            assert_eq!(read_one(&mut s).0, 200);
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    let (status, text, took) = newcomer(newcomer_fds.next().unwrap(), addr);
    assert_eq!(status, 200, "{text}");
    assert!(took < ANSWER_WITHIN, "served after {took:?}");
    eprintln!("at the limit, idle connections shed: 200 in {took:?}");
    let exhausted: u64 = rt.stats().iter().map(|s| s.accept_errors).sum();
    assert!(exhausted > 0, "the server had room: the test's descriptor accounting is off");
    let mut end = [0u8; 16];
    assert_eq!(keepers[0].read(&mut end).unwrap(), 0, "the oldest idle connection was closed");
    let youngest = keepers.last_mut().unwrap();
    youngest.write_all(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    assert_eq!(read_one(youngest).0, 200, "the youngest idle connection was kept");

    // 2. Nothing idle to close (every connection left has a request under way): 503 with
    // Retry-After, from the reserve descriptor.
    let survivors: Vec<TcpStream> = keepers
        .into_iter()
        .filter_map(|mut s| {
            s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
            let open = !matches!(s.read(&mut end), Ok(0));
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            open.then_some(s)
        })
        .collect();
    assert!(!survivors.is_empty() && survivors.len() < KEEPERS, "{} kept", survivors.len());
    let mut survivors: Vec<TcpStream> = survivors
        .into_iter()
        .map(|mut s| {
            s.write_all(b"GET /a.txt HTTP/1.1\r\nHo").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100)); // the shed connections' descriptors close
    fillers.extend(fill());
    let (status, text, took) = newcomer(newcomer_fds.next().unwrap(), addr);
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("\r\nRetry-After: 1\r\n"), "{text}");
    assert!(took < ANSWER_WITHIN, "answered after {took:?}");
    eprintln!("at the limit, nothing to shed: 503 in {took:?}");

    // 3. Descriptors come back: everything is served.
    drop(fillers);
    setrlimit(Resource::Nofile, old).unwrap();
    for s in &mut survivors {
        s.write_all(b"st: t\r\n\r\n").unwrap();
        assert_eq!(read_one(s).0, 200);
    }
    let (status, text, _) = newcomer(newcomer_fds.next().unwrap(), addr);
    assert_eq!(status, 200, "{text}");
    let statuses = server.status();
    drop(survivors);
    rt.handle().shutdown();
    let report = run.join().unwrap();
    std::fs::remove_dir_all(root).unwrap();
    assert_eq!(report.total().panics, 0);
    assert!(report.total().accept_errors >= 2, "{:?}", report.total());
    assert_eq!(statuses["status"]["503"], 1, "{statuses}");
}
