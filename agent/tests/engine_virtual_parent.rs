//! mdev slices on a parent that is not a PCI device (the kernel's sample `mtty`), on the
//! simulator with the rig guest's profile: the same story the real-kernel rig tells across a
//! reboot (tests/rig/checks/src/engine_phases.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::path::Path;

use agent::engine::{DeviceRef, SliceKind, SliceRequest, SliceState};
use ids::{MdevParentName, MdevTypeId, MdevUuid};
use sim::{Profile, SimHost};
use testkit::*;

fn rig_profile() -> Profile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/rig/rig-guest.toml");
    Profile::load(&path).unwrap()
}

fn mtty() -> MdevParentName {
    "mtty".parse().unwrap()
}

fn available(h: &SimHost, ty: &str) -> Option<u32> {
    let ty: MdevTypeId = ty.parse().unwrap();
    mdev::read_type(h.sysfs().as_ref(), &mtty(), &ty)
        .unwrap()
        .available_instances
}

fn present(h: &SimHost, uuid: MdevUuid) -> bool {
    mdev::read_device(h.sysfs().as_ref(), uuid).is_ok_and(|d| d.parent == mtty())
}

#[test]
fn an_mdev_on_a_virtual_parent_survives_a_reboot_with_its_uuid() {
    let tmp = tempfile::tempdir().unwrap();
    let host_dir = tmp.path().join("host");
    let state = tmp.path().join("state");
    let h = SimHost::create(&host_dir, rig_profile()).unwrap();
    let start = available(&h, "mtty-2");
    assert!(start.is_some_and(|n| n > 0), "{start:?}");
    let (slice_id, uuid) = {
        let e = engine(&h, &state);
        e.reconcile().unwrap();
        let mut req = request("rig-mdev", "mtty-2", None);
        req.request = SliceRequest::new("mtty-2", 1);
        let a = e.allocate(req).unwrap();
        let s = e.slice(a.slices[0]).unwrap();
        assert_eq!(s.spec.gpu, DeviceRef::MdevParent(mtty()));
        assert_eq!(s.spec.gpu.to_string(), "mtty");
        assert_eq!(s.state, SliceState::Allocated);
        assert_eq!(s.numa_node, None, "a virtual parent has no NUMA node");
        let uuid = s.handles.mdev_uuid.unwrap();
        assert!(present(&h, uuid));
        assert!(available(&h, "mtty-2") < start);
        (s.id, uuid)
    };
    h.reboot().unwrap();
    assert!(!present(&h, uuid), "the reboot took the mdev");

    let h2 = SimHost::open(&host_dir).unwrap();
    let e = engine(&h2, &state);
    let report = e.reconcile().unwrap();
    assert_eq!(report.recreated, vec![slice_id], "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    let s = e.slice(slice_id).unwrap();
    assert_eq!(
        s.handles.mdev_uuid,
        Some(uuid),
        "same UUID after the reboot"
    );
    assert_eq!(s.state, SliceState::Allocated);
    assert!(present(&h2, uuid));
    let a = e
        .allocations()
        .into_iter()
        .find(|a| a.consumer == "rig-mdev")
        .expect("the allocation survived");
    assert_eq!(a.slices, vec![slice_id]);

    e.release(a.id).unwrap();
    e.destroy_slice(slice_id).unwrap();
    assert!(!present(&h2, uuid));
    assert_eq!(available(&h2, "mtty-2"), start);
    assert!(e.slices().is_empty());
}

#[test]
fn explicit_mdev_create_on_a_virtual_parent_and_refusals() {
    let tmp = tempfile::tempdir().unwrap();
    let h = SimHost::create(&tmp.path().join("host"), rig_profile()).unwrap();
    let e = engine(&h, &tmp.path().join("state"));
    let s = create(&e, "mtty", mdev_kind("mtty-1")).unwrap();
    assert_eq!(s.state, SliceState::Ready);
    assert!(present(&h, s.handles.mdev_uuid.unwrap()));
    // Only mdevs live on a virtual parent.
    let vf = create(&e, "mtty", SliceKind::SriovVf).unwrap_err();
    assert_eq!(vf.code(), "invalid_request", "{vf}");
    // A type the parent does not offer, a parent that is not there.
    let other = create(&e, "mtty", mdev_kind("mdpy-hd")).unwrap_err();
    assert_ne!(other.code(), "host_error", "{other}");
    let gone = create(&e, "nosuchparent", mdev_kind("mtty-1")).unwrap_err();
    assert_ne!(gone.code(), "host_error", "{gone}");
    // A type no device offers is refused before anything is touched.
    let none = e.allocate(request("c", "mtty-9", None)).unwrap_err();
    assert_eq!(none.code(), "invalid_request", "{none}");
    e.destroy_slice(s.id).unwrap();
    assert!(!present(&h, s.handles.mdev_uuid.unwrap()));
}

#[test]
fn foreign_mdevs_on_a_virtual_parent_are_reported_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let h = SimHost::create(&tmp.path().join("host"), rig_profile()).unwrap();
    let e = engine(&h, &tmp.path().join("state"));
    let ours = create(&e, "mtty", mdev_kind("mtty-1")).unwrap();
    let foreign = MdevUuid::new_random();
    mdev::create(
        h.sysfs().as_ref(),
        &mtty(),
        &"mtty-2".parse().unwrap(),
        foreign,
    )
    .unwrap();
    let report = e.reconcile().unwrap();
    assert_eq!(report.foreign.len(), 1, "{report:?}");
    assert!(
        report.foreign[0].contains(&foreign.to_string()),
        "{report:?}"
    );
    assert!(report.foreign[0].contains("mtty"), "{report:?}");
    assert!(present(&h, foreign), "a foreign mdev is never touched");
    assert!(present(&h, ours.handles.mdev_uuid.unwrap()));
    assert_eq!(e.slices().len(), 1, "the foreign mdev is not adopted");
}

#[test]
fn mdevctl_definitions_on_a_virtual_parent_are_adopted_or_created() {
    let tmp = tempfile::tempdir().unwrap();
    let h = SimHost::create(&tmp.path().join("host"), rig_profile()).unwrap();
    let e = engine(&h, &tmp.path().join("state"));
    let existing = MdevUuid::new_random();
    let missing = MdevUuid::new_random();
    mdev::create(
        h.sysfs().as_ref(),
        &mtty(),
        &"mtty-2".parse().unwrap(),
        existing,
    )
    .unwrap();
    let defs = tempfile::tempdir().unwrap();
    let pdir = defs.path().join("mtty");
    std::fs::create_dir(&pdir).unwrap();
    let def = r#"{"mdev_type": "mtty-2", "start": "auto", "attrs": []}"#;
    std::fs::write(pdir.join(existing.to_string()), def).unwrap();
    std::fs::write(pdir.join(missing.to_string()), def).unwrap();
    // A type the parent does not offer is skipped, and nothing is created for it.
    let wrong = MdevUuid::new_random();
    std::fs::write(
        pdir.join(wrong.to_string()),
        r#"{"mdev_type": "mdpy-hd", "attrs": []}"#,
    )
    .unwrap();
    let report = e.import_mdevctl(defs.path()).unwrap();
    assert_eq!(
        (
            report.adopted.len(),
            report.created.len(),
            report.skipped.len()
        ),
        (1, 1, 1),
        "{report:?}"
    );
    assert!(present(&h, existing) && present(&h, missing));
    assert!(!present(&h, wrong));
    for s in e.slices() {
        assert_eq!(s.spec.gpu, DeviceRef::MdevParent(mtty()));
    }
    assert!(e.reconcile().unwrap().foreign.is_empty());
}
