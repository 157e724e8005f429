//! [`ApiError`]: every way a REST request fails, as the JSON body `{"code", "message", "details"}`
//! with a stable `code` and the matching HTTP status.
//!
//! Engine failures keep the engine's codes ([`EngineError::code`]); the REST layer adds its own
//! for what only HTTP can get wrong (bad JSON, wrong content type, body too large, missing
//! credentials, failed preconditions). Axum's own rejections are converted here too, so a client
//! never sees a plain-text error.

use agent::engine::EngineError;
use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The JSON body of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    /// Stable machine-readable code: `invalid_request`, `not_found`, `conflict`, `no_capacity`,
    /// `quarantined`, `busy`, `unsupported`, `host_error`, `timeout`, `store_error`, `libvirt_unavailable`,
    /// `placement_mismatch`, `placement_unavailable` (from the engine) and `bad_json`, `unsupported_media_type`, `payload_too_large`,
    /// `unauthenticated`, `forbidden`, `precondition_failed`, `method_not_allowed`, `internal`
    /// (from the REST layer).
    #[schema(example = "not_found")]
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
    /// Extra machine-readable facts (errno, NVML code, the field at fault, …); may be empty.
    #[schema(value_type = Object)]
    pub details: serde_json::Map<String, serde_json::Value>,
}

/// Why a REST request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The engine refused or failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The request is malformed (a path or query parameter, a header, a field's value).
    #[error("{message}")]
    BadRequest {
        /// Machine code (`invalid_request` or `bad_json`).
        code: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The body is not `application/json`.
    #[error("the request body must be application/json")]
    UnsupportedMediaType,
    /// The body is larger than the configured limit.
    #[error("the request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The limit, bytes.
        limit: usize,
    },
    /// The body parsed as JSON but does not fit the schema (unknown field, wrong type, range).
    #[error("{0}")]
    Unprocessable(String),
    /// No credentials, or credentials that identify nobody.
    #[error("{0}")]
    Unauthenticated(String),
    /// Authenticated, but not allowed.
    #[error("{0}")]
    Forbidden(String),
    /// A resource with this id does not exist (a route, an operation).
    #[error("{0}")]
    NotFound(String),
    /// `If-Match` named another generation.
    #[error("the resource changed: its ETag is now {current}")]
    PreconditionFailed {
        /// The current ETag.
        current: String,
    },
    /// The request contradicts work in progress.
    #[error("{0}")]
    Conflict(String),
    /// The method is not defined on this path.
    #[error("method not allowed on this path")]
    MethodNotAllowed,
    /// A blocking service call could not be run or panicked.
    #[error("internal error: {0}")]
    Internal(String),
    /// A listener could not be set up or failed (not a request's fault).
    #[error("{context}")]
    Listener {
        /// What was being done.
        context: String,
        /// The system's answer.
        #[source]
        source: std::io::Error,
    },
    /// The TLS configuration is unusable.
    #[error("{0}")]
    TlsConfig(String),
}

impl ApiError {
    /// A 400 `invalid_request` with this message.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            code: "invalid_request",
            message: message.into(),
        }
    }

    /// A listener failure.
    pub fn listener(context: String, source: std::io::Error) -> Self {
        ApiError::Listener { context, source }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Engine(e) => engine_status(e),
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::PreconditionFailed { .. } => StatusCode::PRECONDITION_FAILED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Internal(_) | ApiError::Listener { .. } | ApiError::TlsConfig(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// The stable machine code.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Engine(e) => e.code(),
            ApiError::BadRequest { code, .. } => code,
            ApiError::UnsupportedMediaType => "unsupported_media_type",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::Unprocessable(_) => "invalid_request",
            ApiError::Unauthenticated(_) => "unauthenticated",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::PreconditionFailed { .. } => "precondition_failed",
            ApiError::Conflict(_) => "conflict",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Internal(_) | ApiError::Listener { .. } | ApiError::TlsConfig(_) => {
                "internal"
            }
        }
    }

    /// The JSON body.
    pub fn body(&self) -> ErrorBody {
        let mut details = serde_json::Map::new();
        match self {
            ApiError::Engine(e) => {
                if let Some(errno) = e.errno() {
                    details.insert("errno".into(), errno.into());
                }
                if let Some(code) = e.nvml_code() {
                    details.insert("nvml_code".into(), code.into());
                }
                if let Some(status) = e.amd_status() {
                    details.insert("amd_status".into(), status.into());
                }
            }
            ApiError::PayloadTooLarge { limit } => {
                details.insert("limit_bytes".into(), (*limit).into());
            }
            ApiError::PreconditionFailed { current } => {
                details.insert("etag".into(), current.clone().into());
            }
            _ => {}
        }
        ErrorBody {
            code: self.code().to_owned(),
            message: message_of(self),
            details,
        }
    }
}

/// The whole chain on one line: the engine's host errors keep their cause in `source`.
fn message_of(e: &ApiError) -> String {
    match e {
        ApiError::Engine(inner) => sysfs::error_chain(inner),
        ApiError::Listener { .. } => sysfs::error_chain(e),
        other => other.to_string(),
    }
}

/// The HTTP status of an engine failure.
pub fn engine_status(e: &EngineError) -> StatusCode {
    match e {
        EngineError::NotFound(_) => StatusCode::NOT_FOUND,
        EngineError::InvalidRequest(_) => StatusCode::UNPROCESSABLE_ENTITY,
        EngineError::Conflict(_) | EngineError::Busy(_) | EngineError::PlacementMismatch(_) => {
            StatusCode::CONFLICT
        }
        EngineError::NoCapacity(_) | EngineError::Quarantined(_) => StatusCode::CONFLICT,
        EngineError::Unsupported(_) => StatusCode::UNPROCESSABLE_ENTITY,
        EngineError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
        EngineError::Host { .. } => StatusCode::BAD_GATEWAY,
        EngineError::Store(_)
        | EngineError::LibvirtUnavailable(_)
        | EngineError::PlacementUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(code = self.code(), error = %message_of(&self), "request failed");
        } else {
            tracing::debug!(code = self.code(), error = %message_of(&self), "request refused");
        }
        (status, Json(self.body())).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        match r {
            JsonRejection::MissingJsonContentType(_) => ApiError::UnsupportedMediaType,
            JsonRejection::JsonDataError(e) => ApiError::Unprocessable(e.body_text()),
            JsonRejection::JsonSyntaxError(e) => ApiError::BadRequest {
                code: "bad_json",
                message: e.body_text(),
            },
            JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                // The limit itself is filled in by the router, which knows it.
                ApiError::PayloadTooLarge { limit: 0 }
            }
            other => ApiError::BadRequest {
                code: "invalid_request",
                message: other.body_text(),
            },
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::invalid(r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::invalid(r.body_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_codes_keep_their_code_and_get_a_status() {
        let cases = [
            (EngineError::NotFound("x".into()), 404, "not_found"),
            (
                EngineError::InvalidRequest("x".into()),
                422,
                "invalid_request",
            ),
            (EngineError::Conflict("x".into()), 409, "conflict"),
            (EngineError::Busy("x".into()), 409, "busy"),
            (EngineError::NoCapacity("x".into()), 409, "no_capacity"),
            (EngineError::Quarantined("x".into()), 409, "quarantined"),
            (EngineError::Unsupported("x".into()), 422, "unsupported"),
            (
                EngineError::PlacementMismatch("x".into()),
                409,
                "placement_mismatch",
            ),
            (
                EngineError::PlacementUnavailable("x".into()),
                503,
                "placement_unavailable",
            ),
        ];
        for (e, status, code) in cases {
            let api = ApiError::from(e);
            assert_eq!(api.status().as_u16(), status);
            assert_eq!(api.body().code, code);
        }
    }

    #[test]
    fn precondition_failed_names_the_current_etag() {
        let body = ApiError::PreconditionFailed {
            current: "\"abc\"".into(),
        }
        .body();
        assert_eq!(body.code, "precondition_failed");
        assert_eq!(body.details["etag"], "\"abc\"");
    }
}
