//! Allocation: reuse, creation on demand, idempotency, races, release.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};

use agent::engine::{CreateSlice, Event, OwnerRequest, SliceState};
use testkit::*;

const T4: &str = "0000:41:00.0";

#[test]
fn sixty_four_requests_for_sixteen_slices() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    // Fill the T4 with its 16 nvidia-222 slices: none more can be made.
    for _ in 0..16 {
        create(&e, T4, mdev_kind("nvidia-222")).unwrap();
    }
    let barrier = Arc::new(Barrier::new(64));
    let threads: Vec<_> = (0..64)
        .map(|i| {
            let (e, barrier) = (e.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                e.allocate(request(&format!("c{i}"), "nvidia-222", Some(T4)))
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let ok: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    let codes: BTreeSet<&str> = results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .map(|e| e.code())
        .collect();
    assert_eq!(ok.len(), 16);
    assert_eq!(codes, BTreeSet::from(["no_capacity"]));
    // No slice twice; store and host agree.
    let held: BTreeSet<_> = ok.iter().flat_map(|a| a.slices.iter().copied()).collect();
    assert_eq!(held.len(), 16);
    assert_eq!(e.allocations().len(), 16);
    let slices = e.slices();
    assert_eq!(slices.len(), 16);
    assert!(
        slices.iter().all(|s| s.state == SliceState::Allocated),
        "{slices:?}"
    );
    assert_eq!(host_slices(&h).len(), 16);
    assert_eq!(e.pending_intents(), 0);
}

#[test]
fn reuse_then_create_idempotency_and_release() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let mut events = e.subscribe();
    let free = create(&e, T4, mdev_kind("nvidia-230")).unwrap();
    let mut req = request("nova", "nvidia-230", None);
    req.request.idempotency_key = Some("k1".into());
    let a = e.allocate(req.clone()).unwrap();
    assert_eq!(a.slices, vec![free.id], "the free slice is reused");
    assert_eq!(
        e.allocate(req.clone()).unwrap(),
        a,
        "a retry returns the same allocation"
    );
    let mut other = req.clone();
    other.request.count = 2;
    assert_eq!(e.allocate(other).unwrap_err().code(), "conflict");
    // Nothing free now: a new slice is created.
    let b = e.allocate(request("nova", "nvidia-230", None)).unwrap();
    assert_ne!(b.slices, a.slices);
    assert_eq!(e.slice(b.slices[0]).unwrap().state, SliceState::Allocated);
    assert_eq!(
        e.slice(b.slices[0]).unwrap().owner.unwrap().consumer,
        "nova"
    );
    // Allocated slices cannot be destroyed.
    assert_eq!(e.destroy_slice(a.slices[0]).unwrap_err().code(), "conflict");
    e.release(a.id).unwrap();
    assert_eq!(e.release(a.id).unwrap_err().code(), "not_found");
    assert_eq!(e.slice(a.slices[0]).unwrap().state, SliceState::Ready);
    e.destroy_slice(a.slices[0]).unwrap();
    // Several at once, all or nothing.
    let mut many = request("batch", "nvidia-230", Some(T4));
    many.request.count = 3;
    assert_eq!(e.allocate(many.clone()).unwrap().slices.len(), 3);
    many.request.count = 20;
    let before = e.slices().len();
    assert_eq!(e.allocate(many).unwrap_err().code(), "no_capacity");
    assert_eq!(
        e.slices().len(),
        before,
        "slices made for a failed allocation are gone again"
    );
    let mut seen = Vec::new();
    while let Ok(ev) = events.try_recv() {
        seen.push(ev);
    }
    assert!(
        seen.iter()
            .any(|e| matches!(e, Event::AllocationCreated { consumer, .. } if consumer == "nova"))
    );
    assert!(
        seen.iter()
            .any(|e| matches!(e, Event::AllocationReleased { .. }))
    );
    assert!(
        seen.iter()
            .any(|e| matches!(e, Event::SliceDestroyed { .. }))
    );
}

#[test]
fn requests_are_checked_before_anything_is_touched() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    for (consumer, t, gpu) in [
        ("", "nvidia-222", None),
        ("c", "", None),
        ("c", "nvidia-9999", None),
        ("c", "../../etc", None),
        ("c\n", "nvidia-222", None),
        ("c", "3g.40gb", None),
        ("c", "nvidia-222", Some("0000:01:00.0")),
    ] {
        let err = e.allocate(request(consumer, t, gpu)).unwrap_err();
        assert_eq!(err.code(), "invalid_request", "{consumer:?} {t:?}: {err}");
    }
    let mut zero = request("c", "nvidia-222", None);
    zero.request.count = 0;
    assert_eq!(e.allocate(zero).unwrap_err().code(), "invalid_request");
    assert!(host_slices(&h).is_empty());
    assert!(e.slices().is_empty());
    // Ids must be canonical.
    assert!(
        "83B8F4F2-509F-482F-BC1E-E6BFE0FA1001"
            .parse::<agent::engine::SliceId>()
            .is_err()
    );
    assert!(
        "83b8f4f2-509f-482f-bc1e-e6bfe0fa1001"
            .parse::<agent::engine::SliceId>()
            .is_ok()
    );
}

#[test]
fn every_type_name_resolves() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let vf = e.allocate(request("a", "vf", None)).unwrap();
    assert_eq!(
        e.slice(vf.slices[0]).unwrap().spec.gpu,
        addr("0000:c1:00.0")
    );
    let whole = e
        .allocate(request("b", "gpu", Some("0000:42:00.0")))
        .unwrap();
    assert_eq!(
        driver(&h, addr("0000:42:00.0")).as_deref(),
        Some("vfio-pci")
    );
    e.release(whole.id).unwrap();
    let h2 = sim("hgx-h200");
    let dir2 = tempfile::tempdir().unwrap();
    let e2 = engine(&h2, dir2.path());
    let by_name = e2.allocate(request("c", "NVIDIA H200X-35C", None)).unwrap();
    let s = e2.slice(by_name.slices[0]).unwrap();
    assert_eq!(
        s.spec.kind,
        agent::engine::SliceKind::NvidiaVfio {
            vgpu_type: "1421".parse().unwrap(),
            start: None,
        }
    );
    let h3 = sim("dgx-a100");
    let dir3 = tempfile::tempdir().unwrap();
    let e3 = engine(&h3, dir3.path());
    let mig = e3.allocate(request("d", "MIG 3g.40gb", None)).unwrap();
    assert!(matches!(
        e3.slice(mig.slices[0]).unwrap().spec.kind,
        agent::engine::SliceKind::Mig { .. }
    ));
    // create_slice with an owner allocates at once.
    let s = e
        .create_slice(CreateSlice {
            spec: spec(T4, mdev_kind("nvidia-222")),
            owner: Some(OwnerRequest {
                consumer: "direct".into(),
                vm: None,
            }),
        })
        .unwrap();
    assert_eq!(s.state, SliceState::Allocated);
}

#[test]
fn an_idempotency_key_reused_with_another_request_is_a_conflict() {
    use agent::engine::NumaPolicy;
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let mut req = request("nova", "nvidia-230", Some(T4));
    req.request.idempotency_key = Some("k1".into());
    let a = e.allocate(req.clone()).unwrap();
    // The exact same request (the type spelt with spaces, the default NUMA policy named) is a
    // retry.
    let mut same = req.clone();
    same.request.slice_type = " nvidia-230 ".into();
    same.request.numa_policy = Some(NumaPolicy::Preferred);
    assert_eq!(e.allocate(same).unwrap(), a);
    type Change = Box<dyn Fn(&mut agent::engine::AllocationRequest)>;
    let changes: Vec<(&str, Change)> = vec![
        (
            "gpu",
            Box::new(|r| r.request.gpu = Some(addr("0000:42:00.0"))),
        ),
        ("no gpu", Box::new(|r| r.request.gpu = None)),
        ("vm", Box::new(|r| r.vm = Some("vm-2".into()))),
        (
            "numa",
            Box::new(|r| r.request.numa_policy = Some(NumaPolicy::Required)),
        ),
        ("vcpus", Box::new(|r| r.request.vcpus = Some(4))),
        ("memory", Box::new(|r| r.request.memory_mib = Some(4096))),
        (
            "type",
            Box::new(|r| r.request.slice_type = "nvidia-222".into()),
        ),
    ];
    for (what, change) in changes {
        let mut other = req.clone();
        change(&mut other);
        let err = e.allocate(other).unwrap_err();
        assert_eq!(err.code(), "conflict", "{what}: {err}");
        let text = err.to_string();
        assert!(
            text.contains("\"k1\"") && text.contains(&a.id.to_string()),
            "{text}"
        );
    }
    assert_eq!(e.allocations().len(), 1, "nothing else was allocated");
    // The record survives a restart: a retry after it is still told apart.
    drop(e);
    let e = engine(&h, dir.path());
    assert_eq!(e.allocate(req.clone()).unwrap(), a);
    let mut other = req;
    other.request.vcpus = Some(8);
    assert_eq!(e.allocate(other).unwrap_err().code(), "conflict");
}
