//! A worker's inbox: where other workers and outside threads deliver messages, and where the
//! owner announces that it goes to sleep.
//!
//! Two transports, chosen by [`Config::batching`](crate::Config):
//!
//! * **Batches** (default): a lock-free stack of batches. A sender pushes a whole batch with one
//!   compare-and-swap; the owner takes *every* pending batch with one swap and reverses the list,
//!   so it gets them oldest first. No ABA problem: nodes are only ever removed all at once by the
//!   single consumer, never popped one by one.
//! * **Locked** (libasync-smp): a mutex-protected FIFO, locked once per posted event by the sender
//!   and once per event by the receiver.
//!
//! Invariants: messages from one sender are received in the order sent (one thread's pushes are
//! ordered in the stack's modification order, and the consumer reverses each taken list); every
//! message pushed is taken exactly once or dropped with the inbox; every batch names the worker
//! that sent it (or [`OUTSIDE`]), to which the receiver may give the emptied buffer back.
//!
//! ## Sleeping on the inbox
//!
//! The stack head has three kinds of values: null (empty, owner awake), [`SLEEPING`] (empty, owner
//! asleep or about to be) and a node (messages waiting). The owner goes to sleep only by a
//! compare-and-swap from null to `SLEEPING` ([`Inbox::try_sleep`]), which fails if anything was
//! pushed; a sender's push replaces whatever head it finds, and *the head it replaced* says whether
//! the owner sleeps: if it was `SLEEPING`, the sender must unpark the owner. One location, one
//! modification order: a push either comes before the owner's CAS (which then fails) or after it
//! (and sees `SLEEPING`). So no wake-up is lost, exactly one sender pays for the wake-up, and a
//! sender to an awake worker pays nothing beyond its push. The locked transport does the same under
//! its mutex with an `asleep` flag. (The parker's sticky token covers an unpark that lands before
//! the owner's `park` call.)
use std::collections::VecDeque;
use std::ptr;

use crate::message::Msg;
use crate::sync::{lock, AtomicPtr, Mutex, Ordering};

/// The sender of a batch that no worker sent (a post from a thread outside the runtime).
pub(crate) const OUTSIDE: usize = usize::MAX;

struct Node {
    msgs: Vec<Msg>,
    from: Sender,
    next: *mut Node,
}

/// Who sent a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sender {
    /// The sending worker, or [`OUTSIDE`] (the receiver gives the spent buffer back to it:
    /// `outbox`).
    pub(crate) id: usize,
    /// The sender had nothing else to run when it sent the batch (`follow`: its receivers may
    /// move to it).
    pub(crate) quiet: bool,
    /// Colors waiting or running on the sender when it sent the batch (`follow`: a chain's step
    /// moves its color only to a poster with no more waiting than the home, counted there
    /// without the color it runs, if any). Carried, not read from the
    /// sender's published count: that one is refreshed at the end of rounds, and a handler that
    /// posted one long event to another worker and one to its own saw the remote one pulled
    /// over behind the local one as if its worker were free (a user's fork of two events).
    pub(crate) ready: u32,
}

impl Sender {
    /// A batch from worker `id` that says nothing of the sender's load.
    pub(crate) fn worker(id: usize) -> Sender {
        Sender { id, quiet: false, ready: 0 }
    }
}

/// The head value that says "empty, and the owner sleeps". Never dereferenced, and never the
/// address of a live node: a dangling, well-aligned address that `Box` does not hand out for a
/// sized, non-zero-sized type.
const SLEEPING: *mut Node = std::ptr::dangling_mut::<Node>();

fn is_node(p: *mut Node) -> bool {
    !p.is_null() && p != SLEEPING
}

struct Locked {
    msgs: VecDeque<Msg>,
    asleep: bool,
}

/// The inbox of one worker.
pub(crate) struct Inbox {
    head: AtomicPtr<Node>,
    locked: Mutex<Locked>,
}

// SAFETY: the raw pointers in the stack are owned by the inbox and only reached through the atomic
// head; the messages they hold are `Send` (closures are `Send`). Sharing the inbox between threads
// is its purpose.
unsafe impl Send for Inbox {}
// SAFETY: see above; all access to nodes goes through atomic operations that hand over ownership.
unsafe impl Sync for Inbox {}

impl Inbox {
    pub(crate) fn new() -> Self {
        Inbox {
            head: AtomicPtr::new(ptr::null_mut()),
            locked: Mutex::new(Locked { msgs: VecDeque::new(), asleep: false }),
        }
    }

    /// Delivers a batch from worker `from` with one synchronization. Returns true if the owner
    /// was asleep: the caller must then unpark it. Empty batches are ignored.
    #[must_use = "a sleeping owner must be unparked"]
    pub(crate) fn push_batch(&self, msgs: Vec<Msg>, from: Sender) -> bool {
        if msgs.is_empty() {
            return false;
        }
        let node = Box::into_raw(Box::new(Node { msgs, from, next: ptr::null_mut() }));
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            let next = if head == SLEEPING { ptr::null_mut() } else { head };
            // SAFETY: `node` came from `Box::into_raw` above and is not shared until the CAS below
            // succeeds, so writing its `next` field is exclusive.
            unsafe { (*node).next = next };
            // Release makes the node's contents visible to the owner's Acquire swap; Acquire
            // orders our unpark after the owner's announcement of sleep.
            match self.head.compare_exchange_weak(head, node, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(previous) => return previous == SLEEPING,
                Err(current) => head = current,
            }
        }
    }

    /// Delivers one message under the lock (the libasync-smp transport). Returns true if the owner
    /// was asleep: the caller must then unpark it.
    #[must_use = "a sleeping owner must be unparked"]
    pub(crate) fn push_locked(&self, msg: Msg) -> bool {
        let mut q = lock(&self.locked);
        q.msgs.push_back(msg);
        std::mem::replace(&mut q.asleep, false)
    }

    /// Takes and releases the FIFO's lock twice: what libasync-smp paid for an event posted to
    /// the queue of the worker it runs on (its per-core queue was a locked one, locked to push
    /// the event and again to pop it).
    pub(crate) fn touch_locked(&self) {
        drop(lock(&self.locked));
        drop(lock(&self.locked));
    }

    /// The owner announces that it goes to sleep. Returns false, announcing nothing, if messages
    /// are waiting. After true, the owner calls [`woke`](Inbox::woke) when it wakes.
    pub(crate) fn try_sleep(&self, locked_transport: bool) -> bool {
        if locked_transport {
            let mut q = lock(&self.locked);
            if !q.msgs.is_empty() {
                return false;
            }
            q.asleep = true;
            return true;
        }
        // A node pushed before this makes it fail; one pushed after sees `SLEEPING`.
        self.head
            .compare_exchange(ptr::null_mut(), SLEEPING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The owner is awake again: withdraws its announcement if no sender did.
    pub(crate) fn woke(&self, locked_transport: bool) {
        if locked_transport {
            lock(&self.locked).asleep = false;
            return;
        }
        let _ = self.head.compare_exchange(
            SLEEPING,
            ptr::null_mut(),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Marks a sleeping owner awake without delivering anything; returns true if it was asleep
    /// (the caller must then unpark it). A hint: an owner just about to sleep is missed.
    pub(crate) fn rouse(&self, locked_transport: bool) -> bool {
        if locked_transport {
            return std::mem::replace(&mut lock(&self.locked).asleep, false);
        }
        self.head
            .compare_exchange(SLEEPING, ptr::null_mut(), Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Takes every batch delivered so far, oldest first. Only the owning worker calls this (or the
    /// runtime while no worker runs): the single-consumer side of the protocol.
    pub(crate) fn take_batches(&self) -> Batches {
        // Nothing to take: leave the head alone (a `SLEEPING` mark stays in place).
        if !is_node(self.head.load(Ordering::Relaxed)) {
            return Batches { cur: ptr::null_mut() };
        }
        // Acquire pairs with the senders' successful CAS: their node contents are visible.
        let mut cur = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        if !is_node(cur) {
            cur = ptr::null_mut();
        }
        // Reverse the list in place so that iteration goes oldest first.
        let mut prev = ptr::null_mut();
        while !cur.is_null() {
            // SAFETY: the swap made this list ours alone; each node came from `Box::into_raw`
            // and is visited once. Lists never contain `SLEEPING` (`push_batch` replaces it by
            // null in `next`).
            let next = unsafe { (*cur).next };
            // SAFETY: as above.
            unsafe { (*cur).next = prev };
            prev = cur;
            cur = next;
        }
        Batches { cur: prev }
    }

    /// Takes one message from the locked FIFO (libasync-smp: one lock per event).
    pub(crate) fn pop_locked(&self) -> Option<Msg> {
        lock(&self.locked).msgs.pop_front()
    }

    /// Whether the owner's sleep mark is in place: [`try_sleep`](Inbox::try_sleep) succeeded
    /// and no push, no [`woke`](Inbox::woke) and no [`rouse`](Inbox::rouse) took the mark
    /// since, so the next push wakes the owner (a snapshot, as [`is_empty`](Inbox::is_empty)).
    pub(crate) fn marked_asleep(&self, locked_transport: bool) -> bool {
        if locked_transport {
            return lock(&self.locked).asleep;
        }
        self.head.load(Ordering::Acquire) == SLEEPING
    }

    /// True if nothing is waiting in either transport (a snapshot: a push may land right after).
    pub(crate) fn is_empty(&self, locked_transport: bool) -> bool {
        !is_node(self.head.load(Ordering::Relaxed))
            && (!locked_transport || lock(&self.locked).msgs.is_empty())
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        // Dropping the taken batches frees every node and drops undelivered messages.
        drop(self.take_batches());
    }
}

/// Batches taken from an inbox, oldest first. Frees nodes as it goes; dropping it drops what is
/// left.
pub(crate) struct Batches {
    cur: *mut Node,
}

impl Batches {
    /// The next batch, oldest first, with the worker that sent it.
    pub(crate) fn next_with_sender(&mut self) -> Option<(Sender, Vec<Msg>)> {
        if self.cur.is_null() {
            return None;
        }
        // SAFETY: `cur` is a node of a list that `take_batches` detached and owns; it came from
        // `Box::into_raw` and is turned back into a box exactly once, here.
        let mut node = unsafe { Box::from_raw(self.cur) };
        self.cur = node.next;
        let batch = (node.from, std::mem::take(&mut node.msgs));
        // Under loom a node's memory is never given back: a later node at the same address made
        // the push's compare-and-swap on the head succeed or fail by the allocator's reuse, which
        // differs between iterations of a model ("Reached unexpected exploration state": the
        // color-move model failed so after other models had run in the same process).
        #[cfg(loom)]
        std::mem::forget(node);
        Some(batch)
    }
}

impl Iterator for Batches {
    type Item = Vec<Msg>;

    fn next(&mut self) -> Option<Vec<Msg>> {
        self.next_with_sender().map(|(_, msgs)| msgs)
    }
}

impl Drop for Batches {
    fn drop(&mut self) {
        for _ in self.by_ref() {}
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::message::Task;
    use crate::Color;

    fn post(tag: u64) -> Msg {
        let task = Task::new(|| {});
        Msg::Post { color: Color(tag), task, urgent: false, step: false }
    }

    fn tags(b: Batches) -> Vec<u64> {
        b.flat_map(|v| v.into_iter())
            .map(|m| match m {
                Msg::Post { color, .. } => color.0,
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn batches_name_their_sender() {
        let inbox = Inbox::new();
        assert!(!inbox.push_batch(vec![post(1)], Sender { id: 3, quiet: true, ready: 0 }));
        assert!(!inbox.push_batch(vec![post(2), post(3)], Sender::worker(OUTSIDE)));
        let mut batches = inbox.take_batches();
        let senders: Vec<(Sender, usize)> =
            std::iter::from_fn(|| batches.next_with_sender()).map(|(f, m)| (f, m.len())).collect();
        assert_eq!(
            senders,
            vec![(Sender { id: 3, quiet: true, ready: 0 }, 1), (Sender::worker(OUTSIDE), 2)]
        );
    }

    #[test]
    fn batches_come_out_oldest_first() {
        let inbox = Inbox::new();
        assert!(inbox.is_empty(false));
        assert!(!inbox.push_batch(vec![post(1), post(2)], Sender::worker(0)));
        assert!(!inbox.push_batch(vec![], Sender::worker(0)));
        assert!(!inbox.push_batch(vec![post(3)], Sender::worker(0)));
        assert!(!inbox.is_empty(false));
        assert_eq!(tags(inbox.take_batches()), vec![1, 2, 3]);
        assert!(inbox.is_empty(false));
        assert_eq!(tags(inbox.take_batches()), Vec::<u64>::new());
    }

    #[test]
    fn locked_fifo() {
        let inbox = Inbox::new();
        assert!(!inbox.push_locked(post(7)));
        assert!(!inbox.push_locked(post(8)));
        assert!(!inbox.is_empty(true));
        assert!(inbox.is_empty(false), "the batch stack is separate");
        let a = inbox.pop_locked().map(|m| matches!(m, Msg::Post { color: Color(7), .. }));
        assert_eq!(a, Some(true));
        assert!(inbox.pop_locked().is_some());
        assert!(inbox.pop_locked().is_none());
    }

    #[test]
    fn undelivered_messages_are_dropped_with_the_inbox() {
        use std::sync::Arc;
        let witness = Arc::new(());
        let inbox = Inbox::new();
        for _ in 0..3 {
            let w = witness.clone();
            let task = Task::new(move || drop(w));
            let _ = inbox.push_batch(
                vec![Msg::Post { color: Color(1), task, urgent: false, step: false }],
                Sender::worker(0),
            );
        }
        let partial = inbox.take_batches();
        let w = witness.clone();
        let task = Task::new(move || drop(w));
        let _ = inbox.push_batch(
            vec![Msg::Post { color: Color(2), task, urgent: false, step: false }],
            Sender::worker(0),
        );
        drop(partial);
        drop(inbox);
        assert_eq!(Arc::strong_count(&witness), 1, "every closure was dropped exactly once");
    }

    #[test]
    fn sleeping_owner_is_reported_to_exactly_one_sender() {
        for locked in [false, true] {
            let inbox = Inbox::new();
            assert!(inbox.try_sleep(locked));
            assert!(inbox.is_empty(locked));
            let first = if locked {
                inbox.push_locked(post(1))
            } else {
                inbox.push_batch(vec![post(1)], Sender::worker(0))
            };
            let second = if locked {
                inbox.push_locked(post(2))
            } else {
                inbox.push_batch(vec![post(2)], Sender::worker(0))
            };
            assert!(
                first && !second,
                "locked={locked}: the first sender wakes, the second need not"
            );
            inbox.woke(locked);
            assert!(!inbox.try_sleep(locked), "messages are waiting: no sleep");
            let got = if locked {
                std::iter::from_fn(|| inbox.pop_locked()).count()
            } else {
                tags(inbox.take_batches()).len()
            };
            assert_eq!(got, 2);
            assert!(inbox.try_sleep(locked));
            assert_eq!(tags(inbox.take_batches()).len(), 0, "taking leaves the mark alone");
            assert!(inbox.rouse(locked));
            assert!(!inbox.rouse(locked));
            inbox.woke(locked);
            assert!(inbox.try_sleep(locked), "awake and empty again");
        }
    }

    #[test]
    fn concurrent_senders_keep_their_order() {
        use std::sync::Arc;
        let inbox = Arc::new(Inbox::new());
        let senders = 4u64;
        let per = if cfg!(miri) { 100 } else { 5_000u64 };
        let threads: Vec<_> = (0..senders)
            .map(|s| {
                let inbox = inbox.clone();
                std::thread::spawn(move || {
                    for i in 0..per {
                        let _ = inbox.push_batch(vec![post(s << 32 | i)], Sender::worker(0));
                    }
                })
            })
            .collect();
        let mut next = vec![0u64; senders as usize];
        let mut seen = 0;
        while seen < senders * per {
            for tag in tags(inbox.take_batches()) {
                let (s, i) = ((tag >> 32) as usize, tag & 0xffff_ffff);
                assert_eq!(i, next[s], "sender {s} out of order");
                next[s] += 1;
                seen += 1;
            }
        }
        for t in threads {
            t.join().unwrap();
        }
    }
}
