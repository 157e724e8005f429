//! The scheduler's view of the host: a `sched::Snapshot` built from the inventory and the
//! engine's own state.
//!
//! Every slice the host shows is an occupant of its GPU: held by an allocation (the consumer),
//! claimed by a request being gathered, foreign, or owned and free. Free owned slices are
//! marked so a request can reuse them ([`SchedView::free`]). Identities the engine owns but the
//! host lost are kept as occupants too (the engine re-creates them in place), so the scheduler
//! never picks their MIG slots. A slice held by an allocation carries its age (since the later
//! of the slice's and the allocation's creation): the scheduler's default policy prefers, among
//! otherwise equal places, the GPU whose slices have been held longest. Foreign, claimed and
//! free slices have no age. Each GPU appears in one slicing mode: the mode of the request
//! when the GPU is a candidate for it, else the GPU's main mode (MIG when enabled, vendor-VFIO
//! vGPU, mdev, SR-IOV VFs, whole GPU).
//!
//! Pure: nothing here reads the host.

use std::collections::{HashMap, HashSet};

use ids::{MdevTypeId, MdevUuid, MigProfileName, PciAddress};
use inventory::{ExistingSlice, HostInventory};
use numa::CpuSet;
use sched::{
    GpuMode, GpuState, MdevInstance, MdevOffer, MigGeometry, MigInstance, NumaState, Occupant,
    SliceChoice, Snapshot, VgpuInstance, VgpuOffer,
};

use super::mig_geometry::{self, ProfileFacts};
use super::model::{BackendKind, Identity, SliceId, SliceKind, SliceSpec};
use super::state::Desired;

/// Occupant names the engine gives slices that no consumer holds.
const CLAIMED: &str = "vgpud:claimed";
const FOREIGN: &str = "vgpud:foreign";
const LOST: &str = "vgpud:lost";
const FREE_PREFIX: &str = "vgpud:free:";

/// A free owned slice the scheduler may hand out again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FreeSlice {
    /// The slice.
    pub id: SliceId,
    /// Its GPU.
    pub gpu: PciAddress,
    /// What it is, as the scheduler names it.
    pub choice: SliceChoice,
    /// Its kind, as the engine names it.
    pub kind: SliceKind,
}

impl FreeSlice {
    /// The occupant name that marks it in the snapshot.
    pub fn marker(&self) -> String {
        format!("{FREE_PREFIX}{}", self.id)
    }
}

/// A snapshot with the free owned slices it contains.
#[derive(Debug, Clone)]
pub(crate) struct SchedView {
    /// The scheduler's input.
    pub snap: Snapshot,
    /// Free owned slices present in `snap` as idle occupants.
    pub free: Vec<FreeSlice>,
}

/// What the engine's state says about the host's slices.
#[derive(Debug, Default)]
pub(crate) struct Ownership {
    occupants: HashMap<Key, (Occupant, Option<SliceId>, SliceKind)>,
    /// Owned MIG identities the host does not show now: (GPU, profile, start).
    mig_reserved: Vec<(PciAddress, MigProfileName, u32)>,
}

/// How a host slice is recognised.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Mig(PciAddress, u32),
    Mdev(MdevUuid),
    Vf(PciAddress),
    Whole(PciAddress),
}

fn key_of(gpu: PciAddress, identity: &Identity) -> Option<Key> {
    Some(match identity {
        Identity::Mig { start, .. } => Key::Mig(gpu, *start),
        Identity::Mdev { uuid } => Key::Mdev(*uuid),
        Identity::Vf { address, .. } | Identity::MigVgpu { address, .. } => Key::Vf(*address),
        Identity::Passthrough { .. } => Key::Whole(gpu),
    })
}

impl Ownership {
    /// Reads the ledger, allocations, open intents and in-memory claims.
    pub fn of(d: &Desired, claims: &HashSet<SliceId>) -> Self {
        Self::of_at(d, claims, super::state::now())
    }

    /// [`Ownership::of`] with held slices' ages measured at `now` (seconds since the epoch).
    pub fn of_at(d: &Desired, claims: &HashSet<SliceId>, now: u64) -> Self {
        let mut out = Ownership::default();
        for s in d.slices.values() {
            // Slices on virtual mdev parents take nothing from a GPU the scheduler places on.
            let Some(gpu) = s.spec.gpu.pci() else {
                continue;
            };
            let occupant = match d.holder(s.id) {
                // A reused slice is as old as its current holder's allocation.
                Some(a) => {
                    Occupant::busy(&a.consumer).aged(now.saturating_sub(s.created.max(a.created)))
                }
                None if claims.contains(&s.id) || d.in_flight(s.id) => Occupant::busy(CLAIMED),
                None => Occupant::idle(&format!("{FREE_PREFIX}{}", s.id)),
            };
            if let Some(key) = key_of(gpu, &s.identity) {
                out.occupants
                    .insert(key, (occupant, Some(s.id), s.spec.kind.clone()));
            }
            if let Some((start, profile)) = s.identity.mig_slot() {
                out.mig_reserved.push((gpu, profile.clone(), start));
            }
        }
        for intent in d.intents.values() {
            if let (Some((start, profile)), Some(gpu)) = (
                intent.identity().and_then(Identity::mig_slot),
                intent.gpu().pci(),
            ) {
                out.mig_reserved.push((gpu, profile.clone(), start));
            }
        }
        out
    }

    fn occupant(&self, key: &Key) -> (Occupant, Option<(SliceId, SliceKind)>) {
        match self.occupants.get(key) {
            Some((o, Some(id), kind)) if o.idle => (o.clone(), Some((*id, kind.clone()))),
            Some((o, _, _)) => (o.clone(), None),
            None => (Occupant::busy(FOREIGN), None),
        }
    }
}

/// Builds the scheduler's view. `request` is the backend a request asks for with its candidate
/// GPUs (those GPUs appear in that mode; every other GPU is marked unavailable so the scheduler
/// cannot choose it); `numa` is the free room per node (from libvirt's pins), or `None` to
/// take it from the inventory less `reserved`.
pub(crate) fn build(
    inv: &HostInventory,
    own: &Ownership,
    request: Option<(BackendKind, &[SliceSpec])>,
    numa: Option<Vec<NumaState>>,
    reserved: &CpuSet,
) -> SchedView {
    let mut free = Vec::new();
    let mut gpus = Vec::new();
    for g in &inv.gpus {
        let candidate = request.map(|(b, specs)| (b, specs.iter().any(|s| s.gpu == g.pci_address)));
        let backend = match candidate {
            Some((b, true)) => b,
            _ => main_mode(g),
        };
        let mode = mode_of(g, backend, own, &mut free);
        gpus.push(GpuState {
            address: g.pci_address,
            vendor: match g.vendor {
                inventory::Vendor::Nvidia => sched::Vendor::Nvidia,
                inventory::Vendor::Amd => sched::Vendor::Amd,
                _ => sched::Vendor::Other,
            },
            model: g.model.clone(),
            healthy: !matches!(candidate, Some((_, false))),
            utilization_pct: 0,
            memory_mib: g.memory_mib.unwrap_or(0),
            numa_node: g.numa_node,
            nvlink_peers: g.nvlink_peers.clone(),
            mode,
        });
    }
    let numa = numa.unwrap_or_else(|| numa_of(inv, reserved));
    SchedView {
        snap: Snapshot { gpus, numa },
        free,
    }
}

/// Free CPUs (less the reserved ones) and memory per node from the inventory.
fn numa_of(inv: &HostInventory, reserved: &CpuSet) -> Vec<NumaState> {
    inv.numa_nodes
        .iter()
        .map(|n| NumaState {
            node: n.id,
            free_cpus: n
                .cpus
                .parse::<CpuSet>()
                .map(|c| c.iter().filter(|c| !reserved.contains(*c)).collect())
                .unwrap_or_default(),
            free_cpu_milli: None,
            free_memory_mib: n.memory_free_mib,
        })
        .collect()
}

/// The mode a GPU is sliced in when no request says otherwise.
pub(crate) fn main_mode(g: &inventory::Gpu) -> BackendKind {
    let nvidia = g.vendor == inventory::Vendor::Nvidia;
    if g.mig.as_ref().is_some_and(|m| m.enabled) {
        BackendKind::Mig
    } else if nvidia && g.sriov.is_some() && !g.vgpu_types.is_empty() {
        BackendKind::NvidiaVfio
    } else if !g.mdev_types.is_empty() {
        BackendKind::Mdev
    } else if g.sriov.is_some() && !nvidia {
        BackendKind::SriovVf
    } else {
        BackendKind::Passthrough
    }
}

fn mode_of(
    g: &inventory::Gpu,
    backend: BackendKind,
    own: &Ownership,
    free: &mut Vec<FreeSlice>,
) -> GpuMode {
    let gpu = g.pci_address;
    let mut occupant = |key: Key, choice: SliceChoice| {
        let (o, reusable) = own.occupant(&key);
        if let Some((id, kind)) = reusable {
            free.push(FreeSlice {
                id,
                gpu,
                choice,
                kind,
            });
        }
        o
    };
    match backend {
        BackendKind::Mig => {
            let geometry = geometry_of(g);
            let mut instances = Vec::new();
            for i in g.mig.iter().flat_map(|m| &m.instances) {
                let (Ok(profile), Ok(start)) = (
                    i.profile.parse::<MigProfileName>(),
                    u8::try_from(i.placement.start),
                ) else {
                    continue;
                };
                let choice = SliceChoice::Mig {
                    profile: profile.clone(),
                    start,
                };
                let o = occupant(Key::Mig(gpu, i.placement.start), choice);
                instances.push(MigInstance {
                    profile,
                    start,
                    occupant: o,
                });
            }
            for (_, profile, start) in own.mig_reserved.iter().filter(|(a, _, _)| *a == gpu) {
                let Ok(start) = u8::try_from(*start) else {
                    continue;
                };
                if !instances.iter().any(|i| i.start == start) {
                    instances.push(MigInstance {
                        profile: profile.clone(),
                        start,
                        occupant: Occupant::busy(LOST),
                    });
                }
            }
            // An instance the geometry does not describe would make the GPU unusable for the
            // scheduler; the backend refuses overlapping creations anyway.
            instances.retain(|i| geometry.shape(&i.profile).is_some());
            GpuMode::Mig {
                geometry,
                instances,
            }
        }
        BackendKind::NvidiaVfio => {
            let mut active = Vec::new();
            for s in &g.slices {
                if let ExistingSlice::NvidiaVfio { vf, vgpu_type } = s {
                    let o = occupant(Key::Vf(*vf), SliceChoice::Vgpu(*vgpu_type));
                    active.push(VgpuInstance {
                        type_id: *vgpu_type,
                        occupant: o,
                    });
                }
            }
            GpuMode::VendorVgpu {
                types: g
                    .vgpu_types
                    .iter()
                    .map(|t| VgpuOffer {
                        id: t.id,
                        name: t.name.clone(),
                        framebuffer_mib: t.framebuffer_mib,
                        max_instances: t.max_instances,
                    })
                    .collect(),
                total_vfs: g.sriov.as_ref().map_or(0, |s| s.total_vfs),
                active,
            }
        }
        BackendKind::Mdev => {
            let mut active = Vec::new();
            for s in &g.slices {
                if let ExistingSlice::Mdev { uuid, type_id, .. } = s {
                    let o = occupant(Key::Mdev(*uuid), SliceChoice::Mdev(type_id.clone()));
                    active.push(MdevInstance {
                        type_id: type_id.clone(),
                        occupant: o,
                    });
                }
            }
            GpuMode::Mdev {
                types: g.mdev_types.iter().map(mdev_offer).collect(),
                active,
            }
        }
        BackendKind::SriovVf => {
            let mut active = Vec::new();
            for s in &g.slices {
                if let ExistingSlice::SriovVf { vf } = s {
                    active.push(occupant(Key::Vf(*vf), SliceChoice::Vf));
                }
            }
            let total = g
                .amd
                .as_ref()
                .and_then(|a| a.vfs_supported)
                .or(g.sriov.as_ref().map(|s| s.total_vfs))
                .unwrap_or(0);
            GpuMode::Sriov {
                total_vfs: total,
                active,
            }
        }
        BackendKind::Passthrough => {
            let bound = g
                .slices
                .iter()
                .any(|s| matches!(s, ExistingSlice::Passthrough { .. }));
            let owner = if bound {
                Some(occupant(Key::Whole(gpu), SliceChoice::Whole))
            } else if g.slices.is_empty() {
                None
            } else {
                // Carrying slices: not free as a whole.
                Some(Occupant::busy(FOREIGN))
            };
            GpuMode::Whole { owner }
        }
    }
}

/// The GPU's MIG profiles (as the inventory lists them) as the scheduler's geometry.
pub(crate) fn geometry_of(g: &inventory::Gpu) -> MigGeometry {
    let facts = g.mig.iter().flat_map(|m| &m.profiles).filter_map(|p| {
        Some(ProfileFacts {
            name: p.name.parse().ok()?,
            compute_slices: p.compute_slices,
            memory_mib: p.memory_mib,
            max_instances: p.max_instances,
            placements: p
                .placements
                .iter()
                .map(|pl| gpu::Placement {
                    start: pl.start,
                    size: pl.size,
                })
                .collect(),
        })
    });
    mig_geometry::geometry(facts)
}

/// An mdev type as the scheduler sees it; NVIDIA's descriptions carry the framebuffer and the
/// most instances (`framebuffer=1024M, …, max_instance=24`).
fn mdev_offer(t: &inventory::MdevTypeInfo) -> MdevOffer {
    let desc = t.description.as_deref().unwrap_or_default();
    let field = |name: &str| {
        desc.split(',')
            .filter_map(|f| f.trim().split_once('='))
            .find(|(k, _)| k.trim() == name)
            .map(|(_, v)| v.trim().to_owned())
    };
    let available = t.available_instances.unwrap_or(0);
    let existing = u32::try_from(t.devices.len()).unwrap_or(u32::MAX);
    MdevOffer {
        type_id: t.id.clone(),
        name: t.name.clone().unwrap_or_else(|| t.id.to_string()),
        framebuffer_mib: field("framebuffer")
            .and_then(|v| v.trim_end_matches('M').parse().ok())
            .unwrap_or(0),
        available,
        max_instances: field("max_instance")
            .and_then(|v| v.parse().ok())
            .unwrap_or(available.saturating_add(existing))
            .max(1),
    }
}

/// The scheduler's request shape for an engine slice kind.
pub(crate) fn slice_request(kind: &SliceKind) -> sched::SliceRequest {
    match kind {
        SliceKind::Mig { profile, .. } => sched::SliceRequest::Mig(profile.clone()),
        SliceKind::Mdev { type_id } => sched::SliceRequest::Mdev(type_id.clone()),
        SliceKind::NvidiaVfio { vgpu_type, .. } => sched::SliceRequest::Vgpu(*vgpu_type),
        SliceKind::SriovVf => sched::SliceRequest::Vf,
        SliceKind::Passthrough => sched::SliceRequest::Whole,
    }
}

/// The engine's slice kind for a scheduler choice (a MIG choice carries its start slot).
pub(crate) fn kind_of(choice: &SliceChoice) -> Option<SliceKind> {
    Some(match choice {
        SliceChoice::Mig { profile, start } => SliceKind::Mig {
            profile: profile.clone(),
            start: Some(u32::from(*start)),
        },
        SliceChoice::Vgpu(t) => SliceKind::NvidiaVfio {
            vgpu_type: *t,
            start: None,
        },
        SliceChoice::Mdev(t) => SliceKind::Mdev {
            type_id: MdevTypeId::clone(t),
        },
        SliceChoice::Vf => SliceKind::SriovVf,
        SliceChoice::Whole => SliceKind::Passthrough,
        SliceChoice::Fraction(_) => return None,
    })
}

/// Removes a marked occupant from its GPU in the snapshot; true when it was there.
pub(crate) fn remove_marked(snap: &mut Snapshot, gpu: PciAddress, marker: &str) -> bool {
    let Some(g) = snap.gpus.iter_mut().find(|g| g.address == gpu) else {
        return false;
    };
    match sched::slices_of(g)
        .iter()
        .position(|(o, _)| o.consumer == marker)
    {
        Some(i) => {
            sched::remove_slice(g, i);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(profile: &str) -> HostInventory {
        let sim = sim::SimHost::new(sim::Profile::builtin(profile).unwrap()).unwrap();
        inventory::discover(&testkit::sim_access(&sim))
    }

    #[test]
    fn mig_geometry_comes_from_nvml_profiles() {
        let inv = inv("dgx-a100");
        let geo = geometry_of(&inv.gpus[0]);
        let names: Vec<String> = geo.profiles.iter().map(|p| p.name.to_string()).collect();
        assert!(names.contains(&"1g.10gb".to_owned()), "{names:?}");
        assert!(names.contains(&"7g.80gb".to_owned()), "{names:?}");
        let (_, three) = geo.shape(&"3g.40gb".parse().unwrap()).unwrap();
        assert_eq!(three.memory_slices, 4);
        assert_eq!(three.starts, vec![0, 4]);
        assert_eq!(three.compute_slices, 3);
        // Smallest first.
        assert_eq!(geo.profiles[0].memory_slices, 1);
    }

    #[test]
    fn modes_follow_the_gpus_and_the_request() {
        let inv = inv("hgx-h200");
        let own = Ownership::default();
        let view = build(&inv, &own, None, None, &CpuSet::default());
        assert!(matches!(view.snap.gpus[0].mode, GpuMode::VendorVgpu { .. }));
        assert_eq!(view.snap.numa.len(), 2);
        // The same GPU as a candidate for a whole-GPU request; the others are left out.
        let spec = SliceSpec {
            gpu: inv.gpus[0].pci_address.into(),
            kind: SliceKind::Passthrough,
        };
        let view = build(
            &inv,
            &own,
            Some((BackendKind::Passthrough, std::slice::from_ref(&spec))),
            None,
            &CpuSet::default(),
        );
        assert!(matches!(
            view.snap.gpus[0].mode,
            GpuMode::Whole { owner: None }
        ));
        assert!(view.snap.gpus[0].healthy);
        assert!(!view.snap.gpus[1].healthy);
    }

    #[test]
    fn mdev_descriptions_give_size_and_count() {
        let inv = inv("single-gpu");
        let offer = mdev_offer(&inv.gpus[0].mdev_types[0]);
        assert_eq!(offer.framebuffer_mib, 1024);
        assert_eq!(offer.max_instances, 24);
    }

    #[test]
    fn held_slices_carry_their_age_and_others_none() {
        let body = r#"{
          "slices": {
            "6f1c2a4e-0b7d-4c41-9a3e-5d2f8b1c7e90": {
              "id": "6f1c2a4e-0b7d-4c41-9a3e-5d2f8b1c7e90",
              "spec": {"gpu": "0000:41:00.0",
                       "kind": {"backend": "mig", "profile": "3g.71gb"}},
              "identity": {"kind": "mig", "start": 4, "profile": "3g.71gb"},
              "created": 1000
            },
            "7a2d3b5f-1c8e-4d52-8b4f-6e3a9c2d8f01": {
              "id": "7a2d3b5f-1c8e-4d52-8b4f-6e3a9c2d8f01",
              "spec": {"gpu": "0000:41:00.0",
                       "kind": {"backend": "mig", "profile": "3g.71gb"}},
              "identity": {"kind": "mig", "start": 0, "profile": "3g.71gb"},
              "created": 1500
            },
            "8b3e4c6a-2d9f-4e63-9c5a-7f4b0d3e9a12": {
              "id": "8b3e4c6a-2d9f-4e63-9c5a-7f4b0d3e9a12",
              "spec": {"gpu": "0000:51:00.0",
                       "kind": {"backend": "mig", "profile": "3g.71gb"}},
              "identity": {"kind": "mig", "start": 0, "profile": "3g.71gb"},
              "created": 1200
            }
          },
          "allocations": {
            "a1b2c3d4-0000-4000-8000-000000000001": {
              "id": "a1b2c3d4-0000-4000-8000-000000000001",
              "consumer": "vm-old",
              "slices": ["6f1c2a4e-0b7d-4c41-9a3e-5d2f8b1c7e90"],
              "created": 1100
            },
            "a1b2c3d4-0000-4000-8000-000000000002": {
              "id": "a1b2c3d4-0000-4000-8000-000000000002",
              "consumer": "vm-reused",
              "slices": ["8b3e4c6a-2d9f-4e63-9c5a-7f4b0d3e9a12"],
              "created": 4000
            }
          }
        }"#;
        let d: Desired = serde_json::from_str(body).unwrap();
        let own = Ownership::of_at(&d, &HashSet::new(), 5000);
        let gpu41: PciAddress = "0000:41:00.0".parse().unwrap();
        let gpu51: PciAddress = "0000:51:00.0".parse().unwrap();
        // Held since its allocation (1100), after the slice was made (1000).
        let (held, _) = own.occupant(&Key::Mig(gpu41, 4));
        assert_eq!((held.consumer.as_str(), held.age_s), ("vm-old", Some(3900)));
        // A slice made at 1200 and handed to an allocation made at 4000 is 1000 s old.
        let (reused, _) = own.occupant(&Key::Mig(gpu51, 0));
        assert_eq!(reused.age_s, Some(1000));
        // Free owned slices and slices vgpud does not own have no age.
        let (free, id) = own.occupant(&Key::Mig(gpu41, 0));
        assert!(free.idle && id.is_some());
        assert_eq!(free.age_s, None);
        let (foreign, _) = own.occupant(&Key::Mig(gpu51, 4));
        assert_eq!((foreign.consumer.as_str(), foreign.age_s), (FOREIGN, None));
    }
}
