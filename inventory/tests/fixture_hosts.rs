//! Discovery over fixture trees shaped like real hosts, through the real sysfs implementation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// A tree under another root: no vendor library, AMD through sysfs (as `vgpud inventory --root`
// opens it).
use hostwire::real_access as access;
use inventory::{NumaSource, Vendor, discover};
use sysfs::fixture::Tree;

const GPU: &str = "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0";
const PORT: &str = "/sys/devices/pci0000:40/0000:40:01.1";
const NIC: &str = "/sys/devices/pci0000:00/0000:00:03.0";
const BROKEN: &str = "/sys/devices/pci0000:00/0000:00:04.0";

fn pci(tree: &Tree, dir: &str, vendor: &str, device: &str, class: &str, numa: &str, group: u32) {
    let bdf = dir.rsplit('/').next().unwrap();
    tree.file(&format!("{dir}/vendor"), &format!("{vendor}\n"));
    tree.file(&format!("{dir}/device"), &format!("{device}\n"));
    tree.file(&format!("{dir}/class"), &format!("{class}\n"));
    tree.file(&format!("{dir}/numa_node"), &format!("{numa}\n"));
    tree.link(
        &format!("/sys/bus/pci/devices/{bdf}"),
        &format!("../../..{}", dir.trim_start_matches("/sys")),
    );
    let depth = dir.matches('/').count();
    let up = "../".repeat(depth);
    tree.link(
        &format!("{dir}/iommu_group"),
        &format!("{up}sys/kernel/iommu_groups/{group}"),
    );
    tree.link(
        &format!("/sys/kernel/iommu_groups/{group}/devices/{bdf}"),
        &format!(
            "../../../../devices{}",
            dir.trim_start_matches("/sys/devices")
        ),
    );
}

fn two_socket_host(tree: &Tree) {
    tree.file("/proc/sys/kernel/hostname", "gpu-host-7\n");
    tree.file("/sys/devices/system/node/online", "0-1\n");
    for (n, cpus) in [(0, "0-15,32-47"), (1, "16-31,48-63")] {
        let dir = format!("/sys/devices/system/node/node{n}");
        tree.file(&format!("{dir}/cpulist"), &format!("{cpus}\n"));
        tree.file(
            &format!("{dir}/meminfo"),
            &format!(
                "Node {n} MemTotal:       263921920 kB\nNode {n} MemFree:        200000000 kB\n"
            ),
        );
        tree.file(
            &format!("{dir}/distance"),
            if n == 0 { "10 21\n" } else { "21 10\n" },
        );
    }
    pci(tree, PORT, "0x1022", "0x1483", "0x060400", "1", 30);
    // Firmware gave the GPU no locality: its root port knows.
    pci(tree, GPU, "0x10de", "0x20b2", "0x030200", "-1", 31);
    tree.link(
        &format!("{GPU}/driver"),
        "../../../../bus/pci/drivers/nvidia",
    );
    pci(tree, NIC, "0x8086", "0x1572", "0x020000", "0", 5);
    tree.file(
        "/sys/devices/virtual/mtty/mtty/mdev_supported_types/mtty-2/name",
        "Dual port serial\n",
    );
    let ty = "/sys/devices/virtual/mtty/mtty/mdev_supported_types/mtty-2";
    tree.file(&format!("{ty}/device_api"), "vfio-pci\n");
    tree.file(&format!("{ty}/available_instances"), "12\n");
    tree.dir(&format!("{ty}/devices"));
    tree.link(
        "/sys/class/mdev_bus/mtty",
        "../../devices/virtual/mtty/mtty",
    );
}

#[test]
fn a_two_socket_host_without_nvml() {
    let dir = tempfile::tempdir().unwrap();
    let tree = Tree::new(dir.path());
    two_socket_host(&tree);
    let inv = discover(&access(dir.path()));
    assert_eq!(inv.hostname, "gpu-host-7");
    assert_eq!(inv.numa_nodes.len(), 2);
    assert_eq!(inv.numa_nodes[1].cpus, "16-31,48-63");
    assert_eq!(inv.numa_nodes[1].cpu_count, 32);
    assert_eq!(inv.numa_nodes[0].distances, vec![10, 21]);
    assert_eq!(inv.gpus.len(), 1);
    let gpu = &inv.gpus[0];
    assert_eq!(gpu.pci_address.to_string(), "0000:41:00.0");
    assert_eq!(gpu.vendor, Vendor::Nvidia);
    assert_eq!(gpu.numa_node.map(|n| n.0), Some(1));
    assert_eq!(gpu.numa_source, NumaSource::Upstream);
    assert_eq!(gpu.iommu_group.map(|g| g.0), Some(31));
    assert_eq!(gpu.driver.as_deref(), Some("nvidia"));
    assert!(gpu.mig.is_none(), "no NVML, no MIG information");
    assert_eq!(inv.pci_devices.len(), 3);
    assert_eq!(inv.other_mdev_parents.len(), 1);
    assert_eq!(inv.other_mdev_parents[0].name.as_str(), "mtty");
    assert_eq!(
        inv.other_mdev_parents[0].types[0].available_instances,
        Some(12)
    );
    assert!(!inv.vendor_libraries.nvml.available);
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
}

#[test]
fn garbage_and_missing_files_become_warnings_not_failures() {
    let dir = tempfile::tempdir().unwrap();
    let tree = Tree::new(dir.path());
    two_socket_host(&tree);
    // A device whose class is garbage, a stray entry, node 1 without meminfo, an mdev type whose
    // count is garbage.
    pci(&tree, BROKEN, "0x8086", "0x1572", "banana", "0", 6);
    tree.file("/sys/bus/pci/devices/not-a-device", "");
    std::fs::remove_file(dir.path().join("sys/devices/system/node/node1/meminfo")).unwrap();
    tree.file(
        "/sys/devices/virtual/mtty/mtty/mdev_supported_types/mtty-2/available_instances",
        "-3\n",
    );
    let inv = discover(&access(dir.path()));
    let all = inv.warnings.join("\n");
    assert!(all.contains("0000:00:04.0"), "{all}");
    assert!(all.contains("not-a-device"), "{all}");
    assert!(
        all.contains("node1/meminfo") || all.contains("node 1"),
        "{all}"
    );
    assert!(all.contains("available_instances"), "{all}");
    // The rest is still there.
    assert_eq!(inv.gpus.len(), 1);
    assert_eq!(inv.numa_nodes.len(), 2);
    assert_eq!(inv.pci_devices.len(), 3);
    assert_eq!(inv.other_mdev_parents[0].types[0].available_instances, None);
}

#[test]
fn an_empty_root_is_reported_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let inv = discover(&access(dir.path()));
    assert!(inv.gpus.is_empty());
    assert!(!inv.warnings.is_empty());
    let text = inventory::render_tree(&inv);
    assert!(text.contains("no GPUs"), "{text}");
}
