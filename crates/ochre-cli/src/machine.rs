//! What the runtime sees of this machine (`ochre info`, the study's `machine.json`): CPUs,
//! wake-up latencies, the spin threshold, the system, and the versions of the peers measured.
//!
//! Needs no benchmark code: `ochre info` works in a build without the `bench` feature.

/// The machine as the runtime sees it (`ochre info`, `machine.json`).
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct MachineInfo {
    pub(crate) cpus: Vec<usize>,
    pub(crate) padded_build: bool,
    pub(crate) wakeup_latency_us: Vec<(String, f64)>,
    pub(crate) default_spin_threshold_us: f64,
    pub(crate) default_config: ochre::Config,
    pub(crate) ochre_version: String,
    /// The CPU model and kernel (from /proc).
    #[serde(default)]
    pub(crate) system: Vec<(String, String)>,
    /// Versions of the peers measured: crates as locked in this build, tools as they report.
    #[serde(default)]
    pub(crate) versions: Vec<(String, String)>,
}

/// The peer crates whose versions the report gives.
const PEER_CRATES: [&str; 8] = [
    "tokio",
    "rayon",
    "crossbeam-channel",
    "tikv-jemallocator",
    "mimalloc",
    "snmalloc-rs",
    "hdrhistogram",
    "httparse",
];

/// `name`'s version in a Cargo.lock text.
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l.trim() == format!("name = \"{name}\"") {
            let v = lines.next()?.trim().strip_prefix("version = \"")?.strip_suffix('"')?;
            return Some(v.to_string());
        }
    }
    None
}

/// The first line a tool prints for its version flag (either stream), if it runs.
fn tool_version(cmd: &str, flag: &str) -> Option<String> {
    let out = std::process::Command::new(cmd).arg(flag).output().ok()?;
    let text = [out.stdout, out.stderr].concat();
    let line = String::from_utf8_lossy(&text).lines().next()?.trim().to_string();
    (!line.is_empty()).then_some(line)
}

fn versions() -> Vec<(String, String)> {
    let lock = include_str!("../../../Cargo.lock");
    let mut v: Vec<(String, String)> = PEER_CRATES
        .iter()
        .filter_map(|c| Some((c.to_string(), locked_version(lock, c)?)))
        .collect();
    for (tool, flag) in [("rustc", "-V"), ("nginx", "-v"), ("wrk", "-v")] {
        let seen = tool_version(tool, flag).unwrap_or_else(|| "not installed".into());
        v.push((tool.to_string(), seen));
    }
    v
}

fn system() -> Vec<(String, String)> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    vec![("cpu".into(), cpu), ("kernel".into(), kernel)]
}

pub(crate) fn machine_info() -> Result<MachineInfo, String> {
    let cpus = ochre::topology::allowed_cpus().map_err(|e| format!("reading CPU affinity: {e}"))?;
    let mut wakeup_latency_us = Vec::new();
    for kind in [ochre::Wakeup::Futex, ochre::Wakeup::Condvar, ochre::Wakeup::Pipe] {
        let d = ochre::measure_wakeup(kind, 15).map_err(|e| format!("measuring {kind:?}: {e}"))?;
        wakeup_latency_us.push((format!("{kind:?}"), d.as_secs_f64() * 1e6));
    }
    let rt = ochre::Runtime::builder().workers(1).pin(false).build().map_err(|e| e.to_string())?;
    Ok(MachineInfo {
        cpus,
        padded_build: ochre::PADDED,
        wakeup_latency_us,
        default_spin_threshold_us: rt.spin_threshold().as_secs_f64() * 1e6,
        default_config: ochre::Config::default(),
        ochre_version: env!("CARGO_PKG_VERSION").into(),
        system: system(),
        versions: versions(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_versions_come_from_the_lock_file() {
        let lock =
            "[[package]]\nname = \"tokio\"\nversion = \"1.48.0\"\n\n[[package]]\nname = \"x\"\n";
        assert_eq!(locked_version(lock, "tokio").as_deref(), Some("1.48.0"));
        assert_eq!(locked_version(lock, "x"), None);
        assert_eq!(locked_version(lock, "rayon"), None);
        let v = versions();
        assert!(v.iter().any(|(k, v)| k == "tokio" && v.starts_with('1')), "{v:?}");
    }
}
