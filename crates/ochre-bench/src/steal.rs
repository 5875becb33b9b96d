//! Stealing policies on imbalanced colors, and what stealing costs where it cannot help.
//!
//! Imbalanced: a few heavy colors (long chains of 10 µs events), all homed on worker 0, among
//! many light ones (short chains) spread over every worker: without stealing worker 0 runs every
//! heavy chain while the others idle; the figure is events per second over the whole run (the
//! slowest worker sets it). Balanced: ping-pong local, where
//! every worker has the same work and stealing can only cost (the bar: <= 2%).
//!
//! Policies: off, plain (libasync-smp), batch, locality-aware, cost-aware, and all heuristics
//! together (pinning is per color and exercised by the web server).
//!
//! Users' loops: two loops a worker, each a plain color (`Color(1)`, `Color(2)`, ...) whose
//! event does a 10 µs step and posts the next to its own color, written as a user writes them
//! (default configuration, colors hashed wherever they fall), against the same loops as tokio
//! tasks that yield between steps and as a rayon parallel iterator over the loops, in the same
//! process, one runtime of each for every sample (a program alternating runtimes: each one's
//! threads idle while the others run).
//!
//! A user's pipeline: `workers + 1` stages, each a plain color (`Color(1)`, `Color(2)`, ...)
//! doing 5 µs an item and posting it to the next stage, 2,000 items posted to the first at
//! once, against the same stages as tokio tasks joined by unbounded channels (one runtime of
//! each for the whole case: colors stay where the runs before left them, as in a program that
//! runs a pipeline again and again). Three stages on two workers: one worker holds two stages
//! whatever the placement, and only moving a stage when the other worker runs dry balances
//! them. Before the thief waited a turn for a line caught between two stages' turns and idle
//! homes took moved stages back (`ochre::steal`'s `defers`, `worth_recalling`): 20.8 ms a run
//! against tokio-mt's 16.8-17.7, the ideal 15; after, 16.3-17.4 (medians of 9 runs, 3
//! processes of a scratch program written as this case is).
//!
//! A user's word count (`wordcount`): 196 chunks of lines, a plain color each, each posting its
//! map of counts to one collector color that merges it, against tokio-mt (a task a chunk, the
//! handles awaited and merged in order) and rayon (`par_chunks`, `reduce`), and ochre with
//! backlog turns (`ochre-backlog`: `Config::backlog_turns`, opt-in), in one process. In line
//! order (the default) the collector runs after every chunk on its worker, and one worker
//! merges alone at the end (`user_probe`: 114-120 ms against tokio-mt's 104-110); with backlog
//! turns 81-83 ms, but 157-175 in periods when the merges' frees into the other worker's
//! allocator arena, now beside its counting, cost most (see `queue`; the study of session 38
//! ran in one: 0.67x).
//!
//! A user's sum and a user's short jobs (`usersum`): a sum of squares over 4M (`--quick`) or 8M
//! numbers in chunks of 1,024, a plain color a chunk posting its partial sum to a collector
//! color; and jobs of eight tiny events, each job a `run` (200 or 1,000 a sample); against
//! tokio-mt and rayon, quiet and with a thread spinning on the last worker's CPU (a machine
//! shared with another process). Before session 39, beside the busy thread, the sum ran at
//! 0.38-0.47 of tokio-mt (a steal lent the collector to the shared worker) and a short job took
//! 8 ms (0.008 of tokio-mt: every `run` waited twice for the shared CPU's time slice); after,
//! 0.56-0.82 and 1.07-1.22 (two processes; quiet, ochre / tokio-mt 1.1-1.3 and 3.2-3.3). The
//! shared-CPU cases run after every quiet one (a CPU's measured share is remembered for the
//! process) and check 0.7 of tokio-mt, the goal of `bench actors`' busy half.
//!
//! The same three (sum, short jobs, divide and conquer) with four workers per CPU (8 workers on
//! this 2-CPU machine; tokio-mt and rayon with as many threads), quiet: a program written for a
//! larger machine, or a CI runner. With every worker the home of colors they ran at 0.58-0.85,
//! 0.20-0.79 and 0.24-0.41 of tokio-mt at 4 and 8 workers (`oversub_probe`, session 54); with
//! colors homed on as many workers as CPUs and the others standing by
//! (`Config::home_on_every_worker`) 1.1-1.5.
//!
//! A user's divide and conquer (`divide`): `fib(27)` (`--quick`) or `fib(30)` with leaves at 12
//! or 15, a fresh plain color per call, each half answering its parent's color; against
//! tokio-mt (a task per call) and rayon (`join`), quiet and beside the busy thread, checked as
//! the sum is. Every call's color is new, so this is the runtime's cost per fresh color
//! (hashed to a home, its slot made and dropped, its first turn watched) and its placement of
//! a tree whose halves hash anywhere. First figures (session 41, `--quick`, three processes):
//! quiet 0.84-0.96 of tokio-mt, busy 0.99-1.25; `examples/fib_probe` with a busy thread (or
//! a busy process) on CPU 1 ranged 0.26-1.04 over processes: one run in four or five took a
//! time slice of the other thread (3-5 ms against 0.8) waiting for the worker on the shared
//! CPU, the home of half the tree's colors, whose posts and answers only it can route.

use ochre::{Color, Config, Runtime, Steal};

use crate::harness::{measure_case, work, BenchReport, Options, System};
use crate::peers;

/// The policies compared.
pub fn policies() -> Vec<(&'static str, Config)> {
    vec![
        // Explicitly off: the default steals backlogs (`Steal::Backlog`).
        ("off", Config::default().steal(Steal::Off)),
        ("plain", Config::default().steal(Steal::Plain)),
        ("batch", Config::default().steal(Steal::Plain).steal_batch(true)),
        ("locality", Config::default().steal(Steal::Plain).steal_locality(true)),
        (
            "cost",
            Config::default()
                .steal(Steal::Plain)
                .steal_min_work(Some(std::time::Duration::from_micros(20))),
        ),
        ("all", Config::default().stealing_heuristics()),
    ]
}

fn chain(c: Color, left: u32, cost: u64) {
    work(cost);
    if left > 1 {
        ochre::post(c, move || chain(c, left - 1, cost));
    }
}

/// The imbalanced workload: `heavy` chains of `length` events homed on worker 0, `light`
/// chains of `length / 8` events on any worker, 10 µs per event. Returns events/s.
pub fn imbalanced(rt: &Runtime, heavy: usize, light: u64, length: u32) -> Result<f64, String> {
    let heavy_colors: Vec<Color> =
        (1_000..).map(Color).filter(|&c| rt.home_of(c) == 0).take(heavy).collect();
    let short = (length / 8).max(1);
    let report = rt
        .run(Color(0), move || {
            for &c in &heavy_colors {
                ochre::post(c, move || chain(c, length, 10_000));
            }
            for l in 0..light {
                let c = Color(100_000 + l);
                ochre::post(c, move || chain(c, short, 10_000));
            }
        })
        .map_err(|e| e.to_string())?;
    let events = report.total().events_run;
    let expected = heavy as u64 * u64::from(length) + light * u64::from(short) + 1;
    if events != expected {
        return Err(format!("ran {events} events, expected {expected}"));
    }
    Ok(events as f64 / report.elapsed.as_secs_f64())
}

/// A user's loops on ochre: `loops` plain colors, each `steps` steps of `cost` ns posting the
/// next to its own color. Returns steps/s.
pub fn loops_ochre(rt: &Runtime, loops: u64, steps: u32, cost: u64) -> Result<f64, String> {
    let report = rt
        .run(Color::DEFAULT, move || {
            for c in 1..=loops {
                let c = Color(c);
                ochre::post(c, move || chain(c, steps, cost));
            }
        })
        .map_err(|e| e.to_string())?;
    let events = report.total().events_run;
    let expected = loops * u64::from(steps) + 1;
    if events != expected {
        return Err(format!("ran {events} events, expected {expected}"));
    }
    Ok((events - 1) as f64 / report.elapsed.as_secs_f64())
}

/// The same loops as tokio tasks, yielding between steps. Returns steps/s.
pub fn loops_tokio(rt: &tokio::runtime::Runtime, loops: u64, steps: u32, cost: u64) -> f64 {
    let start = std::time::Instant::now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..loops)
            .map(|_| {
                tokio::spawn(async move {
                    for _ in 0..steps {
                        work(cost);
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("a loop task panicked");
        }
    });
    (loops * u64::from(steps)) as f64 / start.elapsed().as_secs_f64()
}

/// The same loops as a rayon parallel iterator over them. Returns steps/s.
pub fn loops_rayon(pool: &rayon::ThreadPool, loops: u64, steps: u32, cost: u64) -> f64 {
    use rayon::prelude::*;
    let start = std::time::Instant::now();
    pool.install(|| {
        (0..loops).into_par_iter().for_each(|_| {
            for _ in 0..steps {
                work(cost);
            }
        })
    });
    (loops * u64::from(steps)) as f64 / start.elapsed().as_secs_f64()
}

fn stage(n: u64, last: u64, cost: u64) {
    work(cost);
    if n < last {
        ochre::post(Color(n + 1), move || stage(n + 1, last, cost));
    }
}

/// A user's pipeline on ochre: `items` items through `stages` stages, each a plain color
/// (`Color(1)`, ...) doing `cost` ns an item and posting it to the next. Returns items/s.
pub fn pipeline_ochre(rt: &Runtime, stages: u64, items: u64, cost: u64) -> Result<f64, String> {
    let report = rt
        .run(Color::DEFAULT, move || {
            for _ in 0..items {
                ochre::post(Color(1), move || stage(1, stages, cost));
            }
        })
        .map_err(|e| e.to_string())?;
    let events = report.total().events_run;
    let expected = items * stages + 1;
    if events != expected {
        return Err(format!("ran {events} events, expected {expected}"));
    }
    Ok(items as f64 / report.elapsed.as_secs_f64())
}

/// The same pipeline as tokio tasks, a task a stage, joined by unbounded channels. Returns
/// items/s.
pub fn pipeline_tokio(rt: &tokio::runtime::Runtime, stages: u64, items: u64, cost: u64) -> f64 {
    let start = std::time::Instant::now();
    rt.block_on(async {
        let (first, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
        let mut tasks = Vec::new();
        for s in 0..stages {
            let (tx, next) = tokio::sync::mpsc::unbounded_channel::<u64>();
            let mut input = std::mem::replace(&mut rx, next);
            let out = (s + 1 < stages).then_some(tx);
            tasks.push(tokio::spawn(async move {
                while let Some(item) = input.recv().await {
                    work(cost);
                    if let Some(out) = &out {
                        out.send(item).expect("the next stage is running");
                    }
                }
            }));
        }
        for item in 0..items {
            first.send(item).expect("the first stage is running");
        }
        drop(first);
        for t in tasks {
            t.await.expect("a stage task panicked");
        }
    });
    items as f64 / start.elapsed().as_secs_f64()
}

/// Runs the stealing benchmark.
pub fn run(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(
        "steal",
        "Stealing policies: imbalanced colors (events/s, higher is better), ping-pong (ev/s/worker, stealing must cost <= 2%), users' loops on plain colors against tokio and rayon (steps/s), a user's pipeline of plain colors against tokio (items/s), a user's word count on plain colors against tokio and rayon (lines/s), and a user's sum (numbers/s), short jobs (jobs/s) and divide and conquer (calls/s) on plain colors against tokio and rayon, quiet and with the last worker's CPU shared with a busy thread.",
    );
    let length = if opts.quick { 400 } else { 1_500 };
    for &w in opts.workers.iter().filter(|&&w| w >= 2) {
        let runtimes: Vec<(&str, Result<Runtime, ochre::Error>)> = policies()
            .into_iter()
            .map(|(name, cfg)| (name, Runtime::builder().workers(w).config(cfg).build()))
            .collect();
        let case = format!("{w}w imbalanced");
        let systems = runtimes
            .iter()
            .map(|(name, rt)| {
                let label =
                    if *name == "all" { "ochre".to_string() } else { format!("steal-{name}") };
                System::new(label, move || {
                    rt.as_ref()
                        .map_err(|e| e.to_string())
                        .and_then(|rt| imbalanced(rt, 4, 40, length))
                })
            })
            .collect();
        measure_case(&mut report, &case, w, "ev/s", opts.reps, systems);
        if let (Some(all), Some(off)) =
            (report.median_of("ochre", &case), report.median_of("steal-off", &case))
        {
            report.check(
                format!("[{case}] stealing heuristics beat no stealing"),
                all / off,
                all > off,
            );
        }
        let pp_case = format!("{w}w pingpong");
        let epw = if opts.quick { 3_000_000 } else { 6_000_000 };
        // A runtime per sample: the 2% bar is below the spread between instances of one
        // configuration (see `peers::on_fresh_runtime`).
        let systems = policies()
            .into_iter()
            .filter(|(name, _)| matches!(*name, "off" | "all"))
            .map(|(name, cfg)| {
                let label =
                    if name == "all" { "ochre".to_string() } else { "steal-off".to_string() };
                let build = move || Runtime::builder().workers(w).config(cfg.clone()).build();
                System::new(label, move || {
                    peers::on_fresh_runtime(&build, epw, crate::pingpong::ochre_pingpong)
                })
            })
            .collect();
        measure_case(&mut report, &pp_case, w, "ev/s/worker", opts.reps, systems);
        if let (Some(on), Some(off)) =
            (report.median_of("ochre", &pp_case), report.median_of("steal-off", &pp_case))
        {
            report.check(
                format!("[{pp_case}] stealing costs <= 2% on balanced work"),
                on / off,
                on / off >= 0.98,
            );
        }
    }
    for &w in opts.workers.iter().filter(|&&w| w >= 2) {
        loops_case(&mut report, opts, w);
        pipeline_case(&mut report, opts, w);
        wordcount_case(&mut report, opts, w);
        sum_case(&mut report, opts, w, false);
        jobs_case(&mut report, opts, w, false);
        divide_case(&mut report, opts, w, false);
    }
    // More workers than CPUs: a program written for a larger machine (`workers(8)`) run on
    // this one, against tokio and rayon with as many threads.
    let cpus = ochre::topology::allowed_cpus().map_or(0, |c| c.len());
    let most = opts.workers.iter().copied().max().unwrap_or(0);
    if cpus >= 1 && most >= 2 && OVERSUBSCRIBED * cpus > most {
        let w = OVERSUBSCRIBED * cpus;
        sum_case(&mut report, opts, w, false);
        jobs_case(&mut report, opts, w, false);
        divide_case(&mut report, opts, w, false);
        report.notes.push(format!(
            "[{w}w ...] {w} workers (tokio-mt and rayon: {w} threads) on a machine of {cpus} CPUs"
        ));
    }
    // Last: a worker's CPU measured shared is remembered for the process (`ochre::cpu_share`),
    // and the quiet cases would start from it.
    for &w in opts.workers.iter().filter(|&&w| w >= 2) {
        sum_case(&mut report, opts, w, true);
        jobs_case(&mut report, opts, w, true);
        divide_case(&mut report, opts, w, true);
    }
    if report.rows.is_empty() {
        report.notes.push("needs at least 2 workers: skipped".into());
    }
    report
}

/// Workers per CPU of the cases with more workers than CPUs (module doc).
const OVERSUBSCRIBED: usize = 4;

/// The runtimes a user's case compares at `w` workers: the default one and one with plain
/// stealing (libasync-smp's); one that cannot be built is an error in its rows.
fn default_and_plain(w: usize) -> [Result<Runtime, String>; 2] {
    let build = |config: Config| {
        Runtime::builder().workers(w).config(config).build().map_err(|e| e.to_string())
    };
    [build(Config::default()), build(Config::default().steal(Steal::Plain))]
}

/// Measures a user's case: `ochre(rt)` on the default runtime and on plain stealing, beside
/// `peers` (tokio-mt among them), then checks ochre within 5% of tokio-mt, paired per
/// repetition (tokio's rate spreads widely here: 124-193K steps/s in one run of the loops).
fn users_case<'a>(
    report: &mut BenchReport,
    opts: &Options,
    what: (usize, &str, &str, &str),
    ochre: impl Fn(&Runtime) -> Result<f64, String> + 'a,
    peers: Vec<System<'a>>,
) {
    users_case_to(report, opts, what, QUIET, ochre, peers);
}

/// What a user's case checks of ochre / tokio-mt (paired), and how its check says it.
#[derive(Clone, Copy)]
struct Goal {
    min: f64,
    claim: &'static str,
}

/// Quiet: within 5%.
const QUIET: Goal = Goal { min: 0.95, claim: "within 5% of tokio-mt" };
/// With a CPU shared with a busy thread: the goal `bench actors` sets its busy half (a worker
/// there gets a third to a half of its CPU, and its time slices come when the scheduler gives
/// them).
const BUSY: Goal = Goal { min: 0.7, claim: ">= 0.7 of tokio-mt" };

/// [`users_case`], checking ochre / tokio-mt against `goal`.
fn users_case_to<'a>(
    report: &mut BenchReport,
    opts: &Options,
    (w, case, unit, what): (usize, &str, &str, &str),
    goal: Goal,
    ochre: impl Fn(&Runtime) -> Result<f64, String> + 'a,
    peers: Vec<System<'a>>,
) {
    let [default, plain] = default_and_plain(w);
    let on = |rt: &Result<Runtime, String>| rt.as_ref().map_err(Clone::clone).and_then(&ochre);
    let mut systems =
        vec![System::new("ochre", || on(&default)), System::new("steal-plain", || on(&plain))];
    systems.extend(peers);
    measure_case(report, case, w, unit, opts.reps, systems);
    if let Some(ratio) = report.paired_ratio("ochre", "tokio-mt", case) {
        let Goal { min, claim } = goal;
        report.check(format!("[{case}] {what} {claim} (paired)"), ratio, ratio >= min);
    }
}

/// The peers of a user's case at `w` workers: tokio-mt and rayon, each built once for the case
/// (one that cannot be built is an error in its rows), running `on_tokio` and `on_rayon`.
fn tokio_and_rayon<'a>(
    w: usize,
    on_tokio: impl Fn(&tokio::runtime::Runtime) -> Result<f64, String> + 'a,
    on_rayon: impl Fn(&rayon::ThreadPool) -> Result<f64, String> + 'a,
) -> Vec<System<'a>> {
    let (tokio, rayon) = (peers::tokio_multi_thread(w), peers::rayon_pool(w));
    vec![
        System::new("tokio-mt", move || on_tokio(tokio.as_ref().map_err(Clone::clone)?)),
        System::new("rayon", move || on_rayon(rayon.as_ref().map_err(Clone::clone)?)),
    ]
}

/// The users' loops case at `w` workers (module doc).
fn loops_case(report: &mut BenchReport, opts: &Options, w: usize) {
    let (loops, steps, cost) = (2 * w as u64, if opts.quick { 400 } else { 1_500 }, 10_000);
    let case = format!("{w}w loops");
    let peers = tokio_and_rayon(
        w,
        move |rt| Ok(loops_tokio(rt, loops, steps, cost)),
        move |pool| Ok(loops_rayon(pool, loops, steps, cost)),
    );
    let what = (w, case.as_str(), "steps/s", "users' loops on plain colors");
    users_case(report, opts, what, |rt| loops_ochre(rt, loops, steps, cost), peers);
}

/// The user's pipeline case at `w` workers (module doc).
fn pipeline_case(report: &mut BenchReport, opts: &Options, w: usize) {
    let (stages, items, cost) = (w as u64 + 1, if opts.quick { 1_000 } else { 2_000 }, 5_000);
    let case = format!("{w}w pipeline");
    let tokio = peers::tokio_multi_thread(w);
    let peers = vec![System::new("tokio-mt", || {
        let rt = tokio.as_ref().map_err(Clone::clone)?;
        Ok(pipeline_tokio(rt, stages, items, cost))
    })];
    let what = (w, case.as_str(), "items/s", "a user's pipeline on plain colors");
    users_case(report, opts, what, |rt| pipeline_ochre(rt, stages, items, cost), peers);
}

/// The user's word count at `w` workers (module doc): ochre, ochre with backlog turns,
/// tokio-mt and rayon, each result checked against the others'.
fn wordcount_case(report: &mut BenchReport, opts: &Options, w: usize) {
    use crate::wordcount;
    use std::sync::Arc;
    let (lines, chunk) = if opts.quick { (50_000, 256) } else { (200_000, 1_024) };
    let text = Arc::new(wordcount::text(lines, 5_000));
    let want = wordcount::count(&text);
    let case = format!("{w}w word count");
    let build = |config: Config| {
        Runtime::builder().workers(w).config(config).build().map_err(|e| e.to_string())
    };
    let (default, backlog) =
        (build(Config::default()), build(Config::default().backlog_turns(true)));
    let (text, want) = (&text, &want);
    let timed = move |run: &dyn Fn() -> Result<std::collections::HashMap<String, u64>, String>| {
        let start = std::time::Instant::now();
        let got = run()?;
        let rate = lines as f64 / start.elapsed().as_secs_f64();
        if got != *want {
            return Err(format!("counted {} words, expected {}", got.len(), want.len()));
        }
        Ok(rate)
    };
    let on = move |rt: &Result<Runtime, String>| {
        let rt = rt.as_ref().map_err(Clone::clone)?;
        timed(&|| wordcount::on_ochre(rt, text, chunk))
    };
    let mut systems =
        vec![System::new("ochre", || on(&default)), System::new("ochre-backlog", || on(&backlog))];
    systems.extend(tokio_and_rayon(
        w,
        move |rt| timed(&|| wordcount::on_tokio(rt, text, chunk)),
        move |pool| timed(&|| Ok(wordcount::on_rayon(pool, text, chunk))),
    ));
    measure_case(report, &case, w, "lines/s", opts.reps, systems);
    if let Some(ratio) = report.paired_ratio("ochre", "tokio-mt", &case) {
        let Goal { min, claim } = QUIET;
        let what = "a user's word count on plain colors";
        report.check(format!("[{case}] {what} {claim} (paired)"), ratio, ratio >= min);
    }
    if let Some(ratio) = report.paired_ratio("ochre-backlog", "ochre", &case) {
        report.notes.push(format!(
            "[{case}] backlog turns / turns in line order: {ratio:.3} (paired; below 1 where the \
             collector's merges, beside the chunks' counting, free into the other worker's \
             allocator arena: see `ochre::queue`)"
        ));
    }
}

/// Times `run`, whose result must be `want`, and returns `units` per second of it.
fn rate_of(units: f64, want: u64, run: &dyn Fn() -> Result<u64, String>) -> Result<f64, String> {
    let start = std::time::Instant::now();
    let got = run()?;
    let rate = units / start.elapsed().as_secs_f64();
    if got != want {
        return Err(format!("got {got}, expected {want}"));
    }
    Ok(rate)
}

/// The name of a user's case at `w` workers, beside a busy thread on the last worker's CPU if
/// `busy` (`usersum`).
fn shared_cpu_case(w: usize, what: &str, busy: bool) -> String {
    if busy {
        format!("{w}w {what}, CPU {} shared", w - 1)
    } else {
        format!("{w}w {what}")
    }
}

/// A user's case (`users_case`), with a thread spinning on the last worker's CPU throughout
/// if `busy` (checked against [`BUSY`] then).
fn shared_cpu_users_case<'a>(
    report: &mut BenchReport,
    opts: &Options,
    what: (usize, &str, &str, &str),
    busy: bool,
    ochre: impl Fn(&Runtime) -> Result<f64, String> + 'a,
    peers: Vec<System<'a>>,
) {
    let (goal, spinner) = if busy { (BUSY, Some(what.0 - 1)) } else { (QUIET, None) };
    crate::actors::with_busy_cpu(spinner, || users_case_to(report, opts, what, goal, ochre, peers));
}

/// A user's sum of squares at `w` workers (`usersum`), quiet or beside a busy thread on the
/// last worker's CPU.
fn sum_case(report: &mut BenchReport, opts: &Options, w: usize, busy: bool) {
    use crate::usersum;
    use std::sync::Arc;
    let (n, chunk) = if opts.quick { (4_000_000, 1_024) } else { (8_000_000, 1_024) };
    let data = Arc::new(usersum::numbers(n));
    let want = usersum::sum_of_squares(&data);
    let case = shared_cpu_case(w, "sum", busy);
    let data = &data;
    let timed = move |run: &dyn Fn() -> Result<u64, String>| rate_of(n as f64, want, run);
    let peers = tokio_and_rayon(
        w,
        move |rt| timed(&|| Ok(usersum::sum_on_tokio(rt, data, chunk))),
        move |pool| timed(&|| Ok(usersum::sum_on_rayon(pool, data, chunk))),
    );
    let what = (w, case.as_str(), "numbers/s", "a user's sum on plain colors");
    let ochre = |rt: &Runtime| timed(&|| usersum::sum_on_ochre(rt, data, chunk));
    shared_cpu_users_case(report, opts, what, busy, ochre, peers);
}

/// A user's short jobs at `w` workers (`usersum`), quiet or beside a busy thread on the last
/// worker's CPU.
fn jobs_case(report: &mut BenchReport, opts: &Options, w: usize, busy: bool) {
    use crate::usersum;
    let jobs = if opts.quick { 200 } else { 1_000 };
    let case = shared_cpu_case(w, "short jobs", busy);
    let want = u64::from(jobs) * usersum::JOB_EVENTS;
    let timed = move |run: &dyn Fn() -> Result<u64, String>| rate_of(f64::from(jobs), want, run);
    let peers = tokio_and_rayon(
        w,
        move |rt| timed(&|| Ok(usersum::jobs_on_tokio(rt, jobs))),
        move |pool| timed(&|| Ok(usersum::jobs_on_rayon(pool, jobs))),
    );
    let what = (w, case.as_str(), "jobs/s", "a user's short jobs");
    let ochre = |rt: &Runtime| timed(&|| usersum::jobs_on_ochre(rt, jobs));
    shared_cpu_users_case(report, opts, what, busy, ochre, peers);
}

/// A user's divide and conquer at `w` workers (`divide`: `fib` with a fresh color per call),
/// quiet or beside a busy thread on the last worker's CPU.
fn divide_case(report: &mut BenchReport, opts: &Options, w: usize, busy: bool) {
    use crate::divide;
    let (n, cutoff) = if opts.quick { (27, 12) } else { (30, 15) };
    let (want, calls) = (divide::seq(n), divide::calls(n, cutoff) as f64);
    let case = shared_cpu_case(w, "divide and conquer", busy);
    let timed = move |run: &dyn Fn() -> Result<u64, String>| rate_of(calls, want, run);
    let peers = tokio_and_rayon(
        w,
        move |rt| timed(&|| divide::on_tokio(rt, n, cutoff)),
        move |pool| timed(&|| Ok(divide::on_rayon(pool, n, cutoff))),
    );
    let what = (w, case.as_str(), "calls/s", "a user's divide and conquer on fresh colors");
    let ochre = |rt: &Runtime| timed(&|| divide::on_ochre(rt, n, cutoff).map(|(v, _)| v));
    shared_cpu_users_case(report, opts, what, busy, ochre, peers);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_loops_run_every_step_on_each_system() {
        let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
        assert!(loops_ochre(&rt, 4, 8, 1_000).unwrap() > 0.0);
        let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
        assert!(loops_tokio(&tokio, 4, 8, 1_000) > 0.0);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        assert!(loops_rayon(&pool, 4, 8, 1_000) > 0.0);
    }

    #[test]
    fn a_users_pipeline_runs_every_item_through_every_stage_on_each_system() {
        let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
        assert!(pipeline_ochre(&rt, 3, 50, 1_000).unwrap() > 0.0);
        let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
        assert!(pipeline_tokio(&tokio, 3, 50, 1_000) > 0.0);
    }

    #[test]
    fn the_imbalanced_workload_runs_every_event_under_every_policy() {
        for (name, cfg) in policies() {
            let rt = Runtime::builder().workers(2).pin(false).config(cfg).build().unwrap();
            assert!(imbalanced(&rt, 2, 5, 16).unwrap() > 0.0, "{name}");
        }
    }
}
