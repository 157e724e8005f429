//! Reading PCI devices from fixture trees shaped like real hosts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::ffi::OsStrExt;

use common::{Host, PciHost};
use ids::{IommuGroupId, NumaNodeId, PciAddress, PciDeviceId, PciVendorId};
use sysfs::fixture::relative;
use vfio::{NumaSource, PcieLink, VfioError, list_devices, read_device};

fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}

#[test]
fn relative_targets_look_like_the_kernels() {
    assert_eq!(
        relative(
            "/sys/bus/pci/devices",
            "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0"
        ),
        "../../../devices/pci0000:40/0000:40:01.1/0000:41:00.0"
    );
    assert_eq!(
        relative(
            "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0",
            "/sys/kernel/iommu_groups/4"
        ),
        "../../../../kernel/iommu_groups/4"
    );
}

#[test]
fn gpu_behind_root_port_takes_the_bridges_node() {
    let host = Host::two_socket();
    let gpu = read_device(&host.fs(), addr("0000:41:00.0")).unwrap();
    assert_eq!(gpu.vendor, PciVendorId::NVIDIA);
    assert_eq!(gpu.device, PciDeviceId(0x2335));
    assert_eq!(gpu.subsystem_vendor, Some(PciVendorId::NVIDIA));
    assert_eq!(gpu.subsystem_device, Some(PciDeviceId(0x1234)));
    assert_eq!(gpu.class, 0x030200);
    assert!(gpu.is_gpu() && !gpu.is_vf());
    assert_eq!(gpu.driver.as_deref(), Some("nvidia"));
    assert_eq!(gpu.driver_override, None);
    assert_eq!(gpu.iommu_group, Some(IommuGroupId(40)));
    assert_eq!(gpu.numa_node, Some(NumaNodeId(1)));
    assert_eq!(gpu.numa_source, NumaSource::Upstream(addr("0000:40:01.1")));
    let link = PcieLink {
        current_speed_gts: Some(32.0),
        current_width: Some(16),
        max_speed_gts: Some(32.0),
        max_width: Some(16),
    };
    assert_eq!(gpu.link, Some(link));
    assert_eq!((gpu.sriov, gpu.physfn), (None, None));
    assert!(gpu.problems.is_empty(), "{:?}", gpu.problems);
}

#[test]
fn own_numa_node_wins_and_unknown_stays_unknown() {
    let host = Host::two_socket();
    let nic = read_device(&host.fs(), addr("0000:00:1f.6")).unwrap();
    assert_eq!(
        (nic.numa_node, nic.numa_source.clone()),
        (Some(NumaNodeId(0)), NumaSource::Device)
    );
    assert!(!nic.is_gpu());
    assert_eq!(nic.driver, None);
    assert_eq!(nic.link, None);
    // Nobody upstream knows either.
    host.pci(
        "pci0000:80/0000:80:03.1/0000:81:00.0",
        "0x1002",
        "0x74a1",
        "0x120000",
    );
    host.bridge("pci0000:80/0000:80:03.1", "-1");
    let mi300 = read_device(&host.fs(), addr("0000:81:00.0")).unwrap();
    assert_eq!(
        (mi300.numa_node, mi300.numa_source.clone()),
        (None, NumaSource::Unknown)
    );
    assert!(mi300.is_gpu());
    assert!(mi300.problems.is_empty(), "{:?}", mi300.problems);
}

#[test]
fn nearest_bridge_with_a_node_is_used() {
    let host = Host::empty();
    host.bridge("pci0000:c0/0000:c0:01.1", "3");
    host.bridge("pci0000:c0/0000:c0:01.1/0000:c1:00.0", "-1");
    host.bridge("pci0000:c0/0000:c0:01.1/0000:c1:00.0/0000:c2:10.0", "-1");
    host.pci(
        "pci0000:c0/0000:c0:01.1/0000:c1:00.0/0000:c2:10.0/0000:c3:00.0",
        "0x10de",
        "0x20b5",
        "0x030200",
    );
    let gpu = read_device(&host.fs(), addr("0000:c3:00.0")).unwrap();
    assert_eq!(gpu.numa_node, Some(NumaNodeId(3)));
    assert_eq!(gpu.numa_source, NumaSource::Upstream(addr("0000:c0:01.1")));
}

#[test]
fn garbage_optional_attributes_are_problems() {
    let host = Host::two_socket();
    let dev = host.pci(
        "pci0000:40/0000:40:01.1/0000:41:00.0",
        "0x10de",
        "0x2335",
        "0x030200",
    );
    dev.attr("numa_node", "banana")
        .attr("subsystem_vendor", "nvidia")
        .attr("current_link_speed", "fast")
        .attr("max_link_speed", "Unknown")
        .attr("max_link_width", "Unknown")
        .attr("driver_override", "vfio-pci");
    host.tree.link(
        &format!("{}/iommu_group", dev.sys),
        "../../../../kernel/iommu_groups/x1",
    );
    let gpu = read_device(&host.fs(), addr("0000:41:00.0")).unwrap();
    assert_eq!(
        (gpu.numa_node, gpu.numa_source.clone()),
        (None, NumaSource::Unknown)
    );
    assert_eq!(gpu.subsystem_vendor, None);
    assert_eq!(gpu.subsystem_device, Some(PciDeviceId(0x1234)));
    assert_eq!(gpu.iommu_group, None);
    assert_eq!(gpu.driver_override.as_deref(), Some("vfio-pci"));
    let link = gpu.link.clone().unwrap();
    assert_eq!(link.current_speed_gts, None);
    assert_eq!((link.max_speed_gts, link.max_width), (None, None));
    assert_eq!(link.current_width, Some(16));
    let problems = gpu.problems.join("\n");
    assert_eq!(gpu.problems.len(), 4, "{problems}");
    for needle in [
        "numa_node: \"banana\"",
        "subsystem_vendor",
        "current_link_speed: \"fast\"",
        "iommu_group",
    ] {
        assert!(problems.contains(needle), "{needle} not in {problems}");
    }
}

#[test]
fn missing_optional_attributes_are_not_problems() {
    let host = Host::two_socket();
    let dev = host.pci("pci0000:00/0000:00:02.0", "0x8086", "0x56c0", "0x030000");
    for name in [
        "subsystem_vendor",
        "subsystem_device",
        "driver_override",
        "numa_node",
    ] {
        dev.no_attr(name);
    }
    let igpu = read_device(&host.fs(), addr("0000:00:02.0")).unwrap();
    assert!(igpu.is_gpu());
    assert_eq!((igpu.subsystem_vendor, igpu.subsystem_device), (None, None));
    assert_eq!(
        (igpu.driver_override, igpu.iommu_group, igpu.numa_node),
        (None, None, None)
    );
    assert!(igpu.problems.is_empty(), "{:?}", igpu.problems);
}

#[test]
fn essential_attributes_fail_the_device() {
    let host = Host::two_socket();
    let dev = host.pci("pci0000:00/0000:00:03.0", "0x8086", "0x1234", "0x0300");
    dev.attr("class", "0x03000000");
    let err = read_device(&host.fs(), addr("0000:00:03.0")).unwrap_err();
    assert!(matches!(err, VfioError::Device { .. }));
    assert!(
        sysfs::error_chain(&err).contains("00:03.0/class"),
        "{}",
        sysfs::error_chain(&err)
    );
    dev.attr("class", "0x030000").no_attr("vendor");
    let err = read_device(&host.fs(), addr("0000:00:03.0")).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENOENT));
    dev.attr("vendor", "zz");
    let err = read_device(&host.fs(), addr("0000:00:03.0")).unwrap_err();
    assert!(
        sysfs::error_chain(&err).contains("vendor: \"zz\""),
        "{}",
        sysfs::error_chain(&err)
    );
    let missing = read_device(&host.fs(), addr("0000:99:00.0")).unwrap_err();
    assert!(matches!(missing, VfioError::DeviceNotFound(a) if a == addr("0000:99:00.0")));
}

#[test]
fn unreadable_device_directory_is_an_error_not_a_panic() {
    let host = Host::two_socket();
    let probe = host.probe();
    probe.deny("/sys/bus/pci/devices/0000:41:00.0");
    let err = read_device(&probe, addr("0000:41:00.0")).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EACCES));
    assert!(read_device(&probe, addr("0000:00:1f.6")).is_ok());
}

/// The two-socket host's NVIDIA GPU at 0000:41:00.0 as an SR-IOV PF (16 VFs possible) with these
/// VFs enabled.
fn nvidia_pf_with_vfs(host: &Host, vfs: &[&str]) {
    host.pci(
        "pci0000:40/0000:40:01.1/0000:41:00.0",
        "0x10de",
        "0x2335",
        "0x030200",
    )
    .sriov(16, vfs);
}

#[test]
fn sriov_pf_and_vfs() {
    let host = Host::two_socket();
    // VFs 0000:41:00.4 .. 0000:41:01.7; their names sort differently from virtfn0..virtfn11.
    let vf_addrs: Vec<String> = (0..12)
        .map(|i| format!("0000:41:{:02x}.{}", (i + 4) / 8, (i + 4) % 8))
        .collect();
    let vf_addrs: Vec<&str> = vf_addrs.iter().map(String::as_str).collect();
    nvidia_pf_with_vfs(&host, &vf_addrs);
    let fs = host.fs();
    let pf = read_device(&fs, addr("0000:41:00.0")).unwrap();
    let sriov = pf.sriov.clone().unwrap();
    assert_eq!((sriov.total_vfs, sriov.num_vfs), (16, 12));
    let expected: Vec<PciAddress> = vf_addrs.iter().map(|a| addr(a)).collect();
    assert_eq!(sriov.vfs, expected, "virtfn10 must follow virtfn9");
    assert!(pf.problems.is_empty(), "{:?}", pf.problems);
    let vf = read_device(&fs, expected[11]).unwrap();
    assert!(vf.is_vf() && vf.is_gpu());
    assert_eq!(vf.physfn, Some(addr("0000:41:00.0")));
    assert_eq!(vf.sriov, None);
    assert_eq!(vf.numa_source, NumaSource::Upstream(addr("0000:40:01.1")));
}

#[test]
fn sriov_garbage_counts() {
    let host = Host::two_socket();
    let pf = host.pci(
        "pci0000:40/0000:40:01.1/0000:41:00.0",
        "0x10de",
        "0x2335",
        "0x030200",
    );
    pf.sriov(16, &["0000:41:00.4", "0000:41:00.5"])
        .attr("sriov_numvfs", "3");
    let dev = read_device(&host.fs(), addr("0000:41:00.0")).unwrap();
    assert_eq!(dev.sriov.unwrap().num_vfs, 3);
    assert!(
        dev.problems[0].contains("3 VFs are enabled but 2 virtfn links"),
        "{:?}",
        dev.problems
    );
    pf.attr("sriov_totalvfs", "-3");
    let dev = read_device(&host.fs(), addr("0000:41:00.0")).unwrap();
    assert_eq!(dev.sriov, None);
    assert!(
        dev.problems[0].contains("sriov_totalvfs: \"-3\""),
        "{:?}",
        dev.problems
    );
}

#[test]
fn listing_reports_bad_names_beside_the_rest() {
    let host = Host::two_socket();
    host.tree.link(
        "/sys/bus/pci/devices/0000:AB:00.0",
        "../../../devices/pci0000:00/0000:00:1f.6",
    );
    host.tree.dir("/sys/bus/pci/devices/garbage");
    let raw = host
        .dir
        .path()
        .join("sys/bus/pci/devices")
        .join(std::ffi::OsStr::from_bytes(b"0000:\xff"));
    std::fs::create_dir(raw).unwrap();
    let (found, errors) = list_devices(&host.fs()).unwrap();
    assert_eq!(
        found,
        vec![
            addr("0000:00:1f.6"),
            addr("0000:40:01.1"),
            addr("0000:41:00.0")
        ]
    );
    assert_eq!(errors.len(), 3, "{errors:?}");
    let text: Vec<String> = errors.iter().map(|e| sysfs::error_chain(e)).collect();
    assert!(text.iter().any(|t| t.contains("not UTF-8")), "{text:?}");
    assert!(
        text.iter()
            .any(|t| t.contains("0000:AB:00.0") && t.contains("0000:ab:00.0")),
        "{text:?}"
    );
    assert!(text.iter().any(|t| t.contains("garbage")), "{text:?}");
}

#[test]
fn listing_without_pci_bus_fails() {
    let host = Host::empty();
    std::fs::remove_dir_all(host.dir.path().join("sys/bus/pci")).unwrap();
    assert_eq!(
        list_devices(&host.fs()).unwrap_err().errno(),
        Some(libc::ENOENT)
    );
}

#[test]
fn device_serialises() {
    let host = Host::two_socket();
    let gpu = read_device(&host.fs(), addr("0000:41:00.0")).unwrap();
    let json = serde_json::to_value(&gpu).unwrap();
    assert_eq!(json["address"], "0000:41:00.0");
    assert_eq!(json["numa_source"]["upstream"], "0000:40:01.1");
    assert_eq!(json["iommu_group"], 40);
    assert_eq!(
        serde_json::from_value::<vfio::PciDevice>(json).unwrap(),
        gpu
    );
}

#[test]
fn the_light_reads_agree_with_the_whole_device() {
    let host = Host::two_socket();
    nvidia_pf_with_vfs(&host, &["0000:41:00.4", "0000:41:00.5"]);
    let fs = host.fs();
    let (addrs, _) = list_devices(&fs).unwrap();
    assert!(addrs.len() >= 4, "{addrs:?}");
    for a in addrs {
        let dev = read_device(&fs, a).unwrap();
        assert_eq!(vfio::read_identity(&fs, a).unwrap(), dev.identity(), "{a}");
        assert_eq!(vfio::numa_node(&fs, a), dev.numa_node, "{a}");
    }
    let pf = vfio::read_identity(&fs, addr("0000:41:00.0")).unwrap();
    assert!(pf.sriov_capable && !pf.is_vf && pf.is_gpu());
    assert_eq!(pf.driver.as_deref(), Some("nvidia"));
    assert!(
        vfio::read_identity(&fs, addr("0000:41:00.4"))
            .unwrap()
            .is_vf
    );
    assert!(matches!(
        vfio::read_identity(&fs, addr("0000:99:00.0")),
        Err(VfioError::DeviceNotFound(_))
    ));
    assert_eq!(vfio::numa_node(&fs, addr("0000:99:00.0")), None);
}
