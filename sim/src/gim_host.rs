//! The `mi300x-gim` profile: the MI300X platform of `mi300x.toml` as an AMD MxGPU host.
//!
//! GIM (amd/MxGPU-Virtualization) owns every PF instead of amdgpu, and creates VFs itself when it
//! loads (its `vf_num` parameter, default 1). The firmware these hosts ship with limits an MI300X
//! to one VF (`sriov_totalvfs` 1: GIM logs "VF number 8 to be enabled exceeds the vf limit 1",
//! amd/MxGPU-Virtualization issue 13; the README's "Number of VFs per GPU" is 1 for MI300X; 8 VFs
//! in CPX need newer firmware, release 8.5.0.K). With one VF the compute modes offered are SPX
//! and CPX (libgv's MI300X profile table). Derived from `mi300x` so the hardware never differs.

use crate::profile::Profile;

/// The derived profile's name.
pub(crate) const NAME: &str = "mi300x-gim";
/// The profile it is derived from.
pub(crate) const BASE: &str = "mi300x";

/// `mi300x` with GIM on every PF and one VF per GPU.
pub(crate) fn derive(mut p: Profile) -> Profile {
    p.name = NAME.to_owned();
    p.hostname = "mi300x-gim-sim".to_owned();
    p.description = "AMD MI300X MxGPU host: 8x MI300X 192GB in one XGMI hive on GIM, one SR-IOV \
                     VF per GPU (firmware limit), 2 NUMA nodes"
        .to_owned();
    for model in p.models.values_mut() {
        if model.amd.is_none() {
            continue;
        }
        model.driver = crate::state::GIM.to_owned();
        if let Some(s) = model.sriov.as_mut() {
            s.total_vfs = 1;
            s.boot_vfs = 1;
        }
    }
    p
}
