//! The in-memory table of long operations (layout applies), polled at `/v1/operations/{id}`.
//!
//! Kept in the REST layer: an operation is a view of one call in flight, and its lasting outcome
//! (the layout status) is the engine's. After a restart the table is empty; clients that lose
//! an operation read `/v1/layouts` instead.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use agent::apply_slot::ApplyClaim;
use agent::engine::EngineError;
use agent::service::Service;

use crate::error::ErrorBody;
use crate::wire::layouts::{LayoutsView, Operation, OperationState};

/// Finished operations kept for polling; older ones are forgotten first.
const KEEP_FINISHED: usize = 256;

#[derive(Debug, Default)]
pub(super) struct Operations {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_id: HashMap<String, Operation>,
    finished: VecDeque<String>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Operations {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a layout apply: claims the agent's one apply slot (shared with D-Bus, so `conflict`
    /// while an apply from either front end runs) and records the operation. Keep the claim
    /// until the apply ends; [`Operations::finish`] then records how.
    pub fn start_apply(&self, service: &Service) -> Result<(Operation, ApplyClaim), EngineError> {
        let id = uuid::Uuid::new_v4().to_string();
        let claim = service.claim_apply(&id)?;
        Ok((self.record(id), claim))
    }

    /// Records a running layout apply.
    fn record(&self, id: String) -> Operation {
        let op = Operation {
            id,
            kind: "layout_apply".to_owned(),
            state: OperationState::Running,
            started: now(),
            finished: None,
            result: None,
            error: None,
        };
        self.lock().by_id.insert(op.id.clone(), op.clone());
        op
    }

    /// Records how an operation ended.
    pub fn finish(&self, id: &str, outcome: Result<LayoutsView, ErrorBody>) {
        let mut inner = self.lock();
        if let Some(op) = inner.by_id.get_mut(id) {
            op.finished = Some(now());
            match outcome {
                Ok(view) => {
                    op.state = OperationState::Succeeded;
                    op.result = Some(view);
                }
                Err(e) => {
                    op.state = OperationState::Failed;
                    op.error = Some(e);
                }
            }
        }
        inner.finished.push_back(id.to_owned());
        while inner.finished.len() > KEEP_FINISHED {
            if let Some(old) = inner.finished.pop_front() {
                inner.by_id.remove(&old);
            }
        }
    }

    /// One operation.
    pub fn get(&self, id: &str) -> Option<Operation> {
        self.lock().by_id.get(id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(code: &str) -> ErrorBody {
        ErrorBody {
            code: code.into(),
            message: String::new(),
            details: Default::default(),
        }
    }

    // One apply at a time is the agent's slot now (agent/src/apply_slot.rs).
    #[test]
    fn old_operations_are_forgotten() {
        let ops = Operations::default();
        let first = ops.record("first".into());
        ops.finish(&first.id, Err(failed("conflict")));
        assert_eq!(ops.get(&first.id).unwrap().state, OperationState::Failed);
        for i in 0..KEEP_FINISHED {
            let op = ops.record(format!("op{i}"));
            ops.finish(&op.id, Err(failed("x")));
        }
        assert!(ops.get(&first.id).is_none());
    }
}
