//! nvidia-vfio: NVIDIA's vendor-specific VFIO vGPU (vGPU 17+): a type id written to a free VF's
//! `nvidia/current_vgpu_type`; the VF is then handed to the VM as a PCI device.
//!
//! A time-sliced type shares the GPU's framebuffer and needs MIG mode off. A MIG-backed type
//! (NVML names the GPU-instance profile it occupies) needs MIG mode on and a free GPU instance
//! of its profile, which this backend makes first ([`super::mig_vgpu`]).

use gpu::VgpuTypeInfo;
use ids::{PciAddress, VgpuTypeId};

use super::{Backend, Observed, mig_vgpu, wrong_identity};
use crate::engine::error::{EngineError, Result};
use crate::engine::hostctx::Host;
use crate::engine::model::{BackendKind, Handles, Identity, SliceKind, SliceSpec};
use crate::engine::placement::choose_vf;

pub(crate) struct NvidiaVfioBackend;

fn type_of(spec: &SliceSpec) -> Result<(VgpuTypeId, Option<u32>)> {
    match &spec.kind {
        SliceKind::NvidiaVfio { vgpu_type, start } => Ok((*vgpu_type, *start)),
        other => Err(EngineError::InvalidRequest(format!(
            "{other} is not a vendor-VFIO vGPU slice"
        ))),
    }
}

fn vf_of(id: &Identity) -> Result<(u32, PciAddress)> {
    match id {
        Identity::Vf { index, address } => Ok((*index, *address)),
        other => Err(wrong_identity(BackendKind::NvidiaVfio, other)),
    }
}

pub(super) fn current(host: &Host, vf: PciAddress) -> Result<Option<VgpuTypeId>> {
    vfio::current_vgpu_type(host.fs(), vf)
        .map_err(|e| EngineError::from_vfio(format!("cannot read the vGPU type of VF {vf}"), e))
}

/// Writes the type (or 0) to the VF; the driver's `EINVAL` means it has no room for the type.
pub(super) fn write_type(
    host: &Host,
    gpu: PciAddress,
    vf: PciAddress,
    ty: Option<VgpuTypeId>,
) -> Result<()> {
    vfio::set_current_vgpu_type(host.fs(), vf, ty).map_err(|e| match (ty, e.errno()) {
        (Some(ty), Some(libc::EINVAL)) => EngineError::NoCapacity(format!(
            "the driver refused vGPU type {ty} on VF {vf} (no room on GPU {gpu})"
        )),
        (Some(ty), _) => EngineError::from_vfio(format!("cannot set vGPU type {ty} on VF {vf}"), e),
        (None, _) => EngineError::from_vfio(format!("cannot remove the vGPU on VF {vf}"), e),
    })
}

fn driver(host: &Host, vf: PciAddress) -> Option<String> {
    vfio::bound_driver(host.fs(), vf).ok().flatten()
}

/// The vGPU types NVML lists for the GPU; empty without NVML (a timeout is an error).
pub(crate) fn type_infos(host: &Host, gpu: PciAddress) -> Result<Vec<VgpuTypeInfo>> {
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
pub(crate) fn mig_profile_id(host: &Host, gpu: PciAddress, ty: VgpuTypeId) -> Result<Option<u32>> {
    Ok(type_infos(host, gpu)?
        .into_iter()
        .find(|t| t.id == ty)
        .and_then(|t| t.gpu_instance_profile_id))
}

/// Types the driver supports on this GPU: NVML's list, else what any VF could take now.
fn supported(host: &Host, gpu: PciAddress) -> Result<Vec<VgpuTypeId>> {
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
    host: &Host,
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

pub(super) fn vf_handles(host: &Host, vf: PciAddress) -> Result<Handles> {
    let dev = host.pci(vf)?;
    Ok(Handles {
        pci_address: Some(vf),
        vfio_group: dev.iommu_group,
        ..Handles::default()
    })
}

/// Whether MIG mode is on now (false on a GPU without MIG or without NVML).
fn mig_on(host: &Host, gpu: PciAddress) -> Result<bool> {
    let (Ok(nvml), Ok(index)) = (host.nvml(), host.nvml_index(gpu)) else {
        return Ok(false);
    };
    match nvml.mig_mode(index) {
        Ok(m) => Ok(m.current),
        Err(e) if e.code == gpu::NvmlCode::TIMEOUT => {
            Err(host.nvml_err(format!("cannot read the MIG mode of {gpu}"), gpu, e))
        }
        Err(_) => Ok(false),
    }
}

impl Backend for NvidiaVfioBackend {
    fn validate(&self, host: &Host, spec: &SliceSpec) -> Result<()> {
        let gpu = spec.pci()?;
        let (ty, start) = type_of(spec)?;
        let dev = host.gpu(gpu)?;
        if !Host::is_nvidia(&dev) || dev.sriov.is_none() {
            return Err(EngineError::Unsupported(format!(
                "GPU {} has no NVIDIA SR-IOV vGPU support",
                gpu
            )));
        }
        if !supported(host, gpu)?.contains(&ty) {
            return Err(EngineError::InvalidRequest(format!(
                "GPU {} does not offer vGPU type {ty}",
                gpu
            )));
        }
        match mig_profile_id(host, gpu, ty)? {
            Some(profile) => mig_vgpu::validate(host, gpu, ty, profile, start),
            None if start.is_some() => Err(EngineError::InvalidRequest(format!(
                "vGPU type {ty} is time-sliced: it takes no GPU-instance start slot"
            ))),
            None if mig_on(host, gpu)? => Err(EngineError::Unsupported(format!(
                "vGPU type {ty} is time-sliced and GPU {gpu} has MIG mode on (a layout of time-sliced types turns it off)"
            ))),
            None => Ok(()),
        }
    }

    fn plan(&self, host: &Host, spec: &SliceSpec, reserved: &[Identity]) -> Result<Identity> {
        let gpu = spec.pci()?;
        let (ty, start) = type_of(spec)?;
        if let Some(profile) = mig_profile_id(host, gpu, ty)? {
            return mig_vgpu::plan(host, gpu, ty, profile, start, reserved);
        }
        let Some((index, address)) = choose_vf(&free_vfs(host, gpu, reserved)?) else {
            return Err(EngineError::NoCapacity(format!(
                "GPU {} has no free VF for a vGPU",
                gpu
            )));
        };
        let creatable = vfio::creatable_vgpu_types(host.fs(), address).map_err(|e| {
            EngineError::from_vfio(
                format!("cannot read the creatable types of VF {address}"),
                e,
            )
        })?;
        if !creatable.iter().any(|t| t.id == ty) {
            return Err(EngineError::NoCapacity(format!(
                "GPU {} cannot take another vGPU of type {ty} now (framebuffer used, or other sizes present)",
                gpu
            )));
        }
        Ok(Identity::Vf { index, address })
    }

    fn realize(&self, host: &Host, spec: &SliceSpec, id: &Identity) -> Result<Handles> {
        let gpu = spec.pci()?;
        let (ty, _) = type_of(spec)?;
        if matches!(id, Identity::MigVgpu { .. }) {
            return mig_vgpu::realize(host, gpu, ty, id);
        }
        let (_, vf) = vf_of(id)?;
        if !vfio::device_exists(host.fs(), vf) {
            return Err(EngineError::Conflict(format!(
                "VF {vf} of GPU {} is not enabled",
                gpu
            )));
        }
        match current(host, vf)? {
            Some(t) if t == ty => return vf_handles(host, vf),
            Some(t) => {
                return Err(EngineError::Conflict(format!(
                    "VF {vf} carries vGPU type {t}, not {ty}"
                )));
            }
            None => {}
        }
        write_type(host, gpu, vf, Some(ty))?;
        // The driver's answer is the commit point: read it back.
        match current(host, vf)? {
            Some(t) if t == ty => vf_handles(host, vf),
            other => Err(EngineError::Conflict(format!(
                "VF {vf} reads vGPU type {other:?} after writing {ty}"
            ))),
        }
    }

    fn destroy(&self, host: &Host, spec: &SliceSpec, id: &Identity) -> Result<()> {
        let gpu = spec.pci()?;
        let (ty, _) = type_of(spec)?;
        if matches!(id, Identity::MigVgpu { .. }) {
            return mig_vgpu::destroy(host, gpu, ty, id);
        }
        let (_, vf) = vf_of(id)?;
        remove_type(host, gpu, vf, ty)
    }

    fn observe(&self, host: &Host, spec: &SliceSpec, id: &Identity) -> Result<Observed> {
        let gpu = spec.pci()?;
        let (ty, _) = type_of(spec)?;
        if matches!(id, Identity::MigVgpu { .. }) {
            return mig_vgpu::observe(host, gpu, ty, id);
        }
        let (_, vf) = vf_of(id)?;
        if !vfio::device_exists(host.fs(), vf) {
            return Ok(Observed::Absent);
        }
        Ok(match current(host, vf)? {
            None => Observed::Absent,
            Some(t) if t == ty => Observed::Present(vf_handles(host, vf)?),
            Some(t) => Observed::Changed(format!("VF {vf} carries vGPU type {t}, not {ty}")),
        })
    }
}

/// Removes our type from the VF: already gone is fine, another type is not ours to remove.
pub(super) fn remove_type(
    host: &Host,
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
