//! Mediated devices: create/remove through sysfs, counts, homogeneous NVIDIA GPUs, errors.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::path::Path;

use common::*;
use libc::{EBUSY, EEXIST, EINVAL, ENOENT};
use sysfs::SysfsExt;

const T4: &str = "0000:41:00.0";
const Q1: &str = "nvidia-230";
const Q2: &str = "nvidia-231";

fn ty(parent: &str, t: &str, attr: &str) -> String {
    format!("/sys/class/mdev_bus/{parent}/mdev_supported_types/{t}/{attr}")
}

fn avail(fs: &std::sync::Arc<dyn sysfs::Sysfs>, parent: &str, t: &str) -> u32 {
    read(fs, &ty(parent, t, "available_instances"))
        .parse()
        .unwrap()
}

const U1: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";
const U2: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002";

#[test]
fn parents_and_types() {
    let fs = host("vdi-mixed").sysfs();
    let parents = names(&fs, "/sys/class/mdev_bus");
    assert_eq!(parents.len(), 6, "2 T4 + 4 A16: {parents:?}");
    assert!(parents.contains(&T4.to_owned()));
    let real = fs
        .resolve_link(Path::new(&format!("/sys/class/mdev_bus/{T4}")))
        .unwrap();
    assert_eq!(
        real,
        Path::new("/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0")
    );
    assert_eq!(read(&fs, &ty(T4, Q1, "name")), "GRID T4-1Q");
    assert_eq!(read(&fs, &ty(T4, Q1, "device_api")), "vfio-pci");
    assert!(read(&fs, &ty(T4, Q1, "description")).contains("framebuffer=1024M"));
    for (t, n) in [
        (Q1, 16),
        (Q2, 8),
        ("nvidia-232", 4),
        ("nvidia-233", 2),
        ("nvidia-234", 1),
    ] {
        assert_eq!(avail(&fs, T4, t), n, "{t}");
    }
    assert!(names(&fs, &ty(T4, Q1, "devices")).is_empty());
    assert!(names(&fs, "/sys/bus/mdev/devices").is_empty());
    assert!(
        exists(&fs, "/sys/class/mdev_bus/0000:84:00.0"),
        "the -1 NUMA A16 GPU is a parent too"
    );
}

#[test]
fn create_and_remove() {
    let h = host("vdi-mixed");
    let fs = h.sysfs();
    write(&fs, &ty(T4, Q1, "create"), U1);
    assert_eq!(avail(&fs, T4, Q1), 15);
    // NVIDIA GPUs are homogeneous: other types read 0 while a 1Q exists.
    assert_eq!(avail(&fs, T4, Q2), 0);
    assert_eq!(names(&fs, &ty(T4, Q1, "devices")), vec![U1]);
    let mdev = format!("/sys/bus/mdev/devices/{U1}");
    let real = fs.resolve_link(Path::new(&mdev)).unwrap();
    assert_eq!(
        real,
        Path::new(&format!("/sys/devices/pci0000:40/0000:40:01.1/{T4}/{U1}"))
    );
    assert_eq!(
        link_name(&fs, &format!("{mdev}/mdev_type")).as_deref(),
        Some(Q1)
    );
    let group: u32 = link_name(&fs, &format!("{mdev}/iommu_group"))
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(group, group_of(&fs, T4), "an mdev gets its own IOMMU group");
    assert_eq!(
        names(&fs, &format!("/sys/kernel/iommu_groups/{group}/devices")),
        vec![U1]
    );
    assert!(exists(&fs, &format!("/dev/vfio/{group}")));
    assert!(names(&fs, &format!("/sys/bus/pci/devices/{T4}")).contains(&U1.to_owned()));

    // Upper case and a trailing newline are accepted; the device is named in lower case.
    write(
        &fs,
        &ty(T4, Q1, "create"),
        &format!("{}\n", U2.to_uppercase()),
    );
    assert_eq!(avail(&fs, T4, Q1), 14);
    assert!(exists(&fs, &format!("/sys/bus/mdev/devices/{U2}")));

    // A VM holds U1: it cannot go.
    h.set_vfio_open(ids::MdevUuid::from_str_ok(U1), true)
        .unwrap();
    assert_eq!(write_err(&fs, &format!("{mdev}/remove"), "1"), EBUSY);
    h.set_vfio_open(ids::MdevUuid::from_str_ok(U1), false)
        .unwrap();
    assert_eq!(write_err(&fs, &format!("{mdev}/remove"), "yes"), EINVAL);
    write(&fs, &format!("{mdev}/remove"), "0"); // 0 does nothing
    assert!(exists(&fs, &mdev));
    write(&fs, &format!("{mdev}/remove"), "1");
    assert!(!exists(&fs, &mdev));
    assert_eq!(
        write_err(&fs, &format!("{mdev}/remove"), "1"),
        ENOENT,
        "the device is gone"
    );
    assert!(!exists(&fs, &format!("/dev/vfio/{group}")));
    assert_eq!(avail(&fs, T4, Q1), 15);
    write(&fs, &format!("/sys/bus/mdev/devices/{U2}/remove"), "1");
    assert_eq!(avail(&fs, T4, Q1), 16);
    assert_eq!(
        avail(&fs, T4, Q2),
        8,
        "counts come back when the GPU is empty"
    );
}

#[test]
fn create_errors() {
    let h = host("vdi-mixed");
    let fs = h.sysfs();
    for bad in [
        "not-a-uuid",
        "83b8f4f2509f382f3c1ee6bfe0fa1001",
        "",
        "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001\n\n",
    ] {
        assert_eq!(
            write_err(&fs, &ty(T4, Q1, "create"), bad),
            EINVAL,
            "{bad:?}"
        );
    }
    write(&fs, &ty(T4, Q1, "create"), U1);
    assert_eq!(write_err(&fs, &ty(T4, Q1, "create"), U1), EEXIST);
    assert_eq!(
        write_err(&fs, &ty("0000:42:00.0", Q1, "create"), U1),
        EEXIST,
        "UUIDs are unique across parents"
    );
    assert_eq!(
        write_err(&fs, &ty(T4, Q2, "create"), U2),
        EINVAL,
        "another type on a busy NVIDIA GPU"
    );
    // Fill the 16Q of the other T4, then one more fails.
    let other = "0000:42:00.0";
    write(&fs, &ty(other, "nvidia-234", "create"), U2);
    assert_eq!(avail(&fs, other, "nvidia-234"), 0);
    assert_eq!(
        write_err(
            &fs,
            &ty(other, "nvidia-234", "create"),
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa1003"
        ),
        EINVAL
    );
    assert_eq!(
        write_err(&fs, &ty(T4, Q1, "available_instances"), "3"),
        libc::EACCES
    );
    assert_eq!(read_err(&fs, &ty(T4, Q1, "create")), libc::EACCES);
}

#[test]
fn unbinding_the_parent_removes_its_mdevs_unless_one_is_open() {
    let h = host("single-gpu");
    let fs = h.sysfs();
    let gpu = "0000:01:00.0";
    let t = "nvidia-926";
    write(&fs, &ty(gpu, t, "create"), U1);
    h.set_vfio_open(ids::MdevUuid::from_str_ok(U1), true)
        .unwrap();
    assert_eq!(write_err(&fs, &dev(gpu, "driver/unbind"), gpu), EBUSY);
    h.set_vfio_open(ids::MdevUuid::from_str_ok(U1), false)
        .unwrap();
    write(&fs, &dev(gpu, "driver/unbind"), gpu);
    assert!(
        !exists(&fs, &format!("/sys/class/mdev_bus/{gpu}")),
        "no vendor driver, no parent"
    );
    assert!(!exists(&fs, &format!("/sys/bus/mdev/devices/{U1}")));
    write(&fs, "/sys/bus/pci/drivers_probe", gpu);
    assert_eq!(avail(&fs, gpu, t), 24);
}

trait FromStrOk {
    fn from_str_ok(s: &str) -> Self;
}

impl FromStrOk for ids::MdevUuid {
    fn from_str_ok(s: &str) -> Self {
        s.parse().unwrap()
    }
}
