//! Holding named slices: an allocation of exactly the free owned slices a caller chose, for a
//! front end that picks devices itself (kubelet's device manager picks device ids, then asks
//! the device plugin to allocate them). All or none, as [`Engine::allocate`].

use std::collections::BTreeSet;

use super::error::{EngineError, Result};
use super::events::Event;
use super::handle::Engine;
use super::limits::MAX_COUNT;
use super::locks::lock;
use super::model::{Allocation, AllocationId, DeviceRef, SliceId};
use super::ops::check_text;
use super::state::now;

impl Engine {
    /// Allocates the slices `ids` to `consumer`: each must be owned, free and present on a GPU
    /// in service, or nothing is allocated. `label` is recorded as the allocation's type (the
    /// name the caller knows the slices by).
    pub fn hold_slices(&self, consumer: &str, label: &str, ids: &[SliceId]) -> Result<Allocation> {
        check_text("consumer", consumer)?;
        check_text("type", label)?;
        let wanted = distinct(ids)?;
        let devices = self.devices_of(&wanted)?;
        // Locks in one order (BTreeSet), so two holds over the same GPUs cannot deadlock.
        let _locks: Vec<_> = devices
            .iter()
            .map(|d| self.inner.gpu_locks.lock(d.clone()))
            .collect();
        let mut claimed = Vec::new();
        let result = self.claim_all(&wanted, &mut claimed).and_then(|()| {
            let alloc = Allocation {
                id: AllocationId::new_random(),
                consumer: consumer.to_owned(),
                vm: None,
                slices: claimed.clone(),
                slice_type: Some(label.to_owned()),
                idempotency_key: None,
                created: now(),
                pinning: None,
                request: None,
                placement_consumer: None,
            };
            self.write(|d| d.allocations.insert(alloc.id, alloc.clone()))?;
            Ok(alloc)
        });
        lock(&self.inner.claims).retain(|s| !claimed.contains(s));
        let alloc = result?;
        tracing::info!(allocation = %alloc.id, consumer, slices = alloc.slices.len(), "held named slices");
        self.emit(Event::AllocationCreated {
            allocation: alloc.id,
            consumer: alloc.consumer.clone(),
            slices: alloc.slices.clone(),
        });
        Ok(alloc)
    }

    /// The devices the slices sit on; `not_found` for a slice vgpud does not own, `quarantined`
    /// for one on a GPU out of service.
    fn devices_of(&self, ids: &[SliceId]) -> Result<BTreeSet<DeviceRef>> {
        let mut devices = BTreeSet::new();
        for id in ids {
            let gpu = self
                .read(|d| d.slices.get(id).map(|s| s.spec.gpu.clone()))
                .ok_or_else(|| EngineError::NotFound(format!("slice {id}")))?;
            if let Some(q) = gpu.pci().and_then(|g| self.quarantined(g)) {
                return Err(EngineError::Quarantined(q.refusal()));
            }
            devices.insert(gpu);
        }
        Ok(devices)
    }

    /// Claims every slice (the caller holds their GPUs' locks); stops at the first that is not
    /// free, leaving what it claimed in `claimed` for the caller to give back.
    fn claim_all(&self, ids: &[SliceId], claimed: &mut Vec<SliceId>) -> Result<()> {
        for id in ids {
            if !self.claim_locked(*id) {
                return Err(EngineError::Conflict(format!(
                    "slice {id} is not free (held by an allocation, in an operation, or absent from the host)"
                )));
            }
            claimed.push(*id);
        }
        Ok(())
    }
}

/// The ids, checked: at least one, at most [`MAX_COUNT`], none twice.
fn distinct(ids: &[SliceId]) -> Result<Vec<SliceId>> {
    if ids.is_empty() || ids.len() > MAX_COUNT as usize {
        return Err(EngineError::InvalidRequest(format!(
            "{} slices named: 1..={MAX_COUNT} may be held at once",
            ids.len()
        )));
    }
    let mut seen = BTreeSet::new();
    if let Some(twice) = ids.iter().find(|id| !seen.insert(**id)) {
        return Err(EngineError::InvalidRequest(format!(
            "slice {twice} is named twice"
        )));
    }
    Ok(ids.to_vec())
}
