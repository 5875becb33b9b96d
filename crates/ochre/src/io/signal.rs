//! Signals as colored events (libasync's `sigcb`), by the self-pipe trick.
//!
//! [`watch_signal`] installs a handler (`sigaction`) that writes the signal number into a pipe
//! kept for that signal, and watches the pipe's read end like any descriptor: each delivery runs
//! the user's handler as an event of the chosen color, on a worker, where it may do anything a
//! handler does. The signal handler itself only calls `write(2)`, which is async-signal-safe, and
//! preserves `errno`.
//!
//! One registration per signal at a time. Ending it ([`SignalWatch::cancel`] or dropping it)
//! restores the disposition that was in place before, then stops the watch. The pipes are created
//! on first use and never closed, so a signal that races with the end of a registration writes
//! into a pipe that still exists, never into a reused descriptor number.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

use super::{watch_on, Event, Interest, Watch};
use crate::context::with_current;
use crate::shared::Shared;
use crate::stats::Counter;
use crate::{Color, Error};

pub use libc::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH};

const NSIG: usize = 65;

/// Write end of each signal's pipe, read by the signal handler (-1: not watched).
static WRITE_FDS: [AtomicI32; NSIG] = [const { AtomicI32::new(-1) }; NSIG];

struct SignalPipe {
    read: &'static OwnedFd,
    write: &'static OwnedFd,
    watched: bool,
}

static PIPES: Mutex<Vec<Option<SignalPipe>>> = Mutex::new(Vec::new());

extern "C" fn on_signal(sig: libc::c_int) {
    let saved = nix::errno::Errno::last_raw();
    if let Some(slot) = WRITE_FDS.get(sig as usize) {
        let fd = slot.load(Ordering::Relaxed);
        if fd >= 0 {
            let byte = [sig as u8];
            // SAFETY: `write` is async-signal-safe; `fd` is the write end of a pipe that is never
            // closed (module doc) and `byte` is a valid one-byte buffer. A full pipe (EAGAIN)
            // already holds a delivery to process.
            unsafe { libc::write(fd, byte.as_ptr().cast(), 1) };
        }
    }
    nix::errno::Errno::set_raw(saved);
}

/// A signal delivered as events; restores the previous disposition when cancelled or dropped.
pub struct SignalWatch {
    signal: Signal,
    previous: Option<SigAction>,
    watch: Watch,
}

impl std::fmt::Debug for SignalWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalWatch").field("signal", &self.signal).finish()
    }
}

impl SignalWatch {
    /// Ends the registration: the previous disposition is back, no more events.
    pub fn cancel(mut self) {
        self.end();
    }

    fn end(&mut self) {
        let Some(previous) = self.previous.take() else { return };
        // SAFETY: reinstalls the action that `sigaction` returned when we replaced it.
        let _ = unsafe { sigaction(self.signal, &previous) };
        WRITE_FDS[self.signal as usize].store(-1, Ordering::Relaxed);
        self.watch.cancel();
        if let Some(Some(p)) = lock_pipes().get_mut(self.signal as usize) {
            p.watched = false;
        }
    }
}

impl Drop for SignalWatch {
    fn drop(&mut self) {
        self.end();
    }
}

fn lock_pipes() -> std::sync::MutexGuard<'static, Vec<Option<SignalPipe>>> {
    PIPES.lock().unwrap_or_else(|e| e.into_inner())
}

fn drain(fd: &OwnedFd, out: &mut Vec<i32>) {
    let mut buf = [0u8; 64];
    while let Ok(n) = rustix::io::read(fd, &mut buf) {
        if n == 0 {
            break;
        }
        out.extend(buf[..n].iter().map(|&b| i32::from(b)));
        if n < buf.len() {
            break;
        }
    }
}

pub(crate) fn watch_signal_on<F>(
    shared: &Arc<Shared>,
    signal: i32,
    color: Color,
    mut handler: F,
) -> Result<SignalWatch, Error>
where
    F: FnMut(i32) + Send + 'static,
{
    let sig = Signal::try_from(signal).map_err(|e| Error::Io(e.into()))?;
    if matches!(sig, Signal::SIGKILL | Signal::SIGSTOP) {
        return Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{sig} cannot be caught"),
        )));
    }
    let read = {
        let mut pipes = lock_pipes();
        if pipes.len() < NSIG {
            pipes.resize_with(NSIG, || None);
        }
        let slot = &mut pipes[sig as usize];
        if slot.as_ref().is_some_and(|p| p.watched) {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{sig} is already watched"),
            )));
        }
        if slot.is_none() {
            use rustix::pipe::{pipe_with, PipeFlags};
            let (r, w) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)
                .map_err(|e| Error::Io(e.into()))?;
            *slot = Some(SignalPipe {
                read: Box::leak(Box::new(r)),
                write: Box::leak(Box::new(w)),
                watched: false,
            });
        }
        let p = slot.as_mut().expect("created above");
        p.watched = true;
        let mut stale = Vec::new();
        drain(p.read, &mut stale);
        WRITE_FDS[sig as usize].store(p.write.as_raw_fd(), Ordering::Relaxed);
        p.read
    };
    let unwatch = || {
        WRITE_FDS[sig as usize].store(-1, Ordering::Relaxed);
        if let Some(Some(p)) = lock_pipes().get_mut(sig as usize) {
            p.watched = false;
        }
    };
    let on_ready = move |_: &mut Event| {
        let mut got = Vec::new();
        drain(read, &mut got);
        with_current(|ctx| ctx.core.borrow_mut().counters.add(Counter::Signals, got.len() as u64));
        for s in got {
            handler(s);
        }
    };
    let watch = match watch_on(shared, read.as_fd(), Interest::READ, color, Box::new(on_ready)) {
        Ok(w) => w,
        Err(e) => {
            unwatch();
            return Err(e);
        }
    };
    let action =
        SigAction::new(SigHandler::Handler(on_signal), SaFlags::SA_RESTART, SigSet::empty());
    // SAFETY: `on_signal` only performs async-signal-safe operations (an atomic load, `write`,
    // errno save and restore).
    match unsafe { sigaction(sig, &action) } {
        Ok(previous) => Ok(SignalWatch { signal: sig, previous: Some(previous), watch }),
        Err(e) => {
            watch.cancel();
            unwatch();
            Err(Error::Io(e.into()))
        }
    }
}

/// Delivers `signal` (e.g. [`SIGTERM`]) to this process as events of `color`: `handler` runs with
/// the signal number, once per delivery. Call from a handler; from other threads use
/// [`Handle::watch_signal`](crate::Handle::watch_signal). Fails if the signal is already watched.
pub fn watch_signal<F>(signal: i32, color: Color, handler: F) -> Result<SignalWatch, Error>
where
    F: FnMut(i32) + Send + 'static,
{
    let shared = with_current(|ctx| ctx.shared.clone()).ok_or(Error::NotInRuntime)?;
    watch_signal_on(&shared, signal, color, handler)
}
