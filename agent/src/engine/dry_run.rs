//! Dry runs of a request: would this host take it and how well (placement score), and for one
//! that does not fit, the cheapest re-layout that would make it fit (defragmentation advice).
//! Nothing changes on the host or in the store; free owned slices of the type count as free
//! capacity, as an allocation would take them first.

use sched::Snapshot;

use super::error::{EngineError, Result};
use super::handle::Engine;
use super::limits::MAX_COUNT;
use super::model::{AllocationRequest, SliceRequest};
use super::reports::PlacementScore;
use super::resolve::check_type;
use super::scheduling::{Scheduling, reasons, sched_request};
use super::snapshot::SchedView;

impl Engine {
    /// The scheduler's request for a dry run of `request` (all slices at once are scored one by
    /// one, as an allocation places them).
    fn dry_run_view(
        &self,
        request: &SliceRequest,
        scheduling: &Scheduling,
    ) -> Result<(SchedView, sched::SliceRequest, AllocationRequest)> {
        check_type(&request.slice_type)?;
        if request.count == 0 || request.count > MAX_COUNT {
            return Err(EngineError::InvalidRequest(format!(
                "count {} is out of range 1..={}",
                request.count, MAX_COUNT
            )));
        }
        let specs = self.kept_candidates(&request.slice_type, request.gpu)?;
        let mut view = self.sched_view(&specs, scheduling);
        let Some(ask) = view.ask.clone() else {
            return Err(EngineError::InvalidRequest("no GPU offers the type".into()));
        };
        // Free owned slices of the type are what an allocation would take first: count them as
        // free capacity.
        let free = view.free_for(&specs);
        for f in &free {
            view.count_as_free(f);
        }
        let alloc = AllocationRequest {
            consumer: "vgpud:dry-run".into(),
            vm: None,
            request: request.clone(),
            placement_consumer: None,
        };
        Ok((view, ask, alloc))
    }

    /// Would this host take the request, with what score (nothing changes).
    pub(crate) fn placement_score(
        &self,
        request: &SliceRequest,
        scheduling: &Scheduling,
    ) -> Result<PlacementScore> {
        let (mut view, ask, alloc) = self.dry_run_view(request, scheduling)?;
        // Scored as a real request would be placed, against the learnt mix; a dry run is not
        // a request, so it is not counted.
        let learnt = Scheduling {
            policy: self.with_learnt_mix(&scheduling.policy, &view.snap),
            ..scheduling.clone()
        };
        let scheduling = &learnt;
        let policy = &scheduling.policy;
        let workload = match policy {
            sched::Policy::FragAware(w) if !w.items.is_empty() => w.clone(),
            _ => sched::Workload::offered_by(&view.snap),
        };
        let frag = |s: &Snapshot| sched::fragmentation(s, &workload).unwrap_or(0.0);
        let waste = |s: &Snapshot| sched::waste(s, &workload).unwrap_or(0.0);
        let (before, waste_before) = (frag(&view.snap), waste(&view.snap));
        let mut placements = Vec::new();
        let mut local = true;
        let mut last = None;
        for index in 0..request.count {
            let sreq = sched_request(&alloc, &ask, scheduling, index);
            let (hs, decision) = sched::scored_decision(&view.snap, &sreq, policy);
            match decision {
                Ok(d) => {
                    local &= hs.numa_local;
                    placements.extend(d.placements.clone());
                    view.commit_new(&sreq, &d);
                    last = Some((hs, d.explanation));
                }
                Err(r) => {
                    return Ok(PlacementScore {
                        feasible: false,
                        score: f64::NEG_INFINITY,
                        waste_added: 0.0,
                        fragmentation_added: 0.0,
                        numa_local: false,
                        host_free_after: hs.host_free_after,
                        policy: policy.name().to_owned(),
                        reason: Some(format!("{}{}", r.error, reasons(&r.explanation))),
                        placements: Vec::new(),
                        explanation: Some(r.explanation),
                    });
                }
            }
        }
        let Some((hs, explanation)) = last else {
            return Err(EngineError::InvalidRequest(
                "count must be at least 1".into(),
            ));
        };
        let added = frag(&view.snap) - before;
        let waste_added = waste(&view.snap) - waste_before;
        let score = match policy {
            sched::Policy::FragAware(_) => {
                sched::HostScore::frag_aware(waste_added, added, hs.host_free_after)
            }
            _ => hs.score,
        };
        Ok(PlacementScore {
            feasible: true,
            score,
            waste_added,
            fragmentation_added: added,
            numa_local: local,
            host_free_after: hs.host_free_after,
            policy: policy.name().to_owned(),
            reason: None,
            placements,
            explanation: Some(explanation),
        })
    }

    /// For a request that does not fit now, the cheapest re-layout of idle slices (or, with
    /// `allow_busy`, of VMs' slices too) that would make it fit.
    pub(crate) fn defrag_advice(
        &self,
        request: &SliceRequest,
        scheduling: &Scheduling,
        allow_busy: bool,
    ) -> Result<sched::DefragAdvice> {
        let (view, ask, alloc) = self.dry_run_view(request, scheduling)?;
        let sreq = sched_request(&alloc, &ask, scheduling, 0);
        let policy = self.with_learnt_mix(&scheduling.policy, &view.snap);
        Ok(sched::defrag_advice(&view.snap, &sreq, &policy, allow_busy))
    }
}
