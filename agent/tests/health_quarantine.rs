//! GPU health: Xids classified, quarantined GPUs refused with the reason, quarantine kept
//! across a restart, the probe's release, and the operator's quarantine left to the operator.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::time::Duration;

use agent::engine::{Event, GpuHealth};
use agent::health::HealthSettings;
use agent::health::classify::XidAction;
use agent::health::monitor::XidWait;
use agent::health::quarantine::{QuarantineSource, ReleaseHow};
use agent::health::recovery::ProbeOutcome;
use agent::health::view::HealthState;
use agent::service::{Service, ServiceOptions};
use testkit::*;

const GPU: &str = "0000:07:00.0";

fn settings(quiet_ms: u64) -> HealthSettings {
    HealthSettings {
        quiet_period: Duration::from_millis(quiet_ms),
        ..HealthSettings::default()
    }
}

fn service_with(h: &sim::SimHost, dir: &std::path::Path, health: HealthSettings) -> Service {
    let e = engine(h, dir);
    e.reconcile().unwrap();
    Service::with_options(
        e,
        ServiceOptions {
            health,
            ..ServiceOptions::default()
        },
    )
}

fn next_health_event(rx: &mut tokio::sync::broadcast::Receiver<Event>) -> Event {
    loop {
        match rx.try_recv().unwrap() {
            e @ (Event::GpuQuarantined { .. } | Event::GpuReleased { .. }) => return e,
            _ => continue,
        }
    }
}

#[test]
fn xid_79_quarantines_and_new_work_there_is_refused_with_the_reason() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let s = service_with(&h, dir.path(), settings(300_000));
    let mut events = s.subscribe();
    h.inject_xid(addr(GPU), 79).unwrap();
    assert_eq!(
        s.health().wait_xid(1000),
        XidWait::Event(Some(XidAction::Quarantine))
    );
    assert_eq!(
        next_health_event(&mut events),
        Event::GpuQuarantined {
            gpu: addr(GPU),
            reason: "Xid 79 (GPU has fallen off the bus)".into(),
            source: QuarantineSource::Auto,
        }
    );
    let refused = create(s.engine(), GPU, mig_kind("1g.10gb", None)).unwrap_err();
    assert_eq!(refused.code(), "quarantined");
    let msg = refused.to_string();
    assert!(
        msg.starts_with("GPU 0000:07:00.0 is quarantined since 20")
            && msg.ends_with("Z: Xid 79 (GPU has fallen off the bus)"),
        "{msg}"
    );
    let refused = s.allocate(request("t", "1g.10gb", Some(GPU))).unwrap_err();
    assert_eq!(refused.code(), "quarantined", "{refused}");
    assert!(refused.to_string().contains("Xid 79"), "{refused}");
    // Elsewhere, allocations go on: never on the quarantined GPU.
    for i in 0..8 {
        let a = s
            .allocate(request(&format!("c{i}"), "3g.40gb", None))
            .unwrap();
        for id in &a.slices {
            assert_ne!(s.slice(*id).unwrap().spec.gpu.to_string(), GPU);
        }
    }
    let d = s.gpu(addr(GPU)).unwrap();
    assert_eq!(d.health, GpuHealth::Quarantined);
    assert!(
        d.health_reasons[0].contains("Xid 79"),
        "{:?}",
        d.health_reasons
    );
    let view = s.health_view();
    let v = view.iter().find(|v| v.address == addr(GPU)).unwrap();
    assert_eq!(v.state, HealthState::Quarantined);
    assert!(v.quarantined);
    assert_eq!(v.last_xid, Some(79));
    assert_eq!(v.xid_events.len(), 1);
    assert_eq!(
        (
            v.xid_events[0].xid,
            v.xid_events[0].action,
            v.xid_events[0].count
        ),
        (79, XidAction::Quarantine, 1)
    );
}

#[test]
fn xid_13_changes_nothing() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let s = service_with(&h, dir.path(), settings(300_000));
    let mut events = s.subscribe();
    h.inject_xid(addr(GPU), 13).unwrap();
    assert_eq!(
        s.health().wait_xid(1000),
        XidWait::Event(Some(XidAction::Ignore))
    );
    assert!(s.engine().quarantined(addr(GPU)).is_none());
    while let Ok(e) = events.try_recv() {
        assert!(!matches!(e, Event::GpuQuarantined { .. }), "{e:?}");
    }
    s.allocate(request("t", "1g.10gb", Some(GPU))).unwrap();
    assert_eq!(s.gpu(addr(GPU)).unwrap().health, GpuHealth::Ok);
    let view = s.health_view();
    let v = view.iter().find(|v| v.address == addr(GPU)).unwrap();
    assert_eq!((v.state, v.last_xid), (HealthState::Ok, Some(13)));
    assert_eq!(v.xid_events[0].action, XidAction::Ignore);
}

#[test]
fn a_quarantine_survives_reopening_the_engine() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    {
        let s = service_with(&h, dir.path(), settings(300_000));
        h.inject_xid(addr(GPU), 48).unwrap();
        s.health().wait_xid(1000);
    }
    let s = service_with(&h, dir.path(), settings(300_000));
    let q = s
        .engine()
        .quarantined(addr(GPU))
        .expect("still quarantined");
    assert_eq!(q.reason, "Xid 48 (Double Bit ECC Error)");
    assert_eq!((q.source, q.xid), (QuarantineSource::Auto, Some(48)));
    let refused = s.allocate(request("t", "1g.10gb", Some(GPU))).unwrap_err();
    assert_eq!(refused.code(), "quarantined");
    // Written only while there are some: builds without quarantine still read the file.
    let file = dir.path().join("vgpud-state.json");
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("\"quarantine\"")
    );
    s.release_gpu(addr(GPU)).unwrap();
    assert!(
        !std::fs::read_to_string(&file)
            .unwrap()
            .contains("quarantine")
    );
}

#[test]
fn the_probe_releases_after_a_quiet_period() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let s = service_with(&h, dir.path(), settings(800));
    let mut events = s.subscribe();
    h.inject_xid(addr(GPU), 79).unwrap();
    s.health().wait_xid(1000);
    assert!(
        s.health().recover().is_empty(),
        "the quiet period is not over"
    );
    // A new quarantining Xid restarts the quiet period.
    std::thread::sleep(Duration::from_millis(500));
    h.inject_xid(addr(GPU), 94).unwrap();
    s.health().wait_xid(1000);
    std::thread::sleep(Duration::from_millis(500));
    assert!(s.health().recover().is_empty(), "restarted by Xid 94");
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        s.health().recover(),
        vec![ProbeOutcome::Released(addr(GPU))]
    );
    assert!(s.engine().quarantined(addr(GPU)).is_none());
    next_health_event(&mut events);
    assert_eq!(
        next_health_event(&mut events),
        Event::GpuReleased {
            gpu: addr(GPU),
            how: ReleaseHow::Probe
        }
    );
    s.allocate(request("t", "1g.10gb", Some(GPU))).unwrap();
}

#[test]
fn an_operator_quarantine_is_not_released_by_the_probe() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let s = service_with(&h, dir.path(), settings(100));
    let q = s.quarantine_gpu(addr(GPU), "fan replacement").unwrap();
    assert_eq!(q.source, QuarantineSource::Operator);
    std::thread::sleep(Duration::from_millis(300));
    assert!(s.health().recover().is_empty());
    // An Xid on it later leaves it the operator's.
    h.inject_xid(addr(GPU), 79).unwrap();
    s.health().wait_xid(1000);
    std::thread::sleep(Duration::from_millis(300));
    assert!(s.health().recover().is_empty());
    let q = s.engine().quarantined(addr(GPU)).unwrap();
    assert_eq!(
        (q.source, q.reason.as_str()),
        (QuarantineSource::Operator, "fan replacement")
    );
    let released = s.release_gpu(addr(GPU)).unwrap();
    assert_eq!(released.reason, "fan replacement");
    assert_eq!(s.release_gpu(addr(GPU)).unwrap_err().code(), "conflict");
    s.allocate(request("t", "1g.10gb", Some(GPU))).unwrap();
}

#[test]
fn operator_input_is_checked_and_changes_nothing_when_bad() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let s = service_with(&h, dir.path(), settings(100));
    for bad in ["", "   ", "line\nbreak"] {
        let e = s.quarantine_gpu(addr(GPU), bad).unwrap_err();
        assert_eq!(e.code(), "invalid_request", "{bad:?}");
    }
    let e = s.quarantine_gpu(addr("0000:ff:00.0"), "x").unwrap_err();
    assert_eq!(e.code(), "not_found");
    assert!(s.engine().quarantines().is_empty());
}

#[test]
fn a_lost_gpu_is_quarantined_and_stays_so_until_it_answers() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let s = service_with(&h, dir.path(), settings(200));
    s.health().check();
    assert!(s.engine().quarantines().is_empty(), "a healthy host");
    h.inject_fault(format!("nvml:*@{GPU}=GPU_IS_LOST").parse().unwrap())
        .unwrap();
    s.health().check();
    let q = s.engine().quarantined(addr(GPU)).expect("quarantined");
    assert!(q.reason.contains("fallen off the bus"), "{}", q.reason);
    std::thread::sleep(Duration::from_millis(300));
    match s.health().recover().as_slice() {
        [ProbeOutcome::Failed(g, _)] => assert_eq!(*g, addr(GPU)),
        other => panic!("{other:?}"),
    }
    h.clear_faults().unwrap();
    // The failed probe waits another quiet period.
    assert!(s.health().recover().is_empty());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        s.health().recover(),
        vec![ProbeOutcome::Released(addr(GPU))]
    );
}

#[test]
fn memory_errors_quarantine_and_slowdowns_degrade() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let s = service_with(&h, dir.path(), settings(100));
    let other = addr("0000:0f:00.0");
    let mut signals: gpu::HealthSignals =
        serde_json::from_str(r#"{"ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0, "remapped_correctable": 0, "remapped_uncorrectable": 0, "remap_failure": false, "clock_event_reasons": 64}"#).unwrap();
    h.set_health_signals(other, signals).unwrap();
    signals.clock_event_reasons = Some(0);
    signals.ecc_dbe_volatile = Some(1);
    h.set_health_signals(addr(GPU), signals).unwrap();
    s.health().check();
    let q = s.engine().quarantined(addr(GPU)).expect("DBE quarantines");
    assert!(q.reason.contains("double-bit"), "{}", q.reason);
    assert!(
        s.engine().quarantined(other).is_none(),
        "a slowdown does not"
    );
    let d = s.gpu(other).unwrap();
    assert_eq!(d.health, GpuHealth::Degraded);
    assert!(
        d.health_reasons.iter().any(|r| r.contains("thermal")),
        "{:?}",
        d.health_reasons
    );
    // No new error: the probe passes after the quiet period.
    std::thread::sleep(Duration::from_millis(200));
    s.health().check();
    assert_eq!(
        s.health().recover(),
        vec![ProbeOutcome::Released(addr(GPU))]
    );
    let v = s.health_view();
    let v = v.iter().find(|v| v.address == addr(GPU)).unwrap();
    assert_eq!(v.signals.and_then(|s| s.ecc_dbe_volatile), Some(1));
}

#[test]
fn pending_retirement_needs_the_reset_the_operator_allowed() {
    for reset in [false, true] {
        let h = sim("dgx-a100");
        let dir = tempfile::tempdir().unwrap();
        let health = HealthSettings {
            reset_before_release: reset,
            ..settings(100)
        };
        let s = service_with(&h, dir.path(), health);
        let signals: gpu::HealthSignals =
            serde_json::from_str(r#"{"ecc_dbe_volatile": 0, "retired_pending": true}"#).unwrap();
        h.set_health_signals(addr(GPU), signals).unwrap();
        s.health().check();
        assert!(s.engine().quarantined(addr(GPU)).is_some());
        std::thread::sleep(Duration::from_millis(200));
        s.health().check();
        let outcome = s.health().recover();
        if reset {
            assert_eq!(outcome, vec![ProbeOutcome::Released(addr(GPU))]);
        } else {
            assert!(
                matches!(outcome.as_slice(), [ProbeOutcome::Failed(_, why)] if why.contains("pending retirement")),
                "{outcome:?}"
            );
        }
    }
}

#[test]
fn no_reset_while_the_gpu_is_in_use() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let s = service_with(&h, dir.path(), settings(100));
    h.set_gpu_clients(addr(GPU), true).unwrap();
    let e = s.engine().reset_gpu(addr(GPU)).unwrap_err();
    assert_eq!(e.code(), "busy", "{e}");
    h.set_gpu_clients(addr(GPU), false).unwrap();
    s.engine().reset_gpu(addr(GPU)).unwrap();
}

#[test]
fn free_slices_on_a_quarantined_gpu_are_not_handed_out_and_scores_skip_it() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let s = service_with(&h, dir.path(), settings(300_000));
    let free = create(s.engine(), GPU, mig_kind("1g.10gb", None)).unwrap();
    let mut r = request("t", "1g.10gb", Some(GPU)).request;
    assert!(s.placement_score(r.clone()).unwrap().feasible);
    s.quarantine_gpu(addr(GPU), "maintenance").unwrap();
    let score = s.placement_score(r.clone()).unwrap();
    assert!(!score.feasible, "{score:?}");
    r.gpu = None;
    let a = s.allocate(request("t", "1g.10gb", None)).unwrap();
    assert!(
        !a.slices.contains(&free.id),
        "the free slice stays where it is"
    );
    assert_ne!(s.slice(a.slices[0]).unwrap().spec.gpu.to_string(), GPU);
    assert!(s.placement_score(r).unwrap().feasible, "other GPUs take it");
    // What the GPU already had stays.
    assert!(s.slice(free.id).is_ok());
}
