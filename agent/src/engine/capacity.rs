//! The host's capacity as the metrics report it: per GPU and slice type, how many owned slices
//! are free and how many more fit; per GPU, the scheduler's expected fragmentation and waste,
//! and the free capacity no type of the current layout can use (stranded).

use std::collections::HashSet;

use ids::PciAddress;
use numa::CpuSet;

use super::gpu_detail::creatable;
use super::handle::Engine;
use super::locks::lock;
use super::model::{BackendKind, Slice, SliceId, SliceState};
use super::snapshot::{self, Ownership};

/// One slice type on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeCapacity {
    /// The type as requests name it (`3g.40gb`, `nvidia-222`, a vGPU type name, `vf`, `gpu`).
    pub slice_type: String,
    /// The backend that makes it.
    pub backend: BackendKind,
    /// Owned slices of the type that are ready and unallocated.
    pub free: u32,
    /// How many more could be created now (each alone, first fit).
    pub creatable: u32,
}

/// The capacity figures of one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuCapacity {
    /// The GPU.
    pub gpu: PciAddress,
    /// Per type it offers.
    pub types: Vec<TypeCapacity>,
    /// Expected fragmentation of the GPU for the types the host offers, in GPUs (0..1).
    pub fragmentation: f64,
    /// Expected waste of the GPU, in GPUs (0..1).
    pub waste: f64,
    /// Free capacity no type of the current layout can use, in GPUs (0..1): the GPU's free
    /// capacity when no offered type fits any more, else 0.
    pub stranded: f64,
}

impl Engine {
    /// Capacity of every GPU of `inventory`, given the owned `slices`.
    pub fn capacity(
        &self,
        inventory: &inventory::HostInventory,
        slices: &[Slice],
    ) -> Vec<GpuCapacity> {
        let claims: HashSet<SliceId> = lock(&self.inner.claims).clone();
        let own = self.read(|d| Ownership::of(d, &claims));
        let view = snapshot::build(inventory, &own, None, None, &CpuSet::default());
        let host_workload = self.demand_mix_on(&view.snap).mix;
        inventory
            .gpus
            .iter()
            .map(|g| {
                let types: Vec<TypeCapacity> = self
                    .offered_types(g)
                    .into_iter()
                    .map(|(name, kind)| TypeCapacity {
                        free: slices
                            .iter()
                            .filter(|s| s.spec.gpu == g.pci_address && s.spec.kind.satisfies(&kind))
                            .filter(|s| s.state == SliceState::Ready)
                            .count() as u32,
                        creatable: creatable(inventory, &own, g.pci_address, &kind),
                        backend: kind.backend(),
                        slice_type: name,
                    })
                    .collect();
                let mut alone = view.snap.clone();
                alone.gpus.retain(|s| s.address == g.pci_address);
                let frag = |w: &sched::Workload| sched::fragmentation(&alone, w).unwrap_or(0.0);
                // With no type left that fits, every shape the GPU offers finds all of its free
                // capacity unusable: the fragmentation for its own offer is that capacity.
                let stranded = if types.iter().all(|t| t.creatable == 0) {
                    frag(&sched::Workload::offered_by(&alone))
                } else {
                    0.0
                };
                GpuCapacity {
                    gpu: g.pci_address,
                    fragmentation: frag(&host_workload),
                    waste: sched::waste(&alone, &host_workload).unwrap_or(0.0),
                    stranded,
                    types,
                }
            })
            .collect()
    }
}
