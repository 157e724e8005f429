//! Compact per-GPU capacity: what each slicing mode can still create, in a form that is cheap
//! to copy, change and measure while candidates are compared.

use crate::error::SchedError;
use crate::mig::{MEMORY_SLICES, MigOccupancy};
use crate::model::{GPU_UNITS, GpuMode, GpuState, SliceChoice, SliceRequest};
use ids::VgpuTypeId;

/// Free capacity of one GPU by mode.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Cap {
    Whole {
        free: bool,
    },
    Mig(MigOccupancy),
    Vgpu {
        current: Option<VgpuTypeId>,
        used: u32,
    },
    Mdev {
        available: Vec<u32>,
    },
    Sriov {
        free: u32,
    },
    Frac {
        free: u32,
    },
}

const SLICE_UNITS: u32 = GPU_UNITS / MEMORY_SLICES as u32;

impl Cap {
    /// The capacity left on `gpu` as its snapshot describes it.
    pub fn of(gpu: &GpuState) -> Result<Self, SchedError> {
        Ok(match &gpu.mode {
            GpuMode::Whole { owner } => Cap::Whole {
                free: owner.is_none(),
            },
            GpuMode::Mig {
                geometry,
                instances,
            } => {
                let mut occ = MigOccupancy {
                    mask: 0,
                    compute: 0,
                    counts: vec![0; geometry.profiles.len()],
                };
                for inst in instances {
                    let (idx, shape) = geometry.shape(&inst.profile).ok_or_else(|| {
                        SchedError::UnknownInstance {
                            gpu: gpu.address,
                            what: inst.profile.to_string(),
                        }
                    })?;
                    occ.place(idx, shape, inst.start);
                }
                Cap::Mig(occ)
            }
            GpuMode::VendorVgpu { active, .. } => Cap::Vgpu {
                current: active.first().map(|a| a.type_id),
                used: active.len() as u32,
            },
            GpuMode::Mdev { types, .. } => Cap::Mdev {
                available: types.iter().map(|t| t.available).collect(),
            },
            GpuMode::Sriov { total_vfs, active } => Cap::Sriov {
                free: total_vfs.saturating_sub(active.len() as u32),
            },
            GpuMode::Fractional { shares } => Cap::Frac {
                free: GPU_UNITS.saturating_sub(shares.iter().map(|s| s.milli).sum()),
            },
        })
    }

    /// Free capacity in GPU units.
    pub fn free_units(&self, gpu: &GpuState) -> u32 {
        match (self, &gpu.mode) {
            (Cap::Whole { free }, _) => u32::from(*free) * GPU_UNITS,
            (Cap::Mig(o), _) => u32::from(o.free_slices()) * SLICE_UNITS,
            (Cap::Vgpu { current, used }, GpuMode::VendorVgpu { types, .. }) => match current {
                None => GPU_UNITS,
                Some(t) => types
                    .iter()
                    .find(|o| o.id == *t)
                    .map(|o| o.max_instances.saturating_sub(*used) * unit(o.max_instances))
                    .unwrap_or(0),
            },
            (Cap::Mdev { available }, GpuMode::Mdev { types, .. }) => available
                .iter()
                .zip(types)
                .map(|(a, t)| (*a).min(t.max_instances.max(1)) * unit(t.max_instances))
                .max()
                .unwrap_or(0),
            (Cap::Sriov { free }, GpuMode::Sriov { total_vfs, .. }) => free * unit(*total_vfs),
            (Cap::Frac { free }, _) => *free,
            _ => 0,
        }
    }

    /// Size in GPU units of `choice` on `gpu`.
    pub fn units(gpu: &GpuState, choice: &SliceChoice) -> u32 {
        match (choice, &gpu.mode) {
            (SliceChoice::Mig { profile, .. }, GpuMode::Mig { geometry, .. }) => geometry
                .shape(profile)
                .map(|(_, s)| u32::from(s.memory_slices) * SLICE_UNITS)
                .unwrap_or(0),
            (SliceChoice::Vgpu(t), GpuMode::VendorVgpu { types, .. }) => types
                .iter()
                .find(|o| o.id == *t)
                .map(|o| unit(o.max_instances))
                .unwrap_or(0),
            (SliceChoice::Mdev(t), GpuMode::Mdev { types, .. }) => types
                .iter()
                .find(|o| o.type_id == *t)
                .map(|o| unit(o.max_instances))
                .unwrap_or(0),
            (SliceChoice::Vf, GpuMode::Sriov { total_vfs, .. }) => unit(*total_vfs),
            (SliceChoice::Whole, _) => GPU_UNITS,
            (SliceChoice::Fraction(m), _) => *m,
            _ => 0,
        }
    }

    /// Every slice that `req` could be on `gpu` now, in the order first-fit takes them.
    pub fn choices(&self, gpu: &GpuState, req: &SliceRequest) -> Vec<SliceChoice> {
        match (req, self, &gpu.mode) {
            (SliceRequest::Mig(p), Cap::Mig(o), GpuMode::Mig { geometry, .. }) => geometry
                .shape(p)
                .map(|(i, s)| {
                    o.free_starts(i, s)
                        .map(|start| SliceChoice::Mig {
                            profile: p.clone(),
                            start,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            (
                SliceRequest::Vgpu(t),
                Cap::Vgpu { current, used },
                GpuMode::VendorVgpu {
                    types, total_vfs, ..
                },
            ) => {
                let room = types
                    .iter()
                    .find(|o| o.id == *t)
                    .is_some_and(|o| *used < o.max_instances && *used < *total_vfs);
                // One size per GPU: a GPU already carrying another type cannot take this one.
                let same_size = current.is_none_or(|c| c == *t);
                if room && same_size {
                    vec![SliceChoice::Vgpu(*t)]
                } else {
                    Vec::new()
                }
            }
            (SliceRequest::Mdev(t), Cap::Mdev { available }, GpuMode::Mdev { types, .. }) => types
                .iter()
                .zip(available)
                .filter(|(o, a)| o.type_id == *t && **a > 0)
                .map(|(o, _)| SliceChoice::Mdev(o.type_id.clone()))
                .collect(),
            (SliceRequest::Vf, Cap::Sriov { free }, _) if *free > 0 => vec![SliceChoice::Vf],
            (SliceRequest::Whole, Cap::Whole { free: true }, _) => vec![SliceChoice::Whole],
            (SliceRequest::Whole, Cap::Frac { free }, _) if *free == GPU_UNITS => {
                vec![SliceChoice::Whole]
            }
            (SliceRequest::Fraction(m), Cap::Frac { free }, _) if *free >= *m => {
                vec![SliceChoice::Fraction(*m)]
            }
            (SliceRequest::Generic { .. }, _, _) => self.generic_choices(gpu, req),
            _ => Vec::new(),
        }
    }

    /// The smallest slice of `gpu` that satisfies a generic size and can be created now.
    fn generic_choices(&self, gpu: &GpuState, req: &SliceRequest) -> Vec<SliceChoice> {
        let SliceRequest::Generic {
            memory_mib,
            compute_milli,
        } = req
        else {
            return Vec::new();
        };
        let (mem, compute) = (*memory_mib, *compute_milli);
        let mut sized: Vec<(u32, SliceRequest)> = match &gpu.mode {
            GpuMode::Mig { geometry, .. } => geometry
                .profiles
                .iter()
                .filter(|s| {
                    s.memory_mib >= mem && u32::from(s.compute_slices) * GPU_UNITS / 7 >= compute
                })
                .map(|s| {
                    (
                        u32::from(s.memory_slices) * 8 + u32::from(s.compute_slices),
                        SliceRequest::Mig(s.name.clone()),
                    )
                })
                .collect(),
            GpuMode::VendorVgpu { types, .. } => types
                .iter()
                .filter(|o| o.framebuffer_mib >= mem && unit(o.max_instances) >= compute)
                .map(|o| (unit(o.max_instances), SliceRequest::Vgpu(o.id)))
                .collect(),
            GpuMode::Mdev { types, .. } => types
                .iter()
                .filter(|o| o.framebuffer_mib >= mem && unit(o.max_instances) >= compute)
                .map(|o| (unit(o.max_instances), SliceRequest::Mdev(o.type_id.clone())))
                .collect(),
            GpuMode::Sriov { total_vfs, .. } => {
                let u = unit(*total_vfs);
                let vf_mem = gpu.memory_mib / u64::from((*total_vfs).max(1));
                if vf_mem >= mem && u >= compute {
                    vec![(u, SliceRequest::Vf)]
                } else {
                    Vec::new()
                }
            }
            GpuMode::Whole { .. } if gpu.memory_mib >= mem => {
                vec![(GPU_UNITS, SliceRequest::Whole)]
            }
            GpuMode::Whole { .. } => Vec::new(),
            GpuMode::Fractional { .. } => {
                let by_mem = (mem * u64::from(GPU_UNITS)).div_ceil(gpu.memory_mib.max(1));
                let milli = u32::try_from(by_mem)
                    .unwrap_or(u32::MAX)
                    .max(compute)
                    .max(1);
                if milli <= GPU_UNITS {
                    vec![(milli, SliceRequest::Fraction(milli))]
                } else {
                    Vec::new()
                }
            }
        };
        sized.sort_by_key(|(size, _)| *size);
        sized
            .into_iter()
            .map(|(_, r)| self.choices(gpu, &r))
            .find(|c| !c.is_empty())
            .unwrap_or_default()
    }

    /// Free capacity of `gpu` that a request of shape `req` could not use even if it were
    /// placed here: `None` when `req` does not fit at all.
    pub fn unusable_for(&self, gpu: &GpuState, req: &SliceRequest) -> Option<u32> {
        match (req, self, &gpu.mode) {
            // The hot path of the fragmentation measure: no allocation.
            (SliceRequest::Fraction(m), Cap::Frac { free }, _) => (*free >= *m).then_some(0),
            (SliceRequest::Whole, Cap::Frac { free }, _) => (*free == GPU_UNITS).then_some(0),
            (SliceRequest::Mig(p), Cap::Mig(_), GpuMode::Mig { geometry, .. }) => {
                let (i, _) = geometry.shape(p)?;
                self.unusable_for_profile(gpu, i)
            }
            (SliceRequest::Vgpu(t), Cap::Vgpu { used, .. }, GpuMode::VendorVgpu { types, .. }) => {
                if self.choices(gpu, req).is_empty() {
                    return None;
                }
                let o = types.iter().find(|o| o.id == *t)?;
                let usable = o.max_instances.saturating_sub(*used) * unit(o.max_instances);
                Some(self.free_units(gpu).saturating_sub(usable))
            }
            _ => {
                let choices = self.choices(gpu, req);
                let c = choices.first()?;
                if let (
                    SliceChoice::Mig { profile, .. },
                    Cap::Mig(o),
                    GpuMode::Mig { geometry, .. },
                ) = (c, self, &gpu.mode)
                {
                    let (i, s) = geometry.shape(profile)?;
                    return Some(u32::from(o.unusable_slices(i, s)) * SLICE_UNITS);
                }
                Some(0)
            }
        }
    }

    /// [`Self::unusable_for`] a MIG request for the profile at `idx` of `gpu`'s geometry
    /// (`None` also when `gpu` is not in MIG mode or has no such profile).
    pub fn unusable_for_profile(&self, gpu: &GpuState, idx: usize) -> Option<u32> {
        let (Cap::Mig(o), GpuMode::Mig { geometry, .. }) = (self, &gpu.mode) else {
            return None;
        };
        let shape = geometry.profiles.get(idx)?;
        o.free_starts(idx, shape).next()?;
        Some(u32::from(o.unusable_slices(idx, shape)) * SLICE_UNITS)
    }

    /// Takes `choice` out of the free capacity.
    pub fn apply(&mut self, gpu: &GpuState, choice: &SliceChoice) {
        match (choice, self, &gpu.mode) {
            (SliceChoice::Mig { profile, start }, Cap::Mig(o), GpuMode::Mig { geometry, .. }) => {
                if let Some((i, s)) = geometry.shape(profile) {
                    o.place(i, s, *start);
                }
            }
            (SliceChoice::Vgpu(t), Cap::Vgpu { current, used }, _) => {
                *current = Some(*t);
                *used += 1;
            }
            (SliceChoice::Mdev(t), Cap::Mdev { available }, GpuMode::Mdev { types, .. }) => {
                for (a, o) in available.iter_mut().zip(types) {
                    if o.type_id == *t {
                        *a = a.saturating_sub(1);
                    } else {
                        // Types of one parent share its framebuffer: creating one device lowers
                        // what the others can still make, proportionally.
                        let own = types
                            .iter()
                            .find(|x| x.type_id == *t)
                            .map(|x| unit(x.max_instances))
                            .unwrap_or(0);
                        let theirs = unit(o.max_instances).max(1);
                        *a = a.saturating_sub(own.div_ceil(theirs));
                    }
                }
            }
            (SliceChoice::Vf, Cap::Sriov { free }, _) => *free = free.saturating_sub(1),
            (SliceChoice::Whole, Cap::Whole { free }, _) => *free = false,
            (SliceChoice::Whole, Cap::Frac { free }, _) => *free = 0,
            (SliceChoice::Fraction(m), Cap::Frac { free }, _) => *free = free.saturating_sub(*m),
            _ => {}
        }
    }

    /// Share of the GPU taken, 0.0 to 1.0.
    pub fn occupancy(&self, gpu: &GpuState) -> f64 {
        1.0 - f64::from(self.free_units(gpu)) / f64::from(GPU_UNITS)
    }
}

/// GPU units of one of `n` equal shares.
fn unit(n: u32) -> u32 {
    GPU_UNITS / n.max(1)
}
