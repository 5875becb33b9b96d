//! Diagnostic: two actor shapes of Savina beyond `bench actors`, written as a user writes them
//! (one plain color per actor), against tokio-mt, alternated in one process:
//!
//! - `dict`: a concurrent dictionary (Savina "concdict"): C clients each send M requests, one at
//!   a time, to one dictionary actor, which does W ns of work per request and replies; a
//!   client sends its next request when the reply comes.
//! - `rounds`: a master and C workers in rounds (Savina's trapezoid / pi / logistic map shape):
//!   the master sends one item to each worker, each does W ns and replies, and the master starts
//!   the next round when every reply is in; M rounds.
//!
//! `server_probe [dict|rounds] [C] [M] [W_NS] [REPS]` (defaults dict 16 20000 100 7); `STEAL=off`,
//! `FOLLOW=0`, `TURN=N` change ochre's configuration (`harness::probe_config`).
//!
//! Found (session 32, 2 workers, quiet, medians of 5): the dictionary 2.25-4.33x tokio-mt (0,
//! 100 and 1000 ns; 4 to 64 clients). Rounds of 60 actors with 10 us items: 0.86-0.90 of
//! tokio-mt (hand placement 1.1x): `Color(1)`..`Color(60)` hash 37 and 23 on the two workers,
//! and no color alone held a steal's worth of work nor were 128 waiting (the light backlog's
//! count), so the lighter worker idled a third of each round; with a few colors of 5 us or more
//! a backlog together (`queue::FEW_COLORS`), 1.03-1.11. Fibonacci hashing of the homes (even
//! for consecutive ids) was tried: rounds even, but ring neighbours then sat on different
//! workers three times in four, and the 64-token ring fell from 40-42 M to 34 M messages/s.
//! Rounds with 2 us items: 1.04-1.06 (0.77 of hand).
use ochre::Runtime;
use ochre_bench::actors::{probe_medians, Cx, Program};
use ochre_bench::harness::{probe_config, work};

#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Dict,
    Rounds,
}

struct Probe {
    shape: Shape,
    clients: usize,
    per_client: u64,
    work_ns: u64,
}

enum Msg {
    Go,
    Request(usize),
    Reply,
    Done,
}

#[derive(Clone)]
struct State {
    shape: Shape,
    clients: usize,
    per_client: u64,
    work_ns: u64,
    /// A client: requests sent; the dictionary or master: replies or clients counted.
    count: u64,
    /// The master: rounds started.
    rounds: u64,
}

impl Program for Probe {
    type State = State;
    type Msg = Msg;
    fn count(&self) -> usize {
        self.clients + 1
    }
    fn actors(&self) -> Vec<State> {
        let s = State {
            shape: self.shape,
            clients: self.clients,
            per_client: self.per_client,
            work_ns: self.work_ns,
            count: 0,
            rounds: 0,
        };
        vec![s; self.clients + 1]
    }
    fn start(&self) -> Vec<(usize, Msg)> {
        match self.shape {
            Shape::Dict => (1..=self.clients).map(|c| (c, Msg::Go)).collect(),
            Shape::Rounds => vec![(0, Msg::Go)],
        }
    }
    fn handle(me: usize, s: &mut State, msg: Msg, cx: &impl Cx<Msg>) {
        match (s.shape, msg) {
            // The dictionary.
            (Shape::Dict, Msg::Request(from)) => {
                work(s.work_ns);
                cx.send(from, Msg::Reply);
            }
            (Shape::Dict, Msg::Done) => {
                s.count += 1;
                if s.count == s.clients as u64 {
                    cx.done(s.clients as u64 * s.per_client);
                }
            }
            // A client.
            (Shape::Dict, Msg::Go | Msg::Reply) => {
                if s.count < s.per_client {
                    s.count += 1;
                    cx.send(0, Msg::Request(me));
                } else {
                    cx.send(0, Msg::Done);
                }
            }
            // A worker.
            (Shape::Rounds, Msg::Request(_)) => {
                work(s.work_ns);
                cx.send(0, Msg::Reply);
            }
            // The master.
            (Shape::Rounds, Msg::Go | Msg::Reply) => {
                s.count += 1;
                if s.count as usize >= s.clients || s.rounds == 0 {
                    s.count = 0;
                    if s.rounds == s.per_client {
                        cx.done(s.rounds * s.clients as u64);
                        return;
                    }
                    s.rounds += 1;
                    for w in 1..=s.clients {
                        cx.send(w, Msg::Request(0));
                    }
                }
            }
            (Shape::Rounds, Msg::Done) => {}
        }
    }
    fn expected(&self) -> u64 {
        self.clients as u64 * self.per_client
    }
    fn messages(&self) -> u64 {
        2 * self.clients as u64 * self.per_client
    }
    fn hand_worker(&self, i: usize, workers: usize) -> usize {
        i % workers
    }
}

fn builder() -> ochre::Builder {
    Runtime::builder().workers(2).config(probe_config())
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    let shape = match args.peek().map(String::as_str) {
        Some("rounds") => Shape::Rounds,
        Some("dict") => Shape::Dict,
        _ => Shape::Dict,
    };
    let a: Vec<u64> = args.filter_map(|a| a.parse().ok()).collect();
    let clients = *a.first().unwrap_or(&16) as usize;
    let per_client = *a.get(1).unwrap_or(&20_000);
    let work_ns = *a.get(2).unwrap_or(&100);
    let reps = *a.get(3).unwrap_or(&7) as usize;
    let prog = Probe { shape, clients, per_client, work_ns };
    let m = probe_medians(&prog, reps, || builder().build().unwrap()).unwrap();
    let name = if shape == Shape::Dict { "dict" } else { "rounds" };
    println!(
        "{name} {clients} x {per_client}, {work_ns} ns: ochre {:.2}M, hand {:.2}M, tokio {:.2}M \
         msg/s; ochre/tokio {:.2}, ochre/hand {:.2}",
        m[0] / 1e6,
        m[1] / 1e6,
        m[2] / 1e6,
        m[0] / m[2],
        m[0] / m[1]
    );
}
