//! The runtime's errors.

use crate::Color;

/// Everything that can go wrong when building, running or posting to a runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `Builder::workers(0)`.
    #[error("a runtime needs at least one worker")]
    ZeroWorkers,
    /// A CPU asked for is not in the process's affinity mask (or does not exist).
    #[error("CPU {cpu} is not available to this process (allowed: {allowed:?})")]
    CpuUnavailable {
        /// The CPU asked for.
        cpu: usize,
        /// The CPUs this process may run on.
        allowed: Vec<usize>,
    },
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A system call needed by the runtime failed (affinity, pipes, thread creation).
    #[error("{what}: {source}")]
    Os {
        /// What the runtime was doing.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// An I/O operation failed (registering a descriptor, a socket call).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The runtime was dropped; nothing can be posted to it any more.
    #[error("the runtime is closed")]
    Closed,
    /// `post` was called on a thread that is not running an ochre handler.
    #[error("not inside an ochre handler: use a Handle to post from other threads")]
    NotInRuntime,
    /// A [`ColorCell`](crate::ColorCell) was opened outside an event of its color, or
    /// re-entrantly.
    #[error("this cell belongs to color {owner}; the running color is {current:?}")]
    WrongColor {
        /// The cell's color.
        owner: Color,
        /// The running color, if any.
        current: Option<Color>,
    },
    /// `run` was called while another run of the same runtime is going on, or from inside one.
    #[error("this runtime is already running")]
    AlreadyRunning,
    /// A handler panicked and the runtime was built with `abort_on_panic`.
    #[error("a handler of color {color} panicked on worker {worker}: {message}")]
    HandlerPanicked {
        /// The color of the event that panicked.
        color: Color,
        /// The worker it ran on.
        worker: usize,
        /// The panic message.
        message: String,
    },
}

impl Error {
    pub(crate) fn os(what: &'static str, source: impl Into<std::io::Error>) -> Self {
        Error::Os { what, source: source.into() }
    }
}
