//! `GET /v1/demand-mix`: the request mix the default policy scores against, learnt from the
//! requests this host was asked to place (`sched::MixEstimator`). Answers only; nothing here
//! is a request.

use serde::Serialize;
use utoipa::ToSchema;

/// The learnt demand mix, as the default policy would score with it now.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct DemandMix {
    /// Allocation requests counted (granted or refused), restarts included.
    pub requests_seen: u64,
    /// Their count with older requests decayed: what the prior is weighed against.
    pub effective_requests: f64,
    /// The part of the mix the prior (every shape the host offers, equally likely) still
    /// holds, 0 to 1.
    pub prior_share: f64,
    /// Requests after which a request counts half.
    pub half_life_requests: f64,
    /// Pseudo-requests the prior is worth.
    pub prior_strength: f64,
    /// The shapes, heaviest first; shares sum to 1.
    pub shapes: Vec<MixShape>,
}

/// One request shape of the mix.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct MixShape {
    /// The slice kind: `mig:PROFILE`, `vgpu:TYPE-ID`, `mdev:TYPE`, `vf`, `gpu`,
    /// `fraction:MILLI` or `generic:MEMORY_MIB/COMPUTE_MILLI`.
    pub slice: String,
    /// Slices per request.
    pub count: u32,
    /// The VM's CPU in milli-CPUs.
    pub cpu_milli: u32,
    /// The VM's memory in MiB, rounded up to a GiB.
    pub memory_mib: u64,
    /// Accepted GPU models (empty: any).
    pub models: Vec<String>,
    /// Share of the mix, 0 to 1.
    pub share: f64,
}

impl From<&agent::engine::DemandMix> for DemandMix {
    fn from(m: &agent::engine::DemandMix) -> Self {
        Self {
            requests_seen: m.seen,
            effective_requests: m.effective,
            prior_share: m.prior_share,
            half_life_requests: m.config.half_life,
            prior_strength: m.config.prior_strength,
            shapes: m
                .mix
                .items
                .iter()
                .map(|i| MixShape {
                    slice: agent::engine::slice_name(&i.slice),
                    count: i.count,
                    cpu_milli: i.cpu_milli,
                    memory_mib: i.memory_mib,
                    models: i.models.clone(),
                    share: i.weight,
                })
                .collect(),
        }
    }
}
