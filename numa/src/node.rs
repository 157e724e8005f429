//! NUMA nodes read from `/sys/devices/system/node`, with the fallback for kernels built without
//! NUMA support.

use std::path::{Path, PathBuf};

use ids::NumaNodeId;
use sysfs::{Sysfs, SysfsError, SysfsExt, error_chain};

use crate::{CpuSet, NumaError};

const NODE_ROOT: &str = "/sys/devices/system/node";
const CPU_ONLINE: &str = "/sys/devices/system/cpu/online";
const PROC_MEMINFO: &str = "/proc/meminfo";
/// The kernel's `LOCAL_DISTANCE`: what a node's distance to itself always reads.
const LOCAL_DISTANCE: u32 = 10;

/// The most NUMA nodes a Linux kernel has: `MAX_NUMNODES` is `1 << NODES_SHIFT`
/// (include/linux/numa.h) and `NODES_SHIFT` is at most 10 (arch/x86/Kconfig, arch/arm64/Kconfig).
/// A larger node number in the online list is garbage; reading that many nodes, each with its
/// CPU list, would take minutes (found by fuzz/sysfs_values with an online list `0-30000`).
const MAX_NODES: u32 = 1 << 10;

/// One NUMA node: its CPUs, memory and distances to the online nodes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NumaNode {
    /// The node number.
    pub id: NumaNodeId,
    /// CPUs of the node; empty for a memory-only node.
    pub cpus: CpuSet,
    /// Total memory in MiB; 0 with an entry in `problems` when it could not be read.
    pub memory_total_mib: u64,
    /// Free memory in MiB at the time of reading; 0 with an entry in `problems` when unknown.
    pub memory_free_mib: u64,
    /// Distance to each online node, in the order of the online list (`10` is local); empty with
    /// an entry in `problems` when unreadable.
    pub distances: Vec<u32>,
    /// Optional attributes that were missing or garbage, one sentence each.
    pub problems: Vec<String>,
}

/// The online NUMA nodes, from `/sys/devices/system/node/online`. A kernel without NUMA support
/// has no such directory and is reported as the single node 0.
pub fn online_nodes(fs: &dyn Sysfs) -> Result<Vec<NumaNodeId>, NumaError> {
    if !numa_kernel(fs) {
        return Ok(vec![NumaNodeId(0)]);
    }
    let list: CpuSet = fs
        .read_parse(&Path::new(NODE_ROOT).join("online"))
        .map_err(NumaError::OnlineList)?;
    list.iter()
        .map(|n| {
            u16::try_from(n)
                .ok()
                .filter(|_| n < MAX_NODES)
                .map(NumaNodeId)
                .ok_or_else(|| NumaError::CpuList {
                    input: list.to_string(),
                    reason: format!("node {n} is out of range"),
                })
        })
        .collect()
}

/// Reads one node. Its CPU list is essential (a wrong CPU set would misplace pinning); memory and
/// distances are recorded in `problems` when unreadable.
pub fn read_node(fs: &dyn Sysfs, id: NumaNodeId) -> Result<NumaNode, NumaError> {
    if !numa_kernel(fs) {
        return match id {
            NumaNodeId(0) => read_single_node(fs),
            _ => Err(NumaError::NodeNotFound(id)),
        };
    }
    let dir = node_dir(id);
    if !fs.exists(&dir) {
        return Err(NumaError::NodeNotFound(id));
    }
    let cpus = fs
        .read_parse::<CpuSet>(&dir.join("cpulist"))
        .map_err(|source| NumaError::Node { node: id, source })?;
    let mut node = NumaNode {
        id,
        cpus,
        memory_total_mib: 0,
        memory_free_mib: 0,
        distances: Vec::new(),
        problems: Vec::new(),
    };
    read_memory(fs, &dir.join("meminfo"), &mut node);
    match fs
        .read_text(&dir.join("distance"))
        .and_then(|t| parse_distances(&dir, &t))
    {
        Ok(d) => node.distances = d,
        Err(e) => node.problems.push(format!(
            "distances of NUMA node {id} are unknown: {}",
            error_chain(&e)
        )),
    }
    Ok(node)
}

/// Every online node. A node that cannot be read goes into the error list and the others are
/// still returned; only an unreadable online list fails the whole call.
pub fn nodes(fs: &dyn Sysfs) -> Result<(Vec<NumaNode>, Vec<NumaError>), NumaError> {
    let online = online_nodes(fs)?;
    let mut found = Vec::new();
    let mut errors = Vec::new();
    for id in &online {
        match read_node(fs, *id) {
            Ok(node) => found.push(node),
            Err(e) => errors.push(e),
        }
    }
    for node in &mut found {
        let (have, want) = (node.distances.len(), online.len());
        if have != 0 && have != want {
            node.problems.push(format!(
                "NUMA node {} lists {have} distances but {want} nodes are online",
                node.id
            ));
        }
    }
    Ok((found, errors))
}

/// The free memory of node `id` in MiB, read alone (its meminfo, or `/proc/meminfo` on a kernel
/// without NUMA): the one figure of a node that changes all the time, for callers that keep the
/// rest. `None` when it cannot be read.
pub fn free_memory_mib(fs: &dyn Sysfs, id: NumaNodeId) -> Option<u64> {
    let path = if numa_kernel(fs) {
        node_dir(id).join("meminfo")
    } else if id == NumaNodeId(0) {
        PathBuf::from(PROC_MEMINFO)
    } else {
        return None;
    };
    let text = fs.read_text(&path).ok()?;
    meminfo_kib(&text, "MemFree").ok().map(|kib| kib / 1024)
}

fn numa_kernel(fs: &dyn Sysfs) -> bool {
    fs.exists(Path::new(NODE_ROOT))
}

fn node_dir(id: NumaNodeId) -> PathBuf {
    Path::new(NODE_ROOT).join(format!("node{}", id.0))
}

/// A kernel without NUMA: all online CPUs and all memory form node 0.
fn read_single_node(fs: &dyn Sysfs) -> Result<NumaNode, NumaError> {
    let id = NumaNodeId(0);
    let cpus = fs
        .read_parse::<CpuSet>(Path::new(CPU_ONLINE))
        .map_err(|source| NumaError::Node { node: id, source })?;
    let mut node = NumaNode {
        id,
        cpus,
        memory_total_mib: 0,
        memory_free_mib: 0,
        distances: vec![LOCAL_DISTANCE],
        problems: Vec::new(),
    };
    read_memory(fs, Path::new(PROC_MEMINFO), &mut node);
    Ok(node)
}

fn read_memory(fs: &dyn Sysfs, path: &Path, node: &mut NumaNode) {
    let text = match fs.read_text(path) {
        Ok(t) => t,
        Err(e) => {
            let why = error_chain(&e);
            node.problems
                .push(format!("memory of NUMA node {} is unknown: {why}", node.id));
            return;
        }
    };
    for (key, field) in [
        ("MemTotal", &mut node.memory_total_mib),
        ("MemFree", &mut node.memory_free_mib),
    ] {
        match meminfo_kib(&text, key) {
            Ok(kib) => *field = kib / 1024,
            Err(why) => node.problems.push(format!("{}: {why}", path.display())),
        }
    }
}

/// The value of `key` in kB, from `/proc/meminfo` (`MemTotal:  16384 kB`) or a node's meminfo
/// (`Node 0 MemTotal:  16384 kB`).
fn meminfo_kib(text: &str, key: &str) -> Result<u64, String> {
    for line in text.lines() {
        let mut words = line.split_whitespace().peekable();
        if words.peek() == Some(&"Node") {
            words.nth(1);
        }
        if words.next().and_then(|w| w.strip_suffix(':')) != Some(key) {
            continue;
        }
        let value = words.next().unwrap_or("");
        let unit = words.next();
        if unit.is_some_and(|u| u != "kB") {
            return Err(format!("{key} is in unexpected unit {unit:?}"));
        }
        return value
            .parse::<u64>()
            .map_err(|_| format!("{key} value {value:?} is not a number"));
    }
    Err(format!("no {key} line"))
}

fn parse_distances(dir: &Path, text: &str) -> Result<Vec<u32>, SysfsError> {
    let path = dir.join("distance");
    let distances = text
        .split_whitespace()
        .map(|w| {
            w.parse::<u32>()
                .map_err(|_| SysfsError::parse(&path, format!("{w:?} is not a distance")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if distances.is_empty() {
        return Err(SysfsError::parse(&path, "it is empty"));
    }
    Ok(distances)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_both_shapes() {
        let node = "Node 1 MemTotal:       263921920 kB\nNode 1 MemFree:        1024 kB\n";
        assert_eq!(meminfo_kib(node, "MemTotal"), Ok(263_921_920));
        assert_eq!(meminfo_kib(node, "MemFree"), Ok(1024));
        let proc = "MemTotal:       16384 kB\nMemFree:  2048 kB\nMemAvailable: 4096 kB\n";
        assert_eq!(meminfo_kib(proc, "MemFree"), Ok(2048));
        assert!(
            meminfo_kib(proc, "MemFre")
                .unwrap_err()
                .contains("no MemFre line")
        );
        assert!(
            meminfo_kib("MemTotal: lots kB", "MemTotal")
                .unwrap_err()
                .contains("\"lots\"")
        );
        assert!(
            meminfo_kib("MemTotal: 5 MB", "MemTotal")
                .unwrap_err()
                .contains("unit")
        );
    }
}
