//! Stress test of the runtime's guarantees with many more workers than cores.
//!
//! A random workload of events that post more events (to their own color, to random colors, urgent
//! or not) and outside threads that post through handles, under several configurations (stealing
//! off and on, batched and libasync-smp transport, tiny batches and turns to multiply interleavings,
//! a shutdown in the middle). An oracle checks:
//!
//! 1. exclusion: a per-color in-use flag, set and cleared by every event of that color;
//! 2. order: per (poster, color) sequence numbers, for normal and for urgent posts separately, where
//!    the poster is one event, and again where it is the posting event's color (an actor's
//!    messages to another arrive in order, across moves and loans of either);
//! 3. exactly once: every event id that was posted runs once, none twice, none lost (also across a
//!    shutdown and the run that drains what it left).
//!
//! The workload is seeded: `OCHRE_STRESS_SEED=<n>` replays the choices of a failing run (the seed is
//! printed in every failure message); `OCHRE_STRESS_EVENTS` scales its size.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ochre::{BatchSize, Color, Config, Handle, RunEnd, Runtime, Spin, Steal, Wakeup};

const MAX_IDS: usize = 1 << 20;

struct Oracle {
    seed: u64,
    colors: u64,
    in_use: Vec<AtomicBool>,
    runs: Vec<AtomicU8>,
    next_id: AtomicU64,
    budget: AtomicI64,
    /// Per color: (poster, urgent) -> last sequence number seen. Only touched by events of that
    /// color, so (if exclusion holds) never contended.
    last_seq: Vec<Mutex<HashMap<(u64, bool), u64>>>,
    /// Per color: (destination color, urgent) -> posts made so far by the color's events.
    color_sent: Vec<Mutex<HashMap<(u64, bool), u64>>>,
    /// Per color: (posting color, urgent) -> last sequence number seen.
    color_seen: Vec<Mutex<HashMap<(u64, bool), u64>>>,
    violations: Mutex<Vec<String>>,
    shutdown_after: Option<u64>,
    ran: AtomicU64,
    /// One event in this many (if any) blocks its worker for a while: a handler that sleeps, or
    /// a thread the kernel deschedules (stand-ins then route and lend for it).
    stall_every: Option<u64>,
    /// Events posted by events (the init event's roots included), and those of them that ran:
    /// a run that ends quiescent has run every one (outside posts may wait for the next run).
    posted_by_events: AtomicU64,
    ran_posted_by_events: AtomicU64,
}

impl Oracle {
    fn new(seed: u64, colors: u64, budget: i64, shutdown_after: Option<u64>) -> Arc<Oracle> {
        Arc::new(Oracle {
            seed,
            colors,
            in_use: (0..colors).map(|_| AtomicBool::new(false)).collect(),
            runs: (0..MAX_IDS).map(|_| AtomicU8::new(0)).collect(),
            next_id: AtomicU64::new(0),
            budget: AtomicI64::new(budget),
            last_seq: (0..colors).map(|_| Mutex::new(HashMap::new())).collect(),
            color_sent: (0..colors).map(|_| Mutex::new(HashMap::new())).collect(),
            color_seen: (0..colors).map(|_| Mutex::new(HashMap::new())).collect(),
            violations: Mutex::new(Vec::new()),
            shutdown_after,
            ran: AtomicU64::new(0),
            stall_every: None,
            posted_by_events: AtomicU64::new(0),
            ran_posted_by_events: AtomicU64::new(0),
        })
    }

    fn violation(&self, what: String) {
        let mut v = self.violations.lock().unwrap();
        if v.len() < 20 {
            v.push(what);
        }
    }

    fn new_id(&self) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        assert!((id as usize) < MAX_IDS, "stress workload exceeded its id space");
        id
    }
}

/// One event of the workload: who posted it, in what sequence, and its own id.
#[derive(Clone, Copy)]
struct Ev {
    id: u64,
    color: u64,
    poster: u64,
    seq: u64,
    urgent: bool,
    /// The posting event's color and the post's number among that color's posts to this color.
    by_color: Option<(u64, u64)>,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn run_event(o: &Arc<Oracle>, ev: Ev) {
    let c = ev.color as usize;
    if o.in_use[c].swap(true, Ordering::AcqRel) {
        o.violation(format!(
            "exclusion: color {} ran on two workers at once (event {})",
            ev.color, ev.id
        ));
    }
    if ochre::current_color() != Some(Color(ev.color)) {
        o.violation(format!(
            "current_color {:?} in an event of color {}",
            ochre::current_color(),
            ev.color
        ));
    }
    if ev.poster <= u64::MAX / 2 {
        o.ran_posted_by_events.fetch_add(1, Ordering::Relaxed);
    }
    let prev = o.runs[ev.id as usize].fetch_add(1, Ordering::Relaxed);
    if prev != 0 {
        o.violation(format!("exactly once: event {} ran {} times", ev.id, prev + 1));
    }
    {
        let mut last = o.last_seq[c].lock().unwrap();
        let key = (ev.poster, ev.urgent);
        if let Some(&l) = last.get(&key) {
            if ev.seq <= l {
                o.violation(format!(
                    "order: poster {} color {} urgent={} ran seq {} after {}",
                    ev.poster, ev.color, ev.urgent, ev.seq, l
                ));
            }
        }
        last.insert(key, ev.seq);
    }
    if let Some((pc, pseq)) = ev.by_color {
        let mut seen = o.color_seen[c].lock().unwrap();
        let key = (pc, ev.urgent);
        if let Some(&l) = seen.get(&key) {
            if pseq <= l {
                o.violation(format!(
                    "order per poster color: color {pc} to color {} urgent={} ran post {pseq} \
                     after {l}",
                    ev.color, ev.urgent
                ));
            }
        }
        seen.insert(key, pseq);
    }

    // Children, chosen by a generator seeded from (seed, id): the same seed, the same workload.
    let mut rng = splitmix(o.seed ^ ev.id.wrapping_mul(0x2545_f491_4f6c_dd1d));
    // Now and then a stream: many posts to one color from one event (a producer's loop), which
    // may move that color here in the middle of the event (`follow::stream`).
    let stream = (rng >> 20).is_multiple_of(32).then(|| (rng >> 8) % o.colors);
    let children = if stream.is_some() { 24 } else { rng % 4 };
    let mut seqs: HashMap<(u64, bool), u64> = HashMap::new();
    for _ in 0..children {
        if o.budget.fetch_sub(1, Ordering::Relaxed) <= 0 {
            break;
        }
        rng = splitmix(rng);
        let color = stream.unwrap_or(match rng % 10 {
            0..=2 => ev.color,                  // same color: local fast path
            3..=4 => (ev.color + 1) % o.colors, // a neighbour
            _ => (rng >> 8) % o.colors,         // anywhere: mostly another worker
        });
        let urgent = (rng >> 40).is_multiple_of(8);
        let seq = seqs.entry((color, urgent)).or_insert(0);
        *seq += 1;
        let pseq = {
            let mut sent = o.color_sent[c].lock().unwrap();
            let n = sent.entry((color, urgent)).or_insert(0);
            *n += 1;
            *n
        };
        o.posted_by_events.fetch_add(1, Ordering::Relaxed);
        let child = Ev {
            id: o.new_id(),
            color,
            poster: ev.id,
            seq: *seq,
            urgent,
            by_color: Some((ev.color, pseq)),
        };
        let o2 = o.clone();
        let f = move || run_event(&o2, child);
        if urgent {
            ochre::post_urgent(Color(color), f);
        } else {
            ochre::post(Color(color), f);
        }
    }
    // Sometimes give the CPU away mid-event, so that other workers interleave with this one.
    if rng.is_multiple_of(64) {
        std::thread::yield_now();
    }
    if o.stall_every.is_some_and(|k| (rng >> 16).is_multiple_of(k)) {
        std::thread::sleep(Duration::from_micros(300));
    }
    let n = o.ran.fetch_add(1, Ordering::Relaxed) + 1;
    if o.shutdown_after == Some(n) {
        ochre::shutdown();
    }
    o.in_use[c].store(false, Ordering::Release);
}

/// Outside thread number `t` posts `count` events through a handle.
fn outside_poster(o: Arc<Oracle>, handle: Handle, t: u64, count: u64) {
    let poster = u64::MAX - t; // Never an event id.
    let mut rng = splitmix(o.seed ^ poster);
    let mut seqs: HashMap<(u64, bool), u64> = HashMap::new();
    for _ in 0..count {
        rng = splitmix(rng);
        let color = rng % o.colors;
        let urgent = (rng >> 40).is_multiple_of(8);
        let seq = seqs.entry((color, urgent)).or_insert(0);
        *seq += 1;
        let ev = Ev { id: o.new_id(), color, poster, seq: *seq, urgent, by_color: None };
        let o2 = o.clone();
        let f = move || run_event(&o2, ev);
        let r = if urgent {
            handle.try_post_urgent(Color(color), f)
        } else {
            handle.try_post(Color(color), f)
        };
        r.expect("runtime open");
        if rng.is_multiple_of(16) {
            std::thread::yield_now();
        }
    }
}

fn seed() -> u64 {
    std::env::var("OCHRE_STRESS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        t.as_nanos() as u64
    })
}

fn events_budget() -> i64 {
    std::env::var("OCHRE_STRESS_EVENTS").ok().and_then(|s| s.parse().ok()).unwrap_or(40_000)
}

/// Runs the workload three times (three seeds unless one is given) on `colors` colors: thousands
/// spread colors over workers, a few dozen make hot colors that are stolen while others keep
/// posting to them (forwarding). Every worker homes colors and steals, as on a machine of as
/// many CPUs (`Config::home_on_every_worker`): the protocol between many workers is what these
/// tests stress; the default of a machine of fewer CPUs has its own test below.
fn stress(name: &str, workers: usize, config: Config, shutdown_after: Option<u64>) {
    stress_on(name, workers, config, None, shutdown_after);
}

/// [`stress`] with a synthetic topology (for locality-aware stealing), every worker a home.
fn stress_on(
    name: &str,
    workers: usize,
    config: Config,
    topology: Option<&str>,
    shutdown_after: Option<u64>,
) {
    let config = config.home_on_every_worker(true);
    for (i, colors) in [3000u64, 48, 3000].into_iter().enumerate() {
        let seed = seed().wrapping_add(i as u64);
        let (topology, stall) = (topology, None);
        stress_once(name, workers, config.clone(), topology, shutdown_after, stall, colors, seed);
    }
}

/// One run of the workload (and the runs that drain it); returns how many times workers stood
/// in for others (`Config::stand_in`).
#[allow(clippy::too_many_arguments)]
fn stress_once(
    name: &str,
    workers: usize,
    config: Config,
    topology: Option<&str>,
    shutdown_after: Option<u64>,
    stall_every: Option<u64>,
    colors: u64,
    seed: u64,
) -> u64 {
    let budget = events_budget();
    let mut o = Oracle::new(seed, colors, budget, shutdown_after);
    Arc::get_mut(&mut o).expect("not shared yet").stall_every = stall_every;
    let mut builder = Runtime::builder().workers(workers).config(config);
    if let Some(t) = topology {
        builder = builder.topology(ochre::topology::Topology::synthetic(t).unwrap());
    }
    let rt = builder.build().unwrap();
    let ctx = format!("[{name}, {colors} colors] seed {seed} (replay: OCHRE_STRESS_SEED={seed})");

    // Outside posters start with the run and race with it; what they post after it ends waits for
    // the next run.
    let posters: Vec<_> = (0..2)
        .map(|t| {
            let (o, h) = (o.clone(), rt.handle());
            std::thread::spawn(move || outside_poster(o, h, t, 2_000))
        })
        .collect();
    let roots = 64;
    let o2 = o.clone();
    let first = rt
        .run(Color(0), move || {
            // The init event is not tracked: it fans out tracked roots.
            for r in 0..roots {
                o2.posted_by_events.fetch_add(1, Ordering::Relaxed);
                let ev = Ev {
                    id: o2.new_id(),
                    color: (r * 37) % o2.colors,
                    poster: u64::MAX / 2,
                    seq: r + 1,
                    urgent: false,
                    by_color: None,
                };
                let o3 = o2.clone();
                ochre::post(Color(ev.color), move || run_event(&o3, ev));
            }
        })
        .unwrap_or_else(|e| panic!("{ctx}: run failed: {e}"));
    for p in posters {
        p.join().unwrap();
    }
    if shutdown_after.is_some() {
        assert_eq!(first.end, RunEnd::Shutdown, "{ctx}");
    } else {
        // Ended quiescent: every event an event posted ran in it (a run that ended with one
        // queued, held by a sleeper or in flight would be caught here, not by the drain below).
        assert_eq!(first.end, RunEnd::Quiescent, "{ctx}");
        let (posted, ran) = (&o.posted_by_events, &o.ran_posted_by_events);
        let (posted, ran) = (posted.load(Ordering::SeqCst), ran.load(Ordering::SeqCst));
        assert_eq!(ran, posted, "{ctx}: the first run ended with events posted by events left");
    }
    // Drain: whatever the first run left (shutdown) or outside threads posted after it ended.
    let mut runs = 1;
    loop {
        let report = rt.run(Color(1), || {}).unwrap_or_else(|e| panic!("{ctx}: drain failed: {e}"));
        runs += 1;
        if report.end == RunEnd::Quiescent && report.pending == 0 {
            break;
        }
        assert!(runs < 10, "{ctx}: runtime does not drain: {report:?}");
    }

    let violations = o.violations.lock().unwrap();
    assert!(
        violations.is_empty(),
        "{ctx}: {} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
    let posted = o.next_id.load(Ordering::Relaxed);
    let mut lost = vec![];
    for id in 0..posted {
        if o.runs[id as usize].load(Ordering::Relaxed) != 1 {
            lost.push(id);
        }
    }
    assert!(
        lost.is_empty(),
        "{ctx}: {} of {posted} events did not run exactly once, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    assert_eq!(o.ran.load(Ordering::Relaxed), posted, "{ctx}");
    assert!(posted as i64 >= budget / 2, "{ctx}: the workload was too small ({posted} events)");
    let stats: u64 = rt.stats().iter().map(|s| s.events_run).sum();
    assert_eq!(stats, posted + runs as u64, "{ctx}: counters disagree with the oracle");
    let t = rt.stats().iter().fold(ochre::WorkerStats::default(), |a, s| a.add(s));
    eprintln!(
        "{ctx}: {posted} events over {workers} workers in {runs} runs: ok (remote posts {}, \
         steals {}, forwards {}, urgent {}, sleeps {}, moved {}, given back {}, stood in {}, taken back by stand-ins {})",
        t.posts_remote,
        t.steals_in,
        t.forwards,
        t.posts_urgent,
        t.sleeps,
        t.colors_moved_in,
        t.colors_given_back,
        t.stood_in_for,
        t.stood_in_give_backs
    );
    t.stood_in_for
}

// Stand-ins (`Config::stand_in`): events that sleep 300 us keep their workers in a handler
// while posts to their colors and colors waiting there wait; idle workers stand in for them,
// route their inboxes and lend themselves their colors, on many more workers than cores (whose
// threads the kernel deschedules, in handlers and asleep, as a busy process would). The oracle
// checks exclusion, order and exactly-once across those loans, with and without a shutdown.
#[test]
fn stress_stand_ins_for_blocked_and_descheduled_workers() {
    let config = Config::default().steal(Steal::Backlog);
    let tiny = config.clone().batch_size(2).batch_sizing(BatchSize::Fixed).turn_budget(1);
    let mut stood = 0;
    for (i, (config, shutdown)) in
        [(config, None), (tiny.clone(), None), (tiny, Some(5_000))].into_iter().enumerate()
    {
        let seed = seed().wrapping_add(i as u64);
        let colors = [3000, 48, 3000][i];
        stood += stress_once("stand-ins", 12, config, None, shutdown, Some(48), colors, seed);
    }
    if !ochre::stand_ins_available() {
        eprintln!("no membarrier here: stand-ins are off, only the invariants were checked");
        return;
    }
    assert!(stood > 0, "no worker stood in for another in three runs of blocked handlers");
}

// More workers than CPUs with the default placement (on a machine of fewer than 16 CPUs): colors
// homed on as many workers as there are CPUs, the others standing by (`Config::
// home_on_every_worker`); follow's moves, stealing among the homes and stand-ins for blocked
// handlers carry colors to the standbys and back.
#[test]
fn stress_more_workers_than_cpus_with_homes_on_the_cpus() {
    let config = Config::default().steal(Steal::Plain);
    for (i, colors) in [3000u64, 48].into_iter().enumerate() {
        let seed = seed().wrapping_add(i as u64);
        stress_once("homes on the CPUs", 16, config.clone(), None, None, Some(48), colors, seed);
    }
}

#[test]
fn stress_default_no_stealing() {
    stress("default", 16, Config::default(), None);
}

#[test]
fn stress_default_plain_stealing() {
    stress("default+steal", 16, Config::default().steal(Steal::Plain), None);
}

#[test]
fn stress_baseline_libasync_smp() {
    stress("baseline", 16, Config::baseline(), None);
}

#[test]
fn stress_baseline_without_stealing() {
    stress("baseline-nosteal", 17, Config::baseline().steal(Steal::Off), None);
}

#[test]
fn stress_tiny_batches_and_turns_with_stealing() {
    let config = Config::default()
        .steal(Steal::Plain)
        .batch_size(2)
        .batch_sizing(BatchSize::Fixed)
        .turn_budget(1)
        .round_budget(3);
    stress("tiny", 24, config, None);
}

#[test]
fn stress_condvar_and_spinning() {
    let config = Config::default()
        .wakeup(Wakeup::Condvar)
        .spin(Spin::Always { limit: Duration::from_micros(50) })
        .steal(Steal::Plain);
    stress("condvar+spin", 16, config, None);
}

#[test]
fn stress_pipe_wakeups_with_batching_and_stealing() {
    let config = Config::default().wakeup(Wakeup::Pipe).steal(Steal::Plain);
    stress("pipe", 16, config, None);
}

#[test]
fn stress_shutdown_in_the_middle_loses_nothing() {
    stress("shutdown", 16, Config::default().steal(Steal::Plain), Some(5_000));
}

#[test]
fn stress_baseline_shutdown_in_the_middle_loses_nothing() {
    stress("baseline-shutdown", 16, Config::baseline(), Some(5_000));
}

#[test]
fn stress_batch_stealing() {
    stress("steal-batch", 16, Config::default().steal(Steal::Plain).steal_batch(true), None);
}

#[test]
fn stress_every_stealing_heuristic_on_a_two_node_sixteen_core_topology() {
    let config = Config::default()
        .stealing_heuristics()
        .batch_size(4)
        .batch_sizing(BatchSize::Fixed)
        .turn_budget(2);
    stress_on("heuristics", 16, config, Some("numa:2 l3:1 l2:4 core:2"), None);
}

#[test]
fn stress_heuristics_with_a_shutdown_in_the_middle() {
    let config = Config::default().stealing_heuristics();
    stress_on("heuristics-shutdown", 16, config, Some("numa:2 core:8"), Some(5_000));
}

// Colors that follow their messages move between workers under traffic (as residents, given
// back, stolen meanwhile): the same oracle checks exclusion, order and exactly-once across moves.

#[test]
fn stress_backlog_stealing_with_follow() {
    stress("backlog", 16, Config::default().steal(Steal::Backlog), None);
}

#[test]
fn stress_backlog_stealing_with_a_shutdown_in_the_middle() {
    let config = Config::default()
        .steal(Steal::Backlog)
        .batch_size(2)
        .batch_sizing(BatchSize::Fixed)
        .turn_budget(1);
    stress("backlog+shutdown", 17, config, Some(5_000));
}

// Tuned batch sizes (`BatchSize::Adaptive`) move with traffic; from the smallest tuned size (8)
// they grow and shrink under the same oracle, with the tuned spin threshold.
#[test]
fn stress_tuned_batch_sizes_from_the_smallest() {
    let config = Config::default()
        .steal(Steal::Plain)
        .batch_size(8)
        .batch_sizing(BatchSize::Adaptive)
        .spin(Spin::Adaptive)
        .turn_budget(1);
    stress("tuned-batches", 16, config, None);
}

#[test]
fn stress_follow_with_stealing() {
    stress("follow+steal", 16, Config::default().follow(true).steal(Steal::Plain), None);
}

#[test]
fn stress_follow_with_tiny_batches_and_turns() {
    let config = Config::default()
        .follow(true)
        .steal(Steal::Plain)
        .steal_batch(true)
        .batch_size(2)
        .batch_sizing(BatchSize::Fixed)
        .turn_budget(1)
        .round_budget(3);
    stress("follow+tiny", 24, config, None);
}

#[test]
fn stress_follow_with_a_shutdown_in_the_middle() {
    stress("follow+shutdown", 16, Config::default().follow(true).steal(Steal::Plain), Some(5_000));
}

#[test]
fn stress_workers_sleeping_through_run_ends() {
    // Every idle worker sleeps at once and through the ends of runs (`run_end`), on any CPU.
    let config = Config::default().sleep_through_any_cpu(true).spin(Spin::Never);
    stress("sleep-through", 16, config, None);
}

#[test]
fn stress_workers_sleeping_through_run_ends_with_a_shutdown_in_the_middle() {
    let config = Config::default().sleep_through_any_cpu(true).spin(Spin::Never);
    stress("sleep-through+shutdown", 16, config, Some(5_000));
}
