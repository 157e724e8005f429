//! How the host stands with OpenStack Placement (`GET /v1/placement`, `vgpuctl host`).

use agent::health::quarantine::rfc3339;
use agent::placement::status::PlacementStatus as Status;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The Placement reporter's standing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlacementStatus {
    /// Whether vgpud reports to Placement at all (`[placement] enabled`); nothing else is
    /// present when it does not.
    pub enabled: bool,
    /// The Placement endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "http://controller:8778")]
    pub endpoint: Option<String>,
    /// The compute node's resource provider: its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "compute-07")]
    pub root_name: Option<String>,
    /// Its UUID, once found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_uuid: Option<String>,
    /// GPU resource providers vgpud keeps.
    #[serde(default)]
    pub gpu_providers: u32,
    /// Placement matches the host as of its last change.
    #[serde(default)]
    pub in_sync: bool,
    /// Since when a local change has not reached Placement (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_since: Option<String>,
    /// The last sync pass (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt: Option<String>,
    /// The last pass that succeeded (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success: Option<String>,
    /// Why the last pass failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Writes retried after another writer changed a provider first, since start.
    #[serde(default)]
    pub generation_conflicts: u64,
    /// What the last pass worked around: providers with vgpud's names that are not vgpud's,
    /// inventories kept because allocations still use them.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// vgpud allocations whose Placement consumer holds nothing matching on this host.
    #[serde(default)]
    pub missing_in_placement: u32,
    /// Placement consumers holding vgpud's providers that vgpud does not know.
    #[serde(default)]
    pub unknown_to_vgpud: u32,
    /// Consumers whose amounts differ between vgpud and Placement.
    #[serde(default)]
    pub amount_mismatch: u32,
}

impl From<Option<&Status>> for PlacementStatus {
    fn from(s: Option<&Status>) -> Self {
        let Some(s) = s else {
            return Self {
                enabled: false,
                endpoint: None,
                root_name: None,
                root_uuid: None,
                gpu_providers: 0,
                in_sync: false,
                pending_since: None,
                last_attempt: None,
                last_success: None,
                last_error: None,
                generation_conflicts: 0,
                warnings: Vec::new(),
                missing_in_placement: 0,
                unknown_to_vgpud: 0,
                amount_mismatch: 0,
            };
        };
        Self {
            enabled: true,
            endpoint: s.endpoint.clone(),
            root_name: Some(s.root_name.clone()),
            root_uuid: s.root.map(|u| u.to_string()),
            gpu_providers: s.gpu_providers,
            in_sync: s.in_sync,
            pending_since: s.pending_since.map(rfc3339),
            last_attempt: s.last_attempt.map(rfc3339),
            last_success: s.last_success.map(rfc3339),
            last_error: s.last_error.clone(),
            generation_conflicts: s.conflicts,
            warnings: s.warnings.clone(),
            missing_in_placement: s.missing_in_placement,
            unknown_to_vgpud: s.unknown_to_vgpud,
            amount_mismatch: s.amount_mismatch,
        }
    }
}
