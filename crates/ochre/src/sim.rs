//! A deterministic simulation of the stealing policies: the real run queues (`queue`), the real
//! lending (`lend_many`), the real victim order (`Topology::victim_tiers`), driven by a seeded
//! scheduler instead of threads, on synthetic topologies. It replays a policy exactly, so tests
//! can assert where colors end up and how far they move.

use std::collections::HashMap;

use crate::color::{home_of, Placement};
use crate::message::{Loan, Task};
use crate::queue::{ColorQueue, Route};
use crate::topology::Topology;
use crate::Color;

/// A policy to simulate (the stealing switches of `Config`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Policy {
    pub(crate) batch: bool,
    pub(crate) locality: bool,
    pub(crate) min_weight_ns: u64,
}

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

/// Runs `chains` on `workers` workers of `topology` under `policy`, with `seed` choosing victims
/// within a tier. `pinned` colors are pinned. Returns every move and the worker each color ended
/// its last event on.
pub(crate) fn simulate(
    topology: &Topology,
    workers: usize,
    policy: Policy,
    seed: u64,
    chains: &[Chain],
    pinned: &[Color],
) -> (Vec<Move>, HashMap<Color, usize>) {
    let placement = Placement { workers, domain: topology.domain_size(workers) };
    let mut qs: Vec<ColorQueue> = (0..workers).map(|w| ColorQueue::new(w, placement)).collect();
    let tiers: Vec<Vec<Vec<usize>>> = (0..workers)
        .map(|w| {
            if policy.locality {
                topology.victim_tiers(w, workers)
            } else {
                vec![(0..workers).filter(|&v| v != w).collect()]
            }
        })
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
                // Idle: ask the first loaded worker in victim order (random start per tier).
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let victim = tiers[w].iter().find_map(|group| {
                    let start = (rng % group.len().max(1) as u64) as usize;
                    (0..group.len())
                        .map(|i| group[(start + i) % group.len()])
                        .find(|&v| qs[v].ready_len() > 0)
                });
                let Some(v) = victim else { continue };
                let max = if policy.batch { 8 } else { 1 };
                let loans: Vec<Loan> = qs[v].lend_many(w, max, policy.batch, policy.min_weight_ns);
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
        Placement { workers: 16, domain: machine().domain_size(16) }
    }

    const PLAIN: Policy = Policy { batch: false, locality: false, min_weight_ns: 0 };
    const LOCAL: Policy = Policy { batch: false, locality: true, min_weight_ns: 0 };

    #[test]
    fn a_seeded_schedule_replays_exactly() {
        let chains = imbalanced(placement());
        let a = simulate(&machine(), 16, LOCAL, 42, &chains, &[]);
        let b = simulate(&machine(), 16, LOCAL, 42, &chains, &[]);
        assert_eq!(a.0, b.0);
        assert!(!a.0.is_empty(), "idle workers stole");
    }

    #[test]
    fn locality_keeps_steals_near() {
        let chains = imbalanced(placement());
        let (near, _) = simulate(&machine(), 16, LOCAL, 7, &chains, &[]);
        let (any, _) = simulate(&machine(), 16, PLAIN, 7, &chains, &[]);
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
        let policy = Policy { batch: true, locality: true, min_weight_ns: 20_000 };
        let (moves, last) = simulate(&machine(), 16, policy, 3, &chains, &pinned);
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
        let policy = Policy { batch: false, locality: true, min_weight_ns: 0 };
        let (moves, _) = simulate(&machine(), 16, policy, 11, &chains, &[]);
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
