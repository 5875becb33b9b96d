//! Before a study: the peer programs its benchmarks compare against (nginx, wrk), installed by
//! `scripts/install-peers.sh` when this process can (root, apt-get) and is allowed to, or a
//! clear line saying they were not and what that leaves out; and Phoenix 2.0, the MapReduce
//! peer, built from the project's copy of its sources by `scripts/build-phoenix.sh` when it is
//! not built yet (a few seconds; with `--no-install-peers` the script builds it but installs no
//! allocator package).
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

/// `scripts/build-phoenix.sh` in the source tree this binary was built from (it builds into that
/// tree's `target/phoenix`, where `bench mr` looks).
fn phoenix_script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/build-phoenix.sh")
}

/// What to do about Phoenix.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PhoenixPlan {
    /// Built already.
    Ready,
    /// Build it with the script.
    Build,
    /// Not built and cannot be: `bench mr` skips its Phoenix systems with a note.
    Leave(&'static str),
}

/// The plan for Phoenix: built, or built by the script when the script is there.
pub(crate) fn phoenix_plan(built: bool, script_found: bool) -> PhoenixPlan {
    match (built, script_found) {
        (true, _) => PhoenixPlan::Ready,
        (false, true) => PhoenixPlan::Build,
        (false, false) => {
            PhoenixPlan::Leave("scripts/build-phoenix.sh is not beside this binary's sources")
        }
    }
}

/// Builds Phoenix when it is not built (see the module doc). Never fails: without it, `bench
/// mr` measures the other systems and names what it skipped.
pub(crate) fn prepare_phoenix(allowed: bool) {
    let script = phoenix_script();
    match phoenix_plan(ochre_bench::mr::phoenix_built(), script.exists()) {
        PhoenixPlan::Ready => eprintln!("study: Phoenix 2.0 found"),
        PhoenixPlan::Leave(why) => {
            eprintln!("study: Phoenix 2.0 not built ({why}): bench mr skips its Phoenix rows")
        }
        PhoenixPlan::Build => {
            eprintln!("study: building Phoenix 2.0 with scripts/build-phoenix.sh");
            let mut cmd = Command::new("bash");
            cmd.arg(&script);
            if !allowed {
                cmd.env("OCHRE_NO_APT", "1");
            }
            match cmd.status() {
                Ok(s) if s.success() && ochre_bench::mr::phoenix_built() => {}
                Ok(s) => eprintln!(
                    "study: scripts/build-phoenix.sh ended with {s}: bench mr skips the Phoenix \
                     rows it cannot run"
                ),
                Err(e) => eprintln!("study: scripts/build-phoenix.sh could not run: {e}"),
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
    fn phoenix_is_built_when_missing_and_its_script_is_there() {
        assert_eq!(phoenix_plan(true, true), PhoenixPlan::Ready);
        assert_eq!(phoenix_plan(true, false), PhoenixPlan::Ready, "nothing to build");
        assert_eq!(phoenix_plan(false, true), PhoenixPlan::Build);
        assert!(matches!(phoenix_plan(false, false), PhoenixPlan::Leave(_)));
        assert!(phoenix_script().exists(), "the study finds the build script of this tree");
    }

    #[test]
    fn the_built_in_script_is_the_installer() {
        assert!(INSTALL_SCRIPT.starts_with("#!/usr/bin/env bash"));
        assert!(INSTALL_SCRIPT.contains("apt-get install"));
    }
}
