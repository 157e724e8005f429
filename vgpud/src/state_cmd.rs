//! `vgpud state …`: maintenance of the desired-state directory.
//!
//! `recover` rebuilds a lost state file from the host (the engine's `Engine::recover`): it
//! adopts the slices that carry vgpud's mark, says what it could not prove is vgpud's and what
//! no host can tell (allocations, layouts), and changes nothing on the host. It takes the same
//! host options as `vgpud run`, so it looks at the host the daemon would.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use agent::config::DEFAULT_CONFIG;
use agent::engine::{Engine, EngineConfig, RecoveryReport};
use anyhow::Context;
use clap::{Args, Subcommand};

use crate::daemon::{self, RunArgs};
use crate::daemon_config;

/// `vgpud state …` commands.
#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Rebuild a missing state file from the host: adopt the slices carrying vgpud's mark
    /// (free: allocations cannot be recovered), list what could not be adopted; nothing on the
    /// host is created or destroyed. Run it with the daemon stopped.
    Recover(RecoverArgs),
}

/// Arguments of `vgpud state recover` (the host options of `vgpud run`).
#[derive(Debug, Args)]
pub struct RecoverArgs {
    /// The configuration file (absent at the default location: every key has its default).
    #[arg(long, value_name = "FILE", default_value = DEFAULT_CONFIG)]
    pub config: PathBuf,
    /// Look at the simulated host `vgpud run --sim PROFILE` keeps in STATE_DIR/sim.
    #[arg(long, value_name = "PROFILE")]
    pub sim: Option<String>,
    /// The desired-state directory (overrides `state_dir`).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `vgpud state` command; returns what to print.
pub fn run(cmd: StateCommand) -> anyhow::Result<String> {
    match cmd {
        StateCommand::Recover(args) => recover(&args),
    }
}

fn recover(args: &RecoverArgs) -> anyhow::Result<String> {
    let run_args = RunArgs {
        config: args.config.clone(),
        sim: args.sim.clone(),
        state_dir: args.state_dir.clone(),
        socket: None,
        no_dbus: true,
    };
    let config = daemon_config::load(&run_args)?;
    let access = hostwire::open(&daemon::host_choice(&config))?;
    let mut engine_config = EngineConfig::new(&config.state_dir, access);
    engine_config.vendor_timeout = Duration::from_millis(config.engine.vendor_call_timeout_ms);
    let report = Engine::recover(engine_config).with_context(|| {
        format!(
            "recovering the state directory {}",
            config.state_dir.display()
        )
    })?;
    if args.json {
        return Ok(serde_json::to_string_pretty(&report).context("encoding the report")? + "\n");
    }
    Ok(render(&report))
}

fn render(r: &RecoveryReport) -> String {
    let mut out = format!("state file {} rebuilt from the host\n", r.state_file);
    let _ = writeln!(
        out,
        "adopted {} slice(s) carrying vgpud's mark, all free:",
        r.adopted.len()
    );
    for a in &r.adopted {
        let _ = writeln!(out, "  {}  {}", a.id, a.description);
    }
    let _ = writeln!(
        out,
        "not adopted, left on the host as foreign ({}):",
        r.not_adopted.len()
    );
    for (what, why) in &r.not_adopted {
        let _ = writeln!(out, "  {what}: {why}");
    }
    out.push_str("not recovered:\n");
    for what in &r.not_recovered {
        let _ = writeln!(out, "  {what}");
    }
    out.push_str("nothing on the host was created or destroyed\n");
    out
}
