//! What can go wrong talking to Placement (and Keystone), sorted by what the caller does next:
//! re-read and retry ([`Error::Conflict`]), wait for the service ([`Error::Unavailable`]), or
//! tell the operator (the rest).

use serde::Deserialize;

/// Placement's error code for a write that carried a stale provider or consumer generation.
pub const CONCURRENT_UPDATE: &str = "placement.concurrent_update";

/// A failed Placement or Keystone request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// 409: a stale generation (`placement.concurrent_update`), an inventory still in use
    /// (`placement.inventory.inuse`), a duplicate name, …
    #[error("Placement refused the change as conflicting ({}): {detail}", code.as_deref().unwrap_or("no code"))]
    Conflict {
        /// Placement's error code, when it sent one.
        code: Option<String>,
        /// Placement's explanation.
        detail: String,
    },
    /// 404: no such provider, consumer, trait or resource class.
    #[error("Placement has no such thing: {0}")]
    NotFound(String),
    /// 401 or 403: the token is missing, invalid or lacks the role.
    #[error("Placement denied the request (HTTP {status}): {detail}")]
    Denied {
        /// 401 or 403.
        status: u16,
        /// Placement's explanation.
        detail: String,
    },
    /// Any other refusal (400 for a malformed request, 500 for a server bug, …).
    #[error("Placement answered HTTP {status}: {detail}")]
    Http {
        /// The HTTP status.
        status: u16,
        /// Placement's explanation.
        detail: String,
    },
    /// Placement (or Keystone) cannot be reached: connection refused, timeout, TLS handshake
    /// failure, or a proxy's 502/503/504.
    #[error("Placement is unavailable: {0}")]
    Unavailable(String),
    /// Keystone refused the credentials or gave no usable token.
    #[error("Keystone authentication failed: {0}")]
    Auth(String),
    /// An answer that is not what the API reference describes.
    #[error("Placement's answer cannot be read: {0}")]
    BadResponse(String),
    /// The client's configuration cannot work (bad URL, unreadable CA file, no endpoint).
    #[error("the Placement client is misconfigured: {0}")]
    Config(String),
}

impl Error {
    /// A write carried a generation that is no longer current: re-read, recompute, retry.
    pub fn is_generation_conflict(&self) -> bool {
        matches!(self, Error::Conflict { code: Some(code), .. } if code == CONCURRENT_UPDATE)
    }

    /// Placement could not be reached: retry later; local operation goes on.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable(_))
    }

    /// The error for a non-2xx answer with `body` (Placement's `{"errors": [...]}` document when
    /// it sent one; a proxy's or Keystone's text otherwise).
    pub(crate) fn from_status(status: u16, body: &[u8]) -> Error {
        let (code, detail) = error_body(body);
        match status {
            409 => Error::Conflict { code, detail },
            404 => Error::NotFound(detail),
            401 | 403 => Error::Denied { status, detail },
            502..=504 => Error::Unavailable(format!("HTTP {status}: {detail}")),
            _ => Error::Http { status, detail },
        }
    }
}

/// Placement's error document (`placement/errors.py`, rendered by `util.json_error_formatter`).
#[derive(Deserialize)]
struct ErrorDocument {
    errors: Vec<ErrorEntry>,
}

#[derive(Deserialize)]
struct ErrorEntry {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    detail: Option<String>,
    #[serde(default)]
    title: Option<String>,
}

/// The longest piece of an error body quoted in an error message.
const DETAIL_LIMIT: usize = 500;

/// Code and detail of the first error in `body`, or the body's text as the detail.
fn error_body(body: &[u8]) -> (Option<String>, String) {
    if let Ok(doc) = serde_json::from_slice::<ErrorDocument>(body)
        && let Some(first) = doc.errors.into_iter().next()
    {
        let detail = first.detail.or(first.title).unwrap_or_default();
        return (first.code, one_line(&detail));
    }
    (None, one_line(&String::from_utf8_lossy(body)))
}

/// `text` on one line (Placement's details carry webob's blank lines), cut to a sane length.
fn one_line(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.is_empty() {
        return "no detail given".to_owned();
    }
    match joined.char_indices().nth(DETAIL_LIMIT) {
        Some((cut, _)) => format!("{}…", &joined[..cut]),
        None => joined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The body Placement 16 sent for a stale generation (captured against the test Placement).
    const STALE: &str = r#"{"errors": [{"status": 409, "title": "Conflict", "detail": "There was a conflict when trying to complete your request.\n\n resource provider generation conflict  ", "code": "placement.concurrent_update", "request_id": "req-1"}]}"#;

    #[test]
    fn a_stale_generation_is_a_generation_conflict() {
        let err = Error::from_status(409, STALE.as_bytes());
        assert!(err.is_generation_conflict(), "{err:?}");
        let Error::Conflict { detail, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(
            detail,
            "There was a conflict when trying to complete your request. resource provider generation conflict"
        );
    }

    #[test]
    fn another_conflict_is_not_a_generation_conflict() {
        let body =
            r#"{"errors":[{"status":409,"code":"placement.inventory.inuse","detail":"in use"}]}"#;
        let err = Error::from_status(409, body.as_bytes());
        assert!(!err.is_generation_conflict());
        assert_eq!(
            err,
            Error::Conflict {
                code: Some("placement.inventory.inuse".into()),
                detail: "in use".into()
            }
        );
    }

    #[test]
    fn statuses_map_to_what_the_caller_does_next() {
        assert!(matches!(Error::from_status(404, b"{}"), Error::NotFound(_)));
        assert!(matches!(
            Error::from_status(401, b""),
            Error::Denied { status: 401, .. }
        ));
        assert!(matches!(
            Error::from_status(403, b""),
            Error::Denied { status: 403, .. }
        ));
        for status in [502, 503, 504] {
            assert!(Error::from_status(status, b"<html>bad gateway</html>").is_unavailable());
        }
        assert!(matches!(
            Error::from_status(400, b"x"),
            Error::Http { status: 400, .. }
        ));
        assert!(matches!(
            Error::from_status(500, b"x"),
            Error::Http { status: 500, .. }
        ));
    }

    #[test]
    fn a_huge_body_is_cut_in_the_message() {
        let err = Error::from_status(400, "x".repeat(100_000).as_bytes());
        assert!(err.to_string().len() < DETAIL_LIMIT + 100, "{err}");
    }
}
