//! What SWS does at the descriptor limit, as the listener's [`Overload`]: new clients get an
//! answer instead of waiting in the accept queue while kept-alive connections hold every
//! descriptor (nginx's behaviour: it closes idle keep-alive connections to make room).
//!
//! - [`Shedder::shed`] asks the oldest idle connections to close, at most `SHED_BATCH` at a time,
//!   oldest first by `Conn::idle_since`; each is asked once per idle period (`SHED_ASKED`), so
//!   a connection that turned busy in between is not asked again until idle again, and once
//!   every idle connection has been asked `shed` returns 0.
//! - [`Shedder::refuse`] answers a client the listener accepted on its reserve descriptor (when
//!   nothing could be shed): 503 with `Retry-After`, after reading what the client already sent
//!   so that closing does not reset the connection under the answer.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ochre::io::net::{Overload, Progress};

use crate::conn::{shed_if_idle, Conn, BUSY, SHED_ASKED};
use crate::response::error_response;
use crate::ServerShared;

/// Idle connections asked to close per exhaustion event: room for a burst of new clients and
/// the files they open, without closing every idle connection for one newcomer (nginx's
/// `ngx_drain_connections` frees up to 32 at a time; a guess of the same order).
const SHED_BATCH: usize = 16;

pub(crate) struct Shedder {
    server: Arc<ServerShared>,
}

impl Shedder {
    pub(crate) fn new(server: Arc<ServerShared>) -> Shedder {
        Shedder { server }
    }
}

impl Overload for Shedder {
    fn shed(&mut self) -> usize {
        let idle = self.server.accept_state.with(|a| {
            let mut idle: Vec<(u64, Arc<Conn>)> = a
                .live
                .values()
                .filter_map(|c| c.upgrade())
                .filter_map(|c| {
                    let since = c.idle_since.load(Ordering::Relaxed);
                    (since != BUSY && since != SHED_ASKED).then_some((since, c))
                })
                .collect();
            if idle.len() > SHED_BATCH {
                idle.select_nth_unstable_by_key(SHED_BATCH, |(since, _)| *since);
                idle.truncate(SHED_BATCH);
            }
            idle
        });
        let mut asked = 0;
        for (since, conn) in idle.unwrap_or_default() {
            let mark = conn.idle_since.compare_exchange(
                since,
                SHED_ASKED,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            if mark.is_ok() {
                asked += 1;
                ochre::post(conn.color(), move || shed_if_idle(&conn));
            }
        }
        asked
    }

    fn refuse(&mut self, stream: TcpStream, peer: SocketAddr) {
        let mut sent = [0u8; 4096];
        for _ in 0..4 {
            if !matches!(ochre::io::net::read(&stream, &mut sent), Ok(Progress::Done(n)) if n > 0) {
                break;
            }
        }
        let answer = error_response(503, false, false, false);
        let _ = ochre::io::net::write(&stream, &answer);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        self.server.counters.count(503, 0);
        if let Some(log) = &self.server.access_log {
            crate::stats::log_access(log, peer, "-", 503, 0);
        }
    }
}
