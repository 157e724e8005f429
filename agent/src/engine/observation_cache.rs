//! What the host showed for each owned slice, kept for the views clients read while nothing
//! changed.
//!
//! Showing a slice means observing its identity on the host: for a MIG slice a PCI device read
//! (dozens of sysfs reads) and three NVML queries, for a vGPU the VF's device and its type.
//! Every answer about slices (the lists, an allocation, one GPU's detail, the telemetry poll's
//! slice gauges) observes each slice it shows, so with a few hundred slices a list cost a few
//! hundred milliseconds. The observations are kept under the inventory's rule
//! (`inventory_cache`; the mechanics in `kept_map`), and one more:
//!
//! - the engine changed the host (counted by `host_changes`), a device event arrived or a
//!   reconcile started ([`Engine::host_changed`]) or ended: all are read again;
//! - the ledger was written ([`Engine::write`]): every operation that changes the host records
//!   its start and its end there, so what a reader saw while a slice was half made or half
//!   taken apart is not kept past the operation;
//! - they are older than [`MAX_AGE`]: unlike a discovery, an aged observation is not handed
//!   out; a slice costs little alone, and the reader observes it again.
//!
//! Only views are kept. What decides (claiming a free slice, reconcile, the warm pool's
//! adoption) observes the host itself.

use std::sync::atomic::{AtomicU64, Ordering};

use ids::NumaNodeId;

use super::backend::Observed;
use super::kept_map::KeptMap;
use super::model::{Identity, SliceId, SliceSpec};
use super::state::OwnedSlice;

/// One slice as the host showed it: what was found for its identity (an error as its text),
/// and its GPU's NUMA node.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub(super) observed: std::result::Result<Observed, String>,
    pub(super) numa_node: Option<NumaNodeId>,
}

/// The host and ledger changes an observation was made after.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Epoch {
    host: u64,
    ledger: u64,
}

/// An observation with what it was of: a slice id re-used for another identity is observed
/// again.
#[derive(Debug, Clone)]
struct Entry {
    spec: SliceSpec,
    identity: Identity,
    seen: Seen,
}

/// The most observations kept: far more slices than a host holds (each is one entry).
const MAX_KEPT: usize = 1 << 16;

/// The kept observations, and the count of ledger writes they are checked against.
#[derive(Debug)]
pub(crate) struct ObservationCache {
    kept: KeptMap<Epoch, SliceId, Entry>,
    ledger_writes: AtomicU64,
}

impl Default for ObservationCache {
    fn default() -> Self {
        Self {
            kept: KeptMap::with_cap(MAX_KEPT),
            ledger_writes: AtomicU64::new(0),
        }
    }
}

impl ObservationCache {
    /// The ledger is about to be written (a failed write may still have changed the file).
    pub(super) fn ledger_written(&self) {
        self.forget();
    }

    /// Nothing kept so far is used again (a reconcile ended: what it re-created or failed
    /// is read afresh).
    pub(super) fn forget(&self) {
        self.ledger_writes.fetch_add(1, Ordering::SeqCst);
    }

    /// The epoch of an observation made now, given the host's change count.
    pub(super) fn epoch(&self, host_changes: u64) -> Epoch {
        Epoch {
            host: host_changes,
            ledger: self.ledger_writes.load(Ordering::SeqCst),
        }
    }

    /// The kept observation of `slice`, if it is current and of the same spec and identity.
    pub(super) fn get(&self, epoch: Epoch, slice: &OwnedSlice) -> Option<Seen> {
        let same = |e: &Entry| e.spec == slice.spec && e.identity == slice.identity;
        self.kept.get(epoch, &slice.id, same).map(|e| e.seen)
    }

    /// Keeps an observation made at `epoch` (counted before observing).
    pub(super) fn keep(&self, epoch: Epoch, slice: &OwnedSlice, seen: Seen) {
        let entry = Entry {
            spec: slice.spec.clone(),
            identity: slice.identity.clone(),
            seen,
        };
        self.kept.keep(epoch, slice.id, entry);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::engine::model::{Handles, SliceKind};

    fn slice(id: SliceId, uuid: &str) -> OwnedSlice {
        OwnedSlice {
            id,
            spec: SliceSpec {
                gpu: "0000:07:00.0".parse().unwrap(),
                kind: SliceKind::Mdev {
                    type_id: "nvidia-222".parse().unwrap(),
                },
            },
            identity: Identity::Mdev {
                uuid: uuid.parse().unwrap(),
            },
            created: 1,
        }
    }

    fn present() -> Seen {
        Seen {
            observed: Ok(Observed::Present(Handles::default())),
            numa_node: Some(NumaNodeId(1)),
        }
    }

    const UUID: &str = "6a2b3c4d-0000-4000-8000-000000000001";

    #[test]
    fn an_observation_is_handed_out_until_the_host_or_the_ledger_changes() {
        let cache = ObservationCache::default();
        let s = slice(SliceId::new_random(), UUID);
        let at = cache.epoch(7);
        assert!(cache.get(at, &s).is_none(), "nothing kept yet");
        cache.keep(at, &s, present());
        let again = cache.get(cache.epoch(7), &s).expect("kept");
        assert_eq!(again.numa_node, Some(NumaNodeId(1)));
        assert!(cache.get(cache.epoch(8), &s).is_none(), "the host changed");
        cache.keep(cache.epoch(8), &s, present());
        cache.ledger_written();
        assert!(
            cache.get(cache.epoch(8), &s).is_none(),
            "the ledger changed"
        );
    }

    #[test]
    fn another_identity_under_the_same_id_is_observed_again() {
        let cache = ObservationCache::default();
        let (id, at) = (SliceId::new_random(), cache.epoch(1));
        cache.keep(at, &slice(id, UUID), present());
        let other = slice(id, "6a2b3c4d-0000-4000-8000-000000000002");
        assert!(cache.get(at, &other).is_none());
    }
}
