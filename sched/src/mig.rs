//! MIG geometry: the profile tables of FORMATS.md and the start-slot rules.
//!
//! A GPU has 8 memory slices (the placement axis) and 7 compute slices. An instance of a profile
//! spans `memory_slices` consecutive slices from one of its allowed start slots; instances may
//! not overlap, the compute slices in use may not exceed 7, and each profile has a per-GPU count
//! limit. These are the rules NVML enforces and the simulator reproduces.

use ids::MigProfileName;

use crate::model::{MigGeometry, MigShape};

/// Memory slices of a MIG-capable GPU.
pub const MEMORY_SLICES: u8 = 8;
/// Compute slices of a MIG-capable GPU.
pub const COMPUTE_SLICES: u8 = 7;

/// (compute, memory slices, starts, max count) of the six rows of the table, smallest first.
const ROWS: [(u8, u8, &[u8], u8); 6] = [
    (1, 1, &[0, 1, 2, 3, 4, 5, 6], 7),
    (1, 2, &[0, 2, 4, 6], 4),
    (2, 2, &[0, 2, 4], 3),
    (3, 4, &[0, 4], 2),
    (4, 4, &[0], 1),
    (7, 8, &[0], 1),
];

impl MigGeometry {
    /// The geometry of a GPU family from its six profile names (in table order) and the
    /// memory of one memory slice in MiB.
    fn from_names(names: [&str; 6], gb: [u64; 6]) -> Self {
        let profiles = ROWS
            .iter()
            .zip(names)
            .zip(gb)
            .filter_map(|((row, name), gb)| {
                let (compute, memory, starts, max) = *row;
                let name: MigProfileName = name.parse().ok()?;
                Some(MigShape {
                    name,
                    compute_slices: compute,
                    memory_slices: memory,
                    starts: starts.to_vec(),
                    max_count: max,
                    memory_mib: gb * 1024,
                })
            })
            .collect();
        Self { profiles }
    }

    /// H200 141GB: `1g.18gb`, `1g.35gb`, `2g.35gb`, `3g.71gb`, `4g.71gb`, `7g.141gb`.
    pub fn h200() -> Self {
        Self::from_names(
            [
                "1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb",
            ],
            [18, 35, 35, 71, 71, 141],
        )
    }

    /// A100 80GB and H100 80GB: `1g.10gb` … `7g.80gb`.
    pub fn a100_80gb() -> Self {
        Self::from_names(
            [
                "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb",
            ],
            [10, 20, 20, 40, 40, 80],
        )
    }

    /// The shape of a profile, by name.
    pub fn shape(&self, name: &MigProfileName) -> Option<(usize, &MigShape)> {
        self.profiles
            .iter()
            .enumerate()
            .find(|(_, s)| &s.name == name)
    }
}

/// Bit mask of the memory slices an instance at `start` of `size` slices covers.
pub(crate) fn span(start: u8, size: u8) -> u8 {
    let bits: u16 = ((1u16 << size) - 1) << start;
    (bits & 0xff) as u8
}

/// The occupancy of one MIG GPU in a compact form.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct MigOccupancy {
    /// Occupied memory slices.
    pub mask: u8,
    /// Compute slices in use.
    pub compute: u8,
    /// Instances per profile, indexed like the geometry's profiles.
    pub counts: Vec<u8>,
}

impl MigOccupancy {
    /// Free start slots for `shape` (index `idx` in the geometry), lowest first.
    pub fn free_starts<'a>(
        &'a self,
        idx: usize,
        shape: &'a MigShape,
    ) -> impl Iterator<Item = u8> + 'a {
        let room = self.compute + shape.compute_slices <= COMPUTE_SLICES
            && self.counts.get(idx).copied().unwrap_or(u8::MAX) < shape.max_count;
        let size = shape.memory_slices;
        shape
            .starts
            .iter()
            .copied()
            .filter(move |s| room && s + size <= MEMORY_SLICES && self.mask & span(*s, size) == 0)
    }

    /// Adds an instance.
    pub fn place(&mut self, idx: usize, shape: &MigShape, start: u8) {
        self.mask |= span(start, shape.memory_slices);
        self.compute = self.compute.saturating_add(shape.compute_slices);
        if let Some(c) = self.counts.get_mut(idx) {
            *c = c.saturating_add(1);
        }
    }

    /// Free memory slices.
    pub fn free_slices(&self) -> u8 {
        MEMORY_SLICES - self.mask.count_ones() as u8
    }

    /// Free memory slices no free placement of `shape` can cover: the part of the GPU that is
    /// a fragment for this profile.
    pub fn unusable_slices(&self, idx: usize, shape: &MigShape) -> u8 {
        let covered = self
            .free_starts(idx, shape)
            .fold(0u8, |acc, s| acc | span(s, shape.memory_slices));
        (!self.mask & !covered).count_ones() as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn occ(geo: &MigGeometry, placed: &[(&str, u8)]) -> MigOccupancy {
        let mut o = MigOccupancy {
            mask: 0,
            compute: 0,
            counts: vec![0; geo.profiles.len()],
        };
        for (name, start) in placed {
            let (i, s) = geo.shape(&name.parse().unwrap()).unwrap();
            o.place(i, s, *start);
        }
        o
    }

    #[test]
    fn start_slot_rules_follow_the_table() {
        let geo = MigGeometry::h200();
        let (i3, s3) = geo.shape(&"3g.71gb".parse().unwrap()).unwrap();
        let empty = occ(&geo, &[]);
        assert_eq!(empty.free_starts(i3, s3).collect::<Vec<_>>(), vec![0, 4]);
        // A 1g at slot 1 blocks the 3g at 0 but not at 4.
        let o = occ(&geo, &[("1g.18gb", 1)]);
        assert_eq!(o.free_starts(i3, s3).collect::<Vec<_>>(), vec![4]);
        // Slot 7 is never a 1g start.
        let (i1, s1) = geo.shape(&"1g.18gb".parse().unwrap()).unwrap();
        let o = occ(&geo, &[("3g.71gb", 0), ("2g.35gb", 4)]);
        assert_eq!(o.free_starts(i1, s1).collect::<Vec<_>>(), vec![6]);
    }

    #[test]
    fn compute_and_count_limits_apply() {
        let geo = MigGeometry::h200();
        let (i4, s4) = geo.shape(&"4g.71gb".parse().unwrap()).unwrap();
        let (i3, s3) = geo.shape(&"3g.71gb".parse().unwrap()).unwrap();
        let o = occ(&geo, &[("4g.71gb", 0)]);
        assert_eq!(o.free_starts(i4, s4).count(), 0, "one 4g per GPU");
        assert_eq!(o.free_starts(i3, s3).collect::<Vec<_>>(), vec![4]);
        let o = occ(&geo, &[("4g.71gb", 0), ("3g.71gb", 4)]);
        assert_eq!(o.compute, 7);
        assert_eq!(o.free_slices(), 0);
        // Seven 1g instances use all compute: slot 7 stays free but is a fragment.
        let seven: Vec<(&str, u8)> = (0..7).map(|s| ("1g.18gb", s)).collect();
        let o = occ(&geo, &seven);
        assert_eq!(o.free_slices(), 1);
        let (i1, s1) = geo.shape(&"1g.18gb".parse().unwrap()).unwrap();
        assert_eq!(o.unusable_slices(i1, s1), 1);
    }

    #[test]
    fn unusable_slices_counts_fragments_per_profile() {
        let geo = MigGeometry::h200();
        let (i3, s3) = geo.shape(&"3g.71gb".parse().unwrap()).unwrap();
        let (i1, s1) = geo.shape(&"1g.18gb".parse().unwrap()).unwrap();
        // 1g at 0 and at 4: no 3g fits, 6 free slices are all fragments for a 3g.
        let o = occ(&geo, &[("1g.18gb", 0), ("1g.18gb", 4)]);
        assert_eq!(o.unusable_slices(i3, s3), 6);
        // For a 1g only slot 7 is unusable.
        assert_eq!(o.unusable_slices(i1, s1), 1);
        // 1g at 0 and 1: the 3g at 4 still fits; slots 2-3 are fragments for it.
        let o = occ(&geo, &[("1g.18gb", 0), ("1g.18gb", 1)]);
        assert_eq!(o.unusable_slices(i3, s3), 2);
    }
}
