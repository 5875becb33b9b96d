//! A worker's poller: one epoll instance and one eventfd to wake it.
//!
//! The epoll file descriptor is shared (registrations are added from any thread: `epoll_ctl` is
//! thread-safe); only the owning worker waits on it. The waker eventfd is registered
//! level-triggered under [`WAKER_TOKEN`], so a wake-up written while the worker was not waiting
//! makes the next wait return at once (a sticky token, like the parkers'), and the owner drains it
//! when it sees it.
//!
//! Sub-millisecond sleeps: `epoll_wait` (and `epoll_pwait` before Linux 5.11) takes its timeout
//! in whole milliseconds, which would round a 100 µs timer up to 1 ms. A wait whose timeout has a
//! sub-millisecond part therefore also arms a one-shot `timerfd` (nanosecond resolution, any
//! kernel since 2.6.25) registered under [`FINE_TOKEN`]; the millisecond timeout, rounded up,
//! stays as a backstop. A timerfd left armed by a wait that ended early is re-armed by the next
//! timed wait or disarmed before an untimed one, so it never causes a stray wake-up later.
//!
//! Registrations are edge-triggered (`EPOLLET`): the kernel reports each transition to ready
//! once, so the runtime never re-arms a descriptor and never busy-loops on a level; a handler must
//! therefore read or write until the operation would block (`io` module doc).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rustix::event::epoll::{self, CreateFlags, Event, EventData, EventFlags};
use rustix::event::{eventfd, EventfdFlags, Timespec};
use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
};

/// The token of the waker in the epoll set; registration tokens never take this value.
pub(crate) const WAKER_TOKEN: u64 = u64::MAX;
/// The token of the fine-timeout timerfd; registration tokens never take this value either.
pub(crate) const FINE_TOKEN: u64 = u64::MAX - 1;

/// Readiness reported for a descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    /// Reading will not block (data, end of file, or an error to read).
    pub readable: bool,
    /// Writing will not block.
    pub writable: bool,
    /// The peer hung up (`EPOLLHUP` / `EPOLLRDHUP`): reads will return end of file once drained.
    pub hangup: bool,
    /// An error is pending on the descriptor (`EPOLLERR`).
    pub error: bool,
}

impl Ready {
    pub(crate) fn from_flags(f: EventFlags) -> Ready {
        Ready {
            readable: f.intersects(EventFlags::IN | EventFlags::PRI),
            writable: f.contains(EventFlags::OUT),
            hangup: f.intersects(EventFlags::HUP | EventFlags::RDHUP),
            error: f.contains(EventFlags::ERR),
        }
    }

    /// Both readinesses together.
    pub fn merge(self, other: Ready) -> Ready {
        Ready {
            readable: self.readable || other.readable,
            writable: self.writable || other.writable,
            hangup: self.hangup || other.hangup,
            error: self.error || other.error,
        }
    }

    /// Nothing reported.
    pub fn is_empty(&self) -> bool {
        *self == Ready::default()
    }
}

/// What to watch a descriptor for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interest {
    read: bool,
    write: bool,
}

impl Interest {
    /// Readability (and hang-ups, errors).
    pub const READ: Interest = Interest { read: true, write: false };
    /// Writability (and errors).
    pub const WRITE: Interest = Interest { read: false, write: true };
    /// Both.
    pub const READ_WRITE: Interest = Interest { read: true, write: true };

    pub(crate) fn flags(self) -> EventFlags {
        let mut f = EventFlags::ET | EventFlags::ERR | EventFlags::HUP;
        if self.read {
            f |= EventFlags::IN | EventFlags::RDHUP;
        }
        if self.write {
            f |= EventFlags::OUT;
        }
        f
    }
}

/// A buffer for `epoll_wait`, owned by one worker.
#[derive(Default)]
pub(crate) struct EventBuf(Vec<Event>);

// SAFETY: `Event` is not `Send` only because its data union may hold a raw pointer; this runtime
// stores and reads only the `u64` variant (tokens), so moving the buffer between threads moves
// plain integers.
unsafe impl Send for EventBuf {}

/// The shared half: what other threads use to register descriptors and to wake the owner.
pub(crate) struct PollerHandle {
    epoll: OwnedFd,
    waker: OwnedFd,
    /// One-shot timer for sub-millisecond timeouts (module doc).
    fine: OwnedFd,
    /// Whether `fine` may still be armed; only the owner (the one waiter) reads or writes it.
    fine_armed: AtomicBool,
}

impl PollerHandle {
    pub(crate) fn new() -> io::Result<PollerHandle> {
        let epoll = epoll::create(CreateFlags::CLOEXEC)?;
        let waker = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        epoll::add(&epoll, &waker, EventData::new_u64(WAKER_TOKEN), EventFlags::IN)?;
        let fine = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK,
        )?;
        epoll::add(&epoll, &fine, EventData::new_u64(FINE_TOKEN), EventFlags::IN)?;
        Ok(PollerHandle { epoll, waker, fine, fine_armed: AtomicBool::new(false) })
    }

    /// Adds `fd` to the set, edge-triggered, under `token`.
    pub(crate) fn add(&self, fd: BorrowedFd<'_>, token: u64, interest: Interest) -> io::Result<()> {
        debug_assert!(token != WAKER_TOKEN && token != FINE_TOKEN);
        epoll::add(&self.epoll, fd, EventData::new_u64(token), interest.flags())?;
        Ok(())
    }

    /// Removes `fd` from the set.
    pub(crate) fn delete(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        epoll::delete(&self.epoll, fd)?;
        Ok(())
    }

    /// Wakes the owner out of `wait` (or makes its next `wait` return at once).
    pub(crate) fn wake(&self) {
        // A full counter (EAGAIN) already holds a wake-up.
        let _ = rustix::io::write(&self.waker, &1u64.to_ne_bytes());
    }

    /// Waits for readiness up to `timeout` (`None`: forever), appending `(token, ready)` pairs
    /// to `out`, the waker excluded (drained). Only the owning worker calls this.
    pub(crate) fn wait(
        &self,
        buf: &mut EventBuf,
        timeout: Option<Duration>,
        out: &mut Vec<(u64, Ready)>,
    ) -> io::Result<()> {
        let events = &mut buf.0;
        events.clear();
        if events.capacity() == 0 {
            events.reserve(256);
        }
        let ts = timeout.map(timespec);
        match timeout {
            Some(d) if !d.is_zero() && d.subsec_nanos() % 1_000_000 != 0 => self.arm_fine(ts),
            Some(d) if d.is_zero() => {}
            _ => {
                if self.fine_armed.load(Ordering::Relaxed) {
                    self.arm_fine(None);
                }
            }
        }
        match epoll::wait(&self.epoll, rustix::buffer::spare_capacity(events), ts.as_ref()) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        for ev in events.iter() {
            let token = ev.data.u64();
            if token == WAKER_TOKEN {
                let mut buf = [0u8; 8];
                let _ = rustix::io::read(&self.waker, &mut buf);
            } else if token == FINE_TOKEN {
                // Expired: reading the count clears the level; the timer is now disarmed.
                let mut buf = [0u8; 8];
                let _ = rustix::io::read(&self.fine, &mut buf);
                self.fine_armed.store(false, Ordering::Relaxed);
            } else {
                let flags = ev.flags;
                out.push((token, Ready::from_flags(flags)));
            }
        }
        Ok(())
    }
}

impl PollerHandle {
    /// Arms the fine timer to expire after `after` (`None`: disarms it). On failure the wait
    /// keeps its millisecond backstop, so a timer is late, never lost.
    fn arm_fine(&self, after: Option<Timespec>) {
        let zero = Timespec { tv_sec: 0, tv_nsec: 0 };
        let value = Itimerspec { it_interval: zero, it_value: after.unwrap_or(zero) };
        let ok = timerfd_settime(&self.fine, TimerfdTimerFlags::empty(), &value).is_ok();
        self.fine_armed.store(ok && after.is_some(), Ordering::Relaxed);
    }
}

fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}

impl AsFd for PollerHandle {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn readiness_of_a_pipe_is_reported_once_per_edge() {
        let p = PollerHandle::new().unwrap();
        let (r, w) = rustix::pipe::pipe().unwrap();
        p.add(r.as_fd(), 7, Interest::READ).unwrap();
        let (mut evs, mut out) = (EventBuf::default(), Vec::new());
        p.wait(&mut evs, Some(Duration::ZERO), &mut out).unwrap();
        assert!(out.is_empty());
        rustix::io::write(&w, b"x").unwrap();
        p.wait(&mut evs, Some(Duration::from_secs(5)), &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, 7);
        assert!(out[0].1.readable && !out[0].1.writable);
        // Edge-triggered: not reported again until new data arrives.
        out.clear();
        p.wait(&mut evs, Some(Duration::ZERO), &mut out).unwrap();
        assert!(out.is_empty());
        drop(w);
        p.wait(&mut evs, Some(Duration::from_secs(5)), &mut out).unwrap();
        assert!(out[0].1.hangup, "closing the writer is a hang-up: {:?}", out[0].1);
        p.delete(r.as_fd()).unwrap();
    }

    #[test]
    fn wake_interrupts_a_wait_and_is_sticky() {
        let p = std::sync::Arc::new(PollerHandle::new().unwrap());
        let (mut evs, mut out) = (EventBuf::default(), Vec::new());
        p.wake();
        let t = Instant::now();
        p.wait(&mut evs, Some(Duration::from_secs(5)), &mut out).unwrap();
        assert!(t.elapsed() < Duration::from_secs(4), "a pending wake-up returns at once");
        assert!(out.is_empty(), "the waker is not reported");
        let p2 = p.clone();
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            p2.wake();
        });
        let t = Instant::now();
        p.wait(&mut evs, Some(Duration::from_secs(5)), &mut out).unwrap();
        assert!(t.elapsed() < Duration::from_secs(4));
        waker.join().unwrap();
        // Drained: the next wait times out.
        let t = Instant::now();
        p.wait(&mut evs, Some(Duration::from_millis(20)), &mut out).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(15));
    }

    #[test]
    fn sub_millisecond_waits_use_the_fine_timer_and_leave_no_stray_wakeup() {
        let p = std::sync::Arc::new(PollerHandle::new().unwrap());
        let (mut evs, mut out) = (EventBuf::default(), Vec::new());
        // Loop until the fine timer itself ends a wait (a stray signal could end one early).
        let mut expired = false;
        for _ in 0..10 {
            let t = Instant::now();
            p.wait(&mut evs, Some(Duration::from_micros(300)), &mut out).unwrap();
            assert!(out.is_empty(), "the fine timer is not reported as a registration");
            if t.elapsed() >= Duration::from_micros(300) {
                expired = true;
                assert!(!p.fine_armed.load(Ordering::Relaxed), "an expired timer is disarmed");
                break;
            }
        }
        assert!(expired, "a timed wait does not return before its timeout");
        // A fine wait cut short by a wake-up leaves the timer armed ...
        p.wake();
        p.wait(&mut evs, Some(Duration::from_micros(2_500)), &mut out).unwrap();
        assert!(p.fine_armed.load(Ordering::Relaxed));
        // ... and an untimed wait disarms it first: only the real wake-up ends that wait.
        let p2 = p.clone();
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            p2.wake();
        });
        let t = Instant::now();
        p.wait(&mut evs, None, &mut out).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(20), "no stray wake-up from the old timer");
        waker.join().unwrap();
    }
}
