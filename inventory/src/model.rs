//! The inventory's data model. Its JSON form (`vgpud inventory --json`, `GET /v1/host`) is a
//! stable interface: fields are added, never renamed or removed.

use ids::{IommuGroupId, MdevParentName, MdevTypeId, MdevUuid, NumaNodeId, PciAddress, VgpuTypeId};
use serde::{Deserialize, Serialize};

/// Everything discovered about a host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Host))]
pub struct HostInventory {
    /// The host's name.
    pub hostname: String,
    /// Where the description came from: `host:/`, `root:<path>` or `sim:<profile>`.
    pub source: String,
    /// NUMA nodes, by id.
    pub numa_nodes: Vec<NumaNodeInfo>,
    /// GPUs (physical functions), by PCI address.
    pub gpus: Vec<Gpu>,
    /// mdev parents that are not GPUs (e.g. the kernel's `mtty` sample driver).
    pub other_mdev_parents: Vec<MdevParentInfo>,
    /// Every PCI function, GPUs and VFs included.
    pub pci_devices: Vec<PciDeviceInfo>,
    /// What the vendor libraries said when they were loaded.
    pub vendor_libraries: VendorLibraries,
    /// Problems met during discovery that did not stop it.
    pub warnings: Vec<String>,
}

/// A NUMA node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = NumaNode))]
pub struct NumaNodeInfo {
    /// Node id.
    pub id: NumaNodeId,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum NumaSource {
    /// The device's own `numa_node`.
    Device,
    /// The device said -1; an upstream bridge gave it.
    Upstream,
    /// The device said -1; NVML gave it.
    Nvml,
    /// Nobody knows: the scheduler treats the GPU as equally far from every node.
    Unknown,
}

/// One GPU with what it can be sliced into and the slices it carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Gpu {
    /// PCI address of the physical function.
    pub pci_address: PciAddress,
    /// Vendor.
    pub vendor: Vendor,
    /// PCI vendor id.
    pub vendor_id: String,
    /// PCI device id.
    pub device_id: String,
    /// Product name.
    pub model: String,
    /// Vendor UUID (`GPU-…` for NVIDIA), when the vendor library reports one.
    pub uuid: Option<String>,
    /// NVML index, for NVIDIA GPUs NVML sees.
    pub nvml_index: Option<u32>,
    /// NUMA node, when known.
    pub numa_node: Option<NumaNodeId>,
    /// How the NUMA node was found.
    pub numa_source: NumaSource,
    /// IOMMU group, when the host has an IOMMU.
    pub iommu_group: Option<IommuGroupId>,
    /// Framebuffer memory in MiB, when known.
    pub memory_mib: Option<u64>,
    /// Kernel driver bound now.
    pub driver: Option<String>,
    /// PCIe link, when the kernel reports it.
    pub pcie_link: Option<PcieLinkInfo>,
    /// MIG capability, profiles and instances; absent for GPUs without MIG.
    pub mig: Option<MigInfo>,
    /// mdev types the GPU offers (mdev-based vGPU).
    pub mdev_types: Vec<MdevTypeInfo>,
    /// SR-IOV capability and virtual functions.
    pub sriov: Option<SriovInfo>,
    /// vGPU types the driver supports for this GPU (NVML), whatever the mechanism.
    pub vgpu_types: Vec<VgpuTypeInfo>,
    /// AMD partition modes and VF counts (AMD SMI or sysfs).
    pub amd: Option<AmdInfo>,
    /// PCI addresses of GPUs reachable over NVLink.
    pub nvlink_peers: Vec<PciAddress>,
    /// Slices present on the GPU now, whoever made them.
    pub slices: Vec<ExistingSlice>,
    /// Problems reading this GPU.
    pub warnings: Vec<String>,
}

/// PCIe link speed and width.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = PcieLink))]
pub struct PcieLinkInfo {
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Mig))]
pub struct MigInfo {
    /// MIG is enabled now.
    pub enabled: bool,
    /// MIG will be enabled after the next GPU reset.
    pub pending: bool,
    /// GPU-instance profiles.
    pub profiles: Vec<MigProfileInfo>,
    /// GPU instances present.
    pub instances: Vec<MigInstanceInfo>,
}

/// One GPU-instance profile and where it may go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = MigProfile))]
pub struct MigProfileInfo {
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
    /// Every allowed placement (start slot and size in memory slices).
    pub placements: Vec<PlacementInfo>,
    /// How many more fit now (only while MIG is enabled).
    pub remaining: Option<u32>,
}

/// A placement on the memory-slice axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Placement))]
pub struct PlacementInfo {
    /// First memory slice.
    pub start: u32,
    /// Memory slices.
    pub size: u32,
}

/// A GPU instance and its compute instances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = MigInstance))]
pub struct MigInstanceInfo {
    /// GPU instance id.
    pub gpu_instance_id: u32,
    /// Profile name (or the id when the profile is unknown).
    pub profile: String,
    /// Placement.
    pub placement: PlacementInfo,
    /// Compute instance ids.
    pub compute_instances: Vec<u32>,
}

/// An mdev type of a parent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = MdevType))]
pub struct MdevTypeInfo {
    /// Type id, e.g. `nvidia-222`.
    pub id: MdevTypeId,
    /// Human name, e.g. `GRID T4-1Q`.
    pub name: Option<String>,
    /// Driver's description.
    pub description: Option<String>,
    /// Device API, e.g. `vfio-pci`.
    pub device_api: Option<String>,
    /// How many more can be created now.
    pub available_instances: Option<u32>,
    /// Devices of this type.
    pub devices: Vec<MdevUuid>,
}

/// An mdev parent that is not a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = MdevParent))]
pub struct MdevParentInfo {
    /// Parent name under `/sys/class/mdev_bus`.
    pub name: MdevParentName,
    /// Its PCI address, when it is a PCI function.
    pub pci_address: Option<PciAddress>,
    /// Its types.
    pub types: Vec<MdevTypeInfo>,
}

/// SR-IOV capability of a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Sriov))]
pub struct SriovInfo {
    /// Most VFs.
    pub total_vfs: u32,
    /// VFs enabled now.
    pub enabled_vfs: u32,
    /// The enabled VFs.
    pub vfs: Vec<VfInfo>,
}

/// A virtual function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Vf))]
pub struct VfInfo {
    /// PCI address.
    pub pci_address: PciAddress,
    /// IOMMU group.
    pub iommu_group: Option<IommuGroupId>,
    /// Driver bound now.
    pub driver: Option<String>,
    /// NVIDIA vendor-specific VFIO: the vGPU type set on this VF.
    pub vgpu_type: Option<VgpuTypeId>,
    /// NVIDIA vendor-specific VFIO: the types that could be created on this VF now.
    pub creatable_vgpu_types: Vec<VgpuTypeRef>,
}

/// A vGPU type id with its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VgpuTypeRef {
    /// Type id.
    pub id: VgpuTypeId,
    /// Name, e.g. `NVIDIA H200X-1-18C`.
    pub name: String,
}

/// A vGPU type as NVML describes it (the same value the `gpu` crate returns).
pub use gpu::VgpuTypeInfo;

/// AMD partitioning and VFs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Amd))]
pub struct AmdInfo {
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ExistingSlice {
    /// A mediated device.
    Mdev {
        /// Its UUID.
        uuid: MdevUuid,
        /// Its type.
        type_id: MdevTypeId,
        /// Its IOMMU group.
        iommu_group: Option<IommuGroupId>,
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
        vf: PciAddress,
        /// The vGPU type.
        vgpu_type: VgpuTypeId,
    },
    /// A VF bound to vfio-pci.
    SriovVf {
        /// The VF.
        vf: PciAddress,
    },
    /// The whole GPU bound to vfio-pci.
    Passthrough {
        /// IOMMU group.
        iommu_group: Option<IommuGroupId>,
    },
}

/// A PCI function, as listed by `lspci`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = PciDevice))]
pub struct PciDeviceInfo {
    /// Address.
    pub pci_address: PciAddress,
    /// Vendor id.
    pub vendor_id: String,
    /// Device id.
    pub device_id: String,
    /// Class code, `0x030200` form.
    pub class: String,
    /// Driver bound now.
    pub driver: Option<String>,
    /// IOMMU group.
    pub iommu_group: Option<IommuGroupId>,
    /// NUMA node, when known.
    pub numa_node: Option<NumaNodeId>,
    /// The PF, for a VF.
    pub physfn: Option<PciAddress>,
}

/// Vendor library status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VendorLibraries {
    /// NVML.
    pub nvml: LibraryStatus,
    /// AMD SMI.
    pub amd_smi: LibraryStatus,
}

/// Whether a vendor library is in use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LibraryStatus {
    /// In use.
    pub available: bool,
    /// Version, backend name, or why it is not available.
    pub detail: String,
}
