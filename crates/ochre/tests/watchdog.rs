//! The process's stall watchdog looks at a runtime built while it sleeps towards another
//! runtime's far tick (alone in its binary: other tests' runtimes would wake it often).

use std::time::{Duration, Instant};

use ochre::{Color, Config, Runtime};

#[test]
fn a_runtime_built_while_the_watchdog_waits_for_a_far_tick_is_watched_at_its_own() {
    let build = |ms| {
        let config = Config::default().stall_threshold(Some(Duration::from_millis(ms)));
        Runtime::builder().workers(2).pin(false).config(config).build().unwrap()
    };
    // Looked at every 5 s: the watchdog sleeps towards that.
    let far = build(20_000);
    std::thread::sleep(Duration::from_millis(50));
    let near = build(40);
    let handle = near.handle();
    let started = Instant::now();
    near.run(Color(1), move || {
        ochre::post(Color(7), move || {
            // Until the stall is reported (10 s at most).
            let t = Instant::now();
            while handle.stall_count() == 0 && t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(2));
            }
        });
    })
    .unwrap();
    let waited = started.elapsed();
    assert_eq!(near.stall_count(), 1, "{:?}", near.stalls());
    // A look every 10 ms: reported within a second even on a loaded machine; a first look at
    // the far runtime's tick would come after 5 s.
    assert!(waited < Duration::from_secs(2), "reported after {waited:?}");
    drop(far);
}
