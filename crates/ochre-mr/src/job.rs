//! [`Job`]: runs a [`MapReduce`] application as chained colored events (the crate doc draws the
//! flow), and [`Output`]: its pairs and [`Phases`]; [`run_flow`]: jobs chained one after
//! another ([`Job::then`]) in one run of the runtime.
//!
//! Invariants, and why each phase starts exactly once, after everything it needs:
//! - Every map task is claimed exactly once: a lane takes index `next_task.fetch_add(1)`, and
//!   only an index below the task count is mapped. A lane that draws past the end has nothing
//!   left to claim, ever, so it partitions its container and never maps again.
//! - `lanes_left` starts at the lane count and each lane decrements it once, after handing its
//!   runs over (under each partition's lock): the lane that brings it to zero knows every run is
//!   in place, and is the only one to post the reduce events. `reduce_left` does the same for
//!   the end of reduce.
//! - A merge-tree node has at most two children; the first to arrive leaves its run in the
//!   node's slot (under its lock), the second takes it and merges, so each node merges once and
//!   the root's run, the whole output, is published once.
//! - A lane's container lives in a [`ColorCell`] of the lane's color: only that color's events
//!   open it, and they never run at the same time.
//! - The event that merges the root is the job's last: it hands the output to the job's stage
//!   step ([`Job::then`]), which starts the next job of the flow from that event, or stores
//!   the flow's result and ends the run ([`ochre::shutdown`]) instead of letting the workers
//!   find quiescence after their spinning (milliseconds on a loaded machine). So a run is its
//!   flow's alone: events posted to the runtime from other threads during it may be left for
//!   the next run. A flow's jobs share one `FlowShared`: a failure or a cancellation of the
//!   run reaches every job's events still queued.
//!
//! Memory: each lane's state (its container's header) is a [`ColorBox`] made by the split
//! event, so EMA places it for the lane's worker, as the thesis placed Phoenix's intermediate
//! buffers. The runs a lane hands to reduce are [`ColorVec`]s: 1 KiB slabs EMA places for the
//! reduce partition's worker (`Phases::intermediate_placed` counts their pairs). The lanes'
//! hash tables and the keys' own heap storage (a word's bytes) come from the global allocator:
//! EMA serves objects up to 1 KiB only, and `HashMap` takes another allocator only with the
//! unstable `allocator_api`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use ochre::{Color, ColorBox, ColorCell, Config, Runtime};
use serde::Serialize;

use crate::color_vec::ColorVec;
use crate::store::{combine_into, hash_of, Container, Emitter, Store};
use crate::MapReduce;

/// Why a job did not produce its output.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The runtime could not be built or run.
    #[error("runtime: {0}")]
    Runtime(#[from] ochre::Error),
    /// A map, combine or reduce function panicked.
    #[error("a handler panicked: {0}")]
    Panicked(String),
    /// The run ended without the output (shut down from outside, or a bug of this crate).
    #[error("the job did not finish: {0}")]
    Incomplete(String),
}

/// How long each phase took, as Phoenix reports it, and how much work there was.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Phases {
    /// Cutting the input into map tasks (on the calling thread, before the run).
    #[serde(serialize_with = "seconds")]
    pub split: Duration,
    /// From the start of the run (waking the workers) to the last lane's partitioned runs.
    #[serde(serialize_with = "seconds")]
    pub map: Duration,
    /// From there to the last partition reduced.
    #[serde(serialize_with = "seconds")]
    pub reduce: Duration,
    /// From there to the merged output (merging overlaps reduce; this is what is left).
    #[serde(serialize_with = "seconds")]
    pub merge: Duration,
    /// The whole run: from `Runtime::run` to the end the merge event puts to it.
    #[serde(serialize_with = "seconds")]
    pub total: Duration,
    /// Map tasks (splits).
    pub map_tasks: usize,
    /// The most map tasks one lane mapped (summed over a flow's jobs): with `lanes` lanes,
    /// `map_tasks / lanes` when the workers shared the map phase evenly, `map_tasks` when one
    /// lane did it all.
    pub busiest_lane_tasks: usize,
    /// MapReduce jobs run (K-means: one per iteration, in one run of the runtime).
    pub jobs: usize,
    /// Map lanes (one per worker).
    pub lanes: usize,
    /// Lanes whose state EMA placed for their worker (0 with EMA off: the global allocator).
    pub lanes_placed: usize,
    /// Lanes retired before they started (summed over a flow's jobs): their worker did not run
    /// them before every map task was claimed (its CPU another process's, or its thread in a
    /// long handler), and the job did not wait for them.
    pub lanes_retired: usize,
    /// Reduce partitions.
    pub reduce_tasks: usize,
    /// Pairs emitted by map.
    pub emitted: u64,
    /// Pairs left after combining in the lanes (what partition moved to reduce).
    pub intermediate: u64,
    /// Of those, the pairs handed over in buffers EMA placed for their reduce partition's
    /// worker (0 with EMA off).
    pub intermediate_placed: u64,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Phases {
    /// Adds the phases of another job run after this one (K-means' iterations, PCA's two
    /// jobs): times and counts add up; lanes and reduce tasks keep the larger.
    pub fn add(&mut self, other: &Phases) {
        self.split += other.split;
        self.map += other.map;
        self.reduce += other.reduce;
        self.merge += other.merge;
        self.total += other.total;
        self.map_tasks += other.map_tasks;
        self.jobs += other.jobs;
        self.busiest_lane_tasks += other.busiest_lane_tasks;
        self.lanes = self.lanes.max(other.lanes);
        self.lanes_placed = self.lanes_placed.max(other.lanes_placed);
        self.lanes_retired += other.lanes_retired;
        self.reduce_tasks = self.reduce_tasks.max(other.reduce_tasks);
        self.emitted += other.emitted;
        self.intermediate += other.intermediate;
        self.intermediate_placed += other.intermediate_placed;
    }

    /// One line: `split 1.2 ms, map 80.1 ms, reduce 3.4 ms, merge 0.5 ms (total 86.0 ms)`.
    pub fn line(&self) -> String {
        let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
        format!(
            "split {}, map {}, reduce {}, merge {} (total {}); {} job(s), {} map tasks on {} \
             lanes ({} placed by EMA, {} retired; the busiest mapped {}), {} reduce tasks, {} pairs \
             emitted, {} after combining ({} in buffers placed by EMA)",
            ms(self.split),
            ms(self.map),
            ms(self.reduce),
            ms(self.merge),
            ms(self.total),
            self.jobs,
            self.map_tasks,
            self.lanes,
            self.lanes_placed,
            self.lanes_retired,
            self.busiest_lane_tasks,
            self.reduce_tasks,
            self.emitted,
            self.intermediate,
            self.intermediate_placed
        )
    }
}

/// A job's result: the pairs (sorted by key unless [`Job::sorted`] was turned off) and the
/// phase breakdown.
#[derive(Debug)]
pub struct Output<K, V> {
    /// The reduced pairs, one per key.
    pub pairs: Vec<(K, V)>,
    /// Time per phase.
    pub phases: Phases,
}

impl<K, V> IntoIterator for Output<K, V> {
    type Item = (K, V);
    type IntoIter = std::vec::IntoIter<(K, V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.pairs.into_iter()
    }
}

/// Byte ranges of about `chunk` bytes covering `0..len` (the splitter of fixed-size records
/// when `chunk` is a multiple of the record size).
pub fn byte_ranges(len: usize, chunk: usize) -> Vec<std::ops::Range<usize>> {
    let chunk = chunk.max(1);
    (0..len).step_by(chunk).map(|s| s..(s + chunk).min(len)).collect()
}

/// A MapReduce job: an application and how to run it.
///
/// ```
/// # use ochre_mr::{Job, apps::word_count::WordCount};
/// let job = Job::new(WordCount::new(b"a rose is a rose".to_vec())).workers(2).pin(false);
/// let out = job.run()?;
/// assert_eq!(out.pairs[0], (b"A".to_vec(), 2));
/// # Ok::<(), ochre_mr::Error>(())
/// ```
pub struct Job<P: MapReduce> {
    app: Arc<P>,
    workers: Option<usize>,
    pin: bool,
    config: Option<Config>,
    container: Container,
    chunk_bytes: Option<usize>,
    reduce_tasks: Option<usize>,
    sorted: bool,
}

/// Default map task size: a few hundred KiB keeps a task's input and the lane's container in
/// the L2 cache of most machines while making the per-task event cost (~1 µs) negligible.
const DEFAULT_CHUNK: usize = 256 << 10;
/// Smallest default map task: below, the event and claim costs start to show.
const MIN_CHUNK: usize = 16 << 10;
/// Map tasks per lane the default chunk size aims for, so that a slowed worker can be
/// compensated by the others (dynamic claiming balances in units of one task).
const TASKS_PER_LANE: usize = 16;

/// At most this many intermediate pairs (over all lanes), the last lane reduces every
/// partition itself instead of posting them: reducing a few thousand small pairs takes tens of
/// microseconds, about what waking another worker for them costs, and jobs this small are
/// the ones run many times (K-means' iterations).
const INLINE_REDUCE_PAIRS: u64 = 2048;

/// Source of job numbers: each job's reduce partitions use colors of its own, so that no
/// color carries history (follow's counters) from an earlier job into this one. (Lanes use the
/// flow's pinned colors, `FlowCtx::lane_colors`.)
static JOBS: AtomicU64 = AtomicU64::new(0);

/// First of the lane colors (`FlowCtx::lane_colors`): past every job's colors (`Job::start`:
/// `2^48 + job * 2^24` for `job < 2^14`, all below `2^48 + 2^38`).
const LANE_BASE: u64 = (1 << 48) + (1 << 38);

impl<P: MapReduce> Job<P> {
    /// A job for `app` with the defaults: one worker per CPU, the optimized runtime, a hash
    /// container, sorted output.
    pub fn new(app: P) -> Self {
        Job::shared(Arc::new(app))
    }

    /// A job for an application shared with the caller (who may run it again, or read it
    /// for a sequential check).
    pub fn shared(app: Arc<P>) -> Self {
        Job {
            app,
            workers: None,
            pin: true,
            config: None,
            container: Container::Hash,
            chunk_bytes: None,
            reduce_tasks: None,
            sorted: true,
        }
    }

    /// Worker threads of the runtime [`Job::run`] builds (default: one per CPU).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// Pin the workers to CPUs (default: true).
    pub fn pin(mut self, pin: bool) -> Self {
        self.pin = pin;
        self
    }

    /// The runtime configuration of [`Job::run`] (default: [`Config::default`], optimized).
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(config);
        self
    }

    /// The intermediate container (default: [`Container::Hash`]).
    pub fn container(mut self, container: Container) -> Self {
        self.container = container;
        self
    }

    /// Input bytes per map task (default: 256 KiB, less for small inputs so that every lane
    /// gets about 16 tasks, never below 16 KiB).
    pub fn chunk_bytes(mut self, bytes: usize) -> Self {
        self.chunk_bytes = Some(bytes.max(1));
        self
    }

    /// Reduce partitions (default: 4 per worker with a hash container, 1 per worker with a
    /// dense one, 1 with fixed slots).
    pub fn reduce_tasks(mut self, n: usize) -> Self {
        self.reduce_tasks = Some(n.max(1));
        self
    }

    /// Sort the output by key (default: true). Unsorted, reduce does not sort and merge
    /// concatenates.
    pub fn sorted(mut self, sorted: bool) -> Self {
        self.sorted = sorted;
        self
    }

    /// The application.
    pub fn app(&self) -> &Arc<P> {
        &self.app
    }

    /// Runs the job on a runtime of its settings ([`Job::workers`], [`Job::pin`],
    /// [`Job::config`]; a panicking handler aborts the run) that the process keeps between
    /// calls: the first call with those settings builds it (milliseconds the first time in a
    /// process), later ones reuse it, and calls made at the same time get one each. A run that
    /// fails drops its runtime. For a runtime whose life is the caller's: [`Job::run_on`].
    pub fn run(&self) -> Result<Output<P::Key, P::Value>, Error> {
        let settings = self.settings();
        let rt = crate::kept::take(&settings)?;
        let out = self.run_on(&rt);
        if out.is_ok() {
            crate::kept::give_back(&settings, rt);
        }
        out
    }

    /// What [`Job::run`] builds its runtime from.
    pub(crate) fn settings(&self) -> crate::kept::Settings {
        crate::kept::Settings { workers: self.workers, pin: self.pin, config: self.config.clone() }
    }

    /// Runs the job on `rt` (for jobs run many times). The job's worker count and
    /// configuration are those of `rt`.
    pub fn run_on(&self, rt: &Runtime) -> Result<Output<P::Key, P::Value>, Error> {
        let (out, phases) = run_flow(rt, self.clone().then(Flow::Done))?;
        Ok(Output { pairs: out.pairs, phases })
    }

    /// This job as the first stage of a flow ([`run_flow`]): `step` gets its output, in the
    /// event that merged it, and says what follows: another stage, or the flow's result.
    ///
    /// ```
    /// # use ochre_mr::{Flow, Job, run_flow, apps::word_count::WordCount};
    /// # use ochre::Runtime;
    /// let rt = Runtime::builder().workers(2).pin(false).build()?;
    /// let words = |text: &str| Job::new(WordCount::new(text.as_bytes().to_vec()));
    /// // Two jobs in one run: the second counts the first's most frequent word, written 3 times.
    /// let flow = words("a rose is a rose is a rose").then(move |out| {
    ///     let (top, _) = out.pairs.iter().max_by_key(|p| p.1).cloned().unwrap_or_default();
    ///     let text = format!("{} ", String::from_utf8_lossy(&top)).repeat(3);
    ///     Flow::Next(words(&text).then(|out| Flow::Done(out.pairs)))
    /// });
    /// let (pairs, phases) = run_flow(&rt, flow)?;
    /// assert_eq!(pairs, vec![(b"ROSE".to_vec(), 3)]);
    /// assert_eq!(phases.jobs, 2);
    /// # Ok::<(), ochre_mr::Error>(())
    /// ```
    pub fn then<R, F>(self, step: F) -> Stage<R>
    where
        R: Send + 'static,
        F: FnOnce(Output<P::Key, P::Value>) -> Flow<R> + Send + 'static,
    {
        Stage { launch: Box::new(Chained { job: self, step }) }
    }

    /// Starts the job in the run of `flow`: splits it here (the calling thread, or the event
    /// that merged the previous job), posts every lane but the first, and returns the first
    /// lane's color and event for the caller to start.
    fn start(&self, flow: &FlowCtx, then: Then<P>) -> Result<FirstLane, Error> {
        let handle = &flow.handle;
        let workers = handle.workers();
        let chunk =
            self.chunk_bytes.unwrap_or_else(|| default_chunk(self.app.input_bytes(), workers));
        let reduce_tasks = self.reduce_tasks.unwrap_or(match self.container {
            Container::Hash => 4 * workers,
            Container::Dense(_) => workers,
            Container::Fixed => 1,
        });
        // 2^14 jobs' worth of fresh colors, then again: far below the grouped colors' top bit.
        let job = JOBS.fetch_add(1, Ordering::Relaxed) % (1 << 14);
        let base = (1u64 << 48) + (job << 24);
        // The other set than the previous job's (`FlowCtx::lane_colors`).
        let set = flow.jobs.fetch_add(1, Ordering::Relaxed) % 2;
        let lane_colors = flow.lane_colors[set].clone();
        let reduce_colors = spread_colors(handle, base + (1 << 23), reduce_tasks);
        let state = Arc::new(State::new(
            self.app.clone(),
            self.container,
            self.sorted,
            lane_colors,
            reduce_colors,
            flow.shared.clone(),
            then,
        ));
        // Phase 1, here: split, then start every lane but the first into its worker's inbox
        // (from outside the run), or its outgoing buffer (from an event; the buffer goes to an
        // idle worker at the end of this turn).
        let _ = state.splits.set(self.app.split(chunk));
        state.mark(SPLIT);
        for lane in 1..workers {
            let s = state.clone();
            handle.try_post(state.lane_colors[lane], move || lane_step(s, lane))?;
        }
        let first = state.lane_colors[0];
        Ok((first, Box::new(move || lane_step(state, 0))))
    }
}

impl<P: MapReduce> Clone for Job<P> {
    fn clone(&self) -> Self {
        Job {
            app: self.app.clone(),
            workers: self.workers,
            pin: self.pin,
            config: self.config.clone(),
            container: self.container,
            chunk_bytes: self.chunk_bytes,
            reduce_tasks: self.reduce_tasks,
            sorted: self.sorted,
        }
    }
}

/// A started job's first lane: its color and its first event, which the starter posts (or
/// runs the run with).
type FirstLane = (Color, Box<dyn FnOnce() + Send>);

/// What follows a job of a flow: another stage, or the flow's result.
pub enum Flow<R> {
    /// Run this stage next, in the same run.
    Next(Stage<R>),
    /// The flow is done: end the run with this result.
    Done(R),
}

/// A job and what to do with its output ([`Job::then`]): a step of a flow.
pub struct Stage<R> {
    launch: Box<dyn Launch<R>>,
}

/// A stage with its job's types hidden, so that a flow can chain jobs of different types.
trait Launch<R>: Send {
    /// Starts the stage's job; its last event runs the stage's step.
    fn launch(
        self: Box<Self>,
        flow: &Arc<FlowCtx>,
        result: &Arc<Mutex<Option<(R, Phases)>>>,
    ) -> Result<FirstLane, Error>;
}

/// A job and its step.
struct Chained<P: MapReduce, F> {
    job: Job<P>,
    step: F,
}

impl<P, R, F> Launch<R> for Chained<P, F>
where
    P: MapReduce,
    R: Send + 'static,
    F: FnOnce(Output<P::Key, P::Value>) -> Flow<R> + Send + 'static,
{
    fn launch(
        self: Box<Self>,
        flow: &Arc<FlowCtx>,
        result: &Arc<Mutex<Option<(R, Phases)>>>,
    ) -> Result<FirstLane, Error> {
        let Chained { job, step } = *self;
        let (flow2, result2) = (flow.clone(), result.clone());
        let then: Then<P> = Box::new(move |out: Output<P::Key, P::Value>| {
            lock(&flow2.phases).add(&out.phases);
            match step(out) {
                Flow::Next(stage) => match stage.launch.launch(&flow2, &result2) {
                    Ok((color, first)) => ochre::post(color, first),
                    Err(e) => {
                        flow2.shared.fail(format!("starting the next job: {e}"));
                        ochre::shutdown();
                    }
                },
                Flow::Done(r) => {
                    let phases = std::mem::take(&mut *lock(&flow2.phases));
                    *lock(&result2) = Some((r, phases));
                    // The flow's last event: end the run now rather than when the workers,
                    // spinning before they sleep (up to the spin threshold, milliseconds on a
                    // loaded machine), find the runtime quiescent.
                    ochre::shutdown();
                }
            }
        });
        job.start(flow, then)
    }
}

/// What the stages of a flow share besides [`FlowShared`]: where to post, the lanes' colors,
/// and the phases so far.
struct FlowCtx {
    handle: ochre::Handle,
    /// One color per worker, homed there and pinned ([`ochre::Handle::pin`]), for the lanes of
    /// every job of the flow (and of later flows on the runtime: the same colors, pinned again).
    /// A lane is its worker's share of the map phase, and the lanes balance by claiming tasks,
    /// so a lane must never run elsewhere: with plain stealing, a worker whose lane finished
    /// first asks for work, and the other worker, which has just launched the next job from
    /// its last event, lends it that job's fresh lane (the only ready color there); the thief
    /// then maps every task in its own lane's turn (up to `turn_budget` events) before the
    /// stolen one runs, while the victim sleeps: a third of K-means' iterations ran on one
    /// worker, -25% at the ablation's "+batching" step (batching puts local posts straight into
    /// the ready queue, where thieves see them). Following a post (`follow`) could likewise
    /// bring a lane to the worker that posted it. Pinned colors are kept by their worker for
    /// good, hence the same colors for every job, not fresh ones: two sets, the jobs of the
    /// flow taking them in turn. With one set, the event that ends a job (its last lane's)
    /// would post the next job's lane on its own worker to its own color, so its turn would
    /// go on into the next map phase, and the start of the other workers' lanes would wait in
    /// its outgoing buffer for the end of that turn (up to `turn_budget` map tasks) instead of
    /// leaving at the end of this event's turn for the idle workers (measured: the second
    /// worker joined each K-means iteration after about 16 tasks, -30%).
    lane_colors: [Vec<Color>; 2],
    /// Jobs of the flow started so far: job `n` has the lanes of set `n % 2`.
    jobs: AtomicUsize,
    shared: Arc<FlowShared>,
    phases: Mutex<Phases>,
}

impl FlowShared {
    #[cold]
    fn fail(&self, what: String) {
        lock(&self.failure).get_or_insert(what);
    }
}

/// Runs a flow of chained jobs ([`Job::then`]) in one run of `rt`: each job starts in the
/// event that merged the previous one's output, so an iterative application (K-means) pays
/// one runtime start, not one per iteration, and no thread waits between jobs. Returns the
/// flow's result and the jobs' phases added up ([`Phases::add`]; `total` is the whole run).
///
/// The run is the flow's alone: events posted to `rt` from other threads during it may be
/// left for the next run.
pub fn run_flow<R: Send + 'static>(rt: &Runtime, first: Stage<R>) -> Result<(R, Phases), Error> {
    if ochre::current_worker().is_some() {
        return Err(Error::Runtime(ochre::Error::AlreadyRunning));
    }
    let shared = Arc::new(FlowShared::default());
    let handle = rt.handle();
    let workers = handle.workers();
    let lane_colors = [
        spread_colors(&handle, LANE_BASE, workers),
        spread_colors(&handle, LANE_BASE + (1 << 20), workers),
    ];
    for &c in lane_colors.iter().flatten() {
        // Sent before the lanes' first posts, into the same inboxes: in force before they run.
        handle.pin(c)?;
    }
    let flow = Arc::new(FlowCtx {
        lane_colors,
        jobs: AtomicUsize::new(0),
        handle,
        shared: shared.clone(),
        phases: Mutex::new(Phases::default()),
    });
    let result = Arc::new(Mutex::new(None));
    let started = first.launch.launch(&flow, &result);
    let run = started.and_then(|(color, event)| rt.run(color, event).map_err(Error::from));
    let outcome = match run {
        Err(e) => Err(e),
        Ok(report) => {
            if let Some(p) = report.panics.first() {
                Err(Error::Panicked(p.message.clone()))
            } else if let Some(f) = lock(&shared.failure).take() {
                Err(Error::Incomplete(f))
            } else {
                match lock(&result).take() {
                    Some((r, mut phases)) => {
                        phases.total = report.elapsed;
                        Ok((r, phases))
                    }
                    None => Err(Error::Incomplete(format!(
                        "the run ended ({:?}) without output",
                        report.end
                    ))),
                }
            }
        }
    };
    if outcome.is_err() {
        // Events of the flow left queued (lanes posted before a failed start, a run aborted
        // by a panic) would finish a job in a later run, and end that run: make them do
        // nothing.
        shared.cancelled.store(true, Ordering::Release);
    }
    outcome
}

/// The default chunk size for `input` bytes over `workers` lanes (see [`Job::chunk_bytes`]).
fn default_chunk(input: usize, workers: usize) -> usize {
    if input == 0 {
        return DEFAULT_CHUNK;
    }
    (input / (workers * TASKS_PER_LANE).max(1)).clamp(MIN_CHUNK, DEFAULT_CHUNK)
}

/// `n` colors from `base` on, color `i` homed on worker `i % homes`, so that lanes and reduce
/// partitions are spread evenly over the workers that home colors (homes are a hash of the
/// color, or of its run of eight consecutive colors from `Color(64)` on; with more workers than
/// CPUs only the first `homes` are homes: `Handle::homes`).
fn spread_colors(rt: &ochre::Handle, base: u64, n: usize) -> Vec<Color> {
    let workers = rt.homes();
    let need = n.div_ceil(workers);
    let mut by_home: Vec<Vec<Color>> = vec![Vec::with_capacity(need); workers];
    let mut missing = workers * need;
    // Homes spread colors evenly: a few times `n` candidates fill every worker's list.
    for j in 0..(1u64 << 20) {
        if missing == 0 {
            break;
        }
        let c = Color(base + j);
        let list = &mut by_home[rt.home_of(c)];
        if list.len() < need {
            list.push(c);
            missing -= 1;
        }
    }
    (0..n)
        .map(|i| by_home[i % workers].get(i / workers).copied().unwrap_or(Color(base + i as u64)))
        .collect()
}

/// `State::lane_state`: the lane's first event has not run yet.
const LANE_WAITING: u8 = 0;
/// `State::lane_state`: the lane's first event ran; the lane ends in its own `finish_lane`.
const LANE_STARTED: u8 = 1;
/// `State::lane_state`: another lane found every task claimed before this one started, and
/// counted it finished, with nothing mapped; its events, when they run, do nothing.
const LANE_RETIRED: u8 = 2;

/// Indices of `State::marks`: when each phase ended, in nanoseconds from the job's start.
const SPLIT: usize = 0;
const MAP: usize = 1;
const REDUCE: usize = 2;
const MERGE: usize = 3;

/// A sorted (or, unsorted jobs, any) run of reduced pairs.
type Run<P> = Vec<(<P as MapReduce>::Key, <P as MapReduce>::Value)>;

/// A lane's pairs for one reduce partition, placed for the partition's worker.
type Handed<P> = ColorVec<(<P as MapReduce>::Key, <P as MapReduce>::Value)>;

/// A lane's state, owned by the lane's color.
struct Lane<P: MapReduce> {
    store: Option<Store<P::Key, P::Value>>,
    emitted: u64,
    /// Map tasks this lane claimed and mapped.
    tasks: u64,
}

/// Where a lane's state lives (see `State::lanes`).
type LaneBox<P> = ColorBox<Lined<Lane<P>>>;

/// A value on cache lines of its own (64 bytes: the largest alignment EMA's classes serve;
/// `CachePadded`'s 128 would send the value to the global allocator).
#[repr(align(64))]
struct Lined<T>(T);

impl<T> std::ops::Deref for Lined<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Lined<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// Everything the events of one job share.
struct State<P: MapReduce> {
    app: Arc<P>,
    container: Container,
    sorted: bool,
    start: Instant,
    lane_colors: Vec<Color>,
    reduce_colors: Vec<Color>,
    /// Set once by the split event, before any lane runs.
    splits: OnceLock<Vec<P::Split>>,
    next_task: AtomicUsize,
    /// Each lane's state, made by the lane's first event: a [`ColorBox`] placed by EMA for the
    /// lane's worker (the thesis's Phoenix kept its intermediate buffers in EMA this way), and
    /// on lines of its own, so that a lane's container header (written at each new key) never
    /// shares a cache line with another lane's, EMA on or off.
    lanes: Vec<ColorCell<Option<LaneBox<P>>>>,
    /// What every job of the run shares: cancellation and the first failure.
    flow: Arc<FlowShared>,
    /// Per lane, [`LANE_WAITING`] until its first event starts it ([`LANE_STARTED`]), or
    /// [`LANE_RETIRED`] by a lane that found no task left first (`finish_lane`).
    lane_state: Vec<AtomicU8>,
    lanes_left: AtomicUsize,
    lanes_placed: AtomicUsize,
    lanes_retired: AtomicUsize,
    /// Per reduce partition, the runs the lanes handed it.
    runs: Vec<Mutex<Vec<Handed<P>>>>,
    /// Per reduce partition, whether an event took it (`reduce`).
    reduce_taken: Vec<AtomicBool>,
    reduce_left: AtomicUsize,
    /// Merge tree: `widths[l]` nodes at level `l` (level 0: the partitions); `slots[l][i]`
    /// holds the first child run to reach node `i` of level `l + 1`.
    widths: Vec<usize>,
    slots: Vec<Vec<Mutex<Option<Run<P>>>>>,
    marks: [AtomicU64; 4],
    emitted: AtomicU64,
    intermediate: AtomicU64,
    intermediate_placed: AtomicU64,
    /// The most map tasks one lane mapped.
    busiest: AtomicU64,
    /// What the event that merges the root does with the output: the stage's step (start the
    /// next job of the run, or end the run with the result). Taken once.
    then: Mutex<Option<Then<P>>>,
}

/// A job's continuation: gets the job's output in the event that merged it.
type Then<P> = Box<dyn FnOnce(Output<<P as MapReduce>::Key, <P as MapReduce>::Value>) + Send>;

/// What all the jobs of one run share (a flow of chained jobs, or one job).
#[derive(Default)]
struct FlowShared {
    /// Set when the run could not start or ended without the result: the jobs' events still
    /// queued (posted lanes, reduce events of a run aborted by a panic) then do nothing.
    cancelled: AtomicBool,
    /// The first internal failure; the run then ends without a result.
    failure: Mutex<Option<String>>,
}

impl<P: MapReduce> State<P> {
    fn new(
        app: Arc<P>,
        container: Container,
        sorted: bool,
        lane_colors: Vec<Color>,
        reduce_colors: Vec<Color>,
        flow: Arc<FlowShared>,
        then: Then<P>,
    ) -> Self {
        let mut widths = vec![reduce_colors.len()];
        while let Some(&w) = widths.last().filter(|&&w| w > 1) {
            widths.push(w.div_ceil(2));
        }
        let slots =
            widths[1..].iter().map(|&w| (0..w).map(|_| Mutex::new(None)).collect()).collect();
        State {
            container,
            sorted,
            start: Instant::now(),
            lanes: lane_colors.iter().map(|&c| ColorCell::new(c, None)).collect(),
            flow,
            lane_state: lane_colors.iter().map(|_| AtomicU8::new(LANE_WAITING)).collect(),
            lanes_left: AtomicUsize::new(lane_colors.len()),
            lanes_placed: AtomicUsize::new(0),
            lanes_retired: AtomicUsize::new(0),
            runs: reduce_colors.iter().map(|_| Mutex::new(Vec::new())).collect(),
            reduce_taken: reduce_colors.iter().map(|_| AtomicBool::new(false)).collect(),
            reduce_left: AtomicUsize::new(reduce_colors.len()),
            lane_colors,
            reduce_colors,
            splits: OnceLock::new(),
            next_task: AtomicUsize::new(0),
            widths,
            slots,
            marks: Default::default(),
            emitted: AtomicU64::new(0),
            intermediate: AtomicU64::new(0),
            intermediate_placed: AtomicU64::new(0),
            busiest: AtomicU64::new(0),
            then: Mutex::new(Some(then)),
            app,
        }
    }

    fn mark(&self, phase: usize) {
        self.marks[phase].store(self.start.elapsed().as_nanos() as u64, Ordering::Release);
    }

    /// Records an internal failure; the job then ends without output and reports it.
    #[cold]
    fn fail(&self, what: String) {
        self.flow.fail(what);
    }

    /// The job's phases from its marks (`total`: from its creation to its merged output).
    fn phases(&self) -> Phases {
        let t = |i: usize| Duration::from_nanos(self.marks[i].load(Ordering::Acquire));
        Phases {
            split: t(SPLIT),
            map: t(MAP).saturating_sub(t(SPLIT)),
            reduce: t(REDUCE).saturating_sub(t(MAP)),
            merge: t(MERGE).saturating_sub(t(REDUCE)),
            total: t(MERGE),
            map_tasks: self.splits.get().map_or(0, Vec::len),
            lanes: self.lane_colors.len(),
            lanes_placed: self.lanes_placed.load(Ordering::Relaxed),
            lanes_retired: self.lanes_retired.load(Ordering::Relaxed),
            reduce_tasks: self.reduce_colors.len(),
            jobs: 1,
            busiest_lane_tasks: self.busiest.load(Ordering::Relaxed) as usize,
            emitted: self.emitted.load(Ordering::Relaxed),
            intermediate: self.intermediate.load(Ordering::Relaxed),
            intermediate_placed: self.intermediate_placed.load(Ordering::Relaxed),
        }
    }

    /// The reduce partition of `key`: by its dense index when it has one (neighbouring keys
    /// together), else by its hash.
    fn partition(&self, key: &P::Key) -> usize {
        let parts = self.reduce_colors.len();
        if let Container::Dense(n) = self.container {
            if let Some(i) = self.app.key_index(key).filter(|&i| i < n) {
                return i * parts / n;
            }
        }
        // Bits 24..56 of the hash, scaled to `parts`: not its top 7 bits, which are the tags
        // hashbrown compares before the keys (the reduce event combines a partition's keys in
        // a hash table: with partitions cut on the top bits, its tags would vary in 4 bits
        // instead of 7, and more probes would compare whole keys), nor its low bits, the
        // table's bucket index.
        let mid = (hash_of(key) >> 24) as u32;
        ((u64::from(mid) * parts as u64) >> 32) as usize
    }
}

/// A lock that a panic elsewhere does not make unusable (the data is runs of pairs, whole or
/// not yet there; a panicking handler aborts the job anyway).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Phase 2, events of a lane's color: claim a map task, map it, post the next step; with no
/// task left, partition.
fn lane_step<P: MapReduce>(s: Arc<State<P>>, lane: usize) {
    if s.flow.cancelled.load(Ordering::Acquire) {
        return;
    }
    // A lane whose worker could not run it before the tasks ran out (its CPU given to another
    // process for a time slice, milliseconds) was retired: the job did not wait for it.
    let state = &s.lane_state[lane];
    if state.load(Ordering::Relaxed) != LANE_STARTED
        && state
            .compare_exchange(LANE_WAITING, LANE_STARTED, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let Some(splits) = s.splits.get() else {
        return s.fail("a lane ran before the split".into());
    };
    let split = splits.get(s.next_task.fetch_add(1, Ordering::Relaxed));
    let (app, container) = (&*s.app, s.container);
    let color = s.lane_colors[lane];
    let opened = s.lanes[lane].with(|boxed| {
        // Made on the lane's worker, in its first event: EMA places it for this worker.
        let l: &mut Lane<P> = boxed.get_or_insert_with(|| {
            let b = ColorBox::new(color, Lined(Lane { store: None, emitted: 0, tasks: 0 }));
            if ColorBox::is_placed(&b) {
                s.lanes_placed.fetch_add(1, Ordering::Relaxed);
            }
            b
        });
        if let Some(split) = split {
            let store = l.store.take().unwrap_or_else(|| Store::new(container));
            let mut out = Emitter::new(app, store);
            app.map(split, &mut out);
            let (store, emitted) = out.into_parts();
            l.store = Some(store);
            l.emitted += emitted;
            l.tasks += 1;
        }
    });
    if let Err(e) = opened {
        return s.fail(format!("lane {lane}: {e}"));
    }
    match split {
        Some(_) => ochre::post(color, move || lane_step(s, lane)),
        None => finish_lane(s, lane),
    }
}

/// Phase 3, a lane's last event: cut its container into the partitions' runs, retire the lanes
/// that have not started (every task is claimed: they would map nothing); the last lane to
/// finish posts the reduce events.
fn finish_lane<P: MapReduce>(s: Arc<State<P>>, lane: usize) {
    let taken = s.lanes[lane]
        .with(|l| l.as_mut().map_or((None, 0, 0), |l| (l.store.take(), l.emitted, l.tasks)));
    let (store, emitted, tasks) = match taken {
        Ok(t) => t,
        Err(e) => return s.fail(format!("lane {lane}: {e}")),
    };
    s.emitted.fetch_add(emitted, Ordering::Relaxed);
    s.busiest.fetch_max(tasks, Ordering::Relaxed);
    // Each partition's run in slabs EMA places for the partition's worker (`ColorVec`).
    let mut parts: Vec<Handed<P>> = s.reduce_colors.iter().map(|&c| ColorVec::new(c)).collect();
    if let Some(store) = store {
        store.drain_into(|pair| parts[s.partition(&pair.0)].push(pair));
    }
    let pairs: usize = parts.iter().map(ColorVec::len).sum();
    s.intermediate.fetch_add(pairs as u64, Ordering::Relaxed);
    let placed: usize = parts.iter().filter(|r| r.is_placed()).map(ColorVec::len).sum();
    s.intermediate_placed.fetch_add(placed as u64, Ordering::Relaxed);
    for (p, run) in parts.into_iter().enumerate() {
        if !run.is_empty() {
            lock(&s.runs[p]).push(run);
        }
    }
    // A lane not started yet waits for its worker, whose CPU may be another process's for
    // a time slice (3-5 ms here): a job of a millisecond, with one CPU shared, waited for it
    // in most runs (`bench mr --quick` beside a busy thread: matrix multiply 258 jobs/s at
    // two workers against 6.8K at one). Retired, it counts as finished with nothing to hand.
    let retired = (0..s.lane_state.len())
        .filter(|&l| {
            l != lane
                && s.lane_state[l]
                    .compare_exchange(
                        LANE_WAITING,
                        LANE_RETIRED,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_ok()
        })
        .count();
    if retired > 0 {
        s.lanes_retired.fetch_add(retired, Ordering::Relaxed);
    }
    // AcqRel: the last lane sees every other lane's runs (also published under the locks).
    if s.lanes_left.fetch_sub(1 + retired, Ordering::AcqRel) == 1 + retired {
        s.mark(MAP);
        if s.intermediate.load(Ordering::Relaxed) <= INLINE_REDUCE_PAIRS {
            // Few pairs (K-means' sums, a histogram): reducing them all here costs less than
            // handing partitions to other workers, which may have gone to sleep meanwhile.
            for p in 0..s.reduce_colors.len() {
                reduce(s.clone(), p);
            }
            return;
        }
        for p in 0..s.reduce_colors.len() {
            let s2 = s.clone();
            ochre::post(s.reduce_colors[p], move || reduce(s2, p));
        }
    }
}

/// Phase 4, one event per partition, homed round robin over the workers: takes its partition
/// unless an event took it already, then the partitions no event took yet, those homed on its
/// worker first. A worker whose CPU another process holds for a time slice does not keep the
/// job waiting for its partitions: the other workers take them, and its events, when they
/// run, find nothing left.
fn reduce<P: MapReduce>(s: Arc<State<P>>, part: usize) {
    if s.flow.cancelled.load(Ordering::Acquire) {
        return;
    }
    let (parts, workers) = (s.reduce_colors.len(), s.lane_colors.len().max(1));
    let mine = (0..parts).filter(|q| q % workers == part % workers);
    for p in std::iter::once(part).chain(mine).chain(0..parts) {
        if !s.reduce_taken[p].load(Ordering::Relaxed)
            && !s.reduce_taken[p].swap(true, Ordering::Relaxed)
        {
            reduce_partition(&s, p);
        }
    }
}

/// Combines the lanes' runs of partition `part`, reduces each key, sorts, and sends the run up
/// the merge tree.
fn reduce_partition<P: MapReduce>(s: &State<P>, part: usize) {
    let mut runs = std::mem::take(&mut *lock(&s.runs[part]));
    let app = &*s.app;
    // Each lane's run holds a key at most once (a store's invariant), so one run is already
    // combined; several are combined in a hash table, then only the distinct keys are sorted
    // (sorting every lane's pairs, then folding equal neighbours, cost word count 2.4x the
    // instructions: each word is in both lanes' runs, and comparing two words calls memcmp).
    let mut combined: Run<P> = if runs.len() <= 1 {
        runs.iter_mut().flat_map(ColorVec::drain).collect()
    } else if s.sorted && matches!(s.container, Container::Dense(_)) {
        // A dense store hands its pairs over in slot order, and partitions are ranges of slots,
        // so when the keys sort like their slots (histogram buckets, matrix rows, PCA's rows)
        // every run arrives sorted: merging them costs a comparison per pair, where the hash
        // table and the sort below cost PCA's covariance job 4% of its instructions when it
        // emitted a pair per cell.
        let runs: Vec<Run<P>> = runs.iter_mut().map(|r| r.drain().collect()).collect();
        if runs.iter().all(|r| r.is_sorted_by(|a, b| a.0 < b.0)) {
            runs.into_iter().reduce(|a, b| merge_combining(app, a, b)).unwrap_or_default()
        } else {
            combine_all(app, runs.into_iter().flatten(), 0)
        }
    } else {
        let largest = runs.iter().map(ColorVec::len).max().unwrap_or(0);
        combine_all(app, runs.iter_mut().flat_map(ColorVec::drain), largest)
    };
    if s.sorted {
        combined.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    }
    let run: Run<P> = combined
        .into_iter()
        .map(|(k, v)| {
            let v = app.reduce(&k, v);
            (k, v)
        })
        .collect();
    if s.reduce_left.fetch_sub(1, Ordering::AcqRel) == 1 {
        s.mark(REDUCE);
    }
    merge_up(s, part, run);
}

/// The pairs of `pairs` with the values of equal keys combined, in no particular order
/// (`capacity`: the distinct keys expected).
fn combine_all<P: MapReduce>(
    app: &P,
    pairs: impl Iterator<Item = (P::Key, P::Value)>,
    capacity: usize,
) -> Run<P> {
    let mut map = rustc_hash::FxHashMap::with_capacity_and_hasher(capacity, Default::default());
    for (k, v) in pairs {
        combine_into(app, &mut map, k, v);
    }
    map.into_iter().collect()
}

/// Merges two runs each sorted by key with distinct keys into one, combining the values of a
/// key present in both.
fn merge_combining<P: MapReduce>(app: &P, left: Run<P>, right: Run<P>) -> Run<P> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut a, mut b) = (left.into_iter().peekable(), right.into_iter().peekable());
    loop {
        let order = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => x.0.cmp(&y.0),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => break,
        };
        match order {
            std::cmp::Ordering::Less => out.extend(a.next()),
            std::cmp::Ordering::Greater => out.extend(b.next()),
            std::cmp::Ordering::Equal => {
                if let (Some((k, mut v)), Some((_, w))) = (a.next(), b.next()) {
                    app.combine(&mut v, w);
                    out.push((k, v));
                }
            }
        }
    }
    out
}

/// Phase 5: carries `run`, the result of node `idx` of level 0, up the merge tree as far as
/// it is the second child to arrive; publishes the root.
fn merge_up<P: MapReduce>(s: &State<P>, mut idx: usize, mut run: Run<P>) {
    let mut level = 0;
    while s.widths[level] > 1 {
        let sibling = idx ^ 1;
        if sibling < s.widths[level] {
            let first = {
                let mut slot = lock(&s.slots[level][idx / 2]);
                match slot.take() {
                    None => {
                        *slot = Some(run);
                        return;
                    }
                    Some(first) => first,
                }
            };
            run =
                if idx < sibling { join(s.sorted, run, first) } else { join(s.sorted, first, run) };
        }
        level += 1;
        idx /= 2;
    }
    s.mark(MERGE);
    // Every other event of the job has run: this one hands the output to the stage's step,
    // which starts the next job or ends the run.
    match lock(&s.then).take() {
        Some(then) => then(Output { pairs: run, phases: s.phases() }),
        None => s.fail("the output was merged twice".into()),
    }
}

/// Merges two runs sorted by key (keys of two partitions are distinct), or concatenates them.
fn join<K: Ord, V>(sorted: bool, left: Vec<(K, V)>, right: Vec<(K, V)>) -> Vec<(K, V)> {
    if !sorted {
        let (mut big, small) =
            if left.len() >= right.len() { (left, right) } else { (right, left) };
        big.extend(small);
        return big;
    }
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut a, mut b) = (left.into_iter().peekable(), right.into_iter().peekable());
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => x.0 <= y.0,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        out.extend(if take_a { a.next() } else { b.next() });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_merges_sorted_runs_and_concatenates_unsorted_ones() {
        let l = vec![(1, 'a'), (4, 'b'), (9, 'c')];
        let r = vec![(2, 'x'), (3, 'y'), (10, 'z')];
        let keys: Vec<i32> = join(true, l.clone(), r.clone()).into_iter().map(|p| p.0).collect();
        assert_eq!(keys, vec![1, 2, 3, 4, 9, 10]);
        assert_eq!(join(false, l, r).len(), 6);
        assert_eq!(join::<i32, ()>(true, vec![], vec![]), vec![]);
    }

    /// Adds values; nothing to map.
    struct Sum;
    impl MapReduce for Sum {
        type Split = ();
        type Key = u32;
        type Value = u64;
        fn split(&self, _: usize) -> Vec<()> {
            Vec::new()
        }
        fn map(&self, _: &(), _: &mut Emitter<'_, Self>) {}
        fn combine(&self, acc: &mut u64, value: u64) {
            *acc += value;
        }
    }

    #[test]
    fn merging_sorted_runs_combines_the_keys_both_hold() {
        let merged = merge_combining(&Sum, vec![(1, 1), (3, 10), (5, 100)], vec![(2, 2), (3, 20)]);
        assert_eq!(merged, vec![(1, 1), (2, 2), (3, 30), (5, 100)]);
        assert_eq!(merge_combining(&Sum, vec![], vec![(4, 4)]), vec![(4, 4)]);
        let mut all = combine_all(&Sum, [(7, 1), (8, 2), (7, 3)].into_iter(), 0);
        all.sort_unstable();
        assert_eq!(all, vec![(7, 4), (8, 2)]);
    }

    #[test]
    fn byte_ranges_cover_the_input_once() {
        assert_eq!(byte_ranges(10, 4), vec![0..4, 4..8, 8..10]);
        assert!(byte_ranges(0, 4).is_empty());
        assert_eq!(byte_ranges(3, 0), vec![0..1, 1..2, 2..3]);
    }

    #[test]
    fn default_chunks_give_every_lane_tasks_within_bounds() {
        assert_eq!(default_chunk(0, 2), DEFAULT_CHUNK);
        assert_eq!(default_chunk(1 << 30, 2), DEFAULT_CHUNK);
        assert_eq!(default_chunk(1 << 20, 2), 32 << 10); // 32 tasks of 32 KiB
        assert_eq!(default_chunk(1000, 2), MIN_CHUNK);
    }
}
