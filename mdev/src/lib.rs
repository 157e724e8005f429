//! Mediated devices: parents, their supported types, and creating and removing mdevs, through
//! sysfs.
//!
//! This crate owns the typed model of what `/sys/class/mdev_bus` and `/sys/bus/mdev/devices`
//! show ([`MdevParent`], [`MdevType`], [`MdevDevice`]) and the two primitive writes: a UUID to a
//! type's `create`, `1` to a device's `remove`. Every function takes the [`sysfs::Sysfs`] to use
//! first, so a real host, a fixture tree and the simulator go through the same code.
//!
//! It must not hold state, cache, pick UUIDs or types, or persist definitions (mdevs do not
//! survive a reboot; re-creating them is the agent's job).

mod device;
mod parent;

pub use device::{MdevDevice, create, list_devices, read_device, remove};
pub use parent::{MdevParent, MdevType, list_parents, read_parent, read_type};

use std::path::PathBuf;

use ids::{MdevParentName, MdevTypeId, MdevUuid};
use sysfs::SysfsError;

/// Why an mdev operation failed.
#[derive(Debug, thiserror::Error)]
pub enum MdevError {
    /// There is no `/sys/class/mdev_bus/<parent>`.
    #[error("mdev parent {parent} does not exist")]
    UnknownParent {
        /// The parent asked for.
        parent: MdevParentName,
    },
    /// The parent does not enumerate this type under `mdev_supported_types`.
    #[error("mdev parent {parent} has no type {type_id}")]
    UnknownType {
        /// The parent.
        parent: MdevParentName,
        /// The type asked for.
        type_id: MdevTypeId,
    },
    /// `available_instances` of the type is 0.
    #[error("mdev type {type_id} of {parent} has no instances left")]
    NoInstancesLeft {
        /// The parent.
        parent: MdevParentName,
        /// The type.
        type_id: MdevTypeId,
    },
    /// The kernel refused the UUID with EEXIST: an mdev with it exists.
    #[error("an mdev with UUID {uuid} already exists")]
    AlreadyExists {
        /// The UUID.
        uuid: MdevUuid,
    },
    /// There is no `/sys/bus/mdev/devices/<uuid>`.
    #[error("mdev {uuid} does not exist")]
    NotFound {
        /// The UUID.
        uuid: MdevUuid,
    },
    /// The parent's link or directory is unreadable.
    #[error("mdev parent {parent} is unreadable")]
    Parent {
        /// The parent.
        parent: MdevParentName,
        /// The failed access.
        #[source]
        source: SysfsError,
    },
    /// The type's directory or an attribute needed for the operation is unreadable or garbage.
    #[error("mdev type {type_id} of {parent} is unreadable")]
    Type {
        /// The parent.
        parent: MdevParentName,
        /// The type.
        type_id: MdevTypeId,
        /// The failed access.
        #[source]
        source: SysfsError,
    },
    /// The device's links (parent, type, IOMMU group) are unreadable or garbage.
    #[error("mdev {uuid} is unreadable")]
    Device {
        /// The UUID.
        uuid: MdevUuid,
        /// The failed access.
        #[source]
        source: SysfsError,
    },
    /// A directory entry that is not a valid parent name or UUID in the kernel's spelling.
    #[error("{} is not a valid {what}: {reason}", path.display())]
    BadName {
        /// The entry's path.
        path: PathBuf,
        /// What the entry should have been ("mdev parent", "mdev UUID").
        what: &'static str,
        /// What is wrong with the name.
        reason: String,
    },
    /// A read or write failed; the path says which.
    #[error(transparent)]
    Sysfs(#[from] SysfsError),
}

impl MdevError {
    /// The kernel's errno when the failure was a refused system call; `EEXIST` for
    /// [`MdevError::AlreadyExists`], which is how the kernel said it.
    pub fn errno(&self) -> Option<i32> {
        match self {
            MdevError::AlreadyExists { .. } => Some(libc::EEXIST),
            MdevError::Parent { source, .. }
            | MdevError::Type { source, .. }
            | MdevError::Device { source, .. }
            | MdevError::Sysfs(source) => source.errno(),
            _ => None,
        }
    }
}

/// Parses a directory entry, accepting only the kernel's own spelling (paths are later built from
/// the parsed value, so another spelling would miss the entry).
pub(crate) fn parse_entry<T>(
    dir: &std::path::Path,
    name: &str,
    what: &'static str,
) -> Result<T, MdevError>
where
    T: std::str::FromStr<Err = ids::IdError> + std::fmt::Display,
{
    let bad = |reason: String| MdevError::BadName {
        path: dir.join(name),
        what,
        reason,
    };
    let value: T = name.parse().map_err(|e: ids::IdError| bad(e.reason))?;
    if value.to_string() != name {
        return Err(bad(format!("the kernel spells it {value}")));
    }
    Ok(value)
}
