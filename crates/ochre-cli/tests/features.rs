//! What the `bench` feature changes in the `ochre` command: with it (the default) `bench` and
//! `study` are listed and run; without it they are absent from the help and, asked for anyway,
//! answer that this build lacks them.

use std::process::{Command, Output};

fn ochre(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ochre")).args(args).output().unwrap()
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn the_tool_commands_are_in_every_build() {
    let help = text(&ochre(&["--help"]));
    for command in ["info", "serve", "load", "fileset"] {
        assert!(help.contains(&format!("\n  {command} ")), "{command} missing:\n{help}");
    }
}

#[cfg(feature = "bench")]
#[test]
fn a_bench_build_has_bench_and_study() {
    let help = text(&ochre(&["--help"]));
    assert!(help.contains("\n  bench ") && help.contains("\n  study "), "{help}");
    let out = ochre(&["bench", "--help"]);
    assert!(out.status.success());
    assert!(text(&out).contains("--reps"), "{}", text(&out));
}

/// `--strict` fails exactly when the table shows a missed goal (which goals hold depends on the
/// machine: the test asks only that exit status and table agree).
#[cfg(feature = "bench")]
#[test]
fn strict_bench_fails_exactly_when_a_goal_is_missed() {
    let out = ochre(&["bench", "wakeup", "--quick", "--reps", "1", "--workers", "2", "--strict"]);
    let (table, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let missed = table.contains("[MISSED]");
    assert_eq!(out.status.success(), !missed, "{table}{err}");
    assert_eq!(err.contains("--strict:"), missed, "{err}");
}

#[cfg(not(feature = "bench"))]
#[test]
fn a_build_without_bench_says_what_it_lacks() {
    let help = text(&ochre(&["--help"]));
    assert!(!help.contains("\n  bench ") && !help.contains("\n  study "), "{help}");
    for args in [&["bench", "pingpong", "--quick"][..], &["study", "--quick"], &["bench", "--help"]]
    {
        let out = ochre(args);
        assert!(!out.status.success(), "{args:?} should fail");
        let said = text(&out);
        assert!(said.contains("without the `bench` feature"), "{args:?}: {said}");
    }
}

/// A reader that closes the pipe early (`ochre sim run CASE | head -1`) ends the command
/// quietly, as it ends `cat`: no panic message.
#[cfg(feature = "bench")]
#[test]
fn a_simulation_printed_into_a_closed_pipe_ends_quietly() {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_ochre"))
        .args(["sim", "run", "pingpong"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close our end of its output before it writes: every write it makes meets a closed pipe.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
}
