//! nvidia-vfio, time-sliced: NVIDIA's vendor-specific VFIO vGPU (vGPU 17+) whose type shares
//! the GPU's framebuffer: a type id written to a free VF's `nvidia/current_vgpu_type`; the VF is
//! then handed to the VM as a PCI device. Needs MIG mode off. MIG-backed types are
//! [`super::mig_vgpu`]'s; what both share is in [`super::vf_type`].

use ids::PciAddress;

use super::choose::choose_vf;
use super::vf_type::{
    check_offered, current, free_vfs, put_type, remove_type, type_of, vf_handles,
};
use super::{Backend, Observed, wrong_identity};
use crate::engine::error::{EngineError, Result};
use crate::engine::model::{BackendKind, Handles, Identity, SliceSpec};
use crate::engine::timed_host::TimedHost;

pub(crate) struct NvidiaVfioBackend;

fn vf_of(id: &Identity) -> Result<(u32, PciAddress)> {
    match id {
        Identity::Vf { index, address } => Ok((*index, *address)),
        other => Err(wrong_identity(BackendKind::NvidiaVfio, other)),
    }
}

/// Whether MIG mode is on now (false on a GPU without MIG or without NVML).
fn mig_on(host: &TimedHost, gpu: PciAddress) -> Result<bool> {
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
    fn validate(&self, host: &TimedHost, spec: &SliceSpec) -> Result<()> {
        let gpu = spec.pci()?;
        let (ty, start) = type_of(spec)?;
        check_offered(host, gpu, ty)?;
        if start.is_some() {
            return Err(EngineError::InvalidRequest(format!(
                "vGPU type {ty} is time-sliced: it takes no GPU-instance start slot"
            )));
        }
        if mig_on(host, gpu)? {
            return Err(EngineError::Unsupported(format!(
                "vGPU type {ty} is time-sliced and GPU {gpu} has MIG mode on (a layout of time-sliced types turns it off)"
            )));
        }
        Ok(())
    }

    fn plan(&self, host: &TimedHost, spec: &SliceSpec, reserved: &[Identity]) -> Result<Identity> {
        let gpu = spec.pci()?;
        let (ty, _) = type_of(spec)?;
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

    fn realize(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<Handles> {
        let gpu = spec.pci()?;
        let (ty, _) = type_of(spec)?;
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
        put_type(host, gpu, vf, ty)?;
        vf_handles(host, vf)
    }

    fn destroy(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<()> {
        let gpu = spec.pci()?;
        let (ty, _) = type_of(spec)?;
        let (_, vf) = vf_of(id)?;
        remove_type(host, gpu, vf, ty)
    }

    fn observe(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<Observed> {
        spec.pci()?;
        let (ty, _) = type_of(spec)?;
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
