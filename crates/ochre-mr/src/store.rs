//! Intermediate containers: where a map lane combines the pairs its map tasks emit, and how they
//! are cut into reduce partitions.
//!
//! Phoenix++ (Talbot et al., 2011) showed that the container holding intermediate pairs matters
//! more than the scheduler: a hash table for open key sets (words, links), an array indexed by
//! the key for dense integer keys (histogram buckets, cluster numbers), a few slots searched
//! linearly for a handful of keys (linear regression's five sums). A job picks one
//! ([`Container`]); every kind combines eagerly: emitting a key already present folds the value
//! into the one held ([`MapReduce::combine`]), so a lane holds one value per distinct key
//! whatever the number of records, and nothing is allocated for a key already seen.
//!
//! Invariant: a store holds each key at most once. A key of a dense store whose
//! [`MapReduce::key_index`] is `None` or out of range goes to the store's hash side-table, so a
//! wrong index costs speed, never correctness.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use rustc_hash::{FxBuildHasher, FxHashMap};

use crate::MapReduce;

/// The intermediate container of a job (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Container {
    /// A hash table (FxHash): any key set.
    Hash,
    /// An array of this many slots indexed by [`MapReduce::key_index`]: dense integer keys.
    Dense(usize),
    /// A few slots searched linearly: jobs with a handful of distinct keys.
    Fixed,
}

/// A lane's intermediate pairs, one value per key.
pub(crate) enum Store<K, V> {
    Hash(FxHashMap<K, V>),
    Dense { slots: Vec<Option<(K, V)>>, spill: FxHashMap<K, V> },
    Fixed(Vec<(K, V)>),
}

impl<K: Hash + Eq, V> Store<K, V> {
    pub(crate) fn new(container: Container) -> Self {
        match container {
            Container::Hash => Store::Hash(FxHashMap::default()),
            Container::Dense(n) => Store::Dense {
                slots: std::iter::repeat_with(|| None).take(n).collect(),
                spill: FxHashMap::default(),
            },
            Container::Fixed => Store::Fixed(Vec::new()),
        }
    }

    /// Hands every pair to `put`, emptying the store.
    pub(crate) fn drain_into(self, mut put: impl FnMut((K, V))) {
        match self {
            Store::Hash(map) => map.into_iter().for_each(&mut put),
            Store::Dense { slots, spill } => {
                slots.into_iter().flatten().for_each(&mut put);
                spill.into_iter().for_each(&mut put);
            }
            Store::Fixed(pairs) => pairs.into_iter().for_each(&mut put),
        }
    }
}

/// The FxHash of a key: what hash partitioning cuts on.
pub(crate) fn hash_of<K: Hash>(key: &K) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// Where a map task's pairs go: the lane's store, combining as they arrive.
///
/// It holds the store by value for the task (moved out of the lane's state and back, a few
/// words): the map's inner loop then finds the table's fields one load from the emitter it was
/// handed, not two (emitter, then the lane's store). On word count's per-word path the second
/// load sat on each lookup's critical path, restarted by the mispredicted branch at each word's
/// end: the map path on one thread took 5-8% more CPU time than the reference for 2% more
/// instructions. It counts the pairs in a field of its own, on the map task's stack: a counter
/// in shared lane state, bumped per record, would share a cache line with the other lanes'
/// (the false sharing of thesis §5.2.1).
pub struct Emitter<'a, P: MapReduce> {
    store: Store<P::Key, P::Value>,
    app: &'a P,
    emitted: u64,
}

impl<'a, P: MapReduce> Emitter<'a, P> {
    /// An emitter filling `store` (taken back with [`Emitter::into_parts`]).
    pub(crate) fn new(app: &'a P, store: Store<P::Key, P::Value>) -> Self {
        Emitter { store, app, emitted: 0 }
    }

    /// The store and the pairs emitted into it.
    pub(crate) fn into_parts(self) -> (Store<P::Key, P::Value>, u64) {
        (self.store, self.emitted)
    }

    /// Emits `(key, value)`: folded into the value held for `key` if there is one.
    #[inline]
    pub fn emit(&mut self, key: P::Key, value: P::Value) {
        self.emitted += 1;
        self.put(key, value);
    }

    /// Folds `(key, value)` into the store (not counted).
    #[inline]
    fn put(&mut self, key: P::Key, value: P::Value) {
        let app = self.app;
        match &mut self.store {
            Store::Hash(map) => combine_into(app, map, key, value),
            Store::Dense { slots, spill } => match app.key_index(&key) {
                Some(i) if i < slots.len() => match &mut slots[i] {
                    Some((_, acc)) => app.combine(acc, value),
                    slot @ None => *slot = Some((key, value)),
                },
                _ => combine_into(app, spill, key, value),
            },
            Store::Fixed(pairs) => match pairs.iter_mut().find(|(k, _)| *k == key) {
                Some((_, acc)) => app.combine(acc, value),
                None => pairs.push((key, value)),
            },
        }
    }

    /// Emits a key given by reference (a word inside the input): the owned key is made only
    /// when the key is new to this lane, so a record whose key was seen allocates nothing.
    #[inline]
    pub fn emit_ref<Q>(&mut self, key: &Q, value: P::Value)
    where
        P::Key: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = P::Key> + ?Sized,
    {
        // Only the hash path of a key already held is inline: it runs per record in the
        // map's inner loop (word count: per word), and the whole body, other containers and
        // the first sight of a key included, made the caller's per-record closure too big to
        // inline into its scanning loop (callgrind: 10% more instructions than the
        // sequential reference, word count).
        self.emitted += 1;
        if let Store::Hash(map) = &mut self.store {
            if let Some(acc) = map.get_mut(key) {
                return self.app.combine(acc, value);
            }
        }
        self.put_new(key.to_owned(), value);
    }

    /// The rest of [`Emitter::emit_ref`], out of line: a key new to a hash store, or another
    /// container.
    #[cold]
    #[inline(never)]
    fn put_new(&mut self, key: P::Key, value: P::Value) {
        self.put(key, value);
    }
}

/// Folds `(key, value)` into `map`'s value for `key`, or inserts it.
pub(crate) fn combine_into<P: MapReduce>(
    app: &P,
    map: &mut FxHashMap<P::Key, P::Value>,
    key: P::Key,
    value: P::Value,
) {
    use std::collections::hash_map::Entry;
    match map.entry(key) {
        Entry::Occupied(mut e) => app.combine(e.get_mut(), value),
        Entry::Vacant(e) => {
            e.insert(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts words; a one-letter word has the dense slot of its letter.
    struct Words;
    impl MapReduce for Words {
        type Split = ();
        type Key = Vec<u8>;
        type Value = u64;
        fn split(&self, _: usize) -> Vec<()> {
            Vec::new()
        }
        fn map(&self, _: &(), _: &mut Emitter<'_, Self>) {}
        fn combine(&self, acc: &mut u64, value: u64) {
            *acc += value;
        }
        fn key_index(&self, key: &Vec<u8>) -> Option<usize> {
            match key.as_slice() {
                [c] => Some(usize::from(c.wrapping_sub(b'a'))),
                _ => None,
            }
        }
    }

    #[test]
    fn every_container_holds_each_key_once_by_emit_or_emit_ref() {
        let words: Vec<&[u8]> = "a b rose a c rose b is z a rose y"
            .split(' ')
            .map(str::as_bytes)
            .cycle()
            .take(60)
            .collect();
        let mut want = std::collections::BTreeMap::new();
        for w in &words {
            *want.entry(w.to_vec()).or_insert(0) += 1;
        }
        // Dense(3): 'a'..'c' in slots, 'y' and 'z' past them and the longer words without an
        // index go to the table.
        for container in [Container::Hash, Container::Dense(3), Container::Fixed] {
            // By value, by reference, and mixed: a key must land where the other way looks.
            for by_ref in [0, 1, 2] {
                let mut out = Emitter::new(&Words, Store::new(container));
                for (i, w) in words.iter().enumerate() {
                    if by_ref == 1 || (by_ref == 2 && i % 2 == 1) {
                        out.emit_ref(*w, 1);
                    } else {
                        out.emit(w.to_vec(), 1);
                    }
                }
                let (store, emitted) = out.into_parts();
                let mut got = Vec::new();
                store.drain_into(|p| got.push(p));
                got.sort();
                let want: Vec<(Vec<u8>, u64)> = want.clone().into_iter().collect();
                assert_eq!(got, want, "{container:?}, mode {by_ref}");
                assert_eq!(emitted, words.len() as u64);
            }
        }
    }
}
