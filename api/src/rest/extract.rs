//! Extractors and response helpers that keep every failure in the JSON error shape.

use agent::engine::EngineError;
use axum::body::Body;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::AppState;
use crate::error::{ApiError, ErrorBody};

/// A JSON body whose rejections are [`ApiError`]s (415, 413, 400, 422).
pub(super) struct ApiJson<T>(pub T);

impl<T> FromRequest<AppState> for ApiJson<T>
where
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(r) => Err(match ApiError::from(r) {
                ApiError::PayloadTooLarge { .. } => ApiError::PayloadTooLarge {
                    limit: state.options.max_body_bytes,
                },
                e => e,
            }),
        }
    }
}

/// Runs a blocking service call on the blocking pool.
pub(super) async fn blocking<T, F>(f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, EngineError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(format!("the service call did not complete: {e}")))?
        .map_err(ApiError::from)
}

/// Runs a blocking service call that cannot fail.
pub(super) async fn blocking_ok<T, F>(f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    blocking(move || Ok(f())).await
}

/// Gives every error response the JSON shape, whoever produced it (axum's own 405, a body-limit
/// rejection from a layer, a timeout): clients parse one format.
pub(super) async fn json_errors(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let message = String::from_utf8_lossy(&text).trim().to_owned();
    let code = match status.as_u16() {
        400 => "invalid_request",
        401 => "unauthenticated",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        408 => "timeout",
        413 => "payload_too_large",
        415 => "unsupported_media_type",
        422 => "invalid_request",
        s if s >= 500 => "internal",
        _ => "invalid_request",
    };
    let body = ErrorBody {
        code: code.to_owned(),
        message: if message.is_empty() {
            status.canonical_reason().unwrap_or("error").to_owned()
        } else {
            message
        },
        details: serde_json::Map::new(),
    };
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(bytes)).into_response()
}
