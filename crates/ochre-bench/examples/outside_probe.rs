//! Diagnostic: events posted from a thread outside the runtime (`Handle::post`), against tokio
//! fed the same way (unbounded channels to one task per color), in one process, alternated.
//!
//! `outside_probe [EVENTS] [COLORS] [ROUNDS]` (defaults 2M, 16, 5): the main thread posts EVENTS
//! events round robin to COLORS plain colors, then runs them on 2 workers; tokio: the main thread
//! sends EVENTS values round robin to COLORS tasks' mailboxes, then waits for the tasks. Each
//! event adds one to its color's counter (no count shared by the workers). Prints events per
//! second (posting and running) for each round, the median of each and their ratio.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crossbeam_utils::CachePadded;
use ochre::{Color, Runtime};

const MAX_COLORS: usize = 64;

/// Events run per color: each color's own line, touched by the worker that runs it.
static COUNTS: [CachePadded<AtomicU64>; MAX_COLORS] =
    [const { CachePadded::new(AtomicU64::new(0)) }; MAX_COLORS];

fn ochre_round(events: u64, colors: u64) -> Result<f64, String> {
    let rt = Runtime::builder().workers(2).build().map_err(|e| e.to_string())?;
    let handle = rt.handle();
    for c in &COUNTS {
        c.store(0, Ordering::Relaxed);
    }
    let t = Instant::now();
    for i in 0..events {
        let c = (i % colors) as usize;
        let count: &'static CachePadded<AtomicU64> = &COUNTS[c];
        handle.post(Color(1 + c as u64), move || {
            count.fetch_add(1, Ordering::Relaxed);
        });
    }
    rt.run(Color(1000), || {}).map_err(|e| e.to_string())?;
    let secs = t.elapsed().as_secs_f64();
    let ran: u64 = COUNTS.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    if ran != events {
        return Err(format!("ochre ran {ran} of {events} events"));
    }
    Ok(events as f64 / secs)
}

fn tokio_round(events: u64, colors: u64) -> Result<f64, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    let (senders, tasks): (Vec<_>, Vec<_>) = (0..colors)
        .map(|_| {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
            let task = rt.spawn(async move {
                let mut n = 0u64;
                while rx.recv().await.is_some() {
                    n += 1;
                }
                n
            });
            (tx, task)
        })
        .unzip();
    for i in 0..events {
        let _ = senders[(i % colors) as usize].send(i);
    }
    drop(senders);
    let ran = rt.block_on(async {
        let mut sum = 0;
        for task in tasks {
            sum += task.await.unwrap_or(0);
        }
        sum
    });
    let secs = t.elapsed().as_secs_f64();
    if ran != events {
        return Err(format!("tokio ran {ran} of {events} events"));
    }
    Ok(events as f64 / secs)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let mut arg = |default: u64| match args.next() {
        Some(Ok(v)) => v,
        Some(Err(e)) => {
            eprintln!("outside_probe: bad argument ({e}); usage: outside_probe [EVENTS] [COLORS] [ROUNDS]");
            std::process::exit(2);
        }
        None => default,
    };
    let events = arg(2_000_000).max(1);
    let colors = arg(16).clamp(1, MAX_COLORS as u64);
    let rounds = arg(5).max(1);
    let (mut o, mut t) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate which system goes first.
        let (a, b) = if round % 2 == 0 {
            (ochre_round(events, colors), tokio_round(events, colors))
        } else {
            let b = tokio_round(events, colors);
            (ochre_round(events, colors), b)
        };
        match (a, b) {
            (Ok(a), Ok(b)) => {
                println!("round {round}: ochre {:.2}M/s tokio {:.2}M/s", a / 1e6, b / 1e6);
                o.push(a);
                t.push(b);
            }
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("outside_probe: {e}");
                std::process::exit(1);
            }
        }
    }
    let ratios: Vec<f64> = o.iter().zip(&t).map(|(a, b)| a / b).collect();
    println!(
        "{events} events to {colors} colors: median ochre {:.2}M/s, tokio {:.2}M/s, paired ratio {:.2}",
        median(&mut o) / 1e6,
        median(&mut t) / 1e6,
        median(&mut ratios.clone())
    );
}
