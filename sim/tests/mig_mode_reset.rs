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
