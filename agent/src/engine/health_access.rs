//! What the health monitor needs from the engine: the time-bounded NVML, a GPU reset, and
//! whether a GPU holds allocated slices. Policy (what to quarantine, when to release) is
//! [`crate::health`]'s.

use gpu::{Nvml, NvmlResult};
use ids::PciAddress;

use super::error::{EngineError, Result};
use super::handle::Engine;

impl Engine {
    /// Runs `f` on the host's NVML, every call time-bounded as the engine's own are; `None`
    /// when the host has no NVML (no NVIDIA driver, or an AMD-only host).
    pub fn with_nvml<T>(
        &self,
        f: impl FnOnce(&dyn Nvml) -> NvmlResult<T>,
    ) -> Option<NvmlResult<T>> {
        self.host().nvml().ok().map(f)
    }

    /// Whether any slice on the GPU is allocated.
    pub fn allocated_on(&self, gpu: PciAddress) -> bool {
        self.read(|d| {
            d.allocations.values().any(|a| {
                a.slices.iter().any(|s| {
                    d.slices
                        .get(s)
                        .is_some_and(|o| o.spec.gpu.pci() == Some(gpu))
                })
            })
        })
    }

    /// Resets the GPU's PCI function (`reset` in sysfs), under the GPU's lock so no slice
    /// operation runs meanwhile. The kernel refuses while the device is in use; that refusal
    /// is `busy`.
    pub fn reset_gpu(&self, gpu: PciAddress) -> Result<()> {
        let _gpu = self
            .inner
            .gpu_locks
            .lock(super::model::DeviceRef::from(gpu));
        let reset = vfio::reset_function(self.host().fs(), gpu);
        // A reset re-initialises the device under its driver (NVML may see it anew): counted
        // as a change of the whole host, not of this GPU alone.
        self.host().changes().bump_whole();
        reset.map_err(|e| EngineError::from_vfio(format!("cannot reset GPU {gpu}"), e))?;
        tracing::info!(%gpu, "GPU reset");
        Ok(())
    }
}
