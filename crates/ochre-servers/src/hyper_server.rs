//! Today's choice of a Rust user: hyper's HTTP/1 server with tower-http's `ServeDir`, on tokio's
//! multi-thread runtime (one worker per CPU of the plan, pinned to those CPUs), written as the
//! crates' documentation shows it: an accept loop that spawns a task per connection serving the
//! directory service. Keep-alive and pipelining are hyper's; the file handling (reads through
//! tokio's blocking pool, no `sendfile`, no cache) is tower-http's. The root, the connection cap and
//! come from the same configuration as the other servers.
//!
//! Timeouts: hyper has one, `header_read_timeout`, running from when it starts waiting for a
//! head, so it bounds the idle keep-alive wait and the head alike; it is set to `read_timeout`
//! (the head timeout of SWS; idle connections then close after it too, not after
//! `keepalive_timeout`). hyper closes a timed-out connection without a word; the 408 that SWS
//! sends is written here on a duplicate of the socket when bytes came since the last answer went
//! out (a head had begun), and not when the connection was idle. Not seen: a partial head
//! pipelined behind complete ones, read before their answers were written (closed without 408).
//!
//! Invariants: at most `max_connections` connections (beyond, closed at once); stopping ends the
//! accept loop, then the runtime (its tasks, and so their connections, are dropped).

use std::io::{self, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use ochre_http::ServerConfig;
use tower_http::services::ServeDir;

use crate::{pin_to, Plan, Running, Source};

/// Starts the server (see the module doc).
pub fn start(config: ServerConfig, source: Source, plan: &Plan) -> io::Result<Running> {
    let root = std::fs::canonicalize(&config.root)?;
    if !root.is_dir() {
        return Err(io::Error::new(io::ErrorKind::NotADirectory, "the root is not a directory"));
    }
    let addr = source.addr()?;
    let cpus = plan.cpus.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(plan.loops())
        .enable_all()
        .on_thread_start(move || pin_to(&cpus))
        .build()?;
    let serving = Serving {
        service: ServeDir::new(root),
        max: config.max_connections,
        head_timeout: config.read_timeout,
        open: Arc::new(AtomicUsize::new(0)),
    };
    let open = serving.open.clone();
    let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut inbox = None;
    match source {
        Source::Listen(listener) => {
            listener.set_nonblocking(true)?;
            let listener = {
                let _guard = rt.enter();
                tokio::net::TcpListener::from_std(listener)?
            };
            rt.spawn(async move {
                loop {
                    tokio::select! {
                        _ = &mut stop_rx => return,
                        r = listener.accept() => match r {
                            Ok((s, _)) => serving.serve(s),
                            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                        },
                    }
                }
            });
        }
        Source::Handoff(rx) => {
            // The balancer's connections, taken on a thread of their own (the hand-off blocks).
            let (handle, stop) = (rt.handle().clone(), stopping.clone());
            let source = Source::Handoff(rx);
            inbox =
                Some(std::thread::Builder::new().name("hyper-inbox".into()).spawn(move || {
                    while let Some(s) = source.next(&stop) {
                        let _guard = handle.enter();
                        if s.set_nonblocking(true).is_ok() {
                            if let Ok(s) = tokio::net::TcpStream::from_std(s) {
                                serving.serve(s);
                            }
                        }
                    }
                })?);
        }
    }
    Ok(Running::new(addr, open, move || {
        stopping.store(true, Ordering::SeqCst);
        let _ = stop_tx.send(());
        if let Some(t) = inbox {
            let _ = t.join();
        }
        rt.shutdown_timeout(Duration::from_secs(2));
    }))
}

/// What serving a connection needs.
#[derive(Clone)]
struct Serving {
    service: ServeDir,
    max: usize,
    head_timeout: Duration,
    open: Arc<AtomicUsize>,
}

/// hyper's answer to a late head, in its own style (its automatic error responses have no body).
const TIMEOUT_408: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

impl Serving {
    /// Spawns the connection's task (on the current runtime), or closes it over the cap.
    fn serve(&self, stream: tokio::net::TcpStream) {
        if self.open.load(Ordering::Relaxed) >= self.max {
            return; // Over the cap: closed at once.
        }
        let _ = stream.set_nodelay(true);
        // A duplicate of the socket to answer 408 on once hyper gave the stream up.
        let Ok((stream, spare)) = duplicate(stream) else { return };
        self.open.fetch_add(1, Ordering::Relaxed);
        let me = self.clone();
        tokio::spawn(async move {
            let began = Arc::new(AtomicBool::new(false));
            let watched = Watched { inner: stream, began: began.clone() };
            let r = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(me.head_timeout)
                .pipeline_flush(true)
                // A client that ends its side after its request is answered, as by SWS (hyper's
                // default drops the request: `tests/short_reads.rs`).
                .half_close(true)
                .serve_connection(TokioIo::new(watched), TowerToHyperService::new(me.service))
                .await;
            if let Err(e) = r {
                if e.is_timeout() && began.load(Ordering::Relaxed) {
                    // Non-blocking, as the original: a client that does not read loses it.
                    let _ = (&spare).write(TIMEOUT_408);
                    let _ = spare.shutdown(std::net::Shutdown::Write);
                }
            }
            drop(spare);
            me.open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// The stream and a duplicate of its socket (the same connection).
fn duplicate(
    stream: tokio::net::TcpStream,
) -> io::Result<(tokio::net::TcpStream, std::net::TcpStream)> {
    let std = stream.into_std()?;
    let spare = std.try_clone()?;
    Ok((tokio::net::TcpStream::from_std(std)?, spare))
}

/// The connection's socket, noting whether bytes were read since the last bytes were written:
/// when hyper's head timeout fires, whether a head had begun (408) or the connection was idle.
struct Watched {
    inner: tokio::net::TcpStream,
    began: Arc<AtomicBool>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut me.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            me.began.store(true, Ordering::Relaxed);
        }
        r
    }
}

impl Watched {
    fn wrote(&self, r: &Poll<io::Result<usize>>) {
        if matches!(r, Poll::Ready(Ok(n)) if *n > 0) {
            self.began.store(false, Ordering::Relaxed);
        }
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.inner).poll_write(cx, buf);
        me.wrote(&r);
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.inner).poll_write_vectored(cx, bufs);
        me.wrote(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
