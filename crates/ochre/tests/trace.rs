//! Traces (`Config::trace_events`): the Chrome trace JSON parsed back with serde_json, every
//! event's fields checked, handler spans of one color never overlapping, the runtime's
//! decisions present, and the ring's bound.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use ochre::{Color, Config, Runtime};
use serde_json::Value;

fn rt(workers: usize, ring: usize) -> Runtime {
    common::runtime(workers, Config::default().trace_events(ring))
}

/// A fan-out over 20 colors, several events each, some costly, with cross-worker posts.
use common::spin_for;

fn workload() {
    for round in 0..5u64 {
        for c in 0..20u64 {
            ochre::post(Color(100 + c), move || {
                if c % 5 == 0 {
                    spin_for(Duration::from_micros(30));
                }
                // A chain step to another color: cross-worker messages, batches, moves.
                if round == 0 {
                    ochre::post(Color(200 + c), || {});
                }
            });
        }
    }
}

/// Every event of the Chrome trace, with its fields checked; returns them.
fn checked_events(json: &Value, workers: usize) -> Vec<Value> {
    let events = json["traceEvents"].as_array().expect("traceEvents is an array");
    assert_eq!(json["displayTimeUnit"], "ns");
    assert_eq!(json["otherData"]["dropped"].as_array().unwrap().len(), workers);
    for e in events {
        let name = e["name"].as_str().unwrap_or_else(|| panic!("no name: {e}"));
        assert!(e["cat"].is_string(), "{e}");
        let ph = e["ph"].as_str().unwrap();
        assert!(["X", "i", "M"].contains(&ph), "{e}");
        assert!(e["ts"].as_f64().is_some_and(|t| t >= 0.0), "{e}");
        assert_eq!(e["pid"], 1, "{e}");
        let tid = e["tid"].as_u64().unwrap() as usize;
        assert!(tid < workers, "{e}");
        match ph {
            "X" => {
                assert!(e["dur"].as_f64().is_some_and(|d| d >= 0.0), "{e}");
                assert!(["handler", "idle", "sleep"].contains(&name), "{e}");
            }
            "i" => {
                assert_eq!(e["s"], "t", "{e}");
                assert!(e.get("dur").is_none(), "{e}");
            }
            _ => assert!(["process_name", "thread_name"].contains(&name), "{e}"),
        }
        if name == "handler" {
            let color = e["args"]["color"].as_str().unwrap();
            assert!(color.parse::<u64>().is_ok(), "{e}");
        }
        if name == "flush" {
            assert!(e["args"]["peer"].as_u64().is_some_and(|p| (p as usize) < workers), "{e}");
            assert!(e["args"]["messages"].as_u64().is_some(), "{e}");
        }
    }
    events.clone()
}

#[test]
fn chrome_trace_parses_and_spans_of_a_color_never_overlap() {
    let rt = rt(2, 1 << 16);
    let report = rt.run(Color(1), workload).unwrap();
    let trace = rt.trace();
    let text = serde_json::to_string(&trace.chrome()).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    let events = checked_events(&json, 2);
    let handlers: Vec<&Value> = events.iter().filter(|e| e["name"] == "handler").collect();
    assert_eq!(handlers.len() as u64, report.total().events_run, "every handler run is traced");
    // Spans of one color, from any worker, never overlap.
    let mut by_color: HashMap<String, Vec<(f64, f64)>> = HashMap::new();
    for e in &handlers {
        let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        by_color.entry(e["args"]["color"].as_str().unwrap().into()).or_default().push((ts, dur));
    }
    assert_eq!(by_color.len(), 41);
    for (color, spans) in &mut by_color {
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in spans.windows(2) {
            // Timestamps are nanoseconds written as microseconds: compare within 1 ns.
            assert!(
                w[0].0 + w[0].1 <= w[1].0 + 1e-3,
                "color {color}: {:?} overlaps {:?}",
                w[0],
                w[1]
            );
        }
    }
    // So do spans of one worker.
    for tid in 0..2 {
        let mut spans: Vec<(f64, f64)> = handlers
            .iter()
            .filter(|e| e["tid"] == tid)
            .map(|e| (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
            .collect();
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(spans.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0 + 1e-3));
    }
    // The 30 µs handlers were measured as such.
    let long = handlers.iter().filter(|e| e["dur"].as_f64().unwrap() >= 29.0).count();
    assert!(long >= 20, "{long} long handlers");
    // Decisions: batches flushed between the workers.
    assert!(events.iter().any(|e| e["name"] == "flush"), "no flush traced");
    assert!(events.iter().any(|e| e["name"] == "idle"), "no idle spell traced");
    assert_eq!(json["otherData"]["dropped"], serde_json::json!([0, 0]));
}

#[test]
fn the_ring_keeps_the_newest_records_and_counts_the_rest() {
    let rt = rt(1, 50);
    let report = rt.run(Color(1), workload).unwrap();
    let trace = rt.trace();
    let w = &trace.workers[0];
    assert_eq!(w.records.len(), 50);
    assert!(w.dropped > 0);
    assert!(w.dropped + 50 >= report.total().events_run, "every record kept or counted");
    // Oldest first.
    assert!(w.records.windows(2).all(|p| p[0].start_ns <= p[1].start_ns));
    let json: Value = serde_json::to_value(trace.chrome()).unwrap();
    assert_eq!(json["otherData"]["dropped"][0], w.dropped);
}

#[test]
fn traces_are_off_by_default() {
    let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
    rt.run(Color(1), workload).unwrap();
    assert!(rt.trace().is_empty());
}
