//! One GPU's telemetry through the time-bounded vendor library: device figures, active vGPU
//! instances and MIG device memory. Only the telemetry poller calls this; a scrape never does.

use gpu::{MigMemory, Telemetry, VgpuUsage};

use super::handle::Engine;

/// What one reading of a GPU found. Per-slice figures are empty where the vendor does not
/// report them (AMD, a GPU without vGPU or MIG, a failed call).
#[derive(Debug, Clone, Default)]
pub struct GpuReading {
    /// Device telemetry, or why it could not be read (failed, timed out, no vendor library).
    pub telemetry: Option<Result<Telemetry, gpu::NvmlError>>,
    /// Active vGPU instances.
    pub vgpus: Vec<VgpuUsage>,
    /// MIG devices' memory.
    pub mig: Vec<MigMemory>,
}

impl Engine {
    /// Reads one GPU's telemetry. `None` telemetry: the GPU has no vendor library that reports
    /// it (no NVML index).
    pub fn read_telemetry(&self, gpu: &inventory::Gpu) -> GpuReading {
        let (Ok(nvml), Some(index)) = (self.host().nvml(), gpu.nvml_index) else {
            return GpuReading::default();
        };
        let telemetry = nvml.telemetry(index);
        if telemetry.is_err() {
            // A GPU that does not answer is not asked again until the next poll.
            return GpuReading {
                telemetry: Some(telemetry),
                ..GpuReading::default()
            };
        }
        let mig_on = gpu.mig.as_ref().is_some_and(|m| m.enabled);
        GpuReading {
            telemetry: Some(telemetry),
            vgpus: nvml.vgpu_usage(index).unwrap_or_default(),
            mig: if mig_on {
                nvml.mig_memory(index).unwrap_or_default()
            } else {
                Vec::new()
            },
        }
    }
}
