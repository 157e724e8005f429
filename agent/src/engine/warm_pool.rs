//! The warm pool: free slices vgpud makes ahead of demand, so that a request claims one (a
//! store write) instead of waiting for the device operations (a MIG GPU and compute instance,
//! a VF enabled and bound: seconds; `sim/src/latency.rs` has the published figures).
//!
//! Pool slices are ordinary owned slices, recorded in the state document as the pool's. They
//! are made only on GPUs no declared layout selects (a layout's GPU holds what the layout
//! says), where the scheduler would place a request for the type, and never at the expense of
//! an allocation: a request that finds no room destroys the free pool slices on the GPUs it
//! could use and tries once more ([`Engine::yield_warm_pool`]). A pool slice an allocation
//! took stays the pool's when released (vgpud made it unasked, so vgpud may destroy it when
//! free).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::error::Result;
use super::handle::Engine;
use super::locks::lock;
use super::model::{
    AllocationRequest, DeviceRef, Slice, SliceId, SliceRequest, SliceSpec, SliceState,
};
use super::scheduling::{Scheduling, sched_request};

/// The consumer name warm-pool decisions are made for (never recorded in an allocation).
const POOL_CONSUMER: &str = "vgpud-warm-pool";

impl Engine {
    /// Makes one free slice of `slice_type` where the scheduler would place a request for one,
    /// on a GPU no layout selects, and records it as the pool's. `Ok(None)` when no such GPU
    /// has room; the request is not counted in the demand mix (it is not demand).
    pub fn warm_one(&self, slice_type: &str) -> Result<Option<SliceId>> {
        if self.inner.pool_yields.load(Ordering::SeqCst) > 0 {
            return Ok(None);
        }
        let with_layout: BTreeSet<ids::PciAddress> =
            lock(&self.inner.layout_status).keys().copied().collect();
        let specs: Vec<SliceSpec> = self
            .in_service(self.kept_candidates(slice_type, None)?)?
            .into_iter()
            .filter(|s| s.gpu.pci().is_some_and(|g| !with_layout.contains(&g)))
            .collect();
        if specs.is_empty() {
            return Ok(None);
        }
        let scheduling = Scheduling::default();
        let mut view = self.sched_view(&specs, &scheduling);
        let Some(ask) = view.ask.clone() else {
            return Ok(None);
        };
        let req = AllocationRequest {
            consumer: POOL_CONSUMER.to_owned(),
            vm: None,
            request: SliceRequest::new(slice_type, 1),
            placement_consumer: None,
        };
        let learnt = Scheduling {
            policy: self.with_learnt_mix(&scheduling.policy, &view.snap),
            ..scheduling
        };
        let sreq = sched_request(&req, &ask, &learnt, 0);
        let Some(id) = self.create_scheduled(&mut view, &specs, &sreq, &learnt) else {
            return Ok(None);
        };
        let recorded = self.write(|d| d.warm_pool.insert(id));
        lock(&self.inner.claims).remove(&id);
        recorded?;
        self.metrics().warm_pool("made", slice_type, 1);
        tracing::info!(slice = %id, slice_type, "warm pool: made a free slice ahead of demand");
        Ok(Some(id))
    }

    /// The slices allocations released that are free now, outside the pool, on GPUs no
    /// declared layout selects (the slices [`Engine::adopt_into_pool`] may take; a slice a
    /// client created and never allocated is not among them). The first call starts the
    /// engine keeping track of releases.
    /// `slices` is one listing of the host, read by the caller.
    pub fn released_outside_pool(&self, slices: &[Slice]) -> BTreeSet<SliceId> {
        self.inner.track_released.store(true, Ordering::Relaxed);
        let with_layout: BTreeSet<ids::PciAddress> =
            lock(&self.inner.layout_status).keys().copied().collect();
        let claims = lock(&self.inner.claims).clone();
        let pool = self.read(|d| d.warm_pool.clone());
        let mut released = lock(&self.inner.released);
        let free: BTreeSet<SliceId> = slices
            .iter()
            .filter(|s| released.contains(&s.id))
            .filter(|s| s.state == SliceState::Ready && s.owner.is_none())
            .filter(|s| !pool.contains(&s.id) && !claims.contains(&s.id))
            .filter(|s| s.spec.gpu.pci().is_some_and(|g| !with_layout.contains(&g)))
            .map(|s| s.id)
            .collect();
        // Allocated again or destroyed since: a later release adds it back.
        released.retain(|id| free.contains(id));
        free
    }

    /// Makes `ids` (free slices outside the pool) the pool's: with the pool on, released
    /// slices are kept warm instead of being made again by a top-up. One write; how many
    /// joined. One allocated since it was listed joins too (a pool slice an allocation holds
    /// stays the pool's); one destroyed since does not.
    pub fn adopt_into_pool(&self, ids: &BTreeSet<SliceId>) -> usize {
        if ids.is_empty() {
            return 0;
        }
        let joined = self.write(|d| {
            let present: Vec<SliceId> = ids
                .iter()
                .filter(|id| d.slices.contains_key(id))
                .copied()
                .collect();
            d.warm_pool.extend(present.iter().copied());
            present.len()
        });
        lock(&self.inner.released).retain(|id| !ids.contains(id));
        match joined {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("warm pool: cannot record the free slices it keeps: {e}");
                0
            }
        }
    }

    /// Destroys free pool slices the pool holds beyond what it wants (`trim`: ids and types);
    /// how many went.
    pub fn trim_warm_pool(&self, trim: &[(SliceId, String)]) -> usize {
        self.destroy_pool_slices(trim, "trimmed")
    }

    /// Destroys free pool slices (ids and types), counting each under the metric `event`; how
    /// many went. One claimed or allocated meanwhile is serving a request already, and kept.
    fn destroy_pool_slices(&self, slices: &[(SliceId, String)], event: &str) -> usize {
        let mut gone = 0;
        for (id, kind) in slices {
            match self.destroy_slice(*id) {
                Ok(()) => {
                    gone += 1;
                    self.metrics().warm_pool(event, kind, 1);
                }
                Err(e) => tracing::debug!(slice = %id, "warm pool slice kept: {e}"),
            }
        }
        gone
    }

    /// The free pool slices among `slices` (one listing of the host) with their types.
    pub fn warm_pool_free_typed(&self, slices: &[Slice]) -> Vec<(SliceId, String)> {
        self.free_pool_slices(slices)
            .map(|s| (s.id, s.spec.kind.type_label()))
            .collect()
    }

    /// The pool's slices that are free now (present, unallocated, not being claimed).
    pub fn warm_pool_free(&self) -> Vec<SliceId> {
        let slices = self.slices();
        self.free_pool_slices(&slices).map(|s| s.id).collect()
    }

    /// The free pool slices among `slices` (one listing of the host, read by the caller).
    fn free_pool_slices<'s>(&self, slices: &'s [Slice]) -> impl Iterator<Item = &'s Slice> {
        let claims = lock(&self.inner.claims).clone();
        let pool = self.read(|d| d.warm_pool.clone());
        slices.iter().filter(move |s| {
            pool.contains(&s.id)
                && s.state == SliceState::Ready
                && s.owner.is_none()
                && !claims.contains(&s.id)
        })
    }

    /// Stops the pool making slices until the guard is dropped: held by an allocation from
    /// before it gives pool slices up until it is done, so the room stays its own.
    pub(crate) fn pause_warm_pool(&self) -> PoolPause<'_> {
        self.inner.pool_yields.fetch_add(1, Ordering::SeqCst);
        PoolPause(&self.inner.pool_yields)
    }

    /// Destroys `group` (free pool slices and their types, one GPU's from
    /// [`Engine::warm_pool_yield_order`]) so a request can use their room; how many went.
    pub(crate) fn yield_warm_pool(&self, group: &[(SliceId, String)]) -> usize {
        let gone = self.destroy_pool_slices(group, "given_up");
        if gone > 0 {
            tracing::info!(
                slices = gone,
                "warm pool: gave up free slices for a request"
            );
        }
        gone
    }

    /// The free pool slices on `gpus`, one group per GPU, in the order a request short of room
    /// takes them back: GPUs with the fewest other slices first (a GPU the pool holds alone
    /// frees whole), then the most pool slices; so a request gives up only as much of the pool
    /// as it needs. One listing of the host.
    pub(crate) fn warm_pool_yield_order(
        &self,
        gpus: &BTreeSet<DeviceRef>,
    ) -> Vec<Vec<(SliceId, String)>> {
        let slices = self.slices();
        let pool: BTreeSet<SliceId> = self.free_pool_slices(&slices).map(|s| s.id).collect();
        // Per GPU: the slices that are not the pool's free ones, and the pool's.
        let mut on: BTreeMap<DeviceRef, (usize, Vec<(SliceId, String)>)> = BTreeMap::new();
        for s in slices.iter().filter(|s| gpus.contains(&s.spec.gpu)) {
            let (others, mine) = on.entry(s.spec.gpu.clone()).or_default();
            if pool.contains(&s.id) {
                mine.push((s.id, s.spec.kind.type_label()));
            } else {
                *others += 1;
            }
        }
        let mut order: Vec<(usize, Vec<(SliceId, String)>)> = on
            .into_values()
            .filter(|(_, mine)| !mine.is_empty())
            .collect();
        order.sort_by_key(|(others, mine)| (*others, std::cmp::Reverse(mine.len())));
        order.into_iter().map(|(_, mine)| mine).collect()
    }

    /// The GPUs a request for `slice_type` could use (for [`Engine::yield_warm_pool`]).
    pub(crate) fn candidate_gpus(
        &self,
        slice_type: &str,
        gpu: Option<ids::PciAddress>,
    ) -> BTreeSet<DeviceRef> {
        self.kept_candidates(slice_type, gpu)
            .map(|specs| specs.into_iter().map(|s| s.gpu).collect())
            .unwrap_or_default()
    }
}

/// See [`Engine::pause_warm_pool`].
pub(crate) struct PoolPause<'a>(&'a AtomicUsize);

impl Drop for PoolPause<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
