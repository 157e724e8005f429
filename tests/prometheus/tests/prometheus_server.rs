//! Prometheus peer tests: a real Prometheus server scrapes the daemon on a simulated DGX A100
//! with the shipped scrape job and alert rules; device, slice, capacity and business series are
//! read back through its HTTP API, the rules evaluate without error and go pending on real
//! failures (the daemon stopping, Xids), and every query of the Grafana dashboard returns data.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_peer::daemon::{self, Daemon};
use prometheus_peer::server::{self, Prometheus};
use prometheus_peer::{dashboard, peer};

/// The daemon with slices and an allocation, a server that has scraped it, then traffic, and a
/// scrape after the traffic (so rates over the last seconds see it).
fn scraped_daemon() -> Option<(Daemon, Prometheus, Vec<String>)> {
    let binary = peer::find("prometheus")?;
    let (d, mut notes) = Daemon::start().unwrap();
    d.populate().unwrap();
    let p = Prometheus::start(&binary, d.metrics_port).unwrap();
    p.wait_scraped_after(0.0).unwrap();
    d.traffic(&mut notes).unwrap();
    // Two scrape intervals after the traffic: the rate windows hold samples before and after it.
    let after = now() + 2.0 * server::SCRAPE_INTERVAL_S as f64;
    p.wait_scraped_after(after).unwrap();
    Some((d, p, notes))
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A check of a query's result: what it should be and whether it is.
struct Check {
    what: &'static str,
    query: String,
    want: &'static str,
    ok: fn(&[serde_json::Value]) -> bool,
}

fn check(
    what: &'static str,
    query: impl Into<String>,
    want: &'static str,
    ok: fn(&[serde_json::Value]) -> bool,
) -> Check {
    Check {
        what,
        query: query.into(),
        want,
        ok,
    }
}

#[test]
fn prometheus_scrapes_the_daemon_and_reads_back_device_slice_capacity_and_business_series() {
    let Some((d, p, notes)) = scraped_daemon() else {
        return;
    };
    let checks = [
        // The scrape itself.
        check("target up", r#"up{job="vgpud"}"#, "1", |r| {
            server::sum(r) == 1.0
        }),
        check(
            "scrape samples",
            r#"scrape_samples_scraped{job="vgpud"}"#,
            "> 0",
            |r| server::sum(r) > 0.0,
        ),
        // GPUs, slices by state, allocations held: the first metrics served.
        check("GPUs", "vgpud_gpus", "8", |r| server::sum(r) == 8.0),
        check(
            "allocated slices",
            r#"sum(vgpud_slices{state="allocated"})"#,
            "≥ 3",
            |r| server::sum(r) >= 3.0,
        ),
        check("allocations held", "vgpud_allocations", "≥ 2", |r| {
            server::sum(r) >= 2.0
        }),
        // Device series with dcgm-exporter's names, one per GPU.
        check(
            "device utilisation",
            r#"count(DCGM_FI_DEV_GPU_UTIL{gpu!="", UUID=~"GPU-.+", pci_bus_id!="", modelName!=""})"#,
            "8 GPUs",
            |r| server::sum(r) == daemon::GPUS as f64,
        ),
        check(
            "device names and hosts",
            r#"count(DCGM_FI_DEV_GPU_TEMP{device=~"nvidia[0-7]", Hostname!=""})"#,
            "8 GPUs",
            |r| server::sum(r) == daemon::GPUS as f64,
        ),
        check(
            "device framebuffer",
            r#"count(DCGM_FI_DEV_FB_FREE{GPU_I_ID=""})"#,
            "8 GPUs",
            |r| server::sum(r) == daemon::GPUS as f64,
        ),
        // dcgm's MIG-instance series: the VM's two 3g.40gb GPU instances.
        check(
            "MIG instance framebuffer",
            r#"count(DCGM_FI_DEV_FB_USED{GPU_I_PROFILE="3g.40gb", GPU_I_ID!=""})"#,
            "≥ 2",
            |r| server::sum(r) >= 2.0,
        ),
        check(
            "device temperature",
            "count(DCGM_FI_DEV_GPU_TEMP)",
            "8 GPUs",
            |r| server::sum(r) == daemon::GPUS as f64,
        ),
        check(
            "device power",
            "count(DCGM_FI_DEV_POWER_USAGE)",
            "8 GPUs",
            |r| server::sum(r) == daemon::GPUS as f64,
        ),
        check("GPU info", "count(vgpud_gpu_info)", "8 GPUs", |r| {
            server::sum(r) == daemon::GPUS as f64
        }),
        check(
            "GPU health state set",
            r#"count(vgpud_gpu_health{state="ok"} == 1)"#,
            "8 GPUs ok",
            |r| server::sum(r) == daemon::GPUS as f64,
        ),
        // Xid 13 is the application's fault: counted, shown as dcgm's last Xid, no quarantine.
        check(
            "application Xid counted",
            format!(
                r#"sum(vgpud_gpu_xid_events_total{{pci_bus_id="{}", xid="13", action="ignore"}})"#,
                daemon::XID_GPU
            ),
            "1",
            |r| server::sum(r) == 1.0,
        ),
        check(
            "dcgm's last Xid",
            format!(
                r#"DCGM_FI_DEV_XID_ERRORS{{pci_bus_id="{}"}}"#,
                daemon::XID_GPU
            ),
            "13",
            |r| server::sum(r) == 13.0,
        ),
        check(
            "no GPU quarantined",
            "sum(vgpud_gpu_quarantined)",
            "0",
            |r| !r.is_empty() && server::sum(r) == 0.0,
        ),
        // The slice/VM join: the VM's two slices name it and their consumer.
        check(
            "slices of the VM",
            format!(
                r#"count(vgpud_slice_info{{vm_name="{}", consumer="{}", type="3g.40gb", UUID=~"GPU-.+"}})"#,
                daemon::VM_NAME,
                daemon::VM_CONSUMER
            ),
            "2",
            |r| server::sum(r) == 2.0,
        ),
        check(
            "slices of the VM's allocation",
            r#"count(vgpud_slice_info{state="allocated", allocation!="", backend="mig", pci_bus_id!=""})"#,
            "≥ 2",
            |r| server::sum(r) >= 2.0,
        ),
        check(
            "framebuffer of the VM's slices (join)",
            format!(
                r#"count(vgpud_slice_framebuffer_used_bytes * on (instance, slice) group_left (vm_name) vgpud_slice_info{{vm_name="{}"}})"#,
                daemon::VM_NAME
            ),
            "2",
            |r| server::sum(r) == 2.0,
        ),
        // Capacity: slices by type, ready 1g.10gb slices are free, more 3g.40gb fit on the
        // empty GPUs.
        check(
            "slices by type",
            r#"sum(vgpud_slices{type="3g.40gb", state="allocated"})"#,
            "2",
            |r| server::sum(r) == 2.0,
        ),
        check(
            "free slices",
            "sum(vgpud_capacity_free_slices)",
            "≥ 1",
            |r| server::sum(r) >= 1.0,
        ),
        check(
            "creatable 3g.40gb",
            r#"sum(vgpud_capacity_creatable_slices{type="3g.40gb"})"#,
            "> 0",
            |r| server::sum(r) > 0.0,
        ),
        check(
            "fragmentation per GPU",
            "count(vgpud_gpu_fragmentation_ratio)",
            "8 GPUs",
            |r| server::sum(r) == daemon::GPUS as f64,
        ),
        // Business: the allocations made, the refused one and its reason, the latency histogram.
        check(
            "allocations ok",
            r#"sum(vgpud_allocation_requests_total{outcome="ok"})"#,
            "≥ 2",
            |r| server::sum(r) >= 2.0,
        ),
        check(
            "allocations refused for capacity",
            r#"sum(vgpud_allocation_requests_total{outcome="failed", reason="no_capacity"})"#,
            "≥ 1",
            |r| server::sum(r) >= 1.0,
        ),
        check(
            "allocation latency observations",
            "sum(vgpud_allocation_duration_seconds_count)",
            "≥ 2",
            |r| server::sum(r) >= 2.0,
        ),
        check(
            "slice-seconds of the VM's consumer",
            format!(
                r#"sum(vgpud_consumer_slice_seconds_total{{consumer="{}"}})"#,
                daemon::VM_CONSUMER
            ),
            "> 0",
            |r| server::sum(r) > 0.0,
        ),
        // The agent.
        check(
            "process RSS",
            "process_resident_memory_bytes",
            "> 1 MiB",
            |r| server::sum(r) > 1048576.0,
        ),
    ];
    let failed: Vec<String> = checks
        .iter()
        .filter_map(|c| {
            let got = p.query(&c.query);
            match &got {
                Ok(r) if (c.ok)(r) => None,
                _ => Some(format!(
                    "  {}: `{}` wanted {}, got {}",
                    c.what,
                    c.query,
                    c.want,
                    match got {
                        Ok(r) => serde_json::Value::from(r).to_string(),
                        Err(e) => e.to_string(),
                    }
                )),
            }
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} read-backs failed:\n{}\nset-up notes: {notes:?}\ndaemon log:\n{}",
        failed.len(),
        checks.len(),
        failed.join("\n"),
        d.log()
    );
}

#[test]
fn the_shipped_alert_rules_evaluate_without_error_on_the_daemons_series() {
    let Some((_d, p, _)) = scraped_daemon() else {
        return;
    };
    // A rule evaluated at least once after the traffic (evaluation interval: 1 s).
    std::thread::sleep(std::time::Duration::from_secs(
        2 * server::SCRAPE_INTERVAL_S,
    ));
    let body = p.api("/api/v1/rules").unwrap();
    let rules: Vec<&serde_json::Value> = body["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    assert_eq!(rules.len(), 6, "{body}");
    let bad: Vec<String> = rules
        .iter()
        .filter(|r| r["health"] != "ok")
        .map(|r| format!("{}: {} {}", r["name"], r["health"], r["lastError"]))
        .collect();
    assert!(
        bad.is_empty(),
        "rules failing on real series:\n{}",
        bad.join("\n")
    );
    // A healthy simulated host raises none of them.
    let firing: Vec<String> = rules
        .iter()
        .filter(|r| r["state"] != "inactive")
        .map(|r| format!("{} {}", r["name"], r["state"]))
        .collect();
    assert!(firing.is_empty(), "alerts on a healthy host: {firing:?}");
}

/// Both kinds of host a dashboard watches: the DGX with MIG slices (and the traffic), and a
/// VDI host whose mdev vGPU runs a guest (slice utilisation exists only there), in one job.
fn two_scraped_daemons() -> Option<(Daemon, Daemon, Prometheus, Vec<String>)> {
    let binary = peer::find("prometheus")?;
    let (d, mut notes) = Daemon::start().unwrap();
    d.populate().unwrap();
    let (vdi, more) = Daemon::start_on("vdi-mixed").unwrap();
    notes.extend(more);
    vdi.populate_running_vgpu().unwrap();
    let p = Prometheus::start_scraping(&binary, &[d.metrics_port, vdi.metrics_port]).unwrap();
    p.wait_scraped_after(0.0).unwrap();
    d.traffic(&mut notes).unwrap();
    let after = now() + 2.0 * server::SCRAPE_INTERVAL_S as f64;
    p.wait_scraped_after(after).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while p
        .query(r#"count(up{job="vgpud"} == 1) == 2"#)
        .map_or(true, |r| r.is_empty())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "both daemons were not up in Prometheus within 20 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    Some((d, vdi, p, notes))
}

#[test]
fn every_grafana_dashboard_query_returns_data() {
    let Some((d, vdi, p, notes)) = two_scraped_daemons() else {
        return;
    };
    let board = dashboard::load().unwrap();
    let mut failed = Vec::new();
    let mut values = BTreeMap::new();
    for v in dashboard::variables(&board) {
        let resolved = dashboard::resolve(&p, &v, &values);
        let found = match resolved {
            Ok(found) if !found.is_empty() => dashboard::as_regex(&found),
            other => {
                failed.push(format!("  variable ${}: `{}` → {other:?}", v.name, v.query));
                // Match anything, so the queries using it are still judged on their own.
                ".+".to_owned()
            }
        };
        values.insert(v.name, found);
    }
    let queries = dashboard::queries(&board);
    for q in &queries {
        let expr = dashboard::substitute(&q.expr, &values);
        match p.query(&expr) {
            Ok(r) if !r.is_empty() => {}
            Ok(_) => failed.push(format!("  {}: `{expr}` → no data", q.panel)),
            Err(e) => failed.push(format!("  {}: `{expr}` → {e}", q.panel)),
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} dashboard queries returned no data:\n{}\nset-up notes: {notes:?}\ndaemon log:\n{}\nVDI daemon log:\n{}",
        failed.len(),
        queries.len(),
        failed.join("\n"),
        d.log(),
        vdi.log()
    );
}

/// The shipped rules match the series the shipped scrape job really makes: when the daemon
/// stops, `VgpudScrapeFailing` goes pending for its target (it fires only after its `for:`).
#[test]
fn the_scrape_failing_alert_goes_pending_when_the_daemon_stops() {
    let Some((mut d, p, _)) = scraped_daemon() else {
        return;
    };
    let before = p
        .query(r#"ALERTS{alertname="VgpudScrapeFailing"}"#)
        .unwrap();
    assert!(
        before.is_empty(),
        "pending while the daemon runs: {before:?}"
    );
    d.kill();
    let target = format!(r#"instance="127.0.0.1:{}", job="vgpud""#, d.metrics_port);
    let alerts = p.wait_alert("VgpudScrapeFailing", &target).unwrap();
    assert_eq!(alerts[0]["metric"]["severity"], "critical", "{alerts:?}");
}

/// The health alerts on the daemon's own series: a fatal Xid (79, fallen off the bus)
/// quarantines its GPU and puts `VgpudGpuQuarantined` pending for it; a burst of application
/// Xids (13) on another GPU puts `VgpudXidStorm` pending there, and quarantines nothing.
#[test]
fn xids_put_the_quarantine_and_xid_storm_alerts_pending() {
    let Some((d, p, _)) = scraped_daemon() else {
        return;
    };
    const FATAL: &str = "0000:b7:00.0";
    d.xid(FATAL, 79).unwrap();
    for _ in 0..12 {
        d.xid(daemon::XID_GPU, 13).unwrap();
    }
    let quarantined = p
        .wait_alert("VgpudGpuQuarantined", &format!(r#"pci_bus_id="{FATAL}""#))
        .unwrap();
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    let storm = p
        .wait_alert(
            "VgpudXidStorm",
            &format!(r#"pci_bus_id="{}""#, daemon::XID_GPU),
        )
        .unwrap();
    assert_eq!(storm.len(), 1, "{storm:?}");
    let others = p
        .query(&format!(
            r#"ALERTS{{alertname="VgpudGpuQuarantined", pci_bus_id!="{FATAL}"}}"#
        ))
        .unwrap();
    assert!(others.is_empty(), "Xid 13 quarantined: {others:?}");
}

/// `VgpudCapacityExhausted` on the daemon's own capacity series: eight 7g.80gb slices fill
/// every GPU, so 7g.80gb has nothing free and nothing creatable and the alert goes pending for
/// it; the other MIG types cannot be made either, but the layout has none of them, and they
/// raise nothing.
#[test]
fn the_capacity_alert_goes_pending_for_a_type_that_ran_out() {
    let Some(binary) = peer::find("prometheus") else {
        return;
    };
    let (d, _) = Daemon::start().unwrap();
    d.post_expect(
        "/v1/allocations",
        &serde_json::json!({"consumer": "tenant-full",
                            "request": {"type": "7g.80gb", "count": daemon::GPUS}}),
        201,
    )
    .unwrap();
    let p = Prometheus::start(&binary, d.metrics_port).unwrap();
    p.wait_scraped_after(0.0).unwrap();
    let alerts = p
        .wait_alert("VgpudCapacityExhausted", r#"type="7g.80gb", backend="mig""#)
        .unwrap();
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    // A few more evaluations: no other type joins it.
    std::thread::sleep(std::time::Duration::from_secs(
        3 * server::SCRAPE_INTERVAL_S,
    ));
    let all = p
        .query(r#"ALERTS{alertname="VgpudCapacityExhausted"}"#)
        .unwrap();
    let types: Vec<&serde_json::Value> = all.iter().map(|a| &a["metric"]["type"]).collect();
    assert_eq!(types, ["7g.80gb"], "{all:?}");
}
