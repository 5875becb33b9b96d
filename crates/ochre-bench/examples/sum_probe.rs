//! Diagnostic: a user's sum (`usersum`, `bench steal`'s "sum" case: 3907 plain chunk colors
//! posted by one handler, each posting its partial sum to a collector) on one reused runtime
//! of two workers beside a thread that spins on CPU 1, alternated with tokio-mt, each run's
//! times printed; the ochre runtime's trace written as Chrome trace JSON.
//!
//! `sum_probe [RUNS]` (default 12); `BUSY=0` leaves CPU 1 quiet; `TRACE=FILE` (default
//! `sum_probe.json`) is where the trace goes.
//!
//! Found (session 52, 12 runs, the trace read run by run): beside the spinner ochre took
//! 4.7-16 ms a run, tokio-mt 3.4-10.8 (ochre / tokio-mt 0.37-1.99; quiet, `BUSY=0`: 0.80-1.13).
//! Worker 0 ran 5400-6900 of each run's 7815 events, worker 1 900-2400, whose handler spans
//! summed to 2.3-8.1 ms (worker 0's: 3.4-6.7 ms for three times as many): worker 1 lost its
//! CPU inside handlers, where no stand-in can take the running color. In 7 of 12 runs the run
//! ended within 0.1 ms of worker 1's last handler (its partial sum the collector's last), and in
//! 3 its first handler started 1.3-3.9 ms late. Left for a fix: a chunk whose handler is
//! preempted holds the run's end for the rest of the other thread's time slice (tokio-mt has
//! the same exposure for the task it runs, but its tasks wait in a queue either worker takes
//! from).
use std::sync::Arc;
use std::time::Instant;

use ochre_bench::{actors, peers, usersum};

fn main() {
    let runs: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(12);
    let path = std::env::var("TRACE").unwrap_or_else(|_| "sum_probe.json".into());
    let busy = std::env::var("BUSY").as_deref() != Ok("0");
    let data = Arc::new(usersum::numbers(4_000_000));
    let want = usersum::sum_of_squares(&data);
    let mut config = ochre::Config::default();
    config.trace_events = 1 << 20;
    let rt = ochre::Runtime::builder().workers(2).config(config).build().expect("runtime");
    let tokio = peers::tokio_multi_thread(2).expect("tokio");
    actors::with_busy_cpu(busy.then_some(1), || {
        for i in 0..runs {
            let t = Instant::now();
            assert_eq!(usersum::sum_on_ochre(&rt, &data, 1024), Ok(want));
            let ochre = t.elapsed();
            let t = Instant::now();
            assert_eq!(usersum::sum_on_tokio(&tokio, &data, 1024), want);
            let tokio = t.elapsed();
            let ratio = tokio.as_secs_f64() / ochre.as_secs_f64();
            println!("{i} ochre {ochre:?} tokio-mt {tokio:?} ochre / tokio-mt {ratio:.2}");
        }
    });
    let chrome = serde_json::to_string(&rt.trace().chrome()).expect("trace JSON");
    std::fs::write(&path, chrome).expect("trace file");
    println!("trace: {path}");
}
