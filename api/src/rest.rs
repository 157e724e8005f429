//! The REST API, versioned under `/v1`, for the IaaS control plane.
//!
//! [`router`] builds every route over [`Service`]; each handler translates the wire form, calls
//! one service method on the blocking pool (`spawn_blocking`: the service touches sysfs, vendor
//! libraries and the disk) and translates the answer. The routes carry no policy of their own.
//!
//! Authentication belongs to the listeners ([`serve_unix`], [`serve_tls`]): they identify the
//! caller (peer credentials of the unix socket; a client certificate or bearer token over TLS)
//! and attach a [`Caller`] to each request. The router refuses every mutating request that
//! arrives without one, so a router served some other way is read-only unless its server says
//! who is calling.
//!
//! Long operations (a layout apply) answer `202 Accepted` with an operation to poll at
//! `/v1/operations/{id}`. The operations table lives in memory in this layer: it is lost on
//! restart, which is fine because the outcome itself (the layout status) is kept by the engine.

mod auth;
mod body;
mod conn_limits;
mod extract;
mod head;
mod health;
mod import;
mod metrics;
mod openapi;
mod operations;
mod placement;
mod request_metrics;
mod routes;
mod serve;
mod tls;
mod unix;

use std::sync::Arc;

use agent::service::Service;
use axum::Router;

pub use auth::{Caller, Credentials, TokenFile, reload_token_files, subject_matches};
pub use conn_limits::ConnLimits;
pub use metrics::metrics_router;
pub use openapi::{OPENAPI_PATH, openapi, openapi_json};
pub use tls::{TlsOptions, serve_tls, serve_tls_listener, serve_tls_listener_limited};
pub use unix::{serve_unix, serve_unix_limited};

/// Options of the REST router.
#[derive(Debug, Clone)]
pub struct RestOptions {
    /// Largest request body accepted, bytes.
    pub max_body_bytes: usize,
}

impl Default for RestOptions {
    fn default() -> Self {
        Self {
            max_body_bytes: 1 << 20,
        }
    }
}

/// What every handler shares.
#[derive(Debug, Clone)]
struct AppState {
    service: Service,
    options: RestOptions,
    operations: Arc<operations::Operations>,
}

/// The REST router over a service: `/v1/...`, `/healthz`, `/metrics`.
pub fn router(service: Service, options: RestOptions) -> Router {
    routes::build(AppState {
        service,
        options,
        operations: Arc::new(operations::Operations::default()),
    })
}
