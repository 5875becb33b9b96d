//! Arbitrary bytes through the real parse-and-respond path, over real sockets: the server answers
//! with well-formed responses or closes, never panics, never hangs, and keeps serving.
//!
//! Four generators: random bytes; request-like lines; valid requests mutated at random (bytes
//! flipped, inserted, deleted, lines duplicated or cut, letters' case changed); and requests with a
//! framing field (Content-Length, Host, Transfer-Encoding) duplicated or malformed in front of a
//! hidden request, which must get one 400 and a close, the hidden request never served. Every
//! answer is parsed (`httparse`): a status line, a Content-Length, exactly that many body bytes,
//! nothing after the last response.
//!
//! In CI: 1000 cases per generator, 4000 exchanges in about a second (release build, two shared
//! cores). `PROPTEST_CASES=N` runs N per generator instead, for a longer hunt: 30000 (120,000
//! hostile requests) took 24 s and found nothing.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ochre::io::Listener;
use ochre::{Color, Runtime};
use ochre_http::{Server, ServerConfig};
use proptest::prelude::*;

struct Live {
    addr: SocketAddr,
    rt: Arc<Runtime>,
}

fn server() -> &'static Live {
    static LIVE: OnceLock<Live> = OnceLock::new();
    LIVE.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("sws-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::write(root.join("index.html"), "index\n").unwrap();
        std::fs::write(root.join("a.txt"), "aaaa\n").unwrap();
        let cfg = ServerConfig {
            root,
            read_timeout: Duration::from_millis(500),
            max_header_bytes: 4096,
            ..ServerConfig::default()
        };
        let rt = Arc::new(Runtime::builder().workers(2).pin(false).build().unwrap());
        let listener = Listener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        Server::new(cfg, Color(1)).unwrap().serve_with(&rt.handle(), listener).unwrap();
        let r = rt.clone();
        std::thread::spawn(move || r.run(Color(2), || {}).unwrap());
        Live { addr, rt }
    })
}

/// Sends `bytes`, half-closes, reads everything back.
fn send(bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(server().addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(bytes);
    let _ = s.shutdown(Shutdown::Write);
    let mut out = Vec::new();
    if let Err(e) = s.read_to_end(&mut out) {
        // A reset after an error response is acceptable; a timeout is not.
        assert_ne!(e.kind(), std::io::ErrorKind::WouldBlock, "the server hung on {bytes:?}");
    }
    out
}

/// The statuses of the responses in `out`, if it is a sequence of complete responses, each
/// with a Content-Length and exactly that body (HEAD answers aside: their heads only), and
/// nothing else. Empty: closed without a word (allowed for an incomplete request).
fn responses(mut out: &[u8]) -> Result<Vec<u16>, String> {
    let mut codes = Vec::new();
    while !out.is_empty() {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut r = httparse::Response::new(&mut headers);
        let head = match r.parse(out) {
            Ok(httparse::Status::Complete(n)) => n,
            other => return Err(format!("response {}: {other:?}", codes.len())),
        };
        if r.version != Some(1) {
            return Err(format!("response {}: not HTTP/1.1", codes.len()));
        }
        let code = r.code.unwrap_or(0);
        let length = r
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<usize>().ok());
        let Some(length) = length.or((code == 304).then_some(0)) else {
            return Err(format!("response {}: no Content-Length", codes.len()));
        };
        // A HEAD answer has the length of the body it does not carry: take the body only if
        // what follows is not the next response.
        let rest = &out[head..];
        let body = if rest.len() >= length && !rest.starts_with(b"HTTP/1.1 ") { length } else { 0 };
        out = &rest[body..];
        codes.push(code);
    }
    Ok(codes)
}

fn well_formed(out: &[u8]) -> bool {
    responses(out).is_ok()
}

/// Valid requests to mutate (several pipelined, a HEAD, a range, a body).
const VALID: &[&str] = &[
    "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "HEAD /d/ HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\n\r\n",
    "GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /a.txt HTTP/1.0\r\n\r\n",
    "GET /d HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"a\"\r\nConnection: close\r\n\r\n",
];

/// One random edit of a request.
#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize, usize),
    DuplicateLine(usize),
    Cut(usize),
    FlipCase(usize),
}

fn mutate(mut bytes: Vec<u8>, edits: &[Mutation]) -> Vec<u8> {
    for m in edits {
        let n = bytes.len().max(1);
        match *m {
            Mutation::Flip(i, b) => {
                if let Some(x) = bytes.get_mut(i % n) {
                    *x ^= b | 1;
                }
            }
            Mutation::Insert(i, b) => bytes.insert((i % n).min(bytes.len()), b),
            Mutation::Delete(i, k) => {
                let at = (i % n).min(bytes.len());
                let end = (at + k % 8).min(bytes.len());
                bytes.drain(at..end);
            }
            Mutation::DuplicateLine(i) => {
                let lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
                if let Some(line) = lines.get(i % lines.len().max(1)) {
                    let line = line.to_vec();
                    let at = lines[..i % lines.len()].iter().map(|l| l.len()).sum::<usize>();
                    bytes.splice(at..at, line);
                }
            }
            Mutation::Cut(i) => bytes.truncate(i % n),
            Mutation::FlipCase(i) => {
                if let Some(x) = bytes.get_mut(i % n) {
                    if x.is_ascii_alphabetic() {
                        *x ^= 0x20;
                    }
                }
            }
        }
    }
    bytes
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), prop_oneof![any::<u8>(), Just(b'\r'), Just(b'\n'), Just(b' '), Just(0u8)])
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(i, k)| Mutation::Delete(i, k)),
        any::<usize>().prop_map(Mutation::DuplicateLine),
        any::<usize>().prop_map(Mutation::Cut),
        any::<usize>().prop_map(Mutation::FlipCase),
    ]
}

/// Header lines whose framing is ambiguous or malformed: Content-Length duplicated (equal or
/// different values), signed or listed, with Transfer-Encoding; two Hosts; a Host that is not
/// a host.
fn bad_framing() -> impl Strategy<Value = Vec<String>> {
    let length = prop_oneof!["[0-9]{1,3}", Just("+5".to_string()), Just("5, 5".to_string())];
    let host = || "Host: x".to_string();
    prop_oneof![
        (length.clone(), length.clone()).prop_map(move |(a, b)| vec![
            format!("Content-Length: {a}"),
            host(),
            format!("Content-Length: {b}")
        ]),
        length.prop_map(move |a| vec![
            format!("Content-Length: {a}"),
            host(),
            "Transfer-Encoding: chunked".into()
        ]),
        "[a-z]{1,8}".prop_map(move |h| vec![host(), format!("Host: {h}")]),
        "[ /@\\[\\]<>{}|\"]{1,3}".prop_map(|h| vec![format!("Host: a{h}b")]),
        Just(vec![host(), "Content-Length: +0".to_string()]),
    ]
}

fn request_like() -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        Just("GET".to_string()),
        Just("HEAD".to_string()),
        Just("POST".to_string()),
        Just("G\u{0}T".to_string()),
        "[A-Z]{1,8}",
    ];
    let target = prop_oneof![
        Just("/".to_string()),
        Just("/a.txt".to_string()),
        Just("/d".to_string()),
        Just("/../a.txt".to_string()),
        "/[a-z%./0-9]{0,40}",
        ".{0,30}",
    ];
    let version = prop_oneof![
        Just("HTTP/1.1".to_string()),
        Just("HTTP/1.0".to_string()),
        Just("HTTP/2.0".to_string()),
        "HTTP/[0-9.]{1,4}",
    ];
    let header = prop_oneof![
        Just("Host: x".to_string()),
        Just("Range: bytes=0-1".to_string()),
        Just("Range: bytes=9-1".to_string()),
        Just("Content-Length: 3".to_string()),
        Just("Content-Length: -1".to_string()),
        Just("Transfer-Encoding: chunked".to_string()),
        Just("If-None-Match: *".to_string()),
        Just("Connection: close".to_string()),
        "[A-Za-z-]{1,12}: [ -~]{0,40}",
    ];
    (method, target, version, proptest::collection::vec(header, 0..6), any::<bool>()).prop_map(
        |(m, t, v, hs, twice)| {
            let mut r = format!("{m} {t} {v}\r\n{}\r\n\r\n", hs.join("\r\n"));
            if twice {
                r = r.repeat(2);
            }
            r.into_bytes()
        },
    )
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_get_an_answer_or_a_close(bytes in proptest::collection::vec(any::<u8>(), 0..3000)) {
        let out = send(&bytes);
        prop_assert!(well_formed(&out), "{:?}", String::from_utf8_lossy(&out));
    }

    #[test]
    fn request_like_input_gets_well_formed_answers(bytes in request_like()) {
        let out = send(&bytes);
        prop_assert!(well_formed(&out), "{:?}", String::from_utf8_lossy(&out));
    }

    #[test]
    fn mutated_valid_requests_get_well_formed_answers(
        which in 0..VALID.len(),
        edits in proptest::collection::vec(mutation(), 1..6),
    ) {
        let bytes = mutate(VALID[which].as_bytes().to_vec(), &edits);
        let out = send(&bytes);
        prop_assert!(well_formed(&out), "{:?} -> {:?}", String::from_utf8_lossy(&bytes), String::from_utf8_lossy(&out));
    }

    #[test]
    fn ambiguous_framing_gets_one_400_and_the_hidden_request_is_never_served(
        mut fields in bad_framing(),
        reversed in any::<bool>(),
    ) {
        if reversed {
            fields.reverse();
        }
        // The hidden request follows as a would-be body.
        let bytes = format!(
            "GET /a.txt HTTP/1.1\r\n{}\r\n\r\nGET /d/ HTTP/1.1\r\nHost: x\r\n\r\n",
            fields.join("\r\n")
        );
        let out = send(bytes.as_bytes());
        let codes = responses(&out).map_err(|e| TestCaseError::fail(format!("{e}: {:?}", String::from_utf8_lossy(&out))))?;
        prop_assert_eq!(codes, vec![400], "{:?} -> {:?}", bytes, String::from_utf8_lossy(&out));
        prop_assert!(String::from_utf8_lossy(&out).contains("\r\nConnection: close\r\n"));
    }
}

#[test]
fn the_server_is_healthy_after_the_fuzzing() {
    // Runs alongside the property tests; by the time it asks, some of them have run.
    for _ in 0..20 {
        let out = send(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200 OK"));
    }
    let panics: u64 = server().rt.stats().iter().map(|s| s.panics).sum();
    assert_eq!(panics, 0);
}
