//! What a backend chooses from what it read, without touching the host: the VF a new slice
//! takes, and the start slot of a new GPU instance when the request left it open (the
//! scheduler's, on that GPU alone, else the first free one). An allocation's slices come with
//! the slot the scheduler chose with the GPU; a slot is left open by an explicit create, a
//! layout and the first-fit fallback.

use gpu::Placement;
use ids::{MigProfileName, PciAddress};
use sched::Snapshot;

/// The VF a new slice takes: the first free one, by VF index.
pub(crate) fn choose_vf(free: &[(u32, PciAddress)]) -> Option<(u32, PciAddress)> {
    free.first().copied()
}

/// The first allowed placement (in NVML's order) that overlaps no occupied one: the fallback
/// when the scheduler has no geometry to work with.
pub(crate) fn choose_mig_start(allowed: &[Placement], occupied: &[Placement]) -> Option<Placement> {
    allowed
        .iter()
        .find(|p| occupied.iter().all(|o| !overlaps(p, o)))
        .copied()
}

/// The start slot the scheduler (fragmentation-aware, on this GPU alone) gives a new instance
/// of `profile`, among `allowed`, with `instances` (profile, start) already on GPU `gpu`.
pub(crate) fn choose_mig_start_scheduled(
    gpu: PciAddress,
    geometry: &sched::MigGeometry,
    instances: &[(MigProfileName, u32)],
    profile: &MigProfileName,
    allowed: &[Placement],
) -> Option<u32> {
    let instances = instances
        .iter()
        .filter(|(p, _)| geometry.shape(p).is_some())
        .filter_map(|(p, s)| {
            Some(sched::MigInstance {
                profile: p.clone(),
                start: u8::try_from(*s).ok()?,
                occupant: sched::Occupant::busy("host"),
            })
        })
        .collect();
    // The GPU alone: which GPU is the caller's decision, the slot on it is this one.
    let snap = Snapshot {
        gpus: vec![sched::GpuState {
            address: gpu,
            vendor: sched::Vendor::Nvidia,
            model: String::new(),
            healthy: true,
            unavailable: None,
            utilization_pct: 0,
            memory_mib: 0,
            numa_node: None,
            nvlink_peers: Vec::new(),
            mode: sched::GpuMode::Mig {
                geometry: geometry.clone(),
                instances,
            },
        }],
        numa: Vec::new(),
    };
    let req = sched::Request::new("", sched::SliceRequest::Mig(profile.clone()));
    let decision = sched::decide(&snap, &req, &sched::Policy::default()).ok()?;
    match decision.placements.first().map(|p| &p.slice) {
        Some(sched::SliceChoice::Mig { start, .. }) => {
            Some(u32::from(*start)).filter(|s| allowed.iter().any(|a| a.start == *s))
        }
        _ => None,
    }
}

/// Whether two placements share a memory slice.
pub(crate) fn overlaps(a: &Placement, b: &Placement) -> bool {
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

    #[test]
    fn scheduled_mig_start_avoids_fragmenting_the_gpu() {
        let gpu: PciAddress = "0000:41:00.0".parse().unwrap();
        let geo = sched::MigGeometry::a100_80gb();
        let one: MigProfileName = "1g.10gb".parse().unwrap();
        let three: MigProfileName = "3g.40gb".parse().unwrap();
        let allowed: Vec<Placement> = (0..7).map(|s| p(s, 1)).collect();
        // A 3g at 0: the first free 1g slot (4) would break the other half's 3g; the
        // scheduler keeps 4-7 whole and does not take slot 4.
        let start = choose_mig_start_scheduled(gpu, &geo, &[(three.clone(), 0)], &one, &allowed);
        assert!(matches!(start, Some(s) if s >= 4), "{start:?}");
        let first_fit = choose_mig_start(&allowed, &[p(0, 4)]).map(|p| p.start);
        assert_eq!(first_fit, Some(4));
        // A 1g next to another 1g rather than in the middle of an empty half.
        let start = choose_mig_start_scheduled(gpu, &geo, &[(one.clone(), 0)], &one, &allowed);
        assert_eq!(start, Some(1));
        // Slot 7 is not an allowed 1g start: nothing when the allowed ones are taken.
        let taken: Vec<(MigProfileName, u32)> = (0..7).map(|s| (one.clone(), s)).collect();
        assert_eq!(
            choose_mig_start_scheduled(gpu, &geo, &taken, &one, &allowed),
            None
        );
    }
}
