//! The command line, as clap definitions (also the source of the completions and the man page).

use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand};

/// Where vgpud listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/vgpud/api.sock";

/// Talk to the vgpud node agent over its REST API on a unix socket.
///
/// Exit status: 0 success; 1 the server refused or failed (its error code is printed);
/// 2 usage error; 3 cannot connect to the socket.
#[derive(Debug, Parser)]
#[command(name = "vgpuctl", version)]
pub struct Cli {
    /// The REST API socket (also from the environment variable VGPUCTL_SOCKET).
    #[arg(long, global = true, env = "VGPUCTL_SOCKET", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Print the server's JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The host: NUMA nodes and GPUs.
    Host,
    /// Every GPU.
    Gpus,
    /// One GPU with its health, utilisation and room per slice type; or quarantine or release
    /// it (`vgpuctl gpu quarantine ADDRESS --reason TEXT`, `vgpuctl gpu release ADDRESS`).
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Gpu {
        /// PCI address, e.g. 0000:07:00.0.
        #[arg(required = true)]
        address: Option<String>,
        /// Quarantine or release it.
        #[command(subcommand)]
        action: Option<GpuCommand>,
    },
    /// Slices vgpud owns.
    Slices,
    /// Create or destroy one slice.
    #[command(subcommand)]
    Slice(SliceCommand),
    /// Allocations to consumers.
    #[command(subcommand)]
    Alloc(AllocCommand),
    /// Declared layouts.
    #[command(subcommand)]
    Layouts(LayoutsCommand),
    /// Would this host take a request, and how well (a dry run); with --mix, the demand mix it
    /// scores against.
    Score(ScoreArgs),
    /// Follow events (slice, allocation, drift, layout) until interrupted.
    Events {
        /// Stop after this many events.
        #[arg(long)]
        count: Option<u64>,
    },
    /// Print a shell completion script.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff).
    Man,
}

/// `vgpuctl slice ...`
#[derive(Debug, Subcommand)]
pub enum SliceCommand {
    /// Create a slice of an explicit kind on an explicit GPU.
    Create {
        /// The GPU's PCI address, or an mdev parent that is not a PCI device (`mtty`).
        #[arg(long)]
        gpu: String,
        /// `mig:PROFILE[@START]`, `mdev:TYPE`, `vgpu:TYPE-ID`, `vf` or `gpu`.
        #[arg(long)]
        kind: String,
        /// Hand it to this consumer at once.
        #[arg(long)]
        consumer: Option<String>,
        /// The VM (with --consumer).
        #[arg(long, requires = "consumer")]
        vm: Option<String>,
    },
    /// Destroy a free slice.
    Destroy {
        /// The slice id.
        id: String,
    },
}

/// `vgpuctl gpu quarantine|release ...`
#[derive(Debug, Subcommand)]
pub enum GpuCommand {
    /// Take a GPU out of service: no new slices or allocations on it until it is released.
    Quarantine {
        /// PCI address, e.g. 0000:07:00.0.
        address: String,
        /// Why (shown in refusals and events).
        #[arg(long)]
        reason: String,
    },
    /// Return a quarantined GPU to service.
    Release {
        /// PCI address, e.g. 0000:07:00.0.
        address: String,
    },
}

/// `vgpuctl alloc ...`
#[derive(Debug, Subcommand)]
pub enum AllocCommand {
    /// Allocate slices to a consumer: all or none.
    Create {
        /// The consumer.
        #[arg(long)]
        consumer: String,
        /// The VM.
        #[arg(long)]
        vm: Option<String>,
        /// Retry-safe: the same key (and consumer) returns the same allocation.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// The OpenStack Placement consumer (a UUID) whose allocation on this host the request
        /// answers: vgpud allocates on the GPU Placement allocated.
        #[arg(long, value_name = "UUID")]
        placement_consumer: Option<String>,
        /// What to allocate.
        #[command(flatten)]
        request: RequestArgs,
    },
    /// Every allocation.
    List,
    /// One allocation.
    Show {
        /// The allocation id.
        id: String,
    },
    /// Release an allocation (its slices stay, free).
    Release {
        /// The allocation id.
        id: String,
    },
}

/// What to allocate or score.
#[derive(Debug, Args)]
pub struct RequestArgs {
    /// MIG profile (3g.40gb), mdev type (nvidia-222), vGPU type name or id, `vf` or `gpu`.
    #[arg(long = "type")]
    pub slice_type: String,
    /// How many.
    #[arg(long, default_value_t = 1)]
    pub count: u32,
    /// Only this GPU.
    #[arg(long)]
    pub gpu: Option<String>,
    /// required, preferred or none.
    #[arg(long)]
    pub numa_policy: Option<String>,
    /// The VM's vCPUs.
    #[arg(long)]
    pub vcpus: Option<u32>,
    /// The VM's memory, MiB.
    #[arg(long)]
    pub memory_mib: Option<u64>,
}

/// `vgpuctl score ...`
#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// Show the request mix the default policy scores against (learnt from the requests this
    /// host was asked to place) instead of scoring a request.
    #[arg(long, conflicts_with = "slice_type")]
    pub mix: bool,
    /// The request to score.
    #[command(flatten)]
    pub request: Option<RequestArgs>,
}

/// `vgpuctl layouts ...`
#[derive(Debug, Subcommand)]
pub enum LayoutsCommand {
    /// The declared layouts and each GPU's status.
    Get,
    /// Replace the layouts with a JSON file (`{"layouts": [...]}`; `-` for standard input) and
    /// wait until they are applied.
    Set {
        /// The file.
        file: PathBuf,
        /// Only if the layouts are still at this ETag (from `layouts get`).
        #[arg(long)]
        if_match: Option<String>,
        /// Return at once with the operation instead of waiting.
        #[arg(long)]
        no_wait: bool,
    },
    /// Import what an operator has: a mig-parted config (the chosen config's layouts replace
    /// the declared layouts and are applied) or mdevctl definitions (each mdev adopted when it
    /// exists as defined, created otherwise). vgpuctl reads the file or directory and sends its
    /// content. It applies at once and prints the diff; --dry-run prints the diff only.
    Import(ImportArgs),
}

/// `vgpuctl layouts import ...`
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("source").required(true).args(["mig_parted", "mdevctl"])))]
pub struct ImportArgs {
    /// A mig-parted config file (`version: v1`; `-` for standard input).
    #[arg(long, value_name = "FILE")]
    pub mig_parted: Option<PathBuf>,
    /// The config to import from the mig-parted file (default: the file's only one).
    #[arg(long, value_name = "NAME", requires = "mig_parted")]
    pub config: Option<String>,
    /// An mdevctl definitions directory (`/etc/mdevctl.d`: one `<parent>/<uuid>` file per mdev).
    #[arg(long, value_name = "DIR")]
    pub mdevctl: Option<PathBuf>,
    /// Show what would change (layouts added, changed, removed; slices made, destroyed,
    /// adopted) and apply nothing.
    #[arg(long)]
    pub dry_run: bool,
}
