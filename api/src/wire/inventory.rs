//! The host inventory on the wire (`GET /v1/host`, `/v1/gpus`): the same JSON as
//! `vgpud inventory --json`, field for field, with an OpenAPI schema.
//!
//! The types mirror `inventory`'s model (which knows nothing of OpenAPI). The conversions are
//! written out so that a renamed or removed field fails to compile; a test compares the JSON of
//! both forms on every built-in simulated host, so an added field cannot be forgotten either.

use serde::Serialize;
use utoipa::ToSchema;

/// Everything discovered about the host.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Host {
    /// The host's name.
    pub hostname: String,
    /// Where the description came from: `host:/`, `root:<path>` or `sim:<profile>`.
    pub source: String,
    /// NUMA nodes, by id.
    pub numa_nodes: Vec<NumaNode>,
    /// GPUs (physical functions), by PCI address.
    pub gpus: Vec<Gpu>,
    /// mdev parents that are not GPUs.
    pub other_mdev_parents: Vec<MdevParent>,
    /// Every PCI function, GPUs and VFs included.
    pub pci_devices: Vec<PciDevice>,
    /// What the vendor libraries said when they were loaded.
    pub vendor_libraries: VendorLibraries,
    /// Problems met during discovery that did not stop it.
    pub warnings: Vec<String>,
}

/// A NUMA node.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NumaNode {
    /// Node id.
    pub id: u16,
    /// CPU list in kernel form (`0-31,64-95`).
    pub cpus: String,
    /// Number of CPUs.
    pub cpu_count: usize,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Free memory in MiB.
    pub memory_free_mib: u64,
    /// Distances to every node, in node order.
    pub distances: Vec<u32>,
}

/// GPU vendor.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// NVIDIA.
    Nvidia,
    /// AMD.
    Amd,
    /// Intel.
    Intel,
    /// Anyone else.
    Other,
}

/// How the GPU's NUMA node was found.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NumaSource {
    /// The device's own `numa_node`.
    Device,
    /// An upstream bridge gave it.
    Upstream,
    /// NVML gave it.
    Nvml,
    /// Nobody knows.
    Unknown,
}

/// One GPU with what it can be sliced into and the slices it carries.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Gpu {
    /// PCI address of the physical function.
    #[schema(value_type = String, example = "0000:07:00.0")]
    pub pci_address: String,
    /// Vendor.
    pub vendor: Vendor,
    /// PCI vendor id.
    pub vendor_id: String,
    /// PCI device id.
    pub device_id: String,
    /// Product name.
    pub model: String,
    /// Vendor UUID (`GPU-…` for NVIDIA).
    pub uuid: Option<String>,
    /// NVML index.
    pub nvml_index: Option<u32>,
    /// NUMA node, when known.
    pub numa_node: Option<u16>,
    /// How the NUMA node was found.
    pub numa_source: NumaSource,
    /// IOMMU group.
    pub iommu_group: Option<u32>,
    /// Framebuffer memory in MiB.
    pub memory_mib: Option<u64>,
    /// Kernel driver bound now.
    pub driver: Option<String>,
    /// PCIe link.
    pub pcie_link: Option<PcieLink>,
    /// MIG capability, profiles and instances.
    pub mig: Option<Mig>,
    /// mdev types the GPU offers.
    pub mdev_types: Vec<MdevType>,
    /// SR-IOV capability and virtual functions.
    pub sriov: Option<Sriov>,
    /// vGPU types the driver supports for this GPU.
    pub vgpu_types: Vec<VgpuType>,
    /// AMD partition modes and VF counts.
    pub amd: Option<Amd>,
    /// PCI addresses of GPUs reachable over NVLink.
    pub nvlink_peers: Vec<String>,
    /// Slices present on the GPU now, whoever made them.
    pub slices: Vec<ExistingSlice>,
    /// Problems reading this GPU.
    pub warnings: Vec<String>,
}

/// PCIe link speed and width.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PcieLink {
    /// Current speed in GT/s.
    pub current_speed_gts: Option<f32>,
    /// Current width in lanes.
    pub current_width: Option<u32>,
    /// Maximum speed in GT/s.
    pub max_speed_gts: Option<f32>,
    /// Maximum width in lanes.
    pub max_width: Option<u32>,
}

/// MIG state of a GPU.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Mig {
    /// MIG is enabled now.
    pub enabled: bool,
    /// MIG will be enabled after the next GPU reset.
    pub pending: bool,
    /// GPU-instance profiles.
    pub profiles: Vec<MigProfile>,
    /// GPU instances present.
    pub instances: Vec<MigInstance>,
}

/// One GPU-instance profile and where it may go.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MigProfile {
    /// Profile name, e.g. `3g.40gb`.
    pub name: String,
    /// NVML profile id on this GPU.
    pub id: u32,
    /// Compute slices.
    pub compute_slices: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Most instances per GPU.
    pub max_instances: u32,
    /// Every allowed placement.
    pub placements: Vec<Placement>,
    /// How many more fit now (only while MIG is enabled).
    pub remaining: Option<u32>,
}

/// A placement on the memory-slice axis.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct Placement {
    /// First memory slice.
    pub start: u32,
    /// Memory slices.
    pub size: u32,
}

/// A GPU instance and its compute instances.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MigInstance {
    /// GPU instance id.
    pub gpu_instance_id: u32,
    /// Profile name.
    pub profile: String,
    /// Placement.
    pub placement: Placement,
    /// Compute instance ids.
    pub compute_instances: Vec<u32>,
}

/// An mdev type of a parent.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MdevType {
    /// Type id, e.g. `nvidia-222`.
    pub id: String,
    /// Human name.
    pub name: Option<String>,
    /// Driver's description.
    pub description: Option<String>,
    /// Device API, e.g. `vfio-pci`.
    pub device_api: Option<String>,
    /// How many more can be created now.
    pub available_instances: Option<u32>,
    /// Devices of this type (UUIDs).
    pub devices: Vec<String>,
}

/// An mdev parent that is not a GPU.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MdevParent {
    /// Parent name under `/sys/class/mdev_bus`.
    pub name: String,
    /// Its PCI address, when it is a PCI function.
    pub pci_address: Option<String>,
    /// Its types.
    pub types: Vec<MdevType>,
}

/// SR-IOV capability of a GPU.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Sriov {
    /// Most VFs.
    pub total_vfs: u32,
    /// VFs enabled now.
    pub enabled_vfs: u32,
    /// The enabled VFs.
    pub vfs: Vec<Vf>,
}

/// A virtual function.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Vf {
    /// PCI address.
    pub pci_address: String,
    /// IOMMU group.
    pub iommu_group: Option<u32>,
    /// Driver bound now.
    pub driver: Option<String>,
    /// The vGPU type set on this VF (NVIDIA vendor-specific VFIO).
    pub vgpu_type: Option<u32>,
    /// The types that could be created on this VF now.
    pub creatable_vgpu_types: Vec<VgpuTypeRef>,
}

/// A vGPU type id with its name.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VgpuTypeRef {
    /// Type id.
    pub id: u32,
    /// Name, e.g. `NVIDIA H200X-1-18C`.
    pub name: String,
}

/// A vGPU type as NVML describes it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VgpuType {
    /// Type id.
    pub id: u32,
    /// Name, e.g. `NVIDIA H200X-1-18C`.
    pub name: String,
    /// Class, e.g. `Compute`, `Quadro`, `NVS`.
    pub class: String,
    /// Framebuffer per vGPU, MiB.
    pub framebuffer_mib: u64,
    /// Most vGPUs of this type on one GPU.
    pub max_instances: u32,
    /// The GPU-instance profile id a MIG-backed type occupies; absent for a time-sliced type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_instance_profile_id: Option<u32>,
}

/// AMD partitioning and VFs.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Amd {
    /// Compute partition mode.
    pub compute_partition: Option<String>,
    /// Compute modes accepted.
    pub compute_partitions_available: Vec<String>,
    /// Memory partition mode.
    pub memory_partition: Option<String>,
    /// Memory modes accepted.
    pub memory_partitions_available: Vec<String>,
    /// VFs enabled.
    pub vfs_enabled: Option<u32>,
    /// VFs the current mode supports.
    pub vfs_supported: Option<u32>,
}

/// A slice present on the host, whoever created it.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ExistingSlice {
    /// A mediated device.
    Mdev {
        /// Its UUID.
        uuid: String,
        /// Its type.
        type_id: String,
        /// Its IOMMU group.
        iommu_group: Option<u32>,
    },
    /// A MIG GPU instance.
    Mig {
        /// GPU instance id.
        gpu_instance_id: u32,
        /// Profile name.
        profile: String,
        /// Start slot.
        start: u32,
    },
    /// A VF carrying an NVIDIA vendor-specific VFIO vGPU.
    NvidiaVfio {
        /// The VF.
        vf: String,
        /// The vGPU type.
        vgpu_type: u32,
    },
    /// A VF bound to vfio-pci.
    SriovVf {
        /// The VF.
        vf: String,
    },
    /// The whole GPU bound to vfio-pci.
    Passthrough {
        /// IOMMU group.
        iommu_group: Option<u32>,
    },
}

/// A PCI function.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PciDevice {
    /// Address.
    pub pci_address: String,
    /// Vendor id.
    pub vendor_id: String,
    /// Device id.
    pub device_id: String,
    /// Class code, `0x030200` form.
    pub class: String,
    /// Driver bound now.
    pub driver: Option<String>,
    /// IOMMU group.
    pub iommu_group: Option<u32>,
    /// NUMA node, when known.
    pub numa_node: Option<u16>,
    /// The PF, for a VF.
    pub physfn: Option<String>,
}

/// Vendor library status.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VendorLibraries {
    /// NVML.
    pub nvml: LibraryStatus,
    /// AMD SMI.
    pub amd_smi: LibraryStatus,
}

/// Whether a vendor library is in use.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LibraryStatus {
    /// In use.
    pub available: bool,
    /// Version, backend name, or why it is not available.
    pub detail: String,
}

fn text<T: ToString>(v: &T) -> String {
    v.to_string()
}

fn opt_text<T: ToString>(v: &Option<T>) -> Option<String> {
    v.as_ref().map(ToString::to_string)
}

impl From<&inventory::HostInventory> for Host {
    fn from(h: &inventory::HostInventory) -> Self {
        Host {
            hostname: h.hostname.clone(),
            source: h.source.clone(),
            numa_nodes: h.numa_nodes.iter().map(NumaNode::from).collect(),
            gpus: h.gpus.iter().map(Gpu::from).collect(),
            other_mdev_parents: h.other_mdev_parents.iter().map(MdevParent::from).collect(),
            pci_devices: h.pci_devices.iter().map(PciDevice::from).collect(),
            vendor_libraries: VendorLibraries {
                nvml: LibraryStatus::from(&h.vendor_libraries.nvml),
                amd_smi: LibraryStatus::from(&h.vendor_libraries.amd_smi),
            },
            warnings: h.warnings.clone(),
        }
    }
}

impl From<&inventory::NumaNodeInfo> for NumaNode {
    fn from(n: &inventory::NumaNodeInfo) -> Self {
        NumaNode {
            id: n.id.0,
            cpus: n.cpus.clone(),
            cpu_count: n.cpu_count,
            memory_mib: n.memory_mib,
            memory_free_mib: n.memory_free_mib,
            distances: n.distances.clone(),
        }
    }
}

impl From<inventory::Vendor> for Vendor {
    fn from(v: inventory::Vendor) -> Self {
        match v {
            inventory::Vendor::Nvidia => Vendor::Nvidia,
            inventory::Vendor::Amd => Vendor::Amd,
            inventory::Vendor::Intel => Vendor::Intel,
            inventory::Vendor::Other => Vendor::Other,
        }
    }
}

impl From<inventory::NumaSource> for NumaSource {
    fn from(v: inventory::NumaSource) -> Self {
        match v {
            inventory::NumaSource::Device => NumaSource::Device,
            inventory::NumaSource::Upstream => NumaSource::Upstream,
            inventory::NumaSource::Nvml => NumaSource::Nvml,
            inventory::NumaSource::Unknown => NumaSource::Unknown,
        }
    }
}

impl From<&inventory::Gpu> for Gpu {
    fn from(g: &inventory::Gpu) -> Self {
        Gpu {
            pci_address: text(&g.pci_address),
            vendor: g.vendor.into(),
            vendor_id: g.vendor_id.clone(),
            device_id: g.device_id.clone(),
            model: g.model.clone(),
            uuid: g.uuid.clone(),
            nvml_index: g.nvml_index,
            numa_node: g.numa_node.map(|n| n.0),
            numa_source: g.numa_source.into(),
            iommu_group: g.iommu_group.map(|i| i.0),
            memory_mib: g.memory_mib,
            driver: g.driver.clone(),
            pcie_link: g.pcie_link.as_ref().map(|l| PcieLink {
                current_speed_gts: l.current_speed_gts,
                current_width: l.current_width,
                max_speed_gts: l.max_speed_gts,
                max_width: l.max_width,
            }),
            mig: g.mig.as_ref().map(Mig::from),
            mdev_types: g.mdev_types.iter().map(MdevType::from).collect(),
            sriov: g.sriov.as_ref().map(Sriov::from),
            vgpu_types: g.vgpu_types.iter().map(VgpuType::from).collect(),
            amd: g.amd.as_ref().map(Amd::from),
            nvlink_peers: g.nvlink_peers.iter().map(text).collect(),
            slices: g.slices.iter().map(ExistingSlice::from).collect(),
            warnings: g.warnings.clone(),
        }
    }
}

impl From<&inventory::MigInfo> for Mig {
    fn from(m: &inventory::MigInfo) -> Self {
        Mig {
            enabled: m.enabled,
            pending: m.pending,
            profiles: m
                .profiles
                .iter()
                .map(|p| MigProfile {
                    name: p.name.clone(),
                    id: p.id,
                    compute_slices: p.compute_slices,
                    memory_mib: p.memory_mib,
                    max_instances: p.max_instances,
                    placements: p.placements.iter().map(Placement::from).collect(),
                    remaining: p.remaining,
                })
                .collect(),
            instances: m
                .instances
                .iter()
                .map(|i| MigInstance {
                    gpu_instance_id: i.gpu_instance_id,
                    profile: i.profile.clone(),
                    placement: Placement::from(&i.placement),
                    compute_instances: i.compute_instances.clone(),
                })
                .collect(),
        }
    }
}

impl From<&inventory::PlacementInfo> for Placement {
    fn from(p: &inventory::PlacementInfo) -> Self {
        Placement {
            start: p.start,
            size: p.size,
        }
    }
}

impl From<&inventory::MdevTypeInfo> for MdevType {
    fn from(t: &inventory::MdevTypeInfo) -> Self {
        MdevType {
            id: text(&t.id),
            name: t.name.clone(),
            description: t.description.clone(),
            device_api: t.device_api.clone(),
            available_instances: t.available_instances,
            devices: t.devices.iter().map(text).collect(),
        }
    }
}

impl From<&inventory::MdevParentInfo> for MdevParent {
    fn from(p: &inventory::MdevParentInfo) -> Self {
        MdevParent {
            name: text(&p.name),
            pci_address: opt_text(&p.pci_address),
            types: p.types.iter().map(MdevType::from).collect(),
        }
    }
}

impl From<&inventory::SriovInfo> for Sriov {
    fn from(s: &inventory::SriovInfo) -> Self {
        Sriov {
            total_vfs: s.total_vfs,
            enabled_vfs: s.enabled_vfs,
            vfs: s
                .vfs
                .iter()
                .map(|v| Vf {
                    pci_address: text(&v.pci_address),
                    iommu_group: v.iommu_group.map(|i| i.0),
                    driver: v.driver.clone(),
                    vgpu_type: v.vgpu_type.map(|t| t.get()),
                    creatable_vgpu_types: v
                        .creatable_vgpu_types
                        .iter()
                        .map(|t| VgpuTypeRef {
                            id: t.id.get(),
                            name: t.name.clone(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

impl From<&inventory::VgpuTypeInfo> for VgpuType {
    fn from(t: &inventory::VgpuTypeInfo) -> Self {
        VgpuType {
            id: t.id.get(),
            name: t.name.clone(),
            class: t.class.clone(),
            framebuffer_mib: t.framebuffer_mib,
            max_instances: t.max_instances,
            gpu_instance_profile_id: t.gpu_instance_profile_id,
        }
    }
}

impl From<&inventory::AmdInfo> for Amd {
    fn from(a: &inventory::AmdInfo) -> Self {
        Amd {
            compute_partition: a.compute_partition.clone(),
            compute_partitions_available: a.compute_partitions_available.clone(),
            memory_partition: a.memory_partition.clone(),
            memory_partitions_available: a.memory_partitions_available.clone(),
            vfs_enabled: a.vfs_enabled,
            vfs_supported: a.vfs_supported,
        }
    }
}

impl From<&inventory::ExistingSlice> for ExistingSlice {
    fn from(s: &inventory::ExistingSlice) -> Self {
        match s {
            inventory::ExistingSlice::Mdev {
                uuid,
                type_id,
                iommu_group,
            } => ExistingSlice::Mdev {
                uuid: text(uuid),
                type_id: text(type_id),
                iommu_group: iommu_group.map(|i| i.0),
            },
            inventory::ExistingSlice::Mig {
                gpu_instance_id,
                profile,
                start,
            } => ExistingSlice::Mig {
                gpu_instance_id: *gpu_instance_id,
                profile: profile.clone(),
                start: *start,
            },
            inventory::ExistingSlice::NvidiaVfio { vf, vgpu_type } => ExistingSlice::NvidiaVfio {
                vf: text(vf),
                vgpu_type: vgpu_type.get(),
            },
            inventory::ExistingSlice::SriovVf { vf } => ExistingSlice::SriovVf { vf: text(vf) },
            inventory::ExistingSlice::Passthrough { iommu_group } => ExistingSlice::Passthrough {
                iommu_group: iommu_group.map(|i| i.0),
            },
        }
    }
}

impl From<&inventory::PciDeviceInfo> for PciDevice {
    fn from(d: &inventory::PciDeviceInfo) -> Self {
        PciDevice {
            pci_address: text(&d.pci_address),
            vendor_id: d.vendor_id.clone(),
            device_id: d.device_id.clone(),
            class: d.class.clone(),
            driver: d.driver.clone(),
            iommu_group: d.iommu_group.map(|i| i.0),
            numa_node: d.numa_node.map(|n| n.0),
            physfn: opt_text(&d.physfn),
        }
    }
}

impl From<&inventory::LibraryStatus> for LibraryStatus {
    fn from(l: &inventory::LibraryStatus) -> Self {
        LibraryStatus {
            available: l.available,
            detail: l.detail.clone(),
        }
    }
}

/// One GPU with its health, utilisation and room (`GET /v1/gpus/{id}`): the inventory's fields
/// plus what the scheduler and telemetry know.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GpuDetail {
    /// The inventory's description of the GPU.
    #[serde(flatten)]
    pub gpu: Gpu,
    /// `ok`, `degraded` (failed owned slices, discovery warnings) or `unresponsive` (its vendor
    /// calls time out).
    pub health: GpuHealth,
    /// Why the GPU is not `ok`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub health_reasons: Vec<String>,
    /// Utilisation and memory from the vendor library, when it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utilization: Option<GpuUtilization>,
    /// For each slice type the GPU offers, how many more could be handed out now.
    pub capacity: Vec<SliceCapacity>,
}

/// A GPU's health.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GpuHealth {
    /// Nothing wrong is known.
    Ok,
    /// Usable, with problems.
    Degraded,
    /// Its vendor library calls do not answer.
    Unresponsive,
}

/// Telemetry of one GPU.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct GpuUtilization {
    /// GPU (SM) utilisation, percent.
    pub gpu_pct: u32,
    /// Memory copy utilisation, percent.
    pub memory_copy_pct: u32,
    /// Framebuffer used, MiB.
    pub memory_used_mib: u64,
    /// Framebuffer free, MiB.
    pub memory_free_mib: u64,
    /// Temperature, °C.
    pub temperature_c: u32,
    /// Power draw, mW.
    pub power_mw: u32,
}

/// How many more slices of one type a GPU can hand out.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SliceCapacity {
    /// The type as requests name it.
    #[serde(rename = "type")]
    pub slice_type: String,
    /// The mechanism.
    pub backend: String,
    /// Owned slices of the type that are ready and free.
    pub free: u32,
    /// Slices of the type that could still be created (each alone, on the GPU as it is now).
    pub creatable: u32,
}

impl From<&agent::service::GpuDetail> for GpuDetail {
    fn from(d: &agent::service::GpuDetail) -> Self {
        use agent::service::GpuHealth as H;
        GpuDetail {
            gpu: Gpu::from(&d.gpu),
            health: match d.health {
                H::Ok => GpuHealth::Ok,
                H::Degraded => GpuHealth::Degraded,
                H::Unresponsive => GpuHealth::Unresponsive,
            },
            health_reasons: d.health_reasons.clone(),
            utilization: d.utilization.map(|u| GpuUtilization {
                gpu_pct: u.gpu_pct,
                memory_copy_pct: u.memory_copy_pct,
                memory_used_mib: u.memory_used_mib,
                memory_free_mib: u.memory_free_mib,
                temperature_c: u.temperature_c,
                power_mw: u.power_mw,
            }),
            capacity: d
                .capacity
                .iter()
                .map(|c| SliceCapacity {
                    slice_type: c.slice_type.clone(),
                    backend: c.backend.as_str().to_owned(),
                    free: c.free,
                    creatable: c.creatable,
                })
                .collect(),
        }
    }
}
