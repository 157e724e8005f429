//! The scheduler's input: a capacity snapshot of one host and a request.
//!
//! The engine builds a [`Snapshot`] from the host inventory; nothing here reads the host. Every
//! GPU carries its slicing mode with the occupancy of that mode, so the scheduler can reason about
//! what is still creatable without asking the kernel or NVML.

use ids::{MdevTypeId, MigProfileName, NumaNodeId, PciAddress, VgpuTypeId};
use serde::{Deserialize, Serialize};

/// Capacity units of one whole GPU. Every size the scheduler compares (fragmentation, free
/// capacity, fit) is expressed in these units so that MIG slices, vGPU shares and fractional
/// shares are comparable.
pub const GPU_UNITS: u32 = 1000;

/// A capacity snapshot of one host.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// GPUs in a stable order (the engine's order; first-fit follows it).
    pub gpus: Vec<GpuState>,
    /// NUMA nodes with what is still free on them.
    pub numa: Vec<NumaState>,
}

/// What is free on one NUMA node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NumaState {
    /// The node.
    pub node: NumaNodeId,
    /// CPUs not yet pinned to a VM, in the order they should be handed out.
    pub free_cpus: Vec<u32>,
    /// Unpinned CPU capacity in milli-CPUs when it is not a whole number of CPUs (shared
    /// cores); `None` means `free_cpus.len() * 1000`.
    pub free_cpu_milli: Option<u64>,
    /// Free memory in MiB.
    pub free_memory_mib: u64,
}

impl NumaState {
    /// Free CPU capacity in milli-CPUs.
    pub fn cpu_milli(&self) -> u64 {
        self.free_cpu_milli
            .unwrap_or(self.free_cpus.len() as u64 * 1000)
    }
}

/// GPU vendor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// NVIDIA.
    Nvidia,
    /// AMD.
    Amd,
    /// Anything else (Intel, test devices).
    Other,
}

/// Who holds a slice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Occupant {
    /// The consumer (VM or allocation) the slice belongs to.
    pub consumer: String,
    /// True when the slice is allocated but no running VM uses it, so it may be re-laid freely.
    pub idle: bool,
    /// How long the slice has existed, in seconds, when the caller knows (`None`: unknown, e.g.
    /// a slice vgpud did not create). The default policy uses it only to break ties between
    /// equally fragmenting candidates (see the crate docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_s: Option<u64>,
}

impl Occupant {
    /// A slice in use by `consumer`.
    pub fn busy(consumer: &str) -> Self {
        Self {
            consumer: consumer.to_owned(),
            idle: false,
            age_s: None,
        }
    }
    /// A slice held by `consumer` that no running VM uses.
    pub fn idle(consumer: &str) -> Self {
        Self {
            consumer: consumer.to_owned(),
            idle: true,
            age_s: None,
        }
    }
    /// The same occupant, `age_s` seconds old.
    pub fn aged(self, age_s: u64) -> Self {
        Self {
            age_s: Some(age_s),
            ..self
        }
    }
}

/// One GPU of the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuState {
    /// PCI address of the physical function.
    pub address: PciAddress,
    /// Vendor.
    pub vendor: Vendor,
    /// Model name as the inventory reports it (`H200`, `MI300X`, an openb code such as `G2`).
    pub model: String,
    /// False when the GPU is quarantined (Xid storm, failed reset): never a candidate.
    pub healthy: bool,
    /// Why this healthy GPU cannot take the request the snapshot was built for (it does not
    /// offer the asked type, it has no VF left for a new slice); `None` when it can. Such a GPU
    /// is never a candidate either, and the decision's explanation gives this reason for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// Recent SM utilisation in percent (telemetry, used as a tie-breaker only).
    pub utilization_pct: u8,
    /// Framebuffer size in MiB.
    pub memory_mib: u64,
    /// NUMA node of the GPU, `None` when firmware did not say.
    pub numa_node: Option<NumaNodeId>,
    /// GPUs this one has a direct NVLink to.
    pub nvlink_peers: Vec<PciAddress>,
    /// How the GPU is sliced and what is taken.
    pub mode: GpuMode,
}

impl GpuState {
    /// Whether the GPU may take new work at all: healthy and not ruled out for the request.
    pub fn usable(&self) -> bool {
        self.healthy && self.unavailable.is_none()
    }
}

/// How a GPU is sliced, with the occupancy of that mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuMode {
    /// Whole-GPU passthrough only.
    Whole {
        /// The VM holding the GPU, if any.
        owner: Option<Occupant>,
    },
    /// NVIDIA MIG: GPU instances at explicit start slots.
    Mig {
        /// The profiles this GPU offers, with their placement rules.
        geometry: MigGeometry,
        /// GPU instances that exist now.
        instances: Vec<MigInstance>,
    },
    /// NVIDIA vendor-specific VFIO vGPU: SR-IOV VFs typed with a vGPU type. In the default
    /// mode all vGPUs on one GPU share a size (the one-size-per-GPU rule).
    VendorVgpu {
        /// Types the GPU can create when empty.
        types: Vec<VgpuOffer>,
        /// VFs enabled on the GPU (an upper bound on instances).
        total_vfs: u32,
        /// Typed VFs that exist now.
        active: Vec<VgpuInstance>,
    },
    /// Mediated devices (older NVIDIA vGPU, Intel GVT-g, sample drivers).
    Mdev {
        /// Types with what the kernel says is still creatable.
        types: Vec<MdevOffer>,
        /// Devices that exist now.
        active: Vec<MdevInstance>,
    },
    /// Plain SR-IOV VFs (AMD MxGPU and others): equal shares.
    Sriov {
        /// VFs enabled.
        total_vfs: u32,
        /// VFs handed out.
        active: Vec<Occupant>,
    },
    /// Fractional sharing (time-sliced or memory-sliced shares of one GPU), counted in
    /// thousandths of the GPU.
    Fractional {
        /// Shares handed out, in thousandths of the GPU.
        shares: Vec<FractionalShare>,
    },
}

/// One fractional share of a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FractionalShare {
    /// Size in thousandths of the GPU.
    pub milli: u32,
    /// Holder.
    pub occupant: Occupant,
}

/// The MIG profiles one GPU offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigGeometry {
    /// Profiles, smallest first.
    pub profiles: Vec<MigShape>,
}

/// One MIG GPU-instance profile and its placement rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigShape {
    /// Profile name, e.g. `3g.71gb`.
    pub name: MigProfileName,
    /// Compute slices (of 7).
    pub compute_slices: u8,
    /// Memory slices spanned on the placement axis (of 8).
    pub memory_slices: u8,
    /// Allowed start slots.
    pub starts: Vec<u8>,
    /// Most instances of this profile per GPU.
    pub max_count: u8,
    /// Memory of one instance in MiB.
    pub memory_mib: u64,
}

/// An existing MIG GPU instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigInstance {
    /// Its profile.
    pub profile: MigProfileName,
    /// Start slot on the memory axis.
    pub start: u8,
    /// Holder.
    pub occupant: Occupant,
}

/// A vGPU type a GPU offers through vendor-specific VFIO.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VgpuOffer {
    /// Type id written to `current_vgpu_type`.
    pub id: VgpuTypeId,
    /// Type name, e.g. `NVIDIA H200X-1-18C`.
    pub name: String,
    /// Framebuffer of one vGPU in MiB.
    pub framebuffer_mib: u64,
    /// How many vGPUs of this type fit on an empty GPU.
    pub max_instances: u32,
}

/// A typed VF.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VgpuInstance {
    /// The type written to the VF.
    pub type_id: VgpuTypeId,
    /// Holder.
    pub occupant: Occupant,
}

/// An mdev type of a parent GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MdevOffer {
    /// Type id, e.g. `nvidia-222`.
    pub type_id: MdevTypeId,
    /// Human name (`GRID T4-1Q`).
    pub name: String,
    /// Framebuffer of one device in MiB (0 when the type does not say).
    pub framebuffer_mib: u64,
    /// `available_instances` as the kernel reports it now.
    pub available: u32,
    /// Instances an empty parent offers (to size fragments).
    pub max_instances: u32,
}

/// An existing mediated device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MdevInstance {
    /// Its type.
    pub type_id: MdevTypeId,
    /// Holder.
    pub occupant: Occupant,
}

/// What kind of slice a request asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SliceRequest {
    /// A MIG GPU instance of this profile.
    Mig(MigProfileName),
    /// A vendor-VFIO vGPU of this type.
    Vgpu(VgpuTypeId),
    /// A mediated device of this type.
    Mdev(MdevTypeId),
    /// A plain SR-IOV VF.
    Vf,
    /// A whole GPU (passthrough).
    Whole,
    /// A fractional share of this many thousandths of a GPU.
    Fraction(u32),
    /// The smallest slice the host offers with at least this memory and compute.
    Generic {
        /// GPU memory in MiB.
        memory_mib: u64,
        /// Compute in thousandths of a GPU.
        compute_milli: u32,
    },
}

/// NUMA placement policy for the VM's CPUs and memory relative to its GPU(s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NumaPolicy {
    /// CPUs and memory must come from the GPUs' NUMA node.
    Required,
    /// Local when possible, elsewhere otherwise.
    #[default]
    Preferred,
    /// No locality wanted (the scheduler still takes local resources when they cost nothing).
    None,
}

/// How strongly multi-GPU requests want NVLink between their GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkPolicy {
    /// Every pair of chosen GPUs must be NVLink peers.
    Required,
    /// NVLink-connected sets win over others.
    #[default]
    Preferred,
    /// No preference.
    None,
}

/// The scope of an affinity rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AffinityScope {
    /// The same physical GPU.
    Gpu,
    /// The same NUMA node.
    Numa,
}

/// An affinity or anti-affinity rule towards another consumer's slices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AffinityRule {
    /// The other consumer.
    pub consumer: String,
    /// Where "together" is measured.
    pub scope: AffinityScope,
    /// True: a hard rule; false: a preference.
    pub required: bool,
}

/// A placement request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Who the slices are for (VM or allocation id).
    pub consumer: String,
    /// What kind of slice.
    pub slice: SliceRequest,
    /// How many slices, each on a different GPU.
    pub count: u32,
    /// NVLink between the GPUs of a multi-GPU request.
    pub nvlink: LinkPolicy,
    /// The VM's CPU demand in milli-CPUs (vCPUs × 1000).
    pub cpu_milli: u32,
    /// The VM's memory in MiB.
    pub memory_mib: u64,
    /// True when dedicated CPUs are to be pinned (the decision lists them).
    pub pin_cpus: bool,
    /// NUMA locality policy.
    pub numa: NumaPolicy,
    /// Slices to be near.
    pub affinity: Vec<AffinityRule>,
    /// Slices to stay away from.
    pub anti_affinity: Vec<AffinityRule>,
    /// Only GPUs of this vendor.
    pub vendor: Option<Vendor>,
    /// Only GPUs of one of these models (empty: any).
    pub models: Vec<String>,
}

impl Request {
    /// A one-slice request with no CPU, memory, NUMA or affinity demands.
    pub fn new(consumer: &str, slice: SliceRequest) -> Self {
        Self {
            consumer: consumer.to_owned(),
            slice,
            count: 1,
            nvlink: LinkPolicy::Preferred,
            cpu_milli: 0,
            memory_mib: 0,
            pin_cpus: false,
            numa: NumaPolicy::Preferred,
            affinity: Vec::new(),
            anti_affinity: Vec::new(),
            vendor: None,
            models: Vec::new(),
        }
    }
}

/// The slice chosen on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SliceChoice {
    /// A MIG GPU instance at a start slot.
    Mig {
        /// Profile.
        profile: MigProfileName,
        /// Start slot.
        start: u8,
    },
    /// A vendor-VFIO vGPU of this type on a free VF.
    Vgpu(VgpuTypeId),
    /// A mediated device of this type.
    Mdev(MdevTypeId),
    /// A free SR-IOV VF.
    Vf,
    /// The whole GPU.
    Whole,
    /// A fractional share.
    Fraction(u32),
}

/// One GPU of a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The GPU.
    pub gpu: PciAddress,
    /// What to create on it.
    pub slice: SliceChoice,
}
