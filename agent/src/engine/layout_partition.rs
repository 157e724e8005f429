//! A layout's AMD partition: checking the asked compute and memory modes and VF count against
//! the GPU up front, and applying them under a partition intent so that a crash mid-way is
//! finished by the reconciler.
//!
//! Two drivers, two orders (docs/vendors.md, "AMD"):
//! - GIM (MxGPU host; AMD SMI answers VF counts): memory mode, then VF count, then compute mode,
//!   with no VF held by a guest anywhere in the XGMI hive. GIM never runs with 0 VFs, re-creates
//!   the VFs on a count change and resets the compute mode to the count's default, and applies
//!   partition modes to the whole hive.
//! - bare-metal amdgpu: no VFs at all; a compute mode applies at once, a memory (NPS) mode only
//!   when the driver next loads, for the whole hive: the layout reports it pending until then.

use ids::PciAddress;

use super::error::{EngineError, Result, chain};
use super::handle::Engine;
use super::layout::{AmdPartition, Layout};
use super::timed_host::TimedHost;
use super::vfs;

/// Whether the GPU is in the asked modes with the asked VFs enabled (any count, but some, when
/// the layout leaves it to the mode, on a GIM host).
fn partition_reached(
    now: &gpu::PartitionState,
    want: &AmdPartition,
    vfs: Option<gpu::VfCount>,
) -> bool {
    let vfs_reached = match vfs {
        Some(c) => want.vfs.is_none_or(|n| n == c.enabled) && c.enabled > 0,
        None => true,
    };
    now.compute == want.compute && now.memory == want.memory && vfs_reached
}

/// The pending reason for an NPS mode amdgpu has been asked for but applies only at its next
/// load.
fn nps_pending(gpu: PciAddress, mode: &str) -> String {
    format!(
        "GPU {gpu}: memory partition {mode} is requested and applies when the amdgpu driver \
         reloads, for every GPU of its XGMI hive (stop every process using them, then \
         `modprobe -r amdgpu && modprobe amdgpu`, or reboot)"
    )
}

/// The asked compute mode must be among those offered now.
fn check_compute(
    now: &gpu::PartitionState,
    want: &AmdPartition,
) -> std::result::Result<(), String> {
    if now.compute_available.contains(&want.compute) {
        return Ok(());
    }
    Err(format!(
        "the GPU offers compute modes {:?}, not {:?}",
        now.compute_available, want.compute
    ))
}

/// The GPU's AMD SMI, or an invalid-request error naming the layout.
fn amd_of<'a>(
    host: &'a TimedHost,
    dev: &vfio::PciDevice,
    l: &Layout,
) -> Result<&'a dyn gpu::AmdSmi> {
    host.amd()
        .filter(|_| dev.vendor == ids::PciVendorId::AMD)
        .ok_or_else(|| {
            EngineError::InvalidRequest(format!(
                "layout {}: GPU {} has no AMD SMI partition modes",
                l.name, dev.address
            ))
        })
}

impl Engine {
    /// Refuses a partition the GPU cannot take, before anything is touched.
    pub(super) fn check_partition(
        &self,
        dev: &vfio::PciDevice,
        l: &Layout,
        want: &AmdPartition,
    ) -> Result<()> {
        let gpu = dev.address;
        let bad = |why: String| EngineError::InvalidRequest(format!("layout {}: {why}", l.name));
        let amd = amd_of(self.host(), dev, l)?;
        let timeout = self.host().timeout();
        let now = amd.partition(gpu).map_err(|e| {
            EngineError::from_amd(
                format!("cannot read partitions of GPU {gpu}"),
                gpu,
                timeout,
                e,
            )
        })?;
        if !now.memory_available.contains(&want.memory) {
            return Err(bad(format!(
                "GPU {gpu} offers memory modes {:?}, not {:?}",
                now.memory_available, want.memory
            )));
        }
        let vf_slices: u32 = l
            .slices
            .iter()
            .filter(|e| e.slice_type.trim() == "vf")
            .map(|e| e.count)
            .sum();
        let Ok(count) = amd.num_vf(gpu) else {
            // Bare-metal amdgpu: partitions, no VFs.
            if want.vfs.is_some_and(|n| n > 0) || vf_slices > 0 {
                return Err(bad(format!(
                    "GPU {gpu} is on amdgpu, which enables no VFs on a host; AMD MxGPU VFs need \
                     AMD's GIM driver and its host AMD SMI library"
                )));
            }
            return check_compute(&now, want).map_err(bad);
        };
        let asked = want.vfs.unwrap_or(count.enabled.max(1));
        if asked == 0 {
            return Err(bad(format!(
                "GPU {gpu} is on GIM, which keeps at least one VF (unload gim for none)"
            )));
        }
        if asked > count.supported || vf_slices > asked {
            return Err(bad(format!(
                "GPU {gpu} supports at most {} VFs; {asked} VFs and {vf_slices} VF slices asked",
                count.supported
            )));
        }
        // GIM offers the compute modes of the current VF count; for another count its profile
        // table says, where the library gives it (else GIM refuses when the mode is set).
        if asked == count.enabled {
            return check_compute(&now, want).map_err(bad);
        }
        match now.compute_vf_counts.get(&want.compute) {
            Some(counts) if !counts.contains(&asked) => Err(bad(format!(
                "GPU {gpu} takes {counts:?} VFs in {}, not {asked}",
                want.compute
            ))),
            None if !now.compute_vf_counts.is_empty() => Err(bad(format!(
                "GPU {gpu} has no compute mode {:?}",
                want.compute
            ))),
            _ => Ok(()),
        }
    }

    /// Refuses partitions that would change GPUs the layouts do not cover: a memory mode (and,
    /// on GIM, a compute mode) applies to every GPU of an XGMI hive, so every GPU of the hive
    /// must be chosen with the same modes. `chosen` pairs each GPU with its layout's partition.
    pub(super) fn check_partition_hives(
        &self,
        chosen: &[(PciAddress, Option<&AmdPartition>)],
    ) -> Result<()> {
        let Some(amd) = self.host().amd() else {
            return Ok(());
        };
        let hive_of = |gpu: PciAddress| amd.xgmi_hive(gpu).ok().flatten();
        for (gpu, want) in chosen {
            let (Some(want), Some(hive)) = (want, hive_of(*gpu)) else {
                continue;
            };
            let gim = amd.num_vf(*gpu).is_ok();
            for (member, other) in chosen.iter().filter(|(m, _)| hive_of(*m) == Some(hive)) {
                let Ok(now) = amd.partition(*member) else {
                    continue;
                };
                let changes = now.memory != want.memory || (gim && now.compute != want.compute);
                let same = other.is_some_and(|o| {
                    o.memory == want.memory && (!gim || o.compute == want.compute)
                });
                if changes && !same {
                    return Err(EngineError::InvalidRequest(format!(
                        "GPU {gpu} and GPU {member} are in one XGMI hive, where a {} applies to \
                         every GPU: choose all of the hive's GPUs with the same modes",
                        if gim {
                            "partition change"
                        } else {
                            "memory partition"
                        }
                    )));
                }
            }
        }
        Ok(())
    }

    /// Brings the GPU to the partition modes and VF count; the slices follow. Called with the
    /// GPU lock held. The change runs under an intent opened before its first step and closed
    /// after its last: a crash (or a failure) mid-way leaves it open, and the reconciler
    /// finishes it before the agent reports ready. A memory mode amdgpu applies only at its
    /// next load closes the intent (nothing is left for vgpud to do) and is reported pending.
    pub(super) fn apply_partition(
        &self,
        gpu: PciAddress,
        want: &AmdPartition,
        pending: &mut Vec<String>,
        failed: &mut Vec<String>,
    ) -> Result<()> {
        let host = self.host();
        let Some(amd) = host.amd() else {
            failed.push(format!("GPU {gpu}: AMD SMI is not available"));
            return Ok(());
        };
        let now = match amd.partition(gpu) {
            Ok(p) => p,
            Err(e) => {
                let e = EngineError::from_amd(
                    format!("cannot read partitions of GPU {gpu}"),
                    gpu,
                    host.timeout(),
                    e,
                );
                failed.push(chain(&e));
                return Ok(());
            }
        };
        if partition_reached(&now, want, amd.num_vf(gpu).ok()) {
            return Ok(());
        }
        if !self.clear_gpu_for_partition(gpu, pending, failed)? {
            return Ok(());
        }
        let n = self.write(|d| d.open_partition_intent(gpu.into(), want.clone()))?;
        match self.partition_steps(gpu, want) {
            Ok(waiting) => {
                self.write(|d| d.intents.remove(&n))?;
                match waiting {
                    Some(why) => pending.push(why),
                    None => {
                        tracing::info!(%gpu, compute = %want.compute, memory = %want.memory, "partition changed");
                    }
                }
            }
            Err(e @ EngineError::Store(_)) => return Err(e),
            Err(e) => failed.push(chain(&e)),
        }
        Ok(())
    }

    /// The steps of a partition change, each only where the GPU still differs (see the module
    /// doc for the order per driver), each read back. Run by a layout under its intent, and by
    /// the reconciler to finish an intent a crash left open. `Some(reason)` when what is left
    /// waits for an amdgpu reload.
    pub(crate) fn partition_steps(
        &self,
        gpu: PciAddress,
        want: &AmdPartition,
    ) -> Result<Option<String>> {
        let host = self.host();
        let amd = host.amd().ok_or_else(|| {
            EngineError::Unsupported(format!("GPU {gpu}: AMD SMI is not available"))
        })?;
        let timeout = host.timeout();
        let amd_err = |what: String, e| EngineError::from_amd(what, gpu, timeout, e);
        let read = || {
            amd.partition(gpu)
                .map_err(|e| amd_err(format!("cannot read partitions of GPU {gpu}"), e))
        };
        let now = read()?;
        let count = amd.num_vf(gpu).ok();
        if partition_reached(&now, want, count) {
            return Ok(None);
        }
        if count.is_some() && vfs::in_use(host, gpu, &[])? {
            return Err(EngineError::Busy(format!(
                "GPU {gpu} has VFs in use outside vgpud; the partition change waits for them"
            )));
        }
        if now.memory != want.memory {
            amd.set_memory_partition(gpu, &want.memory).map_err(|e| {
                amd_err(
                    format!("cannot set memory partition {} on GPU {gpu}", want.memory),
                    e,
                )
            })?;
        }
        if let Some(count) = count {
            let asked = want.vfs.unwrap_or(count.enabled.max(1));
            if asked != count.enabled {
                amd.set_num_vf(gpu, asked)
                    .map_err(|e| amd_err(format!("cannot set {asked} VFs on GPU {gpu}"), e))?;
            }
        }
        if read()?.compute != want.compute {
            amd.set_compute_partition(gpu, &want.compute).map_err(|e| {
                amd_err(
                    format!("cannot set compute partition {} on GPU {gpu}", want.compute),
                    e,
                )
            })?;
        }
        self.partition_read_back(gpu, want, count.is_some())
    }

    /// Checks the GPU reached the asked modes and VF count. On amdgpu a memory mode still
    /// differing is the pending NPS request; anything else differing is an error.
    fn partition_read_back(
        &self,
        gpu: PciAddress,
        want: &AmdPartition,
        gim: bool,
    ) -> Result<Option<String>> {
        let host = self.host();
        let amd = host.amd().ok_or_else(|| {
            EngineError::Unsupported(format!("GPU {gpu}: AMD SMI is not available"))
        })?;
        let now = amd.partition(gpu).map_err(|e| {
            EngineError::from_amd(
                format!("cannot read partitions of GPU {gpu}"),
                gpu,
                host.timeout(),
                e,
            )
        })?;
        if now.compute != want.compute {
            return Err(EngineError::Unsupported(format!(
                "GPU {gpu} is in compute mode {} after {} was set",
                now.compute, want.compute
            )));
        }
        if gim {
            let enabled = host.vfs(gpu)?.len() as u32;
            if now.memory != want.memory || want.vfs.is_some_and(|n| n != enabled) {
                return Err(EngineError::NoCapacity(format!(
                    "GPU {gpu} is at {} with {enabled} VFs after {} with {:?} VFs was set",
                    now.memory, want.memory, want.vfs
                )));
            }
            return Ok(None);
        }
        Ok((now.memory != want.memory).then(|| nps_pending(gpu, &want.memory)))
    }

    /// Destroys the GPU's free owned slices so its VFs can go; false (with the reason) while an
    /// allocated slice or a VF someone else uses stands in the way.
    pub(super) fn clear_gpu_for_partition(
        &self,
        gpu: PciAddress,
        pending: &mut Vec<String>,
        failed: &mut Vec<String>,
    ) -> Result<bool> {
        let owned = self.owned_on(gpu);
        let allocated = self.read(|d| owned.iter().any(|s| d.holder(s.id).is_some()));
        for s in &owned {
            // An allocated slice blocks the change: keep the free ones until it can go too.
            if allocated && self.read(|d| d.holder(s.id).is_none()) {
                continue;
            }
            self.remove_surplus(s, pending, failed)?;
        }
        if !pending.is_empty() || !failed.is_empty() {
            pending.iter_mut().for_each(|r| {
                r.push_str("; the partition change waits for it");
            });
            return Ok(false);
        }
        if vfs::in_use(self.host(), gpu, &[])? {
            pending.push(format!(
                "GPU {gpu} has VFs in use outside vgpud; the partition change waits for them"
            ));
            return Ok(false);
        }
        Ok(true)
    }
}
