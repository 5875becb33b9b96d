//! Two data-parallel programs as a newcomer to each library writes them, for `bench steal`'s
//! users' cases, quiet and beside a thread that never sleeps on the last worker's CPU (a
//! machine shared with another process):
//!
//! - a sum of squares over an array, split in chunks: on ochre a plain color per chunk
//!   (`Color(1)`, `Color(2)`, ...) posted by one handler, each posting its partial sum to a
//!   collector color (`Color::DEFAULT`, the handler's own) that adds it to a [`ColorCell`];
//!   on tokio-mt a task per chunk spawned from `block_on`, whose handles are awaited and added
//!   in order; on rayon `par_chunks(..).map(..).sum()`;
//! - short jobs: a job posts eight tiny events to eight colors and the caller waits for it to
//!   end (`Runtime::run`), again and again; on tokio-mt eight tasks spawned from `block_on` and
//!   awaited, on rayon eight spawns in a `scope`.
//!
//! Each system's result is checked. What the shared CPU did to ochre before session 39: its
//! collector, lent to the worker on the shared CPU by a steal, ran every partial sum there at a
//! quarter of a CPU (`ochre::queue`'s `lend_backlog`), and every `run` waited for that worker's
//! next time slice at its end and often at its start, 4 ms each (`ochre::runtime`'s
//! `GATE_SPIN`): a short job took 8 ms where tokio-mt took 21 us.

use std::sync::Arc;

use ochre::{Color, ColorCell, Runtime};
use rayon::prelude::*;

/// `0, 1, .., n - 1`: the array summed.
pub fn numbers(n: u64) -> Vec<u64> {
    (0..n).collect()
}

/// The sum of the squares of `data` (wrapping, as every system adds).
pub fn sum_of_squares(data: &[u64]) -> u64 {
    data.iter().fold(0u64, |s, x| s.wrapping_add(x.wrapping_mul(*x)))
}

/// The sum on ochre (module doc), chunks of `chunk` numbers.
pub fn sum_on_ochre(rt: &Runtime, data: &Arc<Vec<u64>>, chunk: usize) -> Result<u64, String> {
    let total = Arc::new(ColorCell::new(Color::DEFAULT, 0u64));
    let (d, t) = (data.clone(), total.clone());
    let report = rt
        .run(Color::DEFAULT, move || {
            for i in 0..d.len().div_ceil(chunk) {
                let (d, t) = (d.clone(), t.clone());
                ochre::post(Color(1 + i as u64), move || {
                    let s = sum_of_squares(&d[i * chunk..((i + 1) * chunk).min(d.len())]);
                    ochre::post(Color::DEFAULT, move || {
                        t.with(|v| *v = v.wrapping_add(s)).expect("the collector's own color");
                    });
                });
            }
        })
        .map_err(|e| e.to_string())?;
    report.check().map_err(|e| e.to_string())?;
    // Every closure ran and dropped its clone: the cell is ours again.
    Arc::try_unwrap(total)
        .map(ColorCell::into_inner)
        .map_err(|_| "a clone of the total outlived the run".to_string())
}

/// The sum on tokio (module doc).
pub fn sum_on_tokio(rt: &tokio::runtime::Runtime, data: &Arc<Vec<u64>>, chunk: usize) -> u64 {
    rt.block_on(async {
        let handles: Vec<_> = (0..data.len().div_ceil(chunk))
            .map(|i| {
                let d = data.clone();
                tokio::spawn(async move {
                    sum_of_squares(&d[i * chunk..((i + 1) * chunk).min(d.len())])
                })
            })
            .collect();
        let mut total = 0u64;
        for h in handles {
            total = total.wrapping_add(h.await.expect("a chunk's task"));
        }
        total
    })
}

/// The sum on rayon (module doc).
pub fn sum_on_rayon(pool: &rayon::ThreadPool, data: &[u64], chunk: usize) -> u64 {
    pool.install(|| {
        data.par_chunks(chunk).map(sum_of_squares).reduce(|| 0, |a, b| a.wrapping_add(b))
    })
}

/// Events (tasks) of one short job.
pub const JOB_EVENTS: u64 = 8;

/// `jobs` short jobs on ochre (module doc); returns the events run, for the check.
pub fn jobs_on_ochre(rt: &Runtime, jobs: u32) -> Result<u64, String> {
    let mut ran = 0;
    for _ in 0..jobs {
        let report = rt
            .run(Color::DEFAULT, || {
                for i in 1..=JOB_EVENTS {
                    ochre::post(Color(i), move || {
                        std::hint::black_box(i);
                    });
                }
            })
            .map_err(|e| e.to_string())?;
        ran += report.total().events_run - 1;
        report.check().map_err(|e| e.to_string())?;
    }
    Ok(ran)
}

/// `jobs` short jobs on tokio (module doc); returns the tasks run.
pub fn jobs_on_tokio(rt: &tokio::runtime::Runtime, jobs: u32) -> u64 {
    let mut ran = 0;
    for _ in 0..jobs {
        ran += rt.block_on(async {
            let handles: Vec<_> = (0..JOB_EVENTS)
                .map(|i| tokio::spawn(async move { std::hint::black_box(i) }))
                .collect();
            let mut n = 0;
            for h in handles {
                h.await.expect("a job's task");
                n += 1;
            }
            n
        });
    }
    ran
}

/// `jobs` short jobs on rayon (module doc); returns the spawns run.
pub fn jobs_on_rayon(pool: &rayon::ThreadPool, jobs: u32) -> u64 {
    let ran = std::sync::atomic::AtomicU64::new(0);
    for _ in 0..jobs {
        pool.scope(|s| {
            for i in 0..JOB_EVENTS {
                let ran = &ran;
                s.spawn(move |_| {
                    std::hint::black_box(i);
                    ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                });
            }
        });
    }
    ran.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_system_sums_the_same_and_runs_every_jobs_events() {
        let data = Arc::new(numbers(10_000));
        let want = sum_of_squares(&data);
        let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
        let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        assert_eq!(sum_on_ochre(&rt, &data, 300), Ok(want));
        assert_eq!(sum_on_tokio(&tokio, &data, 300), want);
        assert_eq!(sum_on_rayon(&pool, &data, 300), want);
        assert_eq!(jobs_on_ochre(&rt, 5), Ok(5 * JOB_EVENTS));
        assert_eq!(jobs_on_tokio(&tokio, 5), 5 * JOB_EVENTS);
        assert_eq!(jobs_on_rayon(&pool, 5), 5 * JOB_EVENTS);
    }
}
