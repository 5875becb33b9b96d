//! A worker's inbox: where other workers and outside threads deliver messages.
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
//! message pushed is taken exactly once or dropped with the inbox.
//!
//! Wake-up pairing: a sender's push (SeqCst CAS, or the mutex) is followed by its SeqCst load of
//! the receiver's `sleeping` flag (`idle`); the receiver's SeqCst store of that flag is followed by
//! [`Inbox::is_empty`]. One of the two sees the other, so no message is left behind a sleeper.

use std::collections::VecDeque;
use std::ptr;

use crate::message::Msg;
use crate::sync::{lock, AtomicPtr, Mutex, Ordering};

struct Node {
    msgs: Vec<Msg>,
    next: *mut Node,
}

/// The inbox of one worker.
pub(crate) struct Inbox {
    head: AtomicPtr<Node>,
    locked: Mutex<VecDeque<Msg>>,
}

// SAFETY: the raw pointers in the stack are owned by the inbox and only reached through the atomic
// head; the messages they hold are `Send` (closures are `Send`). Sharing the inbox between threads
// is its purpose.
unsafe impl Send for Inbox {}
// SAFETY: see above; all access to nodes goes through atomic operations that hand over ownership.
unsafe impl Sync for Inbox {}

impl Inbox {
    pub(crate) fn new() -> Self {
        Inbox { head: AtomicPtr::new(ptr::null_mut()), locked: Mutex::new(VecDeque::new()) }
    }

    /// Delivers a batch with one synchronization. Empty batches are ignored.
    pub(crate) fn push_batch(&self, msgs: Vec<Msg>) {
        if msgs.is_empty() {
            return;
        }
        let node = Box::into_raw(Box::new(Node { msgs, next: ptr::null_mut() }));
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` came from `Box::into_raw` above and is not shared until the CAS below
            // succeeds, so writing its `next` field is exclusive.
            unsafe { (*node).next = head };
            // SeqCst on success pairs with the receiver's SeqCst store of `sleeping` (module doc);
            // it also releases the node's contents to the consumer's swap.
            match self.head.compare_exchange_weak(head, node, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(current) => head = current,
            }
        }
    }

    /// Delivers one message under the lock (the libasync-smp transport).
    pub(crate) fn push_locked(&self, msg: Msg) {
        lock(&self.locked).push_back(msg);
    }

    /// Takes every batch delivered so far, oldest first. Only the owning worker calls this (or the
    /// runtime while no worker runs): the single-consumer side of the protocol.
    pub(crate) fn take_batches(&self) -> Batches {
        // Acquire pairs with the senders' successful CAS: their node contents are visible.
        let mut cur = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        // Reverse the list in place so that iteration goes oldest first.
        let mut prev = ptr::null_mut();
        while !cur.is_null() {
            // SAFETY: the swap made this list ours alone; each node came from `Box::into_raw`
            // and is visited once.
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
        lock(&self.locked).pop_front()
    }

    /// True if nothing is waiting in either transport. SeqCst: see the module doc.
    pub(crate) fn is_empty(&self, locked_transport: bool) -> bool {
        if !self.head.load(Ordering::SeqCst).is_null() {
            return false;
        }
        !locked_transport || lock(&self.locked).is_empty()
    }

    /// Cheap check for spinning workers: a relaxed look at the stack head only (spinners on the
    /// locked transport also look at the queue).
    pub(crate) fn looks_empty(&self, locked_transport: bool) -> bool {
        self.head.load(Ordering::Relaxed).is_null()
            && (!locked_transport || lock(&self.locked).is_empty())
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

impl Iterator for Batches {
    type Item = Vec<Msg>;

    fn next(&mut self) -> Option<Vec<Msg>> {
        if self.cur.is_null() {
            return None;
        }
        // SAFETY: `cur` is a node of a list that `take_batches` detached and owns; it came from
        // `Box::into_raw` and is turned back into a box exactly once, here.
        let node = unsafe { Box::from_raw(self.cur) };
        self.cur = node.next;
        Some(node.msgs)
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
        let task: Task = Box::new(|| {});
        Msg::Post { color: Color(tag), task, urgent: false }
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
    fn batches_come_out_oldest_first() {
        let inbox = Inbox::new();
        assert!(inbox.is_empty(false));
        inbox.push_batch(vec![post(1), post(2)]);
        inbox.push_batch(vec![]);
        inbox.push_batch(vec![post(3)]);
        assert!(!inbox.is_empty(false));
        assert_eq!(tags(inbox.take_batches()), vec![1, 2, 3]);
        assert!(inbox.is_empty(false));
        assert_eq!(tags(inbox.take_batches()), Vec::<u64>::new());
    }

    #[test]
    fn locked_fifo() {
        let inbox = Inbox::new();
        inbox.push_locked(post(7));
        inbox.push_locked(post(8));
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
            let task: Task = Box::new(move || drop(w));
            inbox.push_batch(vec![Msg::Post { color: Color(1), task, urgent: false }]);
        }
        let partial = inbox.take_batches();
        let w = witness.clone();
        let task: Task = Box::new(move || drop(w));
        inbox.push_batch(vec![Msg::Post { color: Color(2), task, urgent: false }]);
        drop(partial);
        drop(inbox);
        assert_eq!(Arc::strong_count(&witness), 1, "every closure was dropped exactly once");
    }

    #[test]
    fn concurrent_senders_keep_their_order() {
        use std::sync::Arc;
        let inbox = Arc::new(Inbox::new());
        let senders = 4u64;
        let per = 5_000u64;
        let threads: Vec<_> = (0..senders)
            .map(|s| {
                let inbox = inbox.clone();
                std::thread::spawn(move || {
                    for i in 0..per {
                        inbox.push_batch(vec![post(s << 32 | i)]);
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
