//! NUMA discovery over fixture trees shaped like real hosts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use ids::NumaNodeId;
use numa::{CpuSet, NumaError, free_memory_mib, nodes, online_nodes, read_node};
use sysfs::fixture::Tree;
use sysfs::{Op, RealSysfs, Sysfs, SysfsError};
use tempfile::TempDir;

const NODE: &str = "/sys/devices/system/node";

/// A host whose nodes are described by `(cpulist, MemTotal kB, MemFree kB, distances)`.
fn numa_host(nodes: &[(&str, u64, u64, &str)]) -> (TempDir, Tree) {
    let dir = tempfile::tempdir().unwrap();
    let tree = Tree::new(dir.path());
    let last = nodes.len() - 1;
    tree.file(&format!("{NODE}/online"), &format!("0-{last}\n"));
    tree.file(&format!("{NODE}/possible"), &format!("0-{last}\n"));
    for (i, (cpus, total, free, distance)) in nodes.iter().enumerate() {
        let node = format!("{NODE}/node{i}");
        tree.file(&format!("{node}/cpulist"), &format!("{cpus}\n"));
        tree.file(
            &format!("{node}/meminfo"),
            &format!(
                "Node {i} MemTotal:       {total} kB\nNode {i} MemFree:        {free} kB\n\
                 Node {i} MemUsed:        {} kB\n",
                total - free
            ),
        );
        tree.file(&format!("{node}/distance"), &format!("{distance}\n"));
    }
    (dir, tree)
}

/// A 2-socket host with 64 CPUs per socket (hyperthreads numbered after the cores).
fn two_socket_host() -> (TempDir, Tree) {
    numa_host(&[
        ("0-31,64-95", 263_921_920, 250_000_000, "10 21"),
        ("32-63,96-127", 264_162_304, 260_000_000, "21 10"),
    ])
}

fn fs(dir: &TempDir) -> RealSysfs {
    RealSysfs::new(dir.path())
}

#[test]
fn two_socket_host_reads_every_node() {
    let (dir, _tree) = two_socket_host();
    let fs = fs(&dir);
    assert_eq!(
        online_nodes(&fs).unwrap(),
        vec![NumaNodeId(0), NumaNodeId(1)]
    );
    let (found, errors) = nodes(&fs).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(found.len(), 2);
    let n1 = &found[1];
    assert_eq!(n1.id, NumaNodeId(1));
    assert_eq!(n1.cpus.to_string(), "32-63,96-127");
    assert_eq!(n1.cpus.len(), 64);
    assert_eq!(n1.memory_total_mib, 264_162_304 / 1024);
    assert_eq!(n1.memory_free_mib, 260_000_000 / 1024);
    assert_eq!(n1.distances, vec![21, 10]);
    assert!(n1.problems.is_empty(), "{:?}", n1.problems);
}

#[test]
fn memory_only_node_has_no_cpus() {
    let (dir, _tree) = numa_host(&[
        ("0-7", 8_388_608, 1024, "10 20"),
        ("", 4_194_304, 4096, "20 10"),
    ]);
    let node = read_node(&fs(&dir), NumaNodeId(1)).unwrap();
    assert!(node.cpus.is_empty());
    assert_eq!(node.cpus, CpuSet::default());
    assert_eq!(node.memory_total_mib, 4096);
}

#[test]
fn garbage_cpulist_fails_only_that_node() {
    let (dir, tree) = two_socket_host();
    tree.file(&format!("{NODE}/node1/cpulist"), "banana\n");
    let (found, errors) = nodes(&fs(&dir)).unwrap();
    assert_eq!(
        found.iter().map(|n| n.id).collect::<Vec<_>>(),
        vec![NumaNodeId(0)]
    );
    assert_eq!(errors.len(), 1);
    let chain = sysfs::error_chain(&errors[0]);
    assert!(
        matches!(
            errors[0],
            NumaError::Node {
                node: NumaNodeId(1),
                ..
            }
        ),
        "{chain}"
    );
    assert!(
        chain.contains("node1/cpulist") && chain.contains("banana"),
        "{chain}"
    );
}

#[test]
fn free_memory_alone_follows_the_nodes_meminfo() {
    let (dir, tree) = two_socket_host();
    let fs = fs(&dir);
    assert_eq!(
        free_memory_mib(&fs, NumaNodeId(1)),
        Some(260_000_000 / 1024)
    );
    tree.file(
        &format!("{NODE}/node1/meminfo"),
        "Node 1 MemTotal:       264162304 kB\nNode 1 MemFree:        1048576 kB\n",
    );
    assert_eq!(free_memory_mib(&fs, NumaNodeId(1)), Some(1024));
    // No such node, and a meminfo without a MemFree line: unknown, not zero.
    assert_eq!(free_memory_mib(&fs, NumaNodeId(5)), None);
    tree.file(&format!("{NODE}/node0/meminfo"), "Node 0 MemTotal: 5 kB\n");
    assert_eq!(free_memory_mib(&fs, NumaNodeId(0)), None);
}

#[test]
fn missing_meminfo_and_garbage_distance_are_problems() {
    let (dir, tree) = two_socket_host();
    std::fs::remove_file(dir.path().join("sys/devices/system/node/node0/meminfo")).unwrap();
    tree.file(&format!("{NODE}/node0/distance"), "10 far\n");
    let node = read_node(&fs(&dir), NumaNodeId(0)).unwrap();
    assert_eq!(node.cpus.len(), 64);
    assert_eq!((node.memory_total_mib, node.memory_free_mib), (0, 0));
    assert!(node.distances.is_empty());
    assert_eq!(node.problems.len(), 2, "{:?}", node.problems);
    assert!(
        node.problems[0].contains("node0/meminfo"),
        "{}",
        node.problems[0]
    );
    assert!(node.problems[1].contains("node0/distance") && node.problems[1].contains("far"));
}

#[test]
fn garbage_meminfo_line_keeps_the_other_value() {
    let (dir, tree) = two_socket_host();
    tree.file(
        &format!("{NODE}/node0/meminfo"),
        "Node 0 MemTotal: 2048 kB\nNode 0 MemFree: ??? kB\n",
    );
    let node = read_node(&fs(&dir), NumaNodeId(0)).unwrap();
    assert_eq!((node.memory_total_mib, node.memory_free_mib), (2, 0));
    assert_eq!(node.problems.len(), 1);
    assert!(node.problems[0].contains("MemFree"), "{}", node.problems[0]);
}

#[test]
fn distance_count_must_match_online_nodes() {
    let (dir, tree) = two_socket_host();
    tree.file(&format!("{NODE}/node1/distance"), "21 10 31\n");
    let (found, _) = nodes(&fs(&dir)).unwrap();
    assert!(found[0].problems.is_empty());
    assert_eq!(found[1].problems.len(), 1);
    assert!(
        found[1].problems[0].contains("3 distances but 2 nodes"),
        "{:?}",
        found[1].problems
    );
}

#[test]
fn unknown_and_offline_nodes() {
    let (dir, tree) = two_socket_host();
    let fs = fs(&dir);
    assert!(matches!(
        read_node(&fs, NumaNodeId(7)),
        Err(NumaError::NodeNotFound(NumaNodeId(7)))
    ));
    // The online list names a node whose directory is gone (hot-removed): reported, not fatal.
    tree.file(&format!("{NODE}/online"), "0-2\n");
    let (found, errors) = nodes(&fs).unwrap();
    assert_eq!(found.len(), 2);
    assert!(
        matches!(errors[..], [NumaError::NodeNotFound(NumaNodeId(2))]),
        "{errors:?}"
    );
}

#[test]
fn unreadable_online_list_fails_the_call() {
    let (dir, tree) = two_socket_host();
    tree.file(&format!("{NODE}/online"), "0-1,zebra\n");
    let err = nodes(&fs(&dir)).unwrap_err();
    assert!(matches!(err, NumaError::OnlineList(_)));
    assert!(sysfs::error_chain(&err).contains("zebra"));
    std::fs::remove_file(dir.path().join("sys/devices/system/node/online")).unwrap();
    let err = online_nodes(&RealSysfs::new(dir.path())).unwrap_err();
    assert!(
        sysfs::error_chain(&err).contains("No such file"),
        "{}",
        sysfs::error_chain(&err)
    );
}

#[test]
fn node_numbers_beyond_the_kernels_limit_are_refused() {
    let (dir, tree) = two_socket_host();
    // MAX_NUMNODES is at most 1024: node 1023 may exist, node 1024 cannot.
    tree.file(&format!("{NODE}/online"), "0-1,1023\n");
    assert_eq!(online_nodes(&fs(&dir)).unwrap().len(), 3);
    tree.file(&format!("{NODE}/online"), "0-30000\n");
    let err = online_nodes(&fs(&dir)).unwrap_err();
    assert!(
        sysfs::error_chain(&err).contains("node 1024 is out of range"),
        "{}",
        sysfs::error_chain(&err)
    );
}

/// Denies every access below `denied` with EACCES, as the kernel does for a directory the agent
/// may not read (the fixture cannot show this with permissions when the tests run as root).
#[derive(Debug)]
struct Denied {
    inner: RealSysfs,
    denied: PathBuf,
}

impl Denied {
    fn check(&self, op: Op, path: &Path) -> Result<(), SysfsError> {
        if path.starts_with(&self.denied) && path != self.denied {
            return Err(SysfsError::errno_of(op, path, libc::EACCES));
        }
        Ok(())
    }
}

impl Sysfs for Denied {
    fn read(&self, path: &Path, limit: usize) -> Result<Vec<u8>, SysfsError> {
        self.check(Op::Read, path)?;
        self.inner.read(path, limit)
    }
    fn write(&self, path: &Path, data: &[u8]) -> Result<(), SysfsError> {
        self.check(Op::Write, path)?;
        self.inner.write(path, data)
    }
    fn read_link(&self, path: &Path) -> Result<PathBuf, SysfsError> {
        self.check(Op::ReadLink, path)?;
        self.inner.read_link(path)
    }
    fn list_dir(&self, path: &Path) -> Result<Vec<OsString>, SysfsError> {
        self.check(Op::ListDir, path)?;
        self.inner.list_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
}

#[test]
fn unreadable_node_directory_fails_only_that_node() {
    let (dir, _tree) = two_socket_host();
    let fs = Denied {
        inner: fs(&dir),
        denied: PathBuf::from(format!("{NODE}/node1")),
    };
    let (found, errors) = nodes(&fs).unwrap();
    assert_eq!(
        found.iter().map(|n| n.id).collect::<Vec<_>>(),
        vec![NumaNodeId(0)]
    );
    let [
        NumaError::Node {
            node: NumaNodeId(1),
            source,
        },
    ] = &errors[..]
    else {
        panic!("{errors:?}");
    };
    assert_eq!(source.errno(), Some(libc::EACCES));
    assert!(source.path.ends_with("node1/cpulist"));
}

#[test]
fn kernel_without_numa_is_one_node() {
    let dir = tempfile::tempdir().unwrap();
    let tree = Tree::new(dir.path());
    tree.file("/sys/devices/system/cpu/online", "0-15\n");
    tree.file(
        "/proc/meminfo",
        "MemTotal:       32768000 kB\nMemFree:        16384000 kB\nMemAvailable:   20000000 kB\n",
    );
    let fs = fs(&dir);
    assert_eq!(online_nodes(&fs).unwrap(), vec![NumaNodeId(0)]);
    let (found, errors) = nodes(&fs).unwrap();
    assert!(errors.is_empty());
    let node = &found[0];
    assert_eq!(node.cpus.to_string(), "0-15");
    assert_eq!(
        (node.memory_total_mib, node.memory_free_mib),
        (32_000, 16_000)
    );
    assert_eq!(node.distances, vec![10]);
    assert!(node.problems.is_empty());
    assert_eq!(free_memory_mib(&fs, NumaNodeId(0)), Some(16_000));
    assert_eq!(free_memory_mib(&fs, NumaNodeId(1)), None);
    assert!(matches!(
        read_node(&fs, NumaNodeId(1)),
        Err(NumaError::NodeNotFound(_))
    ));
    assert!(Path::new(dir.path()).join("proc/meminfo").exists());
}

#[test]
fn node_serialises_with_cpu_list_string() {
    let (dir, _tree) = two_socket_host();
    let node = read_node(&fs(&dir), NumaNodeId(0)).unwrap();
    let json = serde_json::to_value(&node).unwrap();
    assert_eq!(json["id"], 0);
    assert_eq!(json["cpus"], "0-31,64-95");
    assert_eq!(
        serde_json::from_value::<numa::NumaNode>(json).unwrap(),
        node
    );
}
