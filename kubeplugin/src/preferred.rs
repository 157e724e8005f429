//! `GetPreferredAllocation`: which of the devices kubelet has free to give a container.
//!
//! kubelet asks when a container needs more than it must take (KEP-1121: it passes the free
//! healthy devices, the ones it must include, and the size), then allocates the answer unless
//! its Topology Manager forbids. vgpud answers with its own placement rules: one NUMA node
//! when the request fits on one (the node where it fits most tightly, so larger free runs
//! stay for larger requests), and within a node the GPUs already most used first, so whole
//! GPUs stay free for whole-GPU and large requests (vgpud's fragmentation rule).

use std::collections::{BTreeMap, BTreeSet};

use agent::engine::SliceId;

use crate::catalog::Device;

/// The devices to give, in the order kubelet should take them: `must` first, then the best
/// of `available`. Ids that are not healthy devices of the resource are never chosen (kubelet
/// would not offer them; a stale list is not trusted).
pub fn choose(
    devices: &[Device],
    available: &[SliceId],
    must: &[SliceId],
    size: usize,
) -> Vec<SliceId> {
    let mut chosen: Vec<SliceId> = Vec::new();
    for id in must {
        if !chosen.contains(id) {
            chosen.push(*id);
        }
    }
    let known: BTreeMap<SliceId, &Device> = devices
        .iter()
        .filter(|d| d.healthy)
        .map(|d| (d.id(), d))
        .collect();
    let free: BTreeSet<SliceId> = available
        .iter()
        .copied()
        .filter(|id| known.contains_key(id) && !chosen.contains(id))
        .collect();
    let need = size.saturating_sub(chosen.len());
    if need == 0 || free.is_empty() {
        return chosen;
    }
    let candidates: Vec<&Device> = free
        .iter()
        .filter_map(|id| known.get(id).copied())
        .collect();
    let node_rank = rank_nodes(&candidates, &chosen, &known, need);
    let free_on_gpu = count_by(&candidates, |d| d.gpu().clone());
    let mut ordered = candidates;
    ordered.sort_by_key(|d| {
        (
            node_rank.get(&d.numa()).copied().unwrap_or(usize::MAX),
            free_on_gpu.get(d.gpu()).copied().unwrap_or(0),
            d.gpu().clone(),
            d.id(),
        )
    });
    chosen.extend(ordered.into_iter().take(need).map(Device::id));
    chosen
}

/// NUMA nodes in the order to take devices from: the node of the devices already chosen
/// first; then nodes where all `need` fit, tightest fit first; then the rest, most free
/// first (spanning as few nodes as possible). A device of unknown node comes last.
fn rank_nodes(
    candidates: &[&Device],
    chosen: &[SliceId],
    known: &BTreeMap<SliceId, &Device>,
    need: usize,
) -> BTreeMap<Option<i64>, usize> {
    let free_on_node = count_by(candidates, Device::numa);
    let anchor = chosen
        .iter()
        .filter_map(|id| known.get(id).and_then(|d| d.numa()))
        .next();
    let mut nodes: Vec<(Option<i64>, usize)> = free_on_node.into_iter().collect();
    nodes.sort_by_key(|&(node, free)| {
        let is_anchor = anchor.is_some() && node == anchor;
        let fits = free >= need;
        (
            !is_anchor,
            node.is_none(),
            !fits,
            if fits { free } else { usize::MAX - free },
            node,
        )
    });
    nodes
        .into_iter()
        .enumerate()
        .map(|(rank, (node, _))| (node, rank))
        .collect()
}

fn count_by<K: Ord>(devices: &[&Device], key: impl Fn(&Device) -> K) -> BTreeMap<K, usize> {
    let mut counts = BTreeMap::new();
    for d in devices {
        *counts.entry(key(d)).or_insert(0) += 1;
    }
    counts
}
