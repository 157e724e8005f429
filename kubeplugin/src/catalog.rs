//! What vgpud offers kubelet: one resource per slice type, each with the slices kubelet may
//! hand out (free ones, and those it already holds), their health and NUMA node.
//!
//! Names follow the conventions KubeVirt's `permittedHostDevices` and NVIDIA's own plugins
//! use, so existing VM and pod specs keep working: `nvidia.com/mig-1g.10gb` for a MIG profile
//! (NVIDIA k8s-device-plugin, "mixed" MIG strategy), the vGPU or mdev type's name with spaces
//! as underscores for vGPU and mdev types (`nvidia.com/GRID_T4-1Q`, kubevirt-gpu-device-plugin),
//! the GPU model for whole GPUs (`nvidia.com/NVIDIA_A100-SXM4-80GB`).

use std::collections::BTreeMap;

use agent::config::{KubernetesConfig, check_resource_name};
use agent::engine::{DeviceRef, Slice, SliceId, SliceKind, SliceState};
use agent::health::view::{GpuHealthView, HealthState};
use ids::PciAddress;
use inventory::{Gpu, HostInventory, Vendor};

/// One device as kubelet sees it: a slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// The slice; its id is the device id.
    pub slice: Slice,
    /// Whether kubelet may hand it out: the slice is present and its GPU in service.
    pub healthy: bool,
    /// The GPU's vendor UUID (a MIG device's name is built from it).
    pub gpu_uuid: Option<String>,
}

impl Device {
    /// The device id kubelet uses: the slice id.
    pub fn id(&self) -> SliceId {
        self.slice.id
    }

    /// The NUMA node of its GPU, when the host knows it.
    pub fn numa(&self) -> Option<i64> {
        self.slice.numa_node.map(|n| i64::from(n.0))
    }

    /// The GPU it sits on (the device itself for a non-PCI mdev parent).
    pub fn gpu(&self) -> &DeviceRef {
        &self.slice.spec.gpu
    }
}

/// Every resource vgpud serves now, by name, with its devices in id order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    /// Devices by resource name.
    pub resources: BTreeMap<String, Vec<Device>>,
}

impl Catalog {
    /// The devices of one resource (none when it is not served).
    pub fn devices(&self, resource: &str) -> &[Device] {
        self.resources.get(resource).map_or(&[], Vec::as_slice)
    }

    /// The resource and device a slice id names, when vgpud offers it.
    pub fn find(&self, resource: &str, id: SliceId) -> Option<&Device> {
        self.devices(resource).iter().find(|d| d.id() == id)
    }
}

/// The catalog of `slices` on `host`: slices nobody holds and those `config.consumer` (kubelet)
/// holds, each under its type's resource. Slices being created or destroyed are left out
/// (kubelet would see them come and go); a failed slice is listed unhealthy, so the node's
/// capacity shows it exists but cannot be used.
pub fn build(
    slices: &[Slice],
    host: &HostInventory,
    health: &[GpuHealthView],
    config: &KubernetesConfig,
) -> Catalog {
    let mut resources: BTreeMap<String, Vec<Device>> = BTreeMap::new();
    for slice in slices {
        if matches!(slice.state, SliceState::Creating | SliceState::Releasing) {
            continue;
        }
        if slice
            .owner
            .as_ref()
            .is_some_and(|o| o.consumer != config.consumer)
        {
            continue;
        }
        let gpu = slice.spec.gpu.pci().and_then(|a| gpu_at(host, a));
        let Some(name) = resource_name(slice, gpu, host, config) else {
            continue;
        };
        let in_service = slice
            .spec
            .gpu
            .pci()
            .is_none_or(|a| gpu_in_service(health, a));
        resources.entry(name).or_default().push(Device {
            healthy: in_service && slice.state != SliceState::Failed,
            gpu_uuid: gpu.and_then(|g| g.uuid.clone()),
            slice: slice.clone(),
        });
    }
    for devices in resources.values_mut() {
        devices.sort_by_key(Device::id);
    }
    Catalog { resources }
}

fn gpu_at(host: &HostInventory, address: PciAddress) -> Option<&Gpu> {
    host.gpus.iter().find(|g| g.pci_address == address)
}

/// A GPU quarantined (an Xid, an operator) or not answering its health check hands out
/// nothing; a degraded one (slowed down) still works, as NVIDIA's plugin keeps it healthy.
fn gpu_in_service(health: &[GpuHealthView], gpu: PciAddress) -> bool {
    health
        .iter()
        .find(|h| h.address == gpu)
        .is_none_or(|h| matches!(h.state, HealthState::Ok | HealthState::Degraded))
}

/// The vgpud type label of a slice kind: what `[kubernetes] resource_names` is keyed by, the
/// same word a REST request names the type with (`1g.10gb`, `nvidia-222`, `vf`, `gpu`).
pub fn type_label(kind: &SliceKind) -> String {
    match kind {
        SliceKind::Mdev { type_id } => type_id.to_string(),
        SliceKind::NvidiaVfio { vgpu_type, .. } => vgpu_type.to_string(),
        SliceKind::SriovVf => "vf".to_owned(),
        SliceKind::Mig { profile, .. } => profile.to_string(),
        SliceKind::Passthrough => "gpu".to_owned(),
    }
}

/// The resource a slice is offered under: the configured name of its type, else the
/// generated one; `None` when no valid name can be made (logged by the caller's view).
pub fn resource_name(
    slice: &Slice,
    gpu: Option<&Gpu>,
    host: &HostInventory,
    config: &KubernetesConfig,
) -> Option<String> {
    let label = type_label(&slice.spec.kind);
    if let Some(name) = config.resource_names.get(&label) {
        return Some(name.clone());
    }
    let domain = if config.resource_prefix.is_empty() {
        vendor_domain(gpu.map(|g| g.vendor))
    } else {
        config.resource_prefix.as_str()
    };
    let local = match &slice.spec.kind {
        SliceKind::Mig { profile, .. } => format!("mig-{profile}"),
        SliceKind::NvidiaVfio { vgpu_type, .. } => {
            let name = gpu.and_then(|g| g.vgpu_types.iter().find(|t| t.id == *vgpu_type));
            sanitize(name.map_or(&label, |t| &t.name))
        }
        SliceKind::Mdev { type_id } => sanitize(
            &mdev_type_name(slice, gpu, host, type_id).unwrap_or_else(|| type_id.to_string()),
        ),
        SliceKind::SriovVf => format!("{}_VF", sanitize(&model(gpu))),
        SliceKind::Passthrough => sanitize(&model(gpu)),
    };
    let name = format!("{domain}/{local}");
    check_resource_name(&name).is_ok().then_some(name)
}

fn vendor_domain(vendor: Option<Vendor>) -> &'static str {
    match vendor {
        Some(Vendor::Nvidia) => "nvidia.com",
        Some(Vendor::Amd) => "amd.com",
        Some(Vendor::Intel) => "intel.com",
        Some(Vendor::Other) | None => "vgpud.io",
    }
}

fn model(gpu: Option<&Gpu>) -> String {
    gpu.map_or_else(|| "GPU".to_owned(), |g| g.model.clone())
}

/// The mdev type's `name` attribute (`GRID T4-1Q`), from the GPU or the non-PCI parent.
fn mdev_type_name(
    slice: &Slice,
    gpu: Option<&Gpu>,
    host: &HostInventory,
    type_id: &ids::MdevTypeId,
) -> Option<String> {
    let types = match gpu {
        Some(g) => g.mdev_types.as_slice(),
        None => host
            .other_mdev_parents
            .iter()
            .find(|p| p.name.to_string() == slice.spec.gpu.to_string())
            .map_or(&[][..], |p| p.types.as_slice()),
    };
    types
        .iter()
        .find(|t| t.id == *type_id)
        .and_then(|t| t.name.clone())
}

/// A vendor's display name as the name part of a resource: spaces become underscores,
/// characters kubelet refuses are dropped (`TU104GL [Tesla T4]` → `TU104GL_Tesla_T4`, as
/// kubevirt-gpu-device-plugin does), at most 63 characters, starting and ending with a letter
/// or digit.
pub fn sanitize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            ' ' | '_' if !out.ends_with('_') => out.push('_'),
            ' ' | '_' => {}
            c if c.is_ascii_alphanumeric() || c == '-' || c == '.' => out.push(c),
            _ => {}
        }
    }
    let trimmed: String = out
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .chars()
        .take(63)
        .collect();
    trimmed
        .trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendor_names_become_resource_names_kubelet_accepts() {
        assert_eq!(sanitize("TU104GL [Tesla T4]"), "TU104GL_Tesla_T4");
        assert_eq!(sanitize("GRID T4-1Q"), "GRID_T4-1Q");
        assert_eq!(sanitize("NVIDIA A100-SXM4-80GB"), "NVIDIA_A100-SXM4-80GB");
        assert_eq!(sanitize("  (odd)  name__x "), "odd_name_x");
        let long = sanitize(&"A-".repeat(40));
        assert!(long.len() <= 63 && long.ends_with('A'), "{long}");
        for name in [
            "TU104GL_Tesla_T4",
            "GRID_T4-1Q",
            "odd_name_x",
            long.as_str(),
        ] {
            assert_eq!(check_resource_name(&format!("nvidia.com/{name}")), Ok(()));
        }
    }
}
