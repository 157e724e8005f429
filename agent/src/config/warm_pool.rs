//! `[warm_pool]`: free slices made ahead of demand (docs/engine.md, "Warm pool").

use serde::{Deserialize, Serialize};

/// `[warm_pool]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WarmPoolConfig {
    /// Keep free slices of the types requests ask for ready on GPUs no layout selects.
    pub enabled: bool,
    /// How many free slices the pool holds on the host (the types from the learnt demand mix
    /// and the pace of requests: `warm_pool::slots`).
    pub size: u32,
    /// How often the pool is topped up, ms.
    pub interval_ms: u64,
    /// At most this many slices made per top-up, at once (creates on one GPU take its lock in
    /// turn).
    pub creates_per_pass: u32,
}

impl Default for WarmPoolConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            size: 4,
            interval_ms: 1000,
            creates_per_pass: 4,
        }
    }
}

/// Checks the section's ranges.
pub(super) fn validate(w: &WarmPoolConfig) -> Result<(), (&'static str, String)> {
    if !(1..=256).contains(&w.size) {
        return Err(("warm_pool.size", "must be 1 to 256".into()));
    }
    if !(100..=600_000).contains(&w.interval_ms) {
        return Err(("warm_pool.interval_ms", "must be 100 to 600000".into()));
    }
    if !(1..=64).contains(&w.creates_per_pass) {
        return Err(("warm_pool.creates_per_pass", "must be 1 to 64".into()));
    }
    Ok(())
}
