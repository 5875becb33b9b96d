//! A worker's timers: a hashed timing wheel.
//!
//! 4096 slots of 100 µs: a timer due at tick `t` waits in slot `t % 4096` with its absolute tick;
//! each tick the wheel visits one slot and fires the timers of that slot that are due, keeping the
//! others (due a revolution or more later). Insertion and cancellation are O(1): an entry lives in
//! a slab, the slot keeps only its key and generation, and a cancelled entry leaves a stale key
//! that the slot drops on its next visit. A bitmap of non-empty slots gives the next deadline (for
//! the poller's timeout) in at most 64 word scans.
//!
//! Resolution: timers fire on the first wheel advance at or after their deadline, rounded up to
//! the next 100 µs tick; the worker advances the wheel once per round and sleeps no longer than
//! the next deadline (with a nanosecond timeout), so a timer fires at most one tick plus one
//! round late. (A millisecond tick made an open-loop injector's send times, and so its
//! latencies, a millisecond coarse.)

use std::time::{Duration, Instant};

use slab::Slab;

use crate::message::Task;
use crate::Color;

const SLOTS: usize = 4096;
const TICK: Duration = Duration::from_micros(100);

struct Entry {
    due: u64,
    generation: u32,
    color: Color,
    task: Task,
}

/// Identifies a timer in a wheel: slab key and generation (so a reused key is not confused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimerKey {
    pub(crate) key: u32,
    pub(crate) generation: u32,
}

/// The timers of one worker.
pub(crate) struct Wheel {
    start: Instant,
    /// Last tick visited.
    now: u64,
    entries: Slab<Entry>,
    /// Empty until the first timer: a worker that never sets one (most of a data-parallel
    /// job's) does not make 4096 of them, 96 KiB written at each runtime's build.
    slots: Vec<Vec<TimerKey>>,
    occupied: [u64; SLOTS / 64],
    next_generation: u32,
}

impl Wheel {
    pub(crate) fn new(start: Instant) -> Wheel {
        Wheel {
            start,
            now: 0,
            entries: Slab::new(),
            slots: Vec::new(),
            occupied: [0; SLOTS / 64],
            next_generation: 0,
        }
    }

    /// Live timers.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The tick a deadline belongs to, rounded up: a timer never fires before its deadline.
    fn tick_of(&self, at: Instant) -> u64 {
        let d = at.saturating_duration_since(self.start);
        d.as_nanos().div_ceil(TICK.as_nanos()) as u64
    }

    /// The last tick that has fully elapsed at `now`.
    fn elapsed_ticks(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.start).as_nanos() / TICK.as_nanos()) as u64
    }

    /// Schedules `task` as an event of `color` at `at`.
    pub(crate) fn insert(&mut self, at: Instant, color: Color, task: Task) -> TimerKey {
        let due = self.tick_of(at).max(self.now + 1);
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1);
        let key = self.entries.insert(Entry { due, generation, color, task }) as u32;
        let tk = TimerKey { key, generation };
        let slot = (due % SLOTS as u64) as usize;
        if self.slots.is_empty() {
            self.slots.resize_with(SLOTS, Vec::new);
        }
        self.slots[slot].push(tk);
        self.occupied[slot / 64] |= 1 << (slot % 64);
        tk
    }

    /// Cancels a timer; returns its event if it had not fired (so the caller drops it).
    pub(crate) fn cancel(&mut self, tk: TimerKey) -> Option<(Color, Task)> {
        match self.entries.get(tk.key as usize) {
            Some(e) if e.generation == tk.generation => {
                let e = self.entries.remove(tk.key as usize);
                Some((e.color, e.task))
            }
            _ => None,
        }
    }

    /// Advances to `now`, appending the events of the timers due to `fired`, in deadline order.
    pub(crate) fn advance(&mut self, now: Instant, fired: &mut Vec<(Color, Task)>) {
        let target = self.elapsed_ticks(now).max(self.now);
        if self.entries.is_empty() {
            self.now = target;
            return;
        }
        let first = fired.len();
        let mut due: Vec<(u64, u32, usize)> = Vec::new();
        // Visit every slot between the last tick and now, each at most once: whatever the gap,
        // every entry due by `target` is found (the sort below restores deadline order).
        let steps = (target - self.now).min(SLOTS as u64);
        for i in 1..=steps {
            let slot = ((self.now + i) % SLOTS as u64) as usize;
            if self.occupied[slot / 64] & (1 << (slot % 64)) == 0 {
                continue;
            }
            let entries = &self.entries;
            let keys = &mut self.slots[slot];
            keys.retain(|tk| match entries.get(tk.key as usize) {
                Some(e) if e.generation == tk.generation => {
                    if e.due <= target {
                        due.push((e.due, e.generation, tk.key as usize));
                        false
                    } else {
                        true
                    }
                }
                _ => false, // cancelled: the stale key goes
            });
            if keys.is_empty() {
                self.occupied[slot / 64] &= !(1 << (slot % 64));
            }
        }
        self.now = target;
        // Deadline order, then creation order within a tick.
        due.sort_unstable_by_key(|&(t, g, _)| (t, g));
        for (_, _, key) in due {
            let e = self.entries.remove(key);
            fired.push((e.color, e.task));
        }
        debug_assert!(fired.len() >= first);
    }

    /// When the next timer may be due (an upper bound on the time the worker may sleep), or
    /// `None` if there is none.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        if self.entries.is_empty() {
            return None;
        }
        let start_slot = ((self.now + 1) % SLOTS as u64) as usize;
        for d in 0..SLOTS {
            let slot = (start_slot + d) % SLOTS;
            let word = self.occupied[slot / 64];
            if word == 0 {
                continue;
            }
            if word & (1 << (slot % 64)) != 0 {
                let ticks = self.now + 1 + d as u64;
                return Some(self.start + Duration::from_nanos(TICK.as_nanos() as u64 * ticks));
            }
        }
        None
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn task(log: &Arc<Mutex<Vec<u32>>>, v: u32) -> Task {
        let log = log.clone();
        Task::new(move || log.lock().unwrap().push(v))
    }

    fn fire(w: &mut Wheel, at: Instant) -> Vec<(Color, Task)> {
        let mut out = Vec::new();
        w.advance(at, &mut out);
        out
    }

    #[test]
    fn a_wheel_makes_its_slots_at_its_first_timer() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0);
        assert!(w.slots.is_empty(), "a worker without timers writes none of them");
        assert!(fire(&mut w, t0 + Duration::from_secs(1)).is_empty());
        let log = Arc::new(Mutex::new(Vec::new()));
        w.insert(t0 + Duration::from_millis(1), Color(1), task(&log, 1));
        assert_eq!(w.slots.len(), SLOTS);
        let fired = fire(&mut w, t0 + Duration::from_secs(2));
        assert_eq!(fired.len(), 1);
    }

    #[test]
    fn timers_fire_in_deadline_order_and_not_before() {
        let t0 = Instant::now();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut w = Wheel::new(t0);
        let ms = Duration::from_millis;
        w.insert(t0 + ms(30), Color(1), task(&log, 30));
        w.insert(t0 + ms(10), Color(1), task(&log, 10));
        w.insert(t0 + ms(20), Color(2), task(&log, 20));
        w.insert(t0 + ms(10), Color(3), task(&log, 11));
        assert_eq!(w.len(), 4);
        assert!(fire(&mut w, t0 + ms(9)).is_empty(), "nothing is due yet");
        let next = w.next_deadline().unwrap();
        assert!(next >= t0 + ms(10) && next <= t0 + ms(11), "{:?}", next - t0);
        for (_, t) in fire(&mut w, t0 + ms(25)) {
            t.run();
        }
        assert_eq!(*log.lock().unwrap(), vec![10, 11, 20]);
        for (_, t) in fire(&mut w, t0 + ms(31)) {
            t.run();
        }
        assert_eq!(*log.lock().unwrap(), vec![10, 11, 20, 30]);
        assert_eq!(w.len(), 0);
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn cancelled_timers_never_fire_and_their_keys_are_not_confused() {
        let t0 = Instant::now();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut w = Wheel::new(t0);
        let ms = Duration::from_millis;
        let a = w.insert(t0 + ms(5), Color(1), task(&log, 1));
        assert!(w.cancel(a).is_some());
        assert!(w.cancel(a).is_none(), "cancel twice");
        // The slab key is reused by a new timer: the old key must not cancel it.
        let b = w.insert(t0 + ms(5), Color(1), task(&log, 2));
        assert_eq!(a.key, b.key);
        assert!(w.cancel(a).is_none());
        for (_, t) in fire(&mut w, t0 + ms(10)) {
            t.run();
        }
        assert_eq!(*log.lock().unwrap(), vec![2]);
    }

    #[test]
    fn long_timers_survive_revolutions_and_late_advances_catch_up() {
        let t0 = Instant::now();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut w = Wheel::new(t0);
        let ms = Duration::from_millis;
        w.insert(t0 + ms(10_000), Color(1), task(&log, 10_000)); // 2.4 revolutions
        w.insert(t0 + ms(100), Color(1), task(&log, 100));
        assert!(fire(&mut w, t0 + ms(5000)).len() == 1, "the short one, late");
        assert!(fire(&mut w, t0 + ms(9_990)).is_empty());
        assert_eq!(fire(&mut w, t0 + ms(20_000)).len(), 1, "a long gap visits every slot");
    }

    #[test]
    fn a_timer_in_the_past_fires_at_the_next_advance() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0 + Duration::from_millis(50));
        let log = Arc::new(Mutex::new(Vec::new()));
        w.insert(t0, Color(1), task(&log, 1));
        assert_eq!(fire(&mut w, t0 + Duration::from_millis(52)).len(), 1);
    }
}
