//! The producer-consumer empty case at 2 workers (default configuration) measured in the
//! setups of `bench prodcons` and of `bench ablation`, to see why the two tables read different
//! rates for it: a fresh runtime per sample warmed up just before (prodcons), one runtime per
//! configuration whose samples come between the runs of the eleven other steps' runtimes, with and
//! without a warm-up (ablation), and one runtime run back to back alone.
//!
//! `cargo run --release -p ochre-bench --example prodcons_setup`: medians of 7 samples.

use ochre::Runtime;
use ochre_bench::harness::median;
use ochre_bench::{ablation, peers, prodcons};

const WORKERS: usize = 2;
const SAMPLES: usize = 7;
/// The ablation's default step (named `ochre` in its table).
const DEFAULT_STEP: usize = 7;

fn main() -> Result<(), String> {
    let builds = peers::ochre_builds(WORKERS);
    let build = &builds[0].1;
    let mut fresh = Vec::new();
    for _ in 0..SAMPLES {
        let mut round = None;
        fresh.push(peers::on_fresh_runtime(build, 2666, |rt, n| {
            prodcons::ochre_prodcons(
                rt,
                round.get_or_insert_with(|| prodcons::Round::leak(rt, 0)),
                n,
            )
        })?);
    }
    println!(
        "fresh runtime per sample, warmed (prodcons), 2666 rounds: {:.1} M",
        median(&fresh) / 1e6
    );
    let steps = ablation::steps()
        .into_iter()
        .map(|(_, c)| {
            let rt =
                Runtime::builder().workers(WORKERS).config(c).build().map_err(|e| e.to_string())?;
            let round = prodcons::Round::leak(&rt, 0);
            Ok((rt, round))
        })
        .collect::<Result<Vec<_>, String>>()?;
    for warm in [0u64, 250] {
        for rounds in [2000u64, 10000] {
            let mut rates = Vec::new();
            for _ in 0..SAMPLES {
                for (i, (rt, round)) in steps.iter().enumerate() {
                    if warm > 0 {
                        prodcons::ochre_prodcons(rt, round, warm)?;
                    }
                    let rate = prodcons::ochre_prodcons(rt, round, rounds)?;
                    if i == DEFAULT_STEP {
                        rates.push(rate);
                    }
                }
            }
            println!(
                "interleaved with the other steps (ablation), warm-up {warm} rounds, {rounds} \
                 rounds: {:.1} M",
                median(&rates) / 1e6
            );
        }
    }
    let (rt, round) = &steps[DEFAULT_STEP];
    let alone = (0..SAMPLES)
        .map(|_| prodcons::ochre_prodcons(rt, round, 2000))
        .collect::<Result<Vec<_>, String>>()?;
    println!(
        "the default step's runtime alone, back to back, 2000 rounds: {:.1} M",
        median(&alone) / 1e6
    );
    Ok(())
}
