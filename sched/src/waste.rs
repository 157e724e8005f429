//! Expected waste: the free capacity a host will most likely never allocate, whatever arrives.
//!
//! Fragmentation (the `frag` module) asks "which of the next request's shapes could not use
//! this free capacity?". That one-step view over-counts remainders that one common request
//! fills later (a 0.53 GPU remainder is a fragment for every shape above 0.53, yet a 0.47 share
//! arrives soon and leaves 0.06) and under-counts those that nothing common ever fills (a 0.21
//! remainder is left for good). Once a host is busy, what matters is the end state, so the
//! default policy first minimises the waste a placement adds:
//!
//! - **Dead capacity** of a fractional GPU: its free share minus the largest sum of *common*
//!   sizes that fits in it: whole GPUs (which fill an empty one) and the sub-GPU shares holding
//!   at least [`COMMON_SHARE`] of the capacity the workload's sub-GPU requests ask for. The
//!   share is taken among sub-GPU requests because they are what makes and fills remainders:
//!   how much whole-GPU demand there is says nothing about whether a 0.19 remainder will meet a
//!   0.16 share (measured against all demand, the choice of fillers shifted with the mix and
//!   cost up to 1.8 points on sharing-heavy mixes). Rare sizes are left out on purpose: on the
//!   openb trace a 0.16 share is 0.7 % of the sub-GPU demand, and counting it made every 0.81
//!   share look as if its 0.19 remainder would be filled, which it is for one GPU in ten.
//!   Other modes have no dead capacity here: a MIG GPU's free slices can nearly always be
//!   covered by some mix of small profiles, so "could anything fill it?" says little there,
//!   while what matters (keeping aligned room for large profiles) is what fragmentation
//!   measures. Ranked first on MIG, the packing view sent small instances into the slots large
//!   ones need and raised the one-host benchmark's avoidable rejections from 0.4 % to 25 %.
//! - **CPU-stranded capacity** of a NUMA node: GPU capacity that is not dead but that the node's
//!   free CPUs could not feed at the workload's average CPU per GPU unit.
//!
//! - On mixes made of shares, the `pairing` module's rules: the stranded term measured partly
//!   at the CPU pairs of shares ask, and empty GPUs on CPU-poor nodes counted as the capacity a
//!   share opening them is expected to leave.
//!
//! A host's waste is `dead + STRANDED_WEIGHT × stranded` (plus the empty GPUs' expected waste
//! when the pairing rules apply), in GPUs.

use std::collections::HashMap;

use crate::cap::Cap;
use crate::frag::{HostCaps, Workload};
use crate::model::{GPU_UNITS, GpuMode, GpuState, SliceChoice, SliceRequest, Snapshot};
use crate::pairing::ShareRules;

/// A sub-GPU share counts as common, and may fill remainders, when its requests hold at least
/// this part of the capacity the workload's sub-GPU requests ask for (on the openb replay
/// 1 % to 1.5 % are equally good, 0.75 % and 2 % lose 0.1–0.2 points; see BENCHMARKS.md).
pub const COMMON_SHARE: f64 = 0.0125;

/// Weight of CPU-stranded capacity against dead capacity (the openb replay is flat between
/// 0.25 and 2).
pub const STRANDED_WEIGHT: f64 = 0.5;

/// A host's waste broken down, so that a candidate changing a few GPUs is measured by
/// recomputing only those.
#[derive(Debug, Clone, Default)]
pub(crate) struct WasteParts {
    /// Free capacity per GPU, in snapshot order.
    free: Vec<u32>,
    /// Dead capacity per GPU.
    dead: Vec<u32>,
    total_dead: u32,
    /// Per NUMA node in snapshot order.
    numa: Vec<NumaParts>,
}

/// What the CPU terms need of one NUMA node's GPUs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NumaParts {
    /// Free capacity that is not dead.
    fillable: u32,
    /// GPUs with free capacity.
    open: u32,
    /// Empty fractional GPUs.
    empty: u32,
}

impl NumaParts {
    /// Adds (`sign` 1) or removes (-1) one GPU with `free` units free, `dead` of them dead.
    fn count(&mut self, free: u32, dead: u32, frac: bool, sign: i64) {
        let add = |v: &mut u32, d: u32| *v = (i64::from(*v) + sign * i64::from(d)).max(0) as u32;
        add(&mut self.fillable, free - dead);
        add(&mut self.open, u32::from(free > 0));
        add(&mut self.empty, u32::from(frac && free == GPU_UNITS));
    }
}

/// The waste model of one workload on one host.
pub(crate) struct WasteModel<'w> {
    /// Per-GPU slices of the common shapes, most common first.
    common: Vec<&'w SliceRequest>,
    /// The common slices' sizes on any fractional GPU, most common first; `None` when a
    /// generic size is among them (its share depends on the GPU's memory).
    share_sizes: Option<Vec<u32>>,
    /// Milli-CPUs the workload asks per GPU unit (0: no CPU term).
    cpu_per_unit: f64,
    /// The pairing rules, when the mix is made of shares.
    rules: Option<ShareRules>,
    /// Dead capacity by (GPU index, or `usize::MAX` when shared by all GPUs; free share).
    memo: HashMap<(usize, u32), u32>,
}

impl<'w> WasteModel<'w> {
    pub fn new(snap: &Snapshot, workload: &'w Workload) -> Self {
        // Each item's size in GPU units on this host.
        let sizes: Vec<Option<u32>> = workload
            .items
            .iter()
            .map(|i| slice_units(snap, &i.slice))
            .collect();
        // Remainders are made and filled by sub-GPU requests, so a share's commonness is its
        // part of the capacity those ask for; whole GPUs always fill an empty one.
        let mut shares: Vec<(&SliceRequest, f64)> = Vec::new();
        let mut common: Vec<&SliceRequest> = Vec::new();
        for (item, size) in workload.items.iter().zip(&sizes) {
            let size = size.unwrap_or(GPU_UNITS);
            match &item.slice {
                SliceRequest::Whole => {}
                SliceRequest::Fraction(m) if *m >= GPU_UNITS => {}
                SliceRequest::Fraction(_) | SliceRequest::Generic { .. } => {
                    let demand = item.weight.max(0.0) * f64::from(item.count.max(1) * size);
                    match shares.iter_mut().find(|(s, _)| **s == item.slice) {
                        Some((_, d)) => *d += demand,
                        None => shares.push((&item.slice, demand)),
                    }
                    continue;
                }
                // Other kinds never go on a fractional GPU.
                _ => continue,
            }
            if item.weight > 0.0 && !common.contains(&&item.slice) {
                common.push(&item.slice);
            }
        }
        let total: f64 = shares.iter().map(|(_, d)| d).sum();
        shares.sort_by(|a, b| b.1.total_cmp(&a.1));
        common.extend(
            shares
                .into_iter()
                .filter(|(_, d)| total > 0.0 && d / total >= COMMON_SHARE)
                .map(|(s, _)| s),
        );
        let share_sizes = common
            .iter()
            .map(|s| match s {
                SliceRequest::Fraction(m) => Some(Some(*m)),
                SliceRequest::Whole => Some(Some(GPU_UNITS)),
                SliceRequest::Generic { .. } => None,
                // Other kinds never go on a fractional GPU.
                _ => Some(None),
            })
            .collect::<Option<Vec<Option<u32>>>>()
            .map(|v| v.into_iter().flatten().filter(|m| *m > 0).collect());
        let mut model = Self {
            common,
            share_sizes,
            cpu_per_unit: cpu_per_unit(workload, &sizes),
            rules: None,
            memo: HashMap::new(),
        };
        model.rules = model.share_rules(workload, &sizes);
        model
    }

    /// The pairing rules of `workload` (off when a generic size is among the common shapes:
    /// its dead capacity differs per GPU).
    fn share_rules(&mut self, workload: &Workload, sizes: &[Option<u32>]) -> Option<ShareRules> {
        let common = self.share_sizes.as_ref()?;
        let memo = &mut self.memo;
        ShareRules::new(workload, sizes, |free| {
            unfilled(free, common, usize::MAX, memo)
        })
    }

    /// Expected waste of the host in GPUs (see the module docs).
    pub fn host_waste(&mut self, snap: &Snapshot, host: &HostCaps) -> f64 {
        let parts = self.parts(snap, host);
        self.total(&parts, &host.numa_cpu)
    }

    /// The waste of `after`, which differs from the host `base` was measured on only in the
    /// GPUs `changed` and in NUMA nodes' free CPUs: recomputes only those GPUs, which keeps a
    /// decision's candidates cheap to compare.
    pub fn waste_with(
        &mut self,
        snap: &Snapshot,
        base: &WasteParts,
        after: &HostCaps,
        changed: &[usize],
    ) -> f64 {
        // Only the changed GPUs are measured again; the rest comes from `base`.
        let mut dead = i64::from(base.total_dead);
        let mut numa = base.numa.clone();
        for g in changed {
            let (Some(gpu), Some(cap)) = (snap.gpus.get(*g), after.caps.get(*g)) else {
                continue;
            };
            let (Some(old_free), Some(old_dead)) = (base.free.get(*g), base.dead.get(*g)) else {
                continue;
            };
            let (free, new_dead) = self.gpu_parts(*g, gpu, cap);
            dead += i64::from(new_dead) - i64::from(*old_dead);
            if let Some(n) = numa_index(snap, gpu).and_then(|n| numa.get_mut(n)) {
                let frac = matches!(cap, Cap::Frac { .. });
                n.count(*old_free, *old_dead, frac, -1);
                n.count(free, new_dead, frac, 1);
            }
        }
        self.total_of(dead.max(0) as u32, &numa, &after.numa_cpu)
    }

    /// Free and dead capacity per GPU, and fillable capacity per NUMA node, of `host`.
    pub fn parts(&mut self, snap: &Snapshot, host: &HostCaps) -> WasteParts {
        let mut parts = WasteParts {
            free: Vec::with_capacity(snap.gpus.len()),
            dead: Vec::with_capacity(snap.gpus.len()),
            total_dead: 0,
            numa: vec![NumaParts::default(); snap.numa.len()],
        };
        for (i, (gpu, cap)) in snap.gpus.iter().zip(&host.caps).enumerate() {
            let (free, dead) = self.gpu_parts(i, gpu, cap);
            parts.free.push(free);
            parts.dead.push(dead);
            parts.total_dead += dead;
            if let Some(n) = numa_index(snap, gpu).and_then(|n| parts.numa.get_mut(n)) {
                n.count(free, dead, matches!(cap, Cap::Frac { .. }), 1);
            }
        }
        parts
    }

    /// Free and dead capacity of one GPU (nothing for an unhealthy one).
    fn gpu_parts(&mut self, index: usize, gpu: &GpuState, cap: &Cap) -> (u32, u32) {
        if !gpu.usable() {
            return (0, 0);
        }
        (cap.free_units(gpu), self.dead(index, gpu, cap))
    }

    /// The waste of a host broken down as `parts`, with `numa_cpu` free per NUMA node.
    pub fn total(&self, parts: &WasteParts, numa_cpu: &[u64]) -> f64 {
        self.total_of(parts.total_dead, &parts.numa, numa_cpu)
    }

    fn total_of(&self, dead: u32, numa: &[NumaParts], numa_cpu: &[u64]) -> f64 {
        let (mut stranded, mut empty) = (0.0, 0.0);
        for (n, cpu) in numa.iter().zip(numa_cpu) {
            let fillable = f64::from(n.fillable);
            let at_mean = stranded_at(fillable, *cpu, self.cpu_per_unit);
            match &self.rules {
                Some(r) => {
                    stranded += r.stranded(at_mean, fillable, *cpu);
                    empty += r.empty_gpus_waste(*cpu, n.open, n.empty);
                }
                None => stranded += at_mean,
            }
        }
        (f64::from(dead) + STRANDED_WEIGHT * stranded + empty) / f64::from(GPU_UNITS)
    }

    /// Free share of fractional GPU `index` that no sum of common slices can fill (0 for the
    /// other modes, see the module docs).
    fn dead(&mut self, index: usize, gpu: &GpuState, cap: &Cap) -> u32 {
        let Cap::Frac { free } = cap else {
            return 0;
        };
        match &self.share_sizes {
            Some(sizes) => unfilled(*free, sizes, usize::MAX, &mut self.memo),
            None => {
                // A generic size maps to a share through this GPU's memory.
                let empty = Cap::Frac { free: GPU_UNITS };
                let sizes: Vec<u32> = self
                    .common
                    .iter()
                    .filter_map(|s| empty.choices(gpu, s).first().map(|c| Cap::units(gpu, c)))
                    .filter(|m| *m > 0)
                    .collect();
                unfilled(*free, &sizes, index, &mut self.memo)
            }
        }
    }
}

/// What is left of `free` after the best packing of `sizes` into it (unbounded knapsack by
/// depth-first search; the reachable remainders are few, and remembered in `memo`).
fn unfilled(
    free: u32,
    sizes: &[u32],
    gpu_key: usize,
    memo: &mut HashMap<(usize, u32), u32>,
) -> u32 {
    if let Some(d) = memo.get(&(gpu_key, free)) {
        return *d;
    }
    let mut best = free;
    for size in sizes.iter().filter(|s| **s <= free) {
        best = best.min(unfilled(free - size, sizes, gpu_key, memo));
        if best == 0 {
            break;
        }
    }
    memo.insert((gpu_key, free), best);
    best
}

/// GPU units of `fillable` that `cpu_milli` free could not feed at `cpu_per_unit` milli-CPUs
/// a unit (nothing when the rate is 0: no CPU term).
pub(crate) fn stranded_at(fillable: f64, cpu_milli: u64, cpu_per_unit: f64) -> f64 {
    if cpu_per_unit <= 0.0 {
        return 0.0;
    }
    (fillable - cpu_milli as f64 / cpu_per_unit).max(0.0)
}

/// Index in `snap.numa` of the node feeding `gpu`: its own, or the only one.
fn numa_index(snap: &Snapshot, gpu: &GpuState) -> Option<usize> {
    match gpu.numa_node {
        Some(n) => snap.numa.iter().position(|s| s.node == n),
        None if snap.numa.len() == 1 => Some(0),
        None => None,
    }
}

/// Milli-CPUs the workload asks per GPU unit, over the shapes whose size (`sizes`, per item)
/// the host's GPUs tell.
fn cpu_per_unit(workload: &Workload, sizes: &[Option<u32>]) -> f64 {
    let (mut cpu, mut units) = (0.0, 0.0);
    for (item, size) in workload.items.iter().zip(sizes) {
        let Some(size) = size else {
            continue;
        };
        let w = item.weight.max(0.0);
        cpu += w * f64::from(item.cpu_milli);
        units += w * f64::from(item.count.max(1)) * f64::from(*size);
    }
    if units > 0.0 { cpu / units } else { 0.0 }
}

/// GPU units of one `slice` on the first GPU of the host that offers it.
fn slice_units(snap: &Snapshot, slice: &SliceRequest) -> Option<u32> {
    let choice = match slice {
        SliceRequest::Fraction(m) => return Some(*m),
        SliceRequest::Whole => return Some(GPU_UNITS),
        SliceRequest::Mig(p) => SliceChoice::Mig {
            profile: p.clone(),
            start: 0,
        },
        SliceRequest::Vgpu(t) => SliceChoice::Vgpu(*t),
        SliceRequest::Mdev(t) => SliceChoice::Mdev(t.clone()),
        SliceRequest::Vf => SliceChoice::Vf,
        SliceRequest::Generic { .. } => return None,
    };
    snap.gpus
        .iter()
        .filter(|g| !matches!(g.mode, GpuMode::Whole { .. }))
        .map(|g| Cap::units(g, &choice))
        .find(|u| *u > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frag::WorkItem;
    use crate::model::{FractionalShare, NumaState, Occupant, Vendor};
    use ids::{NumaNodeId, PciAddress};

    fn frac_gpu(bus: u8, used: &[u32]) -> GpuState {
        GpuState {
            address: PciAddress::new(0, bus, 0, 0).unwrap_or_else(|e| panic!("{e}")),
            vendor: Vendor::Nvidia,
            model: "T4".into(),
            healthy: true,
            unavailable: None,
            utilization_pct: 0,
            memory_mib: 16 * 1024,
            numa_node: Some(NumaNodeId(0)),
            nvlink_peers: Vec::new(),
            mode: GpuMode::Fractional {
                shares: used
                    .iter()
                    .map(|m| FractionalShare {
                        milli: *m,
                        occupant: Occupant::busy("x"),
                    })
                    .collect(),
            },
        }
    }

    fn host(snap: &Snapshot) -> HostCaps {
        HostCaps {
            caps: snap
                .gpus
                .iter()
                .map(|g| Cap::of(g).unwrap_or_else(|e| panic!("{e}")))
                .collect(),
            numa_cpu: snap.numa.iter().map(|n| n.cpu_milli()).collect(),
            numa_mem: snap.numa.iter().map(|n| n.free_memory_mib).collect(),
        }
    }

    fn item(milli: u32, weight: f64, cpu_milli: u32) -> WorkItem {
        WorkItem {
            cpu_milli,
            ..WorkItem::slice(SliceRequest::Fraction(milli), weight)
        }
    }

    fn snapshot(gpus: Vec<GpuState>, cpu_milli: u64) -> Snapshot {
        Snapshot {
            gpus,
            numa: vec![NumaState {
                node: NumaNodeId(0),
                free_cpus: Vec::new(),
                free_cpu_milli: Some(cpu_milli),
                free_memory_mib: 1 << 20,
            }],
        }
    }

    #[test]
    fn dead_capacity_is_what_common_shares_cannot_fill_and_rare_ones_do_not_count() {
        // 0.47 and 0.32 are common, 0.16 is rare (0.4 % of the sub-GPU demand).
        let shares = vec![item(470, 60.0, 0), item(320, 39.0, 0), item(160, 1.0, 0)];
        let cases = [
            (vec![], 40),     // 3 × 0.32 leaves 0.04
            (vec![470], 60),  // 0.53 takes one more 0.47
            (vec![810], 190), // only the rare 0.16 would fit
            (vec![320], 40),  // 0.68: 0.32 + 0.32 leaves 0.04
            (vec![470, 320], 210),
            (vec![1000], 0),
        ];
        // Whole-GPU demand, however large, neither dilutes the shares nor leaves an empty GPU
        // dead: it only fills whole GPUs.
        let mut with_whole = shares.clone();
        with_whole.push(item(1000, 10_000.0, 0));
        for items in [shares, with_whole] {
            let workload = Workload { items };
            for (used, want) in &cases {
                let want = if used.is_empty() && workload.items.len() == 4 {
                    0
                } else {
                    *want
                };
                let snap = snapshot(vec![frac_gpu(1, used)], 1_000_000);
                let mut model = WasteModel::new(&snap, &workload);
                let got = model.host_waste(&snap, &host(&snap));
                assert!(
                    (got - f64::from(want) / 1000.0).abs() < 1e-9,
                    "{used:?} with {} shapes: {got}",
                    workload.items.len()
                );
            }
        }
    }

    #[test]
    fn capacity_its_node_cannot_feed_counts_at_the_stranded_weight() {
        // 10 milli-CPUs per GPU unit; two empty GPUs (2000 units) but CPU for only 500 units.
        let workload = Workload {
            items: vec![item(1000, 1.0, 10_000)],
        };
        let snap = snapshot(vec![frac_gpu(1, &[]), frac_gpu(2, &[])], 5_000);
        let mut model = WasteModel::new(&snap, &workload);
        let got = model.host_waste(&snap, &host(&snap));
        assert!((got - STRANDED_WEIGHT * 1.5).abs() < 1e-9, "{got}");
        let fed = snapshot(vec![frac_gpu(1, &[]), frac_gpu(2, &[])], 20_000);
        let mut model = WasteModel::new(&fed, &workload);
        assert_eq!(model.host_waste(&fed, &host(&fed)), 0.0);
    }
}
