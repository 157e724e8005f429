//! `/metrics` as the agent renders it on the simulated DGX A100: dcgm-exporter's device names
//! and labels (MIG instances included), the slice info join, capacity, and the business and
//! agent counters moving after allocations, a refused one, a reconcile and failing vendor calls.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use agent::engine::{NumaPolicy, SliceState};
use agent::metrics::failure_reason;
use agent::service::Service;
use agent::telemetry::{Poller, PollerSettings};
use testkit::*;

const A100: &str = "0000:07:00.0";

fn poller(s: &Service) -> Poller {
    Poller::new(
        s.engine().clone(),
        s.telemetry_cache(),
        PollerSettings::default(),
    )
}

/// Polls once, as the daemon's poller does, and renders.
fn scrape(s: &Service) -> String {
    poller(s).poll_once();
    s.metrics_text().unwrap()
}

/// The sample lines of metric `name` (exactly that name, with labels or none).
fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .collect()
}

/// The samples of `name` whose labels include every pair of `labels`.
fn matching<'a>(text: &'a str, name: &str, labels: &[(&str, &str)]) -> Vec<&'a str> {
    samples(text, name)
        .into_iter()
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .collect()
}

/// The value of the one sample of `name` whose labels include every pair of `labels`.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let found = matching(text, name, labels);
    assert!(found.len() <= 1, "{name} {labels:?} matches {found:?}");
    found.first()?.rsplit(' ').next()?.parse().ok()
}

#[test]
fn device_series_carry_dcgm_names_and_labels_with_mig_instances() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, s) = service("dgx-a100", dir.path());
    let a = s.allocate(request("m", "1g.10gb", Some(A100))).unwrap();
    let slice = s.slice(a.slices[0]).unwrap();
    let gi = slice.handles.gpu_instance_id.unwrap().to_string();
    let inv = s.host();
    let text = scrape(&s);
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    for (i, g) in inv.gpus.iter().enumerate() {
        let labels = [
            ("gpu", i.to_string()),
            ("UUID", g.uuid.clone().unwrap()),
            ("pci_bus_id", g.pci_address.to_string()),
            ("device", format!("nvidia{i}")),
            ("modelName", g.model.clone()),
            ("Hostname", inv.hostname.clone()),
        ];
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        for name in [
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_MEM_COPY_UTIL",
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "DCGM_FI_DEV_SM_CLOCK",
            "DCGM_FI_DEV_MEM_CLOCK",
        ] {
            assert_eq!(matching(&text, name, &labels).len(), 1, "{name} of GPU {i}");
        }
        assert_eq!(
            value(&text, "DCGM_FI_DEV_PCIE_LINK_GEN", &labels),
            Some(4.0)
        );
        assert_eq!(
            value(&text, "DCGM_FI_DEV_PCIE_LINK_WIDTH", &labels),
            Some(16.0)
        );
        // The device rows are the ones without MIG labels.
        let device_row = |name| {
            matching(&text, name, &labels)
                .into_iter()
                .find(|l| !l.contains("GPU_I_ID"))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap()
        };
        let total = device_row("DCGM_FI_DEV_FB_USED") + device_row("DCGM_FI_DEV_FB_FREE");
        assert_eq!(total, g.memory_mib.unwrap() as f64, "GPU {i}");
        let watts = value(&text, "DCGM_FI_DEV_POWER_USAGE", &labels).unwrap();
        assert!(watts > 0.0 && watts <= 500.0, "{watts} W");
    }
    // The MIG instance has its own framebuffer rows, as dcgm-exporter labels them.
    let mig = [
        ("gpu", "0"),
        ("pci_bus_id", A100),
        ("GPU_I_PROFILE", "1g.10gb"),
        ("GPU_I_ID", gi.as_str()),
    ];
    let used = value(&text, "DCGM_FI_DEV_FB_USED", &mig).unwrap();
    let free = value(&text, "DCGM_FI_DEV_FB_FREE", &mig).unwrap();
    assert!(
        used > 0.0 && used + free > 9000.0 && used + free <= 10240.0,
        "{used} + {free}"
    );
    assert_eq!(
        samples(&text, "DCGM_FI_DEV_FB_USED")
            .iter()
            .filter(|l| l.contains("GPU_I_ID"))
            .count(),
        1
    );
}

#[test]
fn slice_info_joins_slice_gpu_vm_and_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, s) = service("dgx-a100", dir.path());
    let mut req = vm_request("tenant-a", "vm-a", "3g.40gb", NumaPolicy::None);
    req.request.gpu = Some(A100.parse().unwrap());
    let a = s.allocate(req).unwrap();
    let slice = s.slice(a.slices[0]).unwrap();
    let uuid = s
        .host()
        .gpus
        .iter()
        .find(|g| g.pci_address.to_string() == A100)
        .and_then(|g| g.uuid.clone())
        .unwrap();
    let text = scrape(&s);
    let id = slice.id.to_string();
    let alloc = a.id.to_string();
    let gi = format!("gi{}", slice.handles.gpu_instance_id.unwrap());
    let info = [
        ("slice", id.as_str()),
        ("handle", gi.as_str()),
        ("backend", "mig"),
        ("type", "3g.40gb"),
        ("pci_bus_id", A100),
        ("UUID", uuid.as_str()),
        ("vm_name", "vm-a"),
        ("vm_uuid", ""),
        ("consumer", "tenant-a"),
        ("allocation", alloc.as_str()),
        ("state", "allocated"),
    ];
    assert_eq!(value(&text, "vgpud_slice_info", &info), Some(1.0), "{text}");
    // The same GPU UUID labels the device series: a PromQL join on UUID works.
    assert_eq!(
        matching(
            &text,
            "DCGM_FI_DEV_GPU_UTIL",
            &[("UUID", &uuid), ("pci_bus_id", A100)]
        )
        .len(),
        1
    );
    // Its MIG device memory is the slice's framebuffer.
    let fb = value(
        &text,
        "vgpud_slice_framebuffer_used_bytes",
        &[("slice", &id), ("UUID", &uuid)],
    );
    assert!(fb.is_some_and(|b| b > 0.0), "{fb:?}");
    assert_eq!(
        value(
            &text,
            "vgpud_slices",
            &[
                ("type", "3g.40gb"),
                ("state", "allocated"),
                ("pci_bus_id", A100)
            ]
        ),
        Some(1.0)
    );

    // Released, the slice stays owned and free: no VM, no consumer.
    s.release(a.id).unwrap();
    let after = scrape(&s);
    let kept = s.slices().into_iter().find(|x| x.id == slice.id);
    if kept.is_some_and(|k| k.state == SliceState::Ready) {
        let free = [
            ("slice", id.as_str()),
            ("consumer", ""),
            ("vm_name", ""),
            ("state", "ready"),
        ];
        assert_eq!(
            value(&after, "vgpud_slice_info", &free),
            Some(1.0),
            "{after}"
        );
    } else {
        assert!(matching(&after, "vgpud_slice_info", &[("slice", &id)]).is_empty());
    }
    assert!(matching(&after, "vgpud_slice_info", &[("consumer", "tenant-a")]).is_empty());
}

#[test]
fn business_counters_move_after_an_allocation_and_a_refused_one() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, s) = service("dgx-a100", dir.path());
    let before = scrape(&s);
    assert_eq!(
        value(
            &before,
            "vgpud_allocation_requests_total",
            &[("outcome", "ok")]
        ),
        None
    );
    s.allocate(request("m", "1g.10gb", None)).unwrap();
    let refused = s.allocate(request("m", "no-such-type", None)).unwrap_err();
    let reason = failure_reason(&refused);
    assert_eq!(reason, "invalid", "{refused}");
    let mut p = poller(&s);
    p.poll_once();
    std::thread::sleep(std::time::Duration::from_millis(50));
    p.poll_once();
    let text = s.metrics_text().unwrap();
    let ok = [("outcome", "ok"), ("reason", "")];
    assert_eq!(
        value(&text, "vgpud_allocation_requests_total", &ok),
        Some(1.0)
    );
    let failed = [("outcome", "failed"), ("reason", reason)];
    assert_eq!(
        value(&text, "vgpud_allocation_requests_total", &failed),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            "vgpud_allocation_duration_seconds_count",
            &[("backend", "mig")]
        ),
        Some(1.0)
    );
    // Both requests reached the engine.
    assert_eq!(
        value(&text, "vgpud_allocation_wait_seconds_count", &[]),
        Some(2.0)
    );
    let held = value(
        &text,
        "vgpud_consumer_slice_seconds_total",
        &[("consumer", "m")],
    );
    assert!(held.is_some_and(|h| h >= 0.05), "{held:?}");
    assert_eq!(value(&text, "vgpud_allocations", &[]), Some(1.0));
    // Every GPU's telemetry went through the timed vendor calls, and was counted there.
    let calls = value(
        &text,
        "vgpud_vendor_call_duration_seconds_count",
        &[("call", "nvmlDeviceGetUtilizationRates")],
    );
    assert!(calls.is_some_and(|n| n >= 16.0), "{calls:?}");
    assert!(value(&text, "vgpud_telemetry_poll_duration_seconds_count", &[]) >= Some(3.0));

    s.reconcile().unwrap();
    let text = s.metrics_text().unwrap();
    assert_eq!(
        value(&text, "vgpud_reconcile_runs_total", &[("outcome", "ok")]),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "vgpud_reconcile_duration_seconds_count", &[]),
        Some(1.0)
    );
}

#[test]
fn a_gpu_whose_telemetry_fails_drops_out_of_the_device_gauges_and_counts_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (sim, s) = service("dgx-a100", dir.path());
    let mut p = poller(&s);
    p.poll_once();
    fault(
        &sim,
        &format!("nvml:nvmlDeviceGetUtilizationRates@{A100}=GPU_IS_LOST"),
    );
    p.poll_once();
    let text = s.metrics_text().unwrap();
    let here = [("pci_bus_id", A100)];
    assert!(
        matching(&text, "DCGM_FI_DEV_GPU_UTIL", &here).is_empty(),
        "{text}"
    );
    assert!(matching(&text, "DCGM_FI_DEV_FB_USED", &here).is_empty());
    // The other GPUs still report.
    assert_eq!(samples(&text, "DCGM_FI_DEV_GPU_UTIL").len(), 7);
    assert_eq!(
        value(&text, "vgpud_telemetry_errors_total", &here),
        Some(1.0)
    );
    let lost = [("call", "nvmlDeviceGetUtilizationRates"), ("code", "15")];
    assert!(value(&text, "vgpud_vendor_call_errors_total", &lost) >= Some(1.0));
    let state = [("pci_bus_id", A100), ("state", "unresponsive")];
    assert_eq!(value(&text, "vgpud_gpu_health", &state), Some(1.0));
    // Its last good reading is older than the others' and keeps ageing.
    let age = value(&text, "vgpud_telemetry_age_seconds", &here).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let later = s.metrics_text().unwrap();
    assert!(value(&later, "vgpud_telemetry_age_seconds", &here).unwrap() > age);
}

/// A poller with its idle rule set to `threshold` (0..1) and `window`.
fn idle_poller(s: &Service, threshold: f64, window: std::time::Duration) -> Poller {
    let settings = PollerSettings {
        idle_threshold: threshold,
        idle_window: window,
        ..PollerSettings::default()
    };
    Poller::new(s.engine().clone(), s.telemetry_cache(), settings)
}

#[test]
fn a_running_vgpu_reports_its_framebuffer_utilisation_and_idleness() {
    const T4: &str = "0000:41:00.0";
    let dir = tempfile::tempdir().unwrap();
    let (sim, s) = service("vdi-mixed", dir.path());
    let a = s.allocate(request("desk", "nvidia-222", Some(T4))).unwrap();
    let slice = s.slice(a.slices[0]).unwrap();
    let id = slice.id.to_string();
    let here = [("slice", id.as_str()), ("pci_bus_id", T4)];
    // No VM runs on it yet: NVML lists no active vGPU, so there is no usage to report.
    let text = scrape(&s);
    assert_eq!(value(&text, "vgpud_slice_info", &here), Some(1.0));
    assert!(matching(&text, "vgpud_slice_framebuffer_used_bytes", &here).is_empty());
    assert!(matching(&text, "vgpud_slice_utilization_ratio", &here).is_empty());

    sim.set_vfio_open(slice.handles.mdev_uuid.unwrap(), true)
        .unwrap();
    let window = std::time::Duration::from_millis(30);
    // Everything is under a 100 % threshold: idle once the window has passed.
    let mut p = idle_poller(&s, 1.0, window);
    p.poll_once();
    let text = s.metrics_text().unwrap();
    let fb = value(&text, "vgpud_slice_framebuffer_used_bytes", &here).unwrap();
    // A T4-1B has 1 GiB: its guest uses part of it.
    assert!(fb > 0.0 && fb <= f64::from(1u32 << 30), "{fb}");
    let util = value(&text, "vgpud_slice_utilization_ratio", &here).unwrap();
    assert!((0.0..=1.0).contains(&util), "{util}");
    // A consumer holding slices has a row from the start: none idle yet.
    assert_eq!(
        value(&text, "vgpud_slices_idle", &[("consumer", "desk")]),
        Some(0.0)
    );
    std::thread::sleep(window * 2);
    p.poll_once();
    let text = s.metrics_text().unwrap();
    assert_eq!(
        value(&text, "vgpud_slices_idle", &[("consumer", "desk")]),
        Some(1.0)
    );

    // Nothing is under a 0 % threshold.
    let mut busy = idle_poller(&s, 0.0, window);
    busy.poll_once();
    std::thread::sleep(window * 2);
    busy.poll_once();
    let text = s.metrics_text().unwrap();
    // A consumer holding slices has a row from the start: none idle yet.
    assert_eq!(
        value(&text, "vgpud_slices_idle", &[("consumer", "desk")]),
        Some(0.0)
    );
}

#[test]
fn xids_memory_errors_and_quarantine_reach_the_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let (sim, s) = service("dgx-a100", dir.path());
    let poll = |s: &Service| {
        Poller::new(
            s.engine().clone(),
            s.telemetry_cache(),
            PollerSettings::default(),
        )
        .with_health(s.health().clone())
        .poll_once();
        s.metrics_text().unwrap()
    };
    s.health().check();
    let here = [("pci_bus_id", A100)];
    let before = poll(&s);
    assert_eq!(value(&before, "DCGM_FI_DEV_XID_ERRORS", &here), Some(0.0));
    assert_eq!(value(&before, "vgpud_gpu_quarantined", &here), Some(0.0));

    // An application Xid is counted and named as dcgm's last Xid, and quarantines nothing.
    sim.inject_xid(addr(A100), 13).unwrap();
    s.health().wait_xid(1000);
    let text = poll(&s);
    assert_eq!(value(&text, "DCGM_FI_DEV_XID_ERRORS", &here), Some(13.0));
    let ignored = [("pci_bus_id", A100), ("xid", "13"), ("action", "ignore")];
    assert_eq!(
        value(&text, "vgpud_gpu_xid_events_total", &ignored),
        Some(1.0)
    );
    assert_eq!(value(&text, "vgpud_gpu_quarantined", &here), Some(0.0));

    // Xid 79 quarantines: the state set, the flag and the counter say so.
    sim.inject_xid(addr(A100), 79).unwrap();
    s.health().wait_xid(1000);
    let text = poll(&s);
    assert_eq!(value(&text, "DCGM_FI_DEV_XID_ERRORS", &here), Some(79.0));
    let q = [
        ("pci_bus_id", A100),
        ("xid", "79"),
        ("action", "quarantine"),
    ];
    assert_eq!(value(&text, "vgpud_gpu_xid_events_total", &q), Some(1.0));
    assert_eq!(value(&text, "vgpud_gpu_quarantined", &here), Some(1.0));
    let state = [("pci_bus_id", A100), ("state", "quarantined")];
    assert_eq!(value(&text, "vgpud_gpu_health", &state), Some(1.0));
    let ok = [("pci_bus_id", A100), ("state", "ok")];
    assert_eq!(value(&text, "vgpud_gpu_health", &ok), Some(0.0));

    // Memory-error counters the GPU reports appear with dcgm's names.
    let other = addr("0000:0f:00.0");
    let signals = gpu::HealthSignals {
        ecc_sbe_volatile: Some(4),
        ecc_dbe_volatile: Some(0),
        remapped_correctable: Some(2),
        remap_failure: Some(false),
        ..gpu::HealthSignals::default()
    };
    sim.set_health_signals(other, signals).unwrap();
    s.health().check();
    let text = poll(&s);
    let there = [("pci_bus_id", "0000:0f:00.0")];
    assert_eq!(
        value(&text, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", &there),
        Some(4.0)
    );
    assert_eq!(
        value(&text, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", &there),
        Some(2.0)
    );
    assert_eq!(
        value(&text, "DCGM_FI_DEV_ROW_REMAP_FAILURE", &there),
        Some(0.0)
    );
    // A counter the GPU does not report is absent, not 0.
    assert_eq!(value(&text, "DCGM_FI_DEV_RETIRED_SBE", &there), None);
}
