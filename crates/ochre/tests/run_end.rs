//! Workers asleep through a run's end (`Config::sleep_through_ends`, the runtime's `run_end`):
//! the run ends without waking them, the next run carries them in asleep, and nothing of the
//! guarantees changes: every event runs once, in its run, none outside a run, and a runtime
//! whose workers sleep through ends is dropped without waiting for anything.
//!
//! `sleep_through_any_cpu` lets every worker do so on a quiet machine (otherwise only one on a
//! CPU found shared with another process does), and no spinning makes idle workers sleep at once.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use ochre::{Color, Config, RunEnd, Runtime, Spin};

fn sleeping_through() -> Config {
    // Every worker a home, on any machine: the tests choose sleepers by the colors homed there.
    Config::default().sleep_through_any_cpu(true).spin(Spin::Never).home_on_every_worker(true)
}

/// Runs `f` on another thread and fails if it does not end within `limit` (a hang otherwise
/// holds the test suite forever).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).expect("did not end in time (a worker sleeping through a run's end?)")
}

/// The first plain color homed on worker `w` of `rt`.
fn color_on(rt: &Runtime, w: usize) -> Color {
    assert!(w < rt.homes(), "worker {w} homes no color: `Config::home_on_every_worker`");
    (1..).map(Color).find(|&c| rt.home_of(c) == w).expect("every worker homes colors")
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[test]
fn many_short_runs_with_sleepers_carried_through_run_every_event_once_in_its_run() {
    within(Duration::from_secs(120), || {
        let workers = 8;
        let rt = Runtime::builder().workers(workers).config(sleeping_through()).build().unwrap();
        let colors = 40u64;
        let busy: Arc<Vec<AtomicBool>> =
            Arc::new((0..colors).map(|_| AtomicBool::new(false)).collect());
        let ran = Arc::new(AtomicU64::new(0));
        let clashes = Arc::new(AtomicU64::new(0));
        let mut slept_through = 0;
        let runs = 400u64;
        for run in 0..runs {
            // 0 to 11 events a run, on seeded colors, half of them posting one more.
            let n = splitmix(run) % 12;
            let (b, r, c) = (busy.clone(), ran.clone(), clashes.clone());
            let before = ran.load(Ordering::SeqCst);
            let report = rt
                .run(Color(0), move || {
                    for i in 0..n {
                        let x = splitmix(run * 100 + i);
                        let color = x % colors;
                        let (b, r, c) = (b.clone(), r.clone(), c.clone());
                        ochre::post(Color(color), move || {
                            let event = |b: &Vec<AtomicBool>, color: u64| {
                                if b[color as usize].swap(true, Ordering::SeqCst) {
                                    c.fetch_add(1, Ordering::SeqCst);
                                }
                                std::hint::black_box((0..200).sum::<u64>());
                                b[color as usize].store(false, Ordering::SeqCst);
                                r.fetch_add(1, Ordering::SeqCst);
                            };
                            event(&b, color);
                            if x & 1 == 1 {
                                let next = (x >> 8) % colors;
                                let (b, c2, r2) = (b.clone(), c.clone(), r.clone());
                                ochre::post(Color(next), move || {
                                    if b[next as usize].swap(true, Ordering::SeqCst) {
                                        c2.fetch_add(1, Ordering::SeqCst);
                                    }
                                    b[next as usize].store(false, Ordering::SeqCst);
                                    r2.fetch_add(1, Ordering::SeqCst);
                                });
                            }
                        });
                    }
                })
                .unwrap();
            assert_eq!(report.end, RunEnd::Quiescent);
            let want: u64 = (0..n).map(|i| 1 + (splitmix(run * 100 + i) & 1)).sum();
            // Every event of the run ran in it: none left for a sleeper to run later.
            assert_eq!(ran.load(Ordering::SeqCst) - before, want, "run {run}");
            let events: u64 = report.workers.iter().map(|w| w.events_run).sum();
            assert_eq!(events, want + 1, "run {run}: the report counts every event (and init)");
            slept_through += report.workers.iter().map(|w| w.ends_slept_through).sum::<u64>();
        }
        assert_eq!(clashes.load(Ordering::SeqCst), 0, "two events of one color at once");
        assert!(
            slept_through >= runs,
            "workers slept through run ends ({slept_through} in {runs} runs of {workers} workers)"
        );
        drop(rt);
    });
}

#[test]
fn a_post_between_runs_waits_for_the_next_run_though_its_worker_slept_through_the_end() {
    within(Duration::from_secs(60), || {
        let rt = Runtime::builder().workers(4).config(sleeping_through()).build().unwrap();
        let handle = rt.handle();
        // A color homed on a worker that sleeps through the ends of runs that run on worker 0.
        let on_3 = color_on(&rt, 3);
        let on_0 = color_on(&rt, 0);
        let mut slept = 0;
        for _ in 0..5 {
            let report = rt.run(on_0, || {}).unwrap();
            slept += report.workers.iter().map(|w| w.ends_slept_through).sum::<u64>();
        }
        assert!(slept > 0, "worker 3 slept through run ends");
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        handle.post(on_3, move || r.store(true, Ordering::SeqCst));
        // The post wakes worker 3, asleep in its last run's loop or between runs: it leaves
        // for the gate and runs nothing until the next run.
        std::thread::sleep(Duration::from_millis(30));
        assert!(!ran.load(Ordering::SeqCst), "an event ran outside a run");
        let init = Arc::new(AtomicBool::new(false));
        let i = init.clone();
        let report = rt.run(on_0, move || i.store(true, Ordering::SeqCst)).unwrap();
        assert!(ran.load(Ordering::SeqCst), "the next run ran it");
        assert!(init.load(Ordering::SeqCst), "and its own init");
        assert_eq!(report.total().events_run, 2, "counted in the next run's report");
    });
}

#[test]
fn a_runtime_whose_workers_slept_through_its_last_run_is_dropped_at_once() {
    for workers in [2, 6] {
        within(Duration::from_secs(30), move || {
            let rt =
                Runtime::builder().workers(workers).config(sleeping_through()).build().unwrap();
            let count = Arc::new(AtomicUsize::new(0));
            for _ in 0..20 {
                let c = count.clone();
                rt.run(Color(0), move || {
                    c.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap();
            }
            assert_eq!(count.load(Ordering::SeqCst), 20);
            drop(rt);
        });
    }
}

/// A shutdown leaves events queued on workers: a worker that then waits for the next run in its
/// parker must not be carried in asleep with them (the next run would end quiescent without
/// them). A hundred runtimes: whether a worker held some depends on timing.
#[test]
fn a_shutdown_after_runs_slept_through_ends_every_worker_and_leaves_the_rest_for_later() {
    within(Duration::from_secs(60), || {
        for _ in 0..100 {
            let rt = Runtime::builder().workers(4).config(sleeping_through()).build().unwrap();
            for _ in 0..5 {
                rt.run(Color(0), || {}).unwrap();
            }
            let handle = rt.handle();
            let ran = Arc::new(AtomicU64::new(0));
            let r = ran.clone();
            let report = rt
                .run(Color(0), move || {
                    for c in 1..=64u64 {
                        let r = r.clone();
                        ochre::post(Color(c), move || {
                            r.fetch_add(1, Ordering::SeqCst);
                        });
                    }
                    handle.shutdown();
                })
                .unwrap();
            assert_eq!(report.end, RunEnd::Shutdown);
            let report2 = rt.run(Color(0), || {}).unwrap();
            assert_eq!(report2.end, RunEnd::Quiescent);
            assert_eq!(
                ran.load(Ordering::SeqCst),
                64,
                "what the shutdown left ran in the next run"
            );
        }
    });
}

#[test]
fn posts_from_outside_racing_with_runs_whose_sleepers_sleep_through_run_once_and_only_in_runs() {
    within(Duration::from_secs(120), || {
        let rt = Runtime::builder().workers(8).config(sleeping_through()).build().unwrap();
        let colors = 24u64;
        let total = 6_000u64;
        let runs_flag = Arc::new(AtomicBool::new(false));
        let outside_runs = Arc::new(AtomicU64::new(0));
        let ran: Arc<Vec<AtomicU64>> = Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
        let busy: Arc<Vec<AtomicBool>> =
            Arc::new((0..colors).map(|_| AtomicBool::new(false)).collect());
        let clashes = Arc::new(AtomicU64::new(0));
        let event = {
            let (flag, outside, ran, busy, clashes) = (
                runs_flag.clone(),
                outside_runs.clone(),
                ran.clone(),
                busy.clone(),
                clashes.clone(),
            );
            move |id: u64, color: u64| {
                let (flag, outside, ran, busy, clashes) =
                    (flag.clone(), outside.clone(), ran.clone(), busy.clone(), clashes.clone());
                move || {
                    if !flag.load(Ordering::SeqCst) {
                        outside.fetch_add(1, Ordering::SeqCst);
                    }
                    if busy[color as usize].swap(true, Ordering::SeqCst) {
                        clashes.fetch_add(1, Ordering::SeqCst);
                    }
                    ran[id as usize].fetch_add(1, Ordering::SeqCst);
                    busy[color as usize].store(false, Ordering::SeqCst);
                }
            }
        };
        // An outside thread posts half of the events, racing with the runs and the gaps
        // between them; the runs post the other half.
        let handle = rt.handle();
        let ev = event.clone();
        let poster = std::thread::spawn(move || {
            for id in (0..total).step_by(2) {
                let color = splitmix(id) % colors;
                handle.post(Color(color), ev(id, color));
                if id % 64 == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        });
        let mut next = 1u64;
        while next < total || !poster.is_finished() {
            let ids: Vec<u64> = (next..total).step_by(2).take(6).collect();
            next += 12;
            let ev = event.clone();
            runs_flag.store(true, Ordering::SeqCst);
            rt.run(Color(0), move || {
                for id in ids {
                    let color = splitmix(id) % colors;
                    ochre::post(Color(color), ev(id, color));
                }
            })
            .unwrap();
            runs_flag.store(false, Ordering::SeqCst);
        }
        poster.join().unwrap();
        // What the poster sent after the last run.
        runs_flag.store(true, Ordering::SeqCst);
        let last = rt.run(Color(0), || {}).unwrap();
        assert_eq!((last.end, last.pending), (RunEnd::Quiescent, 0));
        runs_flag.store(false, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(outside_runs.load(Ordering::SeqCst), 0, "events ran between runs");
        assert_eq!(clashes.load(Ordering::SeqCst), 0, "two events of one color at once");
        let wrong: Vec<u64> =
            (0..total).filter(|&i| ran[i as usize].load(Ordering::SeqCst) != 1).collect();
        assert!(
            wrong.is_empty(),
            "{} events did not run exactly once: {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(8)]
        );
    });
}

#[test]
fn a_panic_posted_between_runs_to_a_worker_asleep_through_the_end_is_the_next_runs() {
    within(Duration::from_secs(60), || {
        for abort in [false, true] {
            let config = sleeping_through().abort_on_panic(abort);
            let rt = Runtime::builder().workers(4).config(config).build().unwrap();
            let on_0 = color_on(&rt, 0);
            let on_3 = color_on(&rt, 3);
            for _ in 0..5 {
                rt.run(on_0, || {}).unwrap();
            }
            // Worker 3 sleeps through those ends; the post wakes it in its last run's loop,
            // and the panic belongs to the next run, whenever worker 3 runs it.
            rt.handle().post(on_3, || panic!("between runs"));
            std::thread::sleep(Duration::from_millis(5));
            match rt.run(on_0, || {}) {
                Ok(report) => {
                    assert!(!abort, "an aborting panic returns an error");
                    assert_eq!(report.panics.len(), 1, "{report:?}");
                    assert_eq!(report.panics[0].color, on_3);
                    // Its event and the run's own, counted in this run's report (on whichever
                    // workers: a loaded machine moves colors off a shared CPU).
                    assert_eq!(report.total().events_run, 2);
                }
                Err(e) => {
                    assert!(abort, "{e}");
                    assert!(matches!(e, ochre::Error::HandlerPanicked { .. }), "{e}");
                }
            }
            // The runtime goes on either way.
            let report = rt.run(on_0, || {}).unwrap();
            assert!(report.panics.is_empty());
        }
    });
}

/// With the default configuration: a worker whose CPU a busy thread shares measures it, then,
/// asleep at the end of a run, sleeps through the ends of the next runs it has no part in (no
/// wake-up waits for the busy thread's time slice), and every run still runs its events.
#[test]
fn a_worker_measured_on_a_cpu_shared_with_a_busy_thread_sleeps_through_run_ends() {
    let cpus = ochre::topology::allowed_cpus().unwrap();
    if cpus.len() < 2 {
        eprintln!("skipped: one CPU");
        return;
    }
    within(Duration::from_secs(60), move || {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let shared_cpu = cpus[1];
        let spinner = std::thread::spawn(move || {
            let _ = ochre::topology::pin_current_thread(shared_cpu);
            while !s.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        // Worker 1 is pinned to the runtime's second CPU, the busy thread's.
        let every = Config::default().home_on_every_worker(true);
        let rt = Runtime::builder().workers(2).config(every).build().unwrap();
        let on_0 = color_on(&rt, 0);
        let on_1: Vec<Color> = (1..).map(Color).filter(|&c| rt.home_of(c) == 1).take(8).collect();
        // Work on worker 1 until it measured its share (windows of 10 ms with work).
        let mut measured = 1000;
        for _ in 0..100 {
            let colors = on_1.clone();
            let report = rt
                .run(on_0, move || {
                    for c in colors {
                        ochre::post(c, || {
                            let t = std::time::Instant::now();
                            while t.elapsed() < Duration::from_micros(500) {
                                std::hint::spin_loop();
                            }
                        });
                    }
                })
                .unwrap();
            measured = report.workers[1].cpu_share;
            if measured < 800 {
                break;
            }
        }
        // A run long enough on worker 0 for worker 1 to enter it and fall asleep: worker 0 finds
        // it quiescent, worker 1 asleep.
        rt.run(on_0, || {
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_millis(20) {
                std::hint::spin_loop();
            }
        })
        .unwrap();
        let mut slept = 0;
        let ran = Arc::new(AtomicU64::new(0));
        for _ in 0..100 {
            let r = ran.clone();
            let report = rt
                .run(on_0, move || {
                    r.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap();
            slept += report.workers.iter().map(|w| w.ends_slept_through).sum::<u64>();
        }
        stop.store(true, Ordering::Relaxed);
        spinner.join().unwrap();
        assert!(measured < 800, "worker 1 measured its CPU shared: {measured} thousandths");
        assert_eq!(ran.load(Ordering::SeqCst), 100);
        assert!(slept >= 50, "worker 1 slept through run ends ({slept} of 100)");
    });
}

/// Every worker ends its runs parked (no spinning, any CPU): the next run carries them all in,
/// and a post made between runs wakes one at once. Each run runs its init (none is found
/// quiescent before its init was sent) and leaves nothing pending.
#[test]
fn runs_whose_every_worker_was_carried_in_run_their_init_with_posts_between_them() {
    within(Duration::from_secs(120), || {
        let rt = Runtime::builder().workers(2).config(sleeping_through()).build().unwrap();
        let on_0 = color_on(&rt, 0);
        let on_1 = color_on(&rt, 1);
        let handle = rt.handle();
        let posted = Arc::new(AtomicU64::new(0));
        let between = Arc::new(AtomicU64::new(0));
        for run in 0..300u64 {
            if run % 3 == 0 {
                let b = between.clone();
                handle.post(if run % 2 == 0 { on_1 } else { on_0 }, move || {
                    b.fetch_add(1, Ordering::SeqCst);
                });
                posted.fetch_add(1, Ordering::SeqCst);
            }
            let init = Arc::new(AtomicBool::new(false));
            let i = init.clone();
            let report = rt.run(on_0, move || i.store(true, Ordering::SeqCst)).unwrap();
            assert!(init.load(Ordering::SeqCst), "run {run} ended before its init ran");
            assert_eq!((report.end, report.pending), (RunEnd::Quiescent, 0), "run {run}");
            assert_eq!(between.load(Ordering::SeqCst), posted.load(Ordering::SeqCst), "run {run}");
        }
    });
}

/// A worker that slept in its poller in a run (a timer of its own), then found the run
/// quiescent and parked between runs, is woken in its parker by the next run's posts.
#[test]
fn a_worker_parked_between_runs_after_a_sleep_in_its_poller_wakes_for_the_next_runs_posts() {
    within(Duration::from_secs(30), || {
        let rt = Runtime::builder().workers(2).config(sleeping_through()).build().unwrap();
        let on_0 = color_on(&rt, 0);
        for _ in 0..5 {
            let fired = Arc::new(AtomicBool::new(false));
            let f = fired.clone();
            rt.run(on_0, move || {
                ochre::io::post_after(Duration::from_millis(5), on_0, move || {
                    f.store(true, Ordering::SeqCst);
                })
                .unwrap();
            })
            .unwrap();
            assert!(fired.load(Ordering::SeqCst));
            std::thread::sleep(Duration::from_millis(10));
            let ran = Arc::new(AtomicBool::new(false));
            let r = ran.clone();
            rt.run(on_0, move || r.store(true, Ordering::SeqCst)).unwrap();
            assert!(ran.load(Ordering::SeqCst));
        }
    });
}

/// A handler's shutdown ends its run without waking the workers asleep through it, as a
/// quiescent end does; what a run that a shutdown ends posts to such a sleeper (in the same
/// handler, before the shutdown: it leaves at the end of that turn) waits in its inbox, and a
/// later run runs it, once: the sleeper parks between runs with it waiting, and the start of
/// the next run wakes it for it; a run whose end is quiescent ends only after it ran.
#[test]
fn shutdowns_by_handlers_leave_sleepers_asleep_and_what_was_posted_to_them_for_later_runs() {
    within(Duration::from_secs(60), || {
        let workers = 4;
        let rt = Runtime::builder().workers(workers).config(sleeping_through()).build().unwrap();
        let on_0 = color_on(&rt, 0);
        let others: Arc<Vec<Color>> = Arc::new((1..workers).map(|w| color_on(&rt, w)).collect());
        let runs = 300u64;
        let ran: Arc<Vec<AtomicU64>> = Arc::new((0..runs).map(|_| AtomicU64::new(0)).collect());
        let mut slept = 0;
        for run in 0..runs {
            let (others, ran) = (others.clone(), ran.clone());
            let report = rt
                .run(on_0, move || {
                    if run % 3 == 0 {
                        let c = others[(run / 3) as usize % others.len()];
                        ochre::post(c, move || {
                            ran[run as usize].fetch_add(1, Ordering::SeqCst);
                        });
                    }
                    ochre::shutdown();
                })
                .unwrap();
            assert_eq!(report.end, RunEnd::Shutdown);
            slept += report.workers.iter().map(|w| w.ends_slept_through).sum::<u64>();
        }
        assert!(slept > 0, "no worker slept through a shutdown in {runs} runs");
        let report = rt.run(on_0, || {}).unwrap();
        assert_eq!(report.end, RunEnd::Quiescent);
        for (run, n) in ran.iter().enumerate() {
            let want = u64::from(run % 3 == 0);
            assert_eq!(n.load(Ordering::SeqCst), want, "the event posted in run {run}");
        }
    });
}
