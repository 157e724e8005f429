//! [`GimSmiLibrary`]: the [`AmdSmi`] trait over GIM's host `libamdsmi.so`, loaded at run time.
//!
//! On an MxGPU host AMD's GIM driver owns the physical functions, and its host SMI library
//! (`smi-lib/` of AMD's MxGPU-Virtualization repository) is the only way to change VF counts
//! and partition modes with a status to show for it: the kernel has no `sriov_numvfs` for GIM,
//! and GIM's own sysfs store handlers report success even when the change failed.
//!
//! What the library does, from its source (`smi-lib/src/amdsmi.c`, GIM's `smi_drv` handlers and
//! libgv's `amdgv_api_internal.c` / `amdgv_gpumon.c`):
//! - `amdsmi_set_num_vf` refuses 0 and counts above the PF's TotalVFs (`INVAL`) and any change
//!   while a VF runs a guest (`BUSY`). It re-creates the VF PCI functions.
//! - Compute modes are *profiles*, and the index `amdsmi_set_gpu_accelerator_partition_profile`
//!   takes is a position in the list of profiles valid for the current VF count (1 VF: SPX,
//!   CPX; 8 VFs: CPX only on MI300X). So the index is always looked up in the list just read,
//!   by profile type, never assumed.
//! - Both partition changes apply to every GPU of the XGMI hive and are refused (`BUSY`) while
//!   a VF of the hive is assigned; a memory mode change resets the GPUs.
//! - There is no hive id; [`GimSmiLibrary::xgmi_hive`] derives one from the XGMI links.

mod ffi;
mod layout;
mod modes;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use ids::PciAddress;

use crate::amd::{AmdError, AmdGpuInfo, AmdResult, AmdSmi, AmdStatus, PartitionState, VfCount};
use crate::amd_real::decode_bdf;

/// GIM's host AMD SMI as loaded from `libamdsmi.so`. Calls are serialised: the library keeps
/// one device file and a handle table for the process.
pub struct GimSmiLibrary {
    lib: Mutex<ffi::Library>,
}

impl fmt::Debug for GimSmiLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GimSmiLibrary").finish_non_exhaustive()
    }
}

impl GimSmiLibrary {
    /// Loads `libamdsmi.so` (library path, then `/usr/local/lib`) and calls `amdsmi_init` for
    /// AMD GPUs. No library: `FAIL_LOAD_MODULE`; one without the VF calls (ROCm's, say):
    /// `FAIL_LOAD_SYMBOL`; GIM not loaded: the library's `DRIVER_NOT_LOADED`.
    pub fn load() -> AmdResult<Self> {
        Ok(Self {
            lib: Mutex::new(ffi::Library::open()?),
        })
    }

    /// Like [`GimSmiLibrary::load`], with the library at `path`.
    pub fn load_from(path: impl AsRef<Path>) -> AmdResult<Self> {
        Ok(Self {
            lib: Mutex::new(ffi::Library::open_path(path.as_ref())?),
        })
    }

    fn lock(&self) -> MutexGuard<'_, ffi::Library> {
        // A panic elsewhere cannot leave the library half-updated: each step is one FFI call.
        self.lib
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn with_processor<T>(
        &self,
        gpu: PciAddress,
        f: impl FnOnce(&ffi::Processor<'_>) -> AmdResult<T>,
    ) -> AmdResult<T> {
        let lib = self.lock();
        for processor in lib.processors()? {
            if processor.bdf().ok().and_then(decode_bdf) == Some(gpu) {
                return f(&processor);
            }
        }
        Err(AmdError::new(
            "amdsmi_get_gpu_device_bdf",
            AmdStatus::NOT_FOUND,
        ))
    }
}

/// One GPU's details; only the PCI address is required.
fn gpu_info(processor: &ffi::Processor<'_>) -> AmdResult<Option<AmdGpuInfo>> {
    let raw = processor.bdf()?;
    let Some(pci_address) = decode_bdf(raw) else {
        tracing::warn!(
            bdf = raw,
            "GIM's AMD SMI reported a PCI address that is not one"
        );
        return Ok(None);
    };
    let uuid = processor.uuid().ok().filter(|u| !u.is_empty());
    let name = processor
        .market_name()
        .ok()
        .filter(|n| !n.is_empty() && n != "N/A");
    let memory_total_mib = processor.vram_mb().unwrap_or_else(|e| {
        tracing::debug!(gpu = %pci_address, error = %e, "VRAM size unknown");
        0
    });
    Ok(Some(AmdGpuInfo {
        pci_address,
        uuid,
        name: name.unwrap_or_else(|| "AMD GPU".to_owned()),
        memory_total_mib,
    }))
}

/// The modes of the profiles valid now, in the library's order, each once.
fn available_compute(config: &layout::ProfileConfig) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for profile in valid_profiles(config) {
        match modes::compute_name(profile.profile_type) {
            Some(name) if !out.iter().any(|m| m == name) => out.push(name.to_owned()),
            Some(_) => {}
            None => tracing::debug!(
                profile_type = profile.profile_type,
                "unknown accelerator profile type left out"
            ),
        }
    }
    out
}

/// The VF counts each compute mode takes, from the unfiltered profile table (`vf_mode` bit N:
/// N VFs). Empty when the library lacks the call or answers nothing usable: the engine then
/// leaves the check to GIM's refusal.
fn vf_counts_per_mode(p: &ffi::Processor<'_>) -> BTreeMap<String, Vec<u32>> {
    let config = match p.profile_config_global() {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(error = %e, "GIM's unfiltered profile table unavailable");
            return BTreeMap::new();
        }
    };
    let count = (config.num_profiles as usize).min(layout::MAX_PROFILES);
    let mut out: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for g in &config.profiles[..count] {
        let Some(name) = modes::compute_name(g.profile.profile_type) else {
            continue;
        };
        let counts = out.entry(name.to_owned()).or_default();
        counts.extend((1..32u32).filter(|n| g.vf_mode & (1 << n) != 0));
        counts.sort_unstable();
        counts.dedup();
    }
    out
}

/// The filled part of the profile array; the count is the library's word, the array fixed.
fn valid_profiles(config: &layout::ProfileConfig) -> &[layout::Profile] {
    let count = (config.num_profiles as usize).min(layout::MAX_PROFILES);
    &config.profiles[..count]
}

fn unexpected(call: &'static str, what: &str, value: u32) -> AmdError {
    tracing::warn!(call, value, "GIM's AMD SMI returned an unknown {what}");
    AmdError::new(call, AmdStatus::UNEXPECTED_DATA)
}

fn partition_state(p: &ffi::Processor<'_>) -> AmdResult<PartitionState> {
    let current = p.current_profile()?;
    let compute = modes::compute_name(current.profile_type).ok_or_else(|| {
        unexpected(
            "amdsmi_get_gpu_accelerator_partition_profile",
            "profile type",
            current.profile_type,
        )
    })?;
    let config = p.profile_config()?;
    let memory_config = p.memory_config()?;
    let memory = modes::memory_name(memory_config.mp_mode).ok_or_else(|| {
        unexpected(
            "amdsmi_get_gpu_memory_partition_config",
            "memory partition mode",
            memory_config.mp_mode,
        )
    })?;
    Ok(PartitionState {
        compute: compute.to_owned(),
        compute_available: available_compute(&config),
        memory: memory.to_owned(),
        memory_available: modes::caps_names(memory_config.nps_caps),
        compute_vf_counts: vf_counts_per_mode(p),
    })
}

fn set_compute(p: &ffi::Processor<'_>, gpu: PciAddress, mode: &str) -> AmdResult<()> {
    const CALL: &str = "amdsmi_set_gpu_accelerator_partition_profile";
    let Some(wanted) = modes::compute_type(mode) else {
        return Err(AmdError::new(CALL, AmdStatus::INVAL));
    };
    let config = p.profile_config()?;
    // The first profile of the type: a GPU lists one per mode (MI308X's CPX has 4 partitions,
    // but still one CPX profile).
    let Some(profile) = valid_profiles(&config)
        .iter()
        .find(|p| p.profile_type == wanted)
    else {
        tracing::debug!(%gpu, mode, available = ?available_compute(&config),
            "compute mode not valid for the current VF count");
        return Err(AmdError::new(CALL, AmdStatus::INVAL));
    };
    p.set_profile(profile.profile_index)
}

fn set_memory(p: &ffi::Processor<'_>, gpu: PciAddress, mode: &str) -> AmdResult<()> {
    const CALL: &str = "amdsmi_set_gpu_memory_partition_mode";
    let Some(wanted) = modes::memory_type(mode) else {
        return Err(AmdError::new(CALL, AmdStatus::INVAL));
    };
    let config = p.memory_config()?;
    if !modes::caps_allow(config.nps_caps, wanted) {
        tracing::debug!(%gpu, mode, caps = config.nps_caps, "memory mode not offered");
        return Err(AmdError::new(CALL, AmdStatus::INVAL));
    }
    p.set_memory(wanted)
}

/// The hive id: the lowest raw `amdsmi_bdf_t` of the GPU and its XGMI peers, plus one (so it
/// is never 0, which means "no hive" elsewhere). Every member computes the same value. A peer
/// whose address cannot be read fails the call: a guess from part of the hive could give two
/// members different ids.
fn derived_hive(p: &ffi::Processor<'_>) -> AmdResult<Option<u64>> {
    let peers = p.xgmi_peers()?;
    if peers.is_empty() {
        return Ok(None);
    }
    let mut lowest = p.bdf()?;
    for peer in &peers {
        lowest = lowest.min(peer.bdf()?);
    }
    Ok(Some(lowest.saturating_add(1)))
}

impl AmdSmi for GimSmiLibrary {
    fn gpus(&self) -> AmdResult<Vec<AmdGpuInfo>> {
        let lib = self.lock();
        let mut out = Vec::new();
        for processor in lib.processors()? {
            out.extend(gpu_info(&processor)?);
        }
        out.sort_by_key(|g| g.pci_address);
        Ok(out)
    }

    /// `supported` is the PF's TotalVFs (firmware-defined; 1 on much shipped MI300X firmware).
    fn num_vf(&self, gpu: PciAddress) -> AmdResult<VfCount> {
        self.with_processor(gpu, |p| {
            let (enabled, supported) = p.num_vf()?;
            Ok(VfCount { enabled, supported })
        })
    }

    /// `INVAL` for 0 or more than TotalVFs, `BUSY` while a VF runs a guest. Afterwards the VF
    /// PCI functions are new ones, and the compute mode is the new count's default.
    fn set_num_vf(&self, gpu: PciAddress, count: u32) -> AmdResult<()> {
        self.with_processor(gpu, |p| p.set_num_vf(count))
    }

    /// Compute: the current profile's type; available: the profiles valid for the current VF
    /// count. Memory: the current mode and the ones the GPU's caps allow.
    fn partition(&self, gpu: PciAddress) -> AmdResult<PartitionState> {
        self.with_processor(gpu, partition_state)
    }

    /// The mode by name (any case) through the profile of that type in the current list;
    /// `INVAL` without calling the library when the list has none. Hive-wide under GIM.
    fn set_compute_partition(&self, gpu: PciAddress, mode: &str) -> AmdResult<()> {
        self.with_processor(gpu, |p| set_compute(p, gpu, mode))
    }

    /// `INVAL` without calling the library for a mode the GPU's caps lack. Under GIM the
    /// change applies to the whole hive and resets its GPUs (queued: the call returns first).
    fn set_memory_partition(&self, gpu: PciAddress, mode: &str) -> AmdResult<()> {
        self.with_processor(gpu, |p| set_memory(p, gpu, mode))
    }

    /// Derived from the XGMI links: the lowest `amdsmi_bdf_t` value among the GPU and its XGMI
    /// peers, plus one (never 0), the same for every member; `None` without an XGMI peer.
    fn xgmi_hive(&self, gpu: PciAddress) -> AmdResult<Option<u64>> {
        self.with_processor(gpu, derived_hive)
    }
}

#[cfg(test)]
pub(crate) mod tests;
