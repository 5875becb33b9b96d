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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::color::home_of;
    use crate::{Color, Config};
    use std::time::Duration;

    fn setup(workers: usize, steal: Steal) -> (Shared, Vec<Core>) {
        let config = Config::default().steal(steal);
        let shared = Shared::new(config.clone(), workers, Duration::ZERO, 1).unwrap();
        let cores = (0..workers).map(|i| Core::new(i, workers, &config)).collect();
        (shared, cores)
    }

    fn color_on(w: usize, n: usize, skip: usize) -> Color {
        (0..).map(Color).filter(|&c| home_of(c, n) == w).nth(skip).unwrap()
    }

    fn inbox_msgs(shared: &Shared, w: usize) -> Vec<Msg> {
        shared.remotes[w].poke.inbox.take_batches().flatten().collect()
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
        let _ = victim.queue.post(a, Box::new(|| {}), false);
        let _ = victim.queue.post(b, Box::new(|| {}), false);
        let _ = victim.queue.post(b, Box::new(|| {}), false);
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
        let mut empty = Core::new(1, 2, &Config::default());
        answer(&mut empty, &shared);
        thief.take_inbox(&shared);
        assert!(!thief.steal_pending);
        assert_eq!(thief.counters.snapshot().steals_in, 1);
    }
}
