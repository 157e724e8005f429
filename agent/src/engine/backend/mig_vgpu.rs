//! nvidia-vfio, MIG-backed (Hopper/Blackwell, vGPU 17+): a backend of its own, chosen for a
//! vendor-VFIO type NVML names a GPU-instance profile for. Its kind stays `nvidia-vfio` in the
//! store and on the wire, like the time-sliced types ([`super::nvidia_vfio`]); what both share is
//! [`super::vf_type`].
//!
//! A GPU instance of the type's profile at an explicit start slot (no compute instance: the
//! guest makes its own), then the type id written to a free VF's `current_vgpu_type`. The driver
//! puts the vGPU into a free GPU instance of the profile of its own choosing; the engine makes
//! sure the one it just created is the only unused one it can see, then reads the VF's
//! `nvidia/gpu_instance_id` back: the driver also takes instances with compute instances (field
//! reports), which that check cannot rule out. A vGPU in any other instance is removed again
//! (`0` written) and the create fails with `conflict`. Drivers without the read-back files (or
//! answering ENXIO) leave the engine with the count check alone.
//!
//! Identity: [`Identity::MigVgpu`] (VF index and address, GI start and profile). Realize makes
//! the GPU instance, then writes the type; a failed write removes the instance it made. Destroy
//! writes 0, then removes the GPU instance at the slot only when it is still ours: our profile,
//! no compute instances, no other vGPU in it. Both steps run under one create or destroy intent,
//! so a crash between them is rolled back (create) or forward (destroy) by the reconciler.

use gpu::{GpuInstance, GpuInstanceProfile, NvmlCode};
use ids::{MigProfileName, PciAddress, VgpuTypeId};

use super::choose::choose_vf;
use super::mig::{
    at_start, check_start, cis, create_gi, instances, mig_gpu, plan_start, profile_by_name,
    profile_on_mig_gpu,
};
use super::vf_type::{
    self, check_offered, current, free_vfs, mig_profile_id, remove_type, type_infos, type_of,
    vf_handles,
};
use super::{Backend, Observed, wrong_identity};
use crate::engine::error::{EngineError, Result};
use crate::engine::model::{BackendKind, Handles, Identity, SliceSpec};
use crate::engine::timed_host::TimedHost;

pub(crate) struct MigVgpuBackend;

/// The spec's GPU, vGPU type and explicit start slot, with the GPU-instance profile id NVML
/// names for the type.
fn spec_parts(
    host: &TimedHost,
    spec: &SliceSpec,
) -> Result<(PciAddress, VgpuTypeId, u32, Option<u32>)> {
    let gpu = spec.pci()?;
    let (ty, start) = type_of(spec)?;
    let profile = mig_profile_id(host, gpu, ty)?.ok_or_else(|| {
        EngineError::InvalidRequest(format!(
            "vGPU type {ty} on GPU {gpu} is not MIG-backed (NVML names no GPU-instance profile for it)"
        ))
    })?;
    Ok((gpu, ty, profile, start))
}

impl Backend for MigVgpuBackend {
    fn validate(&self, host: &TimedHost, spec: &SliceSpec) -> Result<()> {
        check_offered(host, spec.pci()?, type_of(spec)?.0)?;
        let (gpu, ty, profile, start) = spec_parts(host, spec)?;
        validate(host, gpu, ty, profile, start)
    }

    fn plan(&self, host: &TimedHost, spec: &SliceSpec, reserved: &[Identity]) -> Result<Identity> {
        let (gpu, ty, profile, start) = spec_parts(host, spec)?;
        plan(host, gpu, ty, profile, start, reserved)
    }

    fn realize(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<Handles> {
        realize(host, spec.pci()?, type_of(spec)?.0, id)
    }

    fn destroy(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<()> {
        destroy(host, spec.pci()?, type_of(spec)?.0, id)
    }

    fn observe(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<Observed> {
        observe(host, spec.pci()?, type_of(spec)?.0, id)
    }
}

/// The parts of a MIG-backed identity: VF address, GI start, GI profile name.
fn parts(id: &Identity) -> Result<(PciAddress, u32, &MigProfileName)> {
    match id {
        Identity::MigVgpu {
            address,
            start,
            profile,
            ..
        } => Ok((*address, *start, profile)),
        other => Err(wrong_identity(BackendKind::NvidiaVfio, other)),
    }
}

/// The GPU-instance profile with NVML's id `profile`; MIG mode must be on.
fn profile_by_id(
    host: &TimedHost,
    gpu: PciAddress,
    ty: VgpuTypeId,
    profile: u32,
) -> Result<GpuInstanceProfile> {
    let (nvml, index) = mig_gpu(host, gpu).map_err(|e| match e {
        EngineError::Unsupported(why) => EngineError::Unsupported(format!(
            "vGPU type {ty} is MIG-backed and needs MIG mode on: {why}"
        )),
        e => e,
    })?;
    nvml.gpu_instance_profiles(index)
        .map_err(|e| host.nvml_err(format!("cannot list MIG profiles of {gpu}"), gpu, e))?
        .into_iter()
        .find(|p| p.id == profile)
        .ok_or_else(|| {
            EngineError::Unsupported(format!(
                "GPU {gpu} offers no GPU-instance profile {profile}, which vGPU type {ty} needs"
            ))
        })
}

/// MIG mode on, the type's profile offered, an explicit start allowed for it.
fn validate(
    host: &TimedHost,
    gpu: PciAddress,
    ty: VgpuTypeId,
    profile: u32,
    start: Option<u32>,
) -> Result<()> {
    let p = profile_by_id(host, gpu, ty, profile)?;
    check_start(host, gpu, p.id, start, || {
        format!("the GPU instance of vGPU type {ty} ({})", p.name)
    })
}

/// A free VF and a free placement (explicit, or the scheduler's) for the GPU instance.
fn plan(
    host: &TimedHost,
    gpu: PciAddress,
    ty: VgpuTypeId,
    profile: u32,
    start: Option<u32>,
    reserved: &[Identity],
) -> Result<Identity> {
    let p = profile_by_id(host, gpu, ty, profile)?;
    let Some((index, address)) = choose_vf(&free_vfs(host, gpu, reserved)?) else {
        return Err(EngineError::NoCapacity(format!(
            "GPU {gpu} has no free VF for a vGPU"
        )));
    };
    let start = plan_start(host, gpu, &p.name, start, reserved)?;
    Ok(Identity::MigVgpu {
        index,
        address,
        start,
        profile: p.name,
    })
}

fn handles(host: &TimedHost, vf: PciAddress, gi: &GpuInstance) -> Result<Handles> {
    Ok(Handles {
        gpu_instance_id: Some(gi.id),
        ..vf_handles(host, vf)?
    })
}

/// GPU instances of the profile that no compute instance and no vGPU uses, counted: the driver
/// may put a new vGPU into any of them.
fn unused_instances(host: &TimedHost, gpu: PciAddress, index: u32, profile: u32) -> Result<usize> {
    let mut without_ci = 0usize;
    for gi in instances(host, gpu, index)?
        .iter()
        .filter(|g| g.profile_id == profile)
    {
        if cis(host, gpu, index, gi.id)?.is_empty() {
            without_ci += 1;
        }
    }
    // Which instance a vGPU sits in is not visible here; how many vGPUs of the profile there
    // are is.
    let of_profile: Vec<VgpuTypeId> = type_infos(host, gpu)?
        .iter()
        .filter(|t| t.gpu_instance_profile_id == Some(profile))
        .map(|t| t.id)
        .collect();
    let mut vgpus = 0usize;
    for (_, vf) in host.vfs(gpu)? {
        if vfio::has_vendor_vgpu(host.fs(), vf)
            && current(host, vf)?.is_some_and(|t| of_profile.contains(&t))
        {
            vgpus += 1;
        }
    }
    Ok(without_ci.saturating_sub(vgpus))
}

/// Makes the GPU instance (unless ours is already there), then writes the type.
fn realize(host: &TimedHost, gpu: PciAddress, ty: VgpuTypeId, id: &Identity) -> Result<Handles> {
    let (vf, start, name) = parts(id)?;
    if !vfio::device_exists(host.fs(), vf) {
        return Err(EngineError::Conflict(format!(
            "VF {vf} of GPU {gpu} is not enabled"
        )));
    }
    let (profile, nvml, index) = profile_on_mig_gpu(host, gpu, name)?;
    let carried = current(host, vf)?;
    let (gi, made) = match (carried, at_start(host, gpu, index, start)?) {
        (Some(t), Some(gi)) if t == ty && gi.profile_id == profile.id => {
            // An earlier attempt wrote the type; its read-back may not have run.
            check_driver_choice(host, gpu, vf, ty, &gi)?;
            return handles(host, vf, &gi);
        }
        (Some(t), _) if t != ty => {
            return Err(EngineError::Conflict(format!(
                "VF {vf} carries vGPU type {t}, not {ty}"
            )));
        }
        (Some(_), _) => {
            return Err(EngineError::Conflict(format!(
                "VF {vf} carries vGPU type {ty} but not in a {name} GPU instance at slot {start}"
            )));
        }
        (None, Some(gi)) if gi.profile_id != profile.id => {
            return Err(EngineError::Conflict(format!(
                "slot {start} on GPU {gpu} holds GPU instance {} of another profile",
                gi.id
            )));
        }
        (None, Some(gi)) if !cis(host, gpu, index, gi.id)?.is_empty() => {
            return Err(EngineError::Conflict(format!(
                "GPU instance {} at slot {start} on GPU {gpu} has compute instances: it is not ours",
                gi.id
            )));
        }
        // Left by an earlier attempt of this slice (its identity reserves the slot).
        (None, Some(gi)) => (gi, false),
        (None, None) => (create_gi(host, gpu, index, &profile, name, start)?, true),
    };
    match put_type(host, gpu, index, ty, vf, &profile, &gi) {
        Ok(()) => handles(host, vf, &gi),
        Err(e) => {
            if made && !matches!(e, EngineError::Timeout { .. }) {
                // Leave nothing half-made: the GPU instance goes with its failed vGPU.
                if let Err(undo) = nvml.destroy_gpu_instance(index, gi.id) {
                    tracing::warn!(%gpu, gi = gi.id, error = %undo, "cannot undo GPU instance");
                }
            }
            Err(e)
        }
    }
}

/// Writes the type once our GPU instance is the only unused one of its profile, and reads it
/// back.
fn put_type(
    host: &TimedHost,
    gpu: PciAddress,
    index: u32,
    ty: VgpuTypeId,
    vf: PciAddress,
    profile: &GpuInstanceProfile,
    gi: &GpuInstance,
) -> Result<()> {
    let unused = unused_instances(host, gpu, index, profile.id)?;
    if unused > 1 {
        return Err(EngineError::Conflict(format!(
            "GPU {gpu} has {} other unused {} GPU instances besides ours (GI {}); the driver could put the vGPU into one of them",
            unused - 1,
            profile.name,
            gi.id
        )));
    }
    vf_type::put_type(host, gpu, vf, ty)?;
    check_driver_choice(host, gpu, vf, ty, gi)
}

/// The GPU instance the driver put the VF's vGPU into, when the driver says (`None`: ENXIO or
/// no such files, as on older drivers).
fn driver_choice(host: &TimedHost, vf: PciAddress) -> Result<Option<vfio::VgpuGpuInstance>> {
    vfio::vgpu_gpu_instance(host.fs(), vf).map_err(|e| {
        EngineError::from_vfio(
            format!("cannot read which GPU instance VF {vf}'s vGPU sits in"),
            e,
        )
    })
}

/// After the type write: the vGPU must sit in our GPU instance. Anywhere else it is removed
/// again (the caller then removes the instance it made) and the create is a `conflict`.
fn check_driver_choice(
    host: &TimedHost,
    gpu: PciAddress,
    vf: PciAddress,
    ty: VgpuTypeId,
    gi: &GpuInstance,
) -> Result<()> {
    let Some(chosen) = driver_choice(host, vf)? else {
        return Ok(());
    };
    if chosen.gpu_instance_id == gi.id {
        return Ok(());
    }
    let refused = format!(
        "the driver put vGPU type {ty} on VF {vf} into GPU instance {} (placement {}) of GPU {gpu}, not into the intended GPU instance {} at slot {}",
        chosen.gpu_instance_id, chosen.placement_id, gi.id, gi.placement.start
    );
    if let Err(undo) = vf_type::write_type(host, gpu, vf, None) {
        return Err(EngineError::Conflict(format!(
            "{refused}; removing it again failed: {undo}"
        )));
    }
    Err(EngineError::Conflict(format!(
        "{refused}; it was removed again"
    )))
}

/// Removes the vGPU, then the GPU instance at the slot when it is still ours.
fn destroy(host: &TimedHost, gpu: PciAddress, ty: VgpuTypeId, id: &Identity) -> Result<()> {
    let (vf, start, name) = parts(id)?;
    remove_type(host, gpu, vf, ty)?;
    let (nvml, index) = match mig_gpu(host, gpu) {
        Ok(x) => x,
        // MIG off: no GPU instance can be left.
        Err(EngineError::Unsupported(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    let profile = profile_by_name(host, gpu, name)?;
    let Some(gi) = at_start(host, gpu, index, start)? else {
        return Ok(());
    };
    if gi.profile_id != profile.id || !cis(host, gpu, index, gi.id)?.is_empty() {
        tracing::warn!(%gpu, gi = gi.id, start, "the GPU instance at the slot is not ours; left alone");
        return Ok(());
    }
    match nvml.destroy_gpu_instance(index, gi.id) {
        Ok(()) => Ok(()),
        // Another VF's vGPU moved into the freed instance: it is someone else's now.
        Err(e) if e.code == NvmlCode::IN_USE => {
            tracing::warn!(%gpu, gi = gi.id, "another vGPU took the GPU instance; left alone");
            Ok(())
        }
        Err(e) => Err(host.nvml_err(format!("cannot destroy {gpu} GI {}", gi.id), gpu, e)),
    }
}

/// Present when the VF carries the type, our GPU instance is at the slot and, where the driver
/// says which instance the vGPU sits in, it is that one.
fn observe(host: &TimedHost, gpu: PciAddress, ty: VgpuTypeId, id: &Identity) -> Result<Observed> {
    let (vf, start, name) = parts(id)?;
    if !vfio::device_exists(host.fs(), vf) {
        return Ok(Observed::Absent);
    }
    let carried = current(host, vf)?;
    if let Some(t) = carried.filter(|t| *t != ty) {
        return Ok(Observed::Changed(format!(
            "VF {vf} carries vGPU type {t}, not {ty}"
        )));
    }
    let (profile, _, index) = profile_on_mig_gpu(host, gpu, name)?;
    Ok(match (carried, at_start(host, gpu, index, start)?) {
        (_, Some(gi)) if gi.profile_id != profile.id => Observed::Changed(format!(
            "slot {start} holds GPU instance {} of another profile",
            gi.id
        )),
        (_, Some(gi)) if !cis(host, gpu, index, gi.id)?.is_empty() => Observed::Changed(format!(
            "GPU instance {} at slot {start} has compute instances",
            gi.id
        )),
        (Some(_), Some(gi)) => match driver_choice(host, vf)? {
            Some(chosen) if chosen.gpu_instance_id != gi.id => Observed::Changed(format!(
                "VF {vf}'s vGPU sits in GPU instance {} (placement {}), not in GPU instance {} at slot {start}",
                chosen.gpu_instance_id, chosen.placement_id, gi.id
            )),
            // Ours, or a driver that does not say (then the slot is all there is to go by).
            _ => Observed::Present(handles(host, vf, &gi)?),
        },
        (Some(_), None) => Observed::Changed(format!(
            "VF {vf} carries vGPU type {ty} but no {name} GPU instance is at slot {start}"
        )),
        (None, _) => Observed::Absent,
    })
}
