//! A worker asleep at a run's quiescent end, or at a shutdown by a handler, on a CPU shared with
//! another process, sleeps through it: the worker that stops the run ends it for it, and the
//! next run carries it in, still asleep.
//!
//! Why: `Runtime::run` returns once every worker has ended the run, and a worker asleep when the
//! run is found quiescent had to wake for that. On a CPU shared with another process the wake-up
//! waits for a time slice of that process (the worker, woken often, ran ahead of its due there),
//! milliseconds: a user's sum on two workers, a thread spinning on CPU 1, had done its work at
//! 2.4 ms and returned at 4-7 ms, the worker on CPU 1 asleep since the work ran out. A sleeping
//! worker has nothing to end: it sleeps with an empty queue, its buffers and its heap's crumbs
//! flushed, its counters published (`idle`), and a quiescent run has no message in flight to it.
//! What it does not do is take back the memory others freed for it since it slept (its heap
//! is its thread's): its EMA gauges in the run's report count that memory live, until its next
//! end. So only a worker on a CPU measured shared, or late to a run's end lately (below, "Who
//! sleeps through"), sleeps through, where the wake-up costs a time slice; on a CPU of its own it
//! wakes in microseconds, and its gauges are exact at every run's end, as before (a long
//! handler's late end makes an exception for [`LATE_KEEP`]).
//!
//! The protocol is one word per worker (`Poke::sleeper`), holding a run number and a state:
//!
//! * **Claimable(r)**: the owner, parked in run `r`, is about to sleep or sleeps in its parker.
//!   Written by the owner ([`announce`]) after its inbox said it may sleep. A stopper that does
//!   not find the word so (announced later, or taken back) wakes the owner as before (the
//!   parker's token is sticky), so no order between the word and the stop flag is needed: an
//!   announcement the stopper misses costs a wake-up, not a lost one.
//! * **Claimed(r)**: the worker that stopped run `r` (quiescent, or a handler's shutdown) took
//!   the sleeper's end ([`claim`]): it counts the sleeper's end for the run (the gate's count,
//!   the heap flush count) and does not wake it.
//! * **Held(r)**: a stand-in (`stand_in`) routes into the sleeper, Claimable(r), and holds its
//!   word ([`hold`]): a stopper cannot claim it and wakes it instead. The stand-in gives the
//!   word back Claimable ([`release`]) if it left the sleeper parked with nothing to do; else
//!   (it took it out of the parked state) the word stays Held, and the owner, waking, takes it
//!   back as Claimable: the run goes on with it.
//! * **Awake** (0): anything else. Only the owner leaves Claimable and Claimed for it, by a
//!   compare-and-swap when it wakes, or when it saw the stop flag before sleeping ([`resolve`]);
//!   then it stops or goes on as [`stops`] says (a word carried into the next run while the
//!   owner, preempted, had seen the last run's stop flag goes on in the new run).
//!
//! A worker on such a CPU that ends a run awake (the last to find nothing to do, it found the run
//! quiescent) waits for the next one the same way, in its parker rather than at the gate: it
//! marks itself parked and its word Claimed(r) itself ([`park_between`]), under the gate's lock,
//! which the start of a run holds while it carries; a run started before that goes through the
//! gate as before. Woken with nothing carried (a post made between runs, a hold's release, its
//! share's recheck, the runtime's drop), it parks again or goes to the gate.
//!
//! And the start of run `r + 1` turns Claimed(r) into Claimable(r + 1) ([`carry`]): the sleeper
//! takes part in the new run as a parked worker (counted parked, its inbox's sleep mark kept,
//! so a post to it wakes it), without passing the gate. Every transition out of Claimed is a
//! compare-and-swap, owner's or starter's: exactly one wins. The owner that wins leaves its run
//! for the gate without counting its end (already counted) and without touching the run's
//! parked state (the starter resets that of every worker it did not carry); the starter that
//! wins counts the worker parked for the new run before the swap, so that the owner, waking
//! into the new run, leaves the parked state it entered. A run that ends by a shutdown from
//! outside the runtime, or an abort, claims nobody: its workers wake and end it themselves.
//!
//! A run a handler shuts down (`ochre::shutdown`) claims its sleepers the same way: a flow of
//! jobs that ends its run when its last job is merged (`ochre-mr`) would otherwise wait for
//! the wake-up of every sleeper (`bench mr --quick` beside a busy thread: jobs of 60-100 us
//! returned after 4 ms). What differs from a quiescent end is that messages may still reach a
//! sleeper after the claim (posted by turns that end after the stop, or before it and not
//! routed yet): each push that finds the sleeper asleep unparks it (`inbox`), and the messages
//! stay in its inbox until it takes part in a run, carried in asleep (woken by the start, which
//! wakes every carried sleeper whose inbox lacks the sleep mark: a stand-in may route the
//! messages before the start looks, `Remote::wake_carried_unless_marked`; it runs them in that
//! run) or through the gate; the quiescence of that run counts them in flight
//! (`idle::quiescent`: messages sent and received are counted over the runtime's life). A
//! shutdown from outside the runtime and an abort claim nobody.
//!
//! **Who sleeps through.** Every worker of a runtime of more workers than CPUs (they share CPUs
//! with each other: `Shared::oversubscribed`; its EMA gauges are then inexact at every end, as
//! above), a worker on a CPU measured shared (`worker::on_shared_cpu`), and one
//! whose run end came [`LATE_END`] or more after the run was stopped ([`Late`]), for
//! [`LATE_KEEP`] after that end: a worker that another process keeps from its CPU but that has
//! no work to measure its share with (its lane retired by a job that did not wait for it, an
//! idle worker of a small run) is woken for every run's start and end and measures only the
//! waits of its idle spells, which its share leaves out (`cpu_share`): runs of 60 us took 4 ms,
//! every one, in some processes, its share at 1.
//!
//! Invariants (tested in `loom_models` and the runtime's tests): every run's end is counted once
//! per worker (by the worker or by its claimer); a carried worker is counted parked exactly
//! while it sleeps; nothing runs outside a run (a claimed worker woken between runs by a post
//! or a hold takes nothing from its inbox: it parks again, the messages waiting, or leaves for
//! the gate); a run whose workers are all carried in asleep is looked at once they are
//! counted (`Runtime::run` wakes the init's home then: woken by the init before a later carry,
//! it could have run it and parked while that one was not counted).

use std::time::Duration;

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// A run end this long after the run was stopped (the stop wakes every worker; a wake-up takes
/// tens of microseconds on a CPU of its own) means the worker waited for its CPU: a time slice
/// of another process (3-5 ms here), or a long handler's end.
pub(crate) const LATE_END: Duration = Duration::from_millis(1);

/// How long a late end makes its worker sleep through ends ([`Late`]). Long beside the runs
/// it spares a wait (a flow of small jobs, a run per job) and short beside a change of the
/// machine's load: once the other process is gone, the next late-free end after this is the
/// worker's own again.
pub(crate) const LATE_KEEP: Duration = Duration::from_millis(500);

/// Microseconds since the process's epoch (`trace::epoch`), plus one (0 is "never"): when a
/// run stopped (`Control::stopped_at`), when a worker ended it, until when it sleeps through.
pub(crate) fn stamp() -> u64 {
    crate::trace::epoch().elapsed().as_micros() as u64 + 1
}

/// A worker's late run ends (in its `Core`): one makes it sleep through the next ends for
/// [`LATE_KEEP`] (module doc, "Who sleeps through"). Times are [`stamp`]s.
#[derive(Debug, Default)]
pub(crate) struct Late {
    /// Until when it sleeps through (0: it does not).
    until: u64,
}

impl Late {
    /// The worker ends, at `now`, a run stopped at `stopped` (0: not known).
    pub(crate) fn ended(&mut self, stopped: u64, now: u64) {
        if stopped != 0 && now.saturating_sub(stopped) >= LATE_END.as_micros() as u64 {
            self.until = now + LATE_KEEP.as_micros() as u64;
        }
    }

    /// Whether a late end at most [`LATE_KEEP`] before `now` makes the worker sleep through.
    pub(crate) fn sleeps_through(&self, now: u64) -> bool {
        now < self.until
    }
}

const CLAIMABLE: u64 = 1;
const CLAIMED: u64 = 2;
const HELD: u64 = 3;
const TAG: u64 = 3;

fn word(run: u64, tag: u64) -> u64 {
    run << 2 | tag
}

/// What a woken worker's word said ([`resolve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Woke {
    /// It takes part in run `run` (its own, or a later one that carried it in).
    InRun(u64),
    /// Run `run` ended and its end was counted by its claimer: the worker leaves for the gate.
    Claimed(u64),
}

/// The owner, having ended run `run` awake, sleeps until the next run as if claimed asleep in
/// it, so that the next run carries it in ([`carry`]) rather than waking it at the gate. Only
/// under the gate's lock, which the start of a run holds while it carries (a run started since
/// would miss the word: the owner goes through the gate then).
pub(crate) fn park_between(sleeper: &AtomicU64, run: u64) {
    sleeper.store(word(run, CLAIMED), Ordering::SeqCst);
}

/// The owner, parked in run `run`, is about to sleep in its parker.
pub(crate) fn announce(sleeper: &AtomicU64, run: u64) {
    // SeqCst: ordered before the owner's read of the stop flag (module doc).
    sleeper.store(word(run, CLAIMABLE), Ordering::SeqCst);
}

/// The owner woke (or saw the stop flag before sleeping): takes its word back.
pub(crate) fn resolve(sleeper: &AtomicU64, run: u64) -> Woke {
    let mut w = sleeper.load(Ordering::SeqCst);
    loop {
        let to = match w & TAG {
            // Held and left so by a stand-in that took it out of the parked state: the run
            // goes on with it (no stopper claims a Held word).
            CLAIMABLE | HELD => Woke::InRun(w >> 2),
            CLAIMED => Woke::Claimed(w >> 2),
            _ => return Woke::InRun(run),
        };
        match sleeper.compare_exchange(w, 0, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return to,
            Err(now) => w = now,
        }
    }
}

/// A stand-in (`stand_in`) about to route into the owner, asleep and Claimable in run `run`
/// (the stand-in's), holds its word: Claimable(r) becomes Held(r), which the stopper cannot
/// claim (it wakes the owner instead, which ends the run itself). The stand-in gives it back
/// ([`release`]) if it left the owner parked with nothing to do; if it took the owner out of
/// the parked state, the word stays Held until the owner takes it back ([`resolve`]: the run
/// goes on with it), so that no stopper counts the end of a worker that has work. False if the
/// word was not Claimable(run).
pub(crate) fn hold(sleeper: &AtomicU64, run: u64) -> bool {
    sleeper
        .compare_exchange(word(run, CLAIMABLE), word(run, HELD), Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
}

/// The stand-in leaves the word it held ([`hold`]) Claimable again.
pub(crate) fn release(sleeper: &AtomicU64, run: u64) {
    debug_assert_eq!(sleeper.load(Ordering::SeqCst), word(run, HELD));
    sleeper.store(word(run, CLAIMABLE), Ordering::SeqCst);
}

/// The owner is not asleep through a run's end (its word is Awake).
pub(crate) fn is_awake(sleeper: &AtomicU64) -> bool {
    sleeper.load(Ordering::SeqCst) == 0
}

/// Whether a worker that took its word back ([`resolve`]) leaves its run loop: its run's end
/// was counted for it (`Claimed`), or the run it takes part in is stopping (`stopping`, read
/// after the word: a run that carried it in stored its flag as running before the carry).
pub(crate) fn stops(woke: Woke, stopping: impl FnOnce() -> bool) -> bool {
    match woke {
        Woke::Claimed(_) => true,
        Woke::InRun(_) => stopping(),
    }
}

/// The stopper of run `run` (quiescent, or a handler's shutdown) takes the end of a worker asleep in it; false if the
/// worker is not asleep in that run (it ends the run itself, and must be woken).
pub(crate) fn claim(sleeper: &AtomicU64, run: u64) -> bool {
    sleeper
        .compare_exchange(
            word(run, CLAIMABLE),
            word(run, CLAIMED),
            Ordering::SeqCst,
            Ordering::SeqCst,
        )
        .is_ok()
}

/// The start of run `run` carries in a worker claimed asleep at the last run's end, counting it
/// in the new run's `parked` workers before the swap that lets it wake into the run (module
/// doc); false if it was not claimed, or woke and left for the gate first (then not counted).
pub(crate) fn carry(sleeper: &AtomicU64, run: u64, parked: &AtomicUsize) -> bool {
    let w = sleeper.load(Ordering::SeqCst);
    if w & TAG != CLAIMED {
        return false;
    }
    parked.fetch_add(1, Ordering::SeqCst);
    let carried = sleeper
        .compare_exchange(w, word(run, CLAIMABLE), Ordering::SeqCst, Ordering::SeqCst)
        .is_ok();
    if !carried {
        parked.fetch_sub(1, Ordering::SeqCst);
    }
    carried
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_sleeper_leaves_and_a_carried_one_joins_the_next_run() {
        let s = AtomicU64::new(0);
        assert_eq!(resolve(&s, 4), Woke::InRun(4), "awake: its own run");
        announce(&s, 4);
        assert!(!claim(&s, 5), "another run's stopper claims nothing");
        assert!(claim(&s, 4));
        assert!(!claim(&s, 4), "claimed once");
        assert_eq!(resolve(&s, 4), Woke::Claimed(4));
        let parked = AtomicUsize::new(0);
        assert!(!carry(&s, 5, &parked), "it left: nothing to carry");
        assert_eq!(parked.load(Ordering::SeqCst), 0, "not counted");
        announce(&s, 5);
        assert!(claim(&s, 5));
        assert!(carry(&s, 6, &parked));
        assert_eq!(parked.load(Ordering::SeqCst), 1, "counted parked in the new run");
        assert!(claim(&s, 6), "asleep through run 6 as well");
        assert!(carry(&s, 7, &parked));
        assert_eq!(resolve(&s, 5), Woke::InRun(7), "wakes into the latest run");
        assert_eq!(s.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_late_end_makes_its_worker_sleep_through_ends_for_a_while() {
        let mut late = Late::default();
        let (stopped, ms) = (1_000, LATE_END.as_micros() as u64);
        let keep = LATE_KEEP.as_micros() as u64;
        late.ended(stopped, stopped + ms / 2);
        assert!(!late.sleeps_through(stopped + ms / 2), "an end within the bound is not late");
        late.ended(0, stopped + 100 * ms);
        assert!(
            !late.sleeps_through(stopped + 100 * ms),
            "nor one of a run whose stop is not known"
        );
        let end = stopped + ms;
        late.ended(stopped, end);
        assert!(late.sleeps_through(end + keep / 2));
        assert!(!late.sleeps_through(end + keep), "for a while only");
        assert!(stamp() > 0 && stamp() <= stamp(), "stamps are never 0 and never go back");
    }

    #[test]
    fn a_sleeper_a_stand_in_holds_is_not_claimed_and_wakes_in_the_run() {
        let s = AtomicU64::new(0);
        assert!(!hold(&s, 3), "awake: nothing to hold");
        assert!(is_awake(&s));
        announce(&s, 3);
        assert!(!hold(&s, 4), "only in its own run");
        assert!(hold(&s, 3));
        assert!(!claim(&s, 3), "the stopper cannot claim it (it wakes it instead)");
        release(&s, 3);
        assert!(claim(&s, 3), "given back: claimable again");
        assert!(!hold(&s, 3), "claimed: the stand-in leaves it alone");
        let parked = AtomicUsize::new(0);
        assert!(carry(&s, 4, &parked));
        assert!(hold(&s, 4), "carried into the stand-in's run");
        // Left held (the stand-in took it out of the parked state): it wakes in that run.
        assert!(!carry(&s, 5, &parked), "not carried on");
        assert_eq!(resolve(&s, 3), Woke::InRun(4));
        assert!(is_awake(&s));
    }
}
