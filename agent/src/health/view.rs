//! What metrics and the CLI read about health: per GPU its state, quarantine, Xid counts and
//! last health signals. Built from memory and the state file only: reading it never waits on
//! a vendor library (a scrape must not).

use ids::PciAddress;
use serde::Serialize;

use super::Health;
use super::classify::XidAction;
use super::quarantine::QuarantineSource;

/// A GPU's health state, as `vgpud_gpu_health{state}` names it; ordered from best to worst.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    /// Nothing wrong is known.
    #[default]
    Ok,
    /// In service, with a slowdown.
    Degraded,
    /// Its last health check did not answer in time.
    Unresponsive,
    /// Quarantined.
    Quarantined,
}

impl HealthState {
    /// Every state, in the order metrics list them.
    pub const ALL: [HealthState; 4] = [
        HealthState::Ok,
        HealthState::Degraded,
        HealthState::Unresponsive,
        HealthState::Quarantined,
    ];

    /// `ok`, `degraded`, `unresponsive` or `quarantined`.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Ok => "ok",
            HealthState::Degraded => "degraded",
            HealthState::Unresponsive => "unresponsive",
            HealthState::Quarantined => "quarantined",
        }
    }
}

/// How many Xid events of one code did one thing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct XidCount {
    /// The Xid.
    pub xid: u64,
    /// What it did.
    pub action: XidAction,
    /// How many since the agent started.
    pub count: u64,
}

/// One GPU's health.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuHealthView {
    /// The GPU.
    pub address: PciAddress,
    /// The vendor's UUID, when known.
    pub uuid: Option<String>,
    /// The state now.
    pub state: HealthState,
    /// Whether it is quarantined.
    pub quarantined: bool,
    /// Why it is quarantined, degraded or unresponsive; `None` when ok.
    pub reason: Option<String>,
    /// Who quarantined it.
    pub quarantine_source: Option<QuarantineSource>,
    /// Since when, seconds since the Unix epoch.
    pub quarantined_since: Option<u64>,
    /// The last Xid seen (0 in dcgm-exporter's terms when `None`).
    pub last_xid: Option<u64>,
    /// Xid events since the agent started, by code and action.
    pub xid_events: Vec<XidCount>,
    /// The last health-signal reading.
    pub signals: Option<gpu::HealthSignals>,
    /// Why the last probe failed, while it stays quarantined.
    pub last_probe_failure: Option<String>,
}

impl Health {
    /// Every GPU the monitor has seen or the state file quarantines, in address order.
    pub fn view(&self) -> Vec<GpuHealthView> {
        let quarantines = self.engine.quarantines();
        let ledger = self.ledger();
        let mut gpus: Vec<PciAddress> = ledger.gpus.keys().copied().collect();
        gpus.extend(quarantines.iter().map(|q| q.gpu));
        gpus.sort();
        gpus.dedup();
        gpus.into_iter()
            .map(|address| {
                let l = ledger.gpus.get(&address).cloned().unwrap_or_default();
                let q = quarantines.iter().find(|q| q.gpu == address);
                let (state, reason) = match (q, &l.unresponsive) {
                    (Some(q), _) => (HealthState::Quarantined, Some(q.refusal())),
                    (None, Some(why)) => (HealthState::Unresponsive, Some(why.clone())),
                    (None, None) if !l.degraded.is_empty() => {
                        (HealthState::Degraded, Some(l.degraded.join("; ")))
                    }
                    (None, None) => (HealthState::Ok, None),
                };
                GpuHealthView {
                    address,
                    uuid: l.uuid.clone(),
                    state,
                    quarantined: q.is_some(),
                    reason,
                    quarantine_source: q.map(|q| q.source),
                    quarantined_since: q.map(|q| q.since),
                    last_xid: l.last_xid,
                    xid_events: l
                        .xid_counts
                        .iter()
                        .map(|((xid, action), count)| XidCount {
                            xid: *xid,
                            action: *action,
                            count: *count,
                        })
                        .collect(),
                    signals: l.signals,
                    last_probe_failure: q.and(l.last_probe_failure.clone()),
                }
            })
            .collect()
    }

    /// Slowdowns the monitor saw, for a GPU's detail (`degraded` reasons).
    pub fn degraded_reasons(&self, gpu: PciAddress) -> Vec<String> {
        self.ledger()
            .gpus
            .get(&gpu)
            .map(|l| l.degraded.clone())
            .unwrap_or_default()
    }

    /// Forgets when the GPU last misbehaved (an operator released it: a later automatic
    /// quarantine starts a fresh quiet period).
    pub fn forget_events(&self, gpu: PciAddress) {
        let mut ledger = self.ledger();
        let l = ledger.gpu(gpu);
        l.last_bad = None;
        l.next_probe = None;
        l.last_probe_failure = None;
    }
}
