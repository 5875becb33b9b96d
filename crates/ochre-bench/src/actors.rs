//! Actor programs (a subset of the Savina suite, Imam & Sarkar 2014), written the way a user
//! writes them: one plain color per actor, default runtime settings, no hand placement.
//!
//! Programs (each actor's state is its own; messages are the only way between actors):
//! - `pingpong`: two actors send one ball back and forth N times.
//! - `counting`: a producer sends N increments to a counter, then asks for the count.
//! - `thread ring, 1 token` / `64 tokens`: 1000 actors in a ring pass tokens to their neighbour;
//!   64 tokens start at evenly spaced actors; the total of hops is fixed; a sink collects them.
//! - `big`: 100 actors; each pings a random other actor and waits for its pong before the next
//!   ping, P times; a sink collects the counts (Savina "Big").
//! - `fork-join empty` / `fork-join 1 us`: a driver sends M messages to each of 60 actors, round
//!   robin; a message costs nothing or ~1 us of work (Savina "fjthrput").
//! - `chameneos`: 40 creatures ask a mall for a meeting; the mall pairs them, the pair change
//!   color and ask again, N meetings in all (Savina "chameneos").
//! - `bank`: a teller and 100 accounts; a transaction debits a random account, which credits
//!   another (account to account), which acknowledges to the teller; then the teller sums the
//!   balances, which must be conserved.
//!
//! Each program is written once ([`Program`]: states, first messages, one handler) and run by
//! thin actor layers: on ochre an actor is an [`ochre::Addr`] (the runtime keeps the state; a
//! message is `addr.send(move |a| handler(..))`, carrying one word for the actor: the runtime's
//! actor API, [`Layer::Addr`]), or, in `ochre-arc`, an `Arc` of a [`ColorCell`] of its state
//! with a message `ochre::post(color, move || handler(..))` carrying a reference to its
//! recipient (the colored events' idiom without the actor API; the reference count is two atomic
//! writes per message on the recipient's line, [`Layer::Arc`]); on tokio an actor is a task with
//! an unbounded `mpsc` mailbox of enum messages (`while let Some(msg) = rx.recv().await`). Every
//! run's result is checked (counts, conservation). ochre is timed by `RunReport::elapsed`, on a
//! runtime built for the sample and warmed up by a run of an eighth of the size; tokio from the
//! first spawn to the result.
//!
//! Systems: `ochre` (default configuration, actor `i` is `Color(1 + i)`), `ochre-arc` (the same
//! through [`Layer::Arc`]), `ochre-static` (the same with `follow(false)`: colors stay where their
//! hash puts them), `ochre-nosteal` (the default with `Steal::Off`: what backlog stealing, the
//! default, gives), `ochre-pinned` (the default with `Config::unpin_when_shared` off: workers stay
//! on their CPUs however busy they are), `ochre-unpinned` (the default with `Builder::pin(false)`:
//! the system scheduler places the workers from the start), `ochre-hand` (colors chosen with
//! `Runtime::home_of` so that each actor lands on the worker its program's [`Program::hand_worker`]
//! gives: ring neighbours in contiguous blocks, the ping-pong pair and producer-counter together,
//! fork-join and bank actors split evenly, chameneos on one worker), `tokio-mt` (multi-thread
//! runtime, one task per actor) and `tokio-ct` (a current-thread runtime per pinned thread, actors
//! partitioned by the same `hand_worker`). Unit: messages per second.
//!
//! Busy: one extra thread spins on the CPU of the last worker for the whole of each sample, as
//! another process does on a user's shared machine.
//!
//! Where ochre loses to tokio-mt quiet (the 64-token ring, fork-join of empty messages): the
//! cost of a message, not where colors run. `ochre-hand` (colors placed by hand, almost every
//! post local) runs the 64-token ring little faster than `ochre`, both at 0.5-0.6 of tokio-mt;
//! callgrind of that ring at one worker (`--quick --reps 3 --workers 1`, session 47) counts 794
//! instructions a message for ochre (the worker thread: a post about 320, of which routing 73,
//! storing the closure 39, filing it 120; the one-event turn's bookkeeping about 370: sampling,
//! stall heartbeat, stand-in borrows, steal and follow checks, the slab of colors) against 429
//! for tokio-mt (the whole process: an `mpsc` send and receive, a task's poll); 761 since
//! session 48 (`ColorQueue::route`'s fast paths and EMA's allocation and common free inlined
//! where they are called, their rare paths out of line; fork-join empty 543 -> 504, big
//! 630 -> 591).
//! Fork-join empty is bound by its one driver's posts (720,000 from one handler): carrying the
//! closures of its forwarded posts (to colors stolen from the driver's backlog) inline, as
//! remote posts are, moved nothing measurable (8 alternated processes), so it was not kept.
//! A message's closure costs about 90 of those instructions in EMA (allocated at the post,
//! freed at the run); holding small closures in the task itself was measured and not kept
//! (`ochre::message`'s `Task` doc): what would save them is filing a closure straight into its
//! color's queue and running it from there, with no task in between.
//!
//! `OCHRE_ACTORS=chameneos,bank` (names or prefixes of names, comma-separated) runs only those
//! programs: a developer's shortcut when working on one of them; the checks then judge what ran.
//! `OCHRE_ACTORS_SYSTEMS=ochre,ochre-nosteal` measures only those systems, and
//! `OCHRE_ACTORS_MODE=quiet` (or `busy`) only that half (A/B comparisons of two configurations).
//! `OCHRE_ACTORS_STATS=1` prints each ochre run's per-worker counters (events, remote posts,
//! moves, steals: where a program's colors ran) on standard error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use ochre::{Color, ColorCell, Config, Runtime, Steal};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::harness::{geomean, measure_case, work, BenchReport, Options, System};
use crate::peers;

/// What a handler may do besides changing its actor's state.
pub trait Cx<M> {
    /// Sends `msg` to actor `to`.
    fn send(&self, to: usize, msg: M);
    /// Reports the program's result (once, at its end).
    fn done(&self, result: u64);
}

/// An actor program: its actors' initial states, its first messages and its handler.
pub trait Program: 'static {
    /// An actor's state.
    type State: Send + 'static;
    /// A message.
    type Msg: Send + 'static;
    /// Number of actors.
    fn count(&self) -> usize;
    /// The actors' initial states, actor `i` at index `i`.
    fn actors(&self) -> Vec<Self::State>;
    /// The messages that start the program, sent from outside.
    fn start(&self) -> Vec<(usize, Self::Msg)>;
    /// Handles `msg` sent to actor `me`.
    fn handle(me: usize, s: &mut Self::State, msg: Self::Msg, cx: &impl Cx<Self::Msg>);
    /// The result a correct run reports.
    fn expected(&self) -> u64;
    /// Messages a run sends (the throughput figure's numerator).
    fn messages(&self) -> u64;
    /// The worker actor `i` goes on when placed by hand over `workers` workers.
    fn hand_worker(&self, i: usize, workers: usize) -> usize;
}

/// Checks a run's result and turns its duration into messages per second.
fn verify<P: Program>(prog: &P, got: u64, elapsed: Duration) -> Result<f64, String> {
    if got != prog.expected() {
        return Err(format!("wrong result: {got}, expected {}", prog.expected()));
    }
    Ok(prog.messages() as f64 / elapsed.as_secs_f64())
}

/// A small deterministic generator (xorshift64*), per actor: no shared state.
fn next_rand(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// A random actor of `0..n` other than `me`.
fn other(rng: &mut u64, me: usize, n: usize) -> usize {
    let j = (next_rand(rng) % (n as u64 - 1)) as usize;
    if j >= me {
        j + 1
    } else {
        j
    }
}

/// `i` of `n` in contiguous blocks over `workers`.
fn block(i: usize, n: usize, workers: usize) -> usize {
    i * workers / n.max(1)
}

// ---------------------------------------------------------------------------------------------
// The programs. Actors of several roles share one state type (a driver's fields and a worker's),
// since a program has one handler.

/// Two actors exchange a ball `n` times.
struct PingPong {
    n: u64,
}

impl Program for PingPong {
    type State = u64; // hops to make
    type Msg = u64; // hops made so far
    fn count(&self) -> usize {
        2
    }
    fn actors(&self) -> Vec<u64> {
        vec![self.n; 2]
    }
    fn start(&self) -> Vec<(usize, u64)> {
        vec![(0, 0)]
    }
    fn handle(me: usize, n: &mut u64, hops: u64, cx: &impl Cx<u64>) {
        if hops == *n {
            cx.done(hops)
        } else {
            cx.send(1 - me, hops + 1)
        }
    }
    fn expected(&self) -> u64 {
        self.n
    }
    fn messages(&self) -> u64 {
        self.n
    }
    fn hand_worker(&self, _: usize, _: usize) -> usize {
        0
    }
}

/// A producer (actor 0) sends `n` increments to a counter (actor 1), then asks for the count.
struct Counting {
    n: u64,
}

/// Messages of [`Counting`].
enum CountMsg {
    Go,
    Incr,
    Get,
    Count(u64),
}

impl Program for Counting {
    type State = (u64, u64); // (increments to send, count)
    type Msg = CountMsg;
    fn count(&self) -> usize {
        2
    }
    fn actors(&self) -> Vec<(u64, u64)> {
        vec![(self.n, 0); 2]
    }
    fn start(&self) -> Vec<(usize, CountMsg)> {
        vec![(0, CountMsg::Go)]
    }
    fn handle(_: usize, s: &mut (u64, u64), msg: CountMsg, cx: &impl Cx<CountMsg>) {
        match msg {
            CountMsg::Go => {
                for _ in 0..s.0 {
                    cx.send(1, CountMsg::Incr);
                }
                // Sent after the increments by the same handler: ordered after them.
                cx.send(1, CountMsg::Get);
            }
            CountMsg::Incr => s.1 += 1,
            CountMsg::Get => cx.send(0, CountMsg::Count(s.1)),
            CountMsg::Count(c) => cx.done(c),
        }
    }
    fn expected(&self) -> u64 {
        self.n
    }
    fn messages(&self) -> u64 {
        self.n + 2
    }
    fn hand_worker(&self, _: usize, _: usize) -> usize {
        0
    }
}

/// `actors` actors in a ring (actor `actors` is the sink); `tokens` tokens start at evenly
/// spaced actors and make `hops / tokens` hops each.
struct Ring {
    actors: usize,
    tokens: usize,
    hops: u64,
}

/// Messages of [`Ring`].
enum RingMsg {
    /// A token with `left` hops to go, `made` made.
    Token {
        left: u64,
        made: u64,
    },
    Finished(u64),
}

/// An actor of [`Ring`]: its ring's size; for the sink, what it collected.
#[derive(Clone)]
struct RingState {
    ring: usize,
    tokens: usize,
    finished: usize,
    total: u64,
}

impl Ring {
    fn per_token(&self) -> u64 {
        self.hops / self.tokens as u64
    }
}

impl Program for Ring {
    type State = RingState;
    type Msg = RingMsg;
    fn count(&self) -> usize {
        self.actors + 1
    }
    fn actors(&self) -> Vec<RingState> {
        let s = RingState { ring: self.actors, tokens: self.tokens, finished: 0, total: 0 };
        vec![s; self.actors + 1]
    }
    fn start(&self) -> Vec<(usize, RingMsg)> {
        (0..self.tokens)
            .map(|t| {
                (t * self.actors / self.tokens, RingMsg::Token { left: self.per_token(), made: 0 })
            })
            .collect()
    }
    fn handle(me: usize, s: &mut RingState, msg: RingMsg, cx: &impl Cx<RingMsg>) {
        match msg {
            RingMsg::Token { left: 0, made } => cx.send(s.ring, RingMsg::Finished(made)),
            RingMsg::Token { left, made } => {
                cx.send((me + 1) % s.ring, RingMsg::Token { left: left - 1, made: made + 1 })
            }
            RingMsg::Finished(made) => {
                s.total += made;
                s.finished += 1;
                if s.finished == s.tokens {
                    cx.done(s.total);
                }
            }
        }
    }
    fn expected(&self) -> u64 {
        self.per_token() * self.tokens as u64
    }
    fn messages(&self) -> u64 {
        self.expected()
    }
    fn hand_worker(&self, i: usize, workers: usize) -> usize {
        block(i.min(self.actors - 1), self.actors, workers)
    }
}

/// `actors` actors (actor `actors` is the sink); each pings a random other one and waits for
/// its pong before the next ping, `pings` times.
struct Big {
    actors: usize,
    pings: u64,
}

/// Messages of [`Big`].
enum BigMsg {
    Go,
    Ping(usize),
    Pong,
    Done(u64),
}

/// An actor of [`Big`].
#[derive(Clone)]
struct BigState {
    actors: usize,
    left: u64,
    pongs: u64,
    rng: u64,
    finished: usize,
}

impl Program for Big {
    type State = BigState;
    type Msg = BigMsg;
    fn count(&self) -> usize {
        self.actors + 1
    }
    fn actors(&self) -> Vec<BigState> {
        (0..=self.actors)
            .map(|i| BigState {
                actors: self.actors,
                left: self.pings,
                pongs: 0,
                rng: 0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1),
                finished: 0,
            })
            .collect()
    }
    fn start(&self) -> Vec<(usize, BigMsg)> {
        (0..self.actors).map(|i| (i, BigMsg::Go)).collect()
    }
    fn handle(me: usize, s: &mut BigState, msg: BigMsg, cx: &impl Cx<BigMsg>) {
        match msg {
            BigMsg::Ping(from) => return cx.send(from, BigMsg::Pong),
            BigMsg::Done(pongs) => {
                s.pongs += pongs;
                s.finished += 1;
                if s.finished == s.actors {
                    cx.done(s.pongs);
                }
                return;
            }
            BigMsg::Pong => s.pongs += 1,
            BigMsg::Go => {}
        }
        if s.left == 0 {
            cx.send(s.actors, BigMsg::Done(s.pongs));
        } else {
            s.left -= 1;
            cx.send(other(&mut s.rng, me, s.actors), BigMsg::Ping(me));
        }
    }
    fn expected(&self) -> u64 {
        self.actors as u64 * self.pings
    }
    fn messages(&self) -> u64 {
        2 * self.expected()
    }
    fn hand_worker(&self, i: usize, workers: usize) -> usize {
        block(i.min(self.actors - 1), self.actors, workers)
    }
}

/// A driver (actor 0) sends `per_actor` messages to each of `actors` actors (1..=actors), round
/// robin; each message costs `work_ns` of work.
struct ForkJoin {
    actors: usize,
    per_actor: u64,
    work_ns: u64,
}

/// Messages of [`ForkJoin`].
enum FjMsg {
    Go,
    Work,
    Finished(u64),
}

/// An actor of [`ForkJoin`].
#[derive(Clone)]
struct FjState {
    actors: usize,
    per_actor: u64,
    work_ns: u64,
    done: u64,
    finished: usize,
}

impl Program for ForkJoin {
    type State = FjState;
    type Msg = FjMsg;
    fn count(&self) -> usize {
        self.actors + 1
    }
    fn actors(&self) -> Vec<FjState> {
        let s = FjState {
            actors: self.actors,
            per_actor: self.per_actor,
            work_ns: self.work_ns,
            done: 0,
            finished: 0,
        };
        vec![s; self.actors + 1]
    }
    fn start(&self) -> Vec<(usize, FjMsg)> {
        vec![(0, FjMsg::Go)]
    }
    fn handle(_: usize, s: &mut FjState, msg: FjMsg, cx: &impl Cx<FjMsg>) {
        match msg {
            FjMsg::Go => {
                for _ in 0..s.per_actor {
                    for a in 1..=s.actors {
                        cx.send(a, FjMsg::Work);
                    }
                }
            }
            FjMsg::Work => {
                work(s.work_ns);
                s.done += 1;
                if s.done == s.per_actor {
                    cx.send(0, FjMsg::Finished(s.done));
                }
            }
            FjMsg::Finished(n) => {
                s.done += n;
                s.finished += 1;
                if s.finished == s.actors {
                    cx.done(s.done);
                }
            }
        }
    }
    fn expected(&self) -> u64 {
        self.actors as u64 * self.per_actor
    }
    fn messages(&self) -> u64 {
        self.expected()
    }
    fn hand_worker(&self, i: usize, workers: usize) -> usize {
        // The driver goes with the first block.
        block(i.saturating_sub(1), self.actors, workers)
    }
}

/// A mall (actor 0) and `creatures` chameneos (1..=creatures) meeting `meetings` times.
struct Chameneos {
    creatures: usize,
    meetings: u64,
}

/// A chameneo's color.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Hue {
    Blue,
    Red,
    Yellow,
}

impl Hue {
    fn complement(self, other: Hue) -> Hue {
        use Hue::*;
        match (self, other) {
            (a, b) if a == b => a,
            (Blue, Red) | (Red, Blue) => Yellow,
            (Blue, Yellow) | (Yellow, Blue) => Red,
            _ => Blue,
        }
    }
}

/// Messages of [`Chameneos`].
enum ChamMsg {
    Start,
    /// To the mall: that creature, of that color, wants to meet; from the mall: meet it.
    Meet(Hue, usize),
    Change(Hue),
    Exit,
    Count(u64),
}

/// An actor of [`Chameneos`]: a creature's color and meetings; the mall's bookkeeping.
#[derive(Clone)]
struct ChamState {
    hue: Hue,
    meetings: u64,
    left: u64,
    waiting: Option<(Hue, usize)>,
    creatures: usize,
    faded: usize,
}

impl Program for Chameneos {
    type State = ChamState;
    type Msg = ChamMsg;
    fn count(&self) -> usize {
        self.creatures + 1
    }
    fn actors(&self) -> Vec<ChamState> {
        let hues = [Hue::Blue, Hue::Red, Hue::Yellow];
        (0..=self.creatures)
            .map(|i| ChamState {
                hue: hues[i % 3],
                meetings: 0,
                left: self.meetings,
                waiting: None,
                creatures: self.creatures,
                faded: 0,
            })
            .collect()
    }
    fn start(&self) -> Vec<(usize, ChamMsg)> {
        (1..=self.creatures).map(|i| (i, ChamMsg::Start)).collect()
    }
    fn handle(me: usize, s: &mut ChamState, msg: ChamMsg, cx: &impl Cx<ChamMsg>) {
        const MALL: usize = 0;
        match (me, msg) {
            (MALL, ChamMsg::Meet(_, from)) if s.left == 0 => cx.send(from, ChamMsg::Exit),
            (MALL, ChamMsg::Meet(hue, from)) => match s.waiting.take() {
                None => s.waiting = Some((hue, from)),
                Some((_, first)) => {
                    s.left -= 1;
                    cx.send(first, ChamMsg::Meet(hue, from));
                }
            },
            (MALL, ChamMsg::Count(n)) => {
                s.meetings += n;
                s.faded += 1;
                if s.faded == s.creatures {
                    cx.done(s.meetings);
                }
            }
            (_, ChamMsg::Start) => cx.send(MALL, ChamMsg::Meet(s.hue, me)),
            (_, ChamMsg::Meet(hue, partner)) => {
                s.hue = s.hue.complement(hue);
                s.meetings += 1;
                cx.send(partner, ChamMsg::Change(s.hue));
                cx.send(MALL, ChamMsg::Meet(s.hue, me));
            }
            (_, ChamMsg::Change(hue)) => {
                s.hue = hue;
                s.meetings += 1;
                cx.send(MALL, ChamMsg::Meet(s.hue, me));
            }
            (_, ChamMsg::Exit) => cx.send(MALL, ChamMsg::Count(s.meetings)),
            (_, ChamMsg::Count(_)) => {}
        }
    }
    fn expected(&self) -> u64 {
        2 * self.meetings
    }
    fn messages(&self) -> u64 {
        // Two requests, the mall's forward and the partner's change per meeting.
        4 * self.meetings
    }
    fn hand_worker(&self, _: usize, _: usize) -> usize {
        // Every message goes through the mall: moving creatures away only adds crossings.
        0
    }
}

/// A teller (actor 0) and `accounts` accounts (1..=accounts): `transactions` transfers between
/// random accounts, then the balances summed.
struct Bank {
    accounts: usize,
    transactions: u64,
    opening: u64,
}

/// Messages of [`Bank`].
enum BankMsg {
    Go,
    /// Debit that amount and credit that account with it.
    Debit(usize, u64),
    Credit(u64),
    Ack,
    Balance,
    BalanceIs(u64),
}

/// An actor of [`Bank`]: an account's balance; the teller's counts.
#[derive(Clone)]
struct BankState {
    balance: u64,
    rng: u64,
    accounts: usize,
    transactions: u64,
    acked: u64,
    reported: usize,
}

impl Program for Bank {
    type State = BankState;
    type Msg = BankMsg;
    fn count(&self) -> usize {
        self.accounts + 1
    }
    fn actors(&self) -> Vec<BankState> {
        let s = BankState {
            balance: self.opening,
            rng: 0x2545_f491_4f6c_dd1d,
            accounts: self.accounts,
            transactions: self.transactions,
            acked: 0,
            reported: 0,
        };
        let mut v = vec![s; self.accounts + 1];
        v[0].balance = 0;
        v
    }
    fn start(&self) -> Vec<(usize, BankMsg)> {
        vec![(0, BankMsg::Go)]
    }
    fn handle(_: usize, s: &mut BankState, msg: BankMsg, cx: &impl Cx<BankMsg>) {
        const TELLER: usize = 0;
        match msg {
            BankMsg::Go => {
                for _ in 0..s.transactions {
                    let from = 1 + (next_rand(&mut s.rng) % s.accounts as u64) as usize;
                    let to = 1 + other(&mut s.rng, from - 1, s.accounts);
                    let amount = 1 + next_rand(&mut s.rng) % 100;
                    cx.send(from, BankMsg::Debit(to, amount));
                }
            }
            BankMsg::Debit(to, amount) if amount <= s.balance => {
                s.balance -= amount;
                cx.send(to, BankMsg::Credit(amount));
            }
            // Refused: not enough money.
            BankMsg::Debit(..) => cx.send(TELLER, BankMsg::Ack),
            BankMsg::Credit(amount) => {
                s.balance += amount;
                cx.send(TELLER, BankMsg::Ack);
            }
            BankMsg::Ack => {
                s.acked += 1;
                if s.acked == s.transactions {
                    for a in 1..=s.accounts {
                        cx.send(a, BankMsg::Balance);
                    }
                }
            }
            BankMsg::Balance => cx.send(TELLER, BankMsg::BalanceIs(s.balance)),
            BankMsg::BalanceIs(b) => {
                s.balance += b;
                s.reported += 1;
                if s.reported == s.accounts {
                    cx.done(s.balance);
                }
            }
        }
    }
    fn expected(&self) -> u64 {
        self.accounts as u64 * self.opening
    }
    fn messages(&self) -> u64 {
        // Debit, credit, acknowledgement (a refused debit, rare with these amounts, has two).
        3 * self.transactions
    }
    fn hand_worker(&self, i: usize, workers: usize) -> usize {
        block(i.saturating_sub(1), self.accounts, workers)
    }
}

// ---------------------------------------------------------------------------------------------
// ochre: an actor is its state in a `ColorCell` of its color; a message is an event of that
// color running the handler.

/// Actor `i`'s color as a user writes it.
pub fn plain_color(i: usize) -> Color {
    Color(1 + i as u64)
}

/// Colors for `prog`'s actors, each homed (`Runtime::home_of`) on the worker
/// [`Program::hand_worker`] gives it.
pub fn hand_colors<P: Program>(rt: &Runtime, prog: &P) -> Vec<Color> {
    // Laid out over the workers that home colors (`Runtime::homes`).
    let workers = rt.homes();
    colors_homed_on(rt, prog.count(), |i| prog.hand_worker(i, workers))
}

/// `count` distinct colors, the `i`th homed (`Runtime::home_of`) on worker `worker(i)` (the last
/// worker that homes colors if that is past it: `Runtime::homes`).
pub fn colors_homed_on(rt: &Runtime, count: usize, worker: impl Fn(usize) -> usize) -> Vec<Color> {
    // Only the workers that home colors have any (`Runtime::homes`).
    let workers = rt.homes();
    let mut spare: Vec<Vec<Color>> = vec![Vec::new(); workers];
    let mut next = 1;
    (0..count)
        .map(|i| {
            let want = worker(i).min(workers - 1);
            loop {
                if let Some(c) = spare[want].pop() {
                    return c;
                }
                spare[rt.home_of(Color(next))].push(Color(next));
                next += 1;
            }
        })
        .collect()
}

/// How the ochre programs reach their actors' states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// Each actor an [`ochre::Addr`]: the runtime keeps the state, a message carries a copy of
    /// the address (the runtime's actor API).
    Addr,
    /// Each actor an `Arc` of a [`ColorCell`], a clone of it in every message (the colored
    /// events' idiom without the actor API: two atomic writes per message on the actor's count).
    Arc,
}

/// An actor as [`Layer::Addr`] keeps it: its index, the system and its state.
struct AActor<P: Program> {
    me: usize,
    system: Arc<ASystem<P>>,
    state: P::State,
}

/// What every actor reaches: the others' addresses and the outcome.
struct ASystem<P: Program> {
    actors: OnceLock<Box<[ochre::Addr<AActor<P>>]>>,
    outcome: Outcome,
}

/// A run's result, or its first error.
#[derive(Default)]
struct Outcome(Mutex<Option<Result<u64, String>>>);

impl Outcome {
    fn report(&self, r: Result<u64, String>) {
        if let Ok(mut o) = self.0.lock() {
            // The first error stays.
            if !matches!(*o, Some(Err(_))) {
                *o = Some(r);
            }
        }
    }

    fn take(&self) -> Result<Option<Result<u64, String>>, String> {
        Ok(self.0.lock().map_err(|e| e.to_string())?.take())
    }
}

impl<P: Program> Cx<P::Msg> for ASystem<P> {
    fn send(&self, to: usize, msg: P::Msg) {
        match self.actors.get().and_then(|a| a.get(to)) {
            Some(addr) => addr.send(move |a| P::handle(a.me, &mut a.state, msg, &*a.system)),
            None => self.outcome.report(Err(format!("no actor {to}"))),
        }
    }
    fn done(&self, result: u64) {
        self.outcome.report(Ok(result));
    }
}

/// An actor as [`Layer::Arc`] keeps it: the cache lines of its state are its own (as a tokio
/// task's are), so that actors on different workers do not share lines.
type ActorRef<P> = Arc<Padded<P>>;
type Padded<P> = CachePadded<OActor<P>>;

struct OActor<P: Program> {
    me: usize,
    system: Arc<OSystem<P>>,
    state: ColorCell<P::State>,
}

/// What every actor reaches: the others (weak, so that actors do not keep each other alive)
/// and the outcome. A message takes a strong reference to its one recipient only: a count
/// shared by every message would be a cache line every worker writes.
struct OSystem<P: Program> {
    actors: OnceLock<Box<[Weak<Padded<P>>]>>,
    outcome: Outcome,
}

impl<P: Program> Cx<P::Msg> for OSystem<P> {
    fn send(&self, to: usize, msg: P::Msg) {
        match self.actors.get().and_then(|a| a.get(to)).and_then(Weak::upgrade) {
            Some(actor) => ochre::post(actor.state.color(), move || deliver(actor, msg)),
            None => self.outcome.report(Err(format!("no actor {to}"))),
        }
    }
    fn done(&self, result: u64) {
        self.outcome.report(Ok(result));
    }
}

fn deliver<P: Program>(actor: ActorRef<P>, msg: P::Msg) {
    let OActor { me, system, state } = &**actor;
    if let Err(e) = state.with(|s| P::handle(*me, s, msg, &**system)) {
        system.outcome.report(Err(e.to_string()));
    }
}

/// A run of `rt` whose first event, of `color`, sends the program's first messages through
/// `system`.
fn start_run<M: Send + 'static>(
    rt: &Runtime,
    color: Color,
    system: Arc<impl Cx<M> + Send + Sync + 'static>,
    start: Vec<(usize, M)>,
) -> Result<ochre::RunReport, ochre::Error> {
    rt.run(color, move || {
        for (to, msg) in start {
            system.send(to, msg);
        }
    })
}

/// Runs `prog` on `rt` through `layer`, actor `i` of color `colors(i)`. Returns messages per
/// second.
pub fn run_ochre<P: Program>(
    rt: &Runtime,
    prog: &P,
    layer: Layer,
    colors: &dyn Fn(usize) -> Color,
) -> Result<f64, String> {
    let start = prog.start();
    let (report, outcome) = match layer {
        Layer::Addr => {
            let system =
                Arc::new(ASystem::<P> { actors: OnceLock::new(), outcome: Outcome::default() });
            let addrs = (prog.actors().into_iter().enumerate())
                .map(|(me, state)| {
                    rt.actor(colors(me), AActor { me, system: system.clone(), state })
                })
                .collect();
            let _ = system.actors.set(addrs);
            let report = start_run(rt, colors(0), system.clone(), start);
            // The actors (and the system they hold) live until the runtime is dropped: stopping
            // them here would be a run of its own, whose stops (a message to every color at
            // once) would move colors before the next run.
            (report, system.outcome.take()?)
        }
        Layer::Arc => {
            let system =
                Arc::new(OSystem::<P> { actors: OnceLock::new(), outcome: Outcome::default() });
            let actors: Vec<ActorRef<P>> = (prog.actors().into_iter().enumerate())
                .map(|(me, s)| {
                    let state = ColorCell::new(colors(me), s);
                    Arc::new(CachePadded::new(OActor { me, system: system.clone(), state }))
                })
                .collect();
            let _ = system.actors.set(actors.iter().map(Arc::downgrade).collect());
            let report = start_run(rt, colors(0), system.clone(), start);
            (report, system.outcome.take()?)
        }
    };
    let report = report.map_err(|e| e.to_string())?;
    if std::env::var("OCHRE_ACTORS_STATS").is_ok() {
        for (w, st) in report.workers.iter().enumerate() {
            eprintln!("  {}", crate::harness::worker_line(w, st));
        }
    }
    if let Some(p) = report.panics.first() {
        return Err(format!("handler of color {} panicked: {}", p.color, p.message));
    }
    verify(prog, outcome.ok_or("no result")??, report.elapsed)
}

/// The probes' comparison (`examples/*_probe.rs`): `prog` on ochre with plain colors, on ochre
/// with colors chosen by hand (each on a fresh runtime from `build`), and on a tokio-mt runtime
/// of two workers, interleaved by [`measure_case`] (a warm-up, then `reps` samples each); the
/// medians, in that order (messages per second).
pub fn probe_medians<P: Program>(
    prog: &P,
    reps: usize,
    build: impl Fn() -> Runtime,
) -> Result<[f64; 3], String> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .map_err(|e| e.to_string())?;
    let build = &build;
    let systems = vec![
        System::new("ochre", || run_ochre(&build(), prog, Layer::Addr, &plain_color)),
        System::new("ochre-hand", || {
            let rt = build();
            let c = hand_colors(&rt, prog);
            run_ochre(&rt, prog, Layer::Addr, &|i| c[i])
        }),
        System::new("tokio-mt", || run_tokio(prog, &[tokio.handle().clone()], |_| 0)),
    ];
    let mut report = BenchReport::new("probe", "");
    measure_case(&mut report, "probe", 2, "msg/s", reps, systems);
    let median = |name: &str| {
        report
            .rows
            .iter()
            .find(|r| r.system == name)
            .map(|r| r.median)
            .ok_or_else(|| format!("{name} failed: {}", report.notes.join("; ")))
    };
    Ok([median("ochre")?, median("ochre-hand")?, median("tokio-mt")?])
}

/// [`run_ochre`] with plain colors, or colors chosen by hand.
fn on_ochre<P: Program>(rt: &Runtime, prog: &P, layer: Layer, hand: bool) -> Result<f64, String> {
    if hand {
        let colors = hand_colors(rt, prog);
        run_ochre(rt, prog, layer, &|i| colors[i])
    } else {
        run_ochre(rt, prog, layer, &plain_color)
    }
}

// ---------------------------------------------------------------------------------------------
// tokio: an actor is a task reading an unbounded mailbox.

/// A mailbox; `None` stops the actor.
type Mailbox<M> = UnboundedSender<Option<M>>;

/// Longest a tokio run may take before it counts as lost.
const TIMEOUT: Duration = Duration::from_secs(60);

struct TokioCx<'a, M> {
    mailboxes: &'a [Mailbox<M>],
    done: &'a std::sync::mpsc::SyncSender<u64>,
}

impl<M> Cx<M> for TokioCx<'_, M> {
    fn send(&self, to: usize, msg: M) {
        // A closed mailbox loses the message; the result check catches it.
        let _ = self.mailboxes[to].send(Some(msg));
    }
    fn done(&self, result: u64) {
        let _ = self.done.try_send(result);
    }
}

async fn tokio_actor<P: Program>(
    me: usize,
    mut state: P::State,
    mut rx: UnboundedReceiver<Option<P::Msg>>,
    mailboxes: Arc<[Mailbox<P::Msg>]>,
    done: std::sync::mpsc::SyncSender<u64>,
) {
    let cx = TokioCx { mailboxes: &mailboxes, done: &done };
    while let Some(Some(msg)) = rx.recv().await {
        P::handle(me, &mut state, msg, &cx);
    }
}

/// Runs `prog` with actor `i` a task of `rts[rt_of(i)]`. Returns messages per second (from the
/// first spawn to the result).
pub fn run_tokio<P: Program>(
    prog: &P,
    rts: &[tokio::runtime::Handle],
    rt_of: impl Fn(usize) -> usize,
) -> Result<f64, String> {
    let states = prog.actors();
    let (senders, receivers): (Vec<_>, Vec<_>) = states.iter().map(|_| unbounded_channel()).unzip();
    let mailboxes: Arc<[Mailbox<P::Msg>]> = senders.into();
    let (done, result) = std::sync::mpsc::sync_channel(1);
    let t = Instant::now();
    let tasks: Vec<_> = (states.into_iter().zip(receivers).enumerate())
        .map(|(i, (s, rx))| {
            rts[rt_of(i) % rts.len()].spawn(tokio_actor::<P>(
                i,
                s,
                rx,
                mailboxes.clone(),
                done.clone(),
            ))
        })
        .collect();
    for (to, msg) in prog.start() {
        let _ = mailboxes[to].send(Some(msg));
    }
    let got = result.recv_timeout(TIMEOUT);
    let elapsed = t.elapsed();
    for m in mailboxes.iter() {
        let _ = m.send(None);
    }
    rts[0].block_on(async {
        for t in tasks {
            let _ = t.await;
        }
    });
    verify(prog, got.map_err(|_| format!("no result within {TIMEOUT:?}"))?, elapsed)
}

/// Runs `prog` on one current-thread runtime per pinned thread, actors partitioned by
/// [`Program::hand_worker`].
pub fn tokio_ct<P: Program>(prog: &P, workers: usize) -> Result<f64, String> {
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        let mut stops = Vec::new();
        for i in 0..workers {
            let (handle_tx, handle_rx) = std::sync::mpsc::channel();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            s.spawn(move || {
                peers::pin_as(i);
                match tokio::runtime::Builder::new_current_thread().build() {
                    Ok(rt) => {
                        let _ = handle_tx.send(Ok(rt.handle().clone()));
                        rt.block_on(async {
                            let _ = stopped.await;
                        });
                    }
                    Err(e) => {
                        let _ = handle_tx.send(Err(e.to_string()));
                    }
                }
            });
            handles.push(handle_rx.recv().map_err(|e| e.to_string()).and_then(|h| h));
            stops.push(stop);
        }
        let result = handles
            .into_iter()
            .collect::<Result<Vec<_>, String>>()
            .and_then(|rts| run_tokio(prog, &rts, |i| prog.hand_worker(i, workers)));
        for stop in stops {
            let _ = stop.send(());
        }
        result
    })
}

// ---------------------------------------------------------------------------------------------
// Measuring.

/// Suffix of the busy-CPU cases.
const BUSY: &str = " busy";

/// Runs `f` while a thread pinned as worker `busy` spins (if any): the runtime's worker there
/// shares its CPU with a program that never sleeps.
pub fn with_busy_cpu<T>(busy: Option<usize>, f: impl FnOnce() -> T) -> T {
    let Some(worker) = busy else { return f() };
    let (stop, started) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        s.spawn(|| {
            peers::pin_as(worker);
            started.store(true, Ordering::Release);
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..1024 {
                    std::hint::spin_loop();
                }
            }
        });
        while !started.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        // Stops the spinner however `f` ends: a panic unwinding through the scope would
        // otherwise wait for the spinner forever.
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = Stop(&stop);
        f()
    })
}

/// Measures one program, quiet and busy, on every system, or, given `configs`, on ochre built
/// with each of those (named) configurations instead.
fn measure<P: Program>(
    report: &mut BenchReport,
    opts: &Options,
    workers: usize,
    configs: Option<&[(String, Config)]>,
    (name, size): (&str, u64),
    make: impl Fn(u64) -> P,
) {
    let selected = std::env::var("OCHRE_ACTORS").map_or(true, |only| {
        only.split(',').map(str::trim).any(|p| !p.is_empty() && name.starts_with(p))
    });
    if !selected {
        return;
    }
    let tmt = peers::tokio_multi_thread(workers);
    let make = &make;
    for busy in [false, true] {
        let case = if busy { format!("{name}{BUSY}") } else { name.to_string() };
        let spin = busy.then_some(workers - 1);
        let ochre_on = |config: Option<Config>, layer: Layer, hand: bool| {
            let build = move || match &config {
                Some(c) => Runtime::builder().workers(workers).config(c.clone()).build(),
                None => Runtime::builder().workers(workers).build(),
            };
            move || {
                with_busy_cpu(spin, || {
                    peers::on_fresh_runtime(&build, size, |rt, n| {
                        on_ochre(rt, &make(n), layer, hand)
                    })
                })
            }
        };
        let ochre = |config: Option<Config>, hand: bool| ochre_on(config, Layer::Addr, hand);
        let tmt = &tmt;
        if let Some(configs) = configs {
            let systems = configs
                .iter()
                .map(|(n, c)| System::new(n.clone(), ochre(Some(c.clone()), false)))
                .collect();
            if std::env::var("OCHRE_ACTORS_MODE").map_or(!busy, |m| (m == "busy") == busy) {
                measure_case(report, &case, workers, "msg/s", opts.reps, systems);
            }
            continue;
        }
        let systems = vec![
            System::new("ochre", ochre(None, false)),
            System::new("ochre-arc", ochre_on(None, Layer::Arc, false)),
            System::new("ochre-static", ochre(Some(Config::default().follow(false)), false)),
            System::new("ochre-nosteal", ochre(Some(Config::default().steal(Steal::Off)), false)),
            System::new("ochre-hand", ochre(None, true)),
            System::new(
                "ochre-pinned",
                ochre(Some(Config::default().unpin_when_shared(false)), false),
            ),
            System::new("ochre-unpinned", move || {
                let build = move || Runtime::builder().workers(workers).pin(false).build();
                with_busy_cpu(spin, || {
                    peers::on_fresh_runtime(&build, size, |rt, n| {
                        on_ochre(rt, &make(n), Layer::Addr, false)
                    })
                })
            }),
            System::new("tokio-mt", move || {
                let rt = tmt.as_ref().map_err(|e| e.clone())?;
                with_busy_cpu(spin, || run_tokio(&make(size), &[rt.handle().clone()], |_| 0))
            }),
            System::new("tokio-ct", move || with_busy_cpu(spin, || tokio_ct(&make(size), workers))),
        ];
        let mut systems = systems;
        if let Ok(only) = std::env::var("OCHRE_ACTORS_SYSTEMS") {
            systems.retain(|s| only.split(',').any(|n| n.trim() == s.name));
        }
        if let Ok(only) = std::env::var("OCHRE_ACTORS_MODE") {
            if (only == "busy") != busy {
                continue;
            }
        }
        measure_case(report, &case, workers, "msg/s", opts.reps, systems);
    }
}

/// Runs the actor benchmark.
pub fn run(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(
        "actors",
        "Savina actor programs, one plain color per actor: messages/s (higher is better); \
         'busy': a thread spins on the last worker's CPU.",
    );
    let cpus = peers::process_cpus().len().max(1);
    let w = opts.workers.iter().copied().max().unwrap_or(2).min(cpus).max(1);
    programs(&mut report, opts, w, None);
    report.notes.push(format!(
        "{w} workers; busy: a thread spins on CPU {} (worker {}'s) during every sample of \
         every system",
        peers::cpu_for(w - 1).map_or("?".to_string(), |c| c.to_string()),
        w - 1
    ));
    checks(&mut report);
    report
}

/// What is done with each program of the suite ([`suite`]): given its name, its size (the
/// argument of `make`) and how to make it at a size. Public so that probes outside the crate
/// (`examples/mailbox_probe.rs`) run the benchmark's own programs.
pub trait Visit {
    /// Called once per program: `make(size)` builds it.
    fn visit<P: Program>(&mut self, name: &str, size: u64, make: impl Fn(u64) -> P);
}

/// The programs and their sizes (quick sizes, or four times larger), each given to `v`: the one
/// table that the benchmark ([`programs`]) and one-sample measures ([`ochre_sample`]) read.
pub fn suite(quick: bool, v: &mut impl Visit) {
    let k = if quick { 1 } else { 4 };
    v.visit("pingpong", 600_000 * k, |n| PingPong { n });
    v.visit("counting", 1_000_000 * k, |n| Counting { n });
    let ring = |tokens| move |hops| Ring { actors: 1000, tokens, hops };
    v.visit("thread ring, 1 token", 300_000 * k, ring(1));
    v.visit("thread ring, 64 tokens", 1_000_000 * k, ring(64));
    v.visit("big", 3_000 * k, |pings| Big { actors: 100, pings });
    let fj = |work_ns| move |per_actor| ForkJoin { actors: 60, per_actor, work_ns };
    v.visit("fork-join empty", 12_000 * k, fj(0));
    v.visit("fork-join 1 us", 1_000 * k, fj(1000));
    v.visit("chameneos", 200_000 * k, |meetings| Chameneos { creatures: 40, meetings });
    v.visit("bank", 300_000 * k, |transactions| Bank {
        accounts: 100,
        transactions,
        opening: 10_000,
    });
}

/// Measures every program (all of them, or those `OCHRE_ACTORS` names) on `w` workers: on every
/// system, or on ochre with each of `configs` (quiet only, unless `OCHRE_ACTORS_MODE=busy`).
pub fn programs(
    r: &mut BenchReport,
    opts: &Options,
    w: usize,
    configs: Option<&[(String, Config)]>,
) {
    struct Measure<'a> {
        r: &'a mut BenchReport,
        opts: &'a Options,
        w: usize,
        configs: Option<&'a [(String, Config)]>,
    }
    impl Visit for Measure<'_> {
        fn visit<P: Program>(&mut self, name: &str, size: u64, make: impl Fn(u64) -> P) {
            measure(self.r, self.opts, self.w, self.configs, (name, size), make);
        }
    }
    suite(opts.quick, &mut Measure { r, opts, w, configs });
}

/// One sample of program `name` (quick size if `quick`) as the benchmark measures system
/// `ochre` quiet: plain colors, on a fresh runtime of `workers` workers under `config`, warmed
/// up by a run of an eighth of the size. Messages per second; `None` for an unknown name.
/// (`ochre sim validate` compares the simulator with it.)
pub fn ochre_sample(
    name: &str,
    workers: usize,
    config: &Config,
    quick: bool,
) -> Option<Result<f64, String>> {
    struct Sample<'a> {
        name: &'a str,
        workers: usize,
        config: &'a Config,
        out: Option<Result<f64, String>>,
    }
    impl Visit for Sample<'_> {
        fn visit<P: Program>(&mut self, name: &str, size: u64, make: impl Fn(u64) -> P) {
            if name != self.name || self.out.is_some() {
                return;
            }
            let (workers, config) = (self.workers, self.config.clone());
            let build = move || Runtime::builder().workers(workers).config(config.clone()).build();
            self.out = Some(peers::on_fresh_runtime(&build, size, |rt, n| {
                on_ochre(rt, &make(n), Layer::Addr, false)
            }));
        }
    }
    let mut v = Sample { name, workers, config, out: None };
    suite(quick, &mut v);
    v.out
}

/// Bytes of the closure that carries a message of program `name` to its recipient on ochre
/// (`ASystem::send`'s `addr.send(..)`: the recipient's tagged address, one word, and the
/// message, the fields of this tuple; `OSystem`'s `Arc` and message are as large); `None` for
/// an unknown name. Closures of at most 24 bytes
/// travel inside the message to another worker (`Config::inline_posts`); `ochre sim` models
/// each program's from its own table, which a test compares with this.
pub fn closure_bytes(name: &str) -> Option<usize> {
    struct Size<'a> {
        name: &'a str,
        out: Option<usize>,
    }
    impl Visit for Size<'_> {
        fn visit<P: Program>(&mut self, name: &str, _size: u64, _make: impl Fn(u64) -> P) {
            if name == self.name {
                self.out = Some(std::mem::size_of::<(usize, P::Msg)>());
            }
        }
    }
    let mut v = Size { name, out: None };
    suite(true, &mut v);
    v.out
}

/// The goals, on paired ratios (median over repetitions of the two systems' quotient in that
/// repetition).
fn checks(report: &mut BenchReport) {
    // Named by their quiet cases, also where only the busy half ran (`OCHRE_ACTORS_MODE`).
    let mut programs: Vec<String> = Vec::new();
    for r in &report.rows {
        let program = r.case.strip_suffix(BUSY).unwrap_or(&r.case);
        if !programs.iter().any(|p| p == program) {
            programs.push(program.to_string());
        }
    }
    let by_system = |a: &str, b: &str, suffix: &str| -> Vec<(String, f64)> {
        let cases = programs.iter().map(|p| format!("{p}{suffix}"));
        cases.filter_map(|c| report.paired_ratio(a, b, &c).map(|r| (c, r))).collect()
    };
    let quiet = by_system("ochre", "tokio-mt", "");
    let busy = by_system("ochre", "tokio-mt", BUSY);
    let hand = by_system("ochre", "ochre-hand", "");
    let mean = |v: &[(String, f64)]| geomean(&v.iter().map(|(_, r)| *r).collect::<Vec<_>>());
    // A half not measured (or a system left out) reads "-", not NaN.
    let shown = |v: &[(String, f64)]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            format!("{:.3}", mean(v))
        }
    };
    let variants = ["ochre-static", "ochre-nosteal", "ochre-pinned", "ochre-unpinned"].map(|v| {
        let (q, b) = (by_system(v, "tokio-mt", ""), by_system(v, "tokio-mt", BUSY));
        format!("{v} {} quiet, {} busy", shown(&q), shown(&b))
    });
    for (case, r) in &quiet {
        report.check(format!("[{case}] ochre / tokio-mt >= 1.0 (paired)"), *r, *r >= 1.0);
    }
    for (case, r) in &busy {
        report.check(format!("[{case}] ochre / tokio-mt >= 0.7 (paired)"), *r, *r >= 0.7);
    }
    for (case, r) in &hand {
        report.check(format!("[{case}] ochre / ochre-hand >= 0.7 (paired)"), *r, *r >= 0.7);
    }
    let (q, b) = (mean(&quiet), mean(&busy));
    if !quiet.is_empty() {
        let goal = format!(
            "quiet: geometric mean of ochre / tokio-mt (paired) over {} programs >= 2.0",
            quiet.len()
        );
        report.check(goal, q, q >= 2.0);
    }
    if !busy.is_empty() {
        let goal = format!(
            "busy: geometric mean of ochre / tokio-mt (paired) over {} programs >= 1.0",
            busy.len()
        );
        report.check(goal, b, b >= 1.0);
    }
    report.notes.push(format!(
        "geometric means of paired ratios to tokio-mt: ochre {} quiet, {} busy; {}",
        shown(&quiet),
        shown(&busy),
        variants.join("; ")
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `prog` on every system at 2 workers; each run checks its own result.
    fn runs_everywhere<P: Program>(prog: P) {
        let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
        run_ochre(&rt, &prog, Layer::Addr, &plain_color).unwrap();
        run_ochre(&rt, &prog, Layer::Arc, &plain_color).unwrap();
        on_ochre(&rt, &prog, Layer::Addr, true).unwrap();
        let fixed = Runtime::builder()
            .workers(2)
            .pin(false)
            .config(Config::default().follow(false))
            .build()
            .unwrap();
        run_ochre(&fixed, &prog, Layer::Addr, &plain_color).unwrap();
        let tmt = peers::tokio_multi_thread(2).unwrap();
        run_tokio(&prog, &[tmt.handle().clone()], |_| 0).unwrap();
        tokio_ct(&prog, 2).unwrap();
    }

    #[test]
    fn every_program_runs_and_checks_its_result_on_every_system() {
        runs_everywhere(PingPong { n: 1_000 });
        runs_everywhere(Counting { n: 2_000 });
        runs_everywhere(Ring { actors: 100, tokens: 1, hops: 1_000 });
        runs_everywhere(Ring { actors: 100, tokens: 8, hops: 2_000 });
        runs_everywhere(Big { actors: 10, pings: 100 });
        runs_everywhere(ForkJoin { actors: 6, per_actor: 100, work_ns: 0 });
        runs_everywhere(ForkJoin { actors: 6, per_actor: 20, work_ns: 1_000 });
        runs_everywhere(Chameneos { creatures: 7, meetings: 500 });
        runs_everywhere(Bank { accounts: 10, transactions: 2_000, opening: 10_000 });
    }

    #[test]
    fn one_sample_runs_a_named_program_and_only_a_known_one() {
        let config = Config::default();
        assert!(ochre_sample("no such program", 1, &config, true).is_none());
        let rate = ochre_sample("pingpong", 1, &config, true).unwrap().unwrap();
        assert!(rate > 0.0);
    }

    #[test]
    fn a_wrong_result_is_an_error() {
        let d = Duration::from_millis(1);
        assert!(verify(&Counting { n: 10 }, 10, d).is_ok());
        assert!(verify(&Counting { n: 10 }, 9, d).unwrap_err().contains("expected 10"));
        // Accounts that cannot cover most debits refuse them, and the money is still all there.
        runs_everywhere(Bank { accounts: 3, transactions: 1_000, opening: 60 });
    }

    #[test]
    fn hand_colors_land_on_the_chosen_workers() {
        let rt = Runtime::builder().workers(2).pin(false).build().unwrap();
        let ring = Ring { actors: 10, tokens: 1, hops: 10 };
        let colors = hand_colors(&rt, &ring);
        let homes: Vec<usize> = colors.iter().map(|&c| rt.home_of(c)).collect();
        assert_eq!(homes, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1], "blocks; the sink with the last");
        let mut distinct = colors.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), colors.len(), "one color per actor");
    }

    #[test]
    fn checks_use_the_geometric_mean_of_paired_ratios() {
        let mut r = BenchReport::new("actors", "t");
        let fixed = |v: f64| move || Ok(v);
        // (case, ochre, ochre-static, ochre-hand, tokio-mt)
        for (case, o, s, h, t) in [
            ("a", 8.0, 4.0, 8.0, 2.0),
            ("b", 1.0, 2.0, 2.0, 1.0),
            ("a busy", 1.0, 2.0, 1.0, 2.0),
            ("b busy", 4.0, 2.0, 4.0, 2.0),
        ] {
            let systems = vec![
                System::new("ochre", fixed(o)),
                System::new("ochre-static", fixed(s)),
                System::new("ochre-hand", fixed(h)),
                System::new("tokio-mt", fixed(t)),
            ];
            measure_case(&mut r, case, 2, "msg/s", 3, systems);
        }
        checks(&mut r);
        let find = |s: &str| r.checks.iter().find(|c| c.goal.contains(s)).expect(s);
        let quiet = find("quiet: geometric mean");
        assert!((quiet.measured - 2.0).abs() < 1e-9 && quiet.held, "sqrt(4 x 1)");
        let busy = find("busy: geometric mean");
        assert!((busy.measured - 1.0).abs() < 1e-9 && busy.held, "sqrt(0.5 x 2)");
        assert!(!find("[a busy] ochre / tokio-mt").held, "0.5 < 0.7");
        assert!(find("[b] ochre / tokio-mt").held, "1.0");
        let hand = find("[b] ochre / ochre-hand");
        assert!(hand.measured == 0.5 && !hand.held);
        assert_eq!(r.checks.len(), 2 + 2 + 2 + 2);
        assert!(r.notes.iter().any(|n| n.contains("ochre-static 2.000 quiet, 1.000 busy")));
    }

    #[test]
    fn a_busy_half_alone_is_judged_and_the_missing_half_reads_as_a_dash() {
        let mut r = BenchReport::new("actors", "t");
        for (case, o, t) in [("a busy", 1.0, 2.0), ("b busy", 4.0, 2.0)] {
            let fixed = |v: f64| move || Ok(v);
            let systems = vec![System::new("ochre", fixed(o)), System::new("tokio-mt", fixed(t))];
            measure_case(&mut r, case, 2, "msg/s", 3, systems);
        }
        checks(&mut r);
        let busy = r.checks.iter().find(|c| c.goal.contains("busy: geometric mean"));
        assert!(busy.is_some_and(|c| (c.measured - 1.0).abs() < 1e-9), "{:?}", r.checks);
        assert!(!r.checks.iter().any(|c| c.goal.contains("quiet")));
        let note = r.notes.iter().find(|n| n.contains("geometric means")).unwrap();
        assert!(note.contains("ochre - quiet, 1.000 busy"), "{note}");
        assert!(!note.contains("NaN"), "{note}");
    }
}
