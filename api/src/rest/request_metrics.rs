//! Counts every REST request in `vgpud_api_requests_total` and
//! `vgpud_api_request_duration_seconds`, by route template (axum's matched path, so
//! `/v1/slices/{id}` is one series whatever the id), method and final status.

use std::time::Instant;

use agent::metrics::Metrics;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

/// The route label of a request no route matched (a 404 or 405 from the fallback).
const UNMATCHED: &str = "unmatched";

/// Middleware: runs the request, then counts it.
pub(super) async fn count(State(metrics): State<Metrics>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED, MatchedPath::as_str)
        .to_owned();
    let method = req.method().as_str().to_owned();
    let started = Instant::now();
    let response = next.run(req).await;
    metrics.api_request(
        "rest",
        &route,
        &method,
        response.status().as_str(),
        started.elapsed(),
    );
    response
}
