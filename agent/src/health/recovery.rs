//! Bringing an automatically quarantined GPU back without restarting the agent.
//!
//! Once `[health] quiet_period_s` has passed without a new quarantining event, an active probe
//! runs: the GPU must answer NVML's device, telemetry and health-signal queries and the
//! signals must raise nothing ([`super::signals`]). Where `[health] reset_before_release`
//! allows it and none of its slices is allocated, the GPU is reset first (a PCI function reset;
//! pending page retirements and row remaps take effect, volatile ECC counts restart). Success
//! releases the GPU (event `GpuReleased`, how `probe`); failure keeps it quarantined and the
//! probe waits another quiet period. An operator's quarantine is never probed.

use std::time::Instant;

use ids::PciAddress;

use super::Health;
use super::quarantine::{QuarantineSource, ReleaseHow};
use super::signals::judge;

/// What one recovery pass did to one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The probe passed and the GPU is back in service.
    Released(PciAddress),
    /// The probe failed; the GPU stays quarantined.
    Failed(PciAddress, String),
}

impl Health {
    /// Probes every automatically quarantined GPU whose quiet period is over.
    pub fn recover(&self) -> Vec<ProbeOutcome> {
        let mut out = Vec::new();
        for q in self.engine.quarantines() {
            if q.source != QuarantineSource::Auto || !self.probe_due(q.gpu) {
                continue;
            }
            match self.probe(q.gpu) {
                Ok(()) => match self.engine.release_gpu(q.gpu, ReleaseHow::Probe) {
                    Ok(_) => {
                        let mut ledger = self.ledger();
                        let l = ledger.gpu(q.gpu);
                        l.next_probe = None;
                        l.last_bad = None;
                        l.last_probe_failure = None;
                        out.push(ProbeOutcome::Released(q.gpu));
                    }
                    Err(e) => tracing::warn!(gpu = %q.gpu, error = %e, "cannot release the GPU"),
                },
                Err(why) => {
                    tracing::warn!(gpu = %q.gpu, reason = %why, "GPU probe failed; it stays quarantined");
                    let mut ledger = self.ledger();
                    let l = ledger.gpu(q.gpu);
                    l.next_probe = Some(Instant::now() + self.settings.quiet_period);
                    l.last_probe_failure = Some(why.clone());
                    out.push(ProbeOutcome::Failed(q.gpu, why));
                }
            }
        }
        out
    }

    /// Whether the quiet period is over and no failed probe asks to wait longer. A quarantine
    /// found without a record of its event (after a restart) starts its quiet period now.
    fn probe_due(&self, gpu: PciAddress) -> bool {
        let now = Instant::now();
        let mut ledger = self.ledger();
        let l = ledger.gpu(gpu);
        let last_bad = *l.last_bad.get_or_insert(now);
        now >= last_bad + self.settings.quiet_period && l.next_probe.is_none_or(|t| now >= t)
    }

    /// The active probe (with the reset first, where allowed); `Err` says what failed.
    pub fn probe(&self, gpu: PciAddress) -> Result<(), String> {
        if self.settings.reset_before_release && !self.engine.allocated_on(gpu) {
            // A refused reset leaves the GPU as it was: the probe below decides.
            if let Err(e) = self.engine.reset_gpu(gpu) {
                tracing::warn!(%gpu, error = %sysfs::error_chain(&e), "GPU reset before release refused");
            }
        }
        let index = self
            .engine
            .inventory()
            .gpus
            .iter()
            .find(|g| g.pci_address == gpu)
            .and_then(|g| g.nvml_index)
            .ok_or_else(|| format!("NVML does not see GPU {gpu}"))?;
        let answer = self
            .engine
            .with_nvml(|n| {
                let info = n.device_info(index)?;
                n.telemetry(index)?;
                Ok((info.pci_address, n.health_signals(index)?))
            })
            .ok_or_else(|| "NVML is not available".to_owned())?;
        let (at, signals) = answer.map_err(|e| e.to_string())?;
        if at != gpu {
            return Err(format!("NVML index {index} is now GPU {at}"));
        }
        let mut ledger = self.ledger();
        let l = ledger.gpu(gpu);
        let verdict = judge(l.signals.as_ref(), &signals);
        l.signals = Some(signals);
        l.nvml_index = Some(index);
        match verdict.quarantine {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }
}
