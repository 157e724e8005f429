//! The simulator's model of a GPU: the `sim` profile and GPU model that describe it, and what a
//! simulated host of that profile shows through the same read-only traits.
//!
//! Nothing here restates the simulator's rules: the model's answers are the simulated host's,
//! so the comparison follows whatever `sim` says.

use anyhow::Context;
use ids::PciAddress;
use serde::{Deserialize, Serialize};
use sim::{Profile, SimHost};

use crate::nvml_extra::NotModelled;
use crate::observe::{Answer, GpuObservation, ProfileObservation, Sources, observe_gpu};
use crate::reads::{ReadNvml, ReadSysfs};

/// How the model was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchedBy {
    /// The model's product name is NVML's.
    ProductName,
    /// The model's PCI device id is the GPU's.
    PciDeviceId,
    /// Only the MIG table: no model is this GPU, but one has the MIG family `sim` guesses for
    /// it from its name and memory (`MigFamily::from_product_name`). Only `mig.*` items are
    /// compared.
    MigFamily,
}

/// The model chosen for a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelChoice {
    /// The `sim` profile (`hgx-h200`).
    pub profile: String,
    /// The model's key in it (`h200`).
    pub model: String,
    /// How it was found.
    pub matched_by: MatchedBy,
    /// The simulated GPU observed for it.
    pub sim_gpu: PciAddress,
}

/// The built-in profiles, the default candidates.
pub fn builtin_profiles() -> anyhow::Result<Vec<Profile>> {
    Profile::builtin_names()
        .iter()
        .map(|name| Profile::builtin(name).with_context(|| format!("sim profile {name}")))
        .collect()
}

/// The first candidate model with NVML's product name, else the first with the PCI device id
/// (`0x2335` as sysfs writes it), else the first with the MIG family `sim` guesses from the name
/// and `memory_mib`.
pub fn find_model<'a>(
    candidates: &'a [Profile],
    product_name: &str,
    pci_device: Option<&str>,
    memory_mib: u64,
) -> Option<(&'a Profile, String, MatchedBy)> {
    let by = |want: &dyn Fn(&sim::GpuModel) -> bool, how| {
        candidates.iter().find_map(|p| {
            p.models
                .iter()
                .find(|(_, m)| want(m))
                .map(|(key, _)| (p, key.clone(), how))
        })
    };
    let device = pci_device.map(|d| d.trim_start_matches("0x").to_ascii_lowercase());
    by(
        &|m| m.name.eq_ignore_ascii_case(product_name),
        MatchedBy::ProductName,
    )
    .or_else(|| {
        let device = device.as_deref()?;
        by(
            &|m| m.device.to_string().trim_start_matches("0x") == device,
            MatchedBy::PciDeviceId,
        )
    })
    .or_else(|| {
        let family = sim::MigFamily::from_product_name(product_name, memory_mib)?;
        by(&|m| m.mig == Some(family), MatchedBy::MigFamily)
    })
}

/// Observes the simulated GPU that stands for the `ordinal`-th real GPU of this model: a host of
/// `profile` as it boots, except that the GPU-instance profile table is read from a copy where
/// MIG is on for that GPU (NVML lists no profiles while MIG is off, on the real driver and in
/// the simulator alike) and no VFs are enabled at boot (VFs and MIG mode changes do not mix).
pub fn observe_model(
    profile: &Profile,
    model: &str,
    ordinal: usize,
) -> anyhow::Result<(PciAddress, GpuObservation)> {
    let of_model: Vec<PciAddress> = profile
        .gpus
        .iter()
        .filter(|g| g.model == model)
        .map(|g| g.address)
        .collect();
    let gpu = *of_model
        .get(ordinal)
        .or(of_model.first())
        .with_context(|| format!("sim profile {} has no GPU of model {model}", profile.name))?;
    let mut seen = observe_sim(profile.clone(), gpu)?;
    if profile.models.get(model).is_some_and(|m| m.mig.is_some()) {
        seen.gpu_instance_profiles = mig_table(profile, model, gpu)?;
    }
    Ok((gpu, seen))
}

fn mig_table(
    profile: &Profile,
    model: &str,
    gpu: PciAddress,
) -> anyhow::Result<Answer<Vec<ProfileObservation>>> {
    let mut mig_on = profile.clone();
    for spec in mig_on.gpus.iter_mut().filter(|g| g.address == gpu) {
        spec.mig_enabled = true;
    }
    if let Some(sriov) = mig_on.models.get_mut(model).and_then(|m| m.sriov.as_mut()) {
        sriov.boot_vfs = 0;
    }
    Ok(observe_sim(mig_on, gpu)?.gpu_instance_profiles)
}

fn observe_sim(profile: Profile, gpu: PciAddress) -> anyhow::Result<GpuObservation> {
    let name = profile.name.clone();
    let host = SimHost::new(profile).with_context(|| format!("simulated host of {name}"))?;
    let nvml = host.nvml();
    let sysfs = host.sysfs();
    let index = nvml_index(ReadNvml::new(&*nvml), gpu)
        .with_context(|| format!("simulated NVML of {name} does not list {gpu}"))?;
    let src = Sources {
        nvml: ReadNvml::new(&*nvml),
        extra: &NotModelled,
        sysfs: ReadSysfs::new(&*sysfs),
    };
    Ok(observe_gpu(src, index))
}

/// NVML's index of the GPU at `addr`.
pub fn nvml_index(nvml: ReadNvml<'_>, addr: PciAddress) -> Option<u32> {
    let count = nvml.device_count().ok()?;
    (0..count).find(|i| nvml.device_info(*i).is_ok_and(|d| d.pci_address == addr))
}
