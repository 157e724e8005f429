//! Candidate enumeration, policies and the decision with its explanation.

use std::cmp::Ordering;

use ids::{NumaNodeId, PciAddress};
use serde::{Deserialize, Serialize};

use crate::cap::Cap;
use crate::error::SchedError;
use crate::frag::{FragModel, HostCaps, Workload};
use crate::model::{
    AffinityRule, AffinityScope, GPU_UNITS, GpuMode, GpuState, LinkPolicy, NumaPolicy, Occupant,
    Placement, Request, SliceChoice, SliceRequest, Snapshot,
};
use crate::waste::{WasteModel, WasteParts};

/// Weights of the source design's `spread` rule: `utilisation × (1 − occupancy) + locality ×
/// local`, highest wins.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpreadWeights {
    /// Weight of the free share of the GPU (0.7 in the source design).
    pub utilisation: f64,
    /// Weight of NUMA locality (0.3 in the source design).
    pub locality: f64,
}

impl Default for SpreadWeights {
    fn default() -> Self {
        Self {
            utilisation: 0.7,
            locality: 0.3,
        }
    }
}

/// A placement policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// The first GPU (snapshot order) and first slot that fit.
    FirstFit,
    /// The GPU left with the least free capacity after placement.
    BestFit,
    /// The source design's formula, kept so operators can compare.
    Spread(SpreadWeights),
    /// The default: NUMA-local first, then least expected fragmentation added (see the crate
    /// docs), then best fit.
    FragAware(Workload),
}

impl Default for Policy {
    fn default() -> Self {
        Policy::FragAware(Workload::default())
    }
}

impl Policy {
    /// Short name for tables and explanations.
    pub fn name(&self) -> &'static str {
        match self {
            Policy::FirstFit => "first-fit",
            Policy::BestFit => "best-fit",
            Policy::Spread(_) => "spread",
            Policy::FragAware(_) => "vgpud",
        }
    }
}

/// One candidate the scheduler considered, with its score components.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateScore {
    /// GPU(s) and slices of the candidate.
    pub placements: Vec<Placement>,
    /// NUMA node that would host the VM's CPUs and memory.
    pub numa_node: Option<NumaNodeId>,
    /// Whether every GPU of the candidate is on that NUMA node.
    pub numa_local: bool,
    /// Whether every pair of GPUs is NVLink-connected (true for single-GPU candidates).
    pub nvlink_connected: bool,
    /// Soft affinity or anti-affinity rules the candidate breaks.
    pub soft_violations: u32,
    /// Expected waste the candidate adds, in GPUs: capacity no common request could fill or
    /// its NUMA node's CPUs could not feed (fragmentation-aware policy only; see the crate docs).
    pub waste_added: Option<f64>,
    /// Expected fragmentation the candidate adds, in GPUs (fragmentation-aware policy only).
    pub frag_added: Option<f64>,
    /// Free capacity left on the chosen GPU(s) afterwards, in GPUs.
    pub free_after: f64,
    /// Mean occupancy of the chosen GPU(s) before placement, 0 to 1.
    pub occupancy: f64,
    /// Age in seconds of the oldest slice on the chosen GPU (the least such age over a GPU
    /// set); `None` when no slice there has a known age, and for other policies than the
    /// fragmentation-aware one, which uses it as its last tie-break before utilisation.
    pub oldest_age_s: Option<u64>,
    /// The policy's scalar score when it has one (spread), for display.
    pub score: Option<f64>,
    /// Whether this candidate was chosen.
    pub chosen: bool,
}

/// Why one GPU is not a candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuVerdict {
    /// The GPU.
    pub gpu: PciAddress,
    /// Why it was left out.
    pub reason: String,
}

/// Everything the scheduler looked at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// Policy name.
    pub policy: String,
    /// GPUs that were not candidates, with the reason.
    pub excluded: Vec<GpuVerdict>,
    /// Candidates, in the order the policy ranked them (best first).
    pub candidates: Vec<CandidateScore>,
    /// The host's expected fragmentation and waste before placement (fragmentation-aware
    /// policy only; boxed to keep `Rejection`, an error type, small).
    pub before: Option<Box<HostMeasures>>,
}

/// A host's measures under the fragmentation-aware policy, in GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostMeasures {
    /// Expected fragmentation (see the crate docs).
    pub fragmentation: f64,
    /// Expected waste (see the crate docs).
    pub waste: f64,
}

/// A placement decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The GPU(s) and what to create on each.
    pub placements: Vec<Placement>,
    /// NUMA node for the VM's memory and CPUs.
    pub numa_node: Option<NumaNodeId>,
    /// CPUs to pin (empty unless the request asked for pinning).
    pub cpus: Vec<u32>,
    /// Why this placement.
    pub explanation: Explanation,
}

/// A rejected request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rejection {
    /// The reason.
    pub error: SchedError,
    /// What was considered.
    pub explanation: Explanation,
}

/// How well a host would take a request: the per-host half of a two-level scheduler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostScore {
    /// Whether the host can take the request at all.
    pub feasible: bool,
    /// Higher is better: `-(waste_added + frag_added) - 0.001 × host_free_after` for the
    /// fragmentation-aware policy, a policy-specific value otherwise. An upstream scheduler
    /// should rather compare `waste_added` first, then `frag_added` with differences under about
    /// 0.05 GPU as ties, then `slice_free_after`, then keep a stable host order: that is the
    /// order measured on the openb replay (see the crate docs and BENCHMARKS.md).
    pub score: f64,
    /// Expected waste the placement adds, in GPUs (see the crate docs).
    pub waste_added: f64,
    /// Expected fragmentation the placement adds, in GPUs.
    pub frag_added: f64,
    /// Whether the placement would be NUMA-local.
    pub numa_local: bool,
    /// Free GPU capacity of the whole host after the placement, in GPUs.
    pub host_free_after: f64,
    /// Free capacity left on the GPU(s) the request would take, in GPUs: among hosts of equal
    /// fragmentation, the one leaving the least here is the best fit (the same tie-break
    /// `decide` applies between GPUs).
    pub slice_free_after: f64,
    /// Why not, when infeasible.
    pub reason: Option<String>,
}

impl HostScore {
    /// The fragmentation-aware policy's scalar score (higher is better) from a placement's
    /// added waste and fragmentation and the host's free capacity after it, all in GPUs: for
    /// callers that measure a placement of several requests themselves.
    pub fn frag_aware(waste_added: f64, frag_added: f64, host_free_after: f64) -> f64 {
        -waste_added - frag_added - 0.001 * host_free_after
    }
}

struct Cand {
    gpus: Vec<usize>,
    choices: Vec<SliceChoice>,
    numa: Option<usize>,
    local: bool,
    nvlink: bool,
    soft: u32,
    waste_added: Option<f64>,
    frag_added: Option<f64>,
    free_after: u32,
    occupancy: f64,
    age: Option<u64>,
    score: Option<f64>,
    order: usize,
}

pub(crate) struct Evaluation {
    ranked: Vec<Cand>,
    excluded: Vec<GpuVerdict>,
    frag_before: Option<f64>,
    waste_before: Option<f64>,
    host_free: u32,
    error: Option<SchedError>,
}

fn validate(req: &Request, snap: &Snapshot) -> Result<(), SchedError> {
    if req.count == 0 {
        return Err(SchedError::ZeroCount);
    }
    match req.slice {
        SliceRequest::Fraction(m) if m == 0 || m > GPU_UNITS => {
            return Err(SchedError::BadFraction(m));
        }
        SliceRequest::Generic {
            memory_mib: 0,
            compute_milli: 0,
        } => return Err(SchedError::EmptyGenericSize),
        _ => {}
    }
    if req.count as usize > snap.gpus.len() {
        return Err(SchedError::TooManyGpus {
            wanted: req.count,
            have: snap.gpus.len(),
        });
    }
    Ok(())
}

fn occupants_of(gpu: &GpuState) -> Vec<&Occupant> {
    match &gpu.mode {
        GpuMode::Whole { owner } => owner.iter().collect(),
        GpuMode::Mig { instances, .. } => instances.iter().map(|i| &i.occupant).collect(),
        GpuMode::VendorVgpu { active, .. } => active.iter().map(|i| &i.occupant).collect(),
        GpuMode::Mdev { active, .. } => active.iter().map(|i| &i.occupant).collect(),
        GpuMode::Sriov { active, .. } => active.iter().collect(),
        GpuMode::Fractional { shares } => shares.iter().map(|s| &s.occupant).collect(),
    }
}

fn consumers_on(gpu: &GpuState) -> Vec<&str> {
    occupants_of(gpu)
        .into_iter()
        .map(|o| o.consumer.as_str())
        .collect()
}

/// Age of the oldest slice with a known age on each GPU.
fn oldest_ages(snap: &Snapshot) -> Vec<Option<u64>> {
    snap.gpus
        .iter()
        .map(|gpu| occupants_of(gpu).iter().filter_map(|o| o.age_s).max())
        .collect()
}

/// Whether `rule`'s consumer is "near" `gpu` in the rule's scope.
fn near(snap: &Snapshot, gpu: &GpuState, rule: &AffinityRule) -> bool {
    match rule.scope {
        AffinityScope::Gpu => consumers_on(gpu).contains(&rule.consumer.as_str()),
        AffinityScope::Numa => gpu.numa_node.is_some_and(|n| {
            snap.gpus
                .iter()
                .filter(|g| g.numa_node == Some(n))
                .any(|g| consumers_on(g).contains(&rule.consumer.as_str()))
        }),
    }
}

/// Hard-rule verdict for one GPU, or the number of soft rules it breaks.
fn affinity_verdict(snap: &Snapshot, gpu: &GpuState, req: &Request) -> Result<u32, String> {
    let mut soft = 0;
    for rule in &req.affinity {
        if !near(snap, gpu, rule) {
            if rule.required {
                return Err(format!("not near {} as required", rule.consumer));
            }
            soft += 1;
        }
    }
    for rule in &req.anti_affinity {
        if near(snap, gpu, rule) {
            if rule.required {
                return Err(format!("{} is there (anti-affinity)", rule.consumer));
            }
            soft += 1;
        }
    }
    Ok(soft)
}

fn slice_name(s: &SliceRequest) -> String {
    match s {
        SliceRequest::Mig(p) => format!("MIG {p}"),
        SliceRequest::Vgpu(t) => format!("vGPU type {t}"),
        SliceRequest::Mdev(t) => format!("mdev type {t}"),
        SliceRequest::Vf => "a VF".to_owned(),
        SliceRequest::Whole => "the whole GPU".to_owned(),
        SliceRequest::Fraction(m) => format!("a {m}/1000 share"),
        SliceRequest::Generic {
            memory_mib,
            compute_milli,
        } => format!("{memory_mib} MiB and {compute_milli}/1000 compute"),
    }
}

/// Per-GPU choices after the filters, with the soft-rule count.
type Eligible = Vec<(usize, Vec<SliceChoice>, u32)>;

fn eligible_gpus(snap: &Snapshot, req: &Request, caps: &[Cap]) -> (Eligible, Vec<GpuVerdict>) {
    let mut ok = Vec::new();
    let mut excluded = Vec::new();
    for (i, (gpu, cap)) in snap.gpus.iter().zip(caps).enumerate() {
        let verdict = if !gpu.healthy {
            Err("unhealthy".to_owned())
        } else if let Some(why) = &gpu.unavailable {
            Err(why.clone())
        } else if req.vendor.is_some_and(|v| v != gpu.vendor) {
            Err("other vendor".to_owned())
        } else if !req.models.is_empty() && !req.models.contains(&gpu.model) {
            Err(format!("model {} not accepted", gpu.model))
        } else {
            affinity_verdict(snap, gpu, req).and_then(|soft| {
                let choices = cap.choices(gpu, &req.slice);
                if choices.is_empty() {
                    Err(format!("no room for {}", slice_name(&req.slice)))
                } else {
                    Ok((choices, soft))
                }
            })
        };
        match verdict {
            Ok((choices, soft)) => ok.push((i, choices, soft)),
            Err(reason) => excluded.push(GpuVerdict {
                gpu: gpu.address,
                reason,
            }),
        }
    }
    // A generic size maps to the smallest slice the host offers: drop bigger ones.
    if matches!(req.slice, SliceRequest::Generic { .. }) {
        let size = |i: usize, c: &SliceChoice| snap.gpus.get(i).map_or(0, |g| Cap::units(g, c));
        if let Some(min) = ok
            .iter()
            .filter_map(|(i, cs, _)| cs.first().map(|c| size(*i, c)))
            .min()
        {
            ok.retain(|(i, cs, _)| cs.first().is_some_and(|c| size(*i, c) == min));
        }
    }
    (ok, excluded)
}

fn linked(snap: &Snapshot, a: usize, b: usize) -> bool {
    match (snap.gpus.get(a), snap.gpus.get(b)) {
        (Some(x), Some(y)) => {
            x.nvlink_peers.contains(&y.address) || y.nvlink_peers.contains(&x.address)
        }
        _ => false,
    }
}

/// GPU sets for a multi-GPU request: one greedy set per seed GPU, taking NVLink peers of the
/// whole set first, then GPUs on the seed's NUMA node, then the fullest GPUs.
fn gpu_sets(snap: &Snapshot, req: &Request, eligible: &Eligible, caps: &[Cap]) -> Vec<Vec<usize>> {
    let k = req.count as usize;
    if k == 1 {
        return eligible.iter().map(|(i, _, _)| vec![*i]).collect();
    }
    let free = |i: usize| {
        snap.gpus
            .get(i)
            .zip(caps.get(i))
            .map_or(0, |(g, c)| c.free_units(g))
    };
    let mut sets: Vec<Vec<usize>> = Vec::new();
    for (seed, _, _) in eligible {
        let mut set = vec![*seed];
        let seed_numa = snap.gpus.get(*seed).and_then(|g| g.numa_node);
        let mut rest: Vec<usize> = eligible
            .iter()
            .map(|(i, _, _)| *i)
            .filter(|i| i != seed)
            .collect();
        while set.len() < k {
            let pick = rest
                .iter()
                .copied()
                .filter(|c| {
                    req.nvlink != LinkPolicy::Required || set.iter().all(|s| linked(snap, *s, *c))
                })
                .min_by_key(|c| {
                    let peer = set.iter().all(|s| linked(snap, *s, *c));
                    let same_numa = snap.gpus.get(*c).and_then(|g| g.numa_node) == seed_numa;
                    (
                        !(peer && req.nvlink != LinkPolicy::None),
                        !same_numa,
                        free(*c),
                        *c,
                    )
                });
            match pick {
                Some(p) => {
                    set.push(p);
                    rest.retain(|r| *r != p);
                }
                None => break,
            }
        }
        if set.len() == k {
            set.sort_unstable();
            if !sets.contains(&set) {
                sets.push(set);
            }
        }
    }
    sets
}

/// Chooses the NUMA node for the VM: local to the GPUs when it has room, else (unless
/// required) the node with the most free CPU that has room.
fn pick_numa(
    snap: &Snapshot,
    host: &HostCaps,
    req: &Request,
    gpus: &[usize],
) -> Option<(Option<usize>, bool)> {
    let gpu_nodes: Vec<Option<NumaNodeId>> = gpus
        .iter()
        .map(|i| snap.gpus.get(*i).and_then(|g| g.numa_node))
        .collect();
    let common = gpu_nodes
        .first()
        .copied()
        .flatten()
        .filter(|n| gpu_nodes.iter().all(|g| *g == Some(*n)));
    let local_idx = common.and_then(|n| snap.numa.iter().position(|s| s.node == n));
    if snap.numa.is_empty() {
        return if req.numa == NumaPolicy::Required {
            None
        } else {
            Some((None, false))
        };
    }
    let cpus_needed = if req.pin_cpus {
        u64::from(req.cpu_milli).div_ceil(1000) as usize
    } else {
        0
    };
    let room = |i: usize| {
        host.numa_cpu.get(i).copied().unwrap_or(0) >= u64::from(req.cpu_milli)
            && host.numa_mem.get(i).copied().unwrap_or(0) >= req.memory_mib
            && snap
                .numa
                .get(i)
                .is_some_and(|s| s.free_cpus.len() >= cpus_needed)
    };
    if let Some(i) = local_idx.filter(|i| room(*i)) {
        return Some((Some(i), true));
    }
    if req.numa == NumaPolicy::Required {
        return None;
    }
    (0..snap.numa.len())
        .filter(|i| room(*i))
        .max_by_key(|i| {
            (
                host.numa_cpu.get(*i).copied().unwrap_or(0),
                std::cmp::Reverse(*i),
            )
        })
        .map(|i| (Some(i), false))
}

/// The best slice choice on one GPU for the policy (the GPU's own view, used to build sets),
/// each choice measured on `scratch`, the host changed and restored in place.
fn best_choice(
    snap: &Snapshot,
    scratch: &mut HostCaps,
    gpu: usize,
    choices: &[SliceChoice],
    policy: &Policy,
    frag_model: &FragModel,
    (waste, base): (&mut WasteModel, &WasteParts),
) -> Option<SliceChoice> {
    match policy {
        Policy::FragAware(_) if choices.len() > 1 => {
            snap.gpus.get(gpu)?;
            choices
                .iter()
                .map(|c| {
                    let undo =
                        apply_candidate(snap, scratch, &[gpu], std::slice::from_ref(c), None);
                    let w = waste.waste_with(snap, base, scratch, &[gpu]);
                    let frag = frag_model.measure(snap, scratch);
                    undo.restore(scratch);
                    (w, frag, c)
                })
                .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)))
                .map(|(_, _, c)| c.clone())
        }
        _ => choices.first().cloned(),
    }
}

fn workload_for<'a>(
    policy: &'a Policy,
    snap: &Snapshot,
    fallback: &'a mut Workload,
) -> &'a Workload {
    match policy {
        Policy::FragAware(w) if !w.items.is_empty() => w,
        _ => {
            *fallback = Workload::offered_by(snap);
            fallback
        }
    }
}

pub(crate) fn evaluate(snap: &Snapshot, req: &Request, policy: &Policy) -> Evaluation {
    let mut ev = Evaluation {
        ranked: Vec::new(),
        excluded: Vec::new(),
        frag_before: None,
        waste_before: None,
        host_free: 0,
        error: None,
    };
    if let Err(e) = validate(req, snap) {
        ev.error = Some(e);
        return ev;
    }
    let caps: Result<Vec<Cap>, SchedError> = snap.gpus.iter().map(Cap::of).collect();
    let caps = match caps {
        Ok(c) => c,
        Err(e) => {
            ev.error = Some(e);
            return ev;
        }
    };
    let host = HostCaps {
        numa_cpu: snap.numa.iter().map(|n| n.cpu_milli()).collect(),
        numa_mem: snap.numa.iter().map(|n| n.free_memory_mib).collect(),
        caps,
    };
    ev.host_free = snap
        .gpus
        .iter()
        .zip(&host.caps)
        .filter(|(g, _)| g.usable())
        .map(|(g, c)| c.free_units(g))
        .sum();
    let (eligible, excluded) = eligible_gpus(snap, req, &host.caps);
    ev.excluded = excluded;
    let mut fallback = Workload::default();
    let frag_aware = matches!(policy, Policy::FragAware(_));
    let workload = if frag_aware {
        workload_for(policy, snap, &mut fallback)
    } else {
        &fallback
    };
    let mut waste = WasteModel::new(snap, workload);
    let frag_model = FragModel::new(snap, workload);
    let waste_base = if frag_aware {
        waste.parts(snap, &host)
    } else {
        WasteParts::default()
    };
    if frag_aware {
        ev.frag_before = Some(frag_model.measure(snap, &host));
        ev.waste_before = Some(waste.total(&waste_base, &host.numa_cpu));
    }
    let sets = gpu_sets(snap, req, &eligible, &host.caps);
    let ages = if frag_aware {
        oldest_ages(snap)
    } else {
        Vec::new()
    };
    let mut cands: Vec<Cand> = Vec::new();
    let mut numa_failed = false;
    // Candidates are measured on one copy of the host, changed and restored in place.
    let mut scratch = host.clone();
    for set in sets {
        // For one GPU every slot is a candidate; for a set, each GPU's own best slot.
        let choice_lists: Vec<Vec<SliceChoice>> = if set.len() == 1 {
            eligible
                .iter()
                .find(|(i, _, _)| Some(i) == set.first())
                .map(|(_, cs, _)| cs.iter().map(|c| vec![c.clone()]).collect())
                .unwrap_or_default()
        } else {
            let per: Option<Vec<SliceChoice>> = set
                .iter()
                .map(|g| {
                    let cs = eligible
                        .iter()
                        .find(|(i, _, _)| i == g)
                        .map(|(_, cs, _)| cs)?;
                    let waste = (&mut waste, &waste_base);
                    best_choice(snap, &mut scratch, *g, cs, policy, &frag_model, waste)
                })
                .collect();
            per.into_iter().collect()
        };
        let soft_gpu: u32 = set
            .iter()
            .filter_map(|g| eligible.iter().find(|(i, _, _)| i == g).map(|(_, _, s)| *s))
            .sum();
        let nvlink = set
            .iter()
            .enumerate()
            .all(|(a, x)| set.iter().skip(a + 1).all(|y| linked(snap, *x, *y)));
        // The least over the set: a GPU without a known age makes the set's age unknown.
        let age = if ages.is_empty() {
            None
        } else {
            set.iter()
                .map(|g| ages.get(*g).copied().flatten())
                .min()
                .flatten()
        };
        for choices in choice_lists {
            let Some((numa, local)) = pick_numa(snap, &host, req, &set) else {
                numa_failed = true;
                continue;
            };
            let occupancy = set
                .iter()
                .filter_map(|g| snap.gpus.get(*g).zip(host.caps.get(*g)))
                .map(|(gpu, cap)| cap.occupancy(gpu))
                .sum::<f64>()
                / set.len() as f64;
            let undo = apply_candidate(snap, &mut scratch, &set, &choices, numa.map(|n| (n, req)));
            let after = &scratch;
            let free_after = set
                .iter()
                .filter_map(|g| snap.gpus.get(*g).zip(after.caps.get(*g)))
                .map(|(gpu, cap)| cap.free_units(gpu))
                .sum();
            let frag_added = ev
                .frag_before
                .map(|before| frag_model.measure(snap, after) - before);
            let waste_added = ev
                .waste_before
                .map(|before| waste.waste_with(snap, &waste_base, after, &set) - before);
            undo.restore(&mut scratch);
            let soft = soft_gpu
                + u32::from(req.nvlink == LinkPolicy::Preferred && !nvlink && set.len() > 1);
            let score = match policy {
                Policy::Spread(w) => Some(
                    w.utilisation * (1.0 - occupancy) + w.locality * f64::from(u8::from(local)),
                ),
                _ => None,
            };
            let order = cands.len();
            cands.push(Cand {
                gpus: set.clone(),
                choices,
                numa,
                local,
                nvlink,
                soft,
                waste_added,
                frag_added,
                free_after,
                occupancy,
                age,
                score,
                order,
            });
        }
    }
    if cands.is_empty() {
        ev.error = Some(if eligible.is_empty() {
            SchedError::NoCapacity
        } else if numa_failed {
            SchedError::NoCpuOrMemory {
                cpu_milli: req.cpu_milli,
                memory_mib: req.memory_mib,
            }
        } else if req.nvlink == LinkPolicy::Required {
            SchedError::NoNvlinkGroup(req.count)
        } else {
            SchedError::NoCapacity
        });
        return ev;
    }
    cands.sort_by(|a, b| rank(policy, snap, a, b));
    ev.ranked = cands;
    ev
}

/// What [`apply_candidate`] changed, to put back.
struct Undo {
    caps: Vec<(usize, Cap)>,
    numa: Option<(usize, u64, u64)>,
}

impl Undo {
    fn restore(self, host: &mut HostCaps) {
        for (g, cap) in self.caps {
            if let Some(c) = host.caps.get_mut(g) {
                *c = cap;
            }
        }
        if let Some((n, cpu, mem)) = self.numa {
            if let Some(c) = host.numa_cpu.get_mut(n) {
                *c = cpu;
            }
            if let Some(m) = host.numa_mem.get_mut(n) {
                *m = mem;
            }
        }
    }
}

/// Takes a candidate's slices out of `host`'s GPUs and, given a NUMA node, the request's CPUs
/// and memory out of it; returns how to undo it.
fn apply_candidate(
    snap: &Snapshot,
    host: &mut HostCaps,
    set: &[usize],
    choices: &[SliceChoice],
    numa: Option<(usize, &Request)>,
) -> Undo {
    let mut undo = Undo {
        caps: Vec::with_capacity(set.len()),
        numa: None,
    };
    for (g, c) in set.iter().zip(choices) {
        if let (Some(gpu), Some(cap)) = (snap.gpus.get(*g), host.caps.get_mut(*g)) {
            undo.caps.push((*g, cap.clone()));
            cap.apply(gpu, c);
        }
    }
    if let Some((n, req)) = numa
        && let (Some(c), Some(m)) = (host.numa_cpu.get_mut(n), host.numa_mem.get_mut(n))
    {
        undo.numa = Some((n, *c, *m));
        *c = c.saturating_sub(u64::from(req.cpu_milli));
        *m = m.saturating_sub(req.memory_mib);
    }
    undo
}

fn util(snap: &Snapshot, c: &Cand) -> u32 {
    c.gpus
        .iter()
        .filter_map(|g| snap.gpus.get(*g))
        .map(|g| u32::from(g.utilization_pct))
        .sum()
}

/// The policies' orders, best first.
fn rank(policy: &Policy, snap: &Snapshot, a: &Cand, b: &Cand) -> Ordering {
    let soft = a.soft.cmp(&b.soft);
    match policy {
        Policy::FirstFit => soft.then(a.order.cmp(&b.order)),
        Policy::BestFit => soft
            .then(a.free_after.cmp(&b.free_after))
            .then(a.order.cmp(&b.order)),
        Policy::Spread(_) => soft
            .then(b.score.unwrap_or(0.0).total_cmp(&a.score.unwrap_or(0.0)))
            .then(a.order.cmp(&b.order)),
        Policy::FragAware(_) => {
            // Differences below a millionth of a GPU are float noise, not fragmentation.
            let q = |f: Option<f64>| (f.unwrap_or(0.0) * 1e6).round() as i64;
            // Lifetimes are heavy-tailed: the GPU whose slices have lived longest will likely
            // stay busy longest, so a new slice there is least likely to be stranded alone.
            let oldest = |c: &Cand| c.age.unwrap_or(0);
            b.local
                .cmp(&a.local)
                .then(soft)
                .then(q(a.waste_added).cmp(&q(b.waste_added)))
                .then(q(a.frag_added).cmp(&q(b.frag_added)))
                .then(a.free_after.cmp(&b.free_after))
                .then(oldest(b).cmp(&oldest(a)))
                .then(util(snap, a).cmp(&util(snap, b)))
                .then(a.order.cmp(&b.order))
        }
    }
}

fn to_score(snap: &Snapshot, c: &Cand, chosen: bool) -> CandidateScore {
    CandidateScore {
        placements: c
            .gpus
            .iter()
            .zip(&c.choices)
            .filter_map(|(g, s)| {
                snap.gpus.get(*g).map(|gpu| Placement {
                    gpu: gpu.address,
                    slice: s.clone(),
                })
            })
            .collect(),
        numa_node: c.numa.and_then(|n| snap.numa.get(n)).map(|n| n.node),
        numa_local: c.local,
        nvlink_connected: c.nvlink,
        soft_violations: c.soft,
        waste_added: c.waste_added,
        frag_added: c.frag_added,
        free_after: f64::from(c.free_after) / f64::from(GPU_UNITS),
        occupancy: c.occupancy,
        oldest_age_s: c.age,
        score: c.score,
        chosen,
    }
}

impl Evaluation {
    fn explanation(&self, snap: &Snapshot, policy: &Policy) -> Explanation {
        Explanation {
            policy: policy.name().to_owned(),
            excluded: self.excluded.clone(),
            candidates: self
                .ranked
                .iter()
                .enumerate()
                .map(|(i, c)| to_score(snap, c, i == 0))
                .collect(),
            before: self.frag_before.zip(self.waste_before).map(|(f, w)| {
                Box::new(HostMeasures {
                    fragmentation: f,
                    waste: w,
                })
            }),
        }
    }
}

/// Decides where `request` goes on the host described by `snapshot` under `policy`.
///
/// Pure: the snapshot is not changed; the engine creates the slices and re-reads the host.
pub fn decide(
    snapshot: &Snapshot,
    request: &Request,
    policy: &Policy,
) -> Result<Decision, Rejection> {
    decision_of(
        &evaluate(snapshot, request, policy),
        snapshot,
        request,
        policy,
    )
}

/// How well this host would take `request`: usable by an upstream scheduler to choose between
/// hosts (higher `score` is better; infeasible hosts score `-inf`).
pub fn host_score(snapshot: &Snapshot, request: &Request, policy: &Policy) -> HostScore {
    score_of(&evaluate(snapshot, request, policy), snapshot, policy)
}

/// [`host_score`] and [`decide`] of one evaluation: what a dry run reports, at the cost of one.
pub fn scored_decision(
    snapshot: &Snapshot,
    request: &Request,
    policy: &Policy,
) -> (HostScore, Result<Decision, Rejection>) {
    let ev = evaluate(snapshot, request, policy);
    (
        score_of(&ev, snapshot, policy),
        decision_of(&ev, snapshot, request, policy),
    )
}

fn decision_of(
    ev: &Evaluation,
    snapshot: &Snapshot,
    request: &Request,
    policy: &Policy,
) -> Result<Decision, Rejection> {
    let explanation = ev.explanation(snapshot, policy);
    let Some(best) = ev.ranked.first() else {
        return Err(Rejection {
            error: ev.error.clone().unwrap_or(SchedError::NoCapacity),
            explanation,
        });
    };
    let numa = best.numa.and_then(|n| snapshot.numa.get(n));
    let cpus = match numa {
        Some(n) if request.pin_cpus => n
            .free_cpus
            .iter()
            .take(u64::from(request.cpu_milli).div_ceil(1000) as usize)
            .copied()
            .collect(),
        _ => Vec::new(),
    };
    Ok(Decision {
        placements: to_score(snapshot, best, true).placements,
        numa_node: numa.map(|n| n.node),
        cpus,
        explanation,
    })
}

fn score_of(ev: &Evaluation, snapshot: &Snapshot, policy: &Policy) -> HostScore {
    let Some(best) = ev.ranked.first() else {
        return HostScore {
            feasible: false,
            score: f64::NEG_INFINITY,
            waste_added: 0.0,
            frag_added: 0.0,
            numa_local: false,
            host_free_after: f64::from(ev.host_free) / f64::from(GPU_UNITS),
            slice_free_after: 0.0,
            reason: Some(
                ev.error
                    .clone()
                    .unwrap_or(SchedError::NoCapacity)
                    .to_string(),
            ),
        };
    };
    let taken: u32 = best
        .gpus
        .iter()
        .zip(&best.choices)
        .filter_map(|(g, c)| snapshot.gpus.get(*g).map(|gpu| Cap::units(gpu, c)))
        .sum();
    let host_free_after = f64::from(ev.host_free.saturating_sub(taken)) / f64::from(GPU_UNITS);
    let frag_added = best.frag_added.unwrap_or(0.0);
    let waste_added = best.waste_added.unwrap_or(0.0);
    let score = match policy {
        Policy::FragAware(_) => HostScore::frag_aware(waste_added, frag_added, host_free_after),
        Policy::Spread(_) => best.score.unwrap_or(0.0),
        Policy::BestFit | Policy::FirstFit => -host_free_after,
    };
    HostScore {
        feasible: true,
        score,
        waste_added,
        frag_added,
        numa_local: best.local,
        host_free_after,
        slice_free_after: f64::from(best.free_after) / f64::from(GPU_UNITS),
        reason: None,
    }
}
