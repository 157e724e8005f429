//! NVIDIA SR-IOV at a restart (issue 13): the reconciler's VF re-enable is the same checked,
//! destructive step as a create's (it destroys every MIG GPU instance on the GPU), and a PF that
//! a killed agent left on pci-pf-stub is handed back to `nvidia`, with or without its VFs as the
//! owned slices need them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::collections::BTreeMap;

use agent::engine::{Identity, SliceState};
use ids::PciAddress;
use sim::SimHost;
use testkit::*;

const H200: &str = "0000:18:00.0";
/// `NVIDIA H200X-35C`, time-sliced.
const TS: &str = "1421";
/// `NVIDIA H200X-1-18C`, MIG-backed on `1g.18gb`.
const T1G: &str = "1414";

fn dev(attr: &str) -> String {
    format!("/sys/bus/pci/devices/{H200}/{attr}")
}

/// The VFs of the GPU, from its `virtfn<i>` links, in index order.
fn vf_list(h: &SimHost) -> Vec<PciAddress> {
    (0..numvfs(h, H200))
        .map(|i| {
            let link = dev(&format!("virtfn{i}"));
            sysfs::SysfsExt::link_name(fs(h).as_ref(), std::path::Path::new(&link))
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect()
}

/// What a killed `sriov-manage -e` sequence leaves: the PF moved from `nvidia` to pci-pf-stub
/// (override, unbind, probe) and, with `vfs`, the total written to `sriov_numvfs`; the hand
/// back to `nvidia` never ran.
fn leave_on_stub(h: &SimHost, vfs: bool) {
    write(h, &dev("driver_override"), "pci-pf-stub");
    write(h, "/sys/bus/pci/drivers/nvidia/unbind", H200);
    write(h, "/sys/bus/pci/drivers_probe", H200);
    if vfs {
        write(h, &dev("sriov_numvfs"), "32");
    }
    assert_eq!(driver(h, addr(H200)).as_deref(), Some("pci-pf-stub"));
    assert!(vf_list(h).iter().all(|vf| driver(h, *vf).is_none()));
}

/// The PF on `nvidia` with its override cleared, and `vfs` VFs, every one on `nvidia`.
fn assert_on_nvidia(h: &SimHost, vfs: u32) {
    assert_eq!(driver(h, addr(H200)).as_deref(), Some("nvidia"));
    assert_eq!(read(h, &dev("driver_override")), "(null)");
    assert_eq!(numvfs(h, H200), vfs);
    for vf in vf_list(h) {
        assert_eq!(driver(h, vf).as_deref(), Some("nvidia"), "{vf}");
    }
}

#[test]
fn a_restart_does_not_re_enable_vfs_over_an_allocated_gpu_instance() {
    let h = sim("hgx-h200-vgpu");
    h.set_mig_mode(addr(H200), true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (vgpu, mig, alloc) = {
        let e = engine(&h, dir.path());
        let v = create(&e, H200, vgpu_kind(T1G, Some(2))).unwrap();
        let m = create(&e, H200, mig_kind("1g.18gb", Some(0))).unwrap();
        let a = e
            .allocate(request("tenant-a", "1g.18gb", Some(H200)))
            .unwrap();
        assert_eq!(a.slices, vec![m.id]);
        (v.id, m.id, a.id)
    };
    h.reboot().unwrap();
    // The first pass cannot enable the VFs (refused once); the allocated MIG slice comes back.
    fault(&h, &format!("write:{}=EIO,times=1", dev("sriov_numvfs")));
    let e = engine(&h, dir.path());
    let first = e.reconcile().unwrap();
    assert!(first.failed.iter().any(|(id, _)| *id == vgpu), "{first:?}");
    assert_eq!(first.recreated, vec![mig], "{first:?}");
    let gis = h.nvml().gpu_instances(0).unwrap();
    assert_eq!(gis.len(), 1);
    // The next pass must enable the VFs over the allocated instance: refused, nothing touched.
    let second = e.reconcile().unwrap();
    let (_, why) = second
        .failed
        .iter()
        .find(|(id, _)| *id == vgpu)
        .unwrap_or_else(|| panic!("the vGPU slice must fail: {second:?}"));
    assert!(why.contains("destroys every MIG GPU instance"), "{why}");
    assert!(
        why.contains(&mig.to_string()) && why.contains("tenant-a"),
        "{why}"
    );
    assert_eq!(numvfs(&h, H200), 0, "no VF was enabled");
    assert_eq!(
        h.nvml().gpu_instances(0).unwrap(),
        gis,
        "the allocated instance is intact"
    );
    assert!(second.recreated.is_empty(), "{second:?}");
    assert!(second.given_up.is_empty(), "{second:?}");
    assert_eq!(e.slice(vgpu).unwrap().state, SliceState::Failed);
    assert_eq!(e.slice(mig).unwrap().state, SliceState::Allocated);
    // Released, the MIG slice is ours and free: given up (reported), then the VFs and the vGPU.
    e.release(alloc).unwrap();
    let third = e.reconcile().unwrap();
    let given_up: Vec<_> = third.given_up.iter().map(|(id, _)| *id).collect();
    assert_eq!(given_up, vec![mig], "{third:?}");
    assert!(third.given_up[0].1.contains("destroyed first"), "{third:?}");
    assert!(e.slice(mig).is_err(), "the free MIG slice was destroyed");
    assert_eq!(third.recreated, vec![vgpu], "{third:?}");
    assert_on_nvidia(&h, 32);
    let gis = h.nvml().gpu_instances(0).unwrap();
    assert_eq!(gis.len(), 1, "only the vGPU's own instance");
    assert_eq!(gis[0].placement.start, 2);
    assert_eq!(e.slice(vgpu).unwrap().state, SliceState::Ready);
}

#[test]
fn a_restart_does_not_re_enable_vfs_over_a_foreign_gpu_instance() {
    let h = sim("hgx-h200-vgpu");
    h.set_mig_mode(addr(H200), true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let vgpu = create(&engine(&h, dir.path()), H200, vgpu_kind(T1G, Some(0)))
        .unwrap()
        .id;
    h.reboot().unwrap();
    // Before vgpud starts, another tool carves a GPU instance.
    let nvml = h.nvml();
    let p = nvml
        .gpu_instance_profiles(0)
        .unwrap()
        .into_iter()
        .find(|p| p.name.to_string() == "1g.18gb")
        .unwrap();
    nvml.create_gpu_instance(0, p.id, gpu::Placement { start: 6, size: 1 })
        .unwrap();
    let e = engine(&h, dir.path());
    let report = e.reconcile().unwrap();
    let (_, why) = report
        .failed
        .iter()
        .find(|(id, _)| *id == vgpu)
        .unwrap_or_else(|| panic!("the vGPU slice must fail: {report:?}"));
    assert!(why.contains("is not vgpud's"), "{why}");
    assert!(why.contains("destroys every MIG GPU instance"), "{why}");
    assert_eq!(numvfs(&h, H200), 0);
    assert_eq!(nvml.gpu_instances(0).unwrap().len(), 1, "left alone");
    assert!(report.recreated.is_empty(), "{report:?}");
}

#[test]
fn a_pf_left_on_pci_pf_stub_with_vfs_gets_them_back_for_the_owned_vgpus() {
    let h = sim("hgx-h200-vgpu");
    let dir = tempfile::tempdir().unwrap();
    let before: BTreeMap<_, _> = {
        let e = engine(&h, dir.path());
        let a = create(&e, H200, vgpu_kind(TS, None)).unwrap();
        let b = create(&e, H200, vgpu_kind(TS, None)).unwrap();
        [(a.id, a.identity), (b.id, b.identity)].into()
    };
    h.reboot().unwrap();
    // The restart's re-enable was killed after sriov_numvfs, before the PF went back.
    leave_on_stub(&h, true);
    let e = engine(&h, dir.path());
    let report = e.reconcile().unwrap();
    assert_eq!(report.interrupted_sriov.len(), 1, "{report:?}");
    let text = &report.interrupted_sriov[0];
    assert!(
        text.contains("left on pci-pf-stub with 32 VFs")
            && text.contains("2 owned slices use its VFs"),
        "{text}"
    );
    assert_on_nvidia(&h, 32);
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(report.recreated.len(), 2, "{report:?}");
    let after: BTreeMap<_, _> = e.slices().into_iter().map(|s| (s.id, s.identity)).collect();
    assert_eq!(after, before, "same VFs");
    for s in e.slices() {
        assert_eq!(s.state, SliceState::Ready, "{s:?}");
        let Identity::Vf { address, .. } = s.identity else {
            panic!("{:?}", s.identity)
        };
        let typed = read(
            &h,
            &format!("/sys/bus/pci/devices/{address}/nvidia/current_vgpu_type"),
        );
        assert_eq!(typed, TS);
    }
    // Finished: the next pass finds nothing to do.
    let again = e.reconcile().unwrap();
    assert!(again.interrupted_sriov.is_empty(), "{again:?}");
}

#[test]
fn a_pf_left_on_pci_pf_stub_without_owned_vf_slices_goes_back_without_vfs() {
    let h = sim("hgx-h200-vgpu");
    let dir = tempfile::tempdir().unwrap();
    leave_on_stub(&h, true);
    let e = engine(&h, dir.path());
    let report = e.reconcile().unwrap();
    assert_eq!(report.interrupted_sriov.len(), 1, "{report:?}");
    assert!(
        report.interrupted_sriov[0].contains("no owned slice uses its VFs: VFs disabled"),
        "{report:?}"
    );
    assert_on_nvidia(&h, 0);
    // NVML sees the GPU again.
    assert!(h.nvml().device_info(nvml_index(&h, H200)).is_ok());
}

#[test]
fn owned_vgpus_on_a_pf_left_on_pci_pf_stub_before_the_vf_write_get_their_vfs() {
    let h = sim("hgx-h200-vgpu");
    let dir = tempfile::tempdir().unwrap();
    let id = create(&engine(&h, dir.path()), H200, vgpu_kind(TS, None))
        .unwrap()
        .id;
    h.reboot().unwrap();
    leave_on_stub(&h, false);
    let e = engine(&h, dir.path());
    let report = e.reconcile().unwrap();
    assert!(
        report.interrupted_sriov[0].contains("with 0 VFs")
            && report.interrupted_sriov[0].contains("its 32 VFs are bound to nvidia"),
        "{report:?}"
    );
    assert_on_nvidia(&h, 32);
    assert_eq!(report.recreated, vec![id], "{report:?}");
}

#[test]
fn a_pf_on_pci_pf_stub_whose_vf_someone_bound_is_left_alone() {
    let h = sim("hgx-h200-vgpu");
    let dir = tempfile::tempdir().unwrap();
    leave_on_stub(&h, true);
    let vf = vf_list(&h)[3];
    write(
        &h,
        &format!("/sys/bus/pci/devices/{vf}/driver_override"),
        "vfio-pci",
    );
    write(&h, "/sys/bus/pci/drivers_probe", &vf.to_string());
    assert_eq!(driver(&h, vf).as_deref(), Some("vfio-pci"));
    let e = engine(&h, dir.path());
    let report = e.reconcile().unwrap();
    assert_eq!(report.interrupted_sriov.len(), 1, "{report:?}");
    let text = &report.interrupted_sriov[0];
    assert!(
        text.contains(&format!("VF {vf} is bound to vfio-pci")) && text.contains("left alone"),
        "{text}"
    );
    assert_eq!(driver(&h, addr(H200)).as_deref(), Some("pci-pf-stub"));
    assert_eq!(numvfs(&h, H200), 32);
    assert_eq!(driver(&h, vf).as_deref(), Some("vfio-pci"));
}
