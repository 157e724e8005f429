//! Parents under `/sys/class/mdev_bus` and their supported types.

use std::path::{Path, PathBuf};

use ids::{MdevParentName, MdevTypeId, MdevUuid, PciAddress};
use sysfs::{Sysfs, SysfsError, SysfsExt, error_chain};

use crate::{MdevError, parse_entry};

pub(crate) const MDEV_BUS: &str = "/sys/class/mdev_bus";

/// One type under a parent's `mdev_supported_types`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MdevType {
    /// The type id, e.g. `nvidia-222`, `mtty-2`.
    pub id: MdevTypeId,
    /// Human profile name (`name`), e.g. `GRID T4-1Q`.
    pub name: Option<String>,
    /// Free text from the driver (`description`).
    pub description: Option<String>,
    /// `device_api`, e.g. `vfio-pci`.
    pub device_api: Option<String>,
    /// How many more devices of this type can be created now.
    pub available_instances: Option<u32>,
    /// Existing devices of this type, sorted.
    pub devices: Vec<MdevUuid>,
    /// Optional attributes that were missing or garbage, one sentence each.
    pub problems: Vec<String>,
}

/// A device that can host mdevs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MdevParent {
    /// The name under `/sys/class/mdev_bus`.
    pub name: MdevParentName,
    /// The device directory the class link points to (`/sys/devices/...`).
    pub device_path: PathBuf,
    /// The PCI address, when the parent is a PCI function (not for `mtty`, `mdpy`, ...).
    pub pci_address: Option<PciAddress>,
    /// Supported types, sorted by id; a type that cannot be read is left out and named in
    /// `problems`.
    pub types: Vec<MdevType>,
    /// What could not be read, one sentence each.
    pub problems: Vec<String>,
}

pub(crate) fn parent_dir(parent: &MdevParentName) -> PathBuf {
    Path::new(MDEV_BUS).join(parent.as_str())
}

pub(crate) fn type_dir(parent: &MdevParentName, ty: &MdevTypeId) -> PathBuf {
    parent_dir(parent)
        .join("mdev_supported_types")
        .join(ty.as_str())
}

/// The parents under `/sys/class/mdev_bus`, sorted; none when the directory is absent (no
/// mdev-capable driver loaded). Bad entry names are returned as errors beside the rest.
pub fn list_parents(fs: &dyn Sysfs) -> Result<(Vec<MdevParentName>, Vec<MdevError>), MdevError> {
    let dir = Path::new(MDEV_BUS);
    let (names, skipped) = fs.list_names_opt(dir)?;
    let mut errors: Vec<MdevError> = skipped.into_iter().map(MdevError::from).collect();
    let mut parents = Vec::new();
    for name in names {
        match parse_entry::<MdevParentName>(dir, &name, "mdev parent") {
            Ok(p) => parents.push(p),
            Err(e) => errors.push(e),
        }
    }
    Ok((parents, errors))
}

/// Reads a parent and all its types. Only a missing or unresolvable parent fails; types that
/// cannot be read become `problems`.
pub fn read_parent(fs: &dyn Sysfs, name: &MdevParentName) -> Result<MdevParent, MdevError> {
    let dir = parent_dir(name);
    if !fs.exists(&dir) {
        return Err(MdevError::UnknownParent {
            parent: name.clone(),
        });
    }
    let device_path = fs.resolve_link(&dir).map_err(|source| MdevError::Parent {
        parent: name.clone(),
        source,
    })?;
    let pci_address = name.pci_address();
    let mut parent = MdevParent {
        name: name.clone(),
        device_path,
        pci_address,
        types: Vec::new(),
        problems: Vec::new(),
    };
    let types_dir = dir.join("mdev_supported_types");
    let (type_names, skipped) = match fs.list_names(&types_dir) {
        Ok(found) => found,
        Err(e) => {
            parent.problems.push(format!(
                "mdev parent {name} lists no types: {}",
                error_chain(&e)
            ));
            return Ok(parent);
        }
    };
    parent
        .problems
        .extend(skipped.iter().map(|e| error_chain(e)));
    for type_name in type_names {
        let result = parse_entry::<MdevTypeId>(&types_dir, &type_name, "mdev type id")
            .and_then(|ty| read_type(fs, name, &ty));
        match result {
            Ok(t) => parent.types.push(t),
            Err(e) => parent.problems.push(error_chain(&e)),
        }
    }
    Ok(parent)
}

/// Reads one type of a parent. The type's directory must exist and be readable; its attributes
/// are optional.
pub fn read_type(
    fs: &dyn Sysfs,
    parent: &MdevParentName,
    ty: &MdevTypeId,
) -> Result<MdevType, MdevError> {
    let dir = type_dir(parent, ty);
    if !fs.exists(&parent_dir(parent)) {
        return Err(MdevError::UnknownParent {
            parent: parent.clone(),
        });
    }
    if !fs.exists(&dir) {
        return Err(MdevError::UnknownType {
            parent: parent.clone(),
            type_id: ty.clone(),
        });
    }
    if let Err(source) = fs.list_dir(&dir) {
        return Err(MdevError::Type {
            parent: parent.clone(),
            type_id: ty.clone(),
            source,
        });
    }
    let mut problems = Vec::new();
    let mut noted = |r: Result<Option<String>, SysfsError>| {
        r.unwrap_or_else(|e| {
            problems.push(error_chain(&e));
            None
        })
    };
    let name = noted(fs.read_text_opt(&dir.join("name")));
    let description = noted(fs.read_text_opt(&dir.join("description")));
    let device_api = noted(fs.read_text_opt(&dir.join("device_api")));
    let available_instances = fs
        .read_parse_opt::<u32>(&dir.join("available_instances"))
        .unwrap_or_else(|e| {
            problems.push(error_chain(&e));
            None
        });
    let devices = type_devices(fs, &dir.join("devices"), &mut problems);
    Ok(MdevType {
        id: ty.clone(),
        name,
        description,
        device_api,
        available_instances,
        devices,
        problems,
    })
}

fn type_devices(fs: &dyn Sysfs, dir: &Path, problems: &mut Vec<String>) -> Vec<MdevUuid> {
    let (names, skipped) = match fs.list_names_opt(dir) {
        Ok(found) => found,
        Err(e) => {
            problems.push(error_chain(&e));
            return Vec::new();
        }
    };
    problems.extend(skipped.iter().map(|e| error_chain(e)));
    let mut devices = Vec::new();
    for name in names {
        match parse_entry::<MdevUuid>(dir, &name, "mdev UUID") {
            Ok(uuid) => devices.push(uuid),
            Err(e) => problems.push(error_chain(&e)),
        }
    }
    devices.sort();
    devices
}
