//! MIG-backed vendor-VFIO vGPUs on the HGX H200 profile: a GPU instance of the type's profile at
//! an explicit (or scheduled) start slot, then the type on a free VF; rollback of either step,
//! crash between them, reboot. Layouts that turn MIG mode on or off for their slices.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use agent::engine::{Identity, Layout, LayoutState, Slice, SliceKind, SliceState};
use sim::{Profile, SimHost};
use sysfs::SysfsExt as _;
use testkit::*;

const H200: &str = "0000:18:00.0";
const H200B: &str = "0000:2a:00.0";
/// `NVIDIA H200X-1-18C`, MIG-backed on a `1g.18gb` GPU instance.
const T1G: &str = "1414";
/// `NVIDIA H200X-3-71C`, on `3g.71gb`.
const T3G: &str = "1417";
/// `NVIDIA H200X-35C`, time-sliced.
const TS: &str = "1421";

fn mig_on(h: &SimHost, gpu: &str) {
    h.set_mig_mode(addr(gpu), true).unwrap();
}

/// GPU instances on the GPU as (profile name, start, id).
fn gis(h: &SimHost, gpu: &str) -> Vec<(String, u32, u32)> {
    let nvml = h.nvml();
    let i = nvml_index(h, gpu);
    let profiles = nvml.gpu_instance_profiles(i).unwrap();
    let mut v: Vec<_> = nvml
        .gpu_instances(i)
        .unwrap()
        .into_iter()
        .map(|g| {
            let name = profiles
                .iter()
                .find(|p| p.id == g.profile_id)
                .unwrap()
                .name
                .to_string();
            (name, g.placement.start, g.id)
        })
        .collect();
    v.sort();
    v
}

fn vf_type(h: &SimHost, vf: ids::PciAddress) -> String {
    read(
        h,
        &format!("/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"),
    )
}

fn mig_vgpu_parts(s: &Slice) -> (ids::PciAddress, u32, String) {
    match &s.identity {
        Identity::MigVgpu {
            address,
            start,
            profile,
            ..
        } => (*address, *start, profile.to_string()),
        other => panic!("not a MIG-backed identity: {other:?}"),
    }
}

fn typed_vfs(h: &SimHost) -> usize {
    host_slices(h)
        .iter()
        .filter(|(_, s)| matches!(s, inventory::ExistingSlice::NvidiaVfio { .. }))
        .count()
}

#[test]
fn a_mig_backed_vgpu_takes_a_gpu_instance_at_its_slot() {
    let h = sim("hgx-h200");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    // MIG off: refused, nothing touched.
    let err = create(&e, H200, vgpu_kind(T1G, Some(3))).unwrap_err();
    assert_eq!(err.code(), "unsupported", "{err}");
    assert!(err.to_string().contains("MIG"), "{err}");
    assert!(host_slices(&h).is_empty());
    assert_eq!(e.pending_intents(), 0);

    mig_on(&h, H200);
    let a = create(&e, H200, vgpu_kind(T1G, Some(3))).unwrap();
    let (vf, start, profile) = mig_vgpu_parts(&a);
    assert_eq!((start, profile.as_str()), (3, "1g.18gb"));
    assert_eq!(vf_type(&h, vf), T1G);
    let on_host = gis(&h, H200);
    assert_eq!(on_host.len(), 1);
    assert_eq!((on_host[0].0.as_str(), on_host[0].1), ("1g.18gb", 3));
    assert_eq!(a.handles.gpu_instance_id, Some(on_host[0].2));
    assert_eq!(
        a.handles.compute_instance_id, None,
        "the guest makes its own"
    );
    assert_eq!(a.handles.pci_address, Some(vf));
    assert_eq!(a.state, SliceState::Ready);

    // Without a start the engine chooses a free slot; the same slot again is a conflict.
    let b = create(&e, H200, vgpu_kind(T3G, None)).unwrap();
    let (vf_b, start_b, _) = mig_vgpu_parts(&b);
    assert_ne!(vf_b, vf);
    assert!(
        start_b == 0 || start_b == 4,
        "3g starts at 0 or 4: {start_b}"
    );
    assert_eq!(
        create(&e, H200, vgpu_kind(T1G, Some(3)))
            .unwrap_err()
            .code(),
        "conflict"
    );
    // A slot the profile does not allow, a start on a time-sliced type, a time-sliced type
    // while MIG is on.
    assert_eq!(
        create(&e, H200, vgpu_kind(T3G, Some(2)))
            .unwrap_err()
            .code(),
        "invalid_request"
    );
    assert_eq!(
        create(&e, H200, vgpu_kind(TS, Some(0))).unwrap_err().code(),
        "invalid_request"
    );
    assert_eq!(
        create(&e, H200, vgpu_kind(TS, None)).unwrap_err().code(),
        "unsupported"
    );
    assert_eq!(e.slices().len(), 2);
    assert!(e.reconcile().unwrap().foreign.is_empty(), "GIs are ours");

    // A VM holds the VF: busy, nothing removed.
    h.set_vfio_open(vf, true).unwrap();
    assert_eq!(e.destroy_slice(a.id).unwrap_err().code(), "busy");
    assert_eq!(gis(&h, H200).len(), 2);
    h.set_vfio_open(vf, false).unwrap();
    e.destroy_slice(a.id).unwrap();
    assert_eq!(vf_type(&h, vf), "0");
    let left = gis(&h, H200);
    assert_eq!(left.len(), 1, "only our GI went: {left:?}");
    assert_eq!(left[0].1, start_b);
    e.destroy_slice(b.id).unwrap();
    assert!(host_slices(&h).is_empty());
    assert_eq!(e.pending_intents(), 0);
}

#[test]
fn allocations_and_layouts_take_mig_backed_types_by_name() {
    let h = sim("hgx-h200");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    mig_on(&h, H200);
    let a = e
        .allocate(request("nova", "NVIDIA H200X-1-18C", Some(H200)))
        .unwrap();
    let s = e.slice(a.slices[0]).unwrap();
    assert_eq!(s.state, SliceState::Allocated);
    assert_eq!(mig_vgpu_parts(&s).2, "1g.18gb");
    assert_eq!(gis(&h, H200).len(), 1);

    mig_on(&h, H200B);
    let view = e
        .set_layouts(vec![gpu_layout(
            H200B,
            &[("NVIDIA H200X-1-18C", 3), ("NVIDIA H200X-3-71C", 1)],
        )])
        .unwrap();
    assert_eq!(view.status[0].state, LayoutState::Applied, "{view:?}");
    let on_b = gis(&h, H200B);
    assert_eq!(on_b.len(), 4, "{on_b:?}");
    assert_eq!(
        e.slices()
            .iter()
            .filter(|s| s.spec.gpu == addr(H200B))
            .count(),
        4
    );
    // The instances do not overlap: the 3g took a half the 1g ones left whole.
    let three = on_b.iter().find(|g| g.0 == "3g.71gb").unwrap();
    assert!(
        on_b.iter()
            .filter(|g| g.0 == "1g.18gb")
            .all(|g| g.1 < three.1 || g.1 >= three.1 + 4),
        "{on_b:?}"
    );
}

#[test]
fn a_failed_step_rolls_back_what_the_create_made() {
    let h = sim("hgx-h200");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    mig_on(&h, H200);
    // The GPU instance cannot be made: nothing on the VF either.
    fault(
        &h,
        &format!(
            "nvml:nvmlDeviceCreateGpuInstanceWithPlacement@{H200}=INSUFFICIENT_RESOURCES,times=1"
        ),
    );
    let err = create(&e, H200, vgpu_kind(T1G, Some(0))).unwrap_err();
    assert_eq!(err.code(), "no_capacity", "{err}");
    assert!(host_slices(&h).is_empty());
    assert_eq!(e.pending_intents(), 0);

    // The type write fails: the GPU instance made for it goes again.
    fault(
        &h,
        "write:/sys/bus/pci/devices/0000:18:00.4/nvidia/current_vgpu_type=EIO,times=1",
    );
    let err = create(&e, H200, vgpu_kind(T1G, Some(0))).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EIO), "{err}");
    assert!(gis(&h, H200).is_empty(), "the GI was rolled back");
    assert_eq!(typed_vfs(&h), 0);
    assert_eq!(e.pending_intents(), 0);
    assert!(e.slices().is_empty());

    // Someone else's unused GPU instance of the same profile: the driver could put our vGPU
    // there, so the create is refused and only our own instance goes.
    let nvml = h.nvml();
    let i = nvml_index(&h, H200);
    let p = nvml
        .gpu_instance_profiles(i)
        .unwrap()
        .into_iter()
        .find(|p| p.name.to_string() == "1g.18gb")
        .unwrap();
    let foreign = nvml
        .create_gpu_instance(i, p.id, gpu::Placement { start: 6, size: 1 })
        .unwrap();
    let err = create(&e, H200, vgpu_kind(T1G, Some(0))).unwrap_err();
    assert_eq!(err.code(), "conflict", "{err}");
    assert_eq!(gis(&h, H200), vec![("1g.18gb".into(), 6, foreign.id)]);
    assert_eq!(typed_vfs(&h), 0);
    assert_eq!(e.pending_intents(), 0);
    // It is reported, never touched.
    let report = e.reconcile().unwrap();
    assert_eq!(report.foreign.len(), 1, "{report:?}");
    nvml.destroy_gpu_instance(i, foreign.id).unwrap();
    create(&e, H200, vgpu_kind(T1G, Some(0))).unwrap();
}

#[test]
fn a_create_stopped_between_its_steps_is_rolled_back_by_the_next_reconcile() {
    let h = sim("hgx-h200");
    let dir = tempfile::tempdir().unwrap();
    mig_on(&h, H200);
    {
        let e = engine(&h, dir.path());
        // The type write fails and so does every removal of the GPU instance: the create
        // stops after its first step, as a crash there would leave it.
        fault(
            &h,
            &format!("nvml:nvmlGpuInstanceDestroy@{H200}=UNKNOWN,times=2"),
        );
        fault(
            &h,
            "write:/sys/bus/pci/devices/0000:18:00.4/nvidia/current_vgpu_type=EIO,times=1",
        );
        create(&e, H200, vgpu_kind(T1G, Some(2))).unwrap_err();
        assert_eq!(
            e.pending_intents(),
            1,
            "the intent stays for the reconciler"
        );
        assert_eq!(gis(&h, H200).len(), 1, "the GI is left");
        assert_eq!(typed_vfs(&h), 0);
    }
    // The next start: the GI that the open intent names is ours and goes; nothing is foreign.
    let e = engine(&h, dir.path());
    let report = e.reconcile().unwrap();
    assert_eq!(report.intents_resolved, 1, "{report:?}");
    assert!(report.foreign.is_empty(), "{report:?}");
    assert!(gis(&h, H200).is_empty());
    assert_eq!(e.pending_intents(), 0);
    assert!(e.slices().is_empty());
}

#[test]
fn mig_backed_vgpus_come_back_after_a_reboot_in_the_same_place() {
    let tmp = tempfile::tempdir().unwrap();
    let host_dir = tmp.path().join("host");
    let state = tmp.path().join("state");
    let h = SimHost::create(&host_dir, Profile::builtin("hgx-h200").unwrap()).unwrap();
    mig_on(&h, H200);
    let (before, allocs, gis_before) = {
        let e = engine(&h, &state);
        create(&e, H200, vgpu_kind(T1G, Some(5))).unwrap();
        create(&e, H200, vgpu_kind(T3G, Some(0))).unwrap();
        // Two: the free 1g slice is reused (free owned slices first) and one more is made.
        let mut two = request("nova", "NVIDIA H200X-1-18C", Some(H200));
        two.request.count = 2;
        e.allocate(two).unwrap();
        let before: Vec<_> = e
            .slices()
            .into_iter()
            .map(|s| (s.id, s.identity, s.state))
            .collect();
        (before, e.allocations(), gis(&h, H200))
    };
    assert_eq!(gis_before.len(), 3);
    h.reboot().unwrap();
    assert!(gis(&h, H200).is_empty(), "the reboot took every GI");

    let h2 = SimHost::open(&host_dir).unwrap();
    let e = engine(&h2, &state);
    let report = e.reconcile().unwrap();
    assert_eq!(report.recreated.len(), 3, "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    assert!(report.foreign.is_empty(), "{report:?}");
    let mut after: Vec<_> = e
        .slices()
        .into_iter()
        .map(|s| (s.id, s.identity, s.state))
        .collect();
    after.sort_by_key(|(id, _, _)| *id);
    let mut before = before;
    before.sort_by_key(|(id, _, _)| *id);
    assert_eq!(after, before, "same VF, same slot, same state");
    let starts =
        |v: &[(String, u32, u32)]| v.iter().map(|g| (g.0.clone(), g.1)).collect::<Vec<_>>();
    assert_eq!(starts(&gis(&h2, H200)), starts(&gis_before));
    assert_eq!(e.allocations(), allocs);
    for s in e.slices() {
        let (vf, _, _) = mig_vgpu_parts(&s);
        let SliceKind::NvidiaVfio { vgpu_type, .. } = s.spec.kind else {
            panic!()
        };
        assert_eq!(vf_type(&h2, vf), vgpu_type.to_string());
    }
    let again = e.reconcile().unwrap();
    assert!(again.recreated.is_empty(), "{again:?}");
}

fn kinds_on(e: &agent::engine::Engine, gpu: &str) -> Vec<String> {
    let mut v: Vec<String> = e
        .slices()
        .into_iter()
        .filter(|s| s.spec.gpu == addr(gpu))
        .map(|s| s.spec.kind.to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn layouts_turn_mig_mode_on_and_off_for_their_slices() {
    let h = sim("hgx-h200");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    assert_eq!(mig_mode(&h, H200), (false, false));
    // MIG-backed types: MIG goes on, then the GPU instances and vGPUs are made.
    let view = e
        .set_layouts(vec![gpu_layout(H200, &[("NVIDIA H200X-1-18C", 2)])])
        .unwrap();
    assert_eq!(view.status[0].state, LayoutState::Applied, "{view:?}");
    assert_eq!(mig_mode(&h, H200), (true, true));
    assert_eq!(gis(&h, H200).len(), 2);
    assert_eq!(typed_vfs(&h), 2);
    // Time-sliced types: the MIG-backed slices go, MIG goes off, the new vGPUs come.
    let view = e
        .set_layouts(vec![gpu_layout(H200, &[("NVIDIA H200X-35C", 2)])])
        .unwrap();
    assert_eq!(view.status[0].state, LayoutState::Applied, "{view:?}");
    assert_eq!(mig_mode(&h, H200), (false, false));
    assert_eq!(kinds_on(&e, H200), vec!["vGPU type 1421"; 2]);
    // A MIG profile named while MIG is off: accepted, MIG on, the instance made.
    let view = e
        .set_layouts(vec![gpu_layout(H200, &[("2g.35gb", 1)])])
        .unwrap();
    assert_eq!(view.status[0].state, LayoutState::Applied, "{view:?}");
    assert_eq!(mig_mode(&h, H200), (true, true));
    assert_eq!(kinds_on(&e, H200).len(), 1);
    assert!(kinds_on(&e, H200)[0].starts_with("MIG 2g.35gb"));
    // Whole-GPU passthrough needs MIG off too.
    let view = e
        .set_layouts(vec![gpu_layout(H200, &[("gpu", 1)])])
        .unwrap();
    assert_eq!(view.status[0].state, LayoutState::Applied, "{view:?}");
    assert_eq!(driver(&h, addr(H200)).as_deref(), Some("vfio-pci"));
    // One GPU cannot want both modes: refused before anything is touched.
    let mixed = gpu_layout(H200B, &[("NVIDIA H200X-1-18C", 1), ("NVIDIA H200X-35C", 1)]);
    refused_untouched(&e, mixed, "MIG mode on");
    assert_eq!(mig_mode(&h, H200B), (false, false));
}

/// A layout refused with `invalid_request` (its reason naming `why`) leaves the declared
/// layouts as they were.
fn refused_untouched(e: &agent::engine::Engine, l: Layout, why: &str) {
    let before = e.layouts().layouts;
    let err = e.set_layouts(vec![l]).unwrap_err();
    assert_eq!(err.code(), "invalid_request", "{err}");
    assert!(err.to_string().contains(why), "{err}");
    assert_eq!(e.layouts().layouts, before);
}

#[test]
fn a_layout_can_set_mig_mode_without_slices_and_must_agree_with_them() {
    let h = sim("hgx-h200");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let with_mode = |entries: &[(&str, u32)], mig: bool| Layout {
        mig: Some(mig),
        ..gpu_layout(H200, entries)
    };
    // An empty layout with `mig: true` (mig-parted's `mig-enabled: true` with no devices).
    let view = e.set_layouts(vec![with_mode(&[], true)]).unwrap();
    assert_eq!(view.status[0].state, LayoutState::Applied, "{view:?}");
    assert_eq!(mig_mode(&h, H200), (true, true));
    // mig-parted's `all-disabled` turns it off again.
    let yaml = "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n";
    let off = agent::engine::import::mig_parted_layouts(yaml, "all-disabled").unwrap();
    let view = e.set_layouts(off).unwrap();
    assert!(
        view.status.iter().all(|s| s.state == LayoutState::Applied),
        "{view:?}"
    );
    assert_eq!(mig_mode(&h, H200), (false, false));
    // A declared mode the slices contradict is refused before anything is touched.
    refused_untouched(
        &e,
        with_mode(&[("NVIDIA H200X-1-18C", 1)], false),
        "layout sets it off",
    );
    assert_eq!(mig_mode(&h, H200), (false, false));
}

#[test]
fn a_mig_mode_change_waits_for_allocated_and_foreign_slices() {
    let h = sim("hgx-h200");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let held = e
        .allocate(request("vm1", "NVIDIA H200X-35C", Some(H200)))
        .unwrap();
    let view = e
        .set_layouts(vec![gpu_layout(H200, &[("NVIDIA H200X-1-18C", 1)])])
        .unwrap();
    let st = &view.status[0];
    assert_eq!(st.state, LayoutState::Pending, "{st:?}");
    assert!(
        st.reasons
            .iter()
            .any(|r| r.contains("allocated to \"vm1\""))
            && st.reasons.iter().any(|r| r.contains("MIG mode on waits")),
        "{st:?}"
    );
    assert_eq!(mig_mode(&h, H200), (false, false), "nothing changed");
    e.release(held.id).unwrap();
    let st = &e.layouts().status[0];
    assert_eq!(st.state, LayoutState::Applied, "{st:?}");
    assert_eq!(mig_mode(&h, H200), (true, true));
    assert_eq!(kinds_on(&e, H200), vec!["vGPU type 1414"]);

    // A vGPU someone else made: reported, never touched, the change waits for it.
    let vf = "0000:2a:00.4";
    write(
        &h,
        &format!("/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"),
        TS,
    );
    let view = e
        .set_layouts(vec![gpu_layout(H200B, &[("3g.71gb", 1)])])
        .unwrap();
    let st = view.status.iter().find(|s| s.gpu == addr(H200B)).unwrap();
    assert_eq!(st.state, LayoutState::Pending, "{st:?}");
    assert!(
        st.reasons
            .iter()
            .any(|r| r.contains("carries") && r.contains(vf)),
        "{st:?}"
    );
    assert_eq!(mig_mode(&h, H200B), (false, false));
    assert_eq!(
        vf_type(&h, vf.parse().unwrap()),
        TS,
        "foreign vGPU untouched"
    );
    write(
        &h,
        &format!("/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"),
        "0",
    );
    let report = e.reconcile().unwrap();
    let st = report
        .layouts
        .iter()
        .find(|s| s.gpu == addr(H200B))
        .unwrap();
    assert_eq!(st.state, LayoutState::Applied, "{st:?}");
    assert_eq!(mig_mode(&h, H200B), (true, true));
}

#[test]
fn a_mig_mode_change_nvml_leaves_pending_waits_for_a_reset() {
    let tmp = tempfile::tempdir().unwrap();
    let host_dir = tmp.path().join("host");
    let state = tmp.path().join("state");
    let h = SimHost::create(&host_dir, Profile::builtin("hgx-h200").unwrap()).unwrap();
    // A monitoring agent holds the GPU: NVML accepts the change but leaves it pending.
    h.set_gpu_clients(addr(H200), true).unwrap();
    {
        let e = engine(&h, &state);
        let view = e
            .set_layouts(vec![gpu_layout(H200, &[("NVIDIA H200X-1-18C", 1)])])
            .unwrap();
        let st = &view.status[0];
        assert_eq!(st.state, LayoutState::Pending, "{st:?}");
        assert!(
            st.reasons
                .iter()
                .any(|r| r.contains("MIG mode change waits for a GPU reset")),
            "{st:?}"
        );
        assert_eq!(mig_mode(&h, H200), (false, true));
        // Applying again waits the same way: no second request, no reset.
        let report = e.reconcile().unwrap();
        assert_eq!(report.layouts[0].state, LayoutState::Pending);
        assert!(e.slices().is_empty());
        assert_eq!(mig_mode(&h, H200), (false, true));
    }
    // The reset comes with a reboot; the next start completes the layout.
    h.reboot().unwrap();
    let h2 = SimHost::open(&host_dir).unwrap();
    let e = engine(&h2, &state);
    let report = e.reconcile().unwrap();
    assert_eq!(report.layouts[0].state, LayoutState::Applied, "{report:?}");
    assert_eq!(mig_mode(&h2, H200), (true, true));
    assert_eq!(kinds_on(&e, H200), vec!["vGPU type 1414"]);
}

#[test]
fn a_passthrough_layout_turns_mig_off_on_an_idle_a100_only() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    const A100: &str = "0000:07:00.0";
    const A100B: &str = "0000:0f:00.0";
    assert_eq!(mig_mode(&h, A100B), (true, true));
    // Someone else's GPU instance on the second GPU keeps its mode.
    let i = nvml_index(&h, A100B);
    let nvml = h.nvml();
    let p = nvml
        .gpu_instance_profiles(i)
        .unwrap()
        .into_iter()
        .find(|p| p.name.to_string() == "1g.10gb")
        .unwrap();
    nvml.create_gpu_instance(i, p.id, gpu::Placement { start: 0, size: 1 })
        .unwrap();
    let mut second = gpu_layout(A100B, &[("gpu", 1)]);
    second.name = "second".into();
    let view = e
        .set_layouts(vec![gpu_layout(A100, &[("gpu", 1)]), second])
        .unwrap();
    let of = |gpu: &str| view.status.iter().find(|s| s.gpu == addr(gpu)).unwrap();
    assert_eq!(of(A100).state, LayoutState::Applied, "{view:?}");
    assert_eq!(driver(&h, addr(A100)).as_deref(), Some("vfio-pci"));
    assert_eq!(of(A100B).state, LayoutState::Pending, "{view:?}");
    assert!(
        of(A100B).reasons.iter().any(|r| r.contains("MIG 1g.10gb")),
        "{view:?}"
    );
    assert_eq!(mig_mode(&h, A100B), (true, true));
    assert_eq!(gis(&h, A100B).len(), 1, "foreign instance untouched");
}

/// A service with the default policy over an engine on `h`.
fn sched_service(h: &SimHost, dir: &std::path::Path) -> agent::service::Service {
    agent::service::Service::with_options(
        engine(h, dir),
        agent::service::ServiceOptions {
            policy: sched::Policy::default(),
            pinning: None,
            ..Default::default()
        },
    )
}

/// Allocates one slice of type `t` anywhere and returns it.
fn alloc_one(s: &agent::service::Service, consumer: &str, t: &str) -> agent::engine::Result<Slice> {
    let a = s.allocate(request(consumer, t, None))?;
    s.slice(a.slices[0])
}

#[test]
fn one_decision_gives_a_mig_backed_vgpu_its_gpu_and_slot_and_the_dry_run_agrees() {
    let h = sim("hgx-h200");
    let dir = tempfile::tempdir().unwrap();
    mig_on(&h, H200);
    mig_on(&h, H200B);
    let s = sched_service(&h, dir.path());
    // The second GPU's first half is already broken by a MIG 1g instance; the first GPU is
    // empty. Seen as GPU instances, a new 1g belongs in the broken half (an empty GPU stays
    // whole); seen as VFs, both GPUs look empty.
    create(s.engine(), H200B, mig_kind("1g.18gb", Some(0))).unwrap();
    let score = s
        .placement_score(agent::engine::SliceRequest::new("NVIDIA H200X-1-18C", 1))
        .unwrap();
    assert!(score.feasible, "{score:?}");
    let p = &score.placements[0];
    let sched::SliceChoice::Mig { profile, start } = &p.slice else {
        panic!("the dry run asks for a GPU instance: {p:?}");
    };
    assert_eq!(
        (p.gpu, profile.to_string()),
        (addr(H200B), "1g.18gb".into())
    );
    assert!(*start > 0 && *start < 4, "in the broken half: {start}");

    let v = alloc_one(&s, "nova", "NVIDIA H200X-1-18C").unwrap();
    assert_eq!(v.spec.gpu, p.gpu, "where the dry run said");
    let (_, at, _) = mig_vgpu_parts(&v);
    assert_eq!(at, u32::from(*start), "at the slot the dry run said");
    assert_eq!(
        v.spec.kind,
        vgpu_kind(T1G, Some(at)),
        "the decided slot is the spec's"
    );
    assert!(gis(&h, H200).is_empty());
}

/// `hgx-h200` cut to its first two GPUs with `vfs` VFs each, MIG on for both.
fn two_h200s_with_vfs(vfs: u32) -> SimHost {
    let mut p = Profile::builtin("hgx-h200").unwrap();
    p.gpus.truncate(2);
    for m in p.models.values_mut() {
        if let Some(s) = m.sriov.as_mut() {
            s.total_vfs = vfs;
            s.boot_vfs = vfs;
        }
    }
    let h = SimHost::new(p).unwrap();
    mig_on(&h, H200);
    mig_on(&h, H200B);
    h
}

#[test]
fn mig_backed_capacity_counts_gpu_instances_and_free_vfs() {
    let h = two_h200s_with_vfs(3);
    let dir = tempfile::tempdir().unwrap();
    let s = sched_service(&h, dir.path());
    let creatable = |gpu: &str| {
        s.gpu(addr(gpu))
            .unwrap()
            .capacity
            .iter()
            .find(|c| c.slice_type == "NVIDIA H200X-1-18C")
            .unwrap()
            .creatable
    };
    // Two MIG 3g instances fill the first GPU's slots: no GPU instance is left for a 1g vGPU,
    // although all its VFs are free.
    create(s.engine(), H200, mig_kind("3g.71gb", Some(0))).unwrap();
    create(s.engine(), H200, mig_kind("3g.71gb", Some(4))).unwrap();
    assert_eq!(creatable(H200), 0);
    // The second has seven 1g slots but three VFs.
    assert_eq!(creatable(H200B), 3);
    let made: Vec<Slice> = (0..3)
        .map(|i| alloc_one(&s, &format!("vm{i}"), "NVIDIA H200X-1-18C").unwrap())
        .collect();
    assert!(made.iter().all(|v| v.spec.gpu == addr(H200B)), "{made:?}");
    assert_eq!(creatable(H200B), 0, "no VF left");
    let req = agent::engine::SliceRequest::new("NVIDIA H200X-1-18C", 1);
    assert!(!s.placement_score(req.clone()).unwrap().feasible);
    let err = alloc_one(&s, "vm3", "NVIDIA H200X-1-18C").unwrap_err();
    assert_eq!(err.code(), "no_capacity", "{err}");

    // A released vGPU keeps its VF: the GPU with no VF for a new one hands it out again.
    let held = s
        .allocations()
        .into_iter()
        .find(|a| a.slices[0] == made[1].id);
    s.release(held.unwrap().id).unwrap();
    assert!(s.placement_score(req).unwrap().feasible);
    let again = alloc_one(&s, "vm4", "NVIDIA H200X-1-18C").unwrap();
    assert_eq!(again.id, made[1].id, "the free one is reused");
    assert_eq!(gis(&h, H200B).len(), 3);
}

/// The PF's `virtfn<n>`.
fn vf_n(h: &SimHost, gpu: &str, n: u32) -> ids::PciAddress {
    let link = format!("/sys/bus/pci/devices/{gpu}/virtfn{n}");
    h.sysfs()
        .link_name_opt(std::path::Path::new(&link))
        .unwrap()
        .unwrap()
        .parse()
        .unwrap()
}

fn nvidia_attr(vf: ids::PciAddress, name: &str) -> String {
    format!("/sys/bus/pci/devices/{vf}/nvidia/{name}")
}

/// NVML's `1g.18gb` profile id on the GPU.
fn profile_1g(h: &SimHost, gpu: &str) -> u32 {
    h.nvml()
        .gpu_instance_profiles(nvml_index(h, gpu))
        .unwrap()
        .into_iter()
        .find(|p| p.name.to_string() == "1g.18gb")
        .unwrap()
        .id
}

#[test]
fn a_created_vgpu_reads_back_the_gpu_instance_at_its_slot() {
    let h = sim("hgx-h200");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    mig_on(&h, H200);
    // No vGPU yet: the driver answers ENXIO.
    let untyped = vf_n(&h, H200, 0);
    let err = h
        .sysfs()
        .read_text(std::path::Path::new(&nvidia_attr(
            untyped,
            "gpu_instance_id",
        )))
        .unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENXIO), "{err}");
    assert_eq!(
        vfio::vgpu_gpu_instance(h.sysfs().as_ref(), untyped).unwrap(),
        None
    );
    let a = create(&e, H200, vgpu_kind(T1G, Some(3))).unwrap();
    let (vf, _, _) = mig_vgpu_parts(&a);
    let gi = a.handles.gpu_instance_id.unwrap();
    assert_eq!(
        read(&h, &nvidia_attr(vf, "gpu_instance_id")),
        gi.to_string()
    );
    assert_eq!(read(&h, &nvidia_attr(vf, "placement_id")), "3");
    assert_eq!(e.slice(a.id).unwrap().state, SliceState::Ready);
    e.destroy_slice(a.id).unwrap();
    let err = h
        .sysfs()
        .read_text(std::path::Path::new(&nvidia_attr(vf, "gpu_instance_id")))
        .unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENXIO), "{err}");
}

#[test]
fn the_driver_choosing_another_gpu_instance_is_refused_and_undone() {
    let h = sim("hgx-h200");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    mig_on(&h, H200);
    let nvml = h.nvml();
    let i = nvml_index(&h, H200);
    let p = profile_1g(&h, H200);
    // Someone's GPU instance with a compute instance at slot 0, and their vGPU written by hand:
    // the driver takes an instance with compute instances (field reports).
    let busy = nvml
        .create_gpu_instance(i, p, gpu::Placement { start: 0, size: 1 })
        .unwrap();
    let ci = nvml.compute_instance_profiles(i, busy.id).unwrap()[0].id;
    nvml.create_compute_instance(i, busy.id, ci).unwrap();
    let theirs = vf_n(&h, H200, 1);
    write(&h, &nvidia_attr(theirs, "current_vgpu_type"), T1G);
    assert_eq!(
        read(&h, &nvidia_attr(theirs, "gpu_instance_id")),
        busy.id.to_string()
    );
    // Their unused instance at slot 1 has a lower id than ours at slot 3 will. Counted, the
    // profile's instances without compute instances (theirs, ours) are one more than its vGPUs,
    // so only the read-back can tell that the driver put our vGPU into theirs.
    let spare = nvml
        .create_gpu_instance(i, p, gpu::Placement { start: 1, size: 1 })
        .unwrap();
    let err = create(&e, H200, vgpu_kind(T1G, Some(3))).unwrap_err();
    assert_eq!(err.code(), "conflict", "{err}");
    let why = err.to_string();
    assert!(
        why.contains(&format!("GPU instance {}", spare.id)) && why.contains("slot 3"),
        "{why}"
    );
    // Nothing leaks: our vGPU and GPU instance went, theirs are untouched.
    assert_eq!(
        gis(&h, H200),
        vec![
            ("1g.18gb".into(), 0, busy.id),
            ("1g.18gb".into(), 1, spare.id)
        ]
    );
    assert_eq!(typed_vfs(&h), 1);
    assert_eq!(vf_type(&h, theirs), T1G);
    assert_eq!(e.pending_intents(), 0);
    assert!(e.slices().is_empty());
}

#[test]
fn a_vgpu_the_driver_moved_to_another_gpu_instance_is_seen_as_changed() {
    let h = sim("hgx-h200");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    mig_on(&h, H200);
    let a = create(&e, H200, vgpu_kind(T1G, Some(3))).unwrap();
    let (vf, _, _) = mig_vgpu_parts(&a);
    let ours = a.handles.gpu_instance_id.unwrap();
    // Behind the engine's back: the vGPU removed and written again while a lower-id unused
    // instance of the profile exists; the driver puts it there. Type and slot still look right.
    write(&h, &nvidia_attr(vf, "current_vgpu_type"), "0");
    let other = h
        .nvml()
        .create_gpu_instance(
            nvml_index(&h, H200),
            profile_1g(&h, H200),
            gpu::Placement { start: 1, size: 1 },
        )
        .unwrap();
    write(&h, &nvidia_attr(vf, "current_vgpu_type"), T1G);
    assert_eq!(
        read(&h, &nvidia_attr(vf, "gpu_instance_id")),
        other.id.to_string()
    );
    // NVML and vGPU type writes announce nothing: seen once the kept views age out (5 s), or
    // at the next reconcile or device event.
    e.host_changed();
    let now = e.slice(a.id).unwrap();
    assert_eq!(now.state, SliceState::Failed, "{now:?}");
    let why = now.reason.unwrap();
    assert!(
        why.contains(&format!("GPU instance {}", other.id)) && why.contains(&ours.to_string()),
        "{why}"
    );
}
