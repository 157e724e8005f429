//! NUMA-local VM pinning through libvirt.
//!
//! This crate owns three things the engine composes: [`NumaAccounting`] and its pure planner
//! (which host CPUs and memory node a VM gets for its slices, or why it cannot be local),
//! [`DomainXml`] (typed, lossless edits of a domain definition, recorded in the agent's own
//! metadata namespace so release undoes exactly what was added), and [`Hypervisor`] (the libvirt
//! connection that applies both to persistent definitions and, where libvirt allows, to running
//! domains). [`testhost`] writes libvirt test-driver host files from NUMA data for simulation mode.
//!
//! It must not know about the engine's allocation store, the scheduler or any API: callers pass
//! ids, slices and plans in and get records and reports back. Every libvirt call blocks; async
//! callers run them on a blocking thread.

mod domain;
mod hypervisor;
mod plan;
pub mod testhost;
pub mod xml;

pub use domain::{AllocationRecord, DomainXml, NAMESPACE, PREFIX, Pinning, Released};
pub use hypervisor::{
    ApplyReport, DomainAllocations, DomainInfo, Hypervisor, LiveAction, ReleaseReport,
};
pub use plan::{
    DomainUsage, GuestCell, HostNode, HostTopology, MemoryBinding, MemoryMode, NodeAccount,
    NumaAccounting, PinPlan, PinRequest, PlanOptions, Policy, Rejection, Slice, SliceDevice,
};

/// Why a pinning operation failed.
#[derive(Debug, thiserror::Error)]
pub enum VmpinError {
    /// XML text could not be parsed.
    #[error("the XML is malformed {0}")]
    Xml(String),
    /// The domain definition lacks something the agent needs, or has it in a shape it cannot use.
    #[error("the domain definition is unusable: {0}")]
    Domain(String),
    /// The agent's metadata in a domain is unreadable.
    #[error("the vgpud metadata is unreadable: {0}")]
    Metadata(String),
    /// The allocation id is already recorded in the domain.
    #[error("allocation {id} is already applied to domain {domain}")]
    AllocationExists {
        /// Allocation id.
        id: String,
        /// Domain name.
        domain: String,
    },
    /// The allocation id is not recorded in the domain.
    #[error("allocation {id} is not recorded in domain {domain}")]
    AllocationNotFound {
        /// Allocation id.
        id: String,
        /// Domain name.
        domain: String,
    },
    /// The device is already in the domain (added by someone else or another allocation).
    #[error("{device} is already in domain {domain}")]
    DeviceAlreadyPresent {
        /// The device, as text.
        device: String,
        /// Domain name.
        domain: String,
    },
    /// Planning refused the request.
    #[error("the VM cannot be placed: {0}")]
    Rejected(Rejection),
    /// libvirt could not be reached (libvirtd down or restarting, socket missing, auth refused).
    #[error("cannot connect to libvirt at {uri}")]
    Connect {
        /// The URI.
        uri: String,
        /// libvirt's error.
        #[source]
        source: virt::error::Error,
    },
    /// No domain of that name.
    #[error("domain {0} does not exist")]
    NoDomain(String),
    /// A transient domain has no persistent definition to record the allocation in.
    #[error("domain {0} is transient; vgpud pins only persistent domains")]
    Transient(String),
    /// A libvirt call failed.
    #[error("libvirt {call} failed for {target}")]
    Libvirt {
        /// The libvirt API.
        call: &'static str,
        /// What it was called on (domain or connection).
        target: String,
        /// libvirt's error.
        #[source]
        source: virt::error::Error,
    },
    /// A file could not be read or written.
    #[error("cannot access {path}")]
    Io {
        /// The path.
        path: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// NUMA data given to the test-host writer is unusable.
    #[error("the NUMA topology is unusable: {0}")]
    Topology(String),
}

impl VmpinError {
    /// Whether libvirt itself is out of reach (libvirtd down or restarting, the connection
    /// broken): worth retrying later, unlike a refusal.
    pub fn libvirt_unavailable(&self) -> bool {
        match self {
            Self::Connect { .. } => true,
            Self::Libvirt { source, .. } => hypervisor::connection_broken(source),
            _ => false,
        }
    }
}

impl From<Rejection> for VmpinError {
    fn from(r: Rejection) -> Self {
        Self::Rejected(r)
    }
}
