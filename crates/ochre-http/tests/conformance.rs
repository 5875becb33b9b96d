//! The conformance table: one row per framing and header rule of RFC 9110/9112 that SWS enforces,
//! each sent to a real server on 127.0.0.1, checking the status and whether the connection ends.
//!
//! Every row's bytes are followed on the same connection by a probe request
//! (`GET /probe.txt`, `Connection: close`). A row whose connection stays open gets two answers,
//! the second the probe's 200; a row answered with a close gets one answer only: whatever follows
//! it (a body hiding a request, the probe) is never served.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

/// One rule: what is sent, the status expected, whether the server closes after it.
struct Row {
    rule: &'static str,
    bytes: &'static str,
    status: u16,
    closes: bool,
}

const fn row(rule: &'static str, bytes: &'static str, status: u16, closes: bool) -> Row {
    Row { rule, bytes, status, closes }
}

const PROBE: &str = "GET /probe.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";

#[rustfmt::skip]
const TABLE: &[Row] = &[
    row("a valid request keeps the connection",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n", 200, false),
    row("a valid body is discarded and the connection kept",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nabcde", 200, false),
    // Content-Length (RFC 9112 §6.3 item 5, §6.2)
    row("two Content-Length (0 then 39) hiding a request: 400 and close",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nContent-Length: 39\r\n\r\n\
         GET /secret.txt HTTP/1.1\r\nHost: t\r\n\r\n", 400, true),
    row("two equal Content-Length: 400 and close",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nabcde",
        400, true),
    row("Content-Length differing in case only: 400 and close",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\ncontent-LENGTH: 5\r\n\r\n", 400, true),
    row("Content-Length as a list: 400",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 5\r\n\r\nabcde", 400, true),
    row("Content-Length with a sign: 400",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: +39\r\n\r\n", 400, true),
    row("negative Content-Length: 400",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n", 400, true),
    row("hexadecimal Content-Length: 400",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 0x5\r\n\r\n", 400, true),
    row("empty Content-Length: 400",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length:\r\n\r\n", 400, true),
    row("Content-Length beyond 64 bits: 413",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        413, true),
    // Transfer-Encoding (§6.1, §6.3 item 3)
    row("Transfer-Encoding with Content-Length: 400 and close",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n\
         0\r\n\r\n", 400, true),
    row("Transfer-Encoding alone (a body the server will not decode): 400 and close",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, true),
    row("Transfer-Encoding in HTTP/1.0: 400 and close",
        "GET /a.txt HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n",
        400, true),
    // Host (§3.2)
    row("HTTP/1.1 without Host: 400",
        "GET /a.txt HTTP/1.1\r\n\r\n", 400, true),
    row("two Host fields: 400",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nHost: u\r\n\r\n", 400, true),
    row("two equal Host fields: 400",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nHost: t\r\n\r\n", 400, true),
    row("Host with a space and a slash: 400",
        "GET /a.txt HTTP/1.1\r\nHost: a b/c\r\n\r\n", 400, true),
    row("Host with user information: 400",
        "GET /a.txt HTTP/1.1\r\nHost: user@t\r\n\r\n", 400, true),
    row("Host with a bad port: 400",
        "GET /a.txt HTTP/1.1\r\nHost: t:8a\r\n\r\n", 400, true),
    row("Host with an unclosed IP literal: 400",
        "GET /a.txt HTTP/1.1\r\nHost: [::1\r\n\r\n", 400, true),
    row("Host with an IP literal and a port is valid",
        "GET /a.txt HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", 200, false),
    row("an empty Host is valid",
        "GET /a.txt HTTP/1.1\r\nHost:\r\n\r\n", 200, false),
    row("HTTP/1.0 may omit Host (and closes: no keep-alive asked)",
        "GET /a.txt HTTP/1.0\r\n\r\n", 200, true),
    row("HTTP/1.0 with two Host fields: 400",
        "GET /a.txt HTTP/1.0\r\nHost: t\r\nHost: u\r\n\r\n", 400, true),
    // Message parsing (§2.2)
    row("an empty line before the request line is ignored",
        "\r\nGET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n", 200, false),
    row("whitespace between the request line and the first field: 400",
        "GET /a.txt HTTP/1.1\r\n Host: t\r\n\r\n", 400, true),
    row("two spaces in the request line: 400",
        "GET  /a.txt HTTP/1.1\r\nHost: t\r\n\r\n", 400, true),
    // Field syntax (§5.1, §5.2; RFC 9110 §5.1, §5.5)
    row("obs-fold: 400",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nX-Long: a\r\n folded\r\n\r\n", 400, true),
    row("obs-fold by a tab: 400",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nX-Long: a\r\n\tfolded\r\n\r\n", 400, true),
    row("whitespace between a field name and its colon: 400",
        "GET /a.txt HTTP/1.1\r\nHost : t\r\n\r\n", 400, true),
    row("a separator in a field name: 400",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nX(y): z\r\n\r\n", 400, true),
    row("a control character in a field name: 400",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nX\x01y: z\r\n\r\n", 400, true),
    row("an empty field name: 400",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\n: z\r\n\r\n", 400, true),
    row("a NUL in a field value: 400",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nX: a\x00b\r\n\r\n", 400, true),
    row("a bare CR in a field value: 400",
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nX: a\rb\r\n\r\n", 400, true),
];

/// One response: status, whether it said `Connection: close`.
#[derive(Debug)]
struct Answer {
    status: u16,
    close: bool,
}

/// Splits what the server sent into responses (each with a Content-Length body).
fn answers(mut bytes: &[u8]) -> Vec<Answer> {
    let mut out = Vec::new();
    while let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
        let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        let field = |name: &str| {
            head.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string())
        };
        let len: usize = field("content-length:").and_then(|v| v.parse().ok()).unwrap_or(0);
        let close = field("connection:").is_some_and(|v| v == "close");
        out.push(Answer { status, close });
        bytes = &bytes[(end + 4 + len).min(bytes.len())..];
    }
    out
}

fn exchange(addr: SocketAddr, bytes: &[u8]) -> Vec<Answer> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    let _ = s.shutdown(Shutdown::Write);
    let mut all = Vec::new();
    // A reset after the answer is acceptable (the answer was read by then); a timeout is not.
    if let Err(e) = s.read_to_end(&mut all) {
        assert_ne!(e.kind(), std::io::ErrorKind::WouldBlock, "the server hung");
    }
    answers(&all)
}

#[test]
fn every_framing_and_header_rule_is_enforced() {
    let root = std::env::temp_dir().join(format!("sws-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "aaaa\n").unwrap();
    std::fs::write(root.join("probe.txt"), "probe\n").unwrap();
    std::fs::write(root.join("secret.txt"), "smuggled\n").unwrap();
    let live = common::serve(&root);
    let addr = live.addr;

    let mut failures = Vec::new();
    for row in TABLE {
        let mut bytes = row.bytes.as_bytes().to_vec();
        bytes.extend_from_slice(PROBE.as_bytes());
        let got = exchange(addr, &bytes);
        let expected_answers = if row.closes { 1 } else { 2 };
        let ok = got.len() == expected_answers
            && got[0].status == row.status
            && got[0].close == row.closes
            && (row.closes || got[1].status == 200);
        if !ok {
            failures.push(format!(
                "{}: expected {} (closes: {}), got {got:?}",
                row.rule, row.status, row.closes
            ));
        }
    }
    let report = live.stop();
    std::fs::remove_dir_all(root).unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        TABLE.len(),
        failures.join("\n")
    );
    assert_eq!(report.total().panics, 0);
}
