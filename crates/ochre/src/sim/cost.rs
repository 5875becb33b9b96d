//! The cost model: what the simulated machine charges, in virtual nanoseconds, for what the
//! policies cannot see (handler time is the workload's).
//!
//! Data that crosses cores is charged by topology distance in two ways: a color's own data
//! ([`CostModel::color_lines`], scattered lines, a whole latency each) once when the color runs
//! on another core than last time, and streamed lines ([`CostModel::stream`]: a batch buffer
//! at its receiver, a message's payload at the event that reads it) at every crossing. The
//! second is the steady state of the seeds' cache-aware stealing (the slides' L2 misses fell
//! from 71% to 44%): a stolen stage of a pipeline reads each message from its victim's cache
//! and leaves the next one there, event after event. Without it, the simulator charged data
//! once per move, and victim order could change only the balance, never the transfers.
//!
//! A core's own caches are modelled by reuse: a color that runs where it ran last time, after
//! more than [`CostModel::warm_colors`] other turns there, reads its lines from the next level
//! ([`CostModel::cold_line_ns`]); an event's closure is read from the core that stored it (its
//! poster, or the receiver of a closure carried inline in its message), streamed when it
//! lies next to the one from that poster run before it (a queue run in posting order, as a
//! producer's loop to one counter), a whole latency when not (a driver's interleaved posts to
//! 60 colors): by distance from another core, from beyond the core's caches
//! ([`CostModel::memory_line_ns`]) when its own core posted more than
//! [`CostModel::warm_msgs`] since; streamed too when an earlier pop of its queue prefetched it
//! (the prefetch hides the latency, not the transfer). Without them, this machine's figures had an empty event of a
//! 100-color fan-out 12 ns dearer than the simulator's, and a fork-join's scattered queue
//! 20 ns dearer than a counter's, which one cost per event could not both fit.
//!
//! Invariants: every cost is a plain number of nanoseconds (no cost is negative); the cache-line
//! latency grows with topology distance (`line_ns[d]` for distance `d`, index 0 = same core).
//! The defaults are round figures for a 2-3 GHz x86 server of the last decade; `ochre sim
//! calibrate` replaces the ones this machine's benchmarks can measure.

use serde::{Deserialize, Serialize};

/// Costs charged by the simulator, in ns of virtual time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// Per event run: pop from the color's queue, call, free the closure.
    pub event_ns: f64,
    /// Storing a closure (allocate, write): paid by its poster, or by its receiver for one
    /// carried inside its message (`message::InlineTask`). 0 in files written before inline
    /// posts, whose post costs included it.
    #[serde(default)]
    pub store_ns: f64,
    /// Per turn: take the next ready color, end its turn, the end-of-turn flush check.
    pub turn_ns: f64,
    /// Per round of the run loop: look at the inbox and the steal slot, publish counters.
    pub round_ns: f64,
    /// A post to a color held on the posting core (queue append, no atomic).
    pub local_post_ns: f64,
    /// A post to another core: append to the outgoing buffer.
    pub remote_post_ns: f64,
    /// Handing a batch to another core's inbox (one compare-and-swap on a line it reads).
    pub deliver_ns: f64,
    /// At the receiver, per message taken from the inbox and routed.
    pub receive_ns: f64,
    /// Latency of a cache line between two cores at topology distance `d` (index `d`, 0..=5).
    pub line_ns: [f64; 6],
    /// Lines of a color's own data that follow it when it runs on another core than last time,
    /// or that it reads from beyond the core's nearest cache when more than
    /// [`warm_colors`](Self::warm_colors) colors ran there since its last turn.
    pub color_lines: f64,
    /// Colors whose data the nearest cache of a core holds at once (turns of other colors on
    /// that core after which a color's data is out of it).
    #[serde(default = "default_warm_colors")]
    pub warm_colors: f64,
    /// A line read on its own core from its next cache level (a latency: scattered lines).
    #[serde(default = "default_cold_line_ns")]
    pub cold_line_ns: f64,
    /// Posts a core makes before the closure of the first is out of its own caches: an event
    /// posted and run on one core, older than this, costs a
    /// [`memory_line_ns`](Self::memory_line_ns) more if it is not the neighbour in memory of
    /// the event run before it there (a queue run out of posting order, as a driver's
    /// interleaved posts to 60 colors) and was not prefetched, a streamed line
    /// ([`STREAM_OVERLAP`]) if it is either.
    #[serde(default = "default_warm_msgs")]
    pub warm_msgs: f64,
    /// A line read from beyond a core's own caches (shared cache or memory).
    #[serde(default = "default_memory_line_ns")]
    pub memory_line_ns: f64,
    /// Messages per cache line in a batch buffer (a `Msg` is 48 bytes since it carries small
    /// closures inline, 32 before).
    pub msgs_per_line: f64,
    /// The sender's cost of waking a sleeping core (a futex wake system call).
    pub wake_send_ns: f64,
    /// From the wake-up call to the woken core running (scheduler latency of a futex wait).
    pub wakeup_ns: f64,
    /// Entering a sleep (futex wait system call, announcement on the inbox).
    pub sleep_ns: f64,
    /// From a message's arrival to a spinning core noticing it.
    pub spin_notice_ns: f64,
    /// A victim's cost of answering a steal request (lend, build the grant).
    pub steal_answer_ns: f64,
    /// With batching off (libasync-smp's transport): one lock taken per posted event.
    pub lock_ns: f64,
    /// A handler's work of `w` ns (as the workload gives it) costs `w * work_scale +
    /// work_fixed_ns` (a busy loop's clock reads and overshoot), 0 for no work.
    pub work_scale: f64,
    /// See [`work_scale`](Self::work_scale).
    pub work_fixed_ns: f64,
    /// How much longer a turn takes per other core running at the same time (shared caches
    /// and memory bandwidth, SMT siblings; on a shared machine, other tenants): 0 on a machine
    /// of one's own. Calibration fits it on this machine's 2-worker figures; predictions for
    /// other machines leave it at 0 (it is this machine's, not theirs).
    pub contention: f64,
    /// A scheduler time slice when a worker shares its CPU with a busy thread (Linux CFS, two
    /// runnable threads: 3-4 ms each, `cpu_share`'s windows see both): how long the worker runs
    /// before the other thread's turn, and how long a yield to that thread lasts.
    #[serde(default = "default_slice_ns")]
    pub slice_ns: f64,
    /// A program's draw of a pseudo-random number reduced modulo a count (xorshift64* and a
    /// 64-bit division), ns: plain code of a handler's own, charged as it is
    /// ([`Workload::draws`](crate::sim::Workload::draws)): the bank's teller makes three
    /// a transaction, big's actors one a ping. Measured where calibrated
    /// ([`measure_draw_ns`](crate::sim::workload::measure_draw_ns)), not fitted; 0 in files
    /// written before it.
    #[serde(default)]
    pub draw_ns: f64,
}

/// Line reads in flight at once while a core streams through lines written elsewhere: the
/// order of the line fill buffers' count (10-12 on the decade's x86 cores) halved for the
/// dependent loads of a handler's code. A round figure, not measured here.
pub const STREAM_OVERLAP: f64 = 4.0;

fn default_slice_ns() -> f64 {
    3_000_000.0
}

/// A 48 KiB L1 data cache (this machine's) over the few lines a color's turn touches (its
/// queue, its state, an actor's cell) and those of its events and the runtime's own: a round
/// figure (this machine's actor programs: 41 colors run as if warm, 100 as if not), fitted by
/// calibration.
fn default_warm_colors() -> f64 {
    64.0
}

/// An L2 hit, about 14 cycles at 3 GHz; fitted by calibration.
fn default_cold_line_ns() -> f64 {
    5.0
}

/// A 2 MiB L2 (this machine's) over a 64-byte closure and its queue slot, halved for what
/// the handlers' own data takes: a round figure, fitted by calibration.
fn default_warm_msgs() -> f64 {
    16_384.0
}

/// A shared last-level cache's hit, or a memory access partly overlapped: a round figure,
/// fitted by calibration.
fn default_memory_line_ns() -> f64 {
    30.0
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            event_ns: 12.0,
            store_ns: 6.0,
            turn_ns: 15.0,
            round_ns: 40.0,
            local_post_ns: 6.0,
            remote_post_ns: 4.0,
            deliver_ns: 60.0,
            receive_ns: 12.0,
            line_ns: [0.0, 20.0, 35.0, 60.0, 100.0, 180.0],
            color_lines: 2.0,
            warm_colors: default_warm_colors(),
            cold_line_ns: default_cold_line_ns(),
            warm_msgs: default_warm_msgs(),
            memory_line_ns: default_memory_line_ns(),
            msgs_per_line: 64.0 / 48.0,
            wake_send_ns: 1_500.0,
            wakeup_ns: 6_000.0,
            sleep_ns: 800.0,
            spin_notice_ns: 80.0,
            steal_answer_ns: 200.0,
            lock_ns: 60.0,
            work_scale: 1.0,
            work_fixed_ns: 0.0,
            contention: 0.0,
            slice_ns: default_slice_ns(),
            draw_ns: 0.0,
        }
    }
}

impl CostModel {
    /// What a handler's work of `ns` costs.
    pub fn work(&self, ns: u64) -> f64 {
        if ns == 0 {
            0.0
        } else {
            ns as f64 * self.work_scale + self.work_fixed_ns
        }
    }

    /// Line latency at distance `d` (clamped to the table).
    pub fn line(&self, d: usize) -> f64 {
        self.line_ns[d.min(self.line_ns.len() - 1)]
    }

    /// Reading `lines` consecutive lines written by a core at distance `d`: a batch buffer, a
    /// message's payload. The reads stream (the hardware prefetcher and the core's outstanding
    /// misses overlap about [`STREAM_OVERLAP`] of them), unlike a color's own data
    /// ([`color_lines`](Self::color_lines)), scattered over its structures and charged a
    /// whole latency per line.
    pub fn stream(&self, lines: f64, d: usize) -> f64 {
        self.streamed(lines, self.line(d))
    }

    /// Reading `lines` consecutive lines of latency `line_ns` each (from another core, or from
    /// beyond this core's caches) as a stream: [`STREAM_OVERLAP`] of them in flight at once.
    pub fn streamed(&self, lines: f64, line_ns: f64) -> f64 {
        lines * line_ns / STREAM_OVERLAP
    }
}
