//! The CPUs this process may use, and pinning threads to them.
//!
//! Only the flat list for now: the topology tree (NUMA nodes, shared caches) that locality-aware
//! stealing needs is read from sysfs by the stealing work.

use std::io;

/// The CPUs in this process's affinity mask, in increasing order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    let set = rustix::thread::sched_getaffinity(None)?;
    Ok((0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect())
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("CPU {cpu} out of range")));
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)?;
    Ok(())
}

/// The CPU the calling thread last ran on.
pub fn current_cpu() -> usize {
    rustix::thread::sched_getcpu()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn pinning_moves_the_thread() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        let last = *cpus.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(last).unwrap();
            assert_eq!(current_cpu(), last);
            assert_eq!(allowed_cpus().unwrap(), vec![last]);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn pinning_to_a_missing_cpu_fails_cleanly() {
        let err = std::thread::spawn(|| pin_current_thread(100_000)).join().unwrap();
        assert!(err.is_err());
    }
}
