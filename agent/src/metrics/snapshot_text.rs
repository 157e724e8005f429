//! The snapshot's part of `/metrics`, rendered once per telemetry snapshot.
//!
//! Most of a scrape is the device, health, slice and capacity gauges, and they change only when
//! the poller stores a new snapshot (every `[metrics] poll_interval_ms`, 5 s by default), while
//! scrapers may ask far more often. Registering and encoding those families was most of a
//! scrape's time on the simulated DGX A100; the text is kept for the snapshot it was rendered
//! from (compared by identity) and only the live counters are rendered per scrape.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use crate::telemetry::TelemetrySnapshot;

/// The last snapshot's rendered families.
#[derive(Debug, Default)]
pub struct SnapshotText {
    last: Mutex<Option<(Arc<TelemetrySnapshot>, Arc<String>)>>,
}

impl SnapshotText {
    /// [`super::render::snapshot_text`] of `snapshot`, rendered again only for a new snapshot.
    pub fn of(&self, snapshot: &Arc<TelemetrySnapshot>) -> Result<Arc<String>, fmt::Error> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((seen, text)) = last.as_ref()
            && Arc::ptr_eq(seen, snapshot)
        {
            return Ok(text.clone());
        }
        let text = Arc::new(super::render::snapshot_text(snapshot)?);
        *last = Some((snapshot.clone(), text.clone()));
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_new_snapshot_is_rendered_again() {
        let kept = SnapshotText::default();
        let first = Arc::new(TelemetrySnapshot {
            allocations: 1,
            ..TelemetrySnapshot::default()
        });
        let a = kept.of(&first).unwrap();
        assert!(Arc::ptr_eq(&a, &kept.of(&first).unwrap()), "kept");
        let second = Arc::new(TelemetrySnapshot {
            allocations: 2,
            ..TelemetrySnapshot::default()
        });
        let b = kept.of(&second).unwrap();
        assert!(!Arc::ptr_eq(&a, &b), "rendered again");
        assert_eq!(*b, super::super::render::snapshot_text(&second).unwrap());
    }
}
