//! Diagnostic: data-parallel programs written as a user new to each library would write them,
//! ochre against rayon and tokio-mt in one process, alternated: a sum of squares over 8M numbers
//! split in chunks (one plain color per chunk, results posted to a collector color), and a
//! word-frequency count over generated text, chunked the same way (each chunk's map merged
//! into the collector's).
//!
//! `user_probe [REPS] [CHUNK]` (defaults 7 and 8192 numbers a chunk; the word count takes an
//! eighth of it in lines). `DEFAULTS=1`: each library's default thread count, not 2 each. `ONLY=sum` or `ONLY=words` runs one of the two. `BUSY=1`: a thread
//! spins on worker 1's CPU throughout; `STATS=1`:
//! each ochre sum's run time and per-worker counters on standard error.
//!
//! Found (2 workers, quiet, medians of 7, speed over ochre's): the sum at 65,536 / 8,192 /
//! 1,024 numbers a chunk, rayon 0.88 / 1.14 / 1.52 (ochre/rayon 1.14, 0.88, 0.66), tokio 1.03 /
//! 0.94 / 0.80; the word count at 8,192 / 1,024 / 128 lines, rayon 1.08 / 1.48 / 1.35, tokio
//! 1.02 / 1.08 / 0.78. So ochre is tokio's match as users write these, and falls behind rayon as
//! chunks shrink (rayon splits work without an event per chunk, and its reduce merges in
//! parallel where a collector color merges one map after another). Reading a result cell after
//! the run takes `Arc::try_unwrap(..).into_inner()` (`ColorCell::with` from outside the
//! runtime is refused): what a new user tries first, `with`, fails with `WrongColor`.
//!
//! With a thread spinning on CPU 1 (session 33, chunks of 1,024 numbers, 5 processes of 7
//! repetitions): the worker on the shared CPU held most chunks while the other idled, since it
//! advertised no backlog (borrowed colors and the collector at the back of its line, averages
//! lifted by preempted turns: `queue::LIGHT_LOOK`, `steal::DEEP_LINE`); ochre over tokio-mt
//! 0.89-1.14 (median 1.02) before the fix, 0.99-1.24 (1.19) after; rayon 1.1-1.3x ochre
//! (quiet: ochre 7.0-7.2 ms, tokio-mt 9.3-10.5, rayon 5.0-5.5).
//!
//! Session 34, the sum beside a busy thread: in the slower runs the worker on the shared CPU
//! had borrowed the collector (`Color::DEFAULT`, homed on the other), judged a backlog of 6,000
//! events at 9 us each, the average of its own turns lifted by the driver's (the same color);
//! every later result was then forwarded to it in batches of 1.6-2.3 messages. Weighing each
//! event of a turn in the color's average (the driver's one turn no longer sets it), and not
//! lending cheap colors' backlogs, were each tried: medians over 5 processes alternated 11.7
//! ms all three (a scratch build each), so not kept. `perf` of the quiet sum (`ONLY=sum`, 60
//! repetitions): ochre's workers spend 1.31x rayon's CPU, the chunks' closures 1.1x (each
//! posts its result) and the runtime's per-event path the rest (~140 ns an event): the cost
//! of an event per chunk, which rayon's halving avoids.
//!
//! Session 35, the quiet sum on another host (rayon 1.2-1.3 ms a sum here, 5 before). With few
//! chunks, four or eight (`user_probe 9 2000000`, `1000000`): ochre 1.87-1.89 and 1.61-1.66 ms,
//! 0.65-0.80 of rayon: `Color(1)`..`Color(4)` hash three to one worker, and chunks of 0.3-0.6
//! ms waited behind each other there while the other worker idled (no share behind turns under
//! a millisecond, and a thief's request waits for the turn's end). Events over a tenth of a
//! millisecond are long now (`steal::LONG_EVENT_NS`): 1.34-1.41 and 1.39-1.41 ms in most
//! processes. With many small chunks (1,024 numbers, 7,813 chunks): ochre 4-5 ms, 0.3 of
//! rayon, tokio-mt as slow; the chunks' own loops take 2-3x rayon's time, not the runtime: a
//! worker reads the array in 8 KB pieces scattered by the colors' hash, and on this host a
//! thread reading every other 8 KB piece of an array takes 3.5x as long as one reading the
//! contiguous half (a scratch program: no runtime, one thread). Colors placed so that each
//! worker's chunks are contiguous (`Runtime::home_of`) ran the sum in 2.5-3.7 ms; consecutive
//! plain colors are hashed one by one so that small programs spread, so the runtime does not
//! place them in runs: not done. Session 58 did it for colors from 64 on (`ochre::color`'s
//! `home_of`: runs of eight, consecutive runs on consecutive workers; below 64 one by one as
//! before): `bench steal --quick`, 8 processes alternated with the build before, the sum of
//! 4M numbers in 1,024-number chunks over tokio-mt 0.80 -> 1.06 (2 workers), 1.03 -> 1.36 (8),
//! 0.64 -> 0.74 with CPU 1 shared (medians).
//!
//! Session 38, the word count at 1,024 lines a chunk (196 chunks of about 0.5 ms, each merged
//! into the collector's map in about 0.34 ms): ochre 114-120 ms, tokio-mt 104-110, rayon 67.
//! A trace showed every merge after the last chunk: the collector (`Color::DEFAULT`) joined
//! its worker's line behind 98 chunks and got its first turn at the 58th millisecond, after
//! which one worker merged for 60 ms while the other idled. With backlogs of long events
//! taking every other turn (`Config::backlog_turns`, `queue`'s "Turns: the line, and
//! backlogs", opt-in): 81-83 ms (1.22-1.30x tokio-mt) in most processes. But in some periods (minutes
//! at a time, every process alike: the host's placement of the two virtual CPUs) the merges,
//! now overlapping the other worker's counting, free its strings into its allocator's arena
//! while it allocates there (glibc's fastbins: a line that crosses cores at every operation):
//! its chunks then took 1.5 ms instead of 0.5 and the run 157-175 ms, where merging after the
//! counts took 114-125 (tokio-mt, merging beside its workers too, 136-150 then). With jemalloc
//! preloaded 64-66 ms against 66-72, and with integer keys (no allocation per word) 28-30 ms
//! against 35, in both kinds of period. The study of that session ran in such a period
//! (`bench steal`'s word count: 0.67x with backlog turns), so they are opt-in; this probe runs
//! the default (turns in line order).
//!
//! Session 39, the sum beside a busy thread (`BUSY=1`, chunks of 1,024): ochre 8-12 ms against
//! tokio-mt's 5-6 (0.45-0.69). A debug print of every loan showed the collector
//! (`Color::DEFAULT`, 4,000 results queued behind the chunks) lent to worker 1 (a quarter of its
//! CPU) by a steal; every later result was forwarded there, one batch a chunk, and worker 1 ran
//! all 7,813 of them. A thief clearly slower than its victim is now lent colors of one event,
//! its part of the line by the two shares (`steal::slower_part`, `queue`'s `lend_single`):
//! 0.74-1.06 in most processes. And each `run` waited twice for worker 1's time slice (4 ms
//! each: a scratch program timing the gate, the quiescence and each worker's end): at its end
//! worker 1 yielded its CPU while it waited for the others to hand back their memory, and
//! between runs while it watched for the next; when its CPU is shared it now spins at the end
//! and blocks at once between runs (`worker`'s `wait_for_every_flush`, `runtime`'s
//! `GATE_SPIN`). A run of eight empty events beside the busy thread: 7.9 ms -> 28 us
//! (tokio-mt 65 us).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ochre::{Color, ColorCell, Runtime};
use ochre_bench::harness::median;
use rayon::prelude::*;

fn sum_ochre(rt: &Runtime, data: &Arc<Vec<u64>>, chunk: usize) -> u64 {
    let total = Arc::new(ColorCell::new(Color::DEFAULT, 0u64));
    let (d, t) = (data.clone(), total.clone());
    let r = rt
        .run(Color::DEFAULT, move || {
            let chunks = d.len().div_ceil(chunk);
            for i in 0..chunks {
                let (d, t) = (d.clone(), t.clone());
                ochre::post(Color(1 + i as u64), move || {
                    let s: u64 =
                        d[i * chunk..((i + 1) * chunk).min(d.len())].iter().map(|x| x * x).sum();
                    ochre::post(Color::DEFAULT, move || {
                        let _ = t.with(|v| *v += s);
                    });
                });
            }
        })
        .expect("run");
    if std::env::var_os("STATS").is_some() {
        eprintln!("run {:?}", r.elapsed);
        for (w, s) in r.workers.iter().enumerate() {
            eprintln!("{}", ochre_bench::harness::worker_line(w, s));
        }
    }
    // Every closure ran and dropped its clone: the cell is ours again.
    match Arc::try_unwrap(total) {
        Ok(cell) => cell.into_inner(),
        Err(_) => panic!("a clone of the total outlived the run"),
    }
}

fn sum_rayon(pool: &rayon::ThreadPool, data: &[u64], chunk: usize) -> u64 {
    pool.install(|| data.par_chunks(chunk).map(|c| c.iter().map(|x| x * x).sum::<u64>()).sum())
}

fn sum_tokio(rt: &tokio::runtime::Runtime, data: &Arc<Vec<u64>>, chunk: usize) -> u64 {
    rt.block_on(async {
        let handles: Vec<_> = (0..data.len().div_ceil(chunk))
            .map(|i| {
                let d = data.clone();
                tokio::spawn(async move {
                    d[i * chunk..((i + 1) * chunk).min(d.len())].iter().map(|x| x * x).sum::<u64>()
                })
            })
            .collect();
        let mut total = 0;
        for h in handles {
            total += h.await.expect("task");
        }
        total
    })
}

fn count(lines: &[String]) -> HashMap<String, u64> {
    let mut m = HashMap::new();
    for l in lines {
        for w in l.split_ascii_whitespace() {
            *m.entry(w.to_string()).or_insert(0) += 1;
        }
    }
    m
}

fn merge(into: &mut HashMap<String, u64>, from: HashMap<String, u64>) {
    for (k, v) in from {
        *into.entry(k).or_insert(0) += v;
    }
}

fn words_ochre(rt: &Runtime, text: &Arc<Vec<String>>, chunk: usize) -> HashMap<String, u64> {
    let total = Arc::new(Mutex::new(HashMap::new()));
    let (d, t) = (text.clone(), total.clone());
    rt.run(Color::DEFAULT, move || {
        for i in 0..d.len().div_ceil(chunk) {
            let (d, t) = (d.clone(), t.clone());
            ochre::post(Color(1 + i as u64), move || {
                let m = count(&d[i * chunk..((i + 1) * chunk).min(d.len())]);
                ochre::post(Color::DEFAULT, move || merge(&mut t.lock().unwrap(), m));
            });
        }
    })
    .expect("run");
    let m = std::mem::take(&mut *total.lock().unwrap());
    m
}

fn words_rayon(pool: &rayon::ThreadPool, text: &[String], chunk: usize) -> HashMap<String, u64> {
    pool.install(|| {
        text.par_chunks(chunk).map(count).reduce(HashMap::new, |mut a, b| {
            merge(&mut a, b);
            a
        })
    })
}

fn words_tokio(
    rt: &tokio::runtime::Runtime,
    text: &Arc<Vec<String>>,
    chunk: usize,
) -> HashMap<String, u64> {
    rt.block_on(async {
        let handles: Vec<_> = (0..text.len().div_ceil(chunk))
            .map(|i| {
                let d = text.clone();
                tokio::spawn(async move { count(&d[i * chunk..((i + 1) * chunk).min(d.len())]) })
            })
            .collect();
        let mut total = HashMap::new();
        for h in handles {
            merge(&mut total, h.await.expect("task"));
        }
        total
    })
}

fn main() {
    let mut args = std::env::args().skip(1);
    let reps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(7);
    let chunk: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8192);
    // `DEFAULTS=1`: each library's default thread count (as a user leaves it; in a container
    // with a CPU quota, each reads the quota), instead of 2 threads each.
    let (rt, pool, tokio) = if std::env::var("DEFAULTS").is_ok_and(|v| v == "1") {
        (
            Runtime::builder().build().expect("ochre"),
            rayon::ThreadPoolBuilder::new().build().expect("rayon"),
            tokio::runtime::Builder::new_multi_thread().build().expect("tokio"),
        )
    } else {
        (
            Runtime::builder().workers(2).build().expect("ochre"),
            rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("rayon"),
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().expect("tokio"),
        )
    };
    eprintln!("threads: ochre {}, rayon {}", rt.workers(), pool.current_num_threads());
    let data: Arc<Vec<u64>> = Arc::new((0..8_000_000u64).collect());
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut word = || {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        format!("w{}", seed.wrapping_mul(0x2545_f491_4f6c_dd1d) % 5000)
    };
    let text: Arc<Vec<String>> = Arc::new(
        (0..200_000).map(|_| (0..10).map(|_| word()).collect::<Vec<_>>().join(" ")).collect(),
    );
    let time = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        t.elapsed()
    };
    let expect = sum_rayon(&pool, &data, chunk);
    let expect_words = words_rayon(&pool, &text, chunk / 8);
    let mut t: [Vec<f64>; 6] = Default::default();
    // `BUSY=1`: a thread spins on worker 1's CPU throughout (a machine shared with a busy
    // process).
    let busy = std::env::var("BUSY").is_ok_and(|v| v == "1").then_some(1);
    let only = std::env::var("ONLY").ok();
    let only = only.as_deref();
    ochre_bench::actors::with_busy_cpu(busy, || {
        for rep in 0..=reps {
            let mut d = [Duration::ZERO; 6];
            let order: Vec<usize> = if rep % 2 == 0 { vec![0, 1, 2] } else { vec![2, 1, 0] };
            for &s in &order {
                if only != Some("words") {
                    d[s] = time(&mut || {
                        let got = match s {
                            0 => sum_ochre(&rt, &data, chunk),
                            1 => sum_rayon(&pool, &data, chunk),
                            _ => sum_tokio(&tokio, &data, chunk),
                        };
                        assert_eq!(got, expect);
                    });
                }
                if only == Some("sum") {
                    continue;
                }
                d[3 + s] = time(&mut || {
                    let got = match s {
                        0 => words_ochre(&rt, &text, chunk / 8),
                        1 => words_rayon(&pool, &text, chunk / 8),
                        _ => words_tokio(&tokio, &text, chunk / 8),
                    };
                    assert!(got == expect_words);
                });
            }
            if rep > 0 {
                for k in 0..6 {
                    t[k].push(d[k].as_secs_f64() * 1e3);
                }
            }
        }
    });
    let m: Vec<f64> = t.iter().map(|v| median(v)).collect();
    if only != Some("words") {
        println!(
        "sum of squares (chunk {chunk}): ochre {:.2} ms, rayon {:.2} ms, tokio {:.2} ms; ochre/rayon speed {:.2}, ochre/tokio {:.2}",
        m[0], m[1], m[2], m[1] / m[0], m[2] / m[0]
    );
    }
    if only != Some("sum") {
        println!(
        "word count (chunk {}): ochre {:.2} ms, rayon {:.2} ms, tokio {:.2} ms; ochre/rayon speed {:.2}, ochre/tokio {:.2}",
        chunk / 8, m[3], m[4], m[5], m[4] / m[3], m[5] / m[3]
    );
    }
}
