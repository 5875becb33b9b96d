//! Traces: an opt-in recorder of what each worker did and decided, exported as Chrome trace
//! JSON (the `traceEvents` format that ui.perfetto.dev and chrome://tracing open as they are).
//!
//! What is recorded, per worker, with timestamps from one clock for the whole process
//! (nanoseconds since its first use, so that runtimes line up): every handler run (a span, with its color); idle
//! spells and, inside them, sleeps (spans: the gap between them and the next handler is the
//! wake-up); the runtime's decisions: colors moved in and out (`follow`), stolen and lent,
//! and each batch of messages handed to another worker (instants, with the color or the peer
//! and the batch size).
//!
//! Invariants:
//!
//! * **Off costs a branch.** With [`Config::trace_events`](crate::Config) at 0 (the default)
//!   every hook is one test of a field of the worker's own `Recorder`.
//! * **Bounded memory.** Each worker keeps at most `trace_events` records in a ring; when it is
//!   full the oldest record is dropped and counted ([`WorkerTrace::dropped`]), so a long run
//!   keeps its end, which is what a person looking at a stop or a stall wants.
//! * **No shared write on the hot path.** The ring is the worker's; at the end of each run the
//!   worker appends it to its slot of `Published` (same bound, same drop-oldest), which
//!   [`Handle::trace`](crate::Handle::trace) reads. Spans of one worker never overlap, and the
//!   spans of one color never overlap either (a color runs on one worker at a time, and its
//!   hand-over from one worker to another orders the first's end before the second's start).
//!
//! **Every runtime of a process** ([`trace_every_runtime`]): for a program that builds many
//! runtimes (a benchmark builds one a sample; `ochre bench --trace FILE`), every runtime built
//! afterwards records (unless its configuration asks for a ring of its own) and, when dropped,
//! hands its trace to a process-wide list that keeps the newest few ([`take_collected`]);
//! [`chrome_of_runtimes`] shows each as a process of its own in the viewer, on the one clock of
//! the process. Memory stays bounded: the rings' size times the workers times the runtimes kept.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use serde::Serialize;

use crate::color_stats::Event;
use crate::Color;

/// What a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A handler ran (span; `color`).
    Handler,
    /// The worker had nothing to run: spinning, stealing, sleeping (span).
    Idle,
    /// The worker slept until woken (span, inside an idle spell).
    Sleep,
    /// A color moved here for good (instant; `color`).
    MovedIn,
    /// A color moved away from here, its home (instant; `color`, `peer`).
    MovedOut,
    /// A color was stolen by this worker (instant; `color`, `peer`: the victim).
    Stolen,
    /// A color was lent to a thief (instant; `color`, `peer`: the thief).
    Lent,
    /// A batch of messages was handed to another worker (instant; `peer`, `messages`).
    Flush,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Handler => "handler",
            Kind::Idle => "idle",
            Kind::Sleep => "sleep",
            Kind::MovedIn => "move in",
            Kind::MovedOut => "move out",
            Kind::Stolen => "steal",
            Kind::Lent => "lend",
            Kind::Flush => "flush",
        }
    }

    fn category(self) -> &'static str {
        match self {
            Kind::Handler => "handler",
            Kind::Idle | Kind::Sleep => "idle",
            Kind::MovedIn | Kind::MovedOut | Kind::Stolen | Kind::Lent => "placement",
            Kind::Flush => "transport",
        }
    }
}

/// One record: a span (`dur_ns > 0` or a handler) or an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Record {
    /// What happened.
    pub kind: Kind,
    /// When it started, in nanoseconds since the process first used the trace clock.
    pub start_ns: u64,
    /// How long it lasted (0 for instants).
    pub dur_ns: u64,
    /// The color concerned, if any.
    pub color: Option<Color>,
    /// The other worker concerned, if any.
    pub peer: Option<u32>,
    /// Messages in a flushed batch.
    pub messages: u32,
}

/// The clock every worker's timestamps count from: the first use in the process (one clock
/// for all runtimes of a process, so their traces line up).
pub(crate) fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Milliseconds since [`epoch`], plus one (0 stays free for "never"): the coarse stamps of a
/// CPU found shared (`cpu_share`) and of the block pool's decay periods (`alloc::pool`).
pub(crate) fn epoch_ms() -> u64 {
    epoch().elapsed().as_millis() as u64 + 1
}

impl crate::worker::Core {
    /// A move or a steal of `color` (with the other worker): counted for the color
    /// (`color_stats`) and traced.
    #[inline]
    pub(crate) fn note(&mut self, color: Color, what: Event, peer: Option<usize>) {
        self.colors.count(color, what);
        self.trace.placement(color, what, peer);
    }

    /// An event of `color` timed from `started` (sampled for `color_stats`, or traced) ended.
    #[cold]
    pub(crate) fn ran_timed(
        &mut self,
        color: Color,
        started: Instant,
        ended: Instant,
        sampled: bool,
    ) {
        if sampled {
            self.colors.ran(color, started, ended);
        }
        self.trace.handler(color, started, ended);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A bounded ring: pushing into a full one drops the oldest record and counts it.
#[derive(Clone, Debug, Default)]
struct Ring {
    records: VecDeque<Record>,
    dropped: u64,
}

impl Ring {
    fn push(&mut self, r: Record, cap: usize) {
        if self.records.len() >= cap {
            self.records.pop_front();
            self.dropped += 1;
        }
        self.records.push_back(r);
    }
}

/// A worker's own recorder (in its `Core`).
pub(crate) struct Recorder {
    /// Ring capacity; 0: off.
    cap: usize,
    epoch: Instant,
    ring: Ring,
}

impl Recorder {
    pub(crate) fn new(cap: usize, epoch: Instant) -> Self {
        Recorder { cap, epoch, ring: Ring::default() }
    }

    /// Whether traces are on.
    #[inline]
    pub(crate) fn on(&self) -> bool {
        self.cap != 0
    }

    fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_nanos().min(u128::from(u64::MAX)) as u64
    }

    #[cold]
    fn push(&mut self, kind: Kind, start: Instant, end: Option<Instant>, color: Option<Color>) {
        self.push_full(kind, start, end, color, None, 0);
    }

    #[cold]
    fn push_full(
        &mut self,
        kind: Kind,
        start: Instant,
        end: Option<Instant>,
        color: Option<Color>,
        peer: Option<u32>,
        messages: u32,
    ) {
        let start_ns = self.ns(start);
        let dur_ns = end.map_or(0, |e| self.ns(e).saturating_sub(start_ns));
        let r = Record { kind, start_ns, dur_ns, color, peer, messages };
        self.ring.push(r, self.cap);
    }

    /// A handler of `color` ran from `start` to `end`.
    #[inline]
    pub(crate) fn handler(&mut self, color: Color, start: Instant, end: Instant) {
        if self.on() {
            self.push(Kind::Handler, start, Some(end), Some(color));
        }
    }

    /// A span of `kind` (idle, sleep) from `start` to now.
    #[inline]
    pub(crate) fn span_since(&mut self, kind: Kind, start: Option<Instant>) {
        if let Some(start) = start.filter(|_| self.on()) {
            self.push(kind, start, Some(Instant::now()), None);
        }
    }

    /// When to start a span: now if traces are on (one clock read), else nothing.
    #[inline]
    pub(crate) fn start(&self) -> Option<Instant> {
        self.on().then(Instant::now)
    }

    /// A batch of `messages` handed to worker `peer`.
    #[inline]
    pub(crate) fn flush(&mut self, peer: usize, messages: usize) {
        if self.on() {
            let now = Instant::now();
            self.push_full(Kind::Flush, now, None, None, Some(peer as u32), messages as u32);
        }
    }

    /// A move or a steal of `color`, with the other worker if known.
    #[inline]
    pub(crate) fn placement(&mut self, color: Color, what: Event, peer: Option<usize>) {
        if self.on() {
            let kind = match what {
                Event::MovedIn => Kind::MovedIn,
                Event::MovedOut => Kind::MovedOut,
                Event::StolenIn => Kind::Stolen,
                Event::LentOut => Kind::Lent,
            };
            let now = Instant::now();
            self.push_full(kind, now, None, Some(color), peer.map(|p| p as u32), 0);
        }
    }

    /// Appends the ring to `slot` (same bound, drop-oldest) and empties it: at the end of a run.
    pub(crate) fn publish(&mut self, slot: &Mutex<WorkerTrace>) {
        if !self.on() {
            return;
        }
        let mut published = lock(slot);
        let mut ring = Ring {
            records: std::mem::take(&mut published.records).into(),
            dropped: published.dropped,
        };
        ring.dropped += self.ring.dropped;
        for r in self.ring.records.drain(..) {
            ring.push(r, self.cap);
        }
        self.ring.dropped = 0;
        published.records = ring.records.into();
        published.dropped = ring.dropped;
    }
}

/// One worker's records, oldest first.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WorkerTrace {
    /// The records kept.
    pub records: Vec<Record>,
    /// Records dropped, oldest first, because the ring was full.
    pub dropped: u64,
}

/// Each worker's published records.
pub(crate) struct Published {
    slots: Box<[Mutex<WorkerTrace>]>,
}

impl Published {
    pub(crate) fn new(workers: usize) -> Self {
        Published { slots: (0..workers).map(|_| Mutex::new(WorkerTrace::default())).collect() }
    }

    pub(crate) fn slot(&self, worker: usize) -> &Mutex<WorkerTrace> {
        &self.slots[worker]
    }

    pub(crate) fn snapshot(&self) -> Trace {
        Trace { workers: self.slots.iter().map(|s| lock(s).clone()).collect() }
    }
}

/// What every worker recorded, as of the end of the last run
/// ([`Runtime::trace`](crate::Runtime::trace)).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Trace {
    /// Per worker, by index.
    pub workers: Vec<WorkerTrace>,
}

/// Records per worker for every runtime built from now on ([`trace_every_runtime`]); 0: off.
static EVERY_RUNTIME: AtomicUsize = AtomicUsize::new(0);

/// The traces of the runtimes dropped while [`trace_every_runtime`] was on, newest last.
static COLLECTED: Mutex<Collected> =
    Mutex::new(Collected { runtimes: VecDeque::new(), let_go: 0, keep: 0 });

/// The trace of one runtime, as it was dropped.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RuntimeTrace {
    /// The runtime's number in the process (in the order they were built, from 1).
    pub runtime: u64,
    /// What its workers recorded.
    pub trace: Trace,
}

/// The runtimes' traces kept by [`trace_every_runtime`] ([`take_collected`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Collected {
    /// The newest runtimes' traces, in the order they were dropped.
    pub runtimes: VecDeque<RuntimeTrace>,
    /// Traces let go for newer ones (the bound).
    pub let_go: u64,
    /// How many are kept.
    #[serde(skip)]
    keep: usize,
}

impl Collected {
    /// Lets the oldest traces go down to the bound.
    fn trim(&mut self) {
        while self.runtimes.len() > self.keep {
            self.runtimes.pop_front();
            self.let_go += 1;
        }
    }
}

/// Traces every runtime built in this process from now on, with `records_per_worker` records
/// per worker (the ring of [`Config::trace_events`](crate::Config), for runtimes whose
/// configuration asks for none: their [`Runtime::config`](crate::Runtime::config) then shows
/// it), and keeps the traces of the newest `keep` traced runtimes
/// dropped ([`take_collected`]; a runtime that recorded nothing, never run, is not kept).
/// Memory: at most `keep` runtimes' rings, besides those of the runtimes alive. `keep` 0 keeps
/// none (runtimes still record, for [`Runtime::trace`](crate::Runtime::trace));
/// `records_per_worker` 0 stops tracing new runtimes (those built already go on recording,
/// and are kept when dropped while `keep` is not 0). A lower `keep` lets the oldest kept go
/// at once. For programs that build their runtimes where a person cannot reach their
/// configuration: a benchmark, a library's internals.
pub fn trace_every_runtime(records_per_worker: usize, keep: usize) {
    let mut c = lock(&COLLECTED);
    c.keep = keep;
    c.trim();
    EVERY_RUNTIME.store(records_per_worker, Ordering::Relaxed);
}

/// The ring size [`trace_every_runtime`] asks of new runtimes (0: off).
pub(crate) fn every_runtime_records() -> usize {
    EVERY_RUNTIME.load(Ordering::Relaxed)
}

/// A traced runtime is dropped: its trace (`trace`, taken only if kept, outside the lock: it
/// is megabytes) joins the collected ones if [`trace_every_runtime`] keeps any.
pub(crate) fn collect(runtime: u64, trace: impl FnOnce() -> Trace) {
    if lock(&COLLECTED).keep == 0 {
        return;
    }
    let trace = trace();
    if trace.is_empty() {
        return;
    }
    let mut c = lock(&COLLECTED);
    if c.keep > 0 {
        c.runtimes.push_back(RuntimeTrace { runtime, trace });
        c.trim();
    }
}

/// Takes the traces collected so far ([`trace_every_runtime`]), leaving none; the setting
/// stays (runtimes dropped later are collected as before).
pub fn take_collected() -> Collected {
    let mut c = lock(&COLLECTED);
    let keep = c.keep;
    let taken = std::mem::take(&mut *c);
    c.keep = keep;
    taken
}

/// The collected runtimes' traces as one Chrome trace: each runtime a process of the viewer
/// (`ochre runtime N`), its workers the threads, on the process's one clock.
pub fn chrome_of_runtimes(collected: &Collected) -> ChromeTrace {
    let mut events = Vec::new();
    let mut dropped = Vec::new();
    for (i, rt) in collected.runtimes.iter().enumerate() {
        rt.trace.push_chrome(&mut events, i as u32 + 1, format!("ochre runtime {}", rt.runtime));
        dropped.extend(rt.trace.workers.iter().map(|w| w.dropped));
    }
    ChromeTrace {
        trace_events: events,
        display_time_unit: "ns",
        other_data: ChromeOther { dropped, runtimes_let_go: Some(collected.let_go) },
    }
}

/// A Chrome trace event (the "JSON object format" of the Trace Event Format).
#[derive(Clone, Debug, Serialize)]
pub struct ChromeEvent {
    /// Event name (`handler`, `sleep`, `steal`, ..., or `thread_name` for metadata).
    pub name: String,
    /// Category (`handler`, `idle`, `placement`, `transport`, `__metadata`).
    pub cat: &'static str,
    /// Phase: `X` (complete span), `i` (instant), `M` (metadata).
    pub ph: &'static str,
    /// Start, in microseconds.
    pub ts: f64,
    /// Duration of an `X` event, in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    /// Process id (1: the runtime).
    pub pid: u32,
    /// Thread id: the worker.
    pub tid: usize,
    /// Scope of an instant event (`t`: its thread).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s: Option<&'static str>,
    /// Details.
    pub args: ChromeArgs,
}

/// The details of a [`ChromeEvent`].
#[derive(Clone, Debug, Default, Serialize)]
pub struct ChromeArgs {
    /// The color, in decimal (a string: colors exceed JSON's exact integers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
    /// The other worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<u32>,
    /// Messages in a flushed batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<u32>,
    /// Thread name, for metadata events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A whole Chrome trace: serialize it with serde_json and open it in ui.perfetto.dev.
#[derive(Clone, Debug, Serialize)]
pub struct ChromeTrace {
    /// The events, metadata first, then every worker's records in order.
    #[serde(rename = "traceEvents")]
    pub trace_events: Vec<ChromeEvent>,
    /// `ns`: the viewer shows nanoseconds.
    #[serde(rename = "displayTimeUnit")]
    pub display_time_unit: &'static str,
    /// Records dropped per worker (the rings were full).
    #[serde(rename = "otherData")]
    pub other_data: ChromeOther,
}

/// `otherData` of a [`ChromeTrace`].
#[derive(Clone, Debug, Serialize)]
pub struct ChromeOther {
    /// Records dropped per worker, oldest first (worker after worker of each runtime, for
    /// [`chrome_of_runtimes`]).
    pub dropped: Vec<u64>,
    /// For [`chrome_of_runtimes`]: the runtimes' traces let go for newer ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtimes_let_go: Option<u64>,
}

impl Trace {
    /// Records over all workers.
    pub fn len(&self) -> usize {
        self.workers.iter().map(|w| w.records.len()).sum()
    }

    /// True if nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The trace in the Chrome trace JSON format.
    pub fn chrome(&self) -> ChromeTrace {
        let mut events = Vec::with_capacity(self.len() + self.workers.len() + 1);
        self.push_chrome(&mut events, 1, "ochre".into());
        ChromeTrace {
            trace_events: events,
            display_time_unit: "ns",
            other_data: ChromeOther {
                dropped: self.workers.iter().map(|w| w.dropped).collect(),
                runtimes_let_go: None,
            },
        }
    }

    /// Appends the trace's events as process `pid`, named `process`: metadata first, then
    /// every worker's records in order.
    fn push_chrome(&self, events: &mut Vec<ChromeEvent>, pid: u32, process: String) {
        let meta = |name: &str, tid: usize, value: String| ChromeEvent {
            name: name.into(),
            cat: "__metadata",
            ph: "M",
            ts: 0.0,
            dur: None,
            pid,
            tid,
            s: None,
            args: ChromeArgs { name: Some(value), ..Default::default() },
        };
        events.push(meta("process_name", 0, process));
        for tid in 0..self.workers.len() {
            events.push(meta("thread_name", tid, format!("worker {tid}")));
        }
        for (tid, w) in self.workers.iter().enumerate() {
            for r in &w.records {
                let span = matches!(r.kind, Kind::Handler | Kind::Idle | Kind::Sleep);
                events.push(ChromeEvent {
                    name: r.kind.name().into(),
                    cat: r.kind.category(),
                    ph: if span { "X" } else { "i" },
                    ts: r.start_ns as f64 / 1000.0,
                    dur: span.then(|| r.dur_ns as f64 / 1000.0),
                    pid,
                    tid,
                    s: (!span).then_some("t"),
                    args: ChromeArgs {
                        color: r.color.map(|c| c.0.to_string()),
                        peer: r.peer,
                        messages: (r.kind == Kind::Flush).then_some(r.messages),
                        name: None,
                    },
                });
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_full_ring_drops_the_oldest_and_counts() {
        let epoch = Instant::now();
        let mut r = Recorder::new(3, epoch);
        for i in 0..5u64 {
            let t = epoch + Duration::from_micros(i);
            r.handler(Color(i), t, t + Duration::from_nanos(100));
        }
        let slot = Mutex::new(WorkerTrace::default());
        r.publish(&slot);
        let w = lock(&slot).clone();
        assert_eq!(w.dropped, 2);
        let colors: Vec<u64> = w.records.iter().map(|r| r.color.unwrap().0).collect();
        assert_eq!(colors, [2, 3, 4]);
        assert_eq!(w.records[0].dur_ns, 100);
        // A second run appends, within the same bound.
        r.handler(Color(9), epoch, epoch);
        r.publish(&slot);
        let w = lock(&slot).clone();
        assert_eq!((w.records.len(), w.dropped), (3, 3));
        assert_eq!(w.records[2].color, Some(Color(9)));
    }

    #[test]
    fn a_record_takes_48_bytes() {
        // The figure the rings' sizes are documented with (`Config::trace_events`, the CLI's).
        assert_eq!(std::mem::size_of::<Record>(), 48);
    }

    #[test]
    fn off_records_nothing() {
        let mut r = Recorder::new(0, Instant::now());
        r.handler(Color(1), Instant::now(), Instant::now());
        r.flush(1, 3);
        assert!(r.start().is_none());
        let slot = Mutex::new(WorkerTrace::default());
        r.publish(&slot);
        assert!(lock(&slot).records.is_empty());
    }
}
