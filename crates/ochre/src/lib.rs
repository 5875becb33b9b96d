//! # ochre: colored events on pinned per-core workers
//!
//! An application is a set of handlers; an *event* is a handler with its arguments (a closure).
//! Every event has a [`Color`]: **two events of one color never run at the same time**, events of
//! different colors may run in parallel. An event posted without thinking about colors uses
//! [`Color::DEFAULT`], so an uncolored program is serial and correct, and parallelism is added one
//! color at a time. Handlers never block.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//! use ochre::{Color, Runtime};
//!
//! let rt = Runtime::builder().workers(4).pin(false).build()?;
//! let sum = Arc::new(AtomicU64::new(0));
//! let s = sum.clone();
//! let report = rt.run(Color::DEFAULT, move || {
//!     // Fan out over 100 colors; each color's events are serialized, colors run in parallel.
//!     for i in 0..100u64 {
//!         let s = s.clone();
//!         ochre::post(Color(i), move || {
//!             s.fetch_add(i, Ordering::Relaxed);
//!         });
//!     }
//! })?;
//! assert_eq!(sum.load(Ordering::Relaxed), 4950);
//! assert_eq!(report.total().events_run, 101);
//! # Ok::<(), ochre::Error>(())
//! ```
//!
//! ## Actors
//!
//! State that one color owns is an *actor*: [`Runtime::actor`] (or [`actor`] in a handler)
//! keeps it in the runtime and returns its [`Addr`], a `Copy` address; [`Addr::send`] posts a
//! closure that runs on the state as an event of the actor's color. Messages carry one word for
//! the actor, so sending touches no reference count shared with it (an `Arc` of a
//! [`ColorCell`] cloned into each message does: two atomic writes on a line that moves between
//! the sender's and the receiver's workers). [`Addr::stop`] drops the state. An actor of a color
//! made with [`Color::with_readers`] also takes reads ([`Addr::read`], a closure on `&S`), which
//! run beside each other and never beside its messages.
//!
//! ```
//! use ochre::{Color, Runtime};
//!
//! let rt = Runtime::builder().workers(2).pin(false).build()?;
//! // A ring of 10 actors passing a token 1000 hops; each counts the hops it saw.
//! let ring: Vec<_> = (0..10).map(|i| rt.actor(Color(1 + i), 0u64)).collect();
//! fn hop(ring: std::sync::Arc<Vec<ochre::Addr<u64>>>, at: usize, left: u32) {
//!     if left > 0 {
//!         let next = (at + 1) % ring.len();
//!         ring[next].send(move |seen| {
//!             *seen += 1;
//!             hop(ring, next, left - 1);
//!         });
//!     }
//! }
//! let ring = std::sync::Arc::new(ring);
//! let r = ring.clone();
//! rt.run(Color(0), move || hop(r, 0, 1000))?;
//! let (tx, rx) = std::sync::mpsc::channel();
//! for a in ring.iter() {
//!     let tx = tx.clone();
//!     rt.handle().send(*a, move |seen| tx.send(*seen).unwrap())?;
//! }
//! rt.run(Color(0), || {})?;
//! drop(tx);
//! assert_eq!(rx.iter().sum::<u64>(), 1000);
//! # Ok::<(), ochre::Error>(())
//! ```
//!
//! ## Guarantees
//!
//! 1. **Exclusion**: two events of one color never run at the same time.
//! 2. **Order**: events of one color posted by one poster (one event, or one outside thread) run
//!    in the order posted, and so do those posted by the events of one color (an actor's
//!    messages to another arrive in order), wherever the two colors move meanwhile;
//!    [`post_urgent`] puts an event before the color's queued events that have not started.
//! 3. **Exactly once**: every accepted post runs exactly once, also while colors move between
//!    workers (stealing) and across a shutdown (what did not run stays queued for the next
//!    [`Runtime::run`]; dropping the runtime drops it unrun).
//! 4. **Panics** in handlers are caught, counted and reported with their color; the worker goes
//!    on (or the run aborts, with [`Builder::abort_on_panic`]).
//! 5. **Reads**: a color made with [`Color::with_readers`] also takes reads ([`post_read`]),
//!    which may run at the same time as each other, never at the same time as an exclusive event
//!    of the color; exclusive events keep 1-4, reads run exactly once and their panics are
//!    counted with the color read; a waiting exclusive event holds off later reads (no
//!    starvation). Reads are not ordered with other posts (`reader`).
//!
//! ## How data flows
//!
//! Each color has a *home* worker, a hash of the color over the workers (or, with more workers
//! than CPUs, over as many workers as there are CPUs: [`Config::home_on_every_worker`]); from
//! `Color(64)` on, consecutive colors go in runs of eight, so that a program's thousands of
//! colors numbered in order (a chunk of an array each) give each worker stretches of it.
//! A post from a handler goes to the color's queue on the posting worker if that worker holds the
//! color (no atomic, no shared line), else into the posting worker's outgoing buffer for the
//! color's home worker. Buffers are handed over whole (one compare-and-swap) when full, at the end
//! of each round of events, before idling, or by a safety flush. Each worker takes its whole inbox
//! in one swap, routes events to per-color queues, and runs ready colors a turn at a time, in the
//! order they became ready (with [`Config::backlog_turns`], a color with a backlog of long events
//! well above the others' takes every other turn); the
//! emptied buffers serve its own outgoing batches or ride back to their sender at the end of a
//! batch to it, so a one-way flow (a fan-out) allocates no buffer per batch. Idle
//! workers steal (if enabled), spin (reasoned spinning) or sleep on a futex, condition variable or
//! pipe; the last worker to sleep detects quiescence and ends the run. Descriptors, timers and
//! signals ([`io`]) enter the same path: a worker's epoll set reports readiness, and the worker
//! posts the watching handler as an event of its color; timers fire from the worker's wheel as
//! posts. A worker that watches descriptors or has timers sleeps in its epoll set instead of its
//! parker. An event's closure is stored in memory from the posting worker's EMA heap ([`alloc`]),
//! in blocks reserved for the color's home worker, and the running worker frees it in batches
//! back to the poster; a small closure (up to 24 bytes) posted to another worker travels inside
//! the batch instead and the receiver stores it in its own heap, so that it crosses cores once.
//! [`ColorBox`] gives handlers EMA's placement for their own data. New
//! long-lived colors (a server's connections) can be placed with [`place`]: each worker measures
//! the share of its CPU it gets when it wants to run, and new colors go to workers in proportion.
//! Colors follow their messages ([`Config::follow`], `follow`): a color's home lends it for good
//! to a worker whose chain of messages reaches it while it is idle (a ping-pong partner, the
//! next actor of a ring), so that partners end up on one worker and their messages stay local;
//! it comes back when its posts come from elsewhere, and colors leave a worker whose CPU another
//! process shares. Moves use the lending protocol of stealing, so every guarantee above holds
//! across them. Modules: `queue` (per-color run queue and color lending), `recur` (how many
//! idle colors a worker keeps), `inbox`/`outbox` (transport), `idle`/`park` (sleeping), `steal`,
//! `follow` (where colors live), `worker` (the loop), `alloc` (EMA), `message` (thin tasks), `actor` (actors' states and addresses),
//! `cpu_share` (placement), `io`, `stats`,
//! `config`, `reader` (reader colors: reads run on the posting worker's lane, a reader-writer
//! word per color); seeing inside: [`color_stats`] (sampled per-color statistics), [`trace`] (an
//! opt-in recorder, exported as Chrome trace JSON), [`stall`] (a watchdog that reports a
//! handler running too long).
//!
//! ## Baseline
//!
//! [`Config::baseline`] behaves like the original libasync-smp (one lock per posted event, pipe
//! wake-ups, no spinning, plain stealing, events from the global allocator, colors placed by
//! hash); with the
//! `unpadded` feature, also its memory layout.
//! Every optimization is a switch, for the ablation study.

#![warn(missing_docs)]

mod actor;
pub mod alloc;
mod background;
mod cell;
mod color;
mod color_box;
pub mod color_stats;
mod config;
mod context;
mod cpu_share;
mod error;
mod follow;
mod idle;
mod inbox;
pub mod io;
mod message;
mod outbox;
mod padding;
mod park;
mod queue;
mod reader;
mod recur;
mod run_end;
mod runtime;
mod shared;
#[cfg(all(any(test, feature = "sim"), not(loom)))]
#[doc(hidden)]
pub mod sim;
pub mod stall;
mod stand_in;
mod stats;
mod steal;
mod sync;
pub mod topology;
pub mod trace;
mod tune;
mod turn_clock;
mod wakeup_latency;
mod worker;

#[cfg(all(test, loom))]
mod loom_models;

/// Whether this process's workers may stand in for each other ([`Config::stand_in`]): it takes
/// the kernel's `membarrier` command (Linux 4.14 and later), which a sandbox may refuse.
pub fn stand_ins_available() -> bool {
    stand_in::available()
}

pub use actor::{actor, Addr};
pub use cell::ColorCell;
pub use color::Color;
pub use color_box::{ColorBox, ColorBytes};
pub use color_stats::{ColorStats, ColorSummary};
pub use config::{BatchSize, Config, Spin, Steal, Wakeup};
pub use context::{
    current_color, current_handle, current_worker, current_workers, pin, place, post, post_urgent,
    shutdown, try_post,
};
pub use error::Error;
pub use padding::PADDED;
#[cfg(not(loom))]
pub use park::measure_wakeup;
pub use reader::{current_read, post_read, try_post_read};
pub use runtime::{Builder, EventAlloc, Handle, Hold, RunEnd, RunReport, Runtime, TOP_COLORS};
pub use shared::PanicRecord;
pub use stall::Stall;
pub use stats::WorkerStats;
