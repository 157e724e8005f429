//! Waste rules for mixes made of sub-GPU shares: where pairs of shares can be fed, and what an
//! empty GPU is expected to lose when a share opens it.
//!
//! When nearly all of the GPU demand is shares (the openb `gpushare100` list: no whole-GPU
//! request at all), a GPU is filled whole only by two or three shares, and shares of at most
//! half a GPU ask more CPU per GPU unit than the mix's mean (on openb about 18–19 cores per
//! GPU against the 3.2 cores of the 0.81 share, the most common one). The mean-CPU view of
//! [`crate::waste`] then misses two things:
//!
//! - **Pair CPU** (rule B): the stranded-capacity term is measured at a blend of the mix's mean
//!   CPU per GPU unit and the *pairing shares'* CPU per GPU unit ([`PAIR_CPU_BLEND`]), so that a
//!   node whose CPUs cannot feed a GPU of pairs (96 cores for 8 GPUs) sees the capacity its
//!   pairs would strand, and pairs go to the CPU-rich nodes.
//! - **Empty GPUs on CPU-poor nodes** (rule C): an empty fractional GPU on a NUMA node whose
//!   free CPUs per GPU with free capacity are below [`POOR_NODE_FACTOR`] × the pair CPU will be
//!   opened by some share, and most likely by a CPU-light one, since pairs cannot be fed
//!   there; it already counts the dead capacity the mix's shapes leave when one of them opens
//!   it, `Σ pₛ · dead(1 − s)` by request frequency. A 0.81 share (0.19 left wherever it goes)
//!   then adds less waste on such a node than on a CPU-rich one, and the 0.81 shares go where
//!   their few cores fit, leaving the CPU-rich nodes' GPUs to pairs. On CPU-rich nodes the
//!   term is not counted: counted there (or on every node) it spread shares one to a GPU on
//!   nodes that could not feed their partners (see BENCHMARKS.md).
//!
//! Both rules hold only when **shares are what opens empty GPUs**: [`SHARE_MIX_MIN`] of the
//! mix's GPU demand must be sub-GPU. Where whole- and multi-GPU requests ask a real part of it
//! (the openb default list: 72 % of the GPU capacity asked), empty GPUs are the room those
//! requests need; counting an empty GPU as already wasted, or drawing pairs away from
//! CPU-poor nodes (which opens more GPUs there to single shares), spends that room on shares.
//! On the default list the two rules ungated cost about a point of capacity.

use crate::frag::{WorkItem, Workload};
use crate::model::{GPU_UNITS, SliceRequest};
use crate::waste::stranded_at;

/// Shares of at most this many GPU units (half a GPU) are the ones that pair up on a GPU, so
/// their CPU per GPU unit is what a GPU filled with pairs asks of its node.
pub const PAIR_MAX_SHARE: u32 = GPU_UNITS / 2;

/// Weight of the pairing shares' CPU per GPU unit against the mix's mean in the stranded
/// term (the rest is the mean): the mean still describes the CPU the node's other GPUs,
/// holding larger CPU-light shares, will ask. Half and half, not tuned.
pub const PAIR_CPU_BLEND: f64 = 0.5;

/// A NUMA node is CPU-poor for rule C when its free CPUs per GPU with free capacity are below
/// this multiple of the pair CPU (one GPU's worth of pairing shares' CPU). Above 1 because a
/// node with exactly the pair CPU per GPU has nothing left for the CPU-only requests that
/// share it; on the openb `gpushare100` tuning seeds 1.3 left 0.2 points less unallocated
/// than 1.0.
pub const POOR_NODE_FACTOR: f64 = 1.3;

/// The rules apply when at least this part of the GPU capacity the mix asks for comes from
/// sub-GPU requests (see the module docs for why). The openb lists ask 100 % (`gpushare100`),
/// 80 % (`gpushare80`), 60 %, 40 %, 29 % (the default list and the `cpu*` and `gpuspec*`
/// variants) or less.
pub const SHARE_MIX_MIN: f64 = 0.95;

/// The rules for one workload on one host's GPUs, or `None` when they are off.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ShareRules {
    /// Milli-CPUs per GPU unit the pairing shares ask.
    pair_cpu_per_unit: f64,
    /// Expected dead capacity an empty fractional GPU will hold once a share opens it, in
    /// GPU units, beyond what it holds empty.
    empty_waste: f64,
}

impl ShareRules {
    /// The rules of `workload`, with `sizes` each item's size in GPU units on this host
    /// (`None`: unknown) and `dead(free)` the dead capacity of a fractional GPU with `free`
    /// units free. `None` when the mix is not dominated by shares or its shares ask no CPU.
    pub fn new(
        workload: &Workload,
        sizes: &[Option<u32>],
        mut dead: impl FnMut(u32) -> u32,
    ) -> Option<Self> {
        if sub_gpu_part(workload, sizes)? < SHARE_MIX_MIN {
            return None;
        }
        let pair_cpu_per_unit = pair_cpu_per_unit(workload, sizes)?;
        let (mut waste, mut weight) = (0.0, 0.0);
        for (item, size) in fractional_items(workload, sizes) {
            let w = item.weight.max(0.0);
            weight += w;
            waste += w * f64::from(dead(GPU_UNITS.saturating_sub(size)));
        }
        if weight <= 0.0 {
            return None;
        }
        let empty_waste = (waste / weight - f64::from(dead(GPU_UNITS))).max(0.0);
        Some(Self {
            pair_cpu_per_unit,
            empty_waste,
        })
    }

    /// The stranded capacity of a NUMA node with `fillable` units and `cpu_milli` free, given
    /// `at_mean`, what it strands at the mix's mean CPU per unit: the blend of that and what
    /// it strands at the pairing shares' CPU per unit.
    pub fn stranded(&self, at_mean: f64, fillable: f64, cpu_milli: u64) -> f64 {
        let at_pair = stranded_at(fillable, cpu_milli, self.pair_cpu_per_unit);
        (1.0 - PAIR_CPU_BLEND) * at_mean + PAIR_CPU_BLEND * at_pair
    }

    /// Expected waste, in GPU units, of `empty` empty fractional GPUs on a NUMA node with
    /// `cpu_milli` free and `open` GPUs with free capacity: counted only where the node is
    /// CPU-poor (see the module docs).
    pub fn empty_gpus_waste(&self, cpu_milli: u64, open: u32, empty: u32) -> f64 {
        let poor_below = POOR_NODE_FACTOR * self.pair_cpu_per_unit * f64::from(GPU_UNITS);
        if empty == 0 || cpu_milli as f64 >= poor_below * f64::from(open) {
            return 0.0;
        }
        self.empty_waste * f64::from(empty)
    }
}

/// The workload's shapes placed on fractional GPUs, each with its known size in GPU units.
fn fractional_items<'a>(
    workload: &'a Workload,
    sizes: &'a [Option<u32>],
) -> impl Iterator<Item = (&'a WorkItem, u32)> + 'a {
    let on_fractional = |slice: &SliceRequest| {
        matches!(
            slice,
            SliceRequest::Fraction(_) | SliceRequest::Whole | SliceRequest::Generic { .. }
        )
    };
    workload
        .items
        .iter()
        .zip(sizes)
        .filter_map(move |(item, size)| {
            size.filter(|_| on_fractional(&item.slice))
                .map(|s| (item, s))
        })
}

/// The part of the GPU capacity the workload's fractional-GPU shapes ask for that sub-GPU
/// requests ask (`None` when they ask none at all).
fn sub_gpu_part(workload: &Workload, sizes: &[Option<u32>]) -> Option<f64> {
    let (mut sub, mut all) = (0.0, 0.0);
    for (item, size) in fractional_items(workload, sizes) {
        let demand = item.weight.max(0.0) * f64::from(item.count.max(1) * size);
        all += demand;
        if size < GPU_UNITS {
            sub += demand;
        }
    }
    (all > 0.0).then(|| sub / all)
}

/// Milli-CPUs per GPU unit of the shares of at most [`PAIR_MAX_SHARE`] (`None` when there are
/// none or they ask no CPU).
fn pair_cpu_per_unit(workload: &Workload, sizes: &[Option<u32>]) -> Option<f64> {
    let (mut cpu, mut units) = (0.0, 0.0);
    let pairing = fractional_items(workload, sizes).filter(|(_, s)| *s > 0 && *s <= PAIR_MAX_SHARE);
    for (item, size) in pairing {
        let w = item.weight.max(0.0);
        cpu += w * f64::from(item.cpu_milli);
        units += w * f64::from(item.count.max(1) * size);
    }
    (units > 0.0 && cpu > 0.0).then(|| cpu / units)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(milli: u32, count: u32, weight: f64, cpu_milli: u32) -> WorkItem {
        WorkItem {
            cpu_milli,
            count,
            ..WorkItem::slice(SliceRequest::Fraction(milli), weight)
        }
    }

    fn rules(items: Vec<WorkItem>) -> Option<ShareRules> {
        let sizes: Vec<Option<u32>> = items
            .iter()
            .map(|i| match i.slice {
                SliceRequest::Fraction(m) => Some(m),
                _ => None,
            })
            .collect();
        // A remainder is dead unless a 0.47 share fits it exactly twice or once with 0.06 left.
        let dead = |free: u32| match free {
            0 => 0,
            f if f >= 940 => f - 940,
            f if f >= 470 => f - 470,
            f => f,
        };
        ShareRules::new(&Workload { items }, &sizes, dead)
    }

    /// Half 0.81 shares at 3.2 cores, half 0.47 shares at 9.4 cores (20 cores per GPU).
    fn shares() -> Vec<WorkItem> {
        vec![item(810, 1, 1.0, 3_200), item(470, 1, 1.0, 9_400)]
    }

    #[test]
    fn a_share_mix_measures_pairs_at_their_cpu_and_expects_an_opened_gpu_to_lose_capacity() {
        let r = rules(shares()).unwrap_or_else(|| panic!("rules off for a share mix"));
        assert!((r.pair_cpu_per_unit - 20.0).abs() < 1e-9, "{r:?}");
        // 0.81 leaves 0.19, 0.47 leaves 0.53 → 0.06; an empty GPU alone holds 0.06 dead.
        assert!(
            (r.empty_waste - ((190.0 + 60.0) / 2.0 - 60.0)).abs() < 1e-9,
            "{r:?}"
        );
        assert!((r.stranded(10.0, 1000.0, 10_000) - 0.5 * (10.0 + 500.0)).abs() < 1e-9);
    }

    #[test]
    fn an_empty_gpu_counts_only_on_a_node_that_cannot_feed_pairs() {
        let r = rules(shares()).unwrap_or_else(|| panic!("rules off for a share mix"));
        // Pair CPU 20 cores a GPU; poor below 26 cores per GPU with free capacity.
        let poor = r.empty_gpus_waste(4 * 25_000, 4, 2);
        assert!((poor - 2.0 * r.empty_waste).abs() < 1e-9, "{poor}");
        assert_eq!(r.empty_gpus_waste(4 * 27_000, 4, 2), 0.0);
        assert_eq!(r.empty_gpus_waste(0, 4, 0), 0.0);
    }

    #[test]
    fn whole_and_multi_gpu_demand_switches_the_rules_off() {
        // One whole-GPU request per 20 shares: 0.81 + 0.47 asked 10 times against 1 GPU.
        let mut mix = shares();
        mix.iter_mut().for_each(|i| i.weight = 10.0);
        let mut whole = mix.clone();
        whole.push(item(1000, 1, 1.0, 8_000));
        assert!(rules(mix.clone()).is_some());
        assert!(rules(whole).is_none(), "whole GPUs ask 7 % of the demand");
        let mut multi = mix;
        multi.push(item(1000, 2, 0.5, 16_000));
        assert!(
            rules(multi).is_none(),
            "two-GPU requests ask 7 % of the demand"
        );
    }

    #[test]
    fn shares_without_cpu_or_pairing_sizes_switch_the_rules_off() {
        assert!(rules(vec![item(810, 1, 1.0, 3_200), item(600, 1, 1.0, 8_000)]).is_none());
        assert!(rules(vec![item(810, 1, 1.0, 0), item(470, 1, 1.0, 0)]).is_none());
    }
}
