//! Reading one HTTP/1.1 response out of a connection's buffer, whatever its framing.
//!
//! The client keeps what it read in one buffer; [`ResponseReader::advance`] is called after each
//! read and says whether a whole response is there yet. The head is parsed by `httparse`; the
//! body is framed as RFC 9112 §6.3 says for a response to GET: none for 1xx, 204 and 304; by
//! `Transfer-Encoding: chunked` (chunk sizes parsed by `httparse::parse_chunk_size`, trailers
//! skipped); by `Content-Length`; else until the server closes the connection. Interim 1xx
//! responses are skipped.
//!
//! Invariants: the reader never looks at a byte twice for framing (the chunked decoder keeps its
//! position across calls, so a large chunked body costs linear time), and it never consumes
//! bytes of the next response: [`Response::bytes`] is exactly the length of this response, which
//! the caller drains. When asked to verify, each body piece is compared with the expected bytes
//! at its offset as it is decoded; a body of the wrong length or content is a mismatch.
//!
//! Bounded: a head, a chunk-size line or a trailer line still incomplete after [`MAX_HEAD`]
//! bytes is malformed, so a server that streams a head without end cannot grow the client's
//! buffer (nor its parsing time: the head is parsed again from its start at each read) past
//! that. A body need not stay in the buffer either: [`ResponseReader::release`] gives back the
//! bytes already framed and checked, which the caller drains, so a large (or endless) body costs
//! the client a bounded buffer; positions are buffer indices, shifted by each release.

use crate::report::ErrorKind;

/// The longest response head (and chunk-size or trailer line) read before it is called
/// malformed: eight times the 8 KiB that common servers' heads stay under (nginx refuses request
/// heads over 4 x 8 KiB; SWS's are a few hundred bytes).
pub(crate) const MAX_HEAD: usize = 64 * 1024;

/// A complete response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Response {
    /// Status code.
    pub(crate) code: u16,
    /// Bytes it took on the wire (head and framed body), released ones included.
    pub(crate) bytes: usize,
    /// Bytes of it still at the front of the buffer, for the caller to drain.
    pub(crate) drain: usize,
    /// Bytes of the decoded body.
    pub(crate) body_len: usize,
    /// The server said it closes the connection after it.
    pub(crate) closes: bool,
    /// Verification was asked and the body differed from the expected bytes.
    pub(crate) mismatch: bool,
}

/// What [`ResponseReader::advance`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Not complete yet: read more.
    Need,
    /// A complete response (drain `bytes` from the buffer, then `reset`).
    Done(Response),
    /// The bytes are not a response this client can read.
    Bad(ErrorKind),
}

#[derive(Clone, Copy, Debug)]
enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

#[derive(Clone, Copy, Debug)]
enum State {
    Head,
    /// The body of a response whose head took `head` bytes.
    Body {
        code: u16,
        head: usize,
        closes: bool,
        framing: Framing,
    },
}

/// Incremental state of the response being read.
#[derive(Debug)]
pub(crate) struct ResponseReader {
    state: State,
    /// Chunked: where the next chunk (size line, or data if `in_chunk > 0`) starts.
    pos: usize,
    /// Chunked: data bytes (plus the CRLF after them) still to come in the current chunk.
    in_chunk: usize,
    /// Chunked: the last chunk was seen; trailers are being skipped.
    trailers: bool,
    /// Decoded body bytes so far.
    body: usize,
    /// Body bytes released (Content-Length and close-delimited framing): the body byte `j` is at
    /// buffer index `head + j - released`.
    released: usize,
    /// Bytes of this response released in all (head, body, chunk framing).
    dropped: usize,
    mismatch: bool,
}

impl ResponseReader {
    pub(crate) fn new() -> ResponseReader {
        ResponseReader {
            state: State::Head,
            pos: 0,
            in_chunk: 0,
            trailers: false,
            body: 0,
            released: 0,
            dropped: 0,
            mismatch: false,
        }
    }

    /// Gives back the bytes at the front of the buffer that the response being read no longer
    /// needs (its head and the body bytes framed and checked so far; for chunked framing, all
    /// but the two bytes before the decoding position, which the end-of-chunk check reads). The
    /// caller drains that many bytes. Nothing is released while the head is read.
    pub(crate) fn release(&mut self) -> usize {
        let State::Body { head, framing, .. } = &mut self.state else { return 0 };
        let k = match framing {
            Framing::Length(_) | Framing::UntilClose => {
                let k = *head + self.body - self.released;
                *head = 0;
                self.released = self.body;
                k
            }
            Framing::Chunked => {
                let k = self.pos.saturating_sub(2);
                self.pos -= k;
                *head = head.saturating_sub(k);
                k
            }
        };
        self.dropped += k;
        k
    }

    /// Forgets the response read (after the caller drained it) or a broken one.
    pub(crate) fn reset(&mut self) {
        *self = ResponseReader::new();
    }

    /// Reads as much of the response in `buf` as is there. `eof`: the server closed the
    /// connection (only then can a close-delimited body end). `expected`: the body it must have.
    pub(crate) fn advance(&mut self, buf: &[u8], eof: bool, expected: Option<&[u8]>) -> Step {
        loop {
            if let State::Head = self.state {
                match self.head(buf) {
                    Ok(Some(true)) => continue, // an interim 1xx response was skipped
                    Ok(Some(false)) => {}
                    Ok(None) => {
                        return if eof && !buf.is_empty() {
                            Step::Bad(ErrorKind::ShortBody)
                        } else {
                            Step::Need
                        }
                    }
                    Err(kind) => return Step::Bad(kind),
                }
            }
            let State::Body { code, head, closes, framing } = self.state else { continue };
            // Only a full answer is compared with the file (not an error page, a 206 or a 304).
            let expected = if code == 200 { expected } else { None };
            let end = match framing {
                Framing::Length(n) => {
                    // Body byte j (j >= released) is at buffer index at(j).
                    let released = self.released;
                    let at = |j: usize| head + j - released;
                    let have = (buf.len() + self.released - head).min(n);
                    self.check(&buf[at(self.body)..at(have)], expected);
                    self.body = have;
                    if have < n {
                        return if eof { Step::Bad(ErrorKind::ShortBody) } else { Step::Need };
                    }
                    at(n)
                }
                Framing::UntilClose => {
                    let from = head + self.body - self.released;
                    self.check(&buf[from..], expected);
                    self.body = buf.len() + self.released - head;
                    if !eof {
                        return Step::Need;
                    }
                    buf.len()
                }
                Framing::Chunked => match self.chunks(buf, expected) {
                    Ok(Some(end)) => end,
                    Ok(None) => {
                        return if eof { Step::Bad(ErrorKind::ShortBody) } else { Step::Need };
                    }
                    Err(kind) => return Step::Bad(kind),
                },
            };
            let mismatch = self.mismatch || expected.is_some_and(|e| e.len() != self.body);
            return Step::Done(Response {
                code,
                bytes: end + self.dropped,
                drain: end,
                body_len: self.body,
                closes: closes || matches!(framing, Framing::UntilClose),
                mismatch,
            });
        }
    }

    /// Parses the head. `Some(true)`: an interim response was consumed (its bytes stay in the
    /// buffer but are skipped by moving `pos`); `Some(false)`: the body state is set.
    fn head(&mut self, buf: &[u8]) -> Result<Option<bool>, ErrorKind> {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut headers);
        let start = self.pos;
        let n = match resp.parse(&buf[start..]) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if buf.len() - start > MAX_HEAD => {
                return Err(ErrorKind::Malformed)
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(ErrorKind::Malformed),
        };
        let code = resp.code.unwrap_or(0);
        if (100..200).contains(&code) {
            self.pos = start + n;
            return Ok(Some(true));
        }
        let mut length = None;
        let mut chunked = false;
        let mut closes = false;
        for h in resp.headers.iter() {
            let v = std::str::from_utf8(h.value).map_err(|_| ErrorKind::Malformed)?.trim();
            if h.name.eq_ignore_ascii_case("content-length") {
                let n: usize = v.parse().map_err(|_| ErrorKind::Malformed)?;
                if length.is_some_and(|l| l != n) {
                    return Err(ErrorKind::Malformed); // conflicting lengths (RFC 9112 §6.3)
                }
                length = Some(n);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                // Chunked must be the last coding; anything else is close-delimited.
                chunked =
                    v.rsplit(',').next().is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
            } else if h.name.eq_ignore_ascii_case("connection") {
                closes |= v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close"));
            }
        }
        let framing = if code == 204 || code == 304 {
            Framing::Length(0)
        } else if chunked {
            Framing::Chunked
        } else if let Some(n) = length {
            Framing::Length(n)
        } else {
            Framing::UntilClose
        };
        let head = start + n;
        self.state = State::Body { code, head, closes, framing };
        self.pos = head;
        Ok(Some(false))
    }

    /// Decodes chunks from `pos`; `Some(end)` once the last chunk and the trailers are read.
    fn chunks(&mut self, buf: &[u8], expected: Option<&[u8]>) -> Result<Option<usize>, ErrorKind> {
        loop {
            if self.trailers {
                // Trailer lines up to an empty line.
                let rest = &buf[self.pos..];
                let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
                    return if rest.len() > MAX_HEAD {
                        Err(ErrorKind::Malformed)
                    } else {
                        Ok(None)
                    };
                };
                self.pos += eol + 2;
                if eol == 0 {
                    return Ok(Some(self.pos));
                }
                continue;
            }
            if self.in_chunk > 0 {
                // Data, then its CRLF (counted in `in_chunk` as its last two bytes).
                let avail = (buf.len() - self.pos).min(self.in_chunk);
                let data = avail.min(self.in_chunk.saturating_sub(2));
                self.check(&buf[self.pos..self.pos + data], expected);
                self.body += data;
                self.pos += avail;
                self.in_chunk -= avail;
                if self.in_chunk > 0 {
                    return Ok(None);
                }
                if &buf[self.pos - 2..self.pos] != b"\r\n" {
                    return Err(ErrorKind::Malformed);
                }
                continue;
            }
            match httparse::parse_chunk_size(&buf[self.pos..]) {
                Ok(httparse::Status::Complete((n, size))) => {
                    self.pos += n;
                    if size == 0 {
                        self.trailers = true;
                    } else {
                        let size = usize::try_from(size).map_err(|_| ErrorKind::Malformed)?;
                        self.in_chunk = size.checked_add(2).ok_or(ErrorKind::Malformed)?;
                    }
                }
                Ok(httparse::Status::Partial) if buf.len() - self.pos > MAX_HEAD => {
                    return Err(ErrorKind::Malformed)
                }
                Ok(httparse::Status::Partial) => return Ok(None),
                Err(_) => return Err(ErrorKind::Malformed),
            }
        }
    }

    /// Compares a body piece starting at body offset `self.body` with the expected bytes.
    fn check(&mut self, piece: &[u8], expected: Option<&[u8]>) {
        if let Some(e) = expected {
            if piece.is_empty() || self.mismatch {
                return;
            }
            let at = self.body;
            self.mismatch = e.get(at..at + piece.len()) != Some(piece);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `wire` in pieces of `step` bytes, as reads would.
    fn read_all(wire: &[u8], step: usize, eof: bool, expected: Option<&[u8]>) -> Step {
        let mut r = ResponseReader::new();
        let mut buf = Vec::new();
        for piece in wire.chunks(step) {
            buf.extend_from_slice(piece);
            match r.advance(&buf, false, expected) {
                Step::Need => {}
                other => return other,
            }
        }
        r.advance(&buf, eof, expected)
    }

    fn done(step: Step) -> Response {
        match step {
            Step::Done(r) => r,
            other => panic!("not done: {other:?}"),
        }
    }

    /// Feeds `wire` in pieces of `step` bytes, releasing after each read as the client does
    /// (every time, here); returns the outcome and the longest the buffer grew.
    fn read_releasing(wire: &[u8], step: usize, expected: Option<&[u8]>) -> (Step, usize) {
        let mut r = ResponseReader::new();
        let mut buf = Vec::new();
        let mut longest = 0;
        for (i, piece) in wire.chunks(step).enumerate() {
            buf.extend_from_slice(piece);
            longest = longest.max(buf.len());
            let last = (i + 1) * step >= wire.len();
            match r.advance(&buf, last, expected) {
                Step::Need => {
                    let k = r.release();
                    buf.drain(..k);
                }
                Step::Done(resp) => {
                    assert_eq!(resp.drain, buf.len().min(resp.drain), "drain within the buffer");
                    return (Step::Done(resp), longest);
                }
                bad => return (bad, longest),
            }
        }
        (Step::Need, longest)
    }

    #[test]
    fn released_bodies_are_framed_and_checked_in_a_bounded_buffer() {
        let body: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut length =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        let head = length.len();
        length.extend_from_slice(&body);
        let mut chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for piece in body.chunks(70_000) {
            chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            chunked.extend_from_slice(piece);
            chunked.extend_from_slice(b"\r\n");
        }
        chunked.extend_from_slice(b"0\r\n\r\n");
        let mut until_close = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        until_close.extend_from_slice(&body);
        for wire in [&length, &chunked, &until_close] {
            for step in [1000, 4096, 65536] {
                let (outcome, longest) = read_releasing(wire, step, Some(&body));
                let r = done(outcome);
                assert_eq!((r.code, r.body_len, r.mismatch), (200, body.len(), false), "{step}");
                assert_eq!(r.bytes, wire.len(), "every byte counted, released or not");
                assert!(longest <= 2 * step + head, "the buffer grew to {longest} ({step})");
            }
        }
        // A wrong byte far into a released body is still a mismatch.
        let mut wrong = body.clone();
        wrong[900_000] ^= 1;
        let r = done(read_releasing(&length, 4096, Some(&wrong)).0);
        assert!(r.mismatch);
        // The next response after a released one is untouched.
        let mut two = length.clone();
        two.extend_from_slice(b"HTTP/1.1 204 No Content\r\n\r\n");
        let mut r = ResponseReader::new();
        let mut buf = Vec::new();
        let mut first = None;
        for piece in two.chunks(3000) {
            buf.extend_from_slice(piece);
            match r.advance(&buf, false, None) {
                Step::Need => {
                    let k = r.release();
                    buf.drain(..k);
                }
                Step::Done(resp) => {
                    first = Some(resp);
                    buf.drain(..resp.drain);
                    r.reset();
                }
                bad => panic!("{bad:?}"),
            }
        }
        assert_eq!(first.unwrap().bytes, length.len());
        assert_eq!(done(r.advance(&buf, false, None)).code, 204);
    }

    #[test]
    fn a_head_or_chunk_line_without_end_is_malformed_past_the_limit() {
        let line = |prefix: &[u8], n: usize| {
            let mut w = prefix.to_vec();
            w.resize(prefix.len() + n, b'a');
            w
        };
        let head = b"HTTP/1.1 200 OK\r\nX: ";
        assert_eq!(read_all(&line(head, MAX_HEAD - 100), 4096, false, None), Step::Need);
        assert_eq!(
            read_all(&line(head, MAX_HEAD + 1), 4096, false, None),
            Step::Bad(ErrorKind::Malformed)
        );
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=";
        assert_eq!(read_all(&line(chunked, MAX_HEAD / 2), 4096, false, None), Step::Need);
        assert_eq!(
            read_all(&line(chunked, MAX_HEAD + 1), 4096, false, None),
            Step::Bad(ErrorKind::Malformed)
        );
        let trailer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: ";
        assert_eq!(
            read_all(&line(trailer, MAX_HEAD + 1), 4096, false, None),
            Step::Bad(ErrorKind::Malformed)
        );
    }

    #[test]
    fn content_length_stops_at_the_next_response() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 404 Not Found\r\n";
        for step in [1, 3, 7, wire.len()] {
            let r = done(read_all(wire, step, false, Some(b"hello")));
            assert_eq!((r.code, r.bytes, r.body_len, r.mismatch), (200, 43, 5, false), "{step}");
        }
        let r = done(read_all(wire, 4, false, Some(b"hellO")));
        assert!(r.mismatch);
    }

    #[test]
    fn chunked_bodies_are_decoded_across_reads() {
        let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                     5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT";
        for step in [1, 2, 5, 64] {
            let r = done(read_all(wire, step, false, Some(b"hello, world")));
            assert_eq!(r.body_len, 12, "{step}");
            assert_eq!(r.bytes, wire.len() - 4, "{step}");
            assert!(!r.mismatch);
        }
        assert!(done(read_all(wire, 3, false, Some(b"hello, worl"))).mismatch);
        let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n";
        assert_eq!(read_all(bad, 4, false, None), Step::Bad(ErrorKind::Malformed));
        let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert_eq!(read_all(bad, 4, false, None), Step::Bad(ErrorKind::Malformed));
    }

    #[test]
    fn close_delimited_and_bodiless_responses() {
        let wire = b"HTTP/1.0 200 OK\r\n\r\nall of it";
        assert_eq!(read_all(wire, 4, false, None), Step::Need);
        let r = done(read_all(wire, 4, true, Some(b"all of it")));
        assert!(r.closes && !r.mismatch && r.body_len == 9);
        let r = done(read_all(
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
            5,
            false,
            None,
        ));
        assert_eq!((r.code, r.body_len), (304, 0));
        let wire = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx";
        let r = done(read_all(wire, 3, false, None));
        assert_eq!((r.code, r.bytes), (200, wire.len()));
    }

    #[test]
    fn short_and_malformed_responses_are_errors() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort";
        assert_eq!(read_all(wire, 4, true, None), Step::Bad(ErrorKind::ShortBody));
        assert_eq!(
            read_all(b"HTTP/1.1 200 OK\r\nCont", 4, true, None),
            Step::Bad(ErrorKind::ShortBody)
        );
        assert_eq!(
            read_all(b"SMTP ready\r\n\r\n", 4, false, None),
            Step::Bad(ErrorKind::Malformed)
        );
        let two = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx";
        assert_eq!(read_all(two, 4, false, None), Step::Bad(ErrorKind::Malformed));
        // A body longer than expected is a mismatch, shorter too.
        assert!(
            done(read_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
                2,
                false,
                Some(b"ab")
            ))
            .mismatch
        );
        assert!(
            done(read_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab",
                2,
                false,
                Some(b"abc")
            ))
            .mismatch
        );
    }
}
