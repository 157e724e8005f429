//! The `vgpud_demand_mix_*` gauges: the request mix the default policy has learnt
//! (`sched::MixEstimator`). A scrape reads atomics only and never waits on the estimator's lock
//! (held across a state-store write). The two counts are set on every request (two atomic
//! stores); the per-shape shares, which need the mix recomputed and up to `MAX_SERIES`
//! labelled series rebuilt, only when the engine saves the mix (at most every 10 s), so that
//! work stays off the allocation request path.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Labels, labels};
use crate::engine::slice_name;

/// Shapes exported, heaviest first: the estimator keeps up to 512, and a series per shape of a
/// long tail would cost more to scrape and store than it tells.
pub(super) const MAX_SERIES: usize = 32;

/// The gauges; clones share the values.
#[derive(Debug, Clone, Default)]
pub(super) struct DemandMixGauges {
    share: Family<Labels, Gauge<f64, AtomicU64>>,
    requests: Gauge,
    prior_share: Gauge<f64, AtomicU64>,
}

impl DemandMixGauges {
    /// Replaces the exported mix with `mix`'s: the observed shares (without the prior, which
    /// depends on what the host offers at the time), the requests counted and the prior's part.
    pub(super) fn set(&self, mix: &sched::MixEstimator) {
        self.set_shares(mix);
        self.set_counts(mix);
    }

    /// Rebuilds the per-shape share series from `mix` (the costly part: recompute and relabel).
    fn set_shares(&self, mix: &sched::MixEstimator) {
        self.share.clear();
        let observed = mix.mix(&sched::Workload::default());
        for item in observed.items.iter().take(MAX_SERIES) {
            let models = item.models.join("|");
            let shape = labels(&[
                ("slice", &slice_name(&item.slice)),
                ("count", &item.count.to_string()),
                ("cpu_milli", &item.cpu_milli.to_string()),
                ("memory_mib", &item.memory_mib.to_string()),
                ("models", &models),
            ]);
            self.share.get_or_create(&shape).set(item.weight);
        }
    }

    /// Sets the requests counted and the prior's part: cheap enough for every request.
    pub(super) fn set_counts(&self, mix: &sched::MixEstimator) {
        self.requests
            .set(i64::try_from(mix.seen()).unwrap_or(i64::MAX));
        self.prior_share.set(mix.prior_share());
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "vgpud_demand_mix_share",
            "Share of the requests seen with this shape (decayed counts, the heaviest shapes)",
            self.share.clone(),
        );
        registry.register(
            "vgpud_demand_mix_requests",
            "Allocation requests counted into the demand mix, restarts included",
            self.requests.clone(),
        );
        registry.register(
            "vgpud_demand_mix_prior_share",
            "Part of the scored demand mix still held by the prior (every offered shape)",
            self.prior_share.clone(),
        );
    }
}
