//! Every backend's create, observe and destroy on the simulator, with its error cases.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::time::{Duration, Instant};

use agent::engine::{Identity, SliceKind, SliceState};
use sim::VfioDevice;
use testkit::*;

const T4: &str = "0000:41:00.0";
const T4B: &str = "0000:42:00.0";
const MI300X: &str = "0000:c1:00.0";
const H200: &str = "0000:18:00.0";
const A100: &str = "0000:07:00.0";
const A100B: &str = "0000:0f:00.0";

#[test]
fn mdev_create_observe_destroy() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let s = create(&e, T4, mdev_kind("nvidia-222")).unwrap();
    assert_eq!(s.state, SliceState::Ready);
    let Identity::Mdev { uuid } = s.identity else {
        panic!("{s:?}")
    };
    assert_eq!(s.handles.mdev_uuid, Some(uuid));
    assert!(s.handles.vfio_group.is_some());
    assert!(exists(&h, &format!("/sys/bus/mdev/devices/{uuid}")));
    assert_eq!(e.slices().len(), 1);
    // In use: refused, still there.
    h.set_vfio_open(uuid, true).unwrap();
    assert_eq!(e.destroy_slice(s.id).unwrap_err().code(), "busy");
    assert!(exists(&h, &format!("/sys/bus/mdev/devices/{uuid}")));
    h.set_vfio_open(uuid, false).unwrap();
    e.destroy_slice(s.id).unwrap();
    assert!(!exists(&h, &format!("/sys/bus/mdev/devices/{uuid}")));
    assert_eq!(e.destroy_slice(s.id).unwrap_err().code(), "not_found");
    assert!(e.slices().is_empty());
}

#[test]
fn mdev_errors_touch_nothing() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    // Unknown type, wrong GPU, not a GPU.
    assert_eq!(
        create(&e, T4, mdev_kind("nvidia-999")).unwrap_err().code(),
        "invalid_request"
    );
    assert_eq!(
        create(&e, "0000:99:00.0", mdev_kind("nvidia-222"))
            .unwrap_err()
            .code(),
        "not_found"
    );
    assert_eq!(
        create(&e, "0000:01:00.0", mdev_kind("nvidia-222"))
            .unwrap_err()
            .code(),
        "invalid_request"
    );
    // The kernel refuses the create: errno kept, no ledger entry, no intent left.
    fault(&h, "write:/sys/class/mdev_bus/*=EIO,times=1");
    let err = create(&e, T4, mdev_kind("nvidia-222")).unwrap_err();
    assert_eq!(
        (err.code(), err.errno()),
        ("host_error", Some(libc::EIO)),
        "{err}"
    );
    assert!(e.slices().is_empty());
    assert_eq!(e.pending_intents(), 0);
    assert!(host_slices(&h).is_empty());
    // Capacity: 16A has one instance per GPU.
    create(&e, T4, mdev_kind("nvidia-229")).unwrap();
    assert_eq!(
        create(&e, T4, mdev_kind("nvidia-229")).unwrap_err().code(),
        "no_capacity"
    );
    // A corrupted attribute is a clear error, not a panic.
    fault(
        &h,
        "read:/sys/class/mdev_bus/0000:42:00.0/mdev_supported_types/nvidia-222/available_instances=EIO",
    );
    let err = create(&e, T4B, mdev_kind("nvidia-222")).unwrap_err();
    assert_eq!(err.code(), "host_error", "{err}");
}

fn vf_count(h: &sim::SimHost, pf: &str) -> u32 {
    read(h, &format!("/sys/bus/pci/devices/{pf}/sriov_numvfs"))
        .parse()
        .unwrap()
}

#[test]
fn nvidia_vfio_create_destroy_and_type_checks() {
    let h = sim("hgx-h200");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let kind = SliceKind::NvidiaVfio {
        vgpu_type: "1421".parse().unwrap(),
        start: None,
    };
    let a = create(&e, H200, kind.clone()).unwrap();
    let b = create(&e, H200, kind.clone()).unwrap();
    let (
        Identity::Vf {
            index: ia,
            address: va,
        },
        Identity::Vf { index: ib, .. },
    ) = (&a.identity, &b.identity)
    else {
        panic!()
    };
    assert_eq!((*ia, *ib), (0, 1));
    assert_eq!(a.handles.pci_address, Some(*va));
    assert_eq!(
        read(
            &h,
            &format!("/sys/bus/pci/devices/{va}/nvidia/current_vgpu_type")
        ),
        "1421"
    );
    // Another size cannot join (one size per GPU): no capacity, not a bad request.
    let other = SliceKind::NvidiaVfio {
        vgpu_type: "1420".parse().unwrap(),
        start: None,
    };
    assert_eq!(create(&e, H200, other).unwrap_err().code(), "no_capacity");
    // A type the GPU does not have at all.
    let unknown = SliceKind::NvidiaVfio {
        vgpu_type: "77".parse().unwrap(),
        start: None,
    };
    assert_eq!(
        create(&e, H200, unknown).unwrap_err().code(),
        "invalid_request"
    );
    h.set_vfio_open(*va, true).unwrap();
    assert_eq!(e.destroy_slice(a.id).unwrap_err().code(), "busy");
    h.set_vfio_open(*va, false).unwrap();
    e.destroy_slice(a.id).unwrap();
    assert_eq!(
        read(
            &h,
            &format!("/sys/bus/pci/devices/{va}/nvidia/current_vgpu_type")
        ),
        "0"
    );
    // The driver refuses the type write: errno kept.
    fault(&h, "write:/sys/bus/pci/devices/*=EIO,times=1");
    let err = create(&e, H200, kind).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EIO), "{err}");
    assert_eq!(e.slices().len(), 1);
    assert_eq!(e.pending_intents(), 0);
}

#[test]
fn nvidia_vfio_enables_vfs_and_rolls_them_back() {
    // The vGPU host before anything enabled its VFs (nvidia refuses sriov_numvfs writes).
    let h = sim("hgx-h200-vgpu");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let kind = SliceKind::NvidiaVfio {
        vgpu_type: "1421".parse().unwrap(),
        start: None,
    };
    // Enabling works, then the type write fails: the VFs this create enabled go again.
    let pf_dir = format!("/sys/bus/pci/devices/{H200}");
    let vf0 = "0000:18:00.4";
    fault(
        &h,
        &format!("write:/sys/bus/pci/devices/{vf0}/nvidia/current_vgpu_type=EIO,times=1"),
    );
    let err = create(&e, H200, kind.clone()).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EIO), "{err}");
    assert_eq!(vf_count(&h, H200), 0, "rolled back");
    assert_eq!(e.pending_intents(), 0);
    // A partial enable that gives nothing is detected and undone. (times=2: the plain write
    // vgpud tries first, which nvidia refuses, uses the fault up once.)
    fault(
        &h,
        &format!("write:{pf_dir}/sriov_numvfs=partial:0,times=2"),
    );
    assert_eq!(
        create(&e, H200, kind.clone()).unwrap_err().code(),
        "no_capacity"
    );
    assert_eq!(vf_count(&h, H200), 0);
    // A partial enable of 2 is used as far as it goes; the count is read back.
    fault(
        &h,
        &format!("write:{pf_dir}/sriov_numvfs=partial:2,times=2"),
    );
    create(&e, H200, kind.clone()).unwrap();
    assert_eq!(vf_count(&h, H200), 2);
    create(&e, H200, kind.clone()).unwrap();
    assert_eq!(create(&e, H200, kind).unwrap_err().code(), "no_capacity");
}

#[test]
fn sriov_vf_through_amd_smi() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let s = create(&e, MI300X, SliceKind::SriovVf).unwrap();
    let Identity::Vf { address, index } = s.identity else {
        panic!()
    };
    assert_eq!(index, 0);
    assert_eq!(driver(&h, address).as_deref(), Some("vfio-pci"));
    assert!(s.handles.vfio_group.is_some());
    // SPX allows one VF.
    assert_eq!(
        create(&e, MI300X, SliceKind::SriovVf).unwrap_err().code(),
        "no_capacity"
    );
    // NVIDIA VFs are not plain VFs.
    assert_eq!(
        create(&e, T4, SliceKind::SriovVf).unwrap_err().code(),
        "unsupported"
    );
    h.set_vfio_open(address, true).unwrap();
    assert_eq!(e.destroy_slice(s.id).unwrap_err().code(), "busy");
    h.set_vfio_open(address, false).unwrap();
    e.destroy_slice(s.id).unwrap();
    assert_eq!(driver(&h, address), None);
    // GIM keeps its VF: nothing turns it off (it refuses 0), the next slice reuses it.
    assert_eq!(vf_count(&h, MI300X), 1);
    let s = create(&e, MI300X, SliceKind::SriovVf).unwrap();
    assert_eq!(s.state, SliceState::Ready);
}

#[test]
fn amd_vfs_on_bare_metal_amdgpu_are_refused_clearly() {
    let h = sim("mi300x");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let err = create(&e, "0000:05:00.0", SliceKind::SriovVf).unwrap_err();
    assert_eq!(err.code(), "unsupported", "{err}");
    assert!(err.to_string().contains("GIM"), "{err}");
    assert_eq!(
        vf_count(&h, "0000:05:00.0"),
        0,
        "sriov_numvfs was not even tried"
    );
}

#[test]
fn mig_placements_capacity_and_nvml_errors() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    // The scheduler puts the first 3g at slot 4: slot 0 stays open for a 4g, which only
    // starts there.
    let a = create(&e, A100, mig_kind("3g.40gb", None)).unwrap();
    let b = create(&e, A100, mig_kind("3g.40gb", None)).unwrap();
    assert_eq!(
        a.identity,
        Identity::Mig {
            start: 4,
            profile: "3g.40gb".parse().unwrap()
        }
    );
    assert_eq!(
        b.identity,
        Identity::Mig {
            start: 0,
            profile: "3g.40gb".parse().unwrap()
        }
    );
    assert!(a.handles.gpu_instance_id.is_some() && a.handles.compute_instance_id.is_some());
    assert_eq!(
        create(&e, A100, mig_kind("3g.40gb", None))
            .unwrap_err()
            .code(),
        "no_capacity"
    );
    assert_eq!(
        create(&e, A100, mig_kind("1g.10gb", Some(0)))
            .unwrap_err()
            .code(),
        "conflict"
    );
    assert_eq!(
        create(&e, A100, mig_kind("3g.40gb", Some(3)))
            .unwrap_err()
            .code(),
        "invalid_request"
    );
    assert_eq!(
        create(&e, A100, mig_kind("5g.99gb", None))
            .unwrap_err()
            .code(),
        "invalid_request"
    );
    // In use: busy.
    let gi = a.handles.gpu_instance_id.unwrap();
    h.set_mig_instance_in_use(addr(A100), gi, true).unwrap();
    assert_eq!(e.destroy_slice(a.id).unwrap_err().code(), "busy");
    h.set_mig_instance_in_use(addr(A100), gi, false).unwrap();
    e.destroy_slice(a.id).unwrap();
    // Explicit placement.
    let c = create(&e, A100, mig_kind("1g.10gb", Some(5))).unwrap();
    assert_eq!(
        c.identity,
        Identity::Mig {
            start: 5,
            profile: "1g.10gb".parse().unwrap()
        }
    );
    // NVML refuses the GPU instance: no capacity, nothing left.
    fault(
        &h,
        "nvml:nvmlDeviceCreateGpuInstanceWithPlacement=INSUFFICIENT_RESOURCES,times=1",
    );
    assert_eq!(
        create(&e, A100B, mig_kind("7g.80gb", None))
            .unwrap_err()
            .code(),
        "no_capacity"
    );
    // The compute instance fails after the GPU instance was made: both go.
    fault(
        &h,
        "nvml:nvmlGpuInstanceCreateComputeInstance=UNKNOWN,times=1",
    );
    let err = create(&e, A100B, mig_kind("7g.80gb", None)).unwrap_err();
    assert_eq!(
        (err.code(), err.nvml_code()),
        ("host_error", Some(999)),
        "{err}"
    );
    assert!(h.nvml().gpu_instances(1).unwrap().is_empty());
    assert_eq!(e.pending_intents(), 0);
}

#[test]
fn a_hung_nvml_call_times_out_without_wedging_other_gpus() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(&h, dir.path(), Duration::from_millis(600));
    fault(
        &h,
        &format!("nvml:nvmlDeviceCreateGpuInstanceWithPlacement@{A100}=hang:2500,times=1"),
    );
    // One GPU works while the other's call hangs, and after vgpud gave up on it.
    let e2 = e.clone();
    let other = std::thread::spawn(move || {
        let mut took = Vec::new();
        for wait in [100, 900] {
            std::thread::sleep(Duration::from_millis(wait));
            let t = Instant::now();
            create(&e2, A100B, mig_kind("1g.10gb", None)).unwrap();
            took.push(t.elapsed());
        }
        took
    });
    let t = Instant::now();
    let err = create(&e, A100, mig_kind("7g.80gb", None)).unwrap_err();
    assert_eq!(err.code(), "timeout", "{err}");
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    // While the call is out, the stuck GPU answers at once instead of piling up threads.
    let t = Instant::now();
    assert_eq!(
        create(&e, A100, mig_kind("1g.10gb", None))
            .unwrap_err()
            .code(),
        "timeout"
    );
    assert!(
        t.elapsed() < Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    for took in other.join().unwrap() {
        assert!(
            took < Duration::from_millis(1000),
            "the other GPU waited {took:?}"
        );
    }
    // The abandoned call completes later; its intent is rolled back once the GPU answers.
    assert_eq!(e.pending_intents(), 1);
    let report = e.reconcile().unwrap();
    assert_eq!(
        report.intents_pending.len(),
        1,
        "not while the call is out: {report:?}"
    );
    std::thread::sleep(Duration::from_millis(2600));
    let report = e.reconcile().unwrap();
    assert_eq!(report.intents_resolved, 1, "{report:?}");
    assert_eq!(e.pending_intents(), 0);
    assert!(
        h.nvml().gpu_instances(0).unwrap().is_empty(),
        "the late GPU instance was removed"
    );
    assert_eq!(
        create(&e, A100, mig_kind("7g.80gb", None)).unwrap().state,
        agent::engine::SliceState::Ready
    );
}

#[test]
fn passthrough_binds_and_restores_the_driver() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let s = create(&e, T4B, SliceKind::Passthrough).unwrap();
    assert_eq!(
        s.identity,
        Identity::Passthrough {
            original_driver: Some("nvidia".into())
        }
    );
    assert_eq!(driver(&h, addr(T4B)).as_deref(), Some("vfio-pci"));
    assert_eq!(s.handles.pci_address, Some(addr(T4B)));
    h.set_vfio_open(VfioDevice::Pci(addr(T4B)), true).unwrap();
    assert_eq!(e.destroy_slice(s.id).unwrap_err().code(), "busy");
    h.set_vfio_open(VfioDevice::Pci(addr(T4B)), false).unwrap();
    e.destroy_slice(s.id).unwrap();
    assert_eq!(driver(&h, addr(T4B)).as_deref(), Some("nvidia"));
    // A GPU carrying slices is not passed through.
    create(&e, T4, mdev_kind("nvidia-222")).unwrap();
    assert_eq!(
        create(&e, T4, SliceKind::Passthrough).unwrap_err().code(),
        "conflict"
    );
    assert_eq!(driver(&h, addr(T4)).as_deref(), Some("nvidia"));
}

#[test]
fn passthrough_refuses_a_shared_iommu_group() {
    let mut p = sim::Profile::builtin("single-gpu").unwrap();
    p.gpus[0].iommu_group = Some(40);
    p.devices[0].iommu_group = Some(40);
    let h = sim::SimHost::new(p).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let err = create(&e, "0000:01:00.0", SliceKind::Passthrough).unwrap_err();
    assert_eq!(err.code(), "unsupported", "{err}");
    assert!(
        err.to_string().contains("0000:02:00.0 (bound to igb)"),
        "{err}"
    );
    assert_eq!(driver(&h, addr("0000:01:00.0")).as_deref(), Some("nvidia"));
}

#[test]
fn a_hung_amd_smi_call_leaves_the_intent_for_reconcile() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(&h, dir.path(), Duration::from_millis(300));
    fault(
        &h,
        &format!("amd:amdsmi_set_num_vf@{MI300X}=hang:1200,times=1"),
    );
    let layout = agent::engine::Layout {
        amd: Some(agent::engine::AmdPartition {
            compute: "CPX".into(),
            memory: "NPS4".into(),
            vfs: Some(8),
        }),
        ..gpu_layout(MI300X, &[("vf", 8)])
    };
    let view = e.set_layouts(vec![layout]).unwrap();
    let st = &view.status[0];
    assert!(
        st.reasons.iter().any(|r| r.contains("amdsmi_set_num_vf")),
        "{st:?}"
    );
    assert_eq!(e.pending_intents(), 1);
    // The late call made the 8 VFs; the reconciler finishes the change from there.
    std::thread::sleep(Duration::from_millis(1300));
    assert_eq!(vf_count(&h, MI300X), 8);
    assert_eq!(e.reconcile().unwrap().intents_resolved, 1);
    assert_eq!(e.pending_intents(), 0);
    let p = h.amd().partition(addr(MI300X)).unwrap();
    assert_eq!((p.compute.as_str(), p.memory.as_str()), ("CPX", "NPS4"));
}

#[test]
fn slices_on_a_passed_through_gpu_are_a_conflict_not_a_missing_gpu() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    // What a create or an allocation that lost the GPU's lock to a passthrough finds.
    create(&e, T4B, SliceKind::Passthrough).unwrap();
    let err = create(&e, T4B, mdev_kind("nvidia-222")).unwrap_err();
    assert_eq!(err.code(), "conflict", "{err}");
    assert!(err.to_string().contains("vfio-pci"), "{err}");
    let err = e
        .allocate(request("nova", "nvidia-222", Some(T4B)))
        .unwrap_err();
    assert_eq!(err.code(), "conflict", "{err}");
    // Elsewhere the type is still allocated as before.
    e.allocate(request("nova", "nvidia-222", None)).unwrap();
}
