//! Enabling and disabling a GPU's SR-IOV VFs for the VF-based backends.
//!
//! On AMD GPUs AMD SMI sets the count when it answers (it knows the partition mode's limit);
//! otherwise `sriov_numvfs` is written. Either way the count is read back: the kernel may enable
//! fewer VFs than asked and still report success.

use ids::{PciAddress, PciVendorId};

use super::error::{EngineError, Result};
use super::model::Identity;
use super::timed_host::TimedHost;

/// AMD SMI, when it answers for this GPU.
fn amd_for<'a>(host: &'a TimedHost, dev: &vfio::PciDevice) -> Option<&'a dyn gpu::AmdSmi> {
    if dev.vendor != PciVendorId::AMD {
        return None;
    }
    let amd = host.amd()?;
    amd.num_vf(dev.address).ok().map(|_| amd)
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

/// Sets the VF count and returns how many the kernel really enabled.
pub(crate) fn set_count(host: &TimedHost, gpu: PciAddress, count: u32) -> Result<u32> {
    let dev = host.gpu(gpu)?;
    if let Some(amd) = amd_for(host, &dev) {
        let timeout = host.timeout();
        amd.set_num_vf(gpu, count).map_err(|e| {
            EngineError::from_amd(
                format!("cannot set {count} VFs on GPU {gpu}"),
                gpu,
                timeout,
                e,
            )
        })?;
        return amd.num_vf(gpu).map(|c| c.enabled).map_err(|e| {
            EngineError::from_amd(format!("cannot read VFs of GPU {gpu}"), gpu, timeout, e)
        });
    }
    vfio::set_num_vfs(host.fs(), gpu, count)
        .map_err(|e| EngineError::from_vfio(format!("cannot set {count} VFs on GPU {gpu}"), e))
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
    if host.vfs(gpu)?.is_empty() || in_use(host, gpu, reserved)? {
        return Ok(false);
    }
    set_count(host, gpu, 0)?;
    Ok(true)
}

/// Makes sure VF `index` exists (after a reboot the count is back to the boot default).
/// Returns whether VFs were (re-)enabled.
pub(crate) fn ensure_index(
    host: &TimedHost,
    gpu: PciAddress,
    index: u32,
    reserved: &[Identity],
) -> Result<bool> {
    let enabled = host.vfs(gpu)?.len() as u32;
    if enabled > index {
        return Ok(false);
    }
    if enabled > 0 {
        // The kernel refuses one non-zero count to another: only possible through 0.
        if in_use(host, gpu, reserved)? {
            return Err(EngineError::Conflict(format!(
                "GPU {gpu} has {enabled} VFs in use but VF {index} is needed; the count cannot change while they are used"
            )));
        }
        set_count(host, gpu, 0)?;
    }
    enable(host, gpu, index + 1)?;
    Ok(true)
}
