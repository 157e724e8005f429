//! PCI devices, IOMMU groups, SR-IOV and vfio-pci binding, read and written through sysfs.
//!
//! This crate owns the typed model of the host's PCI functions ([`PciDevice`], [`IommuGroup`],
//! [`SriovInfo`]) and the primitive operations on them: setting the VF count, binding a function
//! to vfio-pci and releasing it, and NVIDIA's vendor-specific VFIO vGPU attributes on VFs. Every
//! function takes the [`sysfs::Sysfs`] to use first, so a real host, a fixture tree and the
//! simulator go through the same code.
//!
//! It must not hold state, cache, retry or decide policy (which device to bind, how many VFs):
//! each call reads or writes what it is asked to, re-reads the kernel's answer where the kernel
//! may do less than asked, and reports what it found.

mod amd;
mod bind;
mod command;
mod device;
mod iommu;
mod nvidia;
mod nvidia_sriov;
mod reset;
mod sriov;

pub use amd::{AmdPartitionSysfs, amd_partition};
pub use bind::{Binding, bind_to_vfio, release_from_vfio};
pub use command::{
    CommandOutput, CommandRunner, DEFAULT_COMMAND_TIMEOUT, HostCommand, SRIOV_MANAGE,
    SriovManageAction, SystemRunner,
};
pub use device::{
    NumaSource, PciDevice, PciIdentity, PcieLink, bound_driver, device_class, device_exists,
    is_virtual_function, list_devices, numa_node, read_device, read_identity,
};
pub use iommu::{GroupViability, IommuGroup, group_viability, iommu_group, vfio_node_present};
pub use nvidia::{
    VgpuGpuInstance, VgpuTypeEntry, creatable_vgpu_types, current_vgpu_type, has_vendor_vgpu,
    set_current_vgpu_type, vgpu_gpu_instance,
};
pub use nvidia_sriov::{
    NVIDIA_DRIVER, NvidiaSriovOutcome, PCI_PF_STUB, SriovRoute, StubState,
    finish_interrupted_sequence, has_sriov_manage, interrupted_sequence, set_nvidia_vfs,
};
pub use reset::reset_function;
pub use sriov::{SriovInfo, set_num_vfs};

use std::path::{Path, PathBuf};

use ids::{IommuGroupId, PciAddress};
use sysfs::SysfsError;

/// The driver vgpud binds functions to for passthrough.
pub const VFIO_PCI: &str = "vfio-pci";

const PCI_DEVICES: &str = "/sys/bus/pci/devices";

/// `/sys/bus/pci/devices/<bdf>`: every per-device path is built from a typed address here.
pub(crate) fn device_dir(addr: PciAddress) -> PathBuf {
    Path::new(PCI_DEVICES).join(addr.to_string())
}

/// Why a PCI, IOMMU or SR-IOV operation failed.
#[derive(Debug, thiserror::Error)]
pub enum VfioError {
    /// There is no `/sys/bus/pci/devices/<bdf>`.
    #[error("PCI device {0} does not exist")]
    DeviceNotFound(PciAddress),
    /// An essential attribute of the device (vendor, device, class) is missing or garbage.
    #[error("PCI device {address} is unreadable")]
    Device {
        /// The device.
        address: PciAddress,
        /// The failed access.
        #[source]
        source: SysfsError,
    },
    /// An entry under `/sys/bus/pci/devices` is not a canonical PCI address.
    #[error("{} is not a PCI device: {reason}", path.display())]
    BadDeviceName {
        /// The entry's path.
        path: PathBuf,
        /// What is wrong with the name.
        reason: String,
    },
    /// There is no `/sys/kernel/iommu_groups/<n>`.
    #[error("IOMMU group {0} does not exist")]
    GroupNotFound(IommuGroupId),
    /// The device has no `reset` attribute: the kernel knows no way to reset it alone.
    #[error("PCI device {0} cannot be reset on its own (no reset attribute)")]
    NoReset(PciAddress),
    /// The device has no `sriov_numvfs`.
    #[error("PCI device {0} is not an SR-IOV physical function")]
    NotSriov(PciAddress),
    /// A driver name that cannot safely become a path component.
    #[error("driver name {name:?} is not valid: only letters, digits, '_' and '-' are allowed")]
    BadDriverName {
        /// The rejected name (truncated).
        name: String,
    },
    /// After the binding steps the device is not on vfio-pci.
    #[error(
        "PCI device {address} is bound to {} after probing, not vfio-pci",
        driver_shown(bound)
    )]
    NotBoundToVfio {
        /// The device.
        address: PciAddress,
        /// The driver it is bound to now, if any.
        bound: Option<String>,
    },
    /// Release was asked for a device that another driver holds.
    #[error("PCI device {address} is bound to {driver}, not vfio-pci")]
    BoundElsewhere {
        /// The device.
        address: PciAddress,
        /// The driver holding it.
        driver: String,
    },
    /// After a binding step the device is not on the driver the step binds.
    #[error(
        "PCI device {address} is bound to {} after binding {expected}",
        bound.as_deref().unwrap_or("no driver")
    )]
    NotBoundTo {
        /// The device.
        address: PciAddress,
        /// The driver the step binds.
        expected: String,
        /// The driver it is bound to now, if any.
        bound: Option<String>,
    },
    /// The NVIDIA driver did not grant `/proc/driver/nvidia/gpus/<bdf>/unbindLock`: processes
    /// hold the GPU, and unbinding it now would wait for them.
    #[error("the NVIDIA driver refused the unbind lock of GPU {0}: processes hold the GPU")]
    UnbindLockRefused(PciAddress),
    /// A host command could not be started.
    #[error("cannot run {command}")]
    CommandStart {
        /// The command.
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A host command did not end in time and was killed.
    #[error("{command} did not end within {} s and was killed", after.as_secs())]
    CommandTimeout {
        /// The command.
        command: String,
        /// Its time limit.
        after: std::time::Duration,
    },
    /// A host command ended with a failure status.
    #[error(
        "{command} failed ({}){}",
        status.map_or_else(|| "killed by a signal".to_owned(), |s| format!("exit status {s}")),
        if stderr.is_empty() { String::new() } else { format!(": {stderr}") }
    )]
    CommandFailed {
        /// The command.
        command: String,
        /// Its exit status.
        status: Option<i32>,
        /// What it printed on standard error.
        stderr: String,
    },
    /// A read or write failed; the path names the device and attribute.
    #[error(transparent)]
    Sysfs(#[from] SysfsError),
}

fn driver_shown(bound: &Option<String>) -> String {
    match bound {
        Some(d) => d.clone(),
        None => "no driver (is the vfio-pci module loaded?)".to_owned(),
    }
}

impl VfioError {
    /// The kernel's errno when the failure was a refused system call (`EBUSY` and `ERANGE` for
    /// `sriov_numvfs`, `ENODEV` for a vanished device, ...).
    pub fn errno(&self) -> Option<i32> {
        match self {
            VfioError::Device { source, .. } | VfioError::Sysfs(source) => source.errno(),
            _ => None,
        }
    }
}
