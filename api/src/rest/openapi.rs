//! The OpenAPI 3.1 document: built from the routes' annotations, served at
//! `/v1/openapi.json`, and committed as `api/openapi.json` (a test fails when the two differ).

use std::sync::Arc;

use axum::Extension;
use axum::http::header;
use axum::response::IntoResponse;
use utoipa::OpenApi;
use utoipa::openapi::OpenApi as Document_;

/// Where the document is served.
pub const OPENAPI_PATH: &str = "/v1/openapi.json";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "vgpud",
        description = "The vgpud node agent's REST API: the host's GPUs, their slices (MIG, mdev, \
vendor-VFIO vGPU, SR-IOV VFs, whole GPUs), allocations to consumers, declared layouts and events. \
Errors are JSON {code, message, details} with stable codes. Over TCP every request needs TLS and a \
client certificate or a bearer token; on the unix socket the socket's group decides.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    tags(
        (name = "host", description = "The host and its GPUs"),
        (name = "slices", description = "Slices vgpud owns"),
        (name = "allocations", description = "Slices held by consumers"),
        (name = "layouts", description = "Declared layouts and their apply operations"),
        (name = "events", description = "Server-Sent Events"),
        (name = "health", description = "Liveness and metrics"),
    ),
    components(schemas(crate::error::ErrorBody))
)]
struct ApiDoc;

/// The document's fixed parts (info, tags); the routes add their paths.
pub(super) fn base() -> Document_ {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    doc
}

/// The whole document.
pub fn openapi() -> Document_ {
    super::routes::documented().into_openapi()
}

/// The whole document as the JSON text served and committed.
pub fn openapi_json() -> String {
    render(&openapi())
}

pub(super) fn render(doc: &Document_) -> String {
    let mut text = doc
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    text.push('\n');
    text
}

/// The rendered document, shared by every request.
#[derive(Debug, Clone)]
pub(super) struct Document(pub Arc<String>);

/// This document (OpenAPI 3.1).
#[utoipa::path(get, path = "/v1/openapi.json", tag = "health",
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json", body = Object)))]
pub(super) async fn get_openapi(Extension(doc): Extension<Document>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        doc.0.as_ref().clone(),
    )
}
