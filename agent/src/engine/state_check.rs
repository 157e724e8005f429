//! The rules between the records of the desired state, checked when it is loaded.
//!
//! The store's checksum proves the bytes are the ones written, not that they make sense: a
//! hand-edited file re-checksummed, a bug in an older build, or a restore that mixed two
//! backups can give records that contradict each other. The engine relies on every rule below
//! (a slice is held by at most one allocation, an allocation's slices are in the ledger, an
//! open intent is about what the protocol says), so such a file is refused like a corrupt one
//! rather than acted on (issue 14, defect 7).

use std::collections::{BTreeMap, BTreeSet};

use super::model::{DeviceRef, Identity, SliceId, SliceKind};
use super::state::{Desired, Intent, OwnedSlice};

/// At most this many contradictions are named; the rest are counted.
const SHOWN: usize = 5;

/// `Err` with every contradiction found (the first few named).
pub(crate) fn check(d: &Desired) -> Result<(), String> {
    let mut found = Vec::new();
    slices(d, &mut found);
    identities(d, &mut found);
    allocations(d, &mut found);
    intents(d, &mut found);
    quarantines(d, &mut found);
    if found.is_empty() {
        return Ok(());
    }
    let more = found.len().saturating_sub(SHOWN);
    let mut text = found.into_iter().take(SHOWN).collect::<Vec<_>>().join("; ");
    if more > 0 {
        text.push_str(&format!("; and {more} more"));
    }
    Err(text)
}

/// Each quarantine is filed under its own GPU.
fn quarantines(d: &Desired, found: &mut Vec<String>) {
    for (key, q) in &d.quarantine {
        if *key != q.gpu {
            found.push(format!(
                "the quarantine of GPU {} is filed under GPU {key}",
                q.gpu
            ));
        }
    }
}

/// Each ledger entry is filed under its own id, and its identity is one its kind can have.
fn slices(d: &Desired, found: &mut Vec<String>) {
    for (key, s) in &d.slices {
        if *key != s.id {
            found.push(format!("slice {} is filed under the key {key}", s.id));
        }
        if let Some(why) = kind_mismatch(s) {
            found.push(format!("slice {}: {why}", s.id));
        }
    }
}

/// `Some(why)` when the identity cannot be one of the slice's kind (the backend is chosen by
/// the identity, so the two would disagree about what the slice is).
fn kind_mismatch(s: &OwnedSlice) -> Option<String> {
    let fits = matches!(
        (&s.spec.kind, &s.identity),
        (SliceKind::Mdev { .. }, Identity::Mdev { .. })
            | (
                SliceKind::NvidiaVfio { .. },
                Identity::Vf { .. } | Identity::MigVgpu { .. }
            )
            | (SliceKind::SriovVf, Identity::Vf { .. })
            | (SliceKind::Mig { .. }, Identity::Mig { .. })
            | (SliceKind::Passthrough, Identity::Passthrough { .. })
    );
    if !fits {
        return Some(format!(
            "a {} cannot have the identity {:?}",
            s.spec.kind, s.identity
        ));
    }
    let virtual_parent = matches!(s.spec.gpu, DeviceRef::MdevParent(_));
    (virtual_parent && !matches!(s.spec.kind, SliceKind::Mdev { .. })).then(|| {
        format!(
            "a {} cannot be on the virtual parent {}",
            s.spec.kind, s.spec.gpu
        )
    })
}

/// No two ledger entries name the same thing on the host: one device would count twice.
fn identities(d: &Desired, found: &mut Vec<String>) {
    let mut seen: BTreeMap<String, SliceId> = BTreeMap::new();
    for s in d.slices.values() {
        for thing in host_things(s) {
            if let Some(first) = seen.insert(thing.clone(), s.id) {
                found.push(format!("slices {first} and {} are both {thing}", s.id));
            }
        }
    }
}

/// What on the host a ledger entry stands for, one text per thing it takes.
fn host_things(s: &OwnedSlice) -> Vec<String> {
    let gpu = &s.spec.gpu;
    match &s.identity {
        Identity::Mdev { uuid } => vec![format!("mdev {uuid}")],
        Identity::Vf { address, .. } => vec![format!("VF {address}")],
        Identity::MigVgpu { address, start, .. } => vec![
            format!("VF {address}"),
            format!("the GPU instance at slot {start} on {gpu}"),
        ],
        Identity::Mig { start, .. } => vec![format!("the GPU instance at slot {start} on {gpu}")],
        Identity::Passthrough { .. } => vec![format!("the whole GPU {gpu}")],
    }
}

/// Each allocation is filed under its id, holds only ledger slices, none held twice, and no two
/// share a consumer's idempotency key.
fn allocations(d: &Desired, found: &mut Vec<String>) {
    let mut holders: BTreeMap<SliceId, String> = BTreeMap::new();
    let mut keys: BTreeSet<(&str, &str)> = BTreeSet::new();
    for (key, a) in &d.allocations {
        if *key != a.id {
            found.push(format!("allocation {} is filed under the key {key}", a.id));
        }
        for slice in &a.slices {
            if !d.slices.contains_key(slice) {
                found.push(format!(
                    "allocation {} holds slice {slice}, which is not in the ledger",
                    a.id
                ));
            }
            if let Some(first) = holders.insert(*slice, a.id.to_string()) {
                found.push(format!(
                    "slice {slice} is held by allocation {first} and by allocation {}",
                    a.id
                ));
            }
        }
        if let Some(k) = &a.idempotency_key
            && !keys.insert((a.consumer.as_str(), k.as_str()))
        {
            found.push(format!(
                "two allocations of {:?} carry the idempotency key {k:?}",
                a.consumer
            ));
        }
    }
}

/// Open intents are numbered below the counter and name what the intent protocol says: a
/// create's slice is not yet in the ledger (its commit adds it and closes the intent in one
/// write), a destroy's slice still is (its commit removes both), a partition change is of a PCI
/// device.
fn intents(d: &Desired, found: &mut Vec<String>) {
    for (n, intent) in &d.intents {
        if *n > d.next_intent {
            found.push(format!(
                "intent {n} is numbered above the counter {}",
                d.next_intent
            ));
        }
        if let Some(why) = intent_contradiction(d, intent) {
            found.push(format!("intent {n}: {why}"));
        }
    }
}

fn intent_contradiction(d: &Desired, intent: &Intent) -> Option<String> {
    match intent {
        Intent::Create {
            gpu,
            slice: Some(s),
            ..
        } => {
            if &s.spec.gpu != gpu {
                Some(format!("creates slice {} of {} on {gpu}", s.id, s.spec.gpu))
            } else if d.slices.contains_key(&s.id) {
                Some(format!(
                    "creates slice {}, which the ledger already holds",
                    s.id
                ))
            } else {
                None
            }
        }
        Intent::Create { slice: None, .. } => None,
        Intent::Destroy { slice } => (d.slices.get(&slice.id) != Some(slice)).then(|| {
            format!(
                "destroys slice {}, which the ledger does not hold as recorded",
                slice.id
            )
        }),
        Intent::Partition { gpu, .. } => gpu
            .pci()
            .is_none()
            .then(|| format!("changes the partition of {gpu}, which is not a PCI device")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::engine::model::{Allocation, AllocationId, SliceSpec};

    fn mdev_slice(uuid: &str) -> OwnedSlice {
        OwnedSlice {
            id: SliceId::new_random(),
            spec: SliceSpec {
                gpu: "0000:41:00.0".parse().unwrap(),
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

    fn alloc(consumer: &str, slices: Vec<SliceId>, key: Option<&str>) -> Allocation {
        Allocation {
            id: AllocationId::new_random(),
            consumer: consumer.into(),
            vm: None,
            slices,
            slice_type: Some("nvidia-222".into()),
            idempotency_key: key.map(str::to_owned),
            created: 1,
            pinning: None,
            request: None,
            placement_consumer: None,
        }
    }

    /// Two owned slices, one allocated: consistent.
    fn base() -> (Desired, OwnedSlice, OwnedSlice) {
        let a = mdev_slice("2b8e4d1a-9c3f-4e6b-8a7d-1f0e5c3b9a24");
        let b = mdev_slice("3c9f5e2b-0d4a-4f7c-9b8e-2a1f6d4c0b35");
        let mut d = Desired::default();
        d.slices.insert(a.id, a.clone());
        d.slices.insert(b.id, b.clone());
        let held = alloc("tenant", vec![a.id], Some("k1"));
        d.allocations.insert(held.id, held);
        (d, a, b)
    }

    fn refused(d: &Desired, expect: &str) {
        let why = check(d).expect_err(expect);
        assert!(why.contains(expect), "{why}");
    }

    #[test]
    fn a_consistent_state_passes() {
        check(&base().0).unwrap();
        check(&Desired::default()).unwrap();
    }

    #[test]
    fn a_quarantine_filed_under_another_gpu_is_refused() {
        use crate::engine::quarantine_record::{Quarantine, QuarantineSource};
        let (mut d, _, _) = base();
        let q = Quarantine {
            gpu: "0000:07:00.0".parse().unwrap(),
            since: 1,
            reason: "Xid 79".into(),
            source: QuarantineSource::Auto,
            xid: Some(79),
        };
        d.quarantine.insert(q.gpu, q.clone());
        check(&d).unwrap();
        d.quarantine.insert("0000:0f:00.0".parse().unwrap(), q);
        refused(
            &d,
            "the quarantine of GPU 0000:07:00.0 is filed under GPU 0000:0f:00.0",
        );
    }

    #[test]
    fn one_slice_in_two_allocations_is_refused() {
        let (mut d, a, _) = base();
        let second = alloc("other", vec![a.id], None);
        d.allocations.insert(second.id, second);
        refused(&d, &format!("slice {} is held by allocation", a.id));
    }

    #[test]
    fn an_allocation_of_a_slice_not_in_the_ledger_is_refused() {
        let (mut d, _, _) = base();
        let ghost = SliceId::new_random();
        let a = alloc("tenant", vec![ghost], None);
        d.allocations.insert(a.id, a);
        refused(
            &d,
            &format!("holds slice {ghost}, which is not in the ledger"),
        );
    }

    #[test]
    fn a_key_that_differs_from_its_record_is_refused() {
        let (mut d, a, _) = base();
        let other = SliceId::new_random();
        d.slices.remove(&a.id);
        d.warm_pool.remove(&a.id);
        d.slices.insert(other, a.clone());
        refused(
            &d,
            &format!("slice {} is filed under the key {other}", a.id),
        );
        let (mut d, _, _) = base();
        let held = d.allocations.values().next().cloned().unwrap();
        d.allocations.clear();
        let wrong = AllocationId::new_random();
        d.allocations.insert(wrong, held.clone());
        refused(
            &d,
            &format!("allocation {} is filed under the key {wrong}", held.id),
        );
    }

    #[test]
    fn intents_referring_to_nothing_are_refused() {
        let (mut d, _, _) = base();
        let gone = mdev_slice("4d0a6f3c-1e5b-4a8d-8c9f-3b2a7e5d1c46");
        d.open_intent(Intent::Destroy {
            slice: gone.clone(),
        });
        refused(
            &d,
            &format!("destroys slice {}, which the ledger does not hold", gone.id),
        );

        let (mut d, a, _) = base();
        d.open_intent(Intent::Create {
            gpu: a.spec.gpu.clone(),
            slice: Some(a.clone()),
            enabled_vfs: false,
        });
        refused(&d, "which the ledger already holds");

        let (mut d, _, _) = base();
        let new = mdev_slice("5e1b7a4d-2f6c-4b9e-9d0a-4c3b8f6e2d57");
        d.open_intent(Intent::Create {
            gpu: "0000:c1:00.0".parse().unwrap(),
            slice: Some(new),
            enabled_vfs: false,
        });
        refused(&d, "on 0000:c1:00.0");

        let (mut d, _, _) = base();
        d.intents.insert(
            9,
            Intent::Create {
                gpu: "0000:41:00.0".parse().unwrap(),
                slice: None,
                enabled_vfs: true,
            },
        );
        refused(&d, "intent 9 is numbered above the counter 0");
    }

    #[test]
    fn one_device_in_two_ledger_entries_is_refused() {
        let (mut d, a, _) = base();
        let twin = OwnedSlice {
            id: SliceId::new_random(),
            ..a.clone()
        };
        d.slices.insert(twin.id, twin);
        refused(&d, "are both mdev 2b8e4d1a-9c3f-4e6b-8a7d-1f0e5c3b9a24");
    }

    #[test]
    fn an_identity_of_another_kind_and_a_reused_key_are_refused() {
        let (mut d, _, mut b) = base();
        b.identity = Identity::Passthrough {
            original_driver: None,
        };
        d.slices.insert(b.id, b);
        refused(&d, "cannot have the identity");

        let (mut d, _, b) = base();
        let again = alloc("tenant", vec![b.id], Some("k1"));
        d.allocations.insert(again.id, again);
        refused(
            &d,
            "two allocations of \"tenant\" carry the idempotency key \"k1\"",
        );
    }
}
