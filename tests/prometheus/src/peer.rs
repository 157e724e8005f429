//! Finding the peer programs, and loopback ports for them.

use std::path::PathBuf;
use std::process::Command;

/// The Debian package that ships `prometheus` and `promtool` (scripts/lib.sh installs it).
const PACKAGE: &str = "prometheus";

/// The peer program `tool` on `PATH`. Missing: `None` and a SKIPPED line locally; a panic in
/// CI (`CI` set), where a skipped peer would be reported as a pass.
pub fn find(tool: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(tool))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{tool} is missing (Debian package {PACKAGE}); scripts/lib.sh installs it"
        );
        eprintln!("SKIPPED: {tool} is missing (Debian package {PACKAGE})");
    }
    found
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// What a finished program printed, both streams, for assertion messages.
pub struct Output {
    /// Exit code (`-1` when killed by a signal).
    pub code: i32,
    /// stdout then stderr.
    pub text: String,
}

/// Runs `program args…` (optionally feeding `stdin`) to completion.
pub fn run(program: &PathBuf, args: &[&str], stdin: Option<&str>) -> anyhow::Result<Output> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    Ok(Output {
        code: out.status.code().unwrap_or(-1),
        text: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    })
}
