//! mdev parents and their types: one mechanism, several capacity models.
//!
//! A parent is registered under `/sys/class/mdev_bus` either by an NVIDIA GPU of the profile
//! whose model has mdev types, or by an `[[mdev_parents]]` entry (a PCI function of the profile,
//! or a non-PCI device such as the kernel's `mtty`, `mdpy`, `mbochs` samples). What differs is
//! how the types share the parent's capacity, and the errno a create gets when nothing is left:
//!
//! | model | `available_instances` of a type | exhausted | seen in |
//! |---|---|---|---|
//! | homogeneous | its own limit minus its devices; 0 while another type has devices | `EINVAL` | NVIDIA vGPU (mdev) |
//! | pool | free units / the type's cost | `ENOSPC` | mtty (ports), mbochs (MiB) |
//! | instances | the parent's remaining count, the same for every type | `EUSERS` | mdpy |
//! | per-type | its own limit minus its devices | `EINVAL` | captured parents of unknown rules |
//!
//! Errnos: `ENOSPC` for mtty was observed on Linux 6.12 in the rig (`mtty_init_dev` fails the
//! probe). `EUSERS` is what the mdev core returns from its own count for drivers without
//! `get_available` (`mdev_device_create`); mbochs' `ENOSPC` follows `mbochs_init_dev`, which
//! has the same shape as mtty's; neither of these two is exercised by the rig. `EINVAL` is
//! NVIDIA's answer.

use ids::{MdevParentName, MdevTypeId};
use libc::{EINVAL, ENOSPC, EUSERS};

use crate::kernel::Errno;
use crate::profile::{GpuModel, MdevCapacity, MdevParentSpec};
use crate::state::State;

/// Where a parent's types and rule come from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Parent<'a> {
    /// An NVIDIA GPU: types in its model, homogeneous.
    Gpu(&'a GpuModel),
    /// An `[[mdev_parents]]` entry.
    Listed(&'a MdevParentSpec),
}

/// What sysfs shows of one type.
#[derive(Debug, Clone)]
pub(crate) struct TypeAttrs {
    pub id: MdevTypeId,
    pub name: String,
    /// `None`: the driver has no `description` attribute.
    pub description: Option<String>,
    pub device_api: String,
}

/// The parent of this name in the profile (registered or not).
pub(crate) fn parent<'a>(state: &'a State, name: &MdevParentName) -> Option<Parent<'a>> {
    if let Some(p) = state.profile.mdev_parents.iter().find(|p| &p.name == name) {
        return Some(Parent::Listed(p));
    }
    let (_, model) = state.gpu(name.pci_address()?)?;
    (!model.mdev_types.is_empty()).then_some(Parent::Gpu(model))
}

impl Parent<'_> {
    /// The types in the order the profile lists them.
    pub(crate) fn types(&self) -> Vec<TypeAttrs> {
        match self {
            Parent::Gpu(model) => model
                .mdev_types
                .iter()
                .map(|t| TypeAttrs {
                    id: t.id.clone(),
                    name: t.name.clone(),
                    description: Some(t.description.clone()),
                    device_api: "vfio-pci".to_owned(),
                })
                .collect(),
            Parent::Listed(spec) => spec
                .types
                .iter()
                .map(|t| TypeAttrs {
                    id: t.id.clone(),
                    name: t.name.clone(),
                    description: t.description.clone(),
                    device_api: t.device_api.clone(),
                })
                .collect(),
        }
    }

    fn has_type(&self, ty: &MdevTypeId) -> bool {
        self.types().iter().any(|t| &t.id == ty)
    }

    /// The errno a create gets when the type has no instance left.
    pub(crate) fn exhausted_errno(&self) -> Errno {
        match self {
            Parent::Gpu(_) => EINVAL,
            Parent::Listed(spec) => match spec.capacity {
                MdevCapacity::Pool(_) => ENOSPC,
                MdevCapacity::Instances(_) => EUSERS,
                MdevCapacity::PerType => EINVAL,
            },
        }
    }
}

/// `available_instances` of a type: how many more devices of it the parent could create now.
pub(crate) fn available(state: &State, name: &MdevParentName, ty: &MdevTypeId) -> u32 {
    let Some(parent) = parent(state, name) else {
        return 0;
    };
    if !parent.has_type(ty) {
        return 0;
    }
    let on_parent: Vec<&MdevTypeId> = state
        .mdevs
        .values()
        .filter(|m| &m.parent == name)
        .map(|m| &m.type_id)
        .collect();
    let of_type = on_parent.iter().filter(|t| **t == ty).count() as u32;
    match parent {
        Parent::Gpu(model) => homogeneous(model, ty, &on_parent),
        Parent::Listed(spec) => match spec.capacity {
            MdevCapacity::Pool(size) => {
                let cost = |t: &MdevTypeId| {
                    spec.types
                        .iter()
                        .find(|x| &x.id == t)
                        .and_then(|x| x.cost)
                        .unwrap_or(1)
                        .max(1)
                };
                let used: u32 = on_parent.iter().map(|t| cost(t)).sum();
                size.saturating_sub(used) / cost(ty)
            }
            MdevCapacity::Instances(max) => max.saturating_sub(on_parent.len() as u32),
            MdevCapacity::PerType => {
                let limit = spec
                    .types
                    .iter()
                    .find(|x| &x.id == ty)
                    .and_then(|x| x.max_instances)
                    .unwrap_or(0);
                limit.saturating_sub(of_type)
            }
        },
    }
}

/// NVIDIA GPUs are homogeneous: once one type has a device, every other type reads 0; a type's
/// limit is the vGPU framebuffer over the type's, capped by its `max_instances`.
fn homogeneous(model: &GpuModel, ty: &MdevTypeId, on_parent: &[&MdevTypeId]) -> u32 {
    let Some(t) = model.mdev_types.iter().find(|t| &t.id == ty) else {
        return 0;
    };
    if on_parent.iter().any(|x| *x != ty) {
        return 0;
    }
    let fb = model.vgpu_framebuffer_mib.unwrap_or(model.memory_mib);
    let by_fb = u32::try_from(fb / t.framebuffer_mib.max(1)).unwrap_or(u32::MAX);
    let capacity = t.max_instances.map_or(by_fb, |m| m.min(by_fb));
    capacity.saturating_sub(on_parent.len() as u32)
}
