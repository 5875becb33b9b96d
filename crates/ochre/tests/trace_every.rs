//! Every runtime of a process traced (`trace::trace_every_runtime`): runtimes built with the
//! default configuration record, each dropped one's trace is kept up to the bound (the newest
//! ones), a runtime that asks for its own ring keeps it, and the merged Chrome trace shows each
//! runtime as a process. A file of its own: the setting is process-wide.

use ochre::{trace, Color, Config, Runtime};
use serde_json::Value;

/// A runtime of one worker that runs `events` events (one root, the rest posted by it) and is
/// dropped; the records its trace held.
fn run_one(config: Config, events: u64) -> u64 {
    let rt = Runtime::builder().workers(1).pin(false).config(config).build().unwrap();
    rt.run(Color(1), move || {
        for i in 1..events {
            ochre::post(Color(1 + i % 3), || {});
        }
    })
    .unwrap();
    let records = rt.trace().len() as u64;
    drop(rt);
    records
}

#[test]
fn every_runtime_built_while_on_is_traced_and_the_newest_are_kept() {
    // Off: nothing recorded, nothing kept.
    assert_eq!(run_one(Config::default(), 10), 0);
    assert!(trace::take_collected().runtimes.is_empty());

    trace::trace_every_runtime(1_000, 2);
    let recorded: Vec<u64> = [5, 7, 9].iter().map(|&n| run_one(Config::default(), n)).collect();
    // Each run's handlers (at least one record each; idle spells may add more).
    for (n, r) in [5, 7, 9].iter().zip(&recorded) {
        assert!(r >= n, "{r} records for {n} handlers");
    }
    // A runtime with its own ring keeps it (3 records at most a worker).
    let own = run_one(Config::default().trace_events(3), 20);
    assert!(own <= 3, "{own}");

    let collected = trace::take_collected();
    assert_eq!(collected.runtimes.len(), 2, "the newest two");
    assert_eq!(collected.let_go, 2, "the first two let go");
    let ids: Vec<u64> = collected.runtimes.iter().map(|r| r.runtime).collect();
    assert!(ids[0] < ids[1], "in the order dropped: {ids:?}");
    assert_eq!(collected.runtimes[0].trace.len() as u64, recorded[2]);
    assert_eq!(collected.runtimes[1].trace.len() as u64, own);

    // One process of the viewer per runtime, named, its records on it.
    let json: Value = serde_json::to_value(trace::chrome_of_runtimes(&collected)).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    for (pid, id) in [(1, ids[0]), (2, ids[1])] {
        let name = events
            .iter()
            .find(|e| e["name"] == "process_name" && e["pid"] == pid)
            .map(|e| e["args"]["name"].clone());
        assert_eq!(name, Some(Value::from(format!("ochre runtime {id}"))));
        assert!(events.iter().any(|e| e["name"] == "handler" && e["pid"] == pid));
    }
    assert_eq!(json["otherData"]["runtimes_let_go"], 2);
    assert_eq!(json["otherData"]["dropped"].as_array().unwrap().len(), 2, "a worker each");

    // Taken: none left, and the setting stays: the next runtimes are collected as before.
    assert!(trace::take_collected().runtimes.is_empty());
    let more: Vec<u64> = [4, 6].iter().map(|&n| run_one(Config::default(), n)).collect();
    assert!(more.iter().all(|&r| r > 0));
    // A runtime built and never run recorded nothing: not kept.
    drop(Runtime::builder().workers(1).pin(false).build().unwrap());
    // A lower bound lets the oldest go at once.
    trace::trace_every_runtime(1_000, 1);
    let c = trace::take_collected();
    assert_eq!((c.runtimes.len(), c.let_go), (1, 1));
    assert_eq!(c.runtimes[0].trace.len() as u64, more[1]);

    // Recording without keeping: a runtime records (its own trace), none is kept.
    trace::trace_every_runtime(1_000, 0);
    assert!(run_one(Config::default(), 5) >= 5);
    assert!(trace::take_collected().runtimes.is_empty());
    // Off: new runtimes record nothing.
    trace::trace_every_runtime(0, 0);
    assert_eq!(run_one(Config::default(), 10), 0);
    assert!(trace::take_collected().runtimes.is_empty());
}
