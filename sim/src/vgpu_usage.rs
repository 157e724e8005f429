//! What NVML reports about vGPU instances and MIG devices in use: which vGPUs are active, the
//! framebuffer their guests use, their utilisation, and each MIG device's memory.
//!
//! NVML lists a vGPU as active only while a VM runs on it (NVML API reference,
//! `nvmlDeviceGetActiveVgpus`: "the active vGPU instances"); here that is an mdev whose VFIO
//! device a VM holds open, or a typed VF whose group is open. A guest's framebuffer use and the
//! instance's SM utilisation follow the GPU's telemetry walk, so they move as the GPU's do.

use gpu::{MigMemory, VgpuUsage};
use ids::PciAddress;

use crate::profile::GpuModel;
use crate::state::{GiState, State};

const MIB: u64 = 1024 * 1024;

/// Framebuffer a running guest uses on a vGPU of `framebuffer_mib`, bytes.
fn guest_fb_used(framebuffer_mib: u64, util_pct: u32) -> u64 {
    // A running guest holds its driver's reservation plus what its work allocates.
    framebuffer_mib * MIB * u64::from(10 + util_pct.min(100) * 8 / 10) / 100
}

/// The GPU's active vGPU instances, handles numbered from 1 in creation order (mdevs by UUID,
/// then VFs by number), as NVML numbers them per device.
pub(crate) fn active(st: &State, gpu: PciAddress, model: &GpuModel) -> Vec<VgpuUsage> {
    let util = st.gpus.get(&gpu).map_or(0, |g| g.telemetry.gpu_util);
    let mut out = Vec::new();
    let mdevs = st
        .mdevs
        .iter()
        .filter(|(_, m)| m.open && m.parent.pci_address() == Some(gpu))
        .filter_map(|(uuid, m)| {
            let t = model.mdev_types.iter().find(|t| t.id == m.type_id)?;
            Some((Some(uuid.to_string()), None, t.framebuffer_mib))
        });
    let vfs = st
        .vfs_of(gpu)
        .into_iter()
        .filter(|(_, p)| p.open)
        .filter_map(|(_, p)| {
            let vf = p.vf.as_ref()?;
            let t = model
                .vgpu_types
                .iter()
                .find(|t| Some(t.id) == vf.vgpu_type)?;
            // Vendor-specific VFIO vGPUs have no mdev.
            Some((None, vf.gpu_instance, t.framebuffer_mib))
        });
    for (n, (mdev_uuid, gpu_instance_id, fb)) in mdevs.chain(vfs).enumerate() {
        out.push(VgpuUsage {
            instance: n as u32 + 1,
            mdev_uuid,
            gpu_instance_id,
            fb_used_bytes: guest_fb_used(fb, util),
            sm_util_pct: Some(util),
        });
    }
    out
}

/// One MIG device's memory. An idle MIG device shows the driver's own small reservation
/// (nvidia-smi lists e.g. 13 MiB used of a 1g.10gb and 37 MiB of a 3g.40gb with no process:
/// NVIDIA MIG user guide, "Creating GPU instances" listings); one with processes on it uses
/// memory as the GPU's load does.
pub(crate) fn mig_memory(gi: &GiState, gpu_util_pct: u32) -> MigMemory {
    let total = gi.memory_mib * MIB;
    let reserved = (8 + gi.memory_mib / 1000) * MIB;
    let used = if gi.in_use {
        reserved + (total - reserved.min(total)) * u64::from(gpu_util_pct.min(100)) / 100
    } else {
        reserved
    };
    MigMemory {
        gpu_instance_id: gi.id,
        used_bytes: used.min(total),
        total_bytes: total,
    }
}
