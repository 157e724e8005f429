//! The `vgpud` command line: admin commands over the agent library.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, CommandFactory, Parser, Subcommand};
use ids::PciAddress;

use hostwire::{self as host, HostChoice};

/// vgpud: GPU slicing agent for hypervisor hosts.
#[derive(Debug, Parser)]
#[command(name = "vgpud", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent: reconcile, then serve the REST API, D-Bus and metrics until SIGTERM.
    Run(crate::daemon::RunArgs),
    /// Check a configuration file and print the effective configuration (exit 1 if invalid).
    CheckConfig {
        /// The file.
        #[arg(value_name = "FILE", default_value = agent::config::DEFAULT_CONFIG)]
        file: PathBuf,
    },
    /// Describe the host: NUMA nodes, GPUs, what each can be sliced into, existing slices.
    Inventory(InventoryArgs),
    /// Maintain the desired-state directory (`recover`: rebuild a lost state file).
    #[command(subcommand)]
    State(crate::state_cmd::StateCommand),
    /// Drive a simulated host kept in a state directory.
    #[command(subcommand)]
    Sim(SimCommand),
    /// Write a simulator profile (TOML) describing this host's hardware.
    CaptureProfile {
        /// Read sysfs under PATH instead of / (vendor libraries are then not asked).
        #[arg(long, value_name = "PATH")]
        root: Option<PathBuf>,
        /// Write the profile to FILE instead of standard output.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Print a shell completion script (the package installs them).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff; the package installs it as vgpud(8)).
    Man,
}

/// Which host a command looks at.
#[derive(Debug, Args)]
pub struct HostArgs {
    /// Simulate this host profile (built-in name or TOML file) instead of the real host.
    #[arg(long, value_name = "PROFILE", conflicts_with = "root")]
    pub sim: Option<String>,
    /// Keep the simulated host's state in DIR (created on first use); with no --sim, open it.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Read sysfs under PATH instead of / (a captured or fixture tree).
    #[arg(long, value_name = "PATH")]
    pub root: Option<PathBuf>,
}

impl HostArgs {
    fn choice(&self) -> anyhow::Result<HostChoice> {
        Ok(match (&self.sim, &self.state_dir, &self.root) {
            (Some(profile), dir, None) => HostChoice::Sim {
                profile: profile.clone(),
                state_dir: dir.clone(),
            },
            (None, Some(dir), None) => HostChoice::SimDir {
                state_dir: dir.clone(),
            },
            (None, None, root) => HostChoice::Real {
                root: root.clone().unwrap_or_else(|| PathBuf::from("/")),
            },
            _ => anyhow::bail!("--root cannot be combined with --sim or --state-dir"),
        })
    }
}

/// Arguments of `vgpud inventory`.
#[derive(Debug, Args)]
pub struct InventoryArgs {
    /// The host to describe.
    #[command(flatten)]
    pub host: HostArgs,
    /// Print stable JSON instead of a tree.
    #[arg(long)]
    pub json: bool,
}

/// `vgpud sim ...` commands.
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// List the built-in host profiles.
    Profiles,
    /// Print a profile's TOML (a starting point for your own).
    ShowProfile {
        /// Built-in profile name or file.
        profile: String,
    },
    /// Create a simulated host in a state directory.
    Init {
        /// Built-in profile name or file.
        #[arg(long)]
        profile: String,
        /// The state directory.
        #[arg(long)]
        state_dir: PathBuf,
    },
    /// Reboot the simulated host: runtime devices are lost, hardware stays.
    Reboot(StateDir),
    /// Make a sysfs write/read or a vendor-library call fail, hang or half-succeed.
    Fault {
        /// The state directory.
        #[arg(long)]
        state_dir: PathBuf,
        /// The fault, e.g. `write:/sys/bus/pci/devices/0000:07:00.0/sriov_numvfs=EBUSY`.
        spec: String,
        /// Fire this many times, then disappear (overrides `,times=N` in the spec; default: until
        /// cleared).
        #[arg(long)]
        times: Option<u32>,
    },
    /// Remove every injected fault.
    ClearFaults(StateDir),
    /// List injected faults.
    Faults(StateDir),
    /// Report an Xid error on a GPU.
    Xid {
        /// The state directory.
        #[arg(long)]
        state_dir: PathBuf,
        /// The GPU's PCI address.
        #[arg(long)]
        gpu: PciAddress,
        /// The Xid code (e.g. 79: GPU has fallen off the bus).
        xid: u64,
    },
    /// Set what NVML's memory-error and clocks-event queries answer for a GPU: a JSON object
    /// with `ecc_sbe_volatile`, `ecc_dbe_volatile`, `retired_sbe`, `retired_dbe`,
    /// `retired_pending`, `remapped_correctable`, `remapped_uncorrectable`, `remap_failure`,
    /// `clock_event_reasons` (a field left out answers NOT_SUPPORTED).
    HealthSignals {
        /// The state directory.
        #[arg(long)]
        state_dir: PathBuf,
        /// The GPU's PCI address.
        #[arg(long)]
        gpu: PciAddress,
        /// The signals, as JSON (e.g. '{"ecc_dbe_volatile": 1}').
        signals: String,
    },
    /// Hot-unplug a GPU.
    RemoveGpu {
        /// The state directory.
        #[arg(long)]
        state_dir: PathBuf,
        /// The GPU's PCI address.
        gpu: PciAddress,
    },
    /// Plug a removed GPU back in.
    AddGpu {
        /// The state directory.
        #[arg(long)]
        state_dir: PathBuf,
        /// The GPU's PCI address.
        gpu: PciAddress,
    },
    /// Reload the amdgpu driver: a requested AMD memory partition (NPS) mode takes effect;
    /// refused while processes use its GPUs.
    ReloadAmdgpu {
        /// The state directory.
        #[arg(long)]
        state_dir: PathBuf,
    },
    /// Open (or with --close, close) a device's VFIO file as a running VM does: an mdev (by
    /// UUID) or a PCI function. An open vGPU is active to NVML (it reports its usage) and an
    /// open device refuses removal and reset.
    VmOpen {
        /// The state directory.
        #[arg(long)]
        state_dir: PathBuf,
        /// An mdev UUID or a PCI address.
        device: String,
        /// Close it instead (the VM stopped).
        #[arg(long)]
        close: bool,
    },
    /// Reset a GPU (as `nvidia-smi -r` would): a pending MIG mode takes effect; refused while
    /// its VFs or GPU instances are in use.
    ResetGpu {
        /// The state directory.
        #[arg(long)]
        state_dir: PathBuf,
        /// The GPU's PCI address.
        gpu: PciAddress,
    },
}

/// A state directory argument.
#[derive(Debug, Args)]
pub struct StateDir {
    /// The state directory.
    #[arg(long)]
    pub state_dir: PathBuf,
}

/// Runs the command line; errors are printed with their causes and give exit status 1.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // The daemon reports its life (ready, reconciles, stops); admin commands only their troubles.
    init_logging(match cli.command {
        Command::Run(_) => "info",
        _ => "warn",
    });
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vgpud: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to the journal when systemd connected our output to it (`JOURNAL_STREAM`), as plain text
/// on standard error otherwise; `VGPUD_LOG` (e.g. `debug`) overrides the level.
fn init_logging(default_level: &str) {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let filter = tracing_subscriber::EnvFilter::try_from_env("VGPUD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        match tracing_journald::layer() {
            Ok(journal) => {
                let _ = tracing_subscriber::registry()
                    .with(filter)
                    .with(journal)
                    .try_init();
                return;
            }
            Err(e) => {
                eprintln!("vgpud: cannot log to the journal ({e}); logging to standard error")
            }
        }
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Runs one parsed command.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => crate::daemon::run(args),
        Command::CheckConfig { file } => print(&crate::daemon_config::check_config(&file)?),
        Command::Inventory(args) => inventory(&args),
        Command::State(cmd) => print(&crate::state_cmd::run(cmd)?),
        Command::Sim(cmd) => sim(cmd),
        Command::CaptureProfile { root, output } => {
            let access = host::real_access(root.as_deref().unwrap_or(std::path::Path::new("/")));
            let text = hostwire::capture::capture(&access)?.to_toml()?;
            match output {
                Some(file) => std::fs::write(&file, text)
                    .with_context(|| format!("writing {}", file.display())),
                None => print(&text),
            }
        }
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "vgpud", &mut out);
            print(&String::from_utf8_lossy(&out))
        }
        Command::Man => {
            let mut out = Vec::new();
            // Section 8: vgpud is a system daemon run by root (the unit's Documentation=).
            clap_mangen::Man::new(Cli::command())
                .section("8")
                .render(&mut out)
                .context("rendering the man page")?;
            print(&String::from_utf8_lossy(&out))
        }
    }
}

fn inventory(args: &InventoryArgs) -> anyhow::Result<()> {
    let access = host::open(&args.host.choice()?)?;
    let inv = inventory::discover(&access);
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&inv).context("encoding the inventory")?;
        s.push('\n');
        s
    } else {
        inventory::render_tree(&inv)
    };
    print(&text)
}

fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        // A closed pipe (`vgpud inventory | head`) is the reader's choice, not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to standard output"),
    }
}

fn sim(cmd: SimCommand) -> anyhow::Result<()> {
    match cmd {
        SimCommand::Profiles => print(&(sim::Profile::builtin_names().join("\n") + "\n")),
        SimCommand::ShowProfile { profile } => print(&host::load_profile(&profile)?.to_toml()?),
        SimCommand::Init { profile, state_dir } => {
            sim::SimHost::create(&state_dir, host::load_profile(&profile)?)?;
            print(&format!(
                "simulated host {profile} created in {}\n",
                state_dir.display()
            ))
        }
        SimCommand::Reboot(d) => {
            open_dir(&d.state_dir)?.reboot()?;
            print("simulated host rebooted\n")
        }
        SimCommand::Fault {
            state_dir,
            spec,
            times,
        } => {
            let mut fault: sim::Fault = spec.parse().context("parsing the fault")?;
            if times.is_some() {
                fault.times = times;
            }
            open_dir(&state_dir)?.inject_fault(fault)?;
            Ok(())
        }
        SimCommand::ClearFaults(d) => Ok(open_dir(&d.state_dir)?.clear_faults()?),
        SimCommand::Faults(d) => {
            let faults = open_dir(&d.state_dir)?.faults()?;
            print(&(serde_json::to_string_pretty(&faults)? + "\n"))
        }
        SimCommand::Xid {
            state_dir,
            gpu,
            xid,
        } => Ok(open_dir(&state_dir)?.inject_xid(gpu, xid)?),
        SimCommand::HealthSignals {
            state_dir,
            gpu,
            signals,
        } => {
            let signals: gpu::HealthSignals = serde_json::from_str(&signals)
                .map_err(|e| anyhow::anyhow!("health signals: {e}"))?;
            Ok(open_dir(&state_dir)?.set_health_signals(gpu, signals)?)
        }
        SimCommand::RemoveGpu { state_dir, gpu } => Ok(open_dir(&state_dir)?.remove_gpu(gpu)?),
        SimCommand::AddGpu { state_dir, gpu } => Ok(open_dir(&state_dir)?.add_gpu(gpu)?),
        SimCommand::ResetGpu { state_dir, gpu } => Ok(open_dir(&state_dir)?.reset_gpu(gpu)?),
        SimCommand::VmOpen {
            state_dir,
            device,
            close,
        } => Ok(open_dir(&state_dir)?.set_vfio_open(vfio_device(&device)?, !close)?),
        SimCommand::ReloadAmdgpu { state_dir } => {
            for gpu in open_dir(&state_dir)?.reload_amdgpu()? {
                print(&format!("{gpu}: memory partition changed\n"))?;
            }
            Ok(())
        }
    }
}

/// An mdev UUID or a PCI address, as `vgpud sim vm-open` takes it.
fn vfio_device(text: &str) -> anyhow::Result<sim::VfioDevice> {
    if let Ok(addr) = text.parse::<PciAddress>() {
        return Ok(addr.into());
    }
    let uuid: ids::MdevUuid = text
        .parse()
        .map_err(|e| anyhow::anyhow!("{text:?} is neither a PCI address nor an mdev UUID: {e}"))?;
    Ok(uuid.into())
}

fn open_dir(dir: &std::path::Path) -> anyhow::Result<sim::SimHost> {
    sim::SimHost::open(dir).with_context(|| format!("opening simulated host in {}", dir.display()))
}
