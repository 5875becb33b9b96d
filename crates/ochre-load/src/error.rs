//! The errors of the load injector: what a caller can tell apart (a bad URL, a model that
//! cannot run, a file that cannot be read, a worker of a distributed run that failed) and a
//! message that says what to fix. Every fallible public function returns [`Error`].

use std::net::SocketAddr;
use std::path::PathBuf;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A URL that is not an `http://` URL to a reachable host name or address.
    #[error("{url}: {reason}")]
    Url {
        /// The URL as given.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// A load model, target or phase that cannot run (no client, a rate that is not positive,
    /// no path to request...).
    #[error("{0}")]
    Invalid(String),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A line of a mix file that is not `path weight`, or a mix with no positive weight.
    #[error("{}{}: {reason}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Mix {
        /// The mix file.
        path: PathBuf,
        /// The line (from 1), if one is at fault.
        line: Option<usize>,
        /// What is wrong with it.
        reason: String,
    },
    /// The body to verify a path's responses against could not be loaded (`--verify`).
    #[error("--verify: {request}: {}: {source}", path.display())]
    Verify {
        /// The requested path.
        request: String,
        /// The file that should hold its body.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// The runtime could not be built or run.
    #[error("the runtime: {0}")]
    Runtime(#[from] ochre::Error),
    /// A worker of a distributed run could not be reached, failed, or answered out of turn.
    #[error("worker {addr}: {reason}")]
    Worker {
        /// The worker's address.
        addr: SocketAddr,
        /// What happened.
        reason: String,
    },
    /// The exchange between a master and a worker failed (seen from the side that has no
    /// address to name: a worker reading its master, or a message that cannot be encoded).
    #[error("{0}")]
    Protocol(String),
    /// Reports that cannot be merged.
    #[error("{0}")]
    Merge(String),
    /// A client panicked while recording into its tally: the run's counts cannot be trusted.
    #[error("a client's tally was poisoned (a client panicked while recording)")]
    Poisoned,
}
