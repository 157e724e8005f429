//! Every REST route over a real unix socket, on simulated hosts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod rest_common;

use std::time::Duration;

use api::rest::{self, RestOptions};
use http_body_util::BodyExt;
use rest_common::{A100, Rig, T4};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_and_gpus() {
    let rig = Rig::start("dgx-a100").await;
    let health = rig.get("/healthz").await;
    assert_eq!(health.status, 200);
    assert_eq!(health.text(), "ok\n");

    let host = rig.get("/v1/host").await;
    assert_eq!(host.status, 200);
    let host = host.json();
    let inventory = serde_json::to_value(rig.service.host()).unwrap();
    assert_eq!(host["hostname"], inventory["hostname"]);
    assert_eq!(
        host["gpus"], inventory["gpus"],
        "GET /v1/host is `vgpud inventory --json`"
    );
    assert!(!host["numa_nodes"].as_array().unwrap().is_empty());

    let gpus = rig.get("/v1/gpus").await.json();
    assert_eq!(gpus.as_array().unwrap().len(), 8);
    let gpu = rig.get(&format!("/v1/gpus/{A100}")).await;
    assert_eq!(gpu.status, 200);
    let gpu = gpu.json();
    assert_eq!(gpu["pci_address"], A100);
    assert_eq!(gpu["health"], "ok", "{gpu}");
    let capacity = gpu["capacity"].as_array().unwrap();
    let small = capacity.iter().find(|c| c["type"] == "1g.10gb").unwrap();
    assert_eq!(small["creatable"], 7, "{gpu}");
    assert_eq!(small["backend"], "mig");

    let score = rig
        .post(
            "/v1/placement-score",
            json!({"type": "3g.40gb", "count": 2}),
        )
        .await;
    assert_eq!(score.status, 200, "{}", score.text());
    let score = score.json();
    assert_eq!(score["feasible"], true, "{score}");
    assert_eq!(score["placements"].as_array().unwrap().len(), 2, "{score}");
    let impossible = rig
        .post(
            "/v1/placement-score",
            json!({"type": "7g.80gb", "count": 9}),
        )
        .await
        .json();
    assert_eq!(impossible["feasible"], false, "{impossible}");
    assert!(impossible["reason"].is_string());
    assert!(
        rig.get("/v1/slices")
            .await
            .json()
            .as_array()
            .unwrap()
            .is_empty(),
        "a dry run"
    );

    let missing = rig.get("/v1/gpus/0000:99:00.0").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.error_code(), "not_found");
    let sloppy = rig.get("/v1/gpus/7:0.0").await;
    assert_eq!(sloppy.status, 400);
    assert_eq!(sloppy.error_code(), "invalid_request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_lifecycle() {
    let rig = Rig::start("dgx-a100").await;
    assert_eq!(rig.get("/v1/slices").await.json(), json!([]));
    let made = rig
        .post(
            "/v1/slices",
            json!({"gpu": A100, "kind": {"backend": "mig", "profile": "1g.10gb", "start": 6}}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let slice = made.json();
    let id = slice["id"].as_str().unwrap().to_owned();
    assert_eq!(made.header("location").unwrap(), format!("/v1/slices/{id}"));
    assert_eq!(slice["state"], "ready");
    assert_eq!(slice["type"], "1g.10gb");
    assert_eq!(slice["backend"], "mig");
    assert_eq!(
        slice["kind"],
        json!({"backend": "mig", "profile": "1g.10gb", "start": 6})
    );
    assert!(slice["gpu_instance_id"].is_u64());

    let listed = rig.get("/v1/slices").await.json();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(rig.get(&format!("/v1/slices/{id}")).await.json(), slice);

    // The same placement again: occupied.
    let again = rig
        .post(
            "/v1/slices",
            json!({"gpu": A100, "kind": {"backend": "mig", "profile": "1g.10gb", "start": 6}}),
        )
        .await;
    assert_eq!(again.status, 409, "{}", again.text());
    assert_eq!(again.error_code(), "conflict");

    let gone = rig.delete(&format!("/v1/slices/{id}")).await;
    assert_eq!(gone.status, 204);
    assert!(gone.body.is_empty());
    let missing = rig.get(&format!("/v1/slices/{id}")).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.error_code(), "not_found");
    assert_eq!(rig.delete(&format!("/v1/slices/{id}")).await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_on_a_virtual_mdev_parent_are_named_by_the_parent() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/rig/rig-guest.toml");
    let profile = sim::Profile::load(&path).unwrap();
    let rig = Rig::start_profile(profile, RestOptions::default()).await;
    let made = rig
        .post(
            "/v1/slices",
            json!({"gpu": "mtty", "kind": {"backend": "mdev", "type_id": "mtty-2"}}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let slice = made.json();
    assert_eq!(slice["gpu"], "mtty");
    let uuid = slice["mdev_uuid"].as_str().unwrap().to_owned();
    assert!(rig.sim.sysfs().exists(std::path::Path::new(&format!(
        "/sys/bus/mdev/devices/{uuid}"
    ))));
    // A parent that is not there, and names that are neither a PCI address nor a parent name:
    // refused, nothing made.
    let absent = rig
        .post(
            "/v1/slices",
            json!({"gpu": "nosuch", "kind": {"backend": "mdev", "type_id": "mtty-2"}}),
        )
        .await;
    assert_eq!(absent.status, 404, "{}", absent.text());
    for bad in ["../mtty", ".hidden", "mt ty", "0000:07:00.0x", ""] {
        let r = rig
            .post(
                "/v1/slices",
                json!({"gpu": bad, "kind": {"backend": "mdev", "type_id": "mtty-2"}}),
            )
            .await;
        assert_eq!(r.status, 422, "{bad:?}: {}", r.text());
    }
    assert_eq!(
        rig.get("/v1/slices").await.json().as_array().unwrap().len(),
        1
    );
    let id = slice["id"].as_str().unwrap();
    assert_eq!(rig.delete(&format!("/v1/slices/{id}")).await.status, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mig_backed_vgpu_takes_its_gpu_instance_at_the_start_asked() {
    const H200: &str = "0000:18:00.0";
    let rig = Rig::start("hgx-h200").await;
    rig.sim.set_mig_mode(H200.parse().unwrap(), true).unwrap();
    let creatable = |gpu: &serde_json::Value, t: &str| {
        gpu["capacity"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .unwrap_or_else(|| panic!("{t} not offered: {gpu}"))["creatable"]
            .as_u64()
            .unwrap()
    };
    let before = rig.get(&format!("/v1/gpus/{H200}")).await.json();
    assert_eq!(creatable(&before, "NVIDIA H200X-1-18C"), 7, "{before}");
    let kind = json!({"backend": "nvidia-vfio", "vgpu_type": 1414, "start": 3});
    let made = rig
        .post("/v1/slices", json!({"gpu": H200, "kind": kind}))
        .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let slice = made.json();
    assert_eq!(slice["kind"], kind);
    assert!(slice["gpu_instance_id"].is_u64(), "{slice}");
    let after = rig.get(&format!("/v1/gpus/{H200}")).await.json();
    assert_eq!(creatable(&after, "NVIDIA H200X-1-18C"), 6, "{after}");
    let out_of_range = rig
        .post(
            "/v1/slices",
            json!({"gpu": H200, "kind": {"backend": "nvidia-vfio", "vgpu_type": 1414, "start": 8}}),
        )
        .await;
    assert_eq!(out_of_range.status, 422, "{}", out_of_range.text());
    let taken = rig
        .post("/v1/slices", json!({"gpu": H200, "kind": kind}))
        .await;
    assert_eq!(taken.status, 409, "{}", taken.text());
    assert_eq!(
        rig.get("/v1/slices").await.json().as_array().unwrap().len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocations_with_idempotency() {
    let rig = Rig::start("dgx-a100").await;
    let body = json!({"consumer": "nova", "vm": "vm-1", "request": {"type": "3g.40gb", "count": 2, "gpu": A100}});
    let key = [
        ("content-type", "application/json"),
        ("idempotency-key", "req-0001"),
    ];
    let first = rig
        .call(
            "POST",
            "/v1/allocations",
            &key,
            Some(serde_json::to_vec(&body).unwrap()),
        )
        .await;
    assert_eq!(first.status, 201, "{}", first.text());
    let alloc = first.json();
    let id = alloc["id"].as_str().unwrap().to_owned();
    assert_eq!(
        first.header("location").unwrap(),
        format!("/v1/allocations/{id}")
    );
    assert_eq!(alloc["consumer"], "nova");
    assert_eq!(alloc["vm"], "vm-1");
    let slices = alloc["slices"].as_array().unwrap();
    assert_eq!(slices.len(), 2);
    for s in slices {
        assert_eq!(s["gpu"], A100);
        assert_eq!(s["type"], "3g.40gb");
        assert!(s["numa_node"].is_u64(), "{s}");
        assert!(s["id"].is_string());
    }

    // The retry returns the same allocation, not a second one.
    let retry = rig
        .call(
            "POST",
            "/v1/allocations",
            &key,
            Some(serde_json::to_vec(&body).unwrap()),
        )
        .await;
    assert!(retry.status.is_success(), "{}", retry.text());
    assert_eq!(retry.json()["id"], alloc["id"]);
    assert_eq!(
        rig.get("/v1/allocations")
            .await
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // The slices show who holds them.
    let held = rig.get("/v1/slices").await.json();
    assert!(
        held.as_array()
            .unwrap()
            .iter()
            .all(|s| s["state"] == "allocated" && s["allocation"] == alloc["id"])
    );

    // A third 3g.40gb does not fit next to two on the A100 (7 compute slices).
    let full = rig
        .post(
            "/v1/allocations",
            json!({"consumer": "c2", "request": {"type": "3g.40gb", "gpu": A100}}),
        )
        .await;
    assert_eq!(full.status, 409, "{}", full.text());
    assert_eq!(full.error_code(), "no_capacity");

    let one = rig.get(&format!("/v1/allocations/{id}")).await;
    assert_eq!(one.status, 200);
    assert_eq!(one.json(), alloc);
    assert_eq!(
        rig.delete(&format!("/v1/allocations/{id}")).await.status,
        204
    );
    assert_eq!(rig.get(&format!("/v1/allocations/{id}")).await.status, 404);
    let freed = rig.get("/v1/slices").await.json();
    assert!(
        freed
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["state"] == "ready")
    );

    let unknown_type = rig
        .post(
            "/v1/allocations",
            json!({"consumer": "c", "request": {"type": "9g.999gb"}}),
        )
        .await;
    assert_eq!(unknown_type.status, 422);
    assert_eq!(unknown_type.error_code(), "invalid_request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mdev_allocation_carries_its_uuid() {
    let rig = Rig::start("vdi-mixed").await;
    let made = rig
        .post(
            "/v1/allocations",
            json!({"consumer": "vdi", "request": {"type": "nvidia-222", "gpu": T4}}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let s = &made.json()["slices"][0];
    assert_eq!(s["backend"], "mdev");
    let uuid = s["mdev_uuid"].as_str().unwrap();
    assert_eq!(uuid.len(), 36);
}

async fn wait_operation(rig: &Rig, location: &str) -> serde_json::Value {
    for _ in 0..500 {
        let op = rig.get(location).await.json();
        if op["state"] != "running" {
            return op;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("operation {location} did not finish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layouts_are_applied_through_operations_with_etags() {
    let rig = Rig::start("dgx-a100").await;
    let before = rig.get("/v1/layouts").await;
    assert_eq!(before.status, 200);
    let etag = before.header("etag").unwrap();
    assert_eq!(before.json()["etag"], etag.as_str());
    assert_eq!(before.json()["layouts"], json!([]));

    let layouts = json!({"layouts": [{"name": "small", "selector": {"addresses": [A100]}, "slices": [{"type": "1g.10gb", "count": 7}]}]});
    let body = serde_json::to_vec(&layouts).unwrap();
    let stale = rig
        .call(
            "PUT",
            "/v1/layouts",
            &[
                ("content-type", "application/json"),
                ("if-match", "\"0000\""),
            ],
            Some(body.clone()),
        )
        .await;
    assert_eq!(stale.status, 412);
    assert_eq!(stale.error_code(), "precondition_failed");
    assert_eq!(stale.json()["details"]["etag"], etag.as_str());

    let accepted = rig
        .call(
            "PUT",
            "/v1/layouts",
            &[("content-type", "application/json"), ("if-match", &etag)],
            Some(body),
        )
        .await;
    assert_eq!(accepted.status, 202, "{}", accepted.text());
    let location = accepted.header("location").unwrap();
    assert_eq!(accepted.json()["kind"], "layout_apply");
    let op = wait_operation(&rig, &location).await;
    assert_eq!(op["state"], "succeeded", "{op}");
    assert_eq!(op["result"]["status"][0]["state"], "applied", "{op}");

    let after = rig.get("/v1/layouts").await;
    assert_ne!(after.header("etag").unwrap(), etag);
    assert_eq!(after.json()["layouts"][0]["name"], "small");
    assert_eq!(
        rig.get("/v1/slices").await.json().as_array().unwrap().len(),
        7
    );

    // A layout naming a type the GPU does not offer, or two layouts selecting one GPU, is
    // refused before any operation starts (the engine's checks), changing nothing.
    let bad = json!({"layouts": [{"name": "bad", "slices": [{"type": "nvidia-999", "count": 1}]}]});
    let twice = json!({"layouts": [
        {"name": "a", "selector": {"addresses": [A100]}, "slices": []},
        {"name": "b", "selector": {"addresses": [A100]}, "slices": []}]});
    for body in [bad, twice] {
        let refused = rig.send_json("PUT", "/v1/layouts", &body).await;
        assert_eq!(refused.status, 422, "{}", refused.text());
        assert_eq!(refused.error_code(), "invalid_request");
        assert!(refused.header("location").is_none());
    }
    // The slot for applies is free again: no operation was left running.
    let again = json!({"layouts": [{"name": "small", "selector": {"addresses": [A100]}, "slices": [{"type": "1g.10gb", "count": 7}]}]});
    let accepted = rig.send_json("PUT", "/v1/layouts", &again).await;
    assert_eq!(accepted.status, 202, "{}", accepted.text());
    wait_operation(&rig, &accepted.header("location").unwrap()).await;
    assert_eq!(
        rig.get("/v1/layouts").await.json()["layouts"][0]["name"],
        "small"
    );

    let nope = rig
        .get("/v1/operations/6f1c1a52-8d3e-4b9a-9d7e-1f2a3b4c5d6e")
        .await;
    assert_eq!(nope.status, 404);
    assert_eq!(nope.error_code(), "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stream_as_server_sent_events() {
    let rig = Rig::start("dgx-a100").await;
    let stream = tokio::net::UnixStream::connect(&rig.socket).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get("/v1/events")
        .header("host", "vgpud")
        .body(http_body_util::Empty::<hyper::body::Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();

    let made = rig
        .post(
            "/v1/allocations",
            json!({"consumer": "ev", "request": {"type": "1g.10gb"}}),
        )
        .await;
    assert_eq!(made.status, 201);
    let id = made.json()["id"].as_str().unwrap().to_owned();

    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains("event: allocation_created") {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .expect("no allocation_created event within 10 s")
            .unwrap()
            .unwrap();
        if let Ok(data) = frame.into_data() {
            seen.push_str(&String::from_utf8_lossy(&data));
        }
    }
    assert!(seen.contains("event: slice_created"), "{seen}");
    let line = seen
        .lines()
        .skip_while(|l| *l != "event: allocation_created")
        .nth(1)
        .unwrap();
    let data: serde_json::Value =
        serde_json::from_str(line.strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(data["event"], "allocation_created");
    assert_eq!(data["allocation"], id.as_str());
    assert_eq!(data["consumer"], "ev");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_openapi_and_unknown_routes() {
    let rig = Rig::start("dgx-a100").await;
    rig.post(
        "/v1/allocations",
        json!({"consumer": "m", "request": {"type": "1g.10gb"}}),
    )
    .await;
    // The daemon's poller fills the cache on its interval; here one poll, at once.
    let service = rig.service.clone();
    tokio::task::spawn_blocking(move || {
        agent::telemetry::Poller::new(
            service.engine().clone(),
            service.telemetry_cache(),
            agent::telemetry::PollerSettings::default(),
        )
        .poll_once()
    })
    .await
    .unwrap();
    let metrics = rig.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    assert_eq!(
        metrics.headers["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = metrics.text();
    assert!(
        text.lines().any(|l| l
            .starts_with("vgpud_slices{type=\"1g.10gb\",backend=\"mig\",state=\"allocated\",")
            && l.ends_with("} 1")),
        "{text}"
    );
    assert!(text.contains("vgpud_allocations 1"), "{text}");
    assert!(text.contains("vgpud_gpus 8"), "{text}");
    assert!(text.trim_end().ends_with("# EOF"), "{text}");

    let doc = rig.get("/v1/openapi.json").await;
    assert_eq!(doc.status, 200);
    assert_eq!(doc.json()["openapi"], "3.1.0");
    assert_eq!(doc.json()["info"]["title"], "vgpud");

    let nowhere = rig.get("/v2/host").await;
    assert_eq!(nowhere.status, 404);
    assert_eq!(nowhere.error_code(), "not_found");
    let patch = rig.call("PATCH", "/v1/slices", &[], None).await;
    assert_eq!(patch.status, 405);
    assert_eq!(patch.error_code(), "method_not_allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_has_its_mode_and_is_removed_on_shutdown() {
    use std::os::unix::fs::PermissionsExt;
    let mut rig = Rig::start("single-gpu").await;
    let mode = std::fs::metadata(&rig.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    rig.stop().await;
    assert!(!rig.socket.exists());
}

/// A router served without a listener that identifies callers is read-only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutations_need_an_identified_caller() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (_sim, service) = testkit::service_async("dgx-a100", state).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = rest::router(service.clone(), RestOptions::default());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let read = rest_common::send(tcp, "GET", "/v1/slices", &[], None).await;
    assert_eq!(read.status, 200);
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body =
        serde_json::to_vec(&json!({"consumer": "x", "request": {"type": "1g.10gb"}})).unwrap();
    let write = rest_common::send(
        tcp,
        "POST",
        "/v1/allocations",
        &[("content-type", "application/json")],
        Some(body),
    )
    .await;
    assert_eq!(write.status, 401);
    assert_eq!(write.error_code(), "unauthenticated");
    assert!(service.allocations().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placement_consumer_is_checked_as_a_uuid_and_comes_back_in_the_answer() {
    let rig = Rig::start("dgx-a100").await;
    for bad in [
        json!("not-a-uuid"),
        json!("6f3b9a3e2c4d4e5f8a9b0c1d2e3f4a5b"),
        json!("00000000-0000-0000-0000-000000000000"),
        json!(""),
    ] {
        let r = rig
            .post(
                "/v1/allocations",
                json!({"consumer": "nova", "placement_consumer": bad, "request": {"type": "1g.10gb"}}),
            )
            .await;
        assert_eq!(r.status, 422, "{bad}: {}", r.text());
        assert_eq!(r.error_code(), "invalid_request");
        assert!(
            r.json()["message"]
                .as_str()
                .unwrap()
                .starts_with("placement_consumer: "),
            "{}",
            r.text()
        );
    }
    let wrong_type = rig
        .post(
            "/v1/allocations",
            json!({"consumer": "nova", "placement_consumer": 7, "request": {"type": "1g.10gb"}}),
        )
        .await;
    assert_eq!(wrong_type.status, 422, "{}", wrong_type.text());
    assert!(
        rig.get("/v1/allocations")
            .await
            .json()
            .as_array()
            .unwrap()
            .is_empty()
    );

    // Any case in, Placement's lower-case spelling out, and kept.
    let made = rig
        .post(
            "/v1/allocations",
            json!({"consumer": "nova", "placement_consumer": "6F3B9A3E-2C4D-4E5F-8A9B-0C1D2E3F4A5B",
                   "request": {"type": "1g.10gb"}}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let alloc = made.json();
    assert_eq!(
        alloc["placement_consumer"],
        "6f3b9a3e-2c4d-4e5f-8a9b-0c1d2e3f4a5b"
    );
    let id = alloc["id"].as_str().unwrap();
    assert_eq!(
        rig.get(&format!("/v1/allocations/{id}")).await.json(),
        alloc
    );
    // Without one, the field is absent.
    let plain = rig
        .post(
            "/v1/allocations",
            json!({"consumer": "nova", "request": {"type": "1g.10gb"}}),
        )
        .await;
    assert_eq!(plain.status, 201, "{}", plain.text());
    assert!(
        plain.json().get("placement_consumer").is_none(),
        "{}",
        plain.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demand_mix_learns_from_allocations_not_from_dry_runs() {
    let rig = Rig::start("dgx-a100").await;
    let score = rig
        .post("/v1/placement-score", json!({"type": "3g.40gb"}))
        .await;
    assert_eq!(score.status, 200, "{}", score.text());
    let empty = rig.get("/v1/demand-mix").await;
    assert_eq!(empty.status, 200, "{}", empty.text());
    let empty = empty.json();
    assert_eq!(
        empty["requests_seen"], 0,
        "a dry run is not a request: {empty}"
    );
    assert_eq!(empty["prior_share"], 1.0);
    let body = json!({"consumer": "nova", "request": {"type": "3g.40gb", "count": 2, "vcpus": 4}});
    let made = rig.post("/v1/allocations", body).await;
    assert_eq!(made.status, 201, "{}", made.text());
    let mix = rig.get("/v1/demand-mix").await.json();
    assert_eq!(mix["requests_seen"], 1, "{mix}");
    // One request against a prior worth 20: its shape (2 slices, 4 vCPUs) holds 1/21.
    let learnt = mix["shapes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["slice"] == "mig:3g.40gb" && s["count"] == 2)
        .expect("the request's shape");
    assert_eq!(learnt["cpu_milli"], 4000, "{mix}");
    assert!(
        (learnt["share"].as_f64().unwrap() - 1.0 / 21.0).abs() < 1e-9,
        "{mix}"
    );
    let shares: f64 = mix["shapes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["share"].as_f64().unwrap())
        .sum();
    assert!((shares - 1.0).abs() < 1e-9, "{mix}");
}
