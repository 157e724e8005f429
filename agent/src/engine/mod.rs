//! The slice engine: creates, keeps and hands out GPU slices, whatever happens.
//!
//! The engine is the only place with policy and state. It composes the primitive host
//! operations of `vfio`, `mdev` and `gpu` through one [`backend`] per slicing mechanism, keeps
//! what cannot be read back from the host (the ownership ledger, allocations, layouts, intents of
//! operations in flight) in a crash-safe [`store`], and reconciles the two ([`Engine::reconcile`]).
//! Operations on one GPU are serialised, different GPUs proceed in parallel; the kernel's or
//! NVML's answer is the commit point and state is re-read after every mutation. The design,
//! with the state machine, store format, intent protocol and error codes, is in
//! `docs/engine.md`.
//!
//! It must not parse HTTP or D-Bus (front ends adapt [`Engine`]'s API), and it never touches a
//! slice it did not create.

mod alloc;
mod backend;
mod error;
mod events;
mod hostctx;
pub mod import;
pub mod layout;
pub mod limits;
mod locks;
pub mod model;
mod ops;
pub mod placement;
mod reconcile;
mod resolve;
mod snapshot;
mod state;
mod vendor;
mod vfs;
mod view;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ids::PciAddress;
use inventory::HostAccess;
use tokio::sync::broadcast;

pub use alloc::Finish;
pub use error::{EngineError, Result};
pub use events::Event;
pub use layout::{
    AmdPartition, GpuLayoutStatus, GpuSelector, Layout, LayoutEntry, LayoutState, LayoutsView,
};
pub use model::*;
pub use reconcile::{ReconcileReport, StaleVmLink};

/// Where the desired state lives unless configured otherwise.
pub const DEFAULT_STATE_DIR: &str = store::DEFAULT_DIR;

use hostctx::Host;
use locks::{GpuLocks, KeyLocks};
use state::Desired;

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
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    host: Host,
    store: Mutex<store::Store<Desired>>,
    gpu_locks: GpuLocks,
    key_locks: KeyLocks,
    /// Slices picked by an allocation still being assembled; nobody else may take them.
    claims: Mutex<HashSet<SliceId>>,
    /// Why owned slices are failed, from the last reconcile or operation.
    failures: Mutex<HashMap<SliceId, String>>,
    foreign_seen: Mutex<BTreeSet<String>>,
    layout_status: Mutex<BTreeMap<PciAddress, GpuLayoutStatus>>,
    events: broadcast::Sender<Event>,
}

/// Locks a mutex; a panic elsewhere does not make the engine's maps unusable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Engine {
    /// Opens the state directory (taking its lock: a second engine on it is refused) and wraps the
    /// host's vendor libraries in time-bounded calls. Call [`Engine::reconcile`] before serving.
    pub fn open(config: EngineConfig) -> Result<Engine> {
        let store = store::Store::open(&config.state_dir, state::SCHEMA)?;
        let (events, _) = broadcast::channel(config.event_capacity.max(1));
        Ok(Engine {
            inner: Arc::new(Inner {
                host: Host::new(config.host, config.vendor_timeout),
                store: Mutex::new(store),
                gpu_locks: GpuLocks::default(),
                key_locks: KeyLocks::default(),
                claims: Mutex::new(HashSet::new()),
                failures: Mutex::new(HashMap::new()),
                foreign_seen: Mutex::new(BTreeSet::new()),
                layout_status: Mutex::new(BTreeMap::new()),
                events,
            }),
        })
    }

    /// The host's inventory (discovery through the time-bounded vendor libraries).
    pub fn inventory(&self) -> inventory::HostInventory {
        inventory::discover(&self.inner.host.access)
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

    fn host(&self) -> &Host {
        &self.inner.host
    }

    pub(crate) fn emit(&self, event: Event) {
        tracing::debug!(?event, "engine event");
        // No subscriber is fine.
        let _ = self.inner.events.send(event);
    }

    /// Reads the desired state.
    fn read<R>(&self, f: impl FnOnce(&Desired) -> R) -> R {
        f(lock(&self.inner.store).get())
    }

    /// Changes the desired state in one durable write.
    fn write<R>(&self, f: impl FnOnce(&mut Desired) -> R) -> Result<R> {
        Ok(lock(&self.inner.store).update(f)?)
    }

    fn set_failure(&self, slice: SliceId, reason: Option<String>) {
        let mut f = lock(&self.inner.failures);
        match reason {
            Some(r) => f.insert(slice, r),
            None => f.remove(&slice),
        };
    }
}
