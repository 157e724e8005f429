//! The sysfs view renders the paths and formats of docs/sysfs.md, with kernel-like errors.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::path::Path;

use common::*;
use libc::{EACCES, EFBIG, EINVAL, EISDIR, ENOENT, ENOTDIR};
use sysfs::SysfsExt;

#[test]
fn numa_nodes_cpus_and_memory() {
    let fs = host("dgx-a100").sysfs();
    assert_eq!(read(&fs, "/sys/devices/system/node/online"), "0-1");
    assert_eq!(
        read(&fs, "/sys/devices/system/node/node0/cpulist"),
        "0-63,128-191"
    );
    assert_eq!(
        read(&fs, "/sys/devices/system/node/node1/cpulist"),
        "64-127,192-255"
    );
    assert_eq!(
        read(&fs, "/sys/devices/system/node/node0/distance"),
        "10 32"
    );
    assert_eq!(
        read(&fs, "/sys/devices/system/node/node1/distance"),
        "32 10"
    );
    let meminfo = read(&fs, "/sys/devices/system/node/node1/meminfo");
    let total = meminfo
        .lines()
        .find(|l| l.starts_with("Node 1 MemTotal:"))
        .unwrap();
    assert_eq!(
        total.split_whitespace().nth(3),
        Some("1073741824"),
        "{meminfo}"
    );
    assert!(meminfo.contains("Node 1 MemFree:"));
    assert_eq!(read(&fs, "/sys/devices/system/cpu/online"), "0-255");
    assert!(read(&fs, "/proc/meminfo").starts_with("MemTotal:"));
    assert_eq!(read(&fs, "/proc/sys/kernel/hostname"), "dgx-a100-sim");
    assert_eq!(
        names(&fs, "/sys/devices/system/node")
            .iter()
            .filter(|n| n.starts_with("node"))
            .count(),
        2
    );
}

#[test]
fn gpu_attributes_and_links_look_like_the_kernels() {
    let fs = host("dgx-a100").sysfs();
    let gpu = "0000:07:00.0";
    let link = fs
        .read_link(Path::new(&format!("/sys/bus/pci/devices/{gpu}")))
        .unwrap();
    assert_eq!(
        link,
        Path::new("../../../devices/pci0000:00/0000:00:01.1/0000:07:00.0")
    );
    assert_eq!(read(&fs, &dev(gpu, "vendor")), "0x10de");
    assert_eq!(read(&fs, &dev(gpu, "device")), "0x20b2");
    assert_eq!(read(&fs, &dev(gpu, "subsystem_device")), "0x147f");
    assert_eq!(read(&fs, &dev(gpu, "class")), "0x030200");
    assert_eq!(read(&fs, &dev(gpu, "numa_node")), "0");
    assert_eq!(read(&fs, &dev(gpu, "local_cpulist")), "0-63,128-191");
    assert_eq!(read(&fs, &dev(gpu, "current_link_speed")), "16.0 GT/s PCIe");
    assert_eq!(read(&fs, &dev(gpu, "max_link_width")), "16");
    assert_eq!(read(&fs, &dev(gpu, "driver_override")), "(null)");
    assert_eq!(
        link_name(&fs, &dev(gpu, "driver")).as_deref(),
        Some("nvidia")
    );
    let driver = fs.resolve_link(Path::new(&dev(gpu, "driver"))).unwrap();
    assert_eq!(driver, Path::new("/sys/bus/pci/drivers/nvidia"));
    let group = group_of(&fs, gpu);
    let group_dir = fs
        .resolve_link(Path::new(&dev(gpu, "iommu_group")))
        .unwrap();
    assert_eq!(
        group_dir,
        Path::new(&format!("/sys/kernel/iommu_groups/{group}"))
    );
    assert_eq!(
        names(&fs, &format!("/sys/kernel/iommu_groups/{group}/devices")),
        vec![gpu]
    );
    let back = fs
        .resolve_link(Path::new(&format!(
            "/sys/kernel/iommu_groups/{group}/devices/{gpu}"
        )))
        .unwrap();
    assert_eq!(
        back,
        Path::new("/sys/devices/pci0000:00/0000:00:01.1/0000:07:00.0")
    );
    assert!(names(&fs, "/sys/bus/pci/drivers/nvidia").contains(&gpu.to_owned()));
    // A GPU has no SR-IOV here, and no VF links.
    assert!(!exists(&fs, &dev(gpu, "sriov_numvfs")));
    assert!(!exists(&fs, &dev(gpu, "physfn")));
}

#[test]
fn every_device_lists_and_bridges_are_pci_devices_too() {
    let fs = host("dgx-a100").sysfs();
    let all = names(&fs, "/sys/bus/pci/devices");
    assert_eq!(all.len(), 8 + 10 + 2, "{all:?}");
    let port = "0000:00:01.1";
    assert_eq!(read(&fs, &dev(port, "class")), "0x060400");
    assert_eq!(read(&fs, &dev(port, "numa_node")), "0");
    assert_eq!(
        link_name(&fs, &dev(port, "driver")).as_deref(),
        Some("pcieport")
    );
    let groups: std::collections::BTreeSet<u32> = all.iter().map(|d| group_of(&fs, d)).collect();
    assert_eq!(groups.len(), all.len(), "every device has its own group");
    // Listing follows the link to the device directory.
    let attrs = names(&fs, &format!("/sys/bus/pci/devices/{port}"));
    assert!(
        attrs.contains(&"vendor".to_owned()) && attrs.contains(&"0000:07:00.0".to_owned()),
        "{attrs:?}"
    );
}

#[test]
fn firmware_without_locality_reads_minus_one_under_a_node_1_switch() {
    let fs = host("vdi-mixed").sysfs();
    let gpu = "0000:84:00.0";
    assert_eq!(read(&fs, &dev(gpu, "numa_node")), "-1");
    assert_eq!(read(&fs, &dev(gpu, "local_cpulist")), "0-127");
    let real = fs
        .resolve_link(Path::new(&format!("/sys/bus/pci/devices/{gpu}")))
        .unwrap();
    assert_eq!(
        real,
        Path::new("/sys/devices/pci0000:80/0000:80:01.1/0000:81:00.0/0000:82:01.0/0000:84:00.0")
    );
    // The upstream bridges know the node.
    for bridge in ["0000:82:01.0", "0000:81:00.0", "0000:80:01.1"] {
        assert_eq!(read(&fs, &dev(bridge, "numa_node")), "1", "{bridge}");
    }
    assert_eq!(read(&fs, &dev("0000:83:00.0", "numa_node")), "1");
}

#[test]
fn kernel_like_errors() {
    let fs = host("single-gpu").sysfs();
    let gpu = "0000:01:00.0";
    assert_eq!(read_err(&fs, &dev(gpu, "nope")), ENOENT);
    assert_eq!(
        read_err(&fs, "/sys/bus/pci/devices/0000:09:00.0/vendor"),
        ENOENT
    );
    assert_eq!(
        read_err(&fs, &format!("/sys/bus/pci/devices/{gpu}")),
        EISDIR
    );
    assert_eq!(read_err(&fs, &dev(gpu, "vendor/x")), ENOTDIR);
    assert_eq!(
        read_err(&fs, "/sys/bus/pci/drivers_probe"),
        EACCES,
        "write-only attribute"
    );
    assert_eq!(
        write_err(&fs, &dev(gpu, "vendor"), "0x1234"),
        EACCES,
        "read-only attribute"
    );
    assert_eq!(write_err(&fs, &dev(gpu, "nope"), "1"), ENOENT);
    assert_eq!(write_err(&fs, "/sys/bus/pci/devices", "1"), EISDIR);
    assert_eq!(
        read(&fs, &dev(gpu, "vendor")),
        "0x10de",
        "a refused write changes nothing"
    );
    let e = fs.read_link(Path::new(&dev(gpu, "vendor"))).unwrap_err();
    assert_eq!(e.errno(), Some(EINVAL));
    let e = fs.list_dir(Path::new(&dev(gpu, "vendor"))).unwrap_err();
    assert_eq!(e.errno(), Some(ENOTDIR));
    let e = fs.read(Path::new(&dev(gpu, "vendor")), 3).unwrap_err();
    assert_eq!(e.errno(), Some(EFBIG));
    assert_eq!(
        fs.read(Path::new(&dev(gpu, "vendor")), 7).unwrap(),
        b"0x10de\n"
    );
    let e = fs.read(Path::new("sys/bus"), 10).unwrap_err();
    assert_eq!(e.errno(), Some(EINVAL), "relative paths are refused");
    assert_eq!(
        read_err(&fs, "/dev/vfio/vfio"),
        EINVAL,
        "a character device is not a text file"
    );
    assert!(exists(&fs, "/dev/vfio/vfio"));
    assert!(
        exists(&fs, &dev(gpu, "driver/bind")),
        "exists follows links"
    );
    assert!(!exists(&fs, &dev(gpu, "driver/nope")));
    assert!(!exists(&fs, "/sys/../etc/passwd"));
}

#[test]
fn every_builtin_profile_renders_numa_and_gpus() {
    for name in sim::Profile::builtin_names() {
        let fs = host(name).sysfs();
        assert!(
            !read(&fs, "/sys/devices/system/node/online").is_empty(),
            "{name}"
        );
        let gpus: Vec<String> = names(&fs, "/sys/bus/pci/devices")
            .into_iter()
            .filter(|d| {
                read(&fs, &dev(d, "class")).starts_with("0x03")
                    || read(&fs, &dev(d, "class")).starts_with("0x12")
            })
            .collect();
        assert!(!gpus.is_empty(), "{name}");
        for g in gpus {
            let text = fs.read_text(Path::new(&dev(&g, "numa_node"))).unwrap();
            assert!(text.parse::<i32>().is_ok(), "{name} {g}: {text}");
        }
    }
}
