//! Benchmarks of ochre against its peers, each measured in the same process and interleaved.
//!
//! Data flow: a benchmark module (`pingpong`, `prodcons`) builds ochre and each peer with the same
//! worker count and pinning, and hands one closure per system to `harness::measure_case`, which
//! runs them interleaved (a warm-up, then `reps` kept repetitions) and turns the samples into
//! rows (median, min-max, ratio to ochre). The benchmark then checks the goals of its issue on
//! the medians. The result is a `BenchReport`: printed as a table, written as JSON.
//!
//! Where ochre configurations are compared on short events (ping-pong, producer-consumer, the
//! cost of stealing), each sample runs on a runtime built for it (`peers::on_fresh_runtime`):
//! one instance keeps its memory layout for life, and instances differ by more than the bars.

#![warn(missing_docs)]

pub mod ablation;
pub mod actors;
pub mod alloc;
pub mod color_stats;
pub mod costs;
pub mod divide;
pub mod harness;
pub mod loadgen;
pub mod mr;
pub mod peers;
pub mod pingpong;
pub mod prodcons;
pub mod readers;
pub mod servers;
pub mod steal;
pub mod sws;
pub mod tuning;
pub mod usersum;
pub mod wakeup;
pub mod wordcount;

pub use harness::{BenchReport, Options};

/// The benchmarks, by name.
pub const BENCHES: &[&str] = &[
    "pingpong",
    "prodcons",
    "wakeup",
    "steal",
    "alloc",
    "costs",
    "ablation",
    "sws",
    "loadgen",
    "actors",
    "mr",
    "servers",
    "color-stats",
    "readers",
    "tuning",
];

/// Runs the benchmark called `name`.
pub fn run(name: &str, opts: &Options) -> Option<BenchReport> {
    match name {
        "pingpong" => Some(pingpong::run(opts)),
        "prodcons" => Some(prodcons::run(opts)),
        "sws" => Some(sws::run(opts)),
        "steal" => Some(steal::run(opts)),
        "wakeup" => Some(wakeup::run(opts)),
        "ablation" => Some(ablation::run(opts)),
        "alloc" => Some(alloc::run(opts)),
        "costs" => Some(costs::run(opts)),
        "loadgen" => Some(loadgen::run(opts)),
        "actors" => Some(actors::run(opts)),
        "mr" => Some(mr::run(opts)),
        "servers" => Some(servers::run(opts)),
        "color-stats" => Some(color_stats::run(opts)),
        "readers" => Some(readers::run(opts)),
        "tuning" => Some(tuning::run(opts)),
        _ => None,
    }
}
