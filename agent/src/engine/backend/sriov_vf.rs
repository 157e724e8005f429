//! sriov-vf: a plain VF (AMD MxGPU, other accelerators) bound to vfio-pci.

use ids::PciAddress;

use super::choose::choose_vf;
use super::{Backend, Observed, wrong_identity};
use crate::engine::error::{EngineError, Result};
use crate::engine::model::{BackendKind, Handles, Identity, SliceKind, SliceSpec};
use crate::engine::timed_host::TimedHost;

pub(crate) struct SriovVfBackend;

fn vf_of(id: &Identity) -> Result<(u32, PciAddress)> {
    match id {
        Identity::Vf { index, address } => Ok((*index, *address)),
        other => Err(wrong_identity(BackendKind::SriovVf, other)),
    }
}

/// The VF's device, `None` when it is not enabled.
fn read_vf(host: &TimedHost, vf: PciAddress) -> Result<Option<vfio::PciDevice>> {
    match host.pci(vf) {
        Ok(d) => Ok(Some(d)),
        Err(EngineError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

fn on_vfio(dev: &vfio::PciDevice) -> bool {
    dev.driver.as_deref() == Some(vfio::VFIO_PCI)
}

impl Backend for SriovVfBackend {
    fn validate(&self, host: &TimedHost, spec: &SliceSpec) -> Result<()> {
        let gpu = spec.pci()?;
        if spec.kind != SliceKind::SriovVf {
            return Err(EngineError::InvalidRequest(format!(
                "{} is not a VF slice",
                spec.kind
            )));
        }
        let dev = host.gpu(gpu)?;
        if dev.sriov.is_none() {
            return Err(EngineError::Unsupported(format!(
                "GPU {} has no SR-IOV",
                gpu
            )));
        }
        // NVIDIA VFs are only usable through a vGPU type (the nvidia-vfio backend).
        if TimedHost::is_nvidia(&dev) {
            return Err(EngineError::Unsupported(format!(
                "GPU {} is NVIDIA: its VFs are used through vGPU types, not as plain VFs",
                gpu
            )));
        }
        Ok(())
    }

    fn plan(&self, host: &TimedHost, spec: &SliceSpec, reserved: &[Identity]) -> Result<Identity> {
        let gpu = spec.pci()?;
        self.validate(host, spec)?;
        let mut free = Vec::new();
        for (index, vf) in host.vfs(gpu)? {
            let taken = reserved
                .iter()
                .any(|r| matches!(r, Identity::Vf { address, .. } if *address == vf));
            if !taken && read_vf(host, vf)?.is_some_and(|d| !on_vfio(&d)) {
                free.push((index, vf));
            }
        }
        let (index, address) = choose_vf(&free)
            .ok_or_else(|| EngineError::NoCapacity(format!("GPU {} has no free VF", gpu)))?;
        Ok(Identity::Vf { index, address })
    }

    fn realize(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<Handles> {
        let gpu = spec.pci()?;
        let (_, vf) = vf_of(id)?;
        if read_vf(host, vf)?.is_none() {
            return Err(EngineError::Conflict(format!(
                "VF {vf} of GPU {} is not enabled",
                gpu
            )));
        }
        vfio::bind_to_vfio(host.fs(), vf)
            .map_err(|e| EngineError::from_vfio(format!("cannot bind VF {vf} to vfio-pci"), e))?;
        match self.observe(host, spec, id)? {
            Observed::Present(h) => Ok(h),
            _ => Err(EngineError::Conflict(format!(
                "VF {vf} is not on vfio-pci after binding"
            ))),
        }
    }

    fn destroy(&self, host: &TimedHost, _spec: &SliceSpec, id: &Identity) -> Result<()> {
        let (_, vf) = vf_of(id)?;
        match read_vf(host, vf)? {
            Some(dev) if on_vfio(&dev) => vfio::release_from_vfio(host.fs(), vf, None)
                .map_err(|e| EngineError::from_vfio(format!("cannot release VF {vf}"), e)),
            _ => Ok(()),
        }
    }

    fn observe(&self, host: &TimedHost, _spec: &SliceSpec, id: &Identity) -> Result<Observed> {
        let (_, vf) = vf_of(id)?;
        Ok(match read_vf(host, vf)? {
            Some(dev) if on_vfio(&dev) => Observed::Present(Handles {
                pci_address: Some(vf),
                vfio_group: dev.iommu_group,
                ..Handles::default()
            }),
            _ => Observed::Absent,
        })
    }
}
