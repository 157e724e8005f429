//! The desired-state document kept in the store: only what cannot be read back from the host.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::layout::{AmdPartition, Layout};
use super::model::{Allocation, AllocationId, DeviceRef, Identity, SliceId, SliceSpec};

/// The store's schema: `vgpud-state.json`, version 2. Version 2 added `demand_mix`; a version 1
/// file reads as one without it. The version was raised because an older build, which refuses
/// unknown fields, would otherwise call a file with a learnt mix corrupt instead of newer.
pub(crate) const SCHEMA: store::Schema = store::Schema {
    name: "vgpud-state",
    version: 2,
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
    /// Changing an AMD GPU's partition (VFs off, memory mode, compute mode, VFs back on); the
    /// reconciler finishes it.
    Partition {
        gpu: DeviceRef,
        partition: AmdPartition,
    },
}

impl Intent {
    pub(crate) fn gpu(&self) -> &DeviceRef {
        match self {
            Intent::Create { gpu, .. } | Intent::Partition { gpu, .. } => gpu,
            Intent::Destroy { slice } => &slice.spec.gpu,
        }
    }

    pub(crate) fn identity(&self) -> Option<&Identity> {
        match self {
            Intent::Create { slice, .. } => slice.as_ref().map(|s| &s.identity),
            Intent::Destroy { slice } => Some(&slice.identity),
            Intent::Partition { .. } => None,
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
    /// Quarantined GPUs. Left out of the file while empty, so a state file without any still
    /// loads in builds that predate quarantine.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) quarantine: BTreeMap<ids::PciAddress, super::quarantine_record::Quarantine>,
    /// The demand mix learnt from the requests placed here (see `demand_mix`); absent until
    /// the first request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) demand_mix: Option<super::demand_mix::StoredMix>,
    /// The owned slices the warm pool made (see `warm_pool`); left out while empty, so files
    /// without a pool load in builds that predate it.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub(crate) warm_pool: std::collections::BTreeSet<SliceId>,
}

impl Desired {
    /// Records the partition change of a GPU, replacing one still open there (the newer target
    /// wins), and returns its number.
    pub(crate) fn open_partition_intent(&mut self, gpu: DeviceRef, partition: AmdPartition) -> u64 {
        self.intents
            .retain(|_, i| !matches!(i, Intent::Partition { gpu: g, .. } if *g == gpu));
        self.open_intent(Intent::Partition { gpu, partition })
    }

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
            Intent::Create { slice: None, .. } | Intent::Partition { .. } => false,
        })
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::engine::model::DeviceRef;

    /// A body as the code before `DeviceRef` wrote it (`spec.gpu` and `Intent::Create.gpu` were
    /// bare PCI addresses): it must load, and write back byte-for-byte the same JSON.
    const OLD_BODY: &str = r#"{
  "slices": {
    "6f1c2a4e-0b7d-4c41-9a3e-5d2f8b1c7e90": {
      "id": "6f1c2a4e-0b7d-4c41-9a3e-5d2f8b1c7e90",
      "spec": {
        "gpu": "0000:41:00.0",
        "kind": {
          "backend": "mdev",
          "type_id": "nvidia-222"
        }
      },
      "identity": {
        "kind": "mdev",
        "uuid": "2b8e4d1a-9c3f-4e6b-8a7d-1f0e5c3b9a24"
      },
      "created": 1764000000
    }
  },
  "allocations": {},
  "layouts": [],
  "intents": {
    "3": {
      "op": "create",
      "gpu": "0000:c1:00.0",
      "slice": null,
      "enabled_vfs": true
    }
  },
  "next_intent": 3
}"#;

    #[test]
    fn state_written_before_virtual_parents_loads_and_round_trips() {
        let d: Desired = serde_json::from_str(OLD_BODY).unwrap();
        let s = d.slices.values().next().unwrap();
        let gpu: ids::PciAddress = "0000:41:00.0".parse().unwrap();
        assert_eq!(s.spec.gpu, DeviceRef::Pci(gpu));
        assert_eq!(
            d.intents[&3].gpu(),
            &DeviceRef::Pci("0000:c1:00.0".parse().unwrap())
        );
        assert_eq!(serde_json::to_string_pretty(&d).unwrap(), OLD_BODY);
    }

    #[test]
    fn a_virtual_parent_is_stored_by_its_name() {
        let mut d: Desired = serde_json::from_str(OLD_BODY).unwrap();
        let s = d.slices.values_mut().next().unwrap();
        s.spec.gpu = "mtty".parse().unwrap();
        assert!(matches!(&s.spec.gpu, DeviceRef::MdevParent(p) if p.as_str() == "mtty"));
        let text = serde_json::to_string(&d).unwrap();
        assert!(text.contains(r#""gpu":"mtty""#), "{text}");
        assert_eq!(serde_json::from_str::<Desired>(&text).unwrap(), d);
        // A PCI address spelled as a parent name is the PCI function, in one spelling.
        let upper: DeviceRef = "0000:C1:00.0".parse().unwrap();
        assert_eq!(upper, DeviceRef::Pci("0000:c1:00.0".parse().unwrap()));
        assert!("bad/name".parse::<DeviceRef>().is_err());
        assert!(serde_json::from_str::<DeviceRef>(r#""""#).is_err());
    }

    #[test]
    fn a_partition_intent_round_trips_and_a_newer_one_replaces_it() {
        let mut d = Desired::default();
        let gpu: DeviceRef = "0000:c1:00.0".parse().unwrap();
        let part = |c: &str| AmdPartition {
            compute: c.into(),
            memory: "NPS4".into(),
            vfs: Some(8),
        };
        d.open_partition_intent(gpu.clone(), part("DPX"));
        let n = d.open_partition_intent(gpu.clone(), part("CPX"));
        assert_eq!(d.intents.len(), 1, "the newer target replaces the older");
        assert_eq!(d.intents[&n].gpu(), &gpu);
        assert_eq!(d.intents[&n].identity(), None);
        let text = serde_json::to_string(&d).unwrap();
        assert!(text.contains(r#""op":"partition""#), "{text}");
        assert_eq!(serde_json::from_str::<Desired>(&text).unwrap(), d);
    }
}
