//! The `reason` label of a failed allocation: a short, fixed vocabulary dashboards and alerts
//! can rely on, from the engine's stable error codes.

use crate::engine::EngineError;

/// `no_capacity`, `quarantined`, `invalid`, `conflict`, `not_found`, `vendor`, `timeout` or
/// `internal`.
pub fn failure_reason(e: &EngineError) -> &'static str {
    match e {
        EngineError::Quarantined(_) => "quarantined",
        EngineError::NoCapacity(_) | EngineError::Busy(_) => "no_capacity",
        EngineError::InvalidRequest(_) | EngineError::Unsupported(_) => "invalid",
        // A Placement consumer that holds something else is a conflict with Placement's view;
        // Placement down is vgpud's side failing (each counted by outcome in
        // `vgpud_placement_consumer_checks_total` too).
        EngineError::Conflict(_) | EngineError::PlacementMismatch(_) => "conflict",
        EngineError::NotFound(_) => "not_found",
        EngineError::Timeout { .. } => "timeout",
        EngineError::Host {
            nvml_code: Some(_), ..
        }
        | EngineError::Host {
            amd_status: Some(_),
            ..
        } => "vendor",
        EngineError::Host { .. }
        | EngineError::Store(_)
        | EngineError::LibvirtUnavailable(_)
        | EngineError::PlacementUnavailable(_) => "internal",
    }
}
