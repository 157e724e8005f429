//! `vgpud run --sim dgx-a100` in a directory of its own, with a TLS listener on a loopback port
//! and, through `prlimit`, the soft file-descriptor limit most systems default to (1,024), so a
//! flood proves the connection caps protect the daemon.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;
use torture::http;

/// How long a start may take (a debug build on a loaded machine).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The soft `RLIMIT_NOFILE` the daemon runs under: the common default.
pub const NOFILE: u32 = 1024;
/// The bearer token the TLS listener accepts.
pub const TOKEN: &str = "hostile-suite-token-0123456789abcdef";

/// A running daemon; killed when dropped.
pub struct Daemon {
    dir: tempfile::TempDir,
    child: Child,
    /// The TLS port on 127.0.0.1.
    pub tls_port: u16,
}

impl Daemon {
    /// Starts the daemon with `extra` appended to the `[api]` section of its config.
    pub fn start(extra_api: &str) -> anyhow::Result<Daemon> {
        let dir = tempfile::tempdir()?;
        let (cert, key) = testkit::tls::self_signed_cert(dir.path());
        let tokens = dir.path().join("tokens");
        testkit::tls::write_secret(&tokens, &format!("hostile {TOKEN}\n"));
        let tls_port = free_port()?;
        let config = format!(
            "[libvirt]\nuri = \"\"\n\n[api]\n{extra_api}\n\n[api.tcp]\nlisten = \"127.0.0.1:{tls_port}\"\ncert = \"{}\"\nkey = \"{}\"\ntokens_file = \"{}\"\n",
            cert.display(),
            key.display(),
            tokens.display()
        );
        std::fs::write(dir.path().join("vgpud.toml"), config)?;
        let child = spawn(dir.path())?;
        let mut d = Daemon {
            dir,
            child,
            tls_port,
        };
        d.wait_ready()?;
        Ok(d)
    }

    /// The REST socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("api.sock")
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("vgpud.log")).unwrap_or_default()
    }

    /// The certificate the TLS listener presents (for curl's `--cacert`).
    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let log = self.dir.path().join("vgpud.log");
        let read = || std::fs::read_to_string(&log).unwrap_or_default();
        testkit::daemon::wait_ready(&mut self.child, read, START_TIMEOUT)
    }

    /// `GET path` on the socket: its JSON body (fails on any status but 200).
    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        match http::call(&self.socket(), "GET", path, None, None) {
            Ok(a) if a.status == 200 => Ok(a.body),
            Ok(a) => bail!("GET {path}: {} {}", a.status, a.body),
            Err(e) => bail!("GET {path}: {e:?}"),
        }
    }

    /// The allocations, for the before/after comparison.
    pub fn allocations(&self) -> anyhow::Result<Value> {
        self.get("/v1/allocations")
    }

    /// Resident memory of the daemon, KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()));
        status
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    /// File descriptors the daemon holds now.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Asserts the daemon is still running.
    pub fn assert_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("vgpud exited with {status}:\n{}", self.log());
        }
        Ok(())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(dir: &Path) -> anyhow::Result<Child> {
    // prlimit execs the daemon: its pid is the daemon's.
    let mut prlimit = Command::new("prlimit");
    prlimit
        .arg(format!("--nofile={NOFILE}:{NOFILE}"))
        .arg("--")
        .arg(torture::daemon::vgpud_binary()?);
    testkit::daemon::sim_run(&mut prlimit, dir, "dgx-a100", None)
        .stderr(std::fs::File::create(dir.join("vgpud.log"))?)
        .spawn()
        .context("spawn prlimit vgpud (is util-linux's prlimit installed?)")
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Raises this process's soft file-descriptor limit to its hard one (the attackers hold more
/// connections than 1,024); returns the limit now in force.
pub fn raise_own_nofile() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let hard = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4)?.parse::<u64>().ok())
        .unwrap_or(1024);
    let _ = Command::new("prlimit")
        .arg(format!("--pid={}", std::process::id()))
        .arg(format!("--nofile={hard}:{hard}"))
        .status();
    hard
}
