//! What travels between workers.
//!
//! An event is a boxed closure plus its color. Between workers, events and the control messages of
//! color lending travel as [`Msg`]. The lending protocol (see `queue`) relies on one property of
//! the transport: messages from one sender to one receiver arrive in the order they were sent.

use std::collections::VecDeque;

use crate::Color;

/// A handler with its arguments captured: what the thesis calls an event.
pub(crate) type Task = Box<dyn FnOnce() + Send + 'static>;

/// A message to a worker.
pub(crate) enum Msg {
    /// A new event for a color whose home is the receiver.
    Post { color: Color, task: Task, urgent: bool },
    /// An event that the color's home passes on to the receiver, which holds the color on loan.
    Forward { color: Color, home: usize, task: Task, urgent: bool },
    /// Answer to a steal request: colors on loan with all their pending events (possibly none).
    Grant { from: usize, loans: Vec<Loan> },
    /// The borrower ran `ran` of the events its home sent it for `color` and holds none of them
    /// any more.
    Return { color: Color, ran: u64 },
    /// A thief asks for a color (it also left its id in the receiver's steal-request slot; the
    /// message is what wakes a sleeping victim).
    StealRequest,
    /// Never lend this color, homed on the receiver.
    Pin { color: Color },
    /// I/O and timers for the receiver's poller and wheel (`io`).
    Io(crate::io::IoMsg),
}

/// A color lent by its home to a thief, with everything pending for it.
pub(crate) struct Loan {
    pub(crate) color: Color,
    pub(crate) events: VecDeque<Task>,
    /// How many of `events`, at the front, were posted urgent.
    pub(crate) urgent: usize,
}
