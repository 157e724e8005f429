//! The engine handle: its configuration and the state every operation shares (the store, the
//! GPU and key locks, in-memory claims and failure reasons, layout status, the event channel).
//! The operations themselves are `impl Engine` blocks in the modules named for them.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ids::PciAddress;
use inventory::HostAccess;
use tokio::sync::broadcast;

use super::candidates_cache::{self, CandidatesCache, OfferedCache};
use super::capacity::CapacityCache;
use super::demand_mix::LearntMix;
use super::error::Result;
use super::events::Event;
use super::inventory_cache::InventoryCache;
use super::layout::GpuLayoutStatus;
use super::locks::{GpuLocks, KeyLocks, lock};
use super::model::SliceId;
use super::observation_cache::ObservationCache;
use super::state::{self, Desired};
use super::timed_host::TimedHost;
use super::{marked, state_check};
use crate::metrics::Metrics;

/// How to open an engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Where the desired state lives (default `/var/lib/vgpud`).
    pub state_dir: PathBuf,
    /// The host to work on.
    pub host: HostAccess,
    /// The longest a vendor library call may take before it is abandoned (default 10 s).
    pub vendor_timeout: Duration,
    /// How many events a slow subscriber may fall behind before it loses some.
    pub event_capacity: usize,
}

impl EngineConfig {
    /// A configuration with the defaults.
    pub fn new(state_dir: impl Into<PathBuf>, host: HostAccess) -> Self {
        Self {
            state_dir: state_dir.into(),
            host,
            vendor_timeout: Duration::from_secs(10),
            event_capacity: 1024,
        }
    }
}

/// The slice engine. Cheap to clone; clones share everything. Every method blocks (sysfs, vendor
/// calls, fsync): async callers use `spawn_blocking`.
#[derive(Debug, Clone)]
pub struct Engine {
    pub(super) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) host: TimedHost,
    pub(super) store: Mutex<store::Store<Desired>>,
    pub(super) gpu_locks: GpuLocks,
    pub(super) key_locks: KeyLocks,
    /// Slices picked by an allocation still being assembled; nobody else may take them.
    pub(super) claims: Mutex<HashSet<SliceId>>,
    /// Why owned slices are failed, from the last reconcile or operation.
    pub(super) failures: Mutex<HashMap<SliceId, String>>,
    pub(super) foreign_seen: Mutex<BTreeSet<String>>,
    pub(super) layout_status: Mutex<BTreeMap<PciAddress, GpuLayoutStatus>>,
    /// Devices with owned slices found gone from the PCI bus (see `presence`).
    pub(super) gone: Mutex<BTreeSet<PciAddress>>,
    pub(super) events: broadcast::Sender<Event>,
    /// The agent's counters and histograms (vendor calls count here, the service adds the rest).
    pub(super) metrics: Metrics,
    /// The last discovery of the host, while nothing changed it.
    pub(super) inventory: InventoryCache,
    /// What the host showed for each owned slice, while nothing changed (views only).
    pub(super) observations: ObservationCache,
    /// What slice types mean on each GPU, while nothing changed.
    pub(super) candidates: CandidatesCache,
    /// The types each GPU offers, while nothing changed.
    pub(super) offered: OfferedCache,
    /// The last capacity report, while its inputs are the same.
    pub(super) capacity: CapacityCache,
    /// The demand mix learnt from the requests placed (see `demand_mix`).
    pub(super) mix: Mutex<LearntMix>,
    /// Allocations that gave up warm-pool slices and are not done yet: while any is, the pool
    /// makes nothing (it would take back the room they freed; see `warm_pool`).
    pub(super) pool_yields: std::sync::atomic::AtomicUsize,
    /// Slices released by allocations and free since, kept while a warm pool runs (in memory
    /// only: a slice a restart finds free stays an ordinary free slice). See `warm_pool`.
    pub(super) released: Mutex<BTreeSet<SliceId>>,
    /// Whether a warm pool runs and so `released` is kept.
    pub(super) track_released: std::sync::atomic::AtomicBool,
}

impl Engine {
    /// Opens the state directory (taking its lock: a second engine on it is refused) and wraps the
    /// host's vendor libraries in time-bounded calls. A state file whose records contradict each
    /// other is refused as corrupt; a missing one is refused while the host shows slices
    /// carrying vgpud's mark ([`Engine::recover`] rebuilds it). Call [`Engine::reconcile`]
    /// before serving.
    pub fn open(config: EngineConfig) -> Result<Engine> {
        let store =
            store::Store::open_checked(&config.state_dir, state::SCHEMA, state_check::check)?;
        let metrics = Metrics::default();
        let host = TimedHost::new(config.host, config.vendor_timeout, metrics.clone());
        if !store.loaded() {
            marked::refuse_if_marked(&host, store.path())?;
        }
        let (events, _) = broadcast::channel(config.event_capacity.max(1));
        let saved = store.get().demand_mix.clone().unwrap_or_default().0;
        let mix = sched::MixEstimator::from_state(sched::MixConfig::default(), saved);
        metrics.set_demand_mix(&mix);
        Ok(Engine {
            inner: Arc::new(Inner {
                host,
                store: Mutex::new(store),
                gpu_locks: GpuLocks::default(),
                key_locks: KeyLocks::default(),
                claims: Mutex::new(HashSet::new()),
                failures: Mutex::new(HashMap::new()),
                foreign_seen: Mutex::new(BTreeSet::new()),
                layout_status: Mutex::new(BTreeMap::new()),
                gone: Mutex::new(BTreeSet::new()),
                events,
                metrics,
                inventory: InventoryCache::default(),
                observations: ObservationCache::default(),
                candidates: CandidatesCache::with_cap(candidates_cache::MAX_KEPT),
                offered: OfferedCache::with_cap(candidates_cache::MAX_KEPT),
                capacity: CapacityCache::default(),
                released: Mutex::default(),
                track_released: std::sync::atomic::AtomicBool::new(false),
                pool_yields: std::sync::atomic::AtomicUsize::new(0),
                mix: Mutex::new(LearntMix::new(mix)),
            }),
        })
    }

    /// The agent's counters and histograms.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// A receiver of every event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.inner.events.subscribe()
    }

    /// The state directory.
    pub fn state_dir(&self) -> PathBuf {
        lock(&self.inner.store).dir().to_owned()
    }

    /// Operations whose intent is still open (finished or rolled back by the next reconcile).
    pub fn pending_intents(&self) -> usize {
        self.read(|d| d.intents.len())
    }

    pub(super) fn host(&self) -> &TimedHost {
        &self.inner.host
    }

    pub(crate) fn emit(&self, event: Event) {
        tracing::debug!(?event, "engine event");
        // No subscriber is fine.
        let _ = self.inner.events.send(event);
    }

    /// Reads the desired state.
    pub(super) fn read<R>(&self, f: impl FnOnce(&Desired) -> R) -> R {
        f(lock(&self.inner.store).get())
    }

    /// The owned slices carved from the PCI device `gpu` (the ledger's, present on the host or
    /// not).
    pub(super) fn owned_on(&self, gpu: PciAddress) -> Vec<state::OwnedSlice> {
        self.read(|d| {
            d.slices
                .values()
                .filter(|s| s.spec.gpu == gpu)
                .cloned()
                .collect()
        })
    }

    /// Changes the desired state in one durable write. Kept views of slices are read again
    /// after it (see `observation_cache`): counted first, so a reader that finds the new ledger
    /// also finds the new count, and an operation's last write (after its host changes) leaves
    /// nothing seen during the operation in use.
    pub(super) fn write<R>(&self, f: impl FnOnce(&mut Desired) -> R) -> Result<R> {
        self.inner.observations.ledger_written();
        Ok(lock(&self.inner.store).update(f)?)
    }

    pub(super) fn set_failure(&self, slice: SliceId, reason: Option<String>) {
        let mut f = lock(&self.inner.failures);
        match reason {
            Some(r) => f.insert(slice, r),
            None => f.remove(&slice),
        };
    }
}
