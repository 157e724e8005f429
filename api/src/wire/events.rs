//! Events on the wire: the data of each Server-Sent Event of `GET /v1/events`. The SSE `event:`
//! line carries the same name as the `event` field.

use agent::engine;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::layouts::LayoutState;

/// Something that happened to slices, allocations, layouts or the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A slice was created (or re-created after the host lost it).
    SliceCreated {
        /// The slice.
        slice: String,
        /// Its GPU.
        gpu: String,
        /// Its mechanism.
        backend: String,
    },
    /// A slice was destroyed.
    SliceDestroyed {
        /// The slice.
        slice: String,
        /// Its GPU.
        gpu: String,
    },
    /// Slices were allocated to a consumer.
    AllocationCreated {
        /// The allocation.
        allocation: String,
        /// The consumer.
        consumer: String,
        /// The slices.
        slices: Vec<String>,
    },
    /// An allocation was released.
    AllocationReleased {
        /// The allocation.
        allocation: String,
    },
    /// An owned slice was changed or removed behind vgpud's back.
    Drift {
        /// The slice.
        slice: String,
        /// Its GPU.
        gpu: String,
        /// What was found, and what vgpud did.
        reason: String,
    },
    /// A slice vgpud did not create was found (it is left alone).
    ForeignFound {
        /// The GPU.
        gpu: String,
        /// What it is.
        slice: String,
    },
    /// A GPU's layout status changed.
    LayoutStatus {
        /// The GPU.
        gpu: String,
        /// Its status.
        state: LayoutState,
        /// Why, when not applied.
        reasons: Vec<String>,
    },
    /// A libvirt domain records an allocation or slice that no longer exists.
    StaleVmLink {
        /// The domain.
        domain: String,
        /// The allocation id the domain records.
        allocation: String,
        /// What no longer exists.
        reason: String,
    },
    /// A GPU was quarantined: no new slices or allocations on it.
    GpuQuarantined {
        /// The GPU.
        gpu: String,
        /// Why.
        reason: String,
        /// Who: `auto` (vgpud's health monitor) or `operator`.
        source: String,
    },
    /// A quarantined GPU returned to service.
    GpuReleased {
        /// The GPU.
        gpu: String,
        /// How: `probe` (the health probe passed) or `operator`.
        how: String,
    },
    /// A PCI device with owned slices left the bus: the slices are `failed` with `reason`, their
    /// allocations kept.
    DeviceRemoved {
        /// The device (PCI address).
        device: String,
        /// Its owned slices.
        slices: Vec<String>,
        /// Why the slices are failed.
        reason: String,
    },
    /// A PCI device with owned slices is back on the bus: its slices are being re-created.
    DeviceAdded {
        /// The device (PCI address).
        device: String,
        /// Its owned slices.
        slices: Vec<String>,
    },
    /// A reconcile pass finished.
    ReconcileDone {
        /// Owned slices re-created.
        recreated: usize,
        /// Intents finished or rolled back.
        intents_resolved: usize,
        /// Owned slices in the failed state.
        failed: usize,
        /// Foreign slices seen.
        foreign: usize,
    },
    /// The subscriber fell behind and missed events: re-read the state.
    Lagged {
        /// How many were missed.
        missed: u64,
    },
}

impl Event {
    /// The event's name (the SSE `event:` line).
    pub fn name(&self) -> &'static str {
        match self {
            Event::SliceCreated { .. } => "slice_created",
            Event::SliceDestroyed { .. } => "slice_destroyed",
            Event::AllocationCreated { .. } => "allocation_created",
            Event::AllocationReleased { .. } => "allocation_released",
            Event::Drift { .. } => "drift",
            Event::ForeignFound { .. } => "foreign_found",
            Event::LayoutStatus { .. } => "layout_status",
            Event::StaleVmLink { .. } => "stale_vm_link",
            Event::GpuQuarantined { .. } => "gpu_quarantined",
            Event::GpuReleased { .. } => "gpu_released",
            Event::DeviceRemoved { .. } => "device_removed",
            Event::DeviceAdded { .. } => "device_added",
            Event::ReconcileDone { .. } => "reconcile_done",
            Event::Lagged { .. } => "lagged",
        }
    }
}

impl From<&engine::Event> for Event {
    fn from(e: &engine::Event) -> Self {
        use engine::Event as E;
        match e {
            E::SliceCreated {
                slice,
                gpu,
                backend,
            } => Event::SliceCreated {
                slice: slice.to_string(),
                gpu: gpu.to_string(),
                backend: backend.as_str().to_owned(),
            },
            E::SliceDestroyed { slice, gpu } => Event::SliceDestroyed {
                slice: slice.to_string(),
                gpu: gpu.to_string(),
            },
            E::AllocationCreated {
                allocation,
                consumer,
                slices,
            } => Event::AllocationCreated {
                allocation: allocation.to_string(),
                consumer: consumer.clone(),
                slices: slices.iter().map(ToString::to_string).collect(),
            },
            E::AllocationReleased { allocation } => Event::AllocationReleased {
                allocation: allocation.to_string(),
            },
            E::Drift { slice, gpu, reason } => Event::Drift {
                slice: slice.to_string(),
                gpu: gpu.to_string(),
                reason: reason.clone(),
            },
            E::ForeignFound { gpu, slice } => Event::ForeignFound {
                gpu: gpu.to_string(),
                slice: slice.clone(),
            },
            E::LayoutStatus {
                gpu,
                state,
                reasons,
            } => Event::LayoutStatus {
                gpu: gpu.to_string(),
                state: (*state).into(),
                reasons: reasons.clone(),
            },
            E::StaleVmLink {
                domain,
                allocation,
                reason,
            } => Event::StaleVmLink {
                domain: domain.clone(),
                allocation: allocation.clone(),
                reason: reason.clone(),
            },
            E::GpuQuarantined {
                gpu,
                reason,
                source,
            } => Event::GpuQuarantined {
                gpu: gpu.to_string(),
                reason: reason.clone(),
                source: source.as_str().to_owned(),
            },
            E::GpuReleased { gpu, how } => Event::GpuReleased {
                gpu: gpu.to_string(),
                how: how.as_str().to_owned(),
            },
            E::DeviceRemoved {
                device,
                slices,
                reason,
            } => Event::DeviceRemoved {
                device: device.to_string(),
                slices: slices.iter().map(ToString::to_string).collect(),
                reason: reason.clone(),
            },
            E::DeviceAdded { device, slices } => Event::DeviceAdded {
                device: device.to_string(),
                slices: slices.iter().map(ToString::to_string).collect(),
            },
            E::ReconcileDone {
                recreated,
                intents_resolved,
                failed,
                foreign,
            } => Event::ReconcileDone {
                recreated: *recreated,
                intents_resolved: *intents_resolved,
                failed: *failed,
                foreign: *foreign,
            },
        }
    }
}
