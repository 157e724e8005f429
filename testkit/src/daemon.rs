//! The daemon as the tests start it: `vgpud run --sim PROFILE` over a directory of its own
//! (`vgpud.toml`, `state/`, `api.sock`), away from the machine's bus and systemd.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::bail;

/// Adds `run --sim PROFILE` with DIR's configuration, state directory and socket to `cmd` (the
/// `vgpud` binary, or a wrapper that execs it), and the environment every daemon test gives:
/// D-Bus on `bus` or on nothing (a simulated host copes without one), no systemd variables,
/// stdin and stdout closed. The caller sets stderr (the log) and spawns.
pub fn sim_run<'c>(
    cmd: &'c mut Command,
    dir: &Path,
    profile: &str,
    bus: Option<&str>,
) -> &'c mut Command {
    let no_bus = format!("unix:path={}", dir.join("no-bus").display());
    cmd.arg("run")
        .arg("--config")
        .arg(dir.join("vgpud.toml"))
        .args(["--sim", profile, "--state-dir"])
        .arg(dir.join("state"))
        .arg("--socket")
        .arg(dir.join("api.sock"))
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus.map_or(no_bus, str::to_owned))
        .env("VGPUD_LOG", "info")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
}

/// Waits until the daemon's log (`log()`) has its "ready" line; an error with the log when the
/// process exits first or `timeout` passes.
pub fn wait_ready(
    child: &mut Child,
    log: impl Fn() -> String,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let text = log();
        if text.contains(" ready: ") {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("vgpud exited with {status} before it was ready:\n{text}");
        }
        if Instant::now() > deadline {
            bail!("vgpud was not ready in {timeout:?}:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
