//! The host as the engine sees it: sysfs plus the time-bounded vendor libraries, with the
//! lookups every backend needs (is this a GPU, its NVML index, its VFs).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use gpu::{AmdSmi, Nvml};
use ids::{PciAddress, PciVendorId};
use inventory::HostAccess;
use sysfs::Sysfs;

use super::error::{EngineError, Result};
use super::host_changes::{CountingSysfs, HostChanges};
use super::vendor::{Runner, TimedAmd, TimedNvml};
use crate::metrics::Metrics;

/// Host access with every vendor call time-bounded.
#[derive(Debug, Clone)]
pub(crate) struct TimedHost {
    pub(crate) fs: Arc<dyn Sysfs>,
    nvml: Option<Arc<dyn Nvml>>,
    amd: Option<Arc<dyn AmdSmi>>,
    /// The same, in the form discovery takes.
    pub(crate) access: HostAccess,
    pub(crate) runner: Arc<Runner>,
    index_cache: Arc<Mutex<HashMap<PciAddress, u32>>>,
}

impl TimedHost {
    pub(crate) fn new(access: HostAccess, timeout: Duration, metrics: Metrics) -> Self {
        let runner = Runner::new(timeout, metrics);
        // Writes count as host changes, so that reads of the host can be kept until one.
        let sysfs = CountingSysfs::wrap(access.sysfs.clone(), runner.changes.clone());
        let nvml = access
            .nvml
            .as_ref()
            .ok()
            .map(|n| Arc::new(TimedNvml::new(n.clone(), runner.clone())) as Arc<dyn Nvml>);
        let amd =
            access.amd.as_ref().ok().map(|(a, _)| {
                Arc::new(TimedAmd::new(a.clone(), runner.clone())) as Arc<dyn AmdSmi>
            });
        let timed = HostAccess {
            source: access.source.clone(),
            sysfs: sysfs.clone(),
            nvml: match (&nvml, &access.nvml) {
                (Some(n), _) => Ok(n.clone()),
                (None, Err(why)) => Err(why.clone()),
                (None, Ok(_)) => Err("unavailable".to_owned()),
            },
            amd: match (&amd, &access.amd) {
                (Some(a), Ok((_, backend))) => Ok((a.clone(), backend.clone())),
                (_, Err(why)) => Err(why.clone()),
                (None, Ok(_)) => Err("unavailable".to_owned()),
            },
            hostname: access.hostname.clone(),
            events: access.events.clone(),
        };
        Self {
            fs: sysfs,
            nvml,
            amd,
            access: timed,
            runner,
            index_cache: Arc::default(),
        }
    }

    /// The count of changes the engine made to the host.
    pub(crate) fn changes(&self) -> &HostChanges {
        &self.runner.changes
    }

    pub(crate) fn fs(&self) -> &dyn Sysfs {
        self.fs.as_ref()
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.runner.timeout()
    }

    /// NVML, or `Unsupported` naming why the host has none.
    pub(crate) fn nvml(&self) -> Result<&dyn Nvml> {
        match (&self.nvml, &self.access.nvml) {
            (Some(n), _) => Ok(n.as_ref()),
            (None, Err(why)) => Err(EngineError::Unsupported(format!(
                "NVML is not available on this host ({why})"
            ))),
            (None, Ok(_)) => Err(EngineError::Unsupported("NVML is not available".into())),
        }
    }

    /// AMD SMI (or its sysfs backend), when present.
    pub(crate) fn amd(&self) -> Option<&dyn AmdSmi> {
        self.amd.as_deref()
    }

    /// Maps an NVML failure on `gpu` to an engine error.
    pub(crate) fn nvml_err(
        &self,
        context: String,
        gpu: PciAddress,
        e: gpu::NvmlError,
    ) -> EngineError {
        EngineError::from_nvml(context, gpu, self.timeout(), e)
    }

    /// NVML's index of the GPU. The last answer is tried first (indices only change when the
    /// driver reloads); a GPU whose NVML calls hang does not hide the others.
    pub(crate) fn nvml_index(&self, gpu: PciAddress) -> Result<u32> {
        let nvml = self.nvml()?;
        let cached = self
            .index_cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&gpu)
            .copied();
        if let Some(index) = cached
            && nvml.device_info(index).is_ok_and(|i| i.pci_address == gpu)
        {
            return Ok(index);
        }
        let count = nvml
            .device_count()
            .map_err(|e| self.nvml_err("cannot count NVML devices".into(), gpu, e))?;
        let mut timed_out = None;
        for index in 0..count {
            match nvml.device_info(index) {
                Ok(info) if info.pci_address == gpu => {
                    self.index_cache
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(gpu, index);
                    return Ok(index);
                }
                Ok(_) => {}
                Err(e) if e.code == gpu::NvmlCode::TIMEOUT => {
                    timed_out.get_or_insert(e);
                }
                // Another GPU that cannot be read does not hide this one.
                Err(_) => {}
            }
        }
        match timed_out {
            // The GPU may be the one that does not answer.
            Some(e) => Err(self.nvml_err(format!("cannot find GPU {gpu} in NVML"), gpu, e)),
            None => Err(EngineError::Unsupported(format!(
                "NVML does not see GPU {gpu}"
            ))),
        }
    }

    /// The PCI function, which must exist.
    pub(crate) fn pci(&self, addr: PciAddress) -> Result<vfio::PciDevice> {
        vfio::read_device(self.fs(), addr).map_err(|e| match e {
            vfio::VfioError::DeviceNotFound(a) => {
                EngineError::NotFound(format!("PCI device {a} is not present"))
            }
            e => EngineError::from_vfio(format!("cannot read PCI device {addr}"), e),
        })
    }

    /// The device slices are carved from: a GPU, or another accelerator that is an SR-IOV physical
    /// function (its VFs are `sriov-vf` slices). Anything else is refused with the reason.
    pub(crate) fn gpu(&self, addr: PciAddress) -> Result<vfio::PciDevice> {
        let dev = self.pci(addr).map_err(|e| match e {
            EngineError::NotFound(_) => EngineError::NotFound(format!("GPU {addr} is not present")),
            e => e,
        })?;
        carves_slices(&dev.identity())?;
        Ok(dev)
    }

    /// What [`TimedHost::gpu`] checks, from six attributes instead of the whole PCI device:
    /// for a step that only needs to know what the device is (each MIG step asks).
    pub(crate) fn gpu_identity(&self, addr: PciAddress) -> Result<vfio::PciIdentity> {
        let id = vfio::read_identity(self.fs(), addr).map_err(|e| match e {
            vfio::VfioError::DeviceNotFound(_) => {
                EngineError::NotFound(format!("GPU {addr} is not present"))
            }
            e => EngineError::from_vfio(format!("cannot read PCI device {addr}"), e),
        })?;
        carves_slices(&id)?;
        Ok(id)
    }

    /// The GPU's VFs as `(index, address)`, in index order; empty without SR-IOV.
    pub(crate) fn vfs(&self, gpu: PciAddress) -> Result<Vec<(u32, PciAddress)>> {
        let dev = self.pci(gpu)?;
        Ok(dev
            .sriov
            .map(|s| (0u32..).zip(s.vfs).collect())
            .unwrap_or_default())
    }

    /// Whether the GPU is NVIDIA's.
    pub(crate) fn is_nvidia(dev: &vfio::PciDevice) -> bool {
        dev.vendor == PciVendorId::NVIDIA
    }
}

/// Refuses a function slices are not carved from: anything but a GPU or another accelerator
/// that is an SR-IOV physical function.
fn carves_slices(id: &vfio::PciIdentity) -> Result<()> {
    if id.is_vf || !(id.is_gpu() || id.sriov_capable) {
        return Err(EngineError::InvalidRequest(format!(
            "{} is not a GPU or an SR-IOV physical function",
            id.address
        )));
    }
    Ok(())
}
