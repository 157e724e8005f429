//! The host paths the probe reads.
//!
//! The device crates build their own paths and interpret what they read; the probe records the
//! files as the host shows them, including ones vgpud does not read yet (`unbindLock`, every
//! `nvidia/*` entry), so it names them here, once.

use std::path::PathBuf;

use ids::PciAddress;

/// `/sys/bus/pci/devices`.
pub const PCI_DEVICES: &str = "/sys/bus/pci/devices";

/// `/sys/bus/pci/devices/<bdf>`.
pub fn pci_device(addr: PciAddress) -> PathBuf {
    PathBuf::from(PCI_DEVICES).join(addr.to_string())
}

/// `/proc/driver/nvidia/gpus/<bdf>`: the NVIDIA driver's per-GPU directory, where `sriov-manage`
/// takes `unbindLock` before it unbinds the PF.
pub fn nvidia_proc_gpu(addr: PciAddress) -> PathBuf {
    PathBuf::from("/proc/driver/nvidia/gpus").join(addr.to_string())
}

/// `/sys/module/nvidia/version`: the loaded kernel module's version.
pub const NVIDIA_MODULE_VERSION: &str = "/sys/module/nvidia/version";

/// `/proc/sys/kernel/osrelease`: the running kernel.
pub const KERNEL_RELEASE: &str = "/proc/sys/kernel/osrelease";
