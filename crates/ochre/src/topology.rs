//! The machine as a tree (NUMA node > package > L3 > L2 > core), the CPUs this process may use,
//! and pinning.
//!
//! [`Topology::discover`] reads Linux sysfs (node cpulists, package ids, shared caches, core ids)
//! for the CPUs of the affinity mask; [`Topology::synthetic`] builds the same tree from a short
//! description such as `numa:2 l3:1 l2:2 core:2`, so that placement and stealing policies are
//! tested on machines we do not have (the seeds' 8-core Harpertown is `l2:4 core:2`, their 4-node
//! 16-core Opteron `numa:4 core:4`).
//!
//! Every CPU has a path of domain ids, one per level, from the top. The *distance* between two
//! CPUs is the number of levels below the first one where their paths differ: 0 for the same CPU,
//! 1 for two CPUs that share everything but the core, up to the number of levels for CPUs that
//! share nothing. Workers are placed on CPUs in tree order, so consecutive workers fill a cache
//! domain before the next one.

use std::io;
use std::path::Path;

use crate::Error;

/// The levels of the tree, from the top.
pub const LEVELS: [&str; 5] = ["numa", "package", "l3", "l2", "core"];

/// The CPUs, in tree order, and their place in the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    cpus: Vec<usize>,
    /// `paths[i][l]`: the id of CPU `cpus[i]`'s domain at level `LEVELS[l]`.
    paths: Vec<[u32; 5]>,
}

fn read_trim(p: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

/// Parses a sysfs CPU list (`0-3,8,10-11`).
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}

impl Topology {
    /// Reads the tree of the CPUs in this process's affinity mask from sysfs. Levels sysfs does
    /// not describe collapse into one domain.
    ///
    /// The tree is read once per affinity mask and remembered for the process: a runtime built
    /// for each small job read about 14 sysfs files a CPU, twice (a third of the 0.3-0.6 ms its
    /// build took on 2 CPUs, milliseconds on a many-core machine). The mask is read each time
    /// (a process may change it) and is the memo's key; sysfs's description of a CPU is taken
    /// not to change while the process lives (CPU hotplug aside).
    pub fn discover() -> io::Result<Topology> {
        // The mask as last read (in increasing order: `allowed_cpus`) and its tree.
        type Memo = Option<(Vec<usize>, Topology)>;
        static LAST: std::sync::Mutex<Memo> = std::sync::Mutex::new(None);
        let cpus = allowed_cpus()?;
        let mut last = LAST.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, t)) = last.as_ref().filter(|(mask, _)| *mask == cpus) {
            return Ok(t.clone());
        }
        let t = Self::read_sysfs(cpus.clone())?;
        *last = Some((cpus, t.clone()));
        Ok(t)
    }

    /// [`discover`](Self::discover)'s reading of sysfs, for `cpus`.
    fn read_sysfs(cpus: Vec<usize>) -> io::Result<Topology> {
        #[cfg(all(test, not(loom)))]
        tests::SYSFS_READS.with(|n| n.set(n.get() + 1));
        let sys = Path::new("/sys/devices/system");
        let mut node_of = std::collections::HashMap::new();
        if let Ok(dir) = std::fs::read_dir(sys.join("node")) {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(id) = name.strip_prefix("node").and_then(|n| n.parse::<u32>().ok()) else {
                    continue;
                };
                if let Some(list) =
                    read_trim(e.path().join("cpulist")).and_then(|l| parse_cpu_list(&l))
                {
                    for c in list {
                        node_of.insert(c, id);
                    }
                }
            }
        }
        let mut paths = Vec::with_capacity(cpus.len());
        for &c in &cpus {
            let base = sys.join(format!("cpu/cpu{c}"));
            let package = read_trim(base.join("topology/physical_package_id"))
                .and_then(|v| v.parse::<u32>().ok())
                .unwrap_or(0);
            let core = read_trim(base.join("topology/core_id")).and_then(|v| v.parse::<u32>().ok());
            let mut cache = [None, None]; // L3, L2: smallest CPU sharing it, as the domain id
            if let Ok(dir) = std::fs::read_dir(base.join("cache")) {
                for e in dir.flatten() {
                    let p = e.path();
                    let level = read_trim(p.join("level")).and_then(|v| v.parse::<u32>().ok());
                    let kind = read_trim(p.join("type")).unwrap_or_default();
                    if kind == "Instruction" {
                        continue;
                    }
                    let first = read_trim(p.join("shared_cpu_list"))
                        .and_then(|l| parse_cpu_list(&l))
                        .and_then(|l| l.into_iter().min());
                    match level {
                        Some(3) => cache[0] = first.map(|f| f as u32),
                        Some(2) => cache[1] = first.map(|f| f as u32),
                        _ => {}
                    }
                }
            }
            let node = node_of.get(&c).copied().unwrap_or(0);
            // Core ids repeat across packages: make them unique.
            let core = core.map_or(c as u32, |k| package * 65_536 + k);
            paths.push([node, package, cache[0].unwrap_or(0), cache[1].unwrap_or(c as u32), core]);
        }
        let mut t = Topology { cpus, paths };
        t.sort();
        Ok(t)
    }

    /// A machine described by fan-outs per level, e.g. `numa:2 l3:1 l2:2 core:2` (8 CPUs
    /// numbered in tree order). Levels not named have a fan-out of 1; `cpu` is an alias of
    /// `core`.
    pub fn synthetic(description: &str) -> Result<Topology, Error> {
        let mut fan = [1usize; 5];
        for item in description.split_whitespace() {
            let (name, n) = item
                .split_once(':')
                .ok_or_else(|| Error::Config(format!("topology: `{item}` is not level:count")))?;
            let name = if name == "cpu" { "core" } else { name };
            let level = LEVELS.iter().position(|l| *l == name).ok_or_else(|| {
                Error::Config(format!("topology: unknown level `{name}` (levels: {LEVELS:?})"))
            })?;
            fan[level] = n
                .parse()
                .ok()
                .filter(|n: &usize| (1..=4096).contains(n))
                .ok_or_else(|| Error::Config(format!("topology: bad count in `{item}`")))?;
        }
        let total: usize = fan.iter().product();
        if total > 65_536 {
            return Err(Error::Config(format!("topology: {total} CPUs is too many")));
        }
        let mut paths = Vec::with_capacity(total);
        for i in 0..total {
            let mut rest = i;
            let mut path = [0u32; 5];
            let mut prefix = 0usize;
            for l in 0..5 {
                let below: usize = fan[l + 1..].iter().product();
                let k = rest / below;
                rest %= below;
                prefix = prefix * fan[l] + k;
                path[l] = prefix as u32;
            }
            paths.push(path);
        }
        Ok(Topology { cpus: (0..total).collect(), paths })
    }

    /// The synthetic machines the simulator and the tests study, by name: the thesis's 8-core
    /// Harpertown (two packages of four cores, pairs sharing an L2), its 16-core Opteron (four
    /// NUMA nodes of four cores) and a 2-socket 64-core machine (two NUMA nodes of four L3
    /// domains of eight cores, each core with its own L2).
    pub const MACHINES: [(&'static str, &'static str); 3] = [
        ("harpertown8", "package:2 l2:2 core:2"),
        ("opteron16", "numa:4 core:4"),
        ("2socket64", "numa:2 l3:4 l2:8"),
    ];

    /// One of [`MACHINES`](Self::MACHINES) by name (`None` if unknown).
    pub fn named(name: &str) -> Option<Topology> {
        let (_, d) = Self::MACHINES.iter().find(|(n, _)| *n == name)?;
        Self::synthetic(d).ok()
    }

    /// A single domain holding `cpus` (no structure known).
    pub fn flat(cpus: Vec<usize>) -> Topology {
        let paths = cpus.iter().map(|&c| [0, 0, 0, c as u32, c as u32]).collect();
        Topology { cpus, paths }
    }

    fn sort(&mut self) {
        let mut order: Vec<usize> = (0..self.cpus.len()).collect();
        order.sort_by_key(|&i| (self.paths[i], self.cpus[i]));
        self.cpus = order.iter().map(|&i| self.cpus[i]).collect();
        self.paths = order.iter().map(|&i| self.paths[i]).collect();
    }

    /// The CPUs, in tree order.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// Number of CPUs.
    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    /// True if there is no CPU.
    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }

    /// Distance between the CPUs at tree positions `a` and `b` (module doc).
    pub fn distance(&self, a: usize, b: usize) -> usize {
        let (pa, pb) = (&self.paths[a], &self.paths[b]);
        match (0..5).find(|&l| pa[l] != pb[l]) {
            Some(l) => 5 - l,
            None => 0,
        }
    }

    /// How many consecutive workers (placed in tree order) share the nearest cache domain that
    /// holds more than one of them: the size of a color group's home (`Color::grouped`). 1 when
    /// no level groups workers.
    pub fn domain_size(&self, workers: usize) -> usize {
        let n = self.len().max(1);
        let used = workers.min(n);
        // From the level just above the core up: the first that puts two workers together.
        for level in (0..4).rev() {
            let first = self.paths[0][level];
            let size = (0..used).take_while(|&i| self.paths[i][level] == first).count();
            if size >= 2 {
                return size;
            }
        }
        1
    }

    /// For a worker at tree position `me` among `workers` workers placed in tree order (worker
    /// `w` at position `w % len`): the other workers grouped by distance, nearest group first.
    pub fn victim_tiers(&self, me: usize, workers: usize) -> Vec<Vec<usize>> {
        let n = self.len().max(1);
        let mut by_distance: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for w in (0..workers).filter(|&w| w != me) {
            by_distance.entry(self.distance(me % n, w % n)).or_default().push(w);
        }
        by_distance.into_values().collect()
    }
}

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
    allow_current_thread(&[cpu])
}

/// Lets the calling thread run on any of `cpus` (a pinned worker that leaves its CPU's pin).
pub fn allow_current_thread(cpus: &[usize]) -> io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    let in_range = cpus.iter().filter(|&&c| c < rustix::thread::CpuSet::MAX_CPU);
    if in_range.map(|&cpu| set.set(cpu)).count() == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no CPU in range"));
    }
    rustix::thread::sched_setaffinity(None, &set)?;
    Ok(())
}

/// How long the calling thread has run, and waited to run (runnable, not running), so far:
/// Linux's per-thread `schedstat`. `None` where the system does not say.
pub fn thread_times() -> Option<(std::time::Duration, std::time::Duration)> {
    let (run, delay) = crate::cpu_share::read_schedstat(&crate::cpu_share::open_schedstat()?)?;
    Some((std::time::Duration::from_nanos(run), std::time::Duration::from_nanos(delay)))
}

/// The CPU the calling thread last ran on.
pub fn current_cpu() -> usize {
    rustix::thread::sched_getcpu()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    thread_local! {
        /// Times this thread read the tree from sysfs (`Topology::read_sysfs`).
        pub(super) static SYSFS_READS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    #[test]
    fn the_tree_is_read_once_per_affinity_mask() {
        let reads = || SYSFS_READS.with(|n| n.get());
        let cpus = allowed_cpus().unwrap();
        // On a thread of its own: its mask is its own to change, and the count its own.
        std::thread::spawn(move || {
            let all = Topology::discover().unwrap();
            let before = reads();
            assert_eq!(Topology::discover().unwrap(), all, "the same tree again");
            assert_eq!(reads(), before, "from the memo, not from sysfs");
            // Another mask is another tree, read once.
            let first = cpus[0];
            pin_current_thread(first).unwrap();
            let one = Topology::discover().unwrap();
            assert_eq!(one.cpus(), [first]);
            assert_eq!(Topology::discover().unwrap(), one);
            allow_current_thread(&cpus).unwrap();
            assert_eq!(Topology::discover().unwrap(), all, "back to the whole mask");
            let extra = if cpus.len() > 1 { 2 } else { 0 };
            assert!(reads() <= before + extra, "{} reads for two masks", reads() - before);
        })
        .join()
        .unwrap();
    }

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
    fn leaving_a_pin_lets_the_thread_run_on_every_cpu_given() {
        let cpus = allowed_cpus().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(cpus[0]).unwrap();
            allow_current_thread(&cpus).unwrap();
            assert_eq!(allowed_cpus().unwrap(), cpus);
            assert!(allow_current_thread(&[]).is_err(), "no CPU at all");
            assert_eq!(allowed_cpus().unwrap(), cpus, "a refused call changes nothing");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_threads_times_grow_as_it_runs_and_are_its_own() {
        use std::time::{Duration, Instant};
        let (ready, wait_ready) = std::sync::mpsc::channel::<()>();
        let (done, wait_done) = std::sync::mpsc::channel::<()>();
        // A thread blocked the whole time the other spins: its run time is its own, so it
        // hardly grows. (Run time only: waiting for a CPU once woken is not bounded on a
        // loaded machine.)
        let sleeper = std::thread::spawn(move || {
            let first = thread_times().map(|(run, _)| run);
            // Read before the spinner starts (or not at all): its window holds the whole spin.
            let _ = ready.send(());
            let run0 = first?;
            wait_done.recv().ok();
            Some(thread_times()?.0 - run0)
        });
        let spinner = std::thread::spawn(move || {
            wait_ready.recv().ok();
            let (run0, _) = thread_times()?;
            let ran = || thread_times().unwrap().0 - run0;
            // Wall time can pass with the thread not running (a loaded machine, a virtual CPU
            // the host took away): spin until its own run time says 20 ms, within a bound that
            // only a reading that never grows reaches.
            let t0 = Instant::now();
            while ran() < Duration::from_millis(20) && t0.elapsed() < Duration::from_secs(20) {
                std::hint::spin_loop();
            }
            Some(ran())
        });
        let spun = spinner.join().unwrap();
        // Gone already where there is no schedstat (the sleeper returned at its first read).
        let _ = done.send(());
        let slept = sleeper.join().unwrap();
        let (Some(spun), Some(slept)) = (spun, slept) else { return };
        assert!(spun >= Duration::from_millis(20), "a spinning thread ran {spun:?}");
        assert!(slept < Duration::from_millis(10), "a blocked thread ran {slept:?}");
    }

    #[test]
    fn pinning_to_a_missing_cpu_fails_cleanly() {
        let err = std::thread::spawn(|| pin_current_thread(100_000)).join().unwrap();
        assert!(err.is_err());
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8,10-11"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn this_machine_is_discovered() {
        let t = Topology::discover().unwrap();
        assert_eq!(t.len(), allowed_cpus().unwrap().len());
        let mut sorted = t.cpus().to_vec();
        sorted.sort();
        assert_eq!(sorted, allowed_cpus().unwrap());
        for i in 0..t.len() {
            assert_eq!(t.distance(i, i), 0);
        }
    }

    #[test]
    fn harpertown_pairs_share_an_l2() {
        // The thesis's 8-core machine: two packages of four cores in pairs sharing an L2.
        let t = Topology::synthetic("package:2 l2:2 core:2").unwrap();
        assert_eq!(t.len(), 8);
        assert_eq!(t.distance(0, 1), 1, "same L2");
        assert_eq!(t.distance(0, 2), 2, "same package (and L3 level), other L2");
        assert_eq!(t.distance(0, 4), 4, "other package");
        assert_eq!(t.victim_tiers(0, 8), vec![vec![1], vec![2, 3], vec![4, 5, 6, 7]]);
    }

    #[test]
    fn cache_domains_size_color_groups() {
        assert_eq!(Topology::synthetic("package:2 l2:2 core:2").unwrap().domain_size(8), 2);
        assert_eq!(Topology::synthetic("numa:4 core:4").unwrap().domain_size(16), 4);
        assert_eq!(Topology::synthetic("numa:4 core:4").unwrap().domain_size(2), 2);
        assert_eq!(Topology::synthetic("core:1").unwrap().domain_size(4), 1);
        assert_eq!(
            Topology::flat(vec![0, 1, 2]).domain_size(3),
            3,
            "no structure known: one domain"
        );
    }

    #[test]
    fn opteron_nodes_are_the_far_tier() {
        let t = Topology::synthetic("numa:4 core:4").unwrap();
        assert_eq!(t.len(), 16);
        let tiers = t.victim_tiers(5, 16);
        assert_eq!(tiers[0], vec![4, 6, 7], "same node first");
        assert_eq!(tiers[1].len(), 12, "then every other node");
        // More workers than CPUs wrap around the tree.
        let tiers = t.victim_tiers(0, 20);
        assert_eq!(tiers[0], vec![16], "worker 16 sits on CPU 0 too");
    }

    #[test]
    fn named_machines_have_their_sizes() {
        let sizes: Vec<usize> =
            Topology::MACHINES.iter().map(|(n, _)| Topology::named(n).unwrap().len()).collect();
        assert_eq!(sizes, [8, 16, 64]);
        let t = Topology::named("2socket64").unwrap();
        assert_eq!(t.distance(0, 1), 2, "same L3, own L2");
        assert_eq!(t.distance(0, 8), 3, "same node, other L3");
        assert_eq!(t.distance(0, 32), 5, "other socket");
        assert_eq!(t.domain_size(64), 8);
        assert!(Topology::named("vax").is_none());
    }

    #[test]
    fn bad_descriptions_are_refused() {
        for d in ["numa", "l9:2", "core:0", "core:x", "numa:4096 core:4096"] {
            assert!(matches!(Topology::synthetic(d), Err(Error::Config(_))), "{d}");
        }
        assert_eq!(Topology::synthetic("").unwrap().len(), 1);
    }
}
