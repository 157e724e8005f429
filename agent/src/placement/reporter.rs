//! The reporter: keeps Placement's view of this host true. It syncs at start, after every local
//! change (debounced: a burst of slice events is one pass), and every `sync_interval_s`, so a
//! change made in Placement by hand is also undone. A Placement that is down never touches
//! local operation: passes are retried with a doubling backoff (1 s up to the sync interval,
//! at most 30 s), and how long the host has been out of sync is a metric and in `vgpuctl host`.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use placement::Client;
use uuid::Uuid;

use super::allocations::audit_and_heal;
use super::consumer::{ConsumerCheck, ConsumerVerdict, ProviderMap, judge};

use super::desired::desired_tree;
use super::settings::PlacementSettings;
use super::status::{PlacementStatus, epoch};
use super::sync::{SyncError, SyncOutcome, sync_once};
use crate::engine::{Engine, EngineError, SliceRequest};

/// The first wait after a failed pass; doubled each time.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between failed passes: Placement back is seen within this.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How often a waiting reporter looks for the daemon's stop.
const STOP_POLL: Duration = Duration::from_millis(100);

/// Keeps one Placement service's view of this host true.
#[derive(Debug)]
pub struct Reporter {
    settings: PlacementSettings,
    client: Client,
    inner: Mutex<Inner>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Inner {
    /// Local changes seen, ever; a pass that started after the last one leaves the host in sync.
    changes: u64,
    /// A change arrived since the reporter last looked.
    poked: bool,
    status: PlacementStatus,
    last: Option<SyncOutcome>,
    /// This host's GPU providers as of the last successful pass (the consumer check's map).
    map: Option<ProviderMap>,
    /// When each consumer unknown to vgpud was first seen (healing's grace period).
    first_seen: BTreeMap<Uuid, Instant>,
}

impl Reporter {
    /// A reporter for `settings`; fails on a client that cannot be built (a bad CA bundle).
    pub fn new(settings: PlacementSettings) -> Result<Self, placement::Error> {
        let client = Client::new(settings.client_config()?)?;
        let status = PlacementStatus {
            // Not `client.endpoint()`: with Keystone that authenticates, and start-up must not
            // wait on Keystone. The catalog's endpoint is filled in after the first pass.
            endpoint: settings.endpoint.clone(),
            root_name: settings.root_name.clone(),
            pending_since: Some(epoch(SystemTime::now())),
            ..PlacementStatus::default()
        };
        Ok(Self {
            settings,
            client,
            inner: Mutex::new(Inner {
                status,
                ..Inner::default()
            }),
            wake: Condvar::new(),
        })
    }

    /// Its settings.
    pub fn settings(&self) -> &PlacementSettings {
        &self.settings
    }

    /// The client it reports with (the consumer check reads through it too).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Something changed locally (a slice, an allocation, a layout, a GPU's health).
    pub fn poke(&self) {
        let mut inner = self.lock();
        inner.changes += 1;
        inner.poked = true;
        inner.status.in_sync = false;
        inner
            .status
            .pending_since
            .get_or_insert(epoch(SystemTime::now()));
        self.wake.notify_all();
    }

    /// Where it stands.
    pub fn status(&self) -> PlacementStatus {
        self.lock().status.clone()
    }

    /// What the last successful pass found (providers by GPU).
    pub fn last_outcome(&self) -> Option<SyncOutcome> {
        self.lock().last.clone()
    }

    /// Syncs until `stopping()` says so.
    pub fn run(&self, engine: &Engine, stopping: &dyn Fn() -> bool) {
        let mut backoff: Option<Duration> = None;
        let mut next = Instant::now();
        while self.wait(next, backoff.is_none(), stopping) {
            if backoff.is_none() && !self.debounce(stopping) {
                return;
            }
            match self.sync_now(engine) {
                Ok(_) => {
                    backoff = None;
                    next = Instant::now() + self.settings.sync_interval;
                }
                Err(e) => {
                    let wait = backoff.map_or(FIRST_BACKOFF, |b| b * 2);
                    let wait = wait.min(MAX_BACKOFF).min(self.settings.sync_interval);
                    tracing::warn!(error = %e, retry_in_s = wait.as_secs_f32(), "Placement sync failed; local operation goes on");
                    backoff = Some(wait);
                    next = Instant::now() + wait;
                }
            }
        }
    }

    /// One pass now, recorded in the status.
    pub fn sync_now(&self, engine: &Engine) -> Result<SyncOutcome, SyncError> {
        let seen = {
            let mut inner = self.lock();
            inner.poked = false;
            inner.changes
        };
        let started = SystemTime::now();
        let result = sync_once(
            &self.client,
            &self.settings.root_name,
            &|| desired_tree(&self.settings, engine),
            self.settings.own_root,
        );
        let audited = result.as_ref().ok().map(|out| self.audit(engine, out));
        let mut inner = self.lock();
        if let Some((map, audit)) = audited {
            inner.map = Some(map);
            let status = &mut inner.status;
            match audit {
                Ok(a) => {
                    status.missing_in_placement = a.differences.missing_in_placement.len() as u32;
                    status.unknown_to_vgpud = a.differences.unknown_to_vgpud.len() as u32;
                    status.amount_mismatch = a.differences.amount_mismatch.len() as u32;
                    status.healed += a.healed.len() as u64;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot compare allocations with Placement; retried on the next pass")
                }
            }
        }
        let status = &mut inner.status;
        status.last_attempt = Some(epoch(started));
        if status.endpoint.is_none() && result.is_ok() {
            status.endpoint = self.client.endpoint().ok();
        }
        match &result {
            Ok(out) => {
                status.syncs_ok += 1;
                status.conflicts += u64::from(out.conflicts);
                status.root = out.root;
                status.gpu_providers = out.gpu_providers.len() as u32;
                status.last_success = Some(epoch(started));
                status.last_error = None;
                status.warnings.clone_from(&out.warnings);
                for w in &out.warnings {
                    tracing::debug!("placement: {w}");
                }
                let current = inner.changes == seen;
                inner.status.in_sync = current;
                if current {
                    inner.status.pending_since = None;
                }
                inner.last = Some(out.clone());
            }
            Err(e) => {
                status.syncs_failed += 1;
                status.in_sync = false;
                status.last_error = Some(e.to_string());
                status.pending_since.get_or_insert(epoch(started));
            }
        }
        result
    }

    /// The provider map of a pass, and the allocation audit against it.
    fn audit(
        &self,
        engine: &Engine,
        out: &SyncOutcome,
    ) -> (
        ProviderMap,
        Result<super::allocations::AuditOutcome, placement::Error>,
    ) {
        let mut map = ProviderMap::new();
        for (gpu, provider) in &out.gpu_providers {
            let types = out.gpu_types.get(gpu).cloned().unwrap_or_default();
            map.add_gpu(*provider, *gpu, types);
        }
        let heal = self.settings.heal.then_some(self.settings.heal_grace);
        let mut first_seen = std::mem::take(&mut self.lock().first_seen);
        let audit = audit_and_heal(&self.client, engine, &map, heal, &mut first_seen);
        self.lock().first_seen = first_seen;
        (map, audit)
    }

    /// Waits until `deadline`, or a poke when `pokes` (a backing-off reporter ignores them);
    /// false when the daemon stops.
    fn wait(&self, deadline: Instant, pokes: bool, stopping: &dyn Fn() -> bool) -> bool {
        let mut inner = self.lock();
        loop {
            if stopping() {
                return false;
            }
            let now = Instant::now();
            if now >= deadline || (pokes && inner.poked) {
                return true;
            }
            let step = STOP_POLL.min(deadline - now);
            inner = self
                .wake
                .wait_timeout(inner, step)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Lets a burst of changes settle: returns once none came for `debounce` (at most ten
    /// times that, so a steady stream of changes still gets reported); false on stop.
    fn debounce(&self, stopping: &dyn Fn() -> bool) -> bool {
        if !self.lock().poked {
            return true; // a periodic or first pass: nothing to settle
        }
        let settle = self.settings.debounce;
        let give_up = Instant::now() + settle * 10;
        loop {
            self.lock().poked = false;
            let quiet_until = Instant::now() + settle;
            while Instant::now() < quiet_until {
                if stopping() {
                    return false;
                }
                std::thread::sleep(STOP_POLL.min(quiet_until - Instant::now()));
            }
            if !self.lock().poked || Instant::now() >= give_up {
                return true;
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The reporter checks a request's consumer against this host's providers as of its last pass.
impl ConsumerCheck for Reporter {
    fn check(
        &self,
        consumer: Uuid,
        request: &SliceRequest,
    ) -> Result<Option<ConsumerVerdict>, EngineError> {
        let Some(map) = self.lock().map.clone() else {
            return Err(EngineError::PlacementUnavailable(
                "this host's providers are not in Placement yet (no sync has succeeded)".into(),
            ));
        };
        let held = self
            .client
            .consumer_allocations(consumer)
            .map_err(|e| EngineError::PlacementUnavailable(e.to_string()))?;
        Ok(Some(judge(&map, &held, request)))
    }

    fn strict(&self) -> bool {
        self.settings.strict_consumers
    }
}
