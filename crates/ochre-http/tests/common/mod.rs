//! SWS served from a runtime of its own on a loopback port, for the integration tests: the
//! set-up (and tear-down) every test that talks to a live server shares.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use ochre::io::Listener;
use ochre::{Color, RunReport, Runtime};
use ochre_http::{Server, ServerConfig};

/// A server running until [`Live::stop`].
pub struct Live {
    pub rt: Arc<Runtime>,
    pub addr: SocketAddr,
    run: std::thread::JoinHandle<RunReport>,
}

/// Serves `root` (default settings) on 127.0.0.1 with 2 unpinned workers.
pub fn serve(root: &Path) -> Live {
    let rt = Arc::new(Runtime::builder().workers(2).pin(false).build().unwrap());
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = ServerConfig { root: root.to_path_buf(), ..ServerConfig::default() };
    Server::new(cfg, Color(1)).unwrap().serve_with(&rt.handle(), listener).unwrap();
    let r = rt.clone();
    let run = std::thread::spawn(move || r.run(Color(2), || {}).unwrap());
    Live { rt, addr, run }
}

impl Live {
    /// Stops the server and returns its run's report.
    pub fn stop(self) -> RunReport {
        self.rt.handle().shutdown();
        self.run.join().unwrap()
    }
}
