//! What the Placement reporter reads from the engine beyond its public API: the types each GPU
//! offers with the kind each means there, how many more of one fit, and which GPUs a declared
//! layout selects. Thin doors onto the logic the capacity report uses, never a copy of it.

use std::collections::{BTreeSet, HashSet};

use ids::PciAddress;

use super::gpu_detail::creatable;
use super::handle::Engine;
use super::locks::lock;
use super::model::{Allocation, Slice, SliceId, SliceKind};
use super::snapshot::Ownership;
use super::state::Desired;

/// The slices and allocations vgpud holds at one moment, with the ownership the scheduler
/// counts against ([`Engine::holdings`]).
pub struct Holdings {
    /// Every owned slice (and those being created).
    pub slices: Vec<Slice>,
    /// Every allocation.
    pub allocations: Vec<Allocation>,
    own: Ownership,
}

impl Holdings {
    /// How many more slices of `kind` fit on `gpu` of `inventory` beside what is held (first
    /// fit, each alone: what `creatable` of the capacity report says).
    pub(crate) fn creatable(
        &self,
        inventory: &inventory::HostInventory,
        gpu: PciAddress,
        kind: &SliceKind,
    ) -> u32 {
        creatable(inventory, &self.own, gpu, kind)
    }
}

impl Engine {
    /// What vgpud holds now, from one read of its ledger. Read it before discovering the
    /// host, so that the inventory is never older than it: an inventory from before a slice
    /// was made, counted against ownership from after, shows the slice's GPU (or VF, or
    /// framebuffer) still free, and Placement would be promised a slice the host then refuses
    /// (seen in the two-level fleet: BENCHMARKS.md, "Placement fleet").
    pub fn holdings(&self) -> Holdings {
        let claims: HashSet<SliceId> = lock(&self.inner.claims).clone();
        let d = self.read(Desired::clone);
        Holdings {
            slices: self.slices_in(&d),
            allocations: d.allocations.values().cloned().collect(),
            own: Ownership::of(&d, &claims),
        }
    }

    /// The GPUs a declared layout selects. When the layouts no longer check against the host
    /// (a GPU went away), the GPUs of the last apply's status.
    pub(crate) fn laid_out_gpus(&self) -> BTreeSet<PciAddress> {
        let layouts = self.read(|d| d.layouts.clone());
        if layouts.is_empty() {
            return BTreeSet::new();
        }
        match self.layout_choices(&layouts) {
            Ok(choices) => choices
                .into_iter()
                .filter(|(_, layout)| layout.is_some())
                .map(|(dev, _)| dev.address)
                .collect(),
            Err(_) => self.layouts().status.iter().map(|s| s.gpu).collect(),
        }
    }
}
