//! The committed OpenAPI document (`api/openapi.json`) is the one the code serves.
//! Regenerate it with `VGPUD_UPDATE_OPENAPI=1 cargo test -p api --test rest_openapi`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod rest_common;

use std::path::Path;

#[test]
fn committed_document_matches_the_code() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    let generated = api::rest::openapi_json();
    if std::env::var_os("VGPUD_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "api/openapi.json differs from the document the code serves; regenerate it with \
         VGPUD_UPDATE_OPENAPI=1 cargo test -p api --test rest_openapi"
    );
    let doc: serde_json::Value = serde_json::from_str(&generated).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    for path in [
        "/v1/host",
        "/v1/gpus",
        "/v1/gpus/{id}",
        "/v1/slices",
        "/v1/slices/{id}",
        "/v1/allocations",
        "/v1/allocations/{id}",
        "/v1/layouts",
        "/v1/placement-score",
        "/v1/demand-mix",
        "/v1/events",
        "/v1/operations/{id}",
        "/healthz",
        "/metrics",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} is documented");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_document_is_the_committed_one() {
    let rig = rest_common::Rig::start("single-gpu").await;
    let served = rig.get("/v1/openapi.json").await;
    assert_eq!(served.status, 200);
    assert_eq!(served.text(), api::rest::openapi_json());
}
