//! The global scheduler: Placement says which hosts could, the hosts' vgpuds say how well
//! (two-level), the claim goes to Placement and the allocation to the chosen host's vgpud; a
//! vgpud that refuses gets its claim deleted and the next candidate is tried.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::Context;
use placement::model::{AllocationRequest, ConsumerAllocations, ProviderAllocation};
use placement::{Client, Error};
use uuid::Uuid;

use agent::placement::names::gpu_of_provider;

use crate::candidates::{HostCandidates, by_host};
use crate::host::{Refusal, Vgpud};
use crate::workload::Want;

/// How the host is chosen among Placement's candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Ask every candidate host's vgpud for its score; the best feasible one first.
    TwoLevel,
    /// Placement's first candidate, then the next (Nova's scheduler without weighers).
    FirstCandidate,
}

impl Policy {
    /// The name tables and JSON use.
    pub fn name(self) -> &'static str {
        match self {
            Policy::TwoLevel => "two-level",
            Policy::FirstCandidate => "first-candidate",
        }
    }
}

/// Who claims: Placement's consumers carry a project and a user.
#[derive(Debug, Clone)]
pub struct Claimant {
    /// The project id.
    pub project_id: String,
    /// The user id.
    pub user_id: String,
}

/// How one request ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Allocated on `host` for the Placement consumer `consumer`.
    Placed {
        /// The root provider's name.
        host: String,
        /// The consumer UUID (the claim in Placement, the allocation's consumer in vgpud).
        consumer: Uuid,
        /// What was allocated.
        want: Want,
    },
    /// Placement had no candidate.
    NoCandidate,
    /// Candidates, but no candidate host's vgpud would take it (two-level only).
    NoHostFeasible,
    /// Every candidate tried was refused or lost to a concurrent claim.
    Refused,
}

/// One decision: the outcome and what it took.
#[derive(Debug, Clone)]
pub struct Decision {
    /// How it ended.
    pub outcome: Outcome,
    /// Each vgpud refusal after Placement had taken the claim (the claim was deleted), by host.
    pub refusals: Vec<(String, Refusal)>,
    /// Claims Placement refused (a concurrent claim took the capacity first).
    pub claim_conflicts: u32,
    /// Score calls made.
    pub score_calls: u32,
    /// Wall time of the decision.
    pub elapsed: Duration,
}

/// One candidate to try: a host, the request it answers, the allocation to claim.
struct Attempt<'w> {
    host: String,
    want: &'w Want,
    request: AllocationRequest,
}

/// The global scheduler over one Placement and a set of hosts.
pub struct Scheduler {
    placement: Client,
    hosts: BTreeMap<String, Vgpud>,
    names: HashMap<Uuid, String>,
    claimant: Claimant,
    /// The policy.
    pub policy: Policy,
    /// Candidates tried per request at most (Nova: the chosen host and its alternates).
    pub max_attempts: usize,
    /// Placement's `limit` on candidates per query.
    pub candidate_limit: u32,
    /// The consumers placed so far (their claims stand in Placement).
    pub placed: Vec<Uuid>,
}

impl Scheduler {
    /// A scheduler over `placement` and `hosts` (by root provider name).
    pub fn new(
        placement: Client,
        hosts: BTreeMap<String, Vgpud>,
        claimant: Claimant,
        policy: Policy,
    ) -> Self {
        Scheduler {
            placement,
            hosts,
            names: HashMap::new(),
            claimant,
            policy,
            max_attempts: 6,
            candidate_limit: 100,
            placed: Vec::new(),
        }
    }

    /// Deletes the claims of every consumer placed (the fleet goes; Placement stays).
    pub fn release_claims(&mut self) -> anyhow::Result<()> {
        for consumer in self.placed.drain(..) {
            self.placement.delete_consumer_allocations(consumer)?;
        }
        Ok(())
    }

    /// The host named `root`.
    pub fn host(&self, root: &str) -> Option<&Vgpud> {
        self.hosts.get(root)
    }

    /// Places one request: any of `wants` (alternatives, in order of preference).
    pub fn place(&mut self, wants: &[Want]) -> anyhow::Result<Decision> {
        let started = Instant::now();
        let mut decision = Decision {
            outcome: Outcome::NoCandidate,
            refusals: Vec::new(),
            claim_conflicts: 0,
            score_calls: 0,
            elapsed: Duration::ZERO,
        };
        let mut per_host = Vec::new();
        for want in wants {
            let query = want.query(self.candidate_limit);
            let query: Vec<(&str, &str)> = query
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let candidates = self
                .placement
                .allocation_candidates(&query)
                .with_context(|| {
                    format!("allocation candidates for {} × {}", want.count, want.class)
                })?;
            for host in by_host(&candidates)? {
                let name = self.name(host.root)?;
                if self.hosts.contains_key(&name) {
                    per_host.push((name, want, host));
                }
            }
        }
        if per_host.is_empty() {
            decision.elapsed = started.elapsed();
            return Ok(decision);
        }
        let attempts = match self.policy {
            Policy::FirstCandidate => in_placement_order(per_host),
            Policy::TwoLevel => self.by_score(per_host, &mut decision)?,
        };
        decision.outcome = if attempts.is_empty() {
            Outcome::NoHostFeasible
        } else {
            Outcome::Refused
        };
        for attempt in attempts.into_iter().take(self.max_attempts) {
            if let Some(placed) = self.try_attempt(&attempt, &mut decision)? {
                decision.outcome = placed;
                break;
            }
        }
        decision.elapsed = started.elapsed();
        Ok(decision)
    }

    /// Claims one candidate in Placement and allocates it on its host; `None` when Placement
    /// lost the capacity or the vgpud refused (the claim then deleted).
    fn try_attempt(
        &mut self,
        attempt: &Attempt<'_>,
        decision: &mut Decision,
    ) -> anyhow::Result<Option<Outcome>> {
        let consumer = Uuid::new_v4();
        match self
            .placement
            .put_consumer_allocations(consumer, &self.claim(&attempt.request))
        {
            Ok(()) => {}
            Err(Error::Conflict { .. }) => {
                decision.claim_conflicts += 1;
                return Ok(None);
            }
            Err(e) => return Err(e).context("claiming in Placement"),
        }
        let gpu = self.single_gpu(&attempt.host, &attempt.request)?;
        let host = self
            .hosts
            .get(&attempt.host)
            .context("a candidate host that is not in the fleet")?;
        match host.allocate(attempt.want, consumer, gpu.as_deref()) {
            Ok(_) => {
                self.placed.push(consumer);
                Ok(Some(Outcome::Placed {
                    host: attempt.host.clone(),
                    consumer,
                    want: attempt.want.clone(),
                }))
            }
            Err(refusal) => {
                self.placement
                    .delete_consumer_allocations(consumer)
                    .context("deleting the claim a vgpud refused")?;
                decision.refusals.push((attempt.host.clone(), refusal));
                Ok(None)
            }
        }
    }

    /// Scores every candidate host; the feasible ones, best first, each host's candidate on
    /// the GPUs its vgpud would choose first.
    fn by_score<'w>(
        &mut self,
        per_host: Vec<(String, &'w Want, HostCandidates)>,
        decision: &mut Decision,
    ) -> anyhow::Result<Vec<Attempt<'w>>> {
        let mut scored = Vec::new();
        for (name, want, host) in per_host {
            let Some(vgpud) = self.hosts.get(&name) else {
                continue;
            };
            decision.score_calls += 1;
            let Ok(score) = vgpud.score(want) else {
                continue;
            };
            if !score.feasible {
                continue;
            }
            let mut requests = host.requests;
            let mut keyed = Vec::with_capacity(requests.len());
            for r in requests.drain(..) {
                let matches = self.gpus_of(&name, &r)? == sorted(&score.gpus);
                keyed.push((!matches, r));
            }
            keyed.sort_by_key(|(k, _)| *k);
            scored.push((score.score, name, want, keyed));
        }
        // Best score first; equal scores keep Placement's order (the sort is stable).
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        Ok(scored
            .into_iter()
            .flat_map(|(_, host, want, keyed)| {
                keyed.into_iter().map(move |(_, request)| Attempt {
                    host: host.clone(),
                    want,
                    request,
                })
            })
            .collect())
    }

    fn claim(&self, request: &AllocationRequest) -> ConsumerAllocations {
        ConsumerAllocations {
            allocations: request
                .allocations
                .iter()
                .map(|(rp, r)| {
                    (
                        *rp,
                        ProviderAllocation {
                            resources: r.resources.clone(),
                            generation: None,
                        },
                    )
                })
                .collect(),
            consumer_generation: None,
            project_id: Some(self.claimant.project_id.clone()),
            user_id: Some(self.claimant.user_id.clone()),
            consumer_type: Some("INSTANCE".to_owned()),
        }
    }

    /// The GPU of a one-provider candidate (vgpud is told to use the GPU Placement chose).
    fn single_gpu(
        &mut self,
        root: &str,
        request: &AllocationRequest,
    ) -> anyhow::Result<Option<String>> {
        let gpus = self.gpus_of(root, request)?;
        Ok(match gpus.as_slice() {
            [one] => Some(one.clone()),
            _ => None,
        })
    }

    /// The PCI addresses of a candidate's GPU providers, sorted.
    fn gpus_of(&mut self, root: &str, request: &AllocationRequest) -> anyhow::Result<Vec<String>> {
        let mut out = Vec::new();
        for rp in request.allocations.keys() {
            if let Some(address) = gpu_of_provider(root, &self.name(*rp)?) {
                out.push(address.to_string());
            }
        }
        out.sort();
        Ok(out)
    }

    /// A provider's name (read once).
    fn name(&mut self, uuid: Uuid) -> anyhow::Result<String> {
        if let Some(n) = self.names.get(&uuid) {
            return Ok(n.clone());
        }
        let provider = self
            .placement
            .provider(uuid)?
            .with_context(|| format!("provider {uuid} is gone"))?;
        self.names.insert(uuid, provider.name.clone());
        Ok(provider.name)
    }
}

fn in_placement_order(per_host: Vec<(String, &Want, HostCandidates)>) -> Vec<Attempt<'_>> {
    per_host
        .into_iter()
        .flat_map(|(host, want, h)| {
            h.requests.into_iter().map(move |request| Attempt {
                host: host.clone(),
                want,
                request,
            })
        })
        .collect()
}

fn sorted(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v.dedup();
    v
}
