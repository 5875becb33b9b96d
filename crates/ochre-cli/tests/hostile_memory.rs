//! `ochre serve`'s memory under hostile clients, all at once: idle connections, slow-loris heads,
//! heads at the size limit, and pipelined floods of requests for a large file from clients that
//! never read. Every buffer of a connection is bounded (the head limit, the output high-water
//! mark that stops reading), so the server's peak resident memory stays bounded too; the test
//! prints it (VmHWM) and checks a generous bound, then that the server still serves.

use std::io::Write;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{free_port, get, stop, wait_ready};

const IDLE: usize = 2000;
const LORIS: usize = 1000;
const BIG_HEADS: usize = 200;
const FLOODS: usize = 20;
/// Bytes of pipelined requests each flooding client writes (or fewer, once the server stops
/// reading it).
const FLOOD_BYTES: usize = 16 << 20;
/// The bound checked: the server's own peak, far above what it needs (the figure is printed),
/// and below what reading the floods whole would take (320 MB).
const MAX_PEAK_KB: u64 = 128 * 1024;

/// A field of /proc/PID/status, in kB.
fn status_kb(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {text}"))
}

#[test]
fn memory_stays_bounded_under_hostile_clients() {
    let root = std::env::temp_dir().join(format!("ochre-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "hello\n").unwrap();
    std::fs::write(root.join("big.bin"), vec![7u8; 600_000]).unwrap();
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ochre"))
        .args(["serve", "--root", root.to_str().unwrap()])
        .args(["--listen", &format!("127.0.0.1:{port}"), "--workers", "2"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_ready(port, &mut child);
    let pid = child.id();
    let before = status_kb(pid, "VmRSS:");
    let connect = || {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_nonblocking(true).unwrap();
        s
    };
    let mut held = Vec::new();
    for _ in 0..IDLE {
        held.push(connect());
    }
    for _ in 0..LORIS {
        let mut s = connect();
        let _ = s.write_all(b"GET /index.html HTTP/1.1\r\nHost: t\r\nX-Slow: ");
        held.push(s);
    }
    let big_head = format!("GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}", "b".repeat(15_000));
    for _ in 0..BIG_HEADS {
        let mut s = connect();
        let _ = s.write_all(big_head.as_bytes());
        held.push(s);
    }
    let request = b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n".repeat(256);
    let mut flooded = 0;
    for _ in 0..FLOODS {
        let mut s = connect();
        let mut sent = 0;
        let until = Instant::now() + Duration::from_millis(300);
        while sent < FLOOD_BYTES && Instant::now() < until {
            match s.write(&request) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(_) => break,
            }
        }
        flooded += sent;
        held.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    let during = status_kb(pid, "VmRSS:");
    let peak = status_kb(pid, "VmHWM:");
    // Still serving, with every hostile connection open.
    let page = get(port, "/");
    drop(held);
    let _ = stop(child);
    std::fs::remove_dir_all(root).unwrap();
    eprintln!(
        "ochre serve RSS: {before} kB idle; {during} kB with {IDLE} idle, {LORIS} slow-loris, \
         {BIG_HEADS} 15 KB heads and {FLOODS} floods ({} MB of pipelined requests written); peak \
         {peak} kB",
        flooded >> 20
    );
    assert!(page.is_some_and(|p| p.starts_with("HTTP/1.1 200")), "not serving under the load");
    assert!(peak < MAX_PEAK_KB, "peak RSS {peak} kB");
}
