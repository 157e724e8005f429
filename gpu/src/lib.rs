//! GPUs as their vendor libraries describe them.
//!
//! Two narrow host-access traits live here: [`Nvml`] (NVIDIA's management library) and
//! [`AmdSmi`] (AMD's system management interface). Each has a real implementation that loads the
//! vendor library at run time — a host without the driver is normal, not an error — and a
//! behavioural twin in the `sim` crate.
//!
//! Only primitive operations: no policy (which placement to pick), no agent state.

pub mod amd;
pub mod amd_backend;
pub mod amd_real;
pub mod amd_sysfs;
pub mod gim_real;
pub mod nvml;
pub mod nvml_real;

pub use amd::{AmdError, AmdGpuInfo, AmdResult, AmdSmi, AmdStatus, PartitionState, VfCount};
pub use nvml::{
    CLOCK_EVENT_HW_POWER_BRAKE, CLOCK_EVENT_HW_SLOWDOWN, CLOCK_EVENT_HW_THERMAL,
    CLOCK_EVENT_SW_POWER_CAP, CLOCK_EVENT_SW_THERMAL, ComputeInstance, ComputeInstanceProfile,
    DeviceInfo, GpuInstance, GpuInstanceProfile, HealthSignals, MigActivation, MigMemory, MigMode,
    Nvml, NvmlCode, NvmlError, NvmlResult, Placement, Telemetry, VgpuTypeInfo, VgpuUsage, XidEvent,
};
