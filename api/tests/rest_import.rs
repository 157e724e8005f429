//! `POST /v1/layouts/import` over the unix socket: a mig-parted config's dry run and apply on
//! the simulated DGX A100, mdevctl definitions on the VDI host, and the refusals (JSON error
//! shape, nothing changed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod rest_common;

use rest_common::{Rig, T4};
use serde_json::json;

const MIG_PARTED: &str = include_str!("../../tests/fixtures/mig-parted-config.yaml");

fn mig_parted(config: &str, dry_run: bool) -> serde_json::Value {
    json!({"format": "mig-parted", "config": config, "content": MIG_PARTED, "dry_run": dry_run})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_shows_the_diff_then_the_apply_makes_it() {
    let rig = Rig::start("dgx-a100").await;
    let before = rig.snapshot().await;
    let dry = rig
        .post("/v1/layouts/import", mig_parted("all-balanced", true))
        .await;
    assert_eq!(dry.status, 200, "{}", dry.text());
    let plan = dry.json();
    assert_eq!(plan["dry_run"], true);
    assert_eq!(plan["format"], "mig-parted");
    assert_eq!(plan["layouts"]["added"].as_array().unwrap().len(), 4);
    let gpus = plan["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 8);
    for g in gpus {
        assert_eq!(g["layout"], "all-balanced#1", "{g}");
        assert_eq!(
            g["create"],
            json!([{"type": "1g.10gb", "count": 2}, {"type": "2g.20gb", "count": 1}, {"type": "3g.40gb", "count": 1}])
        );
    }
    assert!(plan.get("result").is_none(), "{plan}");
    assert_eq!(rig.snapshot().await, before, "a dry run changes nothing");

    let applied = rig
        .post("/v1/layouts/import", mig_parted("all-balanced", false))
        .await;
    assert_eq!(applied.status, 200, "{}", applied.text());
    let outcome = applied.json();
    let status = outcome["result"]["status"].as_array().unwrap();
    assert!(status.iter().all(|s| s["state"] == "applied"), "{outcome}");
    let host = rig.get("/v1/host").await.json();
    for g in host["gpus"].as_array().unwrap() {
        let mut p: Vec<&str> = g["mig"]["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["profile"].as_str().unwrap())
            .collect();
        p.sort();
        assert_eq!(
            p,
            ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"],
            "{}",
            g["pci_address"]
        );
    }
    // The layouts are what GET /v1/layouts serves, with an ETag as after a PUT.
    let layouts = rig.get("/v1/layouts").await;
    assert_eq!(layouts.json()["layouts"].as_array().unwrap().len(), 4);

    // Importing another config: its layouts replace these, the diff says so.
    let next = rig
        .post("/v1/layouts/import", mig_parted("all-disabled", true))
        .await
        .json();
    assert_eq!(next["layouts"]["removed"].as_array().unwrap().len(), 4);
    let first = &next["gpus"][0];
    assert_eq!(first["mig"], false, "{first}");
    assert_eq!(first["destroy"].as_array().unwrap().len(), 4, "{first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_keep_the_error_shape_and_change_nothing() {
    let rig = Rig::start("dgx-a100").await;
    let before = rig.snapshot().await;
    let cases = [
        (
            mig_parted("nope", true),
            404,
            "not_found",
            "all-1g.10gb, all-1g.5gb",
        ),
        (
            json!({"format": "mig-parted", "content": MIG_PARTED}),
            422,
            "invalid_request",
            "name one of",
        ),
        (
            json!({"format": "mig-parted", "config": "a", "content": "version: v1\nmig-configs:\n  a: [\n"}),
            422,
            "invalid_request",
            "line",
        ),
        (
            json!({"format": "mig-parted", "content": "#".repeat(300 * 1024)}),
            422,
            "invalid_request",
            "at most 262144",
        ),
        (
            mig_parted("all-1g.5gb", false),
            422,
            "invalid_request",
            "1g.5gb",
        ),
        (
            json!({"format": "mig-parted", "content": MIG_PARTED, "path": "/etc/passwd"}),
            422,
            "invalid_request",
            "unknown field",
        ),
        (
            json!({"format": "mdevctl", "definitions": [{"parent": "../../etc", "uuid": "b1c7a1d2-0000-4000-8000-000000000001", "content": "{}"}]}),
            422,
            "invalid_request",
            "parent",
        ),
    ];
    for (body, status, code, text) in cases {
        let r = rig.post("/v1/layouts/import", body.clone()).await;
        assert_eq!(r.status, status, "{body}: {}", r.text());
        assert_eq!(r.error_code(), code, "{body}");
        assert!(r.text().contains(text), "{body}: {}", r.text());
    }
    let huge = json!({"format": "mig-parted", "content": "#".repeat(2 << 20)});
    let r = rig.post("/v1/layouts/import", huge).await;
    assert_eq!(r.status, 413);
    assert_eq!(r.error_code(), "payload_too_large");
    assert_eq!(rig.snapshot().await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mdevctl_definitions_become_owned_slices() {
    let rig = Rig::start("vdi-mixed").await;
    let uuid = "b1c7a1d2-0000-4000-8000-000000000001";
    let body = |dry_run: bool| {
        json!({"format": "mdevctl", "dry_run": dry_run, "definitions": [
            {"parent": T4, "uuid": uuid, "content": r#"{"mdev_type": "nvidia-222", "start": "auto", "attrs": []}"#},
            {"parent": T4, "uuid": "b1c7a1d2-0000-4000-8000-000000000002", "content": "not json"}]})
    };
    let dry = rig.post("/v1/layouts/import", body(true)).await;
    assert_eq!(dry.status, 200, "{}", dry.text());
    let plan = dry.json();
    assert_eq!(plan["definitions"][0]["action"], "create", "{plan}");
    assert_eq!(plan["definitions"][0]["type"], "nvidia-222");
    assert_eq!(plan["definitions"][1]["action"], "skip");
    assert!(plan.get("layouts").is_none(), "{plan}");
    assert_eq!(rig.get("/v1/slices").await.json(), json!([]));

    let applied = rig.post("/v1/layouts/import", body(false)).await.json();
    assert_eq!(
        applied["report"]["created"].as_array().unwrap().len(),
        1,
        "{applied}"
    );
    assert_eq!(applied["report"]["skipped"].as_array().unwrap().len(), 1);
    let slices = rig.get("/v1/slices").await.json();
    assert_eq!(slices[0]["mdev_uuid"], uuid, "{slices}");
    assert_eq!(slices[0]["gpu"], T4);
}
