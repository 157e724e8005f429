//! `/metrics` in the Prometheus (OpenMetrics) text format, and the unauthenticated router that
//! serves it with `/healthz` on a listener of its own. The metrics issue extends the set; this
//! is the minimum: slices by state and backend, allocations, GPUs.

use std::sync::Arc;

use agent::service::Service;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Router, middleware};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::extract::{blocking_ok, json_errors};
use super::{AppState, RestOptions};
use crate::error::ApiError;

/// The OpenMetrics content type.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `/healthz` and `/metrics` without authentication, for a separate (loopback or scrape-only)
/// listener. Nothing here changes state.
pub fn metrics_router(service: Service) -> Router {
    Router::new()
        .route("/healthz", get(super::routes::healthz))
        .route("/metrics", get(metrics))
        .layer(middleware::map_response(json_errors))
        .with_state(AppState {
            service,
            options: RestOptions::default(),
            operations: Arc::new(super::operations::Operations::default()),
        })
}

/// Metrics in the OpenMetrics text format.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text", body = String)))]
pub(super) async fn metrics(State(st): State<AppState>) -> Result<Response, ApiError> {
    let service = st.service.clone();
    let (slices, allocations, gpus) = blocking_ok(move || {
        (
            service.slices(),
            service.allocations().len(),
            service.host().gpus.len(),
        )
    })
    .await?;
    let text = render(&slices, allocations, gpus)?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response())
}

fn render(
    slices: &[agent::engine::Slice],
    allocations: usize,
    gpus: usize,
) -> Result<String, ApiError> {
    let mut registry = Registry::with_prefix("vgpud");
    let by_state = Family::<Vec<(String, String)>, Gauge>::default();
    for s in slices {
        let state = serde_json::to_value(s.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        by_state
            .get_or_create(&vec![
                ("state".to_owned(), state),
                (
                    "backend".to_owned(),
                    s.spec.kind.backend().as_str().to_owned(),
                ),
            ])
            .inc();
    }
    registry.register(
        "slices",
        "Slices vgpud owns, by state and backend",
        by_state,
    );
    let alloc_gauge = Gauge::<i64>::default();
    alloc_gauge.set(i64::try_from(allocations).unwrap_or(i64::MAX));
    registry.register("allocations", "Allocations held by consumers", alloc_gauge);
    let gpu_gauge = Gauge::<i64>::default();
    gpu_gauge.set(i64::try_from(gpus).unwrap_or(i64::MAX));
    registry.register("gpus", "GPUs on the host", gpu_gauge);
    let mut out = String::new();
    encode(&mut out, &registry)
        .map_err(|e| ApiError::Internal(format!("encoding metrics: {e}")))?;
    Ok(out)
}
