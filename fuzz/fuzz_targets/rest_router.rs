//! REST routing: arbitrary requests (method, path, headers, body) through the real axum router
//! over a service on a simulated host, as a caller on the unix socket would send them.
//!
//! Checks: nothing panics; no answer is a 5xx (the host is healthy, so a 5xx is a bug); every
//! 4xx answer is the documented JSON error (`{"code": …}`, `application/json`); a refused
//! request changes nothing the API shows. Requests that succeed and change state are undone
//! (allocations released, slices destroyed) so every input meets the same host. Layout changes
//! are sent without a caller (refused): applying one reshapes the host in the background.
#![no_main]

use std::sync::OnceLock;

use api::rest::{Caller, RestOptions};
use arbitrary::Arbitrary;
use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, header};
use http_body_util::BodyExt;
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;
use vgpud_fuzz::host;

const PROFILE: &str = "vdi-mixed";

/// Paths the fuzzer starts from; it appends and mutates.
const PATHS: &[&str] = &[
    "/v1/host",
    "/v1/gpus",
    "/v1/gpus/0000:41:00.0",
    "/v1/slices",
    "/v1/slices/",
    "/v1/allocations",
    "/v1/allocations/",
    "/v1/placement-score",
    "/v1/layouts",
    "/v1/layouts/import",
    "/v1/operations/",
    "/healthz",
    "/metrics",
    "/v1/openapi.json",
    "",
];

const METHODS: &[Method] = &[
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::HEAD,
    Method::PATCH,
    Method::OPTIONS,
];

const HEADERS: &[&str] = &[
    "content-type",
    "idempotency-key",
    "if-match",
    "content-length",
    "accept",
    "transfer-encoding",
];

#[derive(Arbitrary, Debug)]
struct Input {
    method: u8,
    path: u8,
    suffix: String,
    query: Option<String>,
    headers: Vec<(u8, String)>,
    json: bool,
    caller: bool,
    body: Vec<u8>,
}

struct Harness {
    runtime: tokio::runtime::Runtime,
    router: Router,
}

fn harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let service = host::shared(PROFILE).service.clone();
        // A small body limit keeps each run short; the limit's own answer is covered too.
        let options = RestOptions {
            max_body_bytes: 64 * 1024,
        };
        let router = api::rest::router(service, options);
        Harness { runtime, router }
    })
}

/// The request, or `None` when the parts do not make one (axum never sees those).
fn request(input: &Input) -> Option<Request<Body>> {
    let method = METHODS[usize::from(input.method) % METHODS.len()].clone();
    let mut uri = format!(
        "{}{}",
        PATHS[usize::from(input.path) % PATHS.len()],
        input.suffix
    );
    if let Some(q) = &input.query {
        uri = format!("{uri}?{q}");
    }
    let layouts = uri.starts_with("/v1/layouts") && method != Method::GET;
    let mut req = Request::builder().method(method).uri(uri);
    if input.json {
        req = req.header(header::CONTENT_TYPE, "application/json");
    }
    for (name, value) in input.headers.iter().take(8) {
        req = req.header(HEADERS[usize::from(*name) % HEADERS.len()], value.as_str());
    }
    let mut req = req.body(Body::from(input.body.clone())).ok()?;
    if input.caller && !layouts {
        req.extensions_mut().insert(Caller::Unix {
            uid: 0,
            gid: 0,
            pid: Some(1),
        });
    }
    Some(req)
}

fuzz_target!(|input: Input| {
    let h = harness();
    let Some(req) = request(&input) else {
        return;
    };
    // A HEAD answer has no body to check.
    let head = req.method() == Method::HEAD;
    let host = host::shared(PROFILE);
    let before = host.snapshot();
    let (status, content_type, body) = h.runtime.block_on(async {
        let response = h.router.clone().oneshot(req).await.expect("infallible");
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap_or("").to_owned())
            .unwrap_or_default();
        // The event stream never ends; its head is all there is to check.
        let body = if content_type.starts_with("text/event-stream") {
            Vec::new()
        } else {
            let collected = response.into_body().collect().await;
            collected.map(|c| c.to_bytes().to_vec()).unwrap_or_default()
        };
        (status, content_type, body)
    });
    let shown = String::from_utf8_lossy(&body);
    assert!(!status.is_server_error(), "{status} for {input:?}: {shown}");
    if status.is_client_error() {
        assert_eq!(
            before,
            host.snapshot(),
            "a refused request ({status}) changed state"
        );
        if head {
            return;
        }
        assert!(
            content_type.starts_with("application/json"),
            "{status} answered as {content_type:?}: {shown}"
        );
        let error: serde_json::Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("{status} body is not JSON ({e}): {shown}"));
        assert!(
            error["code"].is_string(),
            "{status} without a code: {shown}"
        );
    } else if before != host.snapshot() {
        host.reset();
        assert_eq!(before, host.snapshot(), "the reset left something behind");
    }
});
