//! The discrete-event engine: N virtual cores running the runtime's own run queues (`queue`),
//! outgoing buffers (`outbox`) and policy functions (`steal`, `follow`, `idle::spin_budget`,
//! `Outbox::ends_burst`, `color::home_of`), in virtual time, on a topology.
//!
//! What is the runtime's: every decision. Where a post goes, when a batch leaves (full, early to
//! an idle core, at a burst, to idle cores at the end of a turn, the safety flush against the
//! outbox's own mean interval, all at the end of a round), where a color moves and when it comes
//! back, when to spin and how long, whom to ask for a color and what a victim lends, what a long
//! turn shares unasked (the turns of colors not known to be short are timed): the engine
//! calls the functions the workers call, with the same `Config`. What is the engine's: the
//! mechanism around them (the worker loop's order of steps, modelled as in `worker::run`), and
//! time, charged by the [`CostModel`] (with each message's payload, [`Workload::message_lines`],
//! and its closure read by its event from the core that stored it: its poster's, or, for a
//! closure small enough to travel inside its message to another core
//! ([`Workload::closure_bytes`], `Config::inline_posts`), its receiver's, unless an earlier pop
//! of its queue prefetched it (`ColorQueue::prefetched`); the workload's own layer,
//! [`Workload::layer_ns`], and the recipient's line it touches,
//! [`Workload::post_touches_recipient`]).
//!
//! Invariants:
//! * Deterministic: a run is a function of its [`Setup`] (seed included) and workload; the host's
//!   clock is never read (the outbox's clock is a fixed base plus virtual time).
//! * Steps are processed in order of their virtual start time (ties by insertion order). One
//!   step is one round of a core's run loop (inbox, turns, flush), or a stretch of whole turns
//!   of a long round (`ROUND_STEP_NS`), or of a handler's posts up to where it files its inbox
//!   while another core's step is due before its clock (`cut_posts`). A core takes its inbox
//!   between rounds, after a long turn (`steal::long_turn`), and, as the real worker does, in
//!   the middle of a handler that sent a full batch or held `worker::HELD_FILE_EVERY` posts
//!   behind a fence (`file_mid_turn`). Messages
//!   carry their arrival time, and a core sees only those arrived by its current time; likewise
//!   the hints a core publishes for thieves and posters (its ready count, its backlog flag:
//!   `Hint`) are seen from their publication time on, though its step ran ahead. Between one
//!   sender and one receiver arrivals keep their order (the transport's FIFO property that the
//!   lending protocol relies on).
//! * With [`Setup::check`], every event is checked as it runs: exclusion (no two cores run one
//!   color in overlapping virtual intervals), order (the posts of one poster to one color run in
//!   posting order), exactly once (no event runs twice; at the end, every post ran).

use std::collections::VecDeque;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::cost::CostModel;
use crate::color::{home_of, Placement};
use crate::cpu_share::{CpuShare, FULL};
use crate::follow;
use crate::message::{InlineTask, Msg, Task};
use crate::outbox::{self, Outbox};
use crate::queue::{ColorQueue, Dest, Route, Shed, TurnEnd};
use crate::steal::{self, Candidate};
use crate::topology::Topology;
use crate::{Color, Config, Steal};

/// The data of the root event (of color [`Workload::root`]), with which every run starts.
pub const ROOT: u64 = u64::MAX;

/// An event as the workload sees it when it runs.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// Its color.
    pub color: Color,
    /// What its poster gave it.
    pub data: u64,
    /// The core running it.
    pub core: usize,
    /// Virtual time at its start, ns.
    pub now_ns: u64,
}

/// A post made by a handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Post {
    /// The event's color.
    pub color: Color,
    /// Its data.
    pub data: u64,
}

/// A program for the simulator: what each event costs and posts. Its state is the program's
/// (colors serialize its events, and the engine runs one at a time).
pub trait Workload {
    /// Runs `ev`: appends its posts to `out` (in posting order) and returns its handler's cost,
    /// ns. The run starts with one event of color [`root`](Self::root) whose data is [`ROOT`].
    fn handle(&mut self, ev: &Event, out: &mut Vec<Post>) -> u64;
    /// The color of the root event (as `Runtime::run`'s first argument).
    fn root(&self) -> Color {
        Color::DEFAULT
    }
    /// Colors never lent (pinned at their homes before the run).
    fn pinned(&self) -> Vec<Color> {
        Vec::new()
    }
    /// Cache lines of payload each message carries: written by its poster's handler, read by
    /// the handler that receives it, so charged at each event by the distance between the core
    /// that posted it and the core that runs it ([`CostModel::stream`]); 0 for messages whose
    /// data is negligible (the default).
    fn message_lines(&self) -> f64 {
        0.0
    }
    /// Called before each run after the first on one machine ([`Setup::earlier_runs`]): the
    /// program's own state goes back to its start (its counters; its random generator may go
    /// on). Stateless programs need nothing.
    fn restart(&mut self) {}
    /// Per event, the cost of the program's own layer around its handlers (an actor layer's
    /// reference counts and cell), ns: plain code, charged as it is, where the handler's work
    /// ([`handle`](Self::handle)'s) is a busy loop ([`CostModel::work`]). 0 by default.
    fn layer_ns(&self) -> u64 {
        0
    }
    /// The random draws the last [`handle`](Self::handle) made: plain code of the program's
    /// own, charged at [`CostModel::draw_ns`] each as it is, where the handler's work is a busy
    /// loop ([`CostModel::work`]). 0 by default.
    fn draws(&mut self) -> u64 {
        0
    }
    /// Whether a post touches a line of its recipient's (an actor layer's reference count on
    /// its recipient, taken by the poster and dropped by the event): a line that crosses
    /// between cores when the poster and the recipient's core differ, charged by distance to
    /// whichever core takes it from the other. False by default.
    fn post_touches_recipient(&self) -> bool {
        false
    }
    /// Bytes of the closure that carries `post` (its captures): one that fits a message
    /// (`message::InlineTask`: at most 24 bytes, 8-aligned) travels inside the message to a
    /// color homed on another core, when `Config::inline_posts`, and the receiver stores it
    /// (charged [`CostModel::store_ns`] there, and read from there by its event); others,
    /// and every local post, are stored by the poster. Unknown by default
    /// ([`LARGE_CLOSURE`]: stored by the poster).
    fn closure_bytes(&self, _post: &Post) -> usize {
        LARGE_CLOSURE
    }
}

/// [`Workload::closure_bytes`] of a closure too large to travel in a message.
pub const LARGE_CLOSURE: usize = usize::MAX;

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Virtual cores (workers), placed on `topology` in tree order.
    pub cores: usize,
    /// The machine.
    pub topology: Topology,
    /// The runtime's configuration: its policies decide.
    pub config: Config,
    /// What things cost.
    pub cost: CostModel,
    /// Seed of every random choice (victims, jitter).
    pub seed: u64,
    /// Each handler cost and message latency is stretched by a random factor in
    /// `[1, 1 + jitter]`: varies the schedule from seed to seed (0: none).
    pub jitter: f64,
    /// Check exclusion, order and exactly once (slower: a table per color and poster).
    pub check: bool,
    /// Reasoned spinning's threshold (`None`: `idle::threshold_for` the model's wake-up cost).
    pub spin_threshold: Option<Duration>,
    /// Stop after this many events (a runaway workload).
    pub max_events: u64,
    /// Per core, the share of its CPU that a busy thread of another process takes while the
    /// worker wants it (0.5: one spinning thread, as `bench actors`' busy cases); a core not
    /// listed, or at 0, has its CPU to itself. See [`Sim`]'s time slices.
    pub busy: Vec<f64>,
    /// Each worker's CPU share measure (`cpu_share`) starts from what a previous run measured
    /// on its CPU (`1 - busy`), as in a benchmark's later repetitions in one process; false: from
    /// a whole CPU, as in a fresh process, and the first windows (10 ms each) must tell.
    pub remembered_shares: bool,
    /// Runs of the workload on this machine before the one reported, as a benchmark's later
    /// repetitions run on a runtime that ran it before: what the runtime learned stays (each
    /// color's measured turn and event costs, which cost-aware and backlog stealing read;
    /// where `follow` moved colors; the outgoing buffers' sizes; the turn-sampling phase).
    /// Without them a cost-aware thief finds no color measured yet (one turn in
    /// `steal::turn_sample` is timed) and steals nothing, where the benchmark's runtime, warm
    /// from its warm-up run, steals.
    pub earlier_runs: u32,
}

impl Setup {
    /// `cores` cores of `topology` under `config`, default costs, seed 1, no jitter, no checks.
    pub fn new(cores: usize, topology: Topology, config: Config) -> Setup {
        Setup {
            cores: cores.max(1),
            topology,
            config,
            cost: CostModel::default(),
            seed: 1,
            jitter: 0.0,
            check: false,
            spin_threshold: None,
            max_events: 200_000_000,
            busy: Vec::new(),
            remembered_shares: true,
            earlier_runs: 0,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Report {
    /// Virtual time from the start to the end of the last event, ns (of the reported run: the
    /// last, after [`Setup::earlier_runs`]).
    pub makespan_ns: u64,
    /// Events run (the root included).
    pub events: u64,
    /// Events run by each core.
    pub events_per_core: Vec<u64>,
    /// Posts queued on the posting core.
    pub posts_local: u64,
    /// Messages sent between cores (posts, forwards, moves, returns, grants, requests).
    pub msgs: u64,
    /// Batches handed over.
    pub batches: u64,
    /// Sleeping cores woken.
    pub wakeups: u64,
    /// Times a core went to sleep.
    pub sleeps: u64,
    /// Spins started, and those that found work.
    pub spins: u64,
    /// Spins that found work before their budget ran out.
    pub spin_wins: u64,
    /// Steal requests sent.
    pub steal_requests: u64,
    /// Colors lent to thieves that asked.
    pub stolen: u64,
    /// Colors lent unasked, behind long turns (`steal::share_behind_long_turn`).
    pub shared: u64,
    /// Colors taken back with their events by their idle homes (`steal::recall`).
    pub recalls: u64,
    /// Colors moved by `follow` (to a poster, or pushed).
    pub moved: u64,
    /// Engine steps (rounds, spin ticks).
    pub steps: u64,
    /// Whether the run stopped at `max_events`.
    pub truncated: bool,
    /// Each core's CPU share as it last published it (thousandths; `cpu_share`): below 1000
    /// only on a core that a busy thread shares ([`Setup::busy`]).
    pub cpu_shares: Vec<u32>,
    /// Broken invariants found (with [`Setup::check`]); empty when all held.
    pub violations: Vec<String>,
}

/// What a running task tells the engine: its identity, for the checks, and its data.
#[derive(Clone, Copy, Default)]
struct Tag {
    id: u64,
    poster: u64,
    seq: u32,
    /// The core that posted it ([`NO_CORE`] for the root).
    from: u32,
    /// Its poster core's count of posts when it was posted ([`Core::posted`]): how many posts
    /// that core made since, and whether it lies next to the event that core ran before it.
    posted: u32,
    /// Its closure was prefetched by an earlier pop of its color's queue
    /// (`queue::PREFETCH_AHEAD`): read without waiting for memory.
    prefetched: bool,
    data: u64,
}

/// [`Tag::from`] of an event no core posted (the root).
const NO_CORE: u32 = u32::MAX;

/// The tags of the events queued or in flight: each simulated event is a `Task` that holds its
/// tag's number here (`Task::sim`), read back when the event runs ([`Tags::take`]).
///
/// The free slots are a chain: `free` is the first (or [`Tags::END`]: none), and each free
/// slot's `data` the next (a list of its own cost a length and a capacity test at each put and
/// take: with the per-core event count kept in `Core`, 5% of the host instructions of a chain
/// of local posts).
///
/// Invariant: a number is held by at most one task; a slot in the free chain belongs to no
/// task; `free` is `END` or a slot's index.
struct Tags {
    slots: Vec<Tag>,
    free: usize,
}

impl Default for Tags {
    fn default() -> Tags {
        Tags { slots: Vec::new(), free: Tags::END }
    }
}

impl Tags {
    /// The end of the free chain.
    const END: usize = usize::MAX;

    /// Keeps `tag` for a task: its number.
    fn put(&mut self, tag: Tag) -> NonZeroUsize {
        let i = match self.slots.get_mut(self.free) {
            Some(slot) => {
                let i = self.free;
                self.free = usize::try_from(slot.data).unwrap_or(Tags::END);
                *slot = tag;
                i
            }
            None => {
                self.slots.push(tag);
                self.slots.len() - 1
            }
        };
        NonZeroUsize::MIN.saturating_add(i)
    }

    /// A task for `tag`.
    fn task(&mut self, tag: Tag) -> Task {
        Task::sim(self.put(tag))
    }

    /// Marks the tag of number `n` prefetched.
    #[inline]
    fn prefetch(&mut self, n: NonZeroUsize) {
        if let Some(tag) = self.slots.get_mut(n.get() - 1) {
            tag.prefetched = true;
        }
    }

    /// The tag of `task` (made by [`task`](Self::task)), its number free again; `None` for a
    /// task the engine did not make (none is: the queues make no tasks).
    fn take(&mut self, task: Task) -> Option<Tag> {
        let i = task.sim_number()?.get() - 1;
        let slot = self.slots.get_mut(i)?;
        let tag = *slot;
        slot.data = self.free as u64;
        self.free = i;
        Some(tag)
    }
}

/// How a core spends a moment without work.
#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    Busy,
    /// Spinning until `until`; with `yields`, the spin ends by yielding a CPU shared with a
    /// busy thread, which takes it for a time slice (`idle::spin`'s yield that finds the CPU
    /// shared).
    Spin {
        until: u64,
        yields: bool,
    },
    Sleep {
        since: u64,
    },
}

/// What other cores can see of a core (its published hints, its idle state).
struct Status {
    state: State,
    /// Its ready count and backlog flag (`shared::Status`), as published at their times.
    ready: Hint<usize>,
    backlog: Hint<bool>,
    /// Set when woken from a sleep: how long it slept (for `spin_budget`).
    slept: Option<u64>,
    /// Set when a message found it spinning after its spin had yielded the CPU: when it
    /// yielded.
    yielded: Option<u64>,
    /// Its CPU share as it last published it (thousandths).
    share: u32,
    /// The busy thread's time slice on its CPU, ns (0: a CPU of its own).
    their_slice: u64,
}

struct Arrival {
    at: u64,
    from: usize,
    quiet: bool,
    /// Colors waiting on the sender when it sent the batch (`inbox::Sender::ready`).
    ready: usize,
    msgs: Vec<Msg>,
}

/// What one core owns (the engine's `worker::Core`).
struct Core {
    queue: ColorQueue,
    outbox: Outbox,
    now: u64,
    steal_pending: bool,
    steal_backoff: steal::Backoff,
    /// `worker::Core::answer_deferred`.
    answer_deferred: bool,
    /// `worker::Core::recall_deferred`.
    recall_deferred: Option<(Color, usize)>,
    nudge_cooldown: u32,
    /// The last turn was long and shared what waited behind it (`worker::run_round`).
    shared_at_turn_end: bool,
    last_sleep: Option<Duration>,
    /// The idle gaps it measured (`Spin::Adaptive`, `tune::SpinTuner`), and when the idle spell
    /// under way began (its gap is recorded when the next round starts: `worker`'s `idle`).
    spin_tuner: crate::tune::SpinTuner,
    idle_since: Option<u64>,
    turns: u32,
    /// Posts made by this core's handlers (wrapping): stamps its events ([`Tag::posted`]).
    posted: u32,
    /// Per poster core, the stamp ([`Tag::posted`]) of its last event run here.
    last_ran_posted: Vec<u32>,
    turn_sends: u32,
    /// Posts held by a guest's fence this turn (`worker::Core::held_in_turn`).
    held_in_turn: u32,
    /// True while the inbox is filed in the middle of a handler (`worker::Core::filing`).
    filing: bool,
    event_remote_posts: u32,
    event_remote_dest: usize,
    /// Posts made so far to colors here and elsewhere (forwards included), and the turns whose
    /// posts count where their colors' partners are: as the worker's (`follow::TurnSample`).
    post_totals: follow::PostTotals,
    partners: follow::TurnSample,
    events_since_check: u32,
    /// Latest arrival time per destination: keeps each pair's FIFO order under jitter.
    last_arrival: Vec<u64>,
    /// Its CPU's time slices, if a busy thread shares that CPU.
    cpu: Option<SharedCpu>,
    /// Set while a round is cut in steps ([`ROUND_STEP_NS`]): the events it has run so far.
    mid_round: Option<usize>,
    /// Set while a turn is cut in the middle of an event's posts ([`Sim::cut_posts`]): the rest
    /// of the turn.
    mid_turn: Option<Turn>,
    /// Events run here in the current run ([`Report::events_per_core`], filled at the end:
    /// counted here, next to the rest of an event's bookkeeping).
    events: u64,
}

impl Core {
    /// `tag`'s closure is stored by this core, core `k` (in its heap, after those it stored
    /// before).
    #[inline]
    fn store(&mut self, k: usize, tag: Tag) -> Tag {
        self.posted = self.posted.wrapping_add(1);
        Tag { from: k as u32, posted: self.posted, ..tag }
    }
}

/// A turn in progress (`Sim::turn`): its color, its events so far, and the posts of its current
/// event, made from `next` on while `pending`.
struct Turn {
    key: usize,
    color: Color,
    n: usize,
    start: u64,
    /// Where its timer starts, if it is timed (`worker::run_round`: after the flush and the
    /// share that come before a watched turn, which are not the color's cost).
    timed_from: u64,
    /// The core's CPU wait at the turn's start (`SharedCpu::window_wait`).
    wait0: u64,
    timed: bool,
    /// Watched: timed as its color's own cost (`worker::run_round`: a color not known short).
    watched: bool,
    /// The core's post totals at its start, if its posts are counted (`follow::TurnSample`).
    partners_from: Option<follow::PostTotals>,
    /// The current event's id (the poster of its posts) and posts; `next` is the first not
    /// made yet; `pending` until they are all made and the event's end is done.
    poster: u64,
    posts: Vec<Post>,
    next: usize,
    pending: bool,
}

/// A core's CPU shared with a busy thread (as the Linux scheduler shares it between two
/// runnable threads): the worker runs `run_slice` of runnable time (running or spinning), then
/// the busy thread runs `their_slice`, during which the worker's clock moves on and nothing of
/// it runs. While the worker sleeps, the busy thread has the CPU, which pays back the worker's
/// slice in proportion (a thread woken from a sleep preempts a busy one at once: the scheduler
/// credits sleepers). A spinner yields the CPU after [`SPIN_YIELD_NS`] and finds it taken
/// (`idle::spin`). The worker measures its share from its run time and its waits with the
/// runtime's own measure (`CpuShare::window`), in windows of `cpu_share::SAMPLE_EVERY`.
///
/// Invariant: `credit < run_slice` between charges; `mark <= ` the core's clock.
struct SharedCpu {
    run_slice: u64,
    their_slice: u64,
    /// Runnable time since the worker's last turn began.
    credit: u64,
    /// Virtual time up to which runnable time is charged.
    mark: u64,
    /// The current measuring window: its start, run and wait times.
    window_start: u64,
    window_run: u64,
    window_wait: u64,
    /// Of the window's wait, what the core's idle spins waited for the busy thread (left out
    /// of the share, `CpuShare::idle_from_here`).
    window_idle_wait: u64,
    measure: CpuShare,
    /// No spinning before this time (`idle`: the CPU was found shared).
    no_spin_until: u64,
}

/// A value a core publishes for the others (`shared::Status`'s hints: its ready count, its
/// backlog flag), as they see it: each value from the virtual time it was published on, not
/// before. A step runs its core ahead of the others (a round of turns, up to
/// [`ROUND_STEP_NS`], or one long turn), and the hints it publishes on the way belong to their
/// times: read as soon as published, a core idle at the start of a run saw the ready count its
/// peer published at the end of the root event, which a real thief cannot have seen yet, and
/// asked for colors at once (the stealing benchmark's batch case: 8 colors lent 1.3 ms into the
/// run, where the real thief, busy with its own colors until it ran out 10 ms later, took the 4
/// heavy chains then, and finished long after its victim: 148K events/s measured, 183K
/// simulated).
///
/// The log of published values is `older` then `latest`, the one most reads find: kept in the
/// hint itself, a read that finds it (a thief's look at each core) follows no pointer.
///
/// Invariant: the log's times never decrease; an entry is dropped only once a later one is at
/// or before the horizon (no read can reach behind it any more).
struct Hint<T> {
    latest: (u64, T),
    older: VecDeque<(u64, T)>,
}

impl<T: Copy + PartialEq> Hint<T> {
    fn new(v: T) -> Hint<T> {
        Hint { latest: (0, v), older: VecDeque::new() }
    }

    /// The core publishes `v` at `at` (its clock); nobody reads before `horizon` any more.
    /// Returns whether a read may see something new (`v` is not the latest value).
    fn set(&mut self, at: u64, v: T, horizon: u64) -> bool {
        let latest = &mut self.latest;
        if latest.1 == v {
            return false;
        }
        if latest.0 >= at {
            latest.1 = v;
            return true;
        }
        // The log grows: what no read reaches any more goes first. Only then: most publications
        // bring no new value, and after this one the log is what dropping at each would have
        // left (the horizon only rises). Kept: the last entry at or before the horizon, and
        // those after it.
        loop {
            let second = match self.older.len() {
                0 => break,
                1 => self.latest.0,
                _ => self.older[1].0,
            };
            if second > horizon {
                break;
            }
            self.older.pop_front();
        }
        let before = std::mem::replace(&mut self.latest, (at, v));
        self.older.push_back(before);
        true
    }

    /// The first time after `t` at which a read may see another value than at `t` (with no
    /// publication meanwhile), `u64::MAX` if none: the first entry after `t` but the oldest
    /// (reads before the second entry see the oldest).
    fn next_change_after(&self, t: u64) -> u64 {
        if self.latest.0 <= t || self.older.is_empty() {
            return u64::MAX;
        }
        self.older.iter().skip(1).map(|e| e.0).find(|&at| at > t).unwrap_or(self.latest.0)
    }

    /// The value a reader sees at `t`: the last published at or before `t` (the oldest kept if
    /// none is).
    #[inline]
    fn at(&self, t: u64) -> T {
        // Most reads find the latest entry (the only one, or one published by then).
        if self.latest.0 <= t || self.older.is_empty() {
            return self.latest.1;
        }
        // The oldest kept entry is the answer whether or not it is at or before `t`: the
        // search stops short of it.
        let mut i = self.older.len() - 1;
        while i > 0 && self.older[i].0 > t {
            i -= 1;
        }
        self.older[i].1
    }
}

/// The shared part of the simulated machine.
struct Net {
    inbox: Vec<Vec<Arrival>>,
    status: Vec<Status>,
    /// Steal-request slots: the thief and when its request becomes visible.
    slot: Vec<Option<(usize, u64)>>,
    /// Recall flags (`shared::Poke::recall`): when the flag raised by a recalling home becomes
    /// visible.
    recall: Vec<Option<u64>>,
    /// Each core's next step, if it has one.
    agenda: Agenda,
    seq: u64,
    /// The start of the step being run: no core reads a hint as of an earlier time from now on
    /// (steps run in order of their start, and a core reads at its clock, never behind its
    /// step's start).
    horizon: u64,
    /// Cores in each state (kept by [`set_state`](Self::set_state), the only writer of a
    /// core's state): `busy + spinners + sleeping` is the number of cores.
    counts: StateCounts,
    /// Changes of what a thief reads of the others (a hint's log, a CPU share, a request
    /// slot): counted by their writers (`publish_ready`, `publish_backlog`, `publish_share`,
    /// `set_slot`), for [`NoVictim`].
    changes: u64,
    /// Per core, its last request that found no victim.
    no_victim: Vec<NoVictim>,
}

/// A core's request that found no core worth asking ([`Sim::request`]): with no change since
/// (`changes`, [`Net::changes`]) and read within `[from, until)` of its clock, where no hint's
/// value differs from what it read (`Hint::next_change_after`), the same look finds the same.
/// Most requests of an idle or lightly loaded machine find nobody, and a look at every core's
/// hints cost a ring of actors at 16 cores 53 host instructions per event and a
/// producer-consumer 90.
///
/// Invariant: `changes` is at most [`Net::changes`]; a memo whose `changes` differs from it says
/// nothing.
#[derive(Clone, Copy)]
struct NoVictim {
    changes: u64,
    from: u64,
    until: u64,
}

impl NoVictim {
    const NEVER: NoVictim = NoVictim { changes: u64::MAX, from: 0, until: 0 };
}

/// How many cores are in each [`State`].
#[derive(Clone, Copy, Default)]
struct StateCounts {
    /// Running or about to.
    busy: usize,
    spinners: usize,
    sleeping: usize,
}

impl StateCounts {
    fn of(&mut self, state: State) -> &mut usize {
        match state {
            State::Busy => &mut self.busy,
            State::Spin { .. } => &mut self.spinners,
            State::Sleep { .. } => &mut self.sleeping,
        }
    }
}

impl Net {
    /// Core `k` publishes its ready count at `at` (its clock). This and the three below are
    /// the only writers of what a thief reads of another core ([`Sim::request`]): each counts
    /// a change that a reader may see, so that no [`NoVictim`] memo outlives one.
    fn publish_ready(&mut self, k: usize, at: u64, ready: usize) {
        if self.status[k].ready.set(at, ready, self.horizon) {
            self.changes += 1;
        }
    }

    /// Core `k` publishes whether it has a backlog at `at` (as
    /// [`publish_ready`](Self::publish_ready)).
    fn publish_backlog(&mut self, k: usize, at: u64, backlog: bool) {
        if self.status[k].backlog.set(at, backlog, self.horizon) {
            self.changes += 1;
        }
    }

    /// Core `k` publishes its CPU share ([`publish_ready`](Self::publish_ready)).
    fn publish_share(&mut self, k: usize, share: u32) {
        self.status[k].share = share;
        self.changes += 1;
    }

    /// Core `k`'s steal request slot holds `request` ([`publish_ready`](Self::publish_ready)).
    fn set_slot(&mut self, k: usize, request: Option<(usize, u64)>) {
        self.slot[k] = request;
        self.changes += 1;
    }

    /// Core `core` goes to `state`; the counts follow.
    fn set_state(&mut self, core: usize, state: State) {
        let st = &mut self.status[core];
        let was = std::mem::replace(&mut st.state, state);
        *self.counts.of(was) -= 1;
        *self.counts.of(state) += 1;
    }

    /// Core `core`'s next step is at `at` (replacing the one it had: a core has at most one).
    fn schedule(&mut self, core: usize, at: u64) {
        self.seq += 1;
        self.agenda.set(core, (at, self.seq));
    }

    /// A message reached `dest` at `at`: wake it if it spins or sleeps. Returns whether a
    /// sleeper was woken (the sender pays a wake-up call).
    fn arrive(&mut self, dest: usize, at: u64, cost: &Ticks, report: &mut Report) -> bool {
        match self.status[dest].state {
            State::Busy => false,
            State::Spin { until, yields } if yields && at > until => {
                // Its spin yielded the CPU at `until`, a busy thread ran a time slice, and then
                // it went to sleep: it sees the message as the slice ends, or is woken.
                self.set_state(dest, State::Busy);
                let st = &mut self.status[dest];
                st.yielded = Some(until);
                let back = until + st.their_slice;
                if at <= back {
                    self.schedule(dest, back);
                    return false;
                }
                let wake = at + cost.wakeup;
                st.slept = Some(wake - back);
                report.wakeups += 1;
                self.schedule(dest, wake);
                true
            }
            State::Spin { .. } => {
                report.spin_wins += 1;
                self.set_state(dest, State::Busy);
                self.schedule(dest, at + cost.spin_notice);
                false
            }
            State::Sleep { since } => {
                let wake = at + cost.wakeup;
                self.set_state(dest, State::Busy);
                self.status[dest].slept = Some(wake.saturating_sub(since));
                report.wakeups += 1;
                self.schedule(dest, wake);
                true
            }
        }
    }
}

/// The fixed costs of the [`CostModel`] in whole nanoseconds of virtual time, converted once
/// (a saturating float conversion per charge was about a twentieth of the host time of a
/// message-heavy run: callgrind, producer-consumer at 16 cores).
struct Ticks {
    event: u64,
    store: u64,
    turn: u64,
    round: u64,
    local_post: u64,
    remote_post: u64,
    deliver: u64,
    lock: u64,
    wake_send: u64,
    wakeup: u64,
    sleep: u64,
    spin_notice: u64,
    steal_answer: u64,
    /// [`CostModel::line`] by distance.
    line: [u64; 6],
}

impl Ticks {
    fn of(c: &CostModel) -> Ticks {
        Ticks {
            event: c.event_ns as u64,
            store: c.store_ns as u64,
            turn: c.turn_ns as u64,
            round: c.round_ns as u64,
            local_post: c.local_post_ns as u64,
            remote_post: c.remote_post_ns as u64,
            deliver: c.deliver_ns as u64,
            lock: c.lock_ns as u64,
            wake_send: c.wake_send_ns as u64,
            wakeup: c.wakeup_ns as u64,
            sleep: c.sleep_ns as u64,
            spin_notice: c.spin_notice_ns as u64,
            steal_answer: c.steal_answer_ns as u64,
            line: c.line_ns.map(|l| l as u64),
        }
    }

    /// [`CostModel::line`]`(d) as u64`.
    fn line(&self, d: usize) -> u64 {
        self.line[d.min(self.line.len() - 1)]
    }
}

/// The invariant checker's tables.
#[derive(Default)]
pub(crate) struct Checks {
    ran: Vec<u64>,
    /// Per color: the core and virtual interval of its last turn.
    turns: FxHashMap<Color, (usize, u64, u64)>,
    /// Per (poster, color): the last posting index run.
    order: FxHashMap<(u64, Color), u32>,
    violations: Vec<String>,
}

impl Checks {
    fn event(&mut self, tag: Tag, color: Color) {
        let (w, b) = ((tag.id / 64) as usize, tag.id % 64);
        if self.ran.len() <= w {
            self.ran.resize(w + 1, 0);
        }
        if self.ran[w] & (1 << b) != 0 {
            self.violate(format!("exactly once: event {} of {color:?} ran twice", tag.id));
        }
        self.ran[w] |= 1 << b;
        if let Some(prev) = self.order.insert((tag.poster, color), tag.seq) {
            if prev >= tag.seq {
                self.violate(format!(
                    "order: post {} of poster {} to {color:?} ran after its post {prev}",
                    tag.seq, tag.poster
                ));
            }
        }
    }

    fn turn(&mut self, color: Color, core: usize, start: u64, end: u64) {
        if let Some((c, s, e)) = self.turns.insert(color, (core, start, end)) {
            if c != core && start < e && s < end {
                self.violate(format!(
                    "exclusion: {color:?} ran on core {c} in [{s}, {e}] and on core {core} in \
                     [{start}, {end}] ns"
                ));
            }
        }
    }

    fn violate(&mut self, what: String) {
        if self.violations.len() < 16 {
            self.violations.push(what);
        }
    }
}

/// A simulated machine running one workload.
pub struct Sim<'w> {
    setup: Setup,
    placement: Placement,
    tiers: Vec<Vec<Vec<usize>>>,
    /// Distance between cores, `cores * cores`.
    dist: Vec<u8>,
    cores: Vec<Core>,
    /// Per core: emptied batch buffers given back to it (`shared::Remote::returns`).
    returns: Vec<crate::outbox::Returns>,
    net: Net,
    /// The cost model's fixed costs in whole ns.
    ticks: Ticks,
    work: &'w mut dyn Workload,
    base: Instant,
    threshold: Duration,
    max_spinners: usize,
    rng: u64,
    next_id: u64,
    /// The tags of the events not run yet.
    tags: Tags,
    /// Per color: the core it last ran on (its data is in that core's cache).
    last_core: LastCore,
    /// The workload's [`Workload::message_lines`].
    message_lines: f64,
    /// The workload's [`Workload::layer_ns`].
    layer_ns: f64,
    /// Small closures posted to another core travel in their messages (`Config::inline_posts`,
    /// with batching: the real worker's `post_closure`).
    inline_posts: bool,
    /// Per color, the core that last wrote its recipient line, if posts touch one
    /// ([`Workload::post_touches_recipient`]).
    recipient_line: Option<LastCore>,
    checks: Option<Checks>,
    report: Report,
    posts: Vec<Post>,
    /// Reused buffers: arrivals taken from an inbox, destinations to flush.
    arrived: Vec<Arrival>,
    /// Reused buffer: the arrivals left in an inbox for later.
    later: Vec<Arrival>,
    scratch: Vec<usize>,
    /// True while the stepping core makes an event's posts ([`post_rest`](Self::post_rest)),
    /// and `cut` when one of them would file its inbox while another core's step is due before
    /// its clock. The engine's, not each core's: one core's step runs at a time, and only it
    /// posts (a flag per core cost a bounds check at each use, four per event).
    posting: bool,
    cut: bool,
}

impl<'w> Sim<'w> {
    /// A machine as `setup` says, about to run `work`.
    pub fn new(setup: Setup, work: &'w mut dyn Workload) -> Sim<'w> {
        let n = setup.cores.max(1);
        let topo = &setup.topology;
        let placement = Placement::new(n, n, topo.domain_size(n));
        let tiers =
            (0..n).map(|w| steal::victim_tiers(topo, w, n, setup.config.steal_locality)).collect();
        let len = topo.len().max(1);
        let mut dist = vec![0u8; n * n];
        for a in 0..n {
            for b in 0..n {
                dist[a * n + b] = topo.distance(a % len, b % len) as u8;
            }
        }
        let cores = (0..n)
            .map(|w| Core {
                queue: ColorQueue::new(w, placement)
                    .with_backlog_turns(setup.config.backlog_turns)
                    .with_newest_first(setup.config.newest_first),
                outbox: Outbox::new(n, setup.config.batch_size, setup.config.safety_flush_factor)
                    .sized(setup.config.batch_sizing),
                now: 0,
                steal_pending: false,
                steal_backoff: steal::Backoff::default(),
                answer_deferred: false,
                recall_deferred: None,
                nudge_cooldown: 0,
                shared_at_turn_end: false,
                last_sleep: None,
                spin_tuner: crate::tune::SpinTuner::default(),
                idle_since: None,
                turns: 0,
                posted: 0,
                last_ran_posted: vec![0; n],
                turn_sends: 0,
                held_in_turn: 0,
                filing: false,
                event_remote_posts: 0,
                event_remote_dest: 0,
                post_totals: (0, 0),
                partners: follow::TurnSample::new(),
                events_since_check: 0,
                last_arrival: vec![0; n],
                cpu: shared_cpu(&setup, w),
                mid_round: None,
                mid_turn: None,
                events: 0,
            })
            .collect::<Vec<_>>();
        let status = cores
            .iter()
            .map(|c| Status {
                state: State::Busy,
                ready: Hint::new(0),
                backlog: Hint::new(false),
                slept: None,
                yielded: None,
                share: c.cpu.as_ref().map_or(FULL, |c| c.measure.share()),
                their_slice: c.cpu.as_ref().map_or(0, |c| c.their_slice),
            })
            .collect();
        let net = Net {
            inbox: (0..n).map(|_| Vec::new()).collect(),
            status,
            slot: vec![None; n],
            recall: vec![None; n],
            agenda: Agenda::new(n),
            seq: 0,
            horizon: 0,
            counts: StateCounts { busy: n, ..StateCounts::default() },
            changes: 0,
            no_victim: vec![NoVictim::NEVER; n],
        };
        let threshold = setup.spin_threshold.unwrap_or_else(|| {
            crate::idle::threshold_for(Duration::from_nanos(setup.cost.wakeup_ns as u64))
        });
        let max_spinners = crate::idle::max_spinners(setup.config.max_spinners, n, n);
        let checks = setup.check.then(Checks::default);
        let message_lines = work.message_lines().max(0.0);
        let layer_ns = work.layer_ns() as f64;
        let inline_posts = setup.config.inline_posts && setup.config.batching;
        let ticks = Ticks::of(&setup.cost);
        let recipient_line = work.post_touches_recipient().then(LastCore::default);
        let rng = setup.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        Sim {
            setup,
            placement,
            tiers,
            dist,
            cores,
            returns: (0..n).map(|_| crate::outbox::returns()).collect(),
            net,
            ticks,
            work,
            // The outbox's clock: any fixed instant will do, only differences are read.
            base: Instant::now(),
            threshold,
            max_spinners,
            rng,
            next_id: 0,
            tags: Tags::default(),
            last_core: LastCore::default(),
            message_lines,
            layer_ns,
            inline_posts,
            recipient_line,
            checks,
            report: Report::default(),
            posts: Vec::new(),
            arrived: Vec::new(),
            later: Vec::new(),
            scratch: Vec::new(),
            posting: false,
            cut: false,
        }
    }

    fn random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// `ns` stretched by the jitter.
    #[inline(always)]
    fn jitter(&mut self, ns: f64) -> u64 {
        // Inlined, the common case without jitter is a comparison (a call per event and per
        // batch was about a fiftieth of a fan-out's host time).
        if self.setup.jitter <= 0.0 {
            return ns as u64;
        }
        self.jittered(ns)
    }

    #[inline(never)]
    fn jittered(&mut self, ns: f64) -> u64 {
        let u = (self.random() >> 11) as f64 / (1u64 << 53) as f64;
        (ns * (1.0 + self.setup.jitter * u)) as u64
    }

    fn distance(&self, a: usize, b: usize) -> usize {
        self.dist[a * self.cores.len() + b] as usize
    }

    /// A new event's tag, its closure not stored yet ([`stored`](Self::stored)).
    fn tag(&mut self, poster: u64, seq: u32, data: u64) -> Tag {
        let id = self.next_id;
        self.next_id += 1;
        Tag { id, poster, seq, from: NO_CORE, posted: 0, prefetched: false, data }
    }

    /// `tag`'s closure is stored by core `k` (in its heap, after those it stored before).
    fn stored(&mut self, k: usize, tag: Tag) -> Tag {
        self.cores[k].store(k, tag)
    }

    /// Runs the workload to the end (nothing left to run or in flight) and reports.
    pub fn run(mut self) -> Report {
        for c in self.work.pinned() {
            let h = home_of(c, self.placement);
            self.cores[h].queue.pin(c);
        }
        let mut start = 0;
        for run in 0..=self.setup.earlier_runs {
            if run > 0 {
                start = self.restart();
            }
            self.run_once(run, start);
            if self.report.truncated {
                break;
            }
        }
        self.report.makespan_ns = self.report.makespan_ns.saturating_sub(start);
        self.report.events_per_core = self.cores.iter().map(|c| c.events).collect();
        self.report.cpu_shares = self.net.status.iter().map(|s| s.share).collect();
        if let Some(mut checks) = self.checks.take() {
            if !self.report.truncated {
                let ran: u64 = checks.ran.iter().map(|w| u64::from(w.count_ones())).sum();
                if ran != self.next_id {
                    checks.violate(format!(
                        "exactly once: {} events posted, {ran} distinct ran",
                        self.next_id
                    ));
                }
            }
            self.report.violations = checks.violations;
        }
        self.report
    }

    /// Run number `run` from virtual time `start`: the root event, then steps until nothing is
    /// left to run or in flight.
    fn run_once(&mut self, run: u32, start: u64) {
        let n = self.cores.len();
        // Each run's root is a poster of its own (for the order check), as each `Runtime::run`'s
        // first event is posted afresh; event ids, the other posters, stay far below.
        let root = self.tag(ROOT - u64::from(run), 0, ROOT);
        let color = self.work.root();
        let home = home_of(color, self.placement);
        // As `Runtime::run` posts it: a message to the color's home, which routes it as any
        // received post (to where the color lives now, if an earlier run moved it or lent it:
        // queued at home regardless, the root of such a run was lost and the run ran nothing).
        let msg = Msg::Post { color, task: self.tags.task(root), urgent: false, step: false };
        self.receive(home, msg, home, (false, 0), &mut false, None);
        // Every core starts with a round (the others find nothing and idle).
        for k in 0..n {
            self.net.schedule(k, start);
        }
        while let Some((k, key)) = self.net.agenda.first() {
            self.report.steps += 1;
            self.net.horizon = key.0;
            self.step(k, key.0);
            // The step's entry stays in the agenda while it runs, as most steps schedule their
            // core's next one, which then replaces it in one pass (popping it first cost a
            // second); an entry the step did not replace is spent.
            self.net.agenda.spent(k, key);
            if self.report.events >= self.setup.max_events {
                self.report.truncated = true;
                break;
            }
        }
    }

    /// Makes ready for a further run on this machine ([`Setup::earlier_runs`]), as `Runtime::run`
    /// is called again: the report starts afresh, the workload restarts, every core wakes at
    /// the end of the run before (all sleep by then: nothing was left to do). Returns the
    /// new run's start.
    fn restart(&mut self) -> u64 {
        let n = self.cores.len();
        let start =
            self.cores.iter().map(|c| c.now).max().unwrap_or(0).max(self.report.makespan_ns);
        for k in 0..n {
            self.net.set_state(k, State::Busy);
            let core = &mut self.cores[k];
            core.now = start;
            core.events = 0;
            // As `worker::WorkerCtx::run`: a run's backoff starts afresh.
            core.steal_backoff = steal::Backoff::default();
            // The run's end stopped its idle spell (`idle::Flow::Stop`: not timed).
            core.idle_since = None;
            if let Some(cpu) = core.cpu.as_mut() {
                // Asleep since its last charge: the busy thread had the CPU meanwhile.
                cpu.mark = start;
                cpu.new_window(start);
            }
        }
        self.work.restart();
        self.report = Report::default();
        start
    }

    /// One step of core `k` at virtual time `t`.
    fn step(&mut self, k: usize, t: u64) {
        let now = self.cores[k].now.max(t);
        self.cores[k].now = now;
        if let Some(at) = self.net.status[k].yielded.take() {
            self.yield_cpu(k, at);
        }
        if let Some(slept) = self.net.status[k].slept.take() {
            self.cores[k].last_sleep = Some(Duration::from_nanos(slept));
            self.woke(k, slept);
        }
        match self.net.status[k].state {
            State::Busy => self.round(k),
            State::Spin { until, yields } if now >= until => {
                self.net.set_state(k, State::Busy);
                if yields {
                    self.yield_cpu(k, until);
                }
                self.sleep(k);
            }
            State::Spin { until, .. } => {
                // A spinner asks for work now and then (`idle::spin`, every 1024 polls).
                self.request(k);
                self.net.schedule(k, until.min(now + SPIN_STEAL_EVERY_NS));
            }
            State::Sleep { .. } => {}
        }
    }

    /// A round of the run loop (`worker::WorkerCtx::run`): inbox, steal slot, turns, flush; then
    /// the idle path if nothing ran.
    fn round(&mut self, k: usize) {
        let mut ran = match self.cores[k].mid_round.take() {
            Some(ran) => ran,
            None => {
                let core = &mut self.cores[k];
                if let Some(since) = core.idle_since.take() {
                    // The idle spell is over (`idle::idle`, which times it with `Spin::Adaptive`).
                    if self.setup.config.spin == crate::Spin::Adaptive {
                        core.spin_tuner
                            .record(Duration::from_nanos(core.now.saturating_sub(since)));
                    }
                }
                self.cores[k].now += self.ticks.round;
                self.take_inbox(k);
                let core = &self.cores[k];
                let kept = core.answer_deferred || core.recall_deferred.is_some();
                if steal::answers_outside_turns(kept, core.queue.ready_len()) {
                    self.answer(k);
                }
                0
            }
        };
        let start = self.cores[k].now;
        let round_budget = self.setup.config.round_budget.max(1);
        while ran < round_budget {
            // Tested before it is taken: taking moves the whole turn, even an absent one.
            let turn = if self.cores[k].mid_turn.is_none() {
                self.turn(k)
            } else if let Some(mut t) = self.cores[k].mid_turn.take() {
                // What the cut left to file, now that the steps due before it have run.
                self.file_mid_turn(k);
                self.turn_events(k, &mut t)
            } else {
                unreachable!("a turn cut in the middle went missing")
            };
            let Some(n) = turn else {
                self.cores[k].mid_round = Some(ran);
                let at = self.cores[k].now;
                return self.net.schedule(k, at);
            };
            if n == 0 {
                break;
            }
            ran += n;
            if ran < round_budget && self.cores[k].now >= start + ROUND_STEP_NS {
                // The rest of the round is a later step: the other cores' steps due before
                // now run first, and see what this one published after each turn (its ready
                // count, its answers to their requests) at the right time.
                self.cores[k].mid_round = Some(ran);
                let at = self.cores[k].now;
                return self.net.schedule(k, at);
            }
        }
        self.flush_all(k);
        if self.cores[k].cpu.is_some() {
            self.charge_cpu(k);
            self.sample_share(k);
        }
        self.publish(k);
        let empty = ran == 0 && self.cores[k].queue.ready_len() == 0;
        if empty && self.answer_held(k) {
            // As `worker`: flushed, and a round again before idling.
            self.flush_all(k);
            let at = self.cores[k].now;
            self.net.schedule(k, at);
        } else if empty {
            self.idle(k);
        } else {
            let at = self.cores[k].now;
            self.net.schedule(k, at);
        }
    }

    fn publish(&mut self, k: usize) {
        let (now, ready) = (self.cores[k].now, self.cores[k].queue.ready_len());
        self.net.publish_ready(k, now, ready);
    }

    fn take_inbox(&mut self, k: usize) {
        let now = self.cores[k].now;
        let inbox = &mut self.net.inbox[k];
        let due = inbox.iter().filter(|a| a.at <= now).count();
        if due == 0 {
            return;
        }
        let mut arrived = std::mem::take(&mut self.arrived);
        if due == inbox.len() {
            // All of it (most takes): the buffers trade places, the inbox keeps the empty one
            // (an append copied every arrival).
            std::mem::swap(&mut arrived, inbox);
        } else {
            // Split in one pass, each part in inbox order (not `remove` per arrival: quadratic).
            let mut later = std::mem::take(&mut self.later);
            for a in inbox.drain(..) {
                if a.at <= now {
                    arrived.push(a);
                } else {
                    later.push(a);
                }
            }
            std::mem::swap(inbox, &mut later);
            self.later = later;
        }
        let batching = self.setup.config.batching;
        let follows = batching && self.setup.config.follow;
        for a in arrived.drain(..) {
            let Arrival { from, quiet, ready, mut msgs, .. } = a;
            let cost = &self.setup.cost;
            let lines = msgs.len() as f64 / cost.msgs_per_line;
            let d = self.distance(from, k);
            let receive = msgs.len() as f64 * cost.receive_ns + cost.stream(lines, d);
            self.cores[k].now += receive as u64;
            let mut may_move = batching;
            let stream = if follows { follow::stream(&msgs) } else { None };
            for msg in msgs.drain(..) {
                self.receive(k, msg, from, (quiet, ready), &mut may_move, stream);
            }
            if batching {
                self.cores[k].outbox.recycle(msgs, self.returns.get(from));
            }
        }
        self.arrived = arrived;
    }

    /// Routes one message (`worker::Core::receive`).
    fn receive(
        &mut self,
        k: usize,
        msg: Msg,
        from: usize,
        (quiet, poster_ready): (bool, usize),
        may_move: &mut bool,
        stream: Option<Color>,
    ) {
        match msg {
            Msg::PostInline { color, task, urgent, step } => {
                // Stored here, by the receiver (`worker::Core::receive`): its closure is this
                // core's from now on.
                let Some(tag) = self.tags.take(task.into_task(k)) else { return };
                let tag = self.stored(k, tag);
                self.cores[k].now += self.ticks.store;
                let msg = Msg::Post { color, task: self.tags.task(tag), urgent, step };
                self.receive(k, msg, from, (quiet, poster_ready), may_move, stream);
            }
            Msg::Post { color, task, urgent, step } => {
                let stream = stream == Some(color);
                let follow = *may_move && (quiet || step || stream) && self.setup.config.follow;
                let offer = follow.then_some(step);
                let poster = offer.map(|_| from);
                let follow_on = self.setup.config.follow;
                let status = &self.net.status;
                let mine = status[k].share;
                let core = &mut self.cores[k];
                let home_ready = core.queue.ready_len();
                let route =
                    core.queue.receive_post(color, task, urgent, poster, |tr, cost, idle| {
                        if !follow::judged(idle, offer == Some(true)) {
                            return None;
                        }
                        if let Some(step) = offer {
                            let cheap = follow::cheap(cost);
                            let moves = follow::worth_asking(&tr, quiet, step, stream && cheap)
                                && follow::moves(&follow::Offer {
                                    traffic: tr,
                                    quiet,
                                    step,
                                    stream,
                                    cheap,
                                    poster_ready,
                                    home_ready,
                                    poster_share: status[from].share,
                                    home_share: mine,
                                });
                            if moves {
                                return Some(from);
                            }
                        }
                        // Off a shared CPU, with the post (`follow::relief`).
                        if !follow_on {
                            return None;
                        }
                        follow::relief(mine, || peers(status, k))
                    });
                match route {
                    Route::Queued => {}
                    Route::Move { to, task } => {
                        *may_move = false;
                        self.report.moved += 1;
                        let home = k as u32;
                        self.send(k, to, Msg::Move { color, home, task: Some(task), urgent });
                    }
                    Route::Forward { to, task } => {
                        self.send(k, to, Msg::Forward { color, home: k as u32, task, urgent })
                    }
                    Route::Remote { home, task } => {
                        self.send(k, home, Msg::Post { color, task, urgent, step: false })
                    }
                    Route::Held(ask) => self.ask_sync(k, ask),
                }
            }
            Msg::Forward { color, home, task, urgent } => {
                self.cores[k].queue.accept_forward(color, home as usize, task, urgent)
            }
            Msg::Move { color, home, task, urgent } => {
                let home = home as usize;
                let status = &self.net.status;
                let relieved = follow::relieved(status[k].share, peer(status, home));
                self.cores[k].queue.adopt_moved(color, home, task, urgent, relieved)
            }
            Msg::Grant { from, loans, asked } => {
                if asked {
                    self.settle_steal(k, !loans.is_empty());
                }
                for loan in loans {
                    self.cores[k].queue.adopt(from as usize, loan);
                }
            }
            Msg::Return { color, ran } => {
                self.cores[k].queue.returned(color, ran);
                self.answer_syncs(k, color);
            }
            Msg::Recall { color, from } => self.answer_recall(k, color, from as usize, true),
            Msg::GiveBack { ran, loan } => {
                self.settle_steal(k, true);
                self.report.recalls += 1;
                let color = loan.color;
                self.cores[k].queue.given_back(ran, *loan);
                self.answer_syncs(k, color);
            }
            Msg::Kept { color } => {
                self.settle_steal(k, false);
                if let Some((to, parked)) = self.cores[k].queue.kept(color) {
                    for (task, urgent) in parked {
                        self.send(k, to, Msg::Forward { color, home: k as u32, task, urgent });
                    }
                }
                self.answer_syncs(k, color);
            }
            Msg::Sync { color, from, epoch } => {
                if !self.cores[k].queue.sync_waits(color, from as usize, epoch) {
                    self.send(k, from as usize, Msg::Synced { color, epoch })
                }
            }
            Msg::Synced { color, epoch } => {
                let ask = self.cores[k].queue.synced(color, epoch);
                self.ask_sync(k, ask);
            }
            Msg::StealRequest => {
                let core = &self.cores[k];
                if steal::answers_outside_turns(core.answer_deferred, core.queue.ready_len()) {
                    self.answer_request(k);
                }
            }
            Msg::Pin { color } => self.cores[k].queue.pin(color),
            Msg::Io(_) => {}
        }
    }

    /// One turn of the next ready color (`worker::WorkerCtx::run_round`'s body). Returns the
    /// events run (0: nothing ready), or `None` if the turn was cut ([`cut_posts`]), to go on
    /// in a later step (`Core::mid_turn`).
    ///
    /// [`cut_posts`]: Self::cut_posts
    fn turn(&mut self, k: usize) -> Option<usize> {
        let n = self.cores.len();
        // Borrowed once (see `post`).
        let core = &mut self.cores[k];
        let Some((key, color)) = core.queue.start_turn() else {
            return Some(0);
        };
        let start = core.now;
        let wait0 = core.cpu.as_ref().map_or(0, |c| c.window_wait);
        let mut t = start + self.ticks.turn;
        let stamp = core.turns;
        if let Some((prev, at)) = self.last_core.replace(color, k, stamp) {
            let cost = &self.setup.cost;
            if prev != k {
                let d = usize::from(self.dist[prev * n + k]);
                t += (cost.color_lines * cost.line(d)) as u64;
            } else if f64::from(stamp.wrapping_sub(at)) > cost.warm_colors {
                // Here last time, but more colors than the nearest cache holds ran since.
                t += (cost.color_lines * cost.cold_line_ns) as u64;
            }
        }
        core.now = t;
        core.turns = core.turns.wrapping_add(1);
        let totals = core.post_totals;
        let partners_from = core.partners.start(|| totals);
        let timed =
            steal::turn_sample(&self.setup.config).is_some_and(|n| core.turns.is_multiple_of(n));
        // As `worker::run_round`: nothing buffered for an idle core (for any, unless the
        // color is likely short) waits behind a watched turn, and the colors waiting behind
        // one of a color measured long are shared first.
        let watched = n > 1 && !core.queue.known_within(key, steal::WATCHED_ABOVE_NS);
        let after_share = std::mem::take(&mut core.shared_at_turn_end);
        let long = watched && !after_share && core.queue.known_over(key, steal::LONG_EVENT_NS);
        let before = core.now;
        if watched && self.setup.config.batching && core.outbox.has_pending() {
            if steal::flushes_all_before(&core.queue, key) {
                self.flush_all(k);
            } else {
                self.flush_to_idle(k);
            }
        }
        if long {
            self.share_behind_long_turn(k, 1);
        }
        // The turn's own cost from its start (its tick and its color's lines, which the
        // worker's timer sees in the first event), without the flush and the share.
        let timed_from = start + (self.cores[k].now - before);
        let mut posts = std::mem::take(&mut self.posts);
        posts.clear();
        let mut turn = Turn {
            key,
            color,
            n: 0,
            start,
            timed_from,
            wait0,
            timed,
            watched,
            partners_from,
            poster: 0,
            posts,
            next: 0,
            pending: false,
        };
        self.turn_events(k, &mut turn)
    }

    /// The events of turn `t` (from its current event's posts not made yet, if any), then its
    /// end; `None` if cut again.
    ///
    /// The turn is the caller's, by reference: moved in and out (and out of an absent
    /// `Core::mid_turn` at every turn), its copies were a few percent of the host time of
    /// one-event turns (a producer-consumer's receivers, with the agenda's look past its own
    /// entry: 951.0M -> 923.3M instructions at 16 cores).
    fn turn_events(&mut self, k: usize, t: &mut Turn) -> Option<usize> {
        let budget = self.setup.config.turn_budget.max(1);
        // As `worker::run_round`: decided once a turn (here, once a resumption of it).
        let stealing = self.setup.config.steal != Steal::Off && self.cores.len() > 1;
        let looks = steal::looks_in_turn(stealing, || self.cores[k].queue.event_cost(t.key));
        loop {
            if t.pending && !self.post_rest(k, t) {
                // Its posts go with it.
                self.cores[k].mid_turn = Some(Turn { posts: std::mem::take(&mut t.posts), ..*t });
                return None;
            }
            if t.n >= budget {
                break;
            }
            let now = self.cores[k].now;
            let net = &self.net;
            let asked = || {
                net.slot[k].is_some_and(|(_, visible)| visible <= now)
                    || net.recall[k].is_some_and(|visible| visible <= now)
            };
            if t.n > 0 && looks && steal::cuts_turn(t.n, asked) {
                break;
            }
            let Some(task) = self.cores[k].queue.pop(t.key) else { break };
            t.n += 1;
            if let Some(n) = self.cores[k].queue.prefetched(t.key).and_then(Task::sim_number_of) {
                self.tags.prefetch(n);
            }
            if let Some(tag) = self.tags.take(task) {
                self.run_event(k, t.color, tag, t);
            }
        }
        let Turn { key, color, n, start, timed_from, wait0, timed, watched, partners_from, .. } =
            *t;
        if let Some(before) = partners_from {
            let core = &mut self.cores[k];
            if let Some(elsewhere) = follow::TurnSample::posted_elsewhere(before, core.post_totals)
            {
                core.queue.count_turn_posts(key, elsewhere);
            }
        }
        // The buffer back for the next turn (swapped: what is there, empty unless this turn
        // was cut, goes with the turn).
        std::mem::swap(&mut self.posts, &mut t.posts);
        if self.setup.cost.contention > 0.0 && self.net.counts.busy > 1 {
            // Other cores running at the same time slow this one (shared caches, memory
            // bandwidth, a shared host): the turn takes longer. Its own time only: not the
            // slices a busy thread took from it meanwhile (`SharedCpu`).
            let others = (self.net.counts.busy - 1) as f64;
            let lost = self.cores[k].cpu.as_ref().map_or(0, |c| c.window_wait - wait0);
            let turn = (self.cores[k].now - start - lost) as f64;
            self.cores[k].now += (turn * self.setup.cost.contention * others) as u64;
        }
        let end = self.cores[k].now;
        if let Some(c) = self.checks.as_mut() {
            c.turn(color, k, start, end);
        }
        // The turn's events at their cost as measured before it (`worker::run_round`).
        let turn_ns = self.cores[k].queue.event_cost(key).saturating_mul(n as u64);
        // As `worker::run_round`: a sampled turn is the worker's average too, a watched one
        // its color's own cost only; an empty turn tells nothing of the color's cost.
        let long = n > 0 && {
            let ns = end - timed_from;
            if timed {
                self.cores[k].queue.record_turn(key, ns, n);
            } else if watched {
                self.cores[k].queue.record_watched_turn(key, ns, n);
            }
            watched && steal::long_turn(ns, n)
        };
        self.end_turn(k, key, turn_ns, long);
        Some(n)
    }

    /// Runs event `tag` of `color` in turn `t`: its handler, its costs; its posts are `t`'s
    /// to make ([`post_rest`](Self::post_rest)).
    fn run_event(&mut self, k: usize, color: Color, tag: Tag, t: &mut Turn) {
        self.report.events += 1;
        if let Some(c) = self.checks.as_mut() {
            c.event(tag, color);
        }
        // The event drops its reference to its recipient (the poster took it).
        self.touch_recipient(k, color);
        let ev = Event { color, data: tag.data, core: k, now_ns: self.cores[k].now };
        t.posts.clear();
        let work = self.work.handle(&ev, &mut t.posts);
        let draws = self.work.draws() as f64;
        let c = &self.setup.cost;
        let mut cost = c.work(work) + self.layer_ns + draws * c.draw_ns;
        let from = tag.from as usize;
        let n = self.cores.len();
        // Borrowed once for the cost (see `post`).
        let core = &mut self.cores[k];
        core.events += 1;
        if from < n {
            // Its closure, written by its poster: read as a stream if it lies next to the one
            // from that poster run here before (posted just before it: a queue run in posting
            // order), else a whole latency. From another core: by distance. From this one: out
            // of its caches if it posted more than they hold since. If an earlier pop of the
            // queue prefetched it (`ColorQueue::pop`), its latency overlapped other work but
            // its transfer did not: a streamed line, as in a run in posting order. (Free, as
            // it was, the fit to session 31's figures left a counter's stream of a million
            // events 17% faster than measured; with it, within 5%.)
            let line = if from != k {
                let d = usize::from(self.dist[from * n + k]);
                // The handler reads its message's payload, still in the poster's cache.
                cost += c.stream(self.message_lines, d);
                c.line(d)
            } else if f64::from(core.posted.wrapping_sub(tag.posted)) > c.warm_msgs {
                c.memory_line_ns
            } else {
                0.0
            };
            let last = &mut core.last_ran_posted[from];
            let next = tag.posted == last.wrapping_add(1);
            *last = tag.posted;
            cost += if next || tag.prefetched { c.streamed(1.0, line) } else { line };
        }
        if self.setup.jitter <= 0.0 && core.cpu.is_none() {
            // The common case, no jitter and a CPU of its own, on the core borrowed above.
            core.now += cost as u64 + self.ticks.event;
            self.report.makespan_ns = self.report.makespan_ns.max(core.now);
        } else {
            let spent = self.jitter(cost) + self.ticks.event;
            self.cores[k].now += spent;
            if self.cores[k].cpu.is_some() {
                // Before its posts leave: a slice of the busy thread may have come in between.
                self.charge_cpu(k);
            }
            self.report.makespan_ns = self.report.makespan_ns.max(self.cores[k].now);
        }
        (t.poster, t.next, t.pending) = (tag.id, 0, true);
    }

    /// Makes the posts of turn `t`'s current event from `t.next` on, then what follows the
    /// event; false if a post cut the turn ([`cut_posts`](Self::cut_posts)): the rest waits in
    /// `t`.
    fn post_rest(&mut self, k: usize, t: &mut Turn) -> bool {
        self.posting = true;
        while let Some(&p) = t.posts.get(t.next) {
            let tag = self.tag(t.poster, t.next as u32, p.data);
            t.next += 1;
            self.post(k, &p, tag);
            if std::mem::take(&mut self.cut) {
                self.posting = false;
                return false;
            }
        }
        self.posting = false;
        t.pending = false;
        self.after_event(k, t.key);
        true
    }

    /// `worker::Core::after_event`: a lone post to another worker is a chain step; the safety
    /// flush's check.
    fn after_event(&mut self, k: usize, key: usize) {
        let core = &mut self.cores[k];
        let queue = &core.queue;
        if core.event_remote_posts == 1
            && follow::is_step(false, || queue.has_events(key), || queue.event_cost(key))
        {
            core.outbox.mark_step(core.event_remote_dest);
        }
        core.event_remote_posts = 0;
        core.events_since_check += 1;
        if core.events_since_check >= outbox::SAFETY_CHECK_EVERY && core.outbox.has_pending() {
            core.events_since_check = 0;
            let now = self.base + Duration::from_nanos(core.now);
            let mut due = Vec::new();
            core.outbox.overdue(now, &mut due);
            for d in due {
                self.flush_to(k, d);
            }
        }
    }

    /// A post made by a handler on core `k` (`worker::Core::post`).
    fn post(&mut self, k: usize, post: &Post, tag: Tag) {
        let color = post.color;
        self.touch_recipient(k, color);
        if !self.setup.config.batching {
            // libasync-smp: a lock per posted event, local posts included.
            self.cores[k].now += self.ticks.lock;
            if self.cores[k].queue.lease(color).is_none() {
                let tag = self.stored(k, tag);
                self.cores[k].now += self.ticks.store;
                let home = home_of(color, self.placement);
                let msg =
                    Msg::Post { color, task: self.tags.task(tag), urgent: false, step: false };
                return self.send(k, home, msg);
            }
        }
        // The core is borrowed once for the local path (each `self.cores[k]` is a bounds check
        // and an address: several per post were about a tenth of a chain's host time).
        let core = &mut self.cores[k];
        // One call site: inlined here, as the worker's post path has it.
        let dest = core.queue.route(color);
        if let Dest::Remote { home } = dest {
            if self.inline_posts && InlineTask::fits_layout(self.work.closure_bytes(post), 8) {
                // `worker::Core::post_closure`: the closure travels in the message, unstored
                // (the engine's task, its tag's number, stands for its bytes).
                core.event_remote_posts += 1;
                core.event_remote_dest = home;
                core.post_totals.1 += 1;
                let task = InlineTask::sim(self.tags.put(tag));
                let msg = Msg::PostInline { color, task, urgent: false, step: false };
                return self.send(k, home, msg);
            }
        }
        // Stored by its poster (placed for the receiver: not modelled).
        let task = self.tags.task(core.store(k, tag));
        let cost = &self.ticks;
        core.now += cost.store;
        match core.queue.post_to(dest, task, false) {
            Route::Queued => {
                self.report.posts_local += 1;
                core.post_totals.0 += 1;
                core.now += cost.local_post;
            }
            Route::Forward { to, task } => {
                core.post_totals.1 += 1;
                self.send(k, to, Msg::Forward { color, home: k as u32, task, urgent: false })
            }
            Route::Remote { home, task } => {
                let core = &mut self.cores[k];
                core.event_remote_posts += 1;
                core.event_remote_dest = home;
                core.post_totals.1 += 1;
                self.send(k, home, Msg::Post { color, task, urgent: false, step: false });
            }
            Route::Held(ask) => {
                self.report.posts_local += 1;
                self.cores[k].post_totals.0 += 1;
                self.cores[k].now += cost.local_post;
                self.ask_sync(k, ask);
                // The home's `Synced` that lets them in waits in the inbox: filed now and then.
                let core = &mut self.cores[k];
                core.held_in_turn += 1;
                if core.held_in_turn.is_multiple_of(crate::worker::HELD_FILE_EVERY) {
                    self.file_mid_turn(k);
                }
            }
            Route::Move { .. } => {}
        }
    }

    /// Core `k` writes `color`'s recipient line ([`Workload::post_touches_recipient`]): it
    /// pays the line's transfer if another core wrote it last.
    #[inline(always)]
    fn touch_recipient(&mut self, k: usize, color: Color) {
        // Most workloads touch no line of their recipients: one test for them; for the others
        // the table's look-up inlined, and a call only for a line that moves (as a call, the
        // look-up cost 26 host instructions, twice per event).
        let Some(lines) = self.recipient_line.as_mut() else { return };
        if let Some((prev, _)) = lines.replace(color, k, 0) {
            if prev != k {
                self.recipient_line_moved(k, prev);
            }
        }
    }

    /// The recipient line written last by core `prev` comes to core `k`.
    #[inline(never)]
    fn recipient_line_moved(&mut self, k: usize, prev: usize) {
        let d = self.distance(prev, k);
        self.cores[k].now += self.ticks.line(d);
    }

    /// Files the inbox in the middle of a running handler (`worker::Core::file_mid_turn`):
    /// queues what arrived by now, runs nothing. The handler's posts are made at the end of
    /// its work (`run_event`), so what it files is what arrived while it worked and posted.
    fn file_mid_turn(&mut self, k: usize) {
        if self.cores[k].queue.is_running() && !self.cores[k].filing {
            if self.posting && self.cut_posts(k) {
                return;
            }
            self.cores[k].filing = true;
            self.take_inbox(k);
            self.cores[k].filing = false;
        }
    }

    /// Whether core `k`, about to file its inbox in the middle of a handler's posts, stops there
    /// for a later step (its turn is saved in `Core::mid_turn`, `Sim::cut` set): when another
    /// core's step is due before its clock. One step runs a handler's posts, however many, and
    /// what other cores did meanwhile reaches it only when it files its inbox: without the
    /// cut, the steps due before its clock had not run yet and it found nothing, where the real
    /// worker finds what they sent. A producer posting 50K messages in one handler to a color
    /// homed on the other worker went on posting to the home until the end, where the real
    /// worker takes the color that `follow` moves to it (a stream) a few batches in, and posts
    /// the rest locally (`bench actors` counting, 2 workers: 7.9M messages/s simulated, 9.9M
    /// measured, one worker's rate).
    fn cut_posts(&mut self, k: usize) -> bool {
        // This step's own entry stays in the agenda while it runs: the look passes over it.
        let now = self.cores[k].now;
        let due = self.net.agenda.first_other(k).is_some_and(|at| at < now);
        if due {
            self.cut = true;
        }
        due
    }

    /// Asks a guest color's home to sync (`worker::Core::ask_sync`).
    fn ask_sync(&mut self, k: usize, ask: Option<crate::queue::SyncAsk>) {
        if let Some(a) = ask {
            let msg = Msg::Sync { color: a.color, from: k as u32, epoch: a.epoch };
            self.send(k, a.home, msg);
            // Posts wait on the answer: the request leaves now, not at the end of the turn.
            if self.setup.config.batching {
                self.flush_to(k, a.home);
            }
        }
    }

    /// Sends a message from `k` to `dest` (`worker::Core::send`).
    fn send(&mut self, k: usize, dest: usize, msg: Msg) {
        self.report.msgs += 1;
        if !self.setup.config.batching {
            return self.deliver(k, dest, vec![msg]);
        }
        if msg.hands_over_a_color() {
            while let Some(d) = self.cores[k].outbox.pending_other_than(dest) {
                self.flush_to(k, d);
            }
        }
        let core = &mut self.cores[k];
        core.turn_sends += 1;
        core.now += self.ticks.remote_post;
        // The clock is read only when the buffer fills (`Instant` arithmetic per message was a
        // few percent of a fan-out's host time).
        let (base, at) = (self.base, core.now);
        let now = move || base + Duration::from_nanos(at);
        if let Some(batch) = core.outbox.push_at(dest, msg, || &self.returns[k], now) {
            // What the receiver shows, read only if the batch size adapts to it.
            let status = &self.net.status[dest];
            let seen = || crate::tune::Receiver {
                idle: status.state != State::Busy,
                ready: status.ready.at(at),
            };
            self.cores[k].outbox.left_full(dest, seen);
            self.deliver(k, dest, batch);
            // A handler that posts a full batch may post many more before it returns: what it
            // received meanwhile (a color moved here, given back) takes its next posts.
            self.file_mid_turn(k);
        } else if core.outbox.offers_early(dest) && self.idle_hint(dest) {
            self.flush_to(k, dest);
        }
    }

    /// The idle flag a core publishes (`shared::Status::idle`).
    fn idle_hint(&self, w: usize) -> bool {
        self.net.status[w].state != State::Busy
    }

    /// Hands `batch` to `dest` (`worker::Core::deliver`).
    fn deliver(&mut self, k: usize, dest: usize, batch: Vec<Msg>) {
        if batch.is_empty() {
            return;
        }
        self.report.batches += 1;
        let d = self.distance(k, dest);
        let latency = self.jitter(self.setup.cost.line(d));
        let core = &mut self.cores[k];
        core.now += self.ticks.deliver;
        let at = (core.now + latency).max(core.last_arrival[dest]);
        core.last_arrival[dest] = at;
        let waiting = core.queue.ready_len() + usize::from(core.queue.is_running());
        let (quiet, ready) = (core.queue.is_quiet(), waiting);
        self.net.inbox[dest].push(Arrival { at, from: k, quiet, ready, msgs: batch });
        if self.net.arrive(dest, at, &self.ticks, &mut self.report) {
            self.cores[k].now += self.ticks.wake_send;
        }
    }

    fn flush_to(&mut self, k: usize, dest: usize) {
        let idle = self.idle_hint(dest);
        let batch = self.cores[k].outbox.take(dest, || idle);
        self.deliver(k, dest, batch);
    }

    fn flush_all(&mut self, k: usize) {
        while let Some(&d) = self.cores[k].outbox.pending_dests().first() {
            self.flush_to(k, d);
        }
    }

    /// `worker::Core::flush_to_idle`: the buffers whose destination is not busy.
    fn flush_to_idle(&mut self, k: usize) {
        let mut idle = std::mem::take(&mut self.scratch);
        idle.clear();
        let status = &self.net.status;
        idle.extend(
            self.cores[k]
                .outbox
                .pending_dests()
                .iter()
                .copied()
                .filter(|&d| status[d].state != State::Busy),
        );
        for &d in &idle {
            self.flush_to(k, d);
        }
        self.scratch = idle;
    }

    /// The end of a turn: the color may leave (`follow`), buffers may leave
    /// (`outbox::is_burst`, idle destinations), sleepers may be woken to steal, a request
    /// answered.
    fn end_turn(&mut self, k: usize, key: usize, turn_ns: u64, long: bool) {
        let follow_on = self.setup.config.follow;
        let status = &self.net.status;
        let mine = status[k].share;
        let shed = |home: Option<usize>, ready: usize, cost: u64, what: Shed| {
            if what.loan {
                // A stolen color goes home, unless it is kept (`follow::keeps_loan`).
                let keeps = |h| follow_on && follow::keeps_loan(mine, || peer(status, h));
                return home.filter(|&h| !keeps(h));
            }
            if !follow_on {
                return None;
            }
            match home {
                Some(h) => {
                    let (moved_on, relieved) = (what.moved_on, what.relieved);
                    follow::goes_home(moved_on, relieved, ready, mine, cost, || peer(status, h))
                        .then_some(h)
                }
                None => follow::relief(mine, || peers(status, k)),
            }
        };
        let keeps = |ready, cost| follow::keeps(follow_on, ready, mine, cost);
        match self.cores[k].queue.end_turn_shedding(key, keeps, shed) {
            Some(TurnEnd::Return(r)) => {
                self.send(k, r.home, Msg::Return { color: r.color, ran: r.ran });
            }
            Some(TurnEnd::Push { to, color }) => {
                self.report.moved += 1;
                let msg = Msg::Move { color, home: k as u32, task: None, urgent: false };
                self.send(k, to, msg);
            }
            None => {}
        }
        if self.setup.config.batching {
            let core = &mut self.cores[k];
            let burst = core.outbox.ends_burst(core.turn_sends);
            core.turn_sends = 0;
            core.held_in_turn = 0;
            core.outbox.end_turn();
            // Most turns of a chain or of a fan-out's receivers leave nothing buffered.
            if core.outbox.has_pending() {
                if burst {
                    self.flush_all(k);
                } else {
                    self.flush_to_idle(k);
                }
            }
        }
        if long && self.setup.config.steal != Steal::Off {
            // As `worker::run_round`: the share (a waiting request is its answer), then the
            // inbox at once, and the line published.
            self.share_behind_long_turn(k, 2);
            self.take_inbox(k);
            self.publish(k);
            self.cores[k].nudge_cooldown = 0;
            self.cores[k].shared_at_turn_end = true;
        }
        if self.setup.config.steal != Steal::Off {
            // As `worker::run_round`: the line after every turn, except under `Steal::Backlog`,
            // whose thieves judge the advertised backlog (the nudge's) and whose line is
            // published at a round's end and after a long turn.
            if self.setup.config.steal != Steal::Backlog {
                self.publish(k);
            }
            self.nudge(k, turn_ns);
        }
        self.answer(k);
    }

    /// `steal::share_behind_long_turn`: the colors waiting behind a long turn go to an idle
    /// core (or the one with the fewest waiting), unasked.
    fn share_behind_long_turn(&mut self, k: usize, min_waiting: usize) {
        let waiting = self.cores[k].queue.ready_len();
        let (config, workers) = (&self.setup.config, self.cores.len());
        if !steal::shares_behind_long_turn(config, workers, waiting, min_waiting) {
            return;
        }
        let random = self.random();
        let now = self.cores[k].now;
        let status = &self.net.status;
        let peers = steal::candidates(&self.tiers[k], random)
            .map(|w| (peer(status, w), status[w].ready.at(now)));
        let mine = status[k].share;
        let Some((thief, idle)) = steal::long_turn_thief(waiting, mine, peers) else { return };
        let slower = self.slower_thief(k, thief);
        let (queue, config) = (&mut self.cores[k].queue, &self.setup.config);
        let loans = steal::lend_behind_long_turn(queue, thief, idle, slower, config);
        if loans.is_empty() {
            return;
        }
        self.report.shared += loans.len() as u64;
        // The thief's own request, arrived here by the time the loan leaves, is answered by it
        // (`steal`).
        let now = self.cores[k].now + self.ticks.steal_answer;
        let asked = self.net.slot[k].is_some_and(|(t, visible)| t == thief && visible <= now);
        if asked {
            self.net.set_slot(k, None);
            self.cores[k].answer_deferred = false;
        }
        self.grant(k, thief, loans, asked);
    }

    /// `steal::grant`: `loans` to `thief` at once (`asked`: the answer to its request).
    fn grant(&mut self, k: usize, thief: usize, loans: Vec<crate::message::Loan>, asked: bool) {
        self.cores[k].now += self.ticks.steal_answer;
        self.send(k, thief, Msg::Grant { from: k as u32, loans, asked });
        if self.setup.config.batching {
            self.flush_to(k, thief);
        }
    }

    /// `steal::nudge_sleepers`: a loaded core wakes a sleeper so that it may steal.
    fn nudge(&mut self, k: usize, turn_ns: u64) {
        let core = &mut self.cores[k];
        if !steal::nudge_due(&mut core.nudge_cooldown, turn_ns) {
            return;
        }
        let config = &self.setup.config;
        let backlog = config.steal == Steal::Backlog && {
            let b = core.queue.has_backlog(steal::BACKLOG_FLOOR);
            self.net.publish_backlog(k, core.now, b);
            b
        };
        let seen = steal::Loaded {
            share: self.net.status[k].share,
            ready: core.queue.ready_len(),
            sleepers: self.net.counts.sleeping > 0,
            asked: self.net.slot[k].is_some(),
            backlog,
        };
        let floor = steal::min_work_ns(config);
        if !steal::worth_nudging(config.steal, &seen, || core.queue.has_lendable(floor, 2)) {
            return;
        }
        let Some(w) = steal::nudge_order(&self.tiers[k])
            .find(|&w| matches!(self.net.status[w].state, State::Sleep { .. }))
        else {
            return;
        };
        let at = self.cores[k].now;
        self.cores[k].now += self.ticks.wake_send;
        self.net.arrive(w, at, &self.ticks, &mut self.report);
    }

    /// `worker::Core::answer_recall`: core `k` answers `home`'s recall of `color`.
    fn answer_recall(&mut self, k: usize, color: Color, home: usize, may_wait: bool) {
        let core = &mut self.cores[k];
        let deferred = &mut core.recall_deferred;
        let Some(answer) =
            steal::answer_to_recall(&mut core.queue, deferred, color, home, may_wait)
        else {
            return;
        };
        self.send(k, home, answer);
        if self.setup.config.batching {
            self.flush_to(k, home);
        }
    }

    /// `steal::slower_thief`: [`steal::slower_part`] of `thief` for core `k`, by the shares both
    /// published.
    fn slower_thief(&self, k: usize, thief: usize) -> Option<u32> {
        steal::slower_part(self.net.status[k].share, self.net.status[thief].share)
    }

    /// `steal::answer_held`: core `k`, about to idle, answers what it kept for a turn's end;
    /// whether it held anything.
    fn answer_held(&mut self, k: usize) -> bool {
        let held = self.cores[k].answer_deferred || self.cores[k].recall_deferred.is_some();
        self.answer_kept_recall(k);
        if self.cores[k].answer_deferred {
            self.answer_request(k);
        }
        held
    }

    /// `steal::answer_kept_recall`: answers, for good, the recall core `k` kept a turn ago.
    fn answer_kept_recall(&mut self, k: usize) {
        if let Some((color, home)) = self.cores[k].recall_deferred.take() {
            self.answer_recall(k, color, home, false);
        }
    }

    /// `steal::answer` (between turns): answers a recall kept a turn ago, takes the inbox if a
    /// recall's flag is up, and lends to the thief in this core's slot, if its request has
    /// arrived.
    #[inline(always)]
    fn answer(&mut self, k: usize) {
        self.answer_kept_recall(k);
        // Inlined, the common case of an empty slot is one test (a call at every turn's end).
        let now = self.cores[k].now;
        if self.net.recall[k].is_some_and(|visible| visible <= now) {
            self.net.recall[k] = None;
            self.take_inbox(k);
        }
        self.answer_request(k);
    }

    /// `steal::answer_request`: lends to the thief in this core's slot, if its request has
    /// arrived (also as the request's message is routed: no inbox taken there).
    #[inline(always)]
    fn answer_request(&mut self, k: usize) {
        if self.net.slot[k].is_some_and(|(_, visible)| visible <= self.cores[k].now) {
            self.lend(k);
        }
    }

    /// [`answer`](Self::answer) to a request that has arrived.
    fn lend(&mut self, k: usize) {
        let Some((thief, _)) = self.net.slot[k] else { return };
        self.net.set_slot(k, None);
        let slower = self.slower_thief(k, thief);
        let loans = steal::lend(&mut self.cores[k].queue, thief, slower, &self.setup.config);
        let core = &mut self.cores[k];
        if loans.is_empty() && steal::defers(&core.queue, &self.setup.config, core.answer_deferred)
        {
            core.answer_deferred = true;
            // Kept for the next turn's end (the slot was this thief's: no other took it).
            let now = core.now;
            self.net.set_slot(k, Some((thief, now)));
            return;
        }
        core.answer_deferred = false;
        self.report.stolen += loans.len() as u64;
        // As `steal::answer`: the line is published at the next turn's or round's end.
        self.grant(k, thief, loans, true);
    }

    /// `steal::request`: an idle core asks a loaded one for a color.
    fn request(&mut self, k: usize) {
        let n = self.cores.len();
        if self.setup.config.steal == Steal::Off || self.cores[k].steal_pending || n < 2 {
            return;
        }
        let core = &mut self.cores[k];
        if core.steal_backoff.skips(core.events) {
            return;
        }
        let random = self.random();
        let now = self.cores[k].now;
        // The draw above is made either way: the run is the same with or without the memo.
        let memo = self.net.no_victim[k];
        if memo.changes == self.net.changes && (memo.from..memo.until).contains(&now) {
            return self.recall(k);
        }
        let config = &self.setup.config;
        let mine = self.net.status[k].share;
        let worth = |v: usize| {
            let st = &self.net.status[v];
            let seen =
                Candidate { ready: st.ready.at(now), backlog: st.backlog.at(now), share: st.share };
            steal::worth_asking(config.steal, mine, &seen) && self.net.slot[v].is_none()
        };
        // Most requests of an idle machine find no victim: a plain pass over the cores says so
        // without `candidates`' division per victim (a twentieth of a fan-out's host time).
        // The tiers hold other cores only, so none worth asking here means none there either,
        // and the draw above is made either way: the run is the same. Finding none, the pass
        // also finds until when that holds (`NoVictim`).
        let mut until = Some(u64::MAX);
        for (v, st) in self.net.status.iter().enumerate() {
            if v == k {
                continue;
            }
            if worth(v) {
                until = None;
                break;
            }
            let next = st.ready.next_change_after(now).min(st.backlog.next_change_after(now));
            until = until.map(|u| u.min(next));
        }
        if let Some(until) = until {
            self.net.no_victim[k] = NoVictim { changes: self.net.changes, from: now, until };
            return self.recall(k);
        }
        let victim = steal::candidates(&self.tiers[k], random).find(|&v| worth(v));
        let Some(v) = victim else { return self.recall(k) };
        let visible = self.cores[k].now + self.ticks.line(self.distance(k, v));
        self.net.set_slot(v, Some((k, visible)));
        self.cores[k].steal_pending = true;
        self.report.steal_requests += 1;
        self.send(k, v, Msg::StealRequest);
        if self.setup.config.batching {
            self.flush_to(k, v);
        }
    }

    /// `worker::Core::answer_syncs`: the `Sync`s of `color` that waited for its recall to end.
    fn answer_syncs(&mut self, k: usize, color: Color) {
        for (from, epoch) in self.cores[k].queue.syncs_due(color) {
            self.send(k, from, Msg::Synced { color, epoch });
        }
    }

    /// Core `k`'s steal request or recall was answered, with work (`granted`) or not
    /// (`worker::Core::settle_steal`).
    fn settle_steal(&mut self, k: usize, granted: bool) {
        let core = &mut self.cores[k];
        core.steal_pending = false;
        core.steal_backoff.settle(granted, core.events);
    }

    /// `steal::recall`: core `k`, idle with no victim worth asking, takes back a color it lent
    /// from a borrower where colors wait.
    fn recall(&mut self, k: usize) {
        if self.setup.config.steal != Steal::Backlog {
            return;
        }
        let now = self.cores[k].now;
        let status = &self.net.status;
        let mine = status[k].share;
        let loaded = |b: usize, away: crate::queue::Away| {
            let st = &status[b];
            let seen =
                Candidate { ready: st.ready.at(now), backlog: st.backlog.at(now), share: st.share };
            steal::worth_recalling(mine, &seen, away)
        };
        let Some((color, borrower)) = self.cores[k].queue.recall(loaded) else { return };
        self.cores[k].steal_pending = true;
        self.send(k, borrower, Msg::Recall { color, from: k as u32 });
        if self.setup.config.batching {
            self.flush_to(k, borrower);
        }
        let visible = self.cores[k].now + self.ticks.line(self.distance(k, borrower));
        self.net.recall[borrower] = Some(visible);
    }

    /// The idle path (`idle::idle_spell`): steal, then spin (`idle::spin_budget`) or sleep.
    fn idle(&mut self, k: usize) {
        let now = self.cores[k].now;
        self.cores[k].idle_since.get_or_insert(now);
        self.request(k);
        if self.has_arrived(k) {
            let at = self.cores[k].now;
            return self.net.schedule(k, at);
        }
        let now = self.cores[k].now;
        // No spinning on a CPU found or measured shared (`idle::may_spin`).
        let paused = self.cores[k].cpu.as_ref().is_some_and(|c| now < c.no_spin_until);
        // The simulated workers watch no descriptors.
        let budget = match self.setup.config.spin {
            _ if !crate::idle::may_spin(paused, false, self.net.status[k].share) => Duration::ZERO,
            spin => {
                let core = &self.cores[k];
                crate::idle::spin_budget(spin, self.threshold, core.last_sleep, &core.spin_tuner)
            }
        };
        if budget > Duration::ZERO && self.net.counts.spinners < self.max_spinners {
            let mut until = now + budget.as_nanos().min(u128::from(u64::MAX / 4)) as u64;
            // On a shared CPU the spin's first yield finds the busy thread there.
            let yields = self.cores[k].cpu.is_some() && until >= now + SPIN_YIELD_NS;
            if yields {
                until = now + SPIN_YIELD_NS;
            }
            self.report.spins += 1;
            self.net.set_state(k, State::Spin { until, yields });
            // A message already on its way is noticed when it lands.
            let next = self.next_arrival(k).map_or(until, |a| a.min(until));
            if next < until {
                self.report.spin_wins += 1;
                self.net.set_state(k, State::Busy);
                return self.net.schedule(k, next + self.ticks.spin_notice);
            }
            return self.net.schedule(k, until.min(now + SPIN_STEAL_EVERY_NS));
        }
        self.sleep(k);
    }

    fn has_arrived(&self, k: usize) -> bool {
        let now = self.cores[k].now;
        self.net.inbox[k].iter().any(|a| a.at <= now) || self.slot_visible(k)
    }

    fn slot_visible(&self, k: usize) -> bool {
        self.net.slot[k].is_some_and(|(_, at)| at <= self.cores[k].now)
    }

    fn next_arrival(&self, k: usize) -> Option<u64> {
        let inbox = self.net.inbox[k].iter().map(|a| a.at).min();
        let slot = self.net.slot[k].map(|(_, at)| at);
        inbox.into_iter().chain(slot).min()
    }

    /// Sleeps until a message arrives (`idle::sleep`); a message already on its way wakes it as
    /// it lands (the sender would have seen the sleep announced).
    fn sleep(&mut self, k: usize) {
        self.cores[k].now += self.ticks.sleep;
        if self.cores[k].cpu.is_some() {
            self.charge_cpu(k);
        }
        let now = self.cores[k].now;
        if self.has_arrived(k) {
            return self.net.schedule(k, now);
        }
        self.report.sleeps += 1;
        self.net.set_state(k, State::Sleep { since: now });
        self.net.agenda.remove(k); // no step until woken
        if let Some(at) = self.next_arrival(k) {
            self.net.arrive(k, at, &self.ticks, &mut self.report);
        }
    }
}

impl Sim<'_> {
    /// Charges core `k`'s runnable time since the last charge to its time slice, on a CPU
    /// shared with a busy thread: each slice used up gives the busy thread its own, and the
    /// core's clock moves on by as much (what the worker did after that point happens later).
    fn charge_cpu(&mut self, k: usize) {
        let core = &mut self.cores[k];
        let Some(cpu) = core.cpu.as_mut() else { return };
        let ran = core.now.saturating_sub(cpu.mark);
        cpu.credit += ran;
        cpu.window_run += ran;
        while cpu.credit >= cpu.run_slice {
            cpu.credit -= cpu.run_slice;
            core.now += cpu.their_slice;
            cpu.window_wait += cpu.their_slice;
        }
        cpu.mark = core.now;
    }

    /// Core `k`'s spin yielded its CPU at `at` and found the busy thread there: it waits for
    /// that thread's slice, then spins no more for a while (`idle`'s pause).
    fn yield_cpu(&mut self, k: usize, at: u64) {
        let core = &mut self.cores[k];
        let Some(cpu) = core.cpu.as_mut() else { return };
        cpu.window_run += at.saturating_sub(cpu.mark);
        cpu.window_wait += cpu.their_slice;
        cpu.window_idle_wait += cpu.their_slice;
        cpu.credit = 0;
        let back = at + cpu.their_slice;
        cpu.mark = back;
        cpu.no_spin_until = back + crate::idle::SHARED_CPU_PAUSE.as_nanos() as u64;
        core.now = core.now.max(back);
    }

    /// Core `k` woke from a sleep of `slept` ns: the busy thread had the CPU meanwhile, which
    /// pays back the worker's slice; a worker whose share is below whole wakes every
    /// `cpu_share::RECHECK` while asleep to measure, and each such window is quiet.
    fn woke(&mut self, k: usize, slept: u64) {
        let core = &mut self.cores[k];
        let Some(cpu) = core.cpu.as_mut() else { return };
        let repaid = (slept as u128 * cpu.run_slice as u128 / cpu.their_slice.max(1) as u128)
            .min(u128::from(u64::MAX)) as u64;
        cpu.credit = cpu.credit.saturating_sub(repaid);
        cpu.mark = core.now;
        let recheck = crate::cpu_share::RECHECK.as_nanos() as u64;
        if cpu.measure.share() < FULL && slept >= recheck {
            for _ in 0..(slept / recheck).min(32) {
                let _ = cpu.measure.take_window((0, 0), (0, 0));
            }
            cpu.new_window(core.now);
            let share = cpu.measure.share();
            self.net.publish_share(k, share);
        }
    }

    /// At the end of core `k`'s round: a measuring window that is over goes into its CPU share
    /// measure (`CpuShare::window`), which it publishes.
    fn sample_share(&mut self, k: usize) {
        let core = &mut self.cores[k];
        let Some(cpu) = core.cpu.as_mut() else { return };
        let every = crate::cpu_share::SAMPLE_EVERY.as_nanos() as u64;
        if core.now < cpu.window_start + every {
            return;
        }
        let whole = (cpu.window_run, cpu.window_wait);
        let _ = cpu.measure.take_window(whole, (0, cpu.window_idle_wait));
        cpu.new_window(core.now);
        let share = cpu.measure.share();
        self.net.publish_share(k, share);
    }
}

impl SharedCpu {
    /// A measuring window starts at `at`.
    fn new_window(&mut self, at: u64) {
        (self.window_start, self.window_run, self.window_wait) = (at, 0, 0);
        self.window_idle_wait = 0;
    }
}

/// Core `w`'s CPU, if `setup` has a busy thread share it.
fn shared_cpu(setup: &Setup, w: usize) -> Option<SharedCpu> {
    // NaN and negative shares count as none.
    let busy = setup.busy.get(w).copied().filter(|&b| b > 0.0)?.min(0.95);
    let run_slice = setup.cost.slice_ns.max(1.0);
    let their_slice = run_slice * busy / (1.0 - busy);
    let start =
        if setup.remembered_shares { ((1.0 - busy) * f64::from(FULL)) as u32 } else { FULL };
    Some(SharedCpu {
        run_slice: run_slice as u64,
        their_slice: their_slice.max(1.0) as u64,
        credit: 0,
        mark: 0,
        window_start: 0,
        window_run: 0,
        window_wait: 0,
        window_idle_wait: 0,
        measure: CpuShare::fed(start),
        no_spin_until: 0,
    })
}

/// What a core knows of core `w` for `follow`'s decisions (`worker::peer`).
fn peer(status: &[Status], w: usize) -> follow::Peer {
    follow::Peer { id: w, idle: status[w].state != State::Busy, share: status[w].share }
}

/// The other cores, for `follow::relief` (`worker::relief`).
fn peers(status: &[Status], me: usize) -> impl Iterator<Item = follow::Peer> + '_ {
    (0..status.len()).filter(move |&w| w != me).map(move |w| peer(status, w))
}

/// How long a spinner runs before its first yield of the CPU (`idle::spin` yields every 256
/// polls, about 10 us).
const SPIN_YIELD_NS: u64 = 10_000;

/// Per color, the core it last ran on: a table indexed by the color for the small numbers that
/// workloads use (a turn's look-up was a tenth of the host time of message-heavy runs in a hash
/// map), a hash map for the others.
///
/// Invariant: a color is in `dense` (its entry not `NONE`) or in `sparse`, never both.
/// With each core, the turn count of that core when the color's turn began there ([`Core`]'s
/// `turns`): how many turns ran there since.
#[derive(Default)]
struct LastCore {
    dense: Vec<(u32, u32)>,
    sparse: FxHashMap<Color, (usize, u32)>,
}

impl LastCore {
    /// Colors below this are kept in the table (8 bytes each).
    const DENSE: u64 = 1 << 20;
    const NONE: u32 = u32::MAX;

    /// Records that `color` runs on core `k` at its turn `stamp`; returns the core it ran on
    /// before and that core's turn count then, if any.
    #[inline]
    fn replace(&mut self, color: Color, k: usize, stamp: u32) -> Option<(usize, u32)> {
        // Inlined, a color already in the table is one look-up (twice per event where posts
        // touch their recipients).
        if color.0 < Self::DENSE && k < Self::NONE as usize {
            if let Some(entry) = self.dense.get_mut(color.0 as usize) {
                let (prev, at) = std::mem::replace(entry, (k as u32, stamp));
                return (prev != Self::NONE).then_some((prev as usize, at));
            }
        }
        self.replace_slow(color, k, stamp)
    }

    #[inline(never)]
    fn replace_slow(&mut self, color: Color, k: usize, stamp: u32) -> Option<(usize, u32)> {
        match u32::try_from(k) {
            Ok(k32) if color.0 < Self::DENSE && k32 != Self::NONE => {
                let i = color.0 as usize;
                if i >= self.dense.len() {
                    self.dense.resize((i + 1).next_power_of_two(), (Self::NONE, 0));
                }
                let (prev, at) = std::mem::replace(&mut self.dense[i], (k32, stamp));
                (prev != Self::NONE).then_some((prev as usize, at))
            }
            _ => self.sparse.insert(color, (k, stamp)),
        }
    }
}

/// The cores' next steps: a tournament tree over the cores, each core's next step keyed by
/// (virtual time, scheduling sequence number, core) packed in a `u128`, so that steps run in
/// order of their start and ties in order of scheduling (the core, below the sequence number,
/// never decides: sequence numbers are unique; it is there so that a node is its key alone, half
/// the size of a key and a core side by side, and a level of an update one `min`). A core has at
/// most one entry: rescheduling it replaces the entry (a binary heap of stale entries grew with
/// every message and cost a tenth of the host time of message-heavy runs), and an update walks
/// one fixed leaf-to-root path, one comparison of two adjacent nodes per level, without the
/// data-dependent swaps of a heap.
///
/// Invariants: leaf `width + c` holds core `c`'s next step, key `NONE` if it has none (keys are
/// unique, their sequence numbers are; cores from `cores` to `width` never have one); node `i`
/// (`1 <= i < width`) holds the least key under it; sequence numbers stay below `2^(64 -
/// CORE_BITS)` and cores below `2^CORE_BITS`.
struct Agenda {
    node: Vec<u128>,
    width: usize,
}

const NONE: u128 = u128::MAX;

/// Bits of a key that hold its core.
const CORE_BITS: u32 = 16;

fn pack((at, seq): (u64, u64), core: usize) -> u128 {
    debug_assert!(seq < 1 << (64 - CORE_BITS) && core < 1 << CORE_BITS);
    (u128::from(at) << 64) | u128::from(seq << CORE_BITS | core as u64)
}

impl Agenda {
    fn new(cores: usize) -> Agenda {
        assert!(cores <= 1 << CORE_BITS, "{cores} cores: the agenda's keys hold fewer");
        let width = cores.max(2).next_power_of_two();
        Agenda { node: vec![NONE; 2 * width], width }
    }

    /// Sets core `c`'s next step to `key`, whether or not it had one.
    fn set(&mut self, c: usize, key: (u64, u64)) {
        self.node[self.width + c] = pack(key, c);
        self.update(c);
    }

    /// Removes core `c`'s next step, if it has one.
    fn remove(&mut self, c: usize) {
        if self.node[self.width + c] != NONE {
            self.node[self.width + c] = NONE;
            self.update(c);
        }
    }

    /// The earliest step: its core and key.
    fn first(&self) -> Option<(usize, (u64, u64))> {
        let k = self.node[1];
        let (at, low) = ((k >> 64) as u64, k as u64);
        let core = (low & ((1 << CORE_BITS) - 1)) as usize;
        (k != NONE).then_some((core, (at, low >> CORE_BITS)))
    }

    /// The start of the earliest step of a core other than `c`: the least of the nodes beside
    /// the path from `c`'s leaf to the root, which cover every other leaf (`c`'s entry stays).
    fn first_other(&self, c: usize) -> Option<u64> {
        let mut i = self.width + c;
        let mut least = NONE;
        while i > 1 {
            least = least.min(self.node[i ^ 1]);
            i /= 2;
        }
        (least != NONE).then_some((least >> 64) as u64)
    }

    /// Removes core `c`'s entry if it is still the one with `key`.
    fn spent(&mut self, c: usize, key: (u64, u64)) {
        if self.node[self.width + c] == pack(key, c) {
            self.remove(c);
        }
    }

    /// Recomputes the path from core `c`'s leaf to the root (to the root always: stopping at
    /// the first node that keeps its key tested each level and stopped early seldom, as the
    /// stepping core's own key, at the root, is the one most updates replace: more host time).
    fn update(&mut self, c: usize) {
        // The least key so far is carried up: a level compares the sibling alone (reading both
        // children at each level was 132 host instructions a schedule at 16 cores). Which of
        // the two is less is as good as random: the lesser is read back by its index, not
        // chosen by a branch (the compiler branches on a `min`, or a select, of two `u128`).
        let mut i = self.width + c;
        let mut least = self.node[i];
        while i > 1 {
            least = self.node[i ^ usize::from(self.node[i ^ 1] < least)];
            i /= 2;
            self.node[i] = least;
        }
    }
}

/// Longest stretch of a round run in one step, ns: a round of heavy turns is cut into steps of
/// about this much (whole turns), so that cores do not drift apart by a whole round of virtual
/// time between two interactions. With rounds in one step, a core that ran 128 events of 20 us
/// in one round published its ready count only as seen at the round's end, and thieves never
/// saw it loaded: `Imbalanced::spread` with short colors had no steal at all. As long as a
/// spinner's interval between two requests ([`SPIN_STEAL_EVERY_NS`]), a thief's own granularity
/// (against 10 us: simulated events per CPU second equal within noise, 2 x 3 reps alternating).
const ROUND_STEP_NS: u64 = 40_000;

/// How often a spinning core asks for a color (`idle::spin` asks every 1024 polls, tens of
/// microseconds).
const SPIN_STEAL_EVERY_NS: u64 = 40_000;

/// Runs `work` on `setup`'s machine.
pub fn simulate(setup: Setup, work: &mut dyn Workload) -> Report {
    Sim::new(setup, work).run()
}

/// The checker, for its own tests.
#[cfg(test)]
pub(super) mod tests_support {
    use super::{Checks, Tag};
    use crate::Color;

    pub(crate) fn checks() -> Checks {
        Checks::default()
    }

    /// Event `id`, post `seq` of `poster`, runs.
    pub(crate) fn run(c: &mut Checks, id: u64, poster: u64, seq: u32) {
        let tag =
            Tag { id, poster, seq, from: super::NO_CORE, posted: 0, prefetched: false, data: 0 };
        c.event(tag, Color(1));
    }

    /// A turn of color 1 on `core` over `[start, end]`.
    pub(crate) fn turn(c: &mut Checks, core: usize, start: u64, end: u64) {
        c.turn(Color(1), core, start, end);
    }

    pub(crate) fn violations(c: Checks) -> Vec<String> {
        c.violations
    }
}

#[cfg(test)]
mod agenda_tests {
    use super::{Agenda, Hint, LastCore};

    /// A hint is seen from its publication on, never before, whatever the order in which the
    /// steps that publish and read it run; values older than the horizon go once a later one
    /// covers it.
    #[test]
    fn a_hint_is_seen_from_the_time_it_was_published() {
        let mut h = Hint::new(0usize);
        // A step from 0 to 700 publishes 26 at 480 and 25 at 670.
        h.set(480, 26, 0);
        h.set(670, 25, 0);
        // A core whose step starts at 40 reads at 40 and at 500.
        assert_eq!(h.at(40), 0, "not published yet");
        assert_eq!(h.at(480), 26);
        assert_eq!(h.at(500), 26);
        assert_eq!(h.at(10_000), 25);
        // Once no read can come before 600, the value of 0 is gone, 26 stays for reads at 600.
        h.set(900, 3, 600);
        assert_eq!(h.at(600), 26);
        assert_eq!(h.at(670), 25);
        assert_eq!(h.at(900), 3);
        // The same value again changes nothing; a second value at one time replaces the first.
        h.set(950, 3, 600);
        h.set(1_000, 4, 600);
        h.set(1_000, 5, 600);
        assert_eq!(h.at(999), 3);
        assert_eq!(h.at(1_000), 5);
    }
    /// A xorshift64 generator from `seed` (not 0): the random schedules of these tests.
    fn xorshift(mut rng: u64) -> impl FnMut() -> u64 {
        move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        }
    }

    /// The hint reads as a plain log of every publication would (the value last published at
    /// or before the time read, the oldest kept if none is), through random publications and
    /// reads at or after a rising horizon; until the next change it names after a read, every
    /// read finds what that read found.
    #[test]
    fn a_hint_reads_as_its_whole_log() {
        let mut h = Hint::new(0u8);
        let mut log: Vec<(u64, u8)> = vec![(0, 0)];
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        let (mut horizon, mut clock) = (0u64, 0u64);
        for _ in 0..20_000 {
            match next() % 4 {
                0 => horizon = (horizon + next() % 50).min(clock),
                1 | 2 => {
                    clock += next() % 40;
                    let v = (next() % 3) as u8;
                    h.set(clock, v, horizon);
                    match log.last_mut() {
                        Some(last) if last.1 == v => {}
                        Some(last) if last.0 >= clock => last.1 = v,
                        _ => log.push((clock, v)),
                    }
                }
                _ => {
                    let t = horizon + next() % (clock - horizon + 60);
                    let seen = |t: u64| {
                        log.iter().rev().find(|&&(at, _)| at <= t).map_or(log[0].1, |e| e.1)
                    };
                    assert_eq!(h.at(t), seen(t), "read at {t}, horizon {horizon}");
                    let until = h.next_change_after(t);
                    assert!(until > t);
                    for later in t..until.min(clock + 60) {
                        assert_eq!(seen(later), seen(t), "read at {later}, before {until}");
                    }
                }
            }
        }
    }

    use crate::Color;

    /// The agenda runs steps in the order of a plain sorted list of the live entries, through
    /// random schedules, reschedules (earlier and later) and removals; the first step of the
    /// other cores is that list's without one core.
    #[test]
    fn the_agenda_pops_in_key_order_through_reschedules_and_removals() {
        let cores = 13;
        let mut agenda = Agenda::new(cores);
        let mut live: Vec<Option<(u64, u64)>> = vec![None; cores];
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        for seq in 0..20_000u64 {
            let c = (next() % cores as u64) as usize;
            match next() % 4 {
                0 => {
                    agenda.remove(c);
                    live[c] = None;
                }
                1 => {
                    let want = live
                        .iter()
                        .enumerate()
                        .filter_map(|(c, k)| k.map(|k| (k, c)))
                        .min()
                        .map(|(k, c)| (c, k));
                    assert_eq!(agenda.first(), want);
                    let others = live.iter().enumerate().filter(|&(o, _)| o != c);
                    let least = others.filter_map(|(_, k)| *k).min().map(|(at, _)| at);
                    assert_eq!(agenda.first_other(c), least, "the first step of a core but {c}");
                    if let Some((c, k)) = want {
                        agenda.spent(c, k);
                        live[c] = None;
                    }
                }
                _ => {
                    let key = (next() % 64, seq);
                    agenda.set(c, key);
                    live[c] = Some(key);
                }
            }
        }
    }

    #[test]
    fn last_core_remembers_small_and_large_colors() {
        let mut last = LastCore::default();
        assert_eq!(last.replace(Color(5), 3, 10), None);
        assert_eq!(last.replace(Color(5), 7, 11), Some((3, 10)));
        assert_eq!(last.replace(Color(u64::MAX), 1, 12), None);
        assert_eq!(last.replace(Color(u64::MAX), 2, 13), Some((1, 12)));
        assert_eq!(last.replace(Color(6), 0, 14), None);
    }
}
