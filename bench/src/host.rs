//! One host as a loss system: an 8-GPU H200 host in MIG mode, requests and lifetimes drawn
//! from the trace's GPU-sharing pods, Poisson arrivals at a given offered load, no queue.

use std::collections::HashMap;

use ids::{NumaNodeId, PciAddress};
use sched::{
    GpuMode, GpuState, MigGeometry, MixConfig, MixEstimator, NumaPolicy, NumaState, Policy,
    Request, SliceChoice, SliceRequest, Snapshot, Vendor, WorkItem, Workload, decide,
};

use crate::openb::Pod;

/// A trace sample: MIG profile, memory slices, VM CPU and memory, lifetime in seconds.
#[derive(Debug, Clone)]
pub struct Sample {
    pub(crate) profile: ids::MigProfileName,
    pub(crate) slices: u32,
    cpu_milli: u32,
    memory_mib: u64,
    pub(crate) lifetime: f64,
}

/// A GPU's MIG profiles by compute slices (1, 2, 3, 4, 7), each with its memory slices.
pub(crate) type ProfileLadder = [(&'static str, u32); 5];

/// The H200's (NVIDIA MIG user guide, H200 profiles table).
const H200_LADDER: ProfileLadder = [
    ("1g.18gb", 1),
    ("2g.35gb", 2),
    ("3g.71gb", 4),
    ("4g.71gb", 4),
    ("7g.141gb", 8),
];

/// The smallest profile of `ladder` with at least a `milli` thousandths share of compute.
pub(crate) fn smallest_profile(milli: u32, ladder: &ProfileLadder) -> (&'static str, u32) {
    let compute = (u64::from(milli) * 7).div_ceil(1000);
    let step = match compute {
        0 | 1 => 0,
        2 => 1,
        3 => 2,
        4 => 3,
        _ => 4,
    };
    ladder[step]
}

/// Maps a GPU share to the smallest H200 profile with at least that share of compute.
fn profile_for(milli: u32) -> (&'static str, u32) {
    smallest_profile(milli, &H200_LADDER)
}

/// The trace's sharing pods (with their lifetimes) as H200 MIG requests.
pub fn samples(pods: &[(Pod, f64)]) -> Vec<Sample> {
    samples_with(pods, profile_for)
}

/// The trace's sharing pods (with their lifetimes) as MIG requests, each share mapped to a
/// profile and its memory slices by `profile_for`.
pub fn samples_with(
    pods: &[(Pod, f64)],
    profile_for: fn(u32) -> (&'static str, u32),
) -> Vec<Sample> {
    pods.iter()
        .filter(|(p, life)| p.is_share() && *life > 0.0)
        .filter_map(|(p, life)| {
            let (name, slices) = profile_for(p.gpu_milli);
            Some(Sample {
                profile: name.parse().ok()?,
                slices,
                cpu_milli: p.cpu_milli,
                memory_mib: p.memory_mib,
                lifetime: *life,
            })
        })
        .collect()
}

/// The H200 host: 8 GPUs, 4 per NUMA node, NVLink all-to-all, 2 × 56 cores, 2 × 1 TiB.
pub fn h200_host() -> Snapshot {
    let addrs: Vec<PciAddress> = (0..8u8)
        .filter_map(|i| PciAddress::new(0, 0x18 + i * 0x10, 0, 0).ok())
        .collect();
    let gpus = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| GpuState {
            address: *a,
            vendor: Vendor::Nvidia,
            model: "H200".into(),
            healthy: true,
            unavailable: None,
            utilization_pct: 0,
            memory_mib: 141 * 1024,
            numa_node: Some(NumaNodeId(u16::from(i >= 4))),
            nvlink_peers: addrs.iter().filter(|b| *b != a).copied().collect(),
            mode: GpuMode::Mig {
                geometry: MigGeometry::h200(),
                instances: Vec::new(),
            },
        })
        .collect();
    let numa = (0..2u16)
        .map(|n| NumaState {
            node: NumaNodeId(n),
            free_cpus: (u32::from(n) * 56..u32::from(n) * 56 + 56).collect(),
            free_cpu_milli: None,
            free_memory_mib: 1024 * 1024,
        })
        .collect();
    Snapshot { gpus, numa }
}

/// The request mix vgpud measures fragmentation against: the samples' profile frequencies.
pub fn mix(samples: &[Sample]) -> Workload {
    let mut items: Vec<WorkItem> = Vec::new();
    for s in samples {
        let slice = SliceRequest::Mig(s.profile.clone());
        match items.iter_mut().find(|i| i.slice == slice) {
            Some(i) => i.weight += 1.0,
            None => items.push(WorkItem::slice(slice, 1.0)),
        }
    }
    Workload { items }
}

/// The host's MIG layout as `profile@start` per GPU, for `HOST_DEBUG`.
fn layout(host: &Snapshot) -> String {
    host.gpus
        .iter()
        .map(|g| match &g.mode {
            GpuMode::Mig { instances, .. } => {
                let mut v: Vec<String> = instances
                    .iter()
                    .map(|i| format!("{}@{}", i.profile, i.start))
                    .collect();
                v.sort();
                format!("[{}]", v.join(" "))
            }
            _ => "[?]".to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Per-policy results at one load.
#[derive(Debug, Clone, Default)]
pub struct HostResult {
    /// Offered requests.
    pub offered: u64,
    /// Accepted requests.
    pub accepted: u64,
    /// Memory slices offered.
    pub offered_slices: u64,
    /// Memory slices accepted.
    pub accepted_slices: u64,
    /// Rejections for lack of GPU room.
    pub rejected: u64,
    /// Rejections a fresh layout of the live slices would have avoided.
    pub avoidable: u64,
    /// Accepted requests placed NUMA-locally.
    pub local: u64,
}

/// Whether the live slices plus `extra` fit the host with a fresh layout (largest first,
/// each where it adds least fragmentation): the repack oracle.
fn repack_fits(host: &Snapshot, live: &[ids::MigProfileName], extra: &ids::MigProfileName) -> bool {
    let mut fresh = h200_host();
    fresh.numa.clear();
    let mut all: Vec<ids::MigProfileName> = live.to_vec();
    all.push(extra.clone());
    let geo = MigGeometry::h200();
    let size = |p: &ids::MigProfileName| {
        geo.shape(p)
            .map_or((0, 0), |(_, s)| (s.memory_slices, s.compute_slices))
    };
    all.sort_by_key(|p| std::cmp::Reverse(size(p)));
    let policy = Policy::FragAware(Workload::offered_by(host));
    for (i, p) in all.iter().enumerate() {
        let mut r = Request::new(&format!("r{i}"), SliceRequest::Mig(p.clone()));
        r.numa = NumaPolicy::None;
        match decide(&fresh, &r, &policy) {
            Ok(d) => fresh.commit(&r, &d),
            Err(_) => return false,
        }
    }
    true
}

/// Sets each live slice's age (`now` minus its arrival time) in the snapshot, as the engine
/// reports the age of the slices it created.
fn set_ages(host: &mut Snapshot, arrived: &HashMap<String, f64>, now: f64) {
    for g in &mut host.gpus {
        if let GpuMode::Mig { instances, .. } = &mut g.mode {
            for i in instances {
                i.occupant.age_s = arrived
                    .get(&i.occupant.consumer)
                    .map(|t| (now - t).max(0.0) as u64);
            }
        }
    }
}

/// Runs `arrivals` requests at offered `load` (of the host's memory slices) with `policy`.
/// With `online`, the default policy scores against the mix the daemon's estimator has learnt
/// from the requests so far (every one, accepted or not, warm-up included), with the host's
/// offered profiles as the prior, as the engine does; otherwise against `policy`'s own mix.
pub fn run(
    samples: &[Sample],
    policy: &Policy,
    load: f64,
    arrivals: u64,
    seed: u64,
    online: bool,
) -> HostResult {
    let mut estimator = (online && matches!(policy, Policy::FragAware(_)))
        .then(|| MixEstimator::new(MixConfig::default()));
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut host = h200_host();
    let capacity = 64.0;
    let mean_size =
        samples.iter().map(|s| f64::from(s.slices)).sum::<f64>() / samples.len().max(1) as f64;
    let mean_life = samples.iter().map(|s| s.lifetime).sum::<f64>() / samples.len().max(1) as f64;
    let rate = load * capacity / (mean_size * mean_life).max(f64::MIN_POSITIVE);
    let mut now = 0.0;
    // Live slices: (end time, request, decision).
    let mut live: Vec<(f64, Request, sched::Decision)> = Vec::new();
    let mut arrived: HashMap<String, f64> = HashMap::new();
    let mut res = HostResult::default();
    let warmup = arrivals / 10;
    for n in 0..arrivals + warmup {
        now += -(1.0 - rng.f64()).ln() / rate;
        live.sort_by(|a, b| a.0.total_cmp(&b.0));
        while live.first().is_some_and(|(end, _, _)| *end <= now) {
            let (_, r, d) = live.remove(0);
            host.release(&r, &d);
            arrived.remove(&r.consumer);
        }
        let Some(s) = samples.get(rng.usize(..samples.len().max(1))) else {
            break;
        };
        let mut req = Request::new(&format!("vm{n}"), SliceRequest::Mig(s.profile.clone()));
        req.cpu_milli = s.cpu_milli;
        req.memory_mib = s.memory_mib;
        req.pin_cpus = true;
        req.numa = NumaPolicy::Preferred;
        let counted = n >= warmup;
        if counted {
            res.offered += 1;
            res.offered_slices += u64::from(s.slices);
        }
        set_ages(&mut host, &arrived, now);
        let learnt = estimator.as_mut().map(|e| {
            e.observe(&req);
            Policy::FragAware(e.mix(&Workload::offered_by(&host)))
        });
        match decide(&host, &req, learnt.as_ref().unwrap_or(policy)) {
            Ok(d) => {
                if counted {
                    res.accepted += 1;
                    res.accepted_slices += u64::from(s.slices);
                    res.local += u64::from(
                        d.explanation
                            .candidates
                            .first()
                            .is_some_and(|c| c.numa_local),
                    );
                }
                host.commit(&req, &d);
                arrived.insert(req.consumer.clone(), now);
                live.push((now + s.lifetime, req, d));
            }
            Err(r) => {
                if counted && r.error == sched::SchedError::NoCapacity {
                    res.rejected += 1;
                    let profiles: Vec<ids::MigProfileName> = live
                        .iter()
                        .flat_map(|(_, _, d)| d.placements.iter())
                        .filter_map(|p| match &p.slice {
                            SliceChoice::Mig { profile, .. } => Some(profile.clone()),
                            _ => None,
                        })
                        .collect();
                    if repack_fits(&host, &profiles, &s.profile) {
                        res.avoidable += 1;
                        if std::env::var_os("HOST_DEBUG").is_some() {
                            eprintln!(
                                "avoidable {} {}: {}",
                                policy.name(),
                                s.profile,
                                layout(&host)
                            );
                        }
                    }
                } else if counted {
                    res.rejected += 1;
                }
            }
        }
    }
    res
}

/// Mean and standard deviation over seeds.
fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (m, var.sqrt())
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

/// One policy at one load over several seeds: (mean, standard deviation) pairs.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Acceptance, percent of requests.
    pub accepted: (f64, f64),
    /// Acceptance weighted by memory slices.
    pub slice_weighted: (f64, f64),
    /// Rejections, all seeds together.
    pub rejected: u64,
    /// Avoidable share of rejections per seed.
    pub avoidable: (f64, f64),
    /// Avoidable rejections over all rejections of all seeds.
    pub avoidable_pooled: f64,
    /// NUMA-local share of accepted requests, all seeds together.
    pub numa_local: f64,
    /// Acceptance minus best-fit's on the same seed (same arrivals), in points.
    pub vs_best_fit: (f64, f64),
}

impl Summary {
    /// Summarises per-seed runs; `best_fit` holds best-fit's runs on the same seeds.
    pub fn of(runs: &[(u64, HostResult)], best_fit: &[(u64, HostResult)]) -> Self {
        let per = |f: &dyn Fn(&HostResult) -> f64| {
            mean_sd(&runs.iter().map(|(_, r)| f(r)).collect::<Vec<_>>())
        };
        let sum = |f: &dyn Fn(&HostResult) -> u64| runs.iter().map(|(_, r)| f(r)).sum::<u64>();
        let diffs: Vec<f64> = runs
            .iter()
            .filter_map(|(s, r)| {
                let b = best_fit.iter().find(|(t, _)| t == s)?;
                Some(pct(r.accepted, r.offered) - pct(b.1.accepted, b.1.offered))
            })
            .collect();
        Self {
            accepted: per(&|r| pct(r.accepted, r.offered)),
            slice_weighted: per(&|r| pct(r.accepted_slices, r.offered_slices)),
            rejected: sum(&|r| r.rejected),
            avoidable: per(&|r| pct(r.avoidable, r.rejected)),
            avoidable_pooled: pct(sum(&|r| r.avoidable), sum(&|r| r.rejected)),
            numa_local: pct(sum(&|r| r.local), sum(&|r| r.accepted)),
            vs_best_fit: mean_sd(&diffs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(offered: u64, accepted: u64, rejected: u64, avoidable: u64) -> HostResult {
        HostResult {
            offered,
            accepted,
            offered_slices: offered,
            accepted_slices: accepted,
            rejected,
            avoidable,
            local: accepted,
        }
    }

    #[test]
    fn summary_pools_rejections_and_pairs_seeds_with_best_fit() {
        let runs = vec![(1, run(100, 90, 10, 1)), (2, run(100, 70, 30, 0))];
        let best_fit = vec![(2, run(100, 60, 40, 4)), (1, run(100, 88, 12, 2))];
        let s = Summary::of(&runs, &best_fit);
        assert!((s.accepted.0 - 80.0).abs() < 1e-9, "{s:?}");
        assert!((s.accepted.1 - 200f64.sqrt()).abs() < 1e-9, "{s:?}");
        // 1 avoidable of 40 rejections, not the mean of 10 % and 0 %.
        assert!((s.avoidable_pooled - 2.5).abs() < 1e-9, "{s:?}");
        assert!((s.avoidable.0 - 5.0).abs() < 1e-9, "{s:?}");
        // Seed 1: +2 points, seed 2: +10 points, matched by seed and not by position.
        assert!((s.vs_best_fit.0 - 6.0).abs() < 1e-9, "{s:?}");
        assert_eq!(s.rejected, 40);
    }
}
