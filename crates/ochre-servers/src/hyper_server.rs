//! Today's choice of a Rust user: hyper's HTTP/1 server with tower-http's `ServeDir`, on tokio's
//! multi-thread runtime (one worker per CPU of the plan, pinned to those CPUs), written as the
//! crates' documentation shows it: an accept loop that spawns a task per connection serving the
//! directory service. Keep-alive and pipelining are hyper's; the file handling (reads through
//! tokio's blocking pool, no `sendfile`, no cache) is tower-http's. The root, the connection cap
//! and the keep-alive timeout come from the same configuration as the other servers.
//!
//! Invariants: at most `max_connections` connections (beyond, closed at once); stopping ends the
//! accept loop, then the runtime (its tasks, and so their connections, are dropped).

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
        idle: config.keepalive_timeout,
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
    idle: Duration,
    open: Arc<AtomicUsize>,
}

impl Serving {
    /// Spawns the connection's task (on the current runtime), or closes it over the cap.
    fn serve(&self, stream: tokio::net::TcpStream) {
        if self.open.load(Ordering::Relaxed) >= self.max {
            return; // Over the cap: closed at once.
        }
        let _ = stream.set_nodelay(true);
        self.open.fetch_add(1, Ordering::Relaxed);
        let me = self.clone();
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(me.idle)
                .pipeline_flush(true)
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(me.service))
                .await;
            me.open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}
