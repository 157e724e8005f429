//! The host's inventory kept current instead of re-discovered for every request.
//!
//! A discovery reads every PCI function, mdev parent and GPU through sysfs and the vendor
//! libraries: a few hundred reads and vendor calls. What it finds changes only when something
//! changes the host, so the last discovery is kept and handed out until one of:
//!
//! - the engine changed the host itself (a sysfs write or a mutating vendor call, counted by
//!   `host_changes`): the next reader reads again what the change touched (the GPU whose lock
//!   the change was made under, `inventory::refresh`), or discovers the whole host again when
//!   the change was not a device's;
//! - a device event arrived or a reconcile starts ([`Engine::host_changed`]): the same;
//! - it is older than [`MAX_AGE`]: a backstop for what nothing announces (another program's
//!   NVML calls, a link that retrained). The reader that finds it so still gets it, and starts
//!   one discovery on a thread of its own: a change nobody announced is as late for this reader
//!   either way, and the request does not wait for a whole discovery (milliseconds, and its
//!   p99) for it.
//!
//! NUMA nodes' free memory changes all the time and costs one small read per node: it is read
//! fresh for every caller.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ids::PciAddress;
use inventory::HostInventory;

use super::handle::Engine;
use super::host_changes::Since;
use super::model::DeviceRef;

/// The longest a discovery is handed out without a change having been seen.
pub const MAX_AGE: Duration = Duration::from_secs(5);

/// The last discovery and the change count it was read at.
#[derive(Debug, Default)]
pub(crate) struct InventoryCache {
    last: Mutex<Option<Kept>>,
    /// Held while discovering, so that concurrent readers wait for one discovery instead of
    /// each making their own.
    discovering: Mutex<()>,
    /// Set while a re-discovery of an aged inventory runs aside (one at a time).
    refreshing: AtomicBool,
}

#[derive(Debug)]
struct Kept {
    changes: u64,
    at: Instant,
    inventory: Arc<HostInventory>,
}

/// What the cache holds for a change count.
enum Lookup {
    /// Current.
    Fresh(Arc<HostInventory>),
    /// Nothing changed it, but it is older than [`MAX_AGE`].
    Aged(Arc<HostInventory>),
    /// None, or read before the last change.
    Stale,
}

impl InventoryCache {
    fn lookup(&self, changes: u64) -> Lookup {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        match last.as_ref() {
            Some(k) if k.changes == changes && k.at.elapsed() < MAX_AGE => {
                Lookup::Fresh(k.inventory.clone())
            }
            Some(k) if k.changes == changes => Lookup::Aged(k.inventory.clone()),
            _ => Lookup::Stale,
        }
    }

    fn current(&self, changes: u64) -> Option<Arc<HostInventory>> {
        match self.lookup(changes) {
            Lookup::Fresh(inv) => Some(inv),
            Lookup::Aged(_) | Lookup::Stale => None,
        }
    }

    /// Keeps `inventory`, read after `changes`; `at` is when the host was last discovered
    /// whole (the backstop's age counts from there, not from a refresh of some devices).
    fn keep(&self, changes: u64, at: Instant, inventory: Arc<HostInventory>) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(Kept {
            changes,
            at,
            inventory,
        });
    }

    /// The kept inventory with the count it was read after and when the host was discovered
    /// whole, if that is under [`MAX_AGE`] ago.
    fn young(&self) -> Option<(u64, Instant, Arc<HostInventory>)> {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let k = last.as_ref().filter(|k| k.at.elapsed() < MAX_AGE)?;
        Some((k.changes, k.at, k.inventory.clone()))
    }
}

impl Engine {
    /// The host's inventory: the last discovery while nothing changed the host (see the module
    /// documentation), with NUMA free memory read now.
    pub fn inventory(&self) -> HostInventory {
        let mut inv = (*self.kept_inventory()).clone();
        self.refresh_numa(&mut inv);
        inv
    }

    /// Something may have changed the host behind the engine's back (a device event): the
    /// next reader discovers it again.
    pub fn host_changed(&self) {
        self.host().changes().bump_whole();
    }

    /// The last discovery if it is still current, else a new one.
    pub(super) fn kept_inventory(&self) -> Arc<HostInventory> {
        let cache = &self.inner.inventory;
        let changes = self.host().changes();
        match cache.lookup(changes.now()) {
            Lookup::Fresh(inv) => return inv,
            Lookup::Aged(inv) => {
                self.rediscover_aside();
                return inv;
            }
            Lookup::Stale => {}
        }
        self.discover_kept()
    }

    /// Starts one discovery on a thread of its own unless one is running already.
    fn rediscover_aside(&self) {
        let refreshing = &self.inner.inventory.refreshing;
        if refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let engine = self.clone();
        let started = std::thread::Builder::new()
            .name("vgpud-rediscover".into())
            .spawn(move || {
                engine.discover_kept();
                engine
                    .inner
                    .inventory
                    .refreshing
                    .store(false, Ordering::Release);
            });
        if let Err(e) = started {
            refreshing.store(false, Ordering::Release);
            tracing::warn!("cannot start a re-discovery of the host: {e}");
        }
    }

    /// Discovers the host and keeps it (one discovery at a time; a reader that waited for
    /// another's gets that one).
    fn discover_kept(&self) -> Arc<HostInventory> {
        let cache = &self.inner.inventory;
        let changes = self.host().changes();
        let _one = cache
            .discovering
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Another reader may have discovered while this one waited.
        let seen = changes.now();
        if let Some(inv) = cache.current(seen) {
            return inv;
        }
        if let Some(inv) = self.refresh_kept(seen) {
            return inv;
        }
        // Counted before reading: a change during the discovery leaves it stale at once.
        let at = Instant::now();
        let inv = Arc::new(inventory::discover(&self.host().access));
        cache.keep(seen, at, inv.clone());
        inv
    }

    /// The kept inventory with the devices changed since it was read read again, when only
    /// devices changed (see `host_changes`) and `inventory::refresh` can answer for them.
    fn refresh_kept(&self, seen: u64) -> Option<Arc<HostInventory>> {
        let cache = &self.inner.inventory;
        let (read_at, at, kept) = cache.young()?;
        let devices = match self.host().changes().since(read_at) {
            Since::Whole => return None,
            Since::Nothing => Vec::new(),
            Since::Devices(devices) => devices,
        };
        let (mut gpus, mut parents) = (Vec::new(), Vec::new());
        for d in devices {
            match d {
                DeviceRef::Pci(addr) => gpus.push(addr),
                DeviceRef::MdevParent(name) => parents.push(name),
            }
        }
        let inv = Arc::new(inventory::refresh(
            &self.host().access,
            &kept,
            &gpus,
            &parents,
        )?);
        cache.keep(seen, at, inv.clone());
        Some(inv)
    }

    /// The GPU as the host shows it now, read again whatever is kept (for a step that must not
    /// act on a kept view: a change of MIG mode checks that nothing sits on the GPU, and a
    /// slice someone else made there announces nothing). `None` when the host has no such GPU.
    pub(super) fn gpu_now(&self, gpu: PciAddress) -> Option<inventory::Gpu> {
        let access = &self.host().access;
        let kept = self.kept_inventory();
        let inv = inventory::refresh(access, &kept, &[gpu], &[])
            .unwrap_or_else(|| inventory::discover(access));
        inv.gpus.into_iter().find(|g| g.pci_address == gpu)
    }

    /// Reads each known node's free memory (one read per node; a node that cannot be read
    /// keeps the discovery's figure).
    fn refresh_numa(&self, inv: &mut HostInventory) {
        for node in &mut inv.numa_nodes {
            if let Some(free) = numa::free_memory_mib(self.host().fs(), node.id) {
                node.memory_free_mib = free;
            }
        }
    }
}
