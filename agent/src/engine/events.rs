//! Events the engine broadcasts to subscribers (the daemon's D-Bus signals, logs, metrics).

use ids::PciAddress;
use serde::{Deserialize, Serialize};

use super::layout::LayoutState;
use super::model::{AllocationId, BackendKind, DeviceRef, SliceId};
use super::quarantine_record::{QuarantineSource, ReleaseHow};

/// Something that happened to slices, allocations or layouts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A slice was created (or re-created after the host lost it).
    SliceCreated {
        /// The slice.
        slice: SliceId,
        /// Its device (GPU or virtual mdev parent).
        gpu: DeviceRef,
        /// Its backend.
        backend: BackendKind,
    },
    /// A slice was destroyed.
    SliceDestroyed {
        /// The slice.
        slice: SliceId,
        /// Its device (GPU or virtual mdev parent).
        gpu: DeviceRef,
    },
    /// Slices were allocated to a consumer.
    AllocationCreated {
        /// The allocation.
        allocation: AllocationId,
        /// The consumer.
        consumer: String,
        /// The slices.
        slices: Vec<SliceId>,
    },
    /// An allocation was released.
    AllocationReleased {
        /// The allocation.
        allocation: AllocationId,
    },
    /// An owned slice was changed or removed behind vgpud's back.
    Drift {
        /// The slice.
        slice: SliceId,
        /// Its device (GPU or virtual mdev parent).
        gpu: DeviceRef,
        /// What was found, and what vgpud did.
        reason: String,
    },
    /// A slice vgpud did not create was found (it is left alone).
    ForeignFound {
        /// The device (GPU or virtual mdev parent).
        gpu: DeviceRef,
        /// What it is.
        slice: String,
    },
    /// A GPU's layout status changed.
    LayoutStatus {
        /// The GPU.
        gpu: PciAddress,
        /// Its status.
        state: LayoutState,
        /// Why, when not applied.
        reasons: Vec<String>,
    },
    /// A libvirt domain records vgpud pinning for an allocation, or slices of one, that no
    /// longer exist (found when links are rebuilt after a restart; left for the operator).
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
        gpu: PciAddress,
        /// Why.
        reason: String,
        /// Who quarantined it.
        source: QuarantineSource,
    },
    /// A quarantined GPU returned to service.
    GpuReleased {
        /// The GPU.
        gpu: PciAddress,
        /// How.
        how: ReleaseHow,
    },
    /// A PCI device with owned slices left the bus: the slices are failed, their allocations
    /// kept.
    DeviceRemoved {
        /// The device.
        device: DeviceRef,
        /// Its owned slices.
        slices: Vec<SliceId>,
        /// Why the slices are failed.
        reason: String,
    },
    /// A PCI device with owned slices is back on the bus: its slices are being re-created.
    DeviceAdded {
        /// The device.
        device: DeviceRef,
        /// Its owned slices.
        slices: Vec<SliceId>,
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
}
