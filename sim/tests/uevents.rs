//! The uevents the simulated kernel records: what, in which order, with which properties, the
//! way lib/kobject_uevent.c and the driver core send them (see `sim/src/uevent.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::path::Path;

use common::*;
use sim::{Profile, SimHost, Uevent};

const PF: &str = "0000:18:00.0";

/// `ACTION SUBSYSTEM name` of each uevent, with `DRIVER` when set.
fn summary(events: &[Uevent]) -> Vec<String> {
    events
        .iter()
        .map(|u| {
            let p = &u.properties;
            let name = p["DEVPATH"].rsplit('/').next().unwrap().to_owned();
            let mut s = format!("{} {} {name}", p["ACTION"], p["SUBSYSTEM"]);
            if let Some(d) = p.get("DRIVER") {
                s.push_str(&format!(" {d}"));
            }
            s
        })
        .collect()
}

#[test]
fn removing_a_gpu_unbinds_and_removes_its_vfs_first_then_the_pf() {
    let h = host("hgx-h200");
    let start = h.uevent_seqnum().unwrap();
    h.remove_gpu(addr(PF)).unwrap();
    let events = h.uevents_since(start).unwrap();
    let s = summary(&events);
    // 32 VFs on nvidia, each unbound then removed, then the PF.
    assert_eq!(s.len(), 2 * 32 + 2, "{s:?}");
    assert_eq!(s[0], "unbind pci 0000:18:00.4");
    assert_eq!(s[1], "remove pci 0000:18:00.4");
    assert_eq!(s[64], format!("unbind pci {PF}"));
    assert_eq!(s[65], format!("remove pci {PF}"));
    // Sequence numbers rise by one and are in the properties too.
    for (i, u) in events.iter().enumerate() {
        assert_eq!(u.seqnum, start + 1 + i as u64);
        assert_eq!(u.properties["SEQNUM"], u.seqnum.to_string());
    }
    let pf = &events[65].properties;
    assert_eq!(
        pf["DEVPATH"],
        "/devices/pci0000:15/0000:15:01.0/0000:18:00.0"
    );
    assert_eq!(pf["PCI_SLOT_NAME"], PF);
    assert!(
        !pf.contains_key("DRIVER"),
        "the driver is gone before remove"
    );

    let after_remove = h.uevent_seqnum().unwrap();
    h.add_gpu(addr(PF)).unwrap();
    let s = summary(&h.uevents_since(after_remove).unwrap());
    assert_eq!(
        s,
        [format!("add pci {PF}"), format!("bind pci {PF} nvidia")]
    );
}

#[test]
fn a_refused_change_emits_nothing_and_bind_unbind_are_seen() {
    let h = host("hgx-h200");
    let fs = h.sysfs();
    let start = h.uevent_seqnum().unwrap();
    // Non-zero to another non-zero: EBUSY, nothing happened, nothing announced.
    write_err(&fs, &dev(PF, "sriov_numvfs"), "4");
    assert_eq!(h.uevents_since(start).unwrap(), []);
    pf_to_stub(&fs, PF);
    let s = summary(&h.uevents_since(start).unwrap());
    assert!(s.contains(&format!("unbind pci {PF}")), "{s:?}");
    assert!(s.contains(&format!("bind pci {PF} pci-pf-stub")), "{s:?}");
}

#[test]
fn mdevs_are_added_and_removed_under_their_parent() {
    let profile = Profile::load(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/rig/rig-guest.toml"
    )))
    .unwrap();
    let h = SimHost::new(profile).unwrap();
    let fs = h.sysfs();
    let uuid = "83b8f4f2-509f-382f-3c1e-e6bf00000001";
    let start = h.uevent_seqnum().unwrap();
    write(
        &fs,
        "/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2/create",
        uuid,
    );
    let added = h.uevents_since(start).unwrap();
    assert_eq!(summary(&added), [format!("add mdev {uuid}")]);
    let p = &added[0].properties;
    assert_eq!(p["DEVPATH"], format!("/devices/virtual/mtty/mtty/{uuid}"));
    assert_eq!(p["MDEV_TYPE"], "mtty-2");
    write(&fs, &format!("/sys/bus/mdev/devices/{uuid}/remove"), "1");
    let removed = h.uevents_since(added[0].seqnum).unwrap();
    assert_eq!(summary(&removed), [format!("remove mdev {uuid}")]);
}

#[test]
fn another_process_sees_the_uevents_through_the_state_directory() {
    let dir = tempfile::tempdir().unwrap();
    let a = SimHost::create(dir.path(), Profile::builtin("hgx-h200").unwrap()).unwrap();
    let b = SimHost::open(dir.path()).unwrap();
    let start = b.uevent_seqnum().unwrap();
    a.remove_gpu(addr(PF)).unwrap();
    assert_eq!(b.uevents_since(start).unwrap().len(), 66);
    assert_eq!(b.uevent_seqnum().unwrap(), start + 66);
}

fn rig_guest() -> SimHost {
    let profile = Profile::load(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/rig/rig-guest.toml"
    )))
    .unwrap();
    SimHost::new(profile).unwrap()
}

const IGB: &str = "0000:81:00.0";

#[test]
fn sysfs_remove_takes_the_vfs_first_and_a_rescan_brings_the_pf_back() {
    let h = rig_guest();
    let fs = h.sysfs();
    write(&fs, &dev(IGB, "sriov_numvfs"), "7");
    let vfs = vfs(&fs, IGB);
    write(&fs, &dev(&vfs[0], "driver_override"), "vfio-pci");
    write(&fs, &dev(&vfs[0], "driver/unbind"), &vfs[0]);
    write(&fs, "/sys/bus/pci/drivers_probe", &vfs[0]);
    assert_eq!(
        link_name(&fs, &dev(&vfs[0], "driver")).as_deref(),
        Some("vfio-pci")
    );
    let start = h.uevent_seqnum().unwrap();
    // Not a number, or 0: nothing happens (kstrtoul; remove_store).
    assert_eq!(write_err(&fs, &dev(IGB, "remove"), "yes"), libc::EINVAL);
    write(&fs, &dev(IGB, "remove"), "0");
    assert!(exists(&fs, &dev(IGB, "vendor")));
    assert_eq!(h.uevents_since(start).unwrap(), []);

    write(&fs, &dev(IGB, "remove"), "1");
    assert!(!exists(&fs, &format!("/sys/bus/pci/devices/{IGB}")));
    assert!(!exists(&fs, &format!("/sys/bus/pci/devices/{}", vfs[0])));
    // What the rig's kernel sent for the same write: unbind and remove per VF, then the PF.
    let s = summary(&h.uevents_since(start).unwrap());
    let mut expected = Vec::new();
    for vf in &vfs {
        expected.push(format!("unbind pci {vf}"));
        expected.push(format!("remove pci {vf}"));
    }
    expected.push(format!("unbind pci {IGB}"));
    expected.push(format!("remove pci {IGB}"));
    assert_eq!(s, expected);

    let after = h.uevent_seqnum().unwrap();
    write(&fs, "/sys/bus/pci/rescan", "1");
    let s = summary(&h.uevents_since(after).unwrap());
    assert_eq!(s, [format!("add pci {IGB}"), format!("bind pci {IGB} igb")]);
    assert_eq!(read(&fs, &dev(IGB, "sriov_numvfs")), "0");
}

#[test]
fn a_device_a_vm_holds_is_not_removed_and_a_reboot_finds_a_removed_one() {
    let h = rig_guest();
    let fs = h.sysfs();
    write(&fs, &dev(IGB, "sriov_numvfs"), "1");
    let vf = vfs(&fs, IGB)[0].clone();
    write(&fs, &dev(&vf, "driver_override"), "vfio-pci");
    write(&fs, &dev(&vf, "driver/unbind"), &vf);
    write(&fs, "/sys/bus/pci/drivers_probe", &vf);
    h.set_vfio_open(addr(&vf), true).unwrap();
    assert_eq!(write_err(&fs, &dev(IGB, "remove"), "1"), libc::EBUSY);
    assert!(exists(&fs, &dev(&vf, "vendor")));
    h.set_vfio_open(addr(&vf), false).unwrap();
    write(&fs, &dev(IGB, "remove"), "1");
    h.reboot().unwrap();
    assert_eq!(link_name(&fs, &dev(IGB, "driver")).as_deref(), Some("igb"));
}
