//! What `ochre serve` shows of its runtime: `GET <status_path>/metrics` (Prometheus text) and
//! `--trace FILE` (Chrome trace JSON written when the server stops); and `ochre bench --trace
//! FILE`, the traces of the runtimes a benchmark builds.

use std::process::{Command, Stdio};

mod common;
use common::{free_port, get, stop, wait_ready};

#[test]
fn serve_answers_metrics_and_writes_its_trace_when_it_stops() {
    let root = std::env::temp_dir().join(format!("ochre-observe-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "hello\n").unwrap();
    let trace = root.join("trace.json");
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ochre"))
        .args(["serve", "--root", root.to_str().unwrap(), "--listen", &format!("127.0.0.1:{port}")])
        .args(["--workers", "2", "--status-path", "/.ochre/status"])
        .arg("--trace")
        .arg(&trace)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_ready(port, &mut child);
    for _ in 0..5 {
        assert!(get(port, "/").unwrap().ends_with("hello\n"));
    }
    let metrics = get(port, "/.ochre/status/metrics").unwrap();
    assert!(metrics.starts_with("HTTP/1.1 200 OK"), "{metrics}");
    assert!(metrics.contains("# TYPE ochre_http_requests_total counter"), "{metrics}");
    assert!(metrics.contains("ochre_http_responses_total{code=\"200\"}"), "{metrics}");
    assert!(metrics.contains("# TYPE ochre_worker_events_run_total counter"), "{metrics}");
    assert!(stop(child).success());
    let text = std::fs::read_to_string(&trace).expect("the trace was written at the stop");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    assert!(events.iter().any(|e| e["name"] == "handler" && e["ph"] == "X"));
    assert!(events.iter().any(|e| e["name"] == "thread_name"));
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn serve_refuses_a_trace_path_it_cannot_write_before_it_serves() {
    let root = std::env::temp_dir().join(format!("ochre-observe-bad-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ochre"))
        .args(["serve", "--root", root.to_str().unwrap(), "--listen", &format!("127.0.0.1:{port}")])
        .arg("--trace")
        .arg(root.join("missing").join("trace.json"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded: a server that took the path would serve until stopped.
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if t0.elapsed() > std::time::Duration::from_secs(10) {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let Some(status) = status else {
        let _ = stop(child);
        panic!("serve did not refuse the trace path");
    };
    assert!(!status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("creating the trace file"), "{err}");
    assert!(get(port, "/").is_none(), "nothing listens");
    std::fs::remove_dir_all(root).unwrap();
}

#[cfg(feature = "bench")]
#[test]
fn bench_writes_the_traces_of_the_runtimes_it_built() {
    let dir = std::env::temp_dir().join(format!("ochre-bench-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.json");
    let bench = |path: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_ochre"))
            .args(["bench", "pingpong", "--quick", "--reps", "1", "--workers", "1", "--trace"])
            .arg(path)
            .output()
            .unwrap()
    };
    // A path that cannot be written is refused before anything runs.
    let refused = bench(&dir.join("missing").join("trace.json"));
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("creating the trace file"));
    assert!(refused.stdout.is_empty(), "no benchmark ran");

    let out = bench(&trace);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let processes: Vec<&serde_json::Value> =
        events.iter().filter(|e| e["name"] == "process_name").collect();
    assert!(!processes.is_empty());
    for p in &processes {
        let name = p["args"]["name"].as_str().unwrap();
        assert!(name.starts_with("ochre runtime "), "{name}");
        let pid = &p["pid"];
        assert!(events
            .iter()
            .any(|e| e["name"] == "handler" && e["ph"] == "X" && &e["pid"] == pid));
    }
    std::fs::remove_dir_all(dir).unwrap();
}
