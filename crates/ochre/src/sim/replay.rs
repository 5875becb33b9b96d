//! A deterministic simulation of the stealing policies: the real run queues (`queue`) and the
//! real policy functions of `steal` (victim order, which victim is worth asking, what a victim
//! lends) read from a real `Config`, driven by a seeded scheduler instead of threads, on
//! synthetic topologies. No policy is copied here: a change in `steal` changes what this
//! replays. It replays a schedule exactly, so tests can assert where colors end up and how far
//! they move.

use std::collections::HashMap;

use crate::color::{home_of, Placement};
use crate::message::{Loan, Task};
use crate::queue::{ColorQueue, Route};
use crate::steal::{self, Candidate};
use crate::topology::Topology;
use crate::{Color, Config};

/// One color moved by a steal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Move {
    pub(crate) step: usize,
    pub(crate) color: Color,
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) tier: usize,
}

/// A workload: chains of events per color (`events`), each event costing `cost_ns`.
pub(crate) struct Chain {
    pub(crate) color: Color,
    pub(crate) events: u32,
    pub(crate) cost_ns: u64,
}

fn noop() -> Task {
    Task::new(|| {})
}

/// Runs `chains` on `workers` workers of `topology` under `config`'s stealing, with `seed` choosing victims
/// within a tier. `pinned` colors are pinned. Returns every move and the worker each color ended
/// its last event on.
pub(crate) fn simulate(
    topology: &Topology,
    workers: usize,
    config: &Config,
    seed: u64,
    chains: &[Chain],
    pinned: &[Color],
) -> (Vec<Move>, HashMap<Color, usize>) {
    let placement = Placement::new(workers, workers, topology.domain_size(workers));
    let mut qs: Vec<ColorQueue> = (0..workers).map(|w| ColorQueue::new(w, placement)).collect();
    let tiers: Vec<Vec<Vec<usize>>> = (0..workers)
        .map(|w| steal::victim_tiers(topology, w, workers, config.steal_locality))
        .collect();
    let tier_of = |thief: usize, victim: usize| {
        tiers[thief].iter().position(|g| g.contains(&victim)).map_or(0, |t| t + 1)
    };
    let mut left: HashMap<Color, u32> = HashMap::new();
    let mut cost: HashMap<Color, u64> = HashMap::new();
    for &c in pinned {
        qs[home_of(c, placement)].pin(c);
    }
    for ch in chains {
        left.insert(ch.color, ch.events);
        cost.insert(ch.color, ch.cost_ns);
        let home = home_of(ch.color, placement);
        assert!(matches!(qs[home].post(ch.color, noop(), false), Route::Queued));
    }
    let mut rng = seed | 1;
    let mut moves = Vec::new();
    let mut last_on = HashMap::new();
    let mut step = 0;
    while left.values().any(|&n| n > 0) {
        step += 1;
        assert!(step < 1_000_000, "the simulation does not finish");
        for w in 0..workers {
            if let Some((key, color)) = qs[w].start_turn() {
                // A turn of up to 4 events; each event of a chain posts the next.
                let mut ran = 0u64;
                while ran < 4 {
                    let Some(task) = qs[w].pop(key) else { break };
                    task.run();
                    ran += 1;
                    last_on.insert(color, w);
                    let n = left.get_mut(&color).expect("a chain color");
                    *n -= 1;
                    if *n > 0 {
                        assert!(matches!(qs[w].post(color, noop(), false), Route::Queued));
                    }
                }
                qs[w].record_turn(key, ran * cost[&color], ran as usize);
                if let Some(ret) = qs[w].end_turn(key) {
                    qs[ret.home].returned(ret.color, ret.ran);
                }
            } else {
                // Idle: ask the first worker worth asking in victim order (random start per
                // tier); every simulated CPU is whole, and a victim answers at once.
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let full = crate::cpu_share::FULL;
                let victim = steal::candidates(&tiers[w], rng).find(|&v| {
                    let seen = Candidate {
                        ready: qs[v].ready_len(),
                        backlog: qs[v].has_backlog(steal::BACKLOG_FLOOR),
                        share: full,
                    };
                    steal::worth_asking(config.steal, full, &seen)
                });
                let Some(v) = victim else { continue };
                let loans: Vec<Loan> = steal::lend(&mut qs[v], w, None, config);
                for loan in loans {
                    moves.push(Move {
                        step,
                        color: loan.color,
                        from: v,
                        to: w,
                        tier: tier_of(w, v),
                    });
                    qs[w].adopt(v, loan);
                }
            }
        }
    }
    (moves, last_on)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 16 cores, 2 NUMA nodes, pairs of cores sharing an L2.
    fn machine() -> Topology {
        Topology::synthetic("numa:2 l3:1 l2:4 core:2").unwrap()
    }

    /// Heavy chains all homed on workers 0 and 1 (one L2 pair of node 0): everyone else must steal.
    fn imbalanced(p: Placement) -> Vec<Chain> {
        (1..)
            .map(Color)
            .filter(|&c| home_of(c, p) < 2)
            .take(48)
            .map(|color| Chain { color, events: 40, cost_ns: 50_000 })
            .collect()
    }

    fn placement() -> Placement {
        Placement::new(16, 16, machine().domain_size(16))
    }

    fn plain() -> Config {
        Config::default().steal(crate::Steal::Plain)
    }

    fn local() -> Config {
        plain().steal_locality(true)
    }

    #[test]
    fn a_seeded_schedule_replays_exactly() {
        let chains = imbalanced(placement());
        let a = simulate(&machine(), 16, &local(), 42, &chains, &[]);
        let b = simulate(&machine(), 16, &local(), 42, &chains, &[]);
        assert_eq!(a.0, b.0);
        assert!(!a.0.is_empty(), "idle workers stole");
    }

    #[test]
    fn locality_keeps_steals_near() {
        let chains = imbalanced(placement());
        let (near, _) = simulate(&machine(), 16, &local(), 7, &chains, &[]);
        let (any, _) = simulate(&machine(), 16, &plain(), 7, &chains, &[]);
        // Tiers with locality: 1 = L2 mate, 2 = same node, 3 = other node.
        let far = |m: &[Move], node: fn(usize) -> usize| {
            m.iter().filter(|x| node(x.from) != node(x.to)).count()
        };
        let node = |w: usize| w / 8;
        assert!(near.iter().all(|m| m.tier >= 1));
        let first_steal_of_worker_1 = near.iter().find(|m| m.to == 1).expect("worker 1 steals");
        assert_eq!(first_steal_of_worker_1.tier, 1, "from its L2 mate first");
        let near_share = far(&near, node) as f64 / near.len() as f64;
        let any_share = far(&any, node) as f64 / any.len() as f64;
        assert!(
            near_share < any_share,
            "cross-node steals: {near_share:.2} with locality, {any_share:.2} without"
        );
    }

    #[test]
    fn pinned_colors_never_move_and_light_colors_stay_with_cost_awareness() {
        let p = placement();
        let mut chains = imbalanced(p);
        let pinned: Vec<Color> = chains.iter().take(4).map(|c| c.color).collect();
        for ch in chains.iter_mut().skip(40) {
            ch.cost_ns = 100; // eight light chains
        }
        let light: Vec<Color> = chains.iter().skip(40).map(|c| c.color).collect();
        let config =
            local().steal_batch(true).steal_min_work(Some(std::time::Duration::from_micros(20)));
        let (moves, last) = simulate(&machine(), 16, &config, 3, &chains, &pinned);
        for c in &pinned {
            assert!(moves.iter().all(|m| m.color != *c), "pinned {c:?} moved");
            assert_eq!(last[c], home_of(*c, p));
        }
        for c in &light {
            assert!(moves.iter().all(|m| m.color != *c), "light {c:?} moved");
        }
        assert!(moves.len() >= 10, "heavy colors were spread: {} moves", moves.len());
    }

    #[test]
    fn backlog_stealing_runs_here_unchanged_and_spreads_only_backlogs() {
        // Steal::Backlog, simulated with the same functions the workers call: heavy chains
        // (40 events of 50 us queued at once) are spread; a light chain (one event queued at a
        // time, 100 ns) never moves, whatever the imbalance.
        let p = placement();
        let mut chains = imbalanced(p);
        for ch in chains.iter_mut().skip(40) {
            ch.cost_ns = 100;
        }
        let light: Vec<Color> = chains.iter().skip(40).map(|c| c.color).collect();
        let config = Config::default().steal(crate::Steal::Backlog);
        let (moves, _) = simulate(&machine(), 16, &config, 5, &chains, &[]);
        for c in &light {
            assert!(moves.iter().all(|m| m.color != *c), "light {c:?} moved");
        }
        // The simulated chain posts its next event only as it runs, so a heavy color's backlog
        // is one event of 50 us: above the 20 us floor.
        assert!(moves.len() >= 10, "heavy colors were spread: {} moves", moves.len());
        let off = Config::default().steal(crate::Steal::Off);
        let (none, _) = simulate(&machine(), 16, &off, 5, &chains, &[]);
        assert!(none.is_empty(), "stealing off moves nothing");
    }

    #[test]
    fn groups_start_in_one_cache_domain_and_move_together() {
        let p = placement();
        assert_eq!(p.domain, 2, "an L2 pair");
        // Two groups of six members; each group's members live on one L2 pair.
        let chains: Vec<Chain> = (0..2u32)
            .flat_map(|g| {
                (0..6).map(move |m| Chain {
                    color: Color::grouped(g, m),
                    events: 60,
                    cost_ns: 50_000,
                })
            })
            .collect();
        for ch in &chains {
            let h = home_of(ch.color, p);
            let g = ch.color.group().unwrap() as usize;
            assert_eq!(h / 2, g % 8, "group {g} in its domain");
        }
        let (moves, _) = simulate(&machine(), 16, &local(), 11, &chains, &[]);
        // Every steal of a grouped color takes the victim's other waiting members of its group.
        let mut by_steal: HashMap<(usize, usize, usize), Vec<Color>> = HashMap::new();
        for m in &moves {
            by_steal.entry((m.step, m.from, m.to)).or_default().push(m.color);
        }
        assert!(
            by_steal.values().any(|cs| cs.len() >= 2),
            "some steal moved several members at once"
        );
        for cs in by_steal.values() {
            let g = cs[0].group();
            assert!(cs.iter().all(|c| c.group() == g), "a steal mixed groups: {cs:?}");
        }
    }
}
