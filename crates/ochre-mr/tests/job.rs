//! The job engine on a toy application (numbers modulo a key count), across containers, chunk
//! sizes, reduce counts and worker counts: the output equals a sequential fold, whatever the
//! schedule; empty inputs and panicking maps end cleanly; flows of chained jobs run in order in one run.

use std::ops::Range;

use ochre::Runtime;
use ochre_mr::{run_flow, Container, Emitter, Error, Flow, Job, MapReduce, Stage};

/// Sums, per key `x % keys`, the numbers `x` of the input; keys `>= dense` have no index.
struct ModSum {
    numbers: Vec<u64>,
    keys: u64,
    dense: usize,
    panic_at: Option<u64>,
}

impl MapReduce for ModSum {
    type Split = Range<usize>;
    type Key = u64;
    type Value = (u64, u64); // (sum, count)

    fn split(&self, chunk_bytes: usize) -> Vec<Range<usize>> {
        ochre_mr::byte_ranges(self.numbers.len(), chunk_bytes / 8)
    }

    fn input_bytes(&self) -> usize {
        self.numbers.len() * 8
    }

    fn map(&self, split: &Range<usize>, out: &mut Emitter<'_, Self>) {
        for &x in &self.numbers[split.clone()] {
            if Some(x) == self.panic_at {
                panic!("bad record {x}");
            }
            out.emit(x % self.keys, (x, 1));
        }
    }

    fn combine(&self, acc: &mut (u64, u64), v: (u64, u64)) {
        acc.0 += v.0;
        acc.1 += v.1;
    }

    fn reduce(&self, key: &u64, v: (u64, u64)) -> (u64, u64) {
        (v.0 + key * 1_000_000_000, v.1)
    }

    fn key_index(&self, key: &u64) -> Option<usize> {
        Some(*key as usize).filter(|&k| k < self.dense)
    }
}

fn app(n: u64, keys: u64) -> ModSum {
    ModSum { numbers: (0..n).map(|i| i * 7919 % 100_003).collect(), keys, dense: 0, panic_at: None }
}

fn expected(a: &ModSum) -> Vec<(u64, (u64, u64))> {
    let mut m = std::collections::BTreeMap::new();
    for &x in &a.numbers {
        let e = m.entry(x % a.keys).or_insert((0, 0));
        e.0 += x;
        e.1 += 1;
    }
    m.into_iter().map(|(k, (s, c))| (k, (s + k * 1_000_000_000, c))).collect()
}

#[test]
fn every_container_gives_the_sequential_result() {
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    for (keys, container, dense) in [
        (1000, Container::Hash, 0),
        (1000, Container::Dense(1000), 1000),
        (1000, Container::Dense(600), 1000), // keys 600.. spill to the side table
        (1000, Container::Dense(1000), 300), // keys 300.. have no index
        (5, Container::Fixed, 0),
    ] {
        let make = || ModSum { dense, ..app(50_000, keys) };
        let want = expected(&make());
        for (chunk, reduces) in [(800, 1), (8000, 3), (1 << 20, 8)] {
            let out = Job::new(make())
                .container(container)
                .chunk_bytes(chunk)
                .reduce_tasks(reduces)
                .run_on(&rt)
                .unwrap();
            assert_eq!(out.pairs, want, "{container:?} chunk {chunk} reduces {reduces}");
            assert_eq!(out.phases.emitted, 50_000);
            assert_eq!(out.phases.reduce_tasks, reduces);
            assert_eq!(out.phases.map_tasks, 50_000usize.div_ceil(chunk / 8));
            // Each of the 2 lanes holds at most one value per key.
            assert!(out.phases.intermediate <= 2 * keys, "{}", out.phases.line());
        }
    }
}

#[test]
fn unsorted_output_has_the_same_pairs() {
    let rt = Runtime::builder().workers(3).pin(false).build().unwrap();
    let a = app(20_000, 777);
    let want = expected(&a);
    let mut got = Job::new(a).sorted(false).chunk_bytes(4000).run_on(&rt).unwrap().pairs;
    got.sort();
    assert_eq!(got, want);
}

#[test]
fn one_worker_and_many_workers_agree() {
    for workers in [1, 5] {
        let a = app(30_000, 300);
        let want = expected(&a);
        let out = Job::new(a).workers(workers).pin(false).chunk_bytes(2000).run().unwrap();
        assert_eq!(out.pairs, want, "{workers} workers");
        assert_eq!(out.phases.lanes, workers);
    }
}

#[test]
fn lane_state_is_placed_by_ema_when_the_runtime_has_it() {
    for (config, placed) in [(ochre::Config::default(), 2), (ochre::Config::baseline(), 0)] {
        let out = Job::new(app(5_000, 10)).workers(2).pin(false).config(config).run().unwrap();
        // A lane retired before it started (its worker still waking when the other had claimed
        // every task) made no state.
        let p = &out.phases;
        assert_eq!(p.lanes_placed, placed - placed.min(p.lanes_retired), "{}", p.line());
        assert_eq!(out.pairs, expected(&app(5_000, 10)));
    }
}

#[test]
fn an_empty_input_gives_an_empty_output() {
    let out = Job::new(app(0, 10)).workers(2).pin(false).run().unwrap();
    assert!(out.pairs.is_empty());
    assert_eq!(out.phases.map_tasks, 0);
}

#[test]
fn a_panicking_map_is_an_error_not_a_hang() {
    let mut a = app(10_000, 10);
    a.panic_at = Some(a.numbers[5000]);
    match Job::new(a).workers(2).pin(false).chunk_bytes(800).run() {
        Err(Error::Runtime(_)) | Err(Error::Panicked(_)) => {}
        other => panic!("expected a panic error, got {:?}", other.map(|o| o.pairs.len())),
    }
    // On a runtime that does not abort, the panic is reported after the run.
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let mut a = app(10_000, 10);
    a.panic_at = Some(a.numbers[10]);
    let err = Job::new(a).chunk_bytes(800).run_on(&rt).map(|o| o.pairs.len()).unwrap_err();
    assert!(err.to_string().contains("bad record"), "{err}");
    // On a runtime that aborts its run at a panic, the failed job's events left queued must
    // not disturb the next job on it.
    let rt = Runtime::builder().workers(2).pin(false).abort_on_panic(true).build().unwrap();
    for _ in 0..3 {
        let mut a = app(10_000, 10);
        a.panic_at = Some(a.numbers[100]);
        assert!(Job::new(a).chunk_bytes(800).run_on(&rt).is_err());
        let good = app(10_000, 10);
        let want = expected(&good);
        let out = Job::new(good).chunk_bytes(800).run_on(&rt).unwrap();
        assert_eq!(out.pairs, want);
    }
}

#[test]
fn a_job_run_from_inside_a_handler_is_refused_and_leaves_nothing_behind() {
    use std::sync::{Arc, Mutex};
    let rt = Arc::new(Runtime::builder().workers(2).pin(false).build().unwrap());
    let refused = Arc::new(Mutex::new(None));
    let (inner, r) = (rt.clone(), refused.clone());
    rt.run(ochre::Color(1), move || {
        let err = Job::new(app(1000, 10)).run_on(&inner).err().map(|e| e.to_string());
        *r.lock().unwrap() = err;
    })
    .unwrap();
    assert!(refused.lock().unwrap().is_some(), "run_on inside a handler must fail");
    // The next job runs whole on the same runtime.
    let a = app(1000, 10);
    let want = expected(&a);
    let out = Job::new(a).chunk_bytes(800).run_on(&rt).unwrap();
    assert_eq!(out.pairs, want);
    assert_eq!(out.phases.emitted, 1000);
}

/// Every output of a flow's jobs, in order.
type Outputs = Vec<Vec<(u64, (u64, u64))>>;

/// A flow of `left` more jobs after this one, each on the previous one's key count minus one;
/// the result is every job's output.
fn countdown(keys: u64, left: usize, mut seen: Outputs) -> Stage<Outputs> {
    Job::new(app(5000, keys)).chunk_bytes(800).then(move |out| {
        seen.push(out.pairs);
        if left == 0 {
            Flow::Done(seen)
        } else {
            Flow::Next(countdown(keys - 1, left - 1, seen))
        }
    })
}

#[test]
fn a_flow_runs_its_jobs_in_order_in_one_run() {
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    let (outputs, phases) = run_flow(&rt, countdown(20, 9, Vec::new())).unwrap();
    assert_eq!(outputs.len(), 10);
    for (i, got) in outputs.iter().enumerate() {
        assert_eq!(*got, expected(&app(5000, 20 - i as u64)), "job {i}");
    }
    assert_eq!(phases.jobs, 10);
    assert_eq!(phases.emitted, 10 * 5000);
    // Jobs of different types chain too: a flow's stages hide their job's types.
    let flow = Job::new(app(1000, 10)).then(|out| {
        let total: u64 = out.pairs.iter().map(|(_, (s, _))| s).sum();
        let words =
            ochre_mr::apps::word_count::WordCount::new(format!("n{total} x x").into_bytes());
        Flow::Next(Job::new(words).then(Flow::Done))
    });
    let (out, phases) = run_flow(&rt, flow).unwrap();
    assert_eq!(out.pairs.len(), 2);
    assert_eq!(phases.jobs, 2);
}

#[test]
fn a_panic_in_a_later_job_of_a_flow_is_an_error_and_the_runtime_stays_usable() {
    let rt = Runtime::builder().workers(2).pin(false).abort_on_panic(true).build().unwrap();
    for _ in 0..3 {
        let flow = Job::new(app(5000, 10)).chunk_bytes(800).then(|_| {
            let mut bad = app(5000, 10);
            bad.panic_at = Some(bad.numbers[2500]);
            Flow::Next(Job::new(bad).chunk_bytes(800).then(|out| Flow::Done(out.pairs)))
        });
        assert!(matches!(run_flow(&rt, flow), Err(Error::Panicked(_) | Error::Runtime(_))));
        let good = app(5000, 10);
        let want = expected(&good);
        assert_eq!(Job::new(good).chunk_bytes(800).run_on(&rt).unwrap().pairs, want);
    }
}

/// A worker held in one handler for the whole job (its thread descheduled for time slices
/// beside another process is the case met; a long handler is the one a test can make): its
/// lane never starts, and its reduce partitions wait in its inbox. The job does not wait for it:
/// the other lane, once every task is claimed, retires the lane that never started, and the
/// other worker's reduce events take the partitions no event took. Without either rule the job's
/// map or reduce phase would end after the handler (half a second). Without stand-ins, which
/// would lend the stuck worker's reduce colors (not its lane's: lanes are pinned), and
/// which a kernel without `membarrier` does not have.
#[test]
fn a_job_does_not_wait_for_a_worker_stuck_in_another_handler() {
    // Worker 1 a home, on any machine.
    let config = ochre::Config::default().stand_in(false).home_on_every_worker(true);
    let rt = Runtime::builder().workers(2).pin(false).config(config).build().unwrap();
    let on_1 = (1..).map(ochre::Color).find(|&c| rt.home_of(c) == 1).unwrap();
    let held = std::time::Duration::from_millis(500);
    for _ in 0..3 {
        // Posted from outside between runs: the job's run runs it first on worker 1.
        rt.handle().post(on_1, move || std::thread::sleep(held));
        let a = app(100_000, 5_000);
        let want = expected(&a);
        let out = Job::new(a).chunk_bytes(16 << 10).run_on(&rt).unwrap();
        assert_eq!(out.pairs, want);
        let p = &out.phases;
        let job = p.split + p.map + p.reduce;
        assert!(job < held / 2, "the job waited for the held worker: {p:?}");
    }
}
