//! The daemon under torture: `vgpud run --sim PROFILE` in a directory of its own, started,
//! SIGKILLed and started again on the same state directory and simulated host.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How long a start may take before the run fails (a debug build on a loaded machine).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The `vgpud` binary beside this test's: `target/<profile>/vgpud` (the workspace test run
/// builds it; `VGPUD_BIN` overrides).
pub fn vgpud_binary() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("VGPUD_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    // target/debug/deps/<test> → target/debug/vgpud
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .context("test binary has no target directory")?;
    let bin = dir.join("vgpud");
    if !bin.exists() {
        bail!(
            "{} is missing: build it first (cargo build -p vgpud --bin vgpud)",
            bin.display()
        );
    }
    Ok(bin)
}

/// One daemon directory: config, state, socket and a log per start.
pub struct Daemon {
    bin: PathBuf,
    dir: PathBuf,
    profile: String,
    bus: Option<String>,
    child: Option<Child>,
    starts: u32,
    start_times: Vec<Duration>,
}

impl Daemon {
    /// A daemon for `profile` in `dir` (not started); `bus` is a D-Bus address to serve on.
    pub fn new(dir: &Path, profile: &str, bus: Option<String>) -> anyhow::Result<Self> {
        std::fs::write(dir.join("vgpud.toml"), "[libvirt]\nuri = \"\"\n")?;
        Ok(Daemon {
            bin: vgpud_binary()?,
            dir: dir.to_owned(),
            profile: profile.to_owned(),
            bus,
            child: None,
            starts: 0,
            start_times: Vec::new(),
        })
    }

    /// The REST socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("api.sock")
    }

    /// The state directory (the simulated host is in its `sim` folder).
    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// How long each start took until "ready".
    pub fn start_times(&self) -> &[Duration] {
        &self.start_times
    }

    /// How many times the daemon was started.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    fn log(&self, start: u32) -> PathBuf {
        self.dir.join(format!("vgpud-{start}.log"))
    }

    /// The log of the latest start.
    pub fn last_log(&self) -> String {
        std::fs::read_to_string(self.log(self.starts)).unwrap_or_default()
    }

    /// Starts the daemon and waits for its "ready" line.
    pub fn start(&mut self) -> anyhow::Result<()> {
        self.starts += 1;
        let started = Instant::now();
        let log = self.log(self.starts);
        let child = testkit::daemon::sim_run(
            &mut Command::new(&self.bin),
            &self.dir,
            &self.profile,
            self.bus.as_deref(),
        )
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .context("spawn vgpud")?;
        let child = self.child.insert(child);
        let read = || std::fs::read_to_string(&log).unwrap_or_default();
        testkit::daemon::wait_ready(child, read, START_TIMEOUT)?;
        self.start_times.push(started.elapsed());
        Ok(())
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and wait (a clean stop for the final checks).
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status()?;
            let status = child.wait()?;
            if !status.success() {
                bail!("vgpud stopped with {status}:\n{}", self.last_log());
            }
        }
        Ok(())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}
