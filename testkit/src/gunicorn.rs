//! A Python WSGI service from a venv, served by gunicorn on 127.0.0.1 for one test: started in
//! its own process group (so a terminal's Ctrl-C does not reach it and its workers go with it)
//! and stopped by its PID, as `../shared/rig/placement.sh` does.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How long a service may take to answer after gunicorn starts (Placement answers in about
/// 4 s on a loaded 2-core machine).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// What to serve and how.
#[derive(Clone, Debug)]
pub(crate) struct Service {
    /// The venv with `bin/gunicorn`.
    pub venv: PathBuf,
    /// Where the log goes (`server.log`) and the service's files live.
    pub state: PathBuf,
    /// The WSGI application, `module:attribute`.
    pub app: String,
    /// Extra environment (the service's config location).
    pub env: Vec<(String, String)>,
    /// https with this certificate and key.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// The loopback port.
    pub port: u16,
    /// The path `curl` asks for to see that it answers.
    pub probe: String,
}

/// A running gunicorn master; stopped when dropped.
pub(crate) struct Gunicorn {
    child: Option<Child>,
}

impl Service {
    /// The URL it is served at.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    fn log_path(&self) -> PathBuf {
        self.state.join("server.log")
    }

    /// The server's log so far (for assertion messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Starts gunicorn and waits until the service answers.
    pub fn start(&self) -> anyhow::Result<Gunicorn> {
        use std::os::unix::process::CommandExt;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let mut cmd = Command::new(self.venv.join("bin/gunicorn"));
        cmd.arg("--bind")
            .arg(format!("127.0.0.1:{}", self.port))
            // One worker: SQLite. gunicorn 27 opens a control socket in ~/.gunicorn unless told
            // not to, which would collide between concurrent tests.
            .args(["--workers", "1", "--threads", "1", "--no-control-socket"])
            .args(["--access-logfile", "-", "--chdir"])
            .arg(&self.state)
            .arg("--pid")
            .arg(self.state.join("gunicorn.pid"));
        if let Some((cert, key)) = &self.tls {
            cmd.arg("--certfile").arg(cert).arg("--keyfile").arg(key);
        }
        cmd.arg(&self.app)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.state)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = cmd.spawn().context("spawn gunicorn")?;
        let mut server = Gunicorn { child: Some(child) };
        self.wait_ready(&mut server)?;
        Ok(server)
    }

    fn wait_ready(&self, server: &mut Gunicorn) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let url = format!("{}{}", self.url(), self.probe);
        while Instant::now() < deadline {
            if let Some(child) = server.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!("gunicorn exited ({status}); log:\n{}", self.log());
            }
            // -k: readiness only; the tests check certificates with their own client.
            let answered = Command::new("curl")
                .args(["-sk", "-o", "/dev/null", "--max-time", "5"])
                .arg(&url)
                .status()
                .context("run curl (Debian package curl)")?;
            if answered.success() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        bail!(
            "{url} did not answer in {READY_TIMEOUT:?}; log:\n{}",
            self.log()
        )
    }
}

impl Gunicorn {
    /// Stops the master and its workers: SIGINT (gunicorn's quick shutdown), SIGKILL to the
    /// process group after 10 s.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        signal_group(child.id(), "INT");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                // The workers may outlive the master by a moment.
                signal_group(child.id(), "KILL");
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        signal_group(child.id(), "KILL");
        let _ = child.wait();
    }
}

impl Drop for Gunicorn {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `kill -SIG -- -pgid`: the group gunicorn leads (it was started with `process_group(0)`).
fn signal_group(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg("--")
        .arg(format!("-{pid}"))
        .stderr(Stdio::null())
        .status();
}

/// A port on 127.0.0.1 that was free a moment ago.
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The venv at `${var}`, else `<target dir>/<name>`, if it has `bin/gunicorn`. Missing: `None`
/// and a SKIPPED line locally; a panic in CI (`CI` set), where a skipped peer would pass.
pub(crate) fn venv(var: &str, name: &str, what: &str) -> Option<PathBuf> {
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join(name));
    if path.join("bin/gunicorn").is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{what}: no venv at {} (scripts/lib.sh makes it; or set {var})",
        path.display()
    );
    eprintln!(
        "SKIPPED: {what}: no venv at {} (scripts/lib.sh makes it; or set {var})",
        path.display()
    );
    None
}

/// Cargo's target directory (`CARGO_TARGET_DIR`, else the workspace's `target/`).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}
