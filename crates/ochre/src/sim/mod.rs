//! A deterministic simulator of N-core machines running the runtime's own policy code (issue
//! 20): the real run queues (`queue`), outgoing buffers (`outbox`) and policy functions
//! (`steal`, `follow`, `idle`, `outbox`, `color`) driven by a discrete-event engine in virtual
//! time on a synthetic topology, with a cost model for what the policies cannot see.
//!
//! * [`engine`]: the machine, [`Setup`], [`simulate`] and its [`Report`]; with
//!   [`Setup::check`], the invariant checks (exclusion, order, exactly once).
//! * [`cost`]: the [`CostModel`] and its defaults.
//! * [`workload`]: the benchmarks' message patterns.
//! * `replay` (tests only): where stealing puts colors, step by step.
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
