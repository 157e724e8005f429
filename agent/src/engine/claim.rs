//! Claiming free owned slices for an allocation being gathered: a claimed slice is held in memory
//! (no other request, destroy or layout may take it) until the allocation is written or given
//! up. A crash loses only the claims, leaving free owned slices, never half an allocation.

use super::backend::{self, Observed};
use super::handle::Engine;
use super::locks::lock;
use super::model::{SliceId, SliceSpec};

impl Engine {
    /// Claims one free owned slice satisfying the spec, checked present on the host.
    pub(crate) fn claim_free(&self, spec: &SliceSpec) -> Option<SliceId> {
        let _gpu = self.inner.gpu_locks.lock(spec.gpu.clone());
        let free: Vec<SliceId> = self.read(|d| {
            d.slices
                .values()
                .filter(|s| s.spec.gpu == spec.gpu && s.spec.kind.satisfies(&spec.kind))
                .filter(|s| d.holder(s.id).is_none() && !d.in_flight(s.id))
                .map(|s| s.id)
                .collect()
        });
        free.into_iter().find(|id| self.claim_locked(*id))
    }

    /// Claims slice `id` when it is owned, free (held by no allocation, in no operation in
    /// flight, claimed by no other request) and present on the host. The caller holds the lock
    /// of the slice's GPU.
    pub(crate) fn claim_locked(&self, id: SliceId) -> bool {
        let entry = self.read(|d| {
            d.slices
                .get(&id)
                .filter(|_| d.holder(id).is_none() && !d.in_flight(id))
                .cloned()
        });
        let Some(entry) = entry else {
            return false;
        };
        if lock(&self.inner.claims).contains(&id) {
            return false;
        }
        let be = backend::of_slice(&entry.spec, &entry.identity);
        if let Ok(Observed::Present(_)) = be.observe(self.host(), &entry.spec, &entry.identity) {
            lock(&self.inner.claims).insert(id);
            return true;
        }
        false
    }
}
