//! What the daemon tests share: the daemon on a simulated host as a child process, one HTTP/1.1
//! request over the REST socket, and waiting for a line in the daemon's log.
#![allow(dead_code, clippy::unwrap_used)] // each test binary uses part of it; tests may panic

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// How long a daemon may take to say it is ready.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// `vgpud run --sim PROFILE` over a directory of its own (`testkit::daemon::sim_run`: its
/// `vgpud.toml`, `state/`, `api.sock`), without D-Bus, logging to `NAME.log` there; killed when
/// dropped, however the test ends.
pub struct SimDaemon {
    pub child: Child,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Drop for SimDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl SimDaemon {
    /// Starts it and waits for its "ready" line.
    pub fn start(dir: &Path, profile: &str, name: &str) -> SimDaemon {
        let log = dir.join(format!("{name}.log"));
        let mut vgpud = Command::new(env!("CARGO_BIN_EXE_vgpud"));
        let child = testkit::daemon::sim_run(&mut vgpud, dir, profile, None)
            .arg("--no-dbus")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let d = SimDaemon {
            child,
            socket: dir.join("api.sock"),
            log,
        };
        d.wait_for_log(" ready: ", START_TIMEOUT);
        d
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for `needle` in the log; the log then.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> String {
        wait_for_text(|| self.log_text(), needle, timeout)
    }

    /// SIGTERM, then the exit, which must be clean.
    pub fn stop(mut self) {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(killed.success());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}:\n{}", self.log_text());
    }
}

/// One request with `Connection: close` over the unix socket: status, head and body (a chunked
/// body keeps its chunk sizes; the bodies here are small).
pub fn unix_request(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, String, String) {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_owned(), body.to_owned())
}

/// Waits until `read()` (the log so far) contains `needle`; the text then. Fails the test after
/// `timeout`, showing the text.
pub fn wait_for_text(read: impl Fn() -> String, needle: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let text = read();
        if text.contains(needle) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the log:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
