//! One HTTP connection's bytes, shared by the architectures that answer with
//! [`ochre_http::site`]: what was read and not yet parsed, the answers queued and not yet sent,
//! and the three operations every model performs on them (read, answer, write). Models differ
//! only in who calls them, on which thread, and how they wait; this is what makes their
//! comparison one of architectures and not of HTTP code.
//!
//! Invariants: `out` holds answers in request order; parsing stops while more than
//! [`OUT_HIGH_WATER`] bytes are queued (a client that pipelines without reading cannot grow
//! the server's memory) and after an answer marked `close`; bytes of a request body are
//! discarded before the next head is parsed. Writes gather a head with its in-memory body
//! (`writev`) and send file bodies with `sendfile`, as SWS does. A non-blocking read stops at
//! a short read (the next bytes bring a new edge), except once the poller reported the peer's
//! end, when it reads on to the end of file; after the end of file, a connection whose answers
//! are out is done, whichever model's thread sees it (`read`, `done`).
//!
//! Head timeout, as SWS's: `head_since` is when the first byte of the request head not yet
//! answered arrived (`None` when no byte of one is buffered); a head still incomplete
//! `read_timeout` after it is answered with [`Site::request_timeout`] (408) and the connection
//! closes. The models differ only in how they notice: a blocking read's timeout (threads), a
//! periodic sweep (symped, staged).

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ochre_http::site::{FileCache, Payload, Site, Step};

/// Output queued beyond this stops parsing further pipelined requests until it drains.
pub(crate) const OUT_HIGH_WATER: usize = 256 * 1024;
/// Read buffer growth step.
const READ_CHUNK: usize = 16 * 1024;

/// What a read or a write came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Io {
    /// Went as far as it could: everything written, or the socket had nothing more (would
    /// block, or a blocking read returned).
    Ok,
    /// The socket is full (write) or empty (read) and non-blocking: wait for readiness.
    WouldBlock,
    /// A non-blocking read came short: the socket had nothing more when it returned, and any
    /// later byte is a new edge of readiness: wait for it (no read to see `EAGAIN` first).
    Drained,
    /// The peer closed, reset, or a timeout expired: close the connection.
    Closed,
}

enum Out {
    Head(Vec<u8>, usize),
    Body(Payload),
}

/// A connection's buffers and stream.
pub(crate) struct Conn {
    pub(crate) stream: TcpStream,
    inbuf: Vec<u8>,
    out: VecDeque<Out>,
    out_bytes: usize,
    /// Request body bytes still to drop from the input.
    discard: u64,
    /// Requests answered.
    served: u32,
    /// An answer marked `close` is queued: parse nothing more, close once it is out.
    closing: bool,
    /// The socket blocks: a read returns after one system call.
    blocking: bool,
    /// The peer's end was reported: reads go on to the end of file (see [`Conn::read`]).
    peer_closed: bool,
    /// The end of file was read: once the answers are out the connection is done, whoever
    /// drives it next (a stage that did not see the read).
    peer_ended: bool,
    /// When the first byte of the unanswered, incomplete head came (see the module doc).
    head_since: Option<Instant>,
}

impl Conn {
    /// A connection on `stream`, blocking or not as the stream is.
    pub(crate) fn new(stream: TcpStream, blocking: bool) -> Conn {
        let _ = stream.set_nodelay(true);
        Conn {
            stream,
            inbuf: Vec::new(),
            out: VecDeque::new(),
            out_bytes: 0,
            discard: 0,
            served: 0,
            closing: false,
            blocking,
            peer_closed: false,
            peer_ended: false,
            head_since: None,
        }
    }

    /// Reads what the socket has, up to the head limit plus a chunk: once for a blocking
    /// socket; for a non-blocking one, until a short read ([`Io::Drained`]: the socket's queue
    /// was empty when it returned, so later bytes bring a new edge of readiness and reading
    /// again would only return `EAGAIN`, as nginx reasons), or, once the peer's end was
    /// reported ([`Conn::peer_closed`]), until the end of file or `EAGAIN` (the end of file,
    /// queued behind the bytes, has had its edge already).
    pub(crate) fn read(&mut self, site: &Site) -> Io {
        let limit = site.config().max_header_bytes + READ_CHUNK;
        loop {
            if self.closing || self.out_bytes >= OUT_HIGH_WATER || self.inbuf.len() >= limit {
                return Io::Ok;
            }
            // Into the buffer's spare capacity: no zeroing (a 16 KiB stack buffer cost a
            // `memset` per read, 3% of SYMPED's time on 1 KiB requests, perf cpu-clock).
            self.inbuf.reserve(READ_CHUNK);
            let spare = &mut self.inbuf.spare_capacity_mut()[..READ_CHUNK];
            match rustix::io::read(&self.stream, spare) {
                Ok(([], _)) => {
                    self.peer_ended = true;
                    return Io::Closed;
                }
                Ok((got, _)) => {
                    let n = got.len();
                    // SAFETY: `read` initialized the first `n` bytes of the spare capacity.
                    unsafe { self.inbuf.set_len(self.inbuf.len() + n) };
                    if self.head_since.is_none() && self.discard == 0 {
                        self.head_since = Some(Instant::now());
                    }
                    if self.blocking {
                        return Io::Ok; // What came is what there is.
                    }
                    if n < READ_CHUNK && !self.peer_closed {
                        return Io::Drained;
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => return Io::WouldBlock,
                Err(_) => return Io::Closed,
            }
        }
    }

    /// The poller reported the peer's end (`EPOLLRDHUP`/`EPOLLHUP`) or an error: from now on
    /// reads go on to the end of file (see [`Conn::read`]).
    pub(crate) fn note_peer_closed(&mut self) {
        self.peer_closed = true;
    }

    /// Answers every complete request in the buffer (pipelining), in order, from the calling
    /// thread's cache, or from `cache` when given.
    pub(crate) fn answer(&mut self, site: &Site, mut cache: Option<&mut FileCache>) {
        loop {
            if self.closing || self.out_bytes >= OUT_HIGH_WATER {
                return;
            }
            if !ochre_http::site::discard_body(&mut self.inbuf, &mut self.discard) {
                return;
            }
            if self.inbuf.is_empty() {
                // Nothing of a next head yet (what came was body, now discarded).
                self.head_since = None;
                return;
            }
            // Bytes after a discarded body: a head has begun.
            self.head_since.get_or_insert_with(Instant::now);
            let step = match cache.as_deref_mut() {
                Some(c) => site.step_with(&self.inbuf, self.served, c),
                None => site.step(&self.inbuf, self.served),
            };
            let Step::Answer { used, discard, answer } = step else { return };
            self.inbuf.drain(..used.min(self.inbuf.len()));
            self.discard = discard;
            self.served = self.served.saturating_add(1);
            // Bytes left are the next pipelined head: its time starts now, as in SWS.
            self.head_since = (!self.inbuf.is_empty()).then(Instant::now);
            self.closing |= answer.close;
            self.out_bytes += answer.head.len();
            self.out.push_back(Out::Head(answer.head, 0));
            if let Some(body) = answer.body {
                self.out_bytes += body.len() as usize;
                self.out.push_back(Out::Body(body));
            }
        }
    }

    /// When the incomplete head must be complete (`limit` after its first byte); `None` when
    /// no head is waiting for bytes (idle, or answers queued).
    pub(crate) fn head_deadline(&self, limit: Duration) -> Option<Instant> {
        if self.closing || !self.out.is_empty() {
            return None;
        }
        self.head_since.map(|t| t + limit)
    }

    /// Whether a head has been incomplete for `limit` or more at `now`.
    pub(crate) fn head_overdue(&self, now: Instant, limit: Duration) -> bool {
        self.head_deadline(limit).is_some_and(|d| now >= d)
    }

    /// The head came too late: queues the 408 (and nothing more), and tries once to send it;
    /// the caller closes the connection (a client that does not read is not waited for).
    pub(crate) fn time_out(&mut self, site: &Site) {
        let answer = site.request_timeout();
        self.inbuf.clear();
        self.head_since = None;
        self.closing = true;
        self.out_bytes += answer.head.len();
        self.out.push_back(Out::Head(answer.head, 0));
        let _ = self.write();
    }

    /// Whether answers wait to be sent.
    pub(crate) fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Whether unparsed bytes wait in the buffer (a pipelined request held back by the high
    /// water mark).
    pub(crate) fn has_input(&self) -> bool {
        !self.inbuf.is_empty() && !self.closing
    }

    /// The connection must close: its last answer is out, or every answer is out and the
    /// peer ended its side with no request left in the buffer (an incomplete head left there
    /// never completes: the next read sees the end of file again and closes).
    pub(crate) fn done(&self) -> bool {
        self.out.is_empty() && (self.closing || (self.peer_ended && self.inbuf.is_empty()))
    }

    /// Sends queued answers until none is left or the socket is full.
    pub(crate) fn write(&mut self) -> Io {
        while let Some(front) = self.out.front() {
            let r = match front {
                Out::Head(head, pos) => {
                    let rest = &head[*pos..];
                    match self.out.get(1) {
                        Some(Out::Body(Payload::Memory { data, start, end })) => {
                            let slices = [IoSlice::new(rest), IoSlice::new(&data[*start..*end])];
                            (&self.stream).write_vectored(&slices)
                        }
                        _ => (&self.stream).write(rest),
                    }
                }
                Out::Body(Payload::Memory { data, start, end }) => {
                    (&self.stream).write(&data[*start..*end])
                }
                Out::Body(Payload::File { file, offset, end }) => {
                    let want = (*end - *offset).min(1 << 30) as usize;
                    let mut at = *offset;
                    rustix::fs::sendfile(&self.stream, &**file, Some(&mut at), want)
                        .map_err(io::Error::from)
                }
            };
            let n = match r {
                Ok(0) => return Io::Closed, // A file shrank under us.
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Io::WouldBlock,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Io::Closed,
            };
            self.consume(n);
        }
        self.out_bytes = 0;
        Io::Ok
    }

    /// Drops `n` sent bytes from the front of the queue.
    fn consume(&mut self, mut n: usize) {
        self.out_bytes = self.out_bytes.saturating_sub(n);
        while n > 0 {
            let Some(front) = self.out.front_mut() else { return };
            let done = match front {
                Out::Head(head, pos) => {
                    let k = n.min(head.len() - *pos);
                    *pos += k;
                    n -= k;
                    *pos == head.len()
                }
                Out::Body(Payload::Memory { start, end, .. }) => {
                    let k = n.min(*end - *start);
                    *start += k;
                    n -= k;
                    start == end
                }
                Out::Body(Payload::File { offset, end, .. }) => {
                    let k = (n as u64).min(*end - *offset);
                    *offset += k;
                    n -= k as usize;
                    offset == end
                }
            };
            if done {
                self.out.pop_front();
            } else {
                return;
            }
        }
    }

    /// Serves a non-blocking connection as far as its socket allows: writes what is queued,
    /// reads, answers, and again, until the socket would block or was drained by a short read
    /// (wait for readiness: the caller watches both directions, edge-triggered) or the
    /// connection must close. After a short read the answers are written and the call ends:
    /// a next request that comes meanwhile brings its own edge.
    pub(crate) fn drive(&mut self, site: &Site, mut cache: Option<&mut FileCache>) -> Io {
        let mut drained = false;
        loop {
            match self.write() {
                Io::Ok => {}
                other => return other,
            }
            if self.done() {
                return Io::Closed;
            }
            if drained {
                return Io::WouldBlock;
            }
            let r = self.read(site);
            self.answer(site, cache.as_deref_mut());
            drained = r == Io::Drained;
            if self.has_output() {
                continue;
            }
            match r {
                Io::Ok => {}
                Io::Drained => return Io::WouldBlock,
                other => return other,
            }
        }
    }

    /// Ends the connection: the sending side first, then what the client still sent is read
    /// (without waiting) so that closing does not reset a response in flight.
    pub(crate) fn close(self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        let _ = self.stream.set_nonblocking(true);
        let mut buf = [0u8; 4096];
        for _ in 0..16 {
            match (&self.stream).read(&mut buf) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
    }
}
