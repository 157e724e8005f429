//! MIG mode on an NVIDIA vGPU host (issue 13, fact 4): `nvmlDeviceSetMigMode` reports whether
//! the mode took effect in its activation status; a change is refused while the GPU has VFs and
//! waits for a GPU reset, which the simulator's `reset_gpu` (`vgpud sim reset-gpu`) stands in
//! for, as does a reboot.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use common::*;
use gpu::{MigActivation, NvmlCode};
use sim::SimError;

const PF: &str = "0000:18:00.0";

fn mode(h: &sim::SimHost) -> (bool, bool) {
    let m = h.nvml().mig_mode(0).unwrap();
    (m.current, m.pending)
}

#[test]
fn the_activation_status_is_returned() {
    // Bare-metal rule (hgx-h200): an idle GPU changes at once; a held one stays pending.
    let h = host("hgx-h200");
    let nvml = h.nvml();
    assert_eq!(nvml.set_mig_mode(0, true).unwrap(), MigActivation::Applied);
    assert_eq!(nvml.set_mig_mode(0, false).unwrap(), MigActivation::Applied);
    h.set_gpu_clients(addr(PF), true).unwrap();
    assert_eq!(nvml.set_mig_mode(0, true).unwrap(), MigActivation::InUse);
    assert_eq!(mode(&h), (false, true));
    // A vGPU host: pending until a reset, with NVML's RESET_REQUIRED.
    let v = host("hgx-h200-vgpu");
    let got = v.nvml().set_mig_mode(0, true).unwrap();
    assert_eq!(got, MigActivation::PendingReset);
    assert_eq!(got.code(), NvmlCode::RESET_REQUIRED);
    assert_eq!(mode(&v), (false, true));
    // Asking for the current mode withdraws the pending change.
    assert_eq!(
        v.nvml().set_mig_mode(0, false).unwrap(),
        MigActivation::Applied
    );
    assert_eq!(mode(&v), (false, false));
}

#[test]
fn a_change_is_refused_while_the_gpu_has_vfs() {
    let h = host("hgx-h200-vgpu");
    let fs = h.sysfs();
    sriov_manage_enable(&fs, PF);
    assert_eq!(vfs(&fs, PF).len(), 32);
    let err = h.nvml().set_mig_mode(0, true).unwrap_err();
    assert_eq!(err.code, NvmlCode::IN_USE);
    assert_eq!(mode(&h), (false, false), "a refused call changes nothing");
}

#[test]
fn a_pending_change_takes_effect_at_a_gpu_reset_or_a_reboot() {
    let h = host("hgx-h200-vgpu");
    h.nvml().set_mig_mode(0, true).unwrap();
    assert_eq!(mode(&h), (false, true));
    h.reset_gpu(addr(PF)).unwrap();
    assert_eq!(mode(&h), (true, true));
    h.nvml().set_mig_mode(0, false).unwrap();
    assert_eq!(mode(&h), (true, false));
    h.reboot().unwrap();
    assert_eq!(mode(&h), (false, false));
}

#[test]
fn a_reset_of_a_gpu_in_use_is_refused() {
    let h = host("hgx-h200-vgpu");
    let fs = h.sysfs();
    sriov_manage_enable(&fs, PF);
    let vf = vfs(&fs, PF)[0].clone();
    write(&fs, &dev(&vf, "nvidia/current_vgpu_type"), "1421");
    let refused = |h: &sim::SimHost| match h.reset_gpu(addr(PF)).unwrap_err() {
        SimError::GpuState { state, .. } => state,
        e => panic!("{e}"),
    };
    assert!(refused(&h).contains("vGPU"), "{}", refused(&h));
    h.set_vfio_open(addr(&vf), true).unwrap();
    assert!(refused(&h).contains("VM"), "{}", refused(&h));
    h.set_vfio_open(addr(&vf), false).unwrap();
    write(&fs, &dev(&vf, "nvidia/current_vgpu_type"), "0");
    h.reset_gpu(addr(PF)).unwrap();
    // Processes on the GPU hold it too.
    h.set_gpu_clients(addr(PF), true).unwrap();
    assert!(refused(&h).contains("client"), "{}", refused(&h));
}

#[test]
fn the_sysfs_reset_attribute_resets_like_the_kernel_and_refuses_a_gpu_in_use() {
    let h = host("hgx-h200-vgpu");
    let fs = h.sysfs();
    let reset = dev(PF, "reset");
    // reset_store (drivers/pci/pci-sysfs.c): only "1" resets; the attribute is write-only.
    assert_eq!(write_err(&fs, &reset, "2"), libc::EINVAL);
    assert_eq!(read_err(&fs, &reset), libc::EACCES);
    // A VM holding a VF's VFIO fd, and processes on the GPU, keep the reset out.
    sriov_manage_enable(&fs, PF);
    let vf = vfs(&fs, PF)[0].clone();
    write(&fs, &dev(&vf, "nvidia/current_vgpu_type"), "1421");
    h.set_vfio_open(addr(&vf), true).unwrap();
    assert_eq!(write_err(&fs, &reset, "1"), libc::EBUSY);
    h.set_vfio_open(addr(&vf), false).unwrap();
    assert_eq!(write_err(&fs, &reset, "1"), libc::EBUSY, "a vGPU on a VF");
    write(&fs, &dev(&vf, "nvidia/current_vgpu_type"), "0");
    h.set_gpu_clients(addr(PF), true).unwrap();
    assert_eq!(write_err(&fs, &reset, "1"), libc::EBUSY);
    h.set_gpu_clients(addr(PF), false).unwrap();
    // The reset: pending retirements are retired and volatile ECC counts restart; a remap
    // failure stays.
    let mut signals = h.nvml().health_signals(0).unwrap();
    signals.ecc_dbe_volatile = Some(3);
    signals.retired_pending = Some(true);
    signals.remap_failure = Some(true);
    h.set_health_signals(addr(PF), signals).unwrap();
    write(&fs, &reset, "1");
    let after = h.nvml().health_signals(0).unwrap();
    assert_eq!(after.ecc_dbe_volatile, Some(0));
    assert_eq!(after.retired_pending, Some(false));
    assert_eq!(after.remap_failure, Some(true));
}
