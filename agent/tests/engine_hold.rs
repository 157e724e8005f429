//! Holding named slices (kubelet's device plugin: kubelet picks the devices): all or none, only
//! free owned slices on GPUs in service, one allocation for the caller's consumer.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use agent::health::quarantine::QuarantineSource;
use testkit::*;

const T4: &str = "0000:41:00.0";

#[test]
fn named_slices_are_held_all_or_none() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let a = create(&e, T4, mdev_kind("nvidia-222")).unwrap().id;
    let b = create(&e, T4, mdev_kind("nvidia-222")).unwrap().id;
    let c = create(&e, T4, mdev_kind("nvidia-222")).unwrap().id;

    let held = e
        .hold_slices("kubernetes", "nvidia.com/GRID_T4-1B", &[a, b])
        .unwrap();
    assert_eq!(held.consumer, "kubernetes");
    assert_eq!(held.slices, vec![a, b]);
    assert_eq!(held.slice_type.as_deref(), Some("nvidia.com/GRID_T4-1B"));
    assert_eq!(e.slice(a).unwrap().owner.unwrap().allocation, held.id);

    // One of them taken already: refused, and the free one is not held either.
    let refused = e.hold_slices("kubernetes", "t", &[c, b]).unwrap_err();
    assert_eq!(refused.code(), "conflict");
    assert!(e.slice(c).unwrap().owner.is_none());
    // Named twice, none named, not vgpud's: refused before anything changes.
    assert_eq!(
        e.hold_slices("k", "t", &[c, c]).unwrap_err().code(),
        "invalid_request"
    );
    assert_eq!(
        e.hold_slices("k", "t", &[]).unwrap_err().code(),
        "invalid_request"
    );
    let stranger = agent::engine::SliceId::new_random();
    assert_eq!(
        e.hold_slices("k", "t", &[c, stranger]).unwrap_err().code(),
        "not_found"
    );
    assert!(e.slice(c).unwrap().owner.is_none());
    assert_eq!(e.allocations().len(), 1);

    // A GPU out of service holds nothing.
    e.quarantine(addr(T4), "test", QuarantineSource::Operator, None)
        .unwrap();
    assert_eq!(
        e.hold_slices("k", "t", &[c]).unwrap_err().code(),
        "quarantined"
    );

    // Released, the slices are free again; the allocation survives a restart until then.
    drop(e);
    let e = engine(&h, dir.path());
    assert_eq!(e.allocation(held.id).unwrap().slices, vec![a, b]);
    e.release(held.id).unwrap();
    assert!(e.slice(a).unwrap().owner.is_none());
}
