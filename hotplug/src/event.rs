//! The typed device events.

use std::fmt;

use ids::{MdevParentName, MdevUuid, PciAddress};

/// What happened to a device (the uevent's `ACTION`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The device appeared (`add`).
    Added,
    /// The device went away (`remove`).
    Removed,
    /// A driver took the device (`bind`, kernel 4.14+).
    Bound {
        /// The driver's name (`DRIVER`).
        driver: String,
    },
    /// The device's driver let go of it (`unbind`, kernel 4.14+).
    Unbound,
    /// Something about the device changed (`change`, `online`, `offline`, `move`).
    Changed,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Added => f.write_str("added"),
            Action::Removed => f.write_str("removed"),
            Action::Bound { driver } => write!(f, "bound to {driver}"),
            Action::Unbound => f.write_str("unbound"),
            Action::Changed => f.write_str("changed"),
        }
    }
}

/// The device an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    /// A PCI function (`SUBSYSTEM=pci`).
    Pci(PciAddress),
    /// A mediated device (`SUBSYSTEM=mdev`) and its parent, when the path names one.
    Mdev {
        /// The mdev's UUID.
        uuid: MdevUuid,
        /// Its parent device (a PCI function's address, or a virtual parent's name).
        parent: Option<MdevParentName>,
    },
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Pci(a) => write!(f, "PCI device {a}"),
            Device::Mdev {
                uuid,
                parent: Some(p),
            } => write!(f, "mdev {uuid} on {p}"),
            Device::Mdev { uuid, parent: None } => write!(f, "mdev {uuid}"),
        }
    }
}

/// One device event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceEvent {
    /// What happened.
    pub action: Action,
    /// To which device.
    pub device: Device,
    /// The kernel's sequence number (`SEQNUM`), when the event carried a valid one.
    pub seqnum: Option<u64>,
}

impl fmt::Display for DeviceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.device, self.action)
    }
}
