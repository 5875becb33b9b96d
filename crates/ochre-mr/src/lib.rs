//! # ochre-mr: MapReduce on ochre's colored events
//!
//! The shared-memory MapReduce model of Phoenix (Ranger et al., HPCA 2007; Phoenix 2.0, the one
//! the thesis ran on libasync-smp, §5.4.2), as a Rust library on [`ochre`]: an application
//! implements [`MapReduce`] (split its input, map a split to key-value pairs, combine two values
//! of a key, reduce a key's value), a [`Job`] runs it on a runtime's workers, and the result is
//! the pairs sorted by key with the time each phase took ([`Output`], [`Phases`]).
//!
//! ```
//! use std::ops::Range;
//! use ochre_mr::{Emitter, Job, MapReduce};
//!
//! /// Counts the bytes of a text by value.
//! struct ByteCount(Vec<u8>);
//!
//! impl MapReduce for ByteCount {
//!     type Split = Range<usize>;
//!     type Key = u8;
//!     type Value = u64;
//!     fn split(&self, chunk_bytes: usize) -> Vec<Range<usize>> {
//!         ochre_mr::byte_ranges(self.0.len(), chunk_bytes)
//!     }
//!     fn map(&self, split: &Range<usize>, out: &mut Emitter<'_, Self>) {
//!         for &b in &self.0[split.clone()] {
//!             out.emit(b, 1);
//!         }
//!     }
//!     fn combine(&self, acc: &mut u64, value: u64) {
//!         *acc += value;
//!     }
//! }
//!
//! let text = b"abracadabra".repeat(1000);
//! let out = Job::new(ByteCount(text)).workers(2).pin(false).chunk_bytes(1000).run()?;
//! assert_eq!(out.pairs[0], (b'a', 5000)); // sorted by key: 'a' first
//! # Ok::<(), ochre_mr::Error>(())
//! ```
//!
//! ## How a job flows
//!
//! Every phase after the split is colored events; no thread waits at a barrier. The last event
//! of a phase to finish, told so by a counter every event of the phase decrements, posts the
//! next phase.
//!
//! 1. **Split**, on the calling thread: [`MapReduce::split`] cuts the input into map tasks of
//!    about [`Job::chunk_bytes`] (default: a few hundred KiB, fewer when the input is small, so
//!    that each worker gets at least 16 tasks to balance); then one *lane* event per worker is
//!    posted into that worker's inbox ([`ochre::Handle`]), and the run starts with the first.
//!    (Posted by an event, a lane's start would wait in the posting worker's outgoing batch
//!    until the end of its round: with batching, after a turn of up to 64 of the first lane's
//!    tasks.)
//! 2. **Map** (one color per lane, each lane's color homed on its own worker and pinned there,
//!    so that neither stealing nor following moves two lanes onto one worker): a lane event
//!    claims the next map task with one atomic increment, maps it into the lane's container, and
//!    posts itself again; a worker that is slowed (its CPU shared with another process) claims
//!    fewer tasks, so the lanes finish together without stealing, and a lane whose worker did
//!    not get to start it before every task was claimed is *retired* by the lane that found
//!    none left: the job does not wait for a worker the kernel keeps from its CPU for a time
//!    slice (its late events do nothing). The container ([`Container`]:
//!    hash, dense array, fixed slots) lives in a [`ochre::ColorCell`] of the lane's color: the
//!    lane's events are serialized, so it needs no lock; the lane's state is an
//!    [`ochre::ColorBox`] that EMA places for the lane's worker (the thesis kept Phoenix's
//!    intermediate buffers in EMA). Map combines eagerly
//!    ([`MapReduce::combine`]): a lane holds one value per distinct key.
//! 3. **Partition**: when no task is left, each lane cuts its container into the reduce
//!    partitions (by key index for a dense container, else by FxHash) and hands each partition
//!    its run, in 1 KiB slabs that EMA places for the partition's worker (Phoenix's
//!    intermediate buffers); the last lane posts the reduce events.
//! 4. **Reduce** (one color per partition, homed round robin over the workers; an event takes
//!    its own partition, then those no event took yet, so that partitions homed on a worker
//!    that cannot run do not keep the job waiting): gathers its runs from every lane, combines
//!    the values of equal keys (in a hash table when several lanes handed it runs), applies
//!    [`MapReduce::reduce`] once per key, and sorts its pairs by key. When the lanes hand over
//!    only a few thousand pairs in all, the last lane reduces every partition in its own event
//!    instead: cheaper than waking other workers for them.
//! 5. **Merge**: sorted runs meet in a binary tree; the second run to reach a node merges the
//!    two in its event and goes on up, so merging starts while other partitions still reduce,
//!    and the event that merges the root publishes the output, or starts the next job of a
//!    flow ([`Job::then`], [`run_flow`]: K-means' iterations run in one run of the runtime).
//!
//! The phase breakdown ([`Phases`]) is measured like Phoenix's: split, map (with partition),
//! reduce (until the last partition is reduced) and merge (the rest).
//!
//! ## Applications
//!
//! [`apps`] holds the eight Phoenix applications (Word Count, Reverse Index, Histogram, Linear
//! Regression, K-means, PCA, String Match, Matrix Multiply), each with a sequential reference,
//! a seeded input generator in Phoenix's file formats, and a Hadoop Streaming front for some.

#![warn(missing_docs)]

pub mod apps;
mod color_vec;
mod job;
mod kept;
mod store;

use std::hash::Hash;

pub use job::{byte_ranges, run_flow, Error, Flow, Job, Output, Phases, Stage};
pub use store::{Container, Emitter};

/// A MapReduce application: its input, how it is split, mapped, combined and reduced.
///
/// The value holding the input (a file's bytes, a matrix) implements this trait; a [`Job`]
/// shares it with every event by an `Arc`.
pub trait MapReduce: Send + Sync + Sized + 'static {
    /// A map task's share of the input (a byte range, a block of rows).
    type Split: Send + Sync + 'static;
    /// An intermediate and output key.
    type Key: Hash + Eq + Ord + Send + 'static;
    /// An intermediate and output value.
    type Value: Send + 'static;

    /// Cuts the input into map tasks of about `chunk_bytes` bytes of input each.
    fn split(&self, chunk_bytes: usize) -> Vec<Self::Split>;

    /// The input's size in bytes, from which [`Job`] chooses a chunk size (0: unknown).
    fn input_bytes(&self) -> usize {
        0
    }

    /// Maps one split, emitting its pairs into `out`.
    fn map(&self, split: &Self::Split, out: &mut Emitter<'_, Self>);

    /// Folds `value` into `acc`, the value held for the same key: run eagerly in the map task
    /// each time a key is emitted again, and in reduce across map lanes. It must be
    /// associative, and its result must not depend on the order values arrive in (lanes
    /// claim tasks dynamically), or [`MapReduce::reduce`] must make it so (sort a list).
    fn combine(&self, acc: &mut Self::Value, value: Self::Value);

    /// The final value of `key` from its combined value (default: as it is). Runs once per
    /// key, in the reduce event of the key's partition.
    fn reduce(&self, key: &Self::Key, value: Self::Value) -> Self::Value {
        let _ = key;
        value
    }

    /// The slot of `key` in a [`Container::Dense`] array (default: none; such keys go to a
    /// hash side-table).
    fn key_index(&self, key: &Self::Key) -> Option<usize> {
        let _ = key;
        None
    }
}
