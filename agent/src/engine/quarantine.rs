//! Quarantine in the engine: the records in the state file, the refusals, the events.
//!
//! The records live in the desired-state document (one durable write each), so a quarantine
//! survives an agent restart and a crash. What a quarantine is and why is
//! [`super::quarantine_record`]; deciding when to quarantine and release is the health monitor's
//! ([`crate::health`]).

use ids::PciAddress;

use super::error::{EngineError, Result};
use super::events::Event;
use super::handle::Engine;
use super::quarantine_record::{Quarantine, QuarantineSource, ReleaseHow};
use super::state::now;

/// What [`Engine::quarantine`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// The record in force now.
    pub record: Quarantine,
    /// False when the GPU was quarantined already and nothing changed.
    pub changed: bool,
}

/// An operator's reason: free text, as a consumer name is (one line, no control characters,
/// bounded length).
pub fn check_reason(reason: &str) -> Result<()> {
    if reason.trim().is_empty() {
        return Err(EngineError::InvalidRequest(
            "a quarantine needs a reason".into(),
        ));
    }
    super::ops::check_text("reason", reason)
}

impl Engine {
    /// Quarantines a GPU of the inventory. A GPU quarantined already keeps its record (first
    /// cause, first time), except that an operator's quarantine takes over an automatic one:
    /// the probe must then leave it alone.
    pub fn quarantine(
        &self,
        gpu: PciAddress,
        reason: &str,
        source: QuarantineSource,
        xid: Option<u64>,
    ) -> Result<Quarantined> {
        let existing = self.quarantined(gpu);
        // Checked before anything else: an Xid storm on a quarantined GPU costs no discovery.
        if let Some(q) = existing
            .as_ref()
            .filter(|q| q.source == QuarantineSource::Operator || source == QuarantineSource::Auto)
        {
            return Ok(Quarantined {
                record: q.clone(),
                changed: false,
            });
        }
        if !self.inventory().gpus.iter().any(|g| g.pci_address == gpu) {
            return Err(EngineError::NotFound(format!("GPU {gpu}")));
        }
        let record = Quarantine {
            gpu,
            since: existing.map_or_else(now, |q| q.since),
            reason: reason.to_owned(),
            source,
            xid,
        };
        self.write(|d| d.quarantine.insert(gpu, record.clone()))?;
        tracing::warn!(%gpu, reason, source = source.as_str(), "GPU quarantined");
        self.emit(Event::GpuQuarantined {
            gpu,
            reason: reason.to_owned(),
            source,
        });
        Ok(Quarantined {
            record,
            changed: true,
        })
    }

    /// Returns a quarantined GPU to service; `conflict` when it is not quarantined.
    pub fn release_gpu(&self, gpu: PciAddress, how: ReleaseHow) -> Result<Quarantine> {
        let removed = self.write(|d| d.quarantine.remove(&gpu))?;
        let Some(record) = removed else {
            return Err(EngineError::Conflict(format!(
                "GPU {gpu} is not quarantined"
            )));
        };
        tracing::info!(%gpu, how = how.as_str(), "GPU released from quarantine");
        self.emit(Event::GpuReleased { gpu, how });
        Ok(record)
    }

    /// The GPU's quarantine, when it is quarantined.
    pub fn quarantined(&self, gpu: PciAddress) -> Option<Quarantine> {
        self.read(|d| d.quarantine.get(&gpu).cloned())
    }

    /// Every quarantined GPU, in address order.
    pub fn quarantines(&self) -> Vec<Quarantine> {
        self.read(|d| d.quarantine.values().cloned().collect())
    }

    /// `quarantined` with the refusal when the GPU is quarantined.
    pub(crate) fn refuse_if_quarantined(&self, gpu: PciAddress) -> Result<()> {
        match self.quarantined(gpu) {
            Some(q) => Err(EngineError::Quarantined(q.refusal())),
            None => Ok(()),
        }
    }
}
