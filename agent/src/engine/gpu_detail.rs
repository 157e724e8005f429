//! One GPU in detail: the inventory's description with health (failed owned slices, discovery
//! warnings, vendor calls that time out), NVML telemetry, and per slice type how many owned
//! slices are free and how many more could be created (first fit, each alone).

use std::collections::HashSet;

use ids::{MigProfileName, PciAddress};
use numa::CpuSet;

use super::backend::refuse_if_passed_through;
use super::error::{EngineError, Result};
use super::handle::Engine;
use super::limits::MAX_COUNT;
use super::locks::lock;
use super::model::{BackendKind, SliceId, SliceKind, SliceSpec, SliceState};
use super::reports::{GpuDetail, GpuHealth, GpuUtilization, SliceCapacity};
use super::resolve::kind_for;
use super::snapshot::{self, Ownership};

/// The types a GPU offers, as requests name them, with the kind each means there.
pub(super) fn offered(engine: &Engine, g: &inventory::Gpu) -> Vec<(String, SliceKind)> {
    // A profile the discovery listed for the GPU with MIG on is that profile there: resolving
    // its name would ask NVML again (MIG mode and every profile, per name, every poll), and
    // the offer is kept under the inventory's own rule, so it is no older for it.
    let mut listed: Vec<(String, SliceKind)> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    if let Some(m) = g.mig.as_ref().filter(|m| m.enabled) {
        for p in &m.profiles {
            match p.name.parse::<MigProfileName>() {
                Ok(profile) => listed.push((
                    p.name.clone(),
                    SliceKind::Mig {
                        profile,
                        start: None,
                    },
                )),
                Err(_) => names.push(p.name.clone()),
            }
        }
        // MIG-backed vendor-VFIO types live inside GPU instances: offered only in MIG mode.
        names.extend(
            g.vgpu_types
                .iter()
                .filter(|t| t.gpu_instance_profile_id.is_some())
                .map(|t| t.name.clone()),
        );
    }
    names.extend(g.mdev_types.iter().map(|t| t.id.to_string()));
    if snapshot::main_mode(g) == BackendKind::NvidiaVfio {
        names.extend(g.vgpu_types.iter().map(|t| t.name.clone()));
    }
    names.push("vf".into());
    names.push("gpu".into());
    // Read once for every name: a PCI device read is dozens of sysfs reads.
    let Ok(dev) = engine.host().gpu_identity(g.pci_address) else {
        return Vec::new();
    };
    if refuse_if_passed_through(&dev).is_err() {
        listed.clear();
    }
    let resolved = names.into_iter().filter_map(|n| {
        let kind = kind_for(engine.host(), &dev, &n)?;
        Some((n, kind))
    });
    listed
        .into_iter()
        .chain(resolved)
        // Offering VFs amdgpu cannot make would promise slices that creating refuses (and
        // Placement would hand them out).
        .filter(|(_, kind)| {
            *kind != SliceKind::SriovVf || super::vfs::makes_vfs(engine.host(), g.pci_address)
        })
        .collect()
}

/// How many more slices of `kind` fit on `gpu`, each created alone (first fit, at most 64).
pub(super) fn creatable(
    inventory: &inventory::HostInventory,
    own: &Ownership,
    gpu: PciAddress,
    kind: &SliceKind,
) -> u32 {
    let Some(alone) = only_gpu(inventory, gpu) else {
        return 0;
    };
    let spec = SliceSpec {
        gpu: gpu.into(),
        kind: kind.clone(),
    };
    let mut view = snapshot::build(
        &alone,
        own,
        Some(std::slice::from_ref(&spec)),
        None,
        &CpuSet::default(),
    );
    let Some(ask) = view.ask.clone() else {
        return 0;
    };
    let req = sched::Request::new("vgpud:capacity", ask);
    let mut n = 0;
    while n < MAX_COUNT {
        match sched::decide(&view.snap, &req, &sched::Policy::FirstFit) {
            // Each new slice takes what an allocation's would, its VF included.
            Ok(d) => view.commit_new(&req, &d),
            Err(_) => break,
        }
        n += 1;
    }
    n
}

/// `inventory` with `gpu` its only GPU, or `None` where it has no such GPU. A lone slice's
/// fit on one GPU depends on nothing else the host has (every other GPU is unavailable to a
/// request pinned to this one, and the count asks no VM room of a NUMA node), and the view of
/// one GPU costs a sixteenth of a 16-GPU host's: the capacity report counts every type of
/// every GPU.
fn only_gpu(
    inventory: &inventory::HostInventory,
    gpu: PciAddress,
) -> Option<inventory::HostInventory> {
    let g = inventory.gpus.iter().find(|g| g.pci_address == gpu)?;
    Some(inventory::HostInventory {
        hostname: inventory.hostname.clone(),
        source: inventory.source.clone(),
        numa_nodes: inventory.numa_nodes.clone(),
        gpus: vec![g.clone()],
        other_mdev_parents: Vec::new(),
        pci_devices: Vec::new(),
        vendor_libraries: inventory.vendor_libraries.clone(),
        warnings: Vec::new(),
    })
}

impl Engine {
    /// Telemetry of one GPU from NVML, when it answers.
    fn telemetry(&self, gpu: PciAddress) -> Result<Option<gpu::Telemetry>> {
        let Ok(nvml) = self.host().nvml() else {
            return Ok(None);
        };
        let index = match self.host().nvml_index(gpu) {
            Ok(i) => i,
            Err(e @ EngineError::Timeout { .. }) => return Err(e),
            Err(_) => return Ok(None),
        };
        match nvml.telemetry(index) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.code == gpu::NvmlCode::TIMEOUT => {
                Err(self
                    .host()
                    .nvml_err(format!("cannot read telemetry of {gpu}"), gpu, e))
            }
            Err(_) => Ok(None),
        }
    }

    /// One GPU with health, utilisation and, per slice type, how many more fit.
    pub(crate) fn gpu_detail(&self, address: PciAddress) -> Result<GpuDetail> {
        let inventory = self.inventory();
        let gpu = inventory
            .gpus
            .iter()
            .find(|g| g.pci_address == address)
            .cloned()
            .ok_or_else(|| EngineError::NotFound(format!("GPU {address}")))?;
        let claims: HashSet<SliceId> = lock(&self.inner.claims).clone();
        let own = self.read(|d| Ownership::of(d, &claims));
        let mut health = GpuHealth::Ok;
        let mut reasons: Vec<String> = gpu.warnings.clone();
        let utilization = match self.telemetry(address) {
            Ok(t) => t.map(|t| GpuUtilization {
                gpu_pct: t.gpu_util_pct,
                memory_copy_pct: t.mem_copy_util_pct,
                memory_used_mib: t.fb_used_mib,
                memory_free_mib: t.fb_free_mib,
                temperature_c: t.temperature_c,
                power_mw: t.power_mw,
            }),
            Err(e) => {
                health = GpuHealth::Unresponsive;
                reasons.push(e.to_string());
                None
            }
        };
        let slices = self.slices_on(&address.into());
        let failed = slices
            .iter()
            .filter(|s| s.state == SliceState::Failed)
            .count();
        if failed > 0 {
            reasons.push(format!("{failed} owned slices are failed"));
        }
        if health == GpuHealth::Ok && !reasons.is_empty() {
            health = GpuHealth::Degraded;
        }
        if let Some(q) = self.quarantined(address) {
            health = GpuHealth::Quarantined;
            reasons.insert(0, q.refusal());
        }
        // The capacity figures need this GPU only: a snapshot of the others per type would be
        // built and thrown away.
        let alone = inventory::HostInventory {
            gpus: vec![gpu.clone()],
            ..inventory
        };
        let capacity = if health == GpuHealth::Unresponsive {
            Vec::new()
        } else {
            self.offered_types(&gpu)
                .into_iter()
                .map(|(name, kind)| SliceCapacity {
                    free: slices
                        .iter()
                        .filter(|s| s.spec.kind.satisfies(&kind))
                        .filter(|s| s.state == SliceState::Ready)
                        .count() as u32,
                    creatable: creatable(&alone, &own, address, &kind),
                    backend: kind.backend(),
                    slice_type: name,
                })
                .collect()
        };
        Ok(GpuDetail {
            gpu,
            health,
            health_reasons: reasons,
            utilization,
            capacity,
        })
    }
}
