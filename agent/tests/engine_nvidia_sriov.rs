//! NVIDIA SR-IOV as its vGPU host driver requires it, through the engine (issue 13, facts 1 and
//! 2): VFs enabled through `sriov-manage`'s sequence (the simulated host has no `sriov-manage`,
//! so the sysfs route runs), the MIG-instance loss that implies, and the driver's refusals of
//! `current_vgpu_type` as typed errors.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::time::Duration;

use agent::engine::{Identity, LayoutState, SliceState};
use ids::PciAddress;
use sim::{Profile, SimHost, VgpuInUseErrno};
use testkit::*;

const H200: &str = "0000:18:00.0";
/// `NVIDIA H200X-35C`, time-sliced.
const TS: &str = "1421";
/// `NVIDIA H200X-1-18C`, MIG-backed on `1g.18gb`.
const T1G: &str = "1414";

/// The VFs of the GPU, from its `virtfn<i>` links, in index order.
fn vf_list(h: &SimHost) -> Vec<PciAddress> {
    (0..numvfs(h, H200))
        .map(|i| {
            let link = format!("/sys/bus/pci/devices/{H200}/virtfn{i}");
            sysfs::SysfsExt::link_name(fs(h).as_ref(), std::path::Path::new(&link))
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect()
}

fn vgpu_type_of(h: &SimHost, vf: PciAddress) -> u32 {
    read(
        h,
        &format!("/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"),
    )
    .parse()
    .unwrap()
}

/// What the driver shows after `sriov-manage -e`: every VF, the PF and every VF on `nvidia`,
/// the unbind lock given back.
fn assert_sriov_manage_done(h: &SimHost) {
    assert_eq!(numvfs(h, H200), 32);
    assert_eq!(driver(h, addr(H200)).as_deref(), Some("nvidia"));
    assert_eq!(
        read(h, &format!("/sys/bus/pci/devices/{H200}/driver_override")),
        "(null)"
    );
    assert_eq!(
        read(h, &format!("/proc/driver/nvidia/gpus/{H200}/unbindLock")),
        "0"
    );
    for vf in vf_list(h) {
        assert_eq!(driver(h, vf).as_deref(), Some("nvidia"), "{vf}");
        assert!(exists(
            h,
            &format!("/sys/bus/pci/devices/{vf}/nvidia/creatable_vgpu_types")
        ));
    }
}

#[test]
fn a_create_enables_nvidia_vfs_through_the_sriov_manage_sequence() {
    let h = sim("hgx-h200-vgpu");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    assert_eq!(numvfs(&h, H200), 0);
    let s = create(&e, H200, vgpu_kind(TS, None)).unwrap();
    assert_sriov_manage_done(&h);
    let Identity::Vf { address, .. } = s.identity else {
        panic!("{:?}", s.identity)
    };
    assert_eq!(vgpu_type_of(&h, address), 1421);
    // Destroying the only slice turns the VFs off again the same way.
    e.destroy_slice(s.id).unwrap();
    assert_eq!(vgpu_type_of(&h, address), 0);
}

#[test]
fn a_layout_on_the_vgpu_host_goes_sriov_manage_then_types_then_slices() {
    let h = sim("hgx-h200-vgpu");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    // The first type write waits a while: the state between the VF step and the types shows.
    fault(
        &h,
        "write:/sys/bus/pci/devices/0000:18:00.4/nvidia/current_vgpu_type=hang:5000,times=1",
    );
    let status = std::thread::scope(|scope| {
        let apply = scope.spawn(|| {
            e.set_layouts(vec![gpu_layout(H200, &[("NVIDIA H200X-35C", 4)])])
                .unwrap()
        });
        // Step 1 done, step 2 not yet: VFs on nvidia, no type, no slice.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !(numvfs(&h, H200) == 32
            && vf_list(&h)
                .iter()
                .all(|vf| driver(&h, *vf).as_deref() == Some("nvidia")))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the VF step did not finish"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_sriov_manage_done(&h);
        assert!(vf_list(&h).iter().all(|vf| vgpu_type_of(&h, *vf) == 0));
        assert!(e.slices().iter().all(|s| s.state != SliceState::Ready));
        apply.join().unwrap()
    });
    assert_eq!(status.status[0].state, LayoutState::Applied, "{status:?}");
    // Step 2: four VFs typed, the rest untouched; step 3: four free slices on them.
    assert_sriov_manage_done(&h);
    let typed: Vec<PciAddress> = vf_list(&h)
        .into_iter()
        .filter(|vf| vgpu_type_of(&h, *vf) == 1421)
        .collect();
    assert_eq!(typed.len(), 4);
    let mut on: Vec<PciAddress> = e
        .slices()
        .iter()
        .map(|s| match s.identity {
            Identity::Vf { address, .. } => address,
            ref other => panic!("{other:?}"),
        })
        .collect();
    on.sort();
    assert_eq!(on, typed);
    assert!(e.slices().iter().all(|s| s.state == SliceState::Ready));
}

#[test]
fn enabling_vfs_over_an_allocated_gpu_instance_is_refused_naming_it() {
    let h = sim("hgx-h200-vgpu");
    h.set_mig_mode(addr(H200), true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let mig = create(&e, H200, mig_kind("1g.18gb", Some(0))).unwrap();
    let a = e
        .allocate(request("tenant-a", "1g.18gb", Some(H200)))
        .unwrap();
    assert_eq!(a.slices, vec![mig.id]);
    // A MIG-backed vGPU needs VFs; enabling them would destroy the allocated instance.
    let err = create(&e, H200, vgpu_kind(T1G, Some(2))).unwrap_err();
    assert_eq!(err.code(), "conflict", "{err}");
    let text = err.to_string();
    assert!(text.contains(&mig.id.to_string()), "{text}");
    assert!(text.contains("tenant-a"), "{text}");
    assert!(text.contains("destroys every MIG GPU instance"), "{text}");
    assert_eq!(numvfs(&h, H200), 0, "nothing was enabled");
    assert_eq!(
        h.nvml().gpu_instances(0).unwrap().len(),
        1,
        "the instance is intact"
    );
    // Released, the instance is ours and free: it is destroyed first, then the VFs come.
    e.release(a.id).unwrap();
    let v = create(&e, H200, vgpu_kind(T1G, Some(2))).unwrap();
    assert_sriov_manage_done(&h);
    assert!(
        e.slice(mig.id).is_err(),
        "the free MIG slice was destroyed first"
    );
    assert!(
        matches!(v.identity, Identity::MigVgpu { start: 2, .. }),
        "{:?}",
        v.identity
    );
    let gis = h.nvml().gpu_instances(0).unwrap();
    assert_eq!(
        gis.len(),
        1,
        "only the vGPU's own instance, made after the VFs"
    );
    assert_eq!(gis[0].placement.start, 2);
}

#[test]
fn enabling_vfs_over_a_foreign_gpu_instance_is_refused() {
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
    let err = create(&e, H200, vgpu_kind(T1G, Some(0))).unwrap_err();
    assert_eq!(err.code(), "conflict", "{err}");
    assert!(err.to_string().contains("is not vgpud's"), "{err}");
    assert_eq!(nvml.gpu_instances(0).unwrap().len(), 1);
    assert_eq!(numvfs(&h, H200), 0);
}

#[test]
fn a_type_the_driver_refuses_with_eio_is_no_capacity_with_its_words() {
    let h = sim("hgx-h200");
    let dir = tempfile::tempdir().unwrap();
    let (id, vf) = {
        let e = engine(&h, dir.path());
        let s = create(&e, H200, vgpu_kind(TS, None)).unwrap();
        let Identity::Vf { address, .. } = s.identity else {
            panic!()
        };
        (s.id, address)
    };
    h.reboot().unwrap();
    // Before vgpud restores its vGPU, someone else takes the whole framebuffer.
    let other = vf_list(&h).into_iter().find(|v| *v != vf).unwrap();
    write(
        &h,
        &format!("/sys/bus/pci/devices/{other}/nvidia/current_vgpu_type"),
        "1423",
    );
    let e = engine(&h, dir.path());
    let report = e.reconcile().unwrap();
    let (failed, why) = &report.failed[0];
    assert_eq!(*failed, id);
    assert!(why.contains("no capacity"), "{why}");
    assert!(why.contains("Failed to add vgpu create request"), "{why}");
    assert!(why.contains("Input/output error"), "{why}");
}

fn removal_refused(in_use: VgpuInUseErrno) -> String {
    let mut profile = Profile::builtin("hgx-h200").unwrap();
    for m in profile.models.values_mut() {
        if let Some(s) = m.sriov.as_mut() {
            s.vgpu_in_use = in_use;
        }
    }
    let h = SimHost::new(profile).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let s = create(&e, H200, vgpu_kind(TS, None)).unwrap();
    let Identity::Vf { address, .. } = s.identity else {
        panic!()
    };
    h.set_vfio_open(address, true).unwrap();
    let err = e.destroy_slice(s.id).unwrap_err();
    assert_eq!(vgpu_type_of(&h, address), 1421, "still there");
    err.code().to_owned()
}

#[test]
fn removing_a_vgpu_a_vm_holds_is_busy_whether_the_driver_says_ebusy_or_eperm() {
    assert_eq!(removal_refused(VgpuInUseErrno::Ebusy), "busy");
    assert_eq!(removal_refused(VgpuInUseErrno::Eperm), "busy");
}

#[test]
fn a_layout_of_mig_slices_and_mig_backed_vgpus_enables_the_vfs_before_any_instance() {
    let h = sim("hgx-h200-vgpu");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let view = e
        .set_layouts(vec![gpu_layout(
            H200,
            &[("3g.71gb", 1), ("NVIDIA H200X-1-18C", 2)],
        )])
        .unwrap();
    // A vGPU host's MIG mode change waits for a GPU reset (issue 13, fact 4); after it the
    // next reconcile makes the VFs, then the instances and types.
    assert_eq!(view.status[0].state, LayoutState::Pending, "{view:?}");
    h.reset_gpu(addr(H200)).unwrap();
    let report = e.reconcile().unwrap();
    assert_eq!(report.layouts[0].state, LayoutState::Applied, "{report:?}");
    assert_sriov_manage_done(&h);
    // Every slice of the layout is still there: none was made before the VFs.
    assert_eq!(e.slices().len(), 3);
    assert_eq!(h.nvml().gpu_instances(0).unwrap().len(), 3);
    let report = e.reconcile().unwrap();
    assert!(
        report.failed.is_empty() && report.recreated.is_empty(),
        "{report:?}"
    );
}
