//! Hot-plug through the daemon: `vgpud run` on a simulated dgx-a100 whose GPU is removed and
//! put back by another process (`vgpud sim remove-gpu` / `add-gpu`, which make the simulated
//! kernel emit its uevents). The periodic reconcile is an hour away, so only the device events
//! can make the daemon notice: the slices go failed with the reason, `device_removed` arrives on
//! `/v1/events`, the allocation stays listed; after the replug `device_added` arrives and the
//! slices are re-created and allocated again.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Well below the reconcile interval of the test's configuration (3600 s).
const NOTICE_TIMEOUT: Duration = Duration::from_secs(15);

/// The daemon, with what this test asks of it.
struct Daemon(common::SimDaemon);

impl std::ops::Deref for Daemon {
    type Target = common::SimDaemon;
    fn deref(&self) -> &common::SimDaemon {
        &self.0
    }
}

impl Daemon {
    fn start(dir: &Path) -> Daemon {
        std::fs::write(
            dir.join("vgpud.toml"),
            "[engine]\nreconcile_interval_s = 3600\n",
        )
        .unwrap();
        Daemon(common::SimDaemon::start(dir, "dgx-a100", "vgpud"))
    }

    /// One request; the status and the JSON body.
    fn http(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let (status, head, body) = common::unix_request(&self.socket, method, path, body);
        assert!(
            !head.to_ascii_lowercase().contains("chunked"),
            "a chunked answer: {head}"
        );
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    /// Follows `/v1/events`: each event's data as JSON, on a channel.
    fn events(&self) -> mpsc::Receiver<Value> {
        let mut s = UnixStream::connect(&self.socket).unwrap();
        write!(
            s,
            "GET /v1/events HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n"
        )
        .unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Chunk-size lines and blank lines are not `data:` lines: skip them.
            for line in BufReader::new(s).lines() {
                let Ok(line) = line else { return };
                if let Some(data) = line.strip_prefix("data: ")
                    && let Ok(v) = serde_json::from_str::<Value>(data)
                    && tx.send(v).is_err()
                {
                    return;
                }
            }
        });
        rx
    }
}

fn sim(dir: &Path, command: &str, gpu: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_vgpud"))
        .args(["sim", command, "--state-dir"])
        .arg(dir.join("state/sim"))
        .arg(gpu)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "vgpud sim {command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The first event named `name` within the timeout (others are skipped).
fn next_named(events: &mpsc::Receiver<Value>, name: &str, d: &Daemon) -> Value {
    let deadline = Instant::now() + NOTICE_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(v) if v["event"] == name => return v,
            Ok(_) => {}
            Err(_) => panic!("no {name} event in time; log:\n{}", d.log_text()),
        }
    }
}

/// Slice ids of a list of ids or of slices (objects with an `id`), sorted.
fn ids(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().or(s["id"].as_str()).unwrap().to_owned())
        .collect();
    out.sort();
    out
}

#[test]
fn a_removed_gpu_fails_its_slices_at_once_and_its_return_restores_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path());
    let log = d.wait_for_log("hot-plug: device events from", common::START_TIMEOUT);
    assert!(log.contains("the simulated kernel's uevents"), "{log}");
    let events = d.events();

    let (status, alloc) = d.http(
        "POST",
        "/v1/allocations",
        Some(r#"{"consumer": "hotplug", "request": {"type": "3g.40gb", "count": 2}}"#),
    );
    assert_eq!(status, 201, "{alloc}");
    let allocation = alloc["id"].as_str().unwrap().to_owned();
    let slices = ids(&alloc["slices"]);
    let (_, first) = d.http("GET", &format!("/v1/slices/{}", slices[0]), None);
    let gpu = first["gpu"].as_str().unwrap().to_owned();

    sim(dir.path(), "remove-gpu", &gpu);
    let removed = next_named(&events, "device_removed", &d);
    let reason = format!("GPU {gpu} was removed from the PCI bus");
    assert_eq!(removed["device"], gpu.as_str(), "{removed}");
    assert_eq!(ids(&removed["slices"]), slices, "{removed}");
    assert_eq!(removed["reason"], reason.as_str(), "{removed}");
    for id in &slices {
        let (status, s) = d.http("GET", &format!("/v1/slices/{id}"), None);
        assert_eq!(status, 200, "{s}");
        assert_eq!(s["state"], "failed", "{s}");
        assert_eq!(s["reason"], reason.as_str(), "{s}");
    }
    // The allocation is not released: the VM's devices may come back.
    let (status, still) = d.http("GET", &format!("/v1/allocations/{allocation}"), None);
    assert_eq!(status, 200, "{still}");
    assert_eq!(ids(&still["slices"]), slices, "{still}");

    sim(dir.path(), "add-gpu", &gpu);
    let added = next_named(&events, "device_added", &d);
    assert_eq!(added["device"], gpu.as_str(), "{added}");
    assert_eq!(ids(&added["slices"]), slices, "{added}");
    let deadline = Instant::now() + NOTICE_TIMEOUT;
    for id in &slices {
        loop {
            let (_, s) = d.http("GET", &format!("/v1/slices/{id}"), None);
            if s["state"] == "allocated" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "slice {id} not back: {s}\n{}",
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let log = d.log_text();
    assert!(log.contains("reconcile after device events"), "{log}");
    assert!(!log.contains("periodic reconcile"), "{log}");
}
