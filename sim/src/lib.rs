//! A behavioural simulated GPU host behind the same traits as the real kernel and vendor libraries.
//!
//! A [`SimHost`] is built from a [`Profile`] (the hardware: NUMA nodes, PCI bridges, GPUs, other
//! devices) and models what the kernel, the NVIDIA driver/NVML and AMD SMI do when vgpud talks to
//! them: writing a UUID to an mdev type's `create` makes the device appear and lowers
//! `available_instances`; `sriov_numvfs` creates VFs with their own IOMMU groups and refuses a
//! change from non-zero to non-zero; binding follows `driver_override`; MIG placements obey
//! NVIDIA's start-slot rules; errors are the kernel's errnos and the vendors' return codes.
//! Three views expose it: [`SimHost::sysfs`] (`sysfs::Sysfs`, the paths of `docs/sysfs.md`),
//! [`SimHost::nvml`] (`gpu::Nvml`) and [`SimHost::amd`] (`gpu::AmdSmi`).
//!
//! The model lives in memory, or in a state directory (`<dir>/host.json`, guarded by a lock file)
//! so that several processes — the agent, `vgpud sim …` commands, tests — share one host.
//! Faults ([`Fault`]) make chosen accesses fail, hang or half-succeed.
//!
//! This crate owns the simulation only. It must not touch the real host, and production code
//! paths must not use it except behind `--sim`.

mod amd_view;
mod error;
pub mod fault;
mod gim;
mod gim_host;
mod host;
mod kernel;
pub mod latency;
mod mdev;
mod mig;
mod nvml_view;
mod pci_hotplug;
mod profile;
mod state;
mod store;
mod sysfs_view;
mod telemetry;
mod tree;
mod uevent;
mod util;
mod vgpu_host;
mod vgpu_usage;

pub use amd_view::SimAmd;
pub use error::SimError;
pub use fault::{Fault, FaultAction, FaultTarget};
pub use host::{SimHost, VfioDevice};
pub use mig::MigFamily;
pub use nvml_view::SimNvml;
pub use profile::{
    AmdSpec, BridgeSpec, DeviceSpec, GpuModel, GpuSpec, MdevCapacity, MdevParentSpec,
    MdevParentTypeSpec, MdevTypeSpec, NumaNodeSpec, Profile, SriovSpec, VgpuInUseErrno,
    VgpuTypeSpec,
};
pub use sysfs_view::SimSysfs;
pub use uevent::Uevent;
