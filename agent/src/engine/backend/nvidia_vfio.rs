//! nvidia-vfio: NVIDIA's vendor-specific VFIO vGPU (vGPU 17+): a type id written to a free VF's
//! `nvidia/current_vgpu_type`; the VF is then handed to the VM as a PCI device.

use ids::{PciAddress, VgpuTypeId};
use sysfs::SysfsExt;

use super::{Backend, Observed, wrong_identity};
use crate::engine::error::{EngineError, Result};
use crate::engine::hostctx::Host;
use crate::engine::model::{BackendKind, Handles, Identity, SliceKind, SliceSpec};
use crate::engine::placement::choose_vf;

pub(crate) struct NvidiaVfioBackend;

fn type_of(spec: &SliceSpec) -> Result<VgpuTypeId> {
    match &spec.kind {
        SliceKind::NvidiaVfio { vgpu_type } => Ok(*vgpu_type),
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

fn current(host: &Host, vf: PciAddress) -> Result<Option<VgpuTypeId>> {
    vfio::current_vgpu_type(host.fs(), vf)
        .map_err(|e| EngineError::from_vfio(format!("cannot read the vGPU type of VF {vf}"), e))
}

fn driver(host: &Host, vf: PciAddress) -> Option<String> {
    let path = std::path::Path::new("/sys/bus/pci/devices")
        .join(vf.to_string())
        .join("driver");
    host.fs().link_name_opt(&path).ok().flatten()
}

/// Types the driver supports on this GPU: NVML's list, else what any VF could take now.
fn supported(host: &Host, gpu: PciAddress) -> Result<Vec<VgpuTypeId>> {
    if let Ok(nvml) = host.nvml()
        && let Ok(index) = host.nvml_index(gpu)
    {
        match nvml.supported_vgpu_types(index) {
            Ok(types) if !types.is_empty() => return Ok(types.iter().map(|t| t.id).collect()),
            Ok(_) => {}
            Err(e) if e.code == gpu::NvmlCode::TIMEOUT => {
                return Err(host.nvml_err(format!("cannot list vGPU types of {gpu}"), gpu, e));
            }
            Err(_) => {}
        }
    }
    let mut out = Vec::new();
    for (_, vf) in host.vfs(gpu)? {
        if let Ok(list) = vfio::creatable_vgpu_types(host.fs(), vf) {
            out.extend(list.iter().map(|t| t.id));
        }
    }
    Ok(out)
}

fn vf_handles(host: &Host, vf: PciAddress) -> Result<Handles> {
    let dev = host.pci(vf)?;
    Ok(Handles {
        pci_address: Some(vf),
        vfio_group: dev.iommu_group,
        ..Handles::default()
    })
}

impl Backend for NvidiaVfioBackend {
    fn validate(&self, host: &Host, spec: &SliceSpec) -> Result<()> {
        let gpu = spec.pci()?;
        let ty = type_of(spec)?;
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
        Ok(())
    }

    fn plan(&self, host: &Host, spec: &SliceSpec, reserved: &[Identity]) -> Result<Identity> {
        let gpu = spec.pci()?;
        let ty = type_of(spec)?;
        let mut free = Vec::new();
        for (index, vf) in host.vfs(gpu)? {
            let taken = reserved
                .iter()
                .any(|r| matches!(r, Identity::Vf { address, .. } if *address == vf));
            let usable = !taken
                && vfio::has_vendor_vgpu(host.fs(), vf)
                && driver(host, vf).as_deref() != Some(vfio::VFIO_PCI)
                && current(host, vf)?.is_none();
            if usable {
                free.push((index, vf));
            }
        }
        let Some((index, address)) = choose_vf(&free) else {
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
        let (ty, (_, vf)) = (type_of(spec)?, vf_of(id)?);
        if !host.fs().exists(&vfio_dev(vf)) {
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
        vfio::set_current_vgpu_type(host.fs(), vf, Some(ty)).map_err(|e| match e.errno() {
            Some(libc::EINVAL) => EngineError::NoCapacity(format!(
                "the driver refused vGPU type {ty} on VF {vf} (no room on GPU {})",
                gpu
            )),
            _ => EngineError::from_vfio(format!("cannot set vGPU type {ty} on VF {vf}"), e),
        })?;
        // The driver's answer is the commit point: read it back.
        match current(host, vf)? {
            Some(t) if t == ty => vf_handles(host, vf),
            other => Err(EngineError::Conflict(format!(
                "VF {vf} reads vGPU type {other:?} after writing {ty}"
            ))),
        }
    }

    fn destroy(&self, host: &Host, spec: &SliceSpec, id: &Identity) -> Result<()> {
        let (ty, (_, vf)) = (type_of(spec)?, vf_of(id)?);
        if !host.fs().exists(&vfio_dev(vf)) {
            return Ok(());
        }
        match current(host, vf)? {
            None => Ok(()),
            Some(t) if t != ty => Err(EngineError::Conflict(format!(
                "VF {vf} carries vGPU type {t}, not our {ty}; it is not ours to remove"
            ))),
            Some(_) => vfio::set_current_vgpu_type(host.fs(), vf, None).map_err(|e| {
                EngineError::from_vfio(format!("cannot remove the vGPU on VF {vf}"), e)
            }),
        }
    }

    fn observe(&self, host: &Host, spec: &SliceSpec, id: &Identity) -> Result<Observed> {
        let (ty, (_, vf)) = (type_of(spec)?, vf_of(id)?);
        if !host.fs().exists(&vfio_dev(vf)) {
            return Ok(Observed::Absent);
        }
        Ok(match current(host, vf)? {
            None => Observed::Absent,
            Some(t) if t == ty => Observed::Present(vf_handles(host, vf)?),
            Some(t) => Observed::Changed(format!("VF {vf} carries vGPU type {t}, not {ty}")),
        })
    }
}

fn vfio_dev(vf: PciAddress) -> std::path::PathBuf {
    std::path::Path::new("/sys/bus/pci/devices").join(vf.to_string())
}
