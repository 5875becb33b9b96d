//! Diagnostic: a pipeline as a user writes one (Savina's filter bank / radix sort shape): a
//! source (actor 0) sends N values, one message each, to stage 1; each of S stages does W ns of
//! work and forwards to the next; the last stage counts and reports. ochre (plain colors) and
//! ochre-hand (stages split in contiguous halves) against tokio-mt, alternated in one process.
//!
//! `pipeline_probe [STAGES] [ITEMS] [WORK_NS] [REPS]` (defaults 8, 200000, 0, 7); `STEAL=off`,
//! `FOLLOW=0`, `TURN=N` change ochre's configuration (both ochre systems;
//! `harness::probe_config`).
//!
//! Found (session 31, 2 workers, quiet, medians of 5): 8 stages of 1 us ran at 0.76-0.91 of
//! tokio-mt (hand placement alike), as the first item's post to each idle stage, counted as a
//! chain's step, moved the stage behind its predecessor and stealing spread them again
//! (`OCHRE_ACTORS_STATS=1`: hundreds of steals a run, 17-20 ms of 330 waiting for answers);
//! with a stage's post no step while its color has more queued (`follow::is_step`), 0.98-1.01.
//! Empty stages: 1.25-1.38 of tokio-mt either way; 200 ns: 0.96-1.01.
use ochre::Runtime;
use ochre_bench::actors::{probe_medians, Cx, Program};
use ochre_bench::harness::{probe_config, work};

struct Pipeline {
    stages: usize,
    items: u64,
    work_ns: u64,
}

impl Program for Pipeline {
    type State = Stage;
    type Msg = u64;
    fn count(&self) -> usize {
        self.stages + 1
    }
    fn actors(&self) -> Vec<Stage> {
        let s = Stage { items: self.items, work_ns: self.work_ns, last: self.stages, seen: 0 };
        vec![s; self.stages + 1]
    }
    fn start(&self) -> Vec<(usize, u64)> {
        vec![(0, 0)]
    }
    fn handle(me: usize, s: &mut Stage, msg: u64, cx: &impl Cx<u64>) {
        if me == 0 {
            for v in 0..s.items {
                cx.send(1, v);
            }
            return;
        }
        work(s.work_ns);
        s.seen += 1;
        if me < s.last {
            cx.send(me + 1, msg);
        } else if s.seen == s.items {
            cx.done(s.items);
        }
    }
    fn expected(&self) -> u64 {
        self.items
    }
    fn messages(&self) -> u64 {
        self.items * self.stages as u64
    }
    fn hand_worker(&self, i: usize, workers: usize) -> usize {
        (i.saturating_sub(1)) * workers / self.stages
    }
}

/// A stage's state (the source's too: actor 0).
#[derive(Clone)]
struct Stage {
    items: u64,
    work_ns: u64,
    /// The last stage's index.
    last: usize,
    seen: u64,
}

fn builder() -> ochre::Builder {
    Runtime::builder().workers(2).config(probe_config())
}

fn main() {
    let a: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let stages = *a.first().unwrap_or(&8) as usize;
    let items = *a.get(1).unwrap_or(&200_000);
    let work_ns = *a.get(2).unwrap_or(&0);
    let reps = *a.get(3).unwrap_or(&7) as usize;
    let prog = Pipeline { stages, items, work_ns };
    let m = probe_medians(&prog, reps, || builder().build().unwrap()).unwrap();
    println!(
        "pipeline {stages} stages, {items} items, {work_ns} ns: ochre {:.2}M, hand {:.2}M, tokio {:.2}M msg/s; ochre/tokio {:.2}, ochre/hand {:.2}",
        m[0] / 1e6, m[1] / 1e6, m[2] / 1e6, m[0] / m[2], m[0] / m[1]
    );
}
