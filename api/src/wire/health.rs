//! GPU quarantine on the wire: the operator's request (`POST /v1/gpus/{id}/quarantine`, D-Bus
//! `Gpu.Quarantine`) and the quarantine record both answer with.

use agent::health::quarantine as q;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::check_text;
use crate::error::ApiError;

/// `POST /v1/gpus/{id}/quarantine`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuarantineRequest {
    /// Why, for the people who will read it in refusals and events.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F\u00AD\u061C\u180E\u200B-\u200F\u2028-\u202E\u2060-\u206F\uFEFF\uFFF9-\uFFFB\uDB40]+$",
        example = "fan replacement scheduled"
    )]
    pub reason: String,
}

impl QuarantineRequest {
    /// The checked reason.
    pub fn reason(&self) -> Result<&str, ApiError> {
        check_text("reason", &self.reason)?;
        Ok(&self.reason)
    }
}

/// A GPU's quarantine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Quarantine {
    /// The GPU.
    #[schema(example = "0000:07:00.0")]
    pub gpu: String,
    /// Since when (RFC 3339, UTC).
    #[schema(example = "2026-12-02T16:50:01Z")]
    pub since: String,
    /// Why.
    #[schema(example = "Xid 79 (GPU has fallen off the bus)")]
    pub reason: String,
    /// Who quarantined it: `auto` (vgpud's health monitor; released by the probe) or
    /// `operator` (released only by hand).
    #[schema(example = "auto")]
    pub source: String,
    /// The Xid that caused it, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u64>,
}

impl From<&q::Quarantine> for Quarantine {
    fn from(r: &q::Quarantine) -> Self {
        Quarantine {
            gpu: r.gpu.to_string(),
            since: q::rfc3339(r.since),
            reason: r.reason.clone(),
            source: r.source.as_str().to_owned(),
            xid: r.xid,
        }
    }
}
