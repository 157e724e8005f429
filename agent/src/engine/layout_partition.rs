//! A layout's AMD partition: checking the asked compute and memory modes and VF count against
//! the GPU up front, and applying them under a partition intent (VFs off, memory mode, compute
//! mode, the asked VFs on and read back) so that a crash mid-way is finished by the reconciler.

use ids::PciAddress;

use super::error::{EngineError, Result, chain};
use super::handle::Engine;
use super::layout::{AmdPartition, Layout};
use super::vfs;

/// Most VFs a compute mode can carry, where the mode fixes it: one per compute partition. CPX
/// has one partition per XCD, which only the SR-IOV total bounds here.
fn mode_vf_limit(mode: &str) -> Option<u32> {
    match mode {
        "SPX" => Some(1),
        "DPX" => Some(2),
        "TPX" => Some(3),
        "QPX" => Some(4),
        _ => None,
    }
}

/// Whether the GPU is in the asked modes with the asked VFs enabled (any count, but some, when
/// the layout leaves it to the mode).
fn partition_reached(now: &gpu::PartitionState, want: &AmdPartition, enabled: u32) -> bool {
    now.compute == want.compute
        && now.memory == want.memory
        && want.vfs.is_none_or(|n| n == enabled)
        && (enabled > 0 || want.vfs == Some(0))
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
        let amd = self
            .host()
            .amd()
            .filter(|_| dev.vendor == ids::PciVendorId::AMD)
            .ok_or_else(|| bad(format!("GPU {gpu} has no AMD SMI partition modes")))?;
        let timeout = self.host().timeout();
        let now = amd.partition(gpu).map_err(|e| {
            EngineError::from_amd(
                format!("cannot read partitions of GPU {gpu}"),
                gpu,
                timeout,
                e,
            )
        })?;
        if !now.compute_available.contains(&want.compute) {
            return Err(bad(format!(
                "GPU {gpu} offers compute modes {:?}, not {:?}",
                now.compute_available, want.compute
            )));
        }
        if !now.memory_available.contains(&want.memory) {
            return Err(bad(format!(
                "GPU {gpu} offers memory modes {:?}, not {:?}",
                now.memory_available, want.memory
            )));
        }
        let total = dev.sriov.as_ref().map_or(0, |s| s.total_vfs);
        let mut limit = mode_vf_limit(&want.compute).unwrap_or(total).min(total);
        if now.compute == want.compute
            && let Ok(c) = amd.num_vf(gpu)
        {
            limit = limit.min(c.supported);
        }
        let vf_slices: u32 = l
            .slices
            .iter()
            .filter(|e| e.slice_type.trim() == "vf")
            .map(|e| e.count)
            .sum();
        let asked = want.vfs.unwrap_or(limit);
        if asked > limit || vf_slices > asked {
            return Err(bad(format!(
                "GPU {gpu} supports at most {limit} VFs in {}; {asked} VFs and {vf_slices} VF slices asked",
                want.compute
            )));
        }
        Ok(())
    }

    /// Brings the GPU to the partition modes and VF count; the slices follow. Called with the
    /// GPU lock held. The change runs under an intent opened before its first step and closed
    /// after its last: a crash (or a failure) mid-way leaves it open, and the reconciler
    /// finishes it before the agent reports ready.
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
        let enabled = host.vfs(gpu)?.len() as u32;
        if partition_reached(&now, want, enabled) {
            return Ok(());
        }
        if !self.clear_gpu_for_partition(gpu, pending, failed)? {
            return Ok(());
        }
        let n = self.write(|d| d.open_partition_intent(gpu.into(), want.clone()))?;
        match self.partition_steps(gpu, want) {
            Ok(()) => {
                self.write(|d| d.intents.remove(&n))?;
                tracing::info!(%gpu, compute = %want.compute, memory = %want.memory, "partition changed");
            }
            Err(e @ EngineError::Store(_)) => return Err(e),
            Err(e) => failed.push(chain(&e)),
        }
        Ok(())
    }

    /// The steps of a partition change, each only where the GPU still differs: VFs off, memory
    /// mode, compute mode, the asked VF count on (read back). Run by a layout under its intent,
    /// and by the reconciler to finish an intent a crash left open.
    pub(crate) fn partition_steps(&self, gpu: PciAddress, want: &AmdPartition) -> Result<()> {
        let host = self.host();
        let amd = host.amd().ok_or_else(|| {
            EngineError::Unsupported(format!("GPU {gpu}: AMD SMI is not available"))
        })?;
        let timeout = host.timeout();
        let amd_err = |what: String, e| EngineError::from_amd(what, gpu, timeout, e);
        let now = amd
            .partition(gpu)
            .map_err(|e| amd_err(format!("cannot read partitions of GPU {gpu}"), e))?;
        let enabled = host.vfs(gpu)?.len() as u32;
        if partition_reached(&now, want, enabled) {
            return Ok(());
        }
        if enabled > 0 {
            if vfs::in_use(host, gpu, &[])? {
                return Err(EngineError::Busy(format!(
                    "GPU {gpu} has VFs in use outside vgpud; the partition change waits for them"
                )));
            }
            vfs::set_count(host, gpu, 0).map_err(|e| {
                EngineError::host(
                    format!("cannot disable the VFs of GPU {gpu}"),
                    e.errno(),
                    Box::new(e),
                )
            })?;
        }
        if now.memory != want.memory {
            amd.set_memory_partition(gpu, &want.memory).map_err(|e| {
                amd_err(
                    format!("cannot set memory partition {} on GPU {gpu}", want.memory),
                    e,
                )
            })?;
        }
        if now.compute != want.compute {
            amd.set_compute_partition(gpu, &want.compute).map_err(|e| {
                amd_err(
                    format!("cannot set compute partition {} on GPU {gpu}", want.compute),
                    e,
                )
            })?;
        }
        let supported = amd
            .num_vf(gpu)
            .map_err(|e| amd_err(format!("cannot read VFs of GPU {gpu}"), e))?
            .supported;
        let asked = want.vfs.unwrap_or(supported);
        if asked > supported {
            return Err(EngineError::Unsupported(format!(
                "GPU {gpu} supports {supported} VFs in {}, {asked} asked",
                want.compute
            )));
        }
        if asked > 0 {
            let got = vfs::set_count(host, gpu, asked).map_err(|e| {
                EngineError::host(
                    format!("cannot enable {asked} VFs on GPU {gpu}"),
                    e.errno(),
                    Box::new(e),
                )
            })?;
            if got < asked {
                return Err(EngineError::NoCapacity(format!(
                    "GPU {gpu} enabled {got} of the {asked} VFs asked"
                )));
            }
        }
        Ok(())
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
