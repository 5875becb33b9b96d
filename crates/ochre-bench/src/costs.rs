//! What an event costs next to a thread and a task (the lightweight-threads report's tables:
//! creation, global synchronization, migration), and the "right grain".
//!
//! - **create + run**: one unit of work made and run to completion, on one worker: an ochre
//!   event (post from a handler), a tokio task (spawn on a current-thread runtime, awaited), a
//!   rayon job (scope spawn), an OS thread (spawn + join). The report measured 60-900 µs to
//!   create a PM² or Solaris thread.
//! - **barrier of 16**: 16 participants meet at a barrier again and again; the figure is per
//!   participant and per barrier (the report: ~24 µs per thread on a Sparc 5). ochre: 16 colors
//!   each post their arrival to a barrier color, which releases the next step when the 16th
//!   arrives (no blocking anywhere); threads: `std::sync::Barrier`; tokio: `tokio::sync::Barrier`
//!   across 16 tasks; rayon: a fork-join scope of 16 per step (what the report calls creating
//!   instead of synchronizing).
//! - **migrate**: a flow of control moving to the other core and back, per hop: ochre: an event
//!   posted to a color homed on the other worker; a thread: `sched_setaffinity` to the other CPU;
//!   channels: a token bounced between two pinned threads. Needs 2 CPUs.
//! - **right grain** (ns, per system): the handler cost above which the runtime's overhead is
//!   under 5%, by the report's rule of three: grain = 19 x `o` (then o / (o + grain) = 5%),
//!   where `o` is the per-event overhead on producer-consumer at the most workers, measured with
//!   1 µs handlers: a worker's time per event (`w` / events/s) minus the handler's own time
//!   (the same handlers run inline on one thread). Not with empty handlers: the rule assumes
//!   the overhead does not change with the handlers' cost, and for a channel-fed thread pool it
//!   changes tenfold (its producer, on worker 0's CPU, pipelines empty jobs to one consumer at
//!   ~50 ns each, and with 1 µs jobs takes the CPU from that worker: 46% of ideal, where the
//!   empty-handler figure predicted 90%). Nor by finding where the measured efficiency crosses
//!   95%: near 95% efficiency grows slowly with the cost, and on this virtual machine, whose two
//!   busy vCPUs are themselves 0-7% slower than one, the crossing moved between 2 and 40 µs
//!   from one sample to the next.
//!
//! Every figure is in ns per operation: lower is better.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ochre::{Color, Runtime};

use crate::harness::{measure_case, BenchReport, Options, System};
use crate::{peers, prodcons};

/// Participants of the barrier.
pub const PARTIES: usize = 16;

fn per_op(start: Instant, ops: u64) -> f64 {
    start.elapsed().as_nanos() as f64 / ops.max(1) as f64
}

/// ochre: `n` events posted from a handler and run, on `rt`; ns per event.
pub fn ochre_create(rt: &Runtime, n: u64) -> Result<f64, String> {
    let start = Instant::now();
    let report = rt
        .run(Color(0), move || {
            for i in 0..n {
                ochre::post(Color(1 + i % 64), || {});
            }
        })
        .map_err(|e| e.to_string())?;
    if report.total().events_run != n + 1 {
        return Err(format!("ran {} events, expected {}", report.total().events_run, n + 1));
    }
    Ok(per_op(start, n))
}

/// tokio: `n` tasks spawned and awaited on a current-thread runtime; ns per task.
pub fn tokio_create(n: u64) -> Result<f64, String> {
    let rt = tokio::runtime::Builder::new_current_thread().build().map_err(|e| e.to_string())?;
    let start = Instant::now();
    rt.block_on(async move {
        let handles: Vec<_> = (0..n).map(|_| tokio::spawn(async {})).collect();
        for h in handles {
            let _ = h.await;
        }
    });
    Ok(per_op(start, n))
}

/// rayon: `n` jobs spawned in a scope on a one-thread pool; ns per job.
pub fn rayon_create(pool: &rayon::ThreadPool, n: u64) -> f64 {
    let start = Instant::now();
    pool.scope(|s| {
        for _ in 0..n {
            s.spawn(|_| {});
        }
    });
    per_op(start, n)
}

/// OS threads: `n` spawned and joined one after the other; ns per thread.
pub fn thread_create(n: u64) -> Result<f64, String> {
    let start = Instant::now();
    for _ in 0..n {
        std::thread::spawn(|| {}).join().map_err(|_| "a thread panicked".to_string())?;
    }
    Ok(per_op(start, n))
}

/// The ochre barrier's shared state: the step counter is touched only by the barrier color.
struct BarrierRun {
    arrived: AtomicUsize,
    steps_left: AtomicUsize,
    parties: Vec<Color>,
    barrier: Color,
}

fn arrive(b: &'static BarrierRun) {
    // Runs as the barrier color: no other event touches the counters meanwhile.
    if b.arrived.fetch_add(1, Ordering::Relaxed) + 1 < b.parties.len() {
        return;
    }
    b.arrived.store(0, Ordering::Relaxed);
    if b.steps_left.fetch_sub(1, Ordering::Relaxed) > 1 {
        release(b);
    }
}

fn release(b: &'static BarrierRun) {
    for &p in &b.parties {
        ochre::post(p, move || ochre::post(b.barrier, move || arrive(b)));
    }
}

/// ochre: `PARTIES` colors spread over the workers meet `steps` times at a barrier color; ns per
/// participant and step.
pub fn ochre_barrier(rt: &Runtime, steps: u64) -> Result<f64, String> {
    let per = PARTIES.div_ceil(rt.homes());
    let by_worker = crate::pingpong::colors_per_worker(rt, per + 1);
    let parties: Vec<Color> =
        (0..per).flat_map(|k| by_worker.iter().map(move |cs| cs[k + 1])).take(PARTIES).collect();
    let b: &'static BarrierRun = Box::leak(Box::new(BarrierRun {
        arrived: AtomicUsize::new(0),
        steps_left: AtomicUsize::new(steps as usize),
        parties,
        barrier: by_worker[0][0],
    }));
    let start = Instant::now();
    let report = rt.run(b.barrier, move || release(b)).map_err(|e| e.to_string())?;
    let expected = 1 + steps * 2 * PARTIES as u64;
    if report.total().events_run != expected {
        return Err(format!("ran {} events, expected {expected}", report.total().events_run));
    }
    Ok(per_op(start, steps * PARTIES as u64))
}

/// OS threads: `PARTIES` threads on `workers` CPUs with `std::sync::Barrier`.
pub fn thread_barrier(workers: usize, steps: u64) -> f64 {
    let barrier = std::sync::Barrier::new(PARTIES);
    let start = Instant::now();
    std::thread::scope(|s| {
        for i in 0..PARTIES {
            let barrier = &barrier;
            s.spawn(move || {
                peers::pin_as(i % workers);
                for _ in 0..steps {
                    barrier.wait();
                }
            });
        }
    });
    per_op(start, steps * PARTIES as u64)
}

/// tokio: `PARTIES` tasks with `tokio::sync::Barrier` on a multi-thread runtime.
pub fn tokio_barrier(rt: &tokio::runtime::Runtime, steps: u64) -> f64 {
    let barrier = Arc::new(tokio::sync::Barrier::new(PARTIES));
    let start = Instant::now();
    rt.block_on(async move {
        let tasks: Vec<_> = (0..PARTIES)
            .map(|_| {
                let b = barrier.clone();
                tokio::spawn(async move {
                    for _ in 0..steps {
                        b.wait().await;
                    }
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
    });
    per_op(start, steps * PARTIES as u64)
}

/// rayon: a fork-join scope of `PARTIES` jobs per step.
pub fn rayon_barrier(pool: &rayon::ThreadPool, steps: u64) -> f64 {
    let start = Instant::now();
    pool.install(|| {
        for _ in 0..steps {
            rayon::scope(|s| {
                for _ in 0..PARTIES {
                    s.spawn(|_| {});
                }
            });
        }
    });
    per_op(start, steps * PARTIES as u64)
}

/// ochre: one token bounced `hops` times between a color on worker 0 and one on worker 1.
pub fn ochre_migrate(rt: &Runtime, hops: u64) -> Result<f64, String> {
    let by_worker = crate::pingpong::colors_per_worker(rt, 1);
    let (a, b) = (by_worker[0][0], by_worker[by_worker.len() - 1][0]);
    fn hop(here: Color, there: Color, left: u64) {
        if left > 0 {
            ochre::post(there, move || hop(there, here, left - 1));
        }
    }
    let start = Instant::now();
    rt.run(a, move || hop(a, b, hops)).map_err(|e| e.to_string())?;
    Ok(per_op(start, hops))
}

/// An OS thread moving itself between the first and last CPU with `sched_setaffinity`.
pub fn thread_migrate(hops: u64) -> Result<f64, String> {
    let cpus = ochre::topology::allowed_cpus().map_err(|e| e.to_string())?;
    let (a, b) = (cpus[0], cpus[cpus.len() - 1]);
    let t = std::thread::spawn(move || -> Result<f64, String> {
        let start = Instant::now();
        for i in 0..hops {
            let cpu = if i % 2 == 0 { b } else { a };
            ochre::topology::pin_current_thread(cpu).map_err(|e| e.to_string())?;
        }
        Ok(per_op(start, hops))
    });
    t.join().map_err(|_| "the migrating thread panicked".to_string())?
}

/// Two pinned threads bouncing a token over crossbeam channels; ns per hop. (Both ends are
/// threads of their own: the caller is never pinned, so the benchmarks after this one are not
/// squeezed onto one CPU.)
pub fn channel_migrate(hops: u64) -> f64 {
    let (to_b, at_b) = crossbeam_channel::bounded::<u64>(1);
    let (to_a, at_a) = crossbeam_channel::bounded::<u64>(1);
    let start = Instant::now();
    std::thread::scope(|s| {
        s.spawn(move || {
            peers::pin_as(1);
            while let Ok(n) = at_b.recv() {
                if to_a.send(n).is_err() || n == 0 {
                    break;
                }
            }
        });
        s.spawn(move || {
            peers::pin_as(0);
            if to_b.send(hops / 2).is_err() {
                return;
            }
            while let Ok(m) = at_a.recv() {
                if m == 0 || to_b.send(m - 1).is_err() {
                    break;
                }
            }
        });
    });
    per_op(start, hops)
}

/// Runs the costs benchmark.
pub fn run(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(
        "costs",
        "What an event costs next to a task and a thread: create + run, a barrier of 16 (per \
         participant), a migration to the other core (per hop), and the right grain (handler cost \
         above which overhead < 5%). ns per operation, lower is better.",
    );
    let scale = if opts.quick { 1 } else { 4 };
    let (n, threads, steps, hops) = (200_000 * scale, 500 * scale, 2_000 * scale, 20_000 * scale);

    let one = Runtime::builder().workers(1).build().map_err(|e| e.to_string());
    let pool1 = peers::rayon_pool(1);
    measure_case(
        &mut report,
        "create + run",
        1,
        "ns",
        opts.reps,
        vec![
            System::new("ochre", || ochre_create(one.as_ref().map_err(|e| e.clone())?, n as u64)),
            System::new("tokio-ct", || tokio_create(n as u64)),
            System::new("rayon", || {
                Ok(rayon_create(pool1.as_ref().map_err(|e| e.clone())?, n as u64))
            }),
            System::new("thread", || thread_create(threads as u64)),
        ],
    );
    drop(one);

    let w = opts.workers.iter().copied().max().unwrap_or(1);
    let rt = Runtime::builder().workers(w).build().map_err(|e| e.to_string());
    let tmt = peers::tokio_multi_thread(w);
    let pool = peers::rayon_pool(w);
    measure_case(
        &mut report,
        &format!("barrier of {PARTIES}, {w}w"),
        w,
        "ns",
        opts.reps,
        vec![
            System::new("ochre", || {
                ochre_barrier(rt.as_ref().map_err(|e| e.clone())?, steps as u64)
            }),
            System::new("thread", || Ok(thread_barrier(w, steps as u64 / 4))),
            System::new("tokio-mt", || {
                Ok(tokio_barrier(tmt.as_ref().map_err(|e| e.clone())?, steps as u64))
            }),
            System::new("rayon", || {
                Ok(rayon_barrier(pool.as_ref().map_err(|e| e.clone())?, steps as u64))
            }),
        ],
    );
    if w >= 2 {
        measure_case(
            &mut report,
            "migrate (per hop)",
            2,
            "ns",
            opts.reps,
            vec![
                System::new("ochre", || {
                    ochre_migrate(rt.as_ref().map_err(|e| e.clone())?, hops as u64)
                }),
                System::new("thread", || thread_migrate(hops as u64 / 10)),
                System::new("channels", || Ok(channel_migrate(hops as u64))),
            ],
        );
    } else {
        report.notes.push("migrate: needs 2 CPUs; skipped".into());
    }
    drop(rt);
    right_grain(&mut report, opts, w);
    checks(&mut report, w);
    report
}

/// Handler cost (ns) at which the per-event overhead is measured for the right grain.
const GRAIN_PROBE: u64 = 1_000;

/// The right grain per system (module doc) at `w` workers.
fn right_grain(report: &mut BenchReport, opts: &Options, w: usize) {
    let rounds = if opts.quick { 150 } else { 600 };
    let ochres = [
        ("ochre", Runtime::builder().workers(w).build()),
        ("ochre-baseline", Runtime::builder().workers(w).config(ochre::Config::baseline()).build()),
    ];
    let pool = peers::rayon_pool(w);
    let tmt = peers::tokio_multi_thread(w);
    // The handlers' own rate is measured again beside each sample (15 ms): a reference taken
    // once would drift away from the samples it divides on this host.
    let grain = move |rate: f64| grain_from(w, rate, prodcons::one_core(GRAIN_PROBE, rounds));
    let mut systems: Vec<System<'_>> = ochres
        .iter()
        .map(|(name, rt)| {
            let mut run = prodcons::ochre_system(rt, GRAIN_PROBE, rounds);
            System::new(*name, move || run().map(grain))
        })
        .collect();
    systems.extend([
        System::new("rayon", move || {
            let p = pool.as_ref().map_err(|e| e.clone())?;
            Ok(grain(prodcons::rayon_prodcons(p, GRAIN_PROBE, rounds)))
        }),
        System::new("tokio-mt", move || {
            let rt = tmt.as_ref().map_err(|e| e.clone())?;
            Ok(grain(prodcons::tokio_prodcons(rt, GRAIN_PROBE, rounds)))
        }),
        System::new("channels", move || {
            Ok(grain(prodcons::channels_prodcons(w, GRAIN_PROBE, rounds)))
        }),
    ]);
    measure_case(report, &format!("right grain (<5% overhead), {w}w"), w, "ns", opts.reps, systems);
}

/// The rule of three: 19 x the per-event overhead, in ns, of a system that ran `rate` events/s
/// on `w` workers, handlers that run at `inline` events/s on one thread (the overhead is a
/// worker's time per event minus the handler's; none if noise makes it negative).
fn grain_from(w: usize, rate: f64, inline: f64) -> f64 {
    19.0 * (w as f64 * 1e9 / rate - 1e9 / inline).max(0.0)
}

fn checks(report: &mut BenchReport, w: usize) {
    let case = "create + run";
    if let (Some(o), Some(t)) = (report.median_of("ochre", case), report.median_of("thread", case))
    {
        report.check(
            "an event is >= 100x cheaper to create and run than a thread",
            t / o,
            t / o >= 100.0,
        );
    }
    let grain = format!("right grain (<5% overhead), {w}w");
    if let Some(o) = report.median_of("ochre", &grain) {
        let best_peer = ["rayon", "tokio-mt", "channels"]
            .iter()
            .filter_map(|p| report.median_of(p, &grain))
            .fold(f64::INFINITY, f64::min);
        if best_peer.is_finite() {
            report.check(
                "ochre's right grain is finer than every peer's",
                best_peer / o,
                o <= best_peer,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_right_grain_is_19_times_the_overhead_per_event() {
        // 2 workers at 1.6M events/s: 1250 ns of a worker per event; the handler alone takes
        // 1000 ns (1M/s inline): 250 ns of overhead, a grain of 4750 ns.
        assert!((grain_from(2, 1.6e6, 1e6) - 4750.0).abs() < 1e-6);
        // Faster than the ideal (noise): no overhead, not a negative grain.
        assert_eq!(grain_from(2, 2.1e6, 1e6), 0.0);
    }

    #[test]
    fn every_cost_runs_and_counts_its_events() {
        let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
        assert!(ochre_create(&rt, 1000).unwrap() > 0.0);
        assert!(ochre_barrier(&rt, 20).unwrap() > 0.0);
        assert!(ochre_migrate(&rt, 100).unwrap() > 0.0);
        let s = rt.stats();
        // The barrier: 1 + 20 x 2 x 16 events; create: 1001; migrate: 101.
        assert_eq!(s.iter().map(|w| w.events_run).sum::<u64>(), 1001 + 1 + 20 * 2 * 16 + 101);
        assert!(thread_barrier(2, 5) > 0.0);
        assert!(channel_migrate(10) > 0.0);
        assert!(thread_create(3).unwrap() > 0.0);
        assert!(tokio_create(100).unwrap() > 0.0);
    }
}
