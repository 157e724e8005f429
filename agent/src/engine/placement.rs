//! Where a new slice goes on its GPU. Pure functions over what the backend read, so the local
//! scheduler (`sched`) can replace them without touching the backends: today the first free
//! candidate in the host's own order.

use gpu::Placement;
use ids::PciAddress;

/// The VF a new slice takes: the first free one, by VF index.
pub fn choose_vf(free: &[(u32, PciAddress)]) -> Option<(u32, PciAddress)> {
    free.first().copied()
}

/// The start slot a new MIG instance takes: the first allowed placement (in NVML's order) that
/// overlaps no occupied one.
pub fn choose_mig_start(allowed: &[Placement], occupied: &[Placement]) -> Option<Placement> {
    allowed
        .iter()
        .find(|p| occupied.iter().all(|o| !overlaps(p, o)))
        .copied()
}

/// Whether two placements share a memory slice.
pub fn overlaps(a: &Placement, b: &Placement) -> bool {
    a.start < b.start + b.size && b.start < a.start + a.size
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(start: u32, size: u32) -> Placement {
        Placement { start, size }
    }

    #[test]
    fn first_free_placement() {
        let allowed = [p(0, 4), p(4, 4)];
        assert_eq!(choose_mig_start(&allowed, &[]), Some(p(0, 4)));
        assert_eq!(choose_mig_start(&allowed, &[p(1, 1)]), Some(p(4, 4)));
        assert_eq!(choose_mig_start(&allowed, &[p(1, 1), p(7, 1)]), None);
        assert!(!overlaps(&p(0, 4), &p(4, 4)));
        assert!(overlaps(&p(0, 8), &p(6, 2)));
    }
}
