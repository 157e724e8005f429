//! The fragmentation measure: how much free GPU capacity the expected workload could not use.
//!
//! This is FGD's measure (Weng et al., ATC 2023) generalised from fractional GPUs to every
//! slicing mode. For each request shape `m` of the target workload (with probability `p_m`):
//! - if the host cannot take `m` at all (too few GPUs where it fits, or no CPU/memory left on
//!   the GPUs' NUMA nodes), all free capacity is a fragment for `m`;
//! - otherwise each GPU contributes the free capacity `m` could not use there: all of it when
//!   `m` does not fit on that GPU (wrong MIG slots, another vGPU size already on it, too small a
//!   remainder), the free MIG slices no free placement of `m` covers, or nothing.
//!
//! The host's fragmentation is `Σ p_m · F(m)`, in GPU units (1000 = one GPU).

use serde::{Deserialize, Serialize};

use crate::cap::Cap;
use crate::model::{GpuMode, GpuState, SliceRequest, Snapshot};

/// The request mix the host expects: the distribution fragmentation is measured against.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// Request shapes with their relative frequency.
    pub items: Vec<WorkItem>,
}

/// One request shape of the expected mix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkItem {
    /// Slice shape.
    pub slice: SliceRequest,
    /// GPUs per request.
    pub count: u32,
    /// CPU per request in milli-CPUs.
    pub cpu_milli: u32,
    /// Memory per request in MiB.
    pub memory_mib: u64,
    /// Relative frequency (need not sum to 1).
    pub weight: f64,
    /// Acceptable GPU models (empty: any).
    pub models: Vec<String>,
}

impl WorkItem {
    /// A single-slice shape with no CPU or memory demand.
    pub fn slice(slice: SliceRequest, weight: f64) -> Self {
        Self {
            slice,
            count: 1,
            cpu_milli: 0,
            memory_mib: 0,
            weight,
            models: Vec::new(),
        }
    }
}

impl Workload {
    /// Every shape the snapshot's GPUs offer, equally likely: the default when the engine has
    /// no history for the host.
    pub fn offered_by(snapshot: &Snapshot) -> Self {
        let mut items: Vec<WorkItem> = Vec::new();
        let mut add = |s: SliceRequest| {
            if !items.iter().any(|i| i.slice == s) {
                items.push(WorkItem::slice(s, 1.0));
            }
        };
        for gpu in &snapshot.gpus {
            match &gpu.mode {
                GpuMode::Whole { .. } => add(SliceRequest::Whole),
                GpuMode::Mig { geometry, .. } => {
                    for s in &geometry.profiles {
                        add(SliceRequest::Mig(s.name.clone()));
                    }
                }
                GpuMode::VendorVgpu { types, .. } => {
                    for t in types {
                        add(SliceRequest::Vgpu(t.id));
                    }
                }
                GpuMode::Mdev { types, .. } => {
                    for t in types {
                        add(SliceRequest::Mdev(t.type_id.clone()));
                    }
                }
                GpuMode::Sriov { .. } => add(SliceRequest::Vf),
                GpuMode::Fractional { .. } => {
                    for m in [250, 500, 1000] {
                        add(SliceRequest::Fraction(m));
                    }
                }
            }
        }
        Self { items }
    }

    /// Sum of the weights.
    pub(crate) fn total_weight(&self) -> f64 {
        self.items.iter().map(|i| i.weight.max(0.0)).sum()
    }
}

/// The free capacity of a host as candidates change it.
#[derive(Debug, Clone)]
pub(crate) struct HostCaps {
    pub caps: Vec<Cap>,
    /// Free milli-CPUs per NUMA node, in snapshot order.
    pub numa_cpu: Vec<u64>,
    /// Free memory per NUMA node.
    pub numa_mem: Vec<u64>,
}

impl HostCaps {
    /// Whether the NUMA node of `gpu` (any node when unknown; no constraint when the snapshot
    /// lists no NUMA node) has `cpu` milli-CPUs and `mem` MiB free.
    pub fn cpu_fits(&self, snap: &Snapshot, gpu: &GpuState, cpu: u32, mem: u64) -> bool {
        if (cpu == 0 && mem == 0) || snap.numa.is_empty() {
            return true;
        }
        let ok = |i: usize| {
            self.numa_cpu.get(i).copied().unwrap_or(0) >= u64::from(cpu)
                && self.numa_mem.get(i).copied().unwrap_or(0) >= mem
        };
        match gpu
            .numa_node
            .and_then(|n| snap.numa.iter().position(|s| s.node == n))
        {
            Some(i) => ok(i),
            None => (0..snap.numa.len()).any(ok),
        }
    }
}

fn model_ok(models: &[String], gpu: &GpuState) -> bool {
    models.is_empty() || models.contains(&gpu.model)
}

/// Expected fragmentation of the host in GPU units (see the module docs).
pub(crate) fn host_frag(snap: &Snapshot, host: &HostCaps, workload: &Workload) -> f64 {
    FragModel::new(snap, workload).measure(snap, host)
}

/// The fragmentation measure of one workload on one snapshot's GPUs, with what depends only on
/// those two worked out once. A decision measures every candidate (tens per request); finding
/// each MIG profile by name, per GPU, per shape and per candidate, was most of a placement
/// score's time.
pub(crate) struct FragModel<'w> {
    items: Vec<PlannedItem<'w>>,
}

/// One shape of the workload against the snapshot's GPUs.
struct PlannedItem<'w> {
    item: &'w WorkItem,
    /// Its share of the workload's weight.
    weight: f64,
    /// Per GPU in snapshot order.
    fits: Vec<Fit>,
}

/// What decides whether a shape can use a GPU, as far as the snapshot alone says.
#[derive(Debug, Clone, Copy)]
enum Fit {
    /// The shape can never use the GPU: a model it does not accept, or a MIG profile the
    /// GPU's geometry does not have.
    Never,
    /// A MIG profile of the GPU's geometry, at this index.
    MigProfile(usize),
    /// The free capacity decides (`Cap::unusable_for`).
    ByCapacity,
}

impl<'w> FragModel<'w> {
    pub(crate) fn new(snap: &Snapshot, workload: &'w Workload) -> Self {
        let total = workload.total_weight();
        let items = workload
            .items
            .iter()
            .filter(|item| total > 0.0 && item.weight > 0.0)
            .map(|item| PlannedItem {
                item,
                weight: item.weight / total,
                fits: snap.gpus.iter().map(|gpu| fit_of(item, gpu)).collect(),
            })
            .collect();
        Self { items }
    }

    /// The host's expected fragmentation in GPU units (see the module docs).
    pub(crate) fn measure(&self, snap: &Snapshot, host: &HostCaps) -> f64 {
        let free: Vec<u32> = snap
            .gpus
            .iter()
            .zip(&host.caps)
            .map(|(g, c)| if g.usable() { c.free_units(g) } else { 0 })
            .collect();
        let free_sum: u32 = free.iter().sum();
        if free_sum == 0 {
            return 0.0;
        }
        let frag: f64 = self
            .items
            .iter()
            .map(|planned| planned.weight * f64::from(planned.lost(snap, host, &free, free_sum)))
            .sum();
        frag / f64::from(crate::model::GPU_UNITS)
    }
}

impl PlannedItem<'_> {
    /// The free capacity this shape could not use: all of it when too few GPUs take it.
    fn lost(&self, snap: &Snapshot, host: &HostCaps, free: &[u32], free_sum: u32) -> u32 {
        let item = self.item;
        let mut fitting = 0u32;
        let mut unusable = 0u32;
        let gpus = snap.gpus.iter().zip(&host.caps).zip(free).zip(&self.fits);
        for (((gpu, cap), f), fit) in gpus {
            if *f == 0 {
                continue;
            }
            let here = match fit {
                Fit::Never => None,
                _ if !host.cpu_fits(snap, gpu, item.cpu_milli, item.memory_mib) => None,
                Fit::MigProfile(i) => cap.unusable_for_profile(gpu, *i),
                Fit::ByCapacity => cap.unusable_for(gpu, &item.slice),
            };
            match here {
                Some(u) => {
                    fitting += 1;
                    unusable += u;
                }
                None => unusable += f,
            }
        }
        if fitting < item.count {
            free_sum
        } else {
            unusable
        }
    }
}

fn fit_of(item: &WorkItem, gpu: &GpuState) -> Fit {
    if !model_ok(&item.models, gpu) {
        return Fit::Never;
    }
    match (&item.slice, &gpu.mode) {
        (SliceRequest::Mig(p), GpuMode::Mig { geometry, .. }) => match geometry.shape(p) {
            Some((i, _)) => Fit::MigProfile(i),
            None => Fit::Never,
        },
        _ => Fit::ByCapacity,
    }
}
