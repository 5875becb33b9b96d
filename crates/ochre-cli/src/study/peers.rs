//! Before a study: the peer programs its benchmarks compare against (nginx, wrk), installed by
//! `scripts/install-peers.sh` when this process can (root, apt-get) and is allowed to, or a
//! clear line saying they were not and what that leaves out.
//!
//! The script is built into the binary, so that a study run from any directory can install the
//! peers. Whatever happens, the study goes on: a benchmark measures the rows that do not need a
//! missing peer and names in its notes what it skipped.

use std::io::Write as _;
use std::process::{Command, Stdio};

use ochre_bench::sws::PeerPrograms;

/// `scripts/install-peers.sh`, as built into this binary.
const INSTALL_SCRIPT: &str = include_str!("../../../../scripts/install-peers.sh");

/// What to do about the peers.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Every peer is there.
    Ready,
    /// Install the missing ones with the script.
    Install(Vec<&'static str>),
    /// Missing, and not installed, for this reason.
    Leave { missing: Vec<&'static str>, why: &'static str },
}

/// The plan for `missing` peers: installed when `allowed`, running as root and with apt-get.
pub(crate) fn plan(missing: Vec<&'static str>, allowed: bool, root: bool, apt: bool) -> Plan {
    if missing.is_empty() {
        return Plan::Ready;
    }
    let why = match (allowed, root, apt) {
        (true, true, true) => return Plan::Install(missing),
        (false, _, _) => "--no-install-peers was given",
        (true, false, _) => "installing needs root",
        (true, true, false) => "installing needs apt-get",
    };
    Plan::Leave { missing, why }
}

/// The line saying which peers are missing, why they were not installed and what that means.
fn left_out(missing: &[&str], why: &str) -> String {
    format!(
        "study: {} not installed ({why}): the rows that need them are skipped, every other row \
         is measured (run scripts/install-peers.sh as root to have them)",
        missing.join(", ")
    )
}

/// Whether `cmd` can be started from the PATH.
fn on_path(cmd: &str) -> bool {
    Command::new(cmd).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// Installs the missing peers when allowed and possible, and says on stderr what the study
/// will run without. Never fails: a peer that cannot be had only leaves out its rows.
pub(crate) fn prepare(allowed: bool) {
    // taskset comes with util-linux, not from the script: loadgen notes it if missing.
    let installable = |p: &PeerPrograms| -> Vec<&'static str> {
        p.missing().into_iter().filter(|&m| m != "taskset").collect()
    };
    let missing = installable(&PeerPrograms::detect());
    let root = rustix::process::geteuid().is_root();
    match plan(missing, allowed, root, on_path("apt-get")) {
        Plan::Ready => eprintln!("study: peers nginx and wrk found"),
        Plan::Leave { missing, why } => eprintln!("{}", left_out(&missing, why)),
        Plan::Install(missing) => {
            eprintln!(
                "study: installing {} with scripts/install-peers.sh (apt-get; \
                 --no-install-peers to run without them)",
                missing.join(", ")
            );
            if let Err(e) = run_script() {
                eprintln!("study: scripts/install-peers.sh could not run: {e}");
            }
            let still = installable(&PeerPrograms::detect());
            if !still.is_empty() {
                eprintln!("{}", left_out(&still, "the installation failed"));
            }
        }
    }
}

/// Runs the built-in copy of the script with bash.
fn run_script() -> std::io::Result<()> {
    let mut bash = Command::new("bash").arg("-s").stdin(Stdio::piped()).spawn()?;
    if let Some(mut stdin) = bash.stdin.take() {
        stdin.write_all(INSTALL_SCRIPT.as_bytes())?;
    }
    let status = bash.wait()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("it ended with {status}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_installed_only_when_allowed_and_possible() {
        assert_eq!(plan(vec![], true, true, true), Plan::Ready);
        assert_eq!(plan(vec![], false, false, false), Plan::Ready, "nothing to install");
        assert_eq!(
            plan(vec!["nginx", "wrk"], true, true, true),
            Plan::Install(vec!["nginx", "wrk"])
        );
        let leave = |why| Plan::Leave { missing: vec!["wrk"], why };
        assert_eq!(plan(vec!["wrk"], false, true, true), leave("--no-install-peers was given"));
        assert_eq!(plan(vec!["wrk"], true, false, true), leave("installing needs root"));
        assert_eq!(plan(vec!["wrk"], true, true, false), leave("installing needs apt-get"));
    }

    #[test]
    fn the_line_names_what_is_missing_and_why() {
        let line = left_out(&["nginx", "wrk"], "installing needs root");
        assert!(line.starts_with("study: nginx, wrk not installed (installing needs root)"));
        assert!(line.contains("every other row is measured"));
    }

    #[test]
    fn the_built_in_script_is_the_installer() {
        assert!(INSTALL_SCRIPT.starts_with("#!/usr/bin/env bash"));
        assert!(INSTALL_SCRIPT.contains("apt-get install"));
    }
}
