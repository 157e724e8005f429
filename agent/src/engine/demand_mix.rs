//! The demand mix the default policy scores against, learnt from the requests this host is
//! asked to place (`sched::MixEstimator`; the rules are in its module docs).
//!
//! Every allocation request that reaches the scheduler is counted once, before it is decided,
//! whether it is then granted or refused: refused demand is what the host should have kept
//! room for. An idempotent retry answered from the store is not counted again; a request for a
//! type no GPU here offers never reaches the scheduler and is not demand this host can serve.
//! The estimate is written to the state store with each count (under the estimator's lock, so
//! two requests cannot write their counts out of order) and read back when the engine opens,
//! so a restart keeps it. Only the default policy with no configured mix uses it; the prior
//! is what that policy used before (every shape the host offers, equally likely).

use serde::{Deserialize, Serialize};

use super::handle::Engine;
use super::locks::lock;

/// The estimate as the state document holds it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct StoredMix(pub(crate) sched::MixState);

// The document type is `Eq`; counts compare by their bits, which is an equivalence (a NaN is
// equal to itself), so a re-read document equals the one written.
impl PartialEq for StoredMix {
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (&self.0, &other.0);
        a.seen == b.seen
            && a.shapes.len() == b.shapes.len()
            && a.shapes.iter().zip(&b.shapes).all(|(x, y)| {
                x.weight.to_bits() == y.weight.to_bits()
                    && sched::WorkItem {
                        weight: 0.0,
                        ..x.clone()
                    } == sched::WorkItem {
                        weight: 0.0,
                        ..y.clone()
                    }
            })
    }
}

impl Eq for StoredMix {}

/// The learnt mix as the engine would score with it now.
#[derive(Debug, Clone, PartialEq)]
pub struct DemandMix {
    /// Requests counted since the estimate started (restarts included).
    pub seen: u64,
    /// Their decayed count, which the prior is weighed against.
    pub effective: f64,
    /// The share of the mix the prior still holds (0..1).
    pub prior_share: f64,
    /// The estimator's settings.
    pub config: sched::MixConfig,
    /// The mix: shapes with weights summing to 1, heaviest first.
    pub mix: sched::Workload,
}

impl Engine {
    /// Counts a request the scheduler is about to place and persists the estimate. A failed
    /// write is logged and the count kept in memory: losing a count must not refuse a request.
    pub(crate) fn observe_demand(&self, req: &sched::Request) {
        let mut mix = lock(&self.inner.mix);
        mix.observe(req);
        let state = StoredMix(mix.state().clone());
        self.inner.metrics.set_demand_mix(&mix);
        if let Err(e) = self.write(|d| d.demand_mix = Some(state)) {
            tracing::warn!(error = %e, "the demand mix could not be saved");
        }
    }

    /// `policy` with the learnt mix when it is the default policy without a mix of its own;
    /// otherwise `policy` unchanged.
    pub(crate) fn with_learnt_mix(
        &self,
        policy: &sched::Policy,
        snap: &sched::Snapshot,
    ) -> sched::Policy {
        match policy {
            sched::Policy::FragAware(w) if w.items.is_empty() => sched::Policy::FragAware(
                lock(&self.inner.mix).mix(&sched::Workload::offered_by(snap)),
            ),
            other => other.clone(),
        }
    }

    /// The learnt mix as the default policy would score with it now (the prior from the
    /// host's current offers).
    pub fn demand_mix(&self) -> DemandMix {
        let view = self.sched_view(&[], &super::scheduling::Scheduling::default());
        self.demand_mix_on(&view.snap)
    }

    /// The learnt mix, blended with the prior of `snap`'s offered shapes.
    pub(crate) fn demand_mix_on(&self, snap: &sched::Snapshot) -> DemandMix {
        let mix = lock(&self.inner.mix);
        DemandMix {
            seen: mix.seen(),
            effective: mix.effective_count(),
            prior_share: mix.prior_share(),
            config: mix.config(),
            mix: mix.mix(&sched::Workload::offered_by(snap)),
        }
    }
}

/// A shape's slice kind as text, in `vgpuctl`'s kind syntax where it has one: `mig:PROFILE`,
/// `vgpu:TYPE-ID`, `mdev:TYPE`, `vf`, `gpu`, `fraction:MILLI`, `generic:MEMORY_MIB/COMPUTE_MILLI`.
pub fn slice_name(slice: &sched::SliceRequest) -> String {
    match slice {
        sched::SliceRequest::Mig(p) => format!("mig:{p}"),
        sched::SliceRequest::Vgpu(t) => format!("vgpu:{t}"),
        sched::SliceRequest::Mdev(t) => format!("mdev:{t}"),
        sched::SliceRequest::Vf => "vf".to_owned(),
        sched::SliceRequest::Whole => "gpu".to_owned(),
        sched::SliceRequest::Fraction(m) => format!("fraction:{m}"),
        sched::SliceRequest::Generic {
            memory_mib,
            compute_milli,
        } => format!("generic:{memory_mib}/{compute_milli}"),
    }
}
