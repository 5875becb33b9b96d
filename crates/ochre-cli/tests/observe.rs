//! What `ochre serve` shows of its runtime: `GET <status_path>/metrics` (Prometheus text) and
//! `--trace FILE` (Chrome trace JSON written when the server stops).

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
