//! The demand mix the default policy scores against, learnt from the requests this host is
//! asked to place (`sched::MixEstimator`; the rules are in its module docs).
//!
//! Every allocation request that reaches the scheduler is counted once, before it is decided,
//! whether it is then granted or refused: refused demand is what the host should have kept
//! room for. An idempotent retry answered from the store is not counted again; a request for a
//! type no GPU here offers never reaches the scheduler and is not demand this host can serve.
//! The estimate is written to the state store (under the estimator's lock, so two requests
//! cannot write their counts out of order) at most every [`SAVE_EVERY`] and when the engine
//! closes, and read back when the engine opens, so a restart keeps it. Not with each count: a
//! state write is an fsync, and a client sending requests the host refuses would otherwise
//! make the daemon write the disk for each; a crash loses at most the last interval's counts,
//! which the decay would soon forget anyway. Only the default policy with no configured mix uses it; the prior
//! is what that policy used before (every shape the host offers, equally likely).

use std::sync::PoisonError;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::handle::{Engine, Inner};
use super::locks::lock;

/// The longest counts stay only in memory.
pub(crate) const SAVE_EVERY: Duration = Duration::from_secs(10);

/// The estimator with what of it the store has.
#[derive(Debug)]
pub(crate) struct LearntMix {
    estimator: sched::MixEstimator,
    saved_at: Option<Instant>,
    unsaved: bool,
}

impl LearntMix {
    pub(crate) fn new(estimator: sched::MixEstimator) -> Self {
        Self {
            estimator,
            saved_at: None,
            unsaved: false,
        }
    }

    fn stored(&self) -> StoredMix {
        StoredMix(self.estimator.state().clone())
    }
}

impl std::ops::Deref for LearntMix {
    type Target = sched::MixEstimator;
    fn deref(&self) -> &Self::Target {
        &self.estimator
    }
}

impl Drop for Inner {
    /// Counts not yet written go to the store when the engine closes.
    fn drop(&mut self) {
        let mix = self.mix.get_mut().unwrap_or_else(PoisonError::into_inner);
        if mix.unsaved {
            let state = mix.stored();
            let store = self.store.get_mut().unwrap_or_else(PoisonError::into_inner);
            if let Err(e) = store.update(|d| d.demand_mix = Some(state)) {
                tracing::warn!(error = %e, "the demand mix could not be saved");
            }
        }
    }
}

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
    /// Counts a request the scheduler is about to place; the estimate is saved when due. A failed
    /// write is logged and the count kept in memory: losing a count must not refuse a request.
    pub(crate) fn observe_demand(&self, req: &sched::Request) {
        let mut mix = lock(&self.inner.mix);
        mix.estimator.observe(req);
        self.inner.metrics.set_demand_mix_counts(&mix);
        mix.unsaved = true;
        if mix.saved_at.is_some_and(|t| t.elapsed() < SAVE_EVERY) {
            return;
        }
        // The shares follow the save cadence: recomputing the mix per request is work on the
        // request path for a scrape that comes every few seconds at most.
        self.inner.metrics.set_demand_mix(&mix);
        match self.write(|d| d.demand_mix = Some(mix.stored())) {
            Ok(()) => {
                mix.saved_at = Some(Instant::now());
                mix.unsaved = false;
            }
            Err(e) => tracing::warn!(error = %e, "the demand mix could not be saved"),
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
