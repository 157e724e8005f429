//! [`DbusError`]: how a D-Bus call fails, as an error name and a message.
//!
//! Engine failures keep their stable codes ([`EngineError::code`]) as names under
//! `io.vgpud.Agent1.Error.` (`no_capacity` → `io.vgpud.Agent1.Error.NoCapacity`); a refused
//! authorization uses the standard `org.freedesktop.DBus.Error.AccessDenied` that every D-Bus
//! client recognises.

use agent::engine::EngineError;
use zbus::DBusError;
use zbus::message::{Header, Message};
use zbus::names::ErrorName;

use crate::error::ApiError;

/// The prefix of vgpud's own error names.
pub const ERROR_PREFIX: &str = "io.vgpud.Agent1.Error";

/// The standard name for a refused authorization.
pub const ACCESS_DENIED: &str = "org.freedesktop.DBus.Error.AccessDenied";
/// The standard name for a failure inside vgpud itself.
pub const FAILED: &str = "org.freedesktop.DBus.Error.Failed";

/// Engine codes and their error names (every code of [`EngineError::code`]).
const ENGINE_NAMES: &[(&str, &str)] = &[
    ("no_capacity", "io.vgpud.Agent1.Error.NoCapacity"),
    ("busy", "io.vgpud.Agent1.Error.Busy"),
    ("quarantined", "io.vgpud.Agent1.Error.Quarantined"),
    ("unsupported", "io.vgpud.Agent1.Error.Unsupported"),
    ("conflict", "io.vgpud.Agent1.Error.Conflict"),
    ("not_found", "io.vgpud.Agent1.Error.NotFound"),
    ("invalid_request", "io.vgpud.Agent1.Error.InvalidRequest"),
    ("host_error", "io.vgpud.Agent1.Error.HostError"),
    ("timeout", "io.vgpud.Agent1.Error.Timeout"),
    ("store_error", "io.vgpud.Agent1.Error.StoreError"),
    (
        "libvirt_unavailable",
        "io.vgpud.Agent1.Error.LibvirtUnavailable",
    ),
    (
        "placement_mismatch",
        "io.vgpud.Agent1.Error.PlacementMismatch",
    ),
    (
        "placement_unavailable",
        "io.vgpud.Agent1.Error.PlacementUnavailable",
    ),
];

/// The error name for an engine code; a code this table does not know yet (added to the engine
/// later) is still reported under vgpud's prefix rather than lost.
pub fn error_name_for_code(code: &str) -> &'static str {
    ENGINE_NAMES
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, n)| *n)
        .unwrap_or("io.vgpud.Agent1.Error.Failed")
}

/// Why a D-Bus call failed: the name clients match on, and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {message}")]
pub struct DbusError {
    name: &'static str,
    message: String,
}

impl DbusError {
    /// The caller may not do this (polkit said no, or could not answer).
    pub fn access_denied(message: impl Into<String>) -> Self {
        Self {
            name: ACCESS_DENIED,
            message: message.into(),
        }
    }

    /// A malformed argument (same name as the engine's `invalid_request`).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self {
            name: error_name_for_code("invalid_request"),
            message: message.into(),
        }
    }

    /// A failure inside vgpud.
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            name: FAILED,
            message: message.into(),
        }
    }

    /// The error name.
    pub fn error_name(&self) -> &'static str {
        self.name
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<EngineError> for DbusError {
    fn from(e: EngineError) -> Self {
        Self {
            name: error_name_for_code(e.code()),
            message: chain(&e),
        }
    }
}

/// A request the wire types refused (or an engine error they carried): the same machine code as
/// REST's `code` field, under vgpud's prefix.
impl From<ApiError> for DbusError {
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Engine(inner) => inner.into(),
            other => Self {
                name: error_name_for_code(other.code()),
                message: other.to_string(),
            },
        }
    }
}

impl DBusError for DbusError {
    fn create_reply(&self, call: &Header<'_>) -> zbus::Result<Message> {
        Message::error(call, self.name()).build(&(self.message.as_str(),))
    }

    fn name(&self) -> ErrorName<'_> {
        // The names are constants above, all valid error names (checked by a test).
        ErrorName::from_static_str_unchecked(self.name)
    }

    fn description(&self) -> Option<&str> {
        Some(&self.message)
    }
}

/// The error and its sources on one line; the engine's host errors keep what the kernel or the
/// vendor library said in their sources.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_code_has_a_valid_distinct_name() {
        let errors = [
            EngineError::NoCapacity("x".into()),
            EngineError::Busy("x".into()),
            EngineError::Unsupported("x".into()),
            EngineError::Conflict("x".into()),
            EngineError::NotFound("x".into()),
            EngineError::InvalidRequest("x".into()),
            EngineError::Host {
                context: "writing create".into(),
                errno: Some(16),
                nvml_code: None,
                amd_status: None,
                source: "Device or resource busy".into(),
            },
            EngineError::Timeout {
                call: "nvmlDeviceCreateGpuInstance".into(),
                gpu: None,
                after: std::time::Duration::from_millis(5),
            },
            EngineError::LibvirtUnavailable("no socket".into()),
            EngineError::PlacementMismatch("x".into()),
            EngineError::PlacementUnavailable("x".into()),
        ];
        let mut names: Vec<&str> = errors
            .into_iter()
            .map(|e| DbusError::from(e).error_name())
            .collect();
        assert!(
            !names.contains(&"io.vgpud.Agent1.Error.Failed"),
            "{names:?}"
        );
        names.push(ACCESS_DENIED);
        names.push(FAILED);
        for (_, n) in ENGINE_NAMES {
            names.push(n);
        }
        for n in &names {
            assert!(ErrorName::try_from(*n).is_ok(), "{n}");
        }
        let mut unique = names[..11].to_vec();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 11, "{names:?}");
        assert_eq!(
            error_name_for_code("no_capacity"),
            "io.vgpud.Agent1.Error.NoCapacity"
        );
        assert_eq!(
            error_name_for_code("a_new_code"),
            "io.vgpud.Agent1.Error.Failed"
        );
    }

    #[test]
    fn host_errors_keep_their_source_in_the_message() {
        let e = DbusError::from(EngineError::Host {
            context: "writing create".into(),
            errno: Some(16),
            nvml_code: None,
            amd_status: None,
            source: "Device or resource busy".into(),
        });
        assert_eq!(e.error_name(), "io.vgpud.Agent1.Error.HostError");
        assert_eq!(e.message(), "writing create: Device or resource busy");
    }
}
