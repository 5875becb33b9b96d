//! I/O readiness and timers as colored events (libasync's `fdcb`, `timecb`/`delaycb`).
//!
//! ## Readiness
//!
//! [`watch`] registers a file descriptor with the poller (epoll) of the worker that is the home
//! of the handler's color, so that the descriptor's events and its handler stay on one core. The
//! registration is edge-triggered: the handler is called once per transition to ready and must
//! read or write until the operation would block (a `WouldBlock` error), as with mio.
//!
//! The handler is owned by its registration and *moves with its event*: when the poller reports
//! readiness, the owner takes the handler out, posts an event of the registration's color that
//! calls it, and the event hands it back (by message if the color was lent to another worker).
//! Readiness that arrives while the handler is out is merged and delivered as soon as it is back,
//! so no edge is lost and a handler never runs twice at once, whatever the color's placement.
//!
//! Cancellation ([`Watch::cancel`], or [`Event::cancel`] from the handler) sets a flag that every
//! delivery checks before calling the handler, then asks the owner to remove the descriptor from
//! its epoll set. The owner removes it only if the descriptor number still names the same open
//! file (device and inode checked), so a number closed and reused by another registration is
//! never touched: after a cancel or a close, no handler of the old registration ever runs.
//!
//! ## Timers
//!
//! [`post_after`] and [`post_at`] put an event on the current worker's timing wheel (`timer`);
//! when due it is posted to its color like any event. [`Timer::cancel`] removes it from the wheel
//! when called on the owning worker, and otherwise flags it (checked when the event runs) and
//! asks the owner to remove it, so a cancelled timer never runs.
//!
//! ## Quiescence
//!
//! A worker with watched descriptors or pending timers sleeps in its poller (with the next
//! deadline as timeout) instead of its parker, and is never counted as parked by the quiescence
//! detector: a run ends only when nothing is queued, running, watched or due.

pub mod net;
pub(crate) mod poller;
pub mod signal;
pub(crate) mod timer;

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::color::home_of;
use crate::context::with_current;
use crate::message::{Msg, Task};
use crate::shared::Shared;
use crate::stats::Counter;
use crate::worker::Core;
use crate::{Color, Error};

pub use net::{Listener, Progress};
pub use poller::{Interest, Ready};
pub use signal::{watch_signal, SignalWatch};
use timer::{TimerKey, Wheel};

/// What a readiness handler is given.
#[derive(Debug)]
pub struct Event {
    ready: Ready,
    cancel: bool,
}

impl Event {
    /// What the descriptor is ready for.
    pub fn ready(&self) -> Ready {
        self.ready
    }

    /// Stops watching after this call (the handler is dropped).
    pub fn cancel(&mut self) {
        self.cancel = true;
    }
}

type Handler = Box<dyn FnMut(&mut Event) + Send + 'static>;

pub(crate) struct WatchState {
    token: u64,
    owner: usize,
    cancelled: AtomicBool,
    shared: Weak<Shared>,
}

/// A registration made by [`watch`]; cloneable, cancellable from any thread.
#[derive(Clone)]
pub struct Watch {
    state: Arc<WatchState>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("token", &self.state.token)
            .field("worker", &self.state.owner)
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl Watch {
    /// Stops watching: no handler call starts after this returns (a call already running on
    /// another worker finishes; from a handler of the same color, none is running).
    pub fn cancel(&self) {
        if self.state.cancelled.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(shared) = self.state.shared.upgrade() {
            send_io(&shared, self.state.owner, IoMsg::Unwatch { token: self.state.token });
        }
    }

    /// True once cancelled (by [`cancel`](Watch::cancel) or by the handler).
    pub fn is_cancelled(&self) -> bool {
        self.state.cancelled.load(Ordering::Acquire)
    }

    /// The worker whose poller watches the descriptor.
    pub fn worker(&self) -> usize {
        self.state.owner
    }
}

pub(crate) struct TimerState {
    owner: usize,
    /// The wheel key, once the owner scheduled it (`u64::MAX` before).
    key: AtomicU64,
    cancelled: AtomicBool,
    shared: Weak<Shared>,
}

/// A pending timer from [`post_after`] / [`post_at`]; cloneable, cancellable from any thread.
#[derive(Clone)]
pub struct Timer {
    state: Arc<TimerState>,
}

impl std::fmt::Debug for Timer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timer").field("worker", &self.state.owner).finish()
    }
}

fn pack(k: TimerKey) -> u64 {
    (u64::from(k.generation) << 32) | u64::from(k.key)
}

fn unpack(v: u64) -> TimerKey {
    TimerKey { key: v as u32, generation: (v >> 32) as u32 }
}

impl Timer {
    /// Cancels the timer: its event will not run (if it already ran, nothing happens).
    pub fn cancel(&self) {
        if self.state.cancelled.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(shared) = self.state.shared.upgrade() {
            send_io(&shared, self.state.owner, IoMsg::CancelTimer { state: self.state.clone() });
        }
    }

    /// True once cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.state.cancelled.load(Ordering::Acquire)
    }
}

/// I/O messages to a worker.
pub(crate) enum IoMsg {
    /// A registration whose descriptor was added to the receiver's epoll set under `token`.
    Watch {
        token: u64,
        reg: Registration,
    },
    Unwatch {
        token: u64,
    },
    /// A handler coming back from its event (run on another worker).
    Handback {
        token: u64,
        handler: Handler,
    },
    Timer {
        at: Instant,
        color: Color,
        task: Task,
        state: Arc<TimerState>,
    },
    CancelTimer {
        state: Arc<TimerState>,
    },
}

pub(crate) struct Registration {
    color: Color,
    fd: RawFd,
    identity: (u64, u64),
    handler: Option<Handler>,
    pending: Ready,
    state: Arc<WatchState>,
}

/// The I/O state a worker owns: its registrations, its timers, and scratch buffers.
pub(crate) struct IoCore {
    regs: FxHashMap<u64, Registration>,
    /// Registrations here per color ([`anchors`](IoCore::anchors)).
    watched: FxHashMap<Color, u32>,
    /// Readiness for tokens whose registration message has not arrived yet.
    early: FxHashMap<u64, Ready>,
    wheel: Wheel,
    epoll_events: poller::EventBuf,
    ready: Vec<(u64, Ready)>,
    fired: Vec<(Color, Task)>,
}

impl IoCore {
    pub(crate) fn new() -> IoCore {
        IoCore {
            regs: FxHashMap::default(),
            watched: FxHashMap::default(),
            early: FxHashMap::default(),
            wheel: Wheel::new(Instant::now()),
            epoll_events: poller::EventBuf::default(),
            ready: Vec::new(),
            fired: Vec::new(),
        }
    }

    /// Watched descriptors or pending timers: the worker must poll, and is not quiescent.
    #[inline]
    pub(crate) fn active(&self) -> bool {
        !self.regs.is_empty() || self.wheel.len() > 0 || !self.early.is_empty()
    }

    /// True if a descriptor is watched here for `color`: its readiness is posted from this
    /// worker's poller, so the color stays (colors that follow their messages, `follow`, do not
    /// move it, nor does relief): moved, each readiness would be a forward there and its handler
    /// a message back, and the connection's work would leave the core its socket's data reaches.
    /// `bench sws`, 2 workers, 1 KiB: 165-175K requests/s with connections moved by relief,
    /// against 189-201K kept home (one process each, alternated, 3 rounds).
    /// (`Config::anchor_watched` off, for tests: never.)
    #[inline]
    pub(crate) fn anchors(&self, shared: &Shared, color: Color) -> bool {
        shared.config.anchor_watched
            && !self.watched.is_empty()
            && self.watched.contains_key(&color)
    }

    fn insert_reg(&mut self, token: u64, reg: Registration) {
        *self.watched.entry(reg.color).or_default() += 1;
        self.regs.insert(token, reg);
    }

    fn remove_reg(&mut self, token: u64) -> Option<Registration> {
        let reg = self.regs.remove(&token)?;
        if let std::collections::hash_map::Entry::Occupied(mut e) = self.watched.entry(reg.color) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
        Some(reg)
    }

    /// How long the worker may sleep in its poller: until the next timer, or forever.
    pub(crate) fn sleep_limit(&self) -> Option<Duration> {
        self.wheel.next_deadline().map(|d| d.saturating_duration_since(Instant::now()))
    }
}

/// The identity of the open file behind a descriptor: (device, inode).
fn identity(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
    rustix::fs::fstat(fd).ok().map(|st| (st.st_dev, st.st_ino))
}

/// Sends an I/O message to worker `dest` of `shared`: directly if we are that worker, through
/// our outgoing buffers if we are another worker of the runtime, else as an outside post.
fn send_io(shared: &Arc<Shared>, dest: usize, msg: IoMsg) {
    let mut msg = Some(msg);
    with_current(|ctx| {
        if !Arc::ptr_eq(&ctx.shared, shared) {
            return;
        }
        let msg = msg.take().expect("taken once");
        let mut core = ctx.core.borrow_mut();
        if ctx.id == dest {
            core.io_receive(shared, msg);
        } else {
            core.send(shared, dest, Msg::Io(Box::new(msg)));
        }
        // User closures released by the message are dropped outside the borrow of the core:
        // their destructors may post.
        let garbage = core.take_garbage();
        drop(core);
        drop(garbage);
    });
    if let Some(msg) = msg {
        shared.post_external(dest, Msg::Io(Box::new(msg)), false);
    }
}

pub(crate) fn watch_on(
    shared: &Arc<Shared>,
    fd: BorrowedFd<'_>,
    interest: Interest,
    color: Color,
    handler: Handler,
) -> Result<Watch, Error> {
    if shared.control.closed.load(Ordering::SeqCst) {
        return Err(Error::Closed);
    }
    let owner = home_of(color, shared.placement);
    let token = shared.control.next_token.fetch_add(1, Ordering::Relaxed);
    let identity = identity(fd).ok_or_else(|| {
        Error::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not an open descriptor"))
    })?;
    shared.remotes[owner].poller.add(fd, token, interest).map_err(Error::Io)?;
    let state = Arc::new(WatchState {
        token,
        owner,
        cancelled: AtomicBool::new(false),
        shared: Arc::downgrade(shared),
    });
    let reg = Registration {
        color,
        fd: fd.as_raw_fd(),
        identity,
        handler: Some(handler),
        pending: Ready::default(),
        state: state.clone(),
    };
    send_io(shared, owner, IoMsg::Watch { token, reg });
    Ok(Watch { state })
}

/// Watches `fd` for `interest`; calls `handler` as an event of `color` each time it becomes
/// ready, until cancelled. Call from a handler; from other threads use [`Handle::watch`].
///
/// The descriptor must stay open while watched (typically the handler owns it) and be
/// non-blocking; the handler must read or write until `WouldBlock` (edge-triggered).
///
/// [`Handle::watch`]: crate::Handle::watch
pub fn watch<Fd, F>(fd: &Fd, interest: Interest, color: Color, handler: F) -> Result<Watch, Error>
where
    Fd: AsFd + ?Sized,
    F: FnMut(&mut Event) + Send + 'static,
{
    let shared = with_current(|ctx| ctx.shared.clone()).ok_or(Error::NotInRuntime)?;
    watch_on(&shared, fd.as_fd(), interest, color, Box::new(handler))
}

/// Like [`watch`], but the runtime owns the I/O object: `source` (a socket, a pipe end) moves
/// into the registration, each call gets it by `&mut`, and it is dropped (closed) when the watch
/// ends. The usual way to serve a connection.
pub fn watch_with<S, F>(
    source: S,
    interest: Interest,
    color: Color,
    handler: F,
) -> Result<Watch, Error>
where
    S: AsFd + Send + 'static,
    F: FnMut(&mut S, &mut Event) + Send + 'static,
{
    let shared = with_current(|ctx| ctx.shared.clone()).ok_or(Error::NotInRuntime)?;
    watch_with_on(&shared, source, interest, color, handler)
}

pub(crate) fn watch_with_on<S, F>(
    shared: &Arc<Shared>,
    source: S,
    interest: Interest,
    color: Color,
    mut handler: F,
) -> Result<Watch, Error>
where
    S: AsFd + Send + 'static,
    F: FnMut(&mut S, &mut Event) + Send + 'static,
{
    let raw = source.as_fd().as_raw_fd();
    let mut source = source;
    let boxed: Handler = Box::new(move |ev: &mut Event| handler(&mut source, ev));
    // SAFETY: `source` owns the descriptor and now lives in `boxed`, which is alive during this
    // call (and afterwards as long as the registration), so `raw` stays open while borrowed.
    let fd = unsafe { BorrowedFd::borrow_raw(raw) };
    watch_on(shared, fd, interest, color, boxed)
}

/// Like [`watch`], for one readiness event: `handler` is called once, then the watch ends.
pub fn watch_once<Fd, F>(
    fd: &Fd,
    interest: Interest,
    color: Color,
    handler: F,
) -> Result<Watch, Error>
where
    Fd: AsFd + ?Sized,
    F: FnOnce(Ready) + Send + 'static,
{
    let mut once = Some(handler);
    watch(fd, interest, color, move |ev: &mut Event| {
        if let Some(f) = once.take() {
            f(ev.ready());
        }
        ev.cancel();
    })
}

pub(crate) fn timer_on(shared: &Arc<Shared>, at: Instant, color: Color, task: Task) -> Timer {
    let owner = with_current(|ctx| Arc::ptr_eq(&ctx.shared, shared).then_some(ctx.id))
        .flatten()
        .unwrap_or_else(|| home_of(color, shared.placement));
    let state = Arc::new(TimerState {
        owner,
        key: AtomicU64::new(u64::MAX),
        cancelled: AtomicBool::new(false),
        shared: Arc::downgrade(shared),
    });
    send_io(shared, owner, IoMsg::Timer { at, color, task, state: state.clone() });
    Timer { state }
}

/// Posts `f` as an event of `color` after `delay`. Call from a handler; the timer lives on the
/// current worker. From other threads use [`Handle::post_after`](crate::Handle::post_after).
pub fn post_after<F>(delay: Duration, color: Color, f: F) -> Result<Timer, Error>
where
    F: FnOnce() + Send + 'static,
{
    post_at(Instant::now() + delay, color, f)
}

/// Posts `f` as an event of `color` at `at` (at once if `at` is past).
pub fn post_at<F>(at: Instant, color: Color, f: F) -> Result<Timer, Error>
where
    F: FnOnce() + Send + 'static,
{
    let shared = with_current(|ctx| ctx.shared.clone()).ok_or(Error::NotInRuntime)?;
    Ok(timer_on(&shared, at, color, Task::new(f)))
}

/// The event that runs a readiness handler and hands it back to its owner.
fn handler_event(token: u64, handler: Handler, ready: Ready, state: Arc<WatchState>) -> Task {
    Task::new(move || {
        let mut handler = handler;
        let mut ev = Event { ready, cancel: false };
        if !state.cancelled.load(Ordering::Acquire) {
            handler(&mut ev);
        } else {
            ev.cancel = true;
        }
        let Some(shared) = state.shared.upgrade() else { return };
        if ev.cancel {
            drop(handler);
            if !state.cancelled.swap(true, Ordering::AcqRel) {
                send_io(&shared, state.owner, IoMsg::Unwatch { token });
            }
        } else {
            send_io(&shared, state.owner, IoMsg::Handback { token, handler });
        }
    })
}

impl Core {
    /// Handles an I/O message addressed to this worker.
    pub(crate) fn io_receive(&mut self, shared: &Shared, msg: IoMsg) {
        match msg {
            IoMsg::Watch { token, mut reg } => {
                if reg.state.cancelled.load(Ordering::Acquire) {
                    self.io.early.remove(&token);
                    self.unwatch_reg(shared, reg);
                    return;
                }
                self.counters.add(Counter::Watches, 1);
                if let Some(early) = self.io.early.remove(&token) {
                    reg.pending = early;
                }
                let dispatch = !reg.pending.is_empty();
                self.io.insert_reg(token, reg);
                if dispatch {
                    self.dispatch(shared, token, Ready::default());
                }
            }
            IoMsg::Unwatch { token } => {
                self.io.early.remove(&token);
                if let Some(reg) = self.io.remove_reg(token) {
                    self.unwatch_reg(shared, reg);
                }
            }
            IoMsg::Handback { token, handler } => {
                // A handler dropped here is buried: its destructor may post, and the core (of
                // this worker, or of a stand-in's, `stand_in`) is borrowed.
                let Some(reg) = self.io.regs.get_mut(&token) else {
                    self.bury(Box::new(handler));
                    return;
                };
                if reg.state.cancelled.load(Ordering::Acquire) {
                    self.bury(Box::new(handler));
                    let reg = self.io.remove_reg(token).expect("present");
                    self.unwatch_reg(shared, reg);
                    return;
                }
                reg.handler = Some(handler);
                if !reg.pending.is_empty() {
                    self.dispatch(shared, token, Ready::default());
                }
            }
            IoMsg::Timer { at, color, task, state } => {
                if state.cancelled.load(Ordering::Acquire) {
                    self.counters.add(Counter::TimersCancelled, 1);
                    self.bury(Box::new(task));
                    return;
                }
                let st = state.clone();
                let guarded = Task::new(move || {
                    if !st.cancelled.load(Ordering::Acquire) {
                        task.run();
                    }
                });
                let key = self.io.wheel.insert(at, color, guarded);
                state.key.store(pack(key), Ordering::Release);
            }
            IoMsg::CancelTimer { state } => {
                let key = state.key.load(Ordering::Acquire);
                if key != u64::MAX {
                    if let Some((_, task)) = self.io.wheel.cancel(unpack(key)) {
                        self.counters.add(Counter::TimersCancelled, 1);
                        self.bury(Box::new(task));
                    }
                }
            }
        }
    }

    fn unwatch_reg(&mut self, shared: &Shared, reg: Registration) {
        // SAFETY: `BorrowedFd::borrow_raw` needs the descriptor to stay open while borrowed: it
        // is only passed to `fstat` and `epoll_ctl`, which fail harmlessly (EBADF) on a closed
        // descriptor, and the identity check keeps a reused number from being deleted.
        let fd = unsafe { BorrowedFd::borrow_raw(reg.fd) };
        if identity(fd) == Some(reg.identity) {
            let _ = shared.remotes[self.id].poller.delete(fd);
        }
        self.bury(Box::new(reg));
    }

    /// Routes readiness for `token`: posts its handler's event, or remembers it until the
    /// handler (or the registration) is back.
    fn dispatch(&mut self, shared: &Shared, token: u64, ready: Ready) {
        let Some(reg) = self.io.regs.get_mut(&token) else {
            let e = self.io.early.entry(token).or_default();
            *e = e.merge(ready);
            return;
        };
        if reg.state.cancelled.load(Ordering::Acquire) {
            let reg = self.io.remove_reg(token).expect("present");
            self.unwatch_reg(shared, reg);
            return;
        }
        reg.pending = reg.pending.merge(ready);
        let Some(handler) = reg.handler.take() else { return };
        let ready = std::mem::take(&mut reg.pending);
        let (color, state) = (reg.color, reg.state.clone());
        self.counters.add(Counter::IoEvents, 1);
        self.post(shared, color, handler_event(token, handler, ready, state), false);
    }

    /// Polls the epoll set (waiting up to `timeout`) and fires due timers.
    pub(crate) fn poll_io(&mut self, shared: &Shared, timeout: Option<Duration>) {
        self.counters.add(Counter::Polls, 1);
        let mut ready = std::mem::take(&mut self.io.ready);
        let mut events = std::mem::take(&mut self.io.epoll_events);
        if let Err(e) = shared.remotes[self.id].poller.wait(&mut events, timeout, &mut ready) {
            // epoll_wait on a valid epoll fd fails only with EINTR (handled) or a bad buffer;
            // keep going, but never silently.
            eprintln!("ochre: worker {}: epoll_wait failed: {e}", self.id);
        }
        for (token, r) in ready.drain(..) {
            self.dispatch(shared, token, r);
        }
        self.io.ready = ready;
        self.io.epoll_events = events;
        self.fire_timers(shared);
    }

    fn fire_timers(&mut self, shared: &Shared) {
        if self.io.wheel.len() == 0 {
            return;
        }
        let mut fired = std::mem::take(&mut self.io.fired);
        self.io.wheel.advance(Instant::now(), &mut fired);
        for (color, task) in fired.drain(..) {
            self.counters.add(Counter::TimersFired, 1);
            self.post(shared, color, task, false);
        }
        self.io.fired = fired;
    }
}
