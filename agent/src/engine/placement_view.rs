//! What the Placement reporter reads from the engine beyond its public API: the types each GPU
//! offers with the kind each means there, how many more of one fit, and which GPUs a declared
//! layout selects. Thin doors onto the logic the capacity report uses, never a copy of it.

use std::collections::{BTreeSet, HashSet};

use ids::PciAddress;

use super::gpu_detail::{creatable, offered};
use super::handle::Engine;
use super::locks::lock;
use super::model::{SliceId, SliceKind};
use super::snapshot::Ownership;

impl Engine {
    /// The types `gpu` offers, as requests name them, with the kind each means there.
    pub(crate) fn offered_types(&self, gpu: &inventory::Gpu) -> Vec<(String, SliceKind)> {
        offered(self, gpu)
    }

    /// How many more slices of `kind` fit on `gpu` now, given the slices vgpud owns (first fit,
    /// each alone: what `creatable` of the capacity report says).
    pub(crate) fn creatable_now(
        &self,
        inventory: &inventory::HostInventory,
        gpu: PciAddress,
        kind: &SliceKind,
    ) -> u32 {
        let claims: HashSet<SliceId> = lock(&self.inner.claims).clone();
        let own = self.read(|d| Ownership::of(d, &claims));
        creatable(inventory, &own, gpu, kind)
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
