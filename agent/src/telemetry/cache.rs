//! The one place the latest snapshot lives. The lock is held only to clone or swap an `Arc`, so a
//! scrape never waits on a poll.

use std::sync::{Arc, Mutex, PoisonError};

use super::snapshot::TelemetrySnapshot;

/// The latest [`TelemetrySnapshot`]; empty until the first poll.
#[derive(Debug, Default)]
pub struct TelemetryCache {
    latest: Mutex<Arc<TelemetrySnapshot>>,
}

impl TelemetryCache {
    /// The latest snapshot.
    pub fn latest(&self) -> Arc<TelemetrySnapshot> {
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the snapshot.
    pub fn store(&self, snapshot: TelemetrySnapshot) {
        let next = Arc::new(snapshot);
        *self.latest.lock().unwrap_or_else(PoisonError::into_inner) = next;
    }
}
