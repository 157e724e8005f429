//! The host inventory on the wire (`GET /v1/host`, `/v1/gpus`): `inventory`'s own model, which
//! derives its OpenAPI schema (feature `openapi`), so the API serves exactly what
//! `vgpud inventory --json` prints; plus what only the API adds to a GPU (health, telemetry,
//! capacity).

use serde::Serialize;
use utoipa::ToSchema;

pub use inventory::{Gpu, HostInventory as Host};

/// One GPU with its health, utilisation and room (`GET /v1/gpus/{id}`): the inventory's fields
/// plus what the scheduler and telemetry know.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GpuDetail {
    /// The inventory's description of the GPU.
    #[serde(flatten)]
    pub gpu: Gpu,
    /// `ok`, `degraded` (failed owned slices, discovery warnings) or `unresponsive` (its vendor
    /// calls time out).
    pub health: GpuHealth,
    /// Why the GPU is not `ok`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub health_reasons: Vec<String>,
    /// Utilisation and memory from the vendor library, when it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utilization: Option<GpuUtilization>,
    /// For each slice type the GPU offers, how many more could be handed out now.
    pub capacity: Vec<SliceCapacity>,
}

/// A GPU's health.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GpuHealth {
    /// Nothing wrong is known.
    Ok,
    /// Usable, with problems.
    Degraded,
    /// Its vendor library calls do not answer.
    Unresponsive,
    /// Quarantined: no new slices or allocations (`health_reasons` starts with since when and
    /// why).
    Quarantined,
}

/// Telemetry of one GPU.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
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
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SliceCapacity {
    /// The type as requests name it.
    #[serde(rename = "type")]
    pub slice_type: String,
    /// The mechanism.
    pub backend: String,
    /// Owned slices of the type that are ready and free.
    pub free: u32,
    /// Slices of the type that could still be created (each alone, on the GPU as it is now).
    pub creatable: u32,
}

impl From<&agent::service::GpuDetail> for GpuDetail {
    fn from(d: &agent::service::GpuDetail) -> Self {
        use agent::service::GpuHealth as H;
        GpuDetail {
            gpu: d.gpu.clone(),
            health: match d.health {
                H::Ok => GpuHealth::Ok,
                H::Degraded => GpuHealth::Degraded,
                H::Unresponsive => GpuHealth::Unresponsive,
                H::Quarantined => GpuHealth::Quarantined,
            },
            health_reasons: d.health_reasons.clone(),
            utilization: d.utilization.map(|u| GpuUtilization {
                gpu_pct: u.gpu_pct,
                memory_copy_pct: u.memory_copy_pct,
                memory_used_mib: u.memory_used_mib,
                memory_free_mib: u.memory_free_mib,
                temperature_c: u.temperature_c,
                power_mw: u.power_mw,
            }),
            capacity: d
                .capacity
                .iter()
                .map(|c| SliceCapacity {
                    slice_type: c.slice_type.clone(),
                    backend: c.backend.as_str().to_owned(),
                    free: c.free,
                    creatable: c.creatable,
                })
                .collect(),
        }
    }
}
