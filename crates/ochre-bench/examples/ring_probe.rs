//! Diagnostic: a thread ring of plain colors (as `bench actors` writes it), printing where its
//! messages went (local, remote, forwarded) and how colors moved. `ring_probe [TOKENS] [RUNS]`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use ochre::{Color, ColorCell, Runtime};

const ACTORS: usize = 1000;

struct Actor {
    /// Weak: the ring's actors are owned by `main`'s vector, not by each other.
    next: OnceLock<Weak<Actor>>,
    cell: ColorCell<u64>,
}

fn hop(a: Arc<Actor>, left: u64, done: Arc<AtomicU64>) {
    let _ = a.cell.with(|n| *n += 1);
    if left == 0 {
        done.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let Some(next) = a.next.get().and_then(Weak::upgrade) else { return };
    ochre::post(next.cell.color(), move || hop(next, left - 1, done));
}

fn main() {
    let mut args = std::env::args().skip(1);
    let tokens: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let mut config = ochre::Config::default();
    if std::env::var("STEAL").is_ok_and(|v| v == "backlog") {
        config = config.steal(ochre::Steal::Backlog);
    }
    let rt = Runtime::builder().workers(2).config(config).build().expect("runtime");
    for run in 0..runs {
        let actors: Vec<Arc<Actor>> = (0..ACTORS)
            .map(|i| {
                Arc::new(Actor {
                    next: OnceLock::new(),
                    cell: ColorCell::new(Color(1 + i as u64), 0),
                })
            })
            .collect();
        for i in 0..ACTORS {
            let _ = actors[i].next.set(Arc::downgrade(&actors[(i + 1) % ACTORS]));
        }
        let done = Arc::new(AtomicU64::new(0));
        let per_token = 1_000_000 / tokens as u64;
        let starts: Vec<Arc<Actor>> =
            (0..tokens).map(|t| actors[t * ACTORS / tokens].clone()).collect();
        let d = done.clone();
        let report = rt
            .run(Color(1), move || {
                for a in starts {
                    let d = d.clone();
                    ochre::post(a.cell.color(), move || hop(a, per_token, d));
                }
            })
            .expect("run");
        assert_eq!(done.load(Ordering::Relaxed), tokens as u64);
        let t = report.total();
        drop(actors);
        let rate = (per_token * tokens as u64) as f64 / report.elapsed.as_secs_f64();
        println!(
            "run {run}: {:.1}M hops/s; local {} remote {} forwards {} moved in {} out {} given back {}; per worker events {:?}",
            rate / 1e6,
            t.posts_local,
            t.posts_remote,
            t.forwards,
            t.colors_moved_in,
            t.colors_moved_out,
            t.colors_given_back,
            report.workers.iter().map(|w| w.events_run).collect::<Vec<_>>(),
        );
    }
}
