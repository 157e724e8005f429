//! The monitor's memory: per GPU, Xid counts, the last readings, when it last misbehaved and
//! when the probe may next run. Kept in memory only: after a restart a quarantined GPU's
//! quiet period starts again, which errs on the safe side.

use std::collections::BTreeMap;
use std::time::Instant;

use ids::PciAddress;

use super::classify::XidAction;

/// What the monitor remembers about one GPU.
#[derive(Debug, Clone, Default)]
pub(crate) struct GpuLedger {
    /// The last Xid seen (dcgm-exporter's `DCGM_FI_DEV_XID_ERRORS`).
    pub(crate) last_xid: Option<u64>,
    /// Xid events by code and what they did.
    pub(crate) xid_counts: BTreeMap<(u64, XidAction), u64>,
    /// The last health-signal reading.
    pub(crate) signals: Option<gpu::HealthSignals>,
    /// Why the GPU is degraded now (slowdowns); empty when it is not.
    pub(crate) degraded: Vec<String>,
    /// The last event that quarantined it (or would have, being quarantined already).
    pub(crate) last_bad: Option<Instant>,
    /// The probe does not run before this.
    pub(crate) next_probe: Option<Instant>,
    /// Why the last probe failed.
    pub(crate) last_probe_failure: Option<String>,
    /// The vendor's UUID, when known.
    pub(crate) uuid: Option<String>,
    /// Why its vendor calls do not answer, when they did not last time.
    pub(crate) unresponsive: Option<String>,
    /// The NVML index it had when last seen (a lost GPU no longer says its address).
    pub(crate) nvml_index: Option<u32>,
}

/// Every GPU's ledger.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    pub(crate) gpus: BTreeMap<PciAddress, GpuLedger>,
}

impl Ledger {
    pub(crate) fn gpu(&mut self, gpu: PciAddress) -> &mut GpuLedger {
        self.gpus.entry(gpu).or_default()
    }
}
