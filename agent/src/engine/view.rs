//! Slices as clients see them: the ledger joined with what the host shows now.

use std::collections::BTreeSet;

use super::backend::{self, Observed};
use super::error::{EngineError, Result, chain};
use super::handle::Engine;
use super::locks::lock;
use super::model::{Allocation, DeviceRef, Handles, Owner, Slice, SliceId, SliceState};
use super::observation_cache::Seen;
use super::state::{Desired, Intent, OwnedSlice};

impl Engine {
    /// Every owned slice (and those being created), with host handles and state.
    pub fn slices(&self) -> Vec<Slice> {
        self.slices_in(&self.read(Desired::clone))
    }

    /// The slices of one read of the ledger.
    pub(super) fn slices_in(&self, d: &Desired) -> Vec<Slice> {
        let mut out: Vec<Slice> = d.slices.values().map(|s| self.view(s, d)).collect();
        for intent in d.intents.values() {
            if let Intent::Create { slice: Some(s), .. } = intent
                && !d.slices.contains_key(&s.id)
            {
                out.push(self.view(s, d));
            }
        }
        out.sort_by(|a, b| (&a.spec.gpu, a.id).cmp(&(&b.spec.gpu, b.id)));
        out
    }

    /// The owned slices on one GPU (only those are observed on the host).
    pub(super) fn slices_on(&self, gpu: &DeviceRef) -> Vec<Slice> {
        self.slices_where(|s| s.spec.gpu == *gpu)
    }

    /// The slices `allocations` hold: only those are observed on the host, so an answer about
    /// a few allocations does not look at every slice the host has.
    pub fn slices_held(&self, allocations: &[Allocation]) -> Vec<Slice> {
        let held: BTreeSet<SliceId> = allocations.iter().flat_map(|a| a.slices.clone()).collect();
        self.slices_where(|s| held.contains(&s.id))
    }

    /// The ledger's slices that `keep` selects, observed, in [`Engine::slices`]' order (one
    /// read of the ledger).
    fn slices_where(&self, keep: impl Fn(&OwnedSlice) -> bool) -> Vec<Slice> {
        let d = self.read(Desired::clone);
        let mut out: Vec<Slice> = (d.slices.values())
            .filter(|s| keep(s))
            .map(|s| self.view(s, &d))
            .collect();
        out.sort_by(|a, b| (&a.spec.gpu, a.id).cmp(&(&b.spec.gpu, b.id)));
        out
    }

    /// One slice.
    pub fn slice(&self, id: SliceId) -> Result<Slice> {
        // Only this slice's part of the ledger is copied out (not the whole ledger).
        let found = self.read(|d| {
            let entry = d.slices.get(&id).cloned().or_else(|| {
                d.intents.values().find_map(|i| match i {
                    Intent::Create { slice: Some(s), .. } if s.id == id => Some(s.clone()),
                    _ => None,
                })
            });
            entry.map(|s| {
                let facts = LedgerFacts::of(&s, d);
                (s, facts)
            })
        });
        found
            .map(|(s, facts)| self.view_with(&s, facts))
            .ok_or_else(|| EngineError::NotFound(format!("slice {id}")))
    }

    fn view(&self, entry: &OwnedSlice, d: &Desired) -> Slice {
        self.view_with(entry, LedgerFacts::of(entry, d))
    }

    fn view_with(&self, entry: &OwnedSlice, facts: LedgerFacts) -> Slice {
        let LedgerFacts {
            owner,
            in_ledger,
            destroying,
        } = facts;
        let seen = self.seen(entry);
        let (state, handles, mut reason) = match seen.observed {
            _ if !in_ledger => (SliceState::Creating, Handles::default(), None),
            _ if destroying => (SliceState::Releasing, Handles::default(), None),
            Ok(Observed::Present(h)) if owner.is_some() => (SliceState::Allocated, h, None),
            Ok(Observed::Present(h)) => (SliceState::Ready, h, None),
            Ok(Observed::Absent) => (
                SliceState::Failed,
                Handles::default(),
                Some("absent from the host; the next reconcile re-creates it".to_owned()),
            ),
            Ok(Observed::Changed(why)) => (SliceState::Failed, Handles::default(), Some(why)),
            Err(why) => (SliceState::Failed, Handles::default(), Some(why)),
        };
        if state == SliceState::Failed
            && let Some(why) = lock(&self.inner.failures).get(&entry.id)
        {
            reason = Some(why.clone());
        }
        Slice {
            id: entry.id,
            spec: entry.spec.clone(),
            identity: entry.identity.clone(),
            handles,
            numa_node: seen.numa_node,
            owner,
            state,
            reason,
        }
    }

    /// What the host shows for `entry`: kept while nothing changed (see `observation_cache`).
    fn seen(&self, entry: &OwnedSlice) -> Seen {
        let cache = &self.inner.observations;
        // Counted before observing: a change during the observation leaves it unused.
        let epoch = cache.epoch(self.host().changes().now());
        if let Some(seen) = cache.get(epoch, entry) {
            return seen;
        }
        let host = self.host();
        let observed = backend::of_slice(&entry.spec, &entry.identity)
            .observe(host, &entry.spec, &entry.identity)
            .map_err(|e| chain(&e));
        let numa_node = (entry.spec.gpu.pci()).and_then(|a| vfio::numa_node(host.fs(), a));
        let seen = Seen {
            observed,
            numa_node,
        };
        cache.keep(epoch, entry, seen.clone());
        seen
    }
}

/// What the ledger says of one slice, for its view.
struct LedgerFacts {
    owner: Option<Owner>,
    in_ledger: bool,
    destroying: bool,
}

impl LedgerFacts {
    fn of(entry: &OwnedSlice, d: &Desired) -> Self {
        Self {
            owner: d.holder(entry.id).map(|a| Owner {
                consumer: a.consumer.clone(),
                vm: a.vm.clone(),
                allocation: a.id,
            }),
            in_ledger: d.slices.contains_key(&entry.id),
            destroying: d
                .intents
                .values()
                .any(|i| matches!(i, Intent::Destroy { slice } if slice.id == entry.id)),
        }
    }
}
