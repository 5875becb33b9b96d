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
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use ochre_http::ServerConfig;
use tower_http::services::ServeDir;

use crate::{pin_to, Plan, Running};

/// Starts the server (see the module doc).
pub fn start(config: ServerConfig, listener: TcpListener, plan: &Plan) -> io::Result<Running> {
    let root = std::fs::canonicalize(&config.root)?;
    if !root.is_dir() {
        return Err(io::Error::new(io::ErrorKind::NotADirectory, "the root is not a directory"));
    }
    let addr = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let cpus = plan.cpus.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(plan.loops())
        .enable_all()
        .on_thread_start(move || pin_to(&cpus))
        .build()?;
    let listener = {
        let _guard = rt.enter();
        tokio::net::TcpListener::from_std(listener)?
    };
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let max = config.max_connections;
    let idle = config.keepalive_timeout;
    let active = Arc::new(AtomicUsize::new(0));
    let service = ServeDir::new(root);
    rt.spawn(async move {
        loop {
            let stream = tokio::select! {
                _ = &mut stop_rx => return,
                r = listener.accept() => match r {
                    Ok((s, _)) => s,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                },
            };
            if active.load(Ordering::Relaxed) >= max {
                continue; // Over the cap: closed at once.
            }
            let _ = stream.set_nodelay(true);
            active.fetch_add(1, Ordering::Relaxed);
            let (service, active) = (service.clone(), active.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(idle)
                    .pipeline_flush(true)
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                    .await;
                active.fetch_sub(1, Ordering::Relaxed);
            });
        }
    });
    Ok(Running::new(addr, move || {
        let _ = stop_tx.send(());
        rt.shutdown_timeout(Duration::from_secs(2));
    }))
}
