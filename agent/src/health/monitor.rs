//! Watching: the Xid events NVML delivers, and a periodic check of every NVIDIA GPU (lost GPU,
//! ECC, retired pages, remapped rows, slowdowns). Both quarantine through the engine; the
//! daemon runs them on threads of their own (they block on NVML).

use std::time::Instant;

use gpu::{NvmlCode, XidEvent};
use ids::PciAddress;

use super::Health;
use super::classify::{XidAction, xid_reason};
use super::quarantine::QuarantineSource;
use super::signals::judge;

/// What one wait for an Xid gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XidWait {
    /// An event came and was handled (`None`: it named a GPU vgpud does not know).
    Event(Option<XidAction>),
    /// None came within the timeout.
    Quiet,
    /// The host has no NVML: there is nothing to wait on.
    NoNvml,
    /// NVML failed (the caller waits a little before trying again).
    Failed(String),
}

/// NVML's answer for a GPU that fell off the bus (NVML API reference, `NVML_ERROR_GPU_IS_LOST`:
/// "The GPU has fallen off the bus or has otherwise become inaccessible").
const LOST: &str = "GPU has fallen off the bus (NVML: GPU is lost)";

impl Health {
    /// Waits up to `timeout_ms` for the next Xid event and handles it.
    pub fn wait_xid(&self, timeout_ms: u32) -> XidWait {
        match self.engine.with_nvml(|n| n.wait_xid_event(timeout_ms)) {
            None => XidWait::NoNvml,
            Some(Ok(Some(event))) => XidWait::Event(self.on_xid(&event)),
            Some(Ok(None)) => XidWait::Quiet,
            Some(Err(e)) => XidWait::Failed(e.to_string()),
        }
    }

    /// Handles one Xid event: counts it, and quarantines its GPU when the policy says so. The
    /// event names the GPU by UUID; the inventory says which PCI device that is.
    pub fn on_xid(&self, event: &XidEvent) -> Option<XidAction> {
        let Some(gpu) = self.gpu_of_uuid(&event.gpu_uuid) else {
            tracing::warn!(uuid = %event.gpu_uuid, xid = event.xid, "Xid on a GPU the inventory does not show");
            return None;
        };
        let action = self.settings.xids.classify(event.xid);
        let count = {
            let mut ledger = self.ledger();
            let l = ledger.gpu(gpu);
            l.uuid = Some(event.gpu_uuid.clone());
            l.last_xid = Some(event.xid);
            let count = l.xid_counts.entry((event.xid, action)).or_default();
            *count += 1;
            *count
        };
        match action {
            // A guest's application can raise these at will: log the 1st, 2nd, 4th, 8th, …
            // only, so it cannot flood the journal.
            XidAction::Ignore if count.is_power_of_two() => {
                tracing::info!(%gpu, xid = event.xid, count, "application Xid: the GPU stays in service");
            }
            XidAction::Ignore => {}
            XidAction::Quarantine => self.flag(gpu, &xid_reason(event.xid), Some(event.xid), true),
        }
        Some(action)
    }

    /// The GPU with this UUID: the monitor's memory first (an Xid storm must not rediscover
    /// the host per event), then the inventory.
    fn gpu_of_uuid(&self, uuid: &str) -> Option<PciAddress> {
        let known = self
            .ledger()
            .gpus
            .iter()
            .find(|(_, l)| l.uuid.as_deref() == Some(uuid))
            .map(|(a, _)| *a);
        known.or_else(|| {
            self.engine
                .inventory()
                .gpus
                .iter()
                .find(|g| g.uuid.as_deref() == Some(uuid))
                .map(|g| g.pci_address)
        })
    }

    /// Checks every NVIDIA GPU once: a lost GPU and alarming health signals quarantine,
    /// slowdowns degrade.
    pub fn check(&self) {
        let inventory = self.engine.inventory();
        for g in inventory
            .gpus
            .iter()
            .filter(|g| g.vendor == inventory::Vendor::Nvidia)
        {
            let index = {
                let mut ledger = self.ledger();
                let l = ledger.gpu(g.pci_address);
                if g.uuid.is_some() {
                    l.uuid = g.uuid.clone();
                }
                // A lost GPU drops out of discovery's NVML view: keep the index it had.
                if g.nvml_index.is_some() {
                    l.nvml_index = g.nvml_index;
                }
                l.nvml_index
            };
            if let Some(index) = index {
                self.check_gpu(g.pci_address, index);
            }
        }
    }

    fn check_gpu(&self, gpu: PciAddress, index: u32) {
        let answer = self.engine.with_nvml(|n| {
            let info = n.device_info(index)?;
            Ok((info.pci_address, n.health_signals(index)?))
        });
        match answer {
            None => {}
            Some(Ok((at, _))) if at != gpu => {
                // The indices moved (a GPU went away); the next inventory says where it is now.
                self.ledger().gpu(gpu).nvml_index = None;
            }
            Some(Ok((_, signals))) => {
                let verdict = {
                    let mut ledger = self.ledger();
                    let l = ledger.gpu(gpu);
                    let verdict = judge(l.signals.as_ref(), &signals);
                    l.signals = Some(signals);
                    l.degraded = verdict.degraded.clone();
                    l.unresponsive = None;
                    verdict
                };
                if let Some(why) = verdict.quarantine {
                    self.flag(gpu, &why, None, verdict.news);
                }
            }
            Some(Err(e)) if e.code == NvmlCode::GPU_IS_LOST => self.flag(gpu, LOST, None, false),
            Some(Err(e)) if e.code == NvmlCode::TIMEOUT => {
                self.ledger().gpu(gpu).unresponsive = Some(e.to_string());
            }
            Some(Err(e)) => tracing::debug!(%gpu, error = %e, "health check failed"),
        }
    }

    /// Quarantines automatically. `news`: a fresh event (an Xid, new ECC errors) restarts the
    /// quiet period; a condition that merely persists only starts it.
    pub(super) fn flag(&self, gpu: PciAddress, reason: &str, xid: Option<u64>, news: bool) {
        let quarantined = self.engine.quarantined(gpu).is_some();
        {
            let mut ledger = self.ledger();
            let l = ledger.gpu(gpu);
            if news || !quarantined || l.last_bad.is_none() {
                l.last_bad = Some(Instant::now());
            }
        }
        if let Err(e) = self
            .engine
            .quarantine(gpu, reason, QuarantineSource::Auto, xid)
        {
            tracing::error!(%gpu, reason, error = %sysfs::error_chain(&e), "cannot quarantine the GPU");
        }
    }
}
