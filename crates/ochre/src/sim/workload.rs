//! Workloads for the simulator: the message patterns of the project's benchmarks
//! (`ochre-bench`: ping-pong, producer-consumer, the stealing cases, the Savina actor programs)
//! and of the seeds' (the stealing slides' pipeline of handlers and server with an acceptor,
//! the color groups' rings), each event's handler cost given in virtual ns.
//!
//! Invariants: a workload is deterministic (its random choices come from its own seeded
//! generator); it places its colors as the benchmark does (colors chosen by their home with
//! [`home`], actors as `Color(1 + i)`); [`Workload::handle`] never panics, whatever event it is
//! given (an unknown event posts nothing). Each workload says how many events or messages it
//! counts for its throughput ([`Measured`]).

use super::engine::{Event, Post, Workload, ROOT};
use crate::color::{home_of, Placement};
use crate::topology::Topology;
use crate::Color;

/// The home of `color` on `cores` simulated cores of `topology` (as `Runtime::home_of`).
pub fn home(color: Color, cores: usize, topology: &Topology) -> usize {
    let cores = cores.max(1);
    home_of(color, Placement::new(cores, cores, topology.domain_size(cores)))
}

/// `per_core` colors homed on each of `cores` cores, from `first` up (as the benchmarks'
/// `colors_per_worker`).
pub fn colors_per_core(
    cores: usize,
    topology: &Topology,
    per_core: usize,
    first: u64,
) -> Vec<Vec<Color>> {
    let mut by: Vec<Vec<Color>> = vec![Vec::new(); cores.max(1)];
    let mut c = first;
    while by.iter().any(|v| v.len() < per_core) {
        let h = home(Color(c), cores, topology);
        if by[h].len() < per_core {
            by[h].push(Color(c));
        }
        c += 1;
    }
    by
}

/// What a workload's throughput counts.
pub trait Measured: Workload {
    /// Events or messages counted by the benchmark's figure.
    fn counted(&self) -> u64;
    /// True if the benchmark divides its rate by the worker count (ping-pong's ev/s/worker).
    fn per_core(&self) -> bool {
        false
    }
}

const KIND: u32 = 56;
fn kind(data: u64) -> u64 {
    data >> KIND
}
fn with(kind: u64, rest: u64) -> u64 {
    (kind << KIND) | (rest & ((1 << KIND) - 1))
}
fn rest(data: u64) -> u64 {
    data & ((1 << KIND) - 1)
}

/// Ping-pong (`ochre-bench` `pingpong`): `chains` colors homed on each core, each a chain of
/// `hops` events posting the next to itself.
pub struct PingPong {
    colors: Vec<Vec<Color>>,
    hops: u64,
    cost_ns: u64,
}

impl PingPong {
    /// `events_per_core` events on each of `cores` cores, in 4 chains per core.
    pub fn new(cores: usize, topology: &Topology, events_per_core: u64, cost_ns: u64) -> Self {
        let chains = 4;
        PingPong {
            colors: colors_per_core(cores, topology, chains, 1),
            hops: (events_per_core / chains as u64).max(1),
            cost_ns,
        }
    }

    /// The root and the start of each core's chains: the events that are not a chain's step.
    #[inline(never)]
    fn start(&mut self, ev: &Event, out: &mut Vec<Post>) -> u64 {
        match (ev.data, kind(ev.data)) {
            (ROOT, _) => {
                for (w, cs) in self.colors.iter().enumerate() {
                    out.push(Post { color: cs[0], data: with(1, w as u64) });
                }
                0
            }
            (_, 1) => {
                if let Some(cs) = self.colors.get(rest(ev.data) as usize) {
                    out.extend(cs.iter().map(|&c| Post { color: c, data: with(2, self.hops) }));
                }
                0
            }
            (_, _) => self.step(ev, out),
        }
    }

    /// A chain's step: the next to itself, until the chain ends.
    #[inline(always)]
    fn step(&self, ev: &Event, out: &mut Vec<Post>) -> u64 {
        let left = rest(ev.data);
        if left > 1 {
            out.push(Post { color: ev.color, data: with(2, left - 1) });
        }
        self.cost_ns
    }
}

impl Workload for PingPong {
    fn handle(&mut self, ev: &Event, out: &mut Vec<Post>) -> u64 {
        // A chain's steps, nearly every event, apart from the rest: the handler's frame is then
        // that of the step alone (the loops of the start saved registers at every event).
        if ev.data != ROOT && kind(ev.data) != 1 {
            return self.step(ev, out);
        }
        self.start(ev, out)
    }

    /// `ochre_hop`'s closure: a color and a count.
    fn closure_bytes(&self, _post: &Post) -> usize {
        16
    }
}

impl Measured for PingPong {
    fn counted(&self) -> u64 {
        self.hops * self.colors.iter().map(|c| c.len() as u64).sum::<u64>()
    }
    fn per_core(&self) -> bool {
        true
    }
}

/// Producer-consumer (`ochre-bench` `prodcons`): a producer on core 0 posts `FAN_OUT` events
/// to consumers placed round robin over the cores; when all ran, the next round starts.
pub struct ProdCons {
    producer: Color,
    consumers: Vec<Color>,
    cost_ns: u64,
    rounds: u64,
    left_in_round: usize,
}

/// Events per producer round.
pub const FAN_OUT: usize = 100;

impl ProdCons {
    /// `rounds` rounds of `FAN_OUT` consumer events of `cost_ns` on `cores` cores.
    pub fn new(cores: usize, topology: &Topology, cost_ns: u64, rounds: u64) -> Self {
        let per = FAN_OUT.div_ceil(cores.max(1));
        let by = colors_per_core(cores, topology, per, 1);
        let consumers =
            (0..per).flat_map(|k| by.iter().map(move |cs| cs[k])).take(FAN_OUT).collect();
        ProdCons { producer: by[0][0], consumers, cost_ns, rounds, left_in_round: 0 }
    }
}

impl Workload for ProdCons {
    fn handle(&mut self, ev: &Event, out: &mut Vec<Post>) -> u64 {
        match (ev.data, kind(ev.data)) {
            (ROOT, _) => out.push(Post { color: self.producer, data: with(1, self.rounds) }),
            (_, 1) => {
                let left = rest(ev.data);
                if left > 0 {
                    self.left_in_round = FAN_OUT;
                    // Round robin over the consumers (an iterator, not an index modulo their
                    // number: a division per post).
                    for &to in self.consumers.iter().cycle().take(FAN_OUT) {
                        out.push(Post { color: to, data: with(2, left) });
                    }
                }
            }
            (_, _) => {
                self.left_in_round = self.left_in_round.saturating_sub(1);
                if self.left_in_round == 0 {
                    out.push(Post { color: self.producer, data: with(1, rest(ev.data) - 1) });
                }
                return self.cost_ns;
            }
        }
        0
    }

    /// `prodcons::produce`'s closures: to the producer, the round and the rounds left; to a
    /// consumer, the round, its completion closure (round and rounds left) and an index.
    fn closure_bytes(&self, post: &Post) -> usize {
        if kind(post.data) == 1 {
            16
        } else {
            32
        }
    }
}

impl Measured for ProdCons {
    fn counted(&self) -> u64 {
        self.rounds * FAN_OUT as u64
    }
}

/// The stealing benchmark's imbalanced case (`ochre-bench` `steal::imbalanced`): `heavy` chains
/// of `length` events homed on core 0 and `light` chains of `length / 8` anywhere, `cost_ns` per
/// event.
pub struct Imbalanced {
    heavy: Vec<Color>,
    light: u64,
    length: u64,
    cost_ns: u64,
}

impl Imbalanced {
    /// The case on `cores` cores.
    pub fn new(
        cores: usize,
        topology: &Topology,
        heavy: usize,
        light: u64,
        length: u64,
        cost_ns: u64,
    ) -> Self {
        let heavy =
            (1_000..).map(Color).filter(|&c| home(c, cores, topology) == 0).take(heavy).collect();
        Imbalanced { heavy, light, length: length.max(1), cost_ns }
    }

    /// The case with `per_home` heavy chains homed on each core of `homes` instead of all on
    /// core 0: several victims, near and far, for locality-aware stealing to choose from.
    pub fn spread(
        cores: usize,
        topology: &Topology,
        homes: &[usize],
        per_home: usize,
        light: u64,
        length: u64,
        cost_ns: u64,
    ) -> Self {
        let mut heavy = Vec::new();
        for &h in homes {
            heavy.extend(
                (1_000..)
                    .map(Color)
                    .filter(|&c| home(c, cores, topology) == h)
                    .take(per_home)
                    .take_while(|_| h < cores),
            );
        }
        Imbalanced { heavy, light, length: length.max(1), cost_ns }
    }
}

impl Workload for Imbalanced {
    fn handle(&mut self, ev: &Event, out: &mut Vec<Post>) -> u64 {
        if ev.data == ROOT {
            for &c in &self.heavy {
                out.push(Post { color: c, data: self.length });
            }
            let short = (self.length / 8).max(1);
            for l in 0..self.light {
                out.push(Post { color: Color(100_000 + l), data: short });
            }
            return 0;
        }
        if ev.data > 1 {
            out.push(Post { color: ev.color, data: ev.data - 1 });
        }
        self.cost_ns
    }

    /// `steal::chain`'s closure: a color, the links left and their cost.
    fn closure_bytes(&self, _post: &Post) -> usize {
        24
    }
}

impl Measured for Imbalanced {
    fn counted(&self) -> u64 {
        self.heavy.len() as u64 * self.length + self.light * (self.length / 8).max(1) + 1
    }
}

/// The stealing slides' micro-benchmarks (Gaud et al., CFSE'7: "an application of 5
/// successive handlers"): on each core of `homes`, `flows` requests, each passing through
/// `stages` handlers in turn, `rounds` times; each (request, stage) is a color homed there, each
/// handler costs `cost_ns`, and a request's message carries `lines` cache lines of payload,
/// written by one stage and read by the next ([`Workload::message_lines`]). The other cores
/// hold nothing: they work only by stealing. With short handlers and no payload it is the
/// slides' batch-stealing case; with a large payload, their cache-aware stealing case, where a
/// stolen stage reads its message from, and leaves the next one for, its victim's cache.
pub struct Pipeline {
    /// Per request: its stages' colors.
    flows: Vec<Vec<Color>>,
    rounds: u64,
    cost_ns: u64,
    lines: f64,
}

impl Pipeline {
    /// The pipeline on `cores` cores of `topology` (at most 2^20 requests, 255 stages).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cores: usize,
        topology: &Topology,
        homes: &[usize],
        flows: usize,
        stages: usize,
        rounds: u64,
        cost_ns: u64,
        lines: f64,
    ) -> Self {
        let stages = stages.clamp(1, 255);
        let flows = flows.clamp(1, (1 << 20) / homes.len().max(1));
        let by = colors_per_core(cores, topology, flows * stages, 1);
        let flows = homes
            .iter()
            .filter(|&&h| h < by.len())
            .flat_map(|&h| by[h].chunks(stages).map(<[Color]>::to_vec).collect::<Vec<_>>())
            .collect();
        Pipeline { flows, rounds: rounds.max(1), cost_ns, lines: lines.max(0.0) }
    }

    fn step(flow: usize, stage: usize, left: u64) -> u64 {
        ((flow as u64) << 40) | ((stage as u64) << 32) | (left & 0xffff_ffff)
    }
}

impl Workload for Pipeline {
    fn handle(&mut self, ev: &Event, out: &mut Vec<Post>) -> u64 {
        if ev.data == ROOT {
            for (f, stages) in self.flows.iter().enumerate() {
                let left = self.rounds * stages.len() as u64;
                out.push(Post { color: stages[0], data: Self::step(f, 0, left) });
            }
            return 0;
        }
        let (f, s, left) =
            ((ev.data >> 40) as usize, ((ev.data >> 32) & 0xff) as usize, ev.data & 0xffff_ffff);
        if left > 1 {
            if let Some(stages) = self.flows.get(f) {
                let next = after(s, stages.len());
                out.push(Post { color: stages[next], data: Self::step(f, next, left - 1) });
            }
        }
        self.cost_ns
    }

    fn message_lines(&self) -> f64 {
        self.lines
    }
}

impl Measured for Pipeline {
    fn counted(&self) -> u64 {
        self.flows.iter().map(|s| self.rounds * s.len() as u64).sum()
    }
}

/// Plain color `i` of a baseline whose colors are hashed one by one over the cores (as
/// libasync-smp placed them): consecutive ids from `color::RUNS_FROM` on share a home in runs,
/// so the id is scattered over the 62 bits first (times an odd number modulo 2^62: distinct
/// ids below 2^62 stay distinct).
fn scattered(i: u64) -> Color {
    Color::plain(i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// The stealing slides' pinning case (Gaud et al., CFSE'7, "assign a handler to a core": an
/// application of 4 successive handlers, one color per connection, the events that accept
/// connections pinned to their core, requests and responses negligible): an acceptor color
/// accepts `conns` connections one event at a time (`accept_ns` each), each posting its
/// connection's first handler and the next accept; a connection passes through `stages`
/// handlers of `cost_ns`, events of its own color. The acceptor is homed on core 0 and the
/// connections' colors hashed over every core (libasync-smp's color-to-core map); with `pin`
/// the acceptor never moves ([`Workload::pinned`]).
pub struct Server {
    acceptor: Color,
    conns: Vec<Color>,
    stages: u64,
    accept_ns: u64,
    cost_ns: u64,
    pin: bool,
}

impl Server {
    /// The case on `cores` cores of `topology` (at most 2^24 connections, 255 stages).
    pub fn new(
        cores: usize,
        topology: &Topology,
        conns: usize,
        stages: u64,
        accept_ns: u64,
        cost_ns: u64,
        pin: bool,
    ) -> Self {
        let conns = conns.clamp(1, 1 << 24);
        let acceptor = colors_per_core(cores, topology, 1, 1)[0][0];
        let conns = (0..conns as u64).map(|i| scattered(acceptor.0 + 1 + i)).collect();
        let stages = stages.clamp(1, 255);
        Server { acceptor, conns, stages, accept_ns, cost_ns, pin }
    }

    // An accept: tag 0 and the connection's number; a handler: its stage (1..) above it.
    fn tag(stage: u64, conn: usize) -> u64 {
        (stage << 32) | conn as u64
    }
}

impl Workload for Server {
    fn handle(&mut self, ev: &Event, out: &mut Vec<Post>) -> u64 {
        if ev.data == ROOT {
            out.push(Post { color: self.acceptor, data: Self::tag(0, 0) });
            return 0;
        }
        let (stage, conn) = (ev.data >> 32, ev.data as u32 as usize);
        let Some(&color) = self.conns.get(conn) else { return 0 };
        if stage == 0 {
            out.push(Post { color, data: Self::tag(1, conn) });
            if conn + 1 < self.conns.len() {
                out.push(Post { color: self.acceptor, data: Self::tag(0, conn + 1) });
            }
            return self.accept_ns;
        }
        if stage < self.stages {
            out.push(Post { color, data: Self::tag(stage + 1, conn) });
        }
        self.cost_ns
    }

    fn pinned(&self) -> Vec<Color> {
        if self.pin {
            vec![self.acceptor]
        } else {
            Vec::new()
        }
    }
}

impl Measured for Server {
    fn counted(&self) -> u64 {
        self.conns.len() as u64 * (self.stages + 1)
    }
}

/// Color groups (the memory-aware scheduling report's bubbles, `Color::grouped`): `groups`
/// rings of `members` colors each, around which `tokens` tokens per ring go, `hops` hops per
/// token, each hop an event of `cost_ns`. Grouped, a ring's members are one group, placed on
/// one cache domain; else they are plain colors, hashed over all the cores. What the members
/// share is their messages (each hop carries a cache line from its poster's core to the
/// receiver's) and each color's own data (`CostModel::color_lines`, when it runs somewhere
/// else than last time); data shared by a whole group beyond that is not modelled.
pub struct Groups {
    rings: Vec<Vec<Color>>,
    tokens: usize,
    hops: u64,
    cost_ns: u64,
}

impl Groups {
    /// The rings, as groups if `grouped`.
    pub fn new(
        grouped: bool,
        groups: usize,
        members: usize,
        tokens: usize,
        hops: u64,
        cost_ns: u64,
    ) -> Self {
        let (groups, members) = (groups.clamp(1, 1 << 15), members.clamp(1, 1 << 15));
        let rings = (0..groups)
            .map(|g| {
                (0..members)
                    .map(|m| {
                        if grouped {
                            Color::grouped(g as u32, m as u32)
                        } else {
                            scattered(10_000 + (g * members + m) as u64)
                        }
                    })
                    .collect()
            })
            .collect();
        Groups { rings, tokens: tokens.clamp(1, members), hops: hops.max(1), cost_ns }
    }

    fn hop(g: usize, m: usize, left: u64) -> u64 {
        ((g as u64) << 48) | ((m as u64) << 32) | (left & 0xffff_ffff)
    }
}

impl Workload for Groups {
    fn handle(&mut self, ev: &Event, out: &mut Vec<Post>) -> u64 {
        let members = self.rings[0].len();
        if ev.data == ROOT {
            for (g, ring) in self.rings.iter().enumerate() {
                for t in 0..self.tokens {
                    let m = t * members / self.tokens;
                    out.push(Post { color: ring[m], data: Self::hop(g, m, self.hops) });
                }
            }
            return 0;
        }
        let (g, m, left) =
            ((ev.data >> 48) as usize, ((ev.data >> 32) & 0xffff) as usize, ev.data & 0xffff_ffff);
        if left > 1 {
            if let Some(ring) = self.rings.get(g) {
                let next = after(m, members);
                out.push(Post { color: ring[next], data: Self::hop(g, next, left - 1) });
            }
        }
        self.cost_ns
    }
}

impl Measured for Groups {
    fn counted(&self) -> u64 {
        (self.rings.len() * self.tokens) as u64 * self.hops
    }
}

/// The Savina actor programs of `ochre-bench` `actors`, one color per actor (`Color(1 + i)`),
/// each message costing `msg_ns` of the actor layer's own code ([`Workload::layer_ns`]) plus
/// its program's work.
pub struct Actors {
    program: Program,
    msg_ns: u64,
    /// Per actor: a counter and a generator, as the programs' states.
    state: Vec<[u64; 4]>,
    rng: u64,
    /// Random draws made by the last event.
    draws: u64,
}

/// Which actor program, with its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// Two actors pass one ball `n` times.
    PingPong { n: u64 },
    /// A producer sends `n` increments to a counter.
    Counting { n: u64 },
    /// `actors` in a ring pass `tokens` tokens, `hops` in all.
    Ring { actors: usize, tokens: usize, hops: u64 },
    /// `actors` each ping random others `pings` times.
    Big { actors: usize, pings: u64 },
    /// A driver sends `per_actor` messages to each of `actors`, each of `work_ns`.
    ForkJoin { actors: usize, per_actor: u64, work_ns: u64 },
    /// `creatures` meet at a mall, `meetings` in all.
    Chameneos { creatures: usize, meetings: u64 },
    /// A teller and `accounts` accounts, `transactions` transfers.
    Bank { accounts: usize, transactions: u64 },
}

impl Program {
    /// The programs and sizes of the actors benchmark (its quick sizes when `quick`), by name.
    pub fn suite(quick: bool) -> Vec<(&'static str, Program)> {
        let k = if quick { 1 } else { 4 };
        vec![
            ("pingpong", Program::PingPong { n: 600_000 * k }),
            ("counting", Program::Counting { n: 1_000_000 * k }),
            ("thread ring, 1 token", Program::Ring { actors: 1000, tokens: 1, hops: 300_000 * k }),
            (
                "thread ring, 64 tokens",
                Program::Ring { actors: 1000, tokens: 64, hops: 1_000_000 * k },
            ),
            ("big", Program::Big { actors: 100, pings: 3_000 * k }),
            (
                "fork-join empty",
                Program::ForkJoin { actors: 60, per_actor: 12_000 * k, work_ns: 0 },
            ),
            (
                "fork-join 1 us",
                Program::ForkJoin { actors: 60, per_actor: 1_000 * k, work_ns: 1_000 },
            ),
            ("chameneos", Program::Chameneos { creatures: 40, meetings: 200_000 * k }),
            ("bank", Program::Bank { accounts: 100, transactions: 300_000 * k }),
        ]
    }

    /// The same program with its size divided by `by` (at least 1 of everything).
    pub fn scaled(self, by: u64) -> Program {
        let d = |x: u64| (x / by.max(1)).max(1);
        match self {
            Program::PingPong { n } => Program::PingPong { n: d(n) },
            Program::Counting { n } => Program::Counting { n: d(n) },
            Program::Ring { actors, tokens, hops } => {
                Program::Ring { actors, tokens, hops: d(hops).max(tokens as u64) }
            }
            Program::Big { actors, pings } => Program::Big { actors, pings: d(pings) },
            Program::ForkJoin { actors, per_actor, work_ns } => {
                Program::ForkJoin { actors, per_actor: d(per_actor), work_ns }
            }
            Program::Chameneos { creatures, meetings } => {
                Program::Chameneos { creatures, meetings: d(meetings) }
            }
            Program::Bank { accounts, transactions } => {
                Program::Bank { accounts, transactions: d(transactions) }
            }
        }
    }

    fn actors(self) -> usize {
        match self {
            Program::PingPong { .. } | Program::Counting { .. } => 2,
            Program::Ring { actors, .. } | Program::Big { actors, .. } => actors + 1,
            Program::ForkJoin { actors, .. } => actors + 1,
            Program::Chameneos { creatures, .. } => creatures + 1,
            Program::Bank { accounts, .. } => accounts + 1,
        }
    }

    /// Bytes of the closure that carries one of its messages in `bench actors` (the recipient's
    /// `Arc` and the program's message enum; the bench's `actors::closure_bytes` gives the same,
    /// from the types): its pingpong's `u64` 16, the `Ring`'s token (two words and a tag) and
    /// the bank's debit (two words and a tag) 32, the others (one word and a tag) 24.
    pub fn closure_bytes(self) -> usize {
        match self {
            Program::PingPong { .. } => 16,
            Program::Ring { .. } | Program::Bank { .. } => 32,
            Program::Counting { .. }
            | Program::Big { .. }
            | Program::ForkJoin { .. }
            | Program::Chameneos { .. } => 24,
        }
    }

    /// Messages a run sends (the benchmark's numerator).
    pub fn messages(self) -> u64 {
        match self {
            Program::PingPong { n } => n,
            Program::Counting { n } => n + 2,
            Program::Ring { tokens, hops, .. } => hops / tokens as u64 * tokens as u64,
            Program::Big { actors, pings } => 2 * actors as u64 * pings,
            Program::ForkJoin { actors, per_actor, .. } => actors as u64 * per_actor,
            Program::Chameneos { meetings, .. } => 4 * meetings,
            Program::Bank { transactions, .. } => 3 * transactions,
        }
    }
}

/// `(i + 1) % n`, the next of `n` places in a ring, without a division where `i + 1 < n` (an
/// integer division takes tens of cycles, a sizeable share of a simulated event's host time).
#[inline]
fn after(i: usize, n: usize) -> usize {
    let next = i + 1;
    if next < n {
        next
    } else {
        next % n
    }
}

fn actor(i: usize) -> Color {
    Color(1 + i as u64)
}

fn next_rand(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// A random one of `0..n` other than `me`.
fn other(rng: &mut u64, me: usize, n: usize) -> usize {
    let j = (next_rand(rng) % (n as u64 - 1).max(1)) as usize;
    if j >= me {
        j + 1
    } else {
        j
    }
}

/// What one random draw of the actor programs costs on this machine, ns
/// ([`CostModel::draw_ns`](crate::sim::CostModel::draw_ns)): the median of 5 timings of a
/// million draws (`other`, as big's actors and the bank's teller draw, over a count read at
/// run time as theirs are), each fed the last one's result (the teller's draws depend on its
/// generator's state one after the other).
pub fn measure_draw_ns() -> f64 {
    const DRAWS: u64 = 1_000_000;
    let n = std::hint::black_box(100usize);
    let mut times: Vec<f64> = (0..5)
        .map(|_| {
            let mut rng = 0x2545_f491_4f6c_dd1d_u64;
            let mut me = 0;
            let start = std::time::Instant::now();
            for _ in 0..DRAWS {
                me = other(&mut rng, me, n);
            }
            std::hint::black_box(me);
            start.elapsed().as_nanos() as f64 / DRAWS as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

impl Actors {
    /// `program`, each message costing `msg_ns` of the actor layer's code.
    pub fn new(program: Program, msg_ns: u64) -> Self {
        let n = program.actors();
        let rng = 0x2545_f491_4f6c_dd1d;
        Actors { program, msg_ns, state: vec![[0; 4]; n], rng, draws: 0 }
    }

    #[inline]
    fn send(out: &mut Vec<Post>, to: usize, kind: u64, rest: u64) {
        out.push(Post { color: actor(to), data: with(kind, rest) });
    }
}

impl Workload for Actors {
    fn root(&self) -> Color {
        actor(0)
    }

    fn restart(&mut self) {
        self.state.iter_mut().for_each(|s| *s = [0; 4]);
    }

    fn layer_ns(&self) -> u64 {
        self.msg_ns
    }

    fn draws(&mut self) -> u64 {
        std::mem::take(&mut self.draws)
    }

    /// A message holds a strong reference to its recipient (`bench actors`: taken by the
    /// sender's `Weak::upgrade`, dropped when it has run).
    fn post_touches_recipient(&self) -> bool {
        true
    }

    fn closure_bytes(&self, _post: &Post) -> usize {
        self.program.closure_bytes()
    }

    fn handle(&mut self, ev: &Event, out: &mut Vec<Post>) -> u64 {
        let me = (ev.color.0 as usize).wrapping_sub(1);
        if ev.data != ROOT && me >= self.state.len() {
            return 0;
        }
        let (k, r) = (kind(ev.data), rest(ev.data));
        let mut cost = 0;
        match self.program {
            Program::PingPong { n } => {
                if ev.data == ROOT {
                    Self::send(out, 0, 0, 0);
                } else if r < n {
                    Self::send(out, 1 - me.min(1), 0, r + 1);
                }
            }
            Program::Counting { n } => match (ev.data, k) {
                (ROOT, _) => Self::send(out, 0, 0, 0),
                (_, 0) => {
                    for _ in 0..n {
                        Self::send(out, 1, 1, 0);
                    }
                    Self::send(out, 1, 2, 0);
                }
                (_, 1) => self.state[me][0] += 1,
                (_, 2) => Self::send(out, 0, 3, self.state[me][0]),
                _ => {}
            },
            Program::Ring { actors, tokens, hops } => match (ev.data, k) {
                (ROOT, _) => {
                    for t in 0..tokens {
                        Self::send(out, t * actors / tokens, 0, hops / tokens as u64);
                    }
                }
                (_, 0) if r == 0 => Self::send(out, actors, 1, 0),
                (_, 0) => Self::send(out, after(me, actors), 0, r - 1),
                _ => {}
            },
            Program::Big { actors, pings } => {
                // Returns the random draws it made.
                let ping = |s: &mut [u64; 4], out: &mut Vec<Post>, rng: &mut u64| {
                    if s[0] == pings {
                        Self::send(out, actors, 3, 0);
                        0
                    } else {
                        s[0] += 1;
                        Self::send(out, other(rng, me, actors), 1, me as u64);
                        1
                    }
                };
                match (ev.data, k) {
                    (ROOT, _) => {
                        for i in 0..actors {
                            Self::send(out, i, 0, 0);
                        }
                    }
                    (_, 0) | (_, 2) => {
                        self.draws += ping(&mut self.state[me], out, &mut self.rng);
                    }
                    (_, 1) => Self::send(out, r as usize, 2, 0),
                    _ => {}
                }
            }
            Program::ForkJoin { actors, per_actor, work_ns } => match (ev.data, k) {
                (ROOT, _) => Self::send(out, 0, 0, 0),
                (_, 0) => {
                    for _ in 0..per_actor {
                        for a in 1..=actors {
                            Self::send(out, a, 1, 0);
                        }
                    }
                }
                (_, 1) => {
                    cost += work_ns;
                    self.state[me][0] += 1;
                    if self.state[me][0] == per_actor {
                        Self::send(out, 0, 2, 0);
                    }
                }
                _ => {}
            },
            Program::Chameneos { creatures, meetings } => {
                const MALL: usize = 0;
                match (ev.data, me, k) {
                    (ROOT, _, _) => {
                        for i in 1..=creatures {
                            Self::send(out, i, 0, 0);
                        }
                    }
                    // Mall: state[0] = meetings done, state[1] = 1 + a waiting creature.
                    (_, MALL, 1) if self.state[MALL][0] >= meetings => {
                        Self::send(out, r as usize, 3, 0)
                    }
                    (_, MALL, 1) => match self.state[MALL][1] {
                        0 => self.state[MALL][1] = 1 + r,
                        w => {
                            self.state[MALL][1] = 0;
                            self.state[MALL][0] += 1;
                            Self::send(out, (w - 1) as usize, 2, r);
                        }
                    },
                    (_, _, 0) => Self::send(out, MALL, 1, me as u64),
                    (_, _, 2) => {
                        Self::send(out, r as usize, 4, 0);
                        Self::send(out, MALL, 1, me as u64);
                    }
                    (_, _, 4) => Self::send(out, MALL, 1, me as u64),
                    (_, _, 3) => Self::send(out, MALL, 5, 0),
                    _ => {}
                }
            }
            Program::Bank { accounts, transactions } => match (ev.data, k) {
                (ROOT, _) => Self::send(out, 0, 0, 0),
                (_, 0) => {
                    for _ in 0..transactions {
                        let from = 1 + (next_rand(&mut self.rng) % accounts as u64) as usize;
                        let to = 1 + other(&mut self.rng, from - 1, accounts);
                        Self::send(out, from, 1, to as u64);
                    }
                    // The amount too, in `bench actors` (not kept here).
                    self.draws += 3 * transactions;
                }
                (_, 1) => Self::send(out, r as usize, 2, 0),
                (_, 2) => Self::send(out, 0, 3, 0),
                (_, 3) => {
                    self.state[0][0] += 1;
                    if self.state[0][0] == transactions {
                        for a in 1..=accounts {
                            Self::send(out, a, 4, 0);
                        }
                    }
                }
                (_, 4) => Self::send(out, 0, 5, 0),
                _ => {}
            },
        }
        cost
    }
}

impl Measured for Actors {
    fn counted(&self) -> u64 {
        self.program.messages()
    }
}
