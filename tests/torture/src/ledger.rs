//! What the clients sent and what the daemon acknowledged: the truth the invariants are
//! checked against. An operation is acknowledged only when its answer arrived.

use std::collections::BTreeMap;

use serde_json::Value;

/// Where one allocation request stands, as its client knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocState {
    /// Sent, no answer (the daemon died or the connection broke): its idempotent retry decides.
    Unanswered,
    /// Answered 2xx with this allocation id.
    Acked(String),
    /// Answered with a refusal (no capacity): nothing was made.
    Refused,
    /// Its release was sent but not answered.
    ReleaseUnanswered(String),
    /// Released (answered 204, or 404 for a retried release).
    Released(String),
}

/// One allocation request with its idempotency key and body (a retry sends both again).
#[derive(Debug, Clone)]
pub struct AllocRecord {
    /// `Idempotency-Key`.
    pub key: String,
    /// The request body.
    pub body: Value,
    /// Where it stands.
    pub state: AllocState,
    /// Whether it ever reached the daemon (a connect that failed sent nothing).
    pub sent: bool,
}

/// Counters for the report.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Operations that got an answer.
    pub answered: u64,
    /// Operations that got none (daemon down or killed mid-request).
    pub unanswered: u64,
    /// D-Bus reads answered.
    pub dbus_reads: u64,
    /// Allocations acknowledged over the whole run (201, or the same id again on a retry).
    pub allocations_acked: u64,
    /// Releases acknowledged over the whole run.
    pub releases_acked: u64,
}

/// Every client's records.
#[derive(Debug, Default)]
pub struct Ledger {
    /// By idempotency key.
    pub allocations: BTreeMap<String, AllocRecord>,
    /// Counters.
    pub counts: Counts,
    /// Invariant violations seen while running (a retry answered with another id, say).
    pub violations: Vec<String>,
}

impl Ledger {
    /// Records an answer for `key` that names allocation `id`; a second, different id for one
    /// key is a duplicate.
    pub fn acked(&mut self, key: &str, id: String) {
        let Some(rec) = self.allocations.get_mut(key) else {
            return;
        };
        match &rec.state {
            AllocState::Acked(old)
            | AllocState::ReleaseUnanswered(old)
            | AllocState::Released(old)
                if *old != id =>
            {
                self.violations
                    .push(format!("key {key}: answered {id} after {old}"));
            }
            AllocState::Unanswered | AllocState::Refused => {
                rec.state = AllocState::Acked(id);
                self.counts.allocations_acked += 1;
            }
            _ => {}
        }
    }

    /// Allocation ids the daemon must hold: acknowledged and not released (a release without an
    /// answer may or may not have happened).
    pub fn must_hold(&self) -> Vec<String> {
        self.allocations
            .values()
            .filter_map(|r| match &r.state {
                AllocState::Acked(id) => Some(id.clone()),
                _ => None,
            })
            .collect()
    }
}
