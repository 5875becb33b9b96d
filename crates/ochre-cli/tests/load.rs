//! `ochre load` as a user runs it: against `ochre serve`, with verification, CSV and JSON out,
//! spread over a worker process, with wrk's short flags and durations with units; bad input
//! answered with a clear error, never a panic.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn ochre() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ochre"))
}

fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A child process killed when the test ends, passed or failed.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn load_verifies_writes_csv_and_json_and_spreads_over_a_worker() {
    let dir = std::env::temp_dir().join(format!("ochre-cli-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let made = ochre()
        .args(["fileset", "--dir", dir.to_str().unwrap(), "--size-mib", "5"])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let port = free_port();
    let _server = Killed(
        ochre()
            .args(["serve", "--root", dir.to_str().unwrap()])
            .args(["--listen", &format!("127.0.0.1:{port}"), "--workers", "1"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(port);
    let worker_port = free_port();
    let mut worker = Killed(
        ochre()
            .args(["load", "--worker", "--listen", &format!("127.0.0.1:{worker_port}")])
            .args(["--jobs", "1", "--workers", "1"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(worker_port);
    let (csv, json) = (dir.join("series.csv"), dir.join("report.json"));
    let out = ochre()
        .args(["load", &format!("http://127.0.0.1:{port}/"), "--mix"])
        .arg(dir.join("mix.txt"))
        .arg("--verify")
        .arg(&dir)
        .args(["--clients", "8", "--duration", "1.5", "--warmup", "0.2", "--workers", "1"])
        .args(["--remote", &format!("127.0.0.1:{worker_port}"), "--csv"])
        .arg(&csv)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("errors: none") && text.contains("merged from 2 injectors"), "{text}");
    assert!(worker.0.wait().unwrap().success(), "the worker stops after its one job");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let ok = report["ok"].as_u64().unwrap();
    assert!(ok > 100, "{report}");
    let series = std::fs::read_to_string(&csv).unwrap();
    let from_csv: u64 =
        series.lines().skip(1).map(|l| l.split(',').nth(1).unwrap().parse::<u64>().unwrap()).sum();
    assert_eq!(from_csv, ok, "{series}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// wrk's habits: short flags, durations with units; `ochre serve DIR --port P`; the report
/// breaks responses down by status code and writes latencies in a unit that suits them.
#[test]
fn load_takes_short_flags_and_units_and_counts_responses_by_status() {
    let dir = std::env::temp_dir().join(format!("ochre-cli-short-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("index.html"), "hello\n").unwrap();
    let port = free_port();
    let _server = Killed(
        ochre()
            .args(["serve", dir.to_str().unwrap(), "--port", &port.to_string(), "--workers", "1"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(port);
    let json = dir.with_extension("json");
    let out = ochre()
        .args(["load", &format!("http://127.0.0.1:{port}/")])
        .arg(format!("http://127.0.0.1:{port}/missing"))
        .args(["-c", "2", "-d", "600ms", "--warmup", "100ms", "--cooldown", "0s", "-t", "1"])
        .args(["--think", "1ms", "--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("think 1ms"), "{text}");
    let status = text.lines().find(|l| l.starts_with("status: ")).unwrap_or_default();
    assert!(status.contains(" 404=") && status.starts_with("status: 200="), "{text}");
    let p50 = text.split(" p50=").nth(1).and_then(|r| r.split(' ').next()).unwrap_or_default();
    let number = p50.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    assert!(number.parse::<f64>().is_ok(), "{p50} in {text}");
    assert!(["us", "ms", "s"].contains(&&p50[number.len()..]), "{p50} in {text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let (ok, found) = (report["status"]["200"].as_u64(), report["status"]["404"].as_u64());
    assert_eq!(ok, report["ok"].as_u64(), "{report}");
    assert_eq!(found, report["errors"][4].as_u64(), "404s are status errors: {report}");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&json).unwrap();
}

/// A worker reports what it cannot serve through the `log` facade, one `ochre: module:` line
/// each (silenced with OCHRE_LOG=off), and goes on.
#[test]
fn a_worker_logs_a_connection_that_brings_no_job() {
    use std::io::{Read, Write};
    for (setting, shown) in [(None, true), (Some("off"), false)] {
        let port = free_port();
        let mut command = ochre();
        command.args(["load", "--worker", "--listen", &format!("127.0.0.1:{port}")]);
        if let Some(s) = setting {
            command.env("OCHRE_LOG", s);
        }
        let mut worker = Killed(command.stderr(Stdio::piped()).spawn().unwrap());
        wait_listening(port);
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"not a job\n").unwrap();
        drop(s);
        // The worker is still there for the next master.
        std::thread::sleep(Duration::from_millis(300));
        wait_listening(port);
        let _ = worker.0.kill();
        let mut err = String::new();
        worker.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let line = "ochre: ochre_load::remote: 127.0.0.1:";
        assert_eq!(err.contains(line) && err.contains("bad message"), shown, "{setting:?}: {err}");
    }
}

#[test]
fn bad_input_gets_a_clear_error() {
    let port = free_port(); // nothing listens there
    let url = format!("http://127.0.0.1:{port}/");
    for (args, says) in [
        (vec!["load", "ftp://x/"], "only http://"),
        (vec!["load", &url, "--verify", "/nonexistent/ochre"], "--verify"),
        (vec!["load", &url, "--mix", "/nonexistent/mix.txt"], "mix.txt"),
        (vec!["load", &url, "--rate=-5", "--duration", "0.1"], "rate"),
        (vec!["load", &url, "--remote", "127.0.0.1:1", "--duration", "0.1"], "127.0.0.1:1"),
        (vec!["load"], "URLS"),
        (vec!["load", &url, "-d", "10x"], "unknown unit `x`"),
        (vec!["load", &url, "--search-p99", "fast"], "not a duration"),
        (vec!["load", &url, "--warmup=-1s"], "not a duration"),
        (vec!["load", &url, "--think", "1ms", "--think-ms", "3"], "cannot be used with"),
        (vec!["load", "http://[::1/"], "invalid IPv6"),
        (vec!["serve"], "the directory to serve is required"),
        (vec!["serve", "/tmp", "--root", "/tmp"], "cannot be used with"),
        (vec!["serve", "/tmp", "--port", "1", "--listen", "127.0.0.1:2"], "cannot be used with"),
    ] {
        let out = ochre().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
