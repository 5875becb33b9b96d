//! Work stealing: an idle worker takes a color, with all its pending events, from a loaded one.
//!
//! Stealing is *requested*, not grabbed: a victim's run queue is owned by the victim alone (so
//! that local posts need no atomics), hence a thief leaves its id in the victim's `steal_request`
//! slot (one compare-and-swap; one thief per victim at a time, as in tokio) and sends it a
//! `StealRequest` message (which wakes a sleeping victim like any message). The victim answers at
//! the first of: its next turn boundary (it glances at the slot between turns, so a busy victim
//! answers within one turn, `turn_budget` events), or routing the message. It lends a color
//! (`queue`) and sends the loan in a `Grant` message, flushed at once. The thief keeps at most one
//! request outstanding and goes on idling; the grant wakes it like any message.
//!
//! Plain stealing (libasync-smp): the thief picks a random start and asks the first other worker
//! that published at least one waiting color. A loaded worker that sees sleeping workers wakes one
//! every few turns, or microseconds of turns ([`nudge_due`]), so that stealing can start at all
//! (a sleeper does not poll).
//!
//! The heuristics of the seeds' stealing work (batch, locality, pinning, cost) build on this.
//!
//! **Recalls** (`Steal::Backlog`). A borrowed color is never lent on and goes home only when its
//! queue empties: colors that feed themselves, lent to a worker that then has the longer line,
//! stay there while their home idles. An idle worker that finds no victim worth asking takes
//! back one color it lent from a borrower where colors wait ([`worth_recalling`]; the protocol
//! is `queue`'s, "Recalls"), as its one outstanding request, answered and backed off as one; a
//! flag beside the request slot (`shared::Poke::recall`) has the borrower take the `Recall` at
//! its next turn's end, as it answers a request. The steal bench's imbalanced chains under the
//! default: 22.8-25.9 ms without recalls, 20.1 with recalls answered at a round's end (1.2 ms a
//! wait), 18.8 at a turn's end (plain stealing 18.4).
//!
//! **A request waits a turn rather than miss one.** A victim answers between turns, on the
//! line it has then. A thief asks a victim that advertised a backlog; when the backlog is the
//! first color in line at the answer (never lent: it runs next), the victim keeps the request
//! for its next turn's end ([`defers`], once), after which that color, its turn run, waits
//! behind the others with the rest of its events. Two stages of a user's pipeline on one
//! worker alternate so, the stage fed by the other drained by each of its turns: answered at
//! once, every request after the drained stage's turn found nothing, and the other worker idled
//! 10 ms of a 20.8 ms run. A recall waits a turn likewise (`recall_waits_a_turn`). A turn does
//! not make a thief or a recalling home wait its whole length: every [`CUT_LOOK_EVERY`] events
//! it looks at the request slot and the recall flag, and ends if either is set ([`cuts_turn`]).
//! And a thief's backoff after empty answers ([`Backoff`]) ends with a busy spell of its own.
//!
//! **Long turns share unasked.** A victim answers between turns, so a thief's request waits for
//! the end of the turn running there; for events of a tenth of a millisecond and more (a
//! data-parallel job's chunks) that is the whole problem. A worker times the turns of colors not
//! known to be short (a color's first turn on a worker is timed, so a short color is watched
//! about once; a chunk of a job is then known for the backlog it is) and, around a long one
//! ([`long_turn`]), lends half of its waiting colors to an idle worker, or one color to a busy
//! one with fewer waiting, neither with less than half of its CPU (to one clearly slower, its
//! part of the line by the two shares, colors of one event only: [`slower_part`]; after such a turn it then
//! takes its inbox and publishes its line: loans and lines a round of long turns late would be
//! judged), with an unasked `Grant` ([`share_behind_long_turn`]): the loan is an ordinary one
//! (the same lease, forwards and return), only its trigger differs; the receiver's own request
//! is settled only by an answer.
//!
//! Policy and mechanism are apart: which victims a thief tries and in what order
//! ([`victim_tiers`], [`candidates`]), whether one is worth asking ([`worth_asking`]) and what a
//! victim lends ([`lend`]) are functions of the configuration and of what the thief sees, called
//! by the workers here and by the deterministic simulator (`sim`) alike; the request slot, the
//! messages and the wake-ups are this module's mechanism around them.

use crate::config::Steal;
use crate::message::Msg;
use crate::shared::Shared;
use crate::stats::Counter;
use crate::sync::Ordering;
use crate::worker::Core;

/// How much less of its CPU (thousandths) a victim must get than the thief for
/// [`Steal::FromSharedCpus`] to take from it: a CPU shared with one busy thread measures about
/// half, and a few percent is noise.
const SHARED_BY: u32 = crate::cpu_share::FULL / 5;

/// The order in which worker `w` of `workers` asks victims: tiers nearest first in `topology`
/// with locality-aware stealing, else one tier of all the others. The policy's part of victim
/// choice, shared by the workers (`Shared::new`) and the simulator (`sim`).
pub(crate) fn victim_tiers(
    topology: &crate::topology::Topology,
    w: usize,
    workers: usize,
    locality: bool,
) -> Vec<Vec<usize>> {
    if locality {
        topology.victim_tiers(w, workers)
    } else {
        vec![(0..workers).filter(|&v| v != w).collect()]
    }
}

/// The victims in the order a thief tries them: tiers nearest first, a start chosen by `random`
/// within each tier.
pub(crate) fn candidates(
    tiers: &[Vec<usize>],
    random: u64,
) -> impl Iterator<Item = usize> + Clone + '_ {
    tiers.iter().flat_map(move |group| {
        let start = (random % group.len().max(1) as u64) as usize;
        (0..group.len()).map(move |i| group[(start + i) % group.len()])
    })
}

/// The workers a loaded worker tries to wake for stealing, in order: the nearest tier first
/// (with locality-aware stealing the tiers are the topology's, nearest first; without, one tier
/// in index order). A thief asks its nearest victims first, so waking a sleeper near the loaded
/// worker is what lets locality help it: the simulator found that waking the lowest-numbered
/// sleeper sent thieves to the wrong victims (locality / plain 0.90 -> 1.08 at 8 simulated
/// cores, 1.00 at 32).
pub(crate) fn nudge_order(tiers: &[Vec<usize>]) -> impl Iterator<Item = usize> + '_ {
    tiers.iter().flatten().copied()
}

/// What a thief knows of a candidate victim: the hints it publishes (`shared::Status`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Candidate {
    /// Colors waiting there.
    pub(crate) ready: usize,
    /// It advertises a backlog (`Steal::Backlog`).
    pub(crate) backlog: bool,
    /// Its CPU share, thousandths.
    pub(crate) share: u32,
}

/// Whether a thief whose CPU share is `mine` asks victim `c` under `steal`: the policy, without
/// the mechanism (the request slot, the message), so that the simulator decides the same way.
pub(crate) fn worth_asking(steal: Steal, mine: u32, c: &Candidate) -> bool {
    match steal {
        Steal::Off => false,
        Steal::Plain => c.ready > 0,
        // Only victims whose CPU this worker beats by `SHARED_BY`; none at all while this
        // worker's own CPU is not clearly better than a shared one.
        Steal::FromSharedCpus => {
            mine >= crate::cpu_share::FULL / 2 + SHARED_BY
                && c.ready > 0
                && c.share + SHARED_BY <= mine
        }
        // A backlog does not move to a CPU clearly slower than the one it waits on (this worker
        // shares its CPU with another process), where it would wait longer, unless so many
        // colors wait there ([`DEEP_READY`]) that it would wait longer still for its turn.
        Steal::Backlog => {
            (c.backlog || c.ready >= DEEP_LINE)
                && (c.share <= mine + SHARED_BY || c.ready >= DEEP_READY)
        }
    }
}

/// Colors waiting on a victim from which a thief asks under `Steal::Backlog` though it
/// advertises no backlog: four light backlogs' worth. The advertisement looks at the back of
/// the line only (`queue::LIGHT_LOOK` colors, every few turns), where colors that may not be
/// lent gather (a loan of up to 256 borrowed colors); the answer to a request looks through the
/// whole line. Without it, a worker on a CPU shared with another process held 3,000 chunk
/// colors of a user's loop behind a loan's borrowed ones, and the worker on the free CPU slept
/// (`user_probe`, `BUSY=1`). A victim with nothing to lend answers empty, and the thief then
/// asks less often ([`Backoff`]).
pub(crate) const DEEP_LINE: usize = 512;

/// Colors waiting on a victim from which a thief on a clearly slower CPU (shared with another
/// process) still takes a backlog (`Steal::Backlog`): the victim runs a turn of each before it
/// comes back to the first, so a loan of the thief's part of the line ([`slower_part`]: colors
/// of one event first, and never the victim's last backlogged color) runs sooner on the thief
/// at half its CPU than in that line. Without it, work that relief had sent
/// off the shared CPU never came back to it: fork-join with 1 us items and a thread spinning on
/// worker 1's CPU ran 95% of its events on worker 0, one CPU's worth (`fanout_probe`, BUSY=1).
pub(crate) const DEEP_READY: usize = 16;

/// What a thief getting `theirs` of its CPU is lent of the line of a victim getting `mine`
/// (thousandths of both): `None` unless the thief's CPU is clearly slower
/// (`follow::clearly_more`: another process shares it), else its part of the two CPUs'
/// speed, in thousandths of the line, so that both ends of the line finish about together.
/// Lent half (as to a thief as fast), a worker with a quarter of its CPU ran 256 chunks of a
/// user's sum four times as long as the lender took for its own half, which then waited, idle,
/// for the shared CPU's time slices to steal them back (`user_probe`, `BUSY=1`).
pub(crate) fn slower_part(mine: u32, theirs: u32) -> Option<u32> {
    crate::follow::clearly_more(mine, theirs)
        .then(|| (u64::from(theirs) * 1000 / u64::from(mine + theirs).max(1)) as u32)
}

/// [`slower_part`] of `thief` for this worker, from its share and the one `thief` publishes.
fn slower_thief(core: &Core, shared: &Shared, thief: usize) -> Option<u32> {
    let theirs = shared.remotes[thief].status.cpu_share.load(Ordering::Relaxed) as u32;
    slower_part(core.cpu_share.share(), theirs)
}

/// What a victim lends `thief` from `queue` under `config` (the policy: batch or one,
/// cost-aware floor, backlog), shared by `answer` and the simulator. A slower thief (`slower`:
/// its part of the line, [`slower_part`]) is lent pieces of work that end before colors fed by
/// posts (`ColorQueue::lend_backlog`).
pub(crate) fn lend(
    queue: &mut crate::queue::ColorQueue,
    thief: usize,
    slower: Option<u32>,
    config: &crate::Config,
) -> Vec<crate::message::Loan> {
    let floor = min_work_ns(config);
    if config.steal == Steal::Backlog {
        queue.lend_backlog(thief, config.steal_batch_max, BACKLOG_FLOOR, slower)
    } else if config.steal_batch {
        queue.lend_many(thief, config.steal_batch_max, true, floor)
    } else {
        queue.lend_many(thief, 1, false, floor)
    }
}

/// Whether worker `w` steals: a worker that homes colors does; one beyond the homes (more
/// workers than CPUs, `Config::home_on_every_worker`) shares its CPU with one that does, and a
/// steal there takes work from a worker that would run it on the same CPUs, the lending's
/// messages on top: a user's sum of 3907 chunks on eight workers on two CPUs ran at 0.72 of
/// tokio-mt with as many workers, 1.12 with stealing off (`oversub_probe 8`). Nor is work
/// pushed to it (a loan behind a long turn, [`share_behind_long_turn`]; relief from a shared
/// CPU, `follow::relief`, where a standby's share, never measured, reads whole). It takes the
/// colors a chain moves to it (`follow`) and stands in for a stuck worker (`stand_in`).
#[inline]
pub(crate) fn steals(w: usize, placement: crate::color::Placement) -> bool {
    w < placement.homes
}

/// An idle worker asks a loaded one for a color, if stealing is on and no request is pending.
pub(crate) fn request(core: &mut Core, shared: &Shared) {
    if shared.config.steal == Steal::Off
        || core.steal_pending
        || shared.workers < 2
        || !steals(core.id, shared.placement)
    {
        return;
    }
    // After empty answers, ask less often: a victim answers every request, and on balanced
    // work each answer is a message it did not need to send.
    if core.steal_backoff.skips(core.counters.get(Counter::EventsRun)) {
        return;
    }
    let (mine, random) = (core.cpu_share.share(), core.next_random());
    for victim in candidates(&shared.victims[core.id], random) {
        let seen = candidate(shared, victim);
        if !worth_asking(shared.config.steal, mine, &seen) {
            continue;
        }
        if shared.remotes[victim]
            .poke
            .steal_request
            .compare_exchange(0, core.id + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            core.steal_pending = true;
            core.steal_asked_at = Some(std::time::Instant::now());
            core.counters.add(Counter::StealAttempts, 1);
            core.send(shared, victim, Msg::StealRequest);
            if shared.config.batching {
                core.flush_to(shared, victim);
            }
            return;
        }
    }
    recall(core, shared, mine);
}

/// What a thief sees of worker `w`: what it publishes (`shared::Status`).
fn candidate(shared: &Shared, w: usize) -> Candidate {
    let status = &shared.remotes[w].status;
    // Relaxed: hints; a stale one costs a wasted or a missed request.
    Candidate {
        ready: status.ready.load(Ordering::Relaxed),
        backlog: status.backlog.load(Ordering::Relaxed),
        share: status.cpu_share.load(Ordering::Relaxed) as u32,
    }
}

/// An idle worker with no victim worth asking takes back a color it lent, with its events, from
/// a borrower where colors wait ([`worth_recalling`]; `queue`, "Recalls"), as its request: one
/// at a time, answered by a `GiveBack` or a `Kept`, which settle it as a grant does.
fn recall(core: &mut Core, shared: &Shared, mine: u32) {
    let steal = shared.config.steal;
    if steal != Steal::Backlog {
        return;
    }
    let Some((color, borrower)) =
        core.queue.recall(|b, away| worth_recalling(mine, &candidate(shared, b), away))
    else {
        return;
    };
    core.steal_pending = true;
    core.steal_asked_at = Some(std::time::Instant::now());
    let from = crate::message::worker_id(core.id);
    core.send(shared, borrower, Msg::Recall { color, from });
    if shared.config.batching {
        core.flush_to(shared, borrower);
    }
    // Release: after the delivery, so that the borrower, seeing it, takes the `Recall` (at its
    // turn's end: `answer`); a busy borrower would otherwise route it at its round's end, and
    // a home recalling colors of 10 us loops waited 1.2 ms an answer.
    shared.remotes[borrower].poke.recall.store(true, Ordering::Release);
}

/// Whether an idle worker whose CPU share is `mine` recalls a color it lent to borrower `b`
/// (what `b` publishes; recalls are [`Steal::Backlog`]'s): when colors wait there (the color recalled is
/// one of them, or the one running with others behind it: the borrower keeps it then) and its
/// CPU is not clearly better. A loan goes back home only when its queue empties, and a borrowed
/// color is never lent on: a self-feeding loop lent to a worker stays there while that worker's
/// line is long and its home idles. Four heavy loops of 10 us steps homed on one of two workers
/// and forty light ones ran at 151K events/s against plain stealing's 195K: the home lent six
/// colors at the start, ran out, and waited (`steal` bench's imbalanced case).
///
/// Or one color waits there, when the loan carried [`BACKLOG_FLOOR`] of work at least
/// (`away.work_ns`): the line a borrower publishes at a round's end can be the loan alone every
/// time, its partner drained by each of its turns and refilled by the loan's (a user's
/// pipeline: stage 1 lent to stage 2's worker, whose line read [stage 1] at every round's end
/// while stage 1's home ran stage 3 at half its CPU for 10 ms). The borrower gives it back only
/// beside another color (`queue::give_back`), waiting a turn for one (`recall_waits_a_turn`).
///
/// A color moved for good (`follow`) is recalled too, when its events cost
/// [`RECALL_MOVED_EVENT_NS`](crate::queue::RECALL_MOVED_EVENT_NS) at least (its borrower gives it back only with a backlog): two
/// stages of that pipeline moved to the worker of the first kept it busy for 10 ms more while
/// their home, the first stage done, idled. Not a cheap color's: a home idle for a moment
/// recalled the ring's and Savina big's moved actors, which came back `Kept` after their posts
/// waited parked (the simulator: the 64-token ring -5%, big -10%).
pub(crate) fn worth_recalling(mine: u32, b: &Candidate, away: crate::queue::Away) -> bool {
    let worth = !away.moved || away.event_ns >= crate::queue::RECALL_MOVED_EVENT_NS;
    worth
        && (b.ready >= 2 || b.ready >= 1 && away.work_ns >= BACKLOG_FLOOR)
        && b.share <= mine + SHARED_BY
}

/// A borrower's answer to `home`'s recall of `color` (the worker's and the simulator's): a
/// `GiveBack` if it can give the color back (`queue::give_back`), else, if `may_wait` and
/// [`recall_waits_a_turn`] says so, nothing yet (the recall is kept in `deferred` for the next
/// turn's end), else `Kept`.
pub(crate) fn answer_to_recall(
    queue: &mut crate::queue::ColorQueue,
    deferred: &mut Option<(crate::Color, usize)>,
    color: crate::Color,
    home: usize,
    may_wait: bool,
) -> Option<Msg> {
    match queue.give_back(color, BACKLOG_FLOOR) {
        Some((ran, loan)) => Some(Msg::GiveBack { ran, loan: Box::new(loan) }),
        None if may_wait && recall_waits_a_turn(queue, color, deferred.is_some()) => {
            *deferred = Some((color, home));
            None
        }
        None => Some(Msg::Kept { color }),
    }
}

/// Whether a borrower that cannot give `color` back to its home now (`queue::give_back`) keeps
/// the recall for its next turn's end instead of answering `Kept` (`already`: it keeps one):
/// when the color waits alone there (a recall is sent only with colors waiting, and after the
/// next turn the color runs or waits behind the one that ran: the pipeline's stage 1, above).
pub(crate) fn recall_waits_a_turn(
    queue: &crate::queue::ColorQueue,
    color: crate::Color,
    already: bool,
) -> bool {
    !already && queue.waits_alone(color)
}

/// The least queued work (ns: queued events times the color's measured cost per event) a color
/// must hold to be lent by [`Steal::Backlog`]: ten times a steal round trip here (a request, a
/// grant and the color's data moving, a few microseconds), so that what moves pays for moving;
/// the seeds' cost-aware floor (20 µs, Mely) is of the same order.
pub(crate) const BACKLOG_FLOOR: u64 = 20_000;

/// Events measured at most this long (ns) are short: a worker does not watch their turns. A turn
/// of any other color (not timed yet on this worker, or measured longer) is watched: timed (two
/// clock reads, the color's own cost: `ColorQueue::record_watched_turn`), preceded by a flush of
/// the worker's batches ([`flushes_all_before`]), and, long ([`long_turn`]), followed by a share
/// of the work waiting
/// behind it ([`share_behind_long_turn`]). A short color pays for one watched turn on each worker
/// it arrives at, unless it comes as a loan: a loan carries its lender's measure, or its
/// estimate for a light backlog's colors (a color moved for good by `follow` carries nothing).
pub(crate) const WATCHED_ABOVE_NS: u64 = BACKLOG_FLOOR;

/// Whether every buffered batch leaves before a watched turn of the color in `key`, or only
/// those for idle workers: every one unless the color is likely short (its own measure, or this
/// worker's new colors' first turns, `ColorQueue::likely_within`). A buffer held for the end of
/// the round waits as long as the turn runs (a user's two long events, one posted to each
/// worker, ran one after the other); flushed before every first turn, a fork tree of fresh
/// colors sent its posts to the other worker in batches of 1.3 messages and ran slower on two
/// workers than on one (`fib_probe`). The workers and the simulator ask the same.
pub(crate) fn flushes_all_before(queue: &crate::queue::ColorQueue, key: usize) -> bool {
    !queue.likely_within(key, WATCHED_ABOVE_NS)
}

/// Whether a watched turn of `events` events that lasted `ns` was long: its events were long
/// ([`LONG_EVENT_NS`] each on average), or the colors waiting behind it waited [`LONG_TURN_NS`]
/// or more.
pub(crate) fn long_turn(ns: u64, events: usize) -> bool {
    ns > LONG_TURN_NS || ns > LONG_EVENT_NS.saturating_mul(events as u64)
}

/// Events measured longer than this (ns) are long: before a turn of such a color, and after a
/// turn of them, the colors waiting behind it are shared with another worker
/// ([`share_behind_long_turn`]). A tenth of a millisecond: tens of steal round trips (a request
/// and a grant, a few microseconds here), so that the colors waiting behind one such event wait
/// longer than a loan takes. At a millisecond (the bound of a whole turn, below), a user's sum of
/// 8M numbers in 4 to 8 chunks of 0.15-0.6 ms (hashed unevenly: four chunks three to one) waited
/// behind those chunks while the other worker idled: 1.6-1.9 ms a sum against rayon's 1.25, and
/// 1.3-1.4 at a tenth (`user_probe`).
pub(crate) const LONG_EVENT_NS: u64 = 100_000;

/// A turn this long (ns) is long whatever its events: a millisecond, fifty steal round trips, a
/// hundred times the turns of most programs' colors. A turn of many short events (a chain that
/// posts to itself, 64 events of 10 us) is judged by this bound, not by [`LONG_EVENT_NS`]: its
/// color is no long one, and the backlog rules (`ColorQueue::has_backlog`) weigh colors of short
/// events.
pub(crate) const LONG_TURN_NS: u64 = 1_000_000;

/// Around a long turn, a worker lends half of its waiting colors (one at least) to an idle
/// worker, or, none idle, one color to the one with two fewer colors waiting, at least (to a
/// worker on a clearly slower CPU its part of the line, colors of one event only:
/// [`lend_behind_long_turn`]), at once, unasked (a `Grant` that is no answer, unless that
/// worker's request waits here): colors that wait behind long turns wait for as long as those
/// turns run, which the other worker does not make them do. Before a turn of a color measured
/// long ([`LONG_EVENT_NS`]) with `min_waiting` 1 (not right after a share at the last turn's
/// end), and after a turn timed long ([`long_turn`]) with `min_waiting` 2 (the first of them runs
/// next here), before the worker takes its inbox again. Why
/// not wait for the idle worker to ask: it asks only victims that advertise a backlog, a worker
/// advertises between turns, so a request made after the advertisement waits for the end of the
/// next long turn; and a waiting color whose cost is not known (a chunk of a job runs once) is
/// no backlog to a thief alone (`ColorQueue::backlogged`; a hundred and more such colors are,
/// together: `ColorQueue::light_backlog`). A user's four chunks of 50 ms, three of them
/// hashed to one of two workers, ran in 150 ms, and twenty of 10 ms in 125-135, where rayon took
/// 100 and 110-130. Colors pinned, borrowed or holding posts stay.
pub(crate) fn share_behind_long_turn(core: &mut Core, shared: &Shared, min_waiting: usize) {
    let waiting = core.queue.ready_len();
    if !shares_behind_long_turn(&shared.config, shared.workers, waiting, min_waiting) {
        return;
    }
    // Relaxed: hints; a stale one lends to a worker that just found work (it runs the loan
    // after its own), or misses an idle one.
    let random = core.next_random();
    // Not to a standby (`steals`): it shares a CPU with a worker that would run the loan, and
    // the loan's delivery would wake it.
    let peers = candidates(&shared.victims[core.id], random)
        .filter(|&w| steals(w, shared.placement))
        .map(|w| {
            let ready = shared.remotes[w].status.ready.load(Ordering::Relaxed);
            (crate::worker::peer(shared, w), ready)
        });
    let Some((thief, idle)) = long_turn_thief(waiting, core.cpu_share.share(), peers) else {
        return;
    };
    let slower = slower_thief(core, shared, thief);
    let loans = lend_behind_long_turn(&mut core.queue, thief, idle, slower, &shared.config);
    if loans.is_empty() {
        return;
    }
    core.counters.add(Counter::LongTurnShares, 1);
    // A request of the same worker waiting in this worker's slot is answered by this loan (an
    // answer right after it would lend the colors left, down to none).
    let slot = &shared.remotes[core.id].poke.steal_request;
    let asked = slot.compare_exchange(thief + 1, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok();
    if asked {
        core.answer_deferred = false;
    }
    grant(core, shared, thief, loans, asked);
}

/// Most colors a stand-in lends itself from a worker in a handler in one entry
/// ([`lend_to_stand_in`]), a light backlog's loan: half of a user's fan-out of 4,000 chunks,
/// lent at once from the handler posting them (no CPU shared), left the lender idle at the end
/// while the stand-in ran its surplus (`bench steal`'s sum 0.87 of tokio-mt, 0.96 before); a
/// stand-in whose loan ran out enters again at once while the other is still in that handler.
pub(crate) const STAND_IN_LOAN_MAX: usize = 256;

/// What a stand-in (`stand_in`) lends itself, `thief`, of the line of the worker it stands in
/// for: half of the colors that may be lent, as behind a long turn to an idle worker
/// ([`lend_behind_long_turn`]), up to [`STAND_IN_LOAN_MAX`] and not
/// [`Config::steal_batch_max`](crate::Config): the worker it stands in for is stuck (a time
/// slice of another process, milliseconds), and a user's sum left 2,000 chunks there, of which
/// eight at a time kept the stand-in idle most of each wait. A request of the thief's in the
/// slot is answered by the loan.
///
/// From a worker asleep (woken, its thread waiting for its CPU: `stand_in`), every color that
/// may be lent: what stays waits for that thread, and keeps the run from ending until it runs
/// (`Core::stand_in` takes it out of the parked state).
pub(crate) fn lend_to_stand_in(core: &mut Core, shared: &Shared, thief: usize) {
    let slower = slower_thief(core, shared, thief).filter(|_| !core.asleep);
    let most = if core.asleep { usize::MAX } else { STAND_IN_LOAN_MAX };
    let loans = match slower {
        Some(part) => core.queue.lend_single(thief, most, 0, part, false),
        None => core.queue.lend_many(thief, most, !core.asleep, 0),
    };
    let slot = &shared.remotes[core.id].poke.steal_request;
    let asked = slot.compare_exchange(thief + 1, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok();
    if asked {
        core.answer_deferred = false;
    } else if loans.is_empty() {
        return;
    }
    grant(core, shared, thief, loans, asked);
}

/// Whether a worker with `waiting` colors waiting shares them around a long turn
/// ([`share_behind_long_turn`]; `min_waiting`: 1 before the turn, 2 after it).
pub(crate) fn shares_behind_long_turn(
    config: &crate::Config,
    workers: usize,
    waiting: usize,
    min_waiting: usize,
) -> bool {
    config.steal != Steal::Off && workers > 1 && waiting >= min_waiting
}

/// Who takes the colors waiting behind a long turn on a worker where `waiting` wait and whose
/// CPU share is `mine`, and whether it is idle: the first idle worker of `peers` (each with the
/// colors waiting there, in the order a thief asks), or, none idle (at a run's start, or each one in a long turn of its own), the one
/// with the fewest colors waiting, if a loan evens the lines out (two fewer at least); either
/// way, one with half of this worker's CPU share at least. Four 50 ms chunks hashed three to
/// one worker waited for the other to be seen idle, which it was not yet at the run's start nor
/// at the end of its own chunk: 150 ms in most jobs, against 100. A chunk lent to a worker with
/// less than half the CPU runs there more than twice as long as here, longer than it waits here
/// behind one turn like it: beside a thread spinning on CPU 1, the worker there measured 10-15%
/// of its CPU, and a user's sum of eight chunks of 0.3 ms took 3.2-5.0 ms (tokio-mt and rayon
/// 1.5-2.5) when half of them were lent to it.
pub(crate) fn long_turn_thief(
    waiting: usize,
    mine: u32,
    peers: impl Iterator<Item = (crate::follow::Peer, usize)> + Clone,
) -> Option<(usize, bool)> {
    let fit = peers.filter(|(p, _)| p.share.saturating_mul(2) >= mine);
    fit.clone().find(|(p, _)| p.idle).map(|(p, _)| (p.id, true)).or_else(|| {
        fit.filter(|&(_, ready)| ready + 2 <= waiting)
            .map(|(p, ready)| (ready, p.id))
            .min()
            .map(|(_, w)| (w, false))
    })
}

/// What a worker lends `thief` behind a long turn: the last waiting colors first; to an idle
/// thief half of those that may be lent (one at least), to a busy one (`long_turn_thief`'s
/// fallback) one (a grouped color brings its waiting group along, either way). A busy thief runs
/// a loan only after its own line, and the lines it is judged by are published once a round: at
/// a job's start both workers read the other's as empty and lent each other half, and twenty
/// 10 ms chunks ended 12 to 8 or 14 to 6 as often as even (a trace: loans waited 10 to 60 ms
/// behind the borrower's line while the lender went idle). To a slower thief (`slower`: its part
/// of the line, [`slower_part`]), colors of one event only, that part of the line at most
/// (`ColorQueue::lend_single`: a collector lent this way kept its stream of results on the
/// slower CPU).
pub(crate) fn lend_behind_long_turn(
    queue: &mut crate::queue::ColorQueue,
    thief: usize,
    idle: bool,
    slower: Option<u32>,
    config: &crate::Config,
) -> Vec<crate::message::Loan> {
    let most = if idle { config.steal_batch_max } else { 1 };
    if let Some(part) = slower {
        return queue.lend_single(thief, most, 0, part, false);
    }
    queue.lend_many(thief, most, true, 0)
}

/// Sends `loans` to `thief` in a `Grant`, at once (`asked`: the answer to its request).
fn grant(
    core: &mut Core,
    shared: &Shared,
    thief: usize,
    loans: Vec<crate::message::Loan>,
    asked: bool,
) {
    core.counters.add(Counter::StealsOut, loans.len() as u64);
    for loan in &loans {
        core.note(loan.color, crate::color_stats::Event::LentOut, Some(thief));
    }
    let from = crate::message::worker_id(core.id);
    core.send(shared, thief, Msg::Grant { from, loans, asked });
    if shared.config.batching {
        core.flush_to(shared, thief);
    }
}

/// The cost-aware floor in ns (0 when cost-aware stealing is off).
pub(crate) fn min_work_ns(config: &crate::Config) -> u64 {
    config.steal_min_work.map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
}

/// Between two turns (never while the inbox is being routed), a worker takes its inbox if a home
/// raised its recall flag (`recall`), and answers a steal request left in its slot, if any:
/// lends a color or says no.
#[inline]
pub(crate) fn answer(core: &mut Core, shared: &Shared) {
    // Relaxed: a look, called between every two turns; the swaps below take the request.
    let poke = &shared.remotes[core.id].poke;
    if poke.steal_request.load(Ordering::Relaxed) != 0
        || poke.recall.load(Ordering::Relaxed)
        || core.recall_deferred.is_some()
    {
        answer_between_turns(core, shared);
    }
}

#[cold]
#[inline(never)]
fn answer_between_turns(core: &mut Core, shared: &Shared) {
    // A recall kept a turn ago first: one routed below may be kept for the next turn.
    answer_kept_recall(core, shared);
    // Acquire: the `Recall` was delivered before the flag was raised (`recall`). Not from the
    // routing of a `StealRequest` ([`answer_request`]): a take there would route batches that
    // arrived since before the rest of the one being routed, a sender's later posts first.
    if shared.remotes[core.id].poke.recall.swap(false, Ordering::Acquire) {
        core.take_inbox(shared);
    }
    answer_request(core, shared);
}

/// A worker answers a steal request left in its slot, if any (also as it routes the request's
/// message): lends a color or says no.
pub(crate) fn answer_request(core: &mut Core, shared: &Shared) {
    let slot = &shared.remotes[core.id].poke.steal_request;
    let thief = slot.swap(0, Ordering::Acquire);
    if thief == 0 {
        return;
    }
    let thief = thief - 1;
    let slower = slower_thief(core, shared, thief);
    let loans = lend(&mut core.queue, thief, slower, &shared.config);
    // A stand-in answers for good (`Core::standing_in`): the turn's end would be the stuck
    // thread's.
    let deferred = core.answer_deferred || core.standing_in;
    if loans.is_empty() && defers(&core.queue, &shared.config, deferred) {
        // Back in the slot for the next turn's end, unless another thief took it meanwhile:
        // that one waits for an answer too, and this one is told no now.
        if slot.compare_exchange(0, thief + 1, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            core.answer_deferred = true;
            return;
        }
    }
    core.answer_deferred = false;
    grant(core, shared, thief, loans, true);
}

/// Events a turn runs between two looks at its worker's request slot and recall flag
/// ([`cuts_turn`]): two relaxed loads of a line thieves write, every sixteen events.
pub(crate) const CUT_LOOK_EVERY: usize = 16;

/// The least cost per event (ns, as measured: `ColorQueue::event_cost`) of a color whose turns
/// look for thieves ([`looks_in_turn`]): a whole turn of cheaper events (64 by default) is
/// under 64 us, a few steal round trips.
pub(crate) const LOOKS_FROM_NS: u64 = 1_000;

/// Whether a turn of a color whose events cost `event_ns()` looks for a thief's request or a
/// home's recall as it runs ([`cuts_turn`]): while stealing, for colors of [`LOOKS_FROM_NS`]
/// an event or more (decided once a turn: a ping-pong's self-posting colors, 64 events of
/// 15 ns a turn, pay one comparison a turn, not a look every sixteen events).
#[inline]
pub(crate) fn looks_in_turn(stealing: bool, event_ns: impl FnOnce() -> u64) -> bool {
    // The cost is read only while stealing: a worker alone pays nothing a turn.
    stealing && event_ns() >= LOOKS_FROM_NS
}

/// Whether a turn that looks for thieves ([`looks_in_turn`]) and has run `n` events ends now
/// for a thief's request or a home's recall waiting on its worker (`asked`, looked at every
/// [`CUT_LOOK_EVERY`] events): a worker answers between turns, and a turn of 64 events of 5 us
/// is 320 us a thief waits, twice when its answer waits a turn ([`defers`]): a user's pipeline
/// of three 5 us stages over two workers lost about a millisecond a run so, the worker whose
/// stage was done idle beside the two others (9.0 ms against tokio-mt's 8.0 for 1,000 items).
/// The color cut short waits behind the others with the rest of its events, what the answer
/// may lend.
#[inline]
pub(crate) fn cuts_turn(n: usize, asked: impl FnOnce() -> bool) -> bool {
    n.is_multiple_of(CUT_LOOK_EVERY) && asked()
}

/// A worker about to idle answers what it kept for a turn's end ([`defers`],
/// [`recall_waits_a_turn`]; there is no turn to wait for), without taking its inbox: whether it
/// held anything. Its caller then flushes and runs a round again instead of idling, since an
/// answer may have sent messages, and a recall's answer given back nothing it must run.
pub(crate) fn answer_held(core: &mut Core, shared: &Shared) -> bool {
    let held = core.answer_deferred || core.recall_deferred.is_some();
    answer_kept_recall(core, shared);
    if core.answer_deferred {
        // Nothing waits here: the answer is final (`defers` keeps a request once).
        answer_request(core, shared);
    }
    held
}

/// Answers, for good, the recall kept a turn ago (`recall_waits_a_turn`), if any.
fn answer_kept_recall(core: &mut Core, shared: &Shared) {
    if let Some((color, home)) = core.recall_deferred.take() {
        core.answer_recall(shared, color, home, false);
    }
}

/// Whether a worker answers a request in its slot outside its turns' ends (at a round's start,
/// or as it routes the request's message; it always does between turns and before it idles):
/// not one it kept for a turn's end ([`defers`]) while colors wait, or it would answer with no
/// turn between, on the line it found nothing in: a request kept at a round's last turn was
/// answered so at the next round's start, and one whose message came after its answer was
/// kept (the slot is seen between turns before the message arrives) when the message was
/// routed.
pub(crate) fn answers_outside_turns(deferred: bool, ready: usize) -> bool {
    !deferred || ready == 0
}

/// Whether a victim with nothing to lend now keeps a thief's request for its next turn's end
/// (`Steal::Backlog`; `deferred`: it kept this one already; the caller keeps the flag): when
/// the first color to run has a backlog and may be lent. It is never lent first (it runs next
/// anyway), and after its turn, its events not all run, it waits behind the others: two stages
/// of a user's pipeline (5 us stages) on one worker alternate so, their line [stage 2] after a
/// turn of stage 3 (drained) and [stage 3, stage 2] after one of stage 2 (64 of its 900
/// events), and a request answered after a turn of stage 3 found nothing, every time: the other
/// worker, its stage done, idled 10 ms beside 10 ms of the two (20.9 ms a run, tokio-mt 16.8).
/// So did stage 1 beside a borrowed stage 3 (a borrowed color is not lent on). Once: a thief
/// waits at most a turn more than it did for its answer.
pub(crate) fn defers(
    queue: &crate::queue::ColorQueue,
    config: &crate::Config,
    deferred: bool,
) -> bool {
    config.steal == Steal::Backlog && !deferred && queue.first_backlogged(BACKLOG_FLOOR)
}

/// Turns between two nudges by one worker, or microseconds of events if those come first (the
/// check runs after each turn, counting the turn's events at their measured cost), so a worker
/// whose waiting colors cannot be lent (borrowed ones) does not wake sleepers all the time, and
/// the check itself (a shared load, a scan of the ready list) is rare on short turns. Time too:
/// the backlog a thief asks by is advertised here, and sixteen turns of a loop's 64 steps of
/// 10 us are ten milliseconds, for which a thief that went idle was neither woken nor shown the
/// loops waiting (four loops, three on one of two workers: 12.2 ms against tokio's 8.5 in most
/// runs). Not events: the 64-token ring's turns of a few hops each then paid for three or four
/// times as many checks (4-6% of its rate). A guess.
pub(crate) const NUDGE_EVERY: u32 = 16;

/// Whether the nudge is due after a turn whose events are estimated at `turn_ns` (its events
/// times their measured cost), counting down `cooldown` by one a turn or a microsecond, the
/// more: the countdown of [`nudge_sleepers`], shared with the simulator.
#[inline]
pub(crate) fn nudge_due(cooldown: &mut u32, turn_ns: u64) -> bool {
    let units = (turn_ns / 1_000).clamp(1, u64::from(NUDGE_EVERY)) as u32;
    if *cooldown > units {
        *cooldown -= units;
        return false;
    }
    *cooldown = NUDGE_EVERY;
    true
}

/// A loaded worker wakes one sleeping worker so that it may steal (called after every turn, its
/// events estimated at `turn_ns`, while stealing is on; acts every [`NUDGE_EVERY`] turns or
/// microseconds, [`nudge_due`]). With `Steal::Backlog` it also refreshes the backlog it
/// advertises to thieves, which ask no one else: a worker whose colors pass single events (a
/// ring, a ping-pong, a mall) never has one, so no thief asks it and it wakes nobody.
#[inline]
pub(crate) fn nudge_sleepers(core: &mut Core, shared: &Shared, turn_ns: u64) {
    // The countdown inline, the look out of line: a call per turn cost a mall's one-event
    // turns (chameneos) 2% of their instructions.
    if !nudge_due(&mut core.nudge_cooldown, turn_ns) {
        return;
    }
    nudge_now(core, shared);
}

#[inline(never)]
fn nudge_now(core: &mut Core, shared: &Shared) {
    // Whether one is woken or none sleeps (parked workers may be spinning: they ask by
    // themselves), look again only after the cooldown (`nudge_due`): a scan touches every
    // worker's inbox.
    let steal = shared.config.steal;
    // Published whatever follows, so that thieves never ask on a stale advertisement.
    let backlog = steal == Steal::Backlog && core.publish_backlog(shared);
    if steal == Steal::Backlog && !backlog {
        // Nothing to wake a thief for (`worth_nudging`): the lines other workers write (the
        // count of parked workers) are not read.
        return;
    }
    let seen = Loaded {
        share: core.cpu_share.share(),
        ready: core.queue.ready_len(),
        sleepers: shared.control.parked.load(Ordering::Relaxed) != 0,
        asked: shared.remotes[core.id].poke.steal_request.load(Ordering::Relaxed) != 0,
        backlog,
    };
    let floor = min_work_ns(&shared.config);
    if !worth_nudging(steal, &seen, || core.queue.has_lendable(floor, 2)) {
        // Nothing a thief could take (pinned, borrowed, too light, no backlog): waking it would
        // only cost a system call here and a wasted request there.
        return;
    }
    for w in nudge_order(&shared.victims[core.id]) {
        if !steals(w, shared.placement) {
            continue;
        }
        if shared.remotes[w].rouse(!shared.config.batching) {
            core.counters.add(Counter::WakeupsSent, 1);
            return;
        }
    }
}

/// What a loaded worker knows of itself when it considers waking a sleeper to steal from it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Loaded {
    /// Its CPU share, thousandths.
    pub(crate) share: u32,
    /// Colors waiting on it.
    pub(crate) ready: usize,
    /// Some worker sleeps (is parked).
    pub(crate) sleepers: bool,
    /// A thief's request already waits in its slot.
    pub(crate) asked: bool,
    /// It advertises a backlog (`Steal::Backlog`).
    pub(crate) backlog: bool,
}

/// Whether a loaded worker wakes a sleeper so that it may steal: the policy of
/// [`nudge_sleepers`], shared with the simulator. `lendable` (at least two colors could be lent
/// under the cost floor) is asked only when it matters.
pub(crate) fn worth_nudging(steal: Steal, me: &Loaded, lendable: impl FnOnce() -> bool) -> bool {
    let unshared = me.share + SHARED_BY > crate::cpu_share::FULL;
    !(steal == Steal::Off
        || (steal == Steal::FromSharedCpus && unshared)
        || me.ready < 2
        || !me.sleepers
        || me.asked
        || !(me.backlog || steal != Steal::Backlog && lendable()))
}

/// How often a thief asks after empty answers: the worker's (`worker::Core`) and the simulator's.
///
/// Empty answers double the requests it skips before asking again, up to 64 (a victim answers
/// every request, and on balanced work each answer is a message it did not need to send); a
/// grant ends the backoff, and so does a busy spell: [`BUSY_SPELL`] events run since the last
/// empty answer. The answers were about the world before it (a pipeline's first stage on one of
/// two workers, whose thief had been told no 6 times while the stages filled, then skipped 32 to
/// 64 requests, one per wake-up, while the other worker ran two stages for 10 ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Backoff {
    /// Requests to skip before the next.
    skip: u32,
    /// The skip after the next empty answer.
    next: u32,
    /// The thief's events run at the last empty answer.
    events_at: u64,
}

/// Events a thief runs after an empty answer that end its backoff ([`Backoff`]): a turn's worth
/// of the default budget.
pub(crate) const BUSY_SPELL: u64 = 64;

impl Default for Backoff {
    fn default() -> Self {
        Backoff { skip: 0, next: 1, events_at: 0 }
    }
}

impl Backoff {
    /// Whether the thief skips this request, having run `events_run` events in all.
    pub(crate) fn skips(&mut self, events_run: u64) -> bool {
        if self.skip == 0 {
            return false;
        }
        if events_run.wrapping_sub(self.events_at) >= BUSY_SPELL {
            *self = Backoff::default();
            return false;
        }
        self.skip -= 1;
        true
    }

    /// The answer came: `granted` if it lent something; `events_run` as for [`skips`](Self::skips).
    pub(crate) fn settle(&mut self, granted: bool, events_run: u64) {
        *self = if granted {
            Backoff::default()
        } else {
            Backoff { skip: self.next, next: (self.next * 2).min(64), events_at: events_run }
        };
    }
}

/// One turn in this many is timed for cost-aware stealing (`ColorQueue::record_turn`): two
/// clock reads per sampled turn, nothing on the others.
const TURN_SAMPLE: u32 = 8;
/// One turn in this many is timed for `Steal::Backlog`, which needs only the order of a color's
/// cost per event (and falls back on the worker's average for colors not sampled yet): one in 8
/// cost single-event turns (a ping-pong, a ring) 5-10% of their rate in two clock reads.
const BACKLOG_SAMPLE: u32 = 64;

/// How often a worker times a turn for the stealing policy in `config`, or for colors that
/// follow their messages, which need to know the cheap ones (`follow::cheap`) (`None`: never).
pub(crate) fn turn_sample(config: &crate::Config) -> Option<u32> {
    if config.steal_min_work.is_some() {
        Some(TURN_SAMPLE)
    } else {
        (config.steal == Steal::Backlog || config.follow).then_some(BACKLOG_SAMPLE)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::color::home_of;
    use crate::message::Task;
    use crate::{Color, Config};
    use std::time::Duration;

    fn setup(workers: usize, steal: Steal) -> (Shared, Vec<Core>) {
        setup_with(workers, Config::default().steal(steal), "")
    }

    fn setup_with(workers: usize, config: Config, topology: &str) -> (Shared, Vec<Core>) {
        let topology = if topology.is_empty() {
            crate::topology::Topology::flat((0..workers).collect())
        } else {
            crate::topology::Topology::synthetic(topology).unwrap()
        };
        let shared = Shared::new(
            config.clone(),
            workers,
            workers,
            crate::wakeup_latency::Threshold::Set(Duration::ZERO),
            1,
            &topology,
        )
        .unwrap();
        let placement = crate::color::Placement::flat(workers);
        let cores = (0..workers)
            .map(|i| Core::new(i, placement, &config, crate::stall::Beat::off()))
            .collect();
        (shared, cores)
    }

    fn color_on(w: usize, n: usize, skip: usize) -> Color {
        (0..)
            .map(Color)
            .filter(|&c| home_of(c, crate::color::Placement::flat(n)) == w)
            .nth(skip)
            .unwrap()
    }

    fn inbox_msgs(shared: &Shared, w: usize) -> Vec<Msg> {
        shared.remotes[w].poke.inbox.take_batches().flatten().collect()
    }

    /// Runs every turn queued on `core`, sending home the colors whose queues emptied.
    fn run_all(core: &mut Core, shared: &Shared) {
        while let Some((key, _)) = core.queue.start_turn() {
            while let Some(t) = core.queue.pop(key) {
                t.run();
            }
            if let Some(ret) = core.queue.end_turn(key) {
                core.send(shared, ret.home, Msg::Return { color: ret.color, ran: ret.ran });
            }
        }
    }

    #[test]
    fn a_turn_is_long_by_its_events_or_by_its_length() {
        assert!(long_turn(150_000, 1), "one event of 150 us");
        assert!(long_turn(450_000, 3), "three of 150 us");
        assert!(!long_turn(90_000, 1), "one of 90 us");
        assert!(!long_turn(640_000, 64), "64 steps of 10 us, a chain's");
        assert!(long_turn(1_100_000, 64), "64 steps of 17 us");
    }

    #[test]
    fn a_thiefs_backoff_doubles_on_empty_answers_and_ends_after_a_busy_spell() {
        let mut b = Backoff::default();
        assert!(!b.skips(0), "no answer yet: it asks");
        b.settle(false, 10);
        assert!(b.skips(10));
        assert!(!b.skips(10), "one request skipped after one empty answer");
        b.settle(false, 10);
        assert!(b.skips(11) && b.skips(12));
        assert!(!b.skips(12), "two after a second");
        b.settle(false, 20);
        assert!(b.skips(20 + BUSY_SPELL - 1), "four after a third, a few events run");
        assert!(!b.skips(20 + BUSY_SPELL), "a busy spell since the answer ends the backoff");
        b.settle(false, 100);
        assert!(b.skips(100));
        assert!(!b.skips(100), "and doubling starts again from one");
        b.settle(false, 100);
        b.settle(true, 100);
        assert!(!b.skips(100), "a grant ends it");
    }

    #[test]
    fn a_turn_is_cut_for_a_request_only_at_its_looks() {
        assert!(cuts_turn(CUT_LOOK_EVERY, || true));
        assert!(cuts_turn(4 * CUT_LOOK_EVERY, || true));
        assert!(!cuts_turn(CUT_LOOK_EVERY, || false), "nobody asks");
        let looked = std::cell::Cell::new(false);
        assert!(!cuts_turn(CUT_LOOK_EVERY + 1, || {
            looked.set(true);
            true
        }));
        assert!(!looked.get(), "between looks the slot is not read");
        assert!(looks_in_turn(true, || LOOKS_FROM_NS));
        assert!(!looks_in_turn(true, || LOOKS_FROM_NS - 1));
        assert!(!looks_in_turn(false, || unreachable!("not read")), "not without stealing");
    }

    #[test]
    fn an_idle_home_recalls_by_what_it_knows_of_the_color_away() {
        use crate::cpu_share::FULL;
        use crate::queue::Away;
        let line = |ready| Candidate { ready, backlog: false, share: FULL };
        let lent = |work_ns| Away { work_ns, moved: false, event_ns: 1_000 };
        assert!(worth_recalling(FULL, &line(2), lent(0)), "two colors wait there");
        assert!(!worth_recalling(FULL, &line(1), lent(BACKLOG_FLOOR - 1)), "a light loan alone");
        assert!(worth_recalling(FULL, &line(1), lent(BACKLOG_FLOOR)), "a loan with work, alone");
        assert!(!worth_recalling(FULL, &line(0), lent(BACKLOG_FLOOR)), "nothing waits");
        assert!(!worth_recalling(FULL / 2, &line(2), lent(0)), "not onto a shared CPU");
        let moved = |event_ns| Away { work_ns: 0, moved: true, event_ns };
        let least = crate::queue::RECALL_MOVED_EVENT_NS;
        assert!(!worth_recalling(FULL, &line(2), moved(least - 1)), "cheap");
        assert!(worth_recalling(FULL, &line(2), moved(least)));
    }

    /// Two colors alternate on a victim, the one the other feeds drained by each of its turns
    /// (a pipeline's stages): a request answered after the drained color's turn finds the
    /// backlog first in line, never lent. The victim keeps the request for its next turn's end
    /// (not answering it as its message is routed), and lends the backlog then, behind the
    /// color its turn fed.
    #[test]
    fn a_request_that_finds_the_backlog_first_in_line_waits_a_turn() {
        let (shared, mut cores) = setup(2, Steal::Backlog);
        let mut victim = cores.remove(1);
        let thief = &mut cores[0];
        thief.cpu_share = crate::cpu_share::CpuShare::fixed(crate::cpu_share::FULL);
        let (feeder, fed) = (color_on(1, 2, 0), color_on(1, 2, 1));
        for _ in 0..100 {
            let _ = victim.queue.post(feeder, Task::new(|| {}), false);
        }
        let _ = victim.queue.post(fed, Task::new(|| {}), false);
        // The feeder's events measured at 1 us: 100 us queued, behind `fed` after its turn.
        let key = victim.queue.start_turn().map(|(k, _)| k).unwrap();
        victim.queue.record_turn(key, 1_000, 1);
        let _ = victim.queue.end_turn(key);
        victim.publish_backlog(&shared);
        assert!(shared.remotes[1].status.backlog.load(Ordering::Relaxed));
        let (key, color) = victim.queue.start_turn().unwrap();
        assert_eq!(color, fed);
        victim.queue.pop(key).unwrap().run();
        let _ = victim.queue.end_turn(key);
        assert_eq!(victim.queue.ready_len(), 1, "the feeder alone");
        request(thief, &shared);
        assert!(thief.steal_pending);
        let slot = &shared.remotes[1].poke.steal_request;
        answer(&mut victim, &shared);
        assert!(victim.answer_deferred && slot.load(Ordering::Relaxed) != 0, "kept a turn");
        victim.take_inbox(&shared);
        assert_ne!(slot.load(Ordering::Relaxed), 0, "not answered as its message is routed");
        thief.take_inbox(&shared);
        assert!(thief.steal_pending, "no answer yet");
        // The feeder's turn feeds `fed`, and waits behind it.
        let (key, color) = victim.queue.start_turn().unwrap();
        assert_eq!(color, feeder);
        victim.queue.pop(key).unwrap().run();
        let _ = victim.queue.post(fed, Task::new(|| {}), false);
        let _ = victim.queue.end_turn(key);
        answer(&mut victim, &shared);
        assert!(!victim.answer_deferred);
        thief.take_inbox(&shared);
        assert!(!thief.steal_pending);
        let s = thief.counters.snapshot();
        assert_eq!((s.steals_in, s.stolen_events), (1, 99), "the feeder's backlog");
    }

    /// Worker 0 lends `c`, a color of `events` queued events, to worker 1, then recalls it
    /// (its one outstanding request); worker 1 has taken the `Recall` from its inbox.
    fn lent_then_recalled(events: usize) -> (Shared, Core, Core, Color) {
        let (shared, mut cores) = setup(2, Steal::Backlog);
        let mut guest = cores.pop().unwrap();
        let mut home = cores.pop().unwrap();
        let c = color_on(0, 2, 0);
        for _ in 0..events {
            home.post(&shared, c, Task::new(|| {}), false);
        }
        let loans = home.queue.lend_many(1, 8, false, 0);
        grant(&mut home, &shared, 1, loans, false);
        guest.take_inbox(&shared);
        assert_eq!(home.queue.recall(|_, _| true), Some((c, 1)));
        home.steal_pending = true;
        home.send(&shared, 1, Msg::Recall { color: c, from: crate::message::worker_id(0) });
        home.flush_all(&shared);
        guest.take_inbox(&shared);
        (shared, home, guest, c)
    }

    /// A recall that finds the loan waiting alone (its partner drained by each of its turns: a
    /// pipeline's stages) waits a turn: after the loan's next turn, which feeds its partner,
    /// the loan waits behind it and goes home with the rest of its events.
    #[test]
    fn a_recall_of_a_loan_waiting_alone_waits_a_turn_for_its_partner() {
        let (shared, mut home, mut guest, c) = lent_then_recalled(10);
        let partner = color_on(1, 2, 0);
        assert_eq!(guest.recall_deferred, Some((c, 0)), "the loan waits alone: kept a turn");
        let (key, color) = guest.queue.start_turn().unwrap();
        assert_eq!(color, c);
        guest.queue.pop(key).unwrap().run();
        guest.post(&shared, partner, Task::new(|| {}), false);
        assert!(guest.queue.end_turn(key).is_none());
        answer(&mut guest, &shared);
        assert_eq!(guest.recall_deferred, None);
        guest.flush_all(&shared);
        home.take_inbox(&shared);
        assert_eq!(home.queue.lease(c), Some(crate::queue::Lease::Local));
        assert_eq!(home.counters.snapshot().recalls, 1);
        assert_eq!(guest.queue.lease(c), None);
        let mut left = 0;
        while let Some((key, _)) = home.queue.start_turn() {
            while let Some(t) = home.queue.pop(key) {
                t.run();
                left += 1;
            }
            let _ = home.queue.end_turn(key);
        }
        assert_eq!(left, 9, "the events the guest had not run");
    }

    /// A worker about to idle answers the recall it kept for a turn's end (no turn comes),
    /// and says it held one, so that it runs a round again before it sleeps.
    #[test]
    fn a_recall_kept_for_a_turn_is_answered_before_the_worker_idles() {
        let (shared, mut home, mut guest, c) = lent_then_recalled(3);
        assert_eq!(guest.recall_deferred, Some((c, 0)));
        assert!(answer_held(&mut guest, &shared), "it held a recall");
        assert_eq!(guest.recall_deferred, None);
        assert!(!answer_held(&mut guest, &shared), "nothing held any more");
        guest.flush_all(&shared);
        home.take_inbox(&shared);
        assert!(!home.steal_pending, "the home has its answer: it keeps the color");
        assert!(matches!(home.queue.lease(c), Some(crate::queue::Lease::Away { .. })));
    }

    #[test]
    fn the_nudge_comes_every_few_turns_or_microseconds() {
        let due_after = |turn_ns: u64| {
            let mut cooldown = 0;
            assert!(nudge_due(&mut cooldown, turn_ns), "the first is due at once");
            (1..).find(|_| nudge_due(&mut cooldown, turn_ns)).unwrap()
        };
        // Turns of a hop or a few (a ring's): every 16 turns; of 64 events of 10 us (a loop's,
        // 0.64 ms a turn): after each turn, not ten milliseconds later; in between, by time.
        let every = NUDGE_EVERY as usize;
        assert_eq!(due_after(0), every, "an empty turn counts one");
        assert_eq!(due_after(200), every);
        assert_eq!(due_after(4_000), every / 4);
        assert_eq!(due_after(640_000), 1);
    }

    #[test]
    fn a_thief_clearly_slower_is_lent_its_part_of_the_line_by_cpu_shares() {
        // As fast, or not clearly slower: no part (the usual half, or a backlog).
        assert_eq!(slower_part(1000, 1000), None);
        assert_eq!(slower_part(1000, 850), None);
        // A quarter of a CPU against a whole one: a fifth of the line; half of one: a third.
        assert_eq!(slower_part(1000, 250), Some(200));
        assert_eq!(slower_part(900, 450), Some(333));
        // A victim on the shared CPU lends as usual to a faster thief.
        assert_eq!(slower_part(250, 1000), None);
        assert_eq!(slower_part(1000, 0), Some(0));
    }

    #[test]
    fn a_long_turn_shares_half_with_an_idle_worker_and_one_color_with_a_busy_one() {
        // (worker, idle, colors waiting there, CPU share), in the order a thief asks.
        let peer = |(id, idle, ready, share)| (crate::follow::Peer { id, idle, share }, ready);
        let full = crate::cpu_share::FULL;
        let peers = [(1, false, 1, full), (2, true, 5, full), (3, false, 0, full)].map(peer);
        let thief = |waiting, mine, peers: &[(crate::follow::Peer, usize)]| {
            long_turn_thief(waiting, mine, peers.iter().copied())
        };
        assert_eq!(thief(6, full, &peers), Some((2, true)), "idle first");
        let busy = [(1, false, 3, full), (3, false, 1, full)].map(peer);
        assert_eq!(thief(6, full, &busy), Some((3, false)), "fewest waiting");
        assert_eq!(thief(3, full, &busy), Some((3, false)));
        assert_eq!(thief(2, full, &busy), None, "no line two shorter");
        // Not to a worker with less than half of this one's CPU (beside a busy thread).
        let slow = [(1, true, 0, 130), (2, false, 0, 520), (3, false, 1, 480)].map(peer);
        assert_eq!(thief(6, full, &slow), Some((2, false)), "the busy one with half a CPU");
        assert_eq!(thief(6, 250, &slow), Some((1, true)), "this one gets a quarter of its CPU");
        assert_eq!(thief(6, full, &slow[..1]), None, "an idle one with an eighth");
        let config = Config::default();
        let lender = |waiting: usize| {
            let mut q = crate::queue::ColorQueue::new(0, crate::color::Placement::flat(2));
            for k in 0..waiting {
                let _ = q.post(color_on(0, 2, k), Task::new(|| {}), false);
            }
            q
        };
        let mut q = lender(12);
        assert_eq!(
            lend_behind_long_turn(&mut q, 1, true, None, &config).len(),
            6,
            "half to an idle one"
        );
        let mut q = lender(12);
        assert_eq!(
            lend_behind_long_turn(&mut q, 1, false, None, &config).len(),
            1,
            "one to a busy one"
        );
        let mut q = lender(40);
        let most = config.steal_batch_max;
        assert_eq!(lend_behind_long_turn(&mut q, 1, true, None, &config).len(), most);
        // To a slower thief (a third of the two CPUs): its part, colors of one event only, and
        // the first waiting color too (it waits the whole long turn).
        let mut q = lender(12);
        assert_eq!(lend_behind_long_turn(&mut q, 1, true, Some(333), &config).len(), 3);
        let mut q = lender(1);
        let lent = lend_behind_long_turn(&mut q, 1, true, Some(333), &config);
        assert_eq!(lent.iter().map(|l| l.color).collect::<Vec<_>>(), vec![color_on(0, 2, 0)]);
        let mut q = lender(3);
        let fed = color_on(0, 2, 2);
        let _ = q.post(fed, Task::new(|| {}), false);
        let lent = lend_behind_long_turn(&mut q, 1, true, Some(500), &config);
        assert!(lent.iter().all(|l| l.color != fed) && lent.len() == 1, "not the fed color");
    }

    #[test]
    fn a_request_routed_after_a_long_turn_is_answered_by_the_share_alone() {
        let config = Config::default().steal(Steal::Plain).steal_batch(true);
        let (shared, mut cores) = setup_with(2, config, "");
        for k in 0..8 {
            let _ = cores[0].queue.post(color_on(0, 2, k), Task::new(|| {}), false);
        }
        shared.remotes[0].status.ready.store(8, Ordering::Relaxed);
        request(&mut cores[1], &shared);
        assert!(cores[1].steal_pending);
        shared.remotes[1].status.idle.store(true, Ordering::Relaxed);
        // The victim's long turn ends: the share, then the inbox (the request's message).
        share_behind_long_turn(&mut cores[0], &shared, 2);
        assert_eq!(cores[0].queue.ready_len(), 4, "half of the line, to the waiting thief");
        cores[0].take_inbox(&shared);
        // Answered once: half of the line, not a share (half) and an answer (half of the rest).
        assert_eq!(cores[0].queue.ready_len(), 4, "the request's message found it answered");
        assert_eq!(shared.remotes[0].poke.steal_request.load(Ordering::Relaxed), 0);
        answer(&mut cores[0], &shared);
        assert_eq!(cores[0].queue.ready_len(), 4, "nothing left to answer");
        let grants: Vec<(usize, bool)> = inbox_msgs(&shared, 1)
            .into_iter()
            .filter_map(|m| match m {
                Msg::Grant { loans, asked, .. } => Some((loans.len(), asked)),
                _ => None,
            })
            .collect();
        assert_eq!(grants, [(4, true)]);
    }

    #[test]
    fn a_loaded_worker_wakes_its_nearest_sleepers_first() {
        // The thesis's 8-core machine: pairs share an L2, fours a package.
        let t = crate::topology::Topology::synthetic("package:2 l2:2 core:2").unwrap();
        let order: Vec<usize> = nudge_order(&victim_tiers(&t, 5, 8, true)).collect();
        assert_eq!(order, vec![4, 6, 7, 0, 1, 2, 3], "same L2, then same package, then the rest");
        // Without locality: every other worker, in index order.
        let order: Vec<usize> = nudge_order(&victim_tiers(&t, 5, 8, false)).collect();
        assert_eq!(order, vec![0, 1, 2, 3, 4, 6, 7]);
    }

    #[test]
    fn a_thief_asks_only_a_loaded_worker_and_only_once() {
        let (shared, mut cores) = setup(4, Steal::Plain);
        // Nobody published waiting colors: nothing to ask.
        request(&mut cores[0], &shared);
        assert!(!cores[0].steal_pending);
        shared.remotes[2].status.ready.store(3, Ordering::Relaxed);
        request(&mut cores[0], &shared);
        assert!(cores[0].steal_pending);
        assert_eq!(shared.remotes[2].poke.steal_request.load(Ordering::Relaxed), 1);
        let msgs = inbox_msgs(&shared, 2);
        assert!(matches!(msgs.as_slice(), [Msg::StealRequest]), "the request wakes the victim");
        // A second request waits for the grant.
        request(&mut cores[0], &shared);
        assert!(inbox_msgs(&shared, 2).is_empty());
        // Another thief finds the victim's slot taken.
        shared.remotes[1].status.ready.store(0, Ordering::Relaxed);
        request(&mut cores[3], &shared);
        assert!(!cores[3].steal_pending, "one thief per victim");
        assert_eq!(cores[0].counters.snapshot().steal_attempts, 1);
    }

    #[test]
    fn a_locality_aware_thief_asks_its_nearest_loaded_worker() {
        // Two L2 domains of two cores: 0 and 1 share one, 2 and 3 the other.
        for locality in [true, false] {
            let config = Config::default().steal(Steal::Plain).steal_locality(locality);
            let mut asked_far = 0;
            for seed in 0..64u64 {
                let (shared, mut cores) = setup_with(4, config.clone(), "l2:2 core:2");
                cores[0].rng ^= seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                shared.remotes[1].status.ready.store(1, Ordering::Relaxed);
                shared.remotes[3].status.ready.store(1, Ordering::Relaxed);
                request(&mut cores[0], &shared);
                if shared.remotes[3].poke.steal_request.load(Ordering::Relaxed) != 0 {
                    asked_far += 1;
                } else {
                    assert_ne!(shared.remotes[1].poke.steal_request.load(Ordering::Relaxed), 0);
                }
            }
            if locality {
                assert_eq!(asked_far, 0, "the same-L2 worker is always asked first");
            } else {
                assert!(asked_far > 0, "plain stealing picks at random");
            }
        }
    }

    #[test]
    fn a_batch_grant_carries_several_colors_and_counts_the_tier() {
        let config = Config::default().steal(Steal::Plain).steal_batch(true).steal_locality(true);
        let (shared, mut cores) = setup_with(4, config, "l2:2 core:2");
        let mut victim = cores.remove(2);
        let thief = &mut cores[0];
        for k in 0..6 {
            let c = color_on(2, 4, k);
            let _ = victim.queue.post(c, Task::new(|| {}), false);
        }
        victim.publish(&shared);
        request(thief, &shared);
        answer(&mut victim, &shared);
        thief.take_inbox(&shared);
        let s = thief.counters.snapshot();
        assert_eq!(s.steals_in, 3, "half of six");
        assert_eq!(s.steal_tiers, 3 * 2, "worker 2 is in thief 0's second tier");
    }

    #[test]
    fn stealing_from_shared_cpus_asks_only_workers_whose_cpu_is_shared() {
        use crate::cpu_share::{CpuShare, FULL};
        let (shared, mut cores) = setup(3, Steal::FromSharedCpus);
        for (w, share) in [(1, FULL - 50), (2, FULL / 2)] {
            shared.remotes[w].status.ready.store(4, Ordering::Relaxed);
            shared.remotes[w].status.cpu_share.store(share as usize, Ordering::Relaxed);
        }
        // A thief whose own CPU is shared takes nothing.
        cores[0].cpu_share = CpuShare::fixed(FULL / 2);
        request(&mut cores[0], &shared);
        assert!(!cores[0].steal_pending);
        // With its CPU to itself, it asks the worker sharing its CPU, never the other.
        cores[0].cpu_share = CpuShare::fixed(FULL);
        request(&mut cores[0], &shared);
        assert!(cores[0].steal_pending);
        assert_eq!(shared.remotes[2].poke.steal_request.load(Ordering::Relaxed), 1);
        assert_eq!(shared.remotes[1].poke.steal_request.load(Ordering::Relaxed), 0);
        // Where no CPU is shared, nothing is ever asked.
        let (shared, mut cores) = setup(2, Steal::FromSharedCpus);
        shared.remotes[1].status.ready.store(9, Ordering::Relaxed);
        request(&mut cores[0], &shared);
        assert!(!cores[0].steal_pending);
    }

    #[test]
    fn backlog_stealing_asks_only_a_worker_that_advertises_a_backlog() {
        use crate::cpu_share::{CpuShare, FULL};
        let (shared, mut cores) = setup(2, Steal::Backlog);
        let mut victim = cores.remove(1);
        let thief = &mut cores[0];
        // Many colors waiting, each with an event or two (a ring, a mall): nothing to ask for.
        for k in 0..6 {
            let _ = victim.queue.post(color_on(1, 2, k), Task::new(|| {}), false);
        }
        victim.publish_backlog(&shared);
        request(thief, &shared);
        assert!(!thief.steal_pending, "ready colors alone are not a backlog");
        // One color with a measured backlog of 1 µs x 100 events.
        let heavy = color_on(1, 2, 9);
        for _ in 0..100 {
            let _ = victim.queue.post(heavy, Task::new(|| {}), false);
        }
        let key = victim.queue.start_turn().map(|(k, _)| k).unwrap();
        victim.queue.record_turn(key, 1_000, 1);
        let _ = victim.queue.end_turn(key);
        victim.publish_backlog(&shared);
        assert!(shared.remotes[1].status.backlog.load(Ordering::Relaxed));
        // A thief whose CPU is shared does not take work from a CPU that is not.
        thief.cpu_share = CpuShare::fixed(FULL / 2);
        request(thief, &shared);
        assert!(!thief.steal_pending);
        thief.cpu_share = CpuShare::fixed(FULL);
        request(thief, &shared);
        assert!(thief.steal_pending);
        answer(&mut victim, &shared);
        thief.take_inbox(&shared);
        let s = thief.counters.snapshot();
        assert_eq!(s.steals_in, 1, "the backlog only");
        assert_eq!(s.stolen_events, 100);
        victim.publish_backlog(&shared);
        assert!(!shared.remotes[1].status.backlog.load(Ordering::Relaxed), "none left");
    }

    #[test]
    fn which_victims_each_policy_asks() {
        use crate::cpu_share::FULL;
        let c = |ready, backlog, share| Candidate { ready, backlog, share };
        let (free, half) = (FULL, FULL / 2);
        for steal in [Steal::Off, Steal::Plain, Steal::FromSharedCpus, Steal::Backlog] {
            let asks = |mine, v: Candidate| worth_asking(steal, mine, &v);
            assert!(!asks(free, c(0, false, half)), "{steal:?}: nothing waits there");
            match steal {
                Steal::Off => assert!(!asks(free, c(9, true, half))),
                Steal::Plain => assert!(asks(half, c(1, false, free)), "any waiting color"),
                Steal::FromSharedCpus => {
                    assert!(asks(free, c(1, false, half)), "a shared CPU's work");
                    assert!(!asks(free, c(9, false, free)), "never from a free CPU");
                    assert!(!asks(half, c(9, false, half / 2)), "never from a shared thief");
                }
                Steal::Backlog => {
                    assert!(!asks(free, c(9, false, free)), "waiting colors are not a backlog");
                    assert!(asks(free, c(2, true, free)));
                    assert!(asks(free, c(2, true, half)));
                    assert!(!asks(half, c(2, true, free)), "not onto a slower CPU");
                    assert!(asks(free, c(DEEP_LINE, false, half)), "a deep line, unadvertised");
                    assert!(!asks(free, c(DEEP_LINE - 1, false, half)));
                }
            }
        }
    }

    #[test]
    fn stealing_off_never_asks() {
        let (shared, mut cores) = setup(2, Steal::Off);
        shared.remotes[1].status.ready.store(5, Ordering::Relaxed);
        request(&mut cores[0], &shared);
        assert!(!cores[0].steal_pending);
        assert_eq!(shared.remotes[1].poke.steal_request.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_victim_lends_a_waiting_color_and_the_grant_reaches_the_thief() {
        let (shared, mut cores) = setup(2, Steal::Plain);
        let (a, b) = (color_on(1, 2, 0), color_on(1, 2, 1));
        let mut victim = cores.pop().unwrap();
        let mut thief = cores.pop().unwrap();
        let _ = victim.queue.post(a, Task::new(|| {}), false);
        let _ = victim.queue.post(b, Task::new(|| {}), false);
        let _ = victim.queue.post(b, Task::new(|| {}), false);
        victim.publish(&shared);
        request(&mut thief, &shared);
        assert!(thief.steal_pending);
        answer(&mut victim, &shared);
        assert_eq!(shared.remotes[1].poke.steal_request.load(Ordering::Relaxed), 0, "answered");
        assert_eq!(victim.counters.snapshot().steals_out, 1);
        // The thief routes its inbox: the grant for the color that would have run last, `b`.
        thief.take_inbox(&shared);
        assert!(!thief.steal_pending);
        let s = thief.counters.snapshot();
        assert_eq!((s.steals_in, s.stolen_events), (1, 2));
        assert!(thief.queue.lease(b).is_some() && thief.queue.lease(a).is_none());
        // Answering with nothing to lend still releases the thief.
        request(&mut thief, &shared);
        let mut empty = Core::new(
            1,
            crate::color::Placement::flat(2),
            &Config::default(),
            crate::stall::Beat::off(),
        );
        answer(&mut empty, &shared);
        thief.take_inbox(&shared);
        assert!(!thief.steal_pending);
        assert_eq!(thief.counters.snapshot().steals_in, 1);
    }

    /// An idle home takes back a color it lent, with its events, from a borrower where colors
    /// wait: what the borrower holds runs first, then what was forwarded to it, then what was
    /// posted while the recall was on its way; and a borrower running the color, or with
    /// nothing else waiting, keeps it, the posts parked at the home following it there.
    #[test]
    fn an_idle_home_takes_back_a_lent_color_with_its_events_in_order() {
        use std::sync::{Arc, Mutex};
        let (shared, mut cores) = setup(2, Steal::Backlog);
        let ran = Arc::new(Mutex::new(Vec::new()));
        let task = |label: &'static str| {
            let ran = ran.clone();
            Task::new(move || ran.lock().unwrap().push(label))
        };
        let mut guest = cores.pop().unwrap();
        let mut home = cores.pop().unwrap();
        let (c, d, own) = (color_on(0, 2, 0), color_on(0, 2, 1), color_on(1, 2, 0));
        // Both lent to the guest, `c` first, and the guest has a color of its own waiting too.
        for (color, label) in [(c, "c lent"), (d, "d lent")] {
            home.post(&shared, color, task(label), false);
            let loans = home.queue.lend_many(1, 8, false, 0);
            assert_eq!(loans.len(), 1);
            grant(&mut home, &shared, 1, loans, false);
        }
        guest.take_inbox(&shared);
        guest.post(&shared, own, task("own"), false);
        guest.publish(&shared);
        // A post to `c` from elsewhere is forwarded; then the home, idle with no victim
        // advertising a backlog, recalls `c` (the older loan); a post made after waits here.
        home.post(&shared, c, task("c forwarded"), false);
        request(&mut home, &shared);
        assert!(home.steal_pending, "the recall is the idle worker's request");
        home.post(&shared, c, task("c parked"), false);
        home.take_inbox(&shared);
        assert!(home.queue.start_turn().is_none(), "nothing of `c` runs here before it is back");
        // The guest answers at its turn's end, as a steal request, not at its round's end.
        answer(&mut guest, &shared);
        assert!(!shared.remotes[1].poke.recall.load(Ordering::Relaxed));
        home.take_inbox(&shared);
        assert!(!home.steal_pending);
        assert_eq!(home.counters.snapshot().recalls, 1);
        assert_eq!(home.queue.lease(c), Some(crate::queue::Lease::Local));
        assert_eq!(guest.queue.lease(c), None);
        run_all(&mut home, &shared);
        assert_eq!(*ran.lock().unwrap(), ["c lent", "c forwarded", "c parked"]);
        // `d` waits alone on the guest once `own` ran: the guest keeps the recall for its next
        // turn's end (`recall_waits_a_turn`), the turn of `d`, which empties it: `d` goes home
        // with a `Return` as always, the recall answered `Kept` after it, and the post parked at
        // the home meanwhile runs there.
        while let Some((key, color)) = guest.queue.start_turn() {
            if color == own {
                guest.queue.pop(key).unwrap().run();
            }
            assert!(guest.queue.end_turn(key).is_none());
            if color == own {
                break;
            }
        }
        assert_eq!(guest.queue.ready_len(), 1);
        guest.publish(&shared);
        let stale = Candidate { ready: 2, backlog: false, share: crate::cpu_share::FULL };
        let lent = crate::queue::Away { work_ns: 0, moved: false, event_ns: 0 };
        assert!(worth_recalling(crate::cpu_share::FULL, &stale, lent));
        let loaded = |_, _| true;
        assert_eq!(home.queue.recall(loaded), Some((d, 1)), "on a stale look at its line");
        let from = crate::message::worker_id(0);
        home.send(&shared, 1, Msg::Recall { color: d, from });
        home.post(&shared, d, task("d parked"), false);
        home.flush_all(&shared);
        guest.take_inbox(&shared);
        assert_eq!(guest.recall_deferred, Some((d, 0)), "kept for a turn, not answered");
        guest.flush_all(&shared);
        home.take_inbox(&shared);
        assert!(matches!(home.queue.lease(d), Some(crate::queue::Lease::Away { .. })));
        run_all(&mut guest, &shared);
        answer(&mut guest, &shared);
        assert_eq!(guest.recall_deferred, None, "answered at the turn's end");
        guest.flush_all(&shared);
        home.take_inbox(&shared);
        assert!(!home.steal_pending, "the recall was answered");
        assert_eq!(home.queue.lease(d), Some(crate::queue::Lease::Local), "d came back");
        run_all(&mut home, &shared);
        let ran = ran.lock().unwrap().clone();
        assert_eq!(ran[3..], ["own", "d lent", "d parked"], "{ran:?}");
    }

    /// A guest's fence asks its home to sync while the home, recalling the color, parks the
    /// posts it receives: the answer waits until the parked posts went on to the guest (which,
    /// holding a post, keeps the color), so that a poster color's posts still run in order. X
    /// posts `e1` to C on worker 2, goes to worker 1 (C's borrower), and posts `e2` there (held,
    /// a `Sync` to C's home, worker 0); worker 0 recalls C before it takes `e1` and the `Sync`.
    /// Answered at once, `e2` ran before `e1`.
    #[test]
    fn a_sync_waits_for_the_posts_a_recall_parked() {
        use std::sync::{Arc, Mutex};
        let (shared, mut cores) = setup(3, Steal::Backlog);
        let ran = Arc::new(Mutex::new(Vec::new()));
        let task = |label: &'static str| {
            let ran = ran.clone();
            Task::new(move || ran.lock().unwrap().push(label))
        };
        let mut w = cores.pop().unwrap();
        let mut b = cores.pop().unwrap();
        let mut h = cores.pop().unwrap();
        let (c, own, x) = (color_on(0, 3, 0), color_on(1, 3, 0), color_on(2, 3, 0));
        // C lent by H to B; B has a color of its own waiting.
        h.post(&shared, c, task("c0"), false);
        let loans = h.queue.lend_many(1, 8, false, 0);
        assert_eq!(loans.len(), 1);
        grant(&mut h, &shared, 1, loans, false);
        b.take_inbox(&shared);
        b.post(&shared, own, task("own"), false);
        // X runs on W and posts e1 to C (to H); X is then lent to B (hand-over after the post).
        w.post(&shared, x, task("x-a"), false);
        w.post(&shared, x, task("x-b"), false);
        let (key, col) = w.queue.start_turn().unwrap();
        assert_eq!(col, x);
        w.queue.pop(key).unwrap().run();
        w.post(&shared, c, task("e1"), false);
        assert!(w.queue.end_turn(key).is_none());
        let loans = w.queue.lend_many(1, 8, false, 0);
        assert_eq!(loans.len(), 1);
        grant(&mut w, &shared, 1, loans, false);
        // B takes X and runs it: X posts e2 to C (a guest here): held, a Sync to H.
        b.take_inbox(&shared);
        loop {
            let (key, col) = b.queue.start_turn().unwrap();
            if col == x {
                b.queue.pop(key).unwrap().run();
                b.post(&shared, c, task("e2"), false);
                assert!(b.queue.end_turn(key).is_none());
                break;
            }
            assert!(b.queue.end_turn(key).is_none());
        }
        b.publish(&shared);
        // H, idle before taking its inbox (e1 and the Sync are in it), recalls C.
        request(&mut h, &shared);
        assert!(h.steal_pending);
        h.take_inbox(&shared); // e1 parked; the Sync waits
        h.flush_all(&shared);
        b.take_inbox(&shared); // the Recall: a held post, so kept
        b.flush_all(&shared);
        h.take_inbox(&shared); // kept: e1 forwarded, then the Sync answered
        h.flush_all(&shared);
        b.take_inbox(&shared);
        run_all(&mut b, &shared);
        let ran = ran.lock().unwrap().clone();
        let at =
            |l: &str| ran.iter().position(|&r| r == l).unwrap_or_else(|| panic!("{l}: {ran:?}"));
        assert!(at("e1") < at("e2"), "X's posts to C out of order: {ran:?}");
    }

    /// libasync-smp transport: a guest's event posts twice to its own color while the home
    /// forwards it another event; the color's turn then ends. The two posts must still run in
    /// order. (Routed through the guest's FIFO, the first left for the home after the slot was
    /// given back and the second stayed with the slot the forward re-created: out of order.)
    #[test]
    fn a_guest_on_the_locked_transport_keeps_a_posters_order() {
        use std::sync::{Arc, Mutex};
        let (shared, mut cores) = setup_with(2, Config::baseline(), "");
        let c = color_on(1, 2, 0);
        let ran = Arc::new(Mutex::new(Vec::new()));
        let task = |label: &'static str| {
            let ran = ran.clone();
            Task::new(move || ran.lock().unwrap().push(label))
        };
        let mut home = cores.pop().unwrap();
        let mut guest = cores.pop().unwrap();
        // The home lends `c`, with one waiting event, to the guest.
        home.post(&shared, c, task("lent"), false);
        home.take_inbox(&shared);
        home.publish(&shared);
        request(&mut guest, &shared);
        answer(&mut home, &shared);
        guest.take_inbox(&shared);
        assert!(matches!(guest.queue.lease(c), Some(crate::queue::Lease::Guest { .. })));
        // The guest runs `c`'s event, which posts `first` and `second` to `c`; meanwhile the
        // home forwards `forwarded` (posted to `c` from elsewhere).
        let (key, _) = guest.queue.start_turn().unwrap();
        guest.queue.pop(key).unwrap().run();
        guest.post(&shared, c, task("first"), false);
        home.post(&shared, c, task("forwarded"), false);
        home.take_inbox(&shared);
        guest.post(&shared, c, task("second"), false);
        if let Some(ret) = guest.queue.end_turn(key) {
            guest.send(&shared, ret.home, Msg::Return { color: ret.color, ran: ret.ran });
        }
        // Everything delivered and routed, then every queue run to the end, any order of
        // workers: `first` before `second`.
        for _ in 0..4 {
            guest.take_inbox(&shared);
            home.take_inbox(&shared);
            for core in [&mut guest, &mut home] {
                run_all(core, &shared);
            }
        }
        let ran = ran.lock().unwrap().clone();
        let at =
            |l: &str| ran.iter().position(|&r| r == l).unwrap_or_else(|| panic!("{l}: {ran:?}"));
        assert_eq!(ran.len(), 4, "{ran:?}");
        assert!(at("first") < at("second"), "{ran:?}");
    }
}
