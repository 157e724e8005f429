//! `vgpud run` as a real process on a simulated dgx-a100 host: REST over its unix socket,
//! systemd's notify protocol through a datagram socket the test reads, signals, restarts and
//! a second instance.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use testkit::tls::{self_signed_cert, write_secret};

const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A daemon started by a test, in its own directory.
struct Daemon {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // A failed test must not leave the daemon behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn command(dir: &Path, state: &str, socket: &str, log: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vgpud"));
    cmd.arg("run")
        .arg("--config")
        .arg(dir.join("vgpud.toml"))
        .args(["--sim", "dgx-a100", "--state-dir"])
        .arg(dir.join(state))
        .arg("--socket")
        .arg(dir.join(socket))
        // Never the machine's own bus: the daemon must cope with a missing one in --sim mode.
        .env(
            "DBUS_SYSTEM_BUS_ADDRESS",
            format!("unix:path={}", dir.join("no-bus").display()),
        )
        .env("VGPUD_LOG", "info")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    cmd
}

fn write_config(dir: &Path, text: &str) {
    std::fs::write(dir.join("vgpud.toml"), text).unwrap();
}

/// Starts a daemon and waits until its socket answers.
fn start(dir: &Path, name: &str, env: &[(&str, &str)]) -> Daemon {
    start_on(dir, "state", "api.sock", name, env)
}

fn start_on(dir: &Path, state: &str, socket: &str, name: &str, env: &[(&str, &str)]) -> Daemon {
    let log = dir.join(format!("{name}.log"));
    let mut cmd = command(dir, state, socket, &log);
    cmd.envs(env.iter().copied());
    let mut d = Daemon {
        child: cmd.spawn().unwrap(),
        socket: dir.join(socket),
        log,
    };
    let deadline = Instant::now() + START_TIMEOUT;
    while UnixStream::connect(&d.socket).is_err() {
        if let Some(status) = d.child.try_wait().unwrap() {
            panic!(
                "vgpud exited with {status} before serving:\n{}",
                d.log_text()
            );
        }
        assert!(
            Instant::now() < deadline,
            "vgpud did not serve in time:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The API socket accepts before the other listeners and D-Bus are up; "ready" comes after
    // all of them (and before READY=1).
    d.wait_for_log(" ready: ", START_TIMEOUT);
    d
}

impl Daemon {
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends a signal by name (`TERM`, `HUP`, `KILL`) with kill(1).
    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{sig}");
    }

    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        wait_child(&mut self.child, timeout, &self.log)
    }

    /// SIGTERM, then the exit status.
    fn stop(&mut self) -> ExitStatus {
        self.signal("TERM");
        self.wait(Duration::from_secs(30))
    }

    fn wait_for_log(&self, needle: &str, timeout: Duration) -> String {
        common::wait_for_text(|| self.log_text(), needle, timeout)
    }
}

fn wait_child(child: &mut Child, timeout: Duration, log: &Path) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "vgpud did not exit in time:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One HTTP/1.1 request over the unix socket; the status and the (de-chunked) body.
fn http(socket: &Path, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    http_on(s, method, path, body)
}

/// The same over TCP.
fn http_tcp(port: u16, method: &str, path: &str) -> (u16, String) {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    http_on(s, method, path, None)
}

fn http_on(
    mut s: impl Read + Write,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, String) {
    let body = body.unwrap_or("");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (status, body)
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").unwrap();
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn serves_rest_on_its_socket_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "");
    let mut d = start(dir.path(), "vgpud", &[]);

    let (status, body) = http(&d.socket, "GET", "/healthz", None);
    assert_eq!(status, 200, "{body}");
    let (status, body) = http(&d.socket, "GET", "/v1/host", None);
    assert_eq!(status, 200, "{body}");
    let host = json(&body);
    assert_eq!(host["gpus"].as_array().unwrap().len(), 8, "{body}");
    assert_eq!(host["numa_nodes"].as_array().unwrap().len(), 2, "{body}");

    let log = d.log_text();
    assert!(log.contains("running without D-Bus"), "{log}");
    assert!(log.contains("ready: serving on"), "{log}");

    let status = d.stop();
    assert!(status.success(), "{status}: {}", d.log_text());
    assert!(!d.socket.exists(), "the socket outlived the daemon");
    assert!(d.log_text().contains("SIGTERM: stopping"));
    // The simulated host persists under the state directory.
    assert!(dir.path().join("state/sim").is_dir());
}

#[test]
fn tells_systemd_ready_status_stopping_and_pings_the_watchdog() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "");
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let notify_env = notify_path.to_str().unwrap();
    // 300 ms: pings every 150 ms.
    let mut d = start(
        dir.path(),
        "vgpud",
        &[("NOTIFY_SOCKET", notify_env), ("WATCHDOG_USEC", "300000")],
    );

    let mut messages: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 4096];
    let watchdogs = |m: &[String]| m.iter().filter(|m| m.contains("WATCHDOG=1")).count();
    while Instant::now() < deadline && watchdogs(&messages) < 3 {
        if let Ok(n) = notify.recv(&mut buf) {
            messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    let ready = messages
        .iter()
        .position(|m| m.lines().any(|l| l == "READY=1"))
        .unwrap_or_else(|| panic!("no READY=1 in {messages:?}"));
    assert!(
        messages[ready].contains("STATUS=serving on") && messages[ready].contains("8 GPUs"),
        "{messages:?}"
    );
    assert!(
        messages[..ready]
            .iter()
            .any(|m| m.starts_with("STATUS=starting")),
        "a STATUS= line before READY=1: {messages:?}"
    );
    assert!(watchdogs(&messages) >= 3, "{messages:?}");

    let status = d.stop();
    assert!(status.success(), "{status}");
    let mut stopping = false;
    while let Ok(n) = notify.recv(&mut buf) {
        stopping |= String::from_utf8_lossy(&buf[..n])
            .lines()
            .any(|l| l == "STOPPING=1");
    }
    assert!(stopping, "no STOPPING=1 after SIGTERM");
}

#[test]
fn no_watchdog_pings_without_watchdog_usec() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "");
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut d = start(
        dir.path(),
        "vgpud",
        &[("NOTIFY_SOCKET", notify_path.to_str().unwrap())],
    );
    std::thread::sleep(Duration::from_millis(600));
    let mut buf = [0u8; 4096];
    let mut messages = Vec::new();
    while let Ok(n) = notify.recv(&mut buf) {
        messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert!(
        messages.iter().any(|m| m.contains("READY=1")),
        "{messages:?}"
    );
    assert!(
        !messages.iter().any(|m| m.contains("WATCHDOG=1")),
        "{messages:?}"
    );
    assert!(d.stop().success());
}

#[test]
fn a_restart_on_the_same_state_directory_keeps_allocations() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "");
    let mut d = start(dir.path(), "first", &[]);
    let (status, body) = http(&d.socket, "POST", "/v1/allocations", Some(TWO_MIG_SLICES));
    assert!(status == 200 || status == 201, "{status}: {body}");
    let allocation = json(&body);
    let id = allocation["id"].as_str().unwrap().to_owned();
    assert_eq!(allocation["slices"].as_array().unwrap().len(), 2, "{body}");
    assert!(d.stop().success());

    let mut d = start(dir.path(), "second", &[]);
    let (status, body) = http(&d.socket, "GET", &format!("/v1/allocations/{id}"), None);
    assert_eq!(status, 200, "{body}");
    let again = json(&body);
    assert_eq!(again["slices"], allocation["slices"], "{body}");
    let log = d.log_text();
    assert!(log.contains("first reconcile"), "{log}");
    assert!(log.contains("0 failed"), "{log}");
    assert!(d.stop().success());
}

#[test]
fn a_second_instance_is_refused_and_a_crashed_ones_socket_is_reclaimed() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "");
    let mut first = start(dir.path(), "first", &[]);

    // Same state directory, another socket: the state lock refuses it.
    let log = dir.path().join("same-state.log");
    let mut cmd = command(dir.path(), "state", "other.sock", &log);
    let status = wait_child(&mut cmd.spawn().unwrap(), START_TIMEOUT, &log);
    assert_eq!(status.code(), Some(1));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("locked by another vgpud instance"), "{text}");
    assert!(!dir.path().join("other.sock").exists());

    // Another state directory, the same socket: the live socket is not taken over.
    let log = dir.path().join("same-socket.log");
    let mut cmd = command(dir.path(), "state2", "api.sock", &log);
    let status = wait_child(&mut cmd.spawn().unwrap(), START_TIMEOUT, &log);
    assert_eq!(status.code(), Some(1));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("served by another process"), "{text}");

    assert_eq!(http(&first.socket, "GET", "/healthz", None).0, 200);

    // A daemon killed outright leaves its socket file; the next one replaces it.
    first.signal("KILL");
    first.wait(Duration::from_secs(10));
    assert!(first.socket.exists());
    let mut next = start(dir.path(), "next", &[]);
    assert_eq!(http(&next.socket, "GET", "/healthz", None).0, 200);
    assert!(next.stop().success());
}

#[test]
fn a_bad_configuration_stops_the_start_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "[engine]\n\nreconcile_every_s = 5\n");
    let log = dir.path().join("vgpud.log");
    let mut cmd = command(dir.path(), "state", "api.sock", &log);
    let status = wait_child(&mut cmd.spawn().unwrap(), START_TIMEOUT, &log);
    assert_eq!(status.code(), Some(1));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("line 3") && text.contains("reconcile_every_s"),
        "{text}"
    );
    assert!(!dir.path().join("api.sock").exists());
    assert!(!dir.path().join("state").exists());
}

#[test]
fn sighup_applies_the_reconcile_interval_and_names_what_needs_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "[engine]\nreconcile_interval_s = 3600\n");
    let mut d = start(dir.path(), "vgpud", &[]);

    write_config(
        dir.path(),
        "[engine]\nreconcile_interval_s = 1\n[api]\nsocket_group = \"kvm\"\n",
    );
    d.signal("HUP");
    let log = d.wait_for_log("SIGHUP: applied", Duration::from_secs(10));
    assert!(
        log.contains("SIGHUP: applied engine.reconcile_interval_s"),
        "{log}"
    );
    assert!(
        log.contains("restart vgpud to apply api.socket_group"),
        "{log}"
    );
    // The new interval is in force: a periodic pass comes within seconds, not an hour.
    d.wait_for_log("periodic reconcile:", Duration::from_secs(10));

    write_config(dir.path(), "[engine]\nreconcile_interval_s = 0\n");
    d.signal("HUP");
    let log = d.wait_for_log("configuration not reloaded", Duration::from_secs(10));
    assert!(log.contains("engine.reconcile_interval_s"), "{log}");
    assert_eq!(http(&d.socket, "GET", "/healthz", None).0, 200);
    assert!(d.stop().success());
}

/// Whether a peer program the test needs is installed. Missing: the test is skipped with a
/// message locally and fails in CI (`CI` set), where `tests/daemon/run` installs it.
fn have(tool: &str, package: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()));
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{tool} is missing (Debian package {package}); tests/daemon/run installs it"
        );
        eprintln!("SKIPPED: {tool} is missing (Debian package {package})");
    }
    found
}

const TWO_MIG_SLICES: &str =
    r#"{"consumer": "test", "vm": "vgpud-demo-vm", "request": {"type": "3g.40gb", "count": 2}}"#;

#[test]
fn sigterm_lets_an_allocation_in_flight_finish() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "");
    let mut d = start(dir.path(), "first", &[]);
    // The MIG instance creation takes 1.5 s: SIGTERM arrives in the middle of it.
    let fault = Command::new(env!("CARGO_BIN_EXE_vgpud"))
        .args(["sim", "fault", "--state-dir"])
        .arg(dir.path().join("state/sim"))
        .arg("nvml:nvmlDeviceCreateGpuInstanceWithPlacement=hang:1500,times=1")
        .status()
        .unwrap();
    assert!(fault.success());
    let socket = d.socket.clone();
    let sent = Instant::now();
    let request = std::thread::spawn(move || {
        let answer = http(&socket, "POST", "/v1/allocations", Some(TWO_MIG_SLICES));
        (answer, Instant::now())
    });
    std::thread::sleep(Duration::from_millis(400));
    let signalled = Instant::now();
    d.signal("TERM");
    let ((status, body), answered) = request.join().unwrap();
    assert_eq!(status, 201, "{body}");
    assert!(
        answered > signalled && answered - sent >= Duration::from_millis(1400),
        "the request was not in flight at SIGTERM"
    );
    let exit = d.wait(Duration::from_secs(30));
    assert!(exit.success(), "{exit}: {}", d.log_text());

    // Nothing was left half done: no intent to resolve, the allocation is there.
    let mut d = start(dir.path(), "second", &[]);
    let log = d.log_text();
    assert!(log.contains("0 interrupted operations resolved"), "{log}");
    let (_, body) = http(&d.socket, "GET", "/v1/allocations", None);
    let allocations = json(&body);
    assert_eq!(allocations.as_array().unwrap().len(), 1, "{body}");
    assert!(d.stop().success());
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn the_metrics_listener_serves_health_and_metrics_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    write_config(
        dir.path(),
        &format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"),
    );
    let mut d = start(dir.path(), "vgpud", &[]);
    assert_eq!(http_tcp(port, "GET", "/healthz").0, 200);
    let (status, body) = http_tcp(port, "GET", "/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    // The API itself is never served there.
    assert_eq!(http_tcp(port, "GET", "/v1/host").0, 404);
    assert!(d.stop().success());
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

fn curl_status(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_tls_listener_serves_only_authenticated_clients() {
    if !have("openssl", "openssl") || !have("curl", "curl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed_cert(dir.path());
    let token = "daemon-test-token-0123456789abcdef";
    let tokens = dir.path().join("tokens");
    write_secret(&tokens, &format!("test {token}\n"));
    let port = free_port();
    write_config(
        dir.path(),
        &format!(
            "[api.tcp]\nlisten = \"127.0.0.1:{port}\"\ncert = \"{}\"\nkey = \"{}\"\ntokens_file = \"{}\"\n",
            cert.display(),
            key.display(),
            tokens.display()
        ),
    );
    let mut d = start(dir.path(), "vgpud", &[]);
    let url = format!("https://127.0.0.1:{port}/v1/host");
    let cacert = cert.to_str().unwrap();
    let bearer = format!("Authorization: Bearer {token}");
    assert_eq!(
        curl_status(&["--cacert", cacert, "-H", &bearer, &url]),
        "200"
    );
    assert_eq!(curl_status(&["--cacert", cacert, &url]), "401");
    // Plain HTTP on the TLS port gets no HTTP answer at all.
    let plain = format!("http://127.0.0.1:{port}/v1/host");
    assert_ne!(curl_status(&[&plain]), "200");
    assert!(d.stop().success());
}

#[test]
fn sighup_reloads_the_tokens_file_and_a_bad_one_keeps_the_tokens() {
    if !have("openssl", "openssl") || !have("curl", "curl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed_cert(dir.path());
    let (old, new) = ("old-token-0123456789abcdef", "new-token-0123456789abcdef");
    let tokens = dir.path().join("tokens");
    write_secret(&tokens, &format!("old {old}\n"));
    let port = free_port();
    write_config(
        dir.path(),
        &format!(
            "[api.tcp]\nlisten = \"127.0.0.1:{port}\"\ncert = \"{}\"\nkey = \"{}\"\ntokens_file = \"{}\"\n",
            cert.display(),
            key.display(),
            tokens.display()
        ),
    );
    let mut d = start(dir.path(), "vgpud", &[]);
    let url = format!("https://127.0.0.1:{port}/v1/host");
    let cacert = cert.to_str().unwrap();
    let with = |t: &str| {
        curl_status(&[
            "--cacert",
            cacert,
            "-H",
            &format!("Authorization: Bearer {t}"),
            &url,
        ])
    };
    assert_eq!(with(old), "200");
    assert_eq!(with(new), "401");
    std::fs::write(&tokens, format!("new {new}\n")).unwrap();
    d.signal("HUP");
    d.wait_for_log("reloaded (1 tokens)", Duration::from_secs(10));
    assert_eq!(
        with(old),
        "401",
        "a removed token stops working without a restart"
    );
    assert_eq!(with(new), "200", "a new one starts");
    std::fs::write(&tokens, "new short\n").unwrap();
    d.signal("HUP");
    let log = d.wait_for_log("not reloaded", Duration::from_secs(10));
    assert!(log.contains("line 1"), "the log says why: {log}");
    assert_eq!(with(new), "200", "a bad file keeps the tokens in force");
    assert!(d.stop().success());
}

/// Starts a private bus (a dbus-daemon with the session policy) and returns it with its address.
fn private_bus(dir: &Path) -> Option<(Child, String)> {
    if !have("dbus-daemon", "dbus-daemon") || !have("busctl", "systemd") {
        return None;
    }
    let address = format!("unix:path={}", dir.join("bus").display());
    let child = Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--nopidfile"])
        .arg(format!("--address={address}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dir.join("bus").exists() {
        assert!(Instant::now() < deadline, "the private bus did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((child, address))
}

fn bus_names(address: &str) -> String {
    let out = Command::new("busctl")
        .arg(format!("--address={address}"))
        .args(["list", "--no-pager", "--no-legend"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn serves_dbus_on_the_bus_it_is_given_and_gives_the_name_back_on_stop() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "");
    let Some((mut bus, address)) = private_bus(dir.path()) else {
        return;
    };
    let mut d = start(
        dir.path(),
        "vgpud",
        &[("DBUS_SYSTEM_BUS_ADDRESS", address.as_str())],
    );
    let log = d.wait_for_log("ready:", Duration::from_secs(10));
    assert!(log.contains("D-Bus: serving io.vgpud.Agent1"), "{log}");
    assert!(bus_names(&address).contains("io.vgpud.Agent1"));
    assert!(d.stop().success());
    assert!(!bus_names(&address).contains("io.vgpud.Agent1"));
    let _ = bus.kill();
    let _ = bus.wait();
}

#[test]
fn on_a_real_host_a_missing_system_bus_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    // A real (not simulated) host: an empty sysfs tree, libvirt off.
    write_config(
        dir.path(),
        &format!(
            "sysfs_root = \"{}\"\n[api]\nsocket_group = \"\"\n[libvirt]\nuri = \"\"\n",
            root.display()
        ),
    );
    let log = dir.path().join("vgpud.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vgpud"));
    cmd.arg("run")
        .arg("--config")
        .arg(dir.path().join("vgpud.toml"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--socket")
        .arg(dir.path().join("api.sock"))
        .env(
            "DBUS_SYSTEM_BUS_ADDRESS",
            format!("unix:path={}", dir.path().join("no-bus").display()),
        )
        .env_remove("NOTIFY_SOCKET")
        .stderr(std::fs::File::create(&log).unwrap());
    let status = wait_child(&mut cmd.spawn().unwrap(), START_TIMEOUT, &log);
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        text.contains("cannot serve io.vgpud.Agent1") && text.contains("--no-dbus"),
        "{text}"
    );
    // The listener that was already up closed properly.
    assert!(!dir.path().join("api.sock").exists());
}
