//! The read-only halves of the host-access traits: everything the probe may call.
//!
//! Observation code holds a [`ReadNvml`] and a [`ReadSysfs`], never a `gpu::Nvml` or a
//! `sysfs::Sysfs`: their fields are private and they offer the read-only calls only, so a
//! mutating call (`set_mig_mode`, instance creation or destruction, a sysfs write) does not
//! compile anywhere else in the probe.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use gpu::{
    ComputeInstance, ComputeInstanceProfile, DeviceInfo, GpuInstance, GpuInstanceProfile, MigMode,
    Nvml, NvmlResult, Placement, VgpuTypeInfo,
};
use ids::PciAddress;
use sysfs::{Sysfs, SysfsError};

/// NVML's read-only queries, as `gpu::Nvml` names them.
#[derive(Clone, Copy)]
pub struct ReadNvml<'a>(&'a dyn Nvml);

impl<'a> ReadNvml<'a> {
    /// Read-only access to `nvml`.
    pub fn new(nvml: &'a dyn Nvml) -> Self {
        Self(nvml)
    }

    /// Driver version string.
    pub fn driver_version(&self) -> NvmlResult<String> {
        self.0.driver_version()
    }

    /// Number of GPUs.
    pub fn device_count(&self) -> NvmlResult<u32> {
        self.0.device_count()
    }

    /// Identity and memory of one GPU.
    pub fn device_info(&self, index: u32) -> NvmlResult<DeviceInfo> {
        self.0.device_info(index)
    }

    /// MIG mode, current and pending.
    pub fn mig_mode(&self, index: u32) -> NvmlResult<MigMode> {
        self.0.mig_mode(index)
    }

    /// GPU-instance profiles.
    pub fn gpu_instance_profiles(&self, index: u32) -> NvmlResult<Vec<GpuInstanceProfile>> {
        self.0.gpu_instance_profiles(index)
    }

    /// Every placement a profile allows.
    pub fn gpu_instance_possible_placements(
        &self,
        index: u32,
        profile: u32,
    ) -> NvmlResult<Vec<Placement>> {
        self.0.gpu_instance_possible_placements(index, profile)
    }

    /// How many more instances of a profile fit now.
    pub fn gpu_instance_remaining_capacity(&self, index: u32, profile: u32) -> NvmlResult<u32> {
        self.0.gpu_instance_remaining_capacity(index, profile)
    }

    /// Existing GPU instances.
    pub fn gpu_instances(&self, index: u32) -> NvmlResult<Vec<GpuInstance>> {
        self.0.gpu_instances(index)
    }

    /// Compute-instance profiles of a GPU instance.
    pub fn compute_instance_profiles(
        &self,
        index: u32,
        gi: u32,
    ) -> NvmlResult<Vec<ComputeInstanceProfile>> {
        self.0.compute_instance_profiles(index, gi)
    }

    /// Compute instances of a GPU instance.
    pub fn compute_instances(&self, index: u32, gi: u32) -> NvmlResult<Vec<ComputeInstance>> {
        self.0.compute_instances(index, gi)
    }

    /// vGPU types the GPU supports.
    pub fn supported_vgpu_types(&self, index: u32) -> NvmlResult<Vec<VgpuTypeInfo>> {
        self.0.supported_vgpu_types(index)
    }

    /// GPUs at the far end of active NVLinks.
    pub fn nvlink_peers(&self, index: u32) -> NvmlResult<Vec<PciAddress>> {
        self.0.nvlink_peers(index)
    }
}

/// sysfs (and `/proc`) without `write`.
#[derive(Clone, Copy)]
pub struct ReadSysfs<'a>(&'a dyn Sysfs);

impl<'a> ReadSysfs<'a> {
    /// Read-only access to `fs`.
    pub fn new(fs: &'a dyn Sysfs) -> Self {
        Self(fs)
    }

    /// Reads a whole file (at most `limit` bytes).
    pub fn read(&self, path: &Path, limit: usize) -> Result<Vec<u8>, SysfsError> {
        self.0.read(path, limit)
    }

    /// A link's target, as stored.
    pub fn read_link(&self, path: &Path) -> Result<PathBuf, SysfsError> {
        self.0.read_link(path)
    }

    /// A directory's names.
    pub fn list_dir(&self, path: &Path) -> Result<Vec<OsString>, SysfsError> {
        self.0.list_dir(path)
    }

    /// Whether the path exists.
    pub fn exists(&self, path: &Path) -> bool {
        self.0.exists(path)
    }
}
