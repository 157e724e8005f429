//! Placement's allocation candidates grouped by host: the root provider of each candidate's
//! providers (`root_provider_uuid` in the provider summaries, microversion 1.29) is the compute
//! node, as Nova's scheduler groups them.

use anyhow::{Context, bail};
use placement::model::{AllocationCandidates, AllocationRequest};
use uuid::Uuid;

/// One host's candidates, in Placement's order.
#[derive(Debug, Clone, PartialEq)]
pub struct HostCandidates {
    /// The root provider (the compute node).
    pub root: Uuid,
    /// Its allocation requests.
    pub requests: Vec<AllocationRequest>,
}

/// The candidates by host, hosts in the order their first candidate comes in.
pub fn by_host(candidates: &AllocationCandidates) -> anyhow::Result<Vec<HostCandidates>> {
    let mut hosts: Vec<HostCandidates> = Vec::new();
    for request in &candidates.allocation_requests {
        let root = root_of(candidates, request)?;
        match hosts.iter_mut().find(|h| h.root == root) {
            Some(h) => h.requests.push(request.clone()),
            None => hosts.push(HostCandidates {
                root,
                requests: vec![request.clone()],
            }),
        }
    }
    Ok(hosts)
}

/// The one root of a candidate's providers; a candidate spanning two trees is not one host.
fn root_of(candidates: &AllocationCandidates, request: &AllocationRequest) -> anyhow::Result<Uuid> {
    let mut root = None;
    for provider in request.allocations.keys() {
        let summary = candidates
            .provider_summaries
            .get(provider)
            .with_context(|| {
                format!("provider {provider} is in a candidate but not in the summaries")
            })?;
        let this: Uuid = summary
            .get("root_provider_uuid")
            .and_then(|v| v.as_str())
            .and_then(|s| s.parse().ok())
            .with_context(|| {
                format!("the summary of {provider} has no root_provider_uuid (microversion 1.29)")
            })?;
        if root.is_some_and(|r| r != this) {
            bail!(
                "a candidate spans two provider trees ({} and {this})",
                root.unwrap_or(this)
            );
        }
        root = Some(this);
    }
    root.context("a candidate with no provider")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn uuid(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn candidates(requests: &[&[(u8, u32)]], roots: &[(u8, u8)]) -> AllocationCandidates {
        let allocation_requests = requests
            .iter()
            .map(|r| {
                serde_json::from_value(json!({"allocations": r.iter().map(|(p, n)|
                    (uuid(*p).to_string(), json!({"resources": {"PGPU": n}}))).collect::<serde_json::Map<_, _>>()}))
                .unwrap()
            })
            .collect();
        let provider_summaries = roots
            .iter()
            .map(|(p, r)| {
                (
                    uuid(*p),
                    json!({"resources": {}, "root_provider_uuid": uuid(*r).to_string()}),
                )
            })
            .collect();
        AllocationCandidates {
            allocation_requests,
            provider_summaries,
        }
    }

    #[test]
    fn candidates_group_by_root_in_first_seen_order() {
        // GPUs 11, 12 on host 1; GPU 21 on host 2; Placement lists 11, 21, 12.
        let c = candidates(
            &[&[(11, 1)], &[(21, 1)], &[(12, 1)]],
            &[(11, 1), (12, 1), (21, 2)],
        );
        let hosts = by_host(&c).unwrap();
        assert_eq!(
            hosts.iter().map(|h| h.root).collect::<Vec<_>>(),
            [uuid(1), uuid(2)]
        );
        assert_eq!(hosts[0].requests.len(), 2);
        assert!(hosts[0].requests[1].allocations.contains_key(&uuid(12)));
    }

    #[test]
    fn a_candidate_across_two_trees_or_without_a_root_is_an_error() {
        let c = candidates(&[&[(11, 1), (21, 1)]], &[(11, 1), (21, 2)]);
        assert!(
            by_host(&c)
                .unwrap_err()
                .to_string()
                .contains("two provider trees")
        );
        let c = candidates(&[&[(11, 1)]], &[]);
        assert!(
            by_host(&c)
                .unwrap_err()
                .to_string()
                .contains("not in the summaries")
        );
    }
}
