//! Re-reading only the devices that changed in an earlier [`HostInventory`].
//!
//! A change made to one GPU (a MIG instance, an mdev, its VFs, a vGPU type) changes what is read
//! about that GPU and its functions, and nothing else: the other GPUs, the NUMA nodes, the other
//! PCI functions and the vendor libraries read the same as before. [`refresh`] reads the named
//! GPUs and virtual mdev parents again, the same way [`discover`](crate::discover) reads them, and
//! keeps the rest. Where that could differ from a whole discovery it answers `None` and the
//! caller discovers the host again:
//!
//! - a device the earlier inventory does not list as a GPU or an mdev parent (a new device, an
//!   SR-IOV function that is no GPU);
//! - a GPU whose driver changed: NVML numbers the GPUs its driver holds, so a GPU that joins
//!   or leaves the driver (passthrough) can renumber the others;
//! - anything that cannot be read: a whole discovery reports it where it belongs.

use std::collections::BTreeMap;

use ids::{MdevParentName, PciAddress};

use crate::discover::{Context, HostAccess, PciMap, amd_gpus, build_gpu, parent_info, pci_info};
use crate::model::{Gpu, HostInventory};

/// `prev` with the GPUs `gpus` and the mdev parents `parents` (virtual ones, not PCI functions)
/// read again; `None` where only a whole discovery answers the same (see the module doc).
pub fn refresh(
    host: &HostAccess,
    prev: &HostInventory,
    gpus: &[PciAddress],
    parents: &[MdevParentName],
) -> Option<HostInventory> {
    let mut inv = prev.clone();
    if !gpus.is_empty() {
        let amd_asked = (prev.gpus.iter())
            .any(|g| g.vendor == crate::model::Vendor::Amd && gpus.contains(&g.pci_address));
        let amd = match &host.amd {
            // AMD SMI lists every GPU at once: asked only for an AMD GPU that changed.
            Ok((amd, _)) if amd_asked => {
                let mut problems = Vec::new();
                let found = amd_gpus(amd.as_ref(), &mut problems);
                problems.is_empty().then_some(found)?
            }
            _ => BTreeMap::new(),
        };
        for addr in gpus {
            let at = inv.gpus.iter().position(|g| g.pci_address == *addr)?;
            let (gpu, functions) = reread_gpu(host, &inv.gpus[at], &amd)?;
            inv.gpus[at] = gpu;
            inv.pci_devices
                .retain(|p| p.pci_address != *addr && p.physfn != Some(*addr));
            inv.pci_devices.extend(functions.values().map(pci_info));
        }
        inv.pci_devices.sort_by_key(|p| p.pci_address);
    }
    for name in parents {
        let at = (inv.other_mdev_parents.iter()).position(|p| p.name == *name)?;
        let parent = mdev::read_parent(host.sysfs.as_ref(), name).ok()?;
        inv.other_mdev_parents[at] = parent_info(parent);
    }
    Some(inv)
}

/// The GPU as [`discover`](crate::discover) reads it now, with its PCI functions (itself and
/// its VFs); `None` when only a whole discovery can tell.
fn reread_gpu(
    host: &HostAccess,
    was: &Gpu,
    amd: &BTreeMap<PciAddress, gpu::AmdGpuInfo>,
) -> Option<(Gpu, PciMap)> {
    let fs = host.sysfs.as_ref();
    let addr = was.pci_address;
    let dev = vfio::read_device(fs, addr).ok()?;
    if !dev.is_gpu() || dev.is_vf() || dev.driver != was.driver {
        return None;
    }
    let nv = match (was.nvml_index, &host.nvml) {
        (None, _) => None,
        (Some(index), Ok(nvml)) => {
            let info = nvml.device_info(index).ok()?;
            if info.pci_address != addr {
                return None;
            }
            Some(info)
        }
        (Some(_), Err(_)) => return None,
    };
    let mut functions = PciMap::new();
    for vf in dev.sriov.iter().flat_map(|s| &s.vfs) {
        functions.insert(*vf, vfio::read_device(fs, *vf).ok()?);
    }
    let parent = match mdev::read_parent(fs, &MdevParentName::from(addr)) {
        Ok(parent) => Some(parent),
        // No mdev parent (no mdev-capable driver on it): as a discovery finds no such entry.
        Err(mdev::MdevError::UnknownParent { .. }) => None,
        Err(_) => return None,
    };
    let mut mdev_groups = BTreeMap::new();
    for uuid in parent
        .iter()
        .flat_map(|p| &p.types)
        .flat_map(|t| &t.devices)
    {
        let device = mdev::read_device(fs, *uuid).ok()?;
        mdev_groups.insert(*uuid, device.iommu_group);
    }
    let ctx = Context {
        host,
        pci: &functions,
        mdev_groups,
    };
    let gpu = build_gpu(&ctx, &dev, nv.as_ref(), amd.get(&addr), parent);
    functions.insert(addr, dev);
    Some((gpu, functions))
}
