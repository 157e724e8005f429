//! SR-IOV (`sriov_numvfs`) and driver binding (`driver_override`, bind/unbind, drivers_probe).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::collections::BTreeSet;

use common::*;
use libc::{EBUSY, EINVAL, ENODEV, ENOENT, ERANGE};

const PF: &str = "0000:18:00.0";

#[test]
fn boot_service_enabled_all_vfs_with_their_own_groups() {
    let h = host("hgx-h200");
    let fs = h.sysfs();
    assert_eq!(read(&fs, &dev(PF, "sriov_totalvfs")), "32");
    assert_eq!(read(&fs, &dev(PF, "sriov_numvfs")), "32");
    let vfs = vfs(&fs, PF);
    assert_eq!(vfs.len(), 32);
    assert_eq!(vfs[0], "0000:18:00.4");
    assert_eq!(vfs[4], "0000:18:01.0");
    assert_eq!(vfs[31], "0000:18:04.3");
    let vf = &vfs[0];
    assert_eq!(link_name(&fs, &dev(vf, "physfn")).as_deref(), Some(PF));
    assert_eq!(
        read(&fs, &dev(vf, "numa_node")),
        read(&fs, &dev(PF, "numa_node"))
    );
    assert_eq!(read(&fs, &dev(vf, "vendor")), "0x10de");
    assert_eq!(
        link_name(&fs, &dev(vf, "driver")).as_deref(),
        Some("nvidia")
    );
    let groups: BTreeSet<u32> = vfs.iter().map(|v| group_of(&fs, v)).collect();
    assert_eq!(groups.len(), 32);
    assert!(!groups.contains(&group_of(&fs, PF)));
    // VFs sit next to their PF under the same bridge.
    let real = sysfs::SysfsExt::resolve_link(
        fs.as_ref(),
        std::path::Path::new(&format!("/sys/bus/pci/devices/{vf}")),
    )
    .unwrap();
    assert_eq!(
        real,
        std::path::Path::new("/sys/devices/pci0000:15/0000:15:01.0/0000:18:00.4")
    );
}

#[test]
fn numvfs_rules() {
    let h = host("hgx-h200");
    let fs = h.sysfs();
    pf_on_stub_with_vfs(&fs, PF, 32);
    let numvfs = dev(PF, "sriov_numvfs");
    assert_eq!(
        write_err(&fs, &numvfs, "4"),
        EBUSY,
        "non-zero to another non-zero"
    );
    write(&fs, &numvfs, "32"); // the same value is a no-op
    let old_group = group_of(&fs, "0000:18:00.4");
    write(&fs, &numvfs, "0");
    assert_eq!(read(&fs, &numvfs), "0");
    assert!(vfs(&fs, PF).is_empty());
    assert!(!exists(&fs, "/sys/bus/pci/devices/0000:18:00.4"));
    assert!(!exists(
        &fs,
        &format!("/sys/kernel/iommu_groups/{old_group}")
    ));
    assert_eq!(write_err(&fs, &numvfs, "abc"), EINVAL);
    assert_eq!(write_err(&fs, &numvfs, "-1"), EINVAL);
    assert_eq!(write_err(&fs, &numvfs, "33"), ERANGE);
    assert_eq!(read(&fs, &numvfs), "0", "refused writes change nothing");
    write(&fs, &numvfs, "0x4\n");
    assert_eq!(vfs(&fs, PF).len(), 4);
    assert_eq!(
        group_of(&fs, "0000:18:00.4"),
        old_group,
        "the lowest free group is reused"
    );
    assert_eq!(write_err(&fs, &numvfs, "8"), EBUSY);
    assert_eq!(vfs(&fs, PF).len(), 4);
}

#[test]
fn numvfs_needs_the_pf_driver() {
    let h = host("hgx-h200");
    let fs = h.sysfs();
    write(&fs, &dev(PF, "driver/unbind"), PF);
    assert!(
        vfs(&fs, PF).is_empty(),
        "the PF driver disables SR-IOV on unbind"
    );
    assert_eq!(write_err(&fs, &dev(PF, "sriov_numvfs"), "2"), ENOENT);
    write(&fs, "/sys/bus/pci/drivers_probe", PF);
    assert_eq!(
        link_name(&fs, &dev(PF, "driver")).as_deref(),
        Some("nvidia")
    );
    pf_to_stub(&fs, PF);
    write(&fs, &dev(PF, "sriov_numvfs"), "2");
    assert_eq!(vfs(&fs, PF).len(), 2);
}

fn bind_vfio(fs: &std::sync::Arc<dyn sysfs::Sysfs>, bdf: &str) {
    write(fs, &dev(bdf, "driver_override"), "vfio-pci");
    if exists(fs, &dev(bdf, "driver")) {
        write(fs, &dev(bdf, "driver/unbind"), bdf);
    }
    write(fs, "/sys/bus/pci/drivers_probe", bdf);
}

#[test]
fn whole_gpu_passthrough_binding_and_release() {
    let h = host("dgx-a100");
    let fs = h.sysfs();
    let nvml = h.nvml();
    let gpu = "0000:47:00.0";
    let group = group_of(&fs, gpu);
    let node = format!("/dev/vfio/{group}");
    assert!(!exists(&fs, &node));
    assert_eq!(nvml.device_count().unwrap(), 8);

    write(&fs, &dev(gpu, "driver_override"), "vfio-pci\n");
    assert_eq!(read(&fs, &dev(gpu, "driver_override")), "vfio-pci");
    // The override stops the default driver from matching: probing does nothing while bound,
    // a direct bind of the default driver is refused.
    write(&fs, "/sys/bus/pci/drivers_probe", gpu);
    assert_eq!(
        link_name(&fs, &dev(gpu, "driver")).as_deref(),
        Some("nvidia")
    );
    assert_eq!(
        write_err(&fs, "/sys/bus/pci/drivers/vfio-pci/bind", gpu),
        EBUSY
    );
    assert_eq!(
        write_err(&fs, "/sys/bus/pci/drivers/vfio-pci/unbind", gpu),
        ENODEV,
        "not bound to vfio-pci"
    );
    write(&fs, &dev(gpu, "driver/unbind"), gpu);
    assert_eq!(link_name(&fs, &dev(gpu, "driver")), None);
    assert_eq!(
        write_err(&fs, "/sys/bus/pci/drivers/nvidia/bind", gpu),
        ENODEV,
        "override says vfio-pci"
    );
    write(&fs, "/sys/bus/pci/drivers_probe", gpu);
    assert_eq!(
        link_name(&fs, &dev(gpu, "driver")).as_deref(),
        Some("vfio-pci")
    );
    assert!(exists(&fs, &node));
    assert!(names(&fs, "/sys/bus/pci/drivers/vfio-pci").contains(&gpu.to_owned()));
    assert_eq!(
        nvml.device_count().unwrap(),
        7,
        "NVML no longer sees a GPU on vfio-pci"
    );

    // A VM holds it: it cannot be unbound.
    h.set_vfio_open(addr(gpu), true).unwrap();
    assert_eq!(write_err(&fs, &dev(gpu, "driver/unbind"), gpu), EBUSY);
    h.set_vfio_open(addr(gpu), false).unwrap();

    write(&fs, &dev(gpu, "driver_override"), "\n");
    assert_eq!(read(&fs, &dev(gpu, "driver_override")), "(null)");
    write(&fs, &dev(gpu, "driver/unbind"), gpu);
    assert!(
        !exists(&fs, &node),
        "/dev/vfio/<group> goes with the last vfio-pci device"
    );
    write(&fs, "/sys/bus/pci/drivers_probe", gpu);
    assert_eq!(
        link_name(&fs, &dev(gpu, "driver")).as_deref(),
        Some("nvidia")
    );
    assert_eq!(nvml.device_count().unwrap(), 8);
}

#[test]
fn bus_writes_name_devices_exactly() {
    let h = host("single-gpu");
    let fs = h.sysfs();
    for bad in ["0000:09:00.0", "01:00.0", "garbage", "0000:01:00.0 "] {
        assert_eq!(
            write_err(&fs, "/sys/bus/pci/drivers_probe", bad),
            ENODEV,
            "{bad:?}"
        );
        assert_eq!(
            write_err(&fs, "/sys/bus/pci/drivers/nvidia/unbind", bad),
            ENODEV,
            "{bad:?}"
        );
    }
    write(&fs, "/sys/bus/pci/drivers_probe", "0000:01:00.0"); // bound already: a no-op
    assert_eq!(
        write_err(
            &fs,
            &dev("0000:01:00.0", "driver_override"),
            &"x".repeat(4096)
        ),
        EINVAL
    );
    assert_eq!(read(&fs, &dev("0000:01:00.0", "driver_override")), "(null)");
    // An override naming a driver that is not loaded leaves the device unbound after a probe.
    write(&fs, &dev("0000:01:00.0", "driver_override"), "nouveau");
    write(&fs, &dev("0000:01:00.0", "driver/unbind"), "0000:01:00.0");
    write(&fs, "/sys/bus/pci/drivers_probe", "0000:01:00.0");
    assert_eq!(link_name(&fs, &dev("0000:01:00.0", "driver")), None);
    assert!(!exists(&fs, "/sys/bus/pci/drivers/nouveau"));
}

#[test]
fn changing_vfs_is_refused_while_a_vm_holds_one() {
    let h = host("vdi-mixed");
    let fs = h.sysfs();
    let mi300 = "0000:c1:00.0";
    let vfs = vfs(&fs, mi300);
    assert_eq!(
        vfs.len(),
        1,
        "the MxGPU host driver enabled SPX's one VF at boot"
    );
    let vf = &vfs[0];
    assert_eq!(read(&fs, &dev(vf, "device")), "0x74b5");
    assert_eq!(
        link_name(&fs, &dev(vf, "driver")),
        None,
        "MI300X VFs wait unbound for vfio-pci"
    );
    assert!(
        h.set_vfio_open(addr(vf), true).is_err(),
        "not a VFIO device yet"
    );
    bind_vfio(&fs, vf);
    assert!(exists(&fs, &format!("/dev/vfio/{}", group_of(&fs, vf))));
    h.set_vfio_open(addr(vf), true).unwrap();
    // GIM has no sriov_configure; its host AMD SMI changes the count, not while a VM holds a VF.
    assert_eq!(write_err(&fs, &dev(mi300, "sriov_numvfs"), "0"), ENOENT);
    let amd = h.amd();
    assert_eq!(
        amd.set_num_vf(addr(mi300), 2).unwrap_err().status,
        gpu::AmdStatus::BUSY
    );
    assert_eq!(self::vfs_len(&fs, mi300), 1);
    h.set_vfio_open(addr(vf), false).unwrap();
    amd.set_num_vf(addr(mi300), 2).unwrap();
    assert_eq!(self::vfs_len(&fs, mi300), 2);
}

fn vfs_len(fs: &std::sync::Arc<dyn sysfs::Sysfs>, pf: &str) -> usize {
    vfs(fs, pf).len()
}
