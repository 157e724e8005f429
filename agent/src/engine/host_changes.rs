//! Counting the engine's own changes to the host, so that what was read about the host can be
//! kept until something changes it (the inventory cache, `inventory_cache`).
//!
//! Every change the engine makes goes through two doors: a sysfs write, and a mutating vendor
//! call (MIG mode, GPU and compute instances; AMD VF count and partitions). Both count here,
//! after the change returns (failed or not: a failed write may still have changed something,
//! SR-IOV can enable fewer VFs than asked), so a reader that saw the old count reads again.
//! Changes made by others arrive as device events or are found by the next reconcile.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sysfs::{Sysfs, SysfsError};

/// A count of changes; cheap to clone, clones share the count.
#[derive(Debug, Clone, Default)]
pub(crate) struct HostChanges(Arc<AtomicU64>);

impl HostChanges {
    /// Something changed (or may have).
    pub(crate) fn bump(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    /// The count now.
    pub(crate) fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
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
