//! Workers that leave their pins because every CPU is shared (`Config::unpin_when_shared`), and
//! what the process's later workers start from, and their pins taken again a second later. A
//! file of its own: for a second after a worker left its pin, every runtime the process starts
//! starts unpinned, which would change other tests.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ochre::{topology, Color, Runtime};

#[allow(dead_code)] // its `spin_for` only: these workers are pinned, unlike its runtimes'
mod common;
use common::spin_for;

#[test]
fn workers_leave_their_pins_where_every_cpu_is_shared_and_take_them_again_later() {
    let cpus = topology::allowed_cpus().unwrap_or_default();
    if cpus.len() < 2 || std::fs::File::open("/proc/thread-self/schedstat").is_err() {
        eprintln!("skipped: needs two CPUs and schedstat");
        return;
    }
    let stop = AtomicBool::new(false);
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (first, second) = std::thread::scope(|s| {
        // A thread spinning on each of the workers' CPUs: every worker gets about half of its
        // CPU and none gets clearly more, so they leave their pins.
        for &cpu in &cpus[..2] {
            let stop = &stop;
            s.spawn(move || {
                let _ = topology::pin_current_thread(cpu);
                while !stop.load(Ordering::Relaxed) {
                    spin_for(Duration::from_micros(100));
                }
            });
        }
        let first = rt.run(Color::DEFAULT, || {
            // Long events: a worker running them measures its share after them (it samples
            // at idle spells and every few dozen rounds otherwise, and a round of these is long).
            for i in 0..300u64 {
                ochre::post(Color(1 + i % 16), || spin_for(Duration::from_millis(1)));
            }
        });
        // The next runtime's workers start unpinned. What a pinned worker last measured on a
        // CPU is not theirs (the scheduler places them, and may run them elsewhere), so each
        // starts from a whole CPU, as on a machine not measured yet, until its own windows
        // tell (none in a run this short).
        let second =
            Runtime::builder().workers(2).build().and_then(|rt| rt.run(Color::DEFAULT, || {}));
        stop.store(true, Ordering::Relaxed);
        (first.unwrap(), second.unwrap())
    });
    let shares: Vec<u64> = first.workers.iter().map(|w| w.cpu_share).collect();
    // Each worker measured its shared CPU: it left its pin on that measure, or it is low (an
    // unpinned worker's measure is no longer its CPU's: with more CPUs than two, a free one).
    for (w, s) in first.workers.iter().enumerate() {
        assert!(s.unpinned == 1 || s.cpu_share < 800, "worker {w} measured: {shares:?}");
    }
    if first.workers.iter().all(|w| w.unpinned == 0) {
        eprintln!("not judged: no worker left its pin (shares {shares:?})");
        return;
    }
    for (w, s) in second.workers.iter().enumerate() {
        assert_eq!(s.unpinned, 1, "worker {w} starts unpinned");
        assert_eq!(s.cpu_share, 1000, "worker {w} starts from a whole CPU (first run {shares:?})");
    }
    // The spinners are gone. A second later, the workers that left their pins take them again
    // (at their next sample: the end of a run samples), and new workers start pinned.
    std::thread::sleep(Duration::from_millis(1100));
    let again = rt.run(Color::DEFAULT, || {}).unwrap();
    let fresh = Runtime::builder().workers(2).build().and_then(|rt| rt.run(Color::DEFAULT, || {}));
    for (w, s) in again.workers.iter().enumerate() {
        assert_eq!(s.unpinned, 0, "worker {w} of the first runtime is pinned again");
    }
    for (w, s) in fresh.unwrap().workers.iter().enumerate() {
        assert_eq!(s.unpinned, 0, "worker {w} of a new runtime starts pinned");
    }
}
