//! Mediated devices under `/sys/bus/mdev/devices`: reading, creating, removing.

use std::path::{Path, PathBuf};

use ids::{IommuGroupId, MdevParentName, MdevTypeId, MdevUuid};
use sysfs::{Sysfs, SysfsError, SysfsExt};

use crate::parent::{parent_dir, type_dir};
use crate::{MdevError, parse_entry};

const MDEV_DEVICES: &str = "/sys/bus/mdev/devices";

/// An existing mediated device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MdevDevice {
    /// Its UUID.
    pub uuid: MdevUuid,
    /// The parent it was created on.
    pub parent: MdevParentName,
    /// Its type.
    pub type_id: MdevTypeId,
    /// Its IOMMU group (`None` when the kernel shows none, e.g. before a vendor driver opens it).
    pub iommu_group: Option<IommuGroupId>,
}

fn device_dir(uuid: MdevUuid) -> PathBuf {
    Path::new(MDEV_DEVICES).join(uuid.to_string())
}

/// Every mdev under `/sys/bus/mdev/devices`, sorted by UUID; none when the directory is absent.
/// Devices that cannot be read and bad entry names are returned as errors beside the rest.
pub fn list_devices(fs: &dyn Sysfs) -> Result<(Vec<MdevDevice>, Vec<MdevError>), MdevError> {
    let dir = Path::new(MDEV_DEVICES);
    let (names, skipped) = fs.list_names_opt(dir)?;
    let mut errors: Vec<MdevError> = skipped.into_iter().map(MdevError::from).collect();
    let mut devices = Vec::new();
    for name in names {
        match parse_entry::<MdevUuid>(dir, &name, "mdev UUID").and_then(|u| read_device(fs, u)) {
            Ok(dev) => devices.push(dev),
            Err(e) => errors.push(e),
        }
    }
    devices.sort_by_key(|d| d.uuid);
    Ok((devices, errors))
}

/// Reads one mdev: its parent (the directory above it), type (the `mdev_type` link) and IOMMU
/// group. Garbage in any of them fails the device.
pub fn read_device(fs: &dyn Sysfs, uuid: MdevUuid) -> Result<MdevDevice, MdevError> {
    let dir = device_dir(uuid);
    if !fs.exists(&dir) {
        return Err(MdevError::NotFound { uuid });
    }
    let unreadable = |source| MdevError::Device { uuid, source };
    let real = fs.resolve_link(&dir).map_err(unreadable)?;
    let parent = real
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .ok_or_else(|| SysfsError::parse(&dir, format!("{} has no parent device", real.display())))
        .and_then(|name| parse_link_target(&dir, name))
        .map_err(unreadable)?;
    let type_path = dir.join("mdev_type");
    let type_id = fs
        .link_name(&type_path)
        .and_then(|name| parse_link_target(&type_path, &name))
        .map_err(unreadable)?;
    let group_path = dir.join("iommu_group");
    let iommu_group = fs
        .link_name_opt(&group_path)
        .and_then(|name| name.map(|n| parse_link_target(&group_path, &n)).transpose())
        .map_err(unreadable)?;
    Ok(MdevDevice {
        uuid,
        parent,
        type_id,
        iommu_group,
    })
}

fn parse_link_target<T>(path: &Path, name: &str) -> Result<T, SysfsError>
where
    T: std::str::FromStr<Err = ids::IdError>,
{
    name.parse()
        .map_err(|e: ids::IdError| SysfsError::parse(path, e))
}

/// Creates an mdev of type `ty` on `parent` with `uuid` and returns it as the kernel shows it
/// afterwards. Checks first that the parent enumerates the type and has an instance left; the
/// kernel still decides (a duplicate UUID comes back as [`MdevError::AlreadyExists`], any other
/// refusal with its errno).
pub fn create(
    fs: &dyn Sysfs,
    parent: &MdevParentName,
    ty: &MdevTypeId,
    uuid: MdevUuid,
) -> Result<MdevDevice, MdevError> {
    if !fs.exists(&parent_dir(parent)) {
        return Err(MdevError::UnknownParent {
            parent: parent.clone(),
        });
    }
    let dir = type_dir(parent, ty);
    if !fs.exists(&dir) {
        return Err(MdevError::UnknownType {
            parent: parent.clone(),
            type_id: ty.clone(),
        });
    }
    let type_error = |source| MdevError::Type {
        parent: parent.clone(),
        type_id: ty.clone(),
        source,
    };
    let available: u32 = fs
        .read_parse(&dir.join("available_instances"))
        .map_err(type_error)?;
    if available == 0 {
        return Err(MdevError::NoInstancesLeft {
            parent: parent.clone(),
            type_id: ty.clone(),
        });
    }
    match fs.write_str(&dir.join("create"), &uuid.to_string()) {
        Err(e) if e.errno() == Some(libc::EEXIST) => return Err(MdevError::AlreadyExists { uuid }),
        other => other?,
    }
    read_device(fs, uuid)
}

/// Removes an mdev (writes `1` to its `remove`). The kernel's errno is kept (`EBUSY` while a VM
/// has it open).
pub fn remove(fs: &dyn Sysfs, uuid: MdevUuid) -> Result<(), MdevError> {
    let dir = device_dir(uuid);
    if !fs.exists(&dir) {
        return Err(MdevError::NotFound { uuid });
    }
    fs.write_str(&dir.join("remove"), "1")?;
    Ok(())
}
