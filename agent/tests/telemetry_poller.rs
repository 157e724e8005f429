//! The telemetry poller's thread: it polls at once, again soon after an engine event (not only
//! on its interval), and stops when its handle is dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::time::{Duration, Instant};

use agent::service::Service;
use agent::telemetry::{Poller, PollerSettings};
use testkit::*;

fn settings(interval: Duration) -> PollerSettings {
    PollerSettings {
        interval,
        ..PollerSettings::default()
    }
}

/// Waits up to `limit` for the cache to satisfy `ok`.
fn wait_for(
    s: &Service,
    limit: Duration,
    ok: impl Fn(&agent::telemetry::TelemetrySnapshot) -> bool,
) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if ok(&s.telemetry_cache().latest()) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn an_allocation_is_in_the_snapshot_long_before_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, s) = service("dgx-a100", dir.path());
    let cache = s.telemetry_cache();
    let handle = Poller::new(
        s.engine().clone(),
        cache,
        settings(Duration::from_secs(600)),
    )
    .spawn()
    .unwrap();
    assert!(wait_for(&s, Duration::from_secs(10), |t| t.taken.is_some()));
    assert_eq!(s.telemetry_cache().latest().allocations, 0);
    s.allocate(request("m", "1g.10gb", None)).unwrap();
    // The allocation's events wake the poller; the 10-minute interval does not come into it.
    assert!(wait_for(&s, Duration::from_secs(10), |t| t.allocations
        == 1
        && t.slices
            .iter()
            .any(|x| x.state == "allocated" && x.consumer == "m")));
    drop(handle);
}

#[test]
fn dropping_the_handle_stops_polling() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, s) = service("single-gpu", dir.path());
    let handle = Poller::new(
        s.engine().clone(),
        s.telemetry_cache(),
        settings(Duration::from_millis(100)),
    )
    .spawn()
    .unwrap();
    let first = s.telemetry_cache().latest();
    assert!(wait_for(&s, Duration::from_secs(10), |t| t.taken.is_some()
        && t.taken != first.taken));
    drop(handle);
    // A poll under way may still finish; after that the snapshot stays as it is.
    std::thread::sleep(Duration::from_millis(500));
    let stopped = s.telemetry_cache().latest().taken;
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(s.telemetry_cache().latest().taken, stopped);
}
