//! GPU health end to end through `vgpud run` on a simulated dgx-a100: an Xid 79 quarantines
//! the GPU (an event on the REST stream and a D-Bus signal on a private bus), allocations
//! there are refused with the reason, the probe brings the GPU back after the quiet period and
//! allocations work again; an Xid 13 changes nothing; an operator's quarantine over REST
//! survives a restart and only an operator ends it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const GPU: &str = "0000:07:00.0";
const CONFIG: &str = "[health]\nquiet_period_s = 1\ncheck_interval_s = 1\n";
const ALLOC_ON_GPU: &str =
    r#"{"consumer": "test", "request": {"type": "1g.10gb", "count": 1, "gpu": "0000:07:00.0"}}"#;

/// A child process killed when the test ends, however it ends.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Daemon {
    child: Kill,
    socket: PathBuf,
    log: PathBuf,
}

impl Daemon {
    fn start(dir: &Path, bus: Option<&str>, name: &str) -> Daemon {
        let log = dir.join(format!("{name}.log"));
        let mut vgpud = Command::new(env!("CARGO_BIN_EXE_vgpud"));
        let child = testkit::daemon::sim_run(&mut vgpud, dir, "dgx-a100", bus)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let d = Daemon {
            child: Kill(child),
            socket: dir.join("api.sock"),
            log,
        };
        d.wait_for_log(" ready: ", Duration::from_secs(30));
        d
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_for_log(&self, needle: &str, timeout: Duration) -> String {
        wait_for(timeout, || {
            let text = self.log_text();
            text.contains(needle).then_some(text)
        })
        .unwrap_or_else(|| panic!("no {needle:?} in the log:\n{}", self.log_text()))
    }

    fn stop(mut self) {
        let pid = self.child.0.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.0.try_wait().unwrap() {
                assert!(status.success(), "{status}:\n{}", self.log_text());
                return;
            }
            assert!(
                Instant::now() < deadline,
                "vgpud did not stop:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One request over the unix socket: status and body.
fn http(socket: &Path, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let (status, _, body) = common::unix_request(socket, method, path, body);
    (status, body)
}

/// `GET /v1/events`, read on a thread into a buffer the test looks at.
fn event_stream(socket: &Path) -> Arc<Mutex<String>> {
    let mut s = UnixStream::connect(socket).unwrap();
    s.write_all(b"GET /v1/events HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let out = seen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    // The subscription exists once the response head came.
    wait_for(Duration::from_secs(10), || {
        seen.lock().unwrap().contains("\r\n\r\n").then_some(())
    })
    .expect("the event stream answers");
    seen
}

fn sim(dir: &Path, args: &[&str]) {
    let status = Command::new(env!("CARGO_BIN_EXE_vgpud"))
        .args(["sim", args[0], "--state-dir"])
        .arg(dir.join("state/sim"))
        .args(&args[1..])
        .status()
        .unwrap();
    assert!(status.success(), "vgpud sim {args:?}");
}

fn have(tool: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(tool).is_file()));
    if !found {
        assert!(std::env::var_os("CI").is_none(), "{tool} is missing");
        eprintln!("SKIPPED the D-Bus part: {tool} is missing");
    }
    found
}

/// A private bus with the session policy, and a dbus-monitor on it writing vgpud's manager
/// signals to a file.
fn private_bus(dir: &Path) -> Option<(Kill, Kill, PathBuf, String)> {
    if !have("dbus-daemon") || !have("dbus-monitor") {
        return None;
    }
    let address = format!("unix:path={}", dir.join("bus").display());
    let bus = Kill(
        Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--nopidfile"])
            .arg(format!("--address={address}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(Duration::from_secs(10), || {
        dir.join("bus").exists().then_some(())
    })
    .expect("the private bus starts");
    let signals = dir.join("signals.txt");
    let monitor = Kill(
        Command::new("dbus-monitor")
            .arg("--address")
            .arg(&address)
            .arg("type='signal',interface='io.vgpud.Agent1.Manager'")
            .stdout(std::fs::File::create(&signals).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    Some((bus, monitor, signals, address))
}

fn signal_seen(file: &Path, member: &str) -> bool {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.split("signal ")
        .any(|s| s.contains(&format!("member={member}")) && s.contains(GPU))
}

#[test]
fn xid_79_quarantines_refuses_then_the_probe_releases_and_xid_13_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("vgpud.toml"), CONFIG).unwrap();
    let bus = private_bus(dir.path());
    let d = Daemon::start(dir.path(), bus.as_ref().map(|b| b.3.as_str()), "vgpud");
    let events = event_stream(&d.socket);

    // Xid 13 (application error): logged, nothing else.
    sim(dir.path(), &["xid", "--gpu", GPU, "13"]);
    d.wait_for_log("application Xid", Duration::from_secs(10));
    let (status, body) = http(&d.socket, "POST", "/v1/allocations", Some(ALLOC_ON_GPU));
    assert_eq!(status, 201, "{body}");
    let (_, gpu) = http(&d.socket, "GET", &format!("/v1/gpus/{GPU}"), None);
    assert!(gpu.contains(r#""health":"ok""#), "{gpu}");
    assert!(!events.lock().unwrap().contains("gpu_quarantined"));

    // Xid 79: quarantined, with an event on both front ends.
    sim(dir.path(), &["xid", "--gpu", GPU, "79"]);
    wait_for(Duration::from_secs(10), || {
        events
            .lock()
            .unwrap()
            .contains("event: gpu_quarantined")
            .then_some(())
    })
    .unwrap_or_else(|| panic!("no gpu_quarantined event: {}", events.lock().unwrap()));
    assert!(
        events
            .lock()
            .unwrap()
            .contains("Xid 79 (GPU has fallen off the bus)")
    );
    if let Some((_, _, signals, _)) = &bus {
        wait_for(Duration::from_secs(10), || {
            signal_seen(signals, "GpuQuarantined").then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "no GpuQuarantined signal: {:?}",
                std::fs::read_to_string(signals)
            )
        });
    }
    let (status, body) = http(&d.socket, "POST", "/v1/allocations", Some(ALLOC_ON_GPU));
    assert_eq!(status, 409, "{body}");
    assert!(body.contains(r#""code":"quarantined""#), "{body}");
    assert!(
        body.contains("GPU 0000:07:00.0 is quarantined since 20")
            && body.contains("Z: Xid 79 (GPU has fallen off the bus)"),
        "{body}"
    );

    // Quiet for 1 s: the probe passes and the GPU is back.
    wait_for(Duration::from_secs(15), || {
        events
            .lock()
            .unwrap()
            .contains("event: gpu_released")
            .then_some(())
    })
    .unwrap_or_else(|| panic!("no gpu_released event: {}", events.lock().unwrap()));
    assert!(events.lock().unwrap().contains(r#""how":"probe""#));
    if let Some((_, _, signals, _)) = &bus {
        wait_for(Duration::from_secs(10), || {
            signal_seen(signals, "GpuReleased").then_some(())
        })
        .expect("a GpuReleased signal");
    }
    let (status, body) = http(&d.socket, "POST", "/v1/allocations", Some(ALLOC_ON_GPU));
    assert_eq!(status, 201, "{body}");
    d.stop();
}

#[test]
fn an_operator_quarantine_over_rest_survives_a_restart_and_only_a_release_ends_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("vgpud.toml"), CONFIG).unwrap();
    let d = Daemon::start(dir.path(), None, "first");
    let path = format!("/v1/gpus/{GPU}/quarantine");
    let (status, body) = http(&d.socket, "POST", &path, Some(r#"{"reason": ""}"#));
    assert_eq!(status, 422, "{body}");
    let (status, body) = http(&d.socket, "POST", &path, Some(r#"{"why": "x"}"#));
    assert!(status == 400 || status == 422, "{status} {body}");
    let (status, body) = http(&d.socket, "POST", &path, Some(r#"{"reason": "fan swap"}"#));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""source":"operator""#), "{body}");
    d.stop();

    let d = Daemon::start(dir.path(), None, "second");
    // Past a quiet period and a few checks, the probe has left it alone.
    std::thread::sleep(Duration::from_secs(3));
    let (status, body) = http(&d.socket, "POST", "/v1/allocations", Some(ALLOC_ON_GPU));
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("is quarantined since") && body.contains("fan swap"),
        "{body}"
    );
    let (_, gpu) = http(&d.socket, "GET", &format!("/v1/gpus/{GPU}"), None);
    assert!(gpu.contains(r#""health":"quarantined""#), "{gpu}");
    let release = format!("/v1/gpus/{GPU}/release");
    let (status, body) = http(&d.socket, "POST", &release, None);
    assert_eq!(status, 200, "{body}");
    let (status, body) = http(&d.socket, "POST", &release, None);
    assert_eq!(status, 409, "{body}");
    let (status, body) = http(&d.socket, "POST", "/v1/allocations", Some(ALLOC_ON_GPU));
    assert_eq!(status, 201, "{body}");
    d.stop();
}
