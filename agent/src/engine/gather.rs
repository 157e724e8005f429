//! Gathering an allocation's slices: where each one comes from.
//!
//! A request without an explicit placement is decided one slice at a time on a snapshot of the
//! host ([`super::scheduling`]), kept current between its slices:
//!
//! 1. **Reuse**: if free owned slices of the type exist (a layout made them, a release freed
//!    them), the scheduler chooses among the GPUs that hold them (as if they were free capacity)
//!    and one of them is claimed ([`super::claim`]). Layouts' slices are used before anything
//!    new is made.
//! 2. **Create**: otherwise the scheduler chooses the GPU and, for MIG instances and MIG-backed
//!    vGPUs (asked as their GPU instance, [`super::snapshot`]), the start slot; the slice is
//!    created there with that explicit placement (the backend takes the slot as decided and
//!    does not ask the scheduler again): one decision per slice.
//!
//! When the scheduler cannot model the request, or a creation it chose fails (another request
//! took the slot first), the rest of the request falls back to the first-fit order
//! ([`Engine::gather`]). A NUMA rejection under policy `required` is final: nothing is created.

use sched::Decision;

use super::error::{EngineError, Result};
use super::handle::Engine;
use super::locks::lock;
use super::model::{AllocationRequest, SliceId, SliceSpec};
use super::scheduling::{Scheduling, numa_refusal, sched_request, timed_decide};
use super::snapshot::{self, SchedView};

/// What placing one slice did.
enum Placed {
    Reused(SliceId),
    Created(SliceId),
}

/// Why the scheduler did not place a slice.
enum NotPlaced {
    /// Final: the request is refused (NUMA under `required`).
    Refused(EngineError),
    /// The first-fit order takes over for the rest of the request.
    Fallback(String),
}

impl Engine {
    /// Gathers `count` slices with the scheduler; the first-fit order finishes what it could
    /// not place. Picked slices are claimed; created ones are listed for the caller's undo.
    pub(crate) fn gather_scheduled(
        &self,
        req: &AllocationRequest,
        specs: &[SliceSpec],
        scheduling: &Scheduling,
        picked: &mut Vec<SliceId>,
        created: &mut Vec<SliceId>,
        count_demand: bool,
    ) -> Result<()> {
        // The scheduler knows GPUs only: slices on virtual mdev parents are placed first-fit.
        if !specs.iter().any(|s| s.gpu.pci().is_some()) {
            return self.gather(specs, req.request.count, picked, created);
        }
        let mut view = self.sched_view(specs, scheduling);
        let Some(ask) = view.ask.clone() else {
            return self.gather(specs, req.request.count, picked, created);
        };
        // Counted as one request of `count` slices (the shape the mix is about), before it is
        // decided, so refusals count too; then placed against the mix including it.
        if count_demand {
            self.observe_demand(&sched::Request {
                count: req.request.count.max(1),
                ..sched_request(req, &ask, scheduling, 0)
            });
        }
        let learnt = Scheduling {
            policy: self.with_learnt_mix(&scheduling.policy, &view.snap),
            ..scheduling.clone()
        };
        let scheduling = &learnt;
        for index in 0..req.request.count {
            let sreq = sched_request(req, &ask, scheduling, index);
            match self.place_one(&mut view, specs, &sreq, scheduling) {
                Ok(Placed::Reused(id)) => picked.push(id),
                Ok(Placed::Created(id)) => {
                    picked.push(id);
                    created.push(id);
                }
                Err(NotPlaced::Refused(e)) => return Err(e),
                Err(NotPlaced::Fallback(why)) => {
                    tracing::info!(reason = %why, "first-fit placement for the rest of the request");
                    break;
                }
            }
        }
        self.gather(specs, req.request.count, picked, created)
    }

    /// Places one slice: a free owned one the scheduler prefers, else a new one where it says.
    fn place_one(
        &self,
        view: &mut SchedView,
        specs: &[SliceSpec],
        req: &sched::Request,
        scheduling: &Scheduling,
    ) -> std::result::Result<Placed, NotPlaced> {
        if let Some(id) = self.reuse_one(view, specs, req, scheduling) {
            return Ok(Placed::Reused(id));
        }
        self.create_placed(view, specs, req, scheduling)
            .map(Placed::Created)
    }

    /// Creates one slice where the scheduler says (the caller found none to reuse, or wants a
    /// new one: the warm pool); the new slice is claimed. `None` when the scheduler placed
    /// nothing or the creation failed.
    pub(crate) fn create_scheduled(
        &self,
        view: &mut SchedView,
        specs: &[SliceSpec],
        req: &sched::Request,
        scheduling: &Scheduling,
    ) -> Option<SliceId> {
        match self.create_placed(view, specs, req, scheduling) {
            Ok(id) => Some(id),
            Err(NotPlaced::Refused(e)) => {
                tracing::debug!("not placed: {e}");
                None
            }
            Err(NotPlaced::Fallback(why)) => {
                tracing::debug!("not placed: {why}");
                None
            }
        }
    }

    fn create_placed(
        &self,
        view: &mut SchedView,
        specs: &[SliceSpec],
        req: &sched::Request,
        scheduling: &Scheduling,
    ) -> std::result::Result<SliceId, NotPlaced> {
        let decision = match timed_decide(&view.snap, req, &scheduling.policy) {
            Ok(d) => d,
            Err(rejection) => {
                return Err(match numa_refusal(req, &rejection) {
                    Some(e) => NotPlaced::Refused(e),
                    None => NotPlaced::Fallback(rejection.error.to_string()),
                });
            }
        };
        let Some(placement) = decision.placements.first() else {
            return Err(NotPlaced::Fallback("the decision placed nothing".into()));
        };
        // The request's start (none) is replaced by the scheduler's: the backend takes the
        // slot as decided and does not ask the scheduler again.
        let Some(spec) = specs.iter().find(|s| s.gpu == placement.gpu).and_then(|s| {
            Some(SliceSpec {
                gpu: s.gpu.clone(),
                kind: snapshot::decided_kind(&s.kind, &placement.slice)?,
            })
        }) else {
            return Err(NotPlaced::Fallback(format!(
                "the scheduler chose {} which the request cannot use",
                placement.gpu
            )));
        };
        let _gpu = self.inner.gpu_locks.lock(spec.gpu.clone());
        match self.create_locked(&spec, None) {
            Ok(entry) => {
                lock(&self.inner.claims).insert(entry.id);
                view.commit_new(req, &decision);
                Ok(entry.id)
            }
            Err(e) => Err(NotPlaced::Fallback(e.to_string())),
        }
    }

    /// Claims a free owned slice of the requested kind on the GPU the scheduler prefers among
    /// those holding one; `None` when there is none it accepts.
    fn reuse_one(
        &self,
        view: &mut SchedView,
        specs: &[SliceSpec],
        req: &sched::Request,
        scheduling: &Scheduling,
    ) -> Option<SliceId> {
        loop {
            let usable = view.free_for(specs);
            if usable.is_empty() {
                return None;
            }
            let mut trial = view.snap.clone();
            for f in &usable {
                snapshot::remove_marked(&mut trial, f.gpu, &f.marker());
            }
            for g in &mut trial.gpus {
                // A GPU out of VFs for new slices can still hand out a free one (it has its VF);
                // a quarantined one cannot.
                if view.out_of_vfs(g.address) {
                    g.unavailable = None;
                }
                if !usable.iter().any(|f| f.gpu == g.address) {
                    g.unavailable = Some("no free slice of the type".to_owned());
                }
            }
            let decision = timed_decide(&trial, req, &scheduling.policy).ok()?;
            let chosen = decision.placements.first()?;
            let pick = usable
                .iter()
                .find(|f| f.gpu == chosen.gpu && f.choice == chosen.slice)
                .or_else(|| usable.iter().find(|f| f.gpu == chosen.gpu))?
                .clone();
            view.free.retain(|f| f.id != pick.id);
            let claimed = {
                let _gpu = self.inner.gpu_locks.lock(pick.gpu);
                self.claim_locked(pick.id)
            };
            if claimed {
                snapshot::remove_marked(&mut view.snap, pick.gpu, &pick.marker());
                let reused = Decision {
                    placements: vec![sched::Placement {
                        gpu: pick.gpu,
                        slice: pick.choice.clone(),
                    }],
                    ..decision
                };
                view.snap.commit(req, &reused);
                return Some(pick.id);
            }
        }
    }

    /// Claims free slices, then creates what is missing, in first-fit order (continuing after
    /// what `picked` already holds); on failure the caller undoes.
    pub(crate) fn gather(
        &self,
        specs: &[SliceSpec],
        count: u32,
        picked: &mut Vec<SliceId>,
        created: &mut Vec<SliceId>,
    ) -> Result<()> {
        let count = count as usize;
        for spec in specs {
            while picked.len() < count {
                match self.claim_free(spec) {
                    Some(id) => picked.push(id),
                    None => break,
                }
            }
        }
        let mut errors = Vec::new();
        for spec in specs {
            while picked.len() < count {
                let _gpu = self.inner.gpu_locks.lock(spec.gpu.clone());
                match self.create_locked(spec, None) {
                    Ok(entry) => {
                        lock(&self.inner.claims).insert(entry.id);
                        picked.push(entry.id);
                        created.push(entry.id);
                    }
                    Err(e) => {
                        errors.push(e);
                        break;
                    }
                }
            }
        }
        if picked.len() >= count {
            return Ok(());
        }
        Err(shortage(count, picked.len(), errors))
    }
}

/// The error for an allocation that found too few slices: `no_capacity` when every GPU was
/// merely full (or occupied), else the first other failure.
fn shortage(count: usize, got: usize, errors: Vec<EngineError>) -> EngineError {
    let capacity_like =
        |e: &EngineError| matches!(e, EngineError::NoCapacity(_) | EngineError::Conflict(_));
    if let Some(pos) = errors.iter().position(|e| !capacity_like(e)) {
        return errors
            .into_iter()
            .nth(pos)
            .unwrap_or(EngineError::NoCapacity(String::new()));
    }
    let why: Vec<String> = errors.iter().map(ToString::to_string).collect();
    EngineError::NoCapacity(format!(
        "found {got} of {count} slices ({})",
        if why.is_empty() {
            "nothing free".to_owned()
        } else {
            why.join("; ")
        }
    ))
}
