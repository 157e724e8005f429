//! Applying and undoing decisions on a snapshot, so callers (the engine between re-reads, the
//! benchmarks, the defragmentation planner) can keep a snapshot current without the host.

use crate::decide::Decision;
use crate::model::{
    FractionalShare, GpuMode, GpuState, MdevInstance, MigInstance, Occupant, Request, SliceChoice,
    SliceRequest, Snapshot, VgpuInstance,
};

/// The slices a GPU carries now, with their holders.
pub fn slices_of(gpu: &GpuState) -> Vec<(Occupant, SliceChoice)> {
    match &gpu.mode {
        GpuMode::Whole { owner } => owner
            .iter()
            .map(|o| (o.clone(), SliceChoice::Whole))
            .collect(),
        GpuMode::Mig { instances, .. } => instances
            .iter()
            .map(|i| {
                (
                    i.occupant.clone(),
                    SliceChoice::Mig {
                        profile: i.profile.clone(),
                        start: i.start,
                    },
                )
            })
            .collect(),
        GpuMode::VendorVgpu { active, .. } => active
            .iter()
            .map(|i| (i.occupant.clone(), SliceChoice::Vgpu(i.type_id)))
            .collect(),
        GpuMode::Mdev { active, .. } => active
            .iter()
            .map(|i| (i.occupant.clone(), SliceChoice::Mdev(i.type_id.clone())))
            .collect(),
        GpuMode::Sriov { active, .. } => active
            .iter()
            .map(|o| (o.clone(), SliceChoice::Vf))
            .collect(),
        GpuMode::Fractional { shares } => shares
            .iter()
            .map(|s| (s.occupant.clone(), SliceChoice::Fraction(s.milli)))
            .collect(),
    }
}

/// The request shape that re-creates `choice` elsewhere.
pub fn request_of(choice: &SliceChoice) -> SliceRequest {
    match choice {
        SliceChoice::Mig { profile, .. } => SliceRequest::Mig(profile.clone()),
        SliceChoice::Vgpu(t) => SliceRequest::Vgpu(*t),
        SliceChoice::Mdev(t) => SliceRequest::Mdev(t.clone()),
        SliceChoice::Vf => SliceRequest::Vf,
        SliceChoice::Whole => SliceRequest::Whole,
        SliceChoice::Fraction(m) => SliceRequest::Fraction(*m),
    }
}

fn mdev_shift(gpu: &mut GpuState, t: &ids::MdevTypeId, up: bool) {
    if let GpuMode::Mdev { types, .. } = &mut gpu.mode {
        let own = types
            .iter()
            .find(|o| o.type_id == *t)
            .map(|o| 1000 / o.max_instances.max(1))
            .unwrap_or(0);
        for o in types.iter_mut() {
            let step = if o.type_id == *t {
                1
            } else {
                own.div_ceil(1000 / o.max_instances.max(1)).max(1)
            };
            o.available = if up {
                (o.available + step).min(o.max_instances)
            } else {
                o.available.saturating_sub(step)
            };
        }
    }
}

/// Records a new slice on `gpu`.
pub fn add_slice(gpu: &mut GpuState, choice: &SliceChoice, occupant: Occupant) {
    if let SliceChoice::Mdev(t) = choice {
        mdev_shift(gpu, t, false);
    }
    match (&mut gpu.mode, choice) {
        (GpuMode::Whole { owner }, SliceChoice::Whole) => *owner = Some(occupant),
        (GpuMode::Mig { instances, .. }, SliceChoice::Mig { profile, start }) => {
            instances.push(MigInstance {
                profile: profile.clone(),
                start: *start,
                occupant,
            })
        }
        (GpuMode::VendorVgpu { active, .. }, SliceChoice::Vgpu(t)) => active.push(VgpuInstance {
            type_id: *t,
            occupant,
        }),
        (GpuMode::Mdev { active, .. }, SliceChoice::Mdev(t)) => active.push(MdevInstance {
            type_id: t.clone(),
            occupant,
        }),
        (GpuMode::Sriov { active, .. }, SliceChoice::Vf) => active.push(occupant),
        (GpuMode::Fractional { shares }, SliceChoice::Fraction(m)) => {
            shares.push(FractionalShare {
                milli: *m,
                occupant,
            })
        }
        (GpuMode::Fractional { shares }, SliceChoice::Whole) => shares.push(FractionalShare {
            milli: crate::model::GPU_UNITS,
            occupant,
        }),
        _ => {}
    }
}

/// Removes the `index`-th slice of [`slices_of`] from `gpu`.
pub fn remove_slice(gpu: &mut GpuState, index: usize) {
    let mdev_type = match &gpu.mode {
        GpuMode::Mdev { active, .. } => active.get(index).map(|a| a.type_id.clone()),
        _ => None,
    };
    match &mut gpu.mode {
        GpuMode::Whole { owner } => *owner = None,
        GpuMode::Mig { instances, .. } if index < instances.len() => {
            instances.remove(index);
        }
        GpuMode::VendorVgpu { active, .. } if index < active.len() => {
            active.remove(index);
        }
        GpuMode::Mdev { active, .. } if index < active.len() => {
            active.remove(index);
        }
        GpuMode::Sriov { active, .. } if index < active.len() => {
            active.remove(index);
        }
        GpuMode::Fractional { shares } if index < shares.len() => {
            shares.remove(index);
        }
        _ => {}
    }
    if let Some(t) = mdev_type {
        mdev_shift(gpu, &t, true);
    }
}

impl Snapshot {
    /// Records `decision` for `request`: the slices appear on their GPUs and the VM's CPUs and
    /// memory leave its NUMA node.
    pub fn commit(&mut self, request: &Request, decision: &Decision) {
        for p in &decision.placements {
            if let Some(g) = self.gpus.iter_mut().find(|g| g.address == p.gpu) {
                add_slice(g, &p.slice, Occupant::busy(&request.consumer));
            }
        }
        if let Some(n) = decision
            .numa_node
            .and_then(|n| self.numa.iter_mut().find(|s| s.node == n))
        {
            let milli = n.cpu_milli().saturating_sub(u64::from(request.cpu_milli));
            n.free_cpus.retain(|c| !decision.cpus.contains(c));
            n.free_cpu_milli = Some(milli);
            n.free_memory_mib = n.free_memory_mib.saturating_sub(request.memory_mib);
        }
    }

    /// Undoes [`Snapshot::commit`]: the consumer's slices go and its CPUs and memory return.
    pub fn release(&mut self, request: &Request, decision: &Decision) {
        for g in &mut self.gpus {
            while let Some(i) = slices_of(g)
                .iter()
                .position(|(o, _)| o.consumer == request.consumer)
            {
                remove_slice(g, i);
            }
        }
        if let Some(n) = decision
            .numa_node
            .and_then(|n| self.numa.iter_mut().find(|s| s.node == n))
        {
            let milli = n.cpu_milli() + u64::from(request.cpu_milli);
            n.free_cpus.extend(decision.cpus.iter().copied());
            n.free_cpus.sort_unstable();
            n.free_cpu_milli = Some(milli);
            n.free_memory_mib += request.memory_mib;
        }
    }
}
