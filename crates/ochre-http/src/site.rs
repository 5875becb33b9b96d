//! SWS's static-file semantics without the runtime: from the bytes a connection received to the
//! response it must send, for servers built on other models (`ochre-servers`: a thread per
//! connection, event loops, stages) that must answer exactly as SWS does.
//!
//! [`Site::step`] parses the first request of a buffer with the parser, the framing and path
//! checks and the file cache that SWS's handlers use (`conn`, `framing`, `path`, `cache`) and
//! builds its answer with the same heads (`response`): a server calls it until it says
//! [`Step::Partial`], sends each answer's head then its body (in memory, or a range of a file
//! for `sendfile`), discards `discard` body bytes after the head, and closes after an answer
//! marked `close`. What stays with the server: reading, writing, timeouts (it sends
//! [`Site::request_timeout`] when a head is late), the connection cap.
//!
//! Invariants: a step never panics on any input; an answer to a malformed or over-limit head
//! closes the connection (nothing after it can be trusted) and consumes the whole buffer.

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use crate::cache::FileCache;
use crate::cache::{with_worker_cache, Body, Lookup};
use crate::config::ServerConfig;
use crate::conn::{file_answer, has_token, header, FileAnswer, Request};
use crate::framing;
use crate::path::{decode_target, TargetError};
use crate::response::{error_response, Head};

/// Most header fields parsed, as SWS does.
const MAX_HEADERS: usize = 128;

/// A document root served with SWS's semantics.
pub struct Site {
    /// Key of the calling thread's cache for this site (shared with `Server`'s numbering).
    id: u64,
    config: ServerConfig,
    /// The canonical root.
    root: PathBuf,
}

/// The body of an answer.
#[derive(Clone, Debug)]
pub enum Payload {
    /// Bytes `start..end` of a cached file.
    Memory {
        /// The file's bytes.
        data: Arc<[u8]>,
        /// First byte sent.
        start: usize,
        /// One past the last byte sent.
        end: usize,
    },
    /// Bytes `offset..end` of an open file, for `sendfile` (with an explicit offset: the
    /// descriptor is shared).
    File {
        /// The cache's descriptor.
        file: Arc<File>,
        /// First byte sent.
        offset: u64,
        /// One past the last byte sent.
        end: u64,
    },
}

impl Payload {
    /// Bytes left to send.
    pub fn len(&self) -> u64 {
        match self {
            Payload::Memory { start, end, .. } => (end - start) as u64,
            Payload::File { offset, end, .. } => end - offset,
        }
    }

    /// Nothing left to send.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A response to send.
#[derive(Debug)]
pub struct Answer {
    /// Status code.
    pub code: u16,
    /// Status line and headers (and the body of error pages).
    pub head: Vec<u8>,
    /// The file's bytes, after the head.
    pub body: Option<Payload>,
    /// Close the connection once this answer is out.
    pub close: bool,
}

/// What a buffer gives.
#[derive(Debug)]
pub enum Step {
    /// No complete request head yet (and not over the limits): read more.
    Partial,
    /// The first request's answer: drop `used` bytes from the buffer, then `discard` more (the
    /// request's body, possibly not received yet).
    Answer {
        /// Bytes of the head consumed.
        used: usize,
        /// Body bytes to discard after it.
        discard: u64,
        /// The response.
        answer: Answer,
    },
}

impl Site {
    /// A site for `config` (its root, limits, cache sizes). Fails if the root is not a
    /// readable directory.
    pub fn new(config: ServerConfig) -> io::Result<Site> {
        let root = std::fs::canonicalize(&config.root)?;
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", root.display()),
            ));
        }
        std::fs::read_dir(&root)?;
        let id = crate::NEXT_SERVER.fetch_add(1, Ordering::Relaxed);
        Ok(Site { id, config, root })
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// A new cache of this site (for servers that share one among threads).
    pub fn new_cache(&self) -> FileCache {
        FileCache::new(
            self.root.clone(),
            self.config.cache_bytes_per_worker,
            self.config.small_file_bytes,
            self.config.revalidate,
        )
    }

    /// The first request of `inbuf`, answered from the calling thread's cache (one per thread
    /// and site, as SWS's workers have). `served` is how many requests the connection already
    /// had answered (`max_requests_per_connection`).
    pub fn step(&self, inbuf: &[u8], served: u32) -> Step {
        self.parse(inbuf, served, |rel| {
            with_worker_cache(self.id, || self.new_cache(), |c| c.lookup(rel))
        })
    }

    /// What SWS sends a client whose request head did not arrive whole within `read_timeout`
    /// of its first byte: a 408 that closes the connection (the server then closes it).
    pub fn request_timeout(&self) -> Answer {
        Answer {
            code: 408,
            head: error_response(408, false, false, false),
            body: None,
            close: true,
        }
    }

    /// [`Site::step`] with the given cache.
    pub fn step_with(&self, inbuf: &[u8], served: u32, cache: &mut FileCache) -> Step {
        self.parse(inbuf, served, |rel| cache.lookup(rel))
    }

    fn parse(
        &self,
        inbuf: &[u8],
        served: u32,
        mut lookup: impl FnMut(&std::path::Path) -> Lookup,
    ) -> Step {
        let cfg = &self.config;
        if inbuf.is_empty() {
            return Step::Partial;
        }
        let fail = |code: u16| Step::Answer {
            used: inbuf.len(),
            discard: 0,
            answer: Answer {
                code,
                head: error_response(code, false, false, false),
                body: None,
                close: true,
            },
        };
        let mut headers =
            [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut []);
        let parsed =
            req.parse_with_uninit_headers(inbuf, &mut headers[..cfg.max_headers.min(MAX_HEADERS)]);
        let used = match parsed {
            Ok(httparse::Status::Partial) => {
                if inbuf.len() > cfg.max_header_bytes {
                    return fail(if inbuf.contains(&b'\n') { 431 } else { 414 });
                }
                return Step::Partial;
            }
            Err(httparse::Error::Version) => return fail(505),
            Err(httparse::Error::TooManyHeaders) => return fail(431),
            Err(_) => return fail(400),
            Ok(httparse::Status::Complete(used)) => used,
        };
        if used > cfg.max_header_bytes {
            return fail(431);
        }
        let http10 = req.version == Some(0);
        let method = req.method.unwrap_or("");
        let target = req.path.unwrap_or("");
        if target.len() > cfg.max_target_len {
            return fail(414);
        }
        let Ok(discard) = framing::check(req.headers, http10) else { return fail(400) };
        if discard > cfg.max_body_bytes {
            return fail(413);
        }
        let connection = header(&req, "connection");
        let keep_alive = if http10 {
            has_token(connection, "keep-alive")
        } else {
            !has_token(connection, "close")
        };
        let last = served.saturating_add(1) >= cfg.max_requests_per_connection;
        let r = Request {
            line: String::new(),
            head_only: method == "HEAD",
            http10,
            keep_alive: keep_alive && !last,
            target: target.to_string(),
            if_none_match: header(&req, "if-none-match").map(String::from),
            if_modified_since: header(&req, "if-modified-since").map(String::from),
            range: header(&req, "range").map(String::from),
            if_range: header(&req, "if-range").map(String::from),
        };
        let answer = if method != "GET" && method != "HEAD" {
            error(&r, 405)
        } else {
            self.answer(&r, &mut lookup)
        };
        Step::Answer { used, discard, answer }
    }

    /// GetFromCache's answer to a parsed GET or HEAD (as `conn::get_from_cache`, without the
    /// status page).
    fn answer(&self, r: &Request, lookup: &mut impl FnMut(&std::path::Path) -> Lookup) -> Answer {
        let simple =
            |code: u16, head: Vec<u8>| Answer { code, head, body: None, close: !r.keep_alive };
        let target = match decode_target(&r.target) {
            Ok(t) => t,
            Err(TargetError::Malformed) => return error(r, 400),
            Err(TargetError::Outside) => return error(r, 403),
        };
        let mut found = lookup(&target.path);
        if matches!(found, Lookup::Directory) {
            if !target.dir {
                let head = Head::new(301)
                    .header("Location", target.directory_location())
                    .header("Content-Length", 0)
                    .finish(r.keep_alive, r.http10);
                return simple(301, head);
            }
            found = match lookup(&target.path.join(&self.config.index)) {
                Lookup::NotFound | Lookup::Directory => Lookup::Forbidden, // No listings.
                other => other,
            };
        }
        let info = match found {
            Lookup::File(info) => info,
            Lookup::NotFound => return error(r, 404),
            Lookup::Forbidden | Lookup::Directory => return error(r, 403),
            Lookup::Error(e) => {
                log::warn!("{:?}: {e}", target.decoded);
                return error(r, 500);
            }
        };
        let FileAnswer { code, head, body, .. } = file_answer(r, &info);
        let body = body.map(|(first, last)| match &info.body {
            Body::Memory(data) => Payload::Memory {
                data: data.clone(),
                start: first as usize,
                end: last as usize + 1,
            },
            Body::Disk(file) => Payload::File { file: file.clone(), offset: first, end: last + 1 },
        });
        Answer { code, head, body, close: !r.keep_alive }
    }
}

/// Drops from `inbuf` the body bytes of a refused request still to be discarded (`left`,
/// counted down as they go): true once none is left, false while more are to come.
pub fn discard_body(inbuf: &mut Vec<u8>, left: &mut u64) -> bool {
    let n = (*left).min(inbuf.len() as u64) as usize;
    inbuf.drain(..n);
    *left -= n as u64;
    *left == 0
}

/// An error answer to a well-framed request (the connection is kept if the request allows).
fn error(r: &Request, code: u16) -> Answer {
    Answer {
        code,
        head: error_response(code, r.keep_alive, r.http10, r.head_only),
        body: None,
        close: !r.keep_alive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(tag: &str) -> (Site, PathBuf) {
        let d = std::env::temp_dir().join(format!("ochre-site-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("dir")).unwrap();
        std::fs::write(d.join("a.txt"), b"hello").unwrap();
        std::fs::write(d.join("big.bin"), vec![7u8; 300 * 1024]).unwrap();
        let s = Site::new(ServerConfig { root: d.clone(), ..ServerConfig::default() }).unwrap();
        (s, d)
    }

    fn answer(step: Step) -> (usize, u64, Answer) {
        match step {
            Step::Answer { used, discard, answer } => (used, discard, answer),
            Step::Partial => panic!("partial"),
        }
    }

    #[test]
    fn files_errors_and_pipelining() {
        let (s, d) = site("basic");
        assert!(matches!(s.step(b"GET /a.txt HTTP/1.1\r\nHo", 0), Step::Partial));
        let two =
            b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\nHEAD /big.bin HTTP/1.1\r\nHost: x\r\n\r\n";
        let (used, discard, a) = answer(s.step(two, 0));
        assert_eq!((a.code, discard, a.close), (200, 0, false));
        assert!(matches!(a.body, Some(Payload::Memory { start: 0, end: 5, .. })));
        let (used2, _, b) = answer(s.step(&two[used..], 1));
        assert_eq!(used + used2, two.len());
        assert_eq!(b.code, 200);
        assert!(b.body.is_none(), "HEAD has no body");
        assert!(String::from_utf8_lossy(&b.head).contains("Content-Length: 307200\r\n"));
        let (_, _, big) = answer(s.step(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n", 0));
        assert!(matches!(big.body, Some(Payload::File { offset: 0, end: 307200, .. })));
        let (_, _, missing) = answer(s.step(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 0));
        assert_eq!((missing.code, missing.close), (404, false));
        let (_, _, dir) = answer(s.step(b"GET /dir HTTP/1.1\r\nHost: x\r\n\r\n", 0));
        assert_eq!(dir.code, 301);
        let (_, _, post) = answer(s.step(b"POST /a.txt HTTP/1.1\r\nHost: x\r\n\r\n", 0));
        assert_eq!(post.code, 405);
        let (used, _, bad) = answer(s.step(b"GET / HTTP/1.1\r\n\r\nrest", 0));
        assert_eq!((bad.code, bad.close, used), (400, true, 22));
        let (_, _, close) =
            answer(s.step(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 0));
        assert!(close.close);
        let (_, discard, _) =
            answer(s.step(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n", 0));
        assert_eq!(discard, 9);
        let mut cache = s.new_cache();
        let (_, _, same) =
            answer(s.step_with(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n", 0, &mut cache));
        assert_eq!(same.code, 200);
        std::fs::remove_dir_all(d).unwrap();
    }
}
