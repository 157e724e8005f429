//! The demand mix learnt online: which request shapes a host is asked for, and how often.
//!
//! The default policy measures waste and fragmentation against an expected request mix
//! ([`Workload`]). Computing it from a whole trace beforehand is an oracle a daemon does not
//! have; this estimator learns it from the requests seen so far (granted or refused: a refused
//! request is demand too, and the one most worth keeping room for).
//!
//! - **Shapes**: a request is reduced to its [`WorkItem`] shape: slice kind, GPU count, CPU,
//!   memory rounded up to [`MEMORY_BUCKET_MIB`], and the sorted set of acceptable models.
//!   Consumer, affinity, NUMA and pinning do not change what capacity the request takes, so they
//!   are left out. CPU is kept exact: fragmentation compares it with a NUMA node's free CPUs,
//!   and the openb trace's CPU sizes (3152, 11908 milli-CPUs) would be misjudged by a grid.
//! - **Decay**: each new request multiplies every earlier count by `0.5^(1/half_life)`, so a
//!   request `half_life` requests old counts half. Decay is per request, not per second, so the
//!   estimate does not age while a host is idle and replays are deterministic.
//! - **Prior**: before enough requests have been seen, the estimate is blended with a prior
//!   mix (the engine passes [`Workload::offered_by`] of its snapshot: every shape the host
//!   offers, equally likely). With `n` the decayed count seen and `k` the prior strength, the
//!   prior holds `k / (k + n)` of the weight and the observed shapes the rest, as a Dirichlet
//!   prior of `k` pseudo-requests would.
//! - **Bound**: at most `max_shapes` distinct shapes are kept; a new shape beyond that replaces
//!   the lightest, so a client sending ever-new shapes cannot grow the state without limit.

use serde::{Deserialize, Serialize};

use crate::frag::{WorkItem, Workload};
use crate::model::Request;

/// Memory of a shape is rounded up to a multiple of this (VM memory sizes are whole GiB; finer
/// sizes would split one shape into many).
pub const MEMORY_BUCKET_MIB: u64 = 1024;

/// How the estimator weighs what it has seen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MixConfig {
    /// Requests after which a request's count has halved.
    pub half_life: f64,
    /// Pseudo-requests the prior is worth.
    pub prior_strength: f64,
    /// Most distinct shapes kept.
    pub max_shapes: usize,
}

impl Default for MixConfig {
    /// A half-life of 5,000 requests: on the openb replay (a stationary, shuffled trace) every
    /// half-life from 200 requests to no decay at all left 3.73-3.76 % unallocated, so the
    /// trace does not choose; a long one keeps a host's rare large shapes in the mix, and a host
    /// whose tenants change still forgets old demand within some thousands of requests. A prior
    /// worth 20 requests: 5 to 100 are equal on that replay, 1,000 cost 0.16 points
    /// (BENCHMARKS.md §1, "Online mix").
    fn default() -> Self {
        Self {
            half_life: 5_000.0,
            prior_strength: 20.0,
            max_shapes: 512,
        }
    }
}

/// What the estimator has learnt, as persisted (the configuration is the daemon's, not state).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MixState {
    /// Requests observed since the estimator started (never decayed).
    pub seen: u64,
    /// Shapes with their decayed counts in `weight`.
    pub shapes: Vec<WorkItem>,
}

/// The online demand-mix estimator (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct MixEstimator {
    config: MixConfig,
    state: MixState,
    /// Factor applied to every count per new request.
    decay: f64,
}

impl MixEstimator {
    /// An estimator that has seen nothing.
    pub fn new(config: MixConfig) -> Self {
        Self::from_state(config, MixState::default())
    }

    /// An estimator resuming from persisted state. Shapes beyond `max_shapes` (a smaller limit
    /// than when saved) drop the lightest; shapes with a non-finite or negative count are
    /// dropped, as a hand-edited file could hold them.
    pub fn from_state(config: MixConfig, mut state: MixState) -> Self {
        state
            .shapes
            .retain(|s| s.weight.is_finite() && s.weight > 0.0);
        if state.shapes.len() > config.max_shapes.max(1) {
            state.shapes.sort_by(|a, b| b.weight.total_cmp(&a.weight));
            state.shapes.truncate(config.max_shapes.max(1));
        }
        let decay = if config.half_life.is_finite() && config.half_life > 0.0 {
            0.5f64.powf(1.0 / config.half_life)
        } else {
            1.0
        };
        Self {
            config,
            state,
            decay,
        }
    }

    /// The shape a request is counted under (see the module docs).
    pub fn shape_of(req: &Request) -> WorkItem {
        let mut models = req.models.clone();
        models.sort();
        models.dedup();
        WorkItem {
            slice: req.slice.clone(),
            count: req.count.max(1),
            cpu_milli: req.cpu_milli,
            memory_mib: req.memory_mib.div_ceil(MEMORY_BUCKET_MIB) * MEMORY_BUCKET_MIB,
            weight: 1.0,
            models,
        }
    }

    /// Counts one request.
    pub fn observe(&mut self, req: &Request) {
        self.observe_shape(Self::shape_of(req));
    }

    /// Counts one request already reduced to its shape (its `weight` is ignored).
    pub fn observe_shape(&mut self, shape: WorkItem) {
        self.state.seen = self.state.seen.saturating_add(1);
        for s in &mut self.state.shapes {
            s.weight *= self.decay;
        }
        if let Some(s) = self.state.shapes.iter_mut().find(|s| same_shape(s, &shape)) {
            s.weight += 1.0;
            return;
        }
        if self.state.shapes.len() >= self.config.max_shapes.max(1)
            && let Some(i) = self.lightest()
        {
            self.state.shapes.swap_remove(i);
        }
        self.state.shapes.push(WorkItem {
            weight: 1.0,
            ..shape
        });
    }

    fn lightest(&self) -> Option<usize> {
        self.state
            .shapes
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.weight.total_cmp(&b.1.weight))
            .map(|(i, _)| i)
    }

    /// Requests seen in all.
    pub fn seen(&self) -> u64 {
        self.state.seen
    }

    /// The decayed count of requests seen (what the prior is weighed against).
    pub fn effective_count(&self) -> f64 {
        self.state.shapes.iter().map(|s| s.weight).sum()
    }

    /// The part of the estimate held by the prior, `k / (k + n)`.
    pub fn prior_share(&self) -> f64 {
        let k = self.config.prior_strength.max(0.0);
        let n = self.effective_count();
        if k + n <= 0.0 { 1.0 } else { k / (k + n) }
    }

    /// The learnt state, for persistence.
    pub fn state(&self) -> &MixState {
        &self.state
    }

    /// The configuration.
    pub fn config(&self) -> MixConfig {
        self.config
    }

    /// The expected mix: observed shapes blended with `prior` (weights sum to 1 unless both
    /// are empty). A shape in both gets both parts.
    pub fn mix(&self, prior: &Workload) -> Workload {
        let n = self.effective_count();
        let prior_total: f64 = prior.items.iter().map(|i| i.weight.max(0.0)).sum();
        let alpha = if prior_total > 0.0 {
            self.prior_share()
        } else {
            0.0
        };
        let mut items: Vec<WorkItem> = Vec::with_capacity(self.state.shapes.len());
        if n > 0.0 {
            for s in &self.state.shapes {
                items.push(WorkItem {
                    weight: (1.0 - alpha) * s.weight / n,
                    ..s.clone()
                });
            }
        }
        if alpha > 0.0 {
            for p in prior.items.iter().filter(|p| p.weight > 0.0) {
                let w = alpha * p.weight / prior_total;
                match items.iter_mut().find(|i| same_shape(i, p)) {
                    Some(i) => i.weight += w,
                    None => items.push(WorkItem {
                        weight: w,
                        ..p.clone()
                    }),
                }
            }
        }
        // Heaviest first, so a reader (and `vgpuctl score --mix`) sees the main shapes first.
        items.sort_by(|a, b| b.weight.total_cmp(&a.weight));
        Workload { items }
    }
}

/// Whether two items are the same shape (everything but the weight).
fn same_shape(a: &WorkItem, b: &WorkItem) -> bool {
    a.slice == b.slice
        && a.count == b.count
        && a.cpu_milli == b.cpu_milli
        && a.memory_mib == b.memory_mib
        && a.models == b.models
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AffinityRule, AffinityScope, NumaPolicy, SliceRequest};

    fn share(m: u32) -> Request {
        Request::new("vm", SliceRequest::Fraction(m))
    }

    fn weight_of(w: &Workload, slice: &SliceRequest) -> f64 {
        w.items
            .iter()
            .filter(|i| i.slice == *slice)
            .map(|i| i.weight)
            .sum()
    }

    fn no_prior(half_life: f64) -> MixEstimator {
        MixEstimator::new(MixConfig {
            half_life,
            prior_strength: 0.0,
            max_shapes: 16,
        })
    }

    #[test]
    fn a_request_half_life_requests_old_counts_half() {
        let mut e = no_prior(10.0);
        e.observe(&share(500));
        for _ in 0..10 {
            e.observe(&share(250));
        }
        let old = e
            .state()
            .shapes
            .iter()
            .find(|s| s.slice == SliceRequest::Fraction(500))
            .map(|s| s.weight);
        assert!((old.unwrap() - 0.5).abs() < 1e-9, "{old:?}");
        // Without decay every request counts one.
        let mut flat = no_prior(f64::INFINITY);
        flat.observe(&share(500));
        flat.observe(&share(250));
        flat.observe(&share(250));
        let mix = flat.mix(&Workload::default());
        assert!((weight_of(&mix, &SliceRequest::Fraction(250)) - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(flat.seen(), 3);
    }

    #[test]
    fn the_prior_gives_way_as_requests_arrive() {
        let mut e = MixEstimator::new(MixConfig {
            half_life: f64::INFINITY,
            prior_strength: 4.0,
            max_shapes: 16,
        });
        let prior = Workload {
            items: vec![
                WorkItem::slice(SliceRequest::Whole, 3.0),
                WorkItem::slice(SliceRequest::Fraction(500), 1.0),
            ],
        };
        // Nothing seen: the prior, normalised.
        let m = e.mix(&prior);
        assert!((weight_of(&m, &SliceRequest::Whole) - 0.75).abs() < 1e-9);
        for _ in 0..4 {
            e.observe(&share(500));
        }
        // k = n = 4: half prior (0.375 whole, 0.125 half) and half observed (0.5 half).
        let m = e.mix(&prior);
        assert!((e.prior_share() - 0.5).abs() < 1e-9);
        assert!((weight_of(&m, &SliceRequest::Whole) - 0.375).abs() < 1e-9);
        assert!((weight_of(&m, &SliceRequest::Fraction(500)) - 0.625).abs() < 1e-9);
        // The shared shape is one item, heaviest first.
        assert_eq!(m.items.len(), 2);
        assert_eq!(m.items[0].slice, SliceRequest::Fraction(500));
        let total: f64 = m.items.iter().map(|i| i.weight).sum();
        assert!((total - 1.0).abs() < 1e-9);
        // An empty prior leaves the observed mix alone.
        let m = e.mix(&Workload::default());
        assert!((weight_of(&m, &SliceRequest::Fraction(500)) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn shapes_ignore_who_asks_and_bucket_memory() {
        let mut a = share(500);
        a.cpu_milli = 4000;
        a.memory_mib = 3000;
        a.models = vec!["H200".into(), "A100".into(), "H200".into()];
        let mut b = a.clone();
        b.consumer = "another-vm".into();
        b.numa = NumaPolicy::Required;
        b.pin_cpus = true;
        b.memory_mib = 3072;
        b.models = vec!["A100".into(), "H200".into()];
        b.affinity = vec![AffinityRule {
            consumer: "x".into(),
            scope: AffinityScope::Gpu,
            required: false,
        }];
        let sa = MixEstimator::shape_of(&a);
        assert_eq!(sa, MixEstimator::shape_of(&b));
        assert_eq!(sa.memory_mib, 3072);
        assert_eq!(sa.models, vec!["A100".to_owned(), "H200".to_owned()]);
        // CPU is exact, and count is part of the shape.
        let mut c = a.clone();
        c.cpu_milli = 4001;
        assert_ne!(sa, MixEstimator::shape_of(&c));
        let mut d = a.clone();
        d.count = 2;
        let mut e = no_prior(f64::INFINITY);
        e.observe(&a);
        e.observe(&b);
        e.observe(&c);
        e.observe(&d);
        assert_eq!(e.state().shapes.len(), 3);
    }

    #[test]
    fn new_shapes_beyond_the_bound_replace_the_lightest() {
        let mut e = MixEstimator::new(MixConfig {
            half_life: f64::INFINITY,
            prior_strength: 0.0,
            max_shapes: 2,
        });
        e.observe(&share(100));
        e.observe(&share(100));
        e.observe(&share(200));
        e.observe(&share(300));
        let kept: Vec<_> = e.state().shapes.iter().map(|s| s.slice.clone()).collect();
        assert_eq!(kept.len(), 2);
        assert!(kept.contains(&SliceRequest::Fraction(100)));
        assert!(kept.contains(&SliceRequest::Fraction(300)));
    }

    #[test]
    fn state_round_trips_through_json_and_drops_bad_counts() {
        let config = MixConfig::default();
        let mut e = MixEstimator::new(config);
        e.observe(&share(250));
        e.observe(&Request::new("vm", SliceRequest::Whole));
        let text = serde_json::to_string(e.state()).unwrap();
        let back: MixState = serde_json::from_str(&text).unwrap();
        let resumed = MixEstimator::from_state(config, back);
        assert_eq!(resumed.seen(), 2);
        // serde_json's float parsing may differ in the last bit; the shapes must not.
        let (a, b) = (&resumed.state().shapes, &e.state().shapes);
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!(same_shape(x, y), "{x:?} {y:?}");
            assert!((x.weight - y.weight).abs() < 1e-12);
        }
        let mut bad = e.state().clone();
        bad.shapes[0].weight = f64::NAN;
        bad.shapes[1].weight = -1.0;
        let cleaned = MixEstimator::from_state(config, bad);
        assert!(cleaned.state().shapes.is_empty());
        assert_eq!(cleaned.prior_share(), 1.0);
    }
}
