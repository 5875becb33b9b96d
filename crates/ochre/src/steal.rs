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
//! at the end of a round so that stealing can start at all (a sleeper does not poll).
//!
//! The heuristics of the seeds' stealing work (batch, locality, pinning, cost) build on this.

use crate::config::Steal;
use crate::message::Msg;
use crate::shared::Shared;
use crate::stats::Counter;
use crate::sync::Ordering;
use crate::worker::Core;

/// An idle worker asks a loaded one for a color, if stealing is on and no request is pending.
pub(crate) fn request(core: &mut Core, shared: &Shared) {
    if shared.config.steal == Steal::Off || core.steal_pending || shared.workers < 2 {
        return;
    }
    let n = shared.workers;
    let start = (core.next_random() % n as u64) as usize;
    for i in 0..n {
        let victim = (start + i) % n;
        if victim == core.id {
            continue;
        }
        let remote = &shared.remotes[victim];
        if remote.status.ready.load(Ordering::Relaxed) == 0 {
            continue;
        }
        if remote
            .poke
            .steal_request
            .compare_exchange(0, core.id + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            core.steal_pending = true;
            core.counters.add(Counter::StealAttempts, 1);
            core.send(shared, victim, Msg::StealRequest);
            if shared.config.batching {
                core.flush_to(shared, victim);
            }
            return;
        }
    }
}

/// A worker answers a steal request left in its slot, if any: lends a color or says no.
#[inline]
pub(crate) fn answer(core: &mut Core, shared: &Shared) {
    let slot = &shared.remotes[core.id].poke.steal_request;
    if slot.load(Ordering::Relaxed) == 0 {
        return;
    }
    let thief = slot.swap(0, Ordering::Acquire);
    if thief == 0 {
        return;
    }
    let thief = thief - 1;
    let loan = core.queue.lend(thief);
    if loan.is_some() {
        core.counters.add(Counter::StealsOut, 1);
    }
    let from = core.id;
    core.send(shared, thief, Msg::Grant { from, loan });
    if shared.config.batching {
        core.flush_to(shared, thief);
    }
}

/// Rounds between two nudges by one worker, so a worker whose waiting colors cannot be lent
/// (borrowed ones) does not wake sleepers at every round. A guess; rounds can be long (up to
/// `round_budget` events), so it is small.
const NUDGE_EVERY_ROUNDS: u32 = 4;

/// A loaded worker wakes one sleeping worker so that it may steal.
pub(crate) fn nudge_sleepers(core: &mut Core, shared: &Shared) {
    if core.nudge_cooldown > 0 {
        core.nudge_cooldown -= 1;
        return;
    }
    if shared.config.steal == Steal::Off
        || core.queue.ready_len() < 2
        || shared.control.parked.load(Ordering::Relaxed) == 0
        || shared.remotes[core.id].poke.steal_request.load(Ordering::Relaxed) != 0
    {
        return;
    }
    for (i, r) in shared.remotes.iter().enumerate() {
        if i != core.id && r.rouse(!shared.config.batching) {
            core.nudge_cooldown = NUDGE_EVERY_ROUNDS;
            core.counters.add(Counter::WakeupsSent, 1);
            return;
        }
    }
}
