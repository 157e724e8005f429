//! The real `vgpud run --sim` as a child process: started with systemd's notify socket pointed
//! at a datagram socket of ours (so READY=1 is seen the moment the daemon sends it), read
//! through `/proc` for its footprint, stopped with SIGTERM.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How long a start may take before the benchmark gives up.
const START_TIMEOUT: Duration = Duration::from_secs(300);

/// What to start.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The `vgpud` binary.
    pub vgpud: PathBuf,
    /// A built-in profile name or a profile TOML file.
    pub profile: String,
    /// The daemon's directory: state, socket, configuration, log.
    pub dir: PathBuf,
    /// `[metrics] poll_interval_ms`.
    pub poll_ms: u64,
    /// More of `vgpud.toml`, appended after `[metrics]` (whole sections).
    pub extra_config: String,
    /// Environment variables for the daemon (the simulator's latency model, say).
    pub env: Vec<(String, String)>,
}

/// A running daemon.
pub struct Daemon {
    child: Child,
    /// Its REST socket.
    pub socket: PathBuf,
    /// Process start to READY=1.
    pub ready_after: Duration,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // A benchmark that failed must not leave its daemon behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the daemon and waits for READY=1.
pub fn start(setup: &Setup) -> anyhow::Result<Daemon> {
    std::fs::create_dir_all(&setup.dir)?;
    let config = setup.dir.join("vgpud.toml");
    std::fs::write(
        &config,
        format!(
            "[metrics]\npoll_interval_ms = {}\n{}",
            setup.poll_ms, setup.extra_config
        ),
    )?;
    let notify_path = setup.dir.join("notify.sock");
    let _ = std::fs::remove_file(&notify_path);
    let notify = UnixDatagram::bind(&notify_path)?;
    notify.set_read_timeout(Some(Duration::from_millis(100)))?;
    let socket = setup.dir.join("api.sock");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(setup.dir.join("vgpud.log"))?;
    let started = Instant::now();
    let mut cmd = Command::new(&setup.vgpud);
    // The tests' daemon (its directory's vgpud.toml, state/ and api.sock), without D-Bus, with
    // the notify socket set again and a quieter log.
    let child = testkit::daemon::sim_run(&mut cmd, &setup.dir, &setup.profile, None)
        .arg("--no-dbus")
        .env("NOTIFY_SOCKET", &notify_path)
        .env("VGPUD_LOG", "warn")
        .envs(setup.env.iter().map(|(k, v)| (k, v)))
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", setup.vgpud.display()))?;
    let mut d = Daemon {
        child,
        socket,
        ready_after: Duration::ZERO,
    };
    d.ready_after = wait_ready(&mut d.child, &notify, started)?;
    Ok(d)
}

fn wait_ready(
    child: &mut Child,
    notify: &UnixDatagram,
    started: Instant,
) -> anyhow::Result<Duration> {
    let mut buf = vec![0u8; 4096];
    while started.elapsed() < START_TIMEOUT {
        if let Ok(n) = notify.recv(&mut buf) {
            let text = String::from_utf8_lossy(buf.get(..n).unwrap_or_default());
            if text.lines().any(|l| l == "READY=1") {
                return Ok(started.elapsed());
            }
        }
        if let Some(status) = child.try_wait()? {
            bail!("vgpud exited before READY=1 ({status}); see its log");
        }
    }
    bail!("no READY=1 within {START_TIMEOUT:?}")
}

impl Daemon {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits for the exit (the daemon drains and exits 0).
    pub fn stop(mut self) -> anyhow::Result<()> {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()?;
        if !status.success() {
            bail!("kill -TERM failed");
        }
        let exit = self.child.wait()?;
        if !exit.success() {
            bail!("vgpud exited with {exit}");
        }
        Ok(())
    }

    /// Resident set size, KiB (`VmRSS` of `/proc/PID/status`).
    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        let path = format!("/proc/{}/status", self.pid());
        let text = std::fs::read_to_string(&path)?;
        text.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .with_context(|| format!("no VmRSS in {path}"))
    }

    /// User plus system CPU time so far (`utime + stime` of `/proc/PID/stat`).
    pub fn cpu_time(&self) -> anyhow::Result<Duration> {
        let path = format!("/proc/{}/stat", self.pid());
        let text = std::fs::read_to_string(&path)?;
        // The command name may hold spaces and parentheses: fields count from the last ')'.
        let rest = text.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // After ')': state is field 3, so utime (14) and stime (15) are at 11 and 12.
        let tick = |i: usize| -> anyhow::Result<u64> {
            Ok(fields.get(i).context("short /proc stat")?.parse()?)
        };
        let ticks = tick(11)? + tick(12)?;
        Ok(Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64))
    }
}

/// `sysconf(_SC_CLK_TCK)` through getconf (100 on Linux unless configured otherwise).
fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// The `vgpud` next to this benchmark binary (`target/release/vgpud`), unless told.
pub fn default_vgpud() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("vgpud")))
        .unwrap_or_else(|| PathBuf::from("vgpud"))
}

/// Removes a directory a run left.
pub fn fresh_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    Ok(())
}
