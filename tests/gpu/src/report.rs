//! The probe's report: `report.json` (everything observed, the model chosen and the comparison)
//! and `summary.txt` (the comparison for a reader). The format is `tests/gpu/README.md`'s.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::compare::{Item, Verdict, compare_gpu, tally};
use crate::model::{MatchedBy, ModelChoice, find_model, observe_model};
use crate::observe::{Answer, GpuObservation, Sources, observe_gpu};
use crate::paths;
use crate::pci_files::FileObservation;

/// The report format's name and version.
pub const FORMAT: &str = "vgpud-gpu-probe/1";

/// One GPU: what it showed, its model, and the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuReport {
    /// What the real GPU showed.
    pub observation: GpuObservation,
    /// The simulator's model of it; `None` when `sim` has none.
    pub model: Option<ModelChoice>,
    /// Why there is no model, or why it could not be observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_note: Option<String>,
    /// The simulated GPU's observation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim_observation: Option<GpuObservation>,
    /// Item by item.
    pub comparison: Vec<Item>,
    /// Items per verdict.
    pub tally: BTreeMap<Verdict, usize>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`FORMAT`].
    pub format: String,
    /// Seconds since the Unix epoch when the probe ran.
    pub probed_at_unix: u64,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: FileObservation,
    /// `/sys/module/nvidia/version`.
    pub nvidia_module_version: FileObservation,
    /// NVML's driver version, or its error.
    pub driver_version: Answer<String>,
    /// Every GPU NVML lists.
    pub gpus: Vec<GpuReport>,
}

/// Observes every GPU of `src` and compares each with its model among `candidates`.
pub fn probe(src: Sources<'_>, candidates: &[sim::Profile]) -> anyhow::Result<Report> {
    let count = src.nvml.device_count().context("NVML device count")?;
    let observations: Vec<GpuObservation> = (0..count).map(|i| observe_gpu(src, i)).collect();
    let mut ordinals: BTreeMap<String, usize> = BTreeMap::new();
    let gpus = observations
        .into_iter()
        .map(|o| {
            let name = o.info.ok().map(|i| i.name.clone()).unwrap_or_default();
            let ordinal = ordinals.entry(name).or_insert(0);
            let report = gpu_report(o, candidates, *ordinal);
            *ordinal += 1;
            report
        })
        .collect();
    Ok(Report {
        format: FORMAT.to_owned(),
        probed_at_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        kernel: FileObservation::read(src.sysfs, Path::new(paths::KERNEL_RELEASE)),
        nvidia_module_version: FileObservation::read(
            src.sysfs,
            Path::new(paths::NVIDIA_MODULE_VERSION),
        ),
        driver_version: src.nvml.driver_version().into(),
        gpus,
    })
}

/// The comparison of one GPU with the `ordinal`-th simulated GPU of its model.
pub fn gpu_report(
    observation: GpuObservation,
    candidates: &[sim::Profile],
    ordinal: usize,
) -> GpuReport {
    let name = observation
        .info
        .ok()
        .map(|i| i.name.clone())
        .unwrap_or_default();
    let memory = observation.info.ok().map_or(0, |i| i.memory_total_mib);
    let device = match observation.pci.as_ref().and_then(|p| p.files.get("device")) {
        Some(FileObservation::Text(d)) => Some(d.clone()),
        _ => None,
    };
    let (model, model_note, sim_observation) =
        match find_model(candidates, &name, device.as_deref(), memory) {
            None => (None, Some(format!("no sim model for {name:?}")), None),
            Some((profile, key, matched_by)) => match observe_model(profile, &key, ordinal) {
                Ok((sim_gpu, seen)) => {
                    let choice = ModelChoice {
                        profile: profile.name.clone(),
                        model: key,
                        matched_by,
                        sim_gpu,
                    };
                    (Some(choice), None, Some(seen))
                }
                Err(e) => (None, Some(format!("{e:#}")), None),
            },
        };
    let mut comparison = compare_gpu(&observation, sim_observation.as_ref());
    if model
        .as_ref()
        .is_some_and(|m| m.matched_by == MatchedBy::MigFamily)
    {
        only_mig(&mut comparison);
    }
    GpuReport {
        tally: tally(&comparison),
        observation,
        model,
        model_note,
        sim_observation,
        comparison,
    }
}

/// A model that shares only the MIG family says nothing about the rest.
fn only_mig(items: &mut [Item]) {
    for item in items.iter_mut().filter(|i| !i.name.starts_with("mig.")) {
        item.sim = None;
        item.verdict = Verdict::NotModelled;
    }
}

impl Report {
    /// Writes `report.json` and `summary.txt` into `dir` (created if missing).
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let json = serde_json::to_string_pretty(self)?;
        let path = dir.join("report.json");
        std::fs::write(&path, json + "\n").with_context(|| format!("write {}", path.display()))?;
        let path = dir.join("summary.txt");
        std::fs::write(&path, self.summary())
            .with_context(|| format!("write {}", path.display()))?;
        Ok(())
    }

    /// The text summary.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{FORMAT}");
        let _ = writeln!(out, "kernel: {}", shown(&self.kernel));
        let _ = writeln!(out, "nvidia module: {}", shown(&self.nvidia_module_version));
        let driver = match &self.driver_version {
            Answer::Ok(v) => v.clone(),
            Answer::Error { message, .. } => message.clone(),
        };
        let _ = writeln!(out, "NVML driver: {driver}");
        for gpu in &self.gpus {
            gpu_summary(&mut out, gpu);
        }
        out
    }
}

fn gpu_summary(out: &mut String, gpu: &GpuReport) {
    let o = &gpu.observation;
    let (name, addr) = o.info.ok().map_or(("?".to_owned(), "?".to_owned()), |i| {
        (i.name.clone(), i.pci_address.to_string())
    });
    let _ = writeln!(out, "\nGPU {} {name} at {addr}", o.index);
    let _ = writeln!(
        out,
        "  MIG mode: {}",
        serde_json::to_string(&o.mig_mode).unwrap_or_default()
    );
    match &gpu.model {
        Some(m) => {
            let _ = writeln!(
                out,
                "  model: sim profile {} model {} ({:?}), simulated GPU {}",
                m.profile, m.model, m.matched_by, m.sim_gpu
            );
        }
        None => {
            let note = gpu.model_note.as_deref().unwrap_or("none");
            let _ = writeln!(out, "  model: none ({note})");
        }
    }
    let tally: Vec<String> = gpu
        .tally
        .iter()
        .map(|(v, n)| format!("{} {n}", verdict(*v)))
        .collect();
    let _ = writeln!(
        out,
        "  items: {} (the equal ones are not listed)",
        tally.join(", ")
    );
    for item in gpu
        .comparison
        .iter()
        .filter(|i| i.verdict != Verdict::Equal)
    {
        let _ = write!(out, "  {:<13} {}", verdict(item.verdict), item.name);
        if item.verdict == Verdict::Differs {
            let side = |v: &Option<serde_json::Value>| {
                v.as_ref().map_or("-".to_owned(), |v| v.to_string())
            };
            let _ = write!(
                out,
                "\n      real: {}\n      sim:  {}",
                side(&item.real),
                side(&item.sim)
            );
        }
        out.push('\n');
    }
}

fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Equal => "equal",
        Verdict::Differs => "DIFFERS",
        Verdict::NotModelled => "not-modelled",
        Verdict::NotObserved => "not-observed",
    }
}

fn shown(f: &FileObservation) -> String {
    match f {
        FileObservation::Text(t) | FileObservation::Link(t) => t.clone(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}
