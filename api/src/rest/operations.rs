//! The in-memory table of long operations (layout applies), polled at `/v1/operations/{id}`.
//!
//! Kept in the REST layer: an operation is a view of one call in flight, and its lasting outcome
//! (the layout status) is the engine's. After a restart the table is empty; clients that lose
//! an operation read `/v1/layouts` instead.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

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
    /// The layout apply in flight: one at a time, so `If-Match` means something.
    running_apply: Option<String>,
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

    /// Starts a layout apply; `Err(id)` names the one still running.
    pub fn start_apply(&self) -> Result<Operation, String> {
        let mut inner = self.lock();
        if let Some(id) = &inner.running_apply {
            return Err(id.clone());
        }
        let op = Operation {
            id: uuid::Uuid::new_v4().to_string(),
            kind: "layout_apply".to_owned(),
            state: OperationState::Running,
            started: now(),
            finished: None,
            result: None,
            error: None,
        };
        inner.running_apply = Some(op.id.clone());
        inner.by_id.insert(op.id.clone(), op.clone());
        Ok(op)
    }

    /// Records how an operation ended.
    pub fn finish(&self, id: &str, outcome: Result<LayoutsView, ErrorBody>) {
        let mut inner = self.lock();
        if inner.running_apply.as_deref() == Some(id) {
            inner.running_apply = None;
        }
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

    #[test]
    fn one_apply_at_a_time_and_old_ones_are_forgotten() {
        let ops = Operations::default();
        let first = ops.start_apply().unwrap();
        assert_eq!(ops.start_apply().unwrap_err(), first.id);
        ops.finish(
            &first.id,
            Err(ErrorBody {
                code: "conflict".into(),
                message: "m".into(),
                details: Default::default(),
            }),
        );
        assert_eq!(ops.get(&first.id).unwrap().state, OperationState::Failed);
        for _ in 0..KEEP_FINISHED {
            let op = ops.start_apply().unwrap();
            ops.finish(
                &op.id,
                Err(ErrorBody {
                    code: "x".into(),
                    message: String::new(),
                    details: Default::default(),
                }),
            );
        }
        assert!(ops.get(&first.id).is_none());
    }
}
