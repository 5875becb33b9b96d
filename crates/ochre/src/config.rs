//! Every tunable of the runtime, with where its default comes from.
//!
//! The default [`Config`] is the optimized runtime. [`Config::baseline`] is the original
//! libasync-smp as the thesis measured it (§5.1.2-5.1.3): one lock per posted event, wake-ups by a
//! pipe write and `poll`, no spinning, plain stealing. Each optimization is one field, so the
//! ablation study (thesis Table 5.6) switches them one at a time. Padding is the exception: it
//! changes memory layout and is the `unpadded` cargo feature.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How a worker with nothing to do sleeps, and how others wake it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Wakeup {
    /// A futex word per worker (what `std::thread::park` uses). The default: the cheapest
    /// blocking wake-up Linux offers.
    Futex,
    /// A pthread condition variable and its mutex (thesis Table 5.3: 20K cycles, 229K events/s on
    /// producer-consumer at 8 cores).
    Condvar,
    /// A pipe per worker: sleep in `poll`, wake by writing a byte. libasync-smp's mechanism
    /// (thesis Table 5.3: 22K cycles, 198K events/s).
    Pipe,
}

/// What an idle worker does before it sleeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Spin {
    /// Sleep as soon as there is nothing to do (libasync-smp).
    Never,
    /// Reasoned spinning (thesis §5.3.1): sleep at once, unless the previous sleep was shorter
    /// than `threshold`; then spin up to `threshold` watching for work before sleeping. A short
    /// sleep means the wake-up latency was a large share of it, so spinning pays.
    /// `threshold: None`: 10x the wake-up latency of the configured [`Wakeup`] (the thesis
    /// used 10x the condition-variable latency, 200K cycles), measured once per process in the
    /// background from its first build while the process is idle, and 10x 20 µs until then.
    Reasoned {
        /// The spin budget and the "short sleep" bound; `None` = 10x measured wake-up latency.
        threshold: Option<Duration>,
    },
    /// Spin up to `limit` every time before sleeping. Pure spinning when `limit` is large; it
    /// is the throughput ceiling of Table 5.3 (1850K events/s) and burns a core when idle.
    Always {
        /// How long to spin before sleeping anyway.
        limit: Duration,
    },
    /// Reasoned spinning whose threshold each worker tunes online from the idle gaps it
    /// measures (`tune` module: the rules, their reasons and the measurements behind their
    /// constants): it spins long enough to catch the gaps for which a wake-up would be a
    /// noticeable share (up to 20x the wake-up latency, measured as for `Reasoned`), and no longer, and
    /// it spins after a long sleep too when most recent gaps were short.
    Adaptive,
}

/// How the size of outgoing batches ([`Config::batch_size`]) is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BatchSize {
    /// Always [`Config::batch_size`] messages.
    Fixed,
    /// Tuned online per destination (`tune` module), starting at [`Config::batch_size`]:
    /// larger while the destination has a batch's worth of colors waiting when its batches
    /// leave full, or while one turn fills batch after batch quickly (a larger batch then
    /// delays nothing and saves synchronizations), smaller while the destination is idle and
    /// the batches take long to fill (it waited for them), between 8 and 128 messages.
    Adaptive,
}

/// How idle workers take work from loaded ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Steal {
    /// No stealing: a color runs on its home worker, always (what the thesis measured).
    Off,
    /// An idle worker takes colors only from a worker that gets clearly less of its CPU than it
    /// does (another process shares that CPU: `cpu_share`), so that queued work leaves a slow
    /// CPU; on a machine to itself, nothing is ever stolen. Not the default: with colors that
    /// follow their messages, which already move idle colors off a shared CPU
    /// ([`Config::follow`]), it lowered `bench actors` with a busy CPU from 1.58x tokio to 1.25x
    /// (geometric means; a fork-join's receivers lent away and back). Plain stealing cost the
    /// quiet actor programs 9% (1.30x tokio instead of 1.42x: a counter or a mall stolen away
    /// from the worker its partners post from) and the busy ones 21%.
    FromSharedCpus,
    /// An idle worker takes colors from a worker with at least two colors waiting, and only
    /// colors whose queued events amount to work worth a move: their count times the color's
    /// measured cost per event reaches 20 µs (`steal::BACKLOG_FLOOR`; a steal round trip is a
    /// few microseconds), or, when none does, light colors together: with 128 colors or more
    /// waiting whose number times an event's estimated cost reaches twice that floor (a parallel
    /// loop's chunks, a color each: none alone is worth a move), up to 256 of them in a loan
    /// (`fanout_probe 10000 10000 9 local work`, ten thousand 1 us colors homed on the driver's
    /// worker: 0.64 -> 0.87M events/s). The victim keeps at least one waiting color and lends
    /// at most half of them. What it balances: a fan-out's receivers queued behind the event that
    /// posted them (a driver posting thousands of messages runs its own share only after), and
    /// work queued on a worker whose CPU another process shares. What it leaves alone: partners
    /// that pass a message or two at a time (a ring, a mall, a ping-pong: light backlogs, moved
    /// by `follow` instead) and a lone stream's receiver (one waiting color). A thief asks only a
    /// worker that advertises a backlog or has 512 colors waiting or more (`steal::DEEP_LINE`:
    /// the advertisement looks at the back of the line, where borrowed colors gather; a worker
    /// on a CPU shared with a busy process held a user's loop's chunks behind them while the
    /// other worker idled), and moves one to a CPU clearly slower than its
    /// victim's only from a victim with 16 colors waiting or more (`steal::DEEP_READY`: there
    /// the backlog would wait longer for its turn; with a busy CPU this took fork-join with 1 µs
    /// items from 0.65-0.81x tokio to 0.86-0.87x), and is lent there colors of one event (a job's
    /// chunks), its part of the line by the two CPUs' shares, before colors fed by posts, of
    /// which one stays (a collector lent to a worker with a quarter of its CPU ran a user's
    /// whole stream of results there: `steal::slower_part`, `ColorQueue::lend_backlog`); a
    /// stolen color whose home's CPU is clearly worse stays with the thief as a resident
    /// (`follow::keeps_loan`). **The default**: against
    /// stealing off in `bench actors` (2 workers, paired ratios to tokio, medians of 5, three
    /// processes on a quiet machine) it took fork-join with 1 µs items from 0.79-0.80x tokio to
    /// 0.96-0.98x (with a busy CPU 0.70-0.72x to 0.71-0.76x), at an equal geometric mean over
    /// the 18 cases (1.58-1.61x against 1.57-1.64x); it cost bank 4-8% and, with a busy CPU,
    /// fork-join with empty items 10-20%. On `bench pingpong` and `bench prodcons` it is within 3% of stealing off.
    Backlog,
    /// Stealing: an idle worker takes colors, with all their pending events, from a loaded
    /// worker. Alone, libasync-smp's plain stealing (one color from a random loaded worker); the
    /// heuristics are the `steal_*` switches of [`Config`], combinable, and pinned colors
    /// ([`pin`](crate::pin)) are never taken.
    Plain,
}

/// The runtime's tunables. Start from [`Config::default`] (optimized) or [`Config::baseline`]
/// (libasync-smp) and change what you need with the setters of the same names:
///
/// ```
/// use ochre::{Config, Steal};
/// let config = Config::baseline().batching(true).batch_size(20).steal(Steal::Off);
/// assert!(config.batching && config.batch_size == 20);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Config {
    /// Batch cross-worker posts: each worker keeps one outgoing buffer per destination and hands a
    /// whole buffer over in one synchronization (thesis §5.3.2: producer-consumer throughput x2,
    /// lock time 17% -> 6.6%). `false` takes the destination's queue lock once per posted event,
    /// local posts included, as libasync-smp did.
    pub batching: bool,
    /// Events per outgoing buffer before it is flushed. Thesis §5.3.2 tuned it per application:
    /// 50 for producer-consumer, 20 for the web server and MapReduce; 32 sits between. Buffers
    /// are also flushed at the end of every round of events and before a worker idles, so a small
    /// burst never waits for the buffer to fill. A batch leaves full at two messages at least
    /// (1 acts as 2: a batch of one would leave before its handler returns, unknown as a
    /// chain's step, `follow`).
    pub batch_size: usize,
    /// Whether `batch_size` is fixed or only the start of a size tuned online per destination
    /// (issue 23; the rules and the reasons for their constants are in the `tune` module).
    /// Default [`BatchSize::Adaptive`] (`ochre bench tuning` compares it with fixed sizes; the
    /// `tune` module doc has the figures); [`Config::baseline`] keeps it fixed.
    #[serde(default = "batch_sizing_default")]
    pub batch_sizing: BatchSize,
    /// Safety flush (thesis §5.3.2): a buffer older than this factor times the mean interval
    /// between natural (full-buffer) flushes is flushed even in the middle of a long round. The
    /// thesis used 110%.
    pub safety_flush_factor: f64,
    /// How idle workers sleep and are woken.
    pub wakeup: Wakeup,
    /// What idle workers do before sleeping. Default [`Spin::Adaptive`]: reasoned spinning
    /// whose threshold each worker tunes from the idle gaps it measures (issue 23, `tune`
    /// module), starting from 10x the measured wake-up latency (`Spin::Reasoned` with no
    /// threshold, the default before; `ochre bench tuning` compares them).
    pub spin: Spin,
    /// At most this many workers spin at once. `None`: all of them when there are no more
    /// workers than CPUs (each spins on a CPU of its own), else half the CPUs (at least 1), so
    /// that spinners never take the CPU of a worker with work on an oversubscribed machine.
    pub max_spinners: Option<usize>,
    /// Work stealing. Default: [`Steal::Backlog`] (fork-join receivers queued behind their
    /// driver are shared out; light chains are left to `follow`).
    pub steal: Steal,
    /// Batch stealing (slides: lock time 15.4% -> 5.1%, +18%): a victim lends up to half of its
    /// lendable waiting colors per request, at most `steal_batch_max`, instead of one.
    pub steal_batch: bool,
    /// Most colors lent per request with `steal_batch` (a guess: enough to amortize a request,
    /// few enough not to empty a victim that is about to run them), and with
    /// [`Steal::Backlog`] of the colors each holding a backlog (a light backlog's loan takes up
    /// to 256 light colors, whatever this is).
    pub steal_batch_max: usize,
    /// Locality-aware stealing (slides: L2 misses 71% -> 44%, +27%): a thief asks the workers
    /// nearest in the topology first (same cache, then same package, then same NUMA node, then
    /// the rest), random start within a tier.
    pub steal_locality: bool,
    /// Cost-aware stealing (the team's Mely idea): a color whose turns are measured to take less
    /// than this is not lent, since moving it costs more than running it where it is (a steal
    /// round trip is a few microseconds, and a moved color's data follows it into another
    /// cache). Turns are timed on a sample (one in `steal::TURN_SAMPLE`), and, with two workers or
    /// more, a color's first turn on a worker and every turn of a color measured over 20 us, so a
    /// color is weighed from its first turn. `None`: off.
    pub steal_min_work: Option<Duration>,
    /// Events of one color run back to back before the worker moves to the next ready color.
    /// Bounds how long one busy color can delay the others (a guess: long enough to keep the
    /// color's data in cache, short enough to be fair).
    pub turn_budget: usize,
    /// A color with a backlog of long events (8 or more queued, 4x the average waiting color's,
    /// each measured at 1 us or more) in a line of at least 50 us of work takes every other turn
    /// ahead of that line (`queue`, "Turns: the line, and backlogs"): a collector that every
    /// chunk of a job posts its result to is the job's serial part, and waited behind every
    /// chunk queued on its worker. Costs come from timed turns, which the default configuration
    /// takes (on one worker with `Steal::Off`, `follow` off and no `steal_min_work`, none are,
    /// and this does nothing). Off by default (turns in the order colors became ready, as
    /// libasync-smp): on, a user's word count (`bench steal`, `HashMap<String, u64>` merges)
    /// ran 1.3-1.4x faster in some periods of the study's host and 0.67x in others, where the
    /// merges, now beside the other worker's counting, freed its strings into its glibc arena
    /// while it allocated there; with integer keys or jemalloc it gained in both. Turn it on
    /// for collectors whose merges do not free what other workers allocate.
    #[serde(default)]
    pub backlog_turns: bool,
    /// New colors take their turns newest first (`queue`, "Turns: newest first"): a color that
    /// a handler posts to and that never took a turn on that worker since it came there runs
    /// ahead of the line, the newest first, as rayon's and tokio's workers run what they just
    /// spawned. A divide and conquer with a color per call then runs depth first and keeps a
    /// few calls' colors live instead of a whole level of its tree (`fib(30)` with leaves of
    /// `seq(10)`, a fresh color per call, one worker: 34-60 ms in line order, 12-17 ms newest
    /// first). Colors that already ran (actors, collectors) keep the line's order, urgent posts
    /// still run first, and every 257th turn while new colors wait is the line's front's.
    /// `false`: every turn in line order, as libasync-smp.
    #[serde(default = "yes")]
    pub newest_first: bool,
    /// Events per round: between two looks at the inbox and two flushes of outgoing buffers
    /// (a turn over a millisecond is followed by a look at the inbox as well).
    /// Seastar polls once per loop turn; 256 events keeps inbox latency at a few microseconds for
    /// sub-microsecond handlers (a guess, to be tuned by the benchmarks).
    pub round_budget: usize,
    /// A panicking handler ends the run with [`Error::HandlerPanicked`](crate::Error) instead of
    /// being counted and skipped.
    pub abort_on_panic: bool,
    /// Allocate events (closure storage) with EMA, each worker's color-aware allocator (`alloc`
    /// module): storage for an event of color `c` comes from a block reserved for `c`'s home
    /// worker, so events bound for different workers never share a cache line, and the running
    /// worker's free goes back to the poster in batches. `false`: the global allocator, as
    /// libasync-smp did (thesis §5.2).
    pub ema: bool,
    /// Most bytes of EMA blocks one worker may hold; past it, events fall back to the global
    /// allocator (counted in `ema_refused`). `None`: no cap.
    pub ema_cap: Option<usize>,
    /// Load-aware placement of new long-lived colors ([`place`](crate::place)): each worker
    /// measures the share of its CPU it gets when it wants to run (threads outside the runtime
    /// may share it: an injector, another process) and new colors go to workers in proportion.
    /// `false`: [`place`](crate::place) keeps the color it is given (hash placement, as
    /// libasync-smp).
    #[serde(default = "yes")]
    pub placement: bool,
    /// Colors follow their messages (`follow` module): an idle color posted to from another
    /// worker moves to that worker, so that partners in a chain of messages end up on one
    /// worker, unless that worker is busier or gets less of its CPU; a moved color goes back
    /// home once most of its posts come from elsewhere. `false`: a color runs where its hash
    /// puts it (libasync-smp), unless stolen.
    #[serde(default = "yes")]
    pub follow: bool,
    /// A color whose descriptor a worker's poller watches stays on that worker (`follow` and
    /// relief do not move it: `IoCore::anchors`). A performance rule; `false` lets tests move
    /// watched colors, to check that their readiness survives the move.
    #[doc(hidden)]
    #[serde(default = "yes")]
    pub anchor_watched: bool,
    /// A pinned worker that measures a share of its CPU below `cpu_share::UNPIN_BELOW` for a
    /// few windows in a row (another process runs there), while every other worker's CPU has
    /// been shared that long too and none gets clearly more of its own (a dip of one worker's
    /// CPU for two windows once sufficed, and a busy CPU beside a free one unpinned a whole
    /// process), lets the system scheduler place it on any of the runtime's CPUs for a second
    /// (`cpu_share::REPIN_AFTER`; then it takes its pin again and measures anew), and the
    /// workers the process starts meanwhile start unpinned (`worker::Core::unpin`,
    /// `cpu_share::CpuShare::leaves_pin`). Where every CPU is busy (a compile beside the
    /// program) colors have nowhere to go, and a chain of messages through a pinned worker waits
    /// for its CPU's time slices, where the scheduler runs a thread on whichever CPU frees first;
    /// where another worker's CPU is free, the colors leave instead (`follow`) and the workers
    /// stay pinned (unpinned, the scheduler put both on the free CPU at times). Measured
    /// (`bench actors --quick`, 2 workers, geometric means of ochre / tokio-mt, in one process):
    /// beside a compile (`scripts/beside-build.sh`) 1.024 and 0.942 against 0.655 and 0.678
    /// pinned (0.868 and 0.951 unpinned from the start); a thread spinning on worker 1's CPU,
    /// 1.059 and 1.205 against 1.065 and 1.287 (no worker left its pin: the same system, and
    /// that is the noise; unpinned 0.935 and 1.163); quiet, nothing changes. Only with
    /// [`Builder::pin`](crate::Builder::pin) and several workers measuring their shares
    /// (placement, follow or stealing on); off in [`Config::baseline`].
    #[serde(default = "yes")]
    pub unpin_when_shared: bool,
    /// A worker on a CPU shared with another process (measured so, or late to a run's end
    /// lately) or with another worker (more workers than CPUs), asleep when its run is found
    /// quiescent or a handler shuts it down, sleeps
    /// through the run's end, which the worker that stopped it ends for it, and through the
    /// next run's start, which carries it in asleep (`run_end`): `Runtime::run` does not wait
    /// for it to wake; one that ended a run awake waits for the next in its parker, carried in
    /// likewise, not at the gate. That wake-up waited for the other process's time slice, and
    /// so did every run: a user's sum beside a busy thread had done its work at 2.4 ms and
    /// returned at 4-7 ms. Such a worker takes back the memory others freed for it at its next
    /// end, so its EMA gauges in a run's report may count it live until then. Off in
    /// [`Config::baseline`] (its workers all end every run).
    #[serde(default = "yes")]
    pub sleep_through_ends: bool,
    /// An idle worker stands in for a worker stuck in one handler (its thread descheduled, or
    /// the handler long) with work waiting there: it routes that worker's inbox and lends
    /// itself half of its waiting colors, as the stuck worker would between two events
    /// (`stand_in` module). Without it, the colors homed on a worker whose CPU another process
    /// holds wait for that CPU's next time slice. Needs `batching` and stealing, and a kernel
    /// with `membarrier` (4.14 or later); off in the baseline.
    #[serde(default = "yes")]
    pub stand_in: bool,
    /// Every worker is the home of colors, also with more workers than the runtime has CPUs.
    /// `false` (the default): with more workers than CPUs, plain colors are homed on as many
    /// workers as there are CPUs (workers `0..cpus`, one per CPU in tree order), and the other
    /// workers stand by: they run the colors a chain of messages moves to them (`follow`) and
    /// stand in for a worker stuck in a handler (`stand_in`), but neither steal nor get work
    /// pushed to them, and they sleep through runs' ends (`Config::sleep_through_ends`);
    /// grouped colors keep to
    /// their cache domain among those workers. Why: a post goes to its color's home, and with
    /// eight workers on two CPUs three posts in four went to a worker that was not running
    /// (asleep, or waiting for a CPU its siblings held) and waited for its wake-up or its time
    /// slice: a user's divide and conquer of fresh colors ran at 0.24-0.31 of tokio-mt with as
    /// many workers, 1.27-1.47 with homes on two and the standbys neither stealing
    /// (`steal::steals`) nor woken for runs' ends (`idle::sleeps_through`); at four workers
    /// 0.38-0.41 and 1.06-1.24 (`oversub_probe`, two processes of each build). `true` in
    /// [`Config::baseline`] (libasync-smp hashes colors over all its threads) and for tests of
    /// the protocol that need colors homed on every worker of many on a small machine.
    #[serde(default)]
    pub home_on_every_worker: bool,
    /// With `sleep_through_ends`, a worker sleeps through run ends on any CPU, not only on one
    /// found shared: for tests of the protocol (`run_end`) on a quiet machine.
    #[doc(hidden)]
    #[serde(default)]
    pub sleep_through_any_cpu: bool,
    /// A small closure posted to another worker travels inside the message, and the receiver
    /// stores it (`message::InlineTask`); `false`: the poster stores it, placed for the receiver
    /// (EMA), and the message carries a pointer. A transport choice, kept switchable to measure.
    #[doc(hidden)]
    #[serde(default = "yes")]
    pub inline_posts: bool,
    /// Per-color statistics ([`color_stats`](crate::color_stats)): one turn and one post in this
    /// many is measured (run time, wait, events of its color); moves and steals are counted
    /// exactly. 0: off; 1: every event (exact, for tests). Default 0 (off): a sampled post or
    /// turn reads the clock twice (65 ns a read on the study's virtual machine) and updates a map
    /// and a histogram, about 200 ns; at 1 in 64 that cost ping-pong (53 ns an event) 7% and
    /// producer-consumer 6-14% (`ochre bench color-stats`, paired reps), and even at 1 in 1024
    /// producer-consumer at 2 workers lost 7-10% against off on a quiet machine (paired
    /// medians of 11 reps, three runs: 0.905, 0.901, 0.925; ping-pong 0.98), a cost not found
    /// yet: on by choice (1024 is a good period) until it is.
    #[serde(default = "color_stats_default")]
    pub color_stats: u32,
    /// Traces ([`trace`](crate::trace)): each worker records its handler runs, idle spells,
    /// sleeps, moves, steals and batch flushes in a ring of this many records (48 bytes each;
    /// the oldest dropped and counted when full), read with
    /// [`Runtime::trace`](crate::Runtime::trace). 0 (the default): off, a branch per hook.
    /// On, every event reads the clock twice (65 ns a read on the study's machine): a tool for
    /// looking, not for measuring throughput.
    #[serde(default)]
    pub trace_events: usize,
    /// Stall detection ([`stall`](crate::stall)): a handler running longer than this is
    /// reported while it runs (a log warning with its color and worker, and
    /// [`Handle::stalls`](crate::Handle::stalls)), by the process's watchdog thread (one for
    /// every runtime), which looks every quarter of it; a turn (up to `turn_budget` events of
    /// one color) that long is reported too. `None`: not watched. Default 100 ms: a handler
    /// is meant to take microseconds, and 100 ms is what a person notices; it costs three
    /// stores a turn.
    #[serde(default = "stall_threshold_default")]
    pub stall_threshold: Option<Duration>,
}

fn stall_threshold_default() -> Option<Duration> {
    Some(Duration::from_millis(100))
}

fn batch_sizing_default() -> BatchSize {
    BatchSize::Adaptive
}

fn color_stats_default() -> u32 {
    0
}

fn yes() -> bool {
    true
}

impl Default for Config {
    fn default() -> Self {
        Config {
            batching: true,
            batch_size: 32,
            batch_sizing: batch_sizing_default(),
            safety_flush_factor: 1.1,
            wakeup: Wakeup::Futex,
            spin: Spin::Adaptive,
            max_spinners: None,
            steal: Steal::Backlog,
            steal_batch: false,
            steal_batch_max: 8,
            steal_locality: false,
            steal_min_work: None,
            turn_budget: 64,
            backlog_turns: false,
            newest_first: true,
            round_budget: 256,
            abort_on_panic: false,
            ema: true,
            ema_cap: None,
            placement: true,
            follow: true,
            anchor_watched: true,
            inline_posts: true,
            unpin_when_shared: true,
            sleep_through_ends: true,
            stand_in: true,
            sleep_through_any_cpu: false,
            home_on_every_worker: false,
            color_stats: color_stats_default(),
            trace_events: 0,
            stall_threshold: stall_threshold_default(),
        }
    }
}

macro_rules! setters {
    ($($(#[$doc:meta])* $field:ident: $ty:ty,)*) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub fn $field(mut self, value: $ty) -> Self {
                self.$field = value;
                self
            }
        )*
    };
}

impl Config {
    setters! {
        /// Sets [`Config::batching`].
        batching: bool,
        /// Sets [`Config::batch_size`].
        batch_size: usize,
        /// Sets [`Config::batch_sizing`].
        batch_sizing: BatchSize,
        /// Sets [`Config::safety_flush_factor`].
        safety_flush_factor: f64,
        /// Sets [`Config::wakeup`].
        wakeup: Wakeup,
        /// Sets [`Config::spin`].
        spin: Spin,
        /// Sets [`Config::max_spinners`].
        max_spinners: Option<usize>,
        /// Sets [`Config::steal`].
        steal: Steal,
        /// Sets [`Config::steal_batch`].
        steal_batch: bool,
        /// Sets [`Config::steal_batch_max`].
        steal_batch_max: usize,
        /// Sets [`Config::steal_locality`].
        steal_locality: bool,
        /// Sets [`Config::steal_min_work`].
        steal_min_work: Option<Duration>,
        /// Sets [`Config::turn_budget`].
        turn_budget: usize,
        /// Sets [`Config::backlog_turns`].
        backlog_turns: bool,
        /// Sets [`Config::newest_first`].
        newest_first: bool,
        /// Sets [`Config::round_budget`].
        round_budget: usize,
        /// Sets [`Config::abort_on_panic`].
        abort_on_panic: bool,
        /// Sets [`Config::ema`].
        ema: bool,
        /// Sets [`Config::ema_cap`].
        ema_cap: Option<usize>,
        /// Sets [`Config::placement`].
        placement: bool,
        /// Sets [`Config::follow`].
        follow: bool,
        /// Sets [`Config::unpin_when_shared`].
        unpin_when_shared: bool,
        /// Sets [`Config::sleep_through_ends`].
        sleep_through_ends: bool,
        /// Sets [`Config::stand_in`].
        stand_in: bool,
        /// Sets [`Config::home_on_every_worker`].
        home_on_every_worker: bool,
        /// Sets `Config::sleep_through_any_cpu` (for tests).
        #[doc(hidden)]
        sleep_through_any_cpu: bool,
        /// Sets `Config::anchor_watched` (for tests).
        #[doc(hidden)]
        anchor_watched: bool,
        /// Sets `Config::inline_posts` (to measure).
        #[doc(hidden)]
        inline_posts: bool,
        /// Sets [`Config::color_stats`].
        color_stats: u32,
        /// Sets [`Config::trace_events`].
        trace_events: usize,
        /// Sets [`Config::stall_threshold`].
        stall_threshold: Option<Duration>,
    }

    /// The original libasync-smp (thesis §5.1.2): one lock per posted event, pipe wake-ups, no
    /// spinning, no online tuning, plain stealing, events from the global allocator, colors placed by hash over every worker, turns in line order. Build with the `unpadded` feature for its memory layout too.
    pub fn baseline() -> Self {
        Config::default()
            .batching(false)
            .batch_sizing(BatchSize::Fixed)
            .wakeup(Wakeup::Pipe)
            .spin(Spin::Never)
            .steal(Steal::Plain)
            .ema(false)
            .placement(false)
            .follow(false)
            .unpin_when_shared(false)
            .sleep_through_ends(false)
            .stand_in(false)
            .home_on_every_worker(true)
            .backlog_turns(false)
            .newest_first(false)
    }

    /// Every stealing heuristic on (batch, locality-aware, cost-aware with a 20 µs floor;
    /// pinning is per color).
    pub fn stealing_heuristics(self) -> Self {
        self.steal(Steal::Plain)
            .steal_batch(true)
            .steal_locality(true)
            .steal_min_work(Some(Duration::from_micros(20)))
    }

    /// Checks the values; [`Builder::build`](crate::Builder::build) calls it.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.batch_size == 0 {
            return Err("batch_size must be at least 1".into());
        }
        if self.turn_budget == 0 || self.round_budget == 0 {
            return Err("turn_budget and round_budget must be at least 1".into());
        }
        if !(self.safety_flush_factor.is_finite() && self.safety_flush_factor > 0.0) {
            return Err("safety_flush_factor must be a positive number".into());
        }
        if self.stall_threshold == Some(Duration::ZERO) {
            return Err("stall_threshold must be positive (None turns detection off)".into());
        }
        if self.steal_batch_max == 0 {
            return Err("steal_batch_max must be at least 1".into());
        }
        if self.max_spinners == Some(0) {
            return Err(
                "max_spinners must be at least 1 (use Spin::Never to disable spinning)".into()
            );
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn baseline_differs_in_each_switch() {
        let d = Config::default();
        let b = Config::baseline();
        assert!(d.batching && !b.batching);
        assert_eq!(b.wakeup, Wakeup::Pipe);
        assert_eq!(b.spin, Spin::Never);
        assert_eq!(b.steal, Steal::Plain);
        assert!(d.ema && !b.ema);
        assert!(d.unpin_when_shared && !b.unpin_when_shared);
        assert!(d.sleep_through_ends && !b.sleep_through_ends);
        assert!(!d.home_on_every_worker && b.home_on_every_worker);
        assert!(d.stand_in && !b.stand_in);
        assert!(d.newest_first && !b.newest_first);
        // Opt-in (its doc says why): off in both.
        assert!(!d.backlog_turns && !b.backlog_turns);
        assert!(d.validate().is_ok() && b.validate().is_ok());
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Config::default().batch_size(0).validate().is_err());
        assert!(Config::default().turn_budget(0).validate().is_err());
        assert!(Config::default().safety_flush_factor(f64::NAN).validate().is_err());
        assert!(Config::default().max_spinners(Some(0)).validate().is_err());
        assert!(Config::default().batch_size(1).validate().is_ok());
    }
}
