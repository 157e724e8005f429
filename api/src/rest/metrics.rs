//! `/metrics` in the OpenMetrics text format, and the unauthenticated router that serves it with
//! `/healthz` on a listener of its own. The agent renders the text (`agent::metrics`); this only
//! serves it.

use std::sync::Arc;

use agent::metrics::render::CONTENT_TYPE;
use agent::service::Service;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Router, middleware};

use super::extract::json_errors;
use super::{AppState, RestOptions};
use crate::error::ApiError;

/// `/healthz` and `/metrics` without authentication, for a separate (loopback or scrape-only)
/// listener. Nothing here changes state.
pub fn metrics_router(service: Service) -> Router {
    let counters = service.engine().metrics().clone();
    Router::new()
        .route("/healthz", get(super::routes::healthz))
        .route("/metrics", get(metrics))
        .layer(middleware::map_response(json_errors))
        .layer(middleware::from_fn_with_state(
            counters,
            super::request_metrics::count,
        ))
        .with_state(AppState {
            service,
            options: RestOptions::default(),
            operations: Arc::new(super::operations::Operations::default()),
        })
}

/// Metrics in the OpenMetrics text format.
///
/// Rendered from the telemetry cache: a scrape never waits on the vendor library or the engine.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text", body = String)))]
pub(super) async fn metrics(State(st): State<AppState>) -> Result<Response, ApiError> {
    let text = st
        .service
        .metrics_text()
        .map_err(|e| ApiError::Internal(format!("encoding metrics: {e}")))?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response())
}
