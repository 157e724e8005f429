//! What the two vendor-VFIO backends share: a vGPU type written to a free VF's
//! `nvidia/current_vgpu_type` and read back, the VFs that can take one, the types NVML lists,
//! and the checks that the GPU offers a type at all. Time-sliced types ([`super::nvidia_vfio`])
//! and MIG-backed ones ([`super::mig_vgpu`]) differ in what they need of the GPU's MIG mode and
//! in the GPU instance a MIG-backed one sits in.

use gpu::VgpuTypeInfo;
use ids::{PciAddress, VgpuTypeId};

use crate::engine::error::{EngineError, Result};
use crate::engine::model::{Handles, Identity, SliceKind, SliceSpec};
use crate::engine::timed_host::TimedHost;

/// The spec's vGPU type and explicit GPU-instance start slot.
pub(super) fn type_of(spec: &SliceSpec) -> Result<(VgpuTypeId, Option<u32>)> {
    match &spec.kind {
        SliceKind::NvidiaVfio { vgpu_type, start } => Ok((*vgpu_type, *start)),
        other => Err(EngineError::InvalidRequest(format!(
            "{other} is not a vendor-VFIO vGPU slice"
        ))),
    }
}

/// The GPU, when it can carry vendor-VFIO vGPUs at all (NVIDIA, with SR-IOV).
pub(super) fn vgpu_gpu(host: &TimedHost, gpu: PciAddress) -> Result<vfio::PciDevice> {
    let dev = host.gpu(gpu)?;
    if !TimedHost::is_nvidia(&dev) || dev.sriov.is_none() {
        return Err(EngineError::Unsupported(format!(
            "GPU {} has no NVIDIA SR-IOV vGPU support",
            gpu
        )));
    }
    Ok(dev)
}

/// The GPU can carry vendor-VFIO vGPUs and its driver supports type `ty`.
pub(super) fn check_offered(host: &TimedHost, gpu: PciAddress, ty: VgpuTypeId) -> Result<()> {
    vgpu_gpu(host, gpu)?;
    if !supported(host, gpu)?.contains(&ty) {
        return Err(EngineError::InvalidRequest(format!(
            "GPU {} does not offer vGPU type {ty}",
            gpu
        )));
    }
    Ok(())
}

/// The type the VF carries now, `None` when untyped.
pub(super) fn current(host: &TimedHost, vf: PciAddress) -> Result<Option<VgpuTypeId>> {
    vfio::current_vgpu_type(host.fs(), vf)
        .map_err(|e| EngineError::from_vfio(format!("cannot read the vGPU type of VF {vf}"), e))
}

/// Writes the type (or 0) to the VF, with the driver's refusals as typed errors:
///
/// - creating: `EIO` is how recent vGPU host drivers refuse a type that cannot be created (they
///   log "NVRM: Failed to add vgpu create request"), older ones answered `EINVAL`: both are
///   `no_capacity` when the VF's `creatable_vgpu_types` no longer lists the type. An `EIO` while
///   the driver still lists it is some other failure and stays a host error with its errno;
/// - removing: `EBUSY` on some drivers, `EPERM` on others, while a VM holds the VF: `busy`.
pub(super) fn write_type(
    host: &TimedHost,
    gpu: PciAddress,
    vf: PciAddress,
    ty: Option<VgpuTypeId>,
) -> Result<()> {
    let Err(e) = vfio::set_current_vgpu_type(host.fs(), vf, ty) else {
        return Ok(());
    };
    let errno = e.errno();
    match ty {
        Some(ty)
            if matches!(errno, Some(libc::EINVAL | libc::EIO)) && !creatable_now(host, vf, ty) =>
        {
            Err(EngineError::NoCapacity(format!(
                "the driver refused vGPU type {ty} on VF {vf}: GPU {gpu} has no room for it now ({}{})",
                sysfs::error_chain(&e),
                if errno == Some(libc::EIO) {
                    "; the driver logs \"Failed to add vgpu create request\""
                } else {
                    ""
                }
            )))
        }
        Some(ty) => Err(EngineError::from_vfio(
            format!("cannot set vGPU type {ty} on VF {vf}"),
            e,
        )),
        None if matches!(errno, Some(libc::EBUSY | libc::EPERM)) => {
            Err(EngineError::Busy(format!(
                "the driver refused to remove the vGPU on VF {vf}, which a VM holds: {}",
                sysfs::error_chain(&e)
            )))
        }
        None => Err(EngineError::from_vfio(
            format!("cannot remove the vGPU on VF {vf}"),
            e,
        )),
    }
}

/// Whether the VF's `creatable_vgpu_types` lists the type now (unreadable: no).
fn creatable_now(host: &TimedHost, vf: PciAddress, ty: VgpuTypeId) -> bool {
    vfio::creatable_vgpu_types(host.fs(), vf).is_ok_and(|list| list.iter().any(|t| t.id == ty))
}

/// Writes the type to the untyped VF and reads it back: the driver's answer is the commit point.
pub(super) fn put_type(
    host: &TimedHost,
    gpu: PciAddress,
    vf: PciAddress,
    ty: VgpuTypeId,
) -> Result<()> {
    write_type(host, gpu, vf, Some(ty))?;
    match current(host, vf)? {
        Some(t) if t == ty => Ok(()),
        other => Err(EngineError::Conflict(format!(
            "VF {vf} reads vGPU type {other:?} after writing {ty}"
        ))),
    }
}

fn driver(host: &TimedHost, vf: PciAddress) -> Option<String> {
    vfio::bound_driver(host.fs(), vf).ok().flatten()
}

/// The vGPU types NVML lists for the GPU; empty without NVML (a timeout is an error).
pub(crate) fn type_infos(host: &TimedHost, gpu: PciAddress) -> Result<Vec<VgpuTypeInfo>> {
    let (Ok(nvml), Ok(index)) = (host.nvml(), host.nvml_index(gpu)) else {
        return Ok(Vec::new());
    };
    match nvml.supported_vgpu_types(index) {
        Ok(types) => Ok(types),
        Err(e) if e.code == gpu::NvmlCode::TIMEOUT => {
            Err(host.nvml_err(format!("cannot list vGPU types of {gpu}"), gpu, e))
        }
        Err(_) => Ok(Vec::new()),
    }
}

/// The GPU-instance profile id a vGPU type occupies, when NVML says it is MIG-backed.
pub(crate) fn mig_profile_id(
    host: &TimedHost,
    gpu: PciAddress,
    ty: VgpuTypeId,
) -> Result<Option<u32>> {
    Ok(type_infos(host, gpu)?
        .into_iter()
        .find(|t| t.id == ty)
        .and_then(|t| t.gpu_instance_profile_id))
}

/// Types the driver supports on this GPU: NVML's list, else what any VF could take now.
pub(super) fn supported(host: &TimedHost, gpu: PciAddress) -> Result<Vec<VgpuTypeId>> {
    let listed = type_infos(host, gpu)?;
    if !listed.is_empty() {
        return Ok(listed.iter().map(|t| t.id).collect());
    }
    let mut out = Vec::new();
    for (_, vf) in host.vfs(gpu)? {
        if let Ok(list) = vfio::creatable_vgpu_types(host.fs(), vf) {
            out.extend(list.iter().map(|t| t.id));
        }
    }
    Ok(out)
}

/// VFs that can take a vGPU: not reserved by an owned identity, on the NVIDIA driver, untyped.
pub(super) fn free_vfs(
    host: &TimedHost,
    gpu: PciAddress,
    reserved: &[Identity],
) -> Result<Vec<(u32, PciAddress)>> {
    let mut free = Vec::new();
    for (index, vf) in host.vfs(gpu)? {
        let taken = reserved
            .iter()
            .any(|r| r.vf().is_some_and(|(_, a)| a == vf));
        let usable = !taken
            && vfio::has_vendor_vgpu(host.fs(), vf)
            && driver(host, vf).as_deref() != Some(vfio::VFIO_PCI)
            && current(host, vf)?.is_none();
        if usable {
            free.push((index, vf));
        }
    }
    Ok(free)
}

pub(super) fn vf_handles(host: &TimedHost, vf: PciAddress) -> Result<Handles> {
    let dev = host.pci(vf)?;
    Ok(Handles {
        pci_address: Some(vf),
        vfio_group: dev.iommu_group,
        ..Handles::default()
    })
}

/// Removes our type from the VF: already gone is fine, another type is not ours to remove.
pub(super) fn remove_type(
    host: &TimedHost,
    gpu: PciAddress,
    vf: PciAddress,
    ty: VgpuTypeId,
) -> Result<()> {
    if !vfio::device_exists(host.fs(), vf) {
        return Ok(());
    }
    match current(host, vf)? {
        None => Ok(()),
        Some(t) if t != ty => Err(EngineError::Conflict(format!(
            "VF {vf} carries vGPU type {t}, not our {ty}; it is not ours to remove"
        ))),
        Some(_) => write_type(host, gpu, vf, None),
    }
}
