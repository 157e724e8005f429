//! Per-GPU serialisation and per-idempotency-key serialisation.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use super::host_changes::ChangeScope;
use super::model::DeviceRef;

/// Locks a mutex; a panic elsewhere does not make the engine's maps unusable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A set of held keys; taking a held key waits for its release. Not re-entrant.
#[derive(Debug)]
pub(crate) struct KeySet<K: Eq + Hash> {
    held: Mutex<HashSet<K>>,
    released: Condvar,
}

impl<K: Eq + Hash> Default for KeySet<K> {
    fn default() -> Self {
        Self {
            held: Mutex::new(HashSet::new()),
            released: Condvar::new(),
        }
    }
}

/// Holds one key of a [`KeySet`] until dropped.
#[derive(Debug)]
pub(crate) struct KeyGuard<'a, K: Eq + Hash + Clone> {
    set: &'a KeySet<K>,
    key: K,
}

impl<K: Eq + Hash + Clone> KeySet<K> {
    pub(crate) fn lock(&self, key: impl Into<K>) -> KeyGuard<'_, K> {
        let key = key.into();
        let mut held = lock(&self.held);
        while held.contains(&key) {
            held = self
                .released
                .wait(held)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        held.insert(key.clone());
        KeyGuard { set: self, key }
    }
}

impl<K: Eq + Hash + Clone> Drop for KeyGuard<'_, K> {
    fn drop(&mut self) {
        lock(&self.set.held).remove(&self.key);
        self.set.released.notify_all();
    }
}

/// One lock per device (GPU or virtual mdev parent): operations on a device are serialised,
/// different devices run in parallel. While a thread holds a device's lock, the host changes it
/// makes are counted as that device's (`host_changes`), so readers re-read only it.
#[derive(Debug, Default)]
pub(crate) struct GpuLocks(KeySet<DeviceRef>);

/// Holds one device's lock until dropped.
#[derive(Debug)]
pub(crate) struct DeviceGuard<'a> {
    // Dropped first: the scope ends before another thread may take the lock.
    _scope: ChangeScope,
    _key: KeyGuard<'a, DeviceRef>,
}

impl GpuLocks {
    pub(crate) fn lock(&self, device: impl Into<DeviceRef>) -> DeviceGuard<'_> {
        let key = self.0.lock(device);
        DeviceGuard {
            _scope: ChangeScope::enter(key.key.clone()),
            _key: key,
        }
    }
}
/// One lock per (consumer, idempotency key): a retry waits for the first attempt.
pub(crate) type KeyLocks = KeySet<(String, String)>;
