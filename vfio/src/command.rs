//! Host commands vgpud runs (NVIDIA's `sriov-manage`), built as data and run by a small runner.
//!
//! A command is a [`HostCommand`]: a program and its arguments, never a shell line, so tests
//! assert what would run and nothing a client sends can become part of it unchecked (the only
//! argument built from a value is a canonical PCI address). [`CommandRunner`] runs it;
//! [`SystemRunner`] is the real one, with a time limit.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ids::PciAddress;

use crate::VfioError;

/// NVIDIA's SR-IOV tool, installed with the vGPU host driver.
pub const SRIOV_MANAGE: &str = "/usr/lib/nvidia/sriov-manage";

/// How long [`SystemRunner`] lets a command run by default: `sriov-manage` rebinds the PF and
/// each VF in turn, which takes seconds, not minutes.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// What `sriov-manage` is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SriovManageAction {
    /// `-e`: enable every VF of the GPU.
    Enable,
    /// `-d`: disable them.
    Disable,
}

/// A program and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCommand {
    /// The program's absolute path.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

impl HostCommand {
    /// `/usr/lib/nvidia/sriov-manage -e|-d <bdf>`.
    pub fn sriov_manage(action: SriovManageAction, pf: PciAddress) -> Self {
        let flag = match action {
            SriovManageAction::Enable => "-e",
            SriovManageAction::Disable => "-d",
        };
        HostCommand {
            program: PathBuf::from(SRIOV_MANAGE),
            args: vec![flag.to_owned(), pf.to_string()],
        }
    }

    /// The command as one line, for errors and logs.
    pub fn shown(&self) -> String {
        let mut s = self.program.display().to_string();
        for a in &self.args {
            s.push(' ');
            s.push_str(a);
        }
        s
    }
}

/// What a finished command reported.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommandOutput {
    /// The exit status; `None` when a signal ended it.
    pub status: Option<i32>,
    /// Its standard error, truncated.
    pub stderr: String,
}

/// Runs host commands.
pub trait CommandRunner: Send + Sync + std::fmt::Debug {
    /// Runs the command to its end and reports how it ended; fails only when it could not be
    /// started or did not end in time.
    fn run(&self, cmd: &HostCommand) -> Result<CommandOutput, VfioError>;
}

/// Runs commands on this host, killing one that outlives its time limit.
#[derive(Debug, Clone)]
pub struct SystemRunner {
    timeout: Duration,
}

impl Default for SystemRunner {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_COMMAND_TIMEOUT,
        }
    }
}

impl SystemRunner {
    /// A runner with its own time limit.
    pub fn with_timeout(timeout: Duration) -> Self {
        Self { timeout }
    }
}

/// Longer than any useful error message; only bounds what goes into an error.
const MAX_STDERR: usize = 4096;

impl CommandRunner for SystemRunner {
    fn run(&self, cmd: &HostCommand) -> Result<CommandOutput, VfioError> {
        let spawn_failed = |source| VfioError::CommandStart {
            command: cmd.shown(),
            source,
        };
        let mut child = Command::new(&cmd.program)
            .args(&cmd.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_failed)?;
        let status = wait_limited(&mut child, self.timeout).map_err(spawn_failed)?;
        let Some(status) = status else {
            // Killed: what it changed is read back by the caller.
            return Err(VfioError::CommandTimeout {
                command: cmd.shown(),
                after: self.timeout,
            });
        };
        let mut stderr = String::new();
        if let Some(mut err) = child.stderr.take() {
            let mut buf = Vec::new();
            let _ = err.by_ref().take(MAX_STDERR as u64).read_to_end(&mut buf);
            stderr = String::from_utf8_lossy(&buf).trim().to_owned();
        }
        Ok(CommandOutput {
            status: status.code(),
            stderr,
        })
    }
}

/// Waits for the child up to `limit`; kills it and answers `None` past that.
fn wait_limited(
    child: &mut Child,
    limit: Duration,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if start.elapsed() >= limit {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sriov_manage_is_built_as_data() {
        let pf: PciAddress = "0000:18:00.0".parse().unwrap();
        let e = HostCommand::sriov_manage(SriovManageAction::Enable, pf);
        assert_eq!(e.program, PathBuf::from("/usr/lib/nvidia/sriov-manage"));
        assert_eq!(e.args, vec!["-e", "0000:18:00.0"]);
        let d = HostCommand::sriov_manage(SriovManageAction::Disable, pf);
        assert_eq!(d.shown(), "/usr/lib/nvidia/sriov-manage -d 0000:18:00.0");
    }

    #[test]
    fn the_system_runner_reports_status_and_stderr_and_kills_at_its_limit() {
        let sh = |script: &str| HostCommand {
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".to_owned(), script.to_owned()],
        };
        let out = SystemRunner::default()
            .run(&sh("echo refused >&2; exit 3"))
            .unwrap();
        assert_eq!(out.status, Some(3));
        assert_eq!(out.stderr, "refused");
        let slow = SystemRunner::with_timeout(Duration::from_millis(100)).run(&sh("sleep 5"));
        assert!(matches!(slow, Err(VfioError::CommandTimeout { .. })));
        let missing = SystemRunner::default().run(&HostCommand {
            program: PathBuf::from("/nonexistent/sriov-manage"),
            args: Vec::new(),
        });
        assert!(matches!(missing, Err(VfioError::CommandStart { .. })));
    }
}
