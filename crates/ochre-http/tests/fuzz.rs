//! Arbitrary bytes through the real parse-and-respond path, over real sockets: the server answers
//! with a well-formed status line or closes, never panics, never hangs, and keeps serving.

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

fn well_formed(out: &[u8]) -> bool {
    if out.is_empty() {
        return true; // closed without a word: allowed for an incomplete request
    }
    let s = String::from_utf8_lossy(out);
    s.split("HTTP/1.1 ").skip(1).all(|r| r.len() >= 3 && r[..3].chars().all(|c| c.is_ascii_digit()))
        && s.starts_with("HTTP/1.1 ")
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

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
