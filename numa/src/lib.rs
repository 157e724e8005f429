//! NUMA nodes of the host: CPUs, memory and distances, read from sysfs.
//!
//! This crate owns the typed model of the host's NUMA topology ([`NumaNode`], [`CpuSet`]) and
//! reads it through [`sysfs::Sysfs`], so a real host, a fixture tree and the simulator read the
//! same way. It must not cache, hold agent state or decide placement: scheduling uses what is
//! returned here.

mod cpuset;
mod node;

pub use cpuset::{CpuSet, MAX_CPU};
pub use node::{NumaNode, free_memory_mib, nodes, online_nodes, read_node};

use ids::NumaNodeId;
use sysfs::SysfsError;

/// Why NUMA information could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NumaError {
    /// `/sys/devices/system/node/online` is missing or garbage.
    #[error("the list of online NUMA nodes is unreadable")]
    OnlineList(#[source] SysfsError),
    /// The node has no directory (or, without NUMA support, is not node 0).
    #[error("NUMA node {0} does not exist")]
    NodeNotFound(NumaNodeId),
    /// An essential attribute of the node (its CPU list) is missing or garbage.
    #[error("NUMA node {node} is unreadable")]
    Node {
        /// The node.
        node: NumaNodeId,
        /// The failed access.
        #[source]
        source: SysfsError,
    },
    /// A CPU or node list is not in the kernel's list format.
    #[error("invalid CPU list: {reason}")]
    CpuList {
        /// The rejected text (as given).
        input: String,
        /// What is wrong with it.
        reason: String,
    },
}
