//! The desired-state document kept in the store: only what cannot be read back from the host.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::layout::Layout;
use super::model::{Allocation, AllocationId, DeviceRef, Identity, SliceId, SliceSpec};

/// The store's schema: `vgpud-state.json`, version 1.
pub(crate) const SCHEMA: store::Schema = store::Schema {
    name: "vgpud-state",
    version: 1,
};

/// A slice vgpud created (the ownership ledger's entry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OwnedSlice {
    pub(crate) id: SliceId,
    pub(crate) spec: SliceSpec,
    pub(crate) identity: Identity,
    /// Seconds since the Unix epoch.
    pub(crate) created: u64,
}

/// An operation in flight, written before its first host mutation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Intent {
    /// Creating a slice. `slice` is `None` while the GPU's VFs are being enabled (before an
    /// identity can be chosen); `enabled_vfs` says this operation enabled them.
    Create {
        gpu: DeviceRef,
        slice: Option<OwnedSlice>,
        enabled_vfs: bool,
    },
    /// Destroying an owned slice.
    Destroy { slice: OwnedSlice },
}

impl Intent {
    pub(crate) fn gpu(&self) -> &DeviceRef {
        match self {
            Intent::Create { gpu, .. } => gpu,
            Intent::Destroy { slice } => &slice.spec.gpu,
        }
    }

    pub(crate) fn identity(&self) -> Option<&Identity> {
        match self {
            Intent::Create { slice, .. } => slice.as_ref().map(|s| &s.identity),
            Intent::Destroy { slice } => Some(&slice.identity),
        }
    }
}

/// The whole document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Desired {
    /// The ownership ledger.
    #[serde(default)]
    pub(crate) slices: BTreeMap<SliceId, OwnedSlice>,
    /// Allocations.
    #[serde(default)]
    pub(crate) allocations: BTreeMap<AllocationId, Allocation>,
    /// Declared layouts.
    #[serde(default)]
    pub(crate) layouts: Vec<Layout>,
    /// Operations in flight, by a counter.
    #[serde(default)]
    pub(crate) intents: BTreeMap<u64, Intent>,
    #[serde(default)]
    pub(crate) next_intent: u64,
}

impl Desired {
    /// Records a new intent and returns its number.
    pub(crate) fn open_intent(&mut self, intent: Intent) -> u64 {
        self.next_intent += 1;
        self.intents.insert(self.next_intent, intent);
        self.next_intent
    }

    /// The allocation holding a slice.
    pub(crate) fn holder(&self, slice: SliceId) -> Option<&Allocation> {
        self.allocations
            .values()
            .find(|a| a.slices.contains(&slice))
    }

    /// Identities owned on a GPU, in the ledger or in open intents.
    pub(crate) fn reserved(&self, gpu: &DeviceRef) -> Vec<Identity> {
        let ledger = self
            .slices
            .values()
            .filter(|s| &s.spec.gpu == gpu)
            .map(|s| s.identity.clone());
        let intents = self
            .intents
            .values()
            .filter(|i| i.gpu() == gpu)
            .filter_map(|i| i.identity().cloned());
        ledger.chain(intents).collect()
    }

    /// Whether a slice has an open intent (being created or destroyed).
    pub(crate) fn in_flight(&self, slice: SliceId) -> bool {
        self.intents.values().any(|i| match i {
            Intent::Create { slice: Some(s), .. } | Intent::Destroy { slice: s } => s.id == slice,
            Intent::Create { slice: None, .. } => false,
        })
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
