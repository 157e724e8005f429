//! Builds a [`HostInventory`] from the host-access traits.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use gpu::{AmdSmi, Nvml};
use ids::{MdevParentName, PciAddress, PciVendorId};
use sysfs::{Sysfs, SysfsExt, error_chain};

use crate::model::*;

/// The host-access implementations discovery reads through.
#[derive(Debug, Clone)]
pub struct HostAccess {
    /// Where the description comes from, shown in the inventory (`host:/`, `sim:dgx-a100`).
    pub source: String,
    /// sysfs (real, fixture tree or simulated).
    pub sysfs: Arc<dyn Sysfs>,
    /// NVML, or why it is not available (a host without the NVIDIA driver is normal).
    pub nvml: Result<Arc<dyn Nvml>, String>,
    /// AMD SMI with the name of its backend, or why it is not available.
    pub amd: Result<(Arc<dyn AmdSmi>, String), String>,
    /// The host name, when the source knows it better than `/proc/sys/kernel/hostname`.
    pub hostname: Option<String>,
    /// The host's device events (PCI and mdev hot-plug, driver binding); discovery does not use
    /// them, the daemon re-reads the host when they come.
    pub events: Arc<dyn hotplug::EventSource>,
}

/// Everything read about the host's PCI functions, by address.
pub(crate) type PciMap = BTreeMap<PciAddress, vfio::PciDevice>;

/// What GPU discovery needs from the host-wide passes.
pub(crate) struct Context<'a> {
    pub(crate) host: &'a HostAccess,
    pub(crate) pci: &'a PciMap,
    /// IOMMU group of each mdev, from `/sys/bus/mdev/devices`.
    pub(crate) mdev_groups: BTreeMap<ids::MdevUuid, Option<ids::IommuGroupId>>,
}

/// Discovers the host. Never fails: what cannot be read becomes a warning.
pub fn discover(host: &HostAccess) -> HostInventory {
    let fs = host.sysfs.as_ref();
    let mut warnings = Vec::new();
    let hostname = host
        .hostname
        .clone()
        .unwrap_or_else(|| read_hostname(fs, &mut warnings));
    let numa_nodes = discover_numa(fs, &mut warnings);
    let pci = discover_pci(fs, &mut warnings);
    let nvml_devices = host
        .nvml
        .as_ref()
        .ok()
        .map(|n| nvml_devices(n.as_ref(), &mut warnings));
    let amd_gpus = host
        .amd
        .as_ref()
        .ok()
        .map(|(a, _)| amd_gpus(a.as_ref(), &mut warnings));
    let mut mdev_parents = discover_mdev(fs, &mut warnings);
    let ctx = Context {
        host,
        pci: &pci,
        mdev_groups: mdev_groups(fs, &mut warnings),
    };

    let mut gpus = Vec::new();
    for dev in pci.values().filter(|d| d.is_gpu() && !d.is_vf()) {
        let nv = nvml_devices.as_ref().and_then(|m| m.get(&dev.address));
        let amd = amd_gpus.as_ref().and_then(|m| m.get(&dev.address));
        let parent = mdev_parents.remove(&MdevParentName::from(dev.address));
        gpus.push(build_gpu(&ctx, dev, nv, amd, parent));
    }
    // GPU parents' problems went to their GPU; the remaining parents' go to the host.
    warnings.extend(mdev_parents.values().flat_map(parent_problems));
    for addr in nvml_devices.iter().flat_map(|m| m.keys()) {
        if !pci.contains_key(addr) {
            warnings.push(format!(
                "NVML reports GPU {addr} but sysfs has no such PCI device"
            ));
        }
    }
    HostInventory {
        hostname,
        source: host.source.clone(),
        numa_nodes,
        gpus,
        other_mdev_parents: mdev_parents.into_values().map(parent_info).collect(),
        pci_devices: pci.values().map(pci_info).collect(),
        vendor_libraries: library_status(host),
        warnings,
    }
}

fn read_hostname(fs: &dyn Sysfs, warnings: &mut Vec<String>) -> String {
    match fs.read_text(Path::new("/proc/sys/kernel/hostname")) {
        Ok(name) if !name.is_empty() => name,
        Ok(_) => "localhost".to_owned(),
        Err(e) => {
            warnings.push(error_chain(&e));
            "localhost".to_owned()
        }
    }
}

fn discover_numa(fs: &dyn Sysfs, warnings: &mut Vec<String>) -> Vec<NumaNodeInfo> {
    let (nodes, errors) = match numa::nodes(fs) {
        Ok(found) => found,
        Err(e) => {
            warnings.push(error_chain(&e));
            return Vec::new();
        }
    };
    warnings.extend(errors.iter().map(|e| error_chain(e)));
    nodes
        .into_iter()
        .map(|n| {
            warnings.extend(n.problems.iter().cloned());
            NumaNodeInfo {
                id: n.id,
                cpus: n.cpus.to_string(),
                cpu_count: n.cpus.len(),
                memory_mib: n.memory_total_mib,
                memory_free_mib: n.memory_free_mib,
                distances: n.distances,
            }
        })
        .collect()
}

fn discover_pci(fs: &dyn Sysfs, warnings: &mut Vec<String>) -> PciMap {
    let (addresses, errors) = match vfio::list_devices(fs) {
        Ok(found) => found,
        Err(e) => {
            warnings.push(error_chain(&e));
            return PciMap::new();
        }
    };
    warnings.extend(errors.iter().map(|e| error_chain(e)));
    let mut map = PciMap::new();
    for addr in addresses {
        match vfio::read_device(fs, addr) {
            Ok(dev) => {
                map.insert(addr, dev);
            }
            Err(e) => warnings.push(error_chain(&e)),
        }
    }
    map
}

fn nvml_devices(
    nvml: &dyn Nvml,
    warnings: &mut Vec<String>,
) -> BTreeMap<PciAddress, gpu::DeviceInfo> {
    let count = match nvml.device_count() {
        Ok(n) => n,
        Err(e) => {
            warnings.push(e.to_string());
            return BTreeMap::new();
        }
    };
    let mut out = BTreeMap::new();
    for index in 0..count {
        match nvml.device_info(index) {
            Ok(info) => {
                out.insert(info.pci_address, info);
            }
            Err(e) => warnings.push(format!("NVML device {index}: {e}")),
        }
    }
    out
}

pub(crate) fn amd_gpus(
    amd: &dyn AmdSmi,
    warnings: &mut Vec<String>,
) -> BTreeMap<PciAddress, gpu::AmdGpuInfo> {
    match amd.gpus() {
        Ok(list) => list.into_iter().map(|g| (g.pci_address, g)).collect(),
        Err(e) => {
            warnings.push(e.to_string());
            BTreeMap::new()
        }
    }
}

fn discover_mdev(
    fs: &dyn Sysfs,
    warnings: &mut Vec<String>,
) -> BTreeMap<MdevParentName, mdev::MdevParent> {
    let (names, errors) = match mdev::list_parents(fs) {
        Ok(found) => found,
        Err(e) => {
            warnings.push(error_chain(&e));
            return BTreeMap::new();
        }
    };
    warnings.extend(errors.iter().map(|e| error_chain(e)));
    let mut out = BTreeMap::new();
    for name in names {
        match mdev::read_parent(fs, &name) {
            Ok(parent) => {
                out.insert(name, parent);
            }
            Err(e) => warnings.push(error_chain(&e)),
        }
    }
    out
}

fn parent_problems(parent: &mdev::MdevParent) -> impl Iterator<Item = String> + '_ {
    let types = parent.types.iter().flat_map(|t| t.problems.iter());
    parent.problems.iter().chain(types).cloned()
}

fn vendor_of(id: PciVendorId) -> Vendor {
    match id {
        PciVendorId::NVIDIA => Vendor::Nvidia,
        PciVendorId::AMD => Vendor::Amd,
        PciVendorId(0x8086) => Vendor::Intel,
        _ => Vendor::Other,
    }
}

fn mdev_groups(
    fs: &dyn Sysfs,
    warnings: &mut Vec<String>,
) -> BTreeMap<ids::MdevUuid, Option<ids::IommuGroupId>> {
    match mdev::list_devices(fs) {
        Ok((devices, errors)) => {
            warnings.extend(errors.iter().map(|e| error_chain(e)));
            devices
                .into_iter()
                .map(|d| (d.uuid, d.iommu_group))
                .collect()
        }
        Err(e) => {
            warnings.push(error_chain(&e));
            BTreeMap::new()
        }
    }
}

pub(crate) fn build_gpu(
    ctx: &Context<'_>,
    dev: &vfio::PciDevice,
    nv: Option<&gpu::DeviceInfo>,
    amd: Option<&gpu::AmdGpuInfo>,
    mdev_parent: Option<mdev::MdevParent>,
) -> Gpu {
    let host = ctx.host;
    let mut warnings = dev.problems.clone();
    let (numa_node, numa_source) = gpu_numa(dev, nv);
    let model = nv
        .map(|n| n.name.clone())
        .or_else(|| amd.map(|a| a.name.clone()))
        .unwrap_or_else(|| format!("PCI device {}:{}", dev.vendor, dev.device));
    let mut gpu = Gpu {
        pci_address: dev.address,
        vendor: vendor_of(dev.vendor),
        vendor_id: dev.vendor.to_string(),
        device_id: dev.device.to_string(),
        model,
        uuid: nv
            .map(|n| n.uuid.clone())
            .or_else(|| amd.and_then(|a| a.uuid.clone())),
        nvml_index: nv.map(|n| n.index),
        numa_node,
        numa_source,
        iommu_group: dev.iommu_group,
        memory_mib: nv
            .map(|n| n.memory_total_mib)
            .or_else(|| amd.map(|a| a.memory_total_mib)),
        driver: dev.driver.clone(),
        pcie_link: dev.link.as_ref().map(|l| PcieLinkInfo {
            current_speed_gts: l.current_speed_gts,
            current_width: l.current_width,
            max_speed_gts: l.max_speed_gts,
            max_width: l.max_width,
        }),
        mig: None,
        mdev_types: Vec::new(),
        sriov: None,
        vgpu_types: Vec::new(),
        amd: None,
        nvlink_peers: Vec::new(),
        slices: Vec::new(),
        warnings: Vec::new(),
    };
    if let (Some(nv), Ok(nvml)) = (nv, host.nvml.as_ref()) {
        add_nvml_details(&mut gpu, nvml.as_ref(), nv.index, &mut warnings);
    }
    if let (Some(_), Ok((amd_smi, _))) = (amd, host.amd.as_ref()) {
        gpu.amd = Some(amd_details(amd_smi.as_ref(), dev.address, &mut warnings));
    }
    if let Some(parent) = mdev_parent {
        warnings.extend(parent_problems(&parent));
        gpu.mdev_types = parent.types.iter().map(type_info).collect();
    }
    if let Some(sriov) = &dev.sriov {
        gpu.sriov = Some(sriov_info(
            host.sysfs.as_ref(),
            sriov,
            ctx.pci,
            &mut warnings,
        ));
    }
    gpu.slices = existing_slices(&gpu, dev, &ctx.mdev_groups);
    gpu.warnings = warnings;
    gpu
}

fn gpu_numa(
    dev: &vfio::PciDevice,
    nv: Option<&gpu::DeviceInfo>,
) -> (Option<ids::NumaNodeId>, NumaSource) {
    match (&dev.numa_node, &dev.numa_source) {
        (Some(n), vfio::NumaSource::Device) => (Some(*n), NumaSource::Device),
        (Some(n), vfio::NumaSource::Upstream(_)) => (Some(*n), NumaSource::Upstream),
        _ => match nv.and_then(|n| n.numa_node) {
            Some(n) => (Some(n), NumaSource::Nvml),
            None => (None, NumaSource::Unknown),
        },
    }
}

fn add_nvml_details(gpu: &mut Gpu, nvml: &dyn Nvml, index: u32, warnings: &mut Vec<String>) {
    gpu.mig = mig_info(nvml, index, warnings);
    match nvml.supported_vgpu_types(index) {
        Ok(types) => gpu.vgpu_types = types,
        Err(e) if e.code == gpu::NvmlCode::NOT_SUPPORTED => {}
        Err(e) => warnings.push(e.to_string()),
    }
    match nvml.nvlink_peers(index) {
        Ok(peers) => gpu.nvlink_peers = peers,
        Err(e) if e.code == gpu::NvmlCode::NOT_SUPPORTED => {}
        Err(e) => warnings.push(e.to_string()),
    }
}

fn mig_info(nvml: &dyn Nvml, index: u32, warnings: &mut Vec<String>) -> Option<MigInfo> {
    let mode = match nvml.mig_mode(index) {
        Ok(mode) => mode,
        Err(e) if e.code == gpu::NvmlCode::NOT_SUPPORTED => return None,
        Err(e) => {
            warnings.push(e.to_string());
            return None;
        }
    };
    let profiles = match nvml.gpu_instance_profiles(index) {
        Ok(profiles) => profiles,
        Err(e) if mig_off_answer(&mode, &e) => Vec::new(),
        Err(e) => {
            warnings.push(e.to_string());
            Vec::new()
        }
    };
    let mut info = MigInfo {
        enabled: mode.current,
        pending: mode.pending,
        profiles: Vec::new(),
        instances: Vec::new(),
    };
    for p in &profiles {
        let placements = match nvml.gpu_instance_possible_placements(index, p.id) {
            Ok(placements) => placements,
            Err(e) if mig_off_answer(&mode, &e) => Vec::new(),
            Err(e) => {
                warnings.push(e.to_string());
                Vec::new()
            }
        };
        let remaining = if mode.current {
            nvml.gpu_instance_remaining_capacity(index, p.id)
                .map_err(|e| warnings.push(e.to_string()))
                .ok()
        } else {
            None
        };
        info.profiles.push(MigProfileInfo {
            name: p.name.to_string(),
            id: p.id,
            compute_slices: p.slice_count,
            memory_mib: p.memory_mib,
            max_instances: p.instance_count,
            placements: placements
                .iter()
                .map(|pl| PlacementInfo {
                    start: pl.start,
                    size: pl.size,
                })
                .collect(),
            remaining,
        });
    }
    if mode.current {
        info.instances = mig_instances(nvml, index, &profiles, warnings);
    }
    Some(info)
}

/// Whether `e` is NVML's normal answer to a MIG table query while MIG mode is off: nvml.h
/// documents `NVML_ERROR_NOT_SUPPORTED` for `nvmlDeviceGetGpuInstanceProfileInfo` and
/// `nvmlDeviceGetGpuInstancePossiblePlacements_v2` when the device "doesn't have MIG mode
/// enabled". A GPU with MIG off is not degraded, so this is no warning.
fn mig_off_answer(mode: &gpu::MigMode, e: &gpu::NvmlError) -> bool {
    !mode.current && e.code == gpu::NvmlCode::NOT_SUPPORTED
}

fn mig_instances(
    nvml: &dyn Nvml,
    index: u32,
    profiles: &[gpu::GpuInstanceProfile],
    warnings: &mut Vec<String>,
) -> Vec<MigInstanceInfo> {
    let instances = nvml.gpu_instances(index).unwrap_or_else(|e| {
        warnings.push(e.to_string());
        Vec::new()
    });
    instances
        .into_iter()
        .map(|gi| {
            let profile = profiles
                .iter()
                .find(|p| p.id == gi.profile_id)
                .map(|p| p.name.to_string())
                .unwrap_or_else(|| format!("profile-{}", gi.profile_id));
            let compute_instances = nvml
                .compute_instances(index, gi.id)
                .map(|cis| cis.iter().map(|c| c.id).collect())
                .unwrap_or_else(|e| {
                    warnings.push(e.to_string());
                    Vec::new()
                });
            MigInstanceInfo {
                gpu_instance_id: gi.id,
                profile,
                placement: PlacementInfo {
                    start: gi.placement.start,
                    size: gi.placement.size,
                },
                compute_instances,
            }
        })
        .collect()
}

fn amd_details(amd: &dyn AmdSmi, addr: PciAddress, warnings: &mut Vec<String>) -> AmdInfo {
    let mut info = AmdInfo {
        compute_partition: None,
        compute_partitions_available: Vec::new(),
        memory_partition: None,
        memory_partitions_available: Vec::new(),
        vfs_enabled: None,
        vfs_supported: None,
    };
    match amd.partition(addr) {
        Ok(p) => {
            info.compute_partition = Some(p.compute);
            info.compute_partitions_available = p.compute_available;
            info.memory_partition = Some(p.memory);
            info.memory_partitions_available = p.memory_available;
        }
        Err(e) if e.status == gpu::AmdStatus::NOT_SUPPORTED => {}
        Err(e) => warnings.push(e.to_string()),
    }
    match amd.num_vf(addr) {
        Ok(vf) => {
            info.vfs_enabled = Some(vf.enabled);
            info.vfs_supported = Some(vf.supported);
        }
        Err(e) if e.status == gpu::AmdStatus::NOT_SUPPORTED => {}
        Err(e) => warnings.push(e.to_string()),
    }
    info
}

fn type_info(t: &mdev::MdevType) -> MdevTypeInfo {
    MdevTypeInfo {
        id: t.id.clone(),
        name: t.name.clone(),
        description: t.description.clone(),
        device_api: t.device_api.clone(),
        available_instances: t.available_instances,
        devices: t.devices.clone(),
    }
}

pub(crate) fn parent_info(p: mdev::MdevParent) -> MdevParentInfo {
    MdevParentInfo {
        types: p.types.iter().map(type_info).collect(),
        name: p.name,
        pci_address: p.pci_address,
    }
}

fn sriov_info(
    fs: &dyn Sysfs,
    sriov: &vfio::SriovInfo,
    pci: &PciMap,
    warnings: &mut Vec<String>,
) -> SriovInfo {
    let vfs = sriov
        .vfs
        .iter()
        .map(|addr| vf_info(fs, *addr, pci.get(addr), warnings))
        .collect();
    SriovInfo {
        total_vfs: sriov.total_vfs,
        enabled_vfs: sriov.num_vfs,
        vfs,
    }
}

fn vf_info(
    fs: &dyn Sysfs,
    addr: PciAddress,
    dev: Option<&vfio::PciDevice>,
    warnings: &mut Vec<String>,
) -> VfInfo {
    let mut info = VfInfo {
        pci_address: addr,
        iommu_group: dev.and_then(|d| d.iommu_group),
        driver: dev.and_then(|d| d.driver.clone()),
        vgpu_type: None,
        creatable_vgpu_types: Vec::new(),
    };
    if !vfio::has_vendor_vgpu(fs, addr) {
        return info;
    }
    match vfio::current_vgpu_type(fs, addr) {
        Ok(t) => info.vgpu_type = t,
        Err(e) => warnings.push(error_chain(&e)),
    }
    match vfio::creatable_vgpu_types(fs, addr) {
        Ok(types) => {
            info.creatable_vgpu_types = types
                .into_iter()
                .map(|t| VgpuTypeRef {
                    id: t.id,
                    name: t.name,
                })
                .collect();
        }
        Err(e) => warnings.push(error_chain(&e)),
    }
    info
}

fn existing_slices(
    gpu: &Gpu,
    dev: &vfio::PciDevice,
    mdev_groups: &BTreeMap<ids::MdevUuid, Option<ids::IommuGroupId>>,
) -> Vec<ExistingSlice> {
    let mut slices = Vec::new();
    if dev.driver.as_deref() == Some("vfio-pci") {
        slices.push(ExistingSlice::Passthrough {
            iommu_group: dev.iommu_group,
        });
    }
    for gi in gpu.mig.iter().flat_map(|m| &m.instances) {
        slices.push(ExistingSlice::Mig {
            gpu_instance_id: gi.gpu_instance_id,
            profile: gi.profile.clone(),
            start: gi.placement.start,
        });
    }
    for t in &gpu.mdev_types {
        for uuid in &t.devices {
            let iommu_group = mdev_groups.get(uuid).copied().flatten();
            slices.push(ExistingSlice::Mdev {
                uuid: *uuid,
                type_id: t.id.clone(),
                iommu_group,
            });
        }
    }
    for vf in gpu.sriov.iter().flat_map(|s| &s.vfs) {
        if let Some(vgpu_type) = vf.vgpu_type {
            slices.push(ExistingSlice::NvidiaVfio {
                vf: vf.pci_address,
                vgpu_type,
            });
        } else if vf.driver.as_deref() == Some("vfio-pci") {
            slices.push(ExistingSlice::SriovVf { vf: vf.pci_address });
        }
    }
    slices
}

pub(crate) fn pci_info(dev: &vfio::PciDevice) -> PciDeviceInfo {
    PciDeviceInfo {
        pci_address: dev.address,
        vendor_id: dev.vendor.to_string(),
        device_id: dev.device.to_string(),
        class: format!("0x{:06x}", dev.class),
        driver: dev.driver.clone(),
        iommu_group: dev.iommu_group,
        numa_node: dev.numa_node,
        physfn: dev.physfn,
    }
}

fn library_status(host: &HostAccess) -> VendorLibraries {
    let nvml = match &host.nvml {
        Ok(n) => match n.driver_version() {
            Ok(v) => LibraryStatus {
                available: true,
                detail: format!("driver {v}"),
            },
            Err(e) => LibraryStatus {
                available: true,
                detail: e.to_string(),
            },
        },
        Err(why) => LibraryStatus {
            available: false,
            detail: why.clone(),
        },
    };
    let amd_smi = match &host.amd {
        Ok((_, backend)) => LibraryStatus {
            available: true,
            detail: backend.clone(),
        },
        Err(why) => LibraryStatus {
            available: false,
            detail: why.clone(),
        },
    };
    VendorLibraries { nvml, amd_smi }
}
