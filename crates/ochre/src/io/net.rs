//! Non-blocking TCP on the runtime: a listener whose accepts are events of one color, and
//! read / write / writev / sendfile calls that report "would block" as a state, not an error.
//!
//! [`Listener::serve`] watches the listening socket on the home worker of the accept color (pick
//! the color with [`Runtime::home_of`](crate::Runtime::home_of) to place it). Each readiness event
//! accepts until the queue is empty and hands every connection, already non-blocking and with
//! `TCP_NODELAY`, to the accept handler, which gives it a color of its own and watches it.
//!
//! Resource exhaustion at accept time (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`) is counted
//! (`accept_errors`) and makes the listener back off: it stops accepting and retries after a
//! delay that doubles from 1 ms up to 1 s while the error persists and resets on success. So a
//! server out of descriptors neither spins nor dies, and resumes by itself when descriptors are
//! freed. Transient errors (`ECONNABORTED`, `EINTR`, `EPROTO`) are skipped. Linux reserves the
//! new descriptor before it looks at the queue, so at the limit `accept` fails even with nobody
//! waiting: the listener checks the queue (a zero-timeout `poll`) before it counts, sheds or
//! backs off, so that draining the queue at the limit does not close a connection for nobody.
//!
//! A server can do better than wait at the descriptor limit ([`Listener::shed_with`], an
//! [`Overload`]): new clients are not left in the accept queue while kept-alive connections hold
//! every descriptor. On exhaustion the listener first asks the server to free descriptors
//! ([`Overload::shed`]: close idle connections) and retries after the shortest delay; when nothing
//! can be shed, it answers the queued clients itself with the classic reserve descriptor (as
//! libev and Node.js do): it closes a descriptor held for this purpose, accepts one connection
//! into it, hands it to [`Overload::refuse`] (a short answer such as 503, then the connection is
//! dropped), reopens the reserve, and repeats until the queue is empty. So a client arriving at
//! the limit gets an answer at once instead of a timeout.

use std::io::{self, IoSlice};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{watch_on, Event, Interest, Watch};
use crate::context::with_current;
use crate::shared::Shared;
use crate::stats::Counter;
use crate::{Color, Error};

/// The outcome of a non-blocking transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// This many bytes moved (never 0 for a non-empty buffer).
    Done(usize),
    /// Nothing can move now; wait for readiness.
    WouldBlock,
    /// Reading: end of file (the peer closed or shut down its side).
    Closed,
}

fn progress(r: io::Result<usize>, empty: bool) -> io::Result<Progress> {
    match r {
        Ok(0) if !empty => Ok(Progress::Closed),
        Ok(n) => Ok(Progress::Done(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Progress::WouldBlock),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Progress::Done(0)),
        Err(e) => Err(e),
    }
}

/// Reads into `buf` without blocking.
pub fn read(fd: &impl AsFd, buf: &mut [u8]) -> io::Result<Progress> {
    let empty = buf.is_empty();
    progress(rustix::io::read(fd, buf).map_err(io::Error::from), empty)
}

/// Reads into the spare capacity of `buf` (at most `max` bytes, reserving them if needed)
/// without blocking, and extends its length: no zeroing of the buffer first.
pub fn read_into(fd: &impl AsFd, buf: &mut Vec<u8>, max: usize) -> io::Result<Progress> {
    if max == 0 {
        return Ok(Progress::Done(0));
    }
    buf.reserve(max);
    let len = buf.len();
    let spare = &mut buf.spare_capacity_mut()[..max];
    let r = rustix::io::read(fd, spare).map(|(init, _)| init.len()).map_err(io::Error::from);
    match r {
        Ok(n) => {
            // SAFETY: `read` initialized the first `n` bytes of the spare capacity.
            unsafe { buf.set_len(len + n) };
            progress(Ok(n), false)
        }
        Err(e) => progress(Err(e), false),
    }
}

/// Writes from `buf` without blocking (`Done(n)` may be a short write).
pub fn write(fd: &impl AsFd, buf: &[u8]) -> io::Result<Progress> {
    match rustix::io::write(fd, buf).map_err(io::Error::from) {
        Ok(n) => Ok(Progress::Done(n)),
        Err(e) => progress(Err(e), buf.is_empty()),
    }
}

/// Gathers `bufs` into one write without blocking.
pub fn writev(fd: &impl AsFd, bufs: &[IoSlice<'_>]) -> io::Result<Progress> {
    match rustix::io::writev(fd, bufs).map_err(io::Error::from) {
        Ok(n) => Ok(Progress::Done(n)),
        Err(e) => progress(Err(e), true),
    }
}

/// Sends up to `count` bytes of `file` from `*offset` to `out` without blocking, advancing
/// `*offset` (zero-copy `sendfile(2)`). `Done(0)` means the file ended.
pub fn sendfile(
    out: &impl AsFd,
    file: &impl AsFd,
    offset: &mut u64,
    count: usize,
) -> io::Result<Progress> {
    match rustix::fs::sendfile(out, file, Some(offset), count).map_err(io::Error::from) {
        Ok(n) => Ok(Progress::Done(n)),
        Err(e) => progress(Err(e), true),
    }
}

/// Closes a connection with a reset instead of an orderly shutdown (`SO_LINGER` 0): the peer
/// sees "connection reset" and unsent data is dropped. For aborting misbehaving peers, and for
/// tests of peers that vanish.
pub fn abort(stream: TcpStream) -> io::Result<()> {
    rustix::net::sockopt::set_socket_linger(&stream, Some(Duration::ZERO))?;
    drop(stream);
    Ok(())
}

/// What a listener does when accepting fails for lack of descriptors (module doc). Both calls
/// run as events of the accept color.
pub trait Overload: Send + 'static {
    /// Start freeing descriptors (for instance close the oldest idle connections) and say how
    /// many are being freed; 0 when there is nothing to free, and the queued clients are then
    /// refused.
    fn shed(&mut self) -> usize;
    /// A connection accepted on the reserve descriptor when nothing could be shed: answer it
    /// briefly without blocking (it is non-blocking), then drop it: its descriptor becomes the
    /// reserve again.
    fn refuse(&mut self, stream: TcpStream, peer: SocketAddr);
}

/// A non-blocking TCP listener.
pub struct Listener {
    inner: TcpListener,
    overload: Option<Box<dyn Overload>>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("inner", &self.inner)
            .field("sheds", &self.overload.is_some())
            .finish()
    }
}

/// The descriptor kept in reserve for refusing clients at the limit.
fn open_reserve() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// Delay bounds of the accept back-off.
const BACKOFF_MIN: Duration = Duration::from_millis(1);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

struct Acceptor<F> {
    listener: TcpListener,
    on_accept: F,
    /// The next back-off delay (reset on success).
    delay: Duration,
    /// A retry timer is pending: readiness events do not accept meanwhile.
    waiting: bool,
    overload: Option<Box<dyn Overload>>,
    /// Held to be closed and accepted into when out of descriptors (with `overload` only).
    reserve: Option<std::fs::File>,
    color: Color,
    shared: std::sync::Weak<Shared>,
}

/// The longest accept queue the system allows (`/proc/sys/net/core/somaxconn`; 4096, the Linux
/// default since 5.4, if it cannot be read): the default backlog of [`Listener::bind`]. The
/// standard library's 128 overflows under a burst of connects (a 3000-connect burst on loopback
/// stalled 3 to 13 of them for the 1 s SYN retransmission), and the kernel caps any larger
/// request at this value anyway.
pub fn max_backlog() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(4096)
}

impl Listener {
    /// Binds (with `SO_REUSEADDR`, as the standard library does) with the system's longest
    /// accept queue ([`max_backlog`]) and makes the socket non-blocking.
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<Listener> {
        Listener::bind_with_backlog(addr, max_backlog())
    }

    /// [`bind`](Listener::bind) with an accept queue of `backlog` connections (the kernel caps
    /// it at [`max_backlog`]).
    pub fn bind_with_backlog(addr: impl ToSocketAddrs, backlog: u32) -> io::Result<Listener> {
        bind_socket(addr, false, backlog)
    }

    /// Binds with `SO_REUSEPORT` too, so that several processes (N-COPY) share the port and the
    /// kernel spreads connections over them; accept queue as [`bind`](Listener::bind).
    pub fn bind_reuseport(addr: impl ToSocketAddrs) -> io::Result<Listener> {
        Listener::bind_reuseport_with_backlog(addr, max_backlog())
    }

    /// [`bind_reuseport`](Listener::bind_reuseport) with an accept queue of `backlog`.
    pub fn bind_reuseport_with_backlog(
        addr: impl ToSocketAddrs,
        backlog: u32,
    ) -> io::Result<Listener> {
        bind_socket(addr, true, backlog)
    }

    /// Wraps a listening socket made elsewhere (made non-blocking here).
    pub fn from_std(inner: TcpListener) -> io::Result<Listener> {
        inner.set_nonblocking(true)?;
        Ok(Listener { inner, overload: None })
    }

    /// At the descriptor limit, sheds and refuses with `overload` instead of only waiting
    /// (module doc). Keeps one descriptor open in reserve.
    pub fn shed_with(mut self, overload: impl Overload) -> Listener {
        self.overload = Some(Box::new(overload));
        self
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Accepts connections as events of `color`, calling `on_accept` for each, until the returned
    /// watch is cancelled. The color is pinned: stealing never moves the accept handler. Call from a handler; from other threads use
    /// [`Handle::serve`](crate::Handle::serve).
    pub fn serve<F>(self, color: Color, on_accept: F) -> Result<Watch, Error>
    where
        F: FnMut(TcpStream, SocketAddr) + Send + 'static,
    {
        let shared = with_current(|ctx| ctx.shared.clone()).ok_or(Error::NotInRuntime)?;
        self.serve_on(&shared, color, on_accept)
    }

    pub(crate) fn serve_on<F>(
        self,
        shared: &Arc<Shared>,
        color: Color,
        on_accept: F,
    ) -> Result<Watch, Error>
    where
        F: FnMut(TcpStream, SocketAddr) + Send + 'static,
    {
        let reserve = self.overload.as_ref().and_then(|_| open_reserve());
        let acceptor = Arc::new(Mutex::new(Acceptor {
            listener: self.inner,
            on_accept,
            delay: BACKOFF_MIN,
            waiting: false,
            overload: self.overload,
            reserve,
            color,
            shared: Arc::downgrade(shared),
        }));
        crate::runtime::pin_on(shared, color);
        let a = acceptor.clone();
        // The handler owns the acceptor, hence the listening socket: it stays open as long as it
        // is watched.
        let handler = Box::new(move |_: &mut Event| accept_ready(&a));
        let guard = lock(&acceptor);
        watch_on(shared, guard.listener.as_fd(), Interest::READ, color, handler)
    }
}

/// Binds a listening socket to the first of `addr` that works: `SO_REUSEADDR`, `SO_REUSEPORT` if
/// asked, an accept queue of `backlog`, close-on-exec, non-blocking.
fn bind_socket(addr: impl ToSocketAddrs, reuseport: bool, backlog: u32) -> io::Result<Listener> {
    use rustix::net::{sockopt, AddressFamily, SocketFlags, SocketType};
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "no address to bind");
    for a in addr.to_socket_addrs()? {
        let family = if a.is_ipv4() { AddressFamily::INET } else { AddressFamily::INET6 };
        let attempt = (|| -> io::Result<TcpListener> {
            let fd =
                rustix::net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
            sockopt::set_socket_reuseaddr(&fd, true)?;
            if reuseport {
                sockopt::set_socket_reuseport(&fd, true)?;
            }
            rustix::net::bind(&fd, &a)?;
            rustix::net::listen(&fd, i32::try_from(backlog).unwrap_or(i32::MAX))?;
            Ok(TcpListener::from(fd))
        })();
        match attempt {
            Ok(l) => return Listener::from_std(l),
            Err(e) => last = e,
        }
    }
    Err(last)
}

impl<F> Acceptor<F> {
    /// Out of descriptors with nothing to shed: accepts each queued client into the reserve
    /// descriptor and refuses it (module doc). True once the queue is empty; false without a
    /// reserve, or if the reserve's descriptor was taken meanwhile (by another thread).
    #[cold]
    fn refuse_queued(&mut self) -> bool {
        let Some(overload) = self.overload.as_mut() else { return false };
        loop {
            let Some(reserve) = self.reserve.take() else { return false };
            drop(reserve);
            let accepted = self.listener.accept();
            match accepted {
                Ok((stream, peer)) => {
                    if stream.set_nonblocking(true).is_ok() {
                        overload.refuse(stream, peer);
                    }
                    self.reserve = open_reserve();
                }
                Err(e) => {
                    self.reserve = open_reserve();
                    if e.kind() == io::ErrorKind::WouldBlock {
                        return true;
                    }
                    if !is_transient(&e) {
                        return false;
                    }
                }
            }
        }
    }
}

/// Whether a connection waits in `listener`'s accept queue (a listening socket is readable
/// exactly then).
fn pending(listener: &TcpListener) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(listener, PollFlags::IN)];
    let now = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
    // On an error, assume a client waits: the caller then sheds or backs off, as before.
    poll(&mut fds, Some(&now)).map_or(true, |n| n > 0)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn is_exhaustion(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

fn is_transient(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ECONNABORTED | libc::EINTR | libc::EPROTO))
}

/// Accepts until the queue is empty, or resources run out (then backs off).
fn accept_ready<F>(acceptor: &Arc<Mutex<Acceptor<F>>>)
where
    F: FnMut(TcpStream, SocketAddr) + Send + 'static,
{
    let mut a = lock(acceptor);
    if a.waiting {
        return; // The retry timer will accept.
    }
    loop {
        match a.listener.accept() {
            Ok((stream, peer)) => {
                a.delay = BACKOFF_MIN;
                if a.overload.is_some() && a.reserve.is_none() {
                    a.reserve = open_reserve(); // Lost while exhausted; descriptors are back.
                }
                if stream.set_nonblocking(true).is_err() {
                    continue; // The connection is unusable; dropping it closes it.
                }
                let _ = stream.set_nodelay(true);
                (a.on_accept)(stream, peer);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if is_transient(&e) => continue,
            // Linux takes the descriptor before it looks at the queue: at the limit, accept
            // fails even when nobody waits. Then there is nothing to shed or back off for; the
            // next client raises a readiness event.
            Err(e) if is_exhaustion(&e) && !pending(&a.listener) => return,
            Err(e) => {
                with_current(|ctx| ctx.core.borrow_mut().counters.add(Counter::AcceptErrors, 1));
                let mut delay = a.delay;
                if !is_exhaustion(&e) {
                    eprintln!("ochre: accept failed, backing off: {e}");
                    a.delay = (delay * 2).min(BACKOFF_MAX);
                } else if a.overload.as_mut().is_some_and(|o| o.shed() > 0) {
                    delay = BACKOFF_MIN; // Descriptors are being freed: retry at once.
                } else if a.refuse_queued() {
                    return; // The queue is empty: the next client raises a readiness event.
                } else {
                    a.delay = (delay * 2).min(BACKOFF_MAX);
                }
                a.waiting = true;
                let (color, shared) = (a.color, a.shared.upgrade());
                drop(a);
                if let Some(shared) = shared {
                    let retry = acceptor.clone();
                    super::timer_on(
                        &shared,
                        std::time::Instant::now() + delay,
                        color,
                        crate::message::Task::new(move || {
                            lock(&retry).waiting = false;
                            accept_ready(&retry);
                        }),
                    );
                }
                return;
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    #[test]
    fn transfers_report_would_block_and_end_of_file_as_states() {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(read(&a, &mut buf).unwrap(), Progress::WouldBlock);
        assert_eq!(write(&b, b"hello").unwrap(), Progress::Done(5));
        let parts = [IoSlice::new(b", "), IoSlice::new(b"world")];
        assert_eq!(writev(&b, &parts).unwrap(), Progress::Done(7));
        let mut v = b">".to_vec();
        assert_eq!(read_into(&a, &mut v, 5).unwrap(), Progress::Done(5));
        assert_eq!(v, b">hello");
        assert_eq!(read(&a, &mut buf).unwrap(), Progress::Done(7));
        assert_eq!(&buf[..7], b", world");
        drop(b);
        assert_eq!(read(&a, &mut buf).unwrap(), Progress::Closed);
    }

    /// How many of `n` non-blocking connects to a listener that never accepts complete within
    /// 300 ms (a connect the full accept queue drops waits 1 s for its SYN retry).
    fn connects_queued(listener: &Listener, n: usize) -> usize {
        use rustix::net::{AddressFamily, SocketFlags, SocketType};
        let addr = listener.local_addr().unwrap();
        let sockets: Vec<_> = (0..n)
            .map(|_| {
                let fd = rustix::net::socket_with(
                    AddressFamily::INET,
                    SocketType::STREAM,
                    SocketFlags::NONBLOCK,
                    None,
                )
                .unwrap();
                let _ = rustix::net::connect(&fd, &addr);
                fd
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        sockets
            .iter()
            .filter(|fd| {
                let mut p = [rustix::event::PollFd::new(*fd, rustix::event::PollFlags::OUT)];
                let zero = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
                rustix::event::poll(&mut p, Some(&zero)).unwrap() == 1
                    && !p[0].revents().contains(rustix::event::PollFlags::HUP)
            })
            .count()
    }

    #[test]
    fn the_backlog_is_the_systems_maximum_unless_given() {
        // Linux queues backlog + 1 connections and drops the SYNs beyond.
        let short = Listener::bind_with_backlog("127.0.0.1:0", 4).unwrap();
        assert_eq!(connects_queued(&short, 12), 5);
        // The standard library's 128 would stop at 129.
        assert!(max_backlog() >= 200, "this test needs net.core.somaxconn >= 200");
        let default = Listener::bind("127.0.0.1:0").unwrap();
        assert_eq!(connects_queued(&default, 200), 200);
        let reuse = Listener::bind_reuseport_with_backlog("127.0.0.1:0", 2).unwrap();
        assert_eq!(connects_queued(&reuse, 6), 3);
    }

    #[test]
    fn two_listeners_share_a_port_with_reuseport() {
        let a = Listener::bind_reuseport("127.0.0.1:0").unwrap();
        let addr = a.local_addr().unwrap();
        let b = Listener::bind_reuseport(addr).unwrap();
        assert_eq!(b.local_addr().unwrap(), addr);
        assert!(Listener::bind(addr).is_err(), "a plain bind is refused");
    }

    #[test]
    fn a_full_socket_would_block_and_sendfile_copies_a_file_range() {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let chunk = vec![1u8; 64 * 1024];
        let mut blocked = false;
        for _ in 0..1000 {
            if write(&a, &chunk).unwrap() == Progress::WouldBlock {
                blocked = true;
                break;
            }
        }
        assert!(blocked, "a socket nobody reads fills up");
        drop((a, b));

        let path = std::env::temp_dir().join(format!("ochre-sendfile-{}", std::process::id()));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(b"0123456789abcdef").unwrap();
        drop(f);
        let f = std::fs::File::open(&path).unwrap();
        let (out, mut inp) = UnixStream::pair().unwrap();
        let mut offset = 4;
        assert_eq!(sendfile(&out, &f, &mut offset, 6).unwrap(), Progress::Done(6));
        assert_eq!(offset, 10);
        assert_eq!(sendfile(&out, &f, &mut offset, 100).unwrap(), Progress::Done(6));
        assert_eq!(sendfile(&out, &f, &mut offset, 100).unwrap(), Progress::Done(0), "end of file");
        drop(out);
        let mut got = String::new();
        std::io::Read::read_to_string(&mut inp, &mut got).unwrap();
        assert_eq!(got, "456789abcdef");
        std::fs::remove_file(path).unwrap();
    }
}
