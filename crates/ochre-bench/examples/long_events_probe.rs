//! Diagnostic (a user study's first finding, issue 17): a job of K long events, one plain color
//! each (`Color(1)` .. `Color(K)`, hashed over the workers), posted by one handler, against
//! rayon's `into_par_iter().for_each` over the same chunks, in one process, jobs alternated.
//! Each chunk spins for a wall-clock time (200 ms / K), so the ideal job takes 100 ms on two
//! workers whatever else the machine runs. Prints each job's wall time and how many chunks each
//! worker ran, and the medians.
//!
//! `long_events_probe [JOBS]` (default 5). Before the long-turn sharing and the batch count in
//! `follow` (commit 1d67875), quiet: two chunks of 100 ms took 200 ms from the second job on,
//! twenty of 10 ms 144-184 ms, where rayon took 100.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ochre::{Color, Runtime};
use ochre_bench::harness::{median, work};
use rayon::prelude::*;

fn main() {
    let jobs: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let rt = Runtime::builder().workers(2).build().expect("runtime");
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("rayon pool");
    for k in [2u64, 4, 20, 100] {
        let chunk = Duration::from_millis(200 / k);
        let chunk_ns = chunk.as_nanos() as u64;
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for job in 0..jobs {
            let rayon_job = || {
                let t = Instant::now();
                pool.install(|| (0..k).into_par_iter().for_each(|_| work(chunk_ns)));
                t.elapsed()
            };
            if job % 2 == 1 {
                theirs.push(rayon_job());
            }
            let ran_on = Arc::new(Mutex::new([0u32; 2]));
            let r = ran_on.clone();
            let report = rt
                .run(Color(0), move || {
                    for c in 1..=k {
                        let r = r.clone();
                        ochre::post(Color(c), move || {
                            work(chunk_ns);
                            if let (Ok(mut r), Some(w)) = (r.lock(), ochre::current_worker()) {
                                r[w.min(1)] += 1;
                            }
                        });
                    }
                })
                .expect("run");
            ours.push(report.elapsed);
            if job % 2 == 0 {
                theirs.push(rayon_job());
            }
            let split = *ran_on.lock().expect("counts");
            println!(
                "{k:3} chunks of {chunk:?}: ochre {:6.1?} (chunks per worker {split:?}), rayon {:6.1?}",
                report.elapsed,
                theirs[theirs.len() - 1]
            );
        }
        let ms =
            |v: &[Duration]| median(&v.iter().map(|d| d.as_secs_f64() * 1e3).collect::<Vec<_>>());
        println!(
            "{k:3} chunks: median ochre {:.1} ms, rayon {:.1} ms (ideal 100)\n",
            ms(&ours),
            ms(&theirs)
        );
    }
}
