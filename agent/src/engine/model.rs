//! The slice model: what the engine creates, keeps and hands out, in its serde (JSON) form.
//!
//! A [`Slice`] joins what the store remembers (id, spec, identity, owner) with what the host
//! shows now (handles, NUMA node, state). Identities are chosen once, before the first host
//! mutation, and never change: they are what makes re-creation after a reboot land on the same
//! mdev UUID, the same VF and the same MIG placement.

use std::fmt;
use std::str::FromStr;

use ids::{
    IommuGroupId, MdevParentName, MdevTypeId, MdevUuid, MigProfileName, NumaNodeId, PciAddress,
    VgpuTypeId,
};
use serde::{Deserialize, Serialize};

/// Defines a UUID-v4 identifier that only accepts its canonical (hyphenated lower-case) form.
macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(uuid::Uuid);

        impl $name {
            /// A fresh random id.
            pub fn new_random() -> Self {
                Self(uuid::Uuid::new_v4())
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                let shown: String = s.chars().take(64).collect();
                let u = uuid::Uuid::try_parse(s)
                    .map_err(|e| format!("invalid {} {shown:?}: {e}", $what))?;
                // Ids become map keys and appear in logs: one spelling only.
                if u.hyphenated().to_string() != s {
                    return Err(format!(
                        "invalid {} {shown:?}: write it as {}",
                        $what,
                        u.hyphenated()
                    ));
                }
                if u.is_nil() {
                    return Err(format!("invalid {} {shown:?}: the nil UUID", $what));
                }
                Ok(Self(u))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0.hyphenated())
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

uuid_id!(
    /// A slice's id: a UUID v4, canonical form, stable forever (across re-creations).
    SliceId,
    "slice id"
);
uuid_id!(
    /// An allocation's id.
    AllocationId,
    "allocation id"
);

/// The mechanism a slice is made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackendKind {
    /// A mediated device of a type on the GPU.
    Mdev,
    /// NVIDIA vendor-specific VFIO vGPU: a vGPU type on one of the GPU's VFs.
    NvidiaVfio,
    /// A plain SR-IOV VF bound to vfio-pci.
    SriovVf,
    /// A MIG GPU instance with one compute instance spanning it.
    Mig,
    /// The whole GPU bound to vfio-pci.
    Passthrough,
}

impl BackendKind {
    /// The kebab-case name used in JSON and messages.
    pub fn as_str(&self) -> &'static str {
        match self {
            BackendKind::Mdev => "mdev",
            BackendKind::NvidiaVfio => "nvidia-vfio",
            BackendKind::SriovVf => "sriov-vf",
            BackendKind::Mig => "mig",
            BackendKind::Passthrough => "passthrough",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of slice, with its backend's parameters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(
    tag = "backend",
    rename_all = "kebab-case",
    deny_unknown_fields,
    from = "SliceKindInput"
)]
pub enum SliceKind {
    /// An mdev of this type.
    Mdev {
        /// The type id, e.g. `nvidia-222`.
        type_id: MdevTypeId,
    },
    /// A vendor-VFIO vGPU of this type. A MIG-backed type (`NVIDIA H200X-1-18C`) also takes a
    /// GPU instance of its profile, at `start` or where the engine chooses.
    NvidiaVfio {
        /// The vGPU type id written to `current_vgpu_type`.
        vgpu_type: VgpuTypeId,
        /// The start slot of the GPU instance of a MIG-backed type; `None` lets the engine
        /// choose (a time-sliced type takes none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start: Option<u32>,
    },
    /// A VF for a VM.
    SriovVf,
    /// A MIG instance of this profile, at `start` or where the engine chooses.
    Mig {
        /// The GPU-instance profile, e.g. `3g.40gb`.
        profile: MigProfileName,
        /// The start slot; `None` lets the engine choose.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start: Option<u32>,
    },
    /// The whole GPU.
    Passthrough,
}

/// [`SliceKind`] as read: serde ignores unknown fields next to the tag of an internally tagged
/// *unit* variant even under `deny_unknown_fields`, so the parameterless kinds are read as empty
/// struct variants, which refuse them (`{"backend": "sriov-vf", "type_id": "x"}` is an error, not
/// a VF).
#[derive(Deserialize)]
#[serde(tag = "backend", rename_all = "kebab-case", deny_unknown_fields)]
enum SliceKindInput {
    Mdev {
        type_id: MdevTypeId,
    },
    NvidiaVfio {
        vgpu_type: VgpuTypeId,
        #[serde(default)]
        start: Option<u32>,
    },
    SriovVf {},
    Mig {
        profile: MigProfileName,
        #[serde(default)]
        start: Option<u32>,
    },
    Passthrough {},
}

impl From<SliceKindInput> for SliceKind {
    fn from(input: SliceKindInput) -> Self {
        match input {
            SliceKindInput::Mdev { type_id } => SliceKind::Mdev { type_id },
            SliceKindInput::NvidiaVfio { vgpu_type, start } => {
                SliceKind::NvidiaVfio { vgpu_type, start }
            }
            SliceKindInput::SriovVf {} => SliceKind::SriovVf,
            SliceKindInput::Mig { profile, start } => SliceKind::Mig { profile, start },
            SliceKindInput::Passthrough {} => SliceKind::Passthrough,
        }
    }
}

impl SliceKind {
    /// The backend that makes this kind.
    pub fn backend(&self) -> BackendKind {
        match self {
            SliceKind::Mdev { .. } => BackendKind::Mdev,
            SliceKind::NvidiaVfio { .. } => BackendKind::NvidiaVfio,
            SliceKind::SriovVf => BackendKind::SriovVf,
            SliceKind::Mig { .. } => BackendKind::Mig,
            SliceKind::Passthrough => BackendKind::Passthrough,
        }
    }

    /// Whether a slice of kind `self` satisfies a request for `wanted` (a MIG or MIG-backed
    /// vGPU request without a start matches any start).
    pub fn satisfies(&self, wanted: &SliceKind) -> bool {
        match (self, wanted) {
            (
                SliceKind::Mig { profile, start },
                SliceKind::Mig {
                    profile: p,
                    start: s,
                },
            ) => profile == p && (s.is_none() || s == start),
            (
                SliceKind::NvidiaVfio { vgpu_type, start },
                SliceKind::NvidiaVfio {
                    vgpu_type: t,
                    start: s,
                },
            ) => vgpu_type == t && (s.is_none() || s == start),
            _ => self == wanted,
        }
    }

    /// The explicit start slot a MIG or MIG-backed vGPU kind asks for.
    pub fn start(&self) -> Option<u32> {
        match self {
            SliceKind::Mig { start, .. } | SliceKind::NvidiaVfio { start, .. } => *start,
            _ => None,
        }
    }
}

impl SliceKind {
    /// The type as requests and layouts name it: the MIG profile (`1g.10gb`), the mdev type
    /// id (`nvidia-222`), the vGPU type id, `vf`, `gpu`.
    pub fn type_label(&self) -> String {
        match self {
            SliceKind::Mdev { type_id } => type_id.to_string(),
            SliceKind::NvidiaVfio { vgpu_type, .. } => vgpu_type.to_string(),
            SliceKind::SriovVf => "vf".to_owned(),
            SliceKind::Mig { profile, .. } => profile.to_string(),
            SliceKind::Passthrough => "gpu".to_owned(),
        }
    }
}

impl fmt::Display for SliceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SliceKind::Mdev { type_id } => write!(f, "mdev {type_id}"),
            SliceKind::NvidiaVfio {
                vgpu_type,
                start: Some(s),
            } => write!(f, "vGPU type {vgpu_type} in the GPU instance at slot {s}"),
            SliceKind::NvidiaVfio { vgpu_type, .. } => write!(f, "vGPU type {vgpu_type}"),
            SliceKind::SriovVf => f.write_str("VF"),
            SliceKind::Mig {
                profile,
                start: Some(s),
            } => write!(f, "MIG {profile} at slot {s}"),
            SliceKind::Mig { profile, .. } => write!(f, "MIG {profile}"),
            SliceKind::Passthrough => f.write_str("whole GPU"),
        }
    }
}

/// The device a slice is carved from: a PCI function (a GPU, an SR-IOV PF), or an mdev parent
/// that is not a PCI device (the kernel's `mtty`, `mdpy`, `mbochs` under `/sys/devices/virtual`).
///
/// Its JSON form is the bare name, so a PCI address reads and writes exactly as it did when the
/// field was a `PciAddress`: state files written before virtual parents existed still load.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceRef {
    /// A PCI function.
    Pci(PciAddress),
    /// An mdev parent by its name under `/sys/class/mdev_bus`, never a PCI address.
    MdevParent(MdevParentName),
}

impl DeviceRef {
    /// The PCI address, when the device is a PCI function.
    pub fn pci(&self) -> Option<PciAddress> {
        match self {
            DeviceRef::Pci(addr) => Some(*addr),
            DeviceRef::MdevParent(_) => None,
        }
    }

    /// The name the device has (or would have) as an mdev parent.
    pub fn mdev_parent(&self) -> MdevParentName {
        match self {
            DeviceRef::Pci(addr) => MdevParentName::from(*addr),
            DeviceRef::MdevParent(name) => name.clone(),
        }
    }
}

impl From<PciAddress> for DeviceRef {
    fn from(addr: PciAddress) -> Self {
        DeviceRef::Pci(addr)
    }
}

impl From<MdevParentName> for DeviceRef {
    fn from(name: MdevParentName) -> Self {
        // One spelling per device: a parent named by a PCI address is that PCI function.
        match name.pci_address() {
            Some(addr) => DeviceRef::Pci(addr),
            None => DeviceRef::MdevParent(name),
        }
    }
}

impl FromStr for DeviceRef {
    type Err = String;
    /// A colon means a PCI address (a misspelt one is an error, never a parent name); anything
    /// else is the name of a virtual mdev parent.
    fn from_str(s: &str) -> Result<Self, String> {
        if s.contains(':') {
            return s
                .parse::<PciAddress>()
                .map(DeviceRef::Pci)
                .map_err(|e| e.to_string());
        }
        s.parse::<MdevParentName>()
            .map(DeviceRef::from)
            .map_err(|e| e.to_string())
    }
}

impl fmt::Display for DeviceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceRef::Pci(addr) => write!(f, "{addr}"),
            DeviceRef::MdevParent(name) => write!(f, "{name}"),
        }
    }
}

impl PartialEq<PciAddress> for DeviceRef {
    fn eq(&self, other: &PciAddress) -> bool {
        self.pci() == Some(*other)
    }
}

impl PartialEq<DeviceRef> for PciAddress {
    fn eq(&self, other: &DeviceRef) -> bool {
        other == self
    }
}

impl Serialize for DeviceRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DeviceRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What to make, and on which device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SliceSpec {
    /// The GPU (physical function), or, for mdev slices only, an mdev parent that is not a PCI
    /// device.
    pub gpu: DeviceRef,
    /// What kind of slice.
    pub kind: SliceKind,
}

impl SliceSpec {
    /// The PCI function the slice is carved from; a virtual mdev parent can only carry mdevs.
    pub(crate) fn pci(&self) -> crate::engine::error::Result<PciAddress> {
        self.gpu.pci().ok_or_else(|| {
            crate::engine::error::EngineError::InvalidRequest(format!(
                "{} is not a PCI device: it can only carry mdev slices, not {}",
                self.gpu, self.kind
            ))
        })
    }
}

/// What makes a re-created slice the same slice: chosen at planning, stored, never changed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Identity {
    /// The mdev's UUID.
    Mdev {
        /// The UUID.
        uuid: MdevUuid,
    },
    /// A VF: its index under the PF (`virtfn<index>`) and its address.
    Vf {
        /// The VF index; re-enabling at least `index + 1` VFs brings the same address back.
        index: u32,
        /// The VF's PCI address.
        address: PciAddress,
    },
    /// A MIG-backed vendor-VFIO vGPU: the VF that carries the type and the placement of the GPU
    /// instance it occupies.
    MigVgpu {
        /// The VF index; re-enabling at least `index + 1` VFs brings the same address back.
        index: u32,
        /// The VF's PCI address.
        address: PciAddress,
        /// The GPU instance's start slot.
        start: u32,
        /// The GPU instance's profile (the type's).
        profile: MigProfileName,
    },
    /// A MIG GPU instance's placement.
    Mig {
        /// The start slot.
        start: u32,
        /// The profile.
        profile: MigProfileName,
    },
    /// A whole GPU, and the driver to give it back to.
    Passthrough {
        /// The driver bound before vfio-pci took it (`None`: it was unbound).
        original_driver: Option<String>,
    },
}

impl Identity {
    /// The VF a VF-based identity sits on: `(index, address)`.
    pub fn vf(&self) -> Option<(u32, PciAddress)> {
        match self {
            Identity::Vf { index, address } | Identity::MigVgpu { index, address, .. } => {
                Some((*index, *address))
            }
            _ => None,
        }
    }

    /// The GPU-instance placement an identity takes: `(start, profile)`.
    pub fn mig_slot(&self) -> Option<(u32, &MigProfileName)> {
        match self {
            Identity::Mig { start, profile } | Identity::MigVgpu { start, profile, .. } => {
                Some((*start, profile))
            }
            _ => None,
        }
    }
}

/// Host handles of a slice as the host shows them now (read, never stored).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handles {
    /// The mdev UUID, for an mdev.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mdev_uuid: Option<MdevUuid>,
    /// The PCI function handed to the VM (a VF, or the GPU itself for passthrough).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<PciAddress>,
    /// MIG GPU instance id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_instance_id: Option<u32>,
    /// MIG compute instance id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_instance_id: Option<u32>,
    /// The IOMMU group (`/dev/vfio/<n>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vfio_group: Option<IommuGroupId>,
}

/// Who holds a slice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The consumer (e.g. a Nova instance id, a tenant).
    pub consumer: String,
    /// The VM, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
    /// The allocation that holds it.
    pub allocation: AllocationId,
}

/// Where a slice is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SliceState {
    /// Being made (an intent is open).
    Creating,
    /// Present on the host and free.
    Ready,
    /// Present and held by an allocation.
    Allocated,
    /// Being destroyed (an intent is open).
    Releasing,
    /// Not as it should be on the host; `reason` says why.
    Failed,
}

/// One slice vgpud owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slice {
    /// Its id.
    pub id: SliceId,
    /// What it is.
    pub spec: SliceSpec,
    /// What makes it the same slice on re-creation.
    pub identity: Identity,
    /// Host handles now.
    pub handles: Handles,
    /// The GPU's NUMA node, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<NumaNodeId>,
    /// The holder, when allocated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// Its state.
    pub state: SliceState,
    /// Why it is in that state, when it is not the obvious one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A request to create one slice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSlice {
    /// What to make.
    pub spec: SliceSpec,
    /// Hand it to this consumer at once (one allocation holding it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<OwnerRequest>,
}

/// A consumer and VM, for a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerRequest {
    /// The consumer.
    pub consumer: String,
    /// The VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
}

/// What to allocate: a type, how many, where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SliceRequest {
    /// A MIG profile name (`3g.40gb`), an mdev type id (`nvidia-222`), a vendor vGPU type name
    /// (`NVIDIA H200X-35C`) or id, `vf` or `gpu`.
    #[serde(rename = "type")]
    pub slice_type: String,
    /// How many slices (all or none).
    #[serde(default = "one")]
    pub count: u32,
    /// Only this GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<PciAddress>,
    /// A retry with the same key (and consumer) returns the same allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// How hard the VM's CPUs and memory must sit on the slices' NUMA node; `preferred` when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_policy: Option<NumaPolicy>,
    /// The VM's vCPUs (default: what its libvirt domain says, else none to place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpus: Option<u32>,
    /// The VM's memory in MiB (default: what its libvirt domain says, else none to place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
}

impl SliceRequest {
    /// A request for `count` slices of a type, anywhere, with no VM demands.
    pub fn new(slice_type: impl Into<String>, count: u32) -> Self {
        Self {
            slice_type: slice_type.into(),
            count,
            gpu: None,
            idempotency_key: None,
            numa_policy: None,
            vcpus: None,
            memory_mib: None,
        }
    }

    /// The NUMA policy, with its default.
    pub fn numa(&self) -> NumaPolicy {
        self.numa_policy.unwrap_or_default()
    }

    /// The request as an allocation records it: the type trimmed, the NUMA policy spelt out
    /// (absent and `preferred` ask the same) and the key left out (it is recorded beside).
    pub fn recorded(&self) -> SliceRequest {
        SliceRequest {
            slice_type: self.slice_type.trim().to_owned(),
            idempotency_key: None,
            numa_policy: Some(self.numa()),
            ..self.clone()
        }
    }
}

/// Where a VM's CPUs and memory go relative to its slices' NUMA node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NumaPolicy {
    /// On the slices' node, or the request is refused (nothing allocated).
    Required,
    /// On the slices' node when it has room, elsewhere otherwise (the pinning says so).
    #[default]
    Preferred,
    /// No pinning: the VM's devices only.
    None,
}

impl NumaPolicy {
    /// The snake-case name used in JSON and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            NumaPolicy::Required => "required",
            NumaPolicy::Preferred => "preferred",
            NumaPolicy::None => "none",
        }
    }
}

/// One vCPU pinned to one host CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VcpuPin {
    /// The guest vCPU number.
    pub vcpu: u32,
    /// The host CPU.
    pub cpu: u32,
}

/// The memory binding applied to a VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPin {
    /// libvirt's `<numatune><memory mode>`: `strict`, `preferred`, `interleave`, `restrictive`.
    pub mode: String,
    /// Host NUMA nodes, as a list (`1`, `0-1`).
    pub nodes: String,
}

/// A guest NUMA cell and the host node it mirrors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestCellPin {
    /// Guest cell id.
    pub cell: u32,
    /// Host NUMA node.
    pub host_node: NumaNodeId,
}

/// What VM pinning did for an allocation (`pinning` in the allocation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmPinning {
    /// The libvirt domain.
    pub domain: String,
    /// The NUMA policy it was planned under.
    pub policy: NumaPolicy,
    /// vCPU → host CPU (empty under policy `none`).
    pub vcpus: Vec<VcpuPin>,
    /// CPUs of the emulator threads, as a list (`8-11`); empty when unpinned.
    pub emulator_cpus: String,
    /// The memory binding, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryPin>,
    /// Guest NUMA cells, when the slices sit on several host nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guest_cells: Vec<GuestCellPin>,
    /// The managed part of the domain's persistent definition after the change.
    pub xml_fragment: String,
    /// What takes effect only when the guest is next started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restart_needed: Vec<String>,
    /// Where policy `preferred` had to give up locality, why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compromises: Vec<String>,
}

fn one() -> u32 {
    1
}

/// A request to allocate slices to a consumer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllocationRequest {
    /// The consumer.
    pub consumer: String,
    /// The VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
    /// What to allocate.
    pub request: SliceRequest,
    /// The OpenStack Placement consumer whose allocation this request answers (two-level
    /// scheduling): the service checks Placement holds a matching allocation on this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_consumer: Option<uuid::Uuid>,
}

/// Slices held by a consumer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// Its id.
    pub id: AllocationId,
    /// The consumer.
    pub consumer: String,
    /// The VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
    /// The slices it holds.
    pub slices: Vec<SliceId>,
    /// The requested type, as asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice_type: Option<String>,
    /// The idempotency key it was made with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// When it was made, seconds since the Unix epoch.
    pub created: u64,
    /// The VM pinning applied for it (filled in by the service; the engine never stores it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinning: Option<VmPinning>,
    /// The request it answered (type trimmed, key left out), so that a retry with its
    /// idempotency key can be told from another request reusing the key. Absent for
    /// allocations made by `create` or before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<SliceRequest>,
    /// The OpenStack Placement consumer whose allocation this one answers, when the
    /// request named one (two-level scheduling). Slices held without one are reported to
    /// Placement as reserved: Placement cannot see who holds them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_consumer: Option<uuid::Uuid>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_forms_round_trip() {
        let req: CreateSlice = serde_json::from_str(
            r#"{"spec": {"gpu": "0000:07:00.0", "kind": {"backend": "mig", "profile": "3g.40gb", "start": 4}}}"#,
        )
        .unwrap();
        assert_eq!(
            req.spec.kind,
            SliceKind::Mig {
                profile: "3g.40gb".parse().unwrap(),
                start: Some(4)
            }
        );
        for kind in [
            SliceKind::SriovVf,
            SliceKind::Passthrough,
            SliceKind::Mdev {
                type_id: "nvidia-222".parse().unwrap(),
            },
            SliceKind::NvidiaVfio {
                vgpu_type: "1421".parse().unwrap(),
                start: None,
            },
            SliceKind::NvidiaVfio {
                vgpu_type: "1414".parse().unwrap(),
                start: Some(3),
            },
        ] {
            let text = serde_json::to_string(&kind).unwrap();
            assert_eq!(
                serde_json::from_str::<SliceKind>(&text).unwrap(),
                kind,
                "{text}"
            );
        }
        let vf: SliceKind = serde_json::from_str(r#"{"backend": "sriov-vf"}"#).unwrap();
        assert_eq!(vf, SliceKind::SriovVf);
        assert!(
            serde_json::from_str::<SliceKind>(r#"{"backend": "mdev", "type_id": "../x"}"#).is_err()
        );
        assert!(serde_json::from_str::<SliceKind>(r#"{"backend": "warp"}"#).is_err());
        for stray in [
            r#"{"backend": "sriov-vf", "type_id": "nvidia-222"}"#,
            r#"{"backend": "passthrough", "start": 0}"#,
            r#"{"backend": "mig", "profile": "3g.40gb", "placement": 0}"#,
        ] {
            assert!(
                serde_json::from_str::<SliceKind>(stray).is_err(),
                "{stray} must be refused"
            );
        }
        let req: SliceRequest = serde_json::from_str(r#"{"type": "vf"}"#).unwrap();
        assert_eq!(req.count, 1);
        let id = SliceId::new_random();
        let text = serde_json::to_string(&id).unwrap();
        assert_eq!(serde_json::from_str::<SliceId>(&text).unwrap(), id);
        assert!(serde_json::from_str::<SliceId>(&text.to_uppercase()).is_err());
        assert!(
            "00000000-0000-0000-0000-000000000000"
                .parse::<SliceId>()
                .is_err()
        );
    }
}
