//! Counting the engine's own changes to the host, so that what was read about the host can be
//! kept until something changes it (the inventory cache, `inventory_cache`).
//!
//! Every change the engine makes goes through two doors: a sysfs write, and a mutating vendor
//! call (MIG mode, GPU and compute instances; AMD VF count and partitions). Both count here,
//! after the change returns (failed or not: a failed write may still have changed something,
//! SR-IOV can enable fewer VFs than asked), so a reader that saw the old count reads again.
//! Changes made by others arrive as device events or are found by the next reconcile.
//!
//! Each change also says what it touched, so that a reader can re-read only that: a change made
//! by a thread that holds devices' locks (every slice operation holds its GPU's) is theirs, for
//! the engine changes a device only under its lock and what it changes then is the device's own
//! (its functions, VFs, mdevs, MIG instances, driver binding: `driver_override` and
//! `drivers_probe` name the device, nothing else is probed). Any other change, a timed-out
//! vendor call, a GPU reset, a device event and a reconcile count as the whole host.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use sysfs::{Sysfs, SysfsError};

use super::model::DeviceRef;

/// The most devices whose last change is remembered one by one; past it a change counts as a
/// change of the whole host (a host has a few dozen devices, so this is only a bound).
const MAX_DEVICES: usize = 1024;

thread_local! {
    /// The devices whose lock this thread holds (`locks::GpuLocks`): what the thread changes
    /// is theirs. Empty: a change of the whole host.
    static SCOPE: RefCell<Vec<DeviceRef>> = const { RefCell::new(Vec::new()) };
}

/// A count of changes, with which device each one touched; cheap to clone, clones share it.
#[derive(Debug, Clone, Default)]
pub(crate) struct HostChanges(Arc<Log>);

#[derive(Debug, Default)]
struct Log {
    count: AtomicU64,
    marks: Mutex<Marks>,
}

/// The count of the last change of the whole host, and of each device changed since.
#[derive(Debug, Default)]
struct Marks {
    whole: u64,
    devices: HashMap<DeviceRef, u64>,
}

/// What changed after a count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Since {
    /// Nothing.
    Nothing,
    /// Only these devices (each one a GPU's lock holder changed it, and only it).
    Devices(Vec<DeviceRef>),
    /// Anything: a change no device's lock was held for, a device event, a reconcile.
    Whole,
}

impl HostChanges {
    /// Something changed (or may have): the devices this thread holds the locks of, or the whole
    /// host when it holds none.
    pub(crate) fn bump(&self) {
        SCOPE.with(|scope| self.mark(&scope.borrow()));
    }

    /// Anything on the host may have changed.
    pub(crate) fn bump_whole(&self) {
        self.mark(&[]);
    }

    fn mark(&self, devices: &[DeviceRef]) {
        let mut marks = self.0.marks.lock().unwrap_or_else(PoisonError::into_inner);
        // Counted under the marks' lock, so that a count a reader sees is always marked.
        let n = self.0.count.fetch_add(1, Ordering::SeqCst) + 1;
        if devices.is_empty() || marks.devices.len() + devices.len() > MAX_DEVICES {
            marks.whole = n;
            marks.devices.clear();
            return;
        }
        for d in devices {
            marks.devices.insert(d.clone(), n);
        }
    }

    /// The count now.
    pub(crate) fn now(&self) -> u64 {
        self.0.count.load(Ordering::SeqCst)
    }

    /// What changed after `count` (changes made while this runs may be named too).
    pub(crate) fn since(&self, count: u64) -> Since {
        let marks = self.0.marks.lock().unwrap_or_else(PoisonError::into_inner);
        if marks.whole > count {
            return Since::Whole;
        }
        let mut devices: Vec<DeviceRef> = (marks.devices.iter())
            .filter(|(_, n)| **n > count)
            .map(|(d, _)| d.clone())
            .collect();
        if devices.is_empty() {
            return Since::Nothing;
        }
        devices.sort();
        Since::Devices(devices)
    }

    /// Whether the whole host changed after `count` (not only devices a lock holder changed).
    pub(crate) fn whole_since(&self, count: u64) -> bool {
        let marks = self.0.marks.lock().unwrap_or_else(PoisonError::into_inner);
        marks.whole > count
    }

    /// Whether `device` (or the whole host) changed after `count`.
    pub(crate) fn changed_since(&self, count: u64, device: &DeviceRef) -> bool {
        let marks = self.0.marks.lock().unwrap_or_else(PoisonError::into_inner);
        marks.whole > count || marks.devices.get(device).is_some_and(|n| *n > count)
    }
}

/// While alive, what this thread changes is `device`'s (see [`HostChanges::bump`]). Made by
/// the device locks, dropped with them.
#[derive(Debug)]
pub(crate) struct ChangeScope {
    device: DeviceRef,
}

impl ChangeScope {
    pub(crate) fn enter(device: DeviceRef) -> Self {
        SCOPE.with(|scope| scope.borrow_mut().push(device.clone()));
        Self { device }
    }
}

impl Drop for ChangeScope {
    fn drop(&mut self) {
        SCOPE.with(|scope| {
            let mut scope = scope.borrow_mut();
            if let Some(i) = scope.iter().rposition(|d| *d == self.device) {
                scope.remove(i);
            }
        });
    }
}

/// sysfs that counts its writes.
#[derive(Debug)]
pub(crate) struct CountingSysfs {
    inner: Arc<dyn Sysfs>,
    changes: HostChanges,
}

impl CountingSysfs {
    pub(crate) fn wrap(inner: Arc<dyn Sysfs>, changes: HostChanges) -> Arc<dyn Sysfs> {
        Arc::new(Self { inner, changes })
    }
}

impl Sysfs for CountingSysfs {
    fn read(&self, path: &Path, limit: usize) -> Result<Vec<u8>, SysfsError> {
        self.inner.read(path, limit)
    }
    fn write(&self, path: &Path, data: &[u8]) -> Result<(), SysfsError> {
        let out = self.inner.write(path, data);
        self.changes.bump();
        out
    }
    fn read_link(&self, path: &Path) -> Result<PathBuf, SysfsError> {
        self.inner.read_link(path)
    }
    fn list_dir(&self, path: &Path) -> Result<Vec<OsString>, SysfsError> {
        self.inner.list_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
}
