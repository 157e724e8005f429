//! The traits vgpud puts on the providers it owns.
//!
//! Custom traits say what Placement has no standard name for: the owner, the vendor and model,
//! the slicing backends, MIG capability and quarantine. Standard traits are used where
//! os-traits 3.9 (what Placement 16 ships) has one: `HW_NUMA_ROOT` on NUMA providers. Its CUDA
//! compute-capability traits (`HW_GPU_CUDA_COMPUTE_CAPABILITY_V*`) stop at 7.2, so none applies
//! to an A100 (8.0), H100 or H200 (9.0); and the inventory has no compute-capability field to
//! choose one from for older GPUs. No `HW_GPU_*` trait is therefore reported.

use std::collections::BTreeSet;

use inventory::Vendor;

use crate::engine::BackendKind;

use super::classes::custom_name;

/// On every provider vgpud creates: a child with vgpud's name but without it belongs to
/// someone else (Nova's libvirt driver makes the same names) and is left alone.
pub const OWNER_TRAIT: &str = "CUSTOM_VGPUD_OWNED";

/// On a quarantined GPU's provider (its inventories are then all reserved).
pub const QUARANTINED_TRAIT: &str = "CUSTOM_VGPUD_QUARANTINED";

/// On a GPU that can be put in MIG mode.
pub const MIG_CAPABLE_TRAIT: &str = "CUSTOM_VGPUD_MIG_CAPABLE";

/// os-traits' NUMA subtree root (`same_subtree` requests, microversion 1.36).
pub const NUMA_ROOT_TRAIT: &str = "HW_NUMA_ROOT";

/// The traits of a NUMA provider.
pub fn numa_traits() -> BTreeSet<String> {
    [NUMA_ROOT_TRAIT, OWNER_TRAIT]
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// The trait naming a backend.
pub fn backend_trait(backend: BackendKind) -> &'static str {
    match backend {
        BackendKind::Mig => "CUSTOM_VGPUD_BACKEND_MIG",
        BackendKind::Mdev => "CUSTOM_VGPUD_BACKEND_MDEV",
        BackendKind::NvidiaVfio => "CUSTOM_VGPUD_BACKEND_VENDOR_VFIO",
        BackendKind::SriovVf => "CUSTOM_VGPUD_BACKEND_SRIOV",
        BackendKind::Passthrough => "CUSTOM_VGPUD_BACKEND_PASSTHROUGH",
    }
}

/// The traits of one GPU's provider: owner, vendor, model, each backend it can slice with
/// (`backends`: what the engine finds it offers now), MIG capability, quarantine.
pub fn gpu_traits(
    gpu: &inventory::Gpu,
    backends: &BTreeSet<BackendKind>,
    quarantined: bool,
) -> BTreeSet<String> {
    let mut traits = BTreeSet::from([OWNER_TRAIT.to_owned()]);
    match gpu.vendor {
        Vendor::Nvidia => traits.insert("CUSTOM_VGPUD_VENDOR_NVIDIA".to_owned()),
        Vendor::Amd => traits.insert("CUSTOM_VGPUD_VENDOR_AMD".to_owned()),
        // The spec names NVIDIA and AMD only; another vendor's GPU still gets its model.
        Vendor::Intel | Vendor::Other => false,
    };
    if !gpu.model.trim().is_empty() {
        traits.insert(custom_name(&format!("VGPUD_MODEL_{}", gpu.model.trim())));
    }
    traits.extend(backends.iter().map(|b| backend_trait(*b).to_owned()));
    if gpu.mig.is_some() {
        traits.insert(MIG_CAPABLE_TRAIT.to_owned());
    }
    if quarantined {
        traits.insert(QUARANTINED_TRAIT.to_owned());
    }
    traits
}
