//! The NVML host-access trait and the values it exchanges.
//!
//! The trait mirrors NVML's own calls (device by index, MIG profiles by profile id, instances at
//! explicit placements) so the real implementation is a thin wrapper and the simulator can be
//! checked against NVML's documented behaviour, including its return codes.

use std::fmt;

use ids::{MigProfileName, NumaNodeId, PciAddress, VgpuTypeId};
use serde::{Deserialize, Serialize};

/// An NVML return code (`nvmlReturn_t`). Kept numeric so codes newer than this build survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NvmlCode(pub u32);

impl NvmlCode {
    /// NVML was not initialised.
    pub const UNINITIALIZED: Self = Self(1);
    /// An argument was invalid (e.g. a placement the profile does not allow).
    pub const INVALID_ARGUMENT: Self = Self(2);
    /// The device does not support the request (e.g. MIG on a non-MIG GPU).
    pub const NOT_SUPPORTED: Self = Self(3);
    /// The caller lacks permission.
    pub const NO_PERMISSION: Self = Self(4);
    /// An object was not found (e.g. an unknown GPU instance id).
    pub const NOT_FOUND: Self = Self(6);
    /// The kernel driver is not loaded.
    pub const DRIVER_NOT_LOADED: Self = Self(9);
    /// The call timed out.
    pub const TIMEOUT: Self = Self(10);
    /// `libnvidia-ml.so.1` could not be found or loaded.
    pub const LIBRARY_NOT_FOUND: Self = Self(12);
    /// A symbol is missing from the loaded library (driver older than the call).
    pub const FUNCTION_NOT_FOUND: Self = Self(13);
    /// The GPU fell off the bus or is otherwise inaccessible.
    pub const GPU_IS_LOST: Self = Self(15);
    /// The GPU needs a reset (e.g. a pending MIG mode change).
    pub const RESET_REQUIRED: Self = Self(16);
    /// The resource is in use (e.g. destroying an instance with running processes).
    pub const IN_USE: Self = Self(19);
    /// Not enough free resources (e.g. no room for another GPU instance).
    pub const INSUFFICIENT_RESOURCES: Self = Self(23);
    /// An internal or unknown error.
    pub const UNKNOWN: Self = Self(999);

    /// NVML's description of the code (`nvmlErrorString`), for the codes this crate names.
    pub fn description(&self) -> &'static str {
        match self.0 {
            1 => "Uninitialized",
            2 => "Invalid Argument",
            3 => "Not Supported",
            4 => "Insufficient Permissions",
            6 => "Not Found",
            9 => "Driver Not Loaded",
            10 => "Timeout",
            12 => "NVML Shared Library Not Found",
            13 => "Function Not Found",
            15 => "GPU is lost",
            16 => "GPU requires restart",
            19 => "In use by another client",
            23 => "Insufficient resources",
            _ => "Unknown Error",
        }
    }
}

impl fmt::Display for NvmlCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (NVML return code {})", self.description(), self.0)
    }
}

/// A failed NVML call: which call, and NVML's return code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NVML call {call} failed: {code}")]
pub struct NvmlError {
    /// The NVML function, e.g. `nvmlDeviceCreateGpuInstanceWithPlacement`.
    pub call: &'static str,
    /// The return code.
    pub code: NvmlCode,
}

impl NvmlError {
    /// Builds an error.
    pub fn new(call: &'static str, code: NvmlCode) -> Self {
        Self { call, code }
    }
}

/// Result of an NVML call.
pub type NvmlResult<T> = Result<T, NvmlError>;

/// What NVML says about one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// NVML's device index.
    pub index: u32,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Product name, e.g. `NVIDIA A100-SXM4-80GB`.
    pub name: String,
    /// PCI address of the GPU (physical function).
    pub pci_address: PciAddress,
    /// Total framebuffer memory in MiB.
    pub memory_total_mib: u64,
    /// NUMA node NVML reports, when it knows one (used when sysfs says -1).
    pub numa_node: Option<NumaNodeId>,
}

/// MIG mode: current and pending (a change takes effect after a GPU reset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigMode {
    /// MIG enabled now.
    pub current: bool,
    /// MIG enabled after the next reset.
    pub pending: bool,
}

/// What `nvmlDeviceSetMigMode` says in its `activationStatus` out-parameter, apart from its
/// return value: the call can succeed and still leave the mode pending. NVML's reference: "This
/// API may unbind or reset the device to activate the requested mode ... activationStatus would
/// return NVML_ERROR_RESET_REQUIRED" where a reset is needed (e.g. a VM reboot under
/// passthrough), and "NVML_ERROR_IN_USE" when the device is not idle; the caller idles the device
/// and retries (NVML API reference, `nvmlDeviceSetMigMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MigActivation {
    /// The mode took effect (`activationStatus` is `NVML_SUCCESS`).
    Applied,
    /// The mode is pending until the GPU is reset (`NVML_ERROR_RESET_REQUIRED`).
    PendingReset,
    /// The GPU is not idle: the mode is pending until it is, or until a reset
    /// (`NVML_ERROR_IN_USE`).
    InUse,
    /// Any other activation status, with NVML's code.
    Other(NvmlCode),
}

impl MigActivation {
    /// The activation status of NVML's code (`0` is success).
    pub fn from_code(code: NvmlCode) -> Self {
        match code {
            NvmlCode(0) => Self::Applied,
            NvmlCode::RESET_REQUIRED => Self::PendingReset,
            NvmlCode::IN_USE => Self::InUse,
            other => Self::Other(other),
        }
    }

    /// NVML's code for the status (`0` for applied).
    pub fn code(&self) -> NvmlCode {
        match self {
            Self::Applied => NvmlCode(0),
            Self::PendingReset => NvmlCode::RESET_REQUIRED,
            Self::InUse => NvmlCode::IN_USE,
            Self::Other(c) => *c,
        }
    }
}

/// A placement on the GPU's memory-slice axis: `start` slot and `size` in slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Placement {
    /// First memory slice.
    pub start: u32,
    /// Number of memory slices.
    pub size: u32,
}

/// A GPU-instance profile (`nvmlGpuInstanceProfileInfo_v2`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInstanceProfile {
    /// NVML's profile index constant (`NVML_GPU_INSTANCE_PROFILE_*`), used to query the profile.
    pub profile_index: u32,
    /// Profile id, used to create instances; differs by driver and device.
    pub id: u32,
    /// Profile name, e.g. `3g.40gb`.
    pub name: MigProfileName,
    /// Compute slices.
    pub slice_count: u32,
    /// Most instances of this profile on one GPU.
    pub instance_count: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Streaming multiprocessors.
    pub multiprocessor_count: u32,
    /// Copy engines.
    pub copy_engine_count: u32,
    /// Video decoders.
    pub decoder_count: u32,
    /// Video encoders.
    pub encoder_count: u32,
    /// JPEG engines.
    pub jpeg_count: u32,
    /// Optical flow accelerators.
    pub ofa_count: u32,
}

/// An existing GPU instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInstance {
    /// GPU instance id.
    pub id: u32,
    /// Profile id it was created with.
    pub profile_id: u32,
    /// Where it sits.
    pub placement: Placement,
}

/// A compute-instance profile of a GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComputeInstanceProfile {
    /// NVML's profile index constant (`NVML_COMPUTE_INSTANCE_PROFILE_*`).
    pub profile_index: u32,
    /// Profile id.
    pub id: u32,
    /// Compute slices.
    pub slice_count: u32,
    /// Most instances of this profile in the GPU instance.
    pub instance_count: u32,
    /// Streaming multiprocessors.
    pub multiprocessor_count: u32,
}

/// An existing compute instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComputeInstance {
    /// Compute instance id (unique within its GPU instance).
    pub id: u32,
    /// The GPU instance it belongs to.
    pub gpu_instance_id: u32,
    /// Profile id it was created with.
    pub profile_id: u32,
    /// Placement on the GPU instance's compute-slice axis.
    pub placement: Placement,
}

/// Point-in-time telemetry, in the units dcgm-exporter publishes.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Telemetry {
    /// GPU utilisation, percent.
    pub gpu_util_pct: u32,
    /// Memory copy utilisation, percent.
    pub mem_copy_util_pct: u32,
    /// Framebuffer used, MiB.
    pub fb_used_mib: u64,
    /// Framebuffer free, MiB.
    pub fb_free_mib: u64,
    /// Temperature, °C.
    pub temperature_c: u32,
    /// Power draw, milliwatts.
    pub power_mw: u32,
    /// Energy since the driver loaded, millijoules.
    pub energy_mj: u64,
    /// SM clock, MHz.
    pub sm_clock_mhz: u32,
    /// Memory clock, MHz.
    pub mem_clock_mhz: u32,
    /// Current PCIe link generation (`nvmlDeviceGetCurrPcieLinkGeneration`); 0 when unknown.
    #[serde(default)]
    pub pcie_link_gen: u32,
    /// Current PCIe link width, lanes (`nvmlDeviceGetCurrPcieLinkWidth`); 0 when unknown.
    #[serde(default)]
    pub pcie_link_width: u32,
}

/// What NVML reports about one active vGPU instance on a GPU (`nvmlDeviceGetActiveVgpus`, then
/// per instance `nvmlVgpuInstanceGetMdevUUID`, `nvmlVgpuInstanceGetGpuInstanceId`,
/// `nvmlVgpuInstanceGetFbUsage`; utilisation from `nvmlDeviceGetVgpuUtilization`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VgpuUsage {
    /// NVML's vGPU instance handle (`nvmlVgpuInstance_t`).
    pub instance: u32,
    /// The mdev UUID of an mdev-based vGPU; `None` where NVML has none (vendor-specific VFIO).
    pub mdev_uuid: Option<String>,
    /// The GPU instance a MIG-backed vGPU lives in; `None` for a time-sliced one.
    pub gpu_instance_id: Option<u32>,
    /// Framebuffer the guest uses, bytes.
    pub fb_used_bytes: u64,
    /// SM utilisation of the instance over NVML's last sample, percent; `None` when NVML has no
    /// sample for it yet.
    pub sm_util_pct: Option<u32>,
}

/// Memory of one MIG device (`nvmlDeviceGetMigDeviceHandleByIndex`, then
/// `nvmlDeviceGetGpuInstanceId` and `nvmlDeviceGetMemoryInfo` on the MIG device handle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigMemory {
    /// The GPU instance id.
    pub gpu_instance_id: u32,
    /// Framebuffer used, bytes.
    pub used_bytes: u64,
    /// Framebuffer of the instance, bytes.
    pub total_bytes: u64,
}

/// A vGPU type the GPU supports (`nvmlVgpuTypeGet*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = VgpuType))]
pub struct VgpuTypeInfo {
    /// Type id.
    pub id: VgpuTypeId,
    /// Name, e.g. `NVIDIA H200X-1-18C`.
    pub name: String,
    /// Class, e.g. `Compute`, `Quadro`, `NVS`.
    pub class: String,
    /// Framebuffer per vGPU, MiB.
    pub framebuffer_mib: u64,
    /// Most vGPUs of this type on one GPU.
    pub max_instances: u32,
    /// The GPU-instance profile id a MIG-backed type occupies
    /// (`nvmlVgpuTypeGetGpuInstanceProfileId`); `None` for a time-sliced type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance_profile_id: Option<u32>,
}

/// An Xid (driver-reported GPU error) event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidEvent {
    /// UUID of the GPU that reported it.
    pub gpu_uuid: String,
    /// The Xid code, e.g. 79 (fallen off the bus), 48 (double-bit ECC).
    pub xid: u64,
}

/// What NVML says about a GPU's memory errors and clock slowdowns: the signals vgpud's health
/// policy reads. Each value is `None` where the GPU or driver does not report it
/// (`NVML_ERROR_NOT_SUPPORTED`: ECC off, a board without row remapping, a pre-Ampere GPU), never
/// an error. Units and meanings are NVML's (NVML API reference: `nvmlDeviceGetTotalEccErrors`,
/// `nvmlDeviceGetRetiredPages_v2`, `nvmlDeviceGetRetiredPagesPendingStatus`,
/// `nvmlDeviceGetRemappedRows`, `nvmlDeviceGetCurrentClocksEventReasons`) and the field names
/// follow dcgm-exporter's (`DCGM_FI_DEV_ECC_SBE_VOL_TOTAL`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthSignals {
    /// Corrected (single-bit) ECC errors since the driver loaded (volatile counter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_sbe_volatile: Option<u64>,
    /// Uncorrected (double-bit) ECC errors since the driver loaded (volatile counter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_dbe_volatile: Option<u64>,
    /// Pages retired for multiple single-bit errors (pre-Ampere page retirement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_sbe: Option<u64>,
    /// Pages retired for a double-bit error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_dbe: Option<u64>,
    /// Pages waiting for retirement at the next driver reload / GPU reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_pending: Option<bool>,
    /// Rows remapped for correctable errors (Ampere and newer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remapped_correctable: Option<u64>,
    /// Rows remapped for uncorrectable errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remapped_uncorrectable: Option<u64>,
    /// A row remapping failed (the bank ran out of spare rows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remap_failure: Option<bool>,
    /// Clocks-event (throttle) reasons, NVML's `nvmlClocksEventReason*` bitmask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_event_reasons: Option<u64>,
}

/// `nvmlClocksEventReasonSwPowerCap`: clocks lowered to stay under the power limit.
pub const CLOCK_EVENT_SW_POWER_CAP: u64 = 0x4;
/// `nvmlClocksEventReasonHwSlowdown`: hardware slowdown (thermal or power brake), clocks halved
/// or lower.
pub const CLOCK_EVENT_HW_SLOWDOWN: u64 = 0x8;
/// `nvmlClocksEventReasonSwThermalSlowdown`: the driver lowers clocks for temperature.
pub const CLOCK_EVENT_SW_THERMAL: u64 = 0x20;
/// `nvmlClocksEventReasonHwThermalSlowdown`: hardware thermal slowdown.
pub const CLOCK_EVENT_HW_THERMAL: u64 = 0x40;
/// `nvmlClocksEventReasonHwPowerBrakeSlowdown`: external power brake assertion.
pub const CLOCK_EVENT_HW_POWER_BRAKE: u64 = 0x80;

/// Where a GPU's NVLinks lead, as far as peers over an NVSwitch fabric go.
///
/// On HGX/DGX boards every NVLink ends at an NVSwitch: `nvmlDeviceGetNvLinkRemoteDeviceType`
/// answers `NVML_NVLINK_DEVICE_TYPE_SWITCH` and no link names a GPU, yet every GPU on the same
/// fabric can reach every other. On Hopper and newer, `nvmlDeviceGetGpuFabricInfo` says which
/// fabric: the GPU registers with NVIDIA Fabric Manager and, once the state is
/// `NVML_GPU_FABRIC_STATE_COMPLETED` with status `NVML_SUCCESS`, is on the NVLink fabric named by
/// `clusterUuid` and `cliqueId` (NVML API reference, `nvmlDeviceGetGpuFabricInfo`). Older GPUs
/// (DGX A100) and drivers have no such call: their switch links join the host's one fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvlinkFabric {
    /// No active NVLink to an NVSwitch.
    NoSwitch,
    /// Active links to NVSwitches; the GPU cannot say which fabric (no fabric info, or
    /// `NOT_SUPPORTED`): the host's switches form one fabric.
    HostSwitches,
    /// Registered with Fabric Manager on this fabric.
    Registered {
        /// `clusterUuid`.
        cluster_uuid: [u8; 16],
        /// `cliqueId`.
        clique_id: u32,
    },
    /// Fabric registration not complete (not started, in progress, or failed): NVLink
    /// peer-to-peer does not work yet, so the GPU has no fabric peers.
    Unregistered,
}

impl NvlinkFabric {
    /// Whether two GPUs of one host reach each other through the switch fabric.
    pub fn same_fabric(self, other: NvlinkFabric) -> bool {
        match (self, other) {
            (NvlinkFabric::HostSwitches, NvlinkFabric::HostSwitches) => true,
            (
                NvlinkFabric::Registered {
                    cluster_uuid: a,
                    clique_id: x,
                },
                NvlinkFabric::Registered {
                    cluster_uuid: b,
                    clique_id: y,
                },
            ) => a == b && x == y,
            _ => false,
        }
    }
}

/// The GPUs among `others` on the same switch fabric as a GPU with `own`, in address order.
pub fn fabric_peers(own: NvlinkFabric, others: &[(PciAddress, NvlinkFabric)]) -> Vec<PciAddress> {
    let mut peers: Vec<PciAddress> = others
        .iter()
        .filter(|(_, f)| own.same_fabric(*f))
        .map(|(a, _)| *a)
        .collect();
    peers.sort();
    peers.dedup();
    peers
}

/// Narrow access to NVML. Devices are addressed by NVML index, as NVML does.
///
/// Implementations: `gpu::nvml_real::NvmlLibrary` (the real library, loaded at run time) and
/// `sim::SimNvml`. Every method returns NVML's return code on failure, unchanged.
pub trait Nvml: Send + Sync + fmt::Debug {
    /// Driver version string.
    fn driver_version(&self) -> NvmlResult<String>;
    /// Number of GPUs NVML sees.
    fn device_count(&self) -> NvmlResult<u32>;
    /// Identity and memory of one GPU.
    fn device_info(&self, index: u32) -> NvmlResult<DeviceInfo>;
    /// MIG mode; `NOT_SUPPORTED` on GPUs without MIG.
    fn mig_mode(&self, index: u32) -> NvmlResult<MigMode>;
    /// Asks for MIG mode on or off (`nvmlDeviceSetMigMode`) and returns its activation status:
    /// the change may stay pending until the GPU is reset (a process holds the GPU, or the
    /// platform needs a reset). Never resets the GPU itself (NVML has no call that does).
    fn set_mig_mode(&self, index: u32, enabled: bool) -> NvmlResult<MigActivation>;
    /// GPU-instance profiles the GPU offers (profiles NVML reports as not supported are left out).
    fn gpu_instance_profiles(&self, index: u32) -> NvmlResult<Vec<GpuInstanceProfile>>;
    /// Every placement the profile allows on this GPU, occupied or not
    /// (`nvmlDeviceGetGpuInstancePossiblePlacements_v2`).
    fn gpu_instance_possible_placements(
        &self,
        index: u32,
        profile_id: u32,
    ) -> NvmlResult<Vec<Placement>>;
    /// How many more instances of the profile fit now (`nvmlDeviceGetGpuInstanceRemainingCapacity`).
    fn gpu_instance_remaining_capacity(&self, index: u32, profile_id: u32) -> NvmlResult<u32>;
    /// Existing GPU instances, all profiles.
    fn gpu_instances(&self, index: u32) -> NvmlResult<Vec<GpuInstance>>;
    /// Creates a GPU instance at an explicit placement
    /// (`nvmlDeviceCreateGpuInstanceWithPlacement`).
    fn create_gpu_instance(
        &self,
        index: u32,
        profile_id: u32,
        placement: Placement,
    ) -> NvmlResult<GpuInstance>;
    /// Destroys a GPU instance; `IN_USE` while it has compute instances or processes.
    fn destroy_gpu_instance(&self, index: u32, gpu_instance_id: u32) -> NvmlResult<()>;
    /// Compute-instance profiles of a GPU instance.
    fn compute_instance_profiles(
        &self,
        index: u32,
        gpu_instance_id: u32,
    ) -> NvmlResult<Vec<ComputeInstanceProfile>>;
    /// Existing compute instances of a GPU instance.
    fn compute_instances(
        &self,
        index: u32,
        gpu_instance_id: u32,
    ) -> NvmlResult<Vec<ComputeInstance>>;
    /// Creates a compute instance of the given profile in a GPU instance.
    fn create_compute_instance(
        &self,
        index: u32,
        gpu_instance_id: u32,
        profile_id: u32,
    ) -> NvmlResult<ComputeInstance>;
    /// Destroys a compute instance; `IN_USE` while processes run on it.
    fn destroy_compute_instance(
        &self,
        index: u32,
        gpu_instance_id: u32,
        compute_instance_id: u32,
    ) -> NvmlResult<()>;
    /// Current telemetry.
    fn telemetry(&self, index: u32) -> NvmlResult<Telemetry>;
    /// Usage of the GPU's active vGPU instances; empty when it has none or the driver has no
    /// vGPU support.
    fn vgpu_usage(&self, index: u32) -> NvmlResult<Vec<VgpuUsage>>;
    /// Memory of each MIG device of the GPU; `NOT_SUPPORTED` with MIG mode off.
    fn mig_memory(&self, index: u32) -> NvmlResult<Vec<MigMemory>>;
    /// vGPU types the GPU supports; empty on a driver without vGPU.
    fn supported_vgpu_types(&self, index: u32) -> NvmlResult<Vec<VgpuTypeInfo>>;
    /// PCI addresses of GPUs connected to this one by an active NVLink: the far ends of links
    /// that end at a GPU, and every GPU on the same NVSwitch fabric ([`NvlinkFabric`]).
    fn nvlink_peers(&self, index: u32) -> NvmlResult<Vec<PciAddress>>;
    /// Waits up to `timeout_ms` for the next Xid event on any GPU; `None` when none came.
    fn wait_xid_event(&self, timeout_ms: u32) -> NvmlResult<Option<XidEvent>>;
    /// ECC, retired pages, remapped rows and clocks-event reasons; values the GPU does not
    /// report are `None` ([`HealthSignals`]).
    fn health_signals(&self, index: u32) -> NvmlResult<HealthSignals>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> PciAddress {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn activation_status_codes_round_trip() {
        for (code, want) in [
            (0, MigActivation::Applied),
            (16, MigActivation::PendingReset),
            (19, MigActivation::InUse),
            (3, MigActivation::Other(NvmlCode::NOT_SUPPORTED)),
        ] {
            assert_eq!(MigActivation::from_code(NvmlCode(code)), want);
            assert_eq!(want.code(), NvmlCode(code));
        }
    }

    #[test]
    fn gpus_on_one_fabric_are_peers() {
        let reg = |clique| NvlinkFabric::Registered {
            cluster_uuid: [7; 16],
            clique_id: clique,
        };
        let others = [
            (a("0000:2a:00.0"), reg(0)),
            (a("0000:19:00.0"), reg(0)),
            (a("0000:3b:00.0"), reg(1)),
            (a("0000:4c:00.0"), NvlinkFabric::Unregistered),
            (a("0000:5d:00.0"), NvlinkFabric::NoSwitch),
        ];
        assert_eq!(
            fabric_peers(reg(0), &others),
            vec![a("0000:19:00.0"), a("0000:2a:00.0")]
        );
        // Registration not complete: no NVLink peer-to-peer yet.
        assert!(fabric_peers(NvlinkFabric::Unregistered, &others).is_empty());
        assert!(fabric_peers(NvlinkFabric::NoSwitch, &others).is_empty());
    }

    #[test]
    fn switch_links_without_fabric_info_join_the_host_fabric() {
        let others = [
            (a("0000:07:00.0"), NvlinkFabric::HostSwitches),
            (a("0000:0f:00.0"), NvlinkFabric::HostSwitches),
            (a("0000:47:00.0"), NvlinkFabric::NoSwitch),
        ];
        assert_eq!(
            fabric_peers(NvlinkFabric::HostSwitches, &others),
            vec![a("0000:07:00.0"), a("0000:0f:00.0")]
        );
    }
}
