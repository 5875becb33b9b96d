//! A colored echo server: the accept handler runs as events of one color, each connection as
//! events of its own color, so connections are served in parallel and each without locks.
//!
//! `cargo run --release -p ochre --example echo -- [ADDR] [WORKERS]` (default 127.0.0.1:7007),
//! then for instance `nc 127.0.0.1 7007`. Ctrl-C stops it.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ochre::io::{self, Event, Interest, Listener, Progress};
use ochre::{Color, Runtime};

/// Bytes waiting to be echoed, past which a connection stops reading (back-pressure).
const HIGH_WATER: usize = 64 * 1024;

/// One connection: what it still has to write back.
#[derive(Default)]
pub struct Echo {
    out: Vec<u8>,
    sent: usize,
    eof: bool,
}

impl Echo {
    /// Handles one readiness event: write what is pending, read what came, echo it; ends the
    /// watch (closing the socket) when the peer is done and everything was sent, or on errors.
    pub fn on_event(&mut self, s: &mut TcpStream, ev: &mut Event) {
        if self.pump(s).is_err() {
            ev.cancel();
            return;
        }
        if self.eof && self.sent == self.out.len() {
            let _ = s.shutdown(std::net::Shutdown::Write);
            ev.cancel();
        }
    }

    fn pump(&mut self, s: &mut TcpStream) -> std::io::Result<()> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            self.flush(s)?;
            if self.eof || self.out.len() - self.sent >= HIGH_WATER {
                return Ok(()); // A write-ready edge brings us back.
            }
            match io::net::read(s, &mut buf)? {
                Progress::Done(n) => self.out.extend_from_slice(&buf[..n]),
                Progress::Closed => self.eof = true,
                Progress::WouldBlock => return self.flush(s),
            }
        }
    }

    fn flush(&mut self, s: &mut TcpStream) -> std::io::Result<()> {
        while self.sent < self.out.len() {
            match io::net::write(s, &self.out[self.sent..])? {
                Progress::Done(n) => self.sent += n,
                Progress::WouldBlock | Progress::Closed => return Ok(()),
            }
        }
        self.out.clear();
        self.sent = 0;
        Ok(())
    }
}

/// Serves `listener`: accepts as events of `accept_color`, each connection on a color of its own.
/// Returns the number of connections accepted so far, updated live.
pub fn serve(listener: Listener, accept_color: Color) -> Result<Arc<AtomicU64>, ochre::Error> {
    let accepted = Arc::new(AtomicU64::new(0));
    let count = accepted.clone();
    listener.serve(accept_color, move |stream: TcpStream, _peer: SocketAddr| {
        let n = count.fetch_add(1, Ordering::Relaxed);
        let color = Color(1_000_000 + n);
        let mut conn = Echo::default();
        if let Err(e) =
            io::watch_with(stream, Interest::READ_WRITE, color, move |s, ev| conn.on_event(s, ev))
        {
            eprintln!("echo: cannot watch a connection: {e}");
        }
    })?;
    Ok(accepted)
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:7007".into());
    let workers = args.next().map(|w| w.parse()).transpose()?;
    let mut builder = Runtime::builder();
    if let Some(w) = workers {
        builder = builder.workers(w);
    }
    let rt = builder.build()?;
    let listener = Listener::bind(&addr)?;
    println!("echo: listening on {} with {} workers", listener.local_addr()?, rt.workers());
    std::io::stdout().flush()?;
    let handle = rt.handle();
    rt.run(Color(1), move || {
        let h = handle.clone();
        serve(listener, Color(1)).expect("serving");
        let stop = io::watch_signal(io::signal::SIGINT, Color(1), move |_| h.shutdown());
        std::mem::forget(stop); // for the life of the process
    })?;
    println!("echo: stopped");
    Ok(())
}
