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
//! * `P` sent the post in a batch flushed with nothing else to run (the batch is *quiet*): `P`
//!   is about to idle, so the color's next events would cost a hand-off and a wake-up on each
//!   side, and running them on `P` costs nothing but locality. A worker with other work queued
//!   (a producer fanning out, a busy server) sends loud batches: its receivers stay where they
//!   are and run in parallel with it;
//! * the color's posts come mostly from `P`: at least [`need`] posts from `P` in a row, counted
//!   since the last decision, and more than the posts made here (a color chatting with its
//!   neighbours here stays);
//! * `P` does not get a smaller share of its CPU than the home does (`cpu_share`): work does
//!   not move to a worker that shares its CPU with another process.
//!
//! **When it comes back (at the borrower).** The borrower counts the posts made to the color
//! locally and those forwarded by the home (posted elsewhere). Each time the color's queue
//! empties, after a window of [`WINDOW`] posts, it gives the color back home if most of them were
//! forwarded: the color's traffic has moved on.
//!
//! **Hysteresis.** Each return home doubles the posts in a row a color needs to move again
//! ([`need`], up to [`MAX_NEED`]): a color whose traffic really is split between workers settles
//! at home after a few moves instead of bouncing.
//!
//! These are plain functions of counters, called by the workers (`worker`) and testable without
//! threads; the counters live in each slot of the run queue (`queue`).

use crate::cpu_share::FULL;

/// Posts counted before a borrower judges where a resident color's traffic comes from.
pub(crate) const WINDOW: u32 = 16;
/// Posts in a row from one worker a color needs to move for the first time: two, so that a
/// one-off post (an accept handler handing a connection its first event) moves nothing.
const FIRST_NEED: u32 = 2;
/// The most posts in a row a color that keeps coming back may need.
pub(crate) const MAX_NEED: u32 = 64;
/// How much less CPU share (thousandths) a poster's worker may have than the home's and still
/// take its colors: shares are measured over windows of tens of ms and move by a few percent on
/// a quiet machine; a worker sharing its CPU with one busy thread measures about half.
const SHARE_SLACK: u32 = FULL / 10;

/// Who posts to a color, as its slot sees it (home or borrower).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Traffic {
    /// Posts made on this worker since the last decision.
    pub(crate) local: u32,
    /// Posts from elsewhere since the last decision: at the home, in a row from `from`; at a
    /// borrower, forwarded by the home.
    pub(crate) remote: u32,
    /// At the home: 1 + the worker the remote posts came from (0: none yet).
    pub(crate) from: u32,
    /// Times the color came back home after a move.
    pub(crate) bounces: u32,
}

impl Traffic {
    /// A post made on this worker.
    #[inline]
    pub(crate) fn local_post(&mut self) {
        self.local = self.local.saturating_add(1);
    }

    /// At the home: a post from worker `poster`; a post from another worker than the last one
    /// starts a new run. Returns the length of the run.
    pub(crate) fn post_from(&mut self, poster: usize) -> u32 {
        let tag = poster as u32 + 1;
        if self.from != tag {
            self.from = tag;
            self.remote = 0;
        }
        self.remote = self.remote.saturating_add(1);
        self.remote
    }

    /// At a borrower: a post forwarded by the home.
    pub(crate) fn forwarded(&mut self) {
        self.remote = self.remote.saturating_add(1);
    }

    /// Starts a new count (after a decision), keeping the history of moves.
    pub(crate) fn reset(&mut self) {
        *self = Traffic { bounces: self.bounces, ..Traffic::default() };
    }
}

/// Posts in a row from one worker that a color that came back home `bounces` times needs to
/// move again.
pub(crate) fn need(bounces: u32) -> u32 {
    FIRST_NEED.checked_shl(bounces).unwrap_or(MAX_NEED).min(MAX_NEED)
}

/// What the home knows when a post from another worker reaches an idle color it holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Offer {
    /// The color's traffic, the post just counted.
    pub(crate) traffic: Traffic,
    /// The poster's batch was sent with nothing else to run.
    pub(crate) quiet: bool,
    /// CPU shares (thousandths) of the poster's worker and of the home.
    pub(crate) poster_share: u32,
    pub(crate) home_share: u32,
}

/// Whether the color moves to the poster (see the module doc).
pub(crate) fn moves(o: &Offer) -> bool {
    let t = o.traffic;
    o.quiet
        && t.remote >= need(t.bounces)
        && t.remote > t.local
        && o.poster_share + SHARE_SLACK >= o.home_share
}

/// Colors waiting on a borrower from which it sheds residents to their idle homes.
const SHED_READY: usize = 2;

/// At a borrower whose resident color's queue just emptied, with `ready` other colors waiting
/// here: give the color back because this worker has more than it can run while the color's
/// home has nothing (`home_idle`, asked only then)? Moves gather partners on one worker; this
/// spreads them again when too many gathered (a fan-out's receivers, tokens of a ring).
pub(crate) fn sheds(ready: usize, home_idle: impl FnOnce() -> bool) -> bool {
    ready >= SHED_READY && home_idle()
}

/// At a borrower whose resident color's queue just emptied: `Some(true)` to give it back home,
/// `Some(false)` to keep it (a window was judged: start a new one), `None` to wait for more posts.
pub(crate) fn gives_back(t: &Traffic) -> Option<bool> {
    (t.local.saturating_add(t.remote) >= WINDOW).then_some(t.remote > t.local)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn offer(traffic: Traffic) -> Offer {
        Offer { traffic, quiet: true, poster_share: FULL, home_share: FULL }
    }

    fn posts_from(t: &mut Traffic, poster: usize, n: u32) {
        for _ in 0..n {
            t.post_from(poster);
        }
    }

    #[test]
    fn a_color_moves_after_two_quiet_posts_in_a_row_from_one_worker() {
        let mut t = Traffic::default();
        posts_from(&mut t, 1, 1);
        assert!(!moves(&offer(t)), "one post moves nothing");
        posts_from(&mut t, 1, 1);
        assert!(moves(&offer(t)));
        assert!(!moves(&Offer { quiet: false, ..offer(t) }), "a loud batch moves nothing");
    }

    #[test]
    fn posts_from_another_worker_restart_the_run_and_local_posts_hold_the_color() {
        let mut t = Traffic::default();
        posts_from(&mut t, 1, 1);
        posts_from(&mut t, 2, 1);
        assert!(!moves(&offer(t)), "1 then 2: a run of one");
        posts_from(&mut t, 2, 1);
        assert!(moves(&offer(t)));
        for _ in 0..5 {
            t.local_post();
        }
        posts_from(&mut t, 2, 2);
        assert!(!moves(&offer(t)), "4 remote against 5 local");
        posts_from(&mut t, 2, 2);
        assert!(moves(&offer(t)));
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
        assert_eq!((0..8).map(need).collect::<Vec<_>>(), [2, 4, 8, 16, 32, 64, 64, 64]);
        assert_eq!(need(u32::MAX), MAX_NEED);
        let mut t = Traffic { bounces: 2, ..Traffic::default() };
        posts_from(&mut t, 1, 7);
        assert!(!moves(&offer(t)));
        posts_from(&mut t, 1, 1);
        assert!(moves(&offer(t)));
        t.reset();
        assert_eq!(t, Traffic { bounces: 2, ..Traffic::default() });
    }

    #[test]
    fn a_loaded_borrower_sheds_residents_to_idle_homes_only() {
        assert!(sheds(SHED_READY, || true));
        assert!(!sheds(SHED_READY, || false), "the home is busy too");
        assert!(!sheds(SHED_READY - 1, || panic!("asked for nothing")), "a partner waiting");
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
                t.local_post();
            }
        }
        assert_eq!(gives_back(&t), Some(false), "an even split stays");
    }
}
