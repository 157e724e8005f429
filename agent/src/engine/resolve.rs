//! Turning a client's type string into slice kinds on the GPUs that offer it.

use ids::{MdevParentName, MdevTypeId, MigProfileName, PciAddress, PciVendorId};

use super::backend::{profile_by_name_on, refuse_if_passed_through};
use super::error::{EngineError, Result};
use super::model::{DeviceRef, SliceKind, SliceSpec};
use super::timed_host::TimedHost;

/// The host's GPUs (physical functions), in address order. VFs are skipped by their `physfn`
/// link before anything else is read, so a host with hundreds of VFs stays cheap to list.
pub(crate) fn gpus(host: &TimedHost) -> Result<Vec<vfio::PciDevice>> {
    Ok(gpu_addresses(host)?
        .into_iter()
        .filter_map(|addr| host.gpu(addr).ok())
        .collect())
}

/// [`gpus`], reading only what each one is.
fn gpu_identities(host: &TimedHost) -> Result<Vec<vfio::PciIdentity>> {
    Ok(gpu_addresses(host)?
        .into_iter()
        .filter_map(|addr| host.gpu_identity(addr).ok())
        .collect())
}

/// The functions that may be GPUs (not VFs, a GPU's class code), in address order.
fn gpu_addresses(host: &TimedHost) -> Result<Vec<PciAddress>> {
    let (addrs, _) = vfio::list_devices(host.fs())
        .map_err(|e| EngineError::from_vfio("cannot list PCI devices", e))?;
    Ok(addrs
        .into_iter()
        .filter(|&addr| !vfio::is_virtual_function(host.fs(), addr) && looks_like_gpu(host, addr))
        .collect())
}

/// A VGA or 3D controller or a processing accelerator, by its class code alone (any vendor: the
/// device is read in full only after this cheap check).
fn looks_like_gpu(host: &TimedHost, addr: PciAddress) -> bool {
    vfio::device_class(host.fs(), addr)
        .is_ok_and(|class| matches!(class >> 8, 0x0300 | 0x0302 | 0x1200))
}

/// The kind a type string means on one GPU, `None` when the GPU does not offer it.
pub(crate) fn kind_on(
    host: &TimedHost,
    dev: &vfio::PciIdentity,
    t: &str,
) -> Result<Option<SliceKind>> {
    let gpu = dev.address;
    let nvidia = dev.vendor == PciVendorId::NVIDIA;
    match t {
        "gpu" => return Ok(dev.iommu_group.map(|_| SliceKind::Passthrough)),
        "vf" => return Ok((dev.sriov_capable && !nvidia).then_some(SliceKind::SriovVf)),
        _ => {}
    }
    if nvidia && let Ok(profile) = t.parse::<MigProfileName>() {
        match profile_by_name_on(host, dev, &profile) {
            Ok(_) => {
                return Ok(Some(SliceKind::Mig {
                    profile,
                    start: None,
                }));
            }
            Err(e @ EngineError::Timeout { .. }) => return Err(e),
            Err(_) => {}
        }
    }
    if let Ok(type_id) = t.parse::<MdevTypeId>()
        && mdev::read_type(host.fs(), &MdevParentName::from(gpu), &type_id).is_ok()
    {
        return Ok(Some(SliceKind::Mdev { type_id }));
    }
    if nvidia && dev.sriov_capable {
        return vgpu_type(host, gpu, t);
    }
    Ok(None)
}

/// The kind a type string means in a layout on one GPU: as [`kind_on`], and also a MIG profile
/// on a MIG-capable GPU whose MIG mode is off now: the layout turns MIG on first, and the
/// profile is checked when the slice is made (NVML lists profiles only with MIG on).
pub(crate) fn layout_kind_on(
    host: &TimedHost,
    dev: &vfio::PciIdentity,
    t: &str,
) -> Result<Option<SliceKind>> {
    if let Some(kind) = kind_on(host, dev, t)? {
        return Ok(Some(kind));
    }
    if dev.vendor == PciVendorId::NVIDIA
        && let Ok(profile) = t.parse::<MigProfileName>()
        && mig_mode(host, dev.address)?.is_some_and(|m| !m.current)
    {
        return Ok(Some(SliceKind::Mig {
            profile,
            start: None,
        }));
    }
    Ok(None)
}

/// The GPU's MIG mode; `None` without MIG (or without NVML). A timeout is an error.
pub(crate) fn mig_mode(host: &TimedHost, gpu: PciAddress) -> Result<Option<gpu::MigMode>> {
    let Ok(nvml) = host.nvml() else {
        return Ok(None);
    };
    let index = match host.nvml_index(gpu) {
        Ok(i) => i,
        Err(e @ EngineError::Timeout { .. }) => return Err(e),
        Err(_) => return Ok(None),
    };
    match nvml.mig_mode(index) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.code == gpu::NvmlCode::TIMEOUT => {
            Err(host.nvml_err(format!("cannot read the MIG mode of {gpu}"), gpu, e))
        }
        Err(_) => Ok(None),
    }
}

/// A vendor-VFIO vGPU type by name (`NVIDIA H200X-35C`) or id (`1421`).
fn vgpu_type(host: &TimedHost, gpu: PciAddress, t: &str) -> Result<Option<SliceKind>> {
    let Ok(nvml) = host.nvml() else {
        return Ok(None);
    };
    let index = host.nvml_index(gpu)?;
    let types = match nvml.supported_vgpu_types(index) {
        Ok(types) => types,
        Err(e) if e.code == gpu::NvmlCode::TIMEOUT => {
            return Err(host.nvml_err(format!("cannot list vGPU types of {gpu}"), gpu, e));
        }
        Err(_) => return Ok(None),
    };
    Ok(types
        .iter()
        .find(|v| v.name == t || v.id.to_string() == t)
        .map(|v| SliceKind::NvidiaVfio {
            vgpu_type: v.id,
            start: None,
        }))
}

/// The mdev parents that are not PCI devices (the kernel's `mtty`, `mdpy`, `mbochs`) offering
/// `t` as an mdev type. A parent that cannot be read offers nothing: GPUs come first.
fn virtual_parent_specs(host: &TimedHost, t: &str) -> Vec<SliceSpec> {
    let Ok(type_id) = t.parse::<MdevTypeId>() else {
        return Vec::new();
    };
    let Ok((parents, _)) = mdev::list_parents(host.fs()) else {
        return Vec::new();
    };
    parents
        .into_iter()
        .filter(|p| p.pci_address().is_none())
        .filter(|p| mdev::read_type(host.fs(), p, &type_id).is_ok())
        .map(|p| SliceSpec {
            gpu: DeviceRef::MdevParent(p),
            kind: SliceKind::Mdev {
                type_id: type_id.clone(),
            },
        })
        .collect()
}

/// Checks a type string as a client sent it.
pub(crate) fn check_type(t: &str) -> Result<&str> {
    let t = t.trim();
    if let Err(fault) = super::limits::check_text(t) {
        let shown: String = t.chars().take(64).collect();
        return Err(EngineError::InvalidRequest(format!(
            "slice type {shown:?} is not a type name: {fault}"
        )));
    }
    Ok(t)
}

/// What a type string means on one GPU the caller has read, as [`resolve`] answers for
/// that GPU alone: `None` where it would refuse.
pub(crate) fn kind_for(host: &TimedHost, dev: &vfio::PciIdentity, t: &str) -> Option<SliceKind> {
    let t = check_type(t).ok()?;
    if t != "gpu" && refuse_if_passed_through(dev).is_err() {
        return None;
    }
    kind_on(host, dev, t).ok().flatten()
}

/// A type string's candidates with the GPUs looked at for them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resolved {
    /// The GPUs asked (in address order), offering the type or not.
    pub(crate) gpus: Vec<PciAddress>,
    /// Every (GPU, kind) that can satisfy the type: at most one per GPU, in address order, then
    /// the virtual mdev parents.
    pub(crate) specs: Vec<SliceSpec>,
}

/// Every (GPU, kind) that can satisfy the type, on `only` or on every GPU, with the GPUs asked.
pub(crate) fn resolve(host: &TimedHost, t: &str, only: Option<PciAddress>) -> Result<Resolved> {
    let t = check_type(t)?;
    let devs = match only {
        Some(g) => {
            let dev = host.gpu_identity(g)?;
            if t != "gpu" {
                refuse_if_passed_through(&dev)?;
            }
            vec![dev]
        }
        None => gpu_identities(host)?,
    };
    let mut out = Vec::new();
    let mut first_error = None;
    for dev in &devs {
        match kind_on(host, dev, t) {
            Ok(Some(kind)) => out.push(SliceSpec {
                gpu: dev.address.into(),
                kind,
            }),
            Ok(None) => {}
            // One GPU that does not answer does not hide the others.
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if only.is_none() {
        out.extend(virtual_parent_specs(host, t));
    }
    if out.is_empty() {
        if let Some(e) = first_error {
            return Err(e);
        }
        let on = only.map(|g| format!(" {g}")).unwrap_or_default();
        return Err(EngineError::InvalidRequest(format!(
            "no GPU{on} offers slice type {t:?} (a MIG profile name, an mdev type id, a vGPU type name or id, \"vf\" or \"gpu\")"
        )));
    }
    Ok(Resolved {
        gpus: devs.iter().map(|d| d.address).collect(),
        specs: out,
    })
}
