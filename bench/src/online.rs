//! Where a replay's fragmentation-aware policies get their demand mix (`--mix-source`).
//!
//! - `oracle`: computed from the whole pod list before the replay starts, as the FGD paper's
//!   simulator does (its `GetTypicalPods` runs on the full list). No daemon has that.
//! - `online`: learnt from the pods seen so far, the current one included (a daemon sees a
//!   request before it decides it). vgpud uses `sched::MixEstimator`, the daemon's estimator,
//!   fed every GPU pod (CPU-only pods are not slice requests, so a daemon never sees them),
//!   with the daemon's prior (`Workload::offered_by` of a node). FGD uses its own rule
//!   (`typical_pods`, the most frequent shapes covering 95 % of the pods, CPU-only pods
//!   included) over the pods seen so far.
//!
//! Both re-read the mix after pods 1, 2, 4, … and then every [`REFRESH_EVERY`] pods, not after
//! every pod: each new mix invalidates the replay's memoised node scores, which is what makes a
//! replay fast. That costs nothing measurable: on the default trace a refresh every 25 or every
//! 500 pods gave the same figure to 0.01 points (BENCHMARKS.md §1, "Online mix").

use std::fmt;
use std::str::FromStr;

use anyhow::bail;
use sched::{MixConfig, MixEstimator, Policy, SliceRequest, WorkItem, Workload};

use crate::openb::{Pod, Typical, typical_pods};

/// Pods between two refreshes of the mix once past the first doublings.
pub const REFRESH_EVERY: usize = 100;

/// The estimator's settings and the refresh interval for a replay: the daemon's defaults, or
/// for tuning runs `REPLAY_MIX_HALF_LIFE` (requests; `inf`: no decay), `REPLAY_MIX_PRIOR`
/// (pseudo-requests) and `REPLAY_MIX_REFRESH` (pods).
pub fn settings() -> (MixConfig, usize) {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<f64>().ok());
    let mut config = MixConfig::default();
    if let Some(h) = var("REPLAY_MIX_HALF_LIFE") {
        config.half_life = h;
    }
    if let Some(k) = var("REPLAY_MIX_PRIOR") {
        config.prior_strength = k;
    }
    let refresh = var("REPLAY_MIX_REFRESH").map_or(REFRESH_EVERY, |r| (r as usize).max(1));
    (config, refresh)
}

/// Where the mix comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MixSource {
    /// From the whole list, before the replay.
    #[default]
    Oracle,
    /// From the pods seen so far.
    Online,
}

impl FromStr for MixSource {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "oracle" => Ok(Self::Oracle),
            "online" => Ok(Self::Online),
            _ => bail!("mix source {s:?}: expected oracle or online"),
        }
    }
}

impl fmt::Display for MixSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Oracle => "oracle",
            Self::Online => "online",
        })
    }
}

/// The shape of a GPU pod as vgpud's mix counts it: as the oracle mix does (`vgpud_policy`),
/// a share of `num_gpu` GPUs with the pod's CPU, memory left out (the replay's nodes are
/// CPU-bound long before memory-bound), the accepted models sorted.
pub fn pod_shape(cpu_milli: u32, gpu_milli: u32, num_gpu: u32, gpu_spec: &str) -> WorkItem {
    let mut models: Vec<String> = gpu_spec
        .split('|')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    models.sort();
    WorkItem {
        slice: SliceRequest::Fraction(gpu_milli),
        count: num_gpu,
        cpu_milli,
        memory_mib: 0,
        weight: 1.0,
        models,
    }
}

/// The mix of a replay learnt from the pods seen so far.
pub struct OnlineMix {
    estimator: MixEstimator,
    prior: Workload,
    seen: Vec<Pod>,
    refresh: usize,
}

impl OnlineMix {
    /// Nothing seen yet; `prior` is what the daemon would use (the node's offered shapes);
    /// the mix is re-read every `refresh` pods after the first doublings.
    pub fn new(config: MixConfig, prior: Workload, refresh: usize) -> Self {
        Self {
            estimator: MixEstimator::new(config),
            prior,
            seen: Vec::new(),
            refresh: refresh.max(1),
        }
    }

    /// Counts one arriving pod; true when the policies should re-read the mix now.
    pub fn observe(&mut self, pod: &Pod) -> bool {
        if pod.num_gpu > 0 && pod.gpu_milli > 0 {
            self.estimator.observe_shape(pod_shape(
                pod.cpu_milli,
                pod.gpu_milli,
                pod.num_gpu,
                &pod.gpu_spec,
            ));
        }
        self.seen.push(pod.clone());
        let n = self.seen.len();
        n.is_power_of_two() || n.is_multiple_of(self.refresh)
    }

    /// vgpud's policy with the mix learnt so far.
    pub fn vgpud_policy(&self) -> Policy {
        Policy::FragAware(self.estimator.mix(&self.prior))
    }

    /// FGD's target workload from the pods seen so far.
    pub fn fgd_typical(&self) -> Vec<Typical> {
        typical_pods(&self.seen, 95.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(num_gpu: u32, gpu_milli: u32) -> Pod {
        Pod {
            cpu_milli: 1000,
            memory_mib: 1024,
            num_gpu,
            gpu_milli,
            gpu_spec: String::new(),
        }
    }

    #[test]
    fn the_online_mix_counts_only_gpu_pods_seen_and_refreshes_on_schedule() {
        let prior = Workload {
            items: vec![WorkItem::slice(SliceRequest::Whole, 1.0)],
        };
        let config = MixConfig {
            half_life: f64::INFINITY,
            prior_strength: 0.0,
            max_shapes: 16,
        };
        let mut m = OnlineMix::new(config, prior, 100);
        let refreshes: Vec<bool> = (0..8)
            .map(|i| m.observe(&if i == 0 { pod(0, 0) } else { pod(1, 500) }))
            .collect();
        // After pods 1, 2, 4 and 8.
        assert_eq!(
            refreshes,
            [true, true, false, true, false, false, false, true]
        );
        let Policy::FragAware(w) = m.vgpud_policy() else {
            panic!("not the default policy");
        };
        // The CPU-only pod is not in vgpud's mix; FGD's counts it.
        assert_eq!(w.items.len(), 1);
        assert_eq!(w.items[0].slice, SliceRequest::Fraction(500));
        let t = m.fgd_typical();
        assert!(t.iter().any(|t| t.gpu_milli == 0));
        assert!(
            "bogus".parse::<MixSource>().is_err()
                && "online".parse::<MixSource>().ok() == Some(MixSource::Online)
        );
    }
}
