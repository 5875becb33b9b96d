//! A worker's run queue, organized by color, and the protocol that lends colors between workers.
//!
//! Each worker owns one [`ColorQueue`] and no other thread touches it. Pending events are kept per
//! color (a FIFO per color), and colors with pending events wait in a ready list, so that all
//! pending events of a color can move to another worker together.
//!
//! ## Leases
//!
//! Every color has a home worker (`color::home_of`). All posts to a color are sent to its home,
//! except posts made on a worker that holds the color, which are queued right there. A home may
//! *lend* a color to a thief (stealing); the slot's lease records it:
//!
//! * `Local`: at home, runs here.
//! * `Away { to, outstanding }` (at the home): lent to `to`. Events that reach the home are
//!   forwarded to `to`; `outstanding` counts events sent to `to` (the loan plus forwards) that `to`
//!   has not yet reported run.
//! * `Guest { home, received }` (at the thief): held on loan; `received` counts events received
//!   from `home` since this slot was created.
//!
//! When a guest slot is empty at the end of a turn, the guest removes it and sends
//! `Return { ran: received }` home; the home subtracts `ran` from `outstanding` and takes the color
//! back (`Local`) when it reaches zero. If forwards were in flight, `outstanding` stays above zero,
//! the forwards recreate a guest slot on arrival, and a later `Return` settles them.
//!
//! Why this is correct (messages between two workers arrive in the order sent, `inbox`):
//!
//! * **Exclusion.** The home runs the color only while `Local`, which it becomes only when every
//!   event it sent to the guest has been reported run by a guest that then held no slot; forwards
//!   stop as soon as it is `Local`. So the guest holds no event and runs nothing of the color.
//!   A guest runs the color only while it holds a slot, and a home that lent it holds no events.
//! * **Order per poster.** A poster is one event (or one outside thread). Which path a post takes
//!   (local queue, or to the home) depends only on whether the posting worker holds the color,
//!   which cannot change while one event runs; so all posts of one poster to one color take the
//!   same FIFO path: the color's queue here, or the poster's channel to the home and then, in the
//!   order the home received them, the home's channel to the guest. A loan moves a prefix of the
//!   color's queue ahead of anything forwarded later, on that same channel.
//! * **Exactly once.** Events move by value, from queue to message to queue; each is popped once.
//!
//! ## Recalls
//!
//! A loan goes home when its queue empties, and a borrowed color is never lent on, so a color
//! that feeds itself (a loop posting its next step) stays with its borrower however long the
//! borrower's line and however idle its home. An idle home may *recall* it
//! ([`ColorQueue::recall`], the policy's choice: `steal::worth_recalling`): its lease is marked
//! `recalled` (`Lease::Away`), posts to the color stop being forwarded and wait in the slot
//! unscheduled ([`Dest::Parked`]), and a `Recall` goes to the borrower behind every forward sent
//! before it.
//! The borrower, routing it, gives the color back if it waits there beside another color, not
//! running and with no posts held by or for it ([`ColorQueue::give_back`]): its slot goes, and
//! a `GiveBack` carries the events left, with the count of events it received; else it answers
//! `Kept`. At the home, a `GiveBack` makes the color `Local` with the events given back ahead of
//! those parked ([`ColorQueue::given_back`]); a `Kept` forwards the parked ones and the loan
//! goes on ([`ColorQueue::kept`]). A `Return` that crossed the recall (the borrower emptied the
//! color first) brings it home as always, with the parked posts scheduled; the borrower, holding
//! no slot when the recall comes, answers `Kept`, which then finds nothing to do.
//!
//! A color moved for good (`follow`) is recalled the same way (its moves are listed with the
//! loans); its borrower gives it back only with a backlog to take along (a resident came for
//! its traffic, which the recall does not know of), and a borrower that finds the color waiting
//! alone keeps the recall for its next turn's end (`steal::recall_waits_a_turn`) before it
//! answers `Kept`. A moved color given back counts as a return for the hysteresis of moves.
//!
//! * **Exclusion.** The home runs nothing of the color until the `GiveBack`, which the borrower
//!   sends as it drops its slot; every forward was sent before the recall on the one channel, so
//!   the borrower has received them all (the counts agree: `outstanding` is settled), and no
//!   forward follows.
//! * **Order per poster.** The events given back were posted before anything parked (each
//!   poster's posts reach the home, or the borrower's queue, in order), and go first; posts
//!   made at the borrower after it gave the color back go to the home behind the `GiveBack`
//!   (a hand-over: `Msg::hands_over_a_color`).
//!
//! ## Order per poster color
//!
//! Events of one color posted by the events of another color run in the order posted, across
//! moves and loans of either (an actor's messages to another actor arrive in order). Two rules:
//!
//! * **Hand-over after the posts.** A message that hands a color to another worker (`Move`,
//!   `Grant`, `Return`) is pushed only after everything the sender had buffered for other workers
//!   ([`Msg::hands_over_a_color`](crate::message::Msg::hands_over_a_color)). Inboxes are one stack
//!   each, one modification order: the color's later posts, made over there after it took the
//!   hand-over, reach any inbox after its earlier ones.
//! * **A fence on guests.** Posts to a color go to its home, which forwards them to the guest,
//!   except posts made on the guest itself, which stay there: those could overtake a post of the
//!   same poster color still on its way through the home (made before the guest got the color,
//!   or before the poster color came to this worker). So each slot records when its color
//!   arrived (`arrived`, a counter of arrivals on this worker), and a guest slot a fence: posts
//!   to it from a color that arrived after its last sync are *held* aside, and the guest sends
//!   the home a `Sync`; the home answers `Synced` behind everything it received before, so when
//!   the answer comes every earlier post of those colors has been forwarded ahead of it, and
//!   their held posts join the queue (the others wait for a later `Sync`: every held post was
//!   made by a color that arrived after the last sync, so a poster's posts never pass its held
//!   ones). Home colors need no fence: every post to them comes through their home's inbox or is
//!   made here; their slot's fence is *open* (synced at the last possible arrival, so it admits
//!   every post), so that `route` takes one path for both kinds, with no branch on which it is.
//! * **Held posts keep both colors here.** A guest with held posts, and a color whose posts are
//!   held here (`holding`), do not leave (no move, loan or return) until those posts joined a
//!   queue: the poster's later posts, made elsewhere and forwarded here, would pass them.
//!
//! ## Turns: the line, and backlogs
//!
//! Colors take turns in the order they became ready (the *line*, a FIFO of colors; but see
//! "Turns: newest first" for colors a handler's post made ready), each turn
//! up to `Config::turn_budget` events of one color. With `backlog_turns`
//! ([`with_backlog_turns`](ColorQueue::with_backlog_turns), `Config::backlog_turns`) a color with
//! a *backlog of long events* ([`BACKLOG_TURN_EVENTS`] queued or more, and
//! [`BACKLOG_TURN_SHARE`] times the average waiting color's, each measured at
//! [`BACKLOG_TURN_EVENT_NS`] or more, or estimated so from this worker's average while the color
//! was not timed here), waiting in a line of at least [`BACKLOG_TURN_WAIT_NS`] of work, also
//! takes every other turn, ahead of the line: the
//! colors listed so wait in a list of their own (`ahead`), and a turn from that list
//! alternates with a turn from the line's front. Why: a user's job posts its chunks, one color
//! each, and each chunk posts its result to one collecting color; the collector joins the line
//! behind every chunk queued there, and a line in color order ran it only after the last chunk
//! (a word count of 196 chunks of 0.5 ms, merges of 0.34 ms into the collector's map: every
//! merge after the 58th millisecond, on one worker, the other idle from then on: 114-120 ms
//! where the work is 160 ms of CPU over two workers; 81-83 ms with backlog turns). A collector
//! whose events queue up is the job's serial part, the critical path, and what runs it early
//! shortens the whole. The line still gets every other turn (fair in turns, as the line is: a
//! color waiting there waits at most twice as many turns as in the line alone, but a listed
//! color's turns are of long events, up to the turn's budget of them), a color whose post was
//! urgent still runs first, and cheap colors never jump (an actor's mailbox of 100 ns messages
//! is served by the line as before, and the jump's search of the line, a few nanoseconds a
//! waiting color, stays small beside the backlog's work). Stealing's view of what runs next
//! is the line's front (`first_backlogged`, `steal::defers`): a listed color's turn may come
//! first. Off by default (`Config::backlog_turns`): in some periods of the study's host (minutes
//! at a time, every process alike) the same word count took 157-175 ms with it against 114-125
//! without, its merges, now beside the other worker's counting, freeing that worker's strings
//! into its glibc arena while it allocated there (the counting took 3x as long); with integer
//! keys (28-30 ms against 35) or jemalloc (64-66 against 66-72) it gained in every period.
//!
//! ## Turns: newest first
//!
//! With `Config::newest_first` ([`with_newest_first`](ColorQueue::with_newest_first), on by
//! default), a color at home here that a handler's post (here, or on another worker and
//! received here) made ready, and that never took a turn here since its slot was made, is
//! *fresh*: a new color, as a spawned task is new (a guest, lent or moved here, ran at home: the
//! simulated 64-token ring on two cores ran 13% slower with guests fresh after each move). Fresh colors take their turns newest first, ahead of the line, as a
//! work-stealing worker runs what it just spawned (rayon's and Cilk's deques, tokio's and Go's
//! LIFO slot). Why: a divide and conquer written with a color per call (each call posts its
//! halves, each half answers its parent's color) ran its tree a level at a time in line order,
//! every call of a level posted before the first of the next ran, and kept a whole level live:
//! a slot, an event queue, a join and an index entry per call, 11,000 of them for `fib(30)` with
//! leaves of `seq(10)`, past the caches (`perf`: 37% of the run loop's time on the load of the
//! next closure from a color's queue, 32% on its slot, 12% on the index's removals). Newest
//! first, it runs depth first, and keeps a call's ancestors' halves live (`fib_probe`, medians
//! of 9, in one process with the line's order: one worker 12-17 ms against 34-60; two workers
//! 1.40-1.55x). Colors that already ran (an actor, a collector, a mall) keep the line's order:
//! a collector's results wait in its queue and are taken a turn's budget at a time, where each
//! would otherwise be a turn of its own (Savina's chameneos ran 0.65-0.88x with every color a
//! handler posted to taken newest first).
//!
//! The ready list is in three parts, front to back ([`Line`]): colors with an urgent post
//! (first, as before), fresh colors newest first, and the line, which keeps its order: colors
//! that became ready otherwise (posted from outside the runtime, lent, given back, held posts
//! let in, or colors that already ran), and a color whose turn ended with events left. The
//! front is what runs next and the back what runs last, so lending from the back
//! (`lend_from_back`) still gives what this worker would run last. Fairness: after
//! [`NEWEST_STREAK_MAX`] turns taken by fresh colors, the line's front (or the oldest
//! fresh color if the line is empty) takes one ([`newest_takes_turn`]): a stream of new colors
//! does not keep the line waiting, and a color waits at most its place in line times 257 turns.
//! At most [`FRESH_MAX`] colors are fresh at once: past it the oldest goes to the back of the
//! line (a fan-out of thousands of new colors gains nothing from their order).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use slab::Slab;

use crate::color::{home_of, Placement};
use crate::follow::{self, Traffic};
use crate::message::{Loan, Task};
use crate::recur::Recurrence;
use crate::Color;

/// When an event is taken from its color's queue, the closure of the event this many places
/// behind the next one is prefetched.
/// A fan-out's closures are written in posting order (interleaved over the receivers) and read
/// color by color long after, so without it each one is a cache miss: `bench actors` at 1
/// worker, bank (a teller posting 300K transactions at once) went from 0.47 to 0.78-0.89 of
/// tokio's rate, with 47% of its time on that load before. 8 events ahead hides the miss for
/// events of tens of nanoseconds (3 did a little less on fork-join, empty items); a queue
/// shorter than that prefetches nothing (producer-consumer: no change).
pub(crate) const PREFETCH_AHEAD: usize = 8;

/// The event to prefetch when the one before `events` was taken ([`PREFETCH_AHEAD`]).
#[inline]
fn ahead(events: &VecDeque<Task>) -> Option<&Task> {
    events.get(PREFETCH_AHEAD)
}

/// Events whose room an idle slot keeps in its queue (16 bytes each: 4 KB). A color that once
/// had a large backlog (a fan-out's receivers: 12,000 queued events each in `bench actors`'
/// fork-join) gives the rest back when it goes idle, so that the idle slots kept (`recur`) do
/// not each hold their largest backlog's memory for good. Above a turn's worth of events (the
/// turn budget) and a batch's, so that a color fed batch after batch does not reallocate every
/// turn.
const KEEP_QUEUE_CAPACITY: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lease {
    Local,
    /// Lent to `to`; `moved`: for good (`follow`), not to a thief; `recalled`: its home takes
    /// it back, and posts wait here (`Dest::Parked`) until the borrower gives it back or keeps
    /// it (see "Recalls").
    Away {
        to: usize,
        outstanding: u64,
        moved: bool,
        recalled: bool,
    },
    /// Held on loan from `home`; a `resident` (moved here by `follow`) stays when its queue
    /// empties, until its traffic says it should go back. A `relieved` resident came for its
    /// home's want of CPU (`follow::relieved`): its home is asked whether that is over whenever
    /// its queue empties with no other color waiting here (`follow::goes_home`).
    Guest {
        home: usize,
        received: u64,
        resident: bool,
        relieved: bool,
    },
}

/// What a home knows of a color it lent or moved, for the policy of recalls
/// (`steal::worth_recalling`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Away {
    /// The work it sent along (ns): events lent and forwarded, not yet reported run (a loan
    /// reports when it goes home: this is what was sent, not what is left), at the color's
    /// measured cost per event.
    pub(crate) work_ns: u64,
    /// Moved for good (`follow`), not lent to a thief.
    pub(crate) moved: bool,
    /// Its measured cost per event, ns (0: not timed).
    pub(crate) event_ns: u64,
}

struct Slot {
    color: Color,
    events: VecDeque<Task>,
    /// The first `urgent` events were posted urgent (kept in posting order among themselves).
    urgent: usize,
    /// In the ready list.
    queued: bool,
    lease: Lease,
    /// Never lent (the slot is kept even when empty, to remember it).
    pinned: bool,
    /// How long a turn of this color takes, in ns (moving average of timed turns: sampled and
    /// watched; 0 until timed). What a thief would get by taking it, for cost-aware stealing.
    weight_ns: u64,
    /// How long one event of this color takes, in ns (moving average over timed turns, sampled
    /// and watched, or what a loan carried: the lender's measure, or for a color lent from a
    /// light backlog before it was timed, the lender's estimate; 0 until timed): its queued work
    /// is this times its queued events (`Steal::Backlog`).
    event_ns: u64,
    /// Who posts to the color (`follow`).
    traffic: Traffic,
    /// When the color came to this worker: [`ColorQueue::arrivals`] at its arrival (0 for a home
    /// color that never left).
    arrived: u64,
    /// A guest's fence on posts made here (see "Order per poster color").
    fence: Fence,
    /// Posts of this color held by fences here: while any, the color stays.
    holding: u32,
    /// Listed in [`ColorQueue::ahead`] (cleared when taken off it).
    listed_ahead: bool,
    /// Took a turn here since its slot was made, or came here from its home (a guest): a post
    /// to it does not make it fresh (see "Turns: newest first").
    ran: bool,
}

/// The fence of a guest slot: which posters' posts may join its queue directly, and the posts
/// held until a `Synced` says that nothing of theirs is still on its way through the home.
#[derive(Default)]
struct Fence {
    /// Posts from colors that arrived *before* this count of arrivals are in order here: one
    /// more than the count of the last sync (0: not synced since the color came; `u64::MAX`:
    /// open), so that [`admits`](Fence::admits) is one comparison.
    synced_below: u64,
    /// A `Sync` is on its way, sent at this count of arrivals.
    asked: Option<u64>,
    /// Posts waiting for a sync, in posting order.
    held: VecDeque<Held>,
    /// The latest arrival among the colors whose posts are held.
    need: u64,
}

/// A post held by a fence.
struct Held {
    task: Task,
    urgent: bool,
    /// Its poster color's arrival: a sync at or after it lets the post in.
    need: u64,
    /// Its poster color's slot (it stays while it holds posts), if a color posted it.
    poster: Option<usize>,
}

impl Fence {
    /// The fence of a color at home: it admits every post (a home's posts are in order by
    /// construction), so that a post to it takes the same path as a post to a guest
    /// ([`ColorQueue::route`]).
    fn open() -> Self {
        Fence { synced_below: u64::MAX, ..Fence::default() }
    }

    #[inline]
    fn admits(&self, arrived: u64) -> bool {
        arrived < self.synced_below
    }
}

/// A guest asks its color's home to sync (`Msg::Sync`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SyncAsk {
    pub(crate) home: usize,
    pub(crate) color: Color,
    pub(crate) epoch: u64,
}

/// Where a post went.
pub(crate) enum Route {
    /// Queued on this worker.
    Queued,
    /// The color is lent: send the event to its borrower `to` as a forward.
    Forward { to: usize, task: Task },
    /// Not held here: send the event to the color's home.
    Remote { home: usize, task: Task },
    /// The color, idle here, moves to the worker `to` that posted the event (`follow`): send it
    /// the event as the color's first.
    Move { to: usize, task: Task },
    /// Held by the guest's fence; send the `Sync` if one is asked.
    Held(Option<SyncAsk>),
}

/// Where a post goes, decided before the event is built ([`ColorQueue::route`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dest {
    /// This worker (`me`) holds the color: queue under `key`.
    Here { key: usize, me: usize },
    /// The color (slot `key`) is lent to `to`.
    Forward { key: usize, to: usize },
    /// This worker holds the color as a guest whose fence holds posts from a color that
    /// arrived at `need`.
    Held { key: usize, need: u64, me: usize },
    /// The color's home is another worker.
    Remote { home: usize },
    /// The color (slot `key`) is lent and being recalled ([`ColorQueue::recall`]): the event
    /// waits here, behind those the borrower gives back.
    Parked { key: usize, me: usize },
}

impl Dest {
    /// The worker that will run the event (barring a steal meanwhile).
    pub(crate) fn runs_on(self) -> usize {
        match self {
            Dest::Here { me, .. } | Dest::Held { me, .. } | Dest::Parked { me, .. } => me,
            Dest::Forward { to, .. } => to,
            Dest::Remote { home } => home,
        }
    }
}

/// What the end of a turn asks the worker to send.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TurnEnd {
    /// A borrowed color goes back home.
    Return(Returned),
    /// A color at home here, idle, moves to worker `to` for good (`follow`): send it a `Move`
    /// with no event.
    Push { to: usize, color: Color },
}

/// What a color whose queue emptied is, for the policy asked where it goes
/// ([`ColorQueue::end_turn_shedding`]'s `shed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shed {
    /// A resident whose traffic moved on (`follow::gives_back`).
    pub(crate) moved_on: bool,
    /// A stolen color.
    pub(crate) loan: bool,
    /// A resident that came for its home's want of CPU ([`Lease::Guest`]).
    pub(crate) relieved: bool,
}

/// A guest slot was emptied: tell the home how many of its events ran.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Returned {
    pub(crate) home: usize,
    pub(crate) color: Color,
    pub(crate) ran: u64,
    /// A resident given back (its traffic moved on), not a loan ending.
    pub(crate) resident: bool,
}

/// A counting filter of the guest colors a worker holds (a one-word Bloom filter with a counter
/// per bit). With colors that follow their messages a worker nearly always holds a resident or
/// two, and a plain count of guests then sent every post to another worker through a hash
/// lookup (producer-consumer at 2 workers, the producer moved to worker 1: 2.5% slower).
struct GuestFilter {
    bits: u64,
    counts: [u32; 64],
}

impl Default for GuestFilter {
    fn default() -> Self {
        GuestFilter { bits: 0, counts: [0; 64] }
    }
}

impl GuestFilter {
    /// No guest is held here.
    #[inline]
    fn is_empty(&self) -> bool {
        self.bits == 0
    }

    /// False if `color` is surely not held; true if it may be.
    #[inline]
    fn may_hold(&self, color: Color) -> bool {
        self.bits & (1 << bucket(color)) != 0
    }

    fn insert(&mut self, color: Color) {
        let b = bucket(color);
        self.counts[b] += 1;
        self.bits |= 1 << b;
    }

    fn remove(&mut self, color: Color) {
        let b = bucket(color);
        self.counts[b] -= 1;
        if self.counts[b] == 0 {
            self.bits &= !(1 << b);
        }
    }
}

/// `part` thousandths of `n` colors, one at least.
fn part_of(n: usize, part: u32) -> usize {
    (n.saturating_mul(part as usize) / 1000).max(1)
}

/// A moving average of costs (ns; 0: none yet) with `new`.
fn cost_average(old: u64, new: u64) -> u64 {
    if old == 0 {
        new.max(1)
    } else {
        // A turn preempted by another thread (a CPU shared with another process) times the
        // preemption, milliseconds: a sample counts for at most 4x the estimate, so one such
        // turn does not make every light color look worth stealing.
        (old * 3 + new.min(old.saturating_mul(4))) / 4
    }
}

/// Buckets of the guest filter (`GuestFilter`): one bit each.
const GUEST_BUCKETS: usize = 64;

/// One of 64 buckets for `color`: its bit in the guest filter.
#[inline]
fn bucket(color: Color) -> usize {
    color.table_index(GUEST_BUCKETS)
}

/// Entries of the cache of recent routes (`ColorQueue::recent`): 4 KB. A ring of a thousand
/// actors on two workers passes each worker's tokens through about 500 colors; with 64 entries
/// nearly every hop missed and paid the hash lookup and `home_of`.
const RECENT: usize = 1024;

/// `color`'s entry in the cache of recent routes.
#[inline]
fn recent_entry(color: Color) -> usize {
    color.table_index(RECENT)
}

/// Waiting colors [`ColorQueue::has_backlog`] looks at, from the back of the ready list: a
/// fan-out's receivers queue alike, so the last few tell as much as all of them.
const BACKLOG_LOOK: usize = 4;

/// Waiting colors from which colors each too light to be a backlog are one together
/// ([`ColorQueue::has_backlog`]): a fan-out of one-event colors (a parallel loop's chunks, a
/// color each) holds its work in its number of colors, and none of them alone holds a steal's
/// worth. Below it, light colors wait as before (a ring's tokens, actors passing a message or two
/// each: `follow` moves those, and lending them splits partners).
const LIGHT_BACKLOG_COLORS: usize = 128;

/// A waiting color whose events cost this much or more each (ns, by its own measure) is heavy,
/// though none alone may be a backlog: the last [`FEW_COLORS`] waiting colors all heavy, with
/// the floor among them, are one ([`ColorQueue::few_heavy`]). A hundred times a ring's hop; a
/// master handing a 10 us item to each of 60 actors per round, hashed 37 and 23 on two workers,
/// left the lighter worker idle a third of each round behind the other's 37 colors (no color
/// alone 20 us, fewer than 128 waiting), at 0.86-0.90 of tokio-mt (`server_probe rounds`).
const HEAVY_EVENT_NS: u64 = 5_000;

/// See [`HEAVY_EVENT_NS`].
const FEW_COLORS: usize = 4;

/// Waiting colors [`ColorQueue::light_backlog`] looks at, from the back of the line, for one
/// that may be lent, when it advertises a backlog (a thief's request looks through the whole
/// line). Not the last one alone: colors that may not be lent gather there, a collector that
/// moved here by `follow` and is posted to after every chunk, the colors of an earlier loan.
/// With the last alone, a worker on a CPU shared with another process held 3,000 chunk colors
/// of a user's loop and advertised no backlog while the worker on the free CPU idled
/// (`user_probe` beside a spinning thread, counted by a temporary print: a borrowed or moved
/// color at the back every time). Looked at only with [`LIGHT_BACKLOG_COLORS`] waiting, every
/// few turns.
const LIGHT_LOOK: usize = 16;

/// Most colors lent at once from a light backlog: each is a loan (a slot on each side, a return
/// when it empties), so a loan of a few hundred light colors is what a request of a few
/// microseconds pays for; the thief asks again when it has run them.
const LIGHT_LOAN_MAX: usize = 256;

/// Most turns fresh colors take before the line's front takes one (see "Turns: newest
/// first").
pub(crate) const NEWEST_STREAK_MAX: u32 = 256;

/// Whether the newest fresh color takes the next turn rather than the line's front, after
/// `streak` turns of fresh colors since the front last took one for them: the policy of
/// "Turns: newest first".
#[inline]
pub(crate) fn newest_takes_turn(streak: u32) -> bool {
    streak < NEWEST_STREAK_MAX
}

/// Most fresh colors at once: past it, the oldest goes to the back of the line (a fan-out of
/// thousands of colors gains nothing from their order, and the move costs at most this many
/// places).
const FRESH_MAX: usize = 64;

/// The ready list's three parts, front to back: colors with urgent posts (`urgent`), fresh
/// colors newest first (`fresh`), and the line (see "Turns: newest first"). Split from the queue
/// so that [`ColorQueue::schedule_slot`] can use it beside a slot it holds.
struct Line<'a> {
    ready: &'a mut VecDeque<usize>,
    /// Urgent colors at the front.
    urgent: &'a mut usize,
    /// Fresh colors behind them.
    fresh: &'a mut usize,
}

impl Line<'_> {
    /// Puts `key`, an urgent color if `urgent`, else a fresh one, at the front of its part: a
    /// call, apart from the run loop's one inlined `push_back` (a color joining the line).
    #[inline(never)]
    fn join_front(self, key: usize, urgent: bool) {
        if urgent {
            self.ready.push_front(key);
            *self.urgent += 1;
            return;
        }
        if *self.fresh == FRESH_MAX {
            // The oldest fresh color, last of them, joins the line.
            let oldest = self.ready.remove(*self.urgent + FRESH_MAX - 1);
            self.ready.extend(oldest);
            *self.fresh -= 1;
        }
        self.ready.insert(*self.urgent, key);
        *self.fresh += 1;
    }
}

/// The run queue of one worker.
pub(crate) struct ColorQueue {
    me: usize,
    placement: Placement,
    index: FxHashMap<Color, usize>,
    slots: Slab<Slot>,
    /// The slots of colors routed lately, direct-mapped by [`recent_entry`] (checked against
    /// the slot's color, never trusted: [`recent_key`](Self::recent_key)): a hash lookup and
    /// `home_of` cost a local post half its routing (96 instructions a post in a fan-out).
    recent: [u32; RECENT],
    ready: VecDeque<usize>,
    /// How many colors at the front of `ready` hold urgent posts, and how many fresh ones
    /// follow them (see "Turns: newest first", [`Line`]): together never more than `ready`.
    urgent: usize,
    fresh: usize,
    /// Turns taken by fresh colors since the line's front last took one for them.
    newest_streak: u32,
    /// Fresh colors run newest first (`Config::newest_first`).
    newest_first: bool,
    running: Option<usize>,
    /// When the running color arrived here (its slot's `arrived`, stored once a turn for
    /// `route`, which would otherwise look its slot up at every post); `u64::MAX` between turns,
    /// so that `route` takes the lesser of it and `arrivals` with no branch (a slot's arrival is
    /// never later than the count).
    running_arrived: u64,
    pending: usize,
    /// The colors borrowed from other homes, as a filter: a color homed elsewhere that the filter
    /// rules out is not held here, and `route` needs no lookup to say so.
    guests: GuestFilter,
    /// How long an event takes here, over every sampled turn (ns, moving average; 0 until one
    /// is): the estimate for a color not sampled itself.
    event_ns: u64,
    /// What a color's first timed turn here cost an event (ns, moving average; 0 until one
    /// was): with `event_ns`, the estimate for colors not timed yet when many wait together
    /// (a light backlog, [`light_backlog`](Self::light_backlog)). Apart from `event_ns`, which
    /// takes sampled turns only: a fan-out's one-event colors are each timed once, watched, and
    /// never sampled.
    first_ns: u64,
    /// Colors that came to this worker so far (moved, lent, forwarded here, or back home): each
    /// arrival is numbered by it (`Slot::arrived`).
    arrivals: u64,
    /// The latest arrival among dropped home slots: a home color's new slot takes it, as it
    /// may be one of them.
    dropped_arrival: u64,
    /// `Sync`s of guests (the color, the guest, its epoch) that wait for the recall of their
    /// color to end ([`sync_waits`](Self::sync_waits)).
    syncs: Vec<(Color, usize, u64)>,
    /// Colors lent to thieves, the oldest loan first, for [`recall`](Self::recall): at most
    /// [`LENT_LIST`]; a color is listed once per loan, and one back home since is skipped.
    lent: VecDeque<Color>,
    /// Empty event queues of dropped slots, with their buffers ([`SPARE_QUEUES`] at most, none
    /// over what an idle slot keeps, [`KEEP_QUEUE_CAPACITY`]): a color that comes and goes
    /// (moved by `follow`, given back, lent) takes one instead of growing a new one from the
    /// system allocator on its first post here (that allocator was about 3% of the 64-token
    /// ring's samples).
    spare: Vec<VecDeque<Task>>,
    /// How many slots the table keeps with idle ones among them (over it, a `Local` slot is
    /// dropped as soon as it empties), grown for colors that come back (`recur`).
    recur: Recurrence,
    /// Slots made so far (tests count a table's churn).
    #[cfg(test)]
    slots_made: u64,
    /// Backlogs of long events take every other turn ("Turns: the line, and backlogs").
    backlog_turns: bool,
    /// Colors listed for turns ahead of the line (a backlog of long events formed while they
    /// waited in it), in the order they were listed; an entry whose slot no longer says
    /// `listed_ahead` (taken, freed, reused) is skipped.
    ahead: VecDeque<usize>,
    /// The last turn came from `ahead`: the next one is the line's.
    after_ahead_turn: bool,
}

/// Most loans a worker remembers for recalls ([`ColorQueue::lent`]): an older one is not
/// recalled.
const LENT_LIST: usize = 1024;

/// Loans [`ColorQueue::recall`] looks at for one to recall.
const RECALL_LOOK: usize = 16;

/// The least cost per event (ns) of a color moved for good that its idle home recalls
/// (`steal::worth_recalling`), and lists for it ([`ColorQueue::recall`]): four times a cheap
/// color's (`follow::CHEAP_NS`), so that a backlog worth moving (`steal::BACKLOG_FLOOR`) is
/// twenty events or fewer.
pub(crate) const RECALL_MOVED_EVENT_NS: u64 = 1_000;

/// Most empty event queues a worker keeps for new slots ([`ColorQueue::spare`]): at most
/// 1 MB with [`KEEP_QUEUE_CAPACITY`].
const SPARE_QUEUES: usize = 256;

/// Events a color must have queued to take every other turn ahead of the line (see "Turns: the
/// line, and backlogs"): a turn of it then runs this many (the turn's budget allowing), so a
/// color that merely got a few posts between its turns does not jump.
pub(crate) const BACKLOG_TURN_EVENTS: usize = 8;

/// How many times the average waiting color's events a color must have queued to jump the
/// line: where every color waiting has a backlog like it (a driver feeding many actors),
/// jumping would only reorder the round (and search the line for it).
pub(crate) const BACKLOG_TURN_SHARE: usize = 4;

/// The least wait in line (ns: the other waiting colors times this worker's average cost of an
/// event) worth a jump: in a short line, or one of cheap colors, the backlog's turn comes soon
/// anyway.
/// Without it, the hub of Savina's chameneos (each meeting is a message to it and two from it),
/// whose cost was measured high from its first turn (setting up the run) and came down slowly,
/// jumped lines of 7-24 colors of a microsecond 4,500 times a run, and the program ran 3-6%
/// slower (3 processes each, alternated, `bench actors`).
pub(crate) const BACKLOG_TURN_WAIT_NS: u64 = 50_000;

/// The least measured cost of a color's events (ns) for its backlog to jump the line: four
/// times a cheap color's (`follow::CHEAP_NS`), as for recalls of moved colors
/// ([`RECALL_MOVED_EVENT_NS`]), so that a backlog that jumps holds at least 8 us of work,
/// against the jump's search of the line (a few nanoseconds a waiting color: about 1 us
/// behind 200 colors).
pub(crate) const BACKLOG_TURN_EVENT_NS: u64 = 1_000;

/// Whether a color may be listed for turns ahead of the line, as far as its slot alone tells
/// (waiting in the line, not listed, and not measured cheap), read inline so that a cheap color's mailbox filling up
/// pays no call for [`ColorQueue::list_ahead`].
#[inline]
fn may_jump(slot: &Slot) -> bool {
    slot.queued
        && !slot.listed_ahead
        && (slot.event_ns == 0 || slot.event_ns >= BACKLOG_TURN_EVENT_NS)
}

impl ColorQueue {
    pub(crate) fn new(me: usize, placement: Placement) -> Self {
        ColorQueue {
            me,
            placement,
            index: FxHashMap::default(),
            slots: Slab::new(),
            recent: [u32::MAX; RECENT],
            ready: VecDeque::new(),
            urgent: 0,
            fresh: 0,
            newest_streak: 0,
            newest_first: false,
            running: None,
            running_arrived: u64::MAX,
            pending: 0,
            guests: GuestFilter::default(),
            event_ns: 0,
            first_ns: 0,
            arrivals: 0,
            dropped_arrival: 0,
            syncs: Vec::new(),
            lent: VecDeque::new(),
            spare: Vec::new(),
            recur: Recurrence::default(),
            #[cfg(test)]
            slots_made: 0,
            backlog_turns: false,
            ahead: VecDeque::new(),
            after_ahead_turn: false,
        }
    }

    /// This queue, letting backlogs of long events take every other turn if `on`
    /// (`Config::backlog_turns`; off in a new queue, as in the libasync-smp baseline).
    pub(crate) fn with_backlog_turns(mut self, on: bool) -> Self {
        self.backlog_turns = on;
        self
    }

    /// This queue, running fresh colors newest first if `on` (`Config::newest_first`; off in
    /// a new queue: the line's order, as in the libasync-smp baseline).
    pub(crate) fn with_newest_first(mut self, on: bool) -> Self {
        self.newest_first = on;
        self
    }

    /// Events queued on this worker (not counting one that is running).
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }

    /// Colors waiting to run here (not counting the running one).
    pub(crate) fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// The lease of a color held in this table, if any.
    pub(crate) fn lease(&self, color: Color) -> Option<Lease> {
        self.index.get(&color).map(|&k| self.slots[k].lease)
    }

    /// The slot of `color` if the cache of recent routes names it: a slot whose color is
    /// `color` is its slot, as one color has at most one slot (every slot is inserted with its
    /// index entry and removed with it), so a stale entry (slot freed, or reused by another
    /// color) is never believed and needs no invalidation.
    #[inline]
    fn recent_key(&self, color: Color) -> Option<usize> {
        let k = self.recent[recent_entry(color)] as usize;
        self.slots.get(k).is_some_and(|s| s.color == color).then_some(k)
    }

    /// Posts an event made on this worker.
    #[cfg(test)]
    pub(crate) fn post(&mut self, color: Color, task: Task, urgent: bool) -> Route {
        let dest = self.route(color);
        self.post_to(dest, task, urgent)
    }

    /// [`route`](Self::route) of a color not found on its fast paths, homed on `home`: its key
    /// here (a slot made for a color homed here and new), or where it goes if it is not held
    /// here. Out of line: the fast paths are inlined at every post (callgrind, one worker,
    /// instructions a message: the 64-token ring 796 -> 772, fork-join empty 543 -> 514, big
    /// 630 -> 601).
    #[inline(never)]
    fn route_looked_up(&mut self, color: Color, home: usize) -> Result<usize, Dest> {
        let k = match self.index.get(&color) {
            Some(&k) => k,
            None if home != self.me => return Err(Dest::Remote { home }),
            None => self.insert(color, Lease::Local),
        };
        self.recent[recent_entry(color)] = k as u32;
        Ok(k)
    }

    /// Where an event of `color` posted here goes; the worker that will run it is
    /// [`Dest::runs_on`]. Split from [`post_to`](Self::post_to) so that a poster can place the
    /// event's memory for that worker before it builds the event.
    #[inline(always)]
    pub(crate) fn route(&mut self, color: Color) -> Dest {
        let key = match self.running {
            // Fast path: a handler posting to its own color (chains, ping-pong): no lookup.
            Some(k) if self.slots[k].color == color => k,
            _ => match self.recent_key(color) {
                // Fast path: a color held here and posted to lately (a fan-out's receivers, a
                // ring's next actor): no hash, no lookup.
                Some(k) => k,
                None => {
                    let home = home_of(color, self.placement);
                    if home != self.me && !self.guests.may_hold(color) {
                        // Fast path: homed elsewhere and not borrowed (fan-outs): no lookup.
                        debug_assert!(!self.index.contains_key(&color), "guest slots miscounted");
                        return Dest::Remote { home };
                    }
                    match self.route_looked_up(color, home) {
                        Ok(k) => k,
                        Err(dest) => return dest,
                    }
                }
            },
        };
        let slot = &self.slots[key];
        if let Lease::Away { to, recalled, .. } = slot.lease {
            if recalled {
                return Dest::Parked { key, me: self.me };
            }
            return Dest::Forward { key, to };
        }
        if self.guests.is_empty() {
            // Every color here is at home (one worker, colors placed by hand): no fence to ask.
            return Dest::Here { key, me: self.me };
        }
        // One path for colors at home (their fence is open) and guests, with no branch on which
        // it is: a worker where follow gathered colors holds about as many of each, and a post
        // to a random one of them mispredicted that branch half of the time (a queue posting to
        // 100 colors at random, one event a turn: 18 ns a post and turn with all at home or all
        // guests, 31 with half of each; Savina's big, gathered on one worker of two, 18-19M
        // messages/s against 24.5M homed there by hand). The poster is the running color, or
        // none runs: anything may have arrived.
        let need = self.running_arrived.min(self.arrivals);
        if (self.running == Some(key)) | slot.fence.admits(need) {
            Dest::Here { key, me: self.me }
        } else {
            Dest::Held { key, need, me: self.me }
        }
    }

    /// Routes an event that worker `from` posted to a color homed here (`None`: posted by a
    /// thread outside the runtime). The post is counted in the color's traffic, and `moves`
    /// judges that traffic (`follow::moves`, given what the worker knows of the poster, and
    /// whether the color is idle here): if it says so, the color, idle, is lent to `from` for
    /// good with this event ([`Route::Move`]); busy, it is pulled (`Traffic::pull`: it leaves
    /// when its queue empties, [`end_turn_shedding`](Self::end_turn_shedding)).
    pub(crate) fn receive_post(
        &mut self,
        color: Color,
        task: Task,
        urgent: bool,
        from: Option<usize>,
        moves: impl FnOnce(Traffic, u64, bool) -> Option<usize>,
    ) -> Route {
        let dest = self.route(color);
        if let Dest::Here { key, .. } = dest {
            let running = self.running == Some(key);
            let me = self.me;
            let slot = &mut self.slots[key];
            if slot.lease == Lease::Local {
                if let Some(poster) = from.filter(|&f| f != me) {
                    slot.traffic.post_from(poster);
                }
                let idle = slot.events.is_empty() && !slot.queued && !running;
                let to = if slot.pinned || slot.holding > 0 {
                    None
                } else {
                    moves(slot.traffic, slot.event_ns, idle).filter(|&to| to != me)
                };
                if let Some(to) = to {
                    if idle {
                        slot.traffic.reset();
                        slot.lease =
                            Lease::Away { to, outstanding: 1, moved: true, recalled: false };
                        let (color, event_ns) = (slot.color, slot.event_ns);
                        self.list_moved(color, event_ns);
                        return Route::Move { to, task };
                    }
                    // Busy: it goes when its queue empties, unless another poster comes first
                    // (`follow`, "Busy colors are pulled").
                    if from == Some(to) {
                        slot.traffic.pull();
                    }
                }
            }
            // A handler's post (from a worker) may make its color fresh (`enqueue`); one from
            // outside does not.
            self.enqueue(key, task, urgent, from.is_some());
            return Route::Queued;
        }
        self.post_to_counted(dest, task, urgent, false)
    }

    /// A turn of the color in `key` made posts: to colors on another worker if `elsewhere`, else
    /// only to colors here (`follow::Traffic::posted`: whether its partners are here). The
    /// workers count 1 turn in `follow::PARTNER_SAMPLE` (`follow::TurnSample`).
    #[inline]
    pub(crate) fn count_turn_posts(&mut self, key: usize, elsewhere: bool) {
        self.slots[key].traffic.posted(!elsewhere);
    }

    /// Posts `task`, made on this worker, where [`route`](Self::route) said, with no post in
    /// between.
    #[inline]
    pub(crate) fn post_to(&mut self, dest: Dest, task: Task, urgent: bool) -> Route {
        self.post_to_counted(dest, task, urgent, true)
    }

    #[inline]
    fn post_to_counted(&mut self, dest: Dest, task: Task, urgent: bool, local: bool) -> Route {
        match dest {
            Dest::Here { key, .. } => {
                // A handler's post here: its color is fresh if it never ran here (`enqueue`).
                let fresh = local && self.running.is_some();
                if local {
                    let own = self.running == Some(key);
                    self.slots[key].traffic.local_post(own);
                }
                self.enqueue(key, task, urgent, fresh);
                Route::Queued
            }
            Dest::Forward { key, to } => {
                if let Lease::Away { outstanding, .. } = &mut self.slots[key].lease {
                    *outstanding += 1;
                }
                Route::Forward { to, task }
            }
            Dest::Remote { home } => Route::Remote { home, task },
            Dest::Parked { key, .. } => {
                Self::push_event(&mut self.slots[key], task, urgent);
                self.pending += 1;
                Route::Queued
            }
            Dest::Held { key, need, .. } => {
                let arrivals = self.arrivals;
                let poster = self.running;
                if let Some(p) = poster {
                    self.slots[p].holding += 1;
                }
                let slot = &mut self.slots[key];
                if local {
                    slot.traffic.local_post(false);
                }
                let fence = &mut slot.fence;
                fence.held.push_back(Held { task, urgent, need, poster });
                fence.need = fence.need.max(need);
                if fence.asked.is_some() {
                    return Route::Held(None);
                }
                fence.asked = Some(arrivals);
                let Lease::Guest { home, .. } = slot.lease else {
                    unreachable!("a fence on a color not held as a guest")
                };
                Route::Held(Some(SyncAsk { home, color: slot.color, epoch: arrivals }))
            }
        }
    }

    /// The home answered this worker's `Sync` of `epoch` for `color`: posts held for colors that
    /// had arrived by then join the queue. Returns a new `Sync` to send if posts of a color that
    /// arrived later are held.
    pub(crate) fn synced(&mut self, color: Color, epoch: u64) -> Option<SyncAsk> {
        let &key = self.index.get(&color)?;
        let arrivals = self.arrivals;
        let slot = &mut self.slots[key];
        let Lease::Guest { home, .. } = slot.lease else {
            debug_assert!(false, "Synced for color {color:?} in lease {:?}", slot.lease);
            return None;
        };
        let fence = &mut slot.fence;
        fence.asked = None;
        fence.synced_below = fence.synced_below.max(epoch.saturating_add(1));
        if fence.held.is_empty() {
            return None;
        }
        let held = std::mem::take(&mut fence.held);
        let mut ask = None;
        if epoch < fence.need {
            fence.asked = Some(arrivals);
            ask = Some(SyncAsk { home, color, epoch: arrivals });
        }
        fence.need = 0;
        for h in held {
            if h.need > epoch {
                let fence = &mut self.slots[key].fence;
                fence.need = fence.need.max(h.need);
                fence.held.push_back(h);
                continue;
            }
            if let Some(p) = h.poster {
                let poster = &mut self.slots[p];
                poster.holding -= 1;
                if poster.holding == 0
                    && poster.events.is_empty()
                    && matches!(poster.lease, Lease::Guest { .. })
                {
                    // A guest that stayed only for its held posts: an empty turn ends it, and
                    // gives it back as any emptied guest.
                    self.schedule(p, false);
                }
            }
            self.enqueue(key, h.task, h.urgent, false);
        }
        ask
    }

    /// Numbers a color's arrival on this worker (`Slot::arrived`).
    fn arrive(&mut self, key: usize) {
        self.arrivals += 1;
        self.slots[key].arrived = self.arrivals;
    }

    /// Accepts an event that the color's home forwarded to this worker, the borrower.
    pub(crate) fn accept_forward(&mut self, color: Color, home: usize, task: Task, urgent: bool) {
        let key = self.guest_slot(color, home);
        let slot = &mut self.slots[key];
        if let Lease::Guest { received, .. } = &mut slot.lease {
            *received += 1;
        }
        slot.traffic.forwarded();
        self.enqueue(key, task, urgent, false);
    }

    /// Takes a color that its home moved here for good (`follow`), with its first event if any.
    pub(crate) fn adopt_moved(
        &mut self,
        color: Color,
        home: usize,
        task: Option<Task>,
        urgent: bool,
        relieved: bool,
    ) {
        let key = self.guest_slot(color, home);
        let slot = &mut self.slots[key];
        debug_assert_eq!(
            slot.lease,
            Lease::Guest { home, received: 0, resident: false, relieved: false },
            "a color moved here while held here"
        );
        let received = u64::from(task.is_some());
        slot.lease = Lease::Guest { home, received, resident: true, relieved };
        slot.traffic.reset();
        self.arrive(key);
        if let Some(task) = task {
            self.enqueue(key, task, urgent, false);
        }
    }

    /// Takes a color lent by `home` with its pending events.
    pub(crate) fn adopt(&mut self, home: usize, loan: Loan) {
        let n = loan.events.len();
        if n == 0 {
            return;
        }
        let key = self.guest_slot(loan.color, home);
        self.arrive(key);
        let slot = &mut self.slots[key];
        if let Lease::Guest { received, .. } = &mut slot.lease {
            *received += n as u64;
        }
        if slot.event_ns == 0 {
            slot.event_ns = loan.event_ns;
        }
        if slot.events.is_empty() {
            let spare = std::mem::replace(&mut slot.events, loan.events);
            slot.urgent = loan.urgent;
            self.keep_spare(spare);
        } else {
            slot.events.extend(loan.events);
        }
        self.pending += n;
        self.schedule(key, loan.urgent > 0);
    }

    /// The borrower of `color` reports `ran` more of the events sent to it as run.
    pub(crate) fn returned(&mut self, color: Color, ran: u64) {
        let Some(&key) = self.index.get(&color) else {
            debug_assert!(false, "Return for color {color:?} that is not lent");
            return;
        };
        let slot = &mut self.slots[key];
        if let Lease::Away { outstanding, moved, .. } = &mut slot.lease {
            debug_assert!(*outstanding >= ran, "more events returned than lent");
            *outstanding = outstanding.saturating_sub(ran);
            if *outstanding == 0 {
                if *moved {
                    // Hysteresis: a color that came back needs a longer run of posts to go again.
                    slot.traffic.bounces = slot.traffic.bounces.saturating_add(1);
                }
                // Recalled, and given back empty before the recall reached the borrower: the
                // posts parked meanwhile run here (the borrower, holding nothing, keeps nothing).
                self.home_again(key);
            }
        } else {
            debug_assert!(false, "Return for color {color:?} in lease {:?}", slot.lease);
        }
    }

    /// The color in `key` is back home (`Local`): its traffic judged afresh, its arrival numbered,
    /// and the events in its slot (given back, or parked by a recall) scheduled here.
    fn home_again(&mut self, key: usize) {
        let slot = &mut self.slots[key];
        slot.traffic.reset();
        slot.lease = Lease::Local;
        let (urgent, empty) = (slot.urgent > 0, slot.events.is_empty());
        self.arrive(key);
        if empty {
            // Over the bound, dropped as any idle color: kept, every color ever lent and given
            // back (a divide and conquer's stolen calls) would stay for good. A moved color's
            // hysteresis (`bounces`) goes with its slot, as its traffic does.
            self.maybe_release(key);
        } else {
            self.schedule(key, urgent);
        }
    }

    /// True if `color` waits here alone: queued, not running, no other color waiting.
    pub(crate) fn waits_alone(&self, color: Color) -> bool {
        self.ready.len() == 1
            && self
                .index
                .get(&color)
                .is_some_and(|&k| self.ready[0] == k && self.running != Some(k))
    }

    /// Lists `color`, lent or moved from here, as one to recall (the oldest goes when the list is
    /// full).
    fn list_lent(&mut self, color: Color) {
        if self.lent.len() == LENT_LIST {
            self.lent.pop_front();
        }
        self.lent.push_back(color);
    }

    /// Lists `color`, moved from here for good with events of `event_ns` each, as one to
    /// recall if its home may ever recall it ([`RECALL_MOVED_EVENT_NS`]): a ring's
    /// thousands of moves of cheap colors a run would push the loans out of the list.
    fn list_moved(&mut self, color: Color, event_ns: u64) {
        if event_ns >= RECALL_MOVED_EVENT_NS {
            self.list_lent(color);
        }
    }

    /// Recalls one of the colors this worker lent to thieves or moved for good, the first lent still away whose
    /// borrower `loaded` says should give it back (see "Recalls"), looking at
    /// [`RECALL_LOOK`] loans at most (`loaded` is given the borrower and what the home knows of
    /// the color away, [`Away`]): its posts wait here from now on ([`Dest::Parked`]). Returns
    /// the color and its borrower, to send a `Recall` to.
    pub(crate) fn recall(
        &mut self,
        loaded: impl Fn(usize, Away) -> bool,
    ) -> Option<(Color, usize)> {
        for _ in 0..self.lent.len().min(RECALL_LOOK) {
            let color = self.lent.pop_front()?;
            let Some(&key) = self.index.get(&color) else { continue };
            let slot = &mut self.slots[key];
            // Still away (not back home) and not recalled yet: a loan, or a move (its borrower
            // gives a resident back only with a backlog: `give_back`).
            if let Lease::Away { to, recalled, outstanding, moved } = &mut slot.lease {
                if *recalled {
                    continue;
                }
                let away = Away {
                    work_ns: outstanding.saturating_mul(slot.event_ns),
                    moved: *moved,
                    event_ns: slot.event_ns,
                };
                if loaded(*to, away) {
                    *recalled = true;
                    return Some((color, *to));
                }
                self.lent.push_back(color);
            }
        }
        None
    }

    /// At the borrower: the home recalled `color`. Gives it back with its events if it waits
    /// here (not running, no posts held by or for it) behind or before another waiting color,
    /// and, moved here for good (a resident), holds `floor_ns` of work (queued events at their
    /// measured cost, or a turn's):
    /// `Some(ran, loan)`, the events received from the home so far and the loan of what is left.
    /// `None`: it keeps the color (running, fenced, alone here: the home's look at this
    /// worker's line was stale), or holds it no longer (its `Return` is ahead of the answer).
    pub(crate) fn give_back(&mut self, color: Color, floor_ns: u64) -> Option<(u64, Loan)> {
        self.give_back_if(color, floor_ns, 2)
    }

    /// At a borrower whose thread is stuck, stood in for by `home` (`stand_in`): every color
    /// lent by `home` that waits here and may go back as [`give_back`](Self::give_back) says,
    /// alone in the line or not (it would wait for the stuck thread), residents with
    /// `floor_ns` of work. The caller made the counts agree as a recall's channel does (every
    /// forward from the home received here, every return from here routed there).
    pub(crate) fn give_back_waiting(&mut self, home: usize, floor_ns: u64) -> Vec<(u64, Loan)> {
        let lent_by_home = |s: &Slot| matches!(s.lease, Lease::Guest { home: h, .. } if h == home);
        let colors: Vec<Color> = self
            .ready
            .iter()
            .map(|&k| &self.slots[k])
            .filter(|s| lent_by_home(s))
            .map(|s| s.color)
            .collect();
        colors.into_iter().filter_map(|c| self.give_back_if(c, floor_ns, 1)).collect()
    }

    /// Whether a color lent by `home` waits in the line (`give_back_waiting` has work).
    pub(crate) fn waits_lent_by(&self, home: usize) -> bool {
        !self.guests.is_empty()
            && self
                .ready
                .iter()
                .any(|&k| matches!(self.slots[k].lease, Lease::Guest { home: h, .. } if h == home))
    }

    /// [`give_back`](Self::give_back) with at least `line` colors waiting here.
    fn give_back_if(&mut self, color: Color, floor_ns: u64, line: usize) -> Option<(u64, Loan)> {
        let &key = self.index.get(&color)?;
        let slot = &self.slots[key];
        let Lease::Guest { received, resident, .. } = slot.lease else { return None };
        let waits = slot.queued && self.running != Some(key) && self.ready.len() >= line;
        if !waits || !slot.fence.held.is_empty() || slot.holding > 0 {
            return None;
        }
        // A resident came for its traffic, which a recall does not know of: it goes back only
        // with work to take along (a pipeline's stage; not an actor with a message or two).
        let queued = (slot.events.len() as u64).saturating_mul(slot.event_ns);
        if resident && queued.max(slot.weight_ns) < floor_ns {
            return None;
        }
        let pos = self.ready.iter().position(|&k| k == key)?;
        self.remove_from_line(pos);
        let slot = &mut self.slots[key];
        slot.queued = false;
        let events = std::mem::take(&mut slot.events);
        let urgent = std::mem::take(&mut slot.urgent);
        let event_ns = slot.event_ns;
        self.pending -= events.len();
        self.drop_slot(key);
        self.guests.remove(color);
        Some((received, Loan { color, events, urgent, event_ns }))
    }

    /// At the home: the borrower gave `loan` back, having received `ran` events in all: the
    /// color is home again, the events it gave back ahead of those parked here meanwhile
    /// (urgent ones first, each group in posting order).
    pub(crate) fn given_back(&mut self, ran: u64, loan: Loan) {
        let Some(&key) = self.index.get(&loan.color) else {
            debug_assert!(false, "{:?} given back, not lent", loan.color);
            return;
        };
        let slot = &mut self.slots[key];
        let Lease::Away { outstanding, moved, .. } = slot.lease else {
            debug_assert!(false, "{:?} given back in lease {:?}", loan.color, slot.lease);
            return;
        };
        // Every forward went ahead of the recall on the one channel, and the borrower had
        // received them all when it answered it.
        debug_assert_eq!(outstanding, ran, "{:?}: events lent and given back differ", loan.color);
        if moved {
            // Hysteresis, as for a resident's `Return`: a longer run of posts to go again.
            slot.traffic.bounces = slot.traffic.bounces.saturating_add(1);
        }
        if slot.event_ns == 0 {
            slot.event_ns = loan.event_ns;
        }
        // The parked posts go behind those given back, each where a post would (`push_event`).
        self.pending += loan.events.len();
        let parked = std::mem::replace(&mut slot.events, loan.events);
        let parked_urgent = std::mem::replace(&mut slot.urgent, loan.urgent);
        for (i, task) in parked.into_iter().enumerate() {
            Self::push_event(slot, task, i < parked_urgent);
        }
        self.home_again(key);
    }

    /// At the home: the borrower keeps `color` (`give_back` said no). The posts parked here go
    /// on to it, in order, as forwards: returns the borrower and them (with their urgency).
    /// `None` if the color is home already (its `Return` came first) or was not recalled.
    pub(crate) fn kept(&mut self, color: Color) -> Option<(usize, Vec<(Task, bool)>)> {
        let &key = self.index.get(&color)?;
        let slot = &mut self.slots[key];
        let Lease::Away { to, outstanding, recalled: recalled @ true, .. } = &mut slot.lease else {
            return None;
        };
        *recalled = false;
        let to = *to;
        let urgent = std::mem::take(&mut slot.urgent);
        let events = std::mem::take(&mut slot.events);
        *outstanding += events.len() as u64;
        self.pending -= events.len();
        // Still a loan: it may be recalled again (a self-feeding loop never comes home itself).
        self.lent.push_back(color);
        Some((to, events.into_iter().enumerate().map(|(i, t)| (t, i < urgent)).collect()))
    }

    /// Whether `color`, lent from here, is being recalled.
    fn is_recalled(&self, color: Color) -> bool {
        let lease = self.index.get(&color).map(|&k| self.slots[k].lease);
        matches!(lease, Some(Lease::Away { recalled: true, .. }))
    }

    /// A guest `from` asks to sync `color` at `epoch` (`Msg::Sync`): true if the answer waits,
    /// the color being recalled here: the posts received before the `Sync` are parked, not
    /// forwarded ahead of the answer, so a `Synced` now would let the guest run its held posts
    /// before them (the guest, holding posts, keeps the color: `give_back`). Answered by
    /// [`syncs_due`](Self::syncs_due) once the recall is over.
    pub(crate) fn sync_waits(&mut self, color: Color, from: usize, epoch: u64) -> bool {
        let recalled = self.is_recalled(color);
        if recalled {
            self.syncs.push((color, from, epoch));
        }
        recalled
    }

    /// The `Sync`s of `color` (guest and epoch) to answer now that its recall is over: its
    /// parked posts went on to the guest (`kept`), or run here (`given_back`, `returned`).
    pub(crate) fn syncs_due(&mut self, color: Color) -> Vec<(usize, u64)> {
        if self.syncs.is_empty() || self.is_recalled(color) {
            return Vec::new();
        }
        let mut due = Vec::new();
        self.syncs.retain(|&(c, from, epoch)| {
            let now = c == color;
            if now {
                due.push((from, epoch));
            }
            !now
        });
        due
    }

    /// Starts a turn: the next ready color becomes the running one.
    #[inline]
    pub(crate) fn start_turn(&mut self) -> Option<(usize, Color)> {
        // One length read when no color is listed (nearly always).
        let jump = if self.ahead.is_empty() { None } else { self.take_ahead() };
        let key = match jump {
            Some(key) => key,
            None => self.next_in_line()?,
        };
        let slot = &mut self.slots[key];
        slot.queued = false;
        slot.ran = true;
        self.running = Some(key);
        self.running_arrived = slot.arrived;
        Some((key, slot.color))
    }

    /// The color whose turn is next: an urgent one, else the newest fresh one, else the
    /// line's front; but after [`NEWEST_STREAK_MAX`] turns of fresh colors, the line's
    /// front, or the oldest fresh color if the line is empty (see "Turns: newest first").
    #[inline]
    fn next_in_line(&mut self) -> Option<usize> {
        debug_assert!(self.urgent + self.fresh <= self.ready.len(), "parts miscounted");
        if (self.urgent | self.fresh) == 0 {
            return self.ready.pop_front();
        }
        self.next_at_front()
    }

    /// [`next_in_line`](Self::next_in_line) with urgent or fresh colors waiting.
    #[inline(never)]
    fn next_at_front(&mut self) -> Option<usize> {
        if self.urgent > 0 {
            self.urgent -= 1;
            return self.ready.pop_front();
        }
        // Fresh colors wait.
        if newest_takes_turn(self.newest_streak) {
            self.newest_streak += 1;
            self.fresh -= 1;
            return self.ready.pop_front();
        }
        // Counted from here, not from the line's own turns: a store a turn saved, and the
        // line's front waits no longer.
        self.newest_streak = 0;
        let line_front = self.fresh.min(self.ready.len().saturating_sub(1));
        self.remove_from_line(line_front)
    }

    /// Takes the color at `pos` out of the ready list (to lend it, or for a turn ahead of the
    /// line), keeping the count of each part.
    fn remove_from_line(&mut self, pos: usize) -> Option<usize> {
        let key = self.ready.remove(pos)?;
        if pos < self.urgent {
            self.urgent -= 1;
        } else if pos < self.urgent + self.fresh {
            self.fresh -= 1;
        }
        Some(key)
    }

    /// The event whose closure the last [`pop`](Self::pop) of `key` prefetched, if any (the
    /// simulator's cost of reading a closure).
    #[cfg(all(any(test, feature = "sim"), not(loom)))]
    pub(crate) fn prefetched(&self, key: usize) -> Option<&Task> {
        ahead(&self.slots[key].events)
    }

    /// True if the color in `key` has events queued (a turn may be empty: a guest that stayed
    /// only for its held posts is scheduled with none, to be given back).
    #[inline]
    pub(crate) fn has_events(&self, key: usize) -> bool {
        !self.slots[key].events.is_empty()
    }

    /// The next event of the running color.
    #[inline]
    pub(crate) fn pop(&mut self, key: usize) -> Option<Task> {
        let slot = &mut self.slots[key];
        let task = slot.events.pop_front()?;
        if let Some(next) = ahead(&slot.events) {
            next.prefetch();
        }
        slot.urgent = slot.urgent.saturating_sub(1);
        self.pending -= 1;
        Some(task)
    }

    /// Ends the running color's turn: requeue it if it has more events, or give it back if it is
    /// an emptied guest (a resident only if its traffic moved on). Tests whose colors may be
    /// pulled (`follow`) end their turns with [`end_turn_shedding`](Self::end_turn_shedding),
    /// which says where the color goes: here the move would be lost, so it fails.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn end_turn(&mut self, key: usize) -> Option<Returned> {
        match self.end_turn_shedding(
            key,
            |_, _| false,
            |home, _, _, what: Shed| home.filter(|_| what.moved_on || what.loan),
        ) {
            Some(TurnEnd::Return(r)) => Some(r),
            Some(TurnEnd::Push { color, .. }) => {
                panic!("{color:?} was pulled: use end_turn_shedding")
            }
            None => None,
        }
    }

    /// [`end_turn`](Self::end_turn), where a color whose queue emptied may also leave
    /// (`follow`): `shed(home, ready, cost, what)` is asked, with the color's home if it is a
    /// guest (`None` if it is at home here), the number of colors waiting here, its cost per
    /// event, and what it is ([`Shed`]: whether its traffic moved on, a loan, relieved), for a
    /// worker to send it to: a guest goes back home (the answer must be its home;
    /// a loan that is not sent home stays as a resident), a color at home moves to the worker
    /// named ([`TurnEnd::Push`]). A color at home that a step pulled while it was busy, with no
    /// post from elsewhere since, moves to that step's worker without asking (`follow`).
    ///
    /// Inlined into the run loop, with its `shed` closure: as a call, its frame and the closure's
    /// call cost a one-event turn 81 instructions (`turn_probe 400000 1000 1` under callgrind:
    /// 290.1M -> 257.7M; 9.7-10.0M -> 10.7-10.9M hops/s, 5 alternated runs each).
    #[inline(always)]
    pub(crate) fn end_turn_shedding(
        &mut self,
        key: usize,
        keeps: impl FnOnce(usize, u64) -> bool,
        shed: impl FnOnce(Option<usize>, usize, u64, Shed) -> Option<usize>,
    ) -> Option<TurnEnd> {
        self.running = None;
        self.running_arrived = u64::MAX;
        let slot = &mut self.slots[key];
        if !slot.events.is_empty() {
            slot.queued = true;
            self.ready.push_back(key);
            if self.backlog_turns && slot.events.len() >= BACKLOG_TURN_EVENTS && may_jump(slot) {
                self.list_ahead(key);
            }
            return None;
        }
        let cost = self.event_cost(key);
        let ready = self.ready.len();
        let slot = &mut self.slots[key];
        // The common end, taken alike by colors at home and residents, with no branch on which
        // it is (see `route`): nothing pulls the color, no window of a resident's traffic is due,
        // it is not a loan, and `shed` would keep it (`keeps`): the color stays, as below. That
        // branch, mispredicted half of the time where as many guests as colors at home take
        // turns at random, cost 5 ns a turn (the queue of `route`'s comment).
        // (With no guest here every color is at home: the branch below is predicted, and the
        // common end's checks are not worth their instructions, 3% of a one-worker
        // producer-consumer's rate.)
        let lease = slot.lease;
        if !self.guests.is_empty() {
            let due = matches!(lease, Lease::Guest { .. }) & slot.traffic.window_full();
            let loan = matches!(lease, Lease::Guest { resident: false, .. });
            // A relieved resident about to leave this worker idle asks its home.
            let ask = matches!(lease, Lease::Guest { relieved: true, .. }) & (ready == 0);
            if !(due | loan | ask) & slot.traffic.pulled_by().is_none() && keeps(ready, cost) {
                self.maybe_release(key);
                return None;
            }
        }
        let slot = &mut self.slots[key];
        let pinned = slot.pinned || slot.holding > 0;
        match lease {
            Lease::Guest { .. } if !slot.fence.held.is_empty() || slot.holding > 0 => None,
            Lease::Guest { home, received, resident, relieved } => {
                let moved_on = resident && self.gives_back(key);
                let asks = Shed { moved_on, loan: !resident, relieved };
                if shed(Some(home), ready, cost, asks) != Some(home) {
                    if !resident {
                        // A stolen color kept (its home's CPU is clearly worse): a resident now,
                        // relieved.
                        let lease = Lease::Guest { home, received, resident: true, relieved: true };
                        self.slots[key].lease = lease;
                    }
                    return None;
                }
                let color = self.drop_slot(key);
                self.guests.remove(color);
                Some(TurnEnd::Return(Returned { home, color, ran: received, resident }))
            }
            Lease::Local => {
                let asks = Shed { moved_on: false, loan: false, relieved: false };
                match slot.traffic.pulled_by().or_else(|| shed(None, ready, cost, asks)) {
                    Some(to) if to != self.me && !pinned => {
                        let slot = &mut self.slots[key];
                        slot.traffic.reset();
                        slot.lease =
                            Lease::Away { to, outstanding: 0, moved: true, recalled: false };
                        let (color, event_ns) = (slot.color, slot.event_ns);
                        self.list_moved(color, event_ns);
                        Some(TurnEnd::Push { to, color })
                    }
                    _ => {
                        self.maybe_release(key);
                        None
                    }
                }
            }
            Lease::Away { .. } => None,
        }
    }

    /// A resident whose queue emptied: give it back home? Judges a window of its traffic when
    /// one is full (`follow::gives_back`).
    fn gives_back(&mut self, key: usize) -> bool {
        let traffic = &mut self.slots[key].traffic;
        match follow::gives_back(traffic) {
            Some(back) => {
                traffic.reset();
                back
            }
            None => false,
        }
    }

    /// True while a color's turn is on (between `start_turn` and its end).
    pub(crate) fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// True if nothing waits or runs here.
    pub(crate) fn is_quiet(&self) -> bool {
        self.ready.is_empty() && self.running.is_none()
    }

    /// Records a timed turn of the color in `key`: `ns` for the whole turn of `events`.
    pub(crate) fn record_turn(&mut self, key: usize, ns: u64, events: usize) {
        if self.record_watched_turn(key, ns, events) {
            self.event_ns = cost_average(self.event_ns, ns / events.max(1) as u64);
        }
    }

    /// Records a watched turn (`ns` for `events`, a color not known short: `known_within`) as
    /// the color's own cost, and, the color's first, in the first turns' average (`first_ns`):
    /// the worker's average stands for colors not timed yet and takes sampled turns only (a
    /// color's first turns, and every turn of the long ones, would lift it). False if the color
    /// left its slot.
    pub(crate) fn record_watched_turn(&mut self, key: usize, ns: u64, events: usize) -> bool {
        let Some(slot) = self.slots.get_mut(key) else { return false };
        let per_event = ns / events.max(1) as u64;
        if slot.event_ns == 0 {
            self.first_ns = cost_average(self.first_ns, per_event);
        }
        slot.weight_ns = cost_average(slot.weight_ns, ns);
        slot.event_ns = cost_average(slot.event_ns, per_event);
        true
    }

    /// Whether the color in `key` is measured (its own timed turns, or what its loan carried:
    /// `Slot::event_ns`) to cost at most `ns` an event. A color's first turn on this worker is timed (a watched turn), so a short color is
    /// watched about once.
    #[inline]
    pub(crate) fn known_within(&self, key: usize, ns: u64) -> bool {
        (1..=ns).contains(&self.slots[key].event_ns)
    }

    /// Whether the color in `key` is measured to cost at most `ns` an event or, not timed yet
    /// (`Slot::event_ns`), is likely to: the first turns of this worker's colors average at most
    /// `ns` an event (`first_ns`).
    #[inline]
    pub(crate) fn likely_within(&self, key: usize, ns: u64) -> bool {
        let own = self.slots[key].event_ns;
        (1..=ns).contains(if own == 0 { &self.first_ns } else { &own })
    }

    /// Whether the color in `key` is measured to cost more than `ns` an event.
    #[inline]
    pub(crate) fn known_over(&self, key: usize, ns: u64) -> bool {
        self.slots[key].event_ns > ns
    }

    /// The measured cost of an event of the color in `key`, ns: its own timed turns', else
    /// (not timed yet, or just arrived) this worker's average; 0 when nothing was timed.
    pub(crate) fn event_cost(&self, key: usize) -> u64 {
        match self.slots[key].event_ns {
            0 => self.event_ns,
            ns => ns,
        }
    }

    /// Whether the color in `key` may be lent for its backlog: homed here, not pinned, and its
    /// queued events measured to hold at least `floor_ns` of work, or its turns measured that
    /// long (`Slot::weight_ns`): a color that feeds itself (a loop posting its next step, a
    /// chain) holds one event at a time and a turn's worth of work (`Config::turn_budget` of
    /// its events) behind it. Judged by its queue alone, four such loops of 10 us steps hashed
    /// three to one on two workers ran one after another on the loaded worker while the other,
    /// its own loop done, idled and asked nothing: 12.2 ms against tokio's 8.5.
    fn backlogged(&self, key: usize, floor_ns: u64) -> bool {
        let s = &self.slots[key];
        // A color not timed yet is judged by the worker's average only with several events
        // queued: one event of unknown cost is no backlog (on a worker of heavy colors, the
        // average made every light newcomer look heavy: the simulator's test found it).
        let per_event = match (s.event_ns, s.events.len()) {
            (0, n) if n >= 2 => self.event_ns,
            (ns, _) => ns,
        };
        s.lease == Lease::Local
            && !s.pinned
            && s.holding == 0
            && per_event > 0
            && (s.events.len() as u64).saturating_mul(per_event).max(s.weight_ns) >= floor_ns
    }

    /// True if a thief could take a backlog here now (`Steal::Backlog`): at least two colors
    /// wait, and one of them, not the first to run, holds `floor_ns` of work, or a few heavy
    /// ones ([`few_heavy`](Self::few_heavy)) or many light ones
    /// ([`light_backlog`](Self::light_backlog)) hold it together. Looks at the last
    /// [`BACKLOG_LOOK`] to run only: those a thief is lent first ([`lend_backlog`]), and a look
    /// at every waiting color's slot (a cache line each) every few turns cost `big`'s hundred
    /// light actors 15% of their rate.
    ///
    /// [`lend_backlog`]: Self::lend_backlog
    pub(crate) fn has_backlog(&self, floor_ns: u64) -> bool {
        self.ready.len() >= 2
            && (self
                .ready
                .iter()
                .skip(1)
                .rev()
                .take(BACKLOG_LOOK)
                .any(|&k| self.backlogged(k, floor_ns))
                || self.few_heavy(floor_ns)
                || self.light_backlog(floor_ns, LIGHT_LOOK).is_some())
    }

    /// The queued work of waiting color `key` (ns) if its events are heavy ([`HEAVY_EVENT_NS`]
    /// each, by its own measure) and it may be lent. A color not timed yet is not judged by the
    /// worker's average here (on a worker of heavy colors every light newcomer would look
    /// heavy), nor is one of many light events queued (a fork-join's receivers: lending those
    /// on this rule slowed the simulated fork-join 18%; `backlogged` judges them).
    fn heavy_work(&self, key: usize) -> Option<u64> {
        let s = &self.slots[key];
        (s.event_ns >= HEAVY_EVENT_NS && self.lendable(key, 0))
            .then(|| (s.events.len() as u64).saturating_mul(s.event_ns))
    }

    /// True if the last [`FEW_COLORS`] waiting colors, not the first to run, are heavy and hold
    /// `floor_ns` together.
    fn few_heavy(&self, floor_ns: u64) -> bool {
        self.ready.len() > FEW_COLORS
            && self
                .ready
                .iter()
                .rev()
                .take(FEW_COLORS)
                .try_fold(0u64, |sum, &k| self.heavy_work(k).map(|w| sum.saturating_add(w)))
                .is_some_and(|sum| sum >= floor_ns)
    }

    /// With a backlog the waiting colors hold together though none may alone, what an event of
    /// one not timed yet is estimated to cost here, ns (else `None`): at least
    /// [`LIGHT_BACKLOG_COLORS`] wait, one of the last `look` to run may be lent, and their
    /// number times the estimate reaches twice `floor_ns` (a loan leaves half of it here). The
    /// count takes every waiting color, those that may not be lent too (pinned, borrowed): a
    /// line of them behind one lendable color lends that one. `look` is [`LIGHT_LOOK`] for the
    /// advertisement, every few turns; the whole line for a thief's request.
    ///
    /// The estimate: the own measure of that lendable color, if it was timed and is light (the
    /// colors of a user's loop, the same ones run after run, are); else the larger of the
    /// worker's sampled average and its first turns' average, unless it is over `floor_ns` and
    /// the other is not: then the other. A first sample is taken whole, so a driver's turn of
    /// milliseconds lifts the first turns' average (and is not to be stamped on loans), and on
    /// a CPU shared with another process a sampled turn that spanned a preemption counts up to
    /// four times the average (`cost_average`), so a few lift the sampled one. With the larger
    /// alone, a worker on a shared CPU holding 3,000 chunks of 1.3 us (first turns' average)
    /// judged them 87 us each, over the floor, and advertised no backlog while the worker on
    /// the free CPU idled (`user_probe`, a spinning thread on CPU 1); and with the averages
    /// alone, 138 chunks timed at 1.1-1.5 us each were judged by a first turns' average of 82
    /// ns (a collector's), short of the floor.
    fn light_backlog(&self, floor_ns: u64, look: usize) -> Option<u64> {
        self.light_backlog_of(floor_ns, look, |q, k| q.lendable(k, 0))
    }

    /// [`light_backlog`](Self::light_backlog), the estimate taken from the last of the `look`
    /// last waiting colors that `takes` picks (what the loan will carry).
    fn light_backlog_of(
        &self,
        floor_ns: u64,
        look: usize,
        takes: impl Fn(&ColorQueue, usize) -> bool,
    ) -> Option<u64> {
        if self.ready.len() < LIGHT_BACKLOG_COLORS {
            return None;
        }
        let lendable = self.ready.iter().rev().take(look).find(|&&k| takes(self, k))?;
        let own = self.slots[*lendable].event_ns;
        let (larger, smaller) =
            (self.event_ns.max(self.first_ns), self.event_ns.min(self.first_ns));
        let per_color = match own {
            1.. if own <= floor_ns => own,
            _ if larger > floor_ns => smaller,
            _ => larger,
        };
        ((1..=floor_ns).contains(&per_color)
            && (self.ready.len() as u64).saturating_mul(per_color) >= floor_ns.saturating_mul(2))
        .then_some(per_color)
    }

    /// Lends `thief` up to `n` of the waiting colors `takes` picks, from the back of the line,
    /// never the first if `keep_first` (a request's answer: it runs soon anyway); a grouped
    /// color brings its waiting group along (groups move whole, counted as one). A color not
    /// timed yet goes with `estimate` (what the backlog was judged by): the borrower does not
    /// watch its turn (a clock read on each side, and a flush of the borrower's batches before
    /// it: one message a batch, the return of the color before).
    fn lend_from_back(
        &mut self,
        thief: usize,
        n: usize,
        takes: impl Fn(&ColorQueue, usize) -> bool,
        estimate: u64,
        keep_first: bool,
    ) -> Vec<Loan> {
        let first = usize::from(keep_first);
        let mut loans = Vec::new();
        let (mut taken, mut pos) = (0, self.ready.len());
        // A removal leaves the positions before it as they were.
        while taken < n && pos > first {
            pos -= 1;
            if !takes(self, self.ready[pos]) {
                continue;
            }
            let Some(mut loan) = self.lend_at(thief, pos) else { continue };
            if loan.event_ns == 0 {
                loan.event_ns = estimate;
            }
            taken += 1;
            if let Some(g) = loan.color.group() {
                loans.extend(self.lend_group_mates(thief, g, 0));
                // Mates before `pos` moved the colors after them one place down.
                pos = pos.min(self.ready.len());
            }
            loans.push(loan);
        }
        loans
    }

    /// A waiting color that holds one event and may be lent: to a slower thief, a piece of work
    /// that ends ([`lend_single`](Self::lend_single)).
    fn single(&self, key: usize) -> bool {
        self.lendable(key, 0) && self.slots[key].events.len() == 1
    }

    /// Lends `thief` up to `max` waiting colors that hold one event each, from the back of the
    /// line, at most `part` thousandths of the waiting colors (one at least), as
    /// [`lend_from_back`](Self::lend_from_back) does (behind a long turn the first waits the
    /// whole turn, and may go: `keep_first` false). What a thief
    /// on a CPU clearly slower than this worker's is lent first (`steal::lend`,
    /// `steal::lend_behind_long_turn`; `part` is its share of the two CPUs,
    /// `steal::slower_part`). Such a color is a piece of work that ends (a chunk of a job); a
    /// color with events queued is fed by posts (a collector, a consumer, an actor's mailbox),
    /// and lent, its posts follow it as forwards, so that its whole stream then runs at the
    /// slower CPU's pace. One event is a weak sign: a collector just drained holds one result
    /// at the back of the line until its next turn, and may go then (not seen in `user_probe`'s
    /// runs).
    pub(crate) fn lend_single(
        &mut self,
        thief: usize,
        max: usize,
        estimate: u64,
        part: u32,
        keep_first: bool,
    ) -> Vec<Loan> {
        let n = part_of(self.ready.len(), part).min(max);
        self.lend_from_back(thief, n, |q, k| q.single(k), estimate, keep_first)
    }

    /// Lends `thief` every waiting member of group `g` that may be lent (groups move whole).
    fn lend_group_mates(&mut self, thief: usize, g: u32, min_weight_ns: u64) -> Vec<Loan> {
        let mut loans = Vec::new();
        while let Some(pos) = self.ready.iter().rposition(|&k| {
            self.slots[k].color.group() == Some(g) && self.lendable(k, min_weight_ns)
        }) {
            loans.extend(self.lend_at(thief, pos));
        }
        loans
    }

    /// Lends colors with a backlog of at least `floor_ns` to `thief`, the ones that would run
    /// last here first, never the first, at most `max` and at most half of the waiting colors:
    /// this worker keeps at least one waiting color (lending a lone color would move work, not
    /// share it). With none such but a few heavy colors ([`few_heavy`](Self::few_heavy)) or a
    /// light backlog ([`light_backlog`](Self::light_backlog)), it lends the heavy ones, or the
    /// colors that may be lent, from the back of the line, up to half of the waiting colors and
    /// at most [`LIGHT_LOAN_MAX`] (`max` bounds the backlogged ones only).
    ///
    /// To a slower thief (a CPU clearly slower than this worker's: another process shares it;
    /// `slower` is its part of the line, `steal::slower_part`), colors of one event first
    /// ([`lend_single`](Self::lend_single)), if they are a light backlog or a few heavy ones;
    /// else backlogged colors, that part of the line at most, and one of them at least stays
    /// here ([`lend_to_slower`](Self::lend_to_slower)); light colors of several events each
    /// stay (fed by posts, as below). A backlogged color
    /// is mostly one fed by posts (a collector of results, a consumer), which go on to the
    /// thief as forwards and run at its pace: a user's sum beside a thread spinning on CPU 1
    /// lent its collector, 4,000 results queued, to worker 1 (a quarter of its CPU), which
    /// then ran all 7,813 of them while worker 0, done with its chunks, forwarded each in a
    /// batch of its own (`user_probe`, `BUSY=1`: 9-16 ms a sum against tokio-mt's 5-6). Where
    /// several are backlogged (a fan-out's receivers), the thief still takes its part.
    pub(crate) fn lend_backlog(
        &mut self,
        thief: usize,
        max: usize,
        floor_ns: u64,
        slower: Option<u32>,
    ) -> Vec<Loan> {
        if let Some(part) = slower {
            return self.lend_to_slower(thief, max, floor_ns, part);
        }
        let n = (self.ready.len() / 2).min(max);
        let mut loans = self.lend_backlogged(thief, n, floor_ns);
        if loans.is_empty() {
            let n = (self.ready.len() / 2).min(LIGHT_LOAN_MAX);
            if self.few_heavy(floor_ns) {
                // Each timed itself: the estimate goes with none of them.
                loans = self.lend_from_back(thief, n, |q, k| q.heavy_work(k).is_some(), 0, true);
            } else if let Some(estimate) = self.light_backlog(floor_ns, usize::MAX) {
                let lendable = |q: &ColorQueue, k| q.lendable(k, 0);
                loans = self.lend_from_back(thief, n, lendable, estimate, true);
            }
        }
        loans
    }

    /// [`lend_backlog`](Self::lend_backlog) to a thief on a clearly slower CPU, lent `part`
    /// thousandths of the line at most: colors of one event ([`lend_single`](Self::lend_single))
    /// that are a light backlog together (the estimate from one of them) or a few heavy ones;
    /// else backlogged colors, one of them at least staying here.
    fn lend_to_slower(&mut self, thief: usize, max: usize, floor_ns: u64, part: u32) -> Vec<Loan> {
        let estimate = match self.light_backlog_of(floor_ns, usize::MAX, |q, k| q.single(k)) {
            Some(estimate) => Some(estimate),
            // Each timed itself: the estimate goes with none of them.
            None => self.few_heavy(floor_ns).then_some(0),
        };
        if let Some(estimate) = estimate {
            let loans = self.lend_single(thief, LIGHT_LOAN_MAX, estimate, part, true);
            if !loans.is_empty() {
                return loans;
            }
        }
        let n = part_of(self.ready.len(), part).min(max);
        // Counted up to what changes the answer (a look at a slot is a cache line).
        let backlogged =
            self.ready.iter().filter(|&&k| self.backlogged(k, floor_ns)).take(n + 1).count();
        self.lend_backlogged(thief, n.min(backlogged.saturating_sub(1)), floor_ns)
    }

    /// Lends `thief` up to `n` colors with a backlog of `floor_ns`, the last to run here first,
    /// never the first.
    fn lend_backlogged(&mut self, thief: usize, n: usize, floor_ns: u64) -> Vec<Loan> {
        let mut loans = Vec::new();
        while loans.len() < n {
            // Never the first to run here: it runs soon anyway (as `has_backlog` judges).
            let pos = self.ready.iter().rposition(|&k| self.backlogged(k, floor_ns));
            let Some(pos) = pos.filter(|&p| p > 0) else { break };
            loans.extend(self.lend_at(thief, pos));
        }
        loans
    }

    /// True if the first color to run has a backlog of `floor_ns` and may be lent (what a thief
    /// may wait a turn for: `steal::defers`).
    pub(crate) fn first_backlogged(&self, floor_ns: u64) -> bool {
        self.ready.front().is_some_and(|&k| self.backlogged(k, floor_ns))
    }

    fn lendable(&self, key: usize, min_weight_ns: u64) -> bool {
        let s = &self.slots[key];
        // With a floor, a color not timed yet stays (its first turn here, watched, tells whether
        // it is worth moving): moving a light one costs more than waiting does.
        s.lease == Lease::Local && !s.pinned && s.holding == 0 && s.weight_ns >= min_weight_ns
    }

    /// True if at least `n` waiting colors could be lent now (looks at the first 64 only).
    pub(crate) fn has_lendable(&self, min_weight_ns: u64, n: usize) -> bool {
        self.ready
            .iter()
            .take(64)
            .filter(|&&k| self.lendable(k, min_weight_ns))
            .nth(n - 1)
            .is_some()
    }

    /// Lends one color to `thief`: the ready color that would run last here, among those homed
    /// here and not pinned (a borrowed color is never lent on). Returns `None` if there is none.
    #[cfg(test)]
    pub(crate) fn lend(&mut self, thief: usize) -> Option<Loan> {
        self.lend_weighing(thief, 0)
    }

    /// [`lend`](ColorQueue::lend), skipping colors whose turns are lighter than `min_weight_ns`
    /// (cost-aware stealing: moving them costs more than it saves).
    pub(crate) fn lend_weighing(&mut self, thief: usize, min_weight_ns: u64) -> Option<Loan> {
        let pos = self.ready.iter().rposition(|&k| self.lendable(k, min_weight_ns))?;
        self.lend_at(thief, pos)
    }

    /// Lends the ready color at position `pos` of the ready list.
    fn lend_at(&mut self, thief: usize, pos: usize) -> Option<Loan> {
        let key = self.remove_from_line(pos)?;
        let slot = &mut self.slots[key];
        slot.queued = false;
        let events = std::mem::take(&mut slot.events);
        let urgent = std::mem::take(&mut slot.urgent);
        self.pending -= events.len();
        slot.lease = Lease::Away {
            to: thief,
            outstanding: events.len() as u64,
            moved: false,
            recalled: false,
        };
        let color = slot.color;
        self.list_lent(color);
        Some(Loan { color, events, urgent, event_ns: self.slots[key].event_ns })
    }

    /// Lends up to `max` colors to `thief` (see [`lend`](ColorQueue::lend)), the ones that would
    /// run last here first; with `half`, at most half of the lendable waiting colors (at least
    /// one), so that the victim keeps work. A grouped color brings every waiting lendable member
    /// of its group along (groups move whole; they are split only because a thief is idle).
    pub(crate) fn lend_many(
        &mut self,
        thief: usize,
        max: usize,
        half: bool,
        min_weight_ns: u64,
    ) -> Vec<Loan> {
        // Counted up to what can change the answer: a look at every waiting color's slot (a
        // cache line each) made a steal from a fan-out of ten thousand colors cost as much.
        let enough = if half { max.saturating_mul(2) } else { max };
        let lendable =
            self.ready.iter().filter(|&&k| self.lendable(k, min_weight_ns)).take(enough).count();
        let n = if half { (lendable / 2).max(1) } else { lendable }.min(max);
        let mut loans = Vec::new();
        let mut taken = 0;
        while taken < n {
            let Some(loan) = self.lend_weighing(thief, min_weight_ns) else { break };
            taken += 1;
            if let Some(g) = loan.color.group() {
                loans.extend(self.lend_group_mates(thief, g, min_weight_ns));
            }
            loans.push(loan);
        }
        loans
    }

    /// Pins a color homed here: it is never lent again (if it is lent now, it comes back as
    /// usual and stays).
    pub(crate) fn pin(&mut self, color: Color) {
        let key = match self.index.get(&color) {
            Some(&k) => k,
            None => self.insert(color, Lease::Local),
        };
        self.slots[key].pinned = true;
    }

    fn guest_slot(&mut self, color: Color, home: usize) -> usize {
        match self.index.get(&color) {
            Some(&k) => {
                debug_assert!(
                    matches!(self.slots[k].lease, Lease::Guest { .. }),
                    "forward for color {color:?} held as {:?}",
                    self.slots[k].lease
                );
                k
            }
            None => {
                self.guests.insert(color);
                let lease = Lease::Guest { home, received: 0, resident: false, relieved: false };
                let key = self.insert(color, lease);
                self.arrive(key);
                key
            }
        }
    }

    fn insert(&mut self, color: Color, lease: Lease) -> usize {
        if lease == Lease::Local {
            self.recur.created(color);
        }
        #[cfg(test)]
        {
            self.slots_made += 1;
        }
        let events = self.spare.pop().unwrap_or_default();
        let key = self.slots.insert(Slot {
            color,
            events,
            urgent: 0,
            queued: false,
            lease,
            pinned: false,
            weight_ns: 0,
            event_ns: 0,
            traffic: Traffic::default(),
            arrived: self.dropped_arrival,
            fence: if lease == Lease::Local { Fence::open() } else { Fence::default() },
            holding: 0,
            listed_ahead: false,
            // A guest (lent, moved by `follow`) is no new color: it ran at home.
            ran: !self.newest_first || lease != Lease::Local,
        });
        self.index.insert(color, key);
        key
    }

    #[inline]
    fn enqueue(&mut self, key: usize, task: Task, urgent: bool, fresh: bool) {
        let running = self.running == Some(key);
        let slot = &mut self.slots[key];
        // (`ran` starts true without `newest_first`, and for guests: those are never fresh.)
        let fresh = fresh & !slot.ran;
        Self::push_event(slot, task, urgent);
        self.pending += 1;
        // `schedule` on the slot at hand: a second look-up of it in the slab was a bounds and
        // a vacancy check per post.
        let line =
            Line { ready: &mut self.ready, urgent: &mut self.urgent, fresh: &mut self.fresh };
        Self::schedule_slot(line, slot, key, running, urgent, fresh);
        // Looked at every few posts, not only as the backlog forms: a color that came here
        // (moved, lent) is not timed here yet, and its cost is estimated until it is.
        if self.backlog_turns
            && slot.events.len().is_multiple_of(BACKLOG_TURN_EVENTS)
            && may_jump(slot)
        {
            self.list_ahead(key);
        }
    }

    /// Whether the color in `key` waits in the line with a backlog of long events worth turns
    /// ahead of it (see "Turns: the line, and backlogs"): asked when it may be listed, and again
    /// when its turn from the list comes (the line may have changed since).
    fn jumps_line(&self, key: usize) -> bool {
        let slot = &self.slots[key];
        let events = slot.events.len();
        if !slot.queued
            || events < BACKLOG_TURN_EVENTS
            || self.event_cost(key) < BACKLOG_TURN_EVENT_NS
        {
            return false;
        }
        // `pending / colors` events wait per color here on average, this one's among them.
        let colors = self.ready.len();
        if events.saturating_mul(colors) < self.pending.saturating_mul(BACKLOG_TURN_SHARE) {
            return false;
        }
        // What the others ahead of it hold: a turn takes about `per_event` an event, the lesser
        // of this worker's two averages (sampled turns; colors' first turns), since either may
        // hold this color's own long turns, or a driver's first one.
        let per_event = match (self.event_ns, self.first_ns) {
            (0, f) => f,
            (e, 0) => e,
            (e, f) => e.min(f),
        };
        (colors.saturating_sub(1) as u64).saturating_mul(per_event) >= BACKLOG_TURN_WAIT_NS
    }

    /// Lists the color in `key` for turns ahead of the line if [`jumps_line`](Self::jumps_line).
    #[cold]
    fn list_ahead(&mut self, key: usize) {
        if !self.slots[key].listed_ahead && self.jumps_line(key) {
            self.slots[key].listed_ahead = true;
            self.ahead.push_back(key);
        }
    }

    /// The first listed color that still jumps the line, taken out of it for the next turn;
    /// `None` if there is none (the line's front runs).
    #[cold]
    fn take_ahead(&mut self) -> Option<usize> {
        // A line's turn between two from the list. (The flag may outlive a list emptied since:
        // the next listed color then waits one more turn of the line.)
        if std::mem::take(&mut self.after_ahead_turn) {
            return None;
        }
        // An urgent post put its color first in line (`ochre::post_urgent`): it runs first.
        if self.urgent > 0 {
            return None;
        }
        while let Some(key) = self.ahead.pop_front() {
            let listed = self.slots.get_mut(key).map(|s| std::mem::take(&mut s.listed_ahead));
            if listed != Some(true) || !self.jumps_line(key) {
                continue;
            }
            // From the back: a color's turn ends with it there, and it is listed then.
            let pos = self.ready.iter().rposition(|&k| k == key);
            debug_assert!(pos.is_some(), "a queued color waits in the line");
            let Some(pos) = pos else { continue };
            self.remove_from_line(pos);
            self.after_ahead_turn = true;
            return Some(key);
        }
        None
    }

    /// Adds `task` to `slot`'s events: behind the urgent ones if `urgent`, else at the back.
    #[inline]
    fn push_event(slot: &mut Slot, task: Task, urgent: bool) {
        if urgent {
            slot.events.insert(slot.urgent, task);
            slot.urgent += 1;
        } else {
            slot.events.push_back(task);
        }
    }

    #[inline]
    fn schedule(&mut self, key: usize, urgent: bool) {
        let running = self.running == Some(key);
        let line =
            Line { ready: &mut self.ready, urgent: &mut self.urgent, fresh: &mut self.fresh };
        Self::schedule_slot(line, &mut self.slots[key], key, running, urgent, false);
    }

    /// Puts `slot` (of `key`; `running`: its turn is on) in the ready list if it is not there,
    /// as a fresh color if `fresh` (see "Turns: newest first").
    #[inline]
    fn schedule_slot(
        line: Line<'_>,
        slot: &mut Slot,
        key: usize,
        running: bool,
        urgent: bool,
        fresh: bool,
    ) {
        if !slot.queued && !running {
            slot.queued = true;
            if urgent | fresh {
                line.join_front(key, urgent);
            } else {
                line.ready.push_back(key);
            }
        }
    }

    #[inline]
    fn maybe_release(&mut self, key: usize) {
        // The table's size first: under it (nearly always) only the queue's capacity is read.
        if self.slots.len() > self.recur.keep_idle() {
            self.release_idle(key);
        } else {
            self.trim_if_large(key);
        }
    }

    #[inline]
    fn trim_if_large(&mut self, key: usize) {
        if self.slots[key].events.capacity() > KEEP_QUEUE_CAPACITY {
            self.trim_queue(key);
        }
    }

    /// An idle slot gives back the memory of a large backlog it once held.
    #[cold]
    fn trim_queue(&mut self, key: usize) {
        self.slots[key].events.shrink_to(KEEP_QUEUE_CAPACITY);
    }

    #[cold]
    fn release_idle(&mut self, key: usize) {
        let slot = &self.slots[key];
        if slot.events.is_empty()
            && !slot.queued
            && !slot.pinned
            && slot.holding == 0
            && slot.lease == Lease::Local
            && self.running != Some(key)
        {
            self.dropped_arrival = self.dropped_arrival.max(slot.arrived);
            let color = self.drop_slot(key);
            self.recur.dropped(color);
        } else {
            self.trim_if_large(key);
        }
    }

    /// Removes the slot at `key`, keeping its empty event queue for a new slot
    /// ([`spare`](Self::spare)); returns its color.
    fn drop_slot(&mut self, key: usize) -> Color {
        let Slot { color, events, .. } = self.slots.remove(key);
        self.index.remove(&color);
        self.keep_spare(events);
        color
    }

    /// Keeps `events`, an empty queue, for a new slot if its buffer is worth keeping.
    fn keep_spare(&mut self, events: VecDeque<Task>) {
        if events.is_empty()
            && events.capacity() > 0
            && events.capacity() <= KEEP_QUEUE_CAPACITY
            && self.spare.len() < SPARE_QUEUES
        {
            self.spare.push(events);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    type Log = Arc<Mutex<Vec<u64>>>;

    fn task(log: &Log, v: u64) -> Task {
        let log = log.clone();
        Task::new(move || log.lock().unwrap().push(v))
    }

    /// A color homed on worker `w` of `n`.
    fn color_on(w: usize, n: usize, skip: usize) -> Color {
        colors_on(w, n, skip + 1)[skip]
    }

    /// The first `count` colors homed on worker `w` of `n`.
    fn colors_on(w: usize, n: usize, count: usize) -> Vec<Color> {
        (0..).map(Color).filter(|&c| home_of(c, Placement::flat(n)) == w).take(count).collect()
    }

    /// Starts the next turn and runs its events; returns its key.
    fn run_turn(q: &mut ColorQueue) -> usize {
        let (key, _) = q.start_turn().expect("a turn");
        while let Some(t) = q.pop(key) {
            t.run();
        }
        key
    }

    fn run_all(q: &mut ColorQueue) -> Vec<Returned> {
        let mut returns = vec![];
        while let Some((k, _)) = q.start_turn() {
            while let Some(t) = q.pop(k) {
                t.run();
            }
            returns.extend(q.end_turn(k));
        }
        returns
    }

    /// A pop prefetches the closure `PREFETCH_AHEAD` places behind the next event, and
    /// `prefetched` names that event (the simulator charges its read from it).
    #[test]
    fn a_pop_prefetches_the_event_eight_behind_the_next() {
        let mut q = ColorQueue::new(0, Placement::flat(1));
        let n = |i: usize| std::num::NonZeroUsize::new(i).unwrap();
        for i in 1..=20 {
            assert!(matches!(q.post(Color(1), Task::sim(n(i)), false), Route::Queued));
        }
        let (key, _) = q.start_turn().unwrap();
        for popped in 1..=20 {
            assert_eq!(q.pop(key).and_then(Task::sim_number), Some(n(popped)));
            let ahead = popped + 1 + PREFETCH_AHEAD;
            let want = (ahead <= 20).then(|| n(ahead));
            assert_eq!(q.prefetched(key).and_then(Task::sim_number_of), want, "after {popped}");
        }
        assert!(q.pop(key).is_none());
    }

    #[test]
    fn local_fifo_and_remote_routing() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(2));
        let mine = color_on(0, 2, 0);
        let theirs = color_on(1, 2, 0);
        for i in 0..3 {
            assert!(matches!(q.post(mine, task(&log, i), false), Route::Queued));
        }
        assert!(matches!(q.post(theirs, task(&log, 9), false), Route::Remote { home: 1, .. }));
        assert_eq!(q.pending(), 3);
        run_all(&mut q);
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 2]);
        assert_eq!(q.pending(), 0);
    }

    /// Colors that share an entry of the cache of recent routes, and slots freed and taken by
    /// other colors, never send an event to another color's queue or keep a remote color here.
    #[test]
    fn the_cache_of_recent_routes_never_misroutes() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(2));
        let mut same =
            (0..).map(Color).filter(|&c| recent_entry(c) == recent_entry(color_on(0, 2, 0)));
        let mut here = same.clone().filter(|&c| home_of(c, Placement::flat(2)) == 0);
        let (a, b, c) = (here.next().unwrap(), here.next().unwrap(), here.next().unwrap());
        let theirs = same.find(|&c| home_of(c, Placement::flat(2)) == 1).unwrap();
        let turns = |q: &mut ColorQueue| {
            let mut turns = vec![];
            while let Some((k, color)) = q.start_turn() {
                let before = log.lock().unwrap().len();
                while let Some(t) = q.pop(k) {
                    t.run();
                }
                turns.push((color, log.lock().unwrap()[before..].to_vec()));
                let _ = q.end_turn(k);
            }
            turns
        };
        for (color, v) in [(a, 1), (b, 2), (a, 3), (b, 4)] {
            assert!(matches!(q.post(color, task(&log, v), false), Route::Queued));
        }
        assert_eq!(turns(&mut q), vec![(a, vec![1, 3]), (b, vec![2, 4])]);
        // The slots were freed: the entry names a free slot, then one another color took.
        assert!(matches!(q.post(theirs, task(&log, 9), false), Route::Remote { home: 1, .. }));
        for (color, v) in [(c, 5), (a, 6), (c, 7)] {
            assert!(matches!(q.post(color, task(&log, v), false), Route::Queued));
        }
        assert!(matches!(q.post(theirs, task(&log, 9), false), Route::Remote { home: 1, .. }));
        assert_eq!(turns(&mut q), vec![(c, vec![5, 7]), (a, vec![6])]);
    }

    /// A stolen color goes home when its queue empties, unless the thief's policy keeps it
    /// (`follow::keeps_loan`): then it stays as a resident.
    #[test]
    fn a_loan_goes_home_or_stays_as_a_resident_as_the_policy_says() {
        for keep in [false, true] {
            let log = Log::default();
            let mut home = ColorQueue::new(0, Placement::flat(2));
            let mut thief = ColorQueue::new(1, Placement::flat(2));
            let (first, c) = (color_on(0, 2, 0), color_on(0, 2, 1));
            let _ = home.post(first, task(&log, 0), false);
            for v in 1..=30 {
                let _ = home.post(c, task(&log, v), false);
            }
            let k = *home.index.get(&c).unwrap();
            home.record_turn(k, 64_000, 64);
            for loan in home.lend_backlog(1, 8, 20_000, None) {
                thief.adopt(0, loan);
            }
            let (key, color) = thief.start_turn().expect("the loan is ready at the thief");
            assert_eq!(color, c);
            while let Some(t) = thief.pop(key) {
                t.run();
            }
            let end = thief.end_turn_shedding(
                key,
                |_, _| false,
                |home, _, _, what: Shed| {
                    assert!(what.loan, "asked as a loan");
                    home.filter(|_| !keep)
                },
            );
            if keep {
                assert!(end.is_none());
                // Kept because its home's CPU is clearly worse: relieved.
                let kept = Lease::Guest { home: 0, received: 30, resident: true, relieved: true };
                assert_eq!(thief.lease(c), Some(kept));
            } else {
                assert!(matches!(end, Some(TurnEnd::Return(r)) if r.color == c && !r.resident));
                assert_eq!(thief.lease(c), None);
            }
            assert_eq!(*log.lock().unwrap(), (1..=30).collect::<Vec<_>>());
        }
    }

    /// A relieved resident (moved off a home that wanted CPU) whose queue empties when no other
    /// color waits here asks the policy, though `keeps` would keep it; with a color waiting, the
    /// common end keeps it unasked. A resident its traffic moved is not asked either.
    #[test]
    fn a_relieved_resident_asks_to_go_home_when_it_would_leave_its_worker_idle() {
        let log = Log::default();
        let mut g = ColorQueue::new(1, Placement::flat(2));
        let c = color_on(0, 2, 0);
        g.adopt_moved(c, 0, Some(task(&log, 0)), false, true);
        let key = run_turn(&mut g);
        let mut asked = None;
        let end = g.end_turn_shedding(
            key,
            |_, _| true,
            |home, ready, _, what: Shed| {
                asked = Some((ready, what.relieved));
                home
            },
        );
        assert_eq!(asked, Some((0, true)));
        assert!(matches!(end, Some(TurnEnd::Return(r)) if r.color == c && r.resident));
        // Again, with another color waiting here: kept without asking.
        g.adopt_moved(c, 0, Some(task(&log, 1)), false, true);
        let other = color_on(1, 2, 0);
        let _ = g.post(other, task(&log, 2), false);
        let (key, color) = g.start_turn().expect("ready");
        assert_eq!(color, c, "the resident came first");
        while let Some(t) = g.pop(key) {
            t.run();
        }
        let end = g.end_turn_shedding(key, |_, _| true, |_, _, _, _| panic!("asked"));
        assert!(end.is_none());
        // A resident its traffic moved, alone here: kept unasked.
        let mut g = ColorQueue::new(1, Placement::flat(2));
        g.adopt_moved(c, 0, Some(task(&log, 3)), false, false);
        let key = run_turn(&mut g);
        let end = g.end_turn_shedding(key, |_, _| true, |_, _, _, _| panic!("asked"));
        assert!(end.is_none());
    }

    /// The common end of a turn (`keeps` says the policy would keep the color) still judges
    /// what it must: a loan, a resident's window that is due, a pull; and a color at home takes
    /// the same path as a resident (its fence is open: a post to it from a color that arrived
    /// later is not held).
    #[test]
    fn the_common_end_of_a_turn_still_judges_loans_windows_and_pulls() {
        let log = Log::default();
        // A resident whose window is due: judged, and given back (its posts were forwarded).
        let mut g = ColorQueue::new(1, Placement::flat(2));
        let c = color_on(0, 2, 0);
        g.adopt_moved(c, 0, None, false, false);
        for v in 0..u64::from(follow::WINDOW) {
            g.accept_forward(c, 0, task(&log, v), false);
        }
        let key = run_turn(&mut g);
        let end = g.end_turn_shedding(
            key,
            |_, _| true,
            |home, _, _, what: Shed| home.filter(|_| what.moved_on),
        );
        assert!(matches!(end, Some(TurnEnd::Return(r)) if r.color == c && r.resident));
        // A resident with nothing due: kept without asking `shed`; and a post to a color at home
        // from it (it arrived after that color) is not held.
        g.adopt_moved(c, 0, Some(task(&log, 100)), false, false);
        let here = color_on(1, 2, 0);
        let key = run_turn(&mut g);
        assert!(matches!(g.post(here, task(&log, 101), false), Route::Queued));
        let end = g.end_turn_shedding(key, |_, _| true, |_, _, _, _| panic!("asked"));
        assert!(end.is_none());
        assert!(matches!(g.lease(c), Some(Lease::Guest { resident: true, .. })));
        // A color at home pulled by worker 0: pushed there.
        let key = run_turn(&mut g);
        g.slots[key].traffic.post_from(0);
        g.slots[key].traffic.pull();
        let end = g.end_turn_shedding(key, |_, _| true, |_, _, _, _| None);
        assert_eq!(end, Some(TurnEnd::Push { to: 0, color: here }));
        // A loan: asked as one, and goes home.
        let mut home = ColorQueue::new(0, Placement::flat(2));
        let (first, lent) = (color_on(0, 2, 1), color_on(0, 2, 2));
        let _ = home.post(first, task(&log, 200), false);
        let _ = home.post(lent, task(&log, 201), false);
        let mut thief = ColorQueue::new(1, Placement::flat(2));
        let loan = home.lend(1).expect("a loan");
        assert!([first, lent].contains(&loan.color));
        let lent = loan.color;
        thief.adopt(0, loan);
        let key = run_turn(&mut thief);
        let end = thief.end_turn_shedding(
            key,
            |_, _| true,
            |home, _, _, w: Shed| home.filter(|_| w.loan),
        );
        assert!(matches!(end, Some(TurnEnd::Return(r)) if r.color == lent && !r.resident));
    }

    #[test]
    fn urgent_goes_before_queued_events_in_posting_order() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1));
        let c = Color(5);
        let _ = q.post(c, task(&log, 1), false);
        let _ = q.post(c, task(&log, 2), false);
        let _ = q.post(c, task(&log, 10), true);
        let _ = q.post(c, task(&log, 11), true);
        run_all(&mut q);
        assert_eq!(*log.lock().unwrap(), vec![10, 11, 1, 2]);
    }

    #[test]
    fn urgent_from_the_running_color_precedes_its_remaining_events() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1));
        let c = Color(1);
        let _ = q.post(c, task(&log, 1), false);
        let _ = q.post(c, task(&log, 2), false);
        let (k, _) = q.start_turn().unwrap();
        q.pop(k).unwrap().run();
        // While event 1 runs, it posts 3 (normal) and 0 (urgent).
        let _ = q.post(c, task(&log, 3), false);
        let _ = q.post(c, task(&log, 0), true);
        while let Some(t) = q.pop(k) {
            t.run();
        }
        assert!(q.end_turn(k).is_none());
        assert_eq!(*log.lock().unwrap(), vec![1, 0, 2, 3]);
    }

    #[test]
    fn urgent_color_jumps_the_ready_list() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1));
        let _ = q.post(Color(1), task(&log, 1), false);
        let _ = q.post(Color(2), task(&log, 2), true);
        run_all(&mut q);
        assert_eq!(*log.lock().unwrap(), vec![2, 1]);
    }

    /// Runs turns until none is left; the colors in turn order (a turn's events all run).
    fn turn_order(q: &mut ColorQueue) -> Vec<Color> {
        let mut order = vec![];
        while let Some((k, c)) = q.start_turn() {
            while let Some(t) = q.pop(k) {
                t.run();
            }
            order.push(c);
            let _ = q.end_turn(k);
        }
        order
    }

    /// Starts the turn of `color` (it must be next) and posts to each of `to` from its handler.
    fn turn_posting(q: &mut ColorQueue, color: Color, to: &[Color], log: &Log) -> usize {
        let (k, c) = q.start_turn().expect("a turn");
        assert_eq!(c, color, "next turn");
        q.pop(k).expect("an event").run();
        for &d in to {
            let _ = q.post(d, task(log, d.0), false);
        }
        k
    }

    /// Colors a handler's post made ready run newest first; a color posted from outside keeps
    /// its place in line, in front of them. With the rule off, all run in line order.
    #[test]
    fn fresh_colors_run_newest_first_and_the_line_keeps_its_order() {
        for on in [true, false] {
            let log = Log::default();
            let mut q = ColorQueue::new(0, Placement::flat(1)).with_newest_first(on);
            let _ = q.post(Color(1), task(&log, 1), false);
            let k = turn_posting(&mut q, Color(1), &[Color(2), Color(3), Color(4)], &log);
            let _ = q.end_turn(k);
            // From outside the runtime: not fresh.
            let outside = q.receive_post(Color(5), task(&log, 5), false, None, |_, _, _| None);
            assert!(matches!(outside, Route::Queued));
            let want: Vec<Color> =
                if on { [4, 3, 2, 5].map(Color).into() } else { [2, 3, 4, 5].map(Color).into() };
            assert_eq!(turn_order(&mut q), want, "newest first {on}");
            assert_eq!((q.urgent, q.fresh), (0, 0));
        }
    }

    /// A color whose turn ends with events left goes in front of the fresh colors it posted:
    /// they run first (a producer's consumers), and it does not take the next turn again.
    #[test]
    fn a_turn_that_ends_with_events_left_lets_its_fresh_colors_run_first() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1)).with_newest_first(true);
        for _ in 0..2 {
            let _ = q.post(Color(1), task(&log, 1), false);
        }
        let k = turn_posting(&mut q, Color(1), &[Color(2), Color(3)], &log);
        // One of its two events ran: the turn ends with one left.
        assert!(q.end_turn(k).is_none());
        assert_eq!(turn_order(&mut q), [3, 2, 1].map(Color));
    }

    /// A chain of new colors, each posting to the next, takes turns newest first, but after
    /// `NEWEST_STREAK_MAX` of them in a row the line's front takes one.
    #[test]
    fn the_line_front_takes_a_turn_after_the_newest_streak() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1)).with_newest_first(true);
        let waiting = Color(1_000_000);
        let _ = q.post(Color(1), task(&log, 1), false);
        let _ = q.post(waiting, task(&log, 0), false);
        let mut turn = 0;
        let ran_at = loop {
            turn += 1;
            assert!(turn < 4 * NEWEST_STREAK_MAX as usize, "the waiting color never ran");
            let (k, c) = q.start_turn().expect("a turn");
            q.pop(k).expect("an event").run();
            if c == waiting {
                break turn;
            }
            let _ = q.post(Color(c.0 + 1), task(&log, c.0 + 1), false);
            let _ = q.end_turn(k);
        };
        // Color(1)'s turn from the front, then the streak, then the front's.
        assert_eq!(ran_at, NEWEST_STREAK_MAX as usize + 2);
    }

    /// A handler's post to a color that already took a turn here puts it in line: only new
    /// colors run newest first (two colors posting to each other keep the line's order).
    #[test]
    fn a_color_that_ran_here_keeps_the_line_order() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1)).with_newest_first(true);
        let (old, new, waiting) = (Color(1), Color(2), Color(3));
        let _ = q.post(old, task(&log, 1), false);
        let _ = turn_order(&mut q);
        let _ = q.post(Color(9), task(&log, 9), false);
        let _ = q.post(waiting, task(&log, 3), false);
        let k = turn_posting(&mut q, Color(9), &[old, new], &log);
        let _ = q.end_turn(k);
        assert_eq!(turn_order(&mut q), vec![new, waiting, old]);
    }

    /// An urgent post still puts its color first, ahead of the fresh ones.
    #[test]
    fn an_urgent_post_runs_before_fresh_colors() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1)).with_newest_first(true);
        let _ = q.post(Color(1), task(&log, 1), false);
        let k = turn_posting(&mut q, Color(1), &[Color(2), Color(3)], &log);
        let _ = q.end_turn(k);
        let _ = q.receive_post(Color(9), task(&log, 9), true, None, |_, _, _| None);
        assert_eq!(turn_order(&mut q), [9, 3, 2].map(Color));
    }

    /// Past `FRESH_MAX` fresh colors, the oldest go to the back of the line: a fan-out's last
    /// `FRESH_MAX` colors run newest first, then its first ones in posting order.
    #[test]
    fn past_fresh_max_the_older_fresh_colors_join_the_line() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1)).with_newest_first(true);
        let _ = q.post(Color(0), task(&log, 0), false);
        let n = FRESH_MAX as u64 + 10;
        let to: Vec<Color> = (1..=n).map(Color).collect();
        let k = turn_posting(&mut q, Color(0), &to, &log);
        let _ = q.end_turn(k);
        assert_eq!(q.fresh, FRESH_MAX);
        let want: Vec<Color> = (11..=n).rev().chain(1..=10).map(Color).collect();
        assert_eq!(turn_order(&mut q), want);
    }

    /// A lender gives what would run last here, the line's back, and keeps its fresh colors.
    #[test]
    fn lending_from_a_line_with_fresh_colors_keeps_its_count() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(2)).with_newest_first(true);
        let c = colors_on(0, 2, 6);
        let _ = q.post(c[0], task(&log, 0), false);
        let _ = q.post(c[1], task(&log, 1), false);
        let k = turn_posting(&mut q, c[0], &c[2..5], &log);
        let _ = q.end_turn(k);
        assert_eq!((q.ready.len(), q.fresh), (4, 3));
        let loan = q.lend(1).expect("a loan");
        assert_eq!(loan.color, c[1]);
        assert_eq!((q.ready.len(), q.fresh), (3, 3));
        assert_eq!(turn_order(&mut q), vec![c[4], c[3], c[2]]);
    }

    /// Random posts (from outside, from handlers, urgent), turns that end with events left,
    /// and takes from anywhere in the ready list: its parts' counts stay within it, and every
    /// event runs once.
    #[test]
    fn random_turns_keep_the_fresh_count_within_the_line() {
        let ran = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut q = ColorQueue::new(0, Placement::flat(1)).with_newest_first(true);
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let counted = |ran: &Arc<std::sync::atomic::AtomicU64>| {
            let ran = ran.clone();
            Task::new(move || _ = ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
        };
        let mut posted = 0;
        // Under Miri (CI runs this module's tests there), fewer.
        for _ in 0..if cfg!(miri) { 500 } else { 20_000 } {
            match next(4) {
                0 => {
                    let c = Color(next(40));
                    let urgent = next(10) == 0;
                    let _ = q.receive_post(c, counted(&ran), urgent, None, |_, _, _| None);
                    posted += 1;
                }
                1 if q.ready.len() > 2 => {
                    let pos = next(q.ready.len() as u64) as usize;
                    let key = q.remove_from_line(pos).expect("in line");
                    q.slots[key].queued = false;
                    let line =
                        Line { ready: &mut q.ready, urgent: &mut q.urgent, fresh: &mut q.fresh };
                    ColorQueue::schedule_slot(
                        line,
                        &mut q.slots[key],
                        key,
                        false,
                        false,
                        next(2) == 0,
                    );
                }
                _ => {
                    let Some((k, _)) = q.start_turn() else { continue };
                    for _ in 0..=next(3) {
                        let Some(t) = q.pop(k) else { break };
                        t.run();
                        for _ in 0..next(3) {
                            let _ = q.post(Color(next(40)), counted(&ran), next(20) == 0);
                            posted += 1;
                        }
                    }
                    let _ = q.end_turn(k);
                }
            }
            assert!(q.urgent + q.fresh <= q.ready.len());
            assert!(q.fresh <= FRESH_MAX);
            let urgent_front = q.ready.iter().take(q.urgent).all(|&k| q.slots[k].urgent > 0);
            assert!(urgent_front, "an urgent color in front holds urgent posts");
        }
        let _ = turn_order(&mut q);
        assert_eq!(ran.load(std::sync::atomic::Ordering::Relaxed), posted);
    }

    #[test]
    fn lend_forward_return_round_trip() {
        let log = Log::default();
        let (home, thief) = (0, 1);
        let mut h = ColorQueue::new(home, Placement::flat(2));
        let mut t = ColorQueue::new(thief, Placement::flat(2));
        let c = color_on(home, 2, 0);
        let other = color_on(home, 2, 1);
        let _ = h.post(other, task(&log, 100), false);
        for i in 0..3 {
            let _ = h.post(c, task(&log, i), false);
        }
        // The last ready color is lent.
        let loan = h.lend(thief).unwrap();
        assert_eq!(loan.color, c);
        assert_eq!(loan.events.len(), 3);
        assert_eq!(
            h.lease(c),
            Some(Lease::Away { to: thief, outstanding: 3, moved: false, recalled: false })
        );
        assert_eq!(h.pending(), 1);
        t.adopt(home, loan);
        // A post to c at home is forwarded.
        let Route::Forward { to, task: fwd } = h.post(c, task(&log, 3), false) else {
            panic!("not forwarded")
        };
        assert_eq!(to, thief);
        t.accept_forward(c, home, fwd, false);
        let returns = run_all(&mut t);
        assert_eq!(returns, vec![Returned { home, color: c, ran: 4, resident: false }]);
        assert_eq!(t.lease(c), None);
        h.returned(c, 4);
        assert_eq!(h.lease(c), Some(Lease::Local));
        assert!(matches!(h.post(c, task(&log, 4), false), Route::Queued));
        run_all(&mut h);
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 2, 3, 100, 4]);
    }

    #[test]
    fn a_dropped_slot_leaves_its_queue_to_the_next_color_that_arrives() {
        let log = Log::default();
        let mut t = ColorQueue::new(1, Placement::flat(2));
        let (c, d, e) = (color_on(0, 2, 0), color_on(0, 2, 1), color_on(0, 2, 2));
        t.accept_forward(c, 0, task(&log, 0), false);
        assert_eq!(run_all(&mut t), vec![Returned { home: 0, color: c, ran: 1, resident: false }]);
        assert_eq!(t.spare.len(), 1, "c's queue kept when its slot went");
        t.accept_forward(d, 0, task(&log, 1), false);
        assert!(t.spare.is_empty(), "d's new slot took it");
        assert!(t.slots[t.index[&d]].events.capacity() > 0);
        // A queue grown past what is kept goes with its slot.
        for v in 0..2 * KEEP_QUEUE_CAPACITY as u64 {
            t.accept_forward(e, 0, task(&log, 2 + v), false);
        }
        run_all(&mut t);
        assert_eq!(t.spare.len(), 1, "d's queue only");
        assert!(t.spare.iter().all(|q| q.is_empty() && q.capacity() <= KEEP_QUEUE_CAPACITY));
        // A loan brings its own queue: the spare one a new slot took is kept again.
        let mut events = VecDeque::new();
        events.push_back(task(&log, 1000));
        t.adopt(0, Loan { color: c, events, urgent: 0, event_ns: 0 });
        assert_eq!(t.spare.len(), 1);
        run_all(&mut t);
        assert_eq!(log.lock().unwrap().len(), 3 + 2 * KEEP_QUEUE_CAPACITY);
    }

    #[test]
    fn a_return_racing_a_forward_keeps_the_color_away() {
        let log = Log::default();
        let mut h = ColorQueue::new(0, Placement::flat(2));
        let mut t = ColorQueue::new(1, Placement::flat(2));
        let c = color_on(0, 2, 0);
        let _ = h.post(c, task(&log, 0), false);
        t.adopt(0, h.lend(1).unwrap());
        // Home forwards event 1 while the thief is emptying its slot.
        let Route::Forward { task: fwd, .. } = h.post(c, task(&log, 1), false) else { panic!() };
        let first = run_all(&mut t);
        assert_eq!(first, vec![Returned { home: 0, color: c, ran: 1, resident: false }]);
        h.returned(c, 1);
        assert_eq!(
            h.lease(c),
            Some(Lease::Away { to: 1, outstanding: 1, moved: false, recalled: false }),
            "still lent"
        );
        // A post at home now is still forwarded, after event 1.
        let Route::Forward { task: fwd2, .. } = h.post(c, task(&log, 2), false) else { panic!() };
        t.accept_forward(c, 0, fwd, false);
        t.accept_forward(c, 0, fwd2, false);
        let second = run_all(&mut t);
        assert_eq!(second, vec![Returned { home: 0, color: c, ran: 2, resident: false }]);
        h.returned(c, 2);
        assert_eq!(h.lease(c), Some(Lease::Local));
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn guests_queue_their_own_posts_locally_and_are_never_lent_on() {
        let log = Log::default();
        let mut t = ColorQueue::new(1, Placement::flat(2));
        let c = color_on(0, 2, 0);
        let mut events = VecDeque::new();
        events.push_back(task(&log, 0));
        t.adopt(0, Loan { color: c, events, urgent: 0, event_ns: 0 });
        assert!(t.lend(0).is_none(), "a borrowed color was lent on");
        // Posted outside a turn (any color may have arrived): held until the home syncs.
        let Route::Held(Some(ask)) = t.post(c, task(&log, 1), false) else { panic!("not held") };
        assert_eq!((ask.home, ask.color), (0, c));
        assert_eq!(t.synced(c, ask.epoch), None);
        // Holding a guest, another color of the same home still goes home (looked up).
        let other = color_on(0, 2, 1);
        assert!(matches!(t.post(other, task(&log, 9), false), Route::Remote { home: 0, .. }));
        assert_eq!(run_all(&mut t), vec![Returned { home: 0, color: c, ran: 1, resident: false }]);
        // Once returned, posts from the thief go home.
        assert!(matches!(t.post(c, task(&log, 2), false), Route::Remote { home: 0, .. }));
        assert_eq!(*log.lock().unwrap(), vec![0, 1]);
    }

    #[test]
    fn lending_keeps_urgent_prefix() {
        let log = Log::default();
        let mut h = ColorQueue::new(0, Placement::flat(2));
        let mut t = ColorQueue::new(1, Placement::flat(2));
        let c = color_on(0, 2, 0);
        let _ = h.post(c, task(&log, 2), false);
        let _ = h.post(c, task(&log, 1), true);
        t.adopt(0, h.lend(1).unwrap());
        let Route::Forward { task: u, .. } = h.post(c, task(&log, 0), true) else { panic!() };
        t.accept_forward(c, 0, u, true);
        run_all(&mut t);
        assert_eq!(*log.lock().unwrap(), vec![1, 0, 2]);
    }

    #[test]
    fn batch_lending_takes_half_of_the_lendable_colors() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(2));
        let colors: Vec<Color> = (0..9).map(|k| color_on(0, 2, k)).collect();
        q.pin(colors[0]);
        for &c in &colors {
            let _ = q.post(c, task(&log, 0), false);
        }
        // 8 lendable (one pinned): half is 4, the last four posted.
        let loans = q.lend_many(1, 16, true, 0);
        let lent: Vec<Color> = loans.iter().map(|l| l.color).collect();
        assert_eq!(lent, vec![colors[8], colors[7], colors[6], colors[5]]);
        assert_eq!(q.lend_many(1, 2, true, 0).len(), 2, "bounded by max");
        assert_eq!(q.lend_many(1, 16, false, 0).len(), 2, "without `half`: all that is left");
        assert!(q.lend_many(1, 16, true, 0).is_empty(), "only the pinned color remains");
    }

    #[test]
    fn cost_aware_lending_skips_light_colors() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(2));
        let (light, heavy, unknown) = (color_on(0, 2, 0), color_on(0, 2, 1), color_on(0, 2, 2));
        for c in [heavy, light, unknown] {
            let _ = q.post(c, task(&log, 0), false);
        }
        let key = |q: &ColorQueue, c| *q.index.get(&c).unwrap();
        let (kl, kh) = (key(&q, light), key(&q, heavy));
        q.record_turn(kl, 1_000, 1);
        q.record_turn(kh, 500_000, 1);
        let lent: Vec<Color> = q.lend_many(1, 16, false, 20_000).iter().map(|l| l.color).collect();
        assert_eq!(lent, vec![heavy], "the light and the unsampled colors stay");
        assert!(q.lend_weighing(1, 20_000).is_none());
        assert_eq!(q.lend(1).map(|l| l.color), Some(unknown), "without a floor they go too");
    }

    #[test]
    fn a_backlog_is_lent_by_queued_work_and_the_lender_keeps_a_color() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(2));
        let (first, short, long, other) =
            (color_on(0, 2, 0), color_on(0, 2, 1), color_on(0, 2, 2), color_on(0, 2, 3));
        let _ = q.post(first, task(&log, 0), false);
        let _ = q.post(short, task(&log, 0), false);
        for v in 0..100 {
            let _ = q.post(long, task(&log, v), false);
        }
        let key = |q: &ColorQueue, c| *q.index.get(&c).unwrap();
        // Nothing timed yet: nothing is known to be worth moving.
        assert!(!q.has_backlog(20_000));
        assert!(q.lend_backlog(1, 8, 20_000, None).is_empty());
        // 1 µs per event: `long` holds 100 µs, `short` 1 µs.
        let (kl, ks) = (key(&q, long), key(&q, short));
        q.record_turn(kl, 64_000, 64);
        q.record_turn(ks, 1_000, 1);
        assert!(q.has_backlog(20_000));
        let lent: Vec<Color> = q.lend_backlog(1, 8, 20_000, None).iter().map(|l| l.color).collect();
        assert_eq!(lent, vec![long], "only the color with the backlog");
        assert_eq!(q.ready_len(), 2, "the others stay");
        // A lone waiting color is never lent, whatever it holds.
        let mut q = ColorQueue::new(0, Placement::flat(2));
        for v in 0..100 {
            let _ = q.post(other, task(&log, v), false);
        }
        q.record_turn(key(&q, other), 64_000, 1);
        assert!(!q.has_backlog(20_000));
        assert!(q.lend_backlog(1, 8, 20_000, None).is_empty());
    }

    /// A color moved for good is listed for recalls as a loan is (`recall`), and its borrower
    /// gives it back only with a backlog to take along (`give_back`'s floor); kept, it stays
    /// listed.
    #[test]
    fn a_moved_color_is_given_back_to_a_recall_only_with_a_backlog() {
        let log = Log::default();
        let (mut h, mut g) =
            (ColorQueue::new(0, Placement::flat(3)), ColorQueue::new(1, Placement::flat(3)));
        let (c, cheap) = (color_on(0, 3, 0), color_on(0, 3, 1));
        // `c`'s events measured here at 2 us; `cheap` not timed: its move is not listed.
        for color in [c, cheap] {
            let _ = receive(&mut h, color, task(&log, 0), 1);
            let (key, _) = h.start_turn().unwrap();
            h.pop(key).unwrap().run();
            if color == c {
                h.record_turn(key, 2_000, 1);
            }
            assert!(h.end_turn(key).is_none());
        }
        let Route::Move { to: 1, .. } = receive(&mut h, cheap, task(&log, 1), 1) else {
            panic!("the second post did not move the color")
        };
        assert_eq!(h.recall(|_, _| true), None, "a cheap color's move is not listed");
        let Route::Move { to: 1, task: first } = receive(&mut h, c, task(&log, 1), 1) else {
            panic!("the second post did not move the color")
        };
        g.adopt_moved(c, 0, Some(first), false, false);
        let _ = g.post(color_on(1, 3, 0), task(&log, 9), false);
        let seen = std::cell::Cell::new(None);
        let recalled = h.recall(|w, away| {
            seen.set(Some(away));
            w == 1
        });
        assert_eq!(recalled, Some((c, 1)));
        assert!(seen.get().is_some_and(|away| away.moved));
        assert!(g.give_back(c, 20_000).is_none(), "one event of unknown cost: it stays");
        assert!(h.kept(c).is_some_and(|(to, parked)| to == 1 && parked.is_empty()));
        // Thirty more forwarded, measured there at 2 us each: 62 us queued.
        for v in 2..32 {
            let Route::Forward { to: 1, task: fwd } = receive(&mut h, c, task(&log, v), 2) else {
                panic!("not forwarded")
            };
            g.accept_forward(c, 0, fwd, false);
        }
        let (key, color) = g.start_turn().unwrap();
        assert_eq!(color, c);
        g.record_turn(key, 2_000, 1);
        let _ = g.end_turn(key);
        assert_eq!(h.recall(|w, _| w == 1), Some((c, 1)), "listed again once kept");
        let (ran, loan) = g.give_back(c, 20_000).expect("a resident with a backlog goes back");
        assert_eq!((ran, loan.events.len()), (31, 31));
        h.given_back(ran, loan);
        assert_eq!(h.lease(c), Some(Lease::Local));
        assert_eq!(h.slots[*h.index.get(&c).unwrap()].traffic.bounces, 1, "a bounce, as a return");
    }

    #[test]
    fn a_recalled_color_runs_what_it_gave_back_before_what_waited_at_home() {
        let log = Log::default();
        let (mut home, mut guest) =
            (ColorQueue::new(0, Placement::flat(2)), ColorQueue::new(1, Placement::flat(2)));
        let (c, other) = (color_on(0, 2, 0), color_on(1, 2, 0));
        let _ = home.post(c, task(&log, 1), false);
        let _ = home.post(c, task(&log, 2), true);
        for loan in home.lend_many(1, 8, false, 0) {
            guest.adopt(0, loan);
        }
        let _ = guest.post(other, task(&log, 0), false);
        assert_eq!(home.recall(|w, _| w == 2), None, "not worth it: stays lent");
        assert_eq!(home.recall(|w, _| w == 1), Some((c, 1)));
        assert_eq!(home.recall(|_, _| true), None, "one recall of a color at a time");
        // Posted at home while the recall travels: parked, urgent first, not run here.
        assert!(matches!(home.post(c, task(&log, 3), false), Route::Queued));
        assert!(matches!(home.post(c, task(&log, 4), true), Route::Queued));
        assert!(home.start_turn().is_none());
        let (ran, loan) = guest.give_back(c, 0).expect("waiting beside another color");
        assert_eq!(guest.lease(c), None);
        home.given_back(ran, loan);
        assert_eq!(home.lease(c), Some(Lease::Local));
        run_all(&mut home);
        assert_eq!(*log.lock().unwrap(), vec![2, 4, 1, 3], "urgent first, given back first");
        // Lent again, run to its end there and returned while a recall is on its way: the home
        // takes it with the post parked meanwhile, and the borrower, holding nothing, keeps it.
        log.lock().unwrap().clear();
        let _ = home.post(c, task(&log, 5), false);
        for loan in home.lend_many(1, 8, false, 0) {
            guest.adopt(0, loan);
        }
        let ret = run_all(&mut guest).pop().expect("an emptied loan goes home");
        assert_eq!(home.recall(|_, _| true), Some((c, 1)));
        let _ = home.post(c, task(&log, 6), false);
        home.returned(ret.color, ret.ran);
        assert!(guest.give_back(c, 0).is_none());
        assert!(home.kept(c).is_none(), "home already");
        run_all(&mut home);
        assert_eq!(*log.lock().unwrap(), vec![0, 5, 6]);
    }

    #[test]
    fn a_stand_in_takes_back_what_its_home_lent_waiting_alone_or_not_but_not_running() {
        let log = Log::default();
        let (mut home, mut guest) =
            (ColorQueue::new(0, Placement::flat(3)), ColorQueue::new(1, Placement::flat(3)));
        let lent = colors_on(0, 3, 3);
        for (i, &c) in lent.iter().enumerate() {
            let _ = home.post(c, task(&log, i as u64), false);
            let _ = home.post(c, task(&log, 10 + i as u64), false);
        }
        for loan in home.lend_many(1, 8, false, 0) {
            guest.adopt(0, loan);
        }
        // Another home's loan waits there too, and one of the home's colors runs.
        let mut third = ColorQueue::new(2, Placement::flat(3));
        let elsewhere = color_on(2, 3, 0);
        let _ = third.post(elsewhere, task(&log, 99), false);
        for loan in third.lend_many(1, 8, false, 0) {
            guest.adopt(2, loan);
        }
        let (key, running) = guest.start_turn().unwrap();
        assert!(lent.contains(&running));
        let first = guest.pop(key).unwrap();
        let back = guest.give_back_waiting(0, 0);
        assert_eq!(back.len(), 2, "the two waiting, not the running one, not another home's");
        for (ran, loan) in back {
            assert_eq!((ran, loan.events.len()), (2, 2), "received two, gives both back");
            home.given_back(ran, loan);
        }
        assert!(guest.waits_lent_by(2) && !guest.waits_lent_by(0));
        first.run();
        while let Some(t) = guest.pop(key) {
            t.run();
        }
        let returned = guest.end_turn(key).expect("the running loan goes home, emptied");
        home.returned(returned.color, returned.ran);
        run_all(&mut guest);
        run_all(&mut home);
        let ran = log.lock().unwrap().clone();
        for i in 0..3u64 {
            let (a, b) = (ran.iter().position(|&v| v == i), ran.iter().position(|&v| v == 10 + i));
            assert!(a.is_some() && a < b, "each color's two events once, in order: {ran:?}");
        }
        assert_eq!(ran.len(), 7);
        // Alone in the line, a loan goes back too (a recall's `give_back` would keep it).
        let c = lent[0];
        let _ = home.post(c, task(&log, 20), false);
        for loan in home.lend_many(1, 8, false, 0) {
            guest.adopt(0, loan);
        }
        assert!(guest.give_back(c, 0).is_none(), "a recall leaves it: alone, it runs next");
        assert_eq!(guest.give_back_waiting(0, 0).len(), 1, "a stand-in takes it: stuck there");
    }

    #[test]
    fn a_loan_the_borrower_kept_may_be_recalled_again() {
        let log = Log::default();
        let (mut home, mut guest) =
            (ColorQueue::new(0, Placement::flat(2)), ColorQueue::new(1, Placement::flat(2)));
        let (c, other) = (color_on(0, 2, 0), color_on(1, 2, 0));
        let _ = home.post(c, task(&log, 1), false);
        for loan in home.lend_many(1, 8, false, 0) {
            guest.adopt(0, loan);
        }
        // Alone on the guest at the recall: kept.
        assert_eq!(home.recall(|_, _| true), Some((c, 1)));
        assert!(guest.give_back(c, 0).is_none());
        assert!(home.kept(c).is_some());
        // Another color waits beside it now: recalled again, given back.
        let _ = guest.post(other, task(&log, 0), false);
        assert_eq!(home.recall(|_, _| true), Some((c, 1)), "a self-feeding loan never comes home");
        let (ran, loan) = guest.give_back(c, 0).expect("waiting beside another color");
        home.given_back(ran, loan);
        assert_eq!(home.lease(c), Some(Lease::Local));
    }

    #[test]
    fn a_color_that_feeds_itself_is_a_backlog_by_its_turns() {
        let log = Log::default();
        let key = |q: &ColorQueue, c| *q.index.get(&c).unwrap();
        // Three loops of 10 us steps, each holding its next step only: a turn runs 64 of them.
        let loops = [color_on(0, 2, 0), color_on(0, 2, 1), color_on(0, 2, 2)];
        let mut q = ColorQueue::new(0, Placement::flat(2));
        for &c in &loops {
            let _ = q.post(c, task(&log, 0), false);
        }
        assert!(!q.has_backlog(20_000), "nothing timed: nothing known");
        for &c in &loops {
            q.record_turn(key(&q, c), 640_000, 64);
        }
        assert!(q.has_backlog(20_000));
        let lent: Vec<Color> = q.lend_backlog(1, 8, 20_000, None).iter().map(|l| l.color).collect();
        assert_eq!(lent, vec![loops[2]], "the last to run, and half of the line at most");
        // The same events passed on one a turn (a ring's tokens of 10 us): no backlog.
        let mut q = ColorQueue::new(0, Placement::flat(2));
        for &c in &loops {
            let _ = q.post(c, task(&log, 0), false);
            q.record_turn(key(&q, c), 10_000, 1);
        }
        assert!(!q.has_backlog(20_000));
        assert!(q.lend_backlog(1, 8, 20_000, None).is_empty());
    }

    #[test]
    fn a_color_not_timed_yet_is_likely_as_short_as_this_workers_first_turns() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1));
        let key = |q: &mut ColorQueue, c: u64| {
            let _ = q.post(Color(c), task(&log, c), false);
            *q.index.get(&Color(c)).unwrap()
        };
        let fresh = key(&mut q, 1);
        assert!(!q.likely_within(fresh, 20_000), "nothing timed yet: nothing known");
        let first = key(&mut q, 2);
        assert!(q.record_watched_turn(first, 300, 1));
        assert!(q.likely_within(fresh, 20_000), "first turns of 300 ns");
        assert!(!q.likely_within(fresh, 200));
        // A color's own measure comes first: a long one is not likely short.
        let long = key(&mut q, 3);
        assert!(q.record_watched_turn(long, 50_000_000, 1));
        assert!(!q.likely_within(long, 20_000));
        assert!(q.likely_within(first, 20_000));
    }

    #[test]
    fn a_light_backlog_is_found_past_borrowed_colors_and_misleading_averages() {
        let log = Log::default();
        let here = colors_on(0, 2, LIGHT_BACKLOG_COLORS + 1);
        // Colors of 1 us (the first one's first turn), enough of them for a backlog.
        let queue = || {
            let mut q = ColorQueue::new(0, Placement::flat(2));
            for &c in &here {
                let _ = q.post(c, task(&log, 0), false);
            }
            let k = *q.index.get(&here[0]).unwrap();
            assert!(q.record_watched_turn(k, 1_000, 1));
            (q, k)
        };
        let (mut q, _) = queue();
        assert!(q.has_backlog(20_000));
        // Colors lent by worker 1 queue behind them: they may not be lent on, and a few at the
        // back of the line no longer hide the lendable ones before them.
        let borrow = |q: &mut ColorQueue, n: usize| {
            for c in colors_on(1, 2, n) {
                let events = vec![task(&log, 1)].into();
                q.adopt(1, Loan { color: c, events, urgent: 0, event_ns: 0 });
            }
        };
        borrow(&mut q, LIGHT_LOOK - 1);
        assert!(q.has_backlog(20_000), "{} borrowed colors at the back", LIGHT_LOOK - 1);
        let loans = q.lend_backlog(1, 8, 20_000, None);
        assert!(!loans.is_empty() && loans.iter().all(|l| here.contains(&l.color)));
        // More borrowed colors than the advertisement looks at: no backlog advertised, but a
        // thief that asks anyway (a deep line, `steal::DEEP_LINE`) is lent from the whole line.
        let (mut q, _) = queue();
        borrow(&mut q, LIGHT_LOOK);
        assert!(!q.has_backlog(20_000));
        let loans = q.lend_backlog(1, 8, 20_000, None);
        assert!(!loans.is_empty() && loans.iter().all(|l| here.contains(&l.color)));
        // Colors timed themselves (a user's loop run again: their measures were taken in an
        // earlier run) stand for the line: a first turns' average of 100 ns (a collector's)
        // does not make chunks of 1 us light.
        let mut q = ColorQueue::new(0, Placement::flat(2));
        let collector = color_on(0, 2, 10_000);
        let _ = q.post(collector, task(&log, 2), false);
        let kc = *q.index.get(&collector).unwrap();
        assert!(q.record_watched_turn(kc, 100, 1), "the first turns' average: 100 ns");
        for &c in &here {
            let _ = q.post(c, task(&log, 0), false);
            let kk = *q.index.get(&c).unwrap();
            q.slots[kk].event_ns = 1_000;
        }
        assert!(q.has_backlog(20_000));
        let loans = q.lend_backlog(1, 8, 20_000, None);
        assert!(!loans.is_empty() && loans.iter().all(|l| l.event_ns == 1_000));
        // A sampled turn of a millisecond (a preempted one, on a shared CPU): the sampled
        // average is over the floor, the first turns' one is not, and stands for the colors.
        let (mut q, k) = queue();
        q.record_turn(k, 1_000_000, 1);
        assert!(q.has_backlog(20_000));
        let loans = q.lend_backlog(1, 8, 20_000, None);
        assert!(
            !loans.is_empty() && loans.iter().all(|l| l.event_ns == 1_000),
            "the 1 us estimate"
        );
    }

    #[test]
    fn a_slower_thief_is_lent_single_event_colors_and_not_a_lone_fed_backlog() {
        let log = Log::default();
        let chunks = colors_on(0, 2, 2 * LIGHT_BACKLOG_COLORS);
        let fed = colors_on(0, 2, 2 * LIGHT_BACKLOG_COLORS + 2);
        let (collector, other) = (fed[fed.len() - 2], fed[fed.len() - 1]);
        // A user's job: chunks of 1 us, one event each, and behind them its collector with a
        // thousand results queued (timed at 1 us each: a backlog of a millisecond).
        let queue = |n: usize, fed: &[Color]| {
            let mut q = ColorQueue::new(0, Placement::flat(2));
            for &c in &chunks[..n] {
                let _ = q.post(c, task(&log, 0), false);
            }
            if n > 0 {
                assert!(q.record_watched_turn(*q.index.get(&chunks[0]).unwrap(), 1_000, 1));
            }
            for &c in fed {
                for _ in 0..1_000 {
                    let _ = q.post(c, task(&log, 1), false);
                }
                assert!(q.record_watched_turn(*q.index.get(&c).unwrap(), 1_000, 1));
            }
            q
        };
        // The thief's part of the line: half when as fast, a fifth with a quarter of its CPU.
        let lent = |q: &mut ColorQueue, slower: bool| -> Vec<Color> {
            let part = slower.then_some(200);
            q.lend_backlog(1, 8, 20_000, part).iter().map(|l| l.color).collect()
        };
        // A thief as fast: the backlog first, the collector at the back of the line.
        let mut q = queue(chunks.len(), &[collector]);
        assert_eq!(lent(&mut q, false), vec![collector]);
        // A slower one: chunks, its part of the line, the collector stays.
        let mut q = queue(chunks.len(), &[collector]);
        let got = lent(&mut q, true);
        assert_eq!(got.len(), (chunks.len() + 1) / 5);
        assert!(got.iter().all(|c| chunks.contains(c)), "only chunks: {got:?}");
        // Too few chunks for a light backlog: the lone backlog is not lent to a slower thief
        // (a faster one takes it), and of two backlogs one is.
        let mut q = queue(4, &[collector]);
        assert!(lent(&mut q, true).is_empty());
        let mut q = queue(4, &[collector]);
        assert_eq!(lent(&mut q, false), vec![collector]);
        let mut q = queue(4, &[collector, other]);
        assert_eq!(lent(&mut q, true), vec![other]);
        // Behind a long turn (`steal::lend_behind_long_turn`): single-event colors only.
        let mut q = queue(4, &[collector]);
        let got: Vec<Color> = q.lend_single(1, 8, 0, 500, true).iter().map(|l| l.color).collect();
        assert_eq!(got, vec![chunks[3], chunks[2]], "half of the line, from its back");
        let mut q = queue(4, &[collector]);
        let got: Vec<Color> = q.lend_single(1, 8, 0, 200, true).iter().map(|l| l.color).collect();
        assert_eq!(got, vec![chunks[3]], "a fifth of five: one");
        // The collector stays queued here after a slower thief's loans.
        let mut q = queue(chunks.len(), &[collector]);
        assert!(!lent(&mut q, true).is_empty());
        assert!(q.ready.iter().any(|&k| q.slots[k].color == collector));
        // Never the first when asked (`keep_first`): a line of one lends nothing.
        let mut q = queue(1, &[]);
        assert!(q.lend_single(1, 8, 0, 1000, true).is_empty());
        assert_eq!(q.lend_single(1, 8, 0, 1000, false).len(), 1);
        // A few heavy colors of one event each (10 us, timed): too few for a light backlog,
        // a backlog together; the slower thief gets its part of them.
        let mut q = queue(9, &[]);
        for &c in &chunks[..9] {
            let _ = q.record_watched_turn(*q.index.get(&c).unwrap(), 10_000, 1);
        }
        assert_eq!(lent(&mut q, true).len(), 1, "a fifth of nine, one at least");
        // A group moves whole: a grouped color of one event brings its waiting mates.
        let mut q = ColorQueue::new(0, Placement::flat(2));
        let pad = colors_on(0, 2, 4);
        let grouped: Vec<Color> = (0..3).map(|i| Color::grouped(6, i)).collect();
        for &c in pad.iter().chain(&grouped) {
            let _ = q.post(c, task(&log, 0), false);
        }
        let _ = q.post(grouped[0], task(&log, 0), false);
        let got: Vec<Color> = q.lend_single(1, 8, 0, 200, true).iter().map(|l| l.color).collect();
        assert!(grouped.iter().all(|c| got.contains(c)), "the group whole: {got:?}");
    }

    #[test]
    fn many_light_colors_are_a_backlog_together_and_half_of_them_are_lent() {
        let log = Log::default();
        let colors = colors_on(0, 2, 3 * LIGHT_LOAN_MAX);
        let queue = |n: usize, first_ns: u64| {
            let mut q = ColorQueue::new(0, Placement::flat(2));
            // A first color timed on its first turn: the estimate for the others.
            let _ = q.post(colors[0], task(&log, 0), false);
            let k = *q.index.get(&colors[0]).unwrap();
            assert!(q.record_watched_turn(k, first_ns, 1));
            for &c in &colors[1..n] {
                let _ = q.post(c, task(&log, 1), false);
            }
            q
        };
        // One event of 1 µs each: none of them alone is a backlog of 20 µs.
        let few = LIGHT_BACKLOG_COLORS - 1;
        let mut q = queue(few, 1_000);
        assert!(!q.has_backlog(20_000), "{few} light colors are no backlog");
        assert!(q.lend_backlog(1, 8, 20_000, None).is_empty());
        // 128 colors of 200 ns: 25.6 us, over the floor, under twice it (a loan leaves half).
        let mut q = queue(LIGHT_BACKLOG_COLORS, 200);
        assert!(!q.has_backlog(20_000), "{LIGHT_BACKLOG_COLORS} colors of 200 ns: 25.6 us");
        assert!(q.lend_backlog(1, 8, 20_000, None).is_empty());
        // Enough of them: half are lent, the last to run first, never the first; a pinned one
        // stays, a color timed itself keeps its own measure, the others go with the estimate.
        let n = LIGHT_BACKLOG_COLORS;
        let mut q = queue(n, 1_000);
        let (pinned, timed) = (colors[n - 3], colors[n - 2]);
        q.pin(pinned);
        assert!(q.record_watched_turn(*q.index.get(&timed).unwrap(), 700, 1));
        assert!(q.has_backlog(20_000));
        let loans = q.lend_backlog(1, 8, 20_000, None);
        let lent: Vec<Color> = loans.iter().map(|l| l.color).collect();
        let expected: Vec<Color> =
            colors[n / 2 - 1..n].iter().rev().copied().filter(|&c| c != pinned).collect();
        assert_eq!(lent, expected);
        // The timed color's first turn joined the first turns' average too.
        let estimate = (3 * 1_000 + 700) / 4;
        for l in &loans {
            let want = if l.color == timed { 700 } else { estimate };
            assert_eq!((l.color, l.event_ns), (l.color, want));
        }
        assert_eq!(q.ready_len(), n / 2, "the lender keeps half");
        // Colors of 10 us each, each timed: a few make a backlog (not fewer than four), and
        // half of them are lent; untimed, they are light (the worker's estimate is not theirs).
        // Each of colors 1..n timed at `ns`, but `light`, at 100 ns.
        let timed_but = |n: usize, ns: u64, light: Option<Color>| {
            let mut q = queue(n, ns);
            for &c in &colors[1..n] {
                let t = if Some(c) == light { 100 } else { ns };
                assert!(q.record_watched_turn(*q.index.get(&c).unwrap(), t, 1));
            }
            q
        };
        let timed = |n: usize, ns: u64| timed_but(n, ns, None);
        assert!(!timed(FEW_COLORS, 10_000).has_backlog(20_000), "four colors, the first runs next");
        let mut q = timed(8, 10_000);
        assert!(q.has_backlog(20_000), "eight colors of 10 us: 80 us");
        assert_eq!(q.lend_backlog(1, 8, 20_000, None).len(), 4, "half of them");
        assert!(!queue(8, 10_000).has_backlog(20_000), "not timed: 128 needed");
        assert!(!timed(8, 4_000).has_backlog(20_000), "eight of 4 us are light");
        // A light color (100 ns) among colors of 10 us: not lent, and among the last four it
        // stops the few from being a backlog (they are judged by the last ones to run).
        let q = timed_but(8, 10_000, Some(colors[7]));
        assert!(!q.has_backlog(20_000), "the last four are not all heavy");
        let mut q = timed_but(9, 10_000, Some(colors[3]));
        assert!(q.has_backlog(20_000), "the last four are heavy");
        let lent: Vec<Color> = q.lend_backlog(1, 8, 20_000, None).iter().map(|l| l.color).collect();
        assert!(lent.len() == 4 && !lent.contains(&colors[3]), "heavy ones only: {lent:?}");
        // At most `LIGHT_LOAN_MAX` a loan; pinned colors at the back hide a light backlog when
        // none of the last `LIGHT_LOOK` may be lent, and one that may is lent past them.
        let mut q = queue(colors.len(), 1_000);
        assert_eq!(q.lend_backlog(1, 8, 20_000, None).len(), LIGHT_LOAN_MAX);
        let mut q = queue(colors.len(), 1_000);
        for &c in colors.iter().rev().take(LIGHT_LOOK) {
            q.pin(c);
        }
        assert!(!q.has_backlog(20_000), "none of the last {LIGHT_LOOK} to run may be lent");
        let mut q = queue(colors.len(), 1_000);
        let pinned = &colors[colors.len() + 1 - LIGHT_LOOK..];
        for &c in pinned {
            q.pin(c);
        }
        assert!(q.has_backlog(20_000));
        let lent: Vec<Color> = q.lend_backlog(1, 8, 20_000, None).iter().map(|l| l.color).collect();
        assert!(!lent.is_empty() && lent.iter().all(|c| !pinned.contains(c)));
        // A first turn over the floor (a driver's) is no light estimate: nothing is lent on it,
        // until light colors' first turns bring the average down.
        let mut q = queue(colors.len(), 4_000_000);
        assert!(!q.has_backlog(20_000));
        for &c in &colors[1..40] {
            assert!(q.record_watched_turn(*q.index.get(&c).unwrap(), 1_000, 1));
        }
        assert!(q.has_backlog(20_000));
        let loans = q.lend_backlog(1, 8, 20_000, None);
        assert!(loans.iter().all(|l| (1..=20_000).contains(&l.event_ns)), "a light estimate");
    }

    #[test]
    fn a_preempted_turn_weighs_at_most_four_times_the_estimate() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(2));
        let c = color_on(0, 2, 0);
        let _ = q.post(c, task(&log, 0), false);
        let k = *q.index.get(&c).unwrap();
        q.record_turn(k, 100, 1);
        // A turn that lost its CPU for 5 ms to another thread.
        q.record_turn(k, 5_000_000, 1);
        assert_eq!(q.slots[k].event_ns, (3 * 100 + 400) / 4);
        assert_eq!(q.event_ns, (3 * 100 + 400) / 4, "the worker's estimate too");
    }

    #[test]
    fn a_watched_turn_is_its_colors_cost_and_travels_with_a_loan() {
        let log = Log::default();
        let mut home = ColorQueue::new(0, Placement::flat(2));
        let (short, long) = (color_on(0, 2, 0), color_on(0, 2, 1));
        let _ = home.post(short, task(&log, 0), false);
        let _ = home.post(long, task(&log, 1), false);
        let (ks, kl) = (*home.index.get(&short).unwrap(), *home.index.get(&long).unwrap());
        assert!(!home.known_within(ks, 20_000), "not timed yet: watched");
        home.record_watched_turn(ks, 3_000, 1);
        home.record_watched_turn(kl, 700_000, 1);
        assert!(home.known_within(ks, 20_000), "one watched turn tells a short color");
        assert!(!home.known_within(kl, 20_000));
        assert_eq!(home.event_ns, 0, "the worker's average takes sampled turns only");
        // The long color's one queued event is a backlog now (a chunk of a job runs once).
        let _ = home.post(short, task(&log, 2), false);
        assert!(home.has_backlog(20_000));
        let loans = home.lend_backlog(1, 8, 20_000, None);
        assert_eq!(
            loans.iter().map(|l| (l.color, l.event_ns)).collect::<Vec<_>>(),
            [(long, 700_000)]
        );
        // The borrower starts from the lender's measure.
        let mut thief = ColorQueue::new(1, Placement::flat(2));
        for loan in loans {
            thief.adopt(0, loan);
        }
        let kt = *thief.index.get(&long).unwrap();
        assert!(thief.known_over(kt, 500_000));
    }

    #[test]
    fn a_group_moves_whole() {
        let log = Log::default();
        let p = Placement::new(2, 2, 2);
        let mut q = ColorQueue::new(0, p);
        let members: Vec<Color> =
            (0..8).map(|m| Color::grouped(3, m)).filter(|&c| home_of(c, p) == 0).collect();
        let loner = color_on(0, 2, 0);
        let _ = q.post(loner, task(&log, 0), false);
        for &c in &members {
            let _ = q.post(c, task(&log, 0), false);
        }
        // One color asked for: the last waiting one is grouped, so its waiting mates come along.
        let loans = q.lend_many(1, 1, false, 0);
        let mut lent: Vec<Color> = loans.iter().map(|l| l.color).collect();
        lent.sort();
        let mut expected = members.clone();
        expected.sort();
        assert_eq!(lent, expected);
        assert_eq!(q.lease(loner), Some(Lease::Local));
    }

    #[test]
    fn pinned_colors_are_never_lent() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(2));
        let (a, b) = (color_on(0, 2, 0), color_on(0, 2, 1));
        q.pin(b);
        let _ = q.post(a, task(&log, 1), false);
        let _ = q.post(b, task(&log, 2), false);
        assert_eq!(q.lend(1).map(|l| l.color), Some(a), "the pinned color is skipped");
        assert!(q.lend(1).is_none(), "only the pinned one is left");
        run_all(&mut q);
        assert_eq!(q.lease(b), Some(Lease::Local), "an empty pinned slot is kept");
    }

    /// `receive_post` from `poster` with the policy of `follow`, the poster's batch quiet.
    fn receive(q: &mut ColorQueue, c: Color, t: Task, poster: usize) -> Route {
        q.receive_post(c, t, false, Some(poster), |traffic, _, _| {
            let offer = follow::Offer {
                traffic,
                quiet: true,
                step: false,
                stream: false,
                cheap: false,
                poster_ready: 0,
                home_ready: 0,
                poster_share: 1000,
                home_share: 1000,
            };
            follow::moves(&offer).then_some(poster)
        })
    }

    /// A color's turns that post only to colors here settle it on its worker, and turns that
    /// post elsewhere unsettle it (`follow::Traffic::settled`), within a bounded balance.
    #[test]
    fn a_color_is_settled_by_turns_posting_here_not_by_turns_posting_elsewhere() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(2));
        let a = color_on(0, 2, 0);
        assert!(matches!(q.post(a, task(&log, 0), false), Route::Queued));
        let (key, _) = q.start_turn().unwrap();
        let settled = |q: &ColorQueue| q.slots[key].traffic.settled();
        for _ in 0..4 {
            q.count_turn_posts(key, false);
        }
        assert!(!settled(&q), "four turns posting here");
        q.count_turn_posts(key, false);
        assert!(settled(&q));
        q.count_turn_posts(key, true);
        assert!(!settled(&q), "a turn posting elsewhere");
        // The balance is bounded: a color that posted here for long follows a change soon.
        for _ in 0..100 {
            q.count_turn_posts(key, false);
        }
        for _ in 0..12 {
            q.count_turn_posts(key, true);
        }
        assert!(!settled(&q), "12 turns elsewhere undo any number here");
    }

    #[test]
    fn an_idle_color_moves_to_the_worker_posting_to_it_and_stays_there() {
        let log = Log::default();
        let (mut h, mut g) =
            (ColorQueue::new(0, Placement::flat(3)), ColorQueue::new(1, Placement::flat(3)));
        let c = color_on(0, 3, 0);
        assert!(
            matches!(receive(&mut h, c, task(&log, 0), 1), Route::Queued),
            "a first post: stays"
        );
        run_all(&mut h);
        let Route::Move { to: 1, task: first } = receive(&mut h, c, task(&log, 1), 1) else {
            panic!("the second post did not move the color")
        };
        assert_eq!(
            h.lease(c),
            Some(Lease::Away { to: 1, outstanding: 1, moved: true, recalled: false })
        );
        g.adopt_moved(c, 0, Some(first), false, false);
        // The borrower's own posts to it are local once the home synced; others' are forwarded
        // by the home.
        let Route::Held(Some(ask)) = g.post(c, task(&log, 2), false) else { panic!("not held") };
        assert_eq!(g.synced(c, ask.epoch), None);
        let Route::Forward { to: 1, task: fwd } = receive(&mut h, c, task(&log, 3), 2) else {
            panic!("not forwarded")
        };
        g.accept_forward(c, 0, fwd, false);
        assert_eq!(run_all(&mut g), vec![], "a resident stays when its queue empties");
        assert_eq!(
            g.lease(c),
            Some(Lease::Guest { home: 0, received: 2, resident: true, relieved: false })
        );
        assert!(matches!(g.post(c, task(&log, 4), false), Route::Queued));
        run_all(&mut g);
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    }

    /// A post that would move its color but finds it busy pulls it: it goes to the poster's
    /// worker when its queue empties, unless a post from elsewhere came in between.
    #[test]
    fn a_busy_color_goes_to_its_poster_when_its_queue_empties_unless_another_posts_first() {
        let log = Log::default();
        let end = |q: &mut ColorQueue| {
            let k = run_turn(q);
            q.end_turn_shedding(k, |_, _| false, |_, _, _, _| None)
        };
        for other_first in [false, true] {
            let mut h = ColorQueue::new(0, Placement::flat(3));
            let c = color_on(0, 3, 0);
            assert!(matches!(receive(&mut h, c, task(&log, 0), 1), Route::Queued), "a first post");
            // The color is busy (an event queued): the post that would move it is queued too.
            assert!(matches!(receive(&mut h, c, task(&log, 1), 1), Route::Queued), "busy");
            if other_first {
                // A post made here: the color's traffic is no longer worker 1's alone.
                assert!(matches!(h.post(c, task(&log, 2), false), Route::Queued));
                assert!(end(&mut h).is_none(), "a post from elsewhere clears the pull");
                assert_eq!(h.lease(c), Some(Lease::Local));
            } else {
                assert!(matches!(end(&mut h), Some(TurnEnd::Push { to: 1, color }) if color == c));
                assert_eq!(
                    h.lease(c),
                    Some(Lease::Away { to: 1, outstanding: 0, moved: true, recalled: false })
                );
            }
        }
    }

    #[test]
    fn a_fence_lets_in_the_posts_of_colors_that_arrived_before_its_sync_and_keeps_posters_here() {
        let log = Log::default();
        let mut g = ColorQueue::new(1, Placement::flat(3));
        let (c, a) = (color_on(0, 3, 0), color_on(2, 3, 0));
        g.adopt_moved(c, 0, None, false, false);
        let Route::Held(Some(first)) = g.post(c, task(&log, 0), false) else { panic!() };
        // `a` arrives (lent by worker 2) after that sync was asked; its event posts to `c`.
        g.adopt(
            2,
            Loan { color: a, events: VecDeque::from([task(&log, 9)]), urgent: 0, event_ns: 0 },
        );
        let (ka, _) = g.start_turn().unwrap();
        g.pop(ka).unwrap().run();
        assert!(matches!(g.post(c, task(&log, 1), false), Route::Held(None)), "one sync at a time");
        assert_eq!(g.end_turn(ka), None, "a color whose posts are held stays");
        // The first sync lets in the post made before `a` came, and asks again for `a`'s.
        let Some(second) = g.synced(c, first.epoch) else { panic!("no second sync asked") };
        assert!(second.epoch > first.epoch);
        assert_eq!(run_all(&mut g), vec![]);
        assert_eq!(*log.lock().unwrap(), vec![9, 0]);
        assert_eq!(g.synced(c, second.epoch), None);
        // `a`'s post joins; `a`, empty, goes home; `c`, a resident, stays.
        let back = run_all(&mut g);
        assert_eq!(back, vec![Returned { home: 2, color: a, ran: 1, resident: false }]);
        assert_eq!(*log.lock().unwrap(), vec![9, 0, 1]);
        // Synced: later posts of colors that were here go straight in.
        assert!(matches!(g.post(c, task(&log, 2), false), Route::Queued));
    }

    #[test]
    fn a_busy_or_pinned_color_does_not_move() {
        let log = Log::default();
        let mut h = ColorQueue::new(0, Placement::flat(2));
        let (busy, pinned) = (color_on(0, 2, 0), color_on(0, 2, 1));
        h.pin(pinned);
        for i in 0..4 {
            assert!(matches!(receive(&mut h, busy, task(&log, i), 1), Route::Queued), "queued");
            assert!(matches!(receive(&mut h, pinned, task(&log, i), 1), Route::Queued), "pinned");
        }
        // Running: its own posts and others' stay too.
        let (k, running) = h.start_turn().unwrap();
        assert_eq!(running, busy);
        while let Some(t) = h.pop(k) {
            t.run();
        }
        assert!(matches!(receive(&mut h, busy, task(&log, 9), 1), Route::Queued), "running");
        let outside = h.receive_post(busy, task(&log, 9), false, None, |_, _, _| Some(1));
        assert!(matches!(outside, Route::Queued), "a running color moves for no one");
        assert_eq!(h.lease(busy), Some(Lease::Local));
    }

    #[test]
    fn a_resident_posted_from_elsewhere_goes_home_and_needs_a_longer_run_to_move_again() {
        let log = Log::default();
        let (mut h, mut g) =
            (ColorQueue::new(0, Placement::flat(3)), ColorQueue::new(1, Placement::flat(3)));
        let c = color_on(0, 3, 0);
        receive(&mut h, c, task(&log, 0), 1);
        run_all(&mut h);
        let Route::Move { task: first, .. } = receive(&mut h, c, task(&log, 1), 1) else {
            panic!()
        };
        g.adopt_moved(c, 0, Some(first), false, false);
        run_all(&mut g);
        // Now worker 2 posts to it, one at a time: a window of forwards sends it back.
        let mut returned = vec![];
        for i in 0..follow::WINDOW as u64 {
            let Route::Forward { task: fwd, .. } = receive(&mut h, c, task(&log, 10 + i), 2) else {
                panic!("not forwarded")
            };
            g.accept_forward(c, 0, fwd, false);
            returned.extend(run_all(&mut g));
        }
        let ran = 1 + u64::from(follow::WINDOW);
        assert_eq!(returned, vec![Returned { home: 0, color: c, ran, resident: true }]);
        assert_eq!(g.lease(c), None);
        h.returned(c, ran);
        assert_eq!(h.lease(c), Some(Lease::Local));
        // Back home once: two posts in a row from one worker to move again.
        for i in 0..1 {
            assert!(matches!(receive(&mut h, c, task(&log, 100 + i), 2), Route::Queued));
            run_all(&mut h);
        }
        assert!(matches!(receive(&mut h, c, task(&log, 101), 2), Route::Move { to: 2, .. }));
    }

    #[test]
    fn the_guest_filter_rules_out_colors_never_held_and_forgets_removed_ones() {
        let mut f = GuestFilter::default();
        let a = Color(7);
        let twin = (8..).map(Color).find(|&c| bucket(c) == bucket(a)).unwrap();
        let other = (8..).map(Color).find(|&c| bucket(c) != bucket(a)).unwrap();
        assert!(!f.may_hold(a));
        f.insert(a);
        f.insert(twin);
        assert!(f.may_hold(a) && f.may_hold(twin) && !f.may_hold(other));
        f.remove(a);
        assert!(f.may_hold(twin), "a shared bit stays while a color holds it");
        f.remove(twin);
        assert!(!f.may_hold(a) && !f.may_hold(twin));
        // Strided colors (multiples of 64) spread over the bits.
        let bits: std::collections::HashSet<usize> =
            (0..256u64).map(|i| bucket(Color(i * 64))).collect();
        assert!(bits.len() > 48, "{} bits used", bits.len());
    }

    #[test]
    // Tens of thousands of posts: minutes under Miri, and no unsafe code of its own.
    #[cfg_attr(miri, ignore)]
    fn thousands_of_colors_keep_their_slots_and_their_traffic() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(2));
        let colors = colors_on(0, 2, 10_000);
        // Rounds 0-7 teach the worker that these colors come back (`recur`: the bound on idle
        // slots doubles when sampled colors dropped in three epochs come back, a doubling a
        // round from the fourth: 2048, 4096, 8192, 16384; the colors the last rounds dropped
        // are made again in the next); then each post finds the color's slot and its traffic:
        // the total counted at the last round plus one.
        let mut totals = vec![0u32; colors.len()];
        for round in 0..9 {
            for (i, &c) in colors.iter().enumerate() {
                let key = match q.route(c) {
                    Dest::Here { key, .. } => key,
                    other => panic!("{c:?} homed here routes to {other:?}"),
                };
                // Posted from worker 1: its traffic is counted at the home.
                let route = q.receive_post(c, task(&log, c.0), false, Some(1), |t, _, _| {
                    if round >= 8 {
                        assert_eq!(t.total, totals[i] + 1, "{c:?}: its earlier posts remembered");
                    }
                    totals[i] = t.total;
                    None
                });
                assert!(matches!(route, Route::Queued));
                assert!(q.has_events(key));
                run_all(&mut q);
            }
        }
        assert_eq!(q.slots.len(), colors.len(), "every color's slot kept");
        assert_eq!(log.lock().unwrap().len(), 9 * colors.len());
    }

    #[test]
    // Thousands of posts: minutes under Miri, and no unsafe code of its own.
    #[cfg_attr(miri, ignore)]
    fn an_idle_slot_gives_back_a_large_backlogs_memory() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1));
        let backlog = 10 * KEEP_QUEUE_CAPACITY as u64;
        for v in 0..backlog {
            let _ = q.post(Color(1), task(&log, v), false);
        }
        let key = q.index[&Color(1)];
        assert!(q.slots[key].events.capacity() >= backlog as usize);
        run_all(&mut q);
        assert_eq!(log.lock().unwrap().len(), backlog as usize);
        let kept = q.slots[key].events.capacity();
        assert!(kept <= KEEP_QUEUE_CAPACITY, "{kept} events' room kept");
    }

    /// Posts one event to each color of a ring of `colors` (`0..colors`) and runs it, `laps` times.
    fn ring_laps(q: &mut ColorQueue, log: &Log, colors: u64, laps: u64) {
        for _ in 0..laps {
            for c in 0..colors {
                let _ = q.post(Color(c), task(log, c), false);
                run_all(q);
            }
        }
    }

    #[test]
    // Tens of thousands of posts: minutes under Miri, and no unsafe code of its own.
    #[cfg_attr(miri, ignore)]
    fn idle_slots_are_bounded() {
        use crate::recur::KEEP_IDLE_MIN;
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1));
        // Fresh colors, one event each (a divide and conquer's): the table stays at the bound
        // a worker starts with, and new slots take the dropped ones' queues.
        let colors = 4 * KEEP_IDLE_MIN as u64;
        ring_laps(&mut q, &log, colors, 1);
        assert!(q.slots.len() <= KEEP_IDLE_MIN + 1, "{} slots kept", q.slots.len());
        assert_eq!(q.recur.keep_idle(), KEEP_IDLE_MIN, "no color came back");
        assert_eq!(q.spare.len(), 1, "a dropped slot's queue serves the next new color");
        assert_eq!(log.lock().unwrap().len(), colors as usize);
    }

    /// Fills `q`'s table to the bound with idle colors, the first of `colors` (homed on `q`),
    /// so that the next new colors are dropped when they empty.
    fn fill_to_the_bound(q: &mut ColorQueue, log: &Log, colors: impl Iterator<Item = Color>) {
        for c in colors.take(q.recur.keep_idle()) {
            let _ = q.post(c, task(log, c.0), false);
        }
        run_all(q);
        assert_eq!(q.slots.len(), q.recur.keep_idle());
    }

    #[test]
    // Thousands of posts: minutes under Miri, and no unsafe code of its own.
    #[cfg_attr(miri, ignore)]
    fn colors_lent_and_given_back_empty_keep_the_bound() {
        use crate::recur::KEEP_IDLE_MIN;
        let log = Log::default();
        let (home, thief) = (0, 1);
        let mut h = ColorQueue::new(home, Placement::flat(2));
        let mut t = ColorQueue::new(thief, Placement::flat(2));
        let mut colors = colors_on(home, 2, KEEP_IDLE_MIN + 501).into_iter();
        fill_to_the_bound(&mut h, &log, colors.by_ref());
        // Fresh colors, each stolen with its one event (behind a kept color's) and given back
        // empty: a divide and conquer's stolen calls.
        let kept = colors.next().unwrap();
        for c in colors {
            let _ = h.post(kept, task(&log, 0), false);
            let _ = h.post(c, task(&log, c.0), false);
            let loan = h.lend(thief).expect("the last ready color lent");
            assert_eq!(loan.color, c);
            t.adopt(home, loan);
            for r in run_all(&mut t) {
                h.returned(r.color, r.ran);
            }
            run_all(&mut h);
        }
        assert!(h.slots.len() <= KEEP_IDLE_MIN + 1, "{} slots kept", h.slots.len());
        assert_eq!(log.lock().unwrap().len(), KEEP_IDLE_MIN + 2 * 500);
    }

    #[test]
    // Hundreds of thousands of posts: minutes under Miri, and no unsafe code of its own.
    #[cfg_attr(miri, ignore)]
    fn calls_answered_many_times_and_a_hot_collector_keep_the_bound() {
        use crate::recur::KEEP_IDLE_MIN;
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1));
        fill_to_the_bound(&mut q, &log, (1 << 40..).map(Color));
        // A divide and conquer split in eight: each call runs, then gets its eight answers,
        // one at a time among other colors' events (its slot dropped after each), then posts
        // to one collector. Fresh colors each, but for the collector, forever. (Counted as a
        // return at each answer, the calls' sampled ones alone would double the bound in
        // every epoch.)
        let collector = (1 << 41..).map(Color).find(|&c| Recurrence::sampled(c)).unwrap();
        let mut posts = log.lock().unwrap().len();
        for call in 0..40_000u64 {
            let c = Color(call);
            for answer in 0..9 {
                let _ = q.post(c, task(&log, call), false);
                let _ = q.post(Color((1 << 42) | (call * 9 + answer)), task(&log, call), false);
                run_all(&mut q);
                posts += 2;
            }
            let _ = q.post(collector, task(&log, call), false);
            run_all(&mut q);
            posts += 1;
        }
        assert_eq!(q.recur.keep_idle(), KEEP_IDLE_MIN, "no working set beyond the bound");
        assert!(q.slots.len() <= KEEP_IDLE_MIN + 2, "{} slots kept", q.slots.len());
        assert_eq!(log.lock().unwrap().len(), posts);
    }

    #[test]
    // Tens of thousands of posts: minutes under Miri, and no unsafe code of its own.
    #[cfg_attr(miri, ignore)]
    fn a_ring_of_more_colors_than_the_bound_is_kept_after_a_few_laps() {
        use crate::recur::KEEP_IDLE_MIN;
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1));
        let colors = 3 * KEEP_IDLE_MIN as u64;
        ring_laps(&mut q, &log, colors, 1);
        assert!(q.slots.len() <= KEEP_IDLE_MIN + 1, "first lap: colors not known to come back");
        ring_laps(&mut q, &log, colors, 5);
        let bound = q.recur.keep_idle();
        assert!((colors as usize..=2 * colors as usize).contains(&bound), "bound {bound}");
        assert_eq!(q.slots.len(), colors as usize, "every color of the ring kept");
        // Kept: another lap makes no slot (each post finds its color's).
        let made = q.slots_made;
        ring_laps(&mut q, &log, colors, 1);
        assert_eq!(q.slots_made, made);
        assert_eq!(log.lock().unwrap().len(), 7 * colors as usize);
    }

    #[test]
    // Tens of thousands of posts: minutes under Miri, and no unsafe code of its own.
    #[cfg_attr(miri, ignore)]
    fn a_ring_a_little_over_the_bound_doubles_it_once() {
        use crate::recur::KEEP_IDLE_MIN;
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1));
        // 476 colors dropped a lap until the bound keeps them all; then nothing is dropped,
        // and the colors dropped before, made again, do not raise it further.
        let colors = KEEP_IDLE_MIN as u64 * 3 / 2;
        ring_laps(&mut q, &log, colors, 12);
        assert_eq!(q.recur.keep_idle(), 2 * KEEP_IDLE_MIN);
        assert_eq!(q.slots.len(), colors as usize, "every color of the ring kept");
        assert_eq!(log.lock().unwrap().len(), 12 * colors as usize);
    }

    /// Runs one event of `color` alone in a turn timed at `ns` (its cost from then on).
    fn run_timed(q: &mut ColorQueue, log: &Log, color: Color, ns: u64) {
        let _ = q.post(color, task(log, 0), false);
        let key = run_turn(q);
        assert!(q.record_watched_turn(key, ns, 1));
        assert!(q.end_turn(key).is_none());
    }

    /// Posts one event to each of `chunks` (one color each), then 32 to `collector`.
    fn post_chunks_then_results(q: &mut ColorQueue, log: &Log, chunks: u64, collector: Color) {
        for c in 1..=chunks {
            let _ = q.post(Color(c), task(log, c), false);
        }
        for v in 0..32 {
            let _ = q.post(collector, task(log, v), false);
        }
    }

    /// The order in which colors take turns on a worker where a collector (`Color(1000)`,
    /// measured at `collector_ns` an event) got one post from each of 20 chunks (one event of
    /// 10 us each, measured, posted first) and 12 more: at most 4 of its events a turn (a
    /// turn's budget), every chunk's turn whole. Returns the colors' values, one per turn.
    fn turns_beside_a_collector(backlog_turns: bool, collector_ns: u64) -> Vec<u64> {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1)).with_backlog_turns(backlog_turns);
        let collector = Color(1000);
        run_timed(&mut q, &log, collector, collector_ns);
        for c in 1..=20 {
            run_timed(&mut q, &log, Color(c), 10_000);
        }
        post_chunks_then_results(&mut q, &log, 20, collector);
        let mut turns = vec![];
        while let Some((k, color)) = q.start_turn() {
            let budget = if color == collector { 4 } else { usize::MAX };
            for _ in 0..budget {
                let Some(t) = q.pop(k) else { break };
                t.run();
            }
            assert!(q.end_turn(k).is_none());
            turns.push(color.0);
        }
        turns
    }

    /// A collector's backlog of long events takes every other turn, from the first: 28 of its
    /// 32 events run in 7 turns between the first 7 chunks' turns, and the last 4, too few to
    /// jump, wait in the line behind the other 13. In the line alone, it ran after the 20th
    /// chunk, all 8 turns in a row.
    #[test]
    fn a_backlog_of_long_events_takes_every_other_turn() {
        let turns = turns_beside_a_collector(true, 50_000);
        let mut want = vec![];
        for c in 1..=7 {
            want.extend([1000, c]);
        }
        want.extend(8..=20);
        want.push(1000);
        assert_eq!(turns, want);
        let mut line: Vec<u64> = (1..=20).collect();
        line.extend([1000; 8]);
        assert_eq!(turns_beside_a_collector(false, 50_000), line, "without backlog turns");
        // Cheap events wait in the line: the jump would search it for less work than a chunk.
        assert_eq!(turns_beside_a_collector(true, BACKLOG_TURN_EVENT_NS - 1), line, "cheap");
    }

    /// A backlog of long events in a line of cheap colors waits its turn there: the line's 20
    /// colors, timed at 100 ns an event, are a wait of a few microseconds.
    #[test]
    fn a_backlog_in_a_line_of_cheap_colors_waits_its_turn() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1)).with_backlog_turns(true);
        let collector = Color(1000);
        run_timed(&mut q, &log, collector, 50_000);
        for c in 1..=20 {
            run_timed(&mut q, &log, Color(c), 100);
        }
        post_chunks_then_results(&mut q, &log, 20, collector);
        assert!(q.ahead.is_empty(), "listed: {:?}", q.ahead);
        let (_, first) = q.start_turn().unwrap();
        assert_eq!(first, Color(1));
    }

    /// Where every waiting color has a backlog alike (a driver feeding many actors), none jumps:
    /// the round goes on in the line's order.
    #[test]
    fn backlogs_alike_keep_the_lines_order() {
        let log = Log::default();
        let mut q = ColorQueue::new(0, Placement::flat(1)).with_backlog_turns(true);
        for c in 1..=6 {
            run_timed(&mut q, &log, Color(c), 50_000);
        }
        for v in 0..12 {
            for c in 1..=6 {
                let _ = q.post(Color(c), task(&log, v), false);
            }
        }
        assert!(q.ahead.is_empty(), "listed: {:?}", q.ahead);
        let order: Vec<u64> = (0..6)
            .map(|_| {
                let key = run_turn(&mut q);
                assert!(q.end_turn(key).is_none());
                q.slots[key].color.0
            })
            .collect();
        assert_eq!(order, [1, 2, 3, 4, 5, 6]);
        run_all(&mut q);
    }

    /// A listed color that left the line (lent to a thief) is passed over when its turn from
    /// the list comes, and one whose backlog no longer stands out (an urgent post first, then
    /// the line grown as long in events) waits in the line.
    #[test]
    fn a_listed_color_jumps_only_if_it_still_would() {
        let log = Log::default();
        let setup = || {
            let mut q = ColorQueue::new(0, Placement::flat(2)).with_backlog_turns(true);
            let colors = colors_on(0, 2, 21);
            for &c in &colors {
                run_timed(&mut q, &log, c, 10_000);
            }
            for &c in &colors[1..] {
                let _ = q.post(c, task(&log, 1), false);
            }
            for v in 0..BACKLOG_TURN_EVENTS as u64 {
                let _ = q.post(colors[0], task(&log, v), false);
            }
            let key = q.index[&colors[0]];
            assert_eq!(q.ahead.iter().copied().collect::<Vec<_>>(), [key]);
            (q, colors)
        };
        let (mut q, colors) = setup();
        let loan = q.lend(1).expect("the back of the line is lent");
        assert_eq!(loan.color, colors[0]);
        assert_eq!(q.start_turn().map(|(_, c)| c), Some(colors[1]));
        assert!(q.ahead.is_empty());
        // Urgent: a color made ready by an urgent post (first in line) runs first, and the
        // listed one after it.
        let (mut q, colors) = setup();
        let urgent = colors_on(0, 2, 22)[21];
        let _ = q.post(urgent, task(&log, 2), true);
        let key = run_turn(&mut q);
        assert_eq!(q.slots[key].color, urgent);
        assert!(q.end_turn(key).is_none());
        assert_eq!(q.start_turn().map(|(_, c)| c), Some(colors[0]));
        // Every other color as backlogged by now: the listed one keeps its place in line.
        let (mut q, colors) = setup();
        for &c in &colors[1..] {
            for v in 0..BACKLOG_TURN_EVENTS as u64 {
                let _ = q.post(c, task(&log, v), false);
            }
        }
        assert_eq!(q.start_turn().map(|(_, c)| c), Some(colors[1]));
    }
}
