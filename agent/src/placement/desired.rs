//! The tree this host should have in Placement, computed from the engine alone (no HTTP).
//!
//! Inventories never overlap, so Placement can never promise what vgpud cannot make: a GPU
//! reports the slices it owns per type, plus, without a declared layout, how many more of its
//! first `on_demand_types` entry could be created now. What Placement cannot see being used is
//! reserved: slices held by an allocation that names no Placement consumer, slices not usable
//! (creating, failed, releasing), and everything on a quarantined GPU.

use std::collections::{BTreeMap, BTreeSet};

use ids::PciAddress;
use placement::Inventory;

use crate::engine::{
    Allocation, AllocationId, BackendKind, Engine, Holdings, Slice, SliceKind, SliceState,
};

use super::names;
use super::settings::PlacementSettings;
use super::traits;

/// This host's providers as they should be.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredTree {
    /// The root provider (the compute node): vgpud finds it, it writes nothing on it.
    pub root_name: String,
    /// NUMA providers (only with `numa_subtree`), children of the root.
    pub numa: Vec<DesiredNuma>,
    /// One provider per physical GPU.
    pub gpus: Vec<DesiredGpu>,
    /// What could not be reported as configured (two types for one class, a GPU without a
    /// NUMA node under `numa_subtree`, a slice of a type the GPU no longer names).
    pub warnings: Vec<String>,
}

/// A NUMA node's provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredNuma {
    /// The node.
    pub node: u32,
    /// `<root>_numa_<n>`.
    pub name: String,
    /// `HW_NUMA_ROOT` and the owner trait.
    pub traits: BTreeSet<String>,
}

/// A GPU's provider.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredGpu {
    /// The GPU.
    pub gpu: PciAddress,
    /// `<root>_pci_<dddd>_<bb>_<dd>_<f>`.
    pub name: String,
    /// The parent NUMA provider's node under `numa_subtree`; `None`: a child of the root.
    pub numa_node: Option<u32>,
    /// By resource class; classes with no units are left out (Placement refuses total 0).
    pub inventories: BTreeMap<String, Inventory>,
    /// Its traits.
    pub traits: BTreeSet<String>,
    /// Which slice type each reported class stands for.
    pub types: BTreeMap<String, String>,
}

/// What the tree is computed from: the engine's view of the host at one moment.
#[derive(Debug, Clone)]
pub struct HostFacts {
    /// Per GPU of the inventory.
    pub gpus: Vec<GpuFacts>,
    /// The slices vgpud owns.
    pub slices: Vec<Slice>,
    /// The allocations holding them.
    pub allocations: Vec<Allocation>,
}

/// One GPU's facts.
#[derive(Debug, Clone)]
pub struct GpuFacts {
    /// The inventory's description.
    pub gpu: inventory::Gpu,
    /// The types it offers, with the kind each means there.
    pub offered: Vec<(String, SliceKind)>,
    /// A declared layout selects it: it reports its owned slices only.
    pub laid_out: bool,
    /// It is quarantined.
    pub quarantined: bool,
    /// Without a layout: the first `on_demand_types` entry it offers and how many more of it
    /// could be created now.
    pub on_demand: Option<(String, u32)>,
}

impl HostFacts {
    /// Reads what the tree needs from `engine`.
    pub fn gather(settings: &PlacementSettings, engine: &Engine) -> Self {
        // Holdings first, then the host: see `Engine::holdings`.
        let held = engine.holdings();
        Self::from_parts(settings, engine, held, engine.inventory())
    }

    /// The facts from `held` and an `inventory` discovered after it.
    pub fn from_parts(
        settings: &PlacementSettings,
        engine: &Engine,
        held: Holdings,
        inventory: inventory::HostInventory,
    ) -> Self {
        let laid_out = engine.laid_out_gpus();
        let quarantined: BTreeSet<PciAddress> =
            engine.quarantines().into_iter().map(|q| q.gpu).collect();
        let gpus = inventory
            .gpus
            .iter()
            .map(|g| {
                let offered = engine.offered_types(g);
                let laid_out = laid_out.contains(&g.pci_address);
                let on_demand = (!laid_out)
                    .then(|| first_on_demand(settings, &offered))
                    .flatten()
                    .map(|(name, kind)| {
                        let n = held.creatable(&inventory, g.pci_address, kind);
                        (name.to_owned(), n)
                    });
                GpuFacts {
                    gpu: g.clone(),
                    laid_out,
                    quarantined: quarantined.contains(&g.pci_address),
                    on_demand,
                    offered,
                }
            })
            .collect();
        Self {
            gpus,
            slices: held.slices,
            allocations: held.allocations,
        }
    }
}

fn first_on_demand<'a>(
    settings: &PlacementSettings,
    offered: &'a [(String, SliceKind)],
) -> Option<(&'a str, &'a SliceKind)> {
    settings.on_demand_types.iter().find_map(|wanted| {
        offered
            .iter()
            .find(|(name, _)| name == wanted)
            .map(|(name, kind)| (name.as_str(), kind))
    })
}

/// The tree `engine`'s host should have in Placement under `settings`.
pub fn desired_tree(settings: &PlacementSettings, engine: &Engine) -> DesiredTree {
    desired_from(settings, &HostFacts::gather(settings, engine))
}

/// The tree of `facts` under `settings` (pure: the same facts give the same tree).
pub fn desired_from(settings: &PlacementSettings, facts: &HostFacts) -> DesiredTree {
    let root = settings.root_name.clone();
    let consumers: BTreeMap<AllocationId, bool> = facts
        .allocations
        .iter()
        .map(|a| (a.id, a.placement_consumer.is_some()))
        .collect();
    let mut warnings = Vec::new();
    let mut gpus = Vec::new();
    for g in &facts.gpus {
        let address = g.gpu.pci_address;
        let on_gpu: Vec<&Slice> = facts
            .slices
            .iter()
            .filter(|s| s.spec.gpu == address)
            .collect();
        let mut gpu = gpu_provider(settings, g, &on_gpu, &consumers, &mut warnings);
        gpu.numa_node = numa_parent(settings, g, &mut warnings);
        gpus.push(gpu);
    }
    let nodes: BTreeSet<u32> = gpus.iter().filter_map(|g| g.numa_node).collect();
    let numa = nodes
        .into_iter()
        .map(|node| DesiredNuma {
            node,
            name: names::numa_provider(&root, node),
            traits: traits::numa_traits(),
        })
        .collect();
    DesiredTree {
        root_name: root,
        numa,
        gpus,
        warnings,
    }
}

/// Units of one class on one GPU, before they become an [`Inventory`].
#[derive(Default)]
struct Units {
    total: u32,
    reserved: u32,
}

fn gpu_provider(
    settings: &PlacementSettings,
    g: &GpuFacts,
    slices: &[&Slice],
    consumers: &BTreeMap<AllocationId, bool>,
    warnings: &mut Vec<String>,
) -> DesiredGpu {
    let address = g.gpu.pci_address;
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut units: BTreeMap<String, Units> = BTreeMap::new();
    let mut class_for = |slice_type: &str, warnings: &mut Vec<String>| -> Option<String> {
        let class = settings.classes.class_of(slice_type);
        match types.get(&class) {
            Some(other) if other != slice_type => {
                let w = format!(
                    "GPU {address}: types {other:?} and {slice_type:?} both map to resource \
                     class {class}; {slice_type:?} is not reported (set \
                     [placement.resource_classes])"
                );
                if !warnings.contains(&w) {
                    warnings.push(w);
                }
                None
            }
            _ => {
                types.insert(class.clone(), slice_type.to_owned());
                Some(class)
            }
        }
    };
    for s in slices {
        let Some(slice_type) = type_of(&s.spec.kind, g) else {
            warnings.push(format!(
                "GPU {address}: slice {} ({}) is of no type the GPU names now; not reported",
                s.id, s.spec.kind
            ));
            continue;
        };
        let Some(class) = class_for(&slice_type, warnings) else {
            continue;
        };
        let u = units.entry(class).or_default();
        u.total += 1;
        if !visible_to_placement(s, consumers) {
            u.reserved += 1;
        }
    }
    if let Some((slice_type, n)) = &g.on_demand
        && let Some(class) = class_for(slice_type, warnings)
    {
        units.entry(class).or_default().total += n;
    }
    units.retain(|_, u| u.total > 0);
    types.retain(|class, _| units.contains_key(class));
    let inventories = units
        .into_iter()
        .map(|(class, u)| {
            let reserved = if g.quarantined { u.total } else { u.reserved };
            let inventory = Inventory {
                reserved,
                ..Inventory::whole(u.total)
            };
            (class, inventory)
        })
        .collect();
    let backends: BTreeSet<BackendKind> = g.offered.iter().map(|(_, k)| k.backend()).collect();
    DesiredGpu {
        gpu: address,
        name: names::gpu_provider(&settings.root_name, address),
        numa_node: None,
        inventories,
        traits: traits::gpu_traits(&g.gpu, &backends, g.quarantined),
        types,
    }
}

/// Whether Placement can see the slice's use: free and ready, or held by an allocation that
/// answers a Placement consumer (whose allocation in Placement already counts it).
fn visible_to_placement(s: &Slice, consumers: &BTreeMap<AllocationId, bool>) -> bool {
    match s.state {
        SliceState::Ready => s.owner.is_none(),
        SliceState::Allocated => s
            .owner
            .as_ref()
            .is_some_and(|o| consumers.get(&o.allocation).copied().unwrap_or(false)),
        SliceState::Creating | SliceState::Releasing | SliceState::Failed => false,
    }
}

/// The type a slice of `kind` is on `g`: the offered type it satisfies, else the name its
/// kind carries (a MIG profile, an mdev type, a vGPU type's name).
fn type_of(kind: &SliceKind, g: &GpuFacts) -> Option<String> {
    if let Some((name, _)) = g.offered.iter().find(|(_, k)| kind.satisfies(k)) {
        return Some(name.clone());
    }
    match kind {
        SliceKind::Mig { profile, .. } => Some(profile.to_string()),
        SliceKind::Mdev { type_id } => Some(type_id.to_string()),
        SliceKind::NvidiaVfio { vgpu_type, .. } => g
            .gpu
            .vgpu_types
            .iter()
            .find(|t| t.id == *vgpu_type)
            .map(|t| t.name.clone()),
        SliceKind::SriovVf => Some("vf".to_owned()),
        SliceKind::Passthrough => Some("gpu".to_owned()),
    }
}

fn numa_parent(
    settings: &PlacementSettings,
    g: &GpuFacts,
    warnings: &mut Vec<String>,
) -> Option<u32> {
    if !settings.numa_subtree {
        return None;
    }
    let node = g.gpu.numa_node.map(|n| u32::from(n.0));
    if node.is_none() {
        warnings.push(format!(
            "GPU {}: no NUMA node known; its provider is a child of the root",
            g.gpu.pci_address
        ));
    }
    node
}
