//! IOMMU groups and whether a group can be handed to a VM.

use std::path::PathBuf;

use ids::{IommuGroupId, PciAddress};
use sysfs::{Sysfs, SysfsExt};

use crate::{VFIO_PCI, VfioError, device_dir};

/// An IOMMU group and its PCI functions.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IommuGroup {
    /// The group number.
    pub id: IommuGroupId,
    /// PCI functions in the group, sorted. Members that are not PCI functions (the UUID of an
    /// mdev in its own software group, platform devices) are not listed.
    pub devices: Vec<PciAddress>,
}

/// Whether a group can be given to a VM, and what stands in the way.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GroupViability {
    /// True when no device of the group is bound to a driver other than vfio-pci.
    pub viable: bool,
    /// Each device bound to another driver, with that driver's name.
    pub blockers: Vec<(PciAddress, String)>,
}

fn group_devices_dir(id: IommuGroupId) -> PathBuf {
    PathBuf::from(format!("/sys/kernel/iommu_groups/{}/devices", id.0))
}

/// The PCI functions of `/sys/kernel/iommu_groups/<n>/devices`. An entry name that is not UTF-8
/// fails the call: a group must not look smaller than it is.
pub fn iommu_group(fs: &dyn Sysfs, id: IommuGroupId) -> Result<IommuGroup, VfioError> {
    let (names, mut not_utf8) = fs.list_names(&group_devices_dir(id)).map_err(|e| {
        if e.is_not_found() {
            VfioError::GroupNotFound(id)
        } else {
            VfioError::Sysfs(e)
        }
    })?;
    if let Some(err) = not_utf8.pop() {
        return Err(err.into());
    }
    let mut devices: Vec<PciAddress> = names.iter().filter_map(|n| n.parse().ok()).collect();
    devices.sort();
    Ok(IommuGroup { id, devices })
}

/// Viable iff every PCI function of the group is bound to vfio-pci or to no driver.
///
/// Deliberately strict: the kernel's VFIO itself tolerates a few drivers (`pcieport` bridges,
/// `pci-stub`), but a bridge in the same group as an endpoint usually means the platform lacks
/// ACS isolation, which the operator should see rather than have vgpud wave through.
pub fn group_viability(fs: &dyn Sysfs, id: IommuGroupId) -> Result<GroupViability, VfioError> {
    let group = iommu_group(fs, id)?;
    let mut blockers = Vec::new();
    for addr in group.devices {
        match fs.link_name_opt(&device_dir(addr).join("driver"))? {
            Some(driver) if driver != VFIO_PCI => blockers.push((addr, driver)),
            _ => {}
        }
    }
    Ok(GroupViability {
        viable: blockers.is_empty(),
        blockers,
    })
}

/// Whether `/dev/vfio/<n>` exists, i.e. the group is usable through VFIO right now.
pub fn vfio_node_present(fs: &dyn Sysfs, id: IommuGroupId) -> bool {
    fs.exists(&id.vfio_device())
}
