//! The Placement reporter's series: whether Placement matches the host, for how long it has
//! not, passes by outcome, generation conflicts, and allocations vgpud and Placement disagree on.

use std::time::SystemTime;

use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::Labels;
use super::render::{float_gauge, int_gauge, pairs};
use crate::placement::status::PlacementStatus;

/// Registers the `vgpud_placement_*` families (none when reporting is off).
pub(super) fn placement_families(
    registry: &mut Registry,
    status: Option<&PlacementStatus>,
    now: SystemTime,
) {
    let Some(s) = status else {
        return;
    };
    int_gauge(
        registry,
        "vgpud_placement_in_sync",
        "1 when OpenStack Placement matches the host as of its last change, else 0",
        vec![(Vec::new(), i64::from(s.in_sync))],
    );
    float_gauge(
        registry,
        "vgpud_placement_out_of_sync_seconds",
        "How long local changes have waited to reach Placement (0 when in sync)",
        vec![(Vec::new(), s.out_of_sync_for(now).as_secs_f64())],
    );
    if let Some(at) = s.last_success {
        float_gauge(
            registry,
            "vgpud_placement_last_sync_timestamp_seconds",
            "When the last successful Placement sync started, seconds since the epoch",
            vec![(Vec::new(), at as f64)],
        );
    }
    registry.register(
        "vgpud_placement_syncs",
        "Placement sync passes, by outcome",
        counter_rows(&[("ok", s.syncs_ok), ("error", s.syncs_failed)]),
    );
    registry.register(
        "vgpud_placement_generation_conflicts",
        "Placement writes retried because another writer changed the provider first",
        ConstCounter::new(s.conflicts),
    );
    registry.register(
        "vgpud_placement_healed_allocations",
        "Allocations of consumers unknown to vgpud removed from its providers ([placement] heal)",
        ConstCounter::new(s.healed),
    );
    int_gauge(
        registry,
        "vgpud_placement_allocation_differences",
        "Allocations vgpud and Placement disagree on at the last audit, by kind",
        vec![
            (
                pairs(&[("kind", "missing_in_placement")]),
                i64::from(s.missing_in_placement),
            ),
            (
                pairs(&[("kind", "unknown_to_vgpud")]),
                i64::from(s.unknown_to_vgpud),
            ),
            (
                pairs(&[("kind", "amount_mismatch")]),
                i64::from(s.amount_mismatch),
            ),
        ],
    );
}

/// A counter family with one sample per outcome.
fn counter_rows(rows: &[(&str, u64)]) -> Family<Labels, Counter> {
    let family = Family::<Labels, Counter>::default();
    for (outcome, n) in rows {
        family
            .get_or_create(&pairs(&[("outcome", outcome)]))
            .inc_by(*n);
    }
    family
}
