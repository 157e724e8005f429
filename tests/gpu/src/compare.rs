//! A real GPU's observation beside the simulator's, item by item.
//!
//! Only what the model claims is compared: identity, the MIG profile and placement tables, the
//! vGPU types, the NVLink peer count and the PCI files a GPU model fixes (SR-IOV geometry,
//! drivers, `unbindLock`, the VF's `nvidia/` file names). Host state (MIG mode, instances,
//! `sriov_numvfs`, file contents that follow allocations) is recorded in the observation only.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::observe::{Answer, GpuObservation};

/// NVML's `NOT_SUPPORTED`.
const NOT_SUPPORTED: u32 = gpu::NvmlCode::NOT_SUPPORTED.0;

/// PF files a GPU model fixes.
const MODEL_PF_FILES: &[&str] = &[
    "vendor",
    "device",
    "subsystem_vendor",
    "subsystem_device",
    "sriov_totalvfs",
    "sriov_offset",
    "sriov_stride",
    "sriov_vf_device",
    "driver",
    "proc/unbindLock",
];

/// How the two sides compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The same.
    Equal,
    /// Not the same; both values are given (`null` where one side lacks the entry).
    Differs,
    /// The simulator has no model of it.
    NotModelled,
    /// The real host did not show it (MIG off, no VFs, a driver without vGPU).
    NotObserved,
}

/// One compared item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// Dotted name, e.g. `mig.profile.1g.18gb`.
    pub name: String,
    /// The verdict.
    pub verdict: Verdict,
    /// What the real host showed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub real: Option<Value>,
    /// What the simulator showed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim: Option<Value>,
}

/// An item from both sides' values: `None` is "this side has no such item".
pub fn item(name: impl Into<String>, real: Option<Value>, sim: Option<Value>) -> Item {
    let verdict = match (&real, &sim) {
        (_, None) => Verdict::NotModelled,
        (None, _) => Verdict::NotObserved,
        (Some(r), Some(s)) if r == s => Verdict::Equal,
        _ => Verdict::Differs,
    };
    Item {
        name: name.into(),
        verdict,
        real,
        sim,
    }
}

/// Compares a real GPU with its model; every item is "not modelled" without one.
pub fn compare_gpu(real: &GpuObservation, sim: Option<&GpuObservation>) -> Vec<Item> {
    let mut out = Vec::new();
    identity(&mut out, real, sim);
    mig(&mut out, real, sim);
    vgpu(&mut out, real, sim);
    nvlink(&mut out, real, sim);
    pci(&mut out, real, sim);
    // Neither side has it (no VFs on a GPU without SR-IOV): nothing to say.
    out.retain(|i| i.real.is_some() || i.sim.is_some());
    out
}

fn json_of<T: Serialize>(v: T) -> Option<Value> {
    serde_json::to_value(v).ok()
}

fn identity(out: &mut Vec<Item>, real: &GpuObservation, sim: Option<&GpuObservation>) {
    let name = |o: &GpuObservation| o.info.ok().and_then(|i| json_of(&i.name));
    let memory = |o: &GpuObservation| o.info.ok().and_then(|i| json_of(i.memory_total_mib));
    out.push(item("identity.name", name(real), sim.and_then(name)));
    out.push(item(
        "identity.memory_total_mib",
        memory(real),
        sim.and_then(memory),
    ));
}

/// Whether the GPU has MIG: its mode answers, or NVML says `NOT_SUPPORTED`.
fn mig_supported(o: &GpuObservation) -> Option<Value> {
    match &o.mig_mode {
        Answer::Ok(_) => Some(json!(true)),
        Answer::Error { code, .. } if *code == NOT_SUPPORTED => Some(json!(false)),
        Answer::Error { .. } => None,
    }
}

/// A side's entries by key, or `None` when it showed no table at all.
type Table = Option<Vec<(String, Value)>>;

fn mig_profiles(o: &GpuObservation, placements: bool) -> Table {
    let list = o.gpu_instance_profiles.ok().filter(|l| !l.is_empty())?;
    Some(
        list.iter()
            .filter_map(|p| {
                let value = if placements {
                    json_of(&p.placements)?
                } else {
                    json_of(&p.profile)?
                };
                Some((p.profile.name.to_string(), value))
            })
            .collect(),
    )
}

fn mig(out: &mut Vec<Item>, real: &GpuObservation, sim: Option<&GpuObservation>) {
    out.push(item(
        "mig.supported",
        mig_supported(real),
        sim.and_then(mig_supported),
    ));
    for (prefix, placements) in [("mig.profile", false), ("mig.placements", true)] {
        tables(
            out,
            prefix,
            mig_profiles(real, placements),
            sim.and_then(|s| mig_profiles(s, placements)),
        );
    }
}

/// One item per key of either table. A key one table lacks is `null` there; a side without a
/// table says "not observed" / "not modelled" for every key.
fn tables(out: &mut Vec<Item>, prefix: &str, real: Table, sim: Table) {
    let keys: BTreeSet<&String> = real
        .iter()
        .chain(sim.iter())
        .flatten()
        .map(|(k, _)| k)
        .collect();
    let lookup = |t: &Table, k: &str| {
        t.as_ref().map(|t| {
            t.iter()
                .find(|(key, _)| key == k)
                .map_or(Value::Null, |(_, v)| v.clone())
        })
    };
    for key in keys {
        out.push(item(
            format!("{prefix}.{key}"),
            lookup(&real, key),
            lookup(&sim, key),
        ));
    }
}

/// vGPU types by name, without the type id (ids change between driver releases).
fn vgpu_types(o: &GpuObservation) -> Table {
    let list = o.vgpu_types.ok().filter(|l| !l.is_empty())?;
    Some(
        list.iter()
            .map(|t| {
                let value = json!({
                    "class": t.class,
                    "framebuffer_mib": t.framebuffer_mib,
                    "max_instances": t.max_instances,
                    "gpu_instance_profile_id": t.gpu_instance_profile_id,
                });
                (t.name.clone(), value)
            })
            .collect(),
    )
}

fn vgpu(out: &mut Vec<Item>, real: &GpuObservation, sim: Option<&GpuObservation>) {
    tables(out, "vgpu.type", vgpu_types(real), sim.and_then(vgpu_types));
    if let Some(creatable) = &real.creatable_vgpu_types {
        let sim_side = sim.and_then(|s| s.creatable_vgpu_types.as_ref());
        out.push(item(
            "vgpu.creatable_nvml",
            json_of(creatable),
            sim_side.and_then(json_of),
        ));
    }
}

fn nvlink(out: &mut Vec<Item>, real: &GpuObservation, sim: Option<&GpuObservation>) {
    // Addresses differ between hosts; how many GPUs a GPU reaches does not.
    let peers = |o: &GpuObservation| o.nvlink_peers.ok().map(|p| json!(p.len()));
    out.push(item(
        "nvlink.gpu_peer_count",
        peers(real),
        sim.and_then(peers),
    ));
    if let Some(links) = &real.nvlinks {
        let sim_side = sim.and_then(|s| s.nvlinks.as_ref());
        out.push(item(
            "nvlink.links",
            json_of(links),
            sim_side.and_then(json_of),
        ));
    }
}

fn file(o: &GpuObservation, name: &str) -> Option<Value> {
    let seen = o.pci.as_ref()?.files.get(name)?;
    json_of(seen)
}

/// The first VF's driver and the names of its `nvidia/` files.
fn first_vf(o: &GpuObservation) -> Option<(Option<Value>, Value)> {
    let vf = o.pci.as_ref()?.vfs.first()?;
    let names: Vec<&String> = vf
        .files
        .keys()
        .filter(|k| k.starts_with("nvidia/"))
        .collect();
    let driver = vf.files.get("driver").and_then(json_of);
    Some((driver, json!(names)))
}

fn pci(out: &mut Vec<Item>, real: &GpuObservation, sim: Option<&GpuObservation>) {
    for name in MODEL_PF_FILES {
        out.push(item(
            format!("pci.pf.{name}"),
            file(real, name),
            sim.and_then(|s| file(s, name)),
        ));
    }
    let (real_vf, sim_vf) = (first_vf(real), sim.and_then(first_vf));
    out.push(item(
        "pci.vf.driver",
        real_vf.as_ref().and_then(|v| v.0.clone()),
        sim_vf.as_ref().and_then(|v| v.0.clone()),
    ));
    out.push(item(
        "pci.vf.nvidia_files",
        real_vf.map(|v| v.1),
        sim_vf.map(|v| v.1),
    ));
}

/// How many items have each verdict.
pub fn tally(items: &[Item]) -> std::collections::BTreeMap<Verdict, usize> {
    let mut out = std::collections::BTreeMap::new();
    for i in items {
        *out.entry(i.verdict).or_insert(0) += 1;
    }
    out
}
