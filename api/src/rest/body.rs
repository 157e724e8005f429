//! Each request's body, read whole under a deadline and a size limit before the router runs.
//!
//! A body that stalls answers `408` and closes the connection, instead of holding a blocking
//! handler or a connection for minutes; a declared length over the limit answers `413` before
//! anything is read. Bodies are small JSON documents (at most `max_body_bytes`), which every
//! handler buffers anyway, so reading them here costs nothing.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::Service;
use hyper_util::service::TowerToHyperService;

use super::conn_limits::ConnLimits;
use super::head::{self, Refusal};

/// Reads the body, attaches `peer` to the request and hands it to the router.
pub(super) async fn handle<P: Clone + Send + Sync + 'static>(
    router: TowerToHyperService<Router>,
    peer: P,
    limits: Arc<ConnLimits>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (mut parts, incoming) = req.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_body_bytes as u64) {
        return Ok(answer(head::too_large(limits.max_body_bytes)));
    }
    let body = match read(incoming, &limits).await {
        Ok(body) => body,
        Err(refusal) => return Ok(answer(refusal)),
    };
    parts.extensions.insert(peer);
    router.call(Request::from_parts(parts, body)).await
}

async fn read(incoming: Incoming, limits: &ConnLimits) -> Result<Body, Refusal> {
    if hyper::body::Body::is_end_stream(&incoming) {
        return Ok(Body::empty());
    }
    let collect = Limited::new(incoming, limits.max_body_bytes).collect();
    match tokio::time::timeout(limits.body_read_timeout, collect).await {
        Ok(Ok(collected)) => Ok(Body::from(collected.to_bytes())),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(head::too_large(limits.max_body_bytes))
        }
        Ok(Err(e)) => Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("the request body could not be read: {e}"),
        )),
        Err(_) => Err(Refusal::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            format!(
                "the request body did not arrive within {:?}",
                limits.body_read_timeout
            ),
        )),
    }
}

/// A refusal as a response that closes the connection: the rest of the body is never read.
fn answer(refusal: Refusal) -> Response<Body> {
    let json = serde_json::to_vec(&refusal.body).unwrap_or_default();
    let mut response = Response::new(Body::from(json));
    *response.status_mut() = refusal.status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}
