//! The crate's one error type.

use std::path::PathBuf;

use ids::PciAddress;

/// Why a simulator operation failed. Kernel and vendor-library refusals are not `SimError`s: they
/// come back through the trait views as errno / NVML codes / AMD SMI statuses, as on a real host.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A file of the state directory or a profile could not be read or written.
    #[error("cannot access {}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `host.json` exists but is not a simulator state.
    #[error("simulator state {} is corrupt", path.display())]
    CorruptState {
        /// The state file.
        path: PathBuf,
        /// What the JSON parser said.
        #[source]
        source: serde_json::Error,
    },
    /// The state file was written by an incompatible simulator version.
    #[error("simulator state {} has format {found}, this build reads format {expected}", path.display())]
    StateFormat {
        /// The state file.
        path: PathBuf,
        /// Format found in the file.
        found: u32,
        /// Format this build reads and writes.
        expected: u32,
    },
    /// The state could not be encoded (a bug, reported rather than hidden).
    #[error("cannot encode the simulator state")]
    Encode(#[source] serde_json::Error),
    /// `create` was asked for a directory that already holds a simulated host.
    #[error("{} already holds a simulated host", dir.display())]
    StateExists {
        /// The state directory.
        dir: PathBuf,
    },
    /// `open` was asked for a directory without a simulated host.
    #[error("{} holds no simulated host (no host.json)", dir.display())]
    NoState {
        /// The state directory.
        dir: PathBuf,
    },
    /// `open_or_create` found a different profile in the directory.
    #[error("{} holds a simulated host of profile {found:?}, not {wanted:?}", dir.display())]
    ProfileMismatch {
        /// The state directory.
        dir: PathBuf,
        /// Profile in the directory.
        found: String,
        /// Profile asked for.
        wanted: String,
    },
    /// No built-in profile has this name.
    #[error("no built-in simulated host profile is named {name:?} (known: {known})")]
    UnknownProfile {
        /// The name asked for.
        name: String,
        /// The built-in names, comma-separated.
        known: String,
    },
    /// A profile is not valid TOML or does not match the schema.
    #[error("host profile is not valid")]
    ProfileSyntax(#[source] toml::de::Error),
    /// A profile could not be written as TOML.
    #[error("cannot write the host profile as TOML")]
    ProfileEncode(#[source] toml::ser::Error),
    /// A profile parses but describes an impossible host.
    #[error("host profile {profile:?} is inconsistent: {reason}")]
    InvalidProfile {
        /// The profile name.
        profile: String,
        /// What is wrong.
        reason: String,
    },
    /// A fault specification could not be parsed or does not make sense.
    #[error("invalid fault {spec:?}: {reason}")]
    InvalidFault {
        /// The specification (or a rendering of the fault).
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The profile has no GPU at this address.
    #[error("the simulated host has no GPU at {0}")]
    UnknownGpu(PciAddress),
    /// `add_gpu` on a GPU that is present, or `remove_gpu` on one that is already gone.
    #[error("GPU {gpu} is {state}")]
    GpuState {
        /// The GPU.
        gpu: PciAddress,
        /// `already present`, `removed`, or `in use (why)` for a refused GPU reset.
        state: &'static str,
    },
    /// A driver reload refused because processes still use its GPUs.
    #[error("driver {driver} is in use: stop every process using its GPUs first")]
    DriverBusy {
        /// The driver.
        driver: &'static str,
    },
    /// An NVIDIA-only action (an Xid) on another vendor's GPU.
    #[error("GPU {0} is not an NVIDIA GPU")]
    NotNvidia(PciAddress),
    /// No GPU instance with this id on the GPU.
    #[error("GPU {gpu} has no MIG GPU instance {gpu_instance}")]
    UnknownGpuInstance {
        /// The GPU.
        gpu: PciAddress,
        /// The GPU instance id.
        gpu_instance: u32,
    },
    /// The GPU does not support MIG.
    #[error("GPU {0} does not support MIG")]
    NotMigCapable(PciAddress),
    /// `set_vfio_open` named a device no VM could open.
    #[error("{device} cannot be opened by a VM: {reason}")]
    NotVfioDevice {
        /// The device.
        device: String,
        /// Why not.
        reason: &'static str,
    },
}

impl SimError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
    pub(crate) fn invalid_profile(profile: &str, reason: impl Into<String>) -> Self {
        Self::InvalidProfile {
            profile: profile.to_owned(),
            reason: reason.into(),
        }
    }
    pub(crate) fn invalid_fault(spec: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidFault {
            spec: spec.into(),
            reason: reason.into(),
        }
    }
}
