//! The AMD SMI host-access trait and the values it exchanges.
//!
//! Mirrors the AMD SMI calls vgpud needs on an MxGPU host: GPU discovery, VF counts
//! (`amdsmi_get_num_vf` / `amdsmi_set_num_vf`) and compute/memory partition modes.

use std::fmt;

use ids::PciAddress;
use serde::{Deserialize, Serialize};

/// An AMD SMI status code (`amdsmi_status_t`), kept numeric. The ROCm library and GIM's host
/// library number every code vgpud names the same way (`amdsmi.h` of both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AmdStatus(pub u32);

impl AmdStatus {
    /// Invalid parameters.
    pub const INVAL: Self = Self(1);
    /// Not supported by this device or driver.
    pub const NOT_SUPPORTED: Self = Self(2);
    /// Not yet implemented.
    pub const NOT_YET_IMPLEMENTED: Self = Self(3);
    /// Library load failed.
    pub const FAIL_LOAD_MODULE: Self = Self(4);
    /// A symbol is missing from the loaded library.
    pub const FAIL_LOAD_SYMBOL: Self = Self(5);
    /// The driver refused the request (GIM: a set call failed for another reason).
    pub const API_FAILED: Self = Self(7);
    /// The call timed out (also what vgpud reports when a vendor call overruns its bound).
    pub const TIMEOUT: Self = Self(8);
    /// The device was momentarily unavailable; try again (GIM: a semaphore read failed).
    pub const RETRY: Self = Self(9);
    /// Permission denied.
    pub const NO_PERM: Self = Self(10);
    /// An I/O error (e.g. a sysfs write failed).
    pub const IO: Self = Self(12);
    /// Not enough resources (e.g. the kernel enabled fewer VFs than asked).
    pub const OUT_OF_RESOURCES: Self = Self(15);
    /// The library failed to initialise.
    pub const INIT_ERROR: Self = Self(18);
    /// The device is busy.
    pub const BUSY: Self = Self(30);
    /// Not found.
    pub const NOT_FOUND: Self = Self(31);
    /// The library or driver is not initialised.
    pub const NOT_INIT: Self = Self(32);
    /// The kernel driver is not loaded (GIM's host library: its device node is absent).
    pub const DRIVER_NOT_LOADED: Self = Self(34);
    /// A caller's buffer was too small.
    pub const INSUFFICIENT_SIZE: Self = Self(41);
    /// The library or a file returned data that could not be understood.
    pub const UNEXPECTED_DATA: Self = Self(43);
    /// The driver could not be restarted after a change that needs it.
    pub const AMDGPU_RESTART_ERR: Self = Self(54);
    /// The setting cannot be changed now.
    pub const SETTING_UNAVAILABLE: Self = Self(55);
    /// Unknown error.
    pub const UNKNOWN: Self = Self(0xFFFF_FFFF);

    /// A short description of the codes this crate names.
    pub fn description(&self) -> &'static str {
        match self.0 {
            1 => "invalid parameters",
            2 => "not supported",
            3 => "not yet implemented",
            4 => "library load failed",
            5 => "library symbol missing",
            7 => "driver call failed",
            8 => "timed out",
            9 => "temporarily unavailable, retry",
            10 => "permission denied",
            12 => "I/O error",
            15 => "out of resources",
            18 => "library initialisation failed",
            30 => "device busy",
            31 => "not found",
            32 => "not initialised",
            34 => "driver not loaded",
            41 => "buffer too small",
            43 => "unexpected data",
            54 => "driver restart failed",
            55 => "setting unavailable",
            _ => "unknown error",
        }
    }
}

impl fmt::Display for AmdStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (AMD SMI status {})", self.description(), self.0)
    }
}

/// A failed AMD SMI call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("AMD SMI call {call} failed: {status}")]
pub struct AmdError {
    /// The function, e.g. `amdsmi_set_num_vf`.
    pub call: &'static str,
    /// The status code.
    pub status: AmdStatus,
}

impl AmdError {
    /// Builds an error.
    pub fn new(call: &'static str, status: AmdStatus) -> Self {
        Self { call, status }
    }
}

/// Result of an AMD SMI call.
pub type AmdResult<T> = Result<T, AmdError>;

/// What AMD SMI says about one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AmdGpuInfo {
    /// PCI address of the GPU (physical function).
    pub pci_address: PciAddress,
    /// Device UUID, when the library reports one.
    pub uuid: Option<String>,
    /// Market name, e.g. `AMD Instinct MI300X`.
    pub name: String,
    /// Total VRAM in MiB.
    pub memory_total_mib: u64,
}

/// VF counts of an MxGPU physical function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VfCount {
    /// VFs enabled now.
    pub enabled: u32,
    /// Most VFs the GPU can have: GIM reports the PF's SR-IOV TotalVFs (its firmware's limit);
    /// which counts a compute mode takes is [`PartitionState::compute_vf_counts`].
    pub supported: u32,
}

/// Compute and memory partition modes of a GPU, current and available.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    /// Current compute partition mode: `SPX`, `DPX`, `TPX`, `QPX` or `CPX`.
    pub compute: String,
    /// Compute modes the GPU accepts.
    pub compute_available: Vec<String>,
    /// Current memory partition mode: `NPS1`, `NPS2`, `NPS4` or `NPS8`.
    pub memory: String,
    /// Memory modes the GPU accepts.
    pub memory_available: Vec<String>,
    /// On a GIM host, the VF counts each compute mode takes (the unfiltered accelerator profile
    /// table: MI300X SPX `[1]`, DPX `[2]`, QPX `[4]`, CPX `[1, 2, 4, 8]`); empty where unknown
    /// or without VFs.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub compute_vf_counts: std::collections::BTreeMap<String, Vec<u32>>,
}

/// Narrow access to AMD SMI (or its sysfs fallback). GPUs are addressed by PCI address.
pub trait AmdSmi: Send + Sync + fmt::Debug {
    /// AMD GPUs (physical functions) the library sees.
    fn gpus(&self) -> AmdResult<Vec<AmdGpuInfo>>;
    /// VF counts of a GPU.
    fn num_vf(&self, gpu: PciAddress) -> AmdResult<VfCount>;
    /// Sets the number of enabled VFs.
    fn set_num_vf(&self, gpu: PciAddress, count: u32) -> AmdResult<()>;
    /// Partition modes.
    fn partition(&self, gpu: PciAddress) -> AmdResult<PartitionState>;
    /// Sets the compute partition mode; `BUSY` while a VF is in use (on GIM: held by a guest
    /// anywhere in the XGMI hive; GIM applies the mode to the whole hive).
    fn set_compute_partition(&self, gpu: PciAddress, mode: &str) -> AmdResult<()>;
    /// Asks for a memory partition mode; `BUSY` as for the compute mode. On bare-metal amdgpu the
    /// mode is only requested: it applies when the driver next loads, so [`AmdSmi::partition`]
    /// keeps showing the old one until then.
    fn set_memory_partition(&self, gpu: PciAddress, mode: &str) -> AmdResult<()>;
    /// The GPU's XGMI hive id; `None` when it is in no hive. The GPUs of one hive share one
    /// memory partition request.
    fn xgmi_hive(&self, gpu: PciAddress) -> AmdResult<Option<u64>>;
}
