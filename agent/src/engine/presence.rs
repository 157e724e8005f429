//! Devices that left the PCI bus and came back (hot-unplug, a `remove` through sysfs, a bus
//! rescan, a GPU that fell off the bus).
//!
//! At the start of every reconcile each PCI device that owned slices are carved from is looked
//! up on the host. One that is gone: its slices are failed with "GPU … was removed from the PCI
//! bus" and a `device_removed` event names them; their allocations stay (the consumer's VM still
//! refers to them and the device may come back). One that is back: a `device_added` event, and
//! the rest of the same reconcile re-creates its slices with their identities. The decision is
//! made from the host's state, not from device events, so a lost event delays it at most until
//! the next pass; device events only make the daemon run that pass at once.

use std::collections::BTreeMap;

use ids::PciAddress;
use serde::{Deserialize, Serialize};

use super::error::EngineError;
use super::events::Event;
use super::handle::Engine;
use super::locks::lock;
use super::model::SliceId;
use super::reconcile::ReconcileReport;

/// A device that went away or came back, with the owned slices carved from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceChange {
    /// The PCI device (a GPU or another SR-IOV physical function).
    pub device: PciAddress,
    /// The owned slices on it.
    pub slices: Vec<SliceId>,
}

/// Why the slices of a device that left the bus are failed.
pub(super) fn removed_reason(device: PciAddress) -> String {
    format!("GPU {device} was removed from the PCI bus")
}

impl Engine {
    /// The PCI devices owned slices are carved from, with those slices.
    fn owned_devices(&self) -> BTreeMap<PciAddress, Vec<SliceId>> {
        let mut out: BTreeMap<PciAddress, Vec<SliceId>> = BTreeMap::new();
        self.read(|d| {
            for s in d.slices.values() {
                if let Some(pci) = s.spec.gpu.pci() {
                    out.entry(pci).or_default().push(s.id);
                }
            }
        });
        out
    }

    /// Notes which devices left or came back since the last pass (see the module doc). The
    /// slices of a device that is gone are failed and listed in `report.failed`, so the rest of
    /// the pass leaves them alone.
    pub(super) fn track_presence(&self, report: &mut ReconcileReport) {
        for (device, slices) in self.owned_devices() {
            let present = match self.host().pci(device) {
                Ok(_) => true,
                Err(EngineError::NotFound(_)) => false,
                // Unreadable is not gone: the pass reports what it cannot read.
                Err(_) => continue,
            };
            let was_gone = lock(&self.inner.gone).contains(&device);
            match (present, was_gone) {
                (false, _) => self.device_gone(device, slices, !was_gone, report),
                (true, true) => {
                    lock(&self.inner.gone).remove(&device);
                    tracing::info!(%device, "device is back on the PCI bus: re-creating its slices");
                    self.emit(Event::DeviceAdded {
                        device: device.into(),
                        slices: slices.clone(),
                    });
                    report
                        .devices_returned
                        .push(DeviceChange { device, slices });
                }
                (true, false) => {}
            }
        }
    }

    fn device_gone(
        &self,
        device: PciAddress,
        slices: Vec<SliceId>,
        newly: bool,
        report: &mut ReconcileReport,
    ) {
        let why = removed_reason(device);
        for id in &slices {
            self.set_failure(*id, Some(why.clone()));
            report.failed.push((*id, why.clone()));
        }
        if !newly {
            return;
        }
        lock(&self.inner.gone).insert(device);
        tracing::warn!(%device, slices = slices.len(), "{why}: its slices are failed, their allocations kept");
        self.emit(Event::DeviceRemoved {
            device: device.into(),
            slices: slices.clone(),
            reason: why,
        });
        report.devices_removed.push(DeviceChange { device, slices });
    }
}
