//! Bringing the host back in line with the desired state.
//!
//! Order: finish or roll back the intents a crash left (creates back, destroys and partition
//! changes forward); make sure every owned VF exists (VF counts reset at boot); re-create owned
//! slices the host lost, passthrough and VFs first, then MIG instances, then vendor-VFIO types
//! (a MIG-backed one makes its GPU instance, then writes the type), then mdevs, with their
//! recorded identities; report foreign slices (never touch them); apply layouts.

use std::collections::{BTreeMap, BTreeSet};

use ids::PciAddress;
use inventory::{ExistingSlice, HostInventory};
use serde::{Deserialize, Serialize};

use super::backend::{self, Observed};
use super::error::{EngineError, Result, chain};
use super::events::Event;
use super::handle::Engine;
use super::layout::GpuLayoutStatus;
use super::locks::lock;
use super::model::{BackendKind, DeviceRef, Identity, SliceId};
use super::presence::DeviceChange;
use super::state::{Intent, OwnedSlice};
use super::vfs;

/// What a reconcile pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileReport {
    /// Intents finished (destroys) or rolled back (creates).
    pub intents_resolved: usize,
    /// Intents left open, with why (a vendor call still out, a rollback that failed).
    pub intents_pending: Vec<String>,
    /// Owned slices the host had lost, re-created with their identities.
    pub recreated: Vec<SliceId>,
    /// Owned slices that are not as they should be, with why.
    pub failed: Vec<(SliceId, String)>,
    /// Slices vgpud did not create, left alone.
    pub foreign: Vec<String>,
    /// Free owned slices destroyed because re-enabling VFs destroys their GPU instances (an
    /// NVIDIA VF change rebinds the PF), with why.
    #[serde(default)]
    pub given_up: Vec<(SliceId, String)>,
    /// NVIDIA PFs an interrupted SR-IOV sequence left off `nvidia`: what was found and done.
    #[serde(default)]
    pub interrupted_sriov: Vec<String>,
    /// Devices with owned slices that left the PCI bus since the last pass.
    #[serde(default)]
    pub devices_removed: Vec<DeviceChange>,
    /// Devices with owned slices that came back since the last pass (their slices re-created
    /// in the same pass).
    #[serde(default)]
    pub devices_returned: Vec<DeviceChange>,
    /// Layout status per GPU.
    pub layouts: Vec<GpuLayoutStatus>,
    /// libvirt domains whose vgpud records name allocations or slices that no longer exist
    /// (filled in by the service after it rebuilt the VM links; empty without libvirt).
    #[serde(default)]
    pub stale_vm_links: Vec<StaleVmLink>,
}

/// A domain's record of an allocation that does not match the engine's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaleVmLink {
    /// The libvirt domain.
    pub domain: String,
    /// The allocation id recorded in the domain.
    pub allocation: String,
    /// What no longer exists.
    pub reason: String,
}

/// Re-creation order: whole GPUs and VFs, then MIG instances, then vendor-VFIO types (a
/// MIG-backed one makes its GPU instance first, then writes the type), then mdevs.
fn phase(kind: BackendKind) -> u8 {
    match kind {
        BackendKind::Passthrough | BackendKind::SriovVf => 0,
        BackendKind::Mig => 1,
        BackendKind::NvidiaVfio => 2,
        BackendKind::Mdev => 3,
    }
}

impl Engine {
    /// Runs a reconcile pass: before the agent reports ready, after hot-plug, periodically.
    /// Only a store failure fails the pass; everything else is in the report.
    pub fn reconcile(&self) -> Result<ReconcileReport> {
        let mut report = ReconcileReport::default();
        // A reconcile looks at the host as it is now, and leaves the inventory fresh.
        self.host_changed();
        // First: a PF left on pci-pf-stub hides its GPU from NVML and its VFs' vGPU files, which
        // the intents' rollbacks and the restores below need.
        self.finish_interrupted_sriov(&mut report);
        self.track_presence(&mut report);
        self.resolve_intents(&mut report)?;
        self.restore_vfs(&mut report);
        self.restore_owned(&mut report);
        self.find_foreign(&mut report);
        report.layouts = self.apply_layouts_on(&[])?;
        // What clients see of the slices is read afresh after what the pass re-made or failed.
        self.inner.observations.forget();
        self.emit(Event::ReconcileDone {
            recreated: report.recreated.len(),
            intents_resolved: report.intents_resolved,
            failed: report.failed.len(),
            foreign: report.foreign.len(),
        });
        Ok(report)
    }

    fn resolve_intents(&self, report: &mut ReconcileReport) -> Result<()> {
        let intents = self.read(|d| d.intents.clone());
        for (n, intent) in intents {
            let _gpu = self.inner.gpu_locks.lock(intent.gpu().clone());
            if !self.read(|d| d.intents.contains_key(&n)) {
                continue;
            }
            if self.host().runner.any_stuck() {
                report.intents_pending.push(format!(
                    "intent {n} on {}: a vendor call is still out",
                    intent.gpu()
                ));
                continue;
            }
            match self.resolve_intent(n, &intent) {
                Ok(()) => report.intents_resolved += 1,
                Err(e @ EngineError::Store(_)) => return Err(e),
                Err(e) => report.intents_pending.push(format!(
                    "intent {n} on {}: {}",
                    intent.gpu(),
                    chain(&e)
                )),
            }
        }
        Ok(())
    }

    /// A create is rolled back (what its identity shows on the host is ours); a destroy and a
    /// partition change are rolled forward.
    fn resolve_intent(&self, n: u64, intent: &Intent) -> Result<()> {
        match intent {
            Intent::Create {
                gpu,
                slice,
                enabled_vfs,
            } => {
                match slice {
                    Some(s) => self.undo_create(&s.spec, Some(&s.identity), *enabled_vfs)?,
                    None if *enabled_vfs => {
                        if let Some(pf) = gpu.pci() {
                            vfs::disable_if_unused(self.host(), pf, &[])?;
                        }
                    }
                    None => {}
                }
                tracing::info!(intent = n, %gpu, "rolled back an unfinished create");
                self.write(|d| d.intents.remove(&n))?;
            }
            Intent::Partition { gpu, partition } => {
                let pf = gpu.pci().ok_or_else(|| {
                    EngineError::InvalidRequest(format!("{gpu} is not a PCI device"))
                })?;
                if let Some(why) = self.partition_steps(pf, partition)? {
                    tracing::info!(intent = n, %gpu, "{why}");
                }
                tracing::info!(intent = n, %gpu, "finished an unfinished partition change");
                self.write(|d| d.intents.remove(&n))?;
            }
            Intent::Destroy { slice } => {
                backend::of_slice(&slice.spec, &slice.identity).destroy(
                    self.host(),
                    &slice.spec,
                    &slice.identity,
                )?;
                tracing::info!(intent = n, slice = %slice.id, "finished an unfinished destroy");
                self.write(|d| {
                    d.intents.remove(&n);
                    d.slices.remove(&slice.id);
                    d.warm_pool.remove(&slice.id);
                    for a in d.allocations.values_mut() {
                        a.slices.retain(|s| *s != slice.id);
                    }
                })?;
            }
        }
        Ok(())
    }

    /// Every owned VF index must exist before types or bindings can be restored on it. On an
    /// NVIDIA GPU that is the checked, destructive step of [`Engine::restore_vf_index`]: refused
    /// while a GPU instance it would destroy is allocated or not ours (the VF slices fail with
    /// why), our free slices on them given up first.
    fn restore_vfs(&self, report: &mut ReconcileReport) {
        let mut need: BTreeMap<PciAddress, (u32, Vec<SliceId>)> = BTreeMap::new();
        for s in self.read(|d| d.slices.values().cloned().collect::<Vec<_>>()) {
            if let (Some((index, _)), Some(pf)) = (s.identity.vf(), s.spec.gpu.pci()) {
                let e = need.entry(pf).or_insert((0, Vec::new()));
                e.0 = e.0.max(index);
                e.1.push(s.id);
            }
        }
        for (gpu, (index, slices)) in need {
            if slices
                .iter()
                .any(|id| report.failed.iter().any(|(f, _)| f == id))
            {
                // Gone from the bus (`track_presence` said why).
                continue;
            }
            let _gpu = self.inner.gpu_locks.lock(gpu);
            match self
                .host()
                .gpu(gpu)
                .and_then(|_| self.restore_vf_index(gpu, index))
            {
                Ok(Some(given_up)) => {
                    tracing::info!(%gpu, "VFs re-enabled for owned slices");
                    let why = format!(
                        "free, on a GPU instance that re-enabling VFs on GPU {gpu} destroyed; \
                         destroyed first"
                    );
                    report
                        .given_up
                        .extend(given_up.into_iter().map(|id| (id, why.clone())));
                }
                Ok(None) => {}
                Err(e) => {
                    let why = format!("cannot restore VFs on GPU {gpu}: {}", chain(&e));
                    for id in slices {
                        self.set_failure(id, Some(why.clone()));
                        report.failed.push((id, why.clone()));
                    }
                }
            }
        }
    }

    fn restore_owned(&self, report: &mut ReconcileReport) {
        let mut owned: Vec<OwnedSlice> = self.read(|d| d.slices.values().cloned().collect());
        owned.sort_by_key(|s| (phase(s.spec.kind.backend()), s.created, s.id));
        for s in owned {
            if report.failed.iter().any(|(id, _)| *id == s.id) {
                continue;
            }
            let _gpu = self.inner.gpu_locks.lock(s.spec.gpu.clone());
            if !self.read(|d| d.slices.contains_key(&s.id)) {
                continue;
            }
            if let Err(why) = self.restore_one(&s, report) {
                self.set_failure(s.id, Some(why.clone()));
                report.failed.push((s.id, why));
            }
        }
    }

    /// Observes one owned slice and re-creates it if the host lost it.
    fn restore_one(&self, s: &OwnedSlice, report: &mut ReconcileReport) -> Result<(), String> {
        let host = self.host();
        // A virtual mdev parent is no PCI device: observing the mdev says whether it is there.
        if let Some(gpu) = s.spec.gpu.pci() {
            host.gpu(gpu).map_err(|e| chain(&e))?;
        }
        let be = backend::of_slice(&s.spec, &s.identity);
        match be
            .observe(host, &s.spec, &s.identity)
            .map_err(|e| chain(&e))?
        {
            Observed::Present(_) => {
                self.set_failure(s.id, None);
                Ok(())
            }
            Observed::Changed(why) => {
                self.drift(s, format!("{why}; left as it is"));
                Err(why)
            }
            Observed::Absent => {
                be.realize(host, &s.spec, &s.identity).map_err(|e| {
                    format!(
                        "missing from the host and cannot be re-created: {}",
                        chain(&e)
                    )
                })?;
                self.set_failure(s.id, None);
                report.recreated.push(s.id);
                self.drift(
                    s,
                    "missing from the host; re-created with the same identity".into(),
                );
                self.emit(Event::SliceCreated {
                    slice: s.id,
                    gpu: s.spec.gpu.clone(),
                    backend: s.spec.kind.backend(),
                });
                Ok(())
            }
        }
    }

    fn drift(&self, s: &OwnedSlice, reason: String) {
        tracing::warn!(slice = %s.id, gpu = %s.spec.gpu, %reason, "drift");
        self.emit(Event::Drift {
            slice: s.id,
            gpu: s.spec.gpu.clone(),
            reason,
        });
    }

    fn find_foreign(&self, report: &mut ReconcileReport) {
        let inv = self.inventory();
        let owned = self.read(|d| {
            // Slices on virtual parents have no PCI address; their mdevs are matched by UUID.
            let mut v: Vec<(Option<PciAddress>, Identity)> = d
                .slices
                .values()
                .map(|s| (s.spec.gpu.pci(), s.identity.clone()))
                .collect();
            v.extend(
                d.intents
                    .values()
                    .filter_map(|i| Some((i.gpu().pci(), i.identity()?.clone()))),
            );
            v
        });
        let mut seen = lock(&self.inner.foreign_seen);
        for gpu in &inv.gpus {
            for slice in &gpu.slices {
                if owned
                    .iter()
                    .any(|(g, id)| is_ours(*g, id, gpu.pci_address, slice))
                {
                    continue;
                }
                let text = describe(gpu.pci_address, slice);
                if seen.insert(text.clone()) {
                    tracing::info!(slice = %text, "foreign slice found; left alone");
                    self.emit(Event::ForeignFound {
                        gpu: gpu.pci_address.into(),
                        slice: text.clone(),
                    });
                }
                report.foreign.push(text);
            }
        }
        self.find_foreign_on_virtual_parents(&inv, &owned, &mut seen, report);
    }

    /// mdevs on parents that are not GPUs (the kernel's `mtty`, `mdpy`, …) that vgpud did not
    /// create: an mdev is ours exactly when its UUID is in the ledger or an intent.
    fn find_foreign_on_virtual_parents(
        &self,
        inv: &HostInventory,
        owned: &[(Option<PciAddress>, Identity)],
        seen: &mut BTreeSet<String>,
        report: &mut ReconcileReport,
    ) {
        for parent in inv
            .other_mdev_parents
            .iter()
            .filter(|p| p.pci_address.is_none())
        {
            for t in &parent.types {
                for uuid in &t.devices {
                    let ours = owned
                        .iter()
                        .any(|(_, id)| matches!(id, Identity::Mdev { uuid: u } if u == uuid));
                    if ours {
                        continue;
                    }
                    let text = format!("mdev {uuid} ({}) on {}", t.id, parent.name);
                    if seen.insert(text.clone()) {
                        tracing::info!(slice = %text, "foreign slice found; left alone");
                        self.emit(Event::ForeignFound {
                            gpu: DeviceRef::from(parent.name.clone()),
                            slice: text.clone(),
                        });
                    }
                    report.foreign.push(text);
                }
            }
        }
    }
}

fn is_ours(gpu: Option<PciAddress>, id: &Identity, on: PciAddress, slice: &ExistingSlice) -> bool {
    let same_gpu = gpu == Some(on);
    match (slice, id) {
        (ExistingSlice::Mdev { uuid, .. }, Identity::Mdev { uuid: u }) => uuid == u,
        // A MIG-backed vGPU is its VF's type and the GPU instance it occupies.
        (
            ExistingSlice::Mig { start, .. },
            Identity::Mig { start: s, .. } | Identity::MigVgpu { start: s, .. },
        ) => same_gpu && start == s,
        (ExistingSlice::NvidiaVfio { vf, .. }, Identity::Vf { address, .. })
        | (ExistingSlice::NvidiaVfio { vf, .. }, Identity::MigVgpu { address, .. })
        | (ExistingSlice::SriovVf { vf }, Identity::Vf { address, .. }) => vf == address,
        (ExistingSlice::Passthrough { .. }, Identity::Passthrough { .. }) => same_gpu,
        _ => false,
    }
}

pub(super) fn describe(gpu: PciAddress, slice: &ExistingSlice) -> String {
    match slice {
        ExistingSlice::Mdev { uuid, type_id, .. } => format!("mdev {uuid} ({type_id}) on {gpu}"),
        ExistingSlice::Mig {
            gpu_instance_id,
            profile,
            start,
        } => format!("MIG {profile} GI {gpu_instance_id} at slot {start} on {gpu}"),
        ExistingSlice::NvidiaVfio { vf, vgpu_type } => {
            format!("vGPU type {vgpu_type} on VF {vf} of {gpu}")
        }
        ExistingSlice::SriovVf { vf } => format!("VF {vf} of {gpu} on vfio-pci"),
        ExistingSlice::Passthrough { .. } => format!("GPU {gpu} on vfio-pci"),
    }
}
