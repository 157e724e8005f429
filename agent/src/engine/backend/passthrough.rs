//! passthrough: the whole GPU bound to vfio-pci, after checking its IOMMU group can go to a VM.

use super::{Backend, Observed, wrong_identity};
use crate::engine::error::{EngineError, Result};
use crate::engine::model::{BackendKind, Handles, Identity, SliceSpec};
use crate::engine::timed_host::TimedHost;

pub(crate) struct PassthroughBackend;

fn original_driver(id: &Identity) -> Result<Option<&str>> {
    match id {
        Identity::Passthrough { original_driver } => Ok(original_driver.as_deref()),
        other => Err(wrong_identity(BackendKind::Passthrough, other)),
    }
}

/// What the GPU carries that binding it to vfio-pci would tear down.
fn carried_slices(host: &TimedHost, dev: &vfio::PciDevice) -> Result<Vec<String>> {
    let gpu = dev.address;
    let mut found = Vec::new();
    let parent = ids::MdevParentName::from(gpu);
    if let Ok((devices, _)) = mdev::list_devices(host.fs()) {
        found.extend(
            devices
                .iter()
                .filter(|d| d.parent == parent)
                .map(|d| format!("mdev {}", d.uuid)),
        );
    }
    for (_, vf) in host.vfs(gpu)? {
        let typed = vfio::has_vendor_vgpu(host.fs(), vf)
            && vfio::current_vgpu_type(host.fs(), vf)
                .ok()
                .flatten()
                .is_some();
        let bound = vfio::bound_driver(host.fs(), vf).ok().flatten();
        if typed || bound.as_deref() == Some(vfio::VFIO_PCI) {
            found.push(format!("VF {vf}"));
        }
    }
    if TimedHost::is_nvidia(dev)
        && let Ok(nvml) = host.nvml()
        && let Ok(index) = host.nvml_index(gpu)
        && nvml.mig_mode(index).is_ok_and(|m| m.current)
    {
        let gis = nvml
            .gpu_instances(index)
            .map_err(|e| host.nvml_err(format!("cannot list MIG instances of {gpu}"), gpu, e))?;
        found.extend(gis.iter().map(|g| format!("MIG GPU instance {}", g.id)));
    }
    Ok(found)
}

/// Refuses slices of another kind on a GPU bound to vfio-pci as a whole: its mdev parent, VFs
/// and NVML handle are gone while it is, so without this check a create or an allocation that
/// lost the GPU's lock to a passthrough would answer `not_found` (or "not offered"), though
/// the GPU is there and only taken.
pub(crate) fn refuse_if_passed_through(gpu: &vfio::PciIdentity) -> Result<()> {
    if gpu.driver.as_deref() == Some(vfio::VFIO_PCI) {
        return Err(EngineError::Conflict(format!(
            "GPU {} is bound to vfio-pci as a whole (passed through): it carries no slices until it is handed back",
            gpu.address
        )));
    }
    Ok(())
}

fn present(dev: &vfio::PciDevice) -> Observed {
    if dev.driver.as_deref() == Some(vfio::VFIO_PCI) {
        Observed::Present(Handles {
            pci_address: Some(dev.address),
            vfio_group: dev.iommu_group,
            ..Handles::default()
        })
    } else {
        Observed::Absent
    }
}

impl Backend for PassthroughBackend {
    fn validate(&self, host: &TimedHost, spec: &SliceSpec) -> Result<()> {
        let gpu = spec.pci()?;
        let dev = host.gpu(gpu)?;
        let group = dev.iommu_group.ok_or_else(|| {
            EngineError::Unsupported(format!(
                "GPU {} has no IOMMU group: is the IOMMU enabled (intel_iommu=on / amd_iommu=on)?",
                gpu
            ))
        })?;
        let members = vfio::iommu_group(host.fs(), group).map_err(|e| {
            EngineError::from_vfio(format!("cannot read IOMMU group {}", group.0), e)
        })?;
        let mut blockers = Vec::new();
        for addr in members.devices.iter().filter(|a| **a != gpu) {
            let other = host.pci(*addr)?;
            if let Some(d) = other.driver.filter(|d| d != vfio::VFIO_PCI) {
                blockers.push(format!("{addr} (bound to {d})"));
            }
        }
        if !blockers.is_empty() {
            return Err(EngineError::Unsupported(format!(
                "IOMMU group {} of GPU {} is not viable for a VM: it also holds {}",
                group.0,
                gpu,
                blockers.join(", ")
            )));
        }
        Ok(())
    }

    fn plan(&self, host: &TimedHost, spec: &SliceSpec, _reserved: &[Identity]) -> Result<Identity> {
        let gpu = spec.pci()?;
        self.validate(host, spec)?;
        let dev = host.gpu(gpu)?;
        if dev.driver.as_deref() == Some(vfio::VFIO_PCI) {
            return Err(EngineError::Conflict(format!(
                "GPU {} is bound to vfio-pci already, by someone else",
                gpu
            )));
        }
        let carried = carried_slices(host, &dev)?;
        if !carried.is_empty() {
            return Err(EngineError::Conflict(format!(
                "GPU {} carries slices ({}); passing it through would destroy them",
                gpu,
                carried.join(", ")
            )));
        }
        Ok(Identity::Passthrough {
            original_driver: dev.driver,
        })
    }

    fn realize(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<Handles> {
        let gpu = spec.pci()?;
        original_driver(id)?;
        vfio::bind_to_vfio(host.fs(), gpu).map_err(|e| {
            EngineError::from_vfio(format!("cannot bind GPU {} to vfio-pci", gpu), e)
        })?;
        match present(&host.gpu(gpu)?) {
            Observed::Present(h) => Ok(h),
            _ => Err(EngineError::Conflict(format!(
                "GPU {} is not on vfio-pci after binding",
                gpu
            ))),
        }
    }

    fn destroy(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<()> {
        let gpu = spec.pci()?;
        let restore = original_driver(id)?;
        let dev = match host.gpu(gpu) {
            Err(EngineError::NotFound(_)) => return Ok(()),
            other => other?,
        };
        if dev.driver.as_deref() != Some(vfio::VFIO_PCI) {
            return Ok(());
        }
        vfio::release_from_vfio(host.fs(), gpu, restore).map_err(|e| {
            EngineError::from_vfio(format!("cannot hand GPU {} back from vfio-pci", gpu), e)
        })
    }

    fn observe(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<Observed> {
        let gpu = spec.pci()?;
        original_driver(id)?;
        Ok(present(&host.gpu(gpu)?))
    }
}
