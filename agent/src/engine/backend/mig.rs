//! mig: a GPU instance at an explicit start slot and one compute instance spanning it, through
//! NVML. The engine always places instances itself: the driver's own placement is not
//! fragmentation-aware.

use gpu::{GpuInstance, GpuInstanceProfile, Nvml, Placement};
use ids::{MigProfileName, PciAddress, PciVendorId};

use super::choose::{choose_mig_start, choose_mig_start_scheduled, overlaps};
use super::{Backend, Observed, wrong_identity};
use crate::engine::error::{EngineError, Result};
use crate::engine::mig_geometry::{self, ProfileFacts};
use crate::engine::model::{BackendKind, Handles, Identity, SliceKind, SliceSpec};
use crate::engine::timed_host::TimedHost;

pub(crate) struct MigBackend;

/// NVML, the GPU's index, and a check that MIG is on.
pub(super) fn mig_gpu(host: &TimedHost, gpu: PciAddress) -> Result<(&dyn Nvml, u32)> {
    mig_gpu_of(host, gpu, host.gpu_identity(gpu)?.vendor)
}

/// [`mig_gpu`] for a GPU whose vendor the caller has read.
fn mig_gpu_of(host: &TimedHost, gpu: PciAddress, vendor: PciVendorId) -> Result<(&dyn Nvml, u32)> {
    if vendor != PciVendorId::NVIDIA {
        return Err(EngineError::Unsupported(format!(
            "GPU {gpu} is not an NVIDIA GPU"
        )));
    }
    let nvml = host.nvml()?;
    let index = host.nvml_index(gpu)?;
    let mode = nvml
        .mig_mode(index)
        .map_err(|e| host.nvml_err(format!("cannot read the MIG mode of {gpu}"), gpu, e))?;
    if !mode.current {
        return Err(EngineError::Unsupported(format!(
            "MIG is disabled on GPU {gpu}{}",
            if mode.pending {
                " (enabled after the next GPU reset)"
            } else {
                ""
            }
        )));
    }
    Ok((nvml, index))
}

/// The GPU-instance profile with this name on this GPU.
pub(crate) fn profile_by_name(
    host: &TimedHost,
    gpu: PciAddress,
    name: &MigProfileName,
) -> Result<GpuInstanceProfile> {
    profile_by_name_on(host, &host.gpu_identity(gpu)?, name)
}

/// [`profile_by_name`] and [`mig_gpu`] together, reading only what the GPU is (validate,
/// plan, realize and observe each ask again; its whole PCI device is dozens of sysfs reads).
pub(super) fn profile_on_mig_gpu<'h>(
    host: &'h TimedHost,
    gpu: PciAddress,
    name: &MigProfileName,
) -> Result<(GpuInstanceProfile, &'h dyn Nvml, u32)> {
    let vendor = host.gpu_identity(gpu)?.vendor;
    let (nvml, index) = mig_gpu_of(host, gpu, vendor)?;
    let profile = profile_named(host, gpu, nvml, index, name)?;
    Ok((profile, nvml, index))
}

/// [`profile_by_name`] on a GPU the caller has just read.
pub(crate) fn profile_by_name_on(
    host: &TimedHost,
    gpu: &vfio::PciIdentity,
    name: &MigProfileName,
) -> Result<GpuInstanceProfile> {
    let (nvml, index) = mig_gpu_of(host, gpu.address, gpu.vendor)?;
    profile_named(host, gpu.address, nvml, index, name)
}

/// The GPU-instance profile `name` among those NVML lists for the GPU at `index`.
fn profile_named(
    host: &TimedHost,
    gpu: PciAddress,
    nvml: &dyn Nvml,
    index: u32,
    name: &MigProfileName,
) -> Result<GpuInstanceProfile> {
    let profiles = nvml
        .gpu_instance_profiles(index)
        .map_err(|e| host.nvml_err(format!("cannot list MIG profiles of {gpu}"), gpu, e))?;
    let names: Vec<String> = profiles.iter().map(|p| p.name.to_string()).collect();
    profiles
        .into_iter()
        .find(|p| &p.name == name)
        .ok_or_else(|| {
            EngineError::InvalidRequest(format!(
                "GPU {gpu} has no MIG profile {name}; it offers {}",
                names.join(", ")
            ))
        })
}

pub(super) fn placements(
    host: &TimedHost,
    gpu: PciAddress,
    index: u32,
    profile: u32,
) -> Result<Vec<Placement>> {
    host.nvml()?
        .gpu_instance_possible_placements(index, profile)
        .map_err(|e| host.nvml_err(format!("cannot list MIG placements on {gpu}"), gpu, e))
}

/// An explicit start slot must be one of the profile's placements (`what` names the profile in
/// the refusal).
pub(super) fn check_start(
    host: &TimedHost,
    gpu: PciAddress,
    profile: u32,
    start: Option<u32>,
    what: impl FnOnce() -> String,
) -> Result<()> {
    let Some(s) = start else { return Ok(()) };
    let (_, index) = mig_gpu(host, gpu)?;
    if placements(host, gpu, index, profile)?
        .iter()
        .any(|p| p.start == s)
    {
        return Ok(());
    }
    Err(EngineError::InvalidRequest(format!(
        "{} cannot start at slot {s} on GPU {gpu}",
        what()
    )))
}

pub(super) fn instances(host: &TimedHost, gpu: PciAddress, index: u32) -> Result<Vec<GpuInstance>> {
    host.nvml()?
        .gpu_instances(index)
        .map_err(|e| host.nvml_err(format!("cannot list MIG instances of {gpu}"), gpu, e))
}

/// The memory-slice size of each reserved GPU-instance placement on the GPU (MIG slices and
/// MIG-backed vGPUs), as placements.
fn mig_sizes(host: &TimedHost, gpu: PciAddress, reserved: &[Identity]) -> Result<Vec<Placement>> {
    let mut out = Vec::new();
    for (start, profile) in reserved.iter().filter_map(Identity::mig_slot) {
        let (p, _, index) = profile_on_mig_gpu(host, gpu, profile)?;
        let size = placements(host, gpu, index, p.id)?
            .first()
            .map_or(1, |pl| pl.size);
        out.push(Placement { start, size });
    }
    Ok(out)
}

/// The start slot the scheduler gives a new instance of `name`, from the GPU's whole geometry
/// and what it carries (instances on the host and owned identities the host lost).
fn scheduled_start(
    host: &TimedHost,
    gpu: PciAddress,
    index: u32,
    name: &MigProfileName,
    reserved: &[Identity],
    allowed: &[Placement],
) -> Result<Option<u32>> {
    let profiles = host
        .nvml()?
        .gpu_instance_profiles(index)
        .map_err(|e| host.nvml_err(format!("cannot list MIG profiles of {gpu}"), gpu, e))?;
    let mut facts = Vec::new();
    for p in &profiles {
        facts.push(ProfileFacts {
            name: p.name.clone(),
            compute_slices: p.slice_count,
            memory_mib: p.memory_mib,
            max_instances: p.instance_count,
            placements: placements(host, gpu, index, p.id)?,
        });
    }
    let mut taken: Vec<(MigProfileName, u32)> = instances(host, gpu, index)?
        .iter()
        .filter_map(|g| {
            let p = profiles.iter().find(|p| p.id == g.profile_id)?;
            Some((p.name.clone(), g.placement.start))
        })
        .collect();
    for (start, profile) in reserved.iter().filter_map(Identity::mig_slot) {
        if !taken.iter().any(|(_, s)| *s == start) {
            taken.push((profile.clone(), start));
        }
    }
    let geometry = mig_geometry::geometry(facts);
    Ok(choose_mig_start_scheduled(
        gpu, &geometry, &taken, name, allowed,
    ))
}

/// The start slot for a new GPU instance of `name`: `start` when it is free (else `conflict`),
/// otherwise the scheduler's choice, or the first free placement. Placements of `reserved`
/// identities (owned, present or not) count as occupied.
pub(super) fn plan_start(
    host: &TimedHost,
    gpu: PciAddress,
    name: &MigProfileName,
    start: Option<u32>,
    reserved: &[Identity],
) -> Result<u32> {
    let (profile, _, index) = profile_on_mig_gpu(host, gpu, name)?;
    let mut occupied: Vec<Placement> = instances(host, gpu, index)?
        .iter()
        .map(|g| g.placement)
        .collect();
    occupied.extend(mig_sizes(host, gpu, reserved)?);
    let allowed = placements(host, gpu, index, profile.id)?;
    let chosen = match start {
        Some(s) => {
            let p = allowed.iter().find(|p| p.start == s).copied();
            match p {
                Some(p) if occupied.iter().all(|o| !overlaps(&p, o)) => Some(p),
                _ => {
                    return Err(EngineError::Conflict(format!(
                        "slot {s} on GPU {} is occupied",
                        gpu
                    )));
                }
            }
        }
        None => scheduled_start(host, gpu, index, name, reserved, &allowed)?
            .and_then(|s| allowed.iter().find(|p| p.start == s).copied())
            .filter(|p| occupied.iter().all(|o| !overlaps(p, o)))
            .or_else(|| choose_mig_start(&allowed, &occupied)),
    };
    let p = chosen.ok_or_else(|| {
        EngineError::NoCapacity(format!("GPU {} has no free placement for {name}", gpu))
    })?;
    Ok(p.start)
}

fn spec_parts(spec: &SliceSpec) -> Result<(&MigProfileName, Option<u32>)> {
    match &spec.kind {
        SliceKind::Mig { profile, start } => Ok((profile, *start)),
        other => Err(EngineError::InvalidRequest(format!(
            "{other} is not a MIG slice"
        ))),
    }
}

fn id_parts(id: &Identity) -> Result<(u32, &MigProfileName)> {
    match id {
        Identity::Mig { start, profile } => Ok((*start, profile)),
        other => Err(wrong_identity(BackendKind::Mig, other)),
    }
}

/// Creates a GPU instance of `profile` (named `name`) at slot `start`; a slot the profile
/// cannot start at is a conflict.
pub(super) fn create_gi(
    host: &TimedHost,
    gpu: PciAddress,
    index: u32,
    profile: &GpuInstanceProfile,
    name: &MigProfileName,
    start: u32,
) -> Result<GpuInstance> {
    let size = placements(host, gpu, index, profile.id)?
        .iter()
        .find(|p| p.start == start)
        .map(|p| p.size)
        .ok_or_else(|| EngineError::Conflict(format!("{name} cannot start at slot {start}")))?;
    host.nvml()?
        .create_gpu_instance(index, profile.id, Placement { start, size })
        .map_err(|e| {
            host.nvml_err(
                format!("cannot create MIG {name} at slot {start} on {gpu}"),
                gpu,
                e,
            )
        })
}

/// The GPU instance at `start`, if any.
pub(super) fn at_start(
    host: &TimedHost,
    gpu: PciAddress,
    index: u32,
    start: u32,
) -> Result<Option<GpuInstance>> {
    Ok(instances(host, gpu, index)?
        .into_iter()
        .find(|g| g.placement.start == start))
}

/// Compute instances of a GPU instance.
pub(super) fn cis(
    host: &TimedHost,
    gpu: PciAddress,
    index: u32,
    gi: u32,
) -> Result<Vec<gpu::ComputeInstance>> {
    host.nvml()?.compute_instances(index, gi).map_err(|e| {
        host.nvml_err(
            format!("cannot list compute instances of {gpu} GI {gi}"),
            gpu,
            e,
        )
    })
}

/// Creates one compute instance spanning the whole GPU instance.
fn create_ci(
    host: &TimedHost,
    gpu: PciAddress,
    index: u32,
    gi: &GpuInstance,
    slices: u32,
) -> Result<u32> {
    let nvml = host.nvml()?;
    let profiles = nvml.compute_instance_profiles(index, gi.id).map_err(|e| {
        host.nvml_err(
            format!("cannot list compute profiles of {gpu} GI {}", gi.id),
            gpu,
            e,
        )
    })?;
    let full = profiles
        .iter()
        .filter(|p| p.slice_count <= slices)
        .max_by_key(|p| p.slice_count)
        .ok_or_else(|| {
            EngineError::Unsupported(format!("GPU {gpu} GI {} offers no compute profile", gi.id))
        })?;
    nvml.create_compute_instance(index, gi.id, full.id)
        .map(|ci| ci.id)
        .map_err(|e| {
            host.nvml_err(
                format!("cannot create a compute instance in {gpu} GI {}", gi.id),
                gpu,
                e,
            )
        })
}

fn present(gi: &GpuInstance, ci: Option<u32>) -> Observed {
    Observed::Present(Handles {
        gpu_instance_id: Some(gi.id),
        compute_instance_id: ci,
        ..Handles::default()
    })
}

impl Backend for MigBackend {
    fn validate(&self, host: &TimedHost, spec: &SliceSpec) -> Result<()> {
        let gpu = spec.pci()?;
        let (name, start) = spec_parts(spec)?;
        let profile = profile_by_name(host, gpu, name)?;
        check_start(host, gpu, profile.id, start, || {
            format!("MIG profile {name}")
        })
    }

    fn plan(&self, host: &TimedHost, spec: &SliceSpec, reserved: &[Identity]) -> Result<Identity> {
        let gpu = spec.pci()?;
        self.validate(host, spec)?;
        let (name, start) = spec_parts(spec)?;
        Ok(Identity::Mig {
            start: plan_start(host, gpu, name, start, reserved)?,
            profile: name.clone(),
        })
    }

    fn realize(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<Handles> {
        let gpu = spec.pci()?;
        let (start, name) = id_parts(id)?;
        let (profile, nvml, index) = profile_on_mig_gpu(host, gpu, name)?;
        let gi = match at_start(host, gpu, index, start)? {
            Some(gi) if gi.profile_id == profile.id => gi,
            Some(gi) => {
                return Err(EngineError::Conflict(format!(
                    "slot {start} on GPU {} holds GPU instance {} of another profile",
                    gpu, gi.id
                )));
            }
            None => create_gi(host, gpu, index, &profile, name, start)?,
        };
        if let Some(ci) = cis(host, gpu, index, gi.id)?.first() {
            return Ok(Handles {
                gpu_instance_id: Some(gi.id),
                compute_instance_id: Some(ci.id),
                ..Handles::default()
            });
        }
        match create_ci(host, gpu, index, &gi, profile.slice_count) {
            Ok(ci) => Ok(Handles {
                gpu_instance_id: Some(gi.id),
                compute_instance_id: Some(ci),
                ..Handles::default()
            }),
            Err(e) => {
                // Leave nothing half-made: the GPU instance goes with its failed compute instance.
                if let Err(undo) = nvml.destroy_gpu_instance(index, gi.id) {
                    tracing::warn!(gpu = %gpu, gi = gi.id, error = %undo, "cannot undo GPU instance");
                }
                Err(e)
            }
        }
    }

    fn destroy(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<()> {
        let gpu = spec.pci()?;
        let (start, name) = id_parts(id)?;
        let (profile, nvml, index) = profile_on_mig_gpu(host, gpu, name)?;
        let Some(gi) = at_start(host, gpu, index, start)? else {
            return Ok(());
        };
        if gi.profile_id != profile.id {
            return Err(EngineError::Conflict(format!(
                "slot {start} on GPU {} holds GPU instance {} of another profile; it is not ours to remove",
                gpu, gi.id
            )));
        }
        for ci in cis(host, gpu, index, gi.id)? {
            nvml.destroy_compute_instance(index, gi.id, ci.id)
                .map_err(|e| {
                    host.nvml_err(
                        format!(
                            "cannot destroy compute instance {} of {gpu} GI {}",
                            ci.id, gi.id
                        ),
                        gpu,
                        e,
                    )
                })?;
        }
        nvml.destroy_gpu_instance(index, gi.id)
            .map_err(|e| host.nvml_err(format!("cannot destroy {gpu} GI {}", gi.id), gpu, e))
    }

    fn observe(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<Observed> {
        let gpu = spec.pci()?;
        let (start, name) = id_parts(id)?;
        let (profile, _, index) = profile_on_mig_gpu(host, gpu, name)?;
        Ok(match at_start(host, gpu, index, start)? {
            None => Observed::Absent,
            Some(gi) if gi.profile_id != profile.id => Observed::Changed(format!(
                "slot {start} holds GPU instance {} of another profile",
                gi.id
            )),
            Some(gi) => match cis(host, gpu, index, gi.id)?.first() {
                // A GPU instance without its compute instance: realize completes it.
                None => Observed::Absent,
                Some(ci) => present(&gi, Some(ci.id)),
            },
        })
    }
}
