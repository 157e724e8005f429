//! `/metrics` over the REST socket: a scrape answers from the telemetry cache while every
//! vendor call hangs, and API requests are counted by route template, method and status.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod rest_common;

use std::time::Duration;

use agent::telemetry::{Poller, PollerSettings};
use rest_common::{A100, Rig};
use serde_json::json;

fn poller(rig: &Rig, interval: Duration) -> Poller {
    let settings = PollerSettings {
        interval,
        ..PollerSettings::default()
    };
    Poller::new(
        rig.service.engine().clone(),
        rig.service.telemetry_cache(),
        settings,
    )
}

fn gpu_util_rows(text: &str) -> usize {
    text.lines()
        .filter(|l| l.starts_with("DCGM_FI_DEV_GPU_UTIL{"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_answers_from_the_cache_while_every_vendor_call_hangs() {
    let rig = Rig::start("dgx-a100").await;
    let mut first = poller(&rig, Duration::from_millis(100));
    let first = tokio::task::spawn_blocking(move || {
        first.poll_once();
        first
    })
    .await
    .unwrap();
    drop(first);
    // Every NVML call now takes 10 s, longer than the engine's vendor timeout.
    rig.sim
        .inject_fault("nvml:*=hang:10000".parse().unwrap())
        .unwrap();
    // The poller keeps polling (and waiting on NVML) in the background.
    let _running = poller(&rig, Duration::from_millis(100)).spawn().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..3 {
        let scrape = tokio::time::timeout(Duration::from_secs(2), rig.get("/metrics"))
            .await
            .expect("the scrape waited on the vendor library");
        assert_eq!(scrape.status, 200);
        let text = scrape.text();
        // The last snapshot: taken before the hang, every GPU's device gauges in it.
        assert_eq!(gpu_util_rows(&text), 8, "{text}");
        assert!(text.contains(&format!(
            "vgpud_telemetry_age_seconds{{pci_bus_id=\"{A100}\"}}"
        )));
        assert!(text.trim_end().ends_with("# EOF"));
        // Only the first poll has finished: the running one is waiting on NVML.
        assert!(
            text.contains("vgpud_telemetry_poll_duration_seconds_count 1\n"),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_requests_are_counted_by_route_template_method_and_status() {
    let rig = Rig::start("dgx-a100").await;
    let a = rig
        .post(
            "/v1/allocations",
            json!({"consumer": "m", "request": {"type": "1g.10gb"}}),
        )
        .await;
    assert_eq!(a.status, 201, "{}", a.text());
    let id = a.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(rig.get(&format!("/v1/allocations/{id}")).await.status, 200);
    let missing = "00000000-0000-4000-8000-000000000000";
    assert_eq!(
        rig.get(&format!("/v1/allocations/{missing}")).await.status,
        404
    );
    assert_eq!(rig.get("/v2/nowhere").await.status, 404);
    let text = rig.get("/metrics").await.text();
    let count = |route: &str, method: &str, status: &str| -> Option<f64> {
        let want = format!(
            "vgpud_api_requests_total{{front_end=\"rest\",route=\"{route}\",method=\"{method}\",status=\"{status}\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&want))
            .map(|v| v.parse().unwrap())
    };
    assert_eq!(count("/v1/allocations", "POST", "201"), Some(1.0), "{text}");
    // One series for every id: the template, not the path.
    assert_eq!(
        count("/v1/allocations/{id}", "GET", "200"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        count("/v1/allocations/{id}", "GET", "404"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(count("unmatched", "GET", "404"), Some(1.0), "{text}");
    assert!(!text.contains(&id), "a path with an id became a label");
    assert!(text.contains("vgpud_api_request_duration_seconds_count{route=\"/v1/allocations\"} 1"));
}
