//! A MIG GPU's geometry, kept between NVML calls: its GPU-instance profiles and where each can
//! be placed.
//!
//! Both are fixed by the GPU's product and the driver while MIG mode is on: NVML's
//! `nvmlDeviceGetGpuInstanceProfileInfoV` and `nvmlDeviceGetGpuInstancePossiblePlacements_v2`
//! describe what the GPU *can* hold, not what it holds (that is `nvmlDeviceGetGpuInstances`
//! and the remaining capacity, always asked; NVIDIA's MIG user guide lists the profiles and
//! placements per product). Yet every MIG step asked again (validate, plan, realize, observe,
//! destroy, and a GPU's discovery after each change): 20 of the 61 NVML calls of an allocate,
//! release and destroy cycle (BENCHMARKS.md §6).
//!
//! A kept answer is used while it is younger than
//! [`MAX_AGE`](super::inventory_cache::MAX_AGE) and nothing changed the whole
//! host since it was read (a device event, a reconcile, a GPU reset, a timed-out vendor call:
//! `host_changes`), the GPU's MIG mode was not set since (`mig_mode_set`), and its NVML index
//! still names the same GPU (`seen`: NVML keeps a device's index until it is initialised
//! again, but a GPU that left and one that came can meet at one index). Errors are not kept.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use gpu::{GpuInstanceProfile, NvmlResult, Placement};
use ids::PciAddress;

use super::host_changes::HostChanges;
use super::kept_map::KeptByCount;

/// Profile lists kept at most (one per NVML device).
const MAX_GPUS: usize = 64;
/// Placement lists kept at most (one per device and profile).
const MAX_PLACEMENTS: usize = MAX_GPUS * 32;

/// The kept geometry of every MIG GPU, by NVML index.
#[derive(Debug)]
pub(crate) struct KeptGeometry {
    changes: HostChanges,
    profiles: KeptByCount<u32, Vec<GpuInstanceProfile>>,
    placements: KeptByCount<(u32, u32), Vec<Placement>>,
    /// Per NVML index: the GPU last seen there, and the change count at which what was kept
    /// about the index was last forgotten.
    devices: Mutex<HashMap<u32, Device>>,
}

#[derive(Debug, Default)]
struct Device {
    address: Option<PciAddress>,
    forgotten_at: Option<u64>,
}

impl KeptGeometry {
    pub(crate) fn new(changes: HostChanges) -> Self {
        Self {
            changes,
            profiles: KeptByCount::with_cap(MAX_GPUS),
            placements: KeptByCount::with_cap(MAX_PLACEMENTS),
            devices: Mutex::default(),
        }
    }

    /// Device `index`'s GPU-instance profiles: kept, else `read`'s answer.
    pub(crate) fn profiles(
        &self,
        index: u32,
        read: impl FnOnce() -> NvmlResult<Vec<GpuInstanceProfile>>,
    ) -> NvmlResult<Vec<GpuInstanceProfile>> {
        self.through(&self.profiles, index, index, read)
    }

    /// Where profile `profile` can be placed on device `index`: kept, else `read`'s answer.
    pub(crate) fn placements(
        &self,
        index: u32,
        profile: u32,
        read: impl FnOnce() -> NvmlResult<Vec<Placement>>,
    ) -> NvmlResult<Vec<Placement>> {
        self.through(&self.placements, index, (index, profile), read)
    }

    /// Device `index`'s MIG mode was just set: what was read about it up to now is not used,
    /// nor what is read before the next change is counted (a fill that raced the set counted
    /// no later than it).
    pub(crate) fn mig_mode_set(&self, index: u32) {
        self.forget(index);
    }

    /// NVML answered that `address` is at `index`: a GPU other than the one seen there before
    /// has its geometry read afresh.
    pub(crate) fn seen(&self, index: u32, address: PciAddress) {
        let before = self
            .lock_devices()
            .entry(index)
            .or_default()
            .address
            .replace(address);
        if before.is_some_and(|b| b != address) {
            self.forget(index);
        }
    }

    fn forget(&self, index: u32) {
        let now = self.changes.now();
        self.lock_devices().entry(index).or_default().forgotten_at = Some(now);
    }

    fn through<K: Eq + std::hash::Hash, V: Clone>(
        &self,
        kept: &KeptByCount<K, V>,
        index: u32,
        key: K,
        read: impl FnOnce() -> NvmlResult<V>,
    ) -> NvmlResult<V> {
        if let Some(k) = kept.get(&key)
            && self.still_holds(index, k.count)
        {
            return Ok(k.value);
        }
        // Counted before the read: a change while it runs makes the answer old at once.
        let count = self.changes.now();
        let value = read()?;
        kept.keep(key, count, Instant::now(), value.clone());
        Ok(value)
    }

    /// Whether an answer about device `index` read after `count` changes still holds.
    fn still_holds(&self, index: u32, count: u64) -> bool {
        let forgotten = self.lock_devices().get(&index).and_then(|d| d.forgotten_at);
        forgotten.is_none_or(|at| count > at) && !self.changes.whole_since(count)
    }

    fn lock_devices(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Device>> {
        self.devices.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::cell::Cell;

    use gpu::{NvmlCode, NvmlError};

    fn placement(start: u32) -> Vec<Placement> {
        vec![Placement { start, size: 1 }]
    }

    /// The placements of profile 0 on device 0, counting the reads that reach "NVML".
    fn ask(geometry: &KeptGeometry, reads: &Cell<u32>, start: u32) -> NvmlResult<Vec<Placement>> {
        geometry.placements(0, 0, || {
            reads.set(reads.get() + 1);
            Ok(placement(start))
        })
    }

    #[test]
    fn an_answer_is_kept_until_the_whole_host_changes() {
        let changes = HostChanges::default();
        let geometry = KeptGeometry::new(changes.clone());
        let reads = Cell::new(0);
        assert_eq!(ask(&geometry, &reads, 0), Ok(placement(0)));
        assert_eq!(ask(&geometry, &reads, 1), Ok(placement(0)), "kept");
        assert_eq!(reads.get(), 1);
        // A change that no device lock scoped (as a device event or a reconcile).
        changes.bump_whole();
        assert_eq!(ask(&geometry, &reads, 2), Ok(placement(2)), "read again");
        assert_eq!(reads.get(), 2);
    }

    #[test]
    fn an_error_is_not_kept() {
        let geometry = KeptGeometry::new(HostChanges::default());
        let reads = Cell::new(0);
        let failed = geometry.placements(0, 0, || {
            Err(NvmlError::new(
                "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
                NvmlCode::UNKNOWN,
            ))
        });
        assert!(failed.is_err());
        assert_eq!(ask(&geometry, &reads, 0), Ok(placement(0)));
        assert_eq!(reads.get(), 1);
    }

    #[test]
    fn setting_a_gpus_mig_mode_reads_its_geometry_again() {
        let geometry = KeptGeometry::new(HostChanges::default());
        let reads = Cell::new(0);
        assert_eq!(ask(&geometry, &reads, 0), Ok(placement(0)));
        geometry.mig_mode_set(1);
        assert_eq!(
            ask(&geometry, &reads, 1),
            Ok(placement(0)),
            "another GPU's mode"
        );
        geometry.mig_mode_set(0);
        assert_eq!(ask(&geometry, &reads, 2), Ok(placement(2)), "read again");
        assert_eq!(reads.get(), 2);
    }

    #[test]
    fn another_gpu_at_an_index_has_its_geometry_read_again() {
        let geometry = KeptGeometry::new(HostChanges::default());
        let reads = Cell::new(0);
        let (a, b) = (
            "0000:07:00.0".parse().unwrap(),
            "0000:0f:00.0".parse().unwrap(),
        );
        geometry.seen(0, a);
        assert_eq!(ask(&geometry, &reads, 0), Ok(placement(0)));
        geometry.seen(0, a);
        assert_eq!(ask(&geometry, &reads, 1), Ok(placement(0)), "the same GPU");
        geometry.seen(0, b);
        assert_eq!(ask(&geometry, &reads, 2), Ok(placement(2)), "another one");
        assert_eq!(reads.get(), 2);
    }
}
