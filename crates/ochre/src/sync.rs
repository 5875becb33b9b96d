//! Synchronization primitives, swapped for loom's model-checked ones under `cfg(loom)`.
//!
//! Every protocol module (`inbox`, `park`, `idle`) takes its atomics and locks from here, so the
//! loom models in `tests` and `#[cfg(loom)]` unit tests check the very code that runs in release.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex};
#[cfg(loom)]
pub(crate) use loom::thread::yield_now;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread::yield_now;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicU32;

/// Locks a mutex, ignoring poisoning.
///
/// Poisoning cannot leave our queues inconsistent: no runtime code panics while holding one of
/// these locks (user handlers never run under a runtime lock).
#[cfg(not(loom))]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(loom)]
pub(crate) fn lock<T>(m: &Mutex<T>) -> loom::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
