//! What several of the runtime's integration tests share.

use std::time::{Duration, Instant};

use ochre::{Config, Runtime};

/// A runtime of `workers` unpinned workers (tests run beside each other) with `config`.
pub fn runtime(workers: usize, config: Config) -> Runtime {
    Runtime::builder().workers(workers).pin(false).config(config).build().unwrap()
}

/// Keeps the CPU busy for `d`: a handler with a cost.
pub fn spin_for(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}
