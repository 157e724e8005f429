//! State you can trust (issue 14, defects 5 and 7): a lost state file on a host that shows
//! vgpud's slices stops the engine until `recover` rebuilds the ledger from the host, and a
//! checksum-valid file whose records contradict each other is refused like a corrupt one.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::path::Path;

use agent::engine::{Engine, EngineConfig, Identity, SliceKind, SliceState};
use sim::SimHost;
use testkit::*;

const T4: &str = "0000:41:00.0";
const MI300X: &str = "0000:c1:00.0";
const A16: &str = "0000:83:00.0";

fn config(h: &SimHost, dir: &Path) -> EngineConfig {
    EngineConfig::new(dir, testkit::sim_access(h))
}

fn mdev_uuid(id: &Identity) -> ids::MdevUuid {
    match id {
        Identity::Mdev { uuid } => *uuid,
        other => panic!("not an mdev: {other:?}"),
    }
}

#[test]
fn a_lost_state_file_is_refused_then_recovered_from_the_host() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let (ours, held) = {
        let e = engine(&h, dir.path());
        let a = create(&e, T4, mdev_kind("nvidia-222")).unwrap();
        let b = create(&e, T4, mdev_kind("nvidia-222")).unwrap();
        create(&e, MI300X, SliceKind::SriovVf).unwrap();
        let held = e.allocate(request("nova", "nvidia-222", Some(T4))).unwrap();
        (
            [mdev_uuid(&a.identity), mdev_uuid(&b.identity)],
            held.slices[0],
        )
    };
    // Someone else's mdev, with an ordinary random UUID.
    let foreign = ids::MdevUuid::new_random();
    mdev::create(
        h.sysfs().as_ref(),
        &addr(A16).into(),
        &"nvidia-699".parse().unwrap(),
        foreign,
    )
    .unwrap();
    let on_host = host_slices(&h);
    std::fs::remove_file(dir.path().join("vgpud-state.json")).unwrap();

    let err = Engine::open(config(&h, dir.path())).unwrap_err();
    assert_eq!(err.code(), "store_error");
    let text = sysfs::error_chain(&err);
    assert!(text.contains("is missing"), "{text}");
    assert!(text.contains("vgpud state recover"), "{text}");
    for uuid in ours {
        assert!(text.contains(&uuid.to_string()), "names {uuid}: {text}");
    }
    assert!(!text.contains(&foreign.to_string()), "{text}");

    let report = Engine::recover(config(&h, dir.path())).unwrap();
    let adopted: Vec<&str> = report
        .adopted
        .iter()
        .map(|a| a.description.as_str())
        .collect();
    assert_eq!(adopted.len(), 2, "{report:?}");
    for uuid in ours {
        assert!(
            adopted.iter().any(|d| d.contains(&uuid.to_string())),
            "{report:?}"
        );
    }
    let left: Vec<&str> = report.not_adopted.iter().map(|(w, _)| w.as_str()).collect();
    assert!(
        left.iter().any(|w| w.contains(&foreign.to_string())),
        "{report:?}"
    );
    assert!(
        left.iter()
            .any(|w| w.starts_with("VF ") && w.contains(MI300X)),
        "the VF carries no mark: {report:?}"
    );
    assert!(
        report
            .not_recovered
            .iter()
            .any(|n| n.starts_with("allocations")),
        "{report:?}"
    );
    assert_eq!(
        host_slices(&h),
        on_host,
        "recovery changes nothing on the host"
    );

    // A second recovery finds the rebuilt file and keeps it.
    let again = Engine::recover(config(&h, dir.path())).unwrap_err();
    assert!(sysfs::error_chain(&again).contains("exists"), "{again}");

    let e = engine(&h, dir.path());
    let r = e.reconcile().unwrap();
    assert!(r.recreated.is_empty() && r.failed.is_empty(), "{r:?}");
    assert_eq!(r.foreign.len(), 2, "the VF and the foreign mdev: {r:?}");
    let slices = e.slices();
    assert_eq!(slices.len(), 2);
    assert!(
        slices.iter().all(|s| s.state == SliceState::Ready),
        "{slices:?}"
    );
    assert!(e.allocations().is_empty());
    assert!(slices.iter().all(|s| s.id != held), "slice ids are new");
    // The adopted slices are the engine's again: it can destroy them.
    for s in slices {
        e.destroy_slice(s.id).unwrap();
    }
    assert_eq!(host_slices(&h).len(), on_host.len() - 2);
}

#[test]
fn a_missing_state_file_on_a_host_without_vgpud_marks_starts_empty() {
    let h = sim("vdi-mixed");
    mdev::create(
        h.sysfs().as_ref(),
        &addr(A16).into(),
        &"nvidia-699".parse().unwrap(),
        ids::MdevUuid::new_random(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    assert_eq!(e.reconcile().unwrap().foreign.len(), 1);
}

/// Rewrites the engine's state file with `edit` applied to its body and a valid checksum.
fn rewrite(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("vgpud-state.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let (_, body) = text.split_once('\n').unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(body).unwrap();
    edit(&mut doc);
    let schema = store::Schema {
        name: "vgpud-state",
        version: 1,
    };
    std::fs::write(&path, store::encode(&doc, schema).unwrap()).unwrap();
}

#[test]
fn a_checksum_valid_file_whose_records_contradict_each_other_is_refused() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    {
        let e = engine(&h, dir.path());
        e.allocate(request("a", "nvidia-222", Some(T4))).unwrap();
        e.allocate(request("b", "nvidia-222", Some(T4))).unwrap();
    }
    // Allocation b now also holds a's slice.
    rewrite(dir.path(), |doc| {
        let allocs = doc["allocations"].as_object_mut().unwrap();
        let mut held: Vec<serde_json::Value> =
            allocs.values().map(|a| a["slices"][0].clone()).collect();
        let last = allocs.values_mut().last().unwrap();
        last["slices"].as_array_mut().unwrap().append(&mut held);
    });
    let text = sysfs::error_chain(&Engine::open(config(&h, dir.path())).unwrap_err());
    assert!(text.contains("corrupt"), "{text}");
    assert!(text.contains("contradict each other"), "{text}");
    assert!(text.contains("is held by allocation"), "{text}");
    assert!(text.contains("vgpud state recover"), "{text}");
}

#[test]
fn a_second_engine_is_refused_after_the_lock_file_is_deleted() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let first = engine(&h, dir.path());
    std::fs::remove_file(dir.path().join("lock")).unwrap();
    let err = Engine::open(config(&h, dir.path())).unwrap_err();
    assert!(
        sysfs::error_chain(&err).contains("locked by another vgpud instance"),
        "{err}"
    );
    drop(first);
}
