//! Allocating slices to consumers and releasing them.
//!
//! An allocation reuses free owned slices of the type first, then creates new ones. Slices being
//! gathered are *claimed* in memory (no other request or destroy may take them) until the
//! allocation is written in one store write: a crash before that leaves free owned slices, never
//! a half allocation.

use std::sync::atomic::Ordering;

use ids::PciAddress;

use super::error::{EngineError, Result};
use super::events::Event;
use super::handle::Engine;
use super::limits::MAX_COUNT;
use super::locks::lock;
use super::model::{Allocation, AllocationId, AllocationRequest, SliceId, SliceSpec, VmPinning};
use super::ops::check_text;
use super::scheduling::Scheduling;
use super::state::now;

/// The last step of an allocation before it is committed: returns the VM pinning to record.
pub type Finish<'a> = dyn FnMut(&Allocation) -> Result<Option<VmPinning>> + 'a;

impl Engine {
    /// Allocates `count` slices of a type to a consumer: all or none. With an idempotency key, a
    /// retry (same consumer, same key) returns the allocation the first attempt made. The
    /// scheduler places the slices with the default policy.
    pub fn allocate(&self, req: AllocationRequest) -> Result<Allocation> {
        self.allocate_with(req, &Scheduling::default(), None)
    }

    /// Allocates with an explicit placement policy and VM demands. `finish`, when given, runs
    /// once the slices are gathered and before the allocation is committed (VM pinning): its
    /// answer is recorded in the allocation, and its failure undoes the allocation (slices made
    /// for it are destroyed, reused ones stay free).
    pub fn allocate_with(
        &self,
        req: AllocationRequest,
        scheduling: &Scheduling,
        finish: Option<&mut Finish<'_>>,
    ) -> Result<Allocation> {
        check_request(&req)?;
        let r = &req.request;
        let _key = r
            .idempotency_key
            .as_ref()
            .map(|k| self.inner.key_locks.lock((req.consumer.clone(), k.clone())));
        if let Some(existing) = self.by_key(&req)? {
            return Ok(existing);
        }
        let mut picked = Vec::new();
        let mut created = Vec::new();
        let mut gathered = self.gather_on(&req, scheduling, &mut picked, &mut created, true);
        // Short of room: the pool pauses to the end of this allocation, so that no top-up takes
        // back the room its slices give up, and gives its free slices up one GPU at a time (the
        // GPUs it holds most alone first), the request tried again after each, until it fits.
        let _pool_paused =
            matches!(gathered, Err(EngineError::NoCapacity(_))).then(|| self.pause_warm_pool());
        if _pool_paused.is_some() {
            for group in self.warm_pool_yield_order(&self.candidate_gpus(&r.slice_type, r.gpu)) {
                if self.yield_warm_pool(&group) == 0 {
                    continue;
                }
                // Once more (the request was counted in the demand mix already).
                lock(&self.inner.claims).retain(|s| !picked.contains(s));
                self.destroy_unused(&created);
                picked.clear();
                created.clear();
                gathered = self.gather_on(&req, scheduling, &mut picked, &mut created, false);
                if !matches!(gathered, Err(EngineError::NoCapacity(_))) {
                    break;
                }
            }
        }
        let mut alloc = Allocation {
            id: AllocationId::new_random(),
            consumer: req.consumer.clone(),
            vm: req.vm.clone(),
            slices: picked.clone(),
            slice_type: Some(r.slice_type.trim().to_owned()),
            idempotency_key: r.idempotency_key.clone(),
            created: now(),
            pinning: None,
            request: Some(r.recorded()),
            placement_consumer: req.placement_consumer,
        };
        let finished = gathered.and_then(|()| match finish {
            Some(f) => f(&alloc).map(|p| alloc.pinning = p),
            None => Ok(()),
        });
        let written =
            finished.and_then(|()| self.write(|d| d.allocations.insert(alloc.id, alloc.clone())));
        lock(&self.inner.claims).retain(|s| !picked.contains(s));
        if let Err(e) = written {
            self.destroy_unused(&created);
            return Err(e);
        }
        tracing::info!(allocation = %alloc.id, consumer = ?alloc.consumer, slices = alloc.slices.len(), "allocated");
        self.emit(Event::AllocationCreated {
            allocation: alloc.id,
            consumer: alloc.consumer.clone(),
            slices: alloc.slices.clone(),
        });
        Ok(alloc)
    }

    /// The allocation an earlier attempt with the same key made, if any. The key stands for
    /// one request: the same key with any other field (VM, Placement consumer, GPU, type,
    /// count, NUMA policy, vCPUs, memory) is a `conflict`, never the first request's allocation.
    fn by_key(&self, req: &AllocationRequest) -> Result<Option<Allocation>> {
        let Some(key) = &req.request.idempotency_key else {
            return Ok(None);
        };
        let found = self.read(|d| {
            d.allocations
                .values()
                .find(|a| a.consumer == req.consumer && a.idempotency_key.as_ref() == Some(key))
                .cloned()
        });
        match found {
            Some(a) if same_request(&a, req) => Ok(Some(a)),
            Some(a) => Err(EngineError::Conflict(format!(
                "idempotency key {key:?} was used for allocation {} with another request",
                a.id
            ))),
            None => Ok(None),
        }
    }

    /// The candidates on GPUs in service; `quarantined` with the reasons when every candidate
    /// is on a quarantined GPU.
    pub(crate) fn in_service(&self, specs: Vec<SliceSpec>) -> Result<Vec<SliceSpec>> {
        let (kept, refused): (Vec<SliceSpec>, Vec<SliceSpec>) = specs
            .into_iter()
            .partition(|s| s.gpu.pci().is_none_or(|g| self.quarantined(g).is_none()));
        if !kept.is_empty() || refused.is_empty() {
            return Ok(kept);
        }
        let mut reasons: Vec<String> = refused
            .iter()
            .filter_map(|s| s.gpu.pci().and_then(|g| self.quarantined(g)))
            .map(|q| q.refusal())
            .collect();
        reasons.dedup();
        Err(EngineError::Quarantined(reasons.join("; ")))
    }

    /// Best effort: slices created for an allocation that did not happen go again.
    fn destroy_unused(&self, created: &[SliceId]) {
        for id in created {
            let gpu = self.read(|d| d.slices.get(id).map(|s| s.spec.gpu.clone()));
            if let Some(gpu) = gpu {
                let _gpu = self.inner.gpu_locks.lock(gpu);
                if let Err(e) = self.destroy_locked(*id) {
                    tracing::warn!(slice = %id, error = %e, "cannot destroy a slice made for a failed allocation");
                }
            }
        }
    }

    /// Releases an allocation; its slices stay, free for the next request (or a pending layout).
    pub fn release(&self, id: AllocationId) -> Result<()> {
        let (gpus, held): (Vec<PciAddress>, Vec<SliceId>) = self
            .read(|d| {
                d.allocations.get(&id).map(|a| {
                    let gpus = (a.slices.iter())
                        .filter_map(|s| d.slices.get(s).and_then(|e| e.spec.gpu.pci()))
                        .collect();
                    (gpus, a.slices.clone())
                })
            })
            .ok_or_else(|| EngineError::NotFound(format!("allocation {id}")))?;
        self.write(|d| d.allocations.remove(&id))?;
        if self.inner.track_released.load(Ordering::Relaxed) {
            lock(&self.inner.released).extend(held);
        }
        tracing::info!(allocation = %id, "released");
        self.emit(Event::AllocationReleased { allocation: id });
        // A layout waiting for these slices can go on now.
        if let Err(e) = self.apply_layouts_on(&gpus) {
            tracing::warn!(error = %e, "cannot apply layouts after a release");
        }
        Ok(())
    }

    /// Every allocation.
    pub fn allocations(&self) -> Vec<Allocation> {
        self.read(|d| d.allocations.values().cloned().collect())
    }

    /// One allocation.
    pub fn allocation(&self, id: AllocationId) -> Result<Allocation> {
        self.read(|d| d.allocations.get(&id).cloned())
            .ok_or_else(|| EngineError::NotFound(format!("allocation {id}")))
    }
}

/// Whether `req` asks what `a` answered. Allocations recorded before the request was stored
/// say only their type and size.
fn same_request(a: &Allocation, req: &AllocationRequest) -> bool {
    let r = &req.request;
    if a.vm != req.vm || a.placement_consumer != req.placement_consumer {
        return false;
    }
    match &a.request {
        Some(recorded) => *recorded == r.recorded(),
        None => {
            a.slice_type.as_deref() == Some(r.slice_type.trim())
                && a.slices.len() == r.count as usize
        }
    }
}

fn check_request(req: &AllocationRequest) -> Result<()> {
    check_text("consumer", &req.consumer)?;
    if let Some(vm) = &req.vm {
        check_text("VM", vm)?;
    }
    if let Some(k) = &req.request.idempotency_key {
        check_text("idempotency key", k)?;
    }
    let n = req.request.count;
    if n == 0 || n > MAX_COUNT {
        return Err(EngineError::InvalidRequest(format!(
            "count {n} is out of range 1..={MAX_COUNT}"
        )));
    }
    Ok(())
}

impl Engine {
    /// Gathers the request's slices where the scheduler says or, when Placement chose GPUs for
    /// it ([`Scheduling::placement_gpus`]), exactly that many on each of those GPUs, so the host
    /// holds what Placement accounts for. All or nothing: the caller destroys `created` on error.
    /// `count_demand`: the request is counted in the demand mix (not again on a retry).
    fn gather_on(
        &self,
        req: &AllocationRequest,
        scheduling: &Scheduling,
        picked: &mut Vec<SliceId>,
        created: &mut Vec<SliceId>,
        count_demand: bool,
    ) -> Result<()> {
        let r = &req.request;
        if scheduling.placement_gpus.is_empty() || r.gpu.is_some() {
            let specs = self.in_service(self.kept_candidates(&r.slice_type, r.gpu)?)?;
            return self.gather_scheduled(req, &specs, scheduling, picked, created, count_demand);
        }
        for (gpu, count) in &scheduling.placement_gpus {
            let specs = self.in_service(self.kept_candidates(&r.slice_type, Some(*gpu))?)?;
            let mut part = req.clone();
            part.request.count = *count;
            part.request.gpu = Some(*gpu);
            let (mut got, mut made) = (Vec::new(), Vec::new());
            let outcome =
                self.gather_scheduled(&part, &specs, scheduling, &mut got, &mut made, count_demand);
            picked.append(&mut got);
            created.append(&mut made);
            outcome?;
        }
        Ok(())
    }
}
