//! A program that runs ochre and another runtime in turn (a user comparing them, or an I/O
//! runtime's phases between compute jobs): the other runtime's threads keep both CPUs busy
//! between ochre's runs, and ochre must still see CPUs that are its own whenever it has work. A
//! file of its own: the busy phases would slow the other tests' runtimes, and theirs would
//! share this one's CPUs.

use std::time::Duration;

use ochre::{topology, Color, Runtime};

#[allow(dead_code)] // `spin_for` only
mod common;
use common::spin_for;

/// One step of a user's loop: `left` steps of `cost`, each posting the next to its own color.
fn step(c: Color, left: u32, cost: Duration) {
    spin_for(cost);
    if left > 1 {
        ochre::post(c, move || step(c, left - 1, cost));
    }
}

/// The least share of its CPU a thread spinning on each of `cpus` got over 20 ms (run time over
/// run time and wait for the CPU, from `schedstat`), or `None` where the system does not say.
fn least_free_share(cpus: &[usize]) -> Option<f64> {
    let shares = cpus.iter().map(|&cpu| {
        std::thread::spawn(move || {
            topology::pin_current_thread(cpu).ok()?;
            let read = || {
                let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
                let mut f = text.split_ascii_whitespace().map(|x| x.parse::<f64>().ok());
                Some((f.next()??, f.next()??))
            };
            let (run0, wait0) = read()?;
            spin_for(Duration::from_millis(20));
            let (run, wait) = read()?;
            Some((run - run0) / (run - run0 + wait - wait0).max(1.0))
        })
        .join()
        .ok()?
    });
    shares.collect::<Option<Vec<f64>>>().map(|s| s.into_iter().fold(1.0, f64::min))
}

/// One attempt of the test: 20 runs of four loops on a fresh runtime of two workers, each run
/// followed by another runtime's busy phase. Returns how many runs were balanced and each
/// run's lowest worker CPU share.
fn alternate(runs: usize) -> (usize, Vec<u64>) {
    let rt = Runtime::builder().workers(2).build().unwrap();
    // Four plain colors, as a user writes them: whichever way they hash, the loops are two
    // workers' work, and a worker that runs out of its own takes from the other.
    let (loops, steps, cost) = (4u64, 100, Duration::from_micros(20));
    let mut balanced = 0;
    let mut shares = Vec::new();
    for _ in 0..runs {
        let report = rt
            .run(Color::DEFAULT, move || {
                for c in 1..=loops {
                    let c = Color(c);
                    ochre::post(c, move || step(c, steps, cost));
                }
            })
            .unwrap();
        let events: Vec<u64> = report.workers.iter().map(|w| w.events_run).collect();
        let total: u64 = events.iter().sum();
        if events.iter().all(|&e| e * 100 >= total * 35) {
            balanced += 1;
        }
        shares.push(report.workers.iter().map(|w| w.cpu_share).min().unwrap_or(0));
        // The other runtime's phase: more busy threads than CPUs, for as long as ochre's run.
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| spin_for(Duration::from_millis(5)));
            }
        });
    }
    (balanced, shares)
}

#[test]
fn loops_between_another_runtimes_phases_run_on_both_workers() {
    let cpus = topology::allowed_cpus().unwrap_or_default();
    if cpus.len() < 2 {
        eprintln!("skipped: needs two CPUs");
        return;
    }
    let cpus = &cpus[..2];
    // What the machine leaves a thread now: on a machine busy with other processes (a build
    // beside the tests), the workers' CPUs are shared in truth, and a thief rightly takes no
    // work from a worker whose CPU is clearly freer; the test is then not this one.
    let before = least_free_share(cpus);
    let runs = 20;
    // With the idle spells counted in the CPU shares (the wait at the gate between runs, the
    // yields of an idle spin): 5-19 of 20 balanced in 4 processes (4-13 before loops were a
    // backlog), a worker at 0.1-0.5 of a CPU it had alone whenever ochre ran, and a thief on
    // such a CPU took nothing from the other worker. Since: 20 of 20, shares 0.97-1.
    //
    // A second attempt, on a fresh runtime, if the first fails: something outside the process
    // that takes a CPU for tens of milliseconds in the middle (neither look, before or after,
    // sees it) gives a worker a share of 0.02-0.08 for real, which its smoothing keeps low
    // for several runs, and 13-14 of 20 were balanced (session 58: in 2 of 16 processes on a
    // quiet machine, with the build before that session's change too; 0 of 55 later). The
    // fault this test is for fails every attempt.
    let (mut balanced, mut shares) = alternate(runs);
    if balanced * 4 < runs * 3 {
        eprintln!("first attempt: {balanced} of {runs} balanced, shares {shares:?}; again");
        (balanced, shares) = alternate(runs);
    }
    let after = least_free_share(cpus);
    if let Some(busy) = [before, after].into_iter().flatten().find(|&s| s < 0.9) {
        eprintln!("skipped: the machine is busy (a thread got {busy:.2} of a CPU)");
        return;
    }
    assert!(
        balanced * 4 >= runs * 3,
        "{balanced} of {runs} runs balanced; the workers' lowest CPU shares: {shares:?}"
    );
}
