//! The REST API, versioned under `/v1`.

use agent::service::Service;
use axum::Router;
use axum::routing::get;

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

/// The REST router over a service.
pub fn router(service: Service, options: RestOptions) -> Router {
    let _ = options;
    Router::new()
        .route("/healthz", get(healthz))
        .with_state(service)
}

async fn healthz() -> &'static str {
    "ok\n"
}
