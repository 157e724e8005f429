//! The host's capacity as the metrics report it: per GPU and slice type, how many owned slices
//! are free and how many more fit; per GPU, the scheduler's expected fragmentation and waste,
//! and the free capacity no type of the current layout can use (stranded).

use std::collections::HashSet;
use std::sync::Mutex;

use ids::PciAddress;
use numa::CpuSet;

use super::gpu_detail::creatable;
use super::handle::Engine;
use super::locks::lock;
use super::model::{BackendKind, Slice, SliceId, SliceKind, SliceState};
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

/// What a capacity report is computed from: the last report's figures are handed out again
/// while these compare equal (an idle host's poller asked for the same figures every poll,
/// and on 16 GPUs they took a third of the idle daemon's CPU).
#[derive(Debug, PartialEq)]
struct Inputs {
    /// The inventory less NUMA free memory, which moves all the time and which no figure here
    /// depends on (a lone slice asks no VM memory of a node).
    inventory: inventory::HostInventory,
    /// The engine's state, slice ages left out (first fit and the fragmentation and waste
    /// measures do not read them; with them the key would change every second).
    own: Ownership,
    /// What each GPU offers, in inventory order.
    offered: Vec<Vec<(String, SliceKind)>>,
    /// The demand mix the fragmentation and waste are measured against.
    mix: sched::Workload,
}

/// One GPU's figures apart from its free slices, which are counted from the slices each time.
#[derive(Debug, Clone)]
struct GpuFigures {
    gpu: PciAddress,
    /// Per offered type: its name, kind and how many more fit.
    types: Vec<(String, SliceKind, u32)>,
    fragmentation: f64,
    waste: f64,
    stranded: f64,
}

/// The last capacity report's inputs and figures.
#[derive(Debug, Default)]
pub(super) struct CapacityCache {
    last: Mutex<Option<(Inputs, Vec<GpuFigures>)>>,
}

impl Engine {
    /// Capacity of every GPU of `inventory`, given the owned `slices`.
    pub fn capacity(
        &self,
        inventory: &inventory::HostInventory,
        slices: &[Slice],
    ) -> Vec<GpuCapacity> {
        let figures = self.capacity_figures(inventory);
        figures
            .into_iter()
            .map(|f| GpuCapacity {
                gpu: f.gpu,
                types: f
                    .types
                    .into_iter()
                    .map(|(name, kind, creatable)| TypeCapacity {
                        free: slices
                            .iter()
                            .filter(|s| s.spec.gpu == f.gpu && s.spec.kind.satisfies(&kind))
                            .filter(|s| s.state == SliceState::Ready)
                            .count() as u32,
                        creatable,
                        backend: kind.backend(),
                        slice_type: name,
                    })
                    .collect(),
                fragmentation: f.fragmentation,
                waste: f.waste,
                stranded: f.stranded,
            })
            .collect()
    }

    /// Every GPU's figures: the last ones while their inputs are the same, else computed.
    fn capacity_figures(&self, inventory: &inventory::HostInventory) -> Vec<GpuFigures> {
        let claims: HashSet<SliceId> = lock(&self.inner.claims).clone();
        let mut own = self.read(|d| Ownership::of(d, &claims));
        own.forget_ages();
        let mut inventory = inventory.clone();
        for node in &mut inventory.numa_nodes {
            node.memory_free_mib = 0;
        }
        let view = snapshot::build(&inventory, &own, None, None, &CpuSet::default());
        let inputs = Inputs {
            offered: inventory
                .gpus
                .iter()
                .map(|g| self.offered_types(g))
                .collect(),
            mix: self.demand_mix_on(&view.snap).mix,
            inventory,
            own,
        };
        if let Some((kept, figures)) = lock(&self.inner.capacity.last).as_ref()
            && *kept == inputs
        {
            return figures.clone();
        }
        let figures = figures_of(&inputs, &view.snap);
        *lock(&self.inner.capacity.last) = Some((inputs, figures.clone()));
        figures
    }
}

/// Computes every GPU's figures; `snap` is the scheduler's view of `inputs`.
fn figures_of(inputs: &Inputs, snap: &sched::Snapshot) -> Vec<GpuFigures> {
    let inventory = &inputs.inventory;
    inventory
        .gpus
        .iter()
        .zip(&inputs.offered)
        .map(|(g, offered)| {
            let types: Vec<(String, SliceKind, u32)> = offered
                .iter()
                .map(|(name, kind)| {
                    let n = creatable(inventory, &inputs.own, g.pci_address, kind);
                    (name.clone(), kind.clone(), n)
                })
                .collect();
            let mut alone = snap.clone();
            alone.gpus.retain(|s| s.address == g.pci_address);
            let frag = |w: &sched::Workload| sched::fragmentation(&alone, w).unwrap_or(0.0);
            // With no type left that fits, every shape the GPU offers finds all of its free
            // capacity unusable: the fragmentation for its own offer is that capacity.
            let stranded = if types.iter().all(|t| t.2 == 0) {
                frag(&sched::Workload::offered_by(&alone))
            } else {
                0.0
            };
            GpuFigures {
                gpu: g.pci_address,
                fragmentation: frag(&inputs.mix),
                waste: sched::waste(&alone, &inputs.mix).unwrap_or(0.0),
                stranded,
                types,
            }
        })
        .collect()
}
