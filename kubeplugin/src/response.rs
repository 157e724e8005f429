//! What `Allocate` answers for one container: what the consumer of the devices reads.
//!
//! - KubeVirt's virt-launcher finds the devices of a `hostDevices`/`gpus` entry by resource
//!   name in environment variables, as KubeVirt's own device plugins set them
//!   (`pkg/util` `ResourceNameToEnvVar`: the name upper-cased, `/` and `.` as `_`):
//!   `MDEV_PCI_RESOURCE_<NAME>` with mdev UUIDs, `PCI_RESOURCE_<NAME>` with PCI addresses,
//!   comma-separated. It opens them through VFIO, so the container gets `/dev/vfio/vfio` and
//!   each device's `/dev/vfio/<group>` (kernel Documentation/driver-api/vfio.rst).
//! - A container using a MIG instance gets `NVIDIA_VISIBLE_DEVICES` with the instance in the
//!   form the NVIDIA Container Toolkit accepts for MIG (`MIG-<GPU-UUID>/<GI>/<CI>`), and, when
//!   `[kubernetes] cdi_kind` is set, CDI device names (`KIND=<slice id>`) for runtimes that
//!   resolve CDI (KEP-4009).

use std::collections::BTreeMap;

use agent::engine::SliceKind;

use crate::catalog::Device;
use crate::wire::deviceplugin::{CdiDevice, ContainerAllocateResponse, DeviceSpec};

/// The answer for one container given `devices` of `resource`.
pub fn container_response(
    resource: &str,
    devices: &[&Device],
    cdi_kind: &str,
) -> ContainerAllocateResponse {
    let mut mdevs = Vec::new();
    let mut pci = Vec::new();
    let mut mig = Vec::new();
    let mut groups = Vec::new();
    for d in devices {
        let h = &d.slice.handles;
        match &d.slice.spec.kind {
            SliceKind::Mdev { .. } => mdevs.extend(h.mdev_uuid.map(|u| u.to_string())),
            SliceKind::Mig { .. } => mig.extend(mig_name(d)),
            SliceKind::NvidiaVfio { .. } | SliceKind::SriovVf | SliceKind::Passthrough => {
                pci.extend(h.pci_address.map(|a| a.to_string()));
            }
        }
        if let Some(group) = h.vfio_group {
            groups.push(group.to_string());
        }
    }
    let mut envs = BTreeMap::new();
    if !mdevs.is_empty() {
        envs.insert(env_name("MDEV_PCI_RESOURCE", resource), mdevs.join(","));
    }
    if !pci.is_empty() {
        envs.insert(env_name("PCI_RESOURCE", resource), pci.join(","));
    }
    if !mig.is_empty() {
        envs.insert("NVIDIA_VISIBLE_DEVICES".to_owned(), mig.join(","));
    }
    ContainerAllocateResponse {
        envs: envs.into_iter().collect(),
        devices: vfio_specs(groups),
        cdi_devices: cdi_names(devices, cdi_kind),
        ..Default::default()
    }
}

/// KubeVirt's variable name for a resource (`nvidia.com/GRID_T4-1Q` →
/// `PCI_RESOURCE_NVIDIA_COM_GRID_T4-1Q`).
pub fn env_name(prefix: &str, resource: &str) -> String {
    let name = resource.to_uppercase().replace(['/', '.'], "_");
    format!("{prefix}_{name}")
}

/// `MIG-<GPU-UUID>/<GI>/<CI>`; `None` when the GPU's UUID or the instance ids are unknown.
fn mig_name(d: &Device) -> Option<String> {
    let h = &d.slice.handles;
    let uuid = d.gpu_uuid.as_deref()?;
    let uuid = uuid.strip_prefix("GPU-").unwrap_or(uuid);
    Some(format!(
        "MIG-GPU-{uuid}/{}/{}",
        h.gpu_instance_id?, h.compute_instance_id?
    ))
}

/// `/dev/vfio/vfio` (the container API) and every group, each once, read-write: virt-launcher
/// opens them; `m` (mknod) is not needed.
fn vfio_specs(mut groups: Vec<String>) -> Vec<DeviceSpec> {
    if groups.is_empty() {
        return Vec::new();
    }
    groups.sort();
    groups.dedup();
    std::iter::once("vfio".to_owned())
        .chain(groups)
        .map(|node| {
            let path = format!("/dev/vfio/{node}");
            DeviceSpec {
                container_path: path.clone(),
                host_path: path,
                permissions: "rw".to_owned(),
            }
        })
        .collect()
}

fn cdi_names(devices: &[&Device], kind: &str) -> Vec<CdiDevice> {
    if kind.is_empty() {
        return Vec::new();
    }
    devices
        .iter()
        .map(|d| CdiDevice {
            name: format!("{kind}={}", d.id()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_are_kubevirts() {
        assert_eq!(
            env_name("PCI_RESOURCE", "nvidia.com/GRID_T4-1Q"),
            "PCI_RESOURCE_NVIDIA_COM_GRID_T4-1Q"
        );
        assert_eq!(
            env_name("MDEV_PCI_RESOURCE", "nvidia.com/mig-1g.10gb"),
            "MDEV_PCI_RESOURCE_NVIDIA_COM_MIG-1G_10GB"
        );
    }
}
