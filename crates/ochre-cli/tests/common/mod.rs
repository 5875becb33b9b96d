//! What the tests that run `ochre serve` as a process share: a free port, a GET, waiting for
//! the server to answer, stopping it as a user does (SIGTERM).
// Each test binary uses some of these.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Child;
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    Some(String::from_utf8_lossy(&out).into_owned())
}

pub fn wait_ready(port: u16, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(port, "/").is_none() {
        assert!(child.try_wait().unwrap().is_none(), "the server exited early");
        assert!(Instant::now() < deadline, "the server did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn stop(mut child: Child) -> std::process::ExitStatus {
    // SAFETY: sending SIGTERM to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the server did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}
