//! Ping-pong local (thesis §5.1.4): each worker runs its own colors; every event posts the next
//! event of its color. No cross-worker traffic, so events per second per worker should not drop
//! when workers are added (libasync-smp lost 84% at 8 cores to false sharing).
//!
//! Systems: `floor` (a hand-rolled single-thread `VecDeque<Box<dyn FnOnce()>>` loop per thread:
//! the cost of an event with no runtime at all), `ochre`, `ochre-baseline` (libasync-smp
//! configuration), `ochre-sysalloc` (ochre with events from the global allocator),
//! `ochre-jemalloc` / `ochre-mimalloc` / `ochre-snmalloc` (with those as its event allocator), `tokio-mt`
//! (multi-thread runtime, `spawn` from a task) and `tokio-ct` (one current-thread runtime per
//! pinned thread).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use ochre::{Color, Runtime};

use crate::harness::{measure_case, BenchReport, Options, System};
use crate::peers;

/// Colors (chains) per worker.
pub const CHAINS: usize = 4;

/// Events per worker and sample. A run has fixed costs (waking the workers, detecting the end)
/// that grow with the workers: about half a millisecond more at 2 workers than at 1 here, which
/// is 6% of a 400 000-event run (8 ms) and under 1.5% of a 2 000 000-event one. Steady-state
/// throughput is what this benchmark is about; `bench wakeup` and `bench costs` measure the
/// rest.
pub(crate) fn events_per_worker(opts: &Options) -> u64 {
    if opts.quick {
        2_000_000
    } else {
        3_000_000
    }
}

thread_local! {
    static FLOOR: RefCell<VecDeque<Box<dyn FnOnce()>>> = RefCell::new(VecDeque::new());
}

fn floor_hop(left: u64) {
    if left > 1 {
        FLOOR.with(|q| q.borrow_mut().push_back(Box::new(move || floor_hop(left - 1))));
    }
}

/// The floor: one thread, a `VecDeque` of boxed closures, each posting the next. Returns events/s.
pub fn floor_loop(events: u64) -> f64 {
    let hops = events / CHAINS as u64;
    for _ in 0..CHAINS {
        FLOOR.with(|q| q.borrow_mut().push_back(Box::new(move || floor_hop(hops))));
    }
    let t = Instant::now();
    let mut ran = 0u64;
    while let Some(f) = FLOOR.with(|q| q.borrow_mut().pop_front()) {
        f();
        ran += 1;
    }
    ran as f64 / t.elapsed().as_secs_f64()
}

fn ochre_hop(c: Color, left: u64) {
    if left > 1 {
        ochre::post(c, move || ochre_hop(c, left - 1));
    }
}

/// `CHAINS` colors homed on each worker of `rt` that homes colors (`Runtime::homes`).
pub fn colors_per_worker(rt: &Runtime, per_worker: usize) -> Vec<Vec<Color>> {
    (0..rt.homes())
        .map(|w| (1..).map(Color).filter(|&c| rt.home_of(c) == w).take(per_worker).collect())
        .collect()
}

/// ochre ping-pong on a built runtime. Returns events/s per worker.
///
/// Each worker's chains are started by a seed event running on that worker, so that every event
/// of a chain is allocated by the worker that runs it, as in the thesis's benchmark. (Started
/// from another worker, the first closure of a chain is a chunk of the starter's heap that the
/// runner's allocator cache then hands back for the whole chain: false sharing between workers,
/// up to 3x slower at 2 workers with glibc. That is the allocator's story, measured by the EMA
/// benchmarks, not the scheduler's.)
pub fn ochre_pingpong(rt: &Runtime, events_per_worker: u64) -> Result<f64, String> {
    let by_worker = colors_per_worker(rt, CHAINS);
    // Chains on each worker that homes colors (`Runtime::homes`).
    let homes = by_worker.len();
    let hops = events_per_worker / CHAINS as u64;
    let total = hops * (CHAINS * homes) as u64;
    let report = rt
        .run(Color(0), move || {
            for colors in by_worker {
                ochre::post(colors[0], move || {
                    for &c in &colors {
                        ochre::post(c, move || ochre_hop(c, hops));
                    }
                });
            }
        })
        .map_err(|e| e.to_string())?;
    let ran = report.total().events_run;
    let expected = total + 1 + homes as u64;
    if ran != expected {
        return Err(format!("ran {ran} events, expected {expected}"));
    }
    Ok(total as f64 / report.elapsed.as_secs_f64() / homes as f64)
}

struct Countdown {
    left: AtomicUsize,
    done: mpsc::SyncSender<()>,
}

impl Countdown {
    fn finish(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _ = self.done.send(());
        }
    }
}

fn tokio_hop(left: u64, cd: Arc<Countdown>) {
    if left > 1 {
        tokio::spawn(async move { tokio_hop(left - 1, cd) });
    } else {
        cd.finish();
    }
}

/// tokio multi-thread: `CHAINS` chains per worker of spawn-from-task. Returns events/s/worker.
pub fn tokio_mt_pingpong(rt: &tokio::runtime::Runtime, workers: usize, epw: u64) -> f64 {
    let hops = epw / CHAINS as u64;
    let chains = CHAINS * workers;
    let (tx, rx) = mpsc::sync_channel(1);
    let cd = Arc::new(Countdown { left: AtomicUsize::new(chains), done: tx });
    let t = Instant::now();
    for _ in 0..chains {
        let cd = cd.clone();
        rt.spawn(async move { tokio_hop(hops, cd) });
    }
    rx.recv().expect("chains finish");
    (hops * chains as u64) as f64 / t.elapsed().as_secs_f64() / workers as f64
}

/// tokio current-thread, one runtime per pinned thread. Returns events/s per worker (mean).
pub fn tokio_ct_pingpong(workers: usize, epw: u64) -> Result<f64, String> {
    let rates = peers::on_pinned_threads(workers, |_| -> Result<f64, String> {
        let rt =
            tokio::runtime::Builder::new_current_thread().build().map_err(|e| e.to_string())?;
        let hops = epw / CHAINS as u64;
        let (tx, rx) = mpsc::sync_channel(1);
        let cd = Arc::new(Countdown { left: AtomicUsize::new(CHAINS), done: tx });
        let t = Instant::now();
        rt.block_on(async {
            for _ in 0..CHAINS {
                let cd = cd.clone();
                tokio::spawn(async move { tokio_hop(hops, cd) });
            }
            // Yield until the chains are done (they run on this thread).
            while rx.try_recv().is_err() {
                tokio::task::yield_now().await;
            }
        });
        Ok((hops * CHAINS as u64) as f64 / t.elapsed().as_secs_f64())
    });
    let rates: Result<Vec<f64>, String> = rates.into_iter().collect();
    let rates = rates?;
    Ok(rates.iter().sum::<f64>() / rates.len() as f64)
}

/// Runs the ping-pong benchmark.
pub fn run(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(
        "pingpong",
        "Ping-pong local: events/s per worker, each worker running its own colors (higher is better).",
    );
    let epw = events_per_worker(opts);
    for &w in &opts.workers {
        let case = format!("{w} worker{}", if w > 1 { "s" } else { "" });
        let ochres = peers::ochre_builds(w);
        let tmt = peers::tokio_multi_thread(w);
        let mut systems = vec![System::new("floor", || {
            let r = peers::on_pinned_threads(w, |_| floor_loop(epw));
            Ok(r.iter().sum::<f64>() / r.len() as f64)
        })];
        for (name, build) in &ochres {
            systems.push(System::new(*name, move || {
                peers::on_fresh_runtime(build, epw, ochre_pingpong)
            }));
        }
        systems.extend([
            System::new("tokio-mt", || match &tmt {
                Ok(rt) => Ok(tokio_mt_pingpong(rt, w, epw)),
                Err(e) => Err(e.clone()),
            }),
            System::new("tokio-ct", || tokio_ct_pingpong(w, epw)),
        ]);
        measure_case(&mut report, &case, w, "ev/s/worker", opts.reps, systems);
    }
    checks(&mut report);
    report
}

fn checks(report: &mut BenchReport) {
    let cases: Vec<String> = {
        let mut c: Vec<String> = report.rows.iter().map(|r| r.case.clone()).collect();
        c.dedup();
        c
    };
    for case in &cases {
        if let (Some(o), Some(f)) =
            (report.median_of("ochre", case), report.median_of("floor", case))
        {
            report.check(
                format!("[{case}] ochre >= 50% of the floor loop per worker"),
                o / f,
                o / f >= 0.5,
            );
        }
        // Issue 5: EMA as the event allocator against the general allocators in that role.
        let best = report.best_of(&peers::GENERAL_ALLOCATORS, case);
        if let (Some(o), Some((name, b))) = (report.median_of("ochre", case), best) {
            report.check(
                format!("[{case}] EMA as the event allocator >= the best general one ({name})"),
                o / b,
                o >= b,
            );
        }
    }
    if let (Some(o), Some(t)) =
        (report.median_of("ochre", "2 workers"), report.median_of("tokio-mt", "2 workers"))
    {
        report.check("[2 workers] ochre >= 10x tokio multi-thread", o / t, o / t >= 10.0);
    }
    if let (Some(two), Some(one)) =
        (report.median_of("ochre", "2 workers"), report.median_of("ochre", "1 worker"))
    {
        report.check(
            "ochre per-worker throughput at 2 workers >= 95% of 1 worker",
            two / one,
            two / one >= 0.95,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ochre_pingpong_counts_its_events() {
        let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
        let rate = ochre_pingpong(&rt, 4_000).unwrap();
        assert!(rate > 0.0);
        let ran: u64 = rt.stats().iter().map(|s| s.events_run).sum();
        assert_eq!(ran, 8_003, "4 chains x 1000 hops x 2 workers + init + 2 seeds");
    }

    /// Each worker's chains stay on it: with nothing that moves colors (on a busy machine,
    /// stealing, standing in and follow may move them, and their posts then cross workers),
    /// only the init event's seed for the other worker crosses.
    #[test]
    fn ochre_pingpong_chains_run_where_their_seed_ran() {
        use ochre::{Config, Steal};
        let config = Config::default().steal(Steal::Off).follow(false).stand_in(false);
        let rt = Runtime::builder().workers(2).pin(false).config(config).build().unwrap();
        ochre_pingpong(&rt, 4_000).unwrap();
        let remote: u64 = rt.stats().iter().map(|s| s.posts_remote).sum();
        assert!(remote <= 1, "only the init event posts across workers (one seed): {remote}");
    }

    #[test]
    fn ema_is_checked_against_the_best_general_allocator() {
        let mut r = BenchReport::new("pingpong", "t");
        let fixed = |v: f64| move || Ok(v);
        let systems = vec![
            System::new("ochre", fixed(60.0)),
            System::new("ochre-sysalloc", fixed(50.0)),
            System::new("ochre-jemalloc", fixed(62.0)),
            System::new("ochre-mimalloc", fixed(59.0)),
        ];
        measure_case(&mut r, "1 worker", 1, "ev/s", 3, systems);
        checks(&mut r);
        let ema = r.checks.iter().find(|c| c.goal.contains("EMA")).expect("an EMA check");
        assert!(ema.goal.contains("ochre-jemalloc"), "{}", ema.goal);
        assert!(!ema.held);
        assert!((ema.measured - 60.0 / 62.0).abs() < 1e-9);
    }

    #[test]
    fn peers_do_the_same_work() {
        assert!(floor_loop(4_000) > 0.0);
        let rt = peers::tokio_multi_thread(2).unwrap();
        assert!(tokio_mt_pingpong(&rt, 2, 4_000) > 0.0);
        assert!(tokio_ct_pingpong(2, 4_000).unwrap() > 0.0);
    }
}
