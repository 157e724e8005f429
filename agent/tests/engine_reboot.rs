//! Host reboots between two engine instances, and the state directory's single owner.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::collections::BTreeMap;

use agent::engine::{Engine, Event, Identity, SliceKind, SliceState};
use sim::{Profile, SimHost};
use testkit::*;

const T4: &str = "0000:41:00.0";
const T4B: &str = "0000:42:00.0";
const A16: &str = "0000:83:00.0";
const MI300X: &str = "0000:c1:00.0";

fn identities(e: &Engine) -> BTreeMap<agent::engine::SliceId, (Identity, SliceState)> {
    e.slices()
        .into_iter()
        .map(|s| (s.id, (s.identity, s.state)))
        .collect()
}

#[test]
fn owned_slices_come_back_with_their_identities_after_a_reboot() {
    let tmp = tempfile::tempdir().unwrap();
    let host_dir = tmp.path().join("host");
    let state = tmp.path().join("state");
    let h = SimHost::create(&host_dir, Profile::builtin("vdi-mixed").unwrap()).unwrap();
    let (before, allocs) = {
        let e = engine(&h, &state);
        create(&e, T4, mdev_kind("nvidia-222")).unwrap();
        create(&e, T4, mdev_kind("nvidia-222")).unwrap();
        create(&e, T4B, SliceKind::Passthrough).unwrap();
        create(&e, MI300X, SliceKind::SriovVf).unwrap();
        e.allocate(request("nova", "nvidia-222", Some(T4))).unwrap();
        (identities(&e), e.allocations())
    };
    // A foreign mdev on the A16, made by someone else after the reboot.
    h.reboot().unwrap();
    assert!(host_slices(&h).is_empty(), "the reboot took every slice");
    let foreign = ids::MdevUuid::new_random();
    mdev::create(
        h.sysfs().as_ref(),
        &addr(A16).into(),
        &"nvidia-699".parse().unwrap(),
        foreign,
    )
    .unwrap();

    let h2 = SimHost::open(&host_dir).unwrap();
    let e = engine(&h2, &state);
    let mut events = e.subscribe();
    let report = e.reconcile().unwrap();
    assert_eq!(report.recreated.len(), 4, "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(report.foreign.len(), 1, "{report:?}");
    assert!(report.foreign[0].contains(&foreign.to_string()));
    let after = identities(&e);
    assert_eq!(after.len(), before.len());
    for (id, (identity, state)) in &before {
        assert_eq!(&after[id].0, identity, "same identity for {id}");
        assert_eq!(&after[id].1, state, "same state for {id}");
    }
    assert_eq!(e.allocations(), allocs);
    assert_eq!(driver(&h2, addr(T4B)).as_deref(), Some("vfio-pci"));
    assert!(
        exists(&h2, &format!("/sys/bus/mdev/devices/{foreign}")),
        "foreign slice untouched"
    );
    let mut drift = 0;
    let mut foreign_events = 0;
    while let Ok(ev) = events.try_recv() {
        match ev {
            Event::Drift { .. } => drift += 1,
            Event::ForeignFound { .. } => foreign_events += 1,
            _ => {}
        }
    }
    assert_eq!((drift, foreign_events), (4, 1));
    // A second pass finds nothing to do.
    let again = e.reconcile().unwrap();
    assert!(
        again.recreated.is_empty() && again.intents_resolved == 0,
        "{again:?}"
    );
}

#[test]
fn vfs_beyond_the_boot_count_are_re_enabled() {
    let tmp = tempfile::tempdir().unwrap();
    let host_dir = tmp.path().join("host");
    let state = tmp.path().join("state");
    // No boot service enables VFs on this host (nvidia refuses sriov_numvfs writes).
    let h = SimHost::create(&host_dir, Profile::builtin("hgx-h200-vgpu").unwrap()).unwrap();
    let gpu = "0000:18:00.0";
    let kind = SliceKind::NvidiaVfio {
        vgpu_type: "1421".parse().unwrap(),
        start: None,
    };
    let ids: BTreeMap<_, _> = {
        let e = engine(&h, &state);
        let a = create(&e, gpu, kind.clone()).unwrap();
        let b = create(&e, gpu, kind.clone()).unwrap();
        [(a.id, a.identity), (b.id, b.identity)].into()
    };
    h.reboot().unwrap();
    // The boot service did not enable VFs this time.
    let e = engine(&h, &state);
    let report = e.reconcile().unwrap();
    assert_eq!(report.recreated.len(), 2, "{report:?}");
    let now: BTreeMap<_, _> = e.slices().into_iter().map(|s| (s.id, s.identity)).collect();
    assert_eq!(now, ids);
}

#[test]
fn a_second_engine_on_the_same_state_dir_is_refused() {
    let h = sim("single-gpu");
    let dir = tempfile::tempdir().unwrap();
    let first = engine(&h, dir.path());
    let cfg = agent::engine::EngineConfig::new(dir.path(), testkit::sim_access(&h));
    let err = Engine::open(cfg).unwrap_err();
    assert_eq!(err.code(), "store_error");
    let text = sysfs::error_chain(&err);
    assert!(text.contains("locked by another vgpud instance"), "{text}");
    assert!(text.contains(&dir.path().display().to_string()), "{text}");
    drop(first);
    engine(&h, dir.path());
}

#[test]
fn a_corrupt_state_file_stops_the_engine_with_a_remedy() {
    let h = sim("single-gpu");
    let dir = tempfile::tempdir().unwrap();
    {
        let e = engine(&h, dir.path());
        create(&e, "0000:01:00.0", mdev_kind("nvidia-920")).unwrap();
    }
    let path = dir.path().join("vgpud-state.json");
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 0x20;
    std::fs::write(&path, bytes).unwrap();
    let cfg = agent::engine::EngineConfig::new(dir.path(), testkit::sim_access(&h));
    let text = sysfs::error_chain(&Engine::open(cfg).unwrap_err());
    assert!(
        text.contains("corrupt") && text.contains("move it aside"),
        "{text}"
    );
}

#[test]
fn drift_behind_the_engines_back_is_repaired_and_reported() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let s = create(&e, T4, mdev_kind("nvidia-222")).unwrap();
    let Identity::Mdev { uuid } = s.identity else {
        panic!()
    };
    mdev::remove(h.sysfs().as_ref(), uuid).unwrap();
    // Views are kept until a change is announced: the mdev's `remove` uevent, in the daemon.
    assert_eq!(
        e.slice(s.id).unwrap().state,
        SliceState::Ready,
        "not announced yet"
    );
    e.host_changed();
    assert_eq!(e.slice(s.id).unwrap().state, SliceState::Failed);
    let mut events = e.subscribe();
    let report = e.reconcile().unwrap();
    assert_eq!(report.recreated, vec![s.id]);
    assert_eq!(e.slice(s.id).unwrap().state, SliceState::Ready);
    assert!(
        std::iter::from_fn(|| events.try_recv().ok()).any(|ev| matches!(ev, Event::Drift { .. }))
    );
}

#[test]
fn a_hot_unplugged_gpu_fails_its_slices_and_a_replug_restores_them() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let s = create(&e, T4, mdev_kind("nvidia-222")).unwrap();
    let mut events = e.subscribe();
    h.remove_gpu(addr(T4)).unwrap();
    let report = e.reconcile().unwrap();
    let why = format!("GPU {T4} was removed from the PCI bus");
    assert_eq!(report.failed, vec![(s.id, why.clone())], "{report:?}");
    assert_eq!(report.devices_removed.len(), 1, "{report:?}");
    assert_eq!(report.devices_removed[0].slices, vec![s.id]);
    let now = e.slice(s.id).unwrap();
    assert_eq!(now.state, SliceState::Failed);
    assert_eq!(now.reason.as_deref(), Some(why.as_str()));
    let seen: Vec<Event> = std::iter::from_fn(|| events.try_recv().ok()).collect();
    let removed: Vec<_> = seen
        .iter()
        .filter(|ev| matches!(ev, Event::DeviceRemoved { .. }))
        .collect();
    assert_eq!(
        removed,
        [&Event::DeviceRemoved {
            device: addr(T4).into(),
            slices: vec![s.id],
            reason: why.clone(),
        }]
    );
    // A second pass while it is still gone: the same reason, no second event.
    let report = e.reconcile().unwrap();
    assert_eq!(report.failed, vec![(s.id, why)]);
    assert!(report.devices_removed.is_empty());
    assert!(
        !std::iter::from_fn(|| events.try_recv().ok())
            .any(|ev| matches!(ev, Event::DeviceRemoved { .. }))
    );
    h.add_gpu(addr(T4)).unwrap();
    let report = e.reconcile().unwrap();
    assert_eq!(report.recreated, vec![s.id]);
    assert_eq!(report.devices_returned.len(), 1, "{report:?}");
    let back = e.slice(s.id).unwrap();
    assert_eq!((back.state, back.identity), (SliceState::Ready, s.identity));
    assert!(std::iter::from_fn(|| events.try_recv().ok()).any(|ev| ev
        == Event::DeviceAdded {
            device: addr(T4).into(),
            slices: vec![s.id],
        }));
}
