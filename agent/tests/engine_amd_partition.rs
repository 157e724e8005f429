//! AMD partitions through layouts on the two AMD drivers: bare-metal amdgpu (profile `mi300x`:
//! NPS pending until the driver reloads, hive-wide) and GIM (profile `mi300x-gim`: partitions
//! hive-wide, at least one VF).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use agent::engine::{AmdPartition, GpuSelector, Layout, LayoutState};
use testkit::*;

const GPU0: &str = "0000:05:00.0";
const GPU7: &str = "0000:e5:00.0";

/// A partition-only layout for `gpus` (every GPU when empty).
fn partition(gpus: &[&str], compute: &str, memory: &str, vfs: Option<u32>) -> Layout {
    Layout {
        name: "amd".into(),
        selector: GpuSelector {
            addresses: gpus.iter().map(|g| addr(g)).collect(),
            ..GpuSelector::default()
        },
        slices: Vec::new(),
        amd: Some(AmdPartition {
            compute: compute.into(),
            memory: memory.into(),
            vfs,
        }),
        mig: None,
    }
}

fn modes(h: &sim::SimHost, gpu: &str) -> (String, String) {
    let p = h.amd().partition(addr(gpu)).unwrap();
    (p.compute, p.memory)
}

#[test]
fn an_nps_change_on_amdgpu_is_pending_until_the_driver_reloads() {
    let h = sim("mi300x");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let view = e
        .set_layouts(vec![partition(&[], "CPX", "NPS4", None)])
        .unwrap();
    assert_eq!(view.status.len(), 8);
    for st in &view.status {
        assert_eq!(st.state, LayoutState::Pending, "{st:?}");
        assert!(
            st.reasons
                .iter()
                .any(|r| r.contains("NPS4") && r.contains("reloads")),
            "{st:?}"
        );
    }
    assert_eq!(
        e.pending_intents(),
        0,
        "nothing is left for vgpud to finish"
    );
    // The compute mode applied at once; the memory mode waits.
    assert_eq!(modes(&h, GPU7), ("CPX".into(), "NPS1".into()));

    h.reload_amdgpu().unwrap();
    e.reconcile().unwrap();
    for st in &e.layouts().status {
        assert_eq!(st.state, LayoutState::Applied, "{st:?}");
    }
    assert_eq!(modes(&h, GPU0), ("CPX".into(), "NPS4".into()));
}

#[test]
fn a_memory_mode_for_part_of_a_hive_is_refused_a_compute_mode_is_not() {
    let h = sim("mi300x");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let err = e
        .set_layouts(vec![partition(&[GPU0], "SPX", "NPS4", None)])
        .unwrap_err();
    assert_eq!(err.code(), "invalid_request");
    assert!(err.to_string().contains("XGMI hive"), "{err}");
    assert!(e.layouts().layouts.is_empty());
    assert_eq!(modes(&h, GPU7), ("SPX".into(), "NPS1".into()));
    // amdgpu's compute modes are per GPU.
    let view = e
        .set_layouts(vec![partition(&[GPU0], "DPX", "NPS1", None)])
        .unwrap();
    assert_eq!(view.status[0].state, LayoutState::Applied, "{view:?}");
    assert_eq!(modes(&h, GPU0).0, "DPX");
    assert_eq!(modes(&h, GPU7).0, "SPX");
    // No VFs on amdgpu.
    let err = e
        .set_layouts(vec![partition(&[GPU0], "SPX", "NPS1", Some(1))])
        .unwrap_err();
    assert!(err.to_string().contains("GIM"), "{err}");
}

#[test]
fn gim_partitions_are_hive_wide_and_keep_a_vf() {
    let h = sim("mi300x-gim");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let code = |l: Layout| e.set_layouts(vec![l]).unwrap_err().code();
    assert_eq!(
        code(partition(&[GPU0], "CPX", "NPS1", None)),
        "invalid_request"
    );
    assert_eq!(
        code(partition(&[], "SPX", "NPS1", Some(0))),
        "invalid_request"
    );
    assert_eq!(
        code(partition(&[], "CPX", "NPS4", Some(8))),
        "invalid_request",
        "the firmware allows one VF"
    );
    assert!(e.layouts().layouts.is_empty());

    let view = e
        .set_layouts(vec![partition(&[], "CPX", "NPS4", None)])
        .unwrap();
    for st in &view.status {
        assert_eq!(st.state, LayoutState::Applied, "{st:?}");
    }
    assert_eq!(modes(&h, GPU7), ("CPX".into(), "NPS4".into()));
    assert_eq!(h.amd().num_vf(addr(GPU7)).unwrap().enabled, 1);
}
