//! Enabling and disabling a GPU's SR-IOV VFs for the VF-based backends.
//!
//! On AMD GPUs only GIM's host AMD SMI sets the count (neither amdgpu nor GIM has
//! `sriov_configure`), never to 0.
//! On NVIDIA GPUs `nvidia.ko` cannot configure SR-IOV through `sriov_numvfs`: the VFs go on and
//! off all together through NVIDIA's sequence (`sriov-manage`, or the same steps through sysfs;
//! [`vfio::set_nvidia_vfs`]), which rebinds the PF and so destroys every MIG GPU instance on the
//! GPU; [`Engine::enable_vfs`] makes that loss one explicit, checked step. Otherwise
//! `sriov_numvfs` is written. Either way the count is read back: the kernel may enable fewer VFs
//! than asked and still report success.

use ids::{PciAddress, PciVendorId};

use super::error::{EngineError, Result, chain};
use super::handle::Engine;
use super::model::{Identity, SliceId};
use super::state::OwnedSlice;
use super::timed_host::TimedHost;

/// AMD SMI, when it answers for this GPU.
fn amd_for<'a>(host: &'a TimedHost, dev: &vfio::PciDevice) -> Option<&'a dyn gpu::AmdSmi> {
    if dev.vendor != PciVendorId::AMD {
        return None;
    }
    let amd = host.amd()?;
    amd.num_vf(dev.address).ok().map(|_| amd)
}

/// Whether vgpud can enable VFs on `gpu`: on an AMD GPU only GIM's host AMD SMI makes them
/// (bare-metal amdgpu has no `sriov_configure`), so one without it offers no VF slices.
pub(crate) fn makes_vfs(host: &TimedHost, gpu: PciAddress) -> bool {
    host.gpu(gpu)
        .is_ok_and(|dev| dev.vendor != PciVendorId::AMD || amd_for(host, &dev).is_some())
}

/// How many VFs to enable: what the AMD partition mode supports, else `sriov_totalvfs`.
pub(crate) fn target_count(host: &TimedHost, dev: &vfio::PciDevice) -> u32 {
    if let Some(amd) = amd_for(host, dev)
        && let Ok(c) = amd.num_vf(dev.address)
        && c.supported > 0
    {
        return c.supported;
    }
    dev.sriov.as_ref().map_or(0, |s| s.total_vfs)
}

/// Sets the VF count and returns how many the kernel really enabled. On an NVIDIA GPU any
/// non-zero count enables them all (the only way its driver has). On an AMD GPU only GIM's host
/// AMD SMI can, never to 0 (GIM keeps at least one VF); amdgpu makes none.
pub(crate) fn set_count(host: &TimedHost, gpu: PciAddress, count: u32) -> Result<u32> {
    let dev = host.gpu(gpu)?;
    if dev.vendor == PciVendorId::AMD {
        return set_amd(host, &dev, count);
    }
    if TimedHost::is_nvidia(&dev) {
        return set_nvidia(host, gpu, count > 0);
    }
    vfio::set_num_vfs(host.fs(), gpu, count)
        .map_err(|e| EngineError::from_vfio(format!("cannot set {count} VFs on GPU {gpu}"), e))
}

/// An AMD GPU's VF count through GIM's host AMD SMI, read back.
fn set_amd(host: &TimedHost, dev: &vfio::PciDevice, count: u32) -> Result<u32> {
    let gpu = dev.address;
    let Some(amd) = amd_for(host, dev) else {
        return Err(EngineError::Unsupported(format!(
            "GPU {gpu}: AMD VFs are made by AMD's MxGPU driver GIM through its host AMD SMI \
             library (libamdsmi.so); the GPU is not on GIM or the library is missing"
        )));
    };
    if count == 0 {
        return Err(EngineError::Unsupported(format!(
            "GPU {gpu} is on GIM, which keeps at least one VF (unload gim for none)"
        )));
    }
    let timeout = host.timeout();
    amd.set_num_vf(gpu, count).map_err(|e| {
        EngineError::from_amd(
            format!("cannot set {count} VFs on GPU {gpu}"),
            gpu,
            timeout,
            e,
        )
    })?;
    amd.num_vf(gpu).map(|c| c.enabled).map_err(|e| {
        EngineError::from_amd(format!("cannot read VFs of GPU {gpu}"), gpu, timeout, e)
    })
}

/// NVIDIA's sequence; its route and result are logged (it rebinds the GPU's PF).
fn set_nvidia(host: &TimedHost, gpu: PciAddress, enable: bool) -> Result<u32> {
    let what = if enable { "enable" } else { "disable" };
    let runner = vfio::SystemRunner::default();
    match vfio::set_nvidia_vfs(host.fs(), &runner, gpu, enable) {
        Ok(out) => {
            tracing::info!(%gpu, route = ?out.route, vfs = out.num_vfs, "NVIDIA SR-IOV: VFs {what}d");
            Ok(out.num_vfs)
        }
        Err(e @ vfio::VfioError::UnbindLockRefused(_)) => Err(EngineError::Busy(format!(
            "cannot {what} the VFs of GPU {gpu}: {e}"
        ))),
        Err(e) => Err(EngineError::from_vfio(
            format!("cannot {what} the VFs of GPU {gpu}"),
            e,
        )),
    }
}

/// The MIG GPU instances an NVIDIA VF enable would destroy: all of them, when the GPU has none
/// of its VFs yet (the enable hands the PF back to `nvidia`, and the instances do not survive
/// that). Empty for other GPUs, without NVML, or with MIG off.
pub(crate) fn instances_lost_by_enable(
    host: &TimedHost,
    gpu: PciAddress,
) -> Result<Vec<gpu::GpuInstance>> {
    let dev = host.gpu(gpu)?;
    if dev.sriov.as_ref().is_some_and(|s| s.num_vfs > 0) {
        return Ok(Vec::new());
    }
    instances_lost_by_rebind(host, gpu)
}

/// The MIG GPU instances any change of an NVIDIA GPU's VF count destroys (on as well as off:
/// both hand the PF back to `nvidia`): all of them. Empty for other GPUs, without NVML, or with
/// MIG off.
fn instances_lost_by_rebind(host: &TimedHost, gpu: PciAddress) -> Result<Vec<gpu::GpuInstance>> {
    if !TimedHost::is_nvidia(&host.gpu(gpu)?) {
        return Ok(Vec::new());
    }
    let (Ok(nvml), Ok(index)) = (host.nvml(), host.nvml_index(gpu)) else {
        return Ok(Vec::new());
    };
    match nvml.gpu_instances(index) {
        Ok(gis) => Ok(gis),
        Err(e) if e.code == gpu::NvmlCode::TIMEOUT => {
            Err(host.nvml_err(format!("cannot list the GPU instances of {gpu}"), gpu, e))
        }
        // MIG off or not supported: nothing to lose.
        Err(_) => Ok(Vec::new()),
    }
}

/// Enables VFs on a GPU that has none; fails (after turning them off again) when the kernel
/// enabled fewer than `need`.
pub(crate) fn enable(host: &TimedHost, gpu: PciAddress, need: u32) -> Result<u32> {
    let dev = host.gpu(gpu)?;
    let want = target_count(host, &dev).max(need);
    if want == 0 {
        return Err(EngineError::Unsupported(format!(
            "GPU {gpu} supports no VFs"
        )));
    }
    let got = set_count(host, gpu, want)?;
    if got < need.max(1) {
        if got > 0
            && let Err(e) = set_count(host, gpu, 0)
        {
            tracing::warn!(%gpu, error = %e, "cannot disable a partial VF enable");
        }
        return Err(EngineError::NoCapacity(format!(
            "GPU {gpu} enabled {got} of the {want} VFs asked (at least {} needed)",
            need.max(1)
        )));
    }
    if got < want {
        tracing::warn!(%gpu, asked = want, enabled = got, "the kernel enabled fewer VFs than asked");
    }
    Ok(got)
}

/// Whether any VF of the GPU is in use: owned, typed, or bound to vfio-pci.
pub(crate) fn in_use(host: &TimedHost, gpu: PciAddress, reserved: &[Identity]) -> Result<bool> {
    for (_, vf) in host.vfs(gpu)? {
        let owned = reserved
            .iter()
            .any(|r| r.vf().is_some_and(|(_, a)| a == vf));
        let typed = vfio::has_vendor_vgpu(host.fs(), vf)
            && vfio::current_vgpu_type(host.fs(), vf)
                .ok()
                .flatten()
                .is_some();
        let on_vfio =
            vfio::bound_driver(host.fs(), vf).ok().flatten().as_deref() == Some(vfio::VFIO_PCI);
        if owned || typed || on_vfio {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Turns the GPU's VFs off again when nothing uses them (undoing an enable of ours).
pub(crate) fn disable_if_unused(
    host: &TimedHost,
    gpu: PciAddress,
    reserved: &[Identity],
) -> Result<bool> {
    // GIM keeps its VFs (and amdgpu has none): only NVIDIA's and the kernel's go off again.
    let amd = host.gpu(gpu)?.vendor == PciVendorId::AMD;
    if amd || host.vfs(gpu)?.is_empty() || in_use(host, gpu, reserved)? {
        return Ok(false);
    }
    set_count(host, gpu, 0)?;
    Ok(true)
}

/// The GPU-instance start slot an owned slice occupies, if it has one.
fn gi_start(s: &OwnedSlice) -> Option<u32> {
    match &s.identity {
        Identity::Mig { start, .. } | Identity::MigVgpu { start, .. } => Some(*start),
        _ => None,
    }
}

/// What enabling VFs would do to the GPU instances it destroys ([`Engine::instance_loss`]).
#[derive(Debug, Default)]
pub(crate) struct InstanceLoss {
    /// Why the enable must not go ahead: instances of allocated slices, instances not vgpud's.
    pub(crate) blocking: Vec<String>,
    /// vgpud's free slices on the instances: destroyed before the enable.
    pub(crate) ours: Vec<OwnedSlice>,
}

impl InstanceLoss {
    /// The refusal, when anything blocks.
    pub(crate) fn refusal(&self, gpu: PciAddress) -> Option<String> {
        (!self.blocking.is_empty()).then(|| {
            format!(
                "enabling VFs on GPU {gpu} hands its PF back to the NVIDIA driver, which destroys \
                 every MIG GPU instance on it, and {}",
                self.blocking.join("; ")
            )
        })
    }
}

impl Engine {
    /// Enables VFs on a GPU that has none (see [`enable`]), first making the MIG-instance loss an
    /// NVIDIA enable implies explicit: refused (`conflict`, naming them) while any GPU instance
    /// on the GPU belongs to an allocated slice or to no slice of ours; otherwise our free slices
    /// on those instances are destroyed first, logged, so that nothing claims an instance the
    /// enable then removes. The caller holds the GPU's lock.
    pub(crate) fn enable_vfs(&self, gpu: PciAddress, need: u32) -> Result<u32> {
        let lost = instances_lost_by_enable(self.host(), gpu)?;
        self.give_up_instances(gpu, &lost)?;
        enable(self.host(), gpu, need)
    }

    /// Makes sure VF `index` exists (after a reboot the count is back to the boot default),
    /// through the same check as [`Engine::enable_vfs`]: the change is refused while a GPU
    /// instance it would destroy is allocated or not ours, and our free slices on them are
    /// destroyed first. A non-zero count that must change goes through 0, refused while VFs are
    /// in use. Returns `None` when VF `index` exists already, else the slices given up. The
    /// caller holds the GPU's lock.
    pub(crate) fn restore_vf_index(
        &self,
        gpu: PciAddress,
        index: u32,
    ) -> Result<Option<Vec<SliceId>>> {
        let host = self.host();
        let enabled = host.vfs(gpu)?.len() as u32;
        if enabled > index {
            return Ok(None);
        }
        // The kernel refuses one non-zero count to another: only possible through 0.
        if enabled > 0 && in_use(host, gpu, &[])? {
            return Err(EngineError::Conflict(format!(
                "GPU {gpu} has {enabled} VFs in use but VF {index} is needed; the count cannot change while they are used"
            )));
        }
        // GIM changes one non-zero count to another itself (no PF rebind, no MIG).
        if enabled > 0 && host.gpu(gpu)?.vendor == PciVendorId::AMD {
            set_count(host, gpu, index + 1)?;
            return Ok(Some(Vec::new()));
        }
        // Checked before the first write: turning the VFs off rebinds the PF as well.
        let lost = instances_lost_by_rebind(host, gpu)?;
        let given_up = self.give_up_instances(gpu, &lost)?;
        if enabled > 0 {
            set_count(host, gpu, 0)?;
        }
        enable(host, gpu, index + 1)?;
        Ok(Some(given_up))
    }

    /// Sorts the instances an enable would destroy into what blocks it and our free slices on
    /// them; touches nothing (a layout dry run shows the same).
    pub(crate) fn instance_loss(&self, gpu: PciAddress, lost: &[gpu::GpuInstance]) -> InstanceLoss {
        let owned: Vec<OwnedSlice> = self.read(|d| {
            d.slices
                .values()
                .filter(|s| s.spec.gpu.pci() == Some(gpu))
                .cloned()
                .collect()
        });
        let mut loss = InstanceLoss::default();
        for gi in lost {
            let start = gi.placement.start;
            match owned.iter().find(|s| gi_start(s) == Some(start)) {
                None => loss.blocking.push(format!(
                    "GPU instance {} (start {start}) is not vgpud's",
                    gi.id
                )),
                Some(s) => match self.read(|d| d.holder(s.id).map(|a| a.consumer.clone())) {
                    Some(consumer) => loss.blocking.push(format!(
                        "slice {} ({}) is allocated to {consumer:?}",
                        s.id, s.spec.kind
                    )),
                    None => loss.ours.push(s.clone()),
                },
            }
        }
        loss
    }

    /// For a dry run: the GPU instances enabling the GPU's VFs would destroy, and what blocks
    /// that or is given up, as [`Engine::enable_vfs`] would find them after the slices in
    /// `removed_first` (which the apply destroys before) are gone. `None`: the GPU has VFs, or the
    /// enable destroys nothing. Touches nothing.
    pub(crate) fn planned_instance_loss(
        &self,
        gpu: PciAddress,
        removed_first: &[SliceId],
    ) -> Result<Option<(Vec<gpu::GpuInstance>, InstanceLoss)>> {
        let gone: Vec<u32> = self.read(|d| {
            removed_first
                .iter()
                .filter_map(|id| d.slices.get(id))
                .filter_map(gi_start)
                .collect()
        });
        let lost: Vec<gpu::GpuInstance> = instances_lost_by_enable(self.host(), gpu)?
            .into_iter()
            .filter(|gi| !gone.contains(&gi.placement.start))
            .collect();
        if lost.is_empty() {
            return Ok(None);
        }
        let loss = self.instance_loss(gpu, &lost);
        Ok(Some((lost, loss)))
    }

    /// Refuses (`conflict`) when [`Engine::instance_loss`] finds anything blocking, else
    /// destroys our free slices on the instances and returns them.
    fn give_up_instances(
        &self,
        gpu: PciAddress,
        lost: &[gpu::GpuInstance],
    ) -> Result<Vec<SliceId>> {
        if lost.is_empty() {
            return Ok(Vec::new());
        }
        let loss = self.instance_loss(gpu, lost);
        if let Some(why) = loss.refusal(gpu) {
            return Err(EngineError::Conflict(why));
        }
        let ids: Vec<SliceId> = loss.ours.iter().map(|s| s.id).collect();
        tracing::warn!(
            %gpu,
            instances = lost.len(),
            slices = ?ids.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "enabling NVIDIA VFs destroys every MIG GPU instance on the GPU: the free slices on them are destroyed first"
        );
        for id in &ids {
            self.destroy_locked(*id).map_err(|e| {
                EngineError::Conflict(format!(
                    "cannot destroy slice {id} before enabling VFs on GPU {gpu}: {}",
                    chain(&e)
                ))
            })?;
        }
        Ok(ids)
    }
}
