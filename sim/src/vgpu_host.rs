//! The `hgx-h200-vgpu` profile: the HGX H200 of `hgx-h200.toml` as a freshly installed NVIDIA
//! vGPU host, before anything enabled its VFs.
//!
//! `hgx-h200` models a host whose boot-time service already ran NVIDIA's `sriov-manage -e ALL`
//! (32 VFs per GPU on `nvidia`). On this one no such service runs: the VFs appear only when
//! something runs the `sriov-manage` sequence (`docs/sysfs.md`, "NVIDIA SR-IOV"), which is what
//! vgpud does when a layout or a slice needs them. It is derived from `hgx-h200` rather than
//! copied so that the two never disagree on the hardware.

use crate::profile::Profile;

/// The derived profile's name.
pub(crate) const NAME: &str = "hgx-h200-vgpu";
/// The profile it is derived from.
pub(crate) const BASE: &str = "hgx-h200";

/// `hgx-h200` without the boot-time `sriov-manage -e ALL`.
pub(crate) fn derive(mut p: Profile) -> Profile {
    p.name = NAME.to_owned();
    p.hostname = "hgx-h200-vgpu-sim".to_owned();
    p.description = "HGX H200 vGPU host: 8x H200 141GB, vGPU host driver installed, SR-IOV VFs \
                     off until enabled through the sriov-manage sequence, MIG capable (disabled)"
        .to_owned();
    for model in p.models.values_mut() {
        if let Some(s) = model.sriov.as_mut() {
            s.boot_vfs = 0;
        }
        // A vGPU host's MIG mode changes wait for VFs off and a GPU reset (issue 13, fact 4).
        model.mig_mode_needs_reset = model.mig.is_some() && !model.vgpu_types.is_empty();
    }
    p
}
