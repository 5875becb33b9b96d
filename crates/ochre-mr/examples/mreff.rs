//! Parallel efficiency and Table 5.7's steps for one application, in one process, robust to a
//! shared machine: `mreff APP INPUT [REPS] [CONFIGS]`. Each repetition runs the sequential
//! reference (calling thread) and the job on every configuration (2 workers, pinned; `NAME:W`:
//! on W workers), in an order rotated each repetition, and records wall time, the process's
//! CPU time (`CLOCK_PROCESS_CPUTIME_ID`: a worker that lost its CPU to another program is not
//! charged) and minor page faults. Prints medians, spreads and paired ratios: the efficiency
//! `seq / (2 * mr)` in wall time, and `mr CPU / seq CPU`, the work the job adds to the
//! reference's (overhead, not waiting).
//!
//! `CONFIGS`: comma-separated among baseline, futex, spinning, batching, ema, placement,
//! stealoff (placement and stealing off), follow (placement and follow, stealing on), default
//! (stealing off and follow: `Config::default()`), nospin (the default without spinning: an
//! idle worker's spinning is not what the job's CPU time adds), and seqpair (the reference twice at once
//! on two pinned threads: efficiency 0.5 and CPU/seq 2.0 when running both cores together
//! costs nothing), seqthread (the reference on a new thread, with its own malloc arena), and
//! mrpair (two one-worker jobs at once, on runtimes pinned to CPUs 0 and 1: CPU/seq 2.0 when
//! a lane's map costs what the reference does with both CPUs running; against the two-worker
//! job, it separates what running the CPUs together costs from what splitting a job does).
//!
//! Word count, medium input, quiet machine (11 repetitions, 2 processes): sequential 72-73 ms;
//! 2 workers 44-45 ms (efficiency 0.80-0.83), CPU/seq 1.14-1.22; 1 worker CPU/seq 1.08-1.10;
//! seqpair 0.48-0.49 (CPU/seq 2.02-2.04); no page faults in a job on a runtime used before.
//! So the loss is work, not waiting: wall time is half the CPU time plus about 1 ms. Callgrind
//! counts 588.5 M instructions for the reference, 608.5 M at 1 worker, 630.5 M at 2 (+7%): the
//! rest of the extra CPU time is more cycles per instruction in the jobs (below); it is
//! not page faults, nor the thread or its malloc arena (seqthread: CPU/seq 0.99).
//!
//! Where it goes (per-phase thread CPU time in a scratch build, load average 6-9, 11 reps, 2
//! processes): the map phase costs 7-10% more CPU at 2 workers than at 1 for the same
//! instructions, what running both CPUs at once costs this machine (seqpair alongside: 2.05-2.25
//! then); partition, reduce and merge cost about 5.3 ms at 2 workers (lane finish 1.1, hash
//! combine 2.3-2.6, sort 0.8, merge 1.0-1.1) against 2.1 ms at 1: each word is in both lanes,
//! and half the pairs and key bytes a reduce reads were written on the other CPU. The emitter
//! reading the lane's store through a pointer cost the map path 6-7% CPU on one thread; it
//! holds the store by value now (3-4%). Tried and dropped: lanes sorting their runs so that
//! reduce merges them (finish 3.0-3.3 ms, combine 0.9, no sort: the same CPU), the worker's own
//! lane's run combined last so that duplicate keys are freed into its own malloc arena (no
//! change), a store without the container test on the emit_ref path (3 instructions a word
//! fewer, string match 4% more CPU).
//!
//! The loss split three ways (`default,default:1,seqpair,mrpair`, 4 processes of 11 repetitions,
//! load average 9-12; CPU/seq per job): two references at once 1.01-1.08 each (the machine); one
//! one-worker job alone 1.02-1.085, two at once 1.07-1.17 each; the two-worker job 1.15-1.24. Per
//! process, two one-worker jobs at once over two references at once, the one-lane path: 0.99-1.09
//! (2.8% more instructions than the reference at 1 worker, 608.6 M against 592.2 M: the emit path's
//! ~5 instructions a word, partition, sort, merge); the two-worker job over two one-worker jobs at
//! once, the split into two lanes: 1.06-1.09, the steadiest share (every key allocated and its
//! table grown in both lanes, about 1%; then combined, its duplicate freed, and merged, 3.5-4.5%).
//! Against the machine (two references at once), the two-worker job's CPU efficiency is 0.85-0.92.
//! Cachegrind, one worker against the reference: 16.0 M more data reads (109.4 M against 93.4 M, ~6
//! a word on the emit path), first-level and last-level misses alike (5.50 M against 5.38 M, 0.34 M
//! against 0.31 M), so what the one-lane path adds is loads and instructions, not misses. The other
//! map-heavy applications, the same day (one process of 11 repetitions each, load 5-7): CPU/seq at
//! 2 workers histogram 1.035, linear regression 1.00, string match 0.94, matrix multiply 0.99, with
//! two references at once 1.82-1.99 and two one-worker jobs 1.91-2.03: nothing to win there in CPU,
//! only in wall time.
//!
//! Ideas weighed against callgrind's counts (2 workers: 629.5 M instructions, the idle
//! workers' spinning included; the reference 592.2 M; post-map work ~30 M: the reduce events
//! 25.7 M, of which sort 10.8 M, merge tree 5.4 M and combine ~8.5 M, and the lanes' drain
//! 3.9 M; from run to run the lanes' and reduce's counts move by 1-2% with the tasks each lane
//! claims, which decide how many keys both lanes hold, so that 2, 4 or 8 reduce partitions
//! measured alike):
//! - carrying each key's hash from the lane to the reduce saves the reduce's 36000 rehashes
//!   (18000 keys, nearly all in both lanes), ~1.5 M instructions (0.25%), and no cache miss:
//!   the comparison of each duplicate still reads both keys' bytes;
//! - partitioning by key range (splitters sampled from a lane's keys) makes the final merge a
//!   concatenation (the tree's 5.4 M, ~1 ms CPU, of which the root's ~0.25 ms runs alone) but
//!   costs each lane 3 comparisons a key to find its range: 108000 comparisons over both
//!   lanes' 36000 keys, against the tree's ~54000 over the 18000 combined ones, so more CPU
//!   for less serial time, about a wash;
//! - a cheaper combine: of its ~220 instructions a pair, most are the hash (~40) and the free
//!   of the duplicate key (glibc's `free` runs ~4.5 M instructions more than in the reference,
//!   18000 duplicates), which only keys without a heap allocation of their own avoid; inline keys
//!   (`SmallVec<[u8; 16]>` in the reference, the job and rayon alike, tried: no allocation
//!   per key) cost 18 M more instructions in the reference and 9.6 M more in the job (a branch
//!   on every access to the bytes), and CPU/seq stayed 1.23 (load 10);
//! - the per-emit counter (`Phases::emitted`): 1.6 M instructions (0.3%).

use std::sync::Arc;
use std::time::Instant;

use ochre::{BatchSize, Config, Runtime, Spin, Steal, Wakeup};
use ochre_mr::apps::{self, AppFn, Application};

/// The process's minor page faults so far.
fn faults_now() -> f64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage for the duration of the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_minflt as f64
}

/// The process's system (kernel) CPU time, in milliseconds.
fn sys_now() -> f64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage for the duration of the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_stime.tv_sec as f64 * 1e3 + ru.ru_stime.tv_usec as f64 / 1e3
}

fn cpu_now() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

fn config(name: &str) -> Config {
    let base = Config::baseline();
    let futex = base.clone().wakeup(Wakeup::Futex);
    let spin = futex.clone().spin(Spin::Reasoned { threshold: None });
    let batch = spin.clone().batching(true).batch_sizing(BatchSize::Fixed);
    match name {
        "baseline" => Config::baseline(),
        "futex" => futex,
        "spinning" => spin,
        "batching" => batch,
        "ema" => batch.clone().ema(true),
        "placement" => batch.clone().ema(true).placement(true),
        "stealoff" => batch.clone().ema(true).placement(true).steal(Steal::Off),
        "follow" => batch.clone().ema(true).placement(true).follow(true),
        "default" => Config::default(),
        "nospin" => Config::default().spin(Spin::Never),
        other => panic!("{other}: unknown configuration"),
    }
}

/// The sequential reference twice at once, on two threads pinned to CPUs 0 and 1: what running
/// two cores together costs the same work (shared caches, memory, a host's sibling threads).
fn seq_pair<A: Application>(app: &Arc<A>) {
    std::thread::scope(|s| {
        for cpu in 0..2 {
            s.spawn(move || {
                // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET and
                // sched_setaffinity get valid pointers to it.
                unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                }
                std::hint::black_box(app.sequential());
            });
        }
    });
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn spread(v: &[f64]) -> (f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() - 1])
}

fn time<A: Application>(input: &str, reps: usize, configs: &[String]) {
    let app = Arc::new(A::load(input.as_ref()).expect("input"));
    let want = app.sequential();
    // `mrpair`: two one-worker runtimes of the default configuration, on CPUs 0 and 1.
    let pair: Vec<Runtime> = if configs.iter().any(|c| c == "mrpair") {
        (0..2)
            .map(|cpu| {
                let b = Runtime::builder().workers(1).cpus([cpu]).config(Config::default());
                b.build().expect("runtime")
            })
            .collect()
    } else {
        Vec::new()
    };
    let rts: Vec<Option<Runtime>> = configs
        .iter()
        .map(|c| {
            if c == "seqpair" || c == "seqthread" || c == "mrpair" {
                return None;
            }
            // `NAME:W`: on W workers (default 2).
            let (name, w) = c.split_once(':').unwrap_or((c, "2"));
            let w = w.parse().expect("workers");
            Some(Runtime::builder().workers(w).config(config(name)).build().expect("runtime"))
        })
        .collect();
    let n = configs.len() + 1;
    let mut wall = vec![Vec::new(); n];
    let mut cpu = vec![Vec::new(); n];
    let mut sys = vec![Vec::new(); n];
    let mut faults = vec![Vec::new(); n];
    let mut phases = vec![Vec::new(); n];
    for rep in 0..reps {
        for k in 0..n {
            let i = (k + rep) % n;
            let (t, c, k, f) = (Instant::now(), cpu_now(), sys_now(), faults_now());
            if i == 0 {
                let got = app.sequential();
                assert!(A::agree(&got, &want));
            } else if let Some(rt) = &rts[i - 1] {
                let (got, p) = A::run(&app, rt).expect("job");
                assert!(A::agree(&got, &want), "{} differs", configs[i - 1]);
                phases[i].push(p);
            } else if configs[i - 1] == "mrpair" {
                std::thread::scope(|s| {
                    for rt in &pair {
                        let app = &app;
                        s.spawn(move || std::hint::black_box(A::run(app, rt).expect("job")));
                    }
                });
                phases[i].push(ochre_mr::Phases::default());
            } else if configs[i - 1] == "seqthread" {
                let app = app.clone();
                let _ = std::thread::spawn(move || std::hint::black_box(app.sequential())).join();
                phases[i].push(ochre_mr::Phases::default());
            } else {
                seq_pair(&app);
                phases[i].push(ochre_mr::Phases::default());
            }
            wall[i].push(t.elapsed().as_secs_f64() * 1e3);
            cpu[i].push(cpu_now() - c);
            sys[i].push(sys_now() - k);
            faults[i].push(faults_now() - f);
        }
    }
    let (sw, sc) = (median(&wall[0]), median(&cpu[0]));
    println!(
        "{} ({reps} reps): sequential {sw:.1} ms wall, {sc:.1} ms CPU ({:.1} system, {} faults)",
        A::NAME,
        median(&sys[0]),
        median(&faults[0])
    );
    for (i, name) in configs.iter().enumerate().map(|(i, c)| (i + 1, c)) {
        let eff: Vec<f64> = (0..reps).map(|r| wall[0][r] / (2.0 * wall[i][r])).collect();
        let work: Vec<f64> = (0..reps).map(|r| cpu[i][r] / cpu[0][r]).collect();
        let (lo, hi) = spread(&wall[i]);
        let (elo, ehi) = spread(&eff);
        let ms = |f: fn(&ochre_mr::Phases) -> std::time::Duration| {
            median(&phases[i].iter().map(|p| f(p).as_secs_f64() * 1e3).collect::<Vec<_>>())
        };
        println!(
            "  {name:9} {:7.1} ms ({lo:.1}-{hi:.1}), CPU {:7.1} ms ({:.1} system, {} faults); efficiency {:.3} \
             ({elo:.2}-{ehi:.2}), CPU/seq {:.3}; map {:.1} reduce {:.2} merge {:.2} ms",
            median(&wall[i]),
            median(&cpu[i]),
            median(&sys[i]),
            median(&faults[i]),
            median(&eff),
            median(&work),
            ms(|p| p.map),
            ms(|p| p.reduce),
            ms(|p| p.merge),
        );
    }
    if n > 2 {
        for (i, name) in configs.iter().enumerate().skip(1).map(|(i, c)| (i + 1, c)) {
            let r: Vec<f64> = (0..reps).map(|r| wall[1][r] / wall[i][r]).collect();
            let (lo, hi) = spread(&r);
            println!("  {name} / {}: {:.3} ({lo:.2}-{hi:.2}) paired", configs[0], median(&r));
        }
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (name, input) = (a[1].as_str(), a[2].as_str());
    let reps = a.get(3).map_or(7, |r| r.parse().expect("reps"));
    let configs: Vec<String> =
        a.get(4).map_or("baseline,default", |s| s.as_str()).split(',').map(String::from).collect();
    struct Time<'a>(&'a str, usize, &'a [String]);
    impl AppFn for Time<'_> {
        type Out = ();
        fn call<A: Application>(self) {
            time::<A>(self.0, self.1, self.2)
        }
    }
    apps::with_app(name, Time(input, reps, &configs))
        .unwrap_or_else(|| panic!("{name}: unknown application"));
}
