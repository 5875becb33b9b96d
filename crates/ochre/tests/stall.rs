//! Stall detection (`Config::stall_threshold`): a handler that blocks is reported while it
//! still runs, with its color and worker; short handlers are not; off means no report.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ochre::{Color, Config, Runtime};

fn rt(threshold: Option<Duration>) -> Runtime {
    let config = Config::default().stall_threshold(threshold);
    Runtime::builder().workers(2).pin(false).config(config).build().unwrap()
}

#[test]
fn a_handler_sleeping_300_ms_is_reported_while_it_runs() {
    let rt = rt(Some(Duration::from_millis(100)));
    let handle = rt.handle();
    let reported_while_running = Arc::new(AtomicBool::new(false));
    let r = reported_while_running.clone();
    // The worker that runs the handler: its home, or a thief (an idle worker may steal the
    // color before its home gets to it), so taken inside the handler, not from `home_of`.
    let ran_on = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    let on = ran_on.clone();
    let started = Instant::now();
    rt.run(Color(1), move || {
        ochre::post(Color(42), move || {
            on.store(ochre::current_worker().unwrap(), Ordering::SeqCst);
            // Sleeps 300 ms, and on (up to 5 s: a loaded machine may run the watchdog late)
            // until the stall is reported: the report must come while this still runs.
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(300)
                || (handle.stall_count() == 0 && t.elapsed() < Duration::from_secs(5))
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            r.store(handle.stall_count() > 0, Ordering::SeqCst);
        });
        for i in 0..100 {
            ochre::post(Color(1000 + i), || {});
        }
    })
    .unwrap();
    assert!(reported_while_running.load(Ordering::SeqCst), "not reported while running");
    let stalls = rt.stalls();
    assert_eq!(rt.stall_count(), 1, "reported once: {stalls:?}");
    let st = &stalls[0];
    assert_eq!(st.color, Color(42));
    assert_eq!(st.worker, ran_on.load(Ordering::SeqCst), "{st:?}");
    assert!(st.running_for >= Duration::from_millis(100), "{st:?}");
    assert!(st.running_for <= started.elapsed(), "{st:?}");
}

#[test]
fn short_handlers_are_not_stalls_and_off_reports_nothing() {
    let rt = rt(Some(Duration::from_millis(100)));
    rt.run(Color(1), || {
        for i in 0..10_000u64 {
            ochre::post(Color(i % 64), || {});
        }
    })
    .unwrap();
    // A few watchdog ticks between runs: nothing runs, nothing is reported.
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(rt.stall_count(), 0);

    let off = rt_off();
    off.run(Color(1), || std::thread::sleep(Duration::from_millis(150))).unwrap();
    assert_eq!(off.stall_count(), 0);
    assert!(off.stalls().is_empty());
}

fn rt_off() -> Runtime {
    rt(None)
}

#[test]
fn a_zero_threshold_is_refused() {
    let config = Config::default().stall_threshold(Some(Duration::ZERO));
    assert!(Runtime::builder().config(config).build().is_err());
}

/// The threads of this process named `name`.
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .filter(|e| {
                    std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == name)
                })
                .count()
        })
        .unwrap_or(0)
}

/// One watchdog serves every runtime of the process: three runtimes alive at once, one thread
/// named for it (one each before: a spawn per build), and each runtime's stall reported to that
/// runtime alone, with different thresholds.
#[test]
fn one_watchdog_watches_every_runtime_and_reports_each_its_own_stalls() {
    let rts: Vec<Runtime> =
        [40, 60, 80].iter().map(|&ms| rt(Some(Duration::from_millis(ms)))).collect();
    assert_eq!(threads_named("ochre-watchdog"), 1, "watchdog threads with three runtimes");
    std::thread::scope(|s| {
        for (k, rt) in rts.iter().enumerate() {
            let handle = rt.handle();
            s.spawn(move || {
                rt.run(Color(1), move || {
                    ochre::post(Color(100 + k as u64), move || {
                        // Until this runtime's own stall is reported (5 s at most).
                        let t = Instant::now();
                        while handle.stall_count() == 0 && t.elapsed() < Duration::from_secs(5) {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    });
                })
                .unwrap();
            });
        }
    });
    for (k, rt) in rts.iter().enumerate() {
        let stalls = rt.stalls();
        assert_eq!(stalls.len(), 1, "runtime {k}: {stalls:?}");
        assert_eq!(stalls[0].color, Color(100 + k as u64), "runtime {k}: {stalls:?}");
    }
    drop(rts);
    // Dropped runtimes are forgotten; the thread stays for the next.
    let rt = rt(Some(Duration::from_millis(40)));
    assert_eq!(threads_named("ochre-watchdog"), 1);
    drop(rt);
}
