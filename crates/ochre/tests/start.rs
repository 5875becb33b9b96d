//! A runtime's start: `build` returns once every worker is through its start (pinned, its heap
//! made) and waits at the gate, so that its first run starts as its later ones do. Alone in
//! its own test binary: it reads every thread of the process, and another test's runtime
//! starting beside it would show threads still in their starts.

use ochre::Runtime;

/// The CPUs thread `tid` of this process may run on (`Cpus_allowed_list` of its status).
fn allowed_cpus_of(tid: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|v| v.trim().to_string())
}

/// The ids of this process's threads named like ochre's workers.
fn worker_threads() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    dir.filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|tid| {
            std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).is_ok_and(|c| {
                c.trim()
                    .strip_prefix("ochre-w")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .collect()
}

#[test]
fn build_returns_with_every_worker_pinned_and_waiting() {
    if ochre::topology::allowed_cpus().unwrap().len() < 2 {
        // One CPU: a pinned worker's mask is the process's, which tells nothing.
        eprintln!("not judged: one CPU");
        return;
    }
    // Many lives: a worker still in its start when `build` returned shows its unpinned mask
    // (the process's) in most of them.
    // Workers that may leave their pins start unpinned where a worker of this process found
    // the machine shared (`cpu_share::machine_shared`): on a busy host that is not this rule.
    let config = ochre::Config::default().unpin_when_shared(false);
    for life in 0..50 {
        let rt = Runtime::builder().workers(2).config(config.clone()).build().unwrap();
        let threads = worker_threads();
        assert_eq!(threads.len(), 2, "life {life}: worker threads {threads:?}");
        for tid in &threads {
            let Some(allowed) = allowed_cpus_of(tid) else { continue }; // Gone meanwhile.
            assert!(
                !allowed.contains(',') && !allowed.contains('-'),
                "life {life}: worker thread {tid} may run on {allowed} when build returned"
            );
        }
        rt.run(ochre::Color(0), || {}).unwrap();
        drop(rt);
        // A joined thread leaves `/proc/self/task` a moment after `join` returns.
        let gone = std::time::Instant::now();
        while !worker_threads().is_empty() && gone.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::yield_now();
        }
    }
}
