//! Creating and destroying one slice, with the intent protocol that makes both crash-safe.
//!
//! Create: (enable VFs under an intent without identity, if the GPU has none) → plan → write
//! the intent with the chosen identity → realize → commit the ledger entry and close the intent
//! in one write. Destroy: write the intent → destroy → remove the entry and close the intent in
//! one write. A failure undoes what the operation did; a vendor timeout leaves the intent for the
//! reconciler, because the abandoned call may still complete.

use super::backend::{self, Backend, needs_vfs};
use super::error::{EngineError, Result};
use super::events::Event;
use super::handle::Engine;
use super::limits;
use super::locks::lock;
use super::model::{
    Allocation, AllocationId, BackendKind, CreateSlice, Identity, Slice, SliceId, SliceSpec,
};
use super::state::{Intent, OwnedSlice, now};
use super::vfs;

/// Checks a client-supplied string against the one text limit ([`limits::check_text`]): the
/// front ends check it already, this covers callers that do not come through one.
pub(crate) fn check_text(what: &str, value: &str) -> Result<()> {
    limits::check_text(value).map_err(|fault| {
        let shown: String = value.chars().take(64).collect();
        EngineError::InvalidRequest(format!("{what} {shown:?}: {fault}"))
    })
}

/// What a create has done so far, for its undo.
#[derive(Debug, Default)]
struct Progress {
    intent: Option<u64>,
    enabled_vfs: bool,
    identity: Option<Identity>,
}

impl Engine {
    /// Creates one slice (explicit placement when the spec gives one), optionally handing it to a
    /// consumer at once. Bad input is refused before anything is touched.
    pub fn create_slice(&self, req: CreateSlice) -> Result<Slice> {
        if let Some(o) = &req.owner {
            check_text("consumer", &o.consumer)?;
            if let Some(vm) = &o.vm {
                check_text("VM", vm)?;
            }
        }
        let entry = {
            let _gpu = self.inner.gpu_locks.lock(req.spec.gpu.clone());
            let entry = self.create_locked(&req.spec, None)?;
            if req.owner.is_some() {
                lock(&self.inner.claims).insert(entry.id);
            }
            entry
        };
        if let Some(owner) = req.owner {
            let alloc = Allocation {
                id: AllocationId::new_random(),
                consumer: owner.consumer,
                vm: owner.vm,
                slices: vec![entry.id],
                slice_type: None,
                idempotency_key: None,
                created: now(),
                pinning: None,
                request: None,
                placement_consumer: None,
            };
            let written = self.write(|d| d.allocations.insert(alloc.id, alloc.clone()));
            lock(&self.inner.claims).remove(&entry.id);
            written?;
            self.emit(Event::AllocationCreated {
                allocation: alloc.id,
                consumer: alloc.consumer.clone(),
                slices: alloc.slices.clone(),
            });
        }
        self.slice(entry.id)
    }

    /// Validates and creates a slice; the caller holds the GPU's lock.
    pub(crate) fn create_locked(
        &self,
        spec: &SliceSpec,
        preset: Option<Identity>,
    ) -> Result<OwnedSlice> {
        if let Some(gpu) = spec.gpu.pci() {
            self.refuse_if_quarantined(gpu)?;
        }
        // A virtual mdev parent is no PCI device: the mdev backend's validation finds it.
        if spec.gpu.pci().is_some() || spec.kind.backend() != BackendKind::Mdev {
            let gpu = self.host().gpu_identity(spec.pci()?)?;
            if spec.kind.backend() != BackendKind::Passthrough {
                backend::refuse_if_passed_through(&gpu)?;
            }
        }
        let be = backend::for_new(self.host(), spec)?;
        be.validate(self.host(), spec)?;
        let mut progress = Progress::default();
        match self.create_steps(be, spec, preset, &mut progress) {
            Ok(entry) => {
                self.set_failure(entry.id, None);
                tracing::info!(slice = %entry.id, gpu = %spec.gpu, kind = %spec.kind, "slice created");
                self.emit(Event::SliceCreated {
                    slice: entry.id,
                    gpu: spec.gpu.clone(),
                    backend: spec.kind.backend(),
                });
                Ok(entry)
            }
            Err(e) => Err(self.fail_create(&progress, e, spec)),
        }
    }

    /// The steps of a create, recording in `p` what must be undone if a later one fails.
    fn create_steps(
        &self,
        be: &dyn Backend,
        spec: &SliceSpec,
        preset: Option<Identity>,
        p: &mut Progress,
    ) -> Result<OwnedSlice> {
        let host = self.host();
        if needs_vfs(spec.kind.backend()) && host.vfs(spec.pci()?)?.is_empty() {
            let open = Intent::Create {
                gpu: spec.gpu.clone(),
                slice: None,
                enabled_vfs: true,
            };
            p.intent = Some(self.write(|d| d.open_intent(open))?);
            // Set before the call: a failed enable may still have left VFs behind.
            p.enabled_vfs = true;
            self.enable_vfs(spec.pci()?, 1)?;
        }
        let reserved = self.read(|d| d.reserved(&spec.gpu));
        let identity = match preset {
            Some(i) => i,
            None => be.plan(host, spec, &reserved)?,
        };
        let entry = OwnedSlice {
            id: SliceId::new_random(),
            spec: spec.clone(),
            identity,
            created: now(),
        };
        let open = Intent::Create {
            gpu: spec.gpu.clone(),
            slice: Some(entry.clone()),
            enabled_vfs: p.enabled_vfs,
        };
        let n = self.write(|d| match p.intent {
            Some(n) => {
                d.intents.insert(n, open);
                n
            }
            None => d.open_intent(open),
        })?;
        p.intent = Some(n);
        p.identity = Some(entry.identity.clone());
        be.realize(host, spec, &entry.identity)?;
        // The host has it: ownership and the closed intent go in one write.
        self.write(|d| {
            d.intents.remove(&n);
            d.slices.insert(entry.id, entry.clone());
        })?;
        Ok(entry)
    }

    /// Undoes a failed create and closes its intent; returns the original error. After a vendor
    /// timeout the intent stays open: the abandoned call may still complete, and the reconciler
    /// rolls it back once the GPU answers again.
    fn fail_create(&self, p: &Progress, err: EngineError, spec: &SliceSpec) -> EngineError {
        if matches!(err, EngineError::Timeout { .. }) {
            return err;
        }
        match self.undo_create(spec, p.identity.as_ref(), p.enabled_vfs) {
            Ok(()) => {
                if let Some(n) = p.intent
                    && let Err(e) = self.write(|d| d.intents.remove(&n))
                {
                    tracing::warn!(error = %e, "cannot close a rolled-back intent; reconcile will");
                }
            }
            Err(undo) => {
                tracing::warn!(gpu = %spec.gpu, error = %undo, "rollback failed; the next reconcile retries it");
            }
        }
        err
    }

    /// Destroys what a create made (its identity is ours) and turns VFs it enabled off again
    /// when nothing else uses them.
    pub(crate) fn undo_create(
        &self,
        spec: &SliceSpec,
        identity: Option<&Identity>,
        enabled_vfs: bool,
    ) -> Result<()> {
        let host = self.host();
        if let Some(id) = identity {
            backend::of_slice(spec, id).destroy(host, spec, id)?;
        }
        if enabled_vfs && vfs::disable_if_unused(host, spec.pci()?, &[])? {
            tracing::info!(gpu = %spec.gpu, "VFs enabled for a failed create were disabled again");
        }
        Ok(())
    }

    /// Destroys an owned slice. Refused while allocated (`conflict`) or while a VM uses it
    /// (`busy`); already gone from the host is fine.
    pub fn destroy_slice(&self, id: SliceId) -> Result<()> {
        let gpu = self
            .read(|d| d.slices.get(&id).map(|s| s.spec.gpu.clone()))
            .ok_or_else(|| EngineError::NotFound(format!("slice {id}")))?;
        let _gpu = self.inner.gpu_locks.lock(gpu);
        self.destroy_locked(id)
    }

    /// Destroys an owned slice; the caller holds the GPU's lock.
    pub(crate) fn destroy_locked(&self, id: SliceId) -> Result<()> {
        let (entry, holder) = self.read(|d| {
            (
                d.slices.get(&id).cloned(),
                d.holder(id).map(|a| (a.id, a.consumer.clone())),
            )
        });
        let entry = entry.ok_or_else(|| EngineError::NotFound(format!("slice {id}")))?;
        if let Some((alloc, consumer)) = holder {
            return Err(EngineError::Conflict(format!(
                "slice {id} is allocated to {consumer:?} (allocation {alloc}); release it first"
            )));
        }
        if lock(&self.inner.claims).contains(&id) {
            return Err(EngineError::Conflict(format!(
                "slice {id} is being allocated"
            )));
        }
        let n = self.write(|d| {
            d.open_intent(Intent::Destroy {
                slice: entry.clone(),
            })
        })?;
        let be = backend::of_slice(&entry.spec, &entry.identity);
        if let Err(e) = be.destroy(self.host(), &entry.spec, &entry.identity) {
            if !matches!(e, EngineError::Timeout { .. }) {
                // Nothing changed on the host: the slice stays, the intent goes.
                self.write(|d| d.intents.remove(&n))?;
            }
            return Err(e);
        }
        self.write(|d| {
            d.intents.remove(&n);
            d.slices.remove(&id);
            d.warm_pool.remove(&id);
        })?;
        self.set_failure(id, None);
        tracing::info!(slice = %id, gpu = %entry.spec.gpu, "slice destroyed");
        self.emit(Event::SliceDestroyed {
            slice: id,
            gpu: entry.spec.gpu.clone(),
        });
        Ok(())
    }
}
