//! What the engine answers about one GPU (health, utilisation, capacity per type) and about a
//! dry run of a request (feasibility and score). Plain data: computed by
//! [`super::gpu_detail`] and [`super::dry_run`], served by the front ends.

use serde::{Deserialize, Serialize};

use super::model::BackendKind;

/// One GPU with what the scheduler and telemetry know about it (`GET /v1/gpus/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuDetail {
    /// The inventory's description of the GPU.
    #[serde(flatten)]
    pub gpu: inventory::Gpu,
    /// `ok`, `degraded` (failed owned slices, discovery warnings) or `unresponsive` (its
    /// vendor calls time out).
    pub health: GpuHealth,
    /// Why the GPU is not `ok`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_reasons: Vec<String>,
    /// Utilisation and memory from the vendor library, when it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization: Option<GpuUtilization>,
    /// For each slice type the GPU offers, how many more could be handed out now.
    pub capacity: Vec<SliceCapacity>,
}

/// A GPU's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuHealth {
    /// Nothing wrong is known.
    Ok,
    /// Usable, with problems (`health_reasons`).
    Degraded,
    /// Its vendor library calls do not answer.
    Unresponsive,
    /// Quarantined: no new slices or allocations (`health_reasons` starts with why).
    Quarantined,
}

/// Telemetry of one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuUtilization {
    /// GPU (SM) utilisation, percent.
    pub gpu_pct: u32,
    /// Memory copy utilisation, percent.
    pub memory_copy_pct: u32,
    /// Framebuffer used, MiB.
    pub memory_used_mib: u64,
    /// Framebuffer free, MiB.
    pub memory_free_mib: u64,
    /// Temperature, °C.
    pub temperature_c: u32,
    /// Power draw, mW.
    pub power_mw: u32,
}

/// How many more slices of one type a GPU can hand out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceCapacity {
    /// The type as requests name it (`3g.40gb`, `nvidia-222`, a vGPU type name, `vf`, `gpu`).
    #[serde(rename = "type")]
    pub slice_type: String,
    /// The mechanism.
    pub backend: BackendKind,
    /// Owned slices of the type that are ready and free.
    pub free: u32,
    /// Slices of the type that could still be created (each alone, on the GPU as it is now).
    pub creatable: u32,
}

/// A dry-run answer: would this host take a request, and how well (`POST /v1/placement-score`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementScore {
    /// Whether the host can take the request now.
    pub feasible: bool,
    /// Higher is better; comparable between hosts running the same policy.
    pub score: f64,
    /// Expected waste the placement adds, in GPUs: capacity no common request could fill, or
    /// that its NUMA node's CPUs could not feed (compare hosts on this first; see `sched`).
    pub waste_added: f64,
    /// Expected fragmentation the placement adds, in GPUs.
    pub fragmentation_added: f64,
    /// Whether the VM's CPUs and memory would sit on its slices' NUMA node.
    pub numa_local: bool,
    /// Free GPU capacity of the host after the placement, in GPUs.
    pub host_free_after: f64,
    /// The policy that scored it.
    pub policy: String,
    /// Why not, when infeasible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where the slices would go (GPU and slice per placement), when feasible.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<sched::Placement>,
    /// Every candidate with its score components, and why other GPUs were left out.
    pub explanation: Option<sched::Explanation>,
}
