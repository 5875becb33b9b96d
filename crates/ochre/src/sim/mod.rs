//! A deterministic simulator of N-core machines running the runtime's own policy code (issue
//! 20): the real run queues (`queue`), outgoing buffers (`outbox`) and policy functions
//! (`steal`, `follow`, `idle`, `outbox`, `color`) driven by a discrete-event engine in virtual
//! time on a synthetic topology, with a cost model for what the policies cannot see.
//!
//! * [`engine`]: the machine, [`Setup`], [`simulate`] and its [`Report`]; with
//!   [`Setup::check`], the invariant checks (exclusion, order, exactly once).
//! * [`cost`]: the [`CostModel`] and its defaults; a program's own plain code (the actor
//!   programs' random draws) is charged by its measure here (`CostModel::draw_ns`).
//! * [`workload`]: the benchmarks' message patterns.
//! * `replay` (tests only): where stealing puts colors, step by step.
//!
//! CPU shares are modelled: a busy thread of another process may share a core's CPU
//! ([`Setup::busy`]), taking time slices from the worker as the Linux scheduler does; each
//! worker measures its share with the runtime's own measure (`CpuShare::window`), and
//! `follow::relief`, the share tests of `follow::moves` / `sheds`, `Steal::FromSharedCpus` and
//! the spinner's yield on a shared CPU act on it. What is not modelled: the share probe of an
//! idle worker (`CpuShare::probe`; the busy threads never leave), placement of new work by
//! share (`cpu_share::pick`), descriptors and timers (`io`), urgent posts, the allocators (EMA's
//! placement is not charged), the quiescence protocol (a run ends when nothing is left to run or
//! in flight), and contention between cores beyond [`CostModel::contention`]. The worker's
//! smaller policies (its end-of-turn burst test, its safety-check interval, its grant back-off)
//! are functions both call: `Outbox::ends_burst`, `outbox::SAFETY_CHECK_EVERY`,
//! `steal::backoff_after`.
//!
//! Not a stable interface: `ochre sim` and the tests use it (feature `sim`).

pub mod cost;
pub mod engine;
#[cfg(test)]
mod replay;
#[cfg(test)]
mod tests;
pub mod workload;

pub use cost::CostModel;
pub use engine::{simulate, Event, Post, Report, Setup, Workload, ROOT};
