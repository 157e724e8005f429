//! Answers about the host kept under a count of the changes they were read after, and for at
//! most [`MAX_AGE`]: the shared rule of the kept slice observations (`observation_cache`) and
//! the kept meanings of slice types (`candidates_cache`).
//!
//! A reader counts the changes before it reads the host and keeps what it read under that
//! count. A larger count, or an age of [`MAX_AGE`], forgets everything kept; a reader that
//! counted before a change another reader has already seen neither uses nor keeps anything.
//!
//! [`KeptByCount`] keeps each value under a count of its own instead, for answers that a change
//! of one device leaves partly or wholly valid (the kept type candidates and offered types:
//! the caller asks `host_changes` what changed since a value's count).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use super::inventory_cache::MAX_AGE;

/// Values by key, all read after the same count of changes.
#[derive(Debug)]
pub(super) struct KeptMap<E, K, V> {
    kept: Mutex<Kept<E, K, V>>,
    /// The most values kept at once; more are read but not kept.
    cap: usize,
}

#[derive(Debug)]
struct Kept<E, K, V> {
    epoch: E,
    since: Option<Instant>,
    values: HashMap<K, V>,
}

impl<E: Default, K, V> KeptMap<E, K, V> {
    /// An empty map that keeps at most `cap` values.
    pub(super) fn with_cap(cap: usize) -> Self {
        Self {
            kept: Mutex::new(Kept {
                epoch: E::default(),
                since: None,
                values: HashMap::new(),
            }),
            cap,
        }
    }
}

impl<E: Ord + Copy, K, V> Kept<E, K, V> {
    /// Whether values read at `epoch` may be used and kept; forgets older or aged ones.
    fn admit(&mut self, epoch: E) -> bool {
        let aged = self.since.is_none_or(|t| t.elapsed() >= MAX_AGE);
        if epoch > self.epoch || (epoch == self.epoch && aged) {
            self.epoch = epoch;
            self.since = Some(Instant::now());
            self.values.clear();
        }
        epoch == self.epoch
    }
}

impl<E: Ord + Copy, K: Eq + Hash, V: Clone> KeptMap<E, K, V> {
    /// The value kept for `key`, if it was read at `epoch` and `fits` it.
    pub(super) fn get(&self, epoch: E, key: &K, fits: impl FnOnce(&V) -> bool) -> Option<V> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if !kept.admit(epoch) {
            return None;
        }
        kept.values.get(key).filter(|v| fits(v)).cloned()
    }

    /// Keeps `value`, read at `epoch` (counted before reading).
    pub(super) fn keep(&self, epoch: E, key: K, value: V) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.admit(epoch) && (kept.values.len() < self.cap || kept.values.contains_key(&key)) {
            kept.values.insert(key, value);
        }
    }
}

/// Values kept by key, each with the count of changes it was read after and when it was read
/// whole.
#[derive(Debug)]
pub(crate) struct KeptByCount<K, V> {
    kept: Mutex<HashMap<K, Counted<V>>>,
    /// The most values kept at once; more are read but not kept.
    cap: usize,
}

/// A value with the count of changes it was read after and when it was read whole.
#[derive(Debug, Clone)]
pub(super) struct Counted<V> {
    pub(super) count: u64,
    pub(super) at: Instant,
    pub(super) value: V,
}

impl<K, V> KeptByCount<K, V> {
    /// An empty map that keeps at most `cap` values.
    pub(super) fn with_cap(cap: usize) -> Self {
        Self {
            kept: Mutex::new(HashMap::new()),
            cap,
        }
    }
}

impl<K: Eq + std::hash::Hash, V: Clone> KeptByCount<K, V> {
    /// The value kept for `key` with its count and time, if younger than [`MAX_AGE`].
    pub(super) fn get(&self, key: &K) -> Option<Counted<V>> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.get(key).filter(|k| k.at.elapsed() < MAX_AGE).cloned()
    }

    /// Keeps `value`, read after `count` (counted before reading), read whole at `at`. A
    /// reader that counted before the kept value's count keeps nothing; past the cap, nothing
    /// new is kept.
    pub(super) fn keep(&self, key: K, count: u64, at: Instant, value: V) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.get(&key).is_some_and(|k| k.count > count) {
            return;
        }
        if kept.len() >= self.cap && !kept.contains_key(&key) {
            kept.retain(|_, k| k.at.elapsed() < MAX_AGE);
            if kept.len() >= self.cap {
                return;
            }
        }
        kept.insert(key, Counted { count, at, value });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_handed_out_until_a_larger_count() {
        let map: KeptMap<u64, &str, u32> = KeptMap::with_cap(8);
        assert_eq!(map.get(7, &"a", |_| true), None, "nothing kept yet");
        map.keep(7, "a", 1);
        assert_eq!(map.get(7, &"a", |_| true), Some(1));
        assert_eq!(
            map.get(7, &"a", |v| *v == 2),
            None,
            "kept, but not what fits"
        );
        assert_eq!(map.get(8, &"a", |_| true), None, "the host changed");
        assert_eq!(
            map.get(8, &"a", |_| true),
            None,
            "and nothing was read since"
        );
    }

    #[test]
    fn a_reader_that_counted_before_a_change_keeps_nothing() {
        let map: KeptMap<u64, &str, u32> = KeptMap::with_cap(8);
        assert_eq!(map.get(4, &"a", |_| true), None);
        map.keep(3, "a", 1);
        assert_eq!(
            map.get(4, &"a", |_| true),
            None,
            "an old reader's value is not kept"
        );
        map.keep(4, "a", 2);
        assert_eq!(
            map.get(3, &"a", |_| true),
            None,
            "an old reader gets nothing"
        );
        assert_eq!(map.get(4, &"a", |_| true), Some(2), "and forgets nothing");
    }

    #[test]
    fn no_more_than_the_cap_is_kept() {
        let map: KeptMap<u64, u32, u32> = KeptMap::with_cap(2);
        for k in 0..3 {
            map.keep(1, k, k);
        }
        assert_eq!(map.get(1, &1, |_| true), Some(1));
        assert_eq!(map.get(1, &2, |_| true), None, "over the cap");
        map.keep(1, 1, 10);
        assert_eq!(map.get(1, &1, |_| true), Some(10), "a kept key is replaced");
    }
}
