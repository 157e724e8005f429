//! IOMMU groups, SR-IOV counts, vfio-pci binding and NVIDIA vGPU attributes on fixture hosts.
//!
//! A fixture tree stores what is written, so these tests check which values reach which files in
//! which order, and the error paths; the kernel's reactions belong to the simulator's tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::{Host, PciHost};
use ids::{IommuGroupId, PciAddress, VgpuTypeId};
use sysfs::SysfsExt;
use sysfs::fixture::Probe;
use vfio::*;

fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}

fn w(path: &str, value: &str) -> (String, String) {
    (path.to_owned(), value.to_owned())
}

const GPU: &str = "/sys/bus/pci/devices/0000:41:00.0";

// ---- IOMMU groups ----

#[test]
fn group_lists_its_pci_devices() {
    let host = Host::two_socket();
    let group = iommu_group(&host.fs(), IommuGroupId(40)).unwrap();
    assert_eq!(
        group.devices,
        vec![addr("0000:40:01.1"), addr("0000:41:00.0")]
    );
    assert!(matches!(
        iommu_group(&host.fs(), IommuGroupId(7)),
        Err(VfioError::GroupNotFound(IommuGroupId(7)))
    ));
}

#[test]
fn group_viability_is_strict_about_bridges() {
    let host = Host::two_socket();
    let fs = host.fs();
    let v = group_viability(&fs, IommuGroupId(40)).unwrap();
    assert!(!v.viable);
    let expected = vec![
        (addr("0000:40:01.1"), "pcieport".to_owned()),
        (addr("0000:41:00.0"), "nvidia".to_owned()),
    ];
    assert_eq!(v.blockers, expected);
    // An unbound device alone is viable.
    assert_eq!(
        group_viability(&fs, IommuGroupId(12)).unwrap(),
        GroupViability {
            viable: true,
            blockers: vec![]
        }
    );
    // A group of a vfio-pci GPU and its unbound audio function is viable.
    host.pci(
        "pci0000:80/0000:80:01.0/0000:81:00.0",
        "0x10de",
        "0x2684",
        "0x030000",
    )
    .driver("vfio-pci")
    .iommu_group(81);
    host.pci(
        "pci0000:80/0000:80:01.0/0000:81:00.1",
        "0x10de",
        "0x22ba",
        "0x040300",
    )
    .iommu_group(81);
    assert!(group_viability(&fs, IommuGroupId(81)).unwrap().viable);
}

#[test]
fn group_with_unreadable_member_fails() {
    let host = Host::two_socket();
    let probe = host.probe();
    probe.deny(GPU);
    let err = group_viability(&probe, IommuGroupId(40)).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EACCES));
}

#[test]
fn vfio_node() {
    let host = Host::two_socket();
    assert!(!vfio_node_present(&host.fs(), IommuGroupId(40)));
    host.tree.file("/dev/vfio/40", "");
    assert!(vfio_node_present(&host.fs(), IommuGroupId(40)));
}

// ---- SR-IOV ----

fn sriov_host() -> Host {
    Host::two_socket_sriov()
}

#[test]
fn set_num_vfs_writes_and_rereads() {
    let host = sriov_host();
    let probe = host.probe();
    assert_eq!(set_num_vfs(&probe, addr("0000:41:00.0"), 8).unwrap(), 8);
    assert_eq!(probe.writes(), vec![w(&format!("{GPU}/sriov_numvfs"), "8")]);
}

#[test]
fn set_num_vfs_returns_what_the_kernel_enabled() {
    let host = sriov_host();
    let numvfs = host
        .dir
        .path()
        .join("sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0/sriov_numvfs");
    // The kernel enabled only 4 of the 8 asked for.
    let probe = host
        .probe()
        .on_write(move |_, _| std::fs::write(&numvfs, "4\n").unwrap());
    assert_eq!(set_num_vfs(&probe, addr("0000:41:00.0"), 8).unwrap(), 4);
}

#[test]
fn set_num_vfs_keeps_the_errno() {
    let host = sriov_host();
    let probe = host.probe();
    probe.fail_write(&format!("{GPU}/sriov_numvfs"), libc::EBUSY);
    let err = set_num_vfs(&probe, addr("0000:41:00.0"), 4).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EBUSY));
    assert!(sysfs::error_chain(&err).contains("sriov_numvfs"));
    let probe = host.probe();
    probe.fail_write(&format!("{GPU}/sriov_numvfs"), libc::ERANGE);
    assert_eq!(
        set_num_vfs(&probe, addr("0000:41:00.0"), 99)
            .unwrap_err()
            .errno(),
        Some(libc::ERANGE)
    );
}

#[test]
fn set_num_vfs_on_non_sriov_or_missing_device() {
    let host = Host::two_socket();
    let probe = host.probe();
    let err = set_num_vfs(&probe, addr("0000:00:1f.6"), 1).unwrap_err();
    assert!(matches!(err, VfioError::NotSriov(_)), "{err}");
    let err = set_num_vfs(&probe, addr("0000:09:00.0"), 1).unwrap_err();
    assert!(matches!(err, VfioError::DeviceNotFound(_)), "{err}");
    assert!(probe.writes().is_empty());
}

// ---- vfio-pci binding ----

/// Plays the kernel's part: `drivers_probe` binds the device to whatever its
/// `driver_override` names (the fixture stores writes but does not react to them).
fn probe_binding_override(host: &Host) -> Probe {
    let root = host.dir.path().to_owned();
    let dev_dir = "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0";
    host.tree.file("/sys/bus/pci/drivers/vfio-pci/bind", "");
    host.tree.file("/sys/bus/pci/drivers/vfio-pci/unbind", "");
    host.probe().on_write(move |path, _| {
        if path != Path::new("/sys/bus/pci/drivers_probe") {
            return;
        }
        let fs = sysfs::RealSysfs::new(&root);
        let wanted = fs
            .read_text(&Path::new(dev_dir).join("driver_override"))
            .unwrap();
        sysfs::fixture::Tree::new(&root).link(
            &format!("{dev_dir}/driver"),
            &format!("../../../../bus/pci/drivers/{wanted}"),
        );
    })
}

#[test]
fn bind_writes_override_then_unbind_then_probe() {
    let host = Host::two_socket();
    let probe = probe_binding_override(&host);
    let binding = bind_to_vfio(&probe, addr("0000:41:00.0")).unwrap();
    assert_eq!(
        binding,
        Binding {
            previous_driver: Some("nvidia".to_owned()),
            already_bound: false
        }
    );
    assert_eq!(
        probe.writes(),
        vec![
            w(&format!("{GPU}/driver_override"), "vfio-pci"),
            w(&format!("{GPU}/driver/unbind"), "0000:41:00.0"),
            w("/sys/bus/pci/drivers_probe", "0000:41:00.0"),
        ]
    );
    // The unbind went to the driver the device was bound to.
    let unbind = host.dir.path().join("sys/bus/pci/drivers/nvidia/unbind");
    assert_eq!(std::fs::read_to_string(unbind).unwrap(), "0000:41:00.0");
}

#[test]
fn bind_of_unbound_device_skips_unbind() {
    let host = Host::two_socket();
    let nic = "/sys/bus/pci/devices/0000:00:1f.6";
    let root = host.dir.path().to_owned();
    let probe = host.probe().on_write(move |path, _| {
        if path == Path::new("/sys/bus/pci/drivers_probe") {
            let tree = sysfs::fixture::Tree::new(&root);
            tree.link(
                "/sys/devices/pci0000:00/0000:00:1f.6/driver",
                "../../../bus/pci/drivers/vfio-pci",
            );
        }
    });
    let binding = bind_to_vfio(&probe, addr("0000:00:1f.6")).unwrap();
    assert_eq!(binding.previous_driver, None);
    assert_eq!(
        probe.writes(),
        vec![
            w(&format!("{nic}/driver_override"), "vfio-pci"),
            w("/sys/bus/pci/drivers_probe", "0000:00:1f.6")
        ]
    );
}

#[test]
fn bind_already_on_vfio_writes_nothing() {
    let host = Host::two_socket();
    host.pci(
        "pci0000:40/0000:40:01.1/0000:41:00.0",
        "0x10de",
        "0x2335",
        "0x030200",
    )
    .driver("vfio-pci");
    let probe = host.probe();
    let binding = bind_to_vfio(&probe, addr("0000:41:00.0")).unwrap();
    assert_eq!(
        binding,
        Binding {
            previous_driver: Some("vfio-pci".to_owned()),
            already_bound: true
        }
    );
    assert!(probe.writes().is_empty());
}

#[test]
fn bind_mismatch_names_the_driver() {
    let host = Host::two_socket();
    // Nothing plays the kernel: the device stays on nvidia after the probe.
    let probe = host.probe();
    let err = bind_to_vfio(&probe, addr("0000:41:00.0")).unwrap_err();
    match &err {
        VfioError::NotBoundToVfio { address, bound } => {
            assert_eq!(*address, addr("0000:41:00.0"));
            assert_eq!(bound.as_deref(), Some("nvidia"));
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("bound to nvidia"), "{err}");
    assert_eq!(probe.writes().len(), 3);
}

#[test]
fn bind_to_no_driver_hints_at_the_module() {
    let host = Host::two_socket();
    let probe = host.probe();
    let err = bind_to_vfio(&probe, addr("0000:00:1f.6")).unwrap_err();
    assert!(matches!(err, VfioError::NotBoundToVfio { bound: None, .. }));
    assert!(err.to_string().contains("vfio-pci module"), "{err}");
}

#[test]
fn bind_stops_at_the_failed_step() {
    let host = Host::two_socket();
    // A device without driver_override (kernels before 3.16): the first write fails.
    host.pci(
        "pci0000:40/0000:40:01.1/0000:41:00.0",
        "0x10de",
        "0x2335",
        "0x030200",
    )
    .no_attr("driver_override");
    let probe = host.probe();
    let err = bind_to_vfio(&probe, addr("0000:41:00.0")).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENOENT));
    assert!(sysfs::error_chain(&err).contains("driver_override"));
    assert_eq!(probe.writes().len(), 1, "nothing after the failed write");
    // The unbind is refused: no probe is attempted.
    let host = Host::two_socket();
    let probe = host.probe();
    probe.fail_write(&format!("{GPU}/driver/unbind"), libc::EBUSY);
    let err = bind_to_vfio(&probe, addr("0000:41:00.0")).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EBUSY));
    assert_eq!(probe.writes().len(), 2);
    assert!(matches!(
        bind_to_vfio(&probe, addr("0000:42:00.0")),
        Err(VfioError::DeviceNotFound(_))
    ));
}

#[test]
fn release_clears_override_unbinds_and_probes() {
    let host = Host::two_socket();
    host.pci(
        "pci0000:40/0000:40:01.1/0000:41:00.0",
        "0x10de",
        "0x2335",
        "0x030200",
    )
    .driver("vfio-pci")
    .attr("driver_override", "vfio-pci");
    let probe = host.probe();
    release_from_vfio(&probe, addr("0000:41:00.0"), None).unwrap();
    assert_eq!(
        probe.writes(),
        vec![
            w(&format!("{GPU}/driver_override"), "\n"),
            w(&format!("{GPU}/driver/unbind"), "0000:41:00.0"),
            w("/sys/bus/pci/drivers_probe", "0000:41:00.0"),
        ]
    );
    let vfio_unbind = host.dir.path().join("sys/bus/pci/drivers/vfio-pci/unbind");
    assert_eq!(
        std::fs::read_to_string(vfio_unbind).unwrap(),
        "0000:41:00.0"
    );
}

#[test]
fn release_binds_the_named_driver() {
    let host = Host::two_socket();
    host.pci(
        "pci0000:40/0000:40:01.1/0000:41:00.0",
        "0x10de",
        "0x2335",
        "0x030200",
    )
    .driver("vfio-pci");
    let probe = host.probe();
    release_from_vfio(&probe, addr("0000:41:00.0"), Some("nvidia")).unwrap();
    assert_eq!(
        probe.writes()[2],
        w("/sys/bus/pci/drivers/nvidia/bind", "0000:41:00.0")
    );
    // A driver that is not loaded has no bind file: the kernel's ENOENT comes back.
    let probe = host.probe();
    let err = release_from_vfio(&probe, addr("0000:41:00.0"), Some("nouveau")).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENOENT));
    assert!(sysfs::error_chain(&err).contains("drivers/nouveau/bind"));
}

#[test]
fn release_refuses_bad_names_and_foreign_drivers_before_writing() {
    let host = Host::two_socket();
    let probe = host.probe();
    for bad in ["../../../../proc/sysrq-trigger", "nvidia/../x", "", "a b"] {
        let err = release_from_vfio(&probe, addr("0000:41:00.0"), Some(bad)).unwrap_err();
        assert!(
            matches!(err, VfioError::BadDriverName { .. }),
            "{bad:?}: {err}"
        );
    }
    let err = release_from_vfio(&probe, addr("0000:41:00.0"), None).unwrap_err();
    assert!(
        matches!(&err, VfioError::BoundElsewhere { driver, .. } if driver == "nvidia"),
        "{err}"
    );
    assert!(probe.writes().is_empty());
}

#[test]
fn release_of_unbound_device_only_clears_and_probes() {
    let host = Host::two_socket();
    let probe = host.probe();
    release_from_vfio(&probe, addr("0000:00:1f.6"), None).unwrap();
    let nic = "/sys/bus/pci/devices/0000:00:1f.6";
    assert_eq!(
        probe.writes(),
        vec![
            w(&format!("{nic}/driver_override"), "\n"),
            w("/sys/bus/pci/drivers_probe", "0000:00:1f.6")
        ]
    );
}

// ---- NVIDIA vendor-specific VFIO ----

const VF: &str = "0000:41:00.4";

fn vgpu_host(creatable: &str, current: &str) -> Host {
    let host = Host::two_socket();
    host.pci(
        "pci0000:40/0000:40:01.1/0000:41:00.0",
        "0x10de",
        "0x2335",
        "0x030200",
    )
    .sriov(16, &[VF]);
    let vf = "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.4/nvidia";
    host.tree
        .file(&format!("{vf}/creatable_vgpu_types"), creatable);
    host.tree.file(&format!("{vf}/current_vgpu_type"), current);
    host
}

#[test]
fn vgpu_types_and_current_type() {
    let host = vgpu_host(
        "ID    : vGPU Name\n1414  : NVIDIA H200X-1-18C\n1418  : NVIDIA H200X-141C\n",
        "0\n",
    );
    let fs = host.fs();
    assert!(has_vendor_vgpu(&fs, addr(VF)));
    assert!(!has_vendor_vgpu(&fs, addr("0000:41:00.0")));
    let types = creatable_vgpu_types(&fs, addr(VF)).unwrap();
    assert_eq!(
        types,
        vec![
            VgpuTypeEntry {
                id: VgpuTypeId::new(1414).unwrap(),
                name: "NVIDIA H200X-1-18C".to_owned()
            },
            VgpuTypeEntry {
                id: VgpuTypeId::new(1418).unwrap(),
                name: "NVIDIA H200X-141C".to_owned()
            },
        ]
    );
    assert_eq!(current_vgpu_type(&fs, addr(VF)).unwrap(), None);
    host.tree.file(
        "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.4/nvidia/current_vgpu_type",
        "1414\n",
    );
    assert_eq!(
        current_vgpu_type(&fs, addr(VF)).unwrap(),
        VgpuTypeId::new(1414)
    );
}

#[test]
fn vgpu_gpu_instance_reads_both_files_and_none_without_them() {
    let host = vgpu_host("", "0\n");
    let fs = host.fs();
    // An older driver without the files.
    assert_eq!(vgpu_gpu_instance(&fs, addr(VF)).unwrap(), None);
    let dir = "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.4/nvidia";
    host.tree.file(&format!("{dir}/gpu_instance_id"), "3\n");
    // One file alone says nothing.
    assert_eq!(vgpu_gpu_instance(&fs, addr(VF)).unwrap(), None);
    host.tree.file(&format!("{dir}/placement_id"), "0\n");
    assert_eq!(
        vgpu_gpu_instance(&fs, addr(VF)).unwrap(),
        Some(VgpuGpuInstance {
            gpu_instance_id: 3,
            placement_id: 0
        })
    );
    host.tree.file(&format!("{dir}/placement_id"), "x\n");
    let err = vgpu_gpu_instance(&fs, addr(VF)).unwrap_err();
    assert!(sysfs::error_chain(&err).contains("placement_id"), "{err}");
}

#[test]
fn set_vgpu_type_writes_id_or_zero() {
    let host = vgpu_host("", "0\n");
    let probe = host.probe();
    let path = format!("/sys/bus/pci/devices/{VF}/nvidia/current_vgpu_type");
    set_current_vgpu_type(&probe, addr(VF), VgpuTypeId::new(1414)).unwrap();
    assert_eq!(
        current_vgpu_type(&probe, addr(VF)).unwrap(),
        VgpuTypeId::new(1414)
    );
    set_current_vgpu_type(&probe, addr(VF), None).unwrap();
    assert_eq!(probe.writes(), vec![w(&path, "1414"), w(&path, "0")]);
    probe.fail_write(&path, libc::ENOSPC);
    let err = set_current_vgpu_type(&probe, addr(VF), VgpuTypeId::new(1418)).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENOSPC));
}

#[test]
fn vgpu_garbage_and_absence() {
    let host = vgpu_host("1414 : NVIDIA H200X-1-18C\nsomething else\n", "banana\n");
    let fs = host.fs();
    let err = creatable_vgpu_types(&fs, addr(VF)).unwrap_err();
    assert!(
        sysfs::error_chain(&err).contains("something else"),
        "{}",
        sysfs::error_chain(&err)
    );
    let err = current_vgpu_type(&fs, addr(VF)).unwrap_err();
    assert!(sysfs::error_chain(&err).contains("banana"));
    let err = current_vgpu_type(&fs, addr("0000:00:1f.6")).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENOENT));
    let err = set_current_vgpu_type(&fs, addr("0000:00:1f.6"), None).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENOENT));
}

// ---- AMD partitions ----

#[test]
fn amd_partition_attributes() {
    let host = Host::two_socket();
    let mi300 = host.pci(
        "pci0000:80/0000:80:01.0/0000:81:00.0",
        "0x1002",
        "0x74a1",
        "0x120000",
    );
    mi300
        .attr("current_compute_partition", "SPX")
        .attr("available_compute_partition", "SPX, DPX, QPX, CPX")
        .attr("current_memory_partition", "NPS1")
        .attr("available_memory_partition", "NPS1, NPS4");
    let fs = host.fs();
    let p = amd_partition(&fs, addr("0000:81:00.0")).unwrap().unwrap();
    assert_eq!(p.current_compute.as_deref(), Some("SPX"));
    assert_eq!(p.available_compute, vec!["SPX", "DPX", "QPX", "CPX"]);
    assert_eq!(p.current_memory.as_deref(), Some("NPS1"));
    assert_eq!(p.available_memory, vec!["NPS1", "NPS4"]);
    assert!(p.problems.is_empty());
    mi300
        .attr("current_memory_partition", "NPS1, NPS4")
        .no_attr("available_compute_partition");
    let p = amd_partition(&fs, addr("0000:81:00.0")).unwrap().unwrap();
    assert_eq!(p.current_memory, None);
    assert!(p.available_compute.is_empty());
    assert_eq!(p.problems.len(), 1);
    assert!(
        p.problems[0].contains("current_memory_partition"),
        "{:?}",
        p.problems
    );
    assert_eq!(amd_partition(&fs, addr("0000:41:00.0")).unwrap(), None);
    assert!(matches!(
        amd_partition(&fs, addr("0000:82:00.0")),
        Err(VfioError::DeviceNotFound(_))
    ));
}
