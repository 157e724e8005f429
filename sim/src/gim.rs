//! AMD's MxGPU host driver, GIM, as its host AMD SMI library (`libamdsmi.so` from
//! amd/MxGPU-Virtualization `smi-lib`) and its PF sysfs attributes present it.
//!
//! Sources, all amd/MxGPU-Virtualization: `libgv/core/amdgv_api_internal.c`
//! (`amdgv_int_set_vf_number`), `libgv/core/amdgv_gpumon.c` (partition changes, the default mode
//! per VF count), the MI300X profile table in libgv's mi300 gpumon (`support_vf_num` per
//! profile), `gim/gim_shim/sysfs/gim_monitor.c` (the PF's `memory_partition_mode`), and the
//! SMI ioctl handlers' status mapping (`smi_convert_ret_value`).
//! - VF count: 0 is refused (EINVAL) and so is more than the firmware's TotalVFs or a count no
//!   compute mode takes; EBUSY while a guest holds a VF. A change tears the VFs down and makes
//!   new ones (SR-IOV off and on again), and resets the compute mode to the count's default
//!   (1 VF: SPX, 2: DPX, 4: QPX, 8: CPX, the first mode of the profile that allows the count).
//! - Partition modes: the compute modes offered are those whose profile allows the current VF
//!   count (the library's "filtered" profile list); a change applies to every GPU of the XGMI
//!   hive and is refused (EBUSY) while any VF of the hive is held by a guest; asking for the
//!   current mode succeeds. A memory (NPS) change resets the GPUs and applies at once: no driver
//!   reload under GIM.

use ids::PciAddress;
use libc::{EBUSY, EINVAL, ENODEV, ENOENT};

use crate::kernel::{self, Errno, PartitionAxis};
use crate::profile::AmdSpec;
use crate::state::{GIM, Hw, State};

/// Whether GIM owns the PF.
pub(crate) fn on_gim(state: &State, pf: PciAddress) -> bool {
    state.pci.get(&pf).and_then(|p| p.driver.as_deref()) == Some(GIM)
}

fn amd_spec(state: &State, pf: PciAddress) -> Result<&AmdSpec, Errno> {
    let (_, model) = state.gpu(pf).ok_or(ENODEV)?;
    model.amd.as_ref().ok_or(ENODEV)
}

/// The compute modes whose profile allows `vfs` VFs, in the profile's order.
pub(crate) fn modes_for(amd: &AmdSpec, vfs: u32) -> Vec<String> {
    amd.compute_modes
        .iter()
        .filter(|m| amd.vfs_per_mode.get(*m).is_some_and(|c| c.contains(&vfs)))
        .cloned()
        .collect()
}

/// The compute modes offered now: those the current VF count allows.
pub(crate) fn compute_available(state: &State, pf: PciAddress) -> Result<Vec<String>, Errno> {
    let amd = amd_spec(state, pf)?;
    Ok(modes_for(amd, state.vfs_of(pf).len() as u32))
}

/// `amdsmi_set_num_vf` on a PF bound to GIM.
pub(crate) fn set_num_vfs(
    state: &mut State,
    hw: &Hw,
    pf: PciAddress,
    n: u32,
    partial: Option<u32>,
) -> Result<(), Errno> {
    if !on_gim(state, pf) {
        return Err(ENODEV);
    }
    let total = state.profile.sriov_of(pf).ok_or(ENOENT)?.total_vfs;
    let default_mode = modes_for(amd_spec(state, pf)?, n).into_iter().next();
    if n == 0 || n > total || default_mode.is_none() {
        return Err(EINVAL);
    }
    if n == state.vfs_of(pf).len() as u32 {
        return Ok(());
    }
    if state.vfs_of(pf).iter().any(|(_, v)| v.open) {
        return Err(EBUSY);
    }
    kernel::remove_vfs(state, pf);
    if let Some(g) = state.gpus.get_mut(&pf) {
        g.compute_partition = default_mode;
    }
    kernel::enable_vfs(state, hw, pf, partial.map_or(n, |p| p.min(n)))
}

/// `amdsmi_set_gpu_accelerator_partition_profile` / `amdsmi_set_gpu_memory_partition_mode` on
/// a PF bound to GIM, by mode name.
pub(crate) fn set_partition(
    state: &mut State,
    pf: PciAddress,
    axis: PartitionAxis,
    mode: &str,
) -> Result<(), Errno> {
    if !on_gim(state, pf) {
        return Err(ENODEV);
    }
    let mode = mode.trim().to_ascii_uppercase();
    let offered = match axis {
        PartitionAxis::Compute => compute_available(state, pf)?,
        PartitionAxis::Memory => amd_spec(state, pf)?.memory_modes.clone(),
    };
    if !offered.contains(&mode) {
        return Err(EINVAL);
    }
    let hive = state.hive_of(pf);
    let current = |st: &State, gpu: &PciAddress| {
        let g = st.gpus.get(gpu);
        match axis {
            PartitionAxis::Compute => g.and_then(|g| g.compute_partition.clone()),
            PartitionAxis::Memory => g.and_then(|g| g.memory_partition.clone()),
        }
    };
    if hive
        .iter()
        .all(|g| current(state, g).as_deref() == Some(&mode))
    {
        return Ok(());
    }
    let held = |gpu: &PciAddress| state.vfs_of(*gpu).iter().any(|(_, v)| v.open);
    if hive.iter().any(held) {
        return Err(EBUSY);
    }
    for gpu in hive
        .iter()
        .filter(|g| on_gim(state, **g))
        .copied()
        .collect::<Vec<_>>()
    {
        if let Some(g) = state.gpus.get_mut(&gpu) {
            match axis {
                PartitionAxis::Compute => g.compute_partition = Some(mode.clone()),
                PartitionAxis::Memory => g.memory_partition = Some(mode.clone()),
            }
        }
    }
    Ok(())
}

/// A write to the PF's `memory_partition_mode`: GIM's store handler reports success even when
/// the change is refused (only a kernel log line says so), so the write never fails here either.
pub(crate) fn write_memory_partition_mode(
    state: &mut State,
    pf: PciAddress,
    data: &[u8],
) -> Result<(), Errno> {
    let mode = kernel::text(data)?.to_owned();
    let _refused = set_partition(state, pf, PartitionAxis::Memory, &mode);
    Ok(())
}

/// After GIM loads with `vf_num` VFs: a saved compute mode the count does not allow falls back
/// to the count's default (GIM resets saved partition settings when `vf_num` changes,
/// gim/gim_shim/gim_config.c).
pub(crate) fn settle_compute_mode(state: &mut State, pf: PciAddress) {
    if !on_gim(state, pf) {
        return;
    }
    let Ok(modes) = compute_available(state, pf) else {
        return;
    };
    if let Some(g) = state.gpus.get_mut(&pf)
        && !g
            .compute_partition
            .as_ref()
            .is_some_and(|m| modes.contains(m))
    {
        g.compute_partition = modes.into_iter().next();
    }
}
