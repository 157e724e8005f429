//! What one poll found: plain data, rendered by [`crate::metrics::render`].

use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::engine::TypeCapacity;
use crate::health::view::HealthState;

/// One poll of the host.
#[derive(Debug, Clone, Default)]
pub struct TelemetrySnapshot {
    /// When the poll finished; `None` before the first.
    pub taken: Option<SystemTime>,
    /// The host's name (dcgm's `Hostname` label).
    pub hostname: String,
    /// GPUs in inventory order.
    pub gpus: Vec<GpuSnapshot>,
    /// Owned slices.
    pub slices: Vec<SliceSnapshot>,
    /// Allocations held.
    pub allocations: usize,
    /// Allocated slices idle for longer than the window, per consumer.
    pub idle_by_consumer: BTreeMap<String, u64>,
}

/// One GPU.
#[derive(Debug, Clone, Default)]
pub struct GpuSnapshot {
    /// Index on the host, in inventory order (dcgm's `gpu`).
    pub index: usize,
    /// Vendor UUID, empty when the vendor library reports none.
    pub uuid: String,
    /// PCI address (`0000:07:00.0`).
    pub pci_bus_id: String,
    /// `nvidia0` style: vendor in lower case and the index.
    pub device: String,
    /// Product name.
    pub model: String,
    /// `nvidia`, `amd`, `intel`, `other`.
    pub vendor: String,
    /// NUMA node, when known.
    pub numa_node: Option<u32>,
    /// Device telemetry from the last reading that succeeded in this poll; `None` when the call
    /// failed or timed out (its gauges are left out) or the vendor reports none.
    pub telemetry: Option<gpu::Telemetry>,
    /// When the last good reading was taken (kept across polls that fail).
    pub read_at: Option<SystemTime>,
    /// MIG devices with their memory.
    pub mig: Vec<MigSnapshot>,
    /// The worse of what this poll saw and what the health monitor says.
    pub health: HealthState,
    /// Per slice type the GPU offers.
    pub capacity: Vec<TypeCapacity>,
    /// Expected fragmentation, GPUs.
    pub fragmentation: f64,
    /// Expected waste, GPUs.
    pub waste: f64,
    /// Free capacity no offered type can use, GPUs.
    pub stranded: f64,
    /// The last Xid the health monitor saw.
    pub last_xid: Option<u64>,
    /// Xid events since the agent started: code, action (`quarantine`/`ignore`), count.
    pub xid_events: Vec<(u64, &'static str, u64)>,
    /// The monitor's last health-signal reading.
    pub signals: Option<gpu::HealthSignals>,
}

/// One MIG GPU instance.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MigSnapshot {
    /// Its profile (`3g.40gb`).
    pub profile: String,
    /// The GPU instance id.
    pub gpu_instance_id: u32,
    /// Framebuffer used, bytes.
    pub used_bytes: u64,
    /// Framebuffer, bytes.
    pub total_bytes: u64,
}

/// One owned slice, joined with its GPU, holder and usage.
#[derive(Debug, Clone, Default)]
pub struct SliceSnapshot {
    /// Slice id.
    pub slice: String,
    /// Host handle: mdev UUID, VF address, or `gi<n>` for a MIG instance.
    pub handle: String,
    /// Backend (`mig`, `mdev`, `nvidia-vfio`, `sriov-vf`, `passthrough`).
    pub backend: String,
    /// Type as requests name it.
    pub slice_type: String,
    /// The GPU's PCI address.
    pub pci_bus_id: String,
    /// The GPU's UUID.
    pub gpu_uuid: String,
    /// State (`ready`, `allocated`, …).
    pub state: String,
    /// The holding VM's name, when allocated to a named VM.
    pub vm_name: String,
    /// The holding VM's UUID, when it was named by UUID.
    pub vm_uuid: String,
    /// Consumer holding it.
    pub consumer: String,
    /// Allocation holding it.
    pub allocation: String,
    /// Framebuffer used, bytes, where the vendor reports it.
    pub fb_used_bytes: Option<u64>,
    /// Utilisation 0..1, where the vendor reports it.
    pub utilization: Option<f64>,
}
