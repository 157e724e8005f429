//! mdev parents that are not NVIDIA GPUs: the kernel samples' capacity models (mtty's and
//! mbochs' pools, mdpy's core-counted instances), per-type capacity on a PCI parent, layout,
//! IOMMU groups, errors and profile validation.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use libc::{EEXIST, EINVAL, ENOSPC, EUSERS};
use sim::{Profile, SimHost};
use sysfs::{Sysfs, SysfsExt};

fn rig_guest() -> Profile {
    Profile::load(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/rig/rig-guest.toml"
    )))
    .unwrap()
}

fn ty(parent: &str, t: &str, attr: &str) -> String {
    format!("/sys/class/mdev_bus/{parent}/mdev_supported_types/{t}/{attr}")
}

fn avail(fs: &Arc<dyn Sysfs>, parent: &str, t: &str) -> u32 {
    read(fs, &ty(parent, t, "available_instances"))
        .parse()
        .unwrap()
}

fn uuid(n: u32) -> String {
    format!("83b8f4f2-509f-382f-3c1e-e6bf{n:08x}")
}

fn create(fs: &Arc<dyn Sysfs>, parent: &str, t: &str, n: u32) {
    write(fs, &ty(parent, t, "create"), &uuid(n));
}

fn remove(fs: &Arc<dyn Sysfs>, n: u32) {
    write(
        fs,
        &format!("/sys/bus/mdev/devices/{}/remove", uuid(n)),
        "1",
    );
}

#[test]
fn the_rig_guest_profile_loads_and_round_trips() {
    let p = rig_guest();
    assert_eq!(p.mdev_parents.len(), 3);
    assert_eq!(Profile::from_toml(&p.to_toml().unwrap()).unwrap(), p);
}

#[test]
fn virtual_parents_live_under_devices_virtual() {
    let fs = SimHost::new(rig_guest()).unwrap().sysfs();
    assert_eq!(
        names(&fs, "/sys/class/mdev_bus"),
        ["mbochs", "mdpy", "mtty"]
    );
    let link = fs.read_link(Path::new("/sys/class/mdev_bus/mtty")).unwrap();
    assert_eq!(link, Path::new("../../devices/virtual/mtty/mtty"));
    assert_eq!(
        names(&fs, "/sys/devices/virtual/mtty/mtty/mdev_supported_types"),
        ["mtty-1", "mtty-2"]
    );
    assert_eq!(read(&fs, &ty("mtty", "mtty-2", "name")), "Dual port serial");
    assert_eq!(read(&fs, &ty("mtty", "mtty-2", "device_api")), "vfio-pci");
    assert!(
        !exists(&fs, &ty("mtty", "mtty-2", "description")),
        "mtty has no description attribute"
    );
    assert_eq!(
        read(&fs, &ty("mdpy", "mdpy-hd", "description")),
        "virtual display, 1920x1080 framebuffer"
    );
}

#[test]
fn mtty_types_share_a_pool_of_ports() {
    let h = SimHost::new(rig_guest()).unwrap();
    let fs = h.sysfs();
    assert_eq!(
        (avail(&fs, "mtty", "mtty-1"), avail(&fs, "mtty", "mtty-2")),
        (24, 12)
    );
    create(&fs, "mtty", "mtty-2", 1);
    assert_eq!(
        (avail(&fs, "mtty", "mtty-1"), avail(&fs, "mtty", "mtty-2")),
        (22, 11)
    );
    create(&fs, "mtty", "mtty-1", 2);
    assert_eq!(
        (avail(&fs, "mtty", "mtty-1"), avail(&fs, "mtty", "mtty-2")),
        (21, 10),
        "21 free ports hold ten dual-port devices"
    );
    for n in 3..=12 {
        create(&fs, "mtty", "mtty-2", n);
    }
    assert_eq!(
        (avail(&fs, "mtty", "mtty-1"), avail(&fs, "mtty", "mtty-2")),
        (1, 0)
    );
    assert_eq!(
        write_err(&fs, &ty("mtty", "mtty-2", "create"), &uuid(99)),
        ENOSPC
    );
    create(&fs, "mtty", "mtty-1", 13);
    assert_eq!(
        write_err(&fs, &ty("mtty", "mtty-1", "create"), &uuid(99)),
        ENOSPC,
        "the pool is empty"
    );
    assert_eq!(
        write_err(&fs, &ty("mtty", "mtty-1", "create"), &uuid(13)),
        EEXIST,
        "a duplicate is found before capacity"
    );
    for n in 1..=13 {
        remove(&fs, n);
    }
    assert_eq!(
        (avail(&fs, "mtty", "mtty-1"), avail(&fs, "mtty", "mtty-2")),
        (24, 12)
    );
}

#[test]
fn mdpy_types_share_the_mdev_cores_count_and_run_out_with_eusers() {
    let fs = SimHost::new(rig_guest()).unwrap().sysfs();
    create(&fs, "mdpy", "mdpy-hd", 1);
    create(&fs, "mdpy", "mdpy-vga", 2);
    for t in ["mdpy-hd", "mdpy-vga", "mdpy-xga"] {
        assert_eq!(avail(&fs, "mdpy", t), 2, "{t}");
    }
    create(&fs, "mdpy", "mdpy-xga", 3);
    create(&fs, "mdpy", "mdpy-xga", 4);
    assert_eq!(avail(&fs, "mdpy", "mdpy-hd"), 0);
    assert_eq!(
        write_err(&fs, &ty("mdpy", "mdpy-hd", "create"), &uuid(5)),
        EUSERS
    );
    remove(&fs, 2);
    assert_eq!(avail(&fs, "mdpy", "mdpy-xga"), 1);
}

#[test]
fn mbochs_types_share_video_memory() {
    let fs = SimHost::new(rig_guest()).unwrap().sysfs();
    let all = |fs: &Arc<dyn Sysfs>| {
        ["mbochs-large", "mbochs-medium", "mbochs-small"].map(|t| avail(fs, "mbochs", t))
    };
    assert_eq!(all(&fs), [4, 16, 64]);
    create(&fs, "mbochs", "mbochs-large", 1);
    create(&fs, "mbochs", "mbochs-medium", 2);
    assert_eq!(all(&fs), [2, 11, 44], "176 MiB left");
    for n in 3..=4 {
        create(&fs, "mbochs", "mbochs-large", n);
    }
    assert_eq!(all(&fs), [0, 3, 12]);
    assert_eq!(
        write_err(&fs, &ty("mbochs", "mbochs-large", "create"), &uuid(9)),
        ENOSPC
    );
}

#[test]
fn mdevs_of_virtual_parents_get_their_own_iommu_group_and_vfio_node() {
    let h = SimHost::new(rig_guest()).unwrap();
    let fs = h.sysfs();
    create(&fs, "mtty", "mtty-1", 1);
    create(&fs, "mdpy", "mdpy-vga", 2);
    let dev = format!("/sys/bus/mdev/devices/{}", uuid(1));
    assert_eq!(
        fs.resolve_link(Path::new(&dev)).unwrap(),
        Path::new(&format!("/sys/devices/virtual/mtty/mtty/{}", uuid(1)))
    );
    assert_eq!(
        link_name(&fs, &format!("{dev}/mdev_type")).as_deref(),
        Some("mtty-1")
    );
    // The hardware uses groups 0-5; the kernel's allocator hands out the lowest free number.
    let group = |n: u32| {
        link_name(
            &fs,
            &format!("/sys/bus/mdev/devices/{}/iommu_group", uuid(n)),
        )
    };
    assert_eq!(group(1).as_deref(), Some("6"));
    assert_eq!(group(2).as_deref(), Some("7"));
    assert!(exists(&fs, "/dev/vfio/6") && exists(&fs, "/dev/vfio/7"));
    assert_eq!(
        names(&fs, "/sys/kernel/iommu_groups/6/devices"),
        vec![uuid(1)]
    );
    assert_eq!(names(&fs, &ty("mtty", "mtty-1", "devices")), vec![uuid(1)]);
    let (list, _) = mdev_list(&fs);
    assert_eq!(
        list,
        vec![(uuid(1), "mtty".to_owned()), (uuid(2), "mdpy".to_owned())]
    );
    remove(&fs, 1);
    assert!(!exists(&fs, "/dev/vfio/6"));
    h.reboot().unwrap();
    assert!(names(&fs, "/sys/bus/mdev/devices").is_empty());
    assert_eq!(
        avail(&fs, "mdpy", "mdpy-vga"),
        4,
        "a reboot frees the parent"
    );
}

/// `(uuid, parent)` of every mdev, from the parent directory each device lives in.
fn mdev_list(fs: &Arc<dyn Sysfs>) -> (Vec<(String, String)>, ()) {
    let mut out: Vec<(String, String)> = names(fs, "/sys/bus/mdev/devices")
        .into_iter()
        .map(|u| {
            let real = fs
                .resolve_link(Path::new(&format!("/sys/bus/mdev/devices/{u}")))
                .unwrap();
            let parent = real.parent().unwrap().file_name().unwrap();
            (u, parent.to_str().unwrap().to_owned())
        })
        .collect();
    out.sort();
    (out, ())
}

#[test]
fn create_errors_on_virtual_parents() {
    let fs = SimHost::new(rig_guest()).unwrap().sysfs();
    assert_eq!(
        write_err(&fs, &ty("mtty", "mtty-1", "create"), "not-a-uuid"),
        EINVAL
    );
    create(&fs, "mtty", "mtty-1", 1);
    assert_eq!(
        write_err(&fs, &ty("mdpy", "mdpy-vga", "create"), &uuid(1)),
        EEXIST,
        "UUIDs are unique across parents"
    );
    assert_eq!(
        write_err(&fs, &ty("mtty", "mtty-1", "available_instances"), "1"),
        libc::EACCES
    );
}

/// A PCI function of the profile (not a GPU) that is an mdev parent with per-type capacity.
fn pci_parent_profile() -> Profile {
    let mut text = rig_guest().to_toml().unwrap();
    text.push_str(
        r#"
[[mdev_parents]]
name = "0000:00:02.0"
capacity = "per-type"

[[mdev_parents.types]]
id = "virtio-a"
name = "A"
max_instances = 2

[[mdev_parents.types]]
id = "virtio-b"
name = "B"
device_api = "vfio-ap"
max_instances = 1
"#,
    );
    Profile::from_toml(&text).unwrap()
}

#[test]
fn per_type_capacity_on_a_pci_parent() {
    let h = SimHost::new(pci_parent_profile()).unwrap();
    let fs = h.sysfs();
    let p = "0000:00:02.0";
    assert_eq!(
        fs.resolve_link(Path::new(&format!("/sys/class/mdev_bus/{p}")))
            .unwrap(),
        Path::new("/sys/devices/pci0000:00/0000:00:02.0")
    );
    assert_eq!(read(&fs, &ty(p, "virtio-b", "device_api")), "vfio-ap");
    create(&fs, p, "virtio-a", 1);
    assert_eq!(
        (avail(&fs, p, "virtio-a"), avail(&fs, p, "virtio-b")),
        (1, 1),
        "types are independent"
    );
    create(&fs, p, "virtio-b", 2);
    assert_eq!(
        write_err(&fs, &ty(p, "virtio-b", "create"), &uuid(3)),
        EINVAL
    );
    // The parent is registered by its driver: unbinding it takes the parent and its mdevs away.
    write(&fs, &dev(p, "driver/unbind"), p);
    assert!(!exists(&fs, &format!("/sys/class/mdev_bus/{p}")));
    assert!(names(&fs, "/sys/bus/mdev/devices").is_empty());
    write(&fs, "/sys/bus/pci/drivers_probe", p);
    assert_eq!(avail(&fs, p, "virtio-a"), 2);
}

#[test]
fn virtual_mdevs_survive_a_restart_of_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let h = SimHost::create(dir.path(), rig_guest()).unwrap();
    create(&h.sysfs(), "mtty", "mtty-2", 1);
    let again = SimHost::open(dir.path()).unwrap();
    let fs = again.sysfs();
    assert_eq!(avail(&fs, "mtty", "mtty-1"), 22);
    assert!(exists(
        &fs,
        &format!("/sys/devices/virtual/mtty/mtty/{}", uuid(1))
    ));
}

#[test]
fn impossible_mdev_parents_are_refused() {
    let base = rig_guest().to_toml().unwrap();
    let parent = |body: &str| format!("{base}\n[[mdev_parents]]\n{body}\n");
    let one = "[[mdev_parents.types]]\nid = \"x-1\"\nname = \"x\"";
    let cases = [
        (
            parent(&format!(
                "name = \"0000:42:00.0\"\ncapacity = \"per-type\"\n{one}\nmax_instances = 1"
            )),
            "no device or GPU",
        ),
        (
            parent(&format!(
                "name = \"0000:00:02.0\"\ndevice_path = \"/sys/devices/virtual/x/x\"\ncapacity = {{ pool = 1 }}\n{one}"
            )),
            "leave device_path out",
        ),
        (
            parent(&format!(
                "name = \"x\"\ndevice_path = \"/sys/devices/pci0000:00/x\"\ncapacity = {{ pool = 1 }}\n{one}"
            )),
            "outside pci",
        ),
        (
            parent(&format!(
                "name = \"x\"\ndevice_path = \"/sys/devices/virtual/../../x\"\ncapacity = {{ pool = 1 }}\n{one}"
            )),
            "normalised path",
        ),
        (
            parent(&format!(
                "name = \"mtty\"\ncapacity = {{ pool = 1 }}\n{one}"
            )),
            "listed twice",
        ),
        (
            parent(&format!("name = \"x\"\ncapacity = \"per-type\"\n{one}")),
            "needs max_instances",
        ),
        (
            parent(&format!(
                "name = \"x\"\ncapacity = {{ pool = 4 }}\n{one}\ncost = 0"
            )),
            "at least 1",
        ),
        (
            parent("name = \"x\"\ncapacity = { pool = 4 }\ntypes = []"),
            "at least one type",
        ),
        (
            parent(&format!("name = \"x\"\ncapacity = \"shared\"\n{one}")),
            "unknown variant",
        ),
    ];
    for (text, why) in cases {
        let err = sysfs::error_chain(&Profile::from_toml(&text).unwrap_err());
        assert!(err.contains(why), "{why:?} not in {err}");
    }
    // The same body with a valid shape loads, so the cases above fail for their reason.
    let ok = parent(&format!("name = \"x\"\ncapacity = {{ pool = 4 }}\n{one}"));
    Profile::from_toml(&ok).unwrap();
}

#[test]
fn a_gpu_with_mdev_types_in_its_model_cannot_be_listed_again() {
    let mut text = Profile::builtin("single-gpu").unwrap().to_toml().unwrap();
    text.push_str(
        "\n[[mdev_parents]]\nname = \"0000:01:00.0\"\ncapacity = { pool = 4 }\n[[mdev_parents.types]]\nid = \"x-1\"\nname = \"x\"\n",
    );
    let err = Profile::from_toml(&text).unwrap_err();
    assert!(
        sysfs::error_chain(&err).contains("already has mdev types"),
        "{}",
        sysfs::error_chain(&err)
    );
}

#[test]
fn sysfs_reads_through_the_mdev_crate_shape() {
    // The attributes the mdev crate reads are all there and parse.
    let fs = SimHost::new(rig_guest()).unwrap().sysfs();
    for (p, t) in [
        ("mtty", "mtty-1"),
        ("mdpy", "mdpy-xga"),
        ("mbochs", "mbochs-small"),
    ] {
        for attr in ["name", "device_api", "available_instances"] {
            assert!(
                fs.read_text_opt(Path::new(&ty(p, t, attr)))
                    .unwrap()
                    .is_some()
            );
        }
        assert!(names(&fs, &ty(p, t, "devices")).is_empty());
    }
}
