//! mdev parents, types and devices on fixture hosts; the write paths of create and remove.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use common::{EXISTING, Host, MTTY, MdevHost, T4, T4_NAME};
use ids::{IommuGroupId, MdevParentName, MdevTypeId, MdevUuid};
use mdev::*;

fn parent(s: &str) -> MdevParentName {
    s.parse().unwrap()
}
fn ty(s: &str) -> MdevTypeId {
    s.parse().unwrap()
}
fn uuid(s: &str) -> MdevUuid {
    s.parse().unwrap()
}

const NEW: &str = "c0ffee00-1111-4222-8333-444455556666";

#[test]
fn lists_pci_and_virtual_parents() {
    let host = Host::standard();
    let (parents, errors) = list_parents(&host.fs()).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(parents, vec![parent(T4_NAME), parent("mtty")]);
}

#[test]
fn no_mdev_bus_means_no_parents_or_devices() {
    let host = Host::new();
    assert_eq!(list_parents(&host.fs()).unwrap().0, vec![]);
    assert_eq!(list_devices(&host.fs()).unwrap().0, vec![]);
}

#[test]
fn mtty_parent_is_not_pci() {
    let host = Host::standard();
    let p = read_parent(&host.fs(), &parent("mtty")).unwrap();
    assert_eq!(p.device_path, PathBuf::from(MTTY));
    assert_eq!(p.pci_address, None);
    let ids: Vec<&str> = p.types.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, vec!["mtty-1", "mtty-2"]);
    let t2 = &p.types[1];
    assert_eq!(t2.name.as_deref(), Some("Dual port serial"));
    assert_eq!(t2.device_api.as_deref(), Some("vfio-pci"));
    assert_eq!(t2.description, None);
    assert_eq!(t2.available_instances, Some(12));
    assert!(t2.devices.is_empty());
    assert!(t2.problems.is_empty() && p.problems.is_empty());
}

#[test]
fn t4_parent_with_an_existing_mdev() {
    let host = Host::standard();
    let p = read_parent(&host.fs(), &parent(T4_NAME)).unwrap();
    assert_eq!(p.device_path, PathBuf::from(T4));
    assert_eq!(p.pci_address, Some("0000:3b:00.0".parse().unwrap()));
    let t = &p.types[0];
    assert_eq!(t.id, ty("nvidia-222"));
    assert_eq!(t.name.as_deref(), Some("GRID T4-1B"));
    assert!(t.description.as_deref().unwrap().starts_with("num_heads=4"));
    assert_eq!(t.available_instances, Some(15));
    assert_eq!(t.devices, vec![uuid(EXISTING)]);
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["types"][0]["devices"][0], EXISTING);
    assert_eq!(serde_json::from_value::<MdevParent>(json).unwrap(), p);
}

#[test]
fn garbage_type_attributes_are_problems() {
    let host = Host::standard();
    let dir = format!("{MTTY}/mdev_supported_types/mtty-1");
    host.tree
        .file(&format!("{dir}/available_instances"), "-3\n");
    std::fs::remove_file(host.backing(&format!("{dir}/name"))).unwrap();
    host.tree.dir(&format!("{dir}/devices/not-a-uuid"));
    let t = read_type(&host.fs(), &parent("mtty"), &ty("mtty-1")).unwrap();
    assert_eq!(t.available_instances, None);
    assert_eq!(t.name, None);
    assert_eq!(t.device_api.as_deref(), Some("vfio-pci"));
    assert_eq!(t.problems.len(), 2, "{:?}", t.problems);
    assert!(
        t.problems[0].contains("available_instances: \"-3\""),
        "{:?}",
        t.problems
    );
    assert!(t.problems[1].contains("not-a-uuid"), "{:?}", t.problems);
}

#[test]
fn bad_and_unreadable_types_do_not_hide_the_others() {
    let host = Host::standard();
    let types = format!("{MTTY}/mdev_supported_types");
    host.tree.dir(&format!("{types}/bad type"));
    let raw = host
        .backing(&types)
        .join(std::ffi::OsStr::from_bytes(b"mtty-\xff"));
    std::fs::create_dir(raw).unwrap();
    let probe = host.probe();
    probe.deny("/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2");
    let p = read_parent(&probe, &parent("mtty")).unwrap();
    assert_eq!(
        p.types.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        vec!["mtty-1"]
    );
    let problems = p.problems.join("\n");
    assert_eq!(p.problems.len(), 3, "{problems}");
    assert!(problems.contains("not UTF-8"), "{problems}");
    assert!(problems.contains("bad type"), "{problems}");
    assert!(
        problems.contains("mtty-2 of mtty is unreadable"),
        "{problems}"
    );
    assert!(problems.contains("denied"), "{problems}");
}

#[test]
fn unknown_and_broken_parents() {
    let host = Host::standard();
    let err = read_parent(&host.fs(), &parent("mdpy")).unwrap_err();
    assert!(matches!(err, MdevError::UnknownParent { .. }), "{err}");
    // A parent entry that is a plain directory, not a link.
    host.tree
        .dir("/sys/class/mdev_bus/mbochs/mdev_supported_types");
    let err = read_parent(&host.fs(), &parent("mbochs")).unwrap_err();
    assert!(matches!(err, MdevError::Parent { .. }), "{err}");
    assert_eq!(err.errno(), Some(libc::EINVAL));
    // A parent without mdev_supported_types: readable, with a problem.
    host.parent("mdpy", "/sys/devices/virtual/mdpy/mdpy");
    std::fs::remove_dir(host.backing("/sys/devices/virtual/mdpy/mdpy/mdev_supported_types"))
        .unwrap();
    let p = read_parent(&host.fs(), &parent("mdpy")).unwrap();
    assert!(p.types.is_empty());
    assert!(p.problems[0].contains("lists no types"), "{:?}", p.problems);
}

#[test]
fn bad_parent_names_are_reported() {
    let host = Host::standard();
    host.link("/sys/class/mdev_bus/0000:3B:00.1", T4);
    host.link("/sys/class/mdev_bus/weird name", MTTY);
    let (parents, errors) = list_parents(&host.fs()).unwrap();
    assert_eq!(parents.len(), 2);
    let text: Vec<String> = errors.iter().map(|e| sysfs::error_chain(e)).collect();
    assert_eq!(text.len(), 2, "{text:?}");
    assert!(
        text.iter()
            .any(|t| t.contains("0000:3B:00.1") && t.contains("0000:3b:00.1")),
        "{text:?}"
    );
}

#[test]
fn reads_devices() {
    let host = Host::standard();
    host.mdev(MTTY, "mtty-2", NEW, None);
    let (devices, errors) = list_devices(&host.fs()).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        devices,
        vec![
            MdevDevice {
                uuid: uuid(EXISTING),
                parent: parent(T4_NAME),
                type_id: ty("nvidia-222"),
                iommu_group: Some(IommuGroupId(70)),
            },
            MdevDevice {
                uuid: uuid(NEW),
                parent: parent("mtty"),
                type_id: ty("mtty-2"),
                iommu_group: None
            },
        ]
    );
    let err = read_device(&host.fs(), uuid("12345678-1234-4234-8234-123456789abc")).unwrap_err();
    assert!(matches!(err, MdevError::NotFound { .. }));
}

#[test]
fn broken_devices_are_errors_beside_the_rest() {
    let host = Host::standard();
    host.mdev(MTTY, "mtty-1", NEW, None);
    host.tree.link(
        &format!("{MTTY}/{NEW}/iommu_group"),
        "../../../../kernel/iommu_groups/banana",
    );
    host.tree.dir("/sys/bus/mdev/devices/not-a-uuid");
    let (devices, errors) = list_devices(&host.fs()).unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(errors.len(), 2, "{errors:?}");
    let text: Vec<String> = errors.iter().map(|e| sysfs::error_chain(e)).collect();
    assert!(
        text.iter()
            .any(|t| t.contains("iommu_group") && t.contains("banana")),
        "{text:?}"
    );
    assert!(text.iter().any(|t| t.contains("not-a-uuid")), "{text:?}");
    // A device without mdev_type link.
    std::fs::remove_file(host.backing(&format!("{MTTY}/{NEW}/mdev_type"))).unwrap();
    let err = read_device(&host.fs(), uuid(NEW)).unwrap_err();
    assert!(matches!(err, MdevError::Device { .. }));
    assert_eq!(err.errno(), Some(libc::ENOENT));
}

/// Plays the kernel's part after a write to `create`: the device appears under the parent.
fn probe_creating(host: &Host, parent_dir: &'static str, type_id: &'static str) -> common::Probe {
    let tree = host.tree.clone();
    host.probe().on_write(move |path, value| {
        if path.ends_with("create") {
            common::add_mdev(&tree, parent_dir, type_id, value, None);
        }
    })
}

#[test]
fn create_writes_the_uuid_and_reads_the_device_back() {
    let host = Host::standard();
    let probe = probe_creating(&host, MTTY, "mtty-2");
    let dev = create(&probe, &parent("mtty"), &ty("mtty-2"), uuid(NEW)).unwrap();
    assert_eq!(
        dev,
        MdevDevice {
            uuid: uuid(NEW),
            parent: parent("mtty"),
            type_id: ty("mtty-2"),
            iommu_group: None
        }
    );
    let create_path = "/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2/create";
    assert_eq!(
        probe.writes(),
        vec![(create_path.to_owned(), NEW.to_owned())]
    );
}

#[test]
fn read_type_tells_a_missing_parent_from_a_missing_type() {
    let host = Host::standard();
    let err = read_type(&host.fs(), &parent("mdpy"), &ty("mdpy-1")).unwrap_err();
    assert!(matches!(err, MdevError::UnknownParent { .. }), "{err}");
    assert_eq!(err.to_string(), "mdev parent mdpy does not exist");
    let err = read_type(&host.fs(), &parent("mtty"), &ty("mdpy-1")).unwrap_err();
    assert!(matches!(err, MdevError::UnknownType { .. }), "{err}");
}

#[test]
fn create_checks_before_writing() {
    let host = Host::standard();
    let probe = host.probe();
    let err = create(&probe, &parent("mdpy"), &ty("mdpy-1"), uuid(NEW)).unwrap_err();
    assert!(matches!(err, MdevError::UnknownParent { .. }), "{err}");
    let err = create(&probe, &parent("mtty"), &ty("nvidia-222"), uuid(NEW)).unwrap_err();
    assert!(
        matches!(&err, MdevError::UnknownType { type_id, .. } if type_id.as_str() == "nvidia-222")
    );
    host.tree.file(
        &format!("{MTTY}/mdev_supported_types/mtty-1/available_instances"),
        "0\n",
    );
    let err = create(&probe, &parent("mtty"), &ty("mtty-1"), uuid(NEW)).unwrap_err();
    assert!(matches!(err, MdevError::NoInstancesLeft { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "mdev type mtty-1 of mtty has no instances left"
    );
    host.tree.file(
        &format!("{MTTY}/mdev_supported_types/mtty-1/available_instances"),
        "-3\n",
    );
    let err = create(&probe, &parent("mtty"), &ty("mtty-1"), uuid(NEW)).unwrap_err();
    assert!(matches!(err, MdevError::Type { .. }), "{err}");
    assert!(probe.writes().is_empty());
}

#[test]
fn create_maps_eexist_and_keeps_other_errnos() {
    let host = Host::standard();
    let create_path =
        format!("/sys/class/mdev_bus/{T4_NAME}/mdev_supported_types/nvidia-222/create");
    let probe = host.probe();
    probe.fail_write(&create_path, libc::EEXIST);
    let err = create(&probe, &parent(T4_NAME), &ty("nvidia-222"), uuid(EXISTING)).unwrap_err();
    assert!(
        matches!(err, MdevError::AlreadyExists { uuid: u } if u == uuid(EXISTING)),
        "{err}"
    );
    assert_eq!(err.errno(), Some(libc::EEXIST));
    let probe = host.probe();
    probe.fail_write(&create_path, libc::EDQUOT);
    let err = create(&probe, &parent(T4_NAME), &ty("nvidia-222"), uuid(NEW)).unwrap_err();
    assert!(matches!(err, MdevError::Sysfs(_)));
    assert_eq!(err.errno(), Some(libc::EDQUOT));
}

#[test]
fn create_that_does_not_appear_is_not_found() {
    let host = Host::standard();
    // The write is stored but nothing plays the kernel: the device never appears.
    let err = create(&host.fs(), &parent("mtty"), &ty("mtty-1"), uuid(NEW)).unwrap_err();
    assert!(matches!(err, MdevError::NotFound { .. }), "{err}");
}

#[test]
fn remove_writes_one() {
    let host = Host::standard();
    let probe = host.probe();
    remove(&probe, uuid(EXISTING)).unwrap();
    let path = format!("/sys/bus/mdev/devices/{EXISTING}/remove");
    assert_eq!(probe.writes(), vec![(path.clone(), "1".to_owned())]);
    assert_eq!(
        std::fs::read_to_string(host.backing(&format!("{T4}/{EXISTING}/remove"))).unwrap(),
        "1"
    );
    probe.fail_write(&path, libc::EBUSY);
    assert_eq!(
        remove(&probe, uuid(EXISTING)).unwrap_err().errno(),
        Some(libc::EBUSY)
    );
    let err = remove(&probe, uuid(NEW)).unwrap_err();
    assert!(matches!(err, MdevError::NotFound { uuid: u } if u == uuid(NEW)));
    assert_eq!(probe.writes().len(), 2);
}
