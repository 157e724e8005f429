//! How the reporter stands with Placement: what `vgpuctl host`, `GET /v1/placement` and the
//! `vgpud_placement_*` metrics show.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use uuid::Uuid;

/// The reporter's standing, as of its last pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlacementStatus {
    /// The Placement endpoint, when known.
    pub endpoint: Option<String>,
    /// The compute node's provider name.
    pub root_name: String,
    /// Its UUID, once found.
    pub root: Option<Uuid>,
    /// GPU providers vgpud keeps.
    pub gpu_providers: u32,
    /// Placement matches the host as of the last change.
    pub in_sync: bool,
    /// Since when a local change has not reached Placement (seconds since the epoch).
    pub pending_since: Option<u64>,
    /// The last pass (seconds since the epoch).
    pub last_attempt: Option<u64>,
    /// The last pass that succeeded (seconds since the epoch).
    pub last_success: Option<u64>,
    /// Why the last pass failed.
    pub last_error: Option<String>,
    /// Passes by outcome, since start.
    pub syncs_ok: u64,
    /// Passes that failed, since start.
    pub syncs_failed: u64,
    /// Writes retried after another writer bumped a generation, since start.
    pub conflicts: u64,
    /// Problems the last pass worked around (providers that are not vgpud's, inventories kept).
    pub warnings: Vec<String>,
    /// vgpud allocations naming a Placement consumer that holds nothing matching here.
    pub missing_in_placement: u32,
    /// Consumers holding allocations on vgpud's providers that vgpud does not know.
    pub unknown_to_vgpud: u32,
    /// Consumers whose amounts differ between vgpud and Placement.
    pub amount_mismatch: u32,
    /// Allocations removed from Placement by healing (`[placement] heal`), since start.
    pub healed: u64,
}

impl PlacementStatus {
    /// How long local changes have waited for Placement, at `now`; zero when in sync.
    pub fn out_of_sync_for(&self, now: SystemTime) -> Duration {
        match self.pending_since {
            Some(since) => Duration::from_secs(epoch(now).saturating_sub(since)),
            None => Duration::ZERO,
        }
    }
}

/// Seconds since the Unix epoch.
pub fn epoch(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
