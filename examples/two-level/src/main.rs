//! `two-level`: the fleet benchmark of two-level scheduling (see the library's doc and
//! `examples/two-level/README.md`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use two_level::fleet::{self, FleetOptions};
use two_level::scheduler::Policy;

#[derive(Parser)]
#[command(
    name = "two-level",
    about = "Two-level scheduling over Placement and vgpud"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Starts N simulated hosts reporting to Placement and places an openb workload on them.
    Fleet(FleetArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum PolicyArg {
    TwoLevel,
    FirstCandidate,
    Both,
}

#[derive(clap::Args)]
struct FleetArgs {
    /// Hosts.
    #[arg(long, default_value_t = 20)]
    agents: usize,
    /// Seed of the pod draw.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Which policy (both: each on a fresh fleet, same workload).
    #[arg(long, value_enum, default_value = "both")]
    policy: PolicyArg,
    /// Placement's URL (noauth2, token `admin`); default: a fresh one per policy from the
    /// test venv (`scripts/lib.sh` ensure_placement_venv).
    #[arg(long)]
    placement: Option<String>,
    /// The vgpud binary (default: next to this program).
    #[arg(long)]
    vgpud: Option<PathBuf>,
    /// The openb pod list.
    #[arg(
        long,
        default_value = "../shared/data/openb/openb_pod_list_default.csv"
    )]
    pods: PathBuf,
    /// Stop after this many requests in a row that could not be placed.
    #[arg(long, default_value_t = 50)]
    max_failures: usize,
    /// Stop after this many requests.
    #[arg(long)]
    max_pods: Option<usize>,
    /// Write the JSON result here too.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let Cmd::Fleet(args) = Cli::parse().cmd;
    let vgpud = match args.vgpud {
        Some(p) => p,
        None => std::env::current_exe()?
            .parent()
            .context("this program's directory")?
            .join("vgpud"),
    };
    let options = FleetOptions {
        agents: args.agents,
        seed: args.seed,
        placement: args.placement,
        vgpud,
        pods: args.pods,
        max_failures: args.max_failures,
        max_pods: args.max_pods,
        ready_timeout: Duration::from_secs(120),
    };
    let policies = match args.policy {
        PolicyArg::TwoLevel => vec![Policy::TwoLevel],
        PolicyArg::FirstCandidate => vec![Policy::FirstCandidate],
        PolicyArg::Both => vec![Policy::TwoLevel, Policy::FirstCandidate],
    };
    let mut results = Vec::new();
    println!(
        "{:<16} {:>6} {:>6} {:>10} {:>9} {:>10} {:>9} {:>9}",
        "policy", "tried", "placed", "acceptance", "refused*", "conflicts", "mean ms", "p99 ms"
    );
    for policy in policies {
        let f = fleet::run_policy(&options, policy).with_context(|| policy.name())?;
        println!(
            "{:<16} {:>6} {:>6} {:>9.1}% {:>9} {:>10} {:>9.2} {:>9.2}",
            f.policy,
            f.tried,
            f.placed,
            f.acceptance * 100.0,
            f.refused_after_yes,
            f.claim_conflicts,
            f.decision_ms[0],
            f.decision_ms[2]
        );
        results.push(f);
    }
    println!("* refused by a vgpud after Placement said yes (goal 0)");
    let doc = serde_json::json!({
        "agents": options.agents, "seed": options.seed, "max_failures": options.max_failures,
        "pods": options.pods, "results": results,
    });
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_string_pretty(&doc)?)?;
    }
    println!("{}", serde_json::to_string(&doc)?);
    Ok(())
}
