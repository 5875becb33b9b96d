//! Stand-ins (`Config::stand_in`): a worker blocked in a handler does not hold up the colors
//! homed on it. Its thread blocked (as the kernel blocks one whose CPU another process holds),
//! an idle worker routes its inbox and lends itself its waiting colors.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ochre::{Color, Config, Runtime};

/// A handler that blocks (sleeps) until `done` counts `n`, or `limit`; returns the count then.
fn block_until(done: &AtomicUsize, n: usize, limit: Duration) -> usize {
    let t = Instant::now();
    while done.load(Ordering::SeqCst) < n && t.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(1));
    }
    done.load(Ordering::SeqCst)
}

/// Colors homed on worker `w` of `rt`, `n` of them, from `from` on.
fn colors_on(rt: &Runtime, w: usize, from: u64, n: usize) -> Vec<Color> {
    assert!(w < rt.homes(), "worker {w} homes no color: `Config::home_on_every_worker`");
    (from..).map(Color).filter(|&c| rt.home_of(c) == w).take(n).collect()
}

/// A handler on worker 1 blocks (sleeps) until 64 events posted to other colors homed there
/// ran, or `limit`; returns how many had run when it stopped blocking, and the run's report.
/// A thread outside posts them once it blocks (posted with it, they would run first: fresh
/// colors run newest first).
fn blocked_home(config: Config, limit: Duration) -> (usize, ochre::RunReport) {
    let rt = Runtime::builder().workers(2).config(config).build().unwrap();
    let blocker = colors_on(&rt, 1, 1, 1)[0];
    let others = colors_on(&rt, 1, 1000, 64);
    let root = colors_on(&rt, 0, 1, 1)[0];
    let done = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(AtomicUsize::new(usize::MAX));
    let blocking = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (d, s, b) = (done.clone(), seen.clone(), blocking.clone());
    let (handle, d2, b2) = (rt.handle(), done.clone(), blocking.clone());
    let poster = std::thread::spawn(move || {
        let t = Instant::now();
        while !b2.load(Ordering::SeqCst) && t.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(1));
        }
        for c in others {
            let d = d2.clone();
            handle.post(c, move || {
                d.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    let report = rt
        .run(root, move || {
            ochre::post(blocker, move || {
                b.store(true, Ordering::SeqCst);
                s.store(block_until(&d, 64, limit), Ordering::SeqCst);
            });
        })
        .unwrap();
    poster.join().unwrap();
    if done.load(Ordering::SeqCst) < 64 {
        // Posted after the run's end (the handler stopped blocking first): the next run's.
        rt.run(root, || {}).unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 64, "every event ran in the end");
    (seen.load(Ordering::SeqCst), report)
}

#[test]
fn colors_homed_on_a_worker_blocked_in_a_handler_run_elsewhere_meanwhile() {
    if !ochre::stand_ins_available() {
        eprintln!("no membarrier here: stand-ins are off");
        return;
    }
    // Colors stay on their homes (`follow` off), as in the control below: beside a busy thread
    // on worker 1's CPU the blocker would follow its poster to worker 0, and nobody would be
    // blocked on worker 1 to stand in for.
    let (seen, report) = blocked_home(Config::default().follow(false), Duration::from_secs(5));
    assert_eq!(seen, 64, "all of them ran while their home was blocked: {:?}", report.workers);
    assert!(report.workers[1].stood_in_for > 0, "{:?}", report.workers[1]);
    assert!(report.workers[0].steals_in > 0, "they ran on the other worker");
}

#[test]
fn without_stand_ins_they_wait_for_the_blocked_worker() {
    // Colors stay on their homes (`follow` off): beside a busy thread on worker 1's CPU, the
    // blocker, posted from worker 0, moved there (a color follows its poster off a CPU measured
    // shared), and worker 1 ran the 64 events unblocked (every run of 30).
    let config = Config::default().stand_in(false).follow(false);
    let (seen, report) = blocked_home(config, Duration::from_millis(200));
    assert_eq!(seen, 0, "their home holds them until its handler returns: {:?}", report.workers);
    assert_eq!(report.workers[1].stood_in_for, 0);
}

/// 64 chunks of 1 ms on colors homed on worker 0; the first chunk worker 1 runs (lent to it)
/// blocks until the 63 others ran, or `limit`; returns how many had run when it stopped.
fn blocked_borrower(config: Config, limit: Duration) -> (usize, ochre::RunReport) {
    let rt = Runtime::builder().workers(2).config(config).build().unwrap();
    let chunks = colors_on(&rt, 0, 1000, 64);
    let root = colors_on(&rt, 0, 1, 1)[0];
    let done = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(AtomicUsize::new(usize::MAX));
    let blocked = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (d, s, b) = (done.clone(), seen.clone(), blocked.clone());
    let report = rt
        .run(root, move || {
            for c in chunks {
                let (d, s, b) = (d.clone(), s.clone(), b.clone());
                ochre::post(c, move || {
                    if ochre::current_worker() == Some(1) && !b.swap(true, Ordering::SeqCst) {
                        s.store(block_until(&d, 63, limit), Ordering::SeqCst);
                    } else {
                        let t = Instant::now();
                        while t.elapsed() < Duration::from_millis(1) {
                            std::hint::spin_loop();
                        }
                    }
                    d.fetch_add(1, Ordering::SeqCst);
                });
            }
        })
        .unwrap();
    assert_eq!(done.load(Ordering::SeqCst), 64, "every chunk ran in the end");
    assert!(blocked.load(Ordering::SeqCst), "worker 1 ran a chunk: {:?}", report.workers);
    (seen.load(Ordering::SeqCst), report)
}

#[test]
fn colors_lent_to_a_worker_blocked_in_a_handler_go_back_to_their_home_meanwhile() {
    if !ochre::stand_ins_available() {
        eprintln!("no membarrier here: stand-ins are off");
        return;
    }
    let (seen, report) = blocked_borrower(Config::default(), Duration::from_secs(5));
    assert_eq!(seen, 63, "the others ran while the borrower was blocked: {:?}", report.workers);
    assert!(report.workers[1].stood_in_give_backs > 0, "{:?}", report.workers[1]);
}

#[test]
fn without_stand_ins_colors_lent_wait_for_their_blocked_borrower() {
    let (seen, report) =
        blocked_borrower(Config::default().stand_in(false), Duration::from_millis(300));
    assert_eq!(report.workers[1].stood_in_give_backs, 0);
    // Judged only if worker 1 borrowed more than the chunk that blocked it (on a loaded host
    // it may have borrowed that one alone).
    if report.workers[1].steals_in > 1 {
        assert!(seen < 63, "some wait behind the blocked chunk: {:?}", report.workers);
    }
}
