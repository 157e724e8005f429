//! The one layout apply that may run at a time, shared by every front end.
//!
//! REST and D-Bus both apply layouts; the slot lives here, in the agent, so that an apply started
//! over one is refused over the other (`conflict`) instead of racing it, and so that a
//! conditional apply's check ("the layouts are still X") cannot be undone by an apply from the
//! other front end between the check and the apply.

use std::sync::{Arc, Mutex, PoisonError};

use crate::engine::EngineError;

/// The slot: the id of the apply holding it, if any.
#[derive(Debug, Default)]
pub struct ApplySlot {
    running: Arc<Mutex<Option<String>>>,
}

/// Holding the slot; dropping it frees the slot (also when the apply panics or fails).
#[derive(Debug)]
pub struct ApplyClaim {
    running: Arc<Mutex<Option<String>>>,
    id: String,
}

impl ApplySlot {
    /// Claims the slot for apply `id`; `conflict` naming the apply that holds it otherwise.
    pub fn claim(&self, id: &str) -> Result<ApplyClaim, EngineError> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(other) = running.as_ref() {
            return Err(EngineError::Conflict(format!(
                "layout apply {other} is still running"
            )));
        }
        *running = Some(id.to_owned());
        Ok(ApplyClaim {
            running: self.running.clone(),
            id: id.to_owned(),
        })
    }
}

impl ApplyClaim {
    /// The apply's id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for ApplyClaim {
    fn drop(&mut self) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if running.as_deref() == Some(self.id.as_str()) {
            *running = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_claim_at_a_time_and_drop_frees_it() {
        let slot = ApplySlot::default();
        let first = slot.claim("a").unwrap();
        let err = slot.claim("b").unwrap_err();
        assert_eq!(err.code(), "conflict");
        assert!(err.to_string().contains("layout apply a is still running"));
        drop(first);
        assert_eq!(slot.claim("b").unwrap().id(), "b");
    }
}
