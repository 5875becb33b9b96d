//! Diagnostic: what one turn of one event costs the runtime, under `valgrind --tool=callgrind`
//! (instruction counts do not depend on the machine's load).
//!
//! `turn_probe [HOPS] [COLORS] [WORKERS]`: one token goes round a ring of COLORS plain colors
//! (default 100), HOPS times (default 1M), on WORKERS workers (default 1). Each event is the
//! only one of its color's turn and posts the next: the runtime's whole per-event path (post,
//! route, queue, turn, run) and nothing of a user's program (no reference count, no state).
//! Prints hops per second; divide callgrind's totals by HOPS for a per-event figure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ochre::{Color, Runtime};

/// Colors in the ring (set once, before the run).
static COLORS: AtomicU64 = AtomicU64::new(1);

/// One hop: 24 bytes of closure (a small actor message's size).
fn hop(at: u64, left: u64, done: &'static AtomicU64) {
    if left == 0 {
        done.store(1, Ordering::Relaxed);
        return;
    }
    let next = (at + 1) % COLORS.load(Ordering::Relaxed);
    ochre::post(Color(1 + next), move || hop(next, left - 1, done));
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let mut arg = |default: u64| match args.next() {
        Some(Ok(v)) => v,
        Some(Err(e)) => {
            eprintln!(
                "turn_probe: bad argument ({e}); usage: turn_probe [HOPS] [COLORS] [WORKERS]"
            );
            std::process::exit(2);
        }
        None => default,
    };
    let (hops, colors, workers) = (arg(1_000_000), arg(100).max(1), arg(1).max(1));
    let done: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    let rt = match Runtime::builder().workers(workers as usize).build() {
        Ok(rt) => Arc::new(rt),
        Err(e) => {
            eprintln!("turn_probe: {e}");
            std::process::exit(1);
        }
    };
    COLORS.store(colors, Ordering::Relaxed);
    let t = Instant::now();
    let report = rt.run(Color(1), move || hop(0, hops, done));
    let secs = t.elapsed().as_secs_f64();
    match report {
        Ok(_) if done.load(Ordering::Relaxed) == 1 => {
            println!(
                "{:.2}M hops/s ({hops} hops, {colors} colors, {workers} workers)",
                hops as f64 / secs / 1e6
            )
        }
        Ok(_) => eprintln!("turn_probe: the token was lost"),
        Err(e) => eprintln!("turn_probe: {e}"),
    }
}
