//! A CPU quota (a container's cgroup limit) bounds the default number of workers: a process
//! given one CPU's worth of time on a two-CPU mask starts one worker, not two. The test makes a
//! cgroup with that quota where it may (root, a writable cgroup v1 `cpu` controller or a cgroup
//! v2 tree with `cpu`), runs itself in it, and removes it; elsewhere it says why and passes.

use std::path::PathBuf;
use std::process::Command;

const CHILD: &str = "OCHRE_QUOTA_TEST_CHILD";

/// A fresh cgroup limited to one CPU's worth of time, or why there is none.
fn one_cpu_cgroup() -> Result<PathBuf, String> {
    let name = format!("ochre-quota-test-{}", std::process::id());
    let v1 = PathBuf::from("/sys/fs/cgroup/cpu");
    let v2 = PathBuf::from("/sys/fs/cgroup");
    if v1.join("cpu.cfs_quota_us").exists() {
        let dir = v1.join(&name);
        std::fs::create_dir(&dir).map_err(|e| format!("making {}: {e}", dir.display()))?;
        let period: u64 = std::fs::read_to_string(dir.join("cpu.cfs_period_us"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or(100_000);
        std::fs::write(dir.join("cpu.cfs_quota_us"), period.to_string())
            .map_err(|e| format!("setting the quota: {e}"))?;
        Ok(dir)
    } else if std::fs::read_to_string(v2.join("cgroup.subtree_control"))
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu"))
    {
        let dir = v2.join(&name);
        std::fs::create_dir(&dir).map_err(|e| format!("making {}: {e}", dir.display()))?;
        std::fs::write(dir.join("cpu.max"), "100000 100000")
            .map_err(|e| format!("setting the quota: {e}"))?;
        Ok(dir)
    } else {
        Err("no writable cgroup cpu controller".into())
    }
}

#[test]
fn a_cpu_quota_bounds_the_default_workers() {
    if std::env::var_os(CHILD).is_some() {
        let rt = ochre::Runtime::builder().pin(false).build().unwrap();
        println!("workers={}", rt.workers());
        return;
    }
    let cpus = ochre::topology::allowed_cpus().unwrap().len();
    if cpus < 2 {
        eprintln!("skipped: one CPU in the affinity mask, a quota of one changes nothing");
        return;
    }
    let dir = match one_cpu_cgroup() {
        Ok(d) => d,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    // The shell joins the cgroup, then becomes this test binary running only this test.
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"echo $$ > "$0/cgroup.procs" && exec "$1" --exact a_cpu_quota_bounds_the_default_workers --nocapture"#)
        .arg(&dir)
        .arg(std::env::current_exe().unwrap())
        .env(CHILD, "1")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("workers=1\n"), "one CPU's worth of time, one worker: {stdout}");
    // Outside the cgroup, the same build starts a worker per CPU.
    let rt = ochre::Runtime::builder().pin(false).build().unwrap();
    assert_eq!(rt.workers(), std::thread::available_parallelism().unwrap().get().min(cpus));
}
