//! Declarative layouts (diff-based, pending while allocated) and imports.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use agent::engine::{AmdPartition, Event, Identity, Layout, LayoutState, SliceKind};
use testkit::*;

const A100: &str = "0000:07:00.0";

fn mig_layout(profile: &str, count: u32) -> Layout {
    gpu_layout(A100, &[(profile, count)])
}

fn profiles(e: &agent::engine::Engine) -> Vec<(String, u32)> {
    let mut v: Vec<_> = e
        .slices()
        .into_iter()
        .filter_map(|s| match s.identity {
            Identity::Mig { start, profile } => Some((profile.to_string(), start)),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_layout_change_waits_for_the_allocated_slice_then_completes() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let view = e.set_layouts(vec![mig_layout("1g.10gb", 2)]).unwrap();
    assert_eq!(view.status.len(), 1);
    assert_eq!(view.status[0].state, LayoutState::Applied, "{view:?}");
    // The scheduler keeps slots 0-3 whole (the only start of a 4g) and puts the small
    // instances in the upper half.
    assert_eq!(
        profiles(&e),
        vec![("1g.10gb".into(), 4), ("1g.10gb".into(), 6)]
    );
    // Applying again changes nothing.
    let before: Vec<_> = e.slices().into_iter().map(|s| s.id).collect();
    e.reconcile().unwrap();
    assert_eq!(
        e.slices().into_iter().map(|s| s.id).collect::<Vec<_>>(),
        before
    );

    let held = e.allocate(request("vm1", "1g.10gb", Some(A100))).unwrap();
    let held_slice = held.slices[0];
    let mut events = e.subscribe();
    let view = e.set_layouts(vec![mig_layout("3g.40gb", 2)]).unwrap();
    let st = &view.status[0];
    assert_eq!(st.state, LayoutState::Pending, "{st:?}");
    assert!(
        st.reasons
            .iter()
            .any(|r| r.contains("allocated to \"vm1\"")),
        "{st:?}"
    );
    assert!(e.slice(held_slice).is_ok(), "the allocated slice stays");
    assert!(
        profiles(&e).iter().any(|(p, _)| p == "3g.40gb"),
        "what fits is made already"
    );

    e.release(held.id).unwrap();
    let st = &e.layouts().status[0];
    assert_eq!(st.state, LayoutState::Applied, "{st:?}");
    assert_eq!(
        profiles(&e),
        vec![("3g.40gb".into(), 0), ("3g.40gb".into(), 4)]
    );
    let states: Vec<LayoutState> = std::iter::from_fn(|| events.try_recv().ok())
        .filter_map(|ev| match ev {
            Event::LayoutStatus { state, .. } => Some(state),
            _ => None,
        })
        .collect();
    assert_eq!(states, vec![LayoutState::Pending, LayoutState::Applied]);
}

#[test]
fn layouts_are_checked_against_the_host() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let code = |l: Vec<Layout>| e.set_layouts(l).unwrap_err().code();
    assert_eq!(code(vec![mig_layout("9g.99gb", 1)]), "invalid_request");
    let mut twice = mig_layout("1g.10gb", 1);
    twice.name = "other".into();
    assert_eq!(
        code(vec![mig_layout("1g.10gb", 1), twice]),
        "invalid_request"
    );
    let mut bad_id = mig_layout("1g.10gb", 1);
    bad_id.selector.pci_ids = vec!["nvidia".into()];
    assert_eq!(code(vec![bad_id]), "invalid_request");
    assert!(e.layouts().layouts.is_empty(), "nothing was stored");
    assert!(e.slices().is_empty(), "nothing was made");
}

#[test]
fn mig_parted_configs_apply_by_index_and_pci_id() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let yaml = r#"
version: v1
mig-configs:
  two-halves:
    - devices: [1, 2]
      device-filter: "0x20B210DE"
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
"#;
    let layouts = agent::engine::import::mig_parted_layouts(yaml, "two-halves").unwrap();
    let view = e.set_layouts(layouts).unwrap();
    let gpus: Vec<_> = view.status.iter().map(|s| (s.gpu, s.state)).collect();
    assert_eq!(
        gpus,
        vec![
            (addr("0000:0f:00.0"), LayoutState::Applied),
            (addr("0000:47:00.0"), LayoutState::Applied)
        ]
    );
    assert_eq!(e.slices().len(), 4);
}

#[test]
fn mdevctl_definitions_are_adopted_or_created() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let parent = "0000:41:00.0";
    let existing = ids::MdevUuid::new_random();
    let missing = ids::MdevUuid::new_random();
    mdev::create(
        h.sysfs().as_ref(),
        &addr(parent).into(),
        &"nvidia-222".parse().unwrap(),
        existing,
    )
    .unwrap();
    let defs = tempfile::tempdir().unwrap();
    let pdir = defs.path().join(parent);
    std::fs::create_dir(&pdir).unwrap();
    let def = r#"{"mdev_type": "nvidia-222", "start": "auto", "attrs": []}"#;
    std::fs::write(pdir.join(existing.to_string()), def).unwrap();
    std::fs::write(pdir.join(missing.to_string()), def).unwrap();
    std::fs::write(
        pdir.join(ids::MdevUuid::new_random().to_string()),
        "garbage",
    )
    .unwrap();
    std::fs::write(pdir.join("not-a-uuid"), def).unwrap();
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
    let uuids = owned_mdevs(&e);
    assert!(uuids.contains(&existing) && uuids.contains(&missing));
    assert!(exists(&h, &format!("/sys/bus/mdev/devices/{missing}")));
    assert!(e.reconcile().unwrap().foreign.is_empty());
    assert!(matches!(
        e.slice(report.adopted[0]).unwrap().spec.kind,
        SliceKind::Mdev { .. }
    ));
}

const MI300X: &str = "0000:c1:00.0";

fn amd_layout(compute: &str, memory: &str, vfs: Option<u32>, slices: u32) -> Layout {
    Layout {
        amd: Some(AmdPartition {
            compute: compute.into(),
            memory: memory.into(),
            vfs,
        }),
        ..gpu_layout(MI300X, &[("vf", slices)])
    }
}

fn modes(h: &sim::SimHost) -> (String, String, u32) {
    let amd = h.amd();
    let p = amd.partition(addr(MI300X)).unwrap();
    let n = amd.num_vf(addr(MI300X)).unwrap();
    (p.compute, p.memory, n.enabled)
}

fn vf_slices(e: &agent::engine::Engine) -> usize {
    e.slices()
        .into_iter()
        .filter(|s| matches!(s.identity, Identity::Vf { .. }))
        .count()
}

#[test]
fn an_amd_layout_sets_partition_modes_and_vfs() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    assert_eq!(modes(&h), ("SPX".into(), "NPS1".into(), 1));
    let view = e
        .set_layouts(vec![amd_layout("CPX", "NPS4", Some(8), 8)])
        .unwrap();
    assert_eq!(view.status[0].state, LayoutState::Applied, "{view:?}");
    assert_eq!(modes(&h), ("CPX".into(), "NPS4".into(), 8));
    assert_eq!(vf_slices(&e), 8);
    // Applying again changes nothing.
    let before: Vec<_> = e.slices().into_iter().map(|s| s.id).collect();
    e.reconcile().unwrap();
    assert_eq!(
        e.slices().into_iter().map(|s| s.id).collect::<Vec<_>>(),
        before
    );
    // Old layout JSON (no `amd`) still loads; the new field round-trips.
    let old: Layout =
        serde_json::from_str(r#"{"name":"x","slices":[{"type":"vf","count":1}]}"#).unwrap();
    assert_eq!(old.amd, None);
    let json = serde_json::to_string(&view.layouts[0]).unwrap();
    assert_eq!(
        serde_json::from_str::<Layout>(&json).unwrap(),
        view.layouts[0]
    );
}

#[test]
fn an_amd_partition_change_waits_for_the_allocated_vf_then_completes() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let view = e
        .set_layouts(vec![amd_layout("SPX", "NPS1", Some(1), 1)])
        .unwrap();
    assert_eq!(view.status[0].state, LayoutState::Applied, "{view:?}");
    let held = e.allocate(request("vm1", "vf", Some(MI300X))).unwrap();
    let view = e
        .set_layouts(vec![amd_layout("CPX", "NPS4", Some(8), 8)])
        .unwrap();
    let st = &view.status[0];
    assert_eq!(st.state, LayoutState::Pending, "{st:?}");
    assert!(
        st.reasons
            .iter()
            .any(|r| r.contains("allocated to \"vm1\"")),
        "{st:?}"
    );
    assert_eq!(
        modes(&h),
        ("SPX".into(), "NPS1".into(), 1),
        "nothing changed"
    );
    assert!(e.slice(held.slices[0]).is_ok());

    e.release(held.id).unwrap();
    let st = &e.layouts().status[0];
    assert_eq!(st.state, LayoutState::Applied, "{st:?}");
    assert_eq!(modes(&h), ("CPX".into(), "NPS4".into(), 8));
    assert_eq!(vf_slices(&e), 8);
}

#[test]
fn bad_amd_modes_or_counts_are_refused_with_nothing_touched() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let code = |l: Layout| e.set_layouts(vec![l]).unwrap_err().code();
    assert_eq!(code(amd_layout("XPX", "NPS1", None, 1)), "invalid_request");
    assert_eq!(code(amd_layout("CPX", "NPS8", None, 1)), "invalid_request");
    assert_eq!(
        code(amd_layout("QPX", "NPS4", Some(8), 1)),
        "invalid_request"
    );
    assert_eq!(
        code(amd_layout("CPX", "NPS4", Some(9), 1)),
        "invalid_request"
    );
    assert_eq!(
        code(amd_layout("DPX", "NPS1", Some(2), 3)),
        "invalid_request"
    );
    let mut nvidia = amd_layout("CPX", "NPS4", None, 0);
    nvidia.selector.addresses = vec![addr("0000:41:00.0")];
    assert_eq!(code(nvidia), "invalid_request");
    assert!(e.layouts().layouts.is_empty(), "nothing was stored");
    assert!(e.slices().is_empty(), "nothing was made");
    assert_eq!(modes(&h), ("SPX".into(), "NPS1".into(), 1));
}

#[test]
fn an_amd_smi_fault_mid_way_fails_the_gpu_and_the_next_apply_recovers() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    h.inject_fault("amd:amdsmi_set_num_vf=BUSY,times=1".parse().unwrap())
        .unwrap();
    let view = e
        .set_layouts(vec![amd_layout("CPX", "NPS4", Some(8), 8)])
        .unwrap();
    let st = &view.status[0];
    assert_eq!(st.state, LayoutState::Failed, "{st:?}");
    assert!(
        st.reasons
            .iter()
            .any(|r| r.contains("8 VFs") && r.contains("busy")),
        "{st:?}"
    );
    assert_eq!(vf_slices(&e), 0);
    // Half way: memory already set, VF count and compute not; the change's intent stays open.
    assert_eq!(modes(&h), ("SPX".into(), "NPS4".into(), 1));
    assert_eq!(e.pending_intents(), 1);
    let report = e.reconcile().unwrap();
    assert_eq!(report.intents_resolved, 1, "{report:?}");
    assert_eq!(e.pending_intents(), 0);
    let st = &e.layouts().status[0];
    assert_eq!(st.state, LayoutState::Applied, "{st:?}");
    assert_eq!(modes(&h), ("CPX".into(), "NPS4".into(), 8));
    assert_eq!(vf_slices(&e), 8);
}
