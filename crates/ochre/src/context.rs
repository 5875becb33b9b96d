//! The worker a thread is, and the functions handlers call.
//!
//! A worker thread points a thread-local at its `WorkerCtx` for the duration of a run. Handlers
//! reach their worker through it: `post` costs a thread-local read and a borrow of its core
//! (`stand_in::CoreCell`: a `RefCell`'s, which also closes the core to stand-ins), then a
//! push on the worker's own queue (or its outgoing buffer).

use std::cell::Cell;
use std::ptr;

use crate::worker::WorkerCtx;
use crate::{Color, Error};

thread_local! {
    static CURRENT: Cell<*const WorkerCtx> = const { Cell::new(ptr::null()) };
}

/// Makes `ctx` the current worker of this thread until the guard drops.
pub(crate) struct Enter {
    previous: *const WorkerCtx,
}

impl Enter {
    pub(crate) fn new(ctx: &WorkerCtx) -> Enter {
        let previous = CURRENT.with(|c| c.replace(ctx as *const WorkerCtx));
        Enter { previous }
    }
}

impl Drop for Enter {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.previous));
    }
}

/// Runs `f` with this thread's worker, if it is one.
#[inline]
pub(crate) fn with_current<R>(f: impl FnOnce(&WorkerCtx) -> R) -> Option<R> {
    let p = CURRENT.with(|c| c.get());
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` was set by `Enter::new` from a `&WorkerCtx` that outlives the `Enter` guard (the
    // guard is dropped at the end of the worker's run, before the context), and the guard restores
    // the previous value on drop; so a non-null `p` points to a live context of this thread.
    // `WorkerCtx` is only ever used on its own thread.
    Some(f(unsafe { &*p }))
}

/// Posts on this thread's worker; `None` outside a handler. (An `Option`, not a `Result`: the
/// hot path then builds and drops no error value, which cost a tenth of a post.)
#[inline]
pub(crate) fn post_closure<F: FnOnce() + Send + 'static>(
    color: Color,
    f: F,
    urgent: bool,
) -> Option<()> {
    with_current(|ctx| post_on(ctx, color, f, urgent))
}

/// Posts on `ctx`, this thread's worker.
#[inline]
fn post_on<F: FnOnce() + Send + 'static>(ctx: &WorkerCtx, color: Color, f: F, urgent: bool) {
    let mut core = ctx.core.borrow_mut();
    if core.colors.sample_post() {
        return post_timed(ctx, core, color, f, urgent);
    }
    core.post_closure(&ctx.shared, color, f, urgent)
}

/// Runs `f` with this thread's worker if it belongs to runtime number `runtime` (an actor's
/// messages and reads go only to the runtime that keeps its state: `actor`).
#[inline]
pub(crate) fn in_runtime<R>(runtime: u64, f: impl FnOnce(&WorkerCtx) -> R) -> Option<R> {
    with_current(|ctx| (ctx.shared.id == runtime).then(|| f(ctx))).flatten()
}

/// Posts as [`post_closure`] if this thread's worker belongs to runtime number `runtime`.
#[inline]
pub(crate) fn post_in<F: FnOnce() + Send + 'static>(
    runtime: u64,
    color: Color,
    f: F,
) -> Option<()> {
    in_runtime(runtime, |ctx| post_on(ctx, color, f, false))
}

/// A post that carries its posting instant (one in the sample period, `color_stats`): out of
/// line, so that the common post stays as small as it was.
#[cold]
#[inline(never)]
fn post_timed<F: FnOnce() + Send + 'static>(
    ctx: &WorkerCtx,
    mut core: crate::stand_in::CoreMut<'_>,
    color: Color,
    f: F,
    urgent: bool,
) {
    core.post_closure(&ctx.shared, color, crate::color_stats::timed(f), urgent)
}

#[cold]
#[inline(never)]
pub(crate) fn not_in_runtime(what: &str) -> ! {
    panic!("{what}: {}", Error::NotInRuntime)
}

/// Posts `f` as an event of `color`, at the tail of the color's queue.
///
/// Events of one color posted by one handler run in the order posted, and so do those posted by
/// the handlers of one color (as an actor's messages to another actor).
///
/// # Panics
///
/// If called outside an ochre handler: use [`Handle::post`](crate::Handle::post) from other
/// threads, or [`try_post`] to get an error instead.
#[inline]
pub fn post<F: FnOnce() + Send + 'static>(color: Color, f: F) {
    if post_closure(color, f, false).is_none() {
        not_in_runtime("ochre::post");
    }
}

/// Posts `f` as an urgent event of `color`: it runs before the color's queued events that have not
/// started (urgent events of one poster keep their order among themselves), and the color goes to
/// the head of its worker's ready list.
///
/// # Panics
///
/// If called outside an ochre handler (see [`post`]).
#[inline]
pub fn post_urgent<F: FnOnce() + Send + 'static>(color: Color, f: F) {
    if post_closure(color, f, true).is_none() {
        not_in_runtime("ochre::post_urgent");
    }
}

/// Like [`post`], but returns [`Error::NotInRuntime`] instead of panicking outside a handler.
pub fn try_post<F: FnOnce() + Send + 'static>(color: Color, f: F) -> Result<(), Error> {
    post_closure(color, f, false).ok_or(Error::NotInRuntime)
}

/// Pins `color` to its home worker: stealing never moves it (the accept color of a server is
/// the example: `io::Listener::serve` pins its color). Call from a handler; from other threads
/// use [`Handle::pin`](crate::Handle::pin). If the color is lent at the moment, it comes back
/// as usual and then stays.
pub fn pin(color: Color) -> Result<(), Error> {
    with_current(|ctx| {
        let home = crate::color::home_of(color, ctx.shared.placement);
        let mut core = ctx.core.borrow_mut();
        if home == ctx.id {
            core.queue.pin(color);
        } else {
            core.send(&ctx.shared, home, crate::message::Msg::Pin { color });
        }
    })
    .ok_or(Error::NotInRuntime)
}

/// How many colors from its seed [`place`] tries for one homed on the chosen worker: always
/// enough up to 256 workers from `Color(64)` on (`color::first_homed_on`'s bound), and below
/// it all fail with probability `(1 - 1/n)^4096`. If none is, the color keeps the seed's home
/// (hash placement).
pub(crate) const PLACE_TRIES: u64 = 4096;

/// The color to give new long-lived work, a connection for instance, chosen among `seed`,
/// `seed + 1`, ... up to `seed + 4095` (space the seeds of concurrent colors by 4096).
///
/// With [`Config::placement`](crate::Config) (the default), new colors go to workers in
/// proportion to the share of its CPU each one gets when it wants to run, interleaved: a worker
/// sharing its CPU with a thread outside the runtime (a load injector, another process) gets
/// fewer connections instead of becoming the bottleneck of all of them. Each worker measures its
/// share from the kernel's run-queue delay (`/proc/thread-self/schedstat`); where that cannot be
/// read, shares are even. Placement applies to new colors only: a color never changes its home.
///
/// With more workers than CPUs, only the workers that home colors are chosen
/// ([`Runtime::homes`](crate::Runtime::homes)). Returns `Color(seed)` when placement is off (the
/// libasync-smp baseline), with one such worker, or outside a handler.
pub fn place(seed: u64) -> Color {
    with_current(|ctx| ctx.core.borrow_mut().place(&ctx.shared, seed)).unwrap_or(Color(seed))
}

/// The color of the running event, or `None` outside a handler.
pub fn current_color() -> Option<Color> {
    with_current(|ctx| ctx.current.get()).flatten()
}

/// A handle to the runtime running the current handler, or `None` outside a handler (for a
/// handler that reports on its runtime: [`Handle::stats`](crate::Handle::stats),
/// [`Handle::color_stats`](crate::Handle::color_stats)).
pub fn current_handle() -> Option<crate::Handle> {
    with_current(|ctx| crate::runtime::Handle::from_shared(ctx.shared.clone()))
}

/// The index of the worker running the current handler, or `None` outside a handler.
pub fn current_worker() -> Option<usize> {
    with_current(|ctx| ctx.id)
}

/// The number of workers of the runtime running the current handler, or `None` outside a
/// handler (for per-worker tables sized from inside the runtime).
pub fn current_workers() -> Option<usize> {
    with_current(|ctx| ctx.shared.workers)
}

/// Ends the current run: each worker stops after its current turn, and
/// [`Runtime::run`](crate::Runtime::run) returns. Events not run stay queued and run at the next
/// `run` (the run report counts them as `pending`). Does nothing outside a handler; from other
/// threads use [`Handle::shutdown`](crate::Handle::shutdown).
///
/// A worker asleep on a CPU shared with another process (or late to a run's end lately) sleeps
/// through the end, as through a quiescent one (`Config::sleep_through_ends`): `run` does not
/// wait for it to wake.
pub fn shutdown() {
    with_current(shutdown_from);
}

/// Ends the current run from a handler running on `ctx` (`shutdown`).
pub(crate) fn shutdown_from(ctx: &WorkerCtx) {
    let slept_on = ctx.shared.stop_from_worker(crate::shared::SHUTDOWN, ctx.run.get(), ctx.id);
    if slept_on > 0 {
        ctx.core
            .borrow_mut()
            .counters
            .add(crate::stats::Counter::EndsSleptThrough, slept_on as u64);
    }
}
