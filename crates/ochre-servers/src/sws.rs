//! SWS (`ochre_http::Server` on ochre's colored events) behind the same interface as the other
//! architectures, so that the study starts, measures and copies every server alike: a runtime
//! with one worker per CPU of the plan (pinned), serving the listener, shut down when stopped.

use std::io;
use std::net::TcpListener;
use std::sync::Arc;

use ochre::io::Listener;
use ochre::{Color, Runtime};
use ochre_http::{Server, ServerConfig};

use crate::{Plan, Running};

/// Starts SWS with the default runtime configuration (see the module doc).
pub fn start(config: ServerConfig, listener: TcpListener, plan: &Plan) -> io::Result<Running> {
    let other = |e: ochre::Error| io::Error::other(e.to_string());
    let builder = Runtime::builder();
    let builder = if plan.cpus.is_empty() {
        builder.workers(plan.loops()).pin(false)
    } else {
        builder.cpus(plan.cpus.iter().copied())
    };
    let rt = Arc::new(builder.build().map_err(other)?);
    let addr = listener.local_addr()?;
    let server = Server::new(config, Color(1))?;
    server.serve_with(&rt.handle(), Listener::from_std(listener)?).map_err(other)?;
    let r = rt.clone();
    let run = std::thread::Builder::new().name("sws-run".into()).spawn(move || {
        let _ = r.run(Color(2), || {});
    })?;
    Ok(Running::new(addr, move || {
        rt.handle().shutdown();
        let _ = run.join();
        drop(server);
    }))
}
