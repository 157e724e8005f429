//! NVIDIA SR-IOV as the vGPU host driver requires it (issue 13, facts 1 and 2): VFs only through
//! pci-pf-stub, `unbindLock`, GPU instances lost when the PF leaves nvidia, and the errnos of
//! `current_vgpu_type`. Sources for each rule: `docs/sysfs.md`, "NVIDIA SR-IOV".
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use common::*;
use gpu::Placement;
use libc::{EBUSY, EIO, ENODEV, ENOENT, EPERM};
use sim::{Profile, SimHost, VgpuInUseErrno};

const PF: &str = "0000:18:00.0";

fn lock(pf: &str) -> String {
    format!("/proc/driver/nvidia/gpus/{pf}/unbindLock")
}

#[test]
fn sriov_numvfs_is_refused_while_nvidia_holds_the_pf() {
    let h = host("hgx-h200-vgpu");
    let fs = h.sysfs();
    assert_eq!(read(&fs, &dev(PF, "sriov_numvfs")), "0");
    assert_eq!(
        link_name(&fs, &dev(PF, "driver")).as_deref(),
        Some("nvidia")
    );
    // nvidia.ko has no sriov_configure: sriov_numvfs_store answers ENOENT.
    assert_eq!(write_err(&fs, &dev(PF, "sriov_numvfs"), "32"), ENOENT);
    assert_eq!(write_err(&fs, &dev(PF, "sriov_numvfs"), "1"), ENOENT);
    write(&fs, &dev(PF, "sriov_numvfs"), "0"); // the same count is a no-op, as in the kernel
    assert!(vfs(&fs, PF).is_empty());
}

#[test]
fn vfs_are_enabled_under_pci_pf_stub_and_bound_to_nvidia_after_the_pf() {
    let h = host("hgx-h200-vgpu");
    let fs = h.sysfs();
    // pci-pf-stub matches an NVIDIA GPU only through driver_override.
    write(&fs, &lock(PF), "1");
    write(&fs, &dev(PF, "driver/unbind"), PF);
    assert_eq!(
        write_err(&fs, "/sys/bus/pci/drivers/pci-pf-stub/bind", PF),
        ENODEV
    );
    write(&fs, &dev(PF, "driver_override"), "pci-pf-stub");
    write(&fs, "/sys/bus/pci/drivers_probe", PF);
    assert_eq!(
        link_name(&fs, &dev(PF, "driver")).as_deref(),
        Some("pci-pf-stub")
    );
    assert!(!exists(&fs, &lock(PF)), "nvidia's /proc entry went with it");
    write(&fs, &dev(PF, "sriov_numvfs"), "32");
    let all = vfs(&fs, PF);
    assert_eq!(all.len(), 32);
    // nvidia cannot probe a VF whose PF it does not hold: the VFs wait unbound.
    assert_eq!(link_name(&fs, &dev(&all[0], "driver")), None);
    assert!(!exists(&fs, &dev(&all[0], "nvidia/current_vgpu_type")));
    assert_eq!(
        write_err(&fs, "/sys/bus/pci/drivers/nvidia/bind", &all[0]),
        ENODEV
    );
    // Back to nvidia: pci-pf-stub leaves SR-IOV enabled when it lets go.
    write(&fs, &dev(PF, "driver_override"), "\n");
    write(&fs, &dev(PF, "driver/unbind"), PF);
    assert_eq!(vfs(&fs, PF).len(), 32);
    write(&fs, "/sys/bus/pci/drivers/nvidia/bind", PF);
    assert_eq!(read(&fs, &lock(PF)), "0", "a fresh driver entry, unlocked");
    for vf in &all {
        write(&fs, "/sys/bus/pci/drivers/nvidia/bind", vf);
    }
    assert_eq!(
        link_name(&fs, &dev(&all[31], "driver")).as_deref(),
        Some("nvidia")
    );
    assert_eq!(read(&fs, &dev(&all[0], "nvidia/current_vgpu_type")), "0");
    assert!(read(&fs, &dev(&all[0], "nvidia/creatable_vgpu_types")).contains("H200X-141C"));
    assert_eq!(h.nvml().device_count().unwrap(), 8);
}

#[test]
fn the_unbind_lock_is_granted_only_without_clients() {
    let h = host("hgx-h200-vgpu");
    let fs = h.sysfs();
    assert_eq!(read(&fs, &lock(PF)), "0");
    h.set_gpu_clients(addr(PF), true).unwrap();
    write(&fs, &lock(PF), "1");
    assert_eq!(read(&fs, &lock(PF)), "0", "clients hold the GPU: no lock");
    // nv_pci_remove would wait for the clients; the simulator refuses instead.
    assert_eq!(write_err(&fs, &dev(PF, "driver/unbind"), PF), EBUSY);
    h.set_gpu_clients(addr(PF), false).unwrap();
    write(&fs, &lock(PF), "1");
    assert_eq!(read(&fs, &lock(PF)), "1");
    write(&fs, &lock(PF), "0");
    assert_eq!(read(&fs, &lock(PF)), "0");
}

#[test]
fn rebinding_the_pf_destroys_its_gpu_instances_and_keeps_mig_mode() {
    let h = host("hgx-h200-vgpu");
    let fs = h.sysfs();
    h.set_mig_mode(addr(PF), true).unwrap();
    let nvml = h.nvml();
    let p = nvml
        .gpu_instance_profiles(0)
        .unwrap()
        .into_iter()
        .find(|p| p.name.to_string() == "1g.18gb")
        .unwrap();
    nvml.create_gpu_instance(0, p.id, Placement { start: 0, size: 1 })
        .unwrap();
    assert_eq!(nvml.gpu_instances(0).unwrap().len(), 1);
    sriov_manage_enable(&fs, PF);
    assert_eq!(vfs(&fs, PF).len(), 32);
    assert!(
        nvml.gpu_instances(0).unwrap().is_empty(),
        "the GPU instance did not survive the PF rebind"
    );
    assert!(nvml.mig_mode(0).unwrap().current, "MIG mode did");
}

#[test]
fn a_vgpu_type_that_cannot_be_created_fails_with_eio() {
    let h = host("hgx-h200-vgpu");
    let fs = h.sysfs();
    sriov_manage_enable(&fs, PF);
    let all = vfs(&fs, PF);
    write(&fs, &dev(&all[0], "nvidia/current_vgpu_type"), "1423"); // the whole 141C
    assert_eq!(
        write_err(&fs, &dev(&all[1], "nvidia/current_vgpu_type"), "1423"),
        EIO,
        "exhausted"
    );
    assert_eq!(
        write_err(&fs, &dev(&all[1], "nvidia/current_vgpu_type"), "1414"),
        EIO,
        "MIG-backed with MIG mode off"
    );
}

fn removal_errno(in_use: VgpuInUseErrno) -> i32 {
    let mut profile = Profile::builtin("hgx-h200").unwrap();
    for m in profile.models.values_mut() {
        if let Some(s) = m.sriov.as_mut() {
            s.vgpu_in_use = in_use;
        }
    }
    let h = SimHost::new(profile).unwrap();
    let fs = h.sysfs();
    let vf = vfs(&fs, PF)[0].clone();
    write(&fs, &dev(&vf, "nvidia/current_vgpu_type"), "1421");
    h.set_vfio_open(addr(&vf), true).unwrap();
    let errno = write_err(&fs, &dev(&vf, "nvidia/current_vgpu_type"), "0");
    assert_eq!(read(&fs, &dev(&vf, "nvidia/current_vgpu_type")), "1421");
    errno
}

#[test]
fn removing_a_vgpu_a_vm_holds_fails_with_the_profiles_errno() {
    assert_eq!(removal_errno(VgpuInUseErrno::Ebusy), EBUSY);
    assert_eq!(removal_errno(VgpuInUseErrno::Eperm), EPERM);
}

#[test]
fn the_vgpu_host_profile_is_hgx_h200_without_boot_vfs() {
    assert!(Profile::builtin_names().contains(&"hgx-h200-vgpu"));
    let p = Profile::builtin("hgx-h200-vgpu").unwrap();
    let base = Profile::builtin("hgx-h200").unwrap();
    assert_eq!(p.gpus, base.gpus);
    assert_eq!(p.models["h200"].sriov.as_ref().unwrap().boot_vfs, 0);
    assert_eq!(p.models["h200"].vgpu_types, base.models["h200"].vgpu_types);
}
