//! SWS (`ochre_http::Server` on ochre's colored events) behind the same interface as the other
//! architectures, so that the study starts, measures and copies every server alike: a runtime
//! with one worker per CPU of the plan (pinned), serving the listener, shut down when stopped.
//! Connections handed over by an N-COPY balancer are adopted (`Server::adopt`): a thread takes
//! them from the hand-off into a queue and writes a byte to a pipe that the runtime watches (a
//! run ends when nothing is watched or pending, so the watch is also what keeps it going); the
//! pipe's handler, an event of the accept color, adopts what the queue holds.

use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use ochre::io::{Interest, Listener};
use ochre::{Color, Runtime};
use ochre_http::{Server, ServerConfig};

use crate::{Plan, Running, Source};

/// Starts SWS with the default runtime configuration (see the module doc).
pub fn start(config: ServerConfig, source: Source, plan: &Plan) -> io::Result<Running> {
    let other = |e: ochre::Error| io::Error::other(e.to_string());
    let builder = Runtime::builder();
    let builder = if plan.cpus.is_empty() {
        builder.workers(plan.loops()).pin(false)
    } else {
        builder.cpus(plan.cpus.iter().copied())
    };
    let rt = Arc::new(builder.build().map_err(other)?);
    let addr = source.addr()?;
    let server = Arc::new(Server::new(config, Color(1))?);
    let open = server.open_connections();
    let stopping = Arc::new(AtomicBool::new(false));
    let inbox = match source {
        Source::Listen(l) => {
            server.serve_with(&rt.handle(), Listener::from_std(l)?).map_err(other)?;
            None
        }
        handoff @ Source::Handoff(_) => {
            let flags = rustix::pipe::PipeFlags::NONBLOCK | rustix::pipe::PipeFlags::CLOEXEC;
            let (bell, ring) = rustix::pipe::pipe_with(flags)?;
            let (tx, rx) = crossbeam_channel::unbounded::<std::net::TcpStream>();
            let (s, handle) = (server.clone(), rt.handle());
            rt.handle()
                .watch_with(bell, Interest::READ, Color(1), move |bell, _| {
                    let mut buf = [0u8; 64];
                    while matches!(rustix::io::read(&*bell, &mut buf), Ok(n) if n > 0) {}
                    while let Ok(stream) = rx.try_recv() {
                        let _ = s.adopt(&handle, stream);
                    }
                })
                .map_err(other)?;
            let stop = stopping.clone();
            Some(std::thread::Builder::new().name("sws-inbox".into()).spawn(move || {
                while let Some(stream) = handoff.next(&stop) {
                    if tx.send(stream).is_ok() {
                        let _ = rustix::io::write(&ring, &[1]);
                    }
                }
            })?)
        }
    };
    let r = rt.clone();
    let run = std::thread::Builder::new().name("sws-run".into()).spawn(move || {
        let _ = r.run(Color(2), || {});
    })?;
    Ok(Running::new(addr, open, move || {
        stopping.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = inbox {
            let _ = t.join();
        }
        rt.handle().shutdown();
        let _ = run.join();
        drop(server);
    }))
}
