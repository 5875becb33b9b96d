//! Per-color statistics, cheap enough to leave on: events run, run time and queue wait
//! (histograms), moves and steals, per color; merged across workers on demand.
//!
//! How it stays cheap (the invariants):
//!
//! * **Sampled.** With a sample period of `N` ([`Config::color_stats`](crate::Config)), one turn
//!   in `N` is measured (every event of that turn is timed and counted for its color) and one
//!   post in `N` made by a handler carries its posting instant (its wait is recorded when it
//!   starts). An unsampled turn or post costs one decrement and a branch of a counter in the
//!   worker's own memory; no clock read, no map lookup. Moves and steals are rare and counted
//!   exactly, each as an increment in a map of counts apart from the histograms (an entry
//!   with histograms is made by a reader, not on the move's path). Counts of events and run
//!   time are therefore estimates (`sampled × N`), exact with `N = 1`.
//! * **Per worker, no shared atomics on the hot path; no histogram on the worker.** A sampled
//!   figure (a run time or a wait, with its color) is pushed to a buffer in the worker's own
//!   `Local` (in its `Core`): 16 bytes, no map lookup, no histogram touched. Every so often (at
//!   most every [`FLUSH_EVERY`], and before the worker sleeps, and always at the end of a run)
//!   the worker hands the buffer to its `Slot` of `Published` (a swap or a copy, under a mutex
//!   that only readers contend for, never waited for in the middle of a run), and the figures
//!   are made into histograms by whoever reads them (a snapshot,
//!   [`Handle::color_stats`](crate::Handle::color_stats), as the run report's after the workers
//!   are done), on the reader's thread. Why: histograms made on the worker, two per color, were
//!   allocated afresh on every new runtime
//!   and grown value by value (a few hundred counters each; about 90 page faults per runtime
//!   for producer-consumer's 101 colors, `perf stat`), and the histograms' memory went through
//!   the worker's cache at each sampled event. The worker folds figures into histograms itself
//!   only past a bound: its buffer fills between two flushes ([`LOCAL_SAMPLES`], a short
//!   period: with 1 in 1, every event), or no reader took its slot's figures for a long time
//!   ([`PENDING_SAMPLES`]). A snapshot is at most one flush old while the runtime runs (the
//!   figures a worker is folding past that bound at the time show in the next one) and exact
//!   in a run report (the workers flushed, waiting for the locks, before they reported done).
//! * **Bounded memory.** A table keeps at most [`MAX_COLORS`] colors; past it, the colors with
//!   the least run time are folded into one "other" entry, so totals stay right and the top
//!   colors (what a person looks for) stay named. Per-color histograms have one significant
//!   digit (values within 10%) and grow only to the largest value recorded.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::Color;

/// Most colors a table keeps by name (per worker, and in the merged view): 512 colors of two
/// histograms of a few KiB each bound a worker's statistics to a few MiB. A guess: a server's
/// busiest connections or a program's actors fit; the rest are summed as "other".
pub const MAX_COLORS: usize = 512;
/// Least time between two flushes of a worker's table made in the middle of busy rounds (a
/// snapshot is at most this old for a busy worker; idle workers flush before they sleep).
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// Significant digits of the per-color histograms (1: within 10%, a few hundred counters).
const SIGFIG: u8 = 1;
/// Sampled figures a worker keeps between two flushes before it makes them into histograms
/// itself (64 KiB): at 1 in 1024 a flush comes first (4M events; [`FLUSH_EVERY`] at 30M events
/// a second is 3M events, 3,000 figures); with a short period (1 in 1, exact, for tests) this
/// bounds the worker's memory.
pub const LOCAL_SAMPLES: usize = 4096;
/// Figures a worker's slot keeps for readers before the worker makes them into histograms
/// itself (1 MiB): a run that nobody reads keeps bounded memory (at 1 in 1024 and 30M events a
/// second, every 2 s or so).
pub const PENDING_SAMPLES: usize = 1 << 16;

fn histogram() -> Histogram<u64> {
    // An auto-resizing histogram from 1: cannot fail for sigfig 1.
    Histogram::new(SIGFIG).unwrap_or_else(|_| unreachable!("sigfig 1 is valid"))
}

/// Records `v`: the histogram grows to hold it (`saturating_record` would clamp it to the
/// histogram's present range instead).
fn record(h: &mut Histogram<u64>, v: u64) {
    if h.record(v).is_err() {
        h.saturating_record(v);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What is known of one color (or, in [`ColorStats::other`], of the colors folded together).
#[derive(Clone, Debug)]
pub struct ColorEntry {
    /// The color (`Color(u64::MAX)` for "other").
    pub color: Color,
    /// Run time of the sampled events, in nanoseconds (one value per event).
    pub run_ns: Histogram<u64>,
    /// Time from post to start of the sampled posts' events, in nanoseconds (posts made by
    /// handlers; I/O readiness, timers and outside posts carry no posting instant).
    pub wait_ns: Histogram<u64>,
    /// Sum of `run_ns`'s values (exact, unlike a sum over buckets).
    pub run_ns_sum: u64,
    /// Times the color moved to a worker for good (`follow`), counted where it arrived.
    pub moves_in: u64,
    /// Times the color moved away from its home.
    pub moves_out: u64,
    /// Times the color was stolen (counted by the thief).
    pub steals_in: u64,
    /// Times the color was lent to a thief (counted by the victim).
    pub steals_out: u64,
}

impl ColorEntry {
    fn new(color: Color) -> Self {
        ColorEntry {
            color,
            run_ns: histogram(),
            wait_ns: histogram(),
            run_ns_sum: 0,
            moves_in: 0,
            moves_out: 0,
            steals_in: 0,
            steals_out: 0,
        }
    }

    /// Sampled events run.
    pub fn sampled_events(&self) -> u64 {
        self.run_ns.len()
    }

    /// Nothing recorded (a worker's entry since its last flush).
    fn is_blank(&self) -> bool {
        self.run_ns.is_empty()
            && self.wait_ns.is_empty()
            && self.run_ns_sum == 0
            && self.moves_in + self.moves_out + self.steals_in + self.steals_out == 0
    }

    /// Forgets what was recorded, keeping the histograms' memory (`Local::flush`).
    fn clear(&mut self) {
        self.run_ns.reset();
        self.wait_ns.reset();
        self.run_ns_sum = 0;
        (self.moves_in, self.moves_out, self.steals_in, self.steals_out) = (0, 0, 0, 0);
    }

    fn merge(&mut self, other: &ColorEntry) {
        // Both auto-resize: addition cannot fail.
        let _ = self.run_ns.add(&other.run_ns);
        let _ = self.wait_ns.add(&other.wait_ns);
        self.run_ns_sum += other.run_ns_sum;
        self.moves_in += other.moves_in;
        self.moves_out += other.moves_out;
        self.steals_in += other.steals_in;
        self.steals_out += other.steals_out;
    }

    /// A summary with estimates scaled by the sample `period`.
    pub fn summary(&self, period: u32) -> ColorSummary {
        let p = u64::from(period.max(1));
        let q = |h: &Histogram<u64>, q: f64| if h.is_empty() { 0 } else { h.value_at_quantile(q) };
        ColorSummary {
            color: self.color,
            sampled_events: self.sampled_events(),
            events: self.sampled_events() * p,
            run_ns: self.run_ns_sum * p,
            run_p50_ns: q(&self.run_ns, 0.5),
            run_p99_ns: q(&self.run_ns, 0.99),
            run_max_ns: self.run_ns.max(),
            sampled_waits: self.wait_ns.len(),
            wait_p50_ns: q(&self.wait_ns, 0.5),
            wait_p99_ns: q(&self.wait_ns, 0.99),
            wait_max_ns: self.wait_ns.max(),
            moves_in: self.moves_in,
            moves_out: self.moves_out,
            steals_in: self.steals_in,
            steals_out: self.steals_out,
        }
    }
}

/// One color's figures as scalars (in run reports, JSON and the status page).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColorSummary {
    /// The color (`u64::MAX`: the colors folded into "other").
    pub color: Color,
    /// Events timed (one turn in `period` is).
    pub sampled_events: u64,
    /// Events run, estimated (`sampled_events × period`).
    pub events: u64,
    /// Run time of its events in nanoseconds, estimated (sampled sum × period).
    pub run_ns: u64,
    /// Median run time of one event, ns.
    pub run_p50_ns: u64,
    /// 99th percentile run time of one event, ns.
    pub run_p99_ns: u64,
    /// Longest sampled event, ns.
    pub run_max_ns: u64,
    /// Posts whose wait was measured.
    pub sampled_waits: u64,
    /// Median wait from post to start, ns.
    pub wait_p50_ns: u64,
    /// 99th percentile wait from post to start, ns.
    pub wait_p99_ns: u64,
    /// Longest sampled wait, ns.
    pub wait_max_ns: u64,
    /// Moves to a worker for good (`follow`), counted on arrival.
    pub moves_in: u64,
    /// Moves away from its home.
    pub moves_out: u64,
    /// Times stolen.
    pub steals_in: u64,
    /// Times lent to a thief.
    pub steals_out: u64,
}

/// The "other" color: where colors beyond [`MAX_COLORS`] are summed.
pub const OTHER: Color = Color(u64::MAX);

/// A table of colors with a bound on how many it names.
#[derive(Clone, Debug, Default)]
pub(crate) struct Table {
    colors: FxHashMap<Color, ColorEntry>,
    other: Option<ColorEntry>,
}

impl Table {
    fn entry(&mut self, color: Color) -> &mut ColorEntry {
        if self.colors.len() >= MAX_COLORS && !self.colors.contains_key(&color) {
            self.fold();
        }
        self.colors.entry(color).or_insert_with(|| ColorEntry::new(color))
    }

    fn merge_entry(&mut self, e: &ColorEntry) {
        self.entry(e.color).merge(e);
    }

    /// Records sampled figures into the colors' histograms.
    fn record_all(&mut self, samples: &[Sample]) {
        for s in samples {
            let e = self.entry(s.color);
            let ns = s.ns & !WAIT;
            if s.ns & WAIT != 0 {
                record(&mut e.wait_ns, ns);
            } else {
                record(&mut e.run_ns, ns);
                e.run_ns_sum = e.run_ns_sum.saturating_add(ns);
            }
        }
    }

    /// Adds counts of moves and steals.
    fn add_moves(&mut self, color: Color, [moved_in, moved_out, stolen_in, lent_out]: Moves) {
        let e = self.entry(color);
        e.moves_in += moved_in;
        e.moves_out += moved_out;
        e.steals_in += stolen_in;
        e.steals_out += lent_out;
    }

    /// Nothing recorded since the entries were last emptied.
    fn is_blank(&self) -> bool {
        self.other.is_none() && self.colors.values().all(ColorEntry::is_blank)
    }

    /// Folds the colors with the least run time into "other" until at most [`MAX_COLORS`]
    /// remain named.
    fn bound(&mut self) {
        if self.colors.len() > MAX_COLORS {
            self.fold();
        }
    }

    /// Folds the colors with the least run time into "other", leaving three quarters of
    /// [`MAX_COLORS`] named (headroom, so that folding is not redone at every insertion).
    #[cold]
    fn fold(&mut self) {
        let mut by_time: Vec<(u64, u64, Color)> =
            self.colors.values().map(|e| (e.run_ns_sum, e.run_ns.len(), e.color)).collect();
        let drop = self.colors.len().saturating_sub(MAX_COLORS * 3 / 4);
        if drop == 0 {
            return;
        }
        by_time.select_nth_unstable(drop - 1);
        for &(_, _, c) in &by_time[..drop] {
            if let Some(e) = self.colors.remove(&c) {
                self.other.get_or_insert_with(|| ColorEntry::new(OTHER)).merge(&e);
            }
        }
    }
}

/// A color's moves and steals since the last flush, in the order of [`Event`].
type Moves = [u64; 4];

fn add_moves(to: &mut Moves, from: Moves) {
    for (t, f) in to.iter_mut().zip(from) {
        *t += f;
    }
}

/// The flag of a [`Sample`]'s `ns` that makes it a wait (else a run time); values are capped
/// below it.
const WAIT: u64 = 1 << 63;
/// The largest value recorded (a quarter of `u64`'s range: far below [`WAIT`]).
const MAX_NS: u64 = u64::MAX / 4;

/// One sampled figure: a run time, or a wait (`ns` with [`WAIT`] set), of `color`.
#[derive(Clone, Copy, Debug)]
struct Sample {
    color: Color,
    ns: u64,
}

/// A worker's own recorder (in its `Core`): sampling counters and what was sampled since the
/// last flush.
pub(crate) struct Local {
    /// Sample period; 0: off.
    period: u32,
    turn_tick: u32,
    post_tick: u32,
    /// Figures sampled since the last flush (module doc: no histogram on the worker); its
    /// memory is reserved at the first sample and kept (swapped with the slot's).
    samples: Vec<Sample>,
    /// Histograms of the figures that filled `samples` between two flushes ([`LOCAL_SAMPLES`]):
    /// empty at 1 in 1024. Its entries stay, emptied, across flushes.
    table: Table,
    /// Moves and steals counted since the last flush, apart from `table`: an entry of the
    /// table is two histograms, whose making (two allocations and their growth) cost 2,800
    /// instructions each; counted there, the moves of colors that follow their messages made
    /// an entry at each first move after a flush: 3,652 counts took 9.1M instructions in a
    /// producer-consumer run at 2 workers under callgrind, more than every sampled event's
    /// timing and recording together. Here a count is a hash-map increment; the entries are
    /// made by readers.
    moves: FxHashMap<Color, Moves>,
    last_flush: Option<Instant>,
}

/// Counts one down on `left`, which restarts at `period` each time it reaches 0: true then,
/// once in `period` calls (never with `period` 0, statistics off: `left` then restarts at
/// `u32::MAX`). One decrement and a branch, the same with statistics on and off.
#[inline]
fn tick(left: &mut u32, period: u32) -> bool {
    *left = left.wrapping_sub(1);
    if *left != 0 {
        return false;
    }
    restart(left, period)
}

#[cold]
fn restart(left: &mut u32, period: u32) -> bool {
    *left = countdown(period);
    period != 0
}

/// Where a countdown starts.
fn countdown(period: u32) -> u32 {
    if period == 0 {
        u32::MAX
    } else {
        period
    }
}

impl Local {
    pub(crate) fn new(period: u32) -> Self {
        Local {
            period,
            turn_tick: countdown(period),
            post_tick: countdown(period),
            samples: Vec::new(),
            table: Table::default(),
            moves: FxHashMap::default(),
            last_flush: None,
        }
    }

    /// At the start of a turn: whether to time its events.
    #[inline]
    pub(crate) fn sample_turn(&mut self) -> bool {
        tick(&mut self.turn_tick, self.period)
    }

    /// At a post by a handler: whether the event carries its posting instant.
    #[inline]
    pub(crate) fn sample_post(&mut self) -> bool {
        tick(&mut self.post_tick, self.period)
    }

    /// Keeps a sampled figure until the next flush.
    #[inline]
    fn push(&mut self, color: Color, ns: u64) {
        if self.samples.len() >= LOCAL_SAMPLES {
            self.spill();
        }
        if self.samples.capacity() == 0 {
            self.samples.reserve_exact(LOCAL_SAMPLES);
        }
        self.samples.push(Sample { color, ns });
    }

    /// Makes the figures kept into histograms here: the buffer filled between two flushes.
    #[cold]
    fn spill(&mut self) {
        self.table.record_all(&self.samples);
        self.samples.clear();
    }

    /// A sampled event of `color` ran from `started` to `ended`.
    #[cold]
    pub(crate) fn ran(&mut self, color: Color, started: Instant, ended: Instant) {
        let ns = ended.saturating_duration_since(started).as_nanos().min(u128::from(MAX_NS));
        self.push(color, ns as u64);
    }

    /// A sampled event of `color` waited `ns` from its post to its start.
    #[cold]
    pub(crate) fn waited(&mut self, color: Color, ns: u64) {
        self.push(color, ns.min(MAX_NS) | WAIT);
    }

    /// Counts a move or a steal of `color` (exact; nothing when statistics are off).
    #[cold]
    pub(crate) fn count(&mut self, color: Color, what: Event) {
        if self.period == 0 {
            return;
        }
        if self.moves.len() >= MAX_COLORS && !self.moves.contains_key(&color) {
            // Bounded memory: the table folds past MAX_COLORS.
            for (color, moves) in self.moves.drain() {
                self.table.add_moves(color, moves);
            }
        }
        self.moves.entry(color).or_default()[what as usize] += 1;
    }

    /// Hands what was recorded since the last flush to `slot`: always if `force` (end of a run;
    /// the locks are then waited for), else if [`FLUSH_EVERY`] passed since the last flush and
    /// no reader holds the slot (a worker never waits for a reader in the middle of a run).
    pub(crate) fn flush(&mut self, slot: &Slot, force: bool) {
        if self.period == 0
            || (self.samples.is_empty() && self.moves.is_empty() && self.table.is_blank())
        {
            return;
        }
        let now = Instant::now();
        if !force && self.last_flush.is_some_and(|t| now.duration_since(t) < FLUSH_EVERY) {
            return;
        }
        let Some(mut pending) = take_lock(&slot.pending, force) else { return };
        // The figures: a swap when the slot's buffer is empty (a reader took it), so the two
        // buffers' memory goes back and forth instead of being allocated again.
        if pending.samples.is_empty() {
            std::mem::swap(&mut pending.samples, &mut self.samples);
        } else {
            pending.samples.extend_from_slice(&self.samples);
            self.samples.clear();
        }
        for (color, moves) in self.moves.drain() {
            add_moves(pending.moves.entry(color).or_default(), moves);
        }
        // Past its bound, the slot's figures are made into histograms here (no reader took them).
        let overflow = (pending.samples.len() >= PENDING_SAMPLES).then(|| pending.take());
        drop(pending);
        self.last_flush = Some(now);
        if overflow.is_none() && self.table.is_blank() {
            return;
        }
        let Some(mut table) = take_lock(&slot.table, force) else {
            // A reader holds the histograms: the figures wait in the slot for it, or for the
            // next flush.
            if let Some(o) = overflow {
                lock(&slot.pending).put_back(o);
            }
            return;
        };
        if let Some(o) = overflow {
            o.record_into(&mut table);
        }
        // The entries are kept, emptied, not dropped: made again after each flush, a busy
        // worker's entries were allocated and their histograms grown anew every `FLUSH_EVERY`.
        for e in self.table.colors.values_mut().filter(|e| !e.is_blank()) {
            table.merge_entry(e);
            e.clear();
        }
        if let Some(o) = self.table.other.take() {
            table.other.get_or_insert_with(|| ColorEntry::new(OTHER)).merge(&o);
        }
        table.bound();
    }
}

/// Locks `m`: waiting for it if `wait`, else only if it is free (`None` when held).
fn take_lock<T>(m: &Mutex<T>, wait: bool) -> Option<MutexGuard<'_, T>> {
    if wait {
        return Some(lock(m));
    }
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// A move or a steal, for [`Local::count`] (the value: its place in [`Moves`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    MovedIn = 0,
    MovedOut = 1,
    StolenIn = 2,
    LentOut = 3,
}

/// Figures a worker handed over that no reader has made into histograms yet.
#[derive(Default)]
struct Pending {
    samples: Vec<Sample>,
    moves: FxHashMap<Color, Moves>,
}

impl Pending {
    fn take(&mut self) -> Pending {
        std::mem::take(self)
    }

    fn put_back(&mut self, p: Pending) {
        self.samples.extend_from_slice(&p.samples);
        for (color, moves) in p.moves {
            add_moves(self.moves.entry(color).or_default(), moves);
        }
    }

    fn record_into(self, table: &mut Table) {
        table.record_all(&self.samples);
        for (color, moves) in self.moves {
            table.add_moves(color, moves);
        }
    }
}

/// A worker's published statistics: figures handed over (`pending`, written by the worker,
/// taken by readers) and histograms (`table`, made from them by readers). Locks are taken one
/// at a time by the worker; a reader holds `table` while it takes `pending`.
pub(crate) struct Slot {
    pending: Mutex<Pending>,
    table: Mutex<Table>,
}

/// Each worker's published statistics, read by snapshots.
pub(crate) struct Published {
    slots: Box<[Slot]>,
    period: u32,
}

impl Published {
    pub(crate) fn new(workers: usize, period: u32) -> Self {
        let slot = || Slot { pending: Mutex::default(), table: Mutex::default() };
        Published { slots: (0..workers).map(|_| slot()).collect(), period }
    }

    pub(crate) fn slot(&self, worker: usize) -> &Slot {
        &self.slots[worker]
    }

    /// Merges every worker's statistics, making the figures handed over into histograms.
    pub(crate) fn snapshot(&self) -> ColorStats {
        let mut all = Table::default();
        let mut per_worker = Vec::with_capacity(self.slots.len());
        for slot in self.slots.iter() {
            let mut t = lock(&slot.table);
            let pending = lock(&slot.pending).take();
            pending.record_into(&mut t);
            t.bound();
            let mut worker = ColorEntry::new(OTHER);
            for e in t.colors.values() {
                all.merge_entry(e);
                worker.merge(e);
            }
            if let Some(o) = &t.other {
                all.other.get_or_insert_with(|| ColorEntry::new(OTHER)).merge(o);
                worker.merge(o);
            }
            drop(t);
            per_worker.push(worker);
        }
        all.bound();
        let mut colors: Vec<ColorEntry> = all.colors.into_values().collect();
        colors.sort_by(|a, b| b.run_ns_sum.cmp(&a.run_ns_sum).then(a.color.0.cmp(&b.color.0)));
        ColorStats { period: self.period, colors, other: all.other, workers: per_worker }
    }
}

/// Per-color statistics merged over the workers ([`Runtime::color_stats`](crate::Runtime)).
#[derive(Clone, Debug, Default)]
pub struct ColorStats {
    /// The sample period (one turn and one post in `period` measured; 0: statistics off).
    pub period: u32,
    /// The named colors, by sampled run time, largest first.
    pub colors: Vec<ColorEntry>,
    /// The colors folded together past [`MAX_COLORS`], if any.
    pub other: Option<ColorEntry>,
    /// Each worker's figures over all its colors (color [`OTHER`]).
    pub workers: Vec<ColorEntry>,
}

impl ColorStats {
    /// The `n` colors with the most run time, as summaries.
    pub fn top(&self, n: usize) -> Vec<ColorSummary> {
        self.colors.iter().take(n).map(|e| e.summary(self.period)).collect()
    }

    /// The entry of `color`, if it is named.
    pub fn get(&self, color: Color) -> Option<&ColorEntry> {
        self.colors.iter().find(|e| e.color == color)
    }

    /// The top `n` colors of what happened since `earlier` (a snapshot of the same runtime
    /// taken before): counts and histograms are differences, so a run report shows its run.
    pub fn top_since(&self, earlier: &ColorStats, n: usize) -> Vec<ColorSummary> {
        let before: FxHashMap<Color, &ColorEntry> =
            earlier.colors.iter().map(|e| (e.color, e)).collect();
        let mut delta: Vec<ColorEntry> = self
            .colors
            .iter()
            .map(|e| match before.get(&e.color) {
                None => e.clone(),
                Some(b) => {
                    let mut d = e.clone();
                    // A color folded into "other" and named again can have fewer counts now:
                    // then its figures are kept whole rather than wrong.
                    if d.run_ns.subtract(&b.run_ns).is_err()
                        || d.wait_ns.subtract(&b.wait_ns).is_err()
                    {
                        return e.clone();
                    }
                    d.run_ns_sum = e.run_ns_sum.saturating_sub(b.run_ns_sum);
                    d.moves_in = e.moves_in.saturating_sub(b.moves_in);
                    d.moves_out = e.moves_out.saturating_sub(b.moves_out);
                    d.steals_in = e.steals_in.saturating_sub(b.steals_in);
                    d.steals_out = e.steals_out.saturating_sub(b.steals_out);
                    d
                }
            })
            .filter(|d| d.run_ns.len() + d.wait_ns.len() + d.moves_in + d.steals_in > 0)
            .collect();
        delta.sort_by(|a, b| b.run_ns_sum.cmp(&a.run_ns_sum).then(a.color.0.cmp(&b.color.0)));
        delta.iter().take(n).map(|e| e.summary(self.period)).collect()
    }
}

/// Wraps a posted closure so that its event records its wait (post to start) on the worker
/// that runs it. The closure is boxed: wrapped in place, one post in the period was an event of
/// another size (the posting instant adds 16 bytes), so from another EMA size class than the
/// other posts (the likely cause; not traced further), and that cost producer-consumer at 2
/// workers (colors kept in place) 11-15% of its rate at 1 in 1024 (paired on/off
/// 0.845-0.890), where the same wrapper without the clock reads still cost 0.875 and no post
/// sampling 0.958; boxed, 0.944-1.002 (9 and 7 pairs, loaded machine). The box is one
/// allocation of the global allocator per sampled post.
#[inline]
pub(crate) fn timed<F: FnOnce() + Send + 'static>(f: F) -> impl FnOnce() + Send + 'static {
    let posted = Instant::now();
    let f = Box::new(f);
    move || {
        record_wait(posted);
        f()
    }
}

#[cold]
fn record_wait(posted: Instant) {
    let ns = posted.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
    crate::context::with_current(|ctx| {
        let Some(color) = ctx.current.get() else { return };
        // The core is free while a handler runs; `try_`: never panic in a nested borrow.
        if let Some(mut core) = ctx.core.try_borrow_mut() {
            core.colors.waited(color, ns);
        }
    });
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn sampling_takes_one_in_period() {
        let mut l = Local::new(4);
        let n = (0..40).filter(|_| l.sample_turn()).count();
        assert_eq!(n, 10);
        let n = (0..40).filter(|_| l.sample_post()).count();
        assert_eq!(n, 10);
        let mut off = Local::new(0);
        off.turn_tick = 3; // past the restart, too
        assert!(!(0..10).any(|_| off.sample_turn() || off.sample_post()));
    }

    /// `ran` with a known run time.
    fn ran_ns(l: &mut Local, color: Color, ns: u64) {
        let t = Instant::now();
        l.ran(color, t, t + Duration::from_nanos(ns));
    }

    #[test]
    fn sampled_figures_make_no_histogram_on_the_worker() {
        let p = Published::new(1, 1024);
        let mut l = Local::new(1024);
        ran_ns(&mut l, Color(1), 500);
        l.waited(Color(1), 700);
        ran_ns(&mut l, Color(2), 100);
        assert!(l.table.colors.is_empty(), "figures are kept as they are, not in histograms");
        l.flush(p.slot(0), true);
        assert!(lock(&p.slot(0).table).colors.is_empty(), "nor made into histograms at a flush");
        assert_eq!(lock(&p.slot(0).pending).samples.len(), 3);
        assert!(l.samples.is_empty() && l.samples.capacity() == 0, "swapped with the slot's");
        let s = p.snapshot();
        let one = s.get(Color(1)).expect("color 1 named");
        assert_eq!((one.sampled_events(), one.run_ns_sum, one.wait_ns.len()), (1, 500, 1));
        assert!(one.wait_ns.max() >= 700 / 10 * 9, "the wait is recorded as one");
        assert_eq!(s.get(Color(2)).map(|e| e.run_ns_sum), Some(100));
        assert!(lock(&p.slot(0).pending).samples.is_empty(), "the reader took the figures");
        // Taken again by the next snapshot: nothing is counted twice.
        ran_ns(&mut l, Color(1), 10);
        l.flush(p.slot(0), true);
        let s = p.snapshot();
        assert_eq!(s.get(Color(1)).map(|e| (e.sampled_events(), e.run_ns_sum)), Some((2, 510)));
    }

    #[test]
    fn a_full_buffer_goes_into_histograms_on_the_worker_and_loses_nothing() {
        let p = Published::new(1, 1);
        let mut l = Local::new(1);
        for k in 0..(LOCAL_SAMPLES as u64 + 10) {
            ran_ns(&mut l, Color(k % 3), 1);
        }
        assert!(l.samples.len() <= LOCAL_SAMPLES, "bounded: {}", l.samples.len());
        assert!(!l.table.colors.is_empty(), "spilled into the worker's histograms");
        l.flush(p.slot(0), true);
        assert!(l.table.is_blank(), "emptied by the flush");
        let s = p.snapshot();
        let total: u64 = s.colors.iter().map(ColorEntry::sampled_events).sum();
        assert_eq!(total, LOCAL_SAMPLES as u64 + 10);
        // The slot's figures too are bounded when nobody reads them.
        for _ in 0..(PENDING_SAMPLES / (LOCAL_SAMPLES / 2) + 2) {
            for _ in 0..LOCAL_SAMPLES / 2 {
                ran_ns(&mut l, Color(5), 1);
            }
            l.flush(p.slot(0), true);
            assert!(lock(&p.slot(0).pending).samples.len() < PENDING_SAMPLES);
        }
        assert!(lock(&p.slot(0).table).colors.contains_key(&Color(5)), "made into histograms");
        let rounds = (PENDING_SAMPLES / (LOCAL_SAMPLES / 2) + 2) as u64;
        let five = p.snapshot().get(Color(5)).map(ColorEntry::sampled_events);
        assert_eq!(five, Some(rounds * (LOCAL_SAMPLES / 2) as u64));
    }

    #[test]
    fn snapshots_bound_the_colors_named() {
        let p = Published::new(1, 1);
        let mut l = Local::new(1);
        l.count(Color(3), Event::MovedIn);
        for c in 0..(MAX_COLORS as u64 + 100) {
            ran_ns(&mut l, Color(c), c + 1); // known order
        }
        l.flush(p.slot(0), true);
        let s = p.snapshot();
        assert!(s.colors.len() <= MAX_COLORS);
        let other = s.other.as_ref().expect("smallest colors folded");
        let total: u64 = s.colors.iter().map(|e| e.run_ns.len()).sum::<u64>() + other.run_ns.len();
        assert_eq!(total, MAX_COLORS as u64 + 100, "folding keeps every event");
        // The largest colors stay named.
        assert!(s.get(Color(MAX_COLORS as u64 + 99)).is_some());
        let named = s.get(Color(3)).map_or(0, |e| e.moves_in);
        assert_eq!(named + other.moves_in, 1, "the move of color 3 is kept");
        assert!(lock(&p.slot(0).table).colors.len() <= MAX_COLORS, "and so does the slot");
    }

    #[test]
    fn moves_are_counted_apart_and_merged_by_readers() {
        let p = Published::new(1, 1024);
        let mut l = Local::new(1024);
        l.count(Color(7), Event::MovedIn);
        l.count(Color(7), Event::MovedIn);
        l.count(Color(7), Event::LentOut);
        l.count(Color(8), Event::StolenIn);
        assert!(l.table.colors.is_empty(), "a count makes no entry (no histogram)");
        l.count(Color(9), Event::MovedIn);
        l.flush(p.slot(0), true);
        assert!(l.moves.is_empty());
        assert!(lock(&p.slot(0).table).colors.is_empty(), "nor does a flush");
        let s = p.snapshot();
        let e = s.get(Color(7)).unwrap();
        assert_eq!((e.moves_in, e.moves_out, e.steals_in, e.steals_out), (2, 0, 0, 1));
        assert_eq!(s.get(Color(8)).unwrap().steals_in, 1);
        l.count(Color(8), Event::StolenIn);
        l.flush(p.slot(0), true);
        let s = p.snapshot();
        assert_eq!(s.get(Color(8)).unwrap().steals_in, 2);
        assert_eq!(s.get(Color(7)).unwrap().moves_in, 2, "nothing is counted twice");
        assert_eq!(s.get(Color(9)).unwrap().moves_in, 1);
        let mut off = Local::new(0);
        off.count(Color(7), Event::MovedIn);
        assert!(off.moves.is_empty(), "nothing is counted with statistics off");
    }

    #[test]
    fn snapshot_ranks_by_time_and_diffs() {
        let p = Published::new(2, 1);
        let mut a = Local::new(1);
        let mut b = Local::new(1);
        ran_ns(&mut a, Color(1), 10);
        ran_ns(&mut b, Color(2), 50);
        b.waited(Color(2), 1000);
        a.flush(p.slot(0), true);
        b.flush(p.slot(1), true);
        let s1 = p.snapshot();
        assert_eq!(s1.colors.iter().map(|e| e.color).collect::<Vec<_>>(), [Color(2), Color(1)]);
        assert_eq!(s1.workers.len(), 2);
        assert_eq!(s1.workers[1].wait_ns.len(), 1);
        ran_ns(&mut a, Color(1), 90);
        a.flush(p.slot(0), true);
        let s2 = p.snapshot();
        let d = s2.top_since(&s1, 10);
        assert_eq!(d.len(), 1, "only color 1 ran since: {d:?}");
        assert_eq!((d[0].color, d[0].sampled_events, d[0].run_ns), (Color(1), 1, 90));
        let top = s2.top(1);
        assert_eq!(top[0].color, Color(1));
        assert_eq!(top[0].sampled_events, 2);
    }
}
