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

#[cfg(test)]
mod tests {
    use super::*;
    use agent::engine::{Handles, Identity, Slice, SliceKind, SliceSpec, SliceState};
    use ids::NumaNodeId;

    /// `per_gpu[i]` free MIG slices on GPU `i`; GPUs 0–1 on node 0, 2–3 on node 1.
    fn devices(per_gpu: &[usize]) -> Vec<Device> {
        let mut out = Vec::new();
        for (gpu, &n) in per_gpu.iter().enumerate() {
            for start in 0..n {
                let address: ids::PciAddress = format!("0000:0{gpu}:00.0").parse().unwrap();
                let profile: ids::MigProfileName = "1g.10gb".parse().unwrap();
                out.push(Device {
                    slice: Slice {
                        id: SliceId::new_random(),
                        spec: SliceSpec {
                            gpu: address.into(),
                            kind: SliceKind::Mig {
                                profile: profile.clone(),
                                start: None,
                            },
                        },
                        identity: Identity::Mig {
                            start: start as u32,
                            profile,
                        },
                        handles: Handles::default(),
                        numa_node: Some(NumaNodeId(if gpu < 2 { 0 } else { 1 })),
                        owner: None,
                        state: SliceState::Ready,
                        reason: None,
                    },
                    healthy: true,
                    gpu_uuid: None,
                });
            }
        }
        out
    }

    fn gpus_of(devices: &[Device], ids: &[SliceId]) -> Vec<String> {
        ids.iter()
            .map(|id| {
                devices
                    .iter()
                    .find(|d| d.id() == *id)
                    .unwrap()
                    .gpu()
                    .to_string()
            })
            .collect()
    }

    fn all(devices: &[Device]) -> Vec<SliceId> {
        devices.iter().map(Device::id).collect()
    }

    #[test]
    fn a_request_goes_to_the_node_and_gpu_it_fits_most_tightly() {
        // Node 0 has 7 + 7 free, node 1 has 2 + 7: two fit best on node 1, on its fuller GPU.
        let d = devices(&[7, 7, 2, 7]);
        let chosen = choose(&d, &all(&d), &[], 2);
        assert_eq!(gpus_of(&d, &chosen), ["0000:02:00.0", "0000:02:00.0"]);
        // Nine fit on node 1 only by spanning its GPUs; node 0 has 14: the tighter is node 1.
        let chosen = choose(&d, &all(&d), &[], 9);
        assert!(
            gpus_of(&d, &chosen)
                .iter()
                .all(|g| g.starts_with("0000:02") || g.starts_with("0000:03"))
        );
        // Fifteen fit on no node: the node with most free is taken first.
        let chosen = choose(&d, &all(&d), &[], 15);
        assert_eq!(chosen.len(), 15);
        let on_node0 = gpus_of(&d, &chosen)
            .iter()
            .filter(|g| g.starts_with("0000:00") || g.starts_with("0000:01"))
            .count();
        assert_eq!(on_node0, 14);
    }

    #[test]
    fn must_include_anchors_the_node_and_unknown_or_unhealthy_ids_are_never_chosen() {
        let mut d = devices(&[1, 7, 7, 7]);
        let must = d[0].id(); // GPU 0, node 0
        let chosen = choose(&d, &all(&d), &[must], 3);
        assert_eq!(chosen[0], must);
        assert!(
            gpus_of(&d, &chosen)
                .iter()
                .all(|g| g.starts_with("0000:00") || g.starts_with("0000:01"))
        );
        // Unhealthy devices and ids kubelet made up are left out, even when short.
        for dev in d.iter_mut().skip(1) {
            dev.healthy = false;
        }
        let stranger = SliceId::new_random();
        let mut offered = all(&d);
        offered.push(stranger);
        assert_eq!(choose(&d, &offered, &[], 3), vec![d[0].id()]);
    }
}
