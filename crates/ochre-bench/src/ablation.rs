//! The ablation (thesis Table 5.6 for ochre): start from the libasync-smp configuration and add
//! one optimization at a time, each step keeping the previous ones, on ping-pong,
//! producer-consumer and the web server (SWS serving a 1 KiB file, `ochre load` as the injector,
//! as in `bench sws`).
//!
//! Steps: the baseline (one lock per posted event, pipe wake-ups, no spinning, plain stealing);
//! then futex wake-ups; then reasoned spinning; then batched posting; then EMA for events; then
//! load-aware placement of new colors (`ochre::place`: the web server's connections); then
//! stealing off; then colors that follow their messages (`Config::follow`) and fresh colors
//! taking their turns newest first (`Config::newest_first`); then stealing only
//! colors with a measured backlog (`Steal::Backlog`); then pinned workers that leave their pin
//! when another process shares their CPU (`Config::unpin_when_shared`), sleep through the
//! ends of runs there (`Config::sleep_through_ends`), and stand in for a worker stuck in a
//! handler or waiting for its CPU (`Config::stand_in`); then online tuning of
//! the spin threshold and the batch size (`Spin::Adaptive`, `BatchSize::Adaptive`: the default
//! configuration); then, instead of backlog stealing, from the follow step: stealing only from
//! workers whose CPU is shared (`Steal::FromSharedCpus`); and plain stealing with every
//! heuristic; and, from the default, backlogs of long events taking every other turn ahead of
//! the line (`Config::backlog_turns`, opt-in).
//! Padding is a
//! build-time switch (the `unpadded` feature), so it cannot be a step in one process: the layout
//! measured here is the padded one, and `scripts/padding-ablation.sh` runs this benchmark with
//! both builds alternately and prints padded / unpadded per step.

use ochre::{BatchSize, Config, Runtime, Spin, Steal, Wakeup};

use crate::harness::{measure_case, BenchReport, Options, System};
use crate::loadgen::drive;
use crate::sws::{self, Sws};
use crate::{pingpong, prodcons};

/// The configurations, cumulative.
pub fn steps() -> Vec<(&'static str, Config)> {
    let base = Config::baseline();
    let futex = base.clone().wakeup(Wakeup::Futex);
    let spin = futex.clone().spin(Spin::Reasoned { threshold: None });
    let batch = spin.clone().batching(true).batch_sizing(BatchSize::Fixed);
    let ema = batch.clone().ema(true);
    // Placement: colors placed by CPU share (`ochre::place`), and homed on as many workers as
    // there are CPUs (no difference where workers are no more than CPUs, as here).
    let placed = ema.clone().placement(true).home_on_every_worker(false);
    let no_steal = placed.clone().steal(Steal::Off);
    let follow = no_steal.clone().follow(true).newest_first(true);
    let backlog = follow.clone().steal(Steal::Backlog);
    let unpin = backlog.clone().unpin_when_shared(true).sleep_through_ends(true).stand_in(true);
    let tuned = unpin.clone().spin(Spin::Adaptive).batch_sizing(BatchSize::Adaptive);
    let relief = follow.clone().steal(Steal::FromSharedCpus);
    let heuristics = follow.clone().stealing_heuristics();
    vec![
        ("1 baseline", base),
        ("2 +futex", futex),
        ("3 +spinning", spin),
        ("4 +batching", batch),
        ("5 +EMA", ema),
        ("6 +placement", placed),
        ("7 steal off", no_steal),
        ("8 +follow, newest first", follow),
        ("9 +steal backlogs", backlog),
        ("10 +shared CPUs: leave the pin, sleep through ends, stand in", unpin),
        (DEFAULT_STEP, tuned.clone()),
        ("12 follow, steal from shared CPUs", relief),
        ("13 follow, plain stealing +heuristics", heuristics),
        ("14 default +backlog turns", tuned.backlog_turns(true)),
    ]
}

/// The step that is the default configuration, named `ochre` in the tables.
const DEFAULT_STEP: &str = "11 +online tuning";

fn label(step: &str) -> String {
    if step == DEFAULT_STEP { "ochre" } else { step }.to_string()
}

/// Runs the ablation.
pub fn run(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(
        "ablation",
        "Ablation: libasync-smp baseline plus one optimization at a time (cumulative), higher is better.",
    );
    let w = opts.workers.iter().copied().max().unwrap_or(1);
    let runtimes: Vec<(&str, Result<Runtime, ochre::Error>)> = steps()
        .into_iter()
        .map(|(n, c)| (n, Runtime::builder().workers(w).config(c).build()))
        .collect();
    // Ratios read against the default configuration (`label`).
    let epw = if opts.quick { 400_000 } else { 3_000_000 };
    let systems = runtimes
        .iter()
        .map(|(n, rt)| {
            System::new(label(n), move || {
                rt.as_ref()
                    .map_err(|e| e.to_string())
                    .and_then(|rt| pingpong::ochre_pingpong(rt, epw))
            })
        })
        .collect();
    let case = format!("pingpong {w}w");
    measure_case(&mut report, &case, w, "ev/s/worker", opts.reps, systems);
    report.notes.push(format!(
        "[{case}] not the figure of the pingpong table's {w}-worker case, by setup: here \
         {epw} events per worker per sample on each step's runtime, built once, its samples \
         between the other steps' runs with no warm-up of their own; pingpong builds a runtime \
         per sample, warms it with an eighth of its events just before and runs {} per worker, \
         so waking the workers weighs less. Read this table as ratios between its steps",
        pingpong::events_per_worker(opts)
    ));
    for cost in [0u64, 1_000] {
        let case = format!(
            "prodcons {w}w {}",
            if cost == 0 { "empty".into() } else { format!("{} us", cost / 1000) }
        );
        let rounds = if opts.quick { 2_000 } else { 10_000 } / if cost > 0 { 10 } else { 1 };
        let systems = runtimes
            .iter()
            .map(|(n, rt)| {
                let setup = rt
                    .as_ref()
                    .map(|rt| (rt, prodcons::Round::leak(rt, cost)))
                    .map_err(|e| e.to_string());
                System::new(label(n), move || match &setup {
                    Ok((rt, round)) => prodcons::ochre_prodcons(rt, round, rounds),
                    Err(e) => Err(e.clone()),
                })
            })
            .collect();
        measure_case(&mut report, &case, w, "ev/s", opts.reps, systems);
        if cost == 0 {
            report.notes.push(setup_difference(&case, rounds));
            if let (Some(o), Some(b)) =
                (report.median_of("ochre", &case), report.median_of("1 baseline", &case))
            {
                report.check(
                    format!("[{case}] the full configuration >= 2x the baseline"),
                    o / b,
                    o / b >= 2.0,
                );
            }
        }
    }
    sws_case(&mut report, opts, w);
    report.notes.push(
        "padding is a build-time switch (the `unpadded` feature): scripts/padding-ablation.sh \
             runs this table with both layouts and prints the ratio"
            .into(),
    );
    report
}

/// Why the producer-consumer rows here differ from `bench prodcons`'s for the same case (the
/// default configuration's "2w empty" read 9.8 M events/s here and 30.5 M there in one study).
fn setup_difference(case: &str, rounds: u64) -> String {
    format!(
        "[{case}] not the figure of the same case in the prodcons table, by setup: here each \
         step's runtime is built once and its samples ({rounds} rounds, no warm-up of their own) \
         come between the runs of the twelve other steps' runtimes, so each starts with its \
         workers parked and caches cold; prodcons builds a runtime per sample and warms it with \
         an eighth of the rounds just before. On short events this moves the rate by more than the steps \
         do (examples/prodcons_setup.rs, 2w empty, on the shared 2-CPU machine: 21.5-21.9 M \
         events/s run back to back, 7.2-17.4 M interleaved with the other steps). Read this \
         table as ratios between its steps, run alike, not as rates to set against prodcons's"
    )
}

/// The web server under each configuration: every step's server runs at once (idle ones
/// sleep), and the injector drives one at a time, interleaved by the harness.
fn sws_case(report: &mut BenchReport, opts: &Options, w: usize) {
    let Some(setup) = sws::setup(report, "ablation") else { return };
    let load = setup.load_runtime();
    let sws::Setup { cpus, injector, dir, root } = setup;
    let server_cpus = sws::server_cpus(&cpus, injector, w);
    let servers: Vec<(String, Result<Sws, String>)> = steps()
        .into_iter()
        .map(|(n, c)| {
            (label(n), Sws::start(&root, &server_cpus, c, ochre_http::Revalidate::Inotify))
        })
        .collect();
    let secs = if opts.quick { 0.5 } else { 3.0 };
    let systems = servers
        .iter()
        .map(|(name, server)| {
            let load = &load;
            System::new(name.clone(), move || {
                let server = server.as_ref().map_err(|e| e.clone())?;
                let rt = load.as_ref().map_err(|e| e.clone())?;
                Ok(drive(rt, &sws::target_of(&server.url, None)?, secs)?.throughput)
            })
        })
        .collect();
    let case = format!("sws 1 KiB {w}w");
    measure_case(report, &case, w, "req/s", opts.reps, systems);
    report.notes.push(format!(
        "[{case}] the sws table's \"1 KiB, {w}w\" case is the same server and injector with \
         {} s samples (here {secs} s) and 3 or 4 servers running (here {}): close figures, not \
         the same ones",
        crate::sws::sample_seconds(opts),
        servers.len()
    ));
    report.notes.push(
        "[sws] a request is read, parsed, looked up and answered within one event of its \
         connection's color, on that connection's worker: cross-core posting (batching), remote \
         frees (EMA) and stealing have little to act on; what the baseline loses is in going idle \
         and waking (pipe wake-ups, no spinning: steps 2-3) and, where the injector shares a \
         CPU with a worker, in loading that worker as much as the others (step 6)"
            .into(),
    );
    drop(servers);
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prodcons_rows_say_how_their_setup_differs_from_bench_prodcons() {
        let note = setup_difference("prodcons 2w empty", 2000);
        assert!(note.starts_with("[prodcons 2w empty] not the figure of the same case"));
        assert!(note.contains("(2000 rounds, no warm-up of their own)"), "{note}");
    }

    #[test]
    fn the_steps_go_from_the_baseline_to_the_default_configuration() {
        let steps = steps();
        assert_eq!(steps[0].1, Config::baseline());
        let default = steps.iter().find(|(n, _)| *n == DEFAULT_STEP).expect("default step");
        assert_eq!(default.1, Config::default());
        assert_eq!(label(DEFAULT_STEP), "ochre");
        // The step before it is the same configuration with fixed settings.
        let before = steps.iter().position(|(n, _)| *n == DEFAULT_STEP).unwrap() - 1;
        let spin = Spin::Reasoned { threshold: None };
        let fixed = Config::default().spin(spin).batch_sizing(BatchSize::Fixed);
        assert_eq!(
            steps[before],
            ("10 +shared CPUs: leave the pin, sleep through ends, stand in", fixed)
        );
    }
}
