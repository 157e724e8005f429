//! Why the scheduler could not decide.

use ids::PciAddress;
use serde::{Deserialize, Serialize};

/// Why a request was rejected, or why the input could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchedError {
    /// `count` was 0.
    #[error("the request asks for no slice; count must be at least 1")]
    ZeroCount,
    /// A fractional share outside 1..=1000.
    #[error("a fractional share must be 1 to 1000 thousandths of a GPU, not {0}")]
    BadFraction(u32),
    /// A generic size of zero.
    #[error("a generic slice size needs some memory or compute")]
    EmptyGenericSize,
    /// The snapshot lists an instance its GPU's geometry or offers do not describe.
    #[error("GPU {gpu} lists an existing {what} instance its own offers do not describe")]
    UnknownInstance {
        /// The GPU.
        gpu: PciAddress,
        /// The profile or type named by the instance.
        what: String,
    },
    /// More GPUs asked for than the host has.
    #[error("the request needs {wanted} GPUs and the host has {have}")]
    TooManyGpus {
        /// GPUs requested.
        wanted: u32,
        /// GPUs on the host.
        have: usize,
    },
    /// No GPU, or no combination of GPUs, can take the request now.
    #[error("no GPU of this host can take the request now")]
    NoCapacity,
    /// GPUs could take the slice but no NUMA node can take the VM's CPUs and memory as asked.
    #[error(
        "GPUs have room but no NUMA node can host {cpu_milli} milli-CPUs and {memory_mib} MiB under the NUMA policy"
    )]
    NoCpuOrMemory {
        /// CPU demand.
        cpu_milli: u32,
        /// Memory demand.
        memory_mib: u64,
    },
    /// GPUs with room exist but none is NVLink-connected as required.
    #[error("no set of {0} GPUs with room is fully NVLink-connected")]
    NoNvlinkGroup(u32),
}
