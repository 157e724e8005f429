//! Imports as content with a dry run: the plan of a mig-parted config (layouts added, changed,
//! removed; per GPU the slices kept, made and destroyed) and of mdevctl definitions (adopt,
//! create, skip), and that planning changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use agent::engine::import::{ImportPlan, ImportSource, MdevAction, MdevctlFile, mig_parted_import};
use agent::engine::{LayoutEntry, LayoutState};
use testkit::*;

const A100: &str = "0000:07:00.0";
const H200: &str = "0000:18:00.0";
const FIXTURE: &str = include_str!("../../tests/fixtures/mig-parted-config.yaml");

fn entry(t: &str, count: u32) -> LayoutEntry {
    LayoutEntry {
        slice_type: t.into(),
        count,
    }
}

#[test]
fn a_mig_parted_plan_is_the_diff_and_changes_nothing() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    // 4g.40gb at slot 0 (its only start), then 3g.40gb at 4.
    e.set_layouts(vec![gpu_layout(A100, &[("4g.40gb", 1), ("3g.40gb", 1)])])
        .unwrap();
    let held = e.allocate(request("vm1", "3g.40gb", Some(A100))).unwrap();
    let before = (e.slices(), e.layouts().layouts, host_slices(&h));

    let layouts = mig_parted_import(FIXTURE, Some("all-balanced")).unwrap();
    let source = ImportSource::Layouts(layouts);
    let outcome = e.import(&source, true).unwrap();
    assert!(outcome.dry_run && outcome.layouts.is_none() && outcome.report.is_none());
    let ImportPlan::Layouts { changes, gpus, .. } = &outcome.plan else {
        panic!("{:?}", outcome.plan);
    };
    let added: Vec<&str> = changes.added.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        added,
        [
            "all-balanced#0",
            "all-balanced#1",
            "all-balanced#2",
            "all-balanced#3"
        ]
    );
    assert_eq!(changes.removed, vec![format!("l-{A100}")]);
    assert_eq!(gpus.len(), 8);
    // Every GPU is an A100-80GB: the 80GB entry selects it.
    assert!(
        gpus.iter()
            .all(|g| g.layout.as_deref() == Some("all-balanced#1")),
        "{gpus:?}"
    );
    // The first GPU keeps its (allocated) 3g.40gb and loses the 4g.40gb.
    let first = &gpus[0];
    assert_eq!(first.gpu, addr(A100));
    assert_eq!(first.create, vec![entry("1g.10gb", 2), entry("2g.20gb", 1)]);
    assert_eq!(first.destroy.len(), 1);
    assert_eq!(
        first
            .destroy
            .iter()
            .map(|r| (r.kind.to_string(), r.allocated))
            .collect::<Vec<_>>(),
        vec![("MIG 4g.40gb".to_owned(), false)],
        "{first:?}"
    );
    assert!(first.destroy.iter().all(|r| r.slice != held.slices[0]));
    assert_eq!(first.mig, None, "MIG is on already");
    assert_eq!(
        gpus[1].create,
        vec![
            entry("1g.10gb", 2),
            entry("2g.20gb", 1),
            entry("3g.40gb", 1)
        ]
    );
    assert!(gpus[1].destroy.is_empty());
    assert_eq!(
        (e.slices(), e.layouts().layouts, host_slices(&h)),
        before,
        "a dry run changes nothing"
    );

    // Applied (nothing allocated), then planned again: unchanged, nothing to make.
    e.release(held.id).unwrap();
    let applied = e.import(&source, false).unwrap();
    let view = applied.layouts.unwrap();
    assert!(
        view.status.iter().all(|s| s.state == LayoutState::Applied),
        "{view:?}"
    );
    let again = e.plan_import(&source).unwrap();
    let ImportPlan::Layouts { changes, gpus, .. } = again else {
        panic!();
    };
    assert_eq!(changes.unchanged.len(), 4);
    assert!(changes.added.is_empty() && changes.removed.is_empty());
    assert!(
        gpus.iter()
            .all(|g| g.create.is_empty() && g.destroy.is_empty())
    );
}

#[test]
fn a_plan_the_host_refuses_is_refused_before_anything() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    // 1g.5gb is a 40GB part's profile.
    let layouts = mig_parted_import(FIXTURE, Some("all-1g.5gb")).unwrap();
    let err = e.import(&ImportSource::Layouts(layouts), true).unwrap_err();
    assert_eq!(err.code(), "invalid_request");
    assert!(err.to_string().contains("1g.5gb"), "{err}");
    assert!(e.layouts().layouts.is_empty());
}

#[test]
fn mdevctl_definitions_are_planned_then_adopted_or_created() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let parent: ids::MdevParentName = "0000:41:00.0".parse().unwrap();
    let existing = ids::MdevUuid::new_random();
    mdev::create(
        h.sysfs().as_ref(),
        &addr("0000:41:00.0").into(),
        &"nvidia-222".parse().unwrap(),
        existing,
    )
    .unwrap();
    let def = r#"{"mdev_type": "nvidia-222", "start": "auto", "attrs": []}"#;
    let file = |uuid, text: &str| MdevctlFile {
        parent: parent.clone(),
        uuid,
        text: text.into(),
    };
    let missing = ids::MdevUuid::new_random();
    let files = vec![
        file(existing, def),
        file(missing, def),
        file(ids::MdevUuid::new_random(), "garbage"),
        file(
            ids::MdevUuid::new_random(),
            r#"{"mdev_type": "nvidia-222", "start": "auto", "attrs": [{"x": "1"}]}"#,
        ),
        file(
            ids::MdevUuid::new_random(),
            r#"{"mdev_type": "nvidia-999", "start": "manual"}"#,
        ),
    ];
    let source = ImportSource::Mdevctl(files);
    let before = host_slices(&h);
    let plan = e.import(&source, true).unwrap().plan;
    let ImportPlan::Mdevs(defs) = plan else {
        panic!("{plan:?}");
    };
    let actions: Vec<MdevAction> = defs.iter().map(|d| d.action).collect();
    assert_eq!(
        actions,
        [
            MdevAction::Adopt,
            MdevAction::Create,
            MdevAction::Skip,
            MdevAction::Skip,
            MdevAction::Skip
        ]
    );
    assert!(
        defs[2]
            .reason
            .as_deref()
            .unwrap()
            .contains("not an mdevctl definition")
    );
    assert!(defs[3].reason.as_deref().unwrap().contains("attributes"));
    assert_eq!(defs[4].mdev_type.as_deref(), Some("nvidia-999"));
    assert!(
        e.slices().is_empty() && host_slices(&h) == before,
        "a dry run changes nothing"
    );

    let report = e.import(&source, false).unwrap().report.unwrap();
    assert_eq!(
        (
            report.adopted.len(),
            report.created.len(),
            report.skipped.len()
        ),
        (1, 1, 3),
        "{report:?}"
    );
    let uuids = owned_mdevs(&e);
    assert!(uuids.contains(&existing) && uuids.contains(&missing));
    assert!(exists(&h, &format!("/sys/bus/mdev/devices/{missing}")));
    // A second import finds both owned.
    let ImportPlan::Mdevs(defs) = e.plan_import(&source).unwrap() else {
        panic!();
    };
    assert!(
        defs[..2].iter().all(|d| d.action == MdevAction::Skip
            && d.reason.as_deref().unwrap().contains("owned already")),
        "{defs:?}"
    );
}

/// The plan of one GPU for a layout of one MIG-backed vGPU and one 1g.18gb instance.
fn vgpu_host_plan(e: &agent::engine::Engine) -> agent::engine::import::GpuPlan {
    let source = ImportSource::Layouts(vec![gpu_layout(
        H200,
        &[("NVIDIA H200X-1-18C", 1), ("1g.18gb", 1)],
    )]);
    let ImportPlan::Layouts { gpus, .. } = e.plan_import(&source).unwrap() else {
        panic!()
    };
    gpus.into_iter().find(|g| g.gpu == addr(H200)).unwrap()
}

#[test]
fn a_plan_shows_the_vf_step_that_destroys_the_gpu_instances() {
    let h = sim("hgx-h200-vgpu");
    h.set_mig_mode(addr(H200), true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    // No GPU instance yet: the VFs cost nothing, no step shown.
    assert_eq!(vgpu_host_plan(&e).vf_enable, None);
    // A free 1g.18gb of ours, which the layout keeps: the first vGPU's VF step destroys it.
    let mig = create(&e, H200, mig_kind("1g.18gb", Some(0))).unwrap();
    let plan = vgpu_host_plan(&e);
    assert!(plan.destroy.is_empty(), "{plan:?}");
    let step = plan.vf_enable.expect("the VF step is shown");
    assert_eq!(step.destroys.len(), 1, "{step:?}");
    assert!(step.destroys[0].contains("start 0"), "{step:?}");
    assert_eq!(step.gives_up, vec![mig.id]);
    assert_eq!(step.refused, None);
    // Allocated, it blocks the step: the plan says the apply refuses, and why.
    let a = e
        .allocate(request("tenant-a", "1g.18gb", Some(H200)))
        .unwrap();
    let step = vgpu_host_plan(&e).vf_enable.unwrap();
    assert!(step.gives_up.is_empty(), "{step:?}");
    let refused = step.refused.expect("refused while allocated");
    assert!(
        refused.contains("destroys every MIG GPU instance")
            && refused.contains(&mig.id.to_string())
            && refused.contains("tenant-a"),
        "{refused}"
    );
    assert_eq!(numvfs(&h, H200), 0, "planning touched nothing");
    // The apply does what the plan said: the vGPU is refused with the same words.
    let source = ImportSource::Layouts(vec![gpu_layout(
        H200,
        &[("NVIDIA H200X-1-18C", 1), ("1g.18gb", 1)],
    )]);
    let outcome = e.import(&source, false).unwrap();
    let status = &outcome.layouts.unwrap().status;
    let s = status.iter().find(|s| s.gpu == addr(H200)).unwrap();
    assert_eq!(s.state, LayoutState::Failed, "{s:?}");
    assert!(s.reasons.iter().any(|r| r.contains(&refused)), "{s:?}");
    assert_eq!(h.nvml().gpu_instances(0).unwrap().len(), 1);
    e.release(a.id).unwrap();
}

#[test]
fn a_plan_names_a_foreign_gpu_instance_that_blocks_the_vf_step() {
    let h = sim("hgx-h200-vgpu");
    h.set_mig_mode(addr(H200), true).unwrap();
    let nvml = h.nvml();
    let p = nvml
        .gpu_instance_profiles(0)
        .unwrap()
        .into_iter()
        .find(|p| p.name.to_string() == "1g.18gb")
        .unwrap();
    nvml.create_gpu_instance(0, p.id, gpu::Placement { start: 6, size: 1 })
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let step = vgpu_host_plan(&e).vf_enable.unwrap();
    assert!(step.destroys[0].contains("start 6"), "{step:?}");
    assert!(
        step.refused.as_deref().unwrap().contains("is not vgpud's"),
        "{step:?}"
    );
}
