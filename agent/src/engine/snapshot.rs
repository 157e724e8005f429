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
//! A MIG-backed vendor-VFIO vGPU type (`NVIDIA H200X-1-18C`) is asked of the scheduler as what it
//! takes of the GPU that the scheduler can see: a GPU instance of the type's profile. Its
//! candidate GPUs appear in MIG mode (the GPU instances of MIG slices, of MIG-backed vGPUs and
//! owned slots the host lost as occupants), so one decision gives both the GPU and the slot. The
//! VF each one also needs is counted here ([`SchedView::commit_new`]): a GPU without a free VF is
//! left out.
//!
//! Pure: nothing here reads the host.

use std::collections::{HashMap, HashSet};

use ids::{MdevUuid, MigProfileName, PciAddress, VgpuTypeId};
use inventory::{ExistingSlice, HostInventory};
use numa::CpuSet;
use sched::{
    Decision, GpuMode, GpuState, MdevInstance, MdevOffer, MigGeometry, MigInstance, NumaState,
    Occupant, SliceChoice, Snapshot, VgpuInstance, VgpuOffer,
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

/// A snapshot with the free owned slices it contains and what the request asks of it.
#[derive(Debug, Clone)]
pub(crate) struct SchedView {
    /// The scheduler's input.
    pub snap: Snapshot,
    /// Free owned slices present in `snap` as idle occupants.
    pub free: Vec<FreeSlice>,
    /// What each slice of the request asks the scheduler for; `None` in a view built without
    /// a request.
    pub ask: Option<sched::SliceRequest>,
    /// Free VFs of the candidate GPUs when each new slice needs one the scheduler's mode does
    /// not count (a MIG-backed vGPU, asked as a GPU instance); a GPU with none is left out
    /// (`unavailable`).
    vf_room: HashMap<PciAddress, u32>,
}

impl SchedView {
    /// The free owned slices that could serve one of `specs` (its GPU, a kind it satisfies):
    /// what an allocation takes before it makes anything new.
    pub fn free_for(&self, specs: &[SliceSpec]) -> Vec<FreeSlice> {
        self.free
            .iter()
            .filter(|f| {
                specs
                    .iter()
                    .any(|s| s.gpu == f.gpu && f.kind.satisfies(&s.kind))
            })
            .cloned()
            .collect()
    }

    /// Commits a decision whose slices will be made new: each takes a VF where the view counts
    /// them.
    pub fn commit_new(&mut self, req: &sched::Request, decision: &Decision) {
        self.snap.commit(req, decision);
        for p in &decision.placements {
            if let Some(room) = self.vf_room.get(&p.gpu) {
                self.set_vf_room(p.gpu, room.saturating_sub(1));
            }
        }
    }

    /// Counts a free owned slice as free capacity (a dry run: an allocation would take it):
    /// it leaves the snapshot, and its VF is free again where the view counts them.
    pub fn count_as_free(&mut self, f: &FreeSlice) {
        if remove_marked(&mut self.snap, f.gpu, &f.marker())
            && let Some(room) = self.vf_room.get(&f.gpu)
        {
            self.set_vf_room(f.gpu, room.saturating_add(1));
        }
    }

    /// Whether the GPU is left out only for want of a free VF: it can still hand out a free
    /// owned slice, which has its VF.
    pub fn out_of_vfs(&self, gpu: PciAddress) -> bool {
        self.vf_room.get(&gpu) == Some(&0)
    }

    fn set_vf_room(&mut self, gpu: PciAddress, room: u32) {
        self.vf_room.insert(gpu, room);
        if let Some(g) = self.snap.gpus.iter_mut().find(|g| g.address == gpu) {
            g.unavailable = no_free_vf(room);
        }
    }
}

/// The reason a candidate GPU with `room` free VFs cannot take a new slice, if it cannot.
fn no_free_vf(room: u32) -> Option<String> {
    (room == 0).then(|| "no free VF for a new slice".to_owned())
}

/// What the engine's state says about the host's slices.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Ownership {
    occupants: HashMap<Key, (Occupant, Option<SliceId>, SliceKind)>,
    /// Owned MIG identities the host does not show now: (GPU, profile, start).
    mig_reserved: Vec<(PciAddress, MigProfileName, u32)>,
    /// VFs owned identities take, present or not: (GPU, VF).
    vfs: HashSet<(PciAddress, PciAddress)>,
}

/// How a host slice is recognised.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Mig(PciAddress, u32),
    Mdev(MdevUuid),
    Vf(PciAddress),
    Whole(PciAddress),
}

fn keys_of(gpu: PciAddress, identity: &Identity) -> Vec<Key> {
    match identity {
        Identity::Mig { start, .. } => vec![Key::Mig(gpu, *start)],
        Identity::Mdev { uuid } => vec![Key::Mdev(*uuid)],
        Identity::Vf { address, .. } => vec![Key::Vf(*address)],
        // Its VF where the GPU is modelled in vendor-VFIO mode, its GPU instance in MIG mode.
        Identity::MigVgpu { address, start, .. } => {
            vec![Key::Vf(*address), Key::Mig(gpu, *start)]
        }
        Identity::Passthrough { .. } => vec![Key::Whole(gpu)],
    }
}

impl Ownership {
    /// Leaves out how old each held slice is, for a reader that does not break ties by age.
    pub(crate) fn forget_ages(&mut self) {
        for (occupant, _, _) in self.occupants.values_mut() {
            occupant.age_s = None;
        }
    }

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
            for key in keys_of(gpu, &s.identity) {
                out.occupants
                    .insert(key, (occupant.clone(), Some(s.id), s.spec.kind.clone()));
            }
            out.reserve(gpu, &s.identity);
        }
        for intent in d.intents.values() {
            if let (Some(identity), Some(gpu)) = (intent.identity(), intent.gpu().pci()) {
                out.reserve(gpu, identity);
            }
        }
        out
    }

    /// Records the GPU-instance slot and the VF an owned identity takes.
    fn reserve(&mut self, gpu: PciAddress, identity: &Identity) {
        if let Some((start, profile)) = identity.mig_slot() {
            self.mig_reserved.push((gpu, profile.clone(), start));
        }
        if let Some((_, vf)) = identity.vf() {
            self.vfs.insert((gpu, vf));
        }
    }

    fn occupant(&self, key: &Key) -> (Occupant, Option<(SliceId, SliceKind)>) {
        match self.occupants.get(key) {
            Some((o, Some(id), kind)) if o.idle => (o.clone(), Some((*id, kind.clone()))),
            Some((o, _, _)) => (o.clone(), None),
            None => (Occupant::busy(FOREIGN), None),
        }
    }
}

/// Builds the scheduler's view. `request` is the specs of a request, one per candidate GPU:
/// those GPUs appear in the request's mode ([`Asked`]); every other GPU is marked unavailable
/// so the scheduler cannot choose it. `numa` is the free room per node (from libvirt's pins),
/// or `None` to take it from the inventory less `reserved`.
pub(crate) fn build(
    inv: &HostInventory,
    own: &Ownership,
    request: Option<&[SliceSpec]>,
    numa: Option<Vec<NumaState>>,
    reserved: &CpuSet,
) -> SchedView {
    let asked = request.and_then(|specs| Asked::of(inv, specs));
    let mut free = Vec::new();
    let mut gpus = Vec::new();
    let mut vf_room = HashMap::new();
    for g in &inv.gpus {
        let mut unavailable = asked.as_ref().and_then(|a| a.refusal(g));
        let backend = match (&asked, &unavailable) {
            (Some(a), None) => a.mode,
            _ => main_mode(g),
        };
        if unavailable.is_none() && asked.as_ref().is_some_and(|a| a.mig_backed.is_some()) {
            let room = free_vfs(g, own);
            vf_room.insert(g.pci_address, room);
            unavailable = no_free_vf(room);
        }
        let mode = mode_of(g, backend, own, &mut free);
        gpus.push(GpuState {
            address: g.pci_address,
            vendor: match g.vendor {
                inventory::Vendor::Nvidia => sched::Vendor::Nvidia,
                inventory::Vendor::Amd => sched::Vendor::Amd,
                _ => sched::Vendor::Other,
            },
            model: g.model.clone(),
            healthy: true,
            unavailable,
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
        ask: asked.map(|a| a.slice),
        vf_room,
    }
}

/// A request as the scheduler is asked it: the mode its candidate GPUs appear in and what each
/// slice asks for, both from the request's first spec on a PCI device (its kinds differ only
/// in the start slot).
struct Asked<'a> {
    specs: &'a [SliceSpec],
    mode: BackendKind,
    slice: sched::SliceRequest,
    /// A MIG-backed vGPU type asked as a GPU instance of its profile: only GPUs with MIG on
    /// where the type takes that profile can carry it.
    mig_backed: Option<(VgpuTypeId, MigProfileName)>,
}

impl<'a> Asked<'a> {
    fn of(inv: &HostInventory, specs: &'a [SliceSpec]) -> Option<Self> {
        let first = specs
            .iter()
            .find(|s| s.gpu.pci().is_some())
            .or(specs.first())?;
        let mig_backed = match first.kind {
            SliceKind::NvidiaVfio { vgpu_type, .. } => inv
                .gpus
                .iter()
                .filter(|g| specs.iter().any(|s| s.gpu == g.pci_address))
                .find_map(|g| mig_backed_profile(g, vgpu_type))
                .map(|profile| (vgpu_type, profile)),
            _ => None,
        };
        Some(match mig_backed {
            Some((ty, profile)) => Asked {
                specs,
                mode: BackendKind::Mig,
                slice: sched::SliceRequest::Mig(profile.clone()),
                mig_backed: Some((ty, profile)),
            },
            // A MIG-backed type on GPUs that all have MIG off stays a vGPU request: the
            // backend refuses it with the reason.
            None => Asked {
                specs,
                mode: first.kind.backend(),
                slice: slice_request(&first.kind),
                mig_backed: None,
            },
        })
    }

    /// Why the GPU is not a candidate the scheduler may choose; `None` when it is.
    fn refusal(&self, g: &inventory::Gpu) -> Option<String> {
        if !self.specs.iter().any(|s| s.gpu == g.pci_address) {
            return Some("does not offer the requested slice type".to_owned());
        }
        let (ty, profile) = self.mig_backed.as_ref()?;
        (mig_backed_profile(g, *ty).as_ref() != Some(profile))
            .then(|| format!("vGPU type {ty} needs MIG on with GPU-instance profile {profile}"))
    }
}

/// The GPU-instance profile a MIG-backed vGPU type takes on this GPU, when MIG is on there.
fn mig_backed_profile(g: &inventory::Gpu, ty: VgpuTypeId) -> Option<MigProfileName> {
    let mig = g.mig.as_ref().filter(|m| m.enabled)?;
    let id = g
        .vgpu_types
        .iter()
        .find(|t| t.id == ty)?
        .gpu_instance_profile_id?;
    mig.profiles.iter().find(|p| p.id == id)?.name.parse().ok()
}

/// VFs a new vGPU could take on the GPU: untyped, not on vfio-pci, not an owned identity's;
/// with none enabled yet, every VF the GPU supports (the backend enables them first) less the
/// owned ones.
fn free_vfs(g: &inventory::Gpu, own: &Ownership) -> u32 {
    let Some(sriov) = &g.sriov else {
        return 0;
    };
    let gpu = g.pci_address;
    if sriov.vfs.is_empty() {
        let owned = own.vfs.iter().filter(|(pf, _)| *pf == gpu).count();
        return sriov
            .total_vfs
            .saturating_sub(u32::try_from(owned).unwrap_or(u32::MAX));
    }
    let free = sriov
        .vfs
        .iter()
        .filter(|vf| vf.vgpu_type.is_none() && vf.driver.as_deref() != Some(vfio::VFIO_PCI))
        .filter(|vf| !own.vfs.contains(&(gpu, vf.pci_address)))
        .count();
    u32::try_from(free).unwrap_or(u32::MAX)
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

/// The scheduler's request shape for an engine slice kind (a MIG-backed vGPU type is asked as
/// its GPU instance by [`Asked`]).
fn slice_request(kind: &SliceKind) -> sched::SliceRequest {
    match kind {
        SliceKind::Mig { profile, .. } => sched::SliceRequest::Mig(profile.clone()),
        SliceKind::Mdev { type_id } => sched::SliceRequest::Mdev(type_id.clone()),
        SliceKind::NvidiaVfio { vgpu_type, .. } => sched::SliceRequest::Vgpu(*vgpu_type),
        SliceKind::SriovVf => sched::SliceRequest::Vf,
        SliceKind::Passthrough => sched::SliceRequest::Whole,
    }
}

/// The kind to create for the scheduler's choice on a request of kind `requested`: the
/// request's kind, with the chosen start slot for a MIG instance or a MIG-backed vGPU's GPU
/// instance; `None` for a choice the engine cannot make (a fractional share).
pub(crate) fn decided_kind(requested: &SliceKind, choice: &SliceChoice) -> Option<SliceKind> {
    Some(match (requested, choice) {
        (_, SliceChoice::Fraction(_)) => return None,
        (SliceKind::Mig { .. }, SliceChoice::Mig { profile, start }) => SliceKind::Mig {
            profile: profile.clone(),
            start: Some(u32::from(*start)),
        },
        (SliceKind::NvidiaVfio { vgpu_type, .. }, SliceChoice::Mig { start, .. }) => {
            SliceKind::NvidiaVfio {
                vgpu_type: *vgpu_type,
                start: Some(u32::from(*start)),
            }
        }
        (k, _) => k.clone(),
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
            Some(std::slice::from_ref(&spec)),
            None,
            &CpuSet::default(),
        );
        assert!(matches!(
            view.snap.gpus[0].mode,
            GpuMode::Whole { owner: None }
        ));
        assert!(view.snap.gpus[0].usable());
        assert_eq!(
            view.snap.gpus[1].unavailable.as_deref(),
            Some("does not offer the requested slice type")
        );
        assert!(view.snap.gpus[1].healthy, "left out, not unhealthy");
    }

    #[test]
    fn a_mig_backed_type_is_asked_as_its_gpu_instance_where_mig_is_on() {
        let sim = sim::SimHost::new(sim::Profile::builtin("hgx-h200").unwrap()).unwrap();
        let on: PciAddress = "0000:18:00.0".parse().unwrap();
        sim.set_mig_mode(on, true).unwrap();
        let inv = inventory::discover(&testkit::sim_access(&sim));
        let specs: Vec<SliceSpec> = inv
            .gpus
            .iter()
            .map(|g| SliceSpec {
                gpu: g.pci_address.into(),
                kind: SliceKind::NvidiaVfio {
                    vgpu_type: "1414".parse().unwrap(),
                    start: None,
                },
            })
            .collect();
        let view = build(
            &inv,
            &Ownership::default(),
            Some(&specs),
            None,
            &CpuSet::default(),
        );
        assert_eq!(
            view.ask,
            Some(sched::SliceRequest::Mig("1g.18gb".parse().unwrap()))
        );
        let (with_mig, without): (Vec<_>, Vec<_>) =
            view.snap.gpus.iter().partition(|g| g.address == on);
        assert!(matches!(with_mig[0].mode, GpuMode::Mig { .. }) && with_mig[0].usable());
        // MIG off: no GPU instance for the type, left out with that reason.
        assert!(
            without.iter().all(|g| g.healthy
                && g.unavailable.as_deref()
                    == Some("vGPU type 1414 needs MIG on with GPU-instance profile 1g.18gb")),
            "{without:?}"
        );
        assert!(!view.out_of_vfs(on));
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
