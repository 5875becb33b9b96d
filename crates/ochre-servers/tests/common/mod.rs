//! Shared by the integration tests: reading HTTP responses off a connection.

use std::io::Read;
use std::net::TcpStream;

/// A response as read off the wire.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// Header lines, lower-cased names, without `Date` (it changes from response to response).
    /// Not every test that includes this module reads them.
    #[allow(dead_code)]
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Reads `n` responses from `s` (bodies as `Content-Length` says; none if `head`: responses to
/// HEAD). Panics, naming `what`, if the connection fails or closes first. Returns them and the
/// bytes read beyond them.
pub fn read_replies(s: &mut TcpStream, n: usize, head: bool, what: &str) -> (Vec<Reply>, Vec<u8>) {
    let mut buf = Vec::new();
    let mut replies = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    while replies.len() < n {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(used)) = resp.parse(&buf) {
            let len: usize = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                .unwrap_or(0);
            let len = if head { 0 } else { len };
            if buf.len() >= used + len {
                let headers = resp
                    .headers
                    .iter()
                    .filter(|h| !h.name.eq_ignore_ascii_case("date"))
                    .map(|h| {
                        (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned())
                    })
                    .collect();
                replies.push(Reply {
                    status: resp.code.unwrap_or(0),
                    headers,
                    body: buf[used..used + len].to_vec(),
                });
                buf.drain(..used + len);
                continue;
            }
        }
        let got = s.read(&mut chunk).unwrap_or_else(|e| panic!("{what}: {e} after {replies:?}"));
        assert!(got > 0, "{what}: closed after {} of {n} responses", replies.len());
        buf.extend_from_slice(&chunk[..got]);
    }
    (replies, buf)
}
