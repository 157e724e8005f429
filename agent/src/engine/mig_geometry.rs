//! The scheduler's MIG geometry of one GPU, built the one way from NVML's profile facts, whether
//! they come from the inventory (the scheduler's snapshot) or straight from NVML (a backend
//! choosing a start slot on one GPU).
//!
//! Pure: nothing here reads the host.

use gpu::Placement;
use ids::MigProfileName;
use sched::{MigGeometry, MigShape};

/// One GPU-instance profile as NVML describes it.
#[derive(Debug, Clone)]
pub(crate) struct ProfileFacts {
    /// The profile's name (`3g.40gb`).
    pub name: MigProfileName,
    /// Compute slices.
    pub compute_slices: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Most instances on one GPU.
    pub max_instances: u32,
    /// Every allowed placement, in NVML's order.
    pub placements: Vec<Placement>,
}

/// The profile as the scheduler's shape; `None` when NVML gives it no placement (or sizes the
/// scheduler cannot hold).
fn shape(p: ProfileFacts) -> Option<MigShape> {
    let size = p.placements.first()?.size;
    Some(MigShape {
        name: p.name,
        compute_slices: u8::try_from(p.compute_slices).ok()?,
        memory_slices: u8::try_from(size).ok().filter(|s| *s > 0)?,
        starts: p
            .placements
            .iter()
            .filter_map(|pl| u8::try_from(pl.start).ok())
            .collect(),
        max_count: u8::try_from(p.max_instances).unwrap_or(u8::MAX),
        memory_mib: p.memory_mib,
    })
}

/// The GPU's profiles as the scheduler's geometry, smallest first, one shape per name.
pub(crate) fn geometry(profiles: impl IntoIterator<Item = ProfileFacts>) -> MigGeometry {
    let mut shapes: Vec<MigShape> = profiles.into_iter().filter_map(shape).collect();
    shapes.sort_by_key(|s| (s.memory_slices, s.compute_slices, s.memory_mib));
    shapes.dedup_by(|a, b| a.name == b.name);
    MigGeometry { profiles: shapes }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(name: &str, compute: u32, size: u32, starts: &[u32]) -> ProfileFacts {
        ProfileFacts {
            name: name.parse().unwrap(),
            compute_slices: compute,
            memory_mib: u64::from(size) * 10_000,
            max_instances: u32::try_from(starts.len()).unwrap(),
            placements: starts
                .iter()
                .map(|&start| Placement { start, size })
                .collect(),
        }
    }

    #[test]
    fn smallest_first_and_profiles_without_placements_left_out() {
        let geo = geometry([
            facts("7g.80gb", 7, 8, &[0]),
            facts("1g.10gb", 1, 1, &[0, 1, 2, 3, 4, 5, 6]),
            facts("3g.40gb", 3, 4, &[0, 4]),
            facts("2g.20gb", 2, 2, &[]),
        ]);
        let names: Vec<String> = geo.profiles.iter().map(|p| p.name.to_string()).collect();
        assert_eq!(names, ["1g.10gb", "3g.40gb", "7g.80gb"]);
        let (_, three) = geo.shape(&"3g.40gb".parse().unwrap()).unwrap();
        assert_eq!((three.memory_slices, three.starts.clone()), (4, vec![0, 4]));
    }
}
