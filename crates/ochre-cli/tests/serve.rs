//! `ochre serve` as a user runs it: one process, and N-COPY (several processes on one port).

use std::process::{Command, Stdio};

mod common;
use common::{free_port, get, stop, wait_ready};

fn site(tag: &str) -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("ochre-serve-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "hello\n").unwrap();
    root
}

/// Starts `ochre serve` on `root` at `port` (loopback) with `args`, its stderr discarded.
fn serve(root: &std::path::Path, port: u16, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_ochre"))
        .args(["serve", "--root", root.to_str().unwrap(), "--listen", &format!("127.0.0.1:{port}")])
        .args(args)
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn serve_answers_and_stops_gracefully_on_sigterm() {
    let root = site("one");
    let port = free_port();
    let mut child = serve(&root, port, &["--workers", "2"]);
    wait_ready(port, &mut child);
    let page = get(port, "/").unwrap();
    assert!(page.starts_with("HTTP/1.1 200 OK") && page.ends_with("hello\n"), "{page}");
    assert!(stop(child).success());
    std::fs::remove_dir_all(root).unwrap();
}

/// `--backlog` sets the listen queue; without it the queue is the system's maximum (`ss` shows a
/// listening socket's queue size as its Send-Q).
#[test]
fn the_listen_backlog_is_the_flag_or_the_systems_maximum() {
    let root = site("backlog");
    let send_q = |port: u16| -> u32 {
        let out = Command::new("ss")
            .args(["-Hltn", &format!("sport = :{port}")])
            .output()
            .expect("ss (iproute2) runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.split_whitespace()
            .nth(2)
            .and_then(|q| q.parse().ok())
            .unwrap_or_else(|| panic!("{text}"))
    };
    let somaxconn: u32 =
        std::fs::read_to_string("/proc/sys/net/core/somaxconn").unwrap().trim().parse().unwrap();
    for (flag, expected) in [(Some("77"), 77), (None, somaxconn)] {
        let port = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ochre"));
        cmd.args(["serve", "--root", root.to_str().unwrap(), "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .args(["--workers", "1"])
            .stderr(Stdio::null());
        if let Some(b) = flag {
            cmd.args(["--backlog", b]);
        }
        let mut child = cmd.spawn().unwrap();
        wait_ready(port, &mut child);
        assert_eq!(send_q(port), expected, "--backlog {flag:?}");
        assert!(stop(child).success());
    }
    std::fs::remove_dir_all(root).unwrap();
}

/// The printed configuration is a file `--config` takes, edited as a user would.
#[test]
fn the_printed_configuration_is_a_working_config_file() {
    let out = Command::new(env!("CARGO_BIN_EXE_ochre"))
        .args(["serve", "--print-config"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let sample = String::from_utf8(out.stdout).unwrap();
    assert!(sample.contains("\nrevalidate = \"inotify\"\n"), "{sample}");
    let root = site("config");
    let edited = sample
        .replace("root = \".\"", &format!("root = {:?}", root.to_str().unwrap()))
        .replace("# status_path = ", "status_path = ");
    assert_ne!(edited, sample);
    let file = root.with_extension("toml");
    std::fs::write(&file, edited).unwrap();
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ochre"))
        .args(["serve", "--config", file.to_str().unwrap()])
        .args(["--listen", &format!("127.0.0.1:{port}"), "--workers", "1"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_ready(port, &mut child);
    assert!(get(port, "/").unwrap().ends_with("hello\n"));
    let status = get(port, "/.ochre/status").unwrap();
    assert!(status.starts_with("HTTP/1.1 200") && status.contains("\"requests\""), "{status}");
    assert!(stop(child).success());
    std::fs::remove_dir_all(root).unwrap();
    std::fs::remove_file(file).unwrap();
}

#[test]
fn n_copy_spreads_connections_over_processes_sharing_the_port() {
    let root = site("copies");
    let port = free_port();
    let mut child = serve(&root, port, &["--copies", "2", "--status-path", "/.ochre/status"]);
    wait_ready(port, &mut child);
    // The port answers as soon as one copy listens; the other may bind a moment later (the
    // kernel spreads only over the sockets bound): ask at least 60 times, and for up to 10 s
    // until both have answered.
    let mut pids = std::collections::HashSet::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    for asked in 0.. {
        if asked >= 60 && (pids.len() >= 2 || std::time::Instant::now() > deadline) {
            break;
        }
        let status = get(port, "/.ochre/status").unwrap();
        let pid = status
            .split("\"pid\": ")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .unwrap()
            .trim()
            .to_string();
        pids.insert(pid);
    }
    assert_eq!(pids.len(), 2, "both copies answered: {pids:?}");
    assert!(!pids.contains(&child.id().to_string()), "the parent only supervises");
    assert!(stop(child).success(), "the parent forwards SIGTERM and its copies stop cleanly");
    assert!(get(port, "/").is_none(), "nothing listens any more");
    std::fs::remove_dir_all(root).unwrap();
}

/// SIGTERM may reach the N-COPY parent while its copies start, before they watch their own
/// signals: the parent forwards it, and copies ended by it have stopped as asked, not failed.
#[test]
fn n_copy_stops_cleanly_on_sigterm_while_its_copies_start() {
    let root = site("early");
    let port = free_port();
    let child = serve(&root, port, &["--copies", "2"]);
    // The parent watches its signals before it starts a copy: once both copies exist, signal it
    // at once (a copy takes milliseconds to build its runtime and watch its signals).
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read_to_string(&children).map_or(0, |c| c.split_whitespace().count()) < 2 {
        assert!(std::time::Instant::now() < deadline, "the parent started its copies");
        std::thread::yield_now();
    }
    assert!(stop(child).success(), "copies stopped by the forwarded SIGTERM are not failures");
    assert!(get(port, "/").is_none(), "nothing listens");
    std::fs::remove_dir_all(root).unwrap();
}

/// Copies do not outlive their parent: killed outright, it leaves no orphan serving the port.
#[test]
fn n_copy_copies_stop_when_their_parent_is_killed() {
    let root = site("orphans");
    let port = free_port();
    let mut child = serve(&root, port, &["--copies", "2"]);
    wait_ready(port, &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while get(port, "/").is_some() {
        assert!(std::time::Instant::now() < deadline, "a copy still serves after its parent died");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::fs::remove_dir_all(root).unwrap();
}
