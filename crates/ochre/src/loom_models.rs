//! loom models of the runtime's small protocols, run with
//! `RUSTFLAGS="--cfg loom" cargo test -p ochre --lib --release loom_`.
//!
//! Each model drives the real `Inbox`, `Remote` (sleeping flag and parker) and `ColorQueue` code
//! from loom threads; loom explores the interleavings (bounded preemptions) and fails on a lost
//! message, a deadlock (a lost wake-up leaves a thread parked forever) or a failed assertion.

use std::sync::Arc;

use loom::sync::atomic::{AtomicBool, AtomicUsize};
use loom::sync::Mutex;

use crate::config::Wakeup;
use crate::inbox::{Inbox, Sender};
use crate::io::poller::PollerHandle;
use crate::message::{Msg, Task};
use crate::park::Parker;
use crate::queue::{ColorQueue, Lease, Route};
use crate::shared::Remote;
use crate::sync::Ordering;
use crate::Color;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// A worker's remote side as the models use it: a condition-variable parker.
fn model_remote() -> Arc<Remote> {
    Arc::new(Remote::new(Parker::new(Wakeup::Condvar).unwrap(), PollerHandle::new().unwrap()))
}

fn tag_msg(tag: u64) -> Msg {
    let task = Task::new(|| {});
    Msg::Post { color: Color(tag), task, urgent: false, step: false }
}

fn tags(inbox: &Inbox) -> Vec<u64> {
    inbox
        .take_batches()
        .flat_map(|b| b.into_iter())
        .map(|m| match m {
            Msg::Post { color, .. } => color.0,
            _ => unreachable!(),
        })
        .collect()
}

/// Batch hand-off: two senders push two batches each while the owner takes; everything arrives
/// once, and each sender's messages in order.
#[test]
fn loom_batch_handoff_keeps_order_and_loses_nothing() {
    model(|| {
        let inbox = Arc::new(Inbox::new());
        let senders: Vec<_> = (0..2u64)
            .map(|s| {
                let inbox = inbox.clone();
                loom::thread::spawn(move || {
                    let _ = inbox
                        .push_batch(vec![tag_msg(s * 10), tag_msg(s * 10 + 1)], Sender::worker(0));
                    let _ = inbox.push_batch(vec![tag_msg(s * 10 + 2)], Sender::worker(0));
                })
            })
            .collect();
        let mut got = tags(&inbox);
        for s in senders {
            s.join().unwrap();
        }
        got.extend(tags(&inbox));
        assert_eq!(got.len(), 6);
        for s in 0..2u64 {
            let mine: Vec<u64> = got.iter().copied().filter(|t| t / 10 == s).collect();
            assert_eq!(mine, vec![s * 10, s * 10 + 1, s * 10 + 2]);
        }
    });
}

/// Posts from threads outside the runtime (`shared::Outside`): two threads post two messages
/// each while the worker takes its inbox and, after each batch from outside, the messages posted
/// behind it. Everything arrives once, each poster's messages in order, and nothing is left
/// announced with no batch to take it.
#[test]
fn loom_outside_posts_arrive_once_and_in_order() {
    fn take(remote: &Remote, got: &mut Vec<u64>) {
        let tag = |m: Msg| match m {
            Msg::Post { color, .. } => color.0,
            _ => unreachable!(),
        };
        let mut batches = remote.poke.inbox.take_batches();
        while let Some((from, batch)) = batches.next_with_sender() {
            got.extend(batch.into_iter().map(tag));
            // As the worker does (`Core::take_inbox`, `receive_outside`).
            if from.id == crate::inbox::OUTSIDE {
                let mut behind = Vec::new();
                remote.take_outside(&mut behind);
                got.extend(behind.into_iter().map(tag));
            }
        }
    }
    model(|| {
        let remote = model_remote();
        let posters: Vec<_> = (0..2u64)
            .map(|p| {
                let remote = remote.clone();
                loom::thread::spawn(move || {
                    remote.deliver_outside(tag_msg(p * 10));
                    remote.deliver_outside(tag_msg(p * 10 + 1));
                })
            })
            .collect();
        // The worker takes until it has everything (a message left behind an announcement
        // nobody will take keeps it taking forever: loom reports the endless loop).
        let mut got = Vec::new();
        while got.len() < 4 {
            take(&remote, &mut got);
            loom::thread::yield_now();
        }
        for p in posters {
            p.join().unwrap();
        }
        assert_eq!(got.len(), 4, "{got:?}");
        for p in 0..2u64 {
            let mine: Vec<u64> = got.iter().copied().filter(|t| t / 10 == p).collect();
            assert_eq!(mine, vec![p * 10, p * 10 + 1]);
        }
        let outside = crate::sync::lock(&remote.outside);
        assert!(!outside.announced && outside.msgs.is_empty());
    });
}

/// The sleeper's side of `idle::sleep`: take, announce, park; withdraw after every wake.
fn sleep_until_message(remote: &Remote, locked: bool) -> usize {
    loop {
        let got = if locked {
            std::iter::from_fn(|| remote.poke.inbox.pop_locked()).count()
        } else {
            tags(&remote.poke.inbox).len()
        };
        if got > 0 {
            return got;
        }
        if !remote.poke.inbox.try_sleep(locked) {
            continue;
        }
        remote.parker.park(None);
        remote.poke.inbox.woke(locked);
    }
}

fn send(remote: &Remote, locked: bool, tag: u64) {
    if locked {
        remote.deliver_locked(tag_msg(tag));
    } else {
        remote.deliver_batch(vec![tag_msg(tag)], Sender::worker(0));
    }
}

/// Park/wake: a message pushed while the owner is deciding to sleep always wakes it (a lost
/// wake-up would leave it parked forever, which loom reports as a deadlock). Both transports.
#[test]
fn loom_no_lost_wakeup() {
    for locked in [false, true] {
        model(move || {
            let remote = model_remote();
            let r2 = remote.clone();
            let sender = loom::thread::spawn(move || send(&r2, locked, 1));
            assert_eq!(sleep_until_message(&remote, locked), 1);
            sender.join().unwrap();
        });
    }
}

/// Two senders race to wake one sleeper, which sleeps again between their messages: every
/// message is seen, and nobody is left parked.
#[test]
fn loom_two_wakers_one_sleeper() {
    for locked in [false, true] {
        model(move || {
            let remote = model_remote();
            let senders: Vec<_> = (0..2)
                .map(|i| {
                    let r = remote.clone();
                    loom::thread::spawn(move || send(&r, locked, i))
                })
                .collect();
            let mut got = sleep_until_message(&remote, locked);
            if got < 2 {
                got += sleep_until_message(&remote, locked);
            }
            assert_eq!(got, 2);
            for s in senders {
                s.join().unwrap();
            }
        });
    }
}

/// A worker of the color-move model: its queue, its inbox, and the routing of `Core::receive`.
struct ModelWorker {
    id: usize,
    queue: Mutex<ColorQueue>,
    inbox: Inbox,
}

/// The two workers of a model, on a flat placement of two: `c`'s home, then the other.
fn home_and_other(c: Color) -> (Arc<ModelWorker>, Arc<ModelWorker>) {
    let placement = crate::color::Placement::flat(2);
    let worker = |id| {
        Arc::new(ModelWorker {
            id,
            queue: Mutex::new(ColorQueue::new(id, placement)),
            inbox: Inbox::new(),
        })
    };
    let home = crate::color::home_of(c, placement);
    (worker(home), worker(1 - home))
}

fn deliver(to: &ModelWorker, msg: Msg) {
    deliver_from(crate::inbox::OUTSIDE, to, msg);
}

fn deliver_sync(from: usize, to: &ModelWorker, ask: crate::queue::SyncAsk) {
    let from_id = crate::message::worker_id(from);
    deliver_from(from, to, Msg::Sync { color: ask.color, from: from_id, epoch: ask.epoch });
}

fn deliver_from(from: usize, to: &ModelWorker, msg: Msg) {
    // No parking in this model: the workers step instead of sleeping.
    let _ = to.inbox.push_batch(vec![msg], Sender { id: from, quiet: true, ready: 0 });
}

/// One step of a worker: route its inbox, then run one turn; returns events run. With
/// `follow`, colors follow their messages: a post from another worker moves an idle color to it
/// at once and pulls a busy one (it moves, without an event, when its queue empties: a `Move`
/// as `follow`'s pulls and relief send), and a resident goes back home each time its queue
/// empties (the most moves the protocol can see).
fn step_following(me: &ModelWorker, others: &[&ModelWorker; 2], follow: bool) -> usize {
    let peer = |id: usize| {
        if others[0].id == id {
            others[0]
        } else {
            others[1]
        }
    };
    let mut batches = me.inbox.take_batches();
    let mut q = crate::sync::lock(&me.queue);
    let mut msgs = Vec::new();
    while let Some((from, batch)) = batches.next_with_sender() {
        msgs.extend(batch.into_iter().map(|m| (from.id, m)));
    }
    for (from, msg) in msgs {
        match msg {
            Msg::Post { color, task, urgent, .. } => match q.receive_post(
                color,
                task,
                urgent,
                (follow && from != crate::inbox::OUTSIDE).then_some(from),
                |_, _, _| (follow && from != crate::inbox::OUTSIDE).then_some(from),
            ) {
                Route::Queued => {}
                Route::Move { to, task } => deliver_from(
                    me.id,
                    peer(to),
                    Msg::Move {
                        color,
                        home: crate::message::worker_id(me.id),
                        task: Some(task),
                        urgent,
                    },
                ),
                Route::Forward { to, task } => deliver(
                    peer(to),
                    Msg::Forward { color, home: crate::message::worker_id(me.id), task, urgent },
                ),
                Route::Remote { .. } | Route::Held(_) => unreachable!("posts go to the home"),
            },
            Msg::Sync { color, from, epoch } => {
                if !q.sync_waits(color, from as usize, epoch) {
                    deliver_from(me.id, peer(from as usize), Msg::Synced { color, epoch })
                }
            }
            Msg::Synced { color, epoch } => {
                if let Some(ask) = q.synced(color, epoch) {
                    deliver_sync(me.id, peer(ask.home), ask);
                }
            }
            Msg::Forward { color, home, task, urgent } => {
                q.accept_forward(color, home as usize, task, urgent)
            }
            Msg::Grant { from, loans, .. } => {
                for loan in loans {
                    q.adopt(from as usize, loan)
                }
            }
            Msg::Move { color, home, task, urgent } => {
                q.adopt_moved(color, home as usize, task, urgent, false)
            }
            Msg::Return { color, ran } => {
                q.returned(color, ran);
                for (from, epoch) in q.syncs_due(color) {
                    deliver_from(me.id, peer(from), Msg::Synced { color, epoch });
                }
            }
            Msg::Recall { color, from } => {
                let answer = match q.give_back(color, 0) {
                    Some((ran, loan)) => Msg::GiveBack { ran, loan: Box::new(loan) },
                    None => Msg::Kept { color },
                };
                deliver_from(me.id, peer(from as usize), answer);
            }
            Msg::GiveBack { ran, loan } => {
                let color = loan.color;
                q.given_back(ran, *loan);
                for (from, epoch) in q.syncs_due(color) {
                    deliver_from(me.id, peer(from), Msg::Synced { color, epoch });
                }
            }
            Msg::Kept { color } => {
                if let Some((to, parked)) = q.kept(color) {
                    let home = crate::message::worker_id(me.id);
                    for (task, urgent) in parked {
                        deliver(peer(to), Msg::Forward { color, home, task, urgent });
                    }
                }
                for (from, epoch) in q.syncs_due(color) {
                    deliver_from(me.id, peer(from), Msg::Synced { color, epoch });
                }
            }
            Msg::StealRequest | Msg::Io(_) | Msg::Pin { .. } | Msg::PostInline { .. } => {
                unreachable!("not in this model")
            }
        }
    }
    let Some((key, _)) = q.start_turn() else {
        return 0;
    };
    let mut ran = 0;
    while let Some(task) = q.pop(key) {
        drop(q);
        task.run();
        ran += 1;
        q = crate::sync::lock(&me.queue);
    }
    // A resident goes home as soon as it can; a color at home leaves only if pulled.
    match q.end_turn_shedding(
        key,
        |_, _| false,
        |home, _, _, what: crate::queue::Shed| home.filter(|_| follow || what.loan),
    ) {
        Some(crate::queue::TurnEnd::Return(ret)) => {
            deliver_from(me.id, peer(ret.home), Msg::Return { color: ret.color, ran: ret.ran })
        }
        Some(crate::queue::TurnEnd::Push { to, color }) => {
            let home = crate::message::worker_id(me.id);
            deliver_from(me.id, peer(to), Msg::Move { color, home, task: None, urgent: false })
        }
        None => {}
    }
    ran
}

/// Two workers take two steps each, concurrently with each other and with the `outside` poster
/// thread; then, that thread joined, the rest is drained in one thread (loom cannot explore
/// unbounded spin loops), for the caller to check the end state.
fn run_both(
    a: &Arc<ModelWorker>,
    b: &Arc<ModelWorker>,
    follow: bool,
    outside: loom::thread::JoinHandle<()>,
) {
    let workers: Vec<_> = [(a.clone(), b.clone()), (b.clone(), a.clone())]
        .into_iter()
        .map(|(me, other)| {
            loom::thread::spawn(move || {
                for _ in 0..2 {
                    step_following(&me, &[&*other, &*other], follow);
                }
            })
        })
        .collect();
    outside.join().unwrap();
    for w in workers {
        w.join().unwrap();
    }
    for _ in 0..6 {
        step_following(a, &[&**b, &**b], follow);
        step_following(b, &[&**a, &**a], follow);
    }
}

/// What the color-move models check of one color's events: never two at once, the order they
/// ran in, how many ran.
struct ColorOracle {
    running: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<u64>>>,
    ran: Arc<AtomicUsize>,
}

impl ColorOracle {
    fn new() -> Self {
        ColorOracle {
            running: Arc::new(AtomicBool::new(false)),
            log: Arc::new(Mutex::new(Vec::new())),
            ran: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// An event of the color, logging `tag` when it runs.
    fn event(&self, tag: u64) -> Task {
        let (running, log, ran) = (self.running.clone(), self.log.clone(), self.ran.clone());
        Task::new(move || {
            assert!(!running.swap(true, Ordering::SeqCst), "two events of one color at once");
            log.lock().unwrap().push(tag);
            running.store(false, Ordering::SeqCst);
            ran.fetch_add(1, Ordering::SeqCst);
        })
    }

    /// The position of `tag` in the order events ran.
    fn position(&self, tag: u64) -> usize {
        self.log.lock().unwrap().iter().position(|&t| t == tag).expect("an event never ran")
    }
}

/// Color move: the home lends a color with one pending event to a thief while an outside poster
/// sends two more to the home. Every event runs once, never two at once, the poster's two in
/// order, and the color ends back home, `Local`.
#[test]
fn loom_color_move_keeps_exclusion_order_and_exactly_once() {
    model(|| {
        let c = Color(0);
        // Worker 0 is c's home (home_of(c, 2) is fixed; assert it to keep the model honest).
        let (home, thief) = home_and_other(c);
        let (home_id, thief_id) = (home.id, thief.id);
        let oracle = ColorOracle::new();
        let event = |tag: u64| oracle.event(tag);
        // Event 0 is queued at home, then lent.
        {
            let mut q = crate::sync::lock(&home.queue);
            assert!(matches!(q.post(c, event(0), false), Route::Queued));
            let loan = q.lend(thief_id).unwrap();
            deliver(
                &thief,
                Msg::Grant {
                    from: crate::message::worker_id(home_id),
                    loans: vec![loan],
                    asked: true,
                },
            );
        }
        let poster = {
            let (home, e1, e2) = (home.clone(), event(1), event(2));
            loom::thread::spawn(move || {
                deliver(&home, Msg::Post { color: c, task: e1, urgent: false, step: false });
                deliver(&home, Msg::Post { color: c, task: e2, urgent: false, step: false });
            })
        };
        run_both(&home, &thief, false, poster);
        assert_eq!(oracle.ran.load(Ordering::SeqCst), 3, "an event was lost");
        assert_eq!(
            crate::sync::lock(&home.queue).lease(c),
            Some(Lease::Local),
            "the color came home"
        );
        assert_eq!(crate::sync::lock(&thief.queue).lease(c), None);
        assert!(oracle.position(1) < oracle.position(2), "the poster's events ran out of order");
    });
}

/// Recall: the home lends a color with one pending event to a thief that has a color of its own
/// waiting, then, idle, recalls it while an outside poster sends two more events to the home (the
/// first may be forwarded before the recall, after it, or parked at the home; the thief may give
/// the color back, or have returned it already). Every event runs once, never two at once, the
/// poster's two in order, and the color ends back home, `Local`.
#[test]
fn loom_a_recalled_color_keeps_exclusion_order_and_exactly_once() {
    model(|| {
        let c = Color(0);
        let (home, thief) = home_and_other(c);
        let (home_id, thief_id) = (home.id, thief.id);
        let placement = crate::color::Placement::flat(2);
        let own = (1..).map(Color).find(|&d| crate::color::home_of(d, placement) == thief_id);
        let own = own.unwrap();
        let oracle = ColorOracle::new();
        let event = |tag: u64| oracle.event(tag);
        let other_ran = Arc::new(AtomicUsize::new(0));
        {
            let mut q = crate::sync::lock(&home.queue);
            assert!(matches!(q.post(c, event(0), false), Route::Queued));
            let loan = q.lend(thief_id).unwrap();
            let from = crate::message::worker_id(home_id);
            deliver(&thief, Msg::Grant { from, loans: vec![loan], asked: true });
            let other_ran = other_ran.clone();
            let task = Task::new(move || {
                other_ran.fetch_add(1, Ordering::SeqCst);
            });
            assert!(matches!(
                crate::sync::lock(&thief.queue).post(own, task, false),
                Route::Queued
            ));
        }
        let poster = {
            let (home, thief, e1, e2) = (home.clone(), thief.clone(), event(1), event(2));
            loom::thread::spawn(move || {
                deliver(&home, Msg::Post { color: c, task: e1, urgent: false, step: false });
                {
                    // The home, idle, recalls the color (under its queue's lock, as its worker).
                    let mut q = crate::sync::lock(&home.queue);
                    if let Some((color, to)) = q.recall(|_, _| true) {
                        assert_eq!((color, to), (c, thief.id));
                        let from = crate::message::worker_id(home.id);
                        deliver_from(home.id, &thief, Msg::Recall { color, from });
                    }
                }
                deliver(&home, Msg::Post { color: c, task: e2, urgent: false, step: false });
            })
        };
        run_both(&home, &thief, false, poster);
        assert_eq!(oracle.ran.load(Ordering::SeqCst), 3, "an event was lost");
        assert_eq!(other_ran.load(Ordering::SeqCst), 1);
        assert_eq!(crate::sync::lock(&home.queue).lease(c), Some(Lease::Local));
        assert_eq!(crate::sync::lock(&thief.queue).lease(c), None);
        assert!(oracle.position(1) < oracle.position(2), "the poster's events ran out of order");
    });
}

/// Colors follow their messages: worker 1 posts two events to a color homed on worker 0, which
/// moves it to worker 1 with the first it finds idle; an outside poster sends two more to the
/// home meanwhile (forwarded while the color is away), and worker 1 gives the color back each
/// time its queue empties. Every event runs once, never two at once, each poster's in order,
/// and the color ends back home, `Local`.
#[test]
fn loom_colors_that_follow_their_messages_keep_exclusion_order_and_exactly_once() {
    model(|| {
        let c = Color(0);
        let (home, poster) = home_and_other(c);
        let poster_id = poster.id;
        let oracle = ColorOracle::new();
        let event = |tag: u64| oracle.event(tag);
        // Worker 1's events post 0 and 1 (as its handlers would: to the home, from worker 1).
        deliver_from(
            poster_id,
            &home,
            Msg::Post { color: c, task: event(0), urgent: false, step: false },
        );
        deliver_from(
            poster_id,
            &home,
            Msg::Post { color: c, task: event(1), urgent: false, step: false },
        );
        let outside = {
            let (home, e2, e3) = (home.clone(), event(2), event(3));
            loom::thread::spawn(move || {
                deliver(&home, Msg::Post { color: c, task: e2, urgent: false, step: false });
                deliver(&home, Msg::Post { color: c, task: e3, urgent: false, step: false });
            })
        };
        run_both(&home, &poster, true, outside);
        assert_eq!(oracle.ran.load(Ordering::SeqCst), 4, "an event was lost");
        assert_eq!(crate::sync::lock(&home.queue).lease(c), Some(Lease::Local), "back home");
        assert_eq!(crate::sync::lock(&poster.queue).lease(c), None);
        let at = |tag| oracle.position(tag);
        assert!(at(0) < at(1) && at(2) < at(3), "a poster's events ran out of order");
    });
}

/// A pull (`follow`): a post from worker 1 finds its color busy at the home (an outside
/// thread's event 0 queued) and pulls it; the color leaves, without an event, when its queue
/// empties. The outside thread posts 2 meanwhile (run at the home, or forwarded to worker 1,
/// which gives the color back once its queue empties). Every event runs once, never two at
/// once, the outside thread's in order, and exactly one worker holds the color at the end.
#[test]
fn loom_a_busy_color_pulled_by_a_post_leaves_when_its_queue_empties() {
    model(|| {
        let c = Color(0);
        let (home, poster) = home_and_other(c);
        let (home_id, poster_id) = (home.id, poster.id);
        let oracle = ColorOracle::new();
        deliver(&home, Msg::Post { color: c, task: oracle.event(0), urgent: false, step: false });
        deliver_from(
            poster_id,
            &home,
            Msg::Post { color: c, task: oracle.event(1), urgent: false, step: false },
        );
        let outside = {
            let (home, e2) = (home.clone(), oracle.event(2));
            loom::thread::spawn(move || {
                deliver(&home, Msg::Post { color: c, task: e2, urgent: false, step: false })
            })
        };
        run_both(&home, &poster, true, outside);
        assert_eq!(oracle.ran.load(Ordering::SeqCst), 3, "an event was lost");
        let at = |tag| oracle.position(tag);
        assert!(at(0) < at(2), "a poster's events ran out of order");
        let (h, p) =
            (crate::sync::lock(&home.queue).lease(c), crate::sync::lock(&poster.queue).lease(c));
        let pulled =
            Some(Lease::Away { to: poster_id, outstanding: 0, moved: true, recalled: false });
        let resident =
            Some(Lease::Guest { home: home_id, received: 0, resident: true, relieved: false });
        assert!(
            (h == Some(Lease::Local) && p.is_none()) || (h == pulled && p == resident),
            "held by one worker: home {h:?}, poster {p:?}"
        );
    });
}

/// Order per poster color across a move: an event of color `a` on worker 1 posted 0 and 1 to
/// color `c`, homed on worker 0 (on their way, through the home); the home moves `c` to worker
/// 1 with the first, and `a`'s next event, on worker 1, posts 2 to `c`, which worker 1 may now
/// hold: the fence holds it until the home's forwards are in. 0, 1, 2 run in that order, once
/// each, and `c` ends back home.
#[test]
fn loom_a_color_moved_to_its_poster_keeps_the_posters_order() {
    model(|| {
        let placement = crate::color::Placement::flat(2);
        let c = Color(0);
        let (home, poster) = home_and_other(c);
        let poster_id = poster.id;
        let a = (1..).map(Color).find(|&a| crate::color::home_of(a, placement) == poster_id);
        let a = a.unwrap();
        let oracle = ColorOracle::new();
        for tag in [0, 1] {
            let msg = Msg::Post { color: c, task: oracle.event(tag), urgent: false, step: false };
            deliver_from(poster_id, &home, msg);
        }
        // `a`'s next event, queued on worker 1: it posts 2 to `c` as a handler does.
        let next = {
            let (home, me, e2) = (home.clone(), poster.clone(), oracle.event(2));
            Task::new(move || {
                let mut q = crate::sync::lock(&me.queue);
                let dest = q.route(c);
                match q.post_to(dest, e2, false) {
                    Route::Queued | Route::Held(None) => {}
                    Route::Held(Some(ask)) => deliver_sync(poster_id, &home, ask),
                    Route::Remote { task, .. } => deliver_from(
                        poster_id,
                        &home,
                        Msg::Post { color: c, task, urgent: false, step: false },
                    ),
                    Route::Forward { .. } | Route::Move { .. } => unreachable!("c is homed on 0"),
                }
            })
        };
        assert!(matches!(crate::sync::lock(&poster.queue).post(a, next, false), Route::Queued));
        let nobody = loom::thread::spawn(|| {});
        run_both(&home, &poster, true, nobody);
        assert_eq!(oracle.ran.load(Ordering::SeqCst), 3, "an event was lost");
        assert_eq!(crate::sync::lock(&home.queue).lease(c), Some(Lease::Local), "back home");
        let at = |tag| oracle.position(tag);
        assert!(at(0) < at(1) && at(1) < at(2), "the poster color's events ran out of order");
    });
}

/// EMA's abandonment protocol: a remote free racing with the owner heap's drop. Whichever order,
/// the block goes back exactly once and the heap's shared half is released with it.
#[test]
fn loom_abandoned_heap_is_released_by_the_last_free() {
    use crate::alloc::{free_remote, Heap};
    use std::alloc::Layout;
    use std::ptr::NonNull;

    struct Sent(NonNull<u8>);
    // SAFETY (test): the object moves to the other thread with its only reference.
    unsafe impl Send for Sent {}

    model(|| {
        let mut a = Heap::new(0, 1, None);
        let lay = Layout::from_size_align(32, 8).unwrap();
        let (p1, p2) = (a.alloc(lay, 0).unwrap(), a.alloc(lay, 0).unwrap());
        let weak = a.shared_weak();
        let s1 = Sent(p1);
        let t = loom::thread::spawn(move || {
            let s = s1;
            // SAFETY: allocated above, freed once, here.
            unsafe { free_remote(s.0) };
        });
        // SAFETY: allocated above, freed once, here.
        unsafe { a.free(p2) };
        drop(a);
        t.join().unwrap();
        assert!(weak.upgrade().is_none(), "the block and the heap went back");
    });
}

/// Reader colors (`reader`): what a read and an exclusive turn share. The value is a loom
/// `UnsafeCell`, so a read beside the turn's write (no happens-before between them) fails the
/// model, as does a read lost or run twice.
mod readers {
    use std::sync::Arc;

    use loom::cell::UnsafeCell;
    use loom::sync::atomic::AtomicUsize;

    use super::model;
    use crate::reader::{Admitted, Parked, ReadState};
    use crate::sync::Ordering;

    struct World {
        state: ReadState,
        value: UnsafeCell<u64>,
        ran: AtomicUsize,
    }

    // SAFETY (model): the value is shared under the protocol being checked; loom's cell reports
    // any access not ordered by it.
    unsafe impl Sync for World {}

    /// A read as the runtime makes it: it reads the value and leaves the count.
    fn read(w: &Arc<World>, how: Admitted) -> Box<dyn FnOnce() + Send> {
        let w = w.clone();
        Box::new(move || {
            // SAFETY (model): loom checks that no write is concurrent with this read.
            let v = w.value.with(|p| unsafe { *p });
            assert!(v <= 2);
            w.ran.fetch_add(1, Ordering::SeqCst);
            w.state.end_read(how);
        })
    }

    /// A read posted now on worker `slot`: admitted and run, or parked (`run_read`); a parked
    /// read, once granted, leaves the word's count.
    fn post_read(w: &Arc<World>, slot: usize) {
        if w.state.try_read(slot) {
            read(w, Admitted::Slot(slot))();
        } else if let Some(p) =
            w.state.read_or_park(slot, Parked { origin: slot, read: read(w, Admitted::Granted) })
        {
            // Admitted on the slow path: it counts in the slot, not as granted.
            drop(p);
            read(w, Admitted::Slot(slot))();
        }
    }

    /// An exclusive turn: waits for the reads (the worker retries), writes, and returns the
    /// reads granted at its end.
    fn turn(w: &World, value: u64) -> Vec<Parked> {
        while !w.state.try_write() {
            loom::thread::yield_now();
        }
        // SAFETY (model): loom checks that no read or write is concurrent with this one.
        w.value.with_mut(|p| unsafe { *p = value });
        w.state.end_write()
    }

    fn world() -> Arc<World> {
        Arc::new(World {
            state: ReadState::new(2),
            value: UnsafeCell::new(0),
            ran: AtomicUsize::new(0),
        })
    }

    /// Two reads on two threads race a turn: none runs beside it, each runs once (parked ones
    /// are granted at the turn's end), and the word ends clear.
    #[test]
    fn loom_reader_reads_never_run_beside_a_turn_and_run_once() {
        model(|| {
            let w = world();
            let readers: Vec<_> = (0..2)
                .map(|slot| {
                    let w = w.clone();
                    loom::thread::spawn(move || post_read(&w, slot))
                })
                .collect();
            for p in turn(&w, 1) {
                (p.read)();
            }
            for r in readers {
                r.join().unwrap();
            }
            assert_eq!(w.ran.load(Ordering::SeqCst), 2);
            assert_eq!(w.state.reads(), 0);
            assert!(!w.state.word().writer() && !w.state.word().waiting());
        });
    }

    /// A read granted by one turn runs on another thread while the next turn waits for it, and
    /// a new read arrives meanwhile: the next turn starts only after the granted read, and the
    /// new read runs once, before or after it.
    #[test]
    fn loom_reader_granted_read_holds_off_the_next_turn() {
        model(|| {
            let w = world();
            // A read parked behind the first turn, granted at its end.
            assert!(w.state.try_write());
            let parked = Parked { origin: 1, read: read(&w, Admitted::Granted) };
            assert!(w.state.read_or_park(1, parked).is_none());
            let granted = w.state.end_write();
            assert_eq!(granted.len(), 1);
            let g = loom::thread::spawn(move || {
                for p in granted {
                    (p.read)();
                }
            });
            let w2 = w.clone();
            let r = loom::thread::spawn(move || post_read(&w2, 0));
            for p in turn(&w, 2) {
                (p.read)();
            }
            g.join().unwrap();
            r.join().unwrap();
            assert_eq!(w.ran.load(Ordering::SeqCst), 2);
            assert_eq!(w.state.reads(), 0);
        });
    }
}

/// Sleeping through a run's end (`run_end`): a worker announces it may sleep through its run's
/// end and parks unless it sees the stop flag; the worker that found the run quiescent stops it
/// and claims the sleeper's end or, failing, wakes it; the next run's start (once the run's end
/// is counted) stores its stop flag as running and carries a claimed sleeper in, then a post
/// wakes it. The sleeper takes its word back and goes on as `run_end::stops` says, as `idle`'s
/// sleep does. Whatever the interleaving: the run's end is counted exactly once (by the sleeper
/// or by its claimer), no wake-up is lost (loom reports a sleeper left parked as a deadlock), a
/// sleeper that ends its run itself saw the stop, one carried in goes on in the new run (even
/// when it had seen the last run's stop before sleeping), and it is counted parked in the new
/// run exactly until it wakes into it.
#[test]
fn loom_a_sleeper_through_a_run_end_is_counted_once_and_never_lost() {
    use crate::run_end::{announce, carry, claim, resolve, stops, Woke};
    model(|| {
        let remote = model_remote();
        let stop = Arc::new(AtomicBool::new(false));
        let ends = Arc::new(AtomicUsize::new(0));
        let parked = Arc::new(AtomicUsize::new(1));
        let (r, s, e) = (remote.clone(), stop.clone(), ends.clone());
        let stopper = loom::thread::spawn(move || {
            s.store(true, Ordering::SeqCst);
            if claim(&r.poke.sleeper, 1) {
                e.fetch_add(1, Ordering::SeqCst);
            } else {
                r.parker.unpark();
            }
        });
        let (r, s, e, p) = (remote.clone(), stop.clone(), ends.clone(), parked.clone());
        let sleeper = loom::thread::spawn(move || {
            announce(&r.poke.sleeper, 1);
            if !s.load(Ordering::SeqCst) {
                r.parker.park(None);
            }
            let woke = resolve(&r.poke.sleeper, 1);
            let stopped = stops(woke, || s.load(Ordering::SeqCst));
            match (woke, stopped) {
                (Woke::InRun(1), true) => _ = e.fetch_add(1, Ordering::SeqCst),
                (Woke::InRun(2), false) => _ = p.fetch_sub(1, Ordering::SeqCst),
                (Woke::Claimed(1), true) => {}
                other => panic!("woke as {other:?}"),
            }
            woke
        });
        stopper.join().unwrap();
        // The caller of run 1 returns once its end is counted, and starts run 2.
        while ends.load(Ordering::SeqCst) == 0 {
            loom::thread::yield_now();
        }
        stop.store(false, Ordering::SeqCst);
        parked.store(0, Ordering::SeqCst);
        let carried = carry(&remote.poke.sleeper, 2, &parked);
        // A post of run 2 to the sleeper (or the runtime's drop) wakes it.
        remote.parker.unpark();
        let woke = sleeper.join().unwrap();
        assert_eq!(ends.load(Ordering::SeqCst), 1, "run 1's end counted once");
        assert_eq!(carried, woke == Woke::InRun(2), "carried exactly when it woke into run 2");
        assert_eq!(parked.load(Ordering::SeqCst), 0, "parked count back to zero");
    });
}

/// A worker that sleeps between runs (`runtime`'s `park_between_runs`): under the gate's lock,
/// unless a run started since, it tries its inbox's sleep mark (a message waiting there makes it
/// park without it) and marks its word Claimed(1), then parks with its core open to stand-ins;
/// woken with its word still Claimed, it does that again. The start of run 2, under the lock,
/// carries it in and wakes it unless the mark is in place (`Remote::wake_carried_unless_marked`).
/// A stand-in, in run 2 once the sleeper is carried, enters its open core, routes its inbox and
/// either lends itself everything (the word given back) or leaves the events queued for the
/// sleeper (the word left Held, the sleeper taken out of the parked state: `Core::stand_in`).
/// A post of run 2 comes at any moment. With or without a message waiting at the park, and
/// either stand-in: the sleeper is never left asleep with work for it (loom reports it parked
/// forever as a deadlock; a sleeper with nothing left, the stand-in having taken it all, is
/// woken at the end as the next run or the runtime's drop would). It was left so when the
/// start looked at the messages instead of the mark and the stand-in had routed them first.
#[test]
fn loom_a_sleeper_carried_in_without_its_mark_is_woken_though_a_stand_in_routed_its_inbox() {
    use crate::run_end::{carry, hold, park_between, release, resolve, Woke};
    use crate::stand_in::is_open;
    for (waiting, lends_all) in [(true, true), (true, false), (false, true), (false, false)] {
        model(move || {
            let remote = model_remote();
            let total = 1 + usize::from(waiting);
            if waiting {
                send(&remote, false, 1);
            }
            // The gate's lock, and the last run started.
            let gate = Arc::new(Mutex::new(()));
            let latest = Arc::new(AtomicUsize::new(1));
            let parked = Arc::new(AtomicUsize::new(0));
            let unparked = Arc::new(AtomicBool::new(false));
            // Events the stand-in queued for the sleeper, and events it lent itself.
            let queued = Arc::new(AtomicUsize::new(0));
            let stood_in = Arc::new(AtomicUsize::new(0));
            let sleeper = {
                let (r, g, l, p) = (remote.clone(), gate.clone(), latest.clone(), parked.clone());
                let (u, q, st) = (unparked.clone(), queued.clone(), stood_in.clone());
                loom::thread::spawn(move || {
                    loop {
                        {
                            let _g = g.lock().unwrap();
                            if l.load(Ordering::SeqCst) != 1 {
                                break; // Through the gate into run 2.
                            }
                            let _ = r.poke.inbox.try_sleep(false);
                            park_between(&r.poke.sleeper, 1);
                        }
                        // Open to stand-ins while it sleeps (`idle::park`).
                        let window = &r.stand_in.gate;
                        let open = window.open(window.look(), false);
                        r.parker.park(None);
                        window.close(open);
                        r.poke.inbox.woke(false);
                        match resolve(&r.poke.sleeper, 1) {
                            Woke::InRun(2) => {
                                if !u.swap(false, Ordering::SeqCst) {
                                    p.fetch_sub(1, Ordering::SeqCst);
                                }
                                break;
                            }
                            Woke::Claimed(1) => continue,
                            other => panic!("woke as {other:?}"),
                        }
                    }
                    // In run 2: it runs what the stand-in queued and takes what waits, asleep
                    // with its mark in between, until every message is taken (the stand-in's
                    // figures are final: its only windows are closed).
                    let mut got = q.load(Ordering::SeqCst);
                    loop {
                        got += tags(&r.poke.inbox).len();
                        if got + st.load(Ordering::SeqCst) == total {
                            return;
                        }
                        if r.poke.inbox.try_sleep(false) {
                            r.parker.park(None);
                            r.poke.inbox.woke(false);
                        }
                    }
                })
            };
            // It sleeps between runs (a window open) when the others come.
            while !is_open(remote.stand_in.gate.look()) {
                loom::thread::yield_now();
            }
            let stand_in = {
                let (r, p, u, q, st) = (
                    remote.clone(),
                    parked.clone(),
                    unparked.clone(),
                    queued.clone(),
                    stood_in.clone(),
                );
                loom::thread::spawn(move || {
                    let window = &r.stand_in.gate;
                    let seen = window.look();
                    if !is_open(seen) {
                        return;
                    }
                    let Some(entered) = window.enter(seen) else { return };
                    // Only into a sleeper of its own run: carried, Claimable(2).
                    if hold(&r.poke.sleeper, 2) {
                        let n = tags(&r.poke.inbox).len();
                        if lends_all || n == 0 {
                            st.store(n, Ordering::SeqCst);
                            release(&r.poke.sleeper, 2);
                        } else {
                            q.store(n, Ordering::SeqCst);
                            p.fetch_sub(1, Ordering::SeqCst);
                            u.store(true, Ordering::SeqCst);
                        }
                    }
                    drop(entered);
                })
            };
            let r = remote.clone();
            let poster = loom::thread::spawn(move || send(&r, false, 2));
            // The start of run 2.
            {
                let _g = gate.lock().unwrap();
                if carry(&remote.poke.sleeper, 2, &parked) {
                    remote.wake_carried_unless_marked(false);
                }
                latest.store(2, Ordering::SeqCst);
            }
            poster.join().unwrap();
            stand_in.join().unwrap();
            if stood_in.load(Ordering::SeqCst) == total {
                remote.parker.unpark();
            }
            sleeper.join().unwrap();
            assert_eq!(parked.load(Ordering::SeqCst), 0, "counted parked until it woke");
        });
    }
}

/// The stand-in gate (`stand_in`): an owner that opens and closes its core around two handlers
/// and a stand-in that looks once and enters the window it saw, if still open, are never both
/// in the core (a loom cell: loom fails the model on concurrent access, and on a read that no
/// release/acquire pair orders after the write it reads). Both of the gate's fences are
/// `SeqCst` fences here: the owner's compiler fence paired with the stand-in's `membarrier` is
/// outside the language's memory model, and rests on the kernel's guarantee that the system
/// call makes every running thread of the process execute a full fence.
#[test]
fn loom_the_stand_in_gate_excludes_the_owner_and_passes_its_writes() {
    use crate::stand_in::{is_open, Gate};
    use loom::cell::UnsafeCell;
    model(|| {
        let gate = Arc::new(Gate::default());
        // The core: the owner's count of its own writes, and the stand-in's.
        let core = Arc::new(UnsafeCell::new((0u32, 0u32)));
        let (g, c) = (gate.clone(), core.clone());
        let stand_in = loom::thread::spawn(move || {
            let seen = g.look();
            if !is_open(seen) {
                return None;
            }
            let entered = g.enter(seen)?;
            // SAFETY (of the model): the gate says no one else is in.
            let owner_wrote = c.with_mut(|p| unsafe {
                (*p).1 += 1;
                (*p).0
            });
            drop(entered);
            Some(owner_wrote)
        });
        let mut word = gate.look();
        for _ in 0..2 {
            core.with_mut(|p| unsafe { (*p).0 += 1 });
            let open = gate.open(word, true);
            // (A handler runs: the owner touches nothing.)
            gate.close(open);
            word = open | 1;
            core.with(|p| unsafe { assert!((*p).1 <= 1) });
        }
        let stood = stand_in.join().unwrap();
        let (owner, stand_ins) = core.with(|p| unsafe { *p });
        assert_eq!(owner, 2);
        assert_eq!(stand_ins, u32::from(stood.is_some()));
        if let Some(wrote) = stood {
            assert!(wrote >= 1, "the stand-in saw the core as the owner left it when it opened");
        }
    });
}

/// The gate's window closed and opened again around a borrow made inside it (every `post` of a
/// handler: `CoreCell`), against two stand-ins competing for it: no two of the three are ever
/// in the core at once.
#[test]
fn loom_a_borrow_inside_a_window_and_two_stand_ins_never_meet_in_the_core() {
    use crate::stand_in::{is_open, Gate};
    use loom::cell::UnsafeCell;
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let gate = Arc::new(Gate::default());
        let core = Arc::new(UnsafeCell::new(0u32));
        let stand_in = |g: Arc<Gate>, c: Arc<UnsafeCell<u32>>| {
            move || {
                let seen = g.look();
                if is_open(seen) {
                    if let Some(entered) = g.enter(seen) {
                        // SAFETY (of the model): the gate says no one else is in.
                        c.with_mut(|p| unsafe { *p += 1 });
                        drop(entered);
                    }
                }
            }
        };
        let a = loom::thread::spawn(stand_in(gate.clone(), core.clone()));
        let b = loom::thread::spawn(stand_in(gate.clone(), core.clone()));
        let open = gate.open(gate.look(), true);
        // A post inside the handler: the window closes for the borrow, then opens again.
        gate.close(open);
        core.with_mut(|p| unsafe { *p += 1 });
        gate.reopen(open);
        gate.close(open);
        core.with_mut(|p| unsafe { *p += 1 });
        a.join().unwrap();
        b.join().unwrap();
    });
}
