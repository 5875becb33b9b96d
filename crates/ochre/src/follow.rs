//! Colors follow their messages: the policy that moves a color to the worker its posts come
//! from, and back.
//!
//! A program written with one plain color per actor gets its colors hashed over the workers, so
//! that two actors that talk to each other sit on two workers half of the time, and every message
//! between them crosses cores (a batch hand-off, often a wake-up). tokio and Go avoid this by
//! running a task woken by another on the waker's worker; Pony and CAF schedule an actor that
//! receives a message on the sender's scheduler. ochre's colors have a home (`color::home_of`),
//! which is the directory every poster sends to; this module decides when the home *lends the
//! color for good* to the worker posting to it, with the lending protocol of `queue` (a moved
//! color is a *resident* guest: it stays on the borrower when its queue empties, where a stolen
//! one goes back).
//!
//! **When a color moves (at its home).** A post reaches the home from worker `P` for a color
//! that is idle here (nothing queued, not running, not lent, not pinned). It moves to `P` when:
//!
//! * the post says `P` would run the color's next events at no loss of parallelism: either `P`
//!   sent it in a batch flushed with nothing else to run (a *quiet* batch: `P` is about to
//!   idle), or it is a *step*, the only post its event made to another worker (a token handed
//!   on, a reply) by a color with nothing left to run or whose events are cheap ([`is_step`]:
//!   a pipeline's stage passing items on is no chain) and `P` has no more colors waiting or
//!   running than the home (as the batch says: counted when it was sent, not the count `P` last
//!   published) or the color's events are [`cheap`] and the home has no other color waiting (a
//!   *straggler*: see below), or the batch is a *stream* to a *cheap* color (every message of
//!   it a post to this color, at least [`STREAM_MIN`], and the color's events measured at most
//!   [`CHEAP_NS`]: a counter fed by a producer's loop, whose events cost less than carrying
//!   them across). A worker fanning out (a producer) sends loud batches and no steps: its
//!   receivers stay where they are and run in parallel with it, as do the receivers of a
//!   stream whose events are not cheap. One color per batch, as tokio's LIFO slot holds one
//!   task;
//! * unless the color is *settled*: its own posts go mostly to colors on its worker (a balance
//!   of +1 per turn that posted only to colors here, -1 per turn that posted elsewhere, above
//!   [`SETTLED`]; 1 turn in [`PARTNER_SAMPLE`] is counted, [`TurnSample`]). A step to a
//!   settled color comes over a boundary between two workers' stretches of a chain (the ring's
//!   token arriving at the first color of the home's stretch); moving the color moves the
//!   boundary one color along, with as many messages crossing as before. Such a step moves it
//!   only when `P` has clearly fewer colors waiting than the home (the stretches even out the
//!   load), or when neither has anything else (a lone chain gathers on one worker), or when `P`
//!   gets clearly more of its CPU. Without it, the boundaries of the 64-token ring went round
//!   with the tokens (each color changed worker about five times in a run of a million hops,
//!   `ring_probe`'s `PLACE=1` shows it) and the stretches did not merge; with it they stay put
//!   once the load is even: `ring_probe 64 5`, `FRESH=1`, 3 processes, one build with the rule
//!   switched off by a temporary variable: moves per run 2,100-2,600 -> 1,460-1,850, medians
//!   28.2-29.7M -> 30.3-33.3M hops/s. (`bench actors --quick` gained as much on this ring over
//!   cd2a012, 0.90-0.97 -> 1.01-1.08 of tokio-mt, but as much with the rule off: not from it.)
//!
//!   Stragglers: the colors of Savina's big (100 actors, each pinging a random other and
//!   waiting for its pong) gather on one worker, the poster being no more loaded than the home
//!   at first; the last few left on the other worker then never moved, since `P` had ~100
//!   colors waiting and the home none, and every ping to them crossed in a batch of one to a
//!   worker that spins for it: with 1-3 such colors big ran at 10-12M messages/s against 18.8M
//!   with all on one worker (24.5M since the run queue stopped branching on leases, `queue`)
//!   and 12.5M hashed over both (`big_probe`). A cheap color's events
//!   cost less than sending them across, so the home, with nothing else to run, gives it up:
//!   `bench actors --quick`, 3 processes alternated in one build, big over tokio-mt 1.17-1.40
//!   -> 1.61-1.86, the others within their spread.
//! * the color's posts come from `P`: at least [`need`] posts in a row, none from anywhere else
//!   in between (a color that also hears from its neighbours here, or from a third worker,
//!   stays), and it is not the color's first post (an accept handler handing a new connection
//!   its first event moves nothing: the connection was placed where it is);
//! * `P` does not get a smaller share of its CPU than the home does (`cpu_share`): work does
//!   not move to a worker that shares its CPU with another process.
//!
//! **Busy colors are pulled.** A step that would move the color finds it busy as often as idle
//! where chains meet (two tokens of a ring in one queue travel together from then on, and each
//! turn of the pair ends with both posted on): the decision is then kept in the color's traffic
//! (`Traffic::pull`), and the color goes to that worker when its queue empties at the end of a
//! turn (a `Move` without an event, as for [`relief`]), unless a post from anywhere else came
//! in between (that clears it). Steps only: a stream or a quiet batch that finds its color busy
//! moves nothing, as before. On the ring of 64 tokens over 1000 colors, 2 workers
//! (`ring_probe 64 3`, `FRESH=1`, 3 processes, alternated with the build before): 28,700 of
//! 39,300 posts that could move their color found it busy; with pulls, posts crossing workers
//! 58-64K -> 30-34K per million hops, 23.8-25.4M -> 27.2-27.3M hops/s (medians of 3 runs).
//!
//! **When it comes back (at the borrower).** The borrower counts the posts made to the color
//! locally and those forwarded by the home (posted elsewhere). Each time the color's queue
//! empties, after a window of [`WINDOW`] posts, it gives the color back home if most of them were
//! forwarded: the color's traffic has moved on. It also gives it back to an idle home when it
//! has colors waiting itself, the home's CPU is not clearly worse and the color's events are not
//! cheap ([`sheds`]: moves gathered too much on one worker; a cheap color's events cost less than
//! sending them across, measured from turns timed 1 in 64, [`CHEAP_NS`]), or when the home gets
//! clearly more of its CPU.
//!
//! **Leaving a shared CPU.** A worker that gets clearly less of its CPU than an idle worker
//! (another process shares it) sends each color at home here whose queue empties to the idle
//! worker with the most CPU ([`relief`], a `Move` without an event), and so does a post that
//! reaches such a color idle (the `Move` carries the post: a driver whose first event comes from
//! outside runs its long handler on the free CPU); the color's partners follow it there by the
//! rules above, which never move a color to the shared worker, and it does not go back to a
//! home whose CPU is clearly worse ([`goes_home`]). When the want is over it does: a color that
//! came for it is *relieved* ([`relieved`], kept in its lease), and whenever its queue empties
//! with no other color waiting on its worker it goes home if the home is idle with all of its
//! CPU (its partners' posts, local there, would otherwise keep it for good). The idle worker
//! takes no work by stealing (`Steal::FromSharedCpus` does, measured worse): only idle colors
//! move, so a color's order and exclusion stay the lending protocol's.
//!
//! **Hysteresis.** Each return home doubles the posts in a row a color needs to move again
//! ([`need`], up to [`MAX_NEED`]): a color whose traffic really is split between workers settles
//! at home after a few moves instead of bouncing.
//!
//! These are plain functions of counters, called by the workers (`worker`) and testable without
//! threads; the counters live in each slot of the run queue (`queue`).

use crate::cpu_share::FULL;
use crate::message::Msg;
use crate::Color;

/// Posts counted before a borrower judges where a resident color's traffic comes from.
pub(crate) const WINDOW: u32 = 16;
/// Posts in a row from one worker a color needs to move for the first time: one, so that a
/// chain of messages (a token going round a ring) pulls each color it reaches to its worker on
/// its way, the first time round; with two, the boundaries between the workers' stretches of
/// the ring moved one color per lap and stayed as many.
const FIRST_NEED: u32 = 1;
/// The most posts in a row a color that keeps coming back may need.
pub(crate) const MAX_NEED: u32 = 64;
/// How much less CPU share (thousandths) a poster's worker may have than the home's and still
/// take its colors: shares are measured over windows of tens of ms and move by a few percent on
/// a quiet machine; a worker sharing its CPU with one busy thread measures about half.
const SHARE_SLACK: u32 = FULL / 10;

/// Who posts to a color, as its slot sees it (home or borrower).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Traffic {
    /// At a borrower: posts made on this worker since the last decision.
    pub(crate) local: u32,
    /// Posts from elsewhere: at the home, in a row from `from`; at a borrower, forwarded by the
    /// home since the last decision.
    pub(crate) remote: u32,
    /// At the home: 1 + the worker the remote posts came from (0: none yet), and [`PULLED`]
    /// if [`moves`] would have moved the color there at its last post, had the color been
    /// idle: the color goes there when its queue empties (a *pull*, see the module doc); a post
    /// from anywhere else clears it. A bit of this word rather than a field: the slot keeps its
    /// size (a one-token ring of 1000 colors, every post local, ran 2% slower with one more
    /// word here).
    from: u32,
    /// Times the color came back home after a move.
    pub(crate) bounces: u32,
    /// Posts the color made to itself since the last decision: a color with work of its own (a
    /// chain of its own events) does not move. Its partners, if any, come to it instead.
    pub(crate) own: u16,
    /// Where the color's own turns post, on balance: +1 for a turn that posted only to colors
    /// on this worker (itself included: a color with work of its own does not move anyway),
    /// -1 for one that posted to another worker, within ±[`OUT_BOUND`] (so that it follows a
    /// change within as many turns). Past [`SETTLED`]: the color's partners are here.
    out: i16,
    /// Posts counted here in all (saturating): a color's first post moves nothing. Of the posts
    /// from other workers, only those that may move a color are counted (quiet or steps,
    /// `worth_asking`): a fan-out's or a stream's take the plain path. (Counting only those from
    /// other workers, a color that had only ever heard from its neighbours here refused the
    /// token of a ring arriving from elsewhere, and the ring stayed split between workers.)
    pub(crate) total: u32,
}

/// The bound of [`Traffic`]'s balance of where the color's turns post.
const OUT_BOUND: i16 = 16;
/// The balance above which a color is settled: a clear majority of its last turns posted
/// here. With 1 (two turns), the colors of `bench actors`' big, whose random partners are half
/// on each worker, settled by chance and stopped gathering on one worker (big over tokio-mt
/// 1.07-1.60 -> 0.97-1.58, 8 processes); with 4 and 8 they did not (1.20-1.49 and 1.08-1.62,
/// 5 processes), and the ring of 64 tokens kept most of its gain with 4 (`ring_probe 64 5`,
/// medians over 3 processes: 1: 31.2-32.0M hops/s, 4: 30.3-33.3M, 8: 29.9-30.1M, never
/// settled: 28.2-29.7M).
const SETTLED: i16 = 4;

/// 1 turn in this many has its posts counted in its color's traffic ([`TurnSample`]): counting
/// each event's posts cost `bench pingpong` (chains of events, 1 worker) 9%, each post's 17%.
pub(crate) const PARTNER_SAMPLE: u8 = 8;

/// Which turns of a worker count where their color posts ([`Traffic::posted`]), 1 in
/// [`PARTNER_SAMPLE`], from the worker's running totals of posts to colors here and elsewhere:
/// a counted turn's posts are their difference, so posting itself costs nothing more. The
/// workers and the simulator count through it alike.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TurnSample {
    /// Turns until the next counted one.
    countdown: u8,
}

/// A worker's running totals of posts made (to colors on it, to colors elsewhere).
pub(crate) type PostTotals = (u64, u64);

impl TurnSample {
    pub(crate) fn new() -> Self {
        TurnSample { countdown: PARTNER_SAMPLE }
    }

    /// At a turn's start: the totals so far (`totals`, read only then) if this turn is counted.
    #[inline]
    pub(crate) fn start(&mut self, totals: impl FnOnce() -> PostTotals) -> Option<PostTotals> {
        self.countdown -= 1;
        if self.countdown != 0 {
            return None;
        }
        self.countdown = PARTNER_SAMPLE;
        Some(totals())
    }

    /// At a counted turn's end, from the totals at its start and now: `Some(true)` if it posted
    /// to a color on another worker, `Some(false)` if only to colors here (itself included),
    /// `None` if it posted nothing.
    #[inline]
    pub(crate) fn posted_elsewhere(before: PostTotals, now: PostTotals) -> Option<bool> {
        // Totals that only grew in the turn, in wrapping arithmetic (`worker::post_totals`).
        let elsewhere = now.1 != before.1;
        (elsewhere || now.0 != before.0).then_some(elsewhere)
    }
}

/// The bit of [`Traffic`]'s `from` that marks a pull (worker numbers stay far below it).
const PULLED: u32 = 1 << 31;

impl Traffic {
    /// A post made on this worker, by the color itself if `own` (at the home, it ends the run of
    /// posts from elsewhere).
    #[inline]
    pub(crate) fn local_post(&mut self, own: bool) {
        self.own = self.own.saturating_add(u16::from(own));
        self.local = self.local.saturating_add(1);
        self.total = self.total.saturating_add(1);
        self.from = 0;
    }

    /// A counted turn of the color posted: only to colors on this worker if `here`.
    #[inline]
    pub(crate) fn posted(&mut self, here: bool) {
        self.out = (self.out + if here { 1 } else { -1 }).clamp(-OUT_BOUND, OUT_BOUND);
    }

    /// The color's own posts go mostly to colors on its worker (see [`moves`]).
    #[inline]
    pub(crate) fn settled(&self) -> bool {
        self.out > SETTLED
    }

    /// At the home: the last post, from another worker, would have moved the color there had
    /// it been idle (see the module doc, "Busy colors are pulled").
    #[inline]
    pub(crate) fn pull(&mut self) {
        if self.from != 0 {
            self.from |= PULLED;
        }
    }

    /// At the home: the worker a post pulled the color to, if no post came from anywhere else
    /// since.
    #[inline]
    pub(crate) fn pulled_by(&self) -> Option<usize> {
        (self.from & PULLED != 0).then(|| (self.from & !PULLED) as usize - 1)
    }

    /// At the home: a post from worker `poster`; after a post from anywhere else, it starts a new
    /// run. Returns the length of the run.
    pub(crate) fn post_from(&mut self, poster: usize) -> u32 {
        let tag = poster as u32 + 1;
        if self.from & !PULLED != tag {
            self.from = tag;
            self.remote = 0;
        }
        self.remote = self.remote.saturating_add(1);
        self.total = self.total.saturating_add(1);
        self.remote
    }

    /// At a borrower: a window of posts is counted, to be judged ([`gives_back`]).
    #[inline]
    pub(crate) fn window_full(&self) -> bool {
        self.local.saturating_add(self.remote) >= WINDOW
    }

    /// At a borrower: a post forwarded by the home.
    pub(crate) fn forwarded(&mut self) {
        self.remote = self.remote.saturating_add(1);
    }

    /// Starts a new count (after a decision), keeping the history.
    pub(crate) fn reset(&mut self) {
        *self = Traffic { bounces: self.bounces, total: self.total, ..Traffic::default() };
    }
}

/// Posts in a row from one worker that a color that came back home `bounces` times needs to
/// move again.
pub(crate) fn need(bounces: u32) -> u32 {
    FIRST_NEED.checked_shl(bounces).unwrap_or(MAX_NEED).min(MAX_NEED)
}

/// Posts a batch carries, all to one color, at least, to be a stream ([`stream`]).
pub(crate) const STREAM_MIN: usize = 8;

/// The color a batch streams to: every message of it a post to that one color, at least
/// [`STREAM_MIN`] of them (a producer's loop feeding a counter); `None` for a fan-out or mixed
/// traffic. Measured with `bench actors` (2 workers, beside the default in one process, 4
/// processes x 5 reps, ratio to tokio-mt): counting 0.47 -> 0.73 quiet and 1.11 -> 1.27 busy,
/// the others within noise. Moving every cheap color that a loud batch reaches instead (not
/// only a stream's) gathered a fan-out's receivers on the producer's worker: bank 0.78 -> 0.66.
pub(crate) fn stream(batch: &[Msg]) -> Option<Color> {
    let first = batch.first()?.post_color()?;
    let one = |m: &Msg| m.post_color() == Some(first);
    (batch.len() >= STREAM_MIN && batch.iter().all(one)).then_some(first)
}

/// What the home knows when a post from another worker reaches an idle color it holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Offer {
    /// The color's traffic, the post just counted.
    pub(crate) traffic: Traffic,
    /// The poster's batch was sent with nothing else to run.
    pub(crate) quiet: bool,
    /// The post was the only one its event made to another worker: a step of a chain.
    pub(crate) step: bool,
    /// The post came in a [`stream`] to this color.
    pub(crate) stream: bool,
    /// The color's events are measured [`cheap`].
    pub(crate) cheap: bool,
    /// Colors waiting on the poster's worker (when it sent the post) and on the home.
    pub(crate) poster_ready: usize,
    pub(crate) home_ready: usize,
    /// CPU shares (thousandths) of the poster's worker and of the home.
    pub(crate) poster_share: u32,
    pub(crate) home_share: u32,
}

impl Offer {
    /// The post came in a [`stream`] to a color whose events are [`cheap`].
    #[inline]
    pub(crate) fn cheap_stream(&self) -> bool {
        self.stream && self.cheap
    }
}

/// What [`moves`] judges that the home knows without reading another worker's state: the post
/// came quiet or as a step, and the color's traffic calls for a move. Checked first, so that
/// the posts of a fan-out or a stream (most posts between workers) read nothing more.
pub(crate) fn worth_asking(traffic: &Traffic, quiet: bool, step: bool, cheap_stream: bool) -> bool {
    (quiet || step || cheap_stream)
        && traffic.remote >= need(traffic.bounces)
        && traffic.total > 1
        && traffic.own == 0
}

/// Whether an event's lone post to another worker is a step of a chain, by what its color has
/// left: nothing to run (`popped`: its next event is taken already, else `has_events` says
/// whether one waits), or events measured [`cheap`] (`cost`: ns an event). A stage of a
/// pipeline that passes each item on with more queued is no step: moving the next stage to it
/// would run two busy stages on one worker while the other idles (eight stages of 1 us ran at
/// 0.80 of tokio, `pipeline_probe`); a cheap color's is, as the next color's events then cost
/// less than the crossings a move saves (the ring of 64 tokens, whose colors hold two tokens at
/// times, lost 5% when they were not).
#[inline]
pub(crate) fn is_step(
    popped: bool,
    has_events: impl FnOnce() -> bool,
    cost: impl FnOnce() -> u64,
) -> bool {
    !(popped || has_events()) || cheap(cost())
}

/// Whether a post (a chain `step` or not) to a color `idle` at its home or busy there is judged
/// by [`moves`] at all: a busy color is pulled by chain steps only (see the module doc, "Busy
/// colors are pulled"). The workers and the simulator ask the same.
#[inline]
pub(crate) fn judged(idle: bool, step: bool) -> bool {
    idle || step
}

/// Whether the color moves to the poster (see the module doc).
pub(crate) fn moves(o: &Offer) -> bool {
    let load_allows = || {
        if o.step && o.traffic.settled() && !clearly_more(o.poster_share, o.home_share) {
            moving_the_boundary_pays(o.poster_ready, o.home_ready)
        } else {
            o.quiet
                || o.cheap_stream()
                || o.poster_ready <= o.home_ready
                || (o.step && o.cheap && o.home_ready == 0)
        }
    };
    worth_asking(&o.traffic, o.quiet, o.step, o.cheap_stream())
        && o.poster_share + SHARE_SLACK >= o.home_share
        && load_allows()
}

/// Colors waiting (or running) on the poster's worker with which a lone chain still gathers
/// on it: the one that posted.
const LONE: usize = 1;
/// How many fewer colors the poster's worker must have waiting than the home for a settled
/// color to move to it (and at least a quarter of the home's): queue lengths move by a few
/// colors between two batches; a margin of 2 moved nearly as much as none.
const SETTLED_MARGIN: usize = 6;

/// Whether a step should move a [`Traffic::settled`] color, whose own posts stay on its
/// worker, to the poster's: the move only shifts the boundary between two workers' stretches
/// of a chain along it, with as many messages crossing as before; worth it to even the load
/// (the poster has clearly fewer colors waiting, `poster_ready`, than the home, `home_ready`),
/// or to gather a lone chain on one worker (neither has anything else to run: the one-token
/// ring gathers on one worker).
fn moving_the_boundary_pays(poster_ready: usize, home_ready: usize) -> bool {
    let margin = SETTLED_MARGIN.max(home_ready / 4);
    poster_ready + margin <= home_ready || (poster_ready <= LONE && home_ready == 0)
}

/// Colors waiting on a borrower from which it sheds residents to their idle homes.
const SHED_READY: usize = 2;

/// Measured cost per event (ns) up to which a resident color is not given back to its idle home
/// because its borrower is crowded: sending it back makes each of its posts to and from its
/// partners here a cross-core message, which costs more than the event (a stream of empty events
/// runs at 36 ns an event beside its poster, 87 ns split over two workers, and 4x that in a
/// process whose cross-core hops are slow), so a second worker does not run such colors faster
/// than this one. Measured with `bench actors` (2 workers, each variant beside the default in
/// one process, 3 processes x 5 reps, ratio to tokio-mt): ring of 64 tokens 0.40 -> 0.57, big
/// 0.70 -> 0.81, chameneos 1.51 -> 1.12, the others within 2%; busy, all within 6%.
pub(crate) const CHEAP_NS: u64 = 250;

/// Whether events measured at `event_ns` each (0: not timed yet) are cheap ([`CHEAP_NS`]).
pub(crate) fn cheap(event_ns: u64) -> bool {
    event_ns > 0 && event_ns <= CHEAP_NS
}
/// How much more of its CPU (thousandths) another worker must get for a worker to send it
/// colors when it has nothing else to do: a CPU shared with one busy thread measures about half;
/// a few percent is noise.
pub(crate) const RELIEF_MARGIN: u32 = FULL / 5;

/// Whether a worker getting `theirs` of its CPU is clearly better off than one getting `mine`
/// (by [`RELIEF_MARGIN`]): the one comparison behind every move of work between shared and
/// free CPUs (here, and `cpu_share::CpuShare::leaves_pin`).
#[inline]
pub(crate) fn clearly_more(theirs: u32, mine: u32) -> bool {
    theirs >= mine + RELIEF_MARGIN
}

/// What a worker knows of another when a color's queue empties here.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer {
    pub(crate) id: usize,
    /// Nothing to run (spinning or asleep).
    pub(crate) idle: bool,
    /// Share of its CPU, thousandths.
    pub(crate) share: u32,
}

/// At a borrower whose resident color's queue just emptied, with `ready` other colors waiting
/// here and this worker's CPU share `mine`: give the color back to its `home`? Yes when the home
/// is idle and either this worker has more than it can run while the home's CPU is not clearly
/// worse and the color is not [`cheap`] (moves gather partners on one worker; this spreads them
/// again when too many gathered: a fan-out's receivers), or the home gets clearly more of its
/// CPU (work leaves a CPU shared with another process). `home` is asked only when it may
/// matter.
pub(crate) fn sheds(ready: usize, mine: u32, cheap: bool, home: impl FnOnce() -> Peer) -> bool {
    let crowded = crowded(ready, cheap);
    if !crowded && has_its_cpu(mine) {
        return false;
    }
    let home = home();
    home.idle && ((crowded && !clearly_more(mine, home.share)) || clearly_more(home.share, mine))
}

/// At a borrower whose resident color's queue just emptied: give it back to its `home`? When its
/// traffic moved on (`moved_on`, [`gives_back`]), unless the home gets clearly less of its CPU
/// than this worker (`mine`): a color that [`relief`] sent here keeps hearing from its home,
/// forwarded, and going back would undo the relief at every window. When it is `relieved` (it
/// came for its home's want of CPU, [`relieved`]), no other color waits here (`ready`) and the
/// home is idle and has its CPU again: the want is over, and the color's partners here would
/// keep it for good (their posts are local), so that a fork of two long events, one of them
/// relieved onto its poster's worker during a busy spell, ran one after the other for the rest
/// of the process in every other job (`tests/api.rs`, `two_long_events_...`: 3 of 8 jobs at
/// once, 2 test runs in 8). So too, whatever else waits here, when its events are long (over
/// `steal::LONG_EVENT_NS` each, `event_ns` by its measure): next to one of them a message's hop
/// is nothing, so its partners gain nothing from it here, and beside another long color here
/// it waits a whole event: the same fork, its remote color moved onto the poster's worker by a
/// busy spell, ran one after the other in every job after (2 test runs in 15 beside the other
/// tests, on this session's host; the colors' own cost says long, not `relieved`). Else as
/// [`sheds`] says (`cheap` by `event_ns`).
pub(crate) fn goes_home(
    moved_on: bool,
    relieved: bool,
    ready: usize,
    mine: u32,
    event_ns: u64,
    home: impl FnOnce() -> Peer,
) -> bool {
    if moved_on {
        return !clearly_more(mine, home().share);
    }
    let cheap = cheap(event_ns);
    if (relieved && ready == 0) || long(event_ns) {
        let home = home();
        return (home.idle && has_its_cpu(home.share)) || sheds(ready, mine, cheap, || home);
    }
    sheds(ready, mine, cheap, home)
}

/// Events of `event_ns` each are long ([`goes_home`], [`keeps`]).
#[inline]
fn long(event_ns: u64) -> bool {
    event_ns > crate::steal::LONG_EVENT_NS
}

/// Whether a color moved here from `home` by a worker getting `mine` of its CPU came for its
/// home's want of CPU: the home gets clearly less of it ([`relief`] sent it, or a post from
/// here moved it off a shared CPU).
pub(crate) fn relieved(mine: u32, home: Peer) -> bool {
    clearly_more(mine, home.share)
}

/// At a thief whose stolen color's queue just emptied (`Steal::Backlog`): keep it, as a
/// resident, instead of giving it back? When its `home` gets clearly less of its CPU than this
/// worker (`mine`): a backlog stolen off a CPU another process shares would otherwise go back to
/// it, and the next tokens of a ring queue there again (the 64-token ring with a busy CPU fell
/// from 1.0-1.26x tokio to 0.65-0.80x with backlog stealing until loans stayed).
pub(crate) fn keeps_loan(mine: u32, home: impl FnOnce() -> Peer) -> bool {
    // The home is asked only when this worker could be clearly better off.
    mine >= RELIEF_MARGIN && clearly_more(mine, home().share)
}

/// Where a color at home here, whose queue just emptied, should go because this worker gets
/// clearly less of its CPU (`mine`) than an idle worker does: the idle worker with the largest
/// share, if it beats `mine` by [`RELIEF_MARGIN`]. Its partners follow it there (`moves`).
/// `peers` is walked only when this worker's CPU is shared.
#[inline]
pub(crate) fn relief<I: Iterator<Item = Peer>>(
    mine: u32,
    peers: impl FnOnce() -> I,
) -> Option<usize> {
    if has_its_cpu(mine) {
        return None;
    }
    peers().filter(|p| p.idle && clearly_more(p.share, mine)).max_by_key(|p| p.share).map(|p| p.id)
}

/// At a borrower whose resident color's queue just emptied: `Some(true)` to give it back home,
/// `Some(false)` to keep it (a window was judged: start a new one), `None` to wait for more posts.
pub(crate) fn gives_back(t: &Traffic) -> Option<bool> {
    t.window_full().then_some(t.remote > t.local)
}

/// Whether a worker getting `mine` of its CPU, with `ready` colors waiting, keeps a color at home
/// here or a resident whose queue just emptied (its events measured `event_ns` each), when
/// nothing pulls it and no window of its traffic is due: colors do not follow (`follow_on`
/// false), or neither [`sheds`], [`relief`] nor [`goes_home`] would send it anywhere (the worker
/// has its CPU, is not crowded, and the color's events are not [`long`]: a resident of long
/// events goes home when its home is idle). Asked first, so that the common end of a turn takes
/// one path whatever the color's lease (`queue`); the workers and the simulator ask it alike.
#[inline]
pub(crate) fn keeps(follow_on: bool, ready: usize, mine: u32, event_ns: u64) -> bool {
    !follow_on || (has_its_cpu(mine) && !crowded(ready, cheap(event_ns)) && !long(event_ns))
}

/// A worker getting `mine` of its CPU has it (not clearly less than all of it): it sends no
/// color away for want of CPU ([`relief`], [`sheds`]).
#[inline]
pub(crate) fn has_its_cpu(mine: u32) -> bool {
    mine + RELIEF_MARGIN >= FULL
}

/// A borrower with `ready` colors waiting has more than it can run, for a color whose events
/// are not `cheap` ([`sheds`]).
#[inline]
fn crowded(ready: usize, cheap: bool) -> bool {
    ready >= SHED_READY && !cheap
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn offer(traffic: Traffic) -> Offer {
        Offer {
            traffic,
            quiet: true,
            step: false,
            stream: false,
            cheap: false,
            poster_ready: 0,
            home_ready: 0,
            poster_share: FULL,
            home_share: FULL,
        }
    }

    fn posts_from(t: &mut Traffic, poster: usize, n: u32) {
        for _ in 0..n {
            t.post_from(poster);
        }
    }

    #[test]
    fn a_color_moves_on_a_quiet_post_unless_it_is_its_first() {
        let mut t = Traffic::default();
        posts_from(&mut t, 1, 1);
        assert!(!moves(&offer(t)), "the first post moves nothing");
        posts_from(&mut t, 1, 1);
        assert!(moves(&offer(t)));
        assert!(!moves(&Offer { quiet: false, ..offer(t) }), "a loud batch moves nothing");
        let mut t = Traffic::default();
        posts_from(&mut t, 2, 1);
        posts_from(&mut t, 1, 1);
        assert!(moves(&offer(t)), "a run of one, not the first post from elsewhere");
        let mut t = Traffic::default();
        t.local_post(false);
        posts_from(&mut t, 1, 1);
        assert!(moves(&offer(t)), "a local post came first");
    }

    #[test]
    fn a_post_from_anywhere_else_restarts_the_run() {
        let mut t = Traffic { bounces: 1, total: 10, ..Traffic::default() };
        posts_from(&mut t, 1, 1);
        posts_from(&mut t, 2, 1);
        assert!(!moves(&offer(t)), "1 then 2: a run of one, two needed");
        posts_from(&mut t, 2, 1);
        assert!(moves(&offer(t)));
        t.local_post(false);
        posts_from(&mut t, 2, 1);
        assert!(!moves(&offer(t)), "a local post in between");
        posts_from(&mut t, 2, 1);
        assert!(moves(&offer(t)));
        // Local posts before a run do not hold the color once its posts come from elsewhere.
        for _ in 0..50 {
            t.local_post(false);
        }
        posts_from(&mut t, 1, 2);
        assert!(moves(&offer(t)));
    }

    #[test]
    fn a_resident_whose_traffic_moved_on_goes_home_unless_the_home_cpu_is_clearly_worse() {
        let home = |share| move || Peer { id: 0, idle: false, share };
        assert!(goes_home(true, false, 0, FULL, 0, home(FULL)), "traffic moved on");
        assert!(!goes_home(true, false, 0, FULL, 0, home(FULL / 2)), "the home's CPU is shared");
        assert!(goes_home(true, false, 0, FULL / 2, 0, home(FULL / 2)), "both shared alike");
        assert!(!goes_home(false, false, 0, FULL, 0, home(FULL)), "nothing says so");
    }

    #[test]
    fn a_relieved_resident_goes_home_once_its_home_has_its_cpu_again_and_waits() {
        let home = |idle, share| move || Peer { id: 0, idle, share };
        // Moved off a home getting half of its CPU: relieved.
        let shared_home = Peer { id: 0, idle: true, share: FULL / 2 };
        assert!(relieved(FULL, shared_home));
        assert!(!relieved(FULL, Peer { share: FULL, ..shared_home }), "moved by its traffic");
        // Its queue emptied with nothing else waiting here: home if the home is idle with all
        // of its CPU.
        assert!(goes_home(false, true, 0, FULL, 0, home(true, FULL)), "the want is over");
        assert!(!goes_home(false, true, 0, FULL, 0, home(true, FULL / 2)), "still shared");
        assert!(!goes_home(false, true, 0, FULL, 0, home(false, FULL)), "the home is busy");
        // Other colors wait here: the usual rules (the worker is not crowded by one).
        assert!(!goes_home(false, true, 1, FULL, 0, home(true, FULL)));
        // Not relieved: a color its traffic moved stays with its partners.
        assert!(!goes_home(false, false, 0, FULL, 0, home(true, FULL)));
        // Long events: home whenever the home is idle with its CPU, whatever waits here.
        let long = crate::steal::LONG_EVENT_NS + 1;
        assert!(goes_home(false, false, 3, FULL, long, home(true, FULL)), "long, home idle");
        assert!(!goes_home(false, false, 3, FULL, long, home(false, FULL)), "the home is busy");
        assert!(!goes_home(false, false, 0, FULL, long, home(true, FULL / 2)), "home shared");
        assert!(!goes_home(false, false, 0, FULL, 10_000, home(true, FULL)), "10 us: not long");
    }

    fn posts(colors: &[u64]) -> Vec<Msg> {
        let post = |c: u64| {
            let task = crate::message::Task::new(|| {});
            Msg::Post { color: Color(c), task, urgent: false, step: false }
        };
        colors.iter().map(|&c| post(c)).collect()
    }

    #[test]
    fn a_stream_is_a_batch_of_posts_to_one_color_only() {
        assert_eq!(stream(&posts(&[7; STREAM_MIN])), Some(Color(7)));
        assert_eq!(stream(&posts(&[7; STREAM_MIN - 1])), None, "too short");
        let mut mixed = [7; STREAM_MIN + 1];
        mixed[3] = 8;
        assert_eq!(stream(&posts(&mixed)), None, "a fan-out");
        let mut with_return = posts(&[7; STREAM_MIN]);
        with_return.push(Msg::Return { color: Color(7), ran: 1 });
        assert_eq!(stream(&with_return), None);
        assert_eq!(stream(&[]), None);
    }

    #[test]
    fn a_cheap_color_streamed_to_moves_even_from_a_loud_busy_poster() {
        let mut t = Traffic::default();
        posts_from(&mut t, 1, 2);
        let loud = Offer { quiet: false, poster_ready: 3, home_ready: 0, ..offer(t) };
        assert!(!moves(&loud), "a loud batch from a busier worker");
        assert!(moves(&Offer { stream: true, cheap: true, ..loud }));
        let shared = Offer { stream: true, cheap: true, poster_share: FULL / 2, ..loud };
        assert!(!moves(&shared), "not to a worker that gets less of its CPU");
    }

    #[test]
    fn a_lone_post_is_a_step_when_its_color_has_nothing_left_or_is_cheap() {
        let (left, nothing) = (|| true, || false);
        let (dear, light, unknown) = (|| 1_000, || CHEAP_NS, || 0);
        assert!(is_step(false, nothing, dear), "a token handed on");
        assert!(!is_step(true, nothing, dear), "a stage with its next item taken");
        assert!(!is_step(false, left, dear), "a stage with items queued");
        assert!(!is_step(false, left, unknown), "no cost known (nothing timed here)");
        assert!(is_step(true, nothing, light), "a cheap ring color holding two tokens");
        assert!(is_step(false, left, light));
    }

    #[test]
    fn a_color_with_work_of_its_own_stays() {
        let mut t = Traffic::default();
        t.local_post(true);
        posts_from(&mut t, 1, 3);
        assert!(!moves(&offer(t)), "it posted to itself");
        assert!(!worth_asking(&t, true, true, true));
        t.reset();
        posts_from(&mut t, 1, 1);
        assert!(moves(&offer(t)), "a decision starts a new count");
    }

    #[test]
    fn a_decision_keeps_the_history() {
        let mut t =
            Traffic { local: 3, remote: 2, from: 2 | PULLED, bounces: 1, total: 9, own: 4, out: 5 };
        t.reset();
        assert_eq!(t, Traffic { bounces: 1, total: 9, ..Traffic::default() });
    }

    #[test]
    fn a_settled_color_moves_only_to_even_the_load_or_to_gather_a_lone_chain() {
        let mut t = Traffic::default();
        posts_from(&mut t, 1, 2);
        for _ in 0..SETTLED {
            t.posted(true);
        }
        assert!(!t.settled(), "not a clear majority yet");
        t.posted(true);
        assert!(t.settled());
        let step = |t: Traffic, poster_ready, home_ready| Offer {
            quiet: false,
            step: true,
            poster_ready,
            home_ready,
            ..offer(t)
        };
        assert!(!moves(&step(t, 5, 5)), "even load: the boundary stays");
        assert!(!moves(&step(t, 0, 5)), "fewer waiting by less than the margin");
        assert!(!moves(&Offer { quiet: true, ..step(t, 0, 5) }), "quiet or not");
        assert!(moves(&step(t, 2, 2 + SETTLED_MARGIN)), "clearly fewer waiting");
        assert!(!moves(&step(t, 31, 40)), "the margin grows with the home's queue: a quarter");
        assert!(moves(&step(t, 30, 40)));
        assert!(moves(&step(t, 1, 0)), "a lone chain gathers");
        assert!(!moves(&step(t, 2, 0)), "not onto a worker with other work");
        let shared_home = Offer { home_share: FULL / 2, ..step(t, 5, 5) };
        assert!(moves(&shared_home), "off a shared CPU, as an unsettled color");
        // Unsettled (its posts go elsewhere), the same step moves it.
        for _ in 0..2 {
            t.posted(false);
        }
        assert!(!t.settled());
        assert!(moves(&step(t, 5, 5)));
        assert!(!moves(&step(t, 6, 5)), "not to a worker with more waiting");
        assert!(!moves(&step(t, 99, 0)), "nor one with more waiting than an empty home");
        let straggler =
            |poster_ready, home_ready| Offer { cheap: true, ..step(t, poster_ready, home_ready) };
        assert!(moves(&straggler(99, 0)), "unless the color is cheap: a straggler");
        assert!(!moves(&straggler(99, 1)), "not while the home has another color waiting");
        assert!(!moves(&Offer { step: false, quiet: false, ..straggler(99, 0) }), "steps only");
    }

    #[test]
    fn one_turn_in_the_sample_counts_and_says_where_it_posted() {
        let mut sample = TurnSample::new();
        let counted: Vec<bool> = (0..3 * usize::from(PARTNER_SAMPLE))
            .map(|i| sample.start(|| (i as u64, 0)).is_some())
            .collect();
        assert_eq!(counted.iter().filter(|&&c| c).count(), 3);
        assert!(counted[usize::from(PARTNER_SAMPLE) - 1] && !counted[0]);
        assert_eq!(TurnSample::posted_elsewhere((5, 2), (5, 2)), None, "posted nothing");
        assert_eq!(TurnSample::posted_elsewhere((5, 2), (7, 2)), Some(false));
        assert_eq!(TurnSample::posted_elsewhere((5, 2), (7, 3)), Some(true), "any elsewhere");
        // Forwards of received posts take the local total below zero, wrapping.
        let wrapped = (0u64.wrapping_sub(3), 9);
        assert_eq!(TurnSample::posted_elsewhere(wrapped, (0, 9)), Some(false), "across zero");
    }

    #[test]
    fn a_poster_with_less_of_its_cpu_does_not_take_colors() {
        let mut t = Traffic::default();
        posts_from(&mut t, 1, 2);
        let shared_cpu = Offer { poster_share: FULL / 2, ..offer(t) };
        assert!(!moves(&shared_cpu));
        let slightly_less = Offer { poster_share: FULL - SHARE_SLACK, ..offer(t) };
        assert!(moves(&slightly_less), "noise in the measure moves nothing");
        let home_shared = Offer { home_share: FULL / 2, poster_share: FULL, ..offer(t) };
        assert!(moves(&home_shared), "leaving a shared CPU is fine");
    }

    #[test]
    fn each_return_doubles_the_run_needed_up_to_a_bound() {
        assert_eq!((0..8).map(need).collect::<Vec<_>>(), [1, 2, 4, 8, 16, 32, 64, 64]);
        assert_eq!(need(u32::MAX), MAX_NEED);
        let mut t = Traffic { bounces: 2, total: 5, ..Traffic::default() };
        posts_from(&mut t, 1, 3);
        assert!(!moves(&offer(t)));
        posts_from(&mut t, 1, 1);
        assert!(moves(&offer(t)));
    }

    fn peer(id: usize, idle: bool, share: u32) -> Peer {
        Peer { id, idle, share }
    }

    /// What `keeps` says, the shed policy says too, whatever the other worker looks like: it
    /// is the common end of a turn that `queue` takes without asking them.
    #[test]
    fn what_keeps_keeps_neither_sheds_nor_relief_sends_away() {
        let mut kept = 0;
        for ready in [0, 1, SHED_READY, 50] {
            for mine in [FULL / 2, FULL - RELIEF_MARGIN - 1, FULL - RELIEF_MARGIN, FULL] {
                for event_ns in [0, CHEAP_NS, CHEAP_NS + 1, 10_000, crate::steal::LONG_EVENT_NS + 1]
                {
                    if !keeps(true, ready, mine, event_ns) {
                        continue;
                    }
                    kept += 1;
                    let cheap = cheap(event_ns);
                    for home in [peer(1, true, FULL), peer(1, true, FULL / 2), peer(1, false, FULL)]
                    {
                        assert!(!sheds(ready, mine, cheap, || home), "{ready} {mine} {event_ns}");
                        assert!(!goes_home(false, false, ready, mine, event_ns, || home));
                        assert_eq!(relief(mine, || [home].into_iter()), None);
                    }
                }
            }
        }
        assert!(kept > 0 && kept < 64, "keeps says both");
        assert!(keeps(false, 50, FULL / 2, 10_000), "colors that do not follow stay");
    }

    #[test]
    fn a_loaded_borrower_sheds_residents_to_idle_homes_only() {
        assert!(sheds(SHED_READY, FULL, false, || peer(0, true, FULL)));
        assert!(!sheds(SHED_READY, FULL, false, || peer(0, false, FULL)), "the home is busy too");
        assert!(!sheds(SHED_READY - 1, FULL, false, || panic!("asked")), "only a partner waiting");
        let shared_home = peer(0, true, FULL / 2);
        assert!(!sheds(SHED_READY, FULL, false, || shared_home), "not back to a shared CPU");
    }

    #[test]
    fn a_cheap_resident_stays_on_a_crowded_borrower_but_leaves_a_shared_cpu() {
        assert!(!sheds(SHED_READY + 5, FULL, true, || panic!("asked")), "cheap: no crowd");
        assert!(sheds(SHED_READY + 5, FULL, false, || peer(0, true, FULL)));
        assert!(sheds(0, FULL / 2, true, || peer(0, true, FULL)), "a shared CPU is still left");
        assert_eq!(
            (cheap(1), cheap(CHEAP_NS), cheap(CHEAP_NS + 1), cheap(0)),
            (true, true, false, false),
            "not timed yet is not cheap"
        );
    }

    #[test]
    fn residents_leave_a_shared_cpu_for_an_idle_home_that_has_its_own() {
        let half = FULL / 2;
        assert!(sheds(0, half, false, || peer(0, true, FULL)));
        assert!(!sheds(0, half, false, || peer(0, false, FULL)), "the home is busy");
        assert!(
            !sheds(0, half, false, || peer(0, true, half + RELIEF_MARGIN - 1)),
            "shared as much"
        );
    }

    #[test]
    fn a_shared_worker_sends_idle_colors_to_the_idle_worker_with_the_most_cpu() {
        let peers =
            [peer(0, true, 700), peer(2, false, FULL), peer(3, true, 950), peer(4, true, 400)];
        assert!(keeps_loan(FULL, || Peer { id: 0, idle: false, share: 500 }));
        assert!(!keeps_loan(FULL, || Peer { id: 0, idle: false, share: 900 }), "not clearly worse");
        assert!(!keeps_loan(0, || panic!("asked")), "no better off here");
        assert_eq!(relief(500, || peers.into_iter()), Some(3));
        assert_eq!(relief(FULL, || -> std::vec::IntoIter<Peer> { panic!("walked") }), None);
        assert_eq!(relief(800, || peers.into_iter()), None, "none has 20% more");
    }

    #[test]
    fn a_resident_goes_back_when_most_of_a_window_was_forwarded() {
        let mut t = Traffic::default();
        for _ in 0..WINDOW - 1 {
            t.forwarded();
        }
        assert_eq!(gives_back(&t), None, "the window is not full");
        t.forwarded();
        assert_eq!(gives_back(&t), Some(true));
        let mut t = Traffic::default();
        for i in 0..WINDOW {
            if i % 2 == 0 {
                t.forwarded();
            } else {
                t.local_post(false);
            }
        }
        assert_eq!(gives_back(&t), Some(false), "an even split stays");
    }
}
