//! Slices and allocations on the wire.

use agent::engine::{self, AllocationId, SliceId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{
    IdempotencyKey, MAX_COUNT, MAX_MEMORY_MIB, MAX_MIG_START, MAX_VCPUS, canonical, check_text,
    parse_device, parse_pci,
};
use crate::error::ApiError;

/// The pattern of an mdev type id as the API accepts it.
pub const MDEV_TYPE_PATTERN: &str = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$";
/// The pattern of a MIG profile name in canonical form.
pub const MIG_PROFILE_PATTERN: &str = r"^[1-8]g\.[1-9][0-9]{0,3}gb([+-][a-z]+(\.[a-z]+)*)*$";

/// What kind of slice, with its mechanism's parameters (the `backend` field says which).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "backend", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SliceKind {
    /// A mediated device of this type.
    Mdev {
        /// The mdev type id, e.g. `nvidia-222`.
        #[schema(
            pattern = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$",
            example = "nvidia-222"
        )]
        type_id: String,
    },
    /// An NVIDIA vendor-specific VFIO vGPU of this type, on one of the GPU's VFs.
    NvidiaVfio {
        /// The vGPU type id, e.g. 1421.
        #[schema(minimum = 1, maximum = 4294967295_u64)]
        #[serde(deserialize_with = "super::int::u32")]
        vgpu_type: u32,
        /// A MIG-backed type: the start slot of the GPU instance it takes; absent: vgpud
        /// chooses. A time-sliced type takes none.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "super::int::opt_u32"
        )]
        #[schema(minimum = 0, maximum = 7)]
        start: Option<u32>,
    },
    // Empty struct variants, not unit ones: serde ignores unknown fields next to the tag of a
    // unit variant.
    /// A plain SR-IOV VF bound to vfio-pci.
    SriovVf {},
    /// A MIG GPU instance (with one compute instance spanning it).
    Mig {
        /// The GPU-instance profile, e.g. `3g.40gb`.
        #[schema(
            pattern = r"^[1-8]g\.[1-9][0-9]{0,3}gb([+-][a-z]+(\.[a-z]+)*)*$",
            example = "3g.40gb"
        )]
        profile: String,
        /// The start slot; absent: vgpud chooses.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "super::int::opt_u32"
        )]
        #[schema(minimum = 0, maximum = 7)]
        start: Option<u32>,
    },
    /// The whole GPU bound to vfio-pci.
    Passthrough {},
}

impl SliceKind {
    /// The engine's kind, after the same checks the schema declares.
    pub fn to_engine(&self) -> Result<engine::SliceKind, ApiError> {
        Ok(match self {
            SliceKind::Mdev { type_id } => {
                if !is_mdev_type(type_id) {
                    return Err(ApiError::Unprocessable(format!(
                        "kind.type_id: {:?} does not match {MDEV_TYPE_PATTERN}",
                        short(type_id)
                    )));
                }
                engine::SliceKind::Mdev {
                    type_id: canonical("kind.type_id", type_id, "an mdev type id")?,
                }
            }
            SliceKind::NvidiaVfio { vgpu_type, start } => engine::SliceKind::NvidiaVfio {
                vgpu_type: ids::VgpuTypeId::new(*vgpu_type).ok_or_else(|| {
                    ApiError::Unprocessable("kind.vgpu_type: 0 is not a vGPU type".into())
                })?,
                start: check_start(*start)?,
            },
            SliceKind::SriovVf {} => engine::SliceKind::SriovVf,
            SliceKind::Mig { profile, start } => engine::SliceKind::Mig {
                profile: canonical("kind.profile", profile, "a MIG profile name")?,
                start: check_start(*start)?,
            },
            SliceKind::Passthrough {} => engine::SliceKind::Passthrough,
        })
    }
}

impl From<&engine::SliceKind> for SliceKind {
    fn from(k: &engine::SliceKind) -> Self {
        match k {
            engine::SliceKind::Mdev { type_id } => SliceKind::Mdev {
                type_id: type_id.to_string(),
            },
            engine::SliceKind::NvidiaVfio { vgpu_type, start } => SliceKind::NvidiaVfio {
                vgpu_type: vgpu_type.get(),
                start: *start,
            },
            engine::SliceKind::SriovVf => SliceKind::SriovVf {},
            engine::SliceKind::Mig { profile, start } => SliceKind::Mig {
                profile: profile.to_string(),
                start: *start,
            },
            engine::SliceKind::Passthrough => SliceKind::Passthrough {},
        }
    }
}

/// A MIG start slot, as the schema bounds it.
fn check_start(start: Option<u32>) -> Result<Option<u32>, ApiError> {
    match start {
        Some(s) if s > MAX_MIG_START => Err(ApiError::Unprocessable(format!(
            "kind.start: must be at most {MAX_MIG_START}"
        ))),
        _ => Ok(start),
    }
}

fn is_mdev_type(s: &str) -> bool {
    let ok = |c: char, first: bool| {
        c.is_ascii_alphanumeric() || c == '_' || c == '-' || (!first && c == '.')
    };
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    s.len() <= 128 && ok(first, true) && chars.all(|c| ok(c, false))
}

fn short(s: &str) -> String {
    s.chars().take(64).collect()
}

/// The consumer (and VM) to hand a new slice to at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Owner {
    /// The consumer (a tenant, a Nova instance id, …).
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F\u00AD\u061C\u180E\u200B-\u200F\u2028-\u202E\u2060-\u206F\uFEFF\uFFF9-\uFFFB\uDB40]+$"
    )]
    pub consumer: String,
    /// The VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F\u00AD\u061C\u180E\u200B-\u200F\u2028-\u202E\u2060-\u206F\uFEFF\uFFF9-\uFFFB\uDB40]+$"
    )]
    pub vm: Option<String>,
}

/// `POST /v1/slices`: one slice of an explicit kind on an explicit GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSliceRequest {
    /// The device: a GPU (physical function) by its canonical PCI address, or an mdev parent
    /// that is not a PCI device (the kernel's `mtty`) by its name.
    #[schema(
        pattern = r"^([0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]|[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})$",
        example = "0000:07:00.0"
    )]
    pub gpu: String,
    /// What to make.
    pub kind: SliceKind,
    /// Hand it to this consumer at once (one allocation then holds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
}

impl CreateSliceRequest {
    /// The engine's request.
    pub fn to_engine(&self) -> Result<engine::CreateSlice, ApiError> {
        let owner = match &self.owner {
            Some(o) => {
                check_text("owner.consumer", &o.consumer)?;
                if let Some(vm) = &o.vm {
                    check_text("owner.vm", vm)?;
                }
                Some(engine::OwnerRequest {
                    consumer: o.consumer.clone(),
                    vm: o.vm.clone(),
                })
            }
            None => None,
        };
        Ok(engine::CreateSlice {
            spec: engine::SliceSpec {
                gpu: parse_device("gpu", &self.gpu)?,
                kind: self.kind.to_engine()?,
            },
            owner,
        })
    }
}

/// Where a slice is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SliceState {
    /// Being made.
    Creating,
    /// Present on the host and free.
    Ready,
    /// Present and held by an allocation.
    Allocated,
    /// Being destroyed.
    Releasing,
    /// Not as it should be on the host; `reason` says why.
    Failed,
}

impl From<engine::SliceState> for SliceState {
    fn from(s: engine::SliceState) -> Self {
        match s {
            engine::SliceState::Creating => SliceState::Creating,
            engine::SliceState::Ready => SliceState::Ready,
            engine::SliceState::Allocated => SliceState::Allocated,
            engine::SliceState::Releasing => SliceState::Releasing,
            engine::SliceState::Failed => SliceState::Failed,
        }
    }
}

/// A slice vgpud owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Slice {
    /// Its id (UUID, stable across re-creations).
    #[schema(pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub id: String,
    /// The GPU.
    pub gpu: String,
    /// The mechanism: `mdev`, `nvidia-vfio`, `sriov-vf`, `mig`, `passthrough`.
    pub backend: String,
    /// The type as an allocation request names it: a MIG profile, an mdev type id, a vGPU type
    /// id, `vf` or `gpu`.
    #[serde(rename = "type")]
    pub slice_type: String,
    /// The kind, in the form `POST /v1/slices` takes.
    pub kind: SliceKind,
    /// The GPU's NUMA node, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u16>,
    /// Where it is in its life.
    pub state: SliceState,
    /// Why it is in that state, when that is not obvious.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The mdev UUID, for an mdev.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mdev_uuid: Option<String>,
    /// The PCI function handed to the VM (a VF, or the GPU itself for passthrough).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<String>,
    /// The IOMMU group (`/dev/vfio/<n>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vfio_group: Option<u32>,
    /// MIG GPU instance id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_instance_id: Option<u32>,
    /// MIG compute instance id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_instance_id: Option<u32>,
    /// The allocation holding it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocation: Option<String>,
    /// The consumer holding it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// The VM holding it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
}

/// The type string of a kind, as allocation requests spell it.
pub fn type_name(k: &engine::SliceKind) -> String {
    match k {
        engine::SliceKind::Mdev { type_id } => type_id.to_string(),
        engine::SliceKind::NvidiaVfio { vgpu_type, .. } => vgpu_type.to_string(),
        engine::SliceKind::SriovVf => "vf".to_owned(),
        engine::SliceKind::Mig { profile, .. } => profile.to_string(),
        engine::SliceKind::Passthrough => "gpu".to_owned(),
    }
}

impl From<&engine::Slice> for Slice {
    fn from(s: &engine::Slice) -> Self {
        Slice {
            id: s.id.to_string(),
            gpu: s.spec.gpu.to_string(),
            backend: s.spec.kind.backend().as_str().to_owned(),
            slice_type: type_name(&s.spec.kind),
            kind: SliceKind::from(&s.spec.kind),
            numa_node: s.numa_node.map(|n| n.0),
            state: s.state.into(),
            reason: s.reason.clone(),
            mdev_uuid: s.handles.mdev_uuid.map(|u| u.to_string()),
            pci_address: s.handles.pci_address.map(|a| a.to_string()),
            vfio_group: s.handles.vfio_group.map(|g| g.0),
            gpu_instance_id: s.handles.gpu_instance_id,
            compute_instance_id: s.handles.compute_instance_id,
            allocation: s.owner.as_ref().map(|o| o.allocation.to_string()),
            consumer: s.owner.as_ref().map(|o| o.consumer.clone()),
            vm: s.owner.as_ref().and_then(|o| o.vm.clone()),
        }
    }
}

/// What to allocate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SliceRequest {
    /// A MIG profile name (`3g.40gb`), an mdev type id (`nvidia-222`), a vendor vGPU type name
    /// (`NVIDIA H200X-1-18C`) or id, `vf`, or `gpu` for a whole GPU.
    #[serde(rename = "type")]
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F\u00AD\u061C\u180E\u200B-\u200F\u2028-\u202E\u2060-\u206F\uFEFF\uFFF9-\uFFFB\uDB40]+$",
        example = "3g.40gb"
    )]
    pub slice_type: String,
    /// How many slices: all or none.
    #[serde(default = "one", deserialize_with = "super::int::u32")]
    #[schema(minimum = 1, maximum = 64, default = 1)]
    pub count: u32,
    /// Only this GPU (canonical PCI address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"^[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$")]
    pub gpu: Option<String>,
    /// Where the VM's CPUs and memory go relative to the slices' NUMA node (default
    /// `preferred`; used when the allocation names a VM and pinning is on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_policy: Option<NumaPolicy>,
    /// The VM's vCPUs to place (default: what its libvirt domain says).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::int::opt_u32"
    )]
    #[schema(minimum = 1, maximum = 4096)]
    pub vcpus: Option<u32>,
    /// The VM's memory in MiB to place (default: what its libvirt domain says).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::int::opt_u64"
    )]
    #[schema(minimum = 1, maximum = 1073741824_u64)]
    pub memory_mib: Option<u64>,
}

/// Where a VM's CPUs and memory go relative to its slices' NUMA node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NumaPolicy {
    /// On the slices' node, or nothing is allocated.
    Required,
    /// On the slices' node when it has room, elsewhere otherwise.
    Preferred,
    /// No pinning: the VM gets its devices only.
    None,
}

impl From<NumaPolicy> for engine::NumaPolicy {
    fn from(p: NumaPolicy) -> Self {
        match p {
            NumaPolicy::Required => engine::NumaPolicy::Required,
            NumaPolicy::Preferred => engine::NumaPolicy::Preferred,
            NumaPolicy::None => engine::NumaPolicy::None,
        }
    }
}

impl From<engine::NumaPolicy> for NumaPolicy {
    fn from(p: engine::NumaPolicy) -> Self {
        match p {
            engine::NumaPolicy::Required => NumaPolicy::Required,
            engine::NumaPolicy::Preferred => NumaPolicy::Preferred,
            engine::NumaPolicy::None => NumaPolicy::None,
        }
    }
}

impl SliceRequest {
    /// The engine's request, after the checks the schema declares. `field` prefixes messages.
    pub fn to_engine(
        &self,
        field: &str,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<engine::SliceRequest, ApiError> {
        check_text(&format!("{field}type"), &self.slice_type)?;
        if !agent::engine::limits::count_in_range(self.count) {
            return Err(ApiError::Unprocessable(format!(
                "{field}count: {} is out of range 1..={MAX_COUNT}",
                self.count
            )));
        }
        if let Some(v) = self.vcpus.filter(|v| *v == 0 || *v > MAX_VCPUS) {
            return Err(ApiError::Unprocessable(format!(
                "{field}vcpus: {v} is out of range 1..={MAX_VCPUS}"
            )));
        }
        if let Some(m) = self.memory_mib.filter(|m| *m == 0 || *m > MAX_MEMORY_MIB) {
            return Err(ApiError::Unprocessable(format!(
                "{field}memory_mib: {m} is out of range 1..={MAX_MEMORY_MIB}"
            )));
        }
        let gpu = self
            .gpu
            .as_deref()
            .map(|g| parse_pci(&format!("{field}gpu"), g))
            .transpose()?;
        Ok(engine::SliceRequest {
            slice_type: self.slice_type.clone(),
            count: self.count,
            gpu,
            idempotency_key: idempotency_key.map(IdempotencyKey::into_inner),
            numa_policy: self.numa_policy.map(Into::into),
            vcpus: self.vcpus,
            memory_mib: self.memory_mib,
        })
    }
}

fn one() -> u32 {
    1
}

/// `POST /v1/allocations`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AllocationRequest {
    /// The consumer (a tenant, a Nova instance id, …).
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F\u00AD\u061C\u180E\u200B-\u200F\u2028-\u202E\u2060-\u206F\uFEFF\uFFF9-\uFFFB\uDB40]+$"
    )]
    pub consumer: String,
    /// The VM the slices are for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F\u00AD\u061C\u180E\u200B-\u200F\u2028-\u202E\u2060-\u206F\uFEFF\uFFF9-\uFFFB\uDB40]+$"
    )]
    pub vm: Option<String>,
    /// The OpenStack Placement consumer whose allocation on this host the request answers
    /// (two-level scheduling): a UUID, hyphenated. With Placement reporting on, the slices go
    /// to the GPU whose provider holds the consumer's allocation of the type's class and count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        pattern = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
    )]
    pub placement_consumer: Option<String>,
    /// What to allocate.
    pub request: SliceRequest,
}

/// A Placement consumer UUID as a request writes it: hyphenated (any case), not nil.
pub fn parse_placement_consumer(field: &str, text: &str) -> Result<uuid::Uuid, ApiError> {
    let shown: String = text.chars().take(64).collect();
    let parsed = uuid::Uuid::try_parse(text)
        .ok()
        .filter(|_| text.len() == 36)
        .ok_or_else(|| {
            ApiError::Unprocessable(format!(
                "{field}: {shown:?} is not a UUID: write it hyphenated, as Placement does (e.g. 6f3b9a3e-2c4d-4e5f-8a9b-0c1d2e3f4a5b)"
            ))
        })?;
    if parsed.is_nil() {
        return Err(ApiError::Unprocessable(format!(
            "{field}: the nil UUID names no Placement consumer"
        )));
    }
    Ok(parsed)
}

impl AllocationRequest {
    /// The engine's request; `idempotency_key` comes from the `Idempotency-Key` header (REST) or
    /// the `idempotency_key` option (D-Bus).
    pub fn to_engine(
        &self,
        idempotency_key: Option<IdempotencyKey>,
    ) -> Result<engine::AllocationRequest, ApiError> {
        check_text("consumer", &self.consumer)?;
        if let Some(vm) = &self.vm {
            check_text("vm", vm)?;
        }
        let placement_consumer = self
            .placement_consumer
            .as_deref()
            .map(|c| parse_placement_consumer("placement_consumer", c))
            .transpose()?;
        Ok(engine::AllocationRequest {
            consumer: self.consumer.clone(),
            vm: self.vm.clone(),
            request: self.request.to_engine("request.", idempotency_key)?,
            placement_consumer,
        })
    }
}

/// One slice of an allocation, with the handles a VM needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AllocatedSlice {
    /// The slice id.
    pub id: String,
    /// The GPU.
    pub gpu: String,
    /// The type, as requested (MIG profile, mdev type id, vGPU type id, `vf`, `gpu`).
    #[serde(rename = "type")]
    pub slice_type: String,
    /// The mechanism.
    pub backend: String,
    /// The GPU's NUMA node, when known.
    pub numa_node: Option<u16>,
    /// The mdev UUID, for an mdev.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mdev_uuid: Option<String>,
    /// The PCI function to hand to the VM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<String>,
    /// The IOMMU group (`/dev/vfio/<n>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vfio_group: Option<u32>,
}

impl From<&Slice> for AllocatedSlice {
    fn from(s: &Slice) -> Self {
        AllocatedSlice {
            id: s.id.clone(),
            gpu: s.gpu.clone(),
            slice_type: s.slice_type.clone(),
            backend: s.backend.clone(),
            numa_node: s.numa_node,
            mdev_uuid: s.mdev_uuid.clone(),
            pci_address: s.pci_address.clone(),
            vfio_group: s.vfio_group,
        }
    }
}

/// Slices held by a consumer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Allocation {
    /// Its id (UUID).
    #[schema(pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub id: String,
    /// The consumer.
    pub consumer: String,
    /// The VM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
    /// The requested type, as asked.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub slice_type: Option<String>,
    /// The slices it holds.
    pub slices: Vec<AllocatedSlice>,
    /// The OpenStack Placement consumer whose allocation it answers, when the request named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_consumer: Option<String>,
    /// The VM pinning applied, when the allocation names a VM and pinning is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinning: Option<VmPinning>,
    /// When it was made, seconds since the Unix epoch.
    pub created: u64,
}

impl Allocation {
    /// The wire form of an allocation, with its slices looked up in `slices`.
    pub fn new(a: &engine::Allocation, slices: &[engine::Slice]) -> Self {
        let held = a
            .slices
            .iter()
            .map(|id| match slices.iter().find(|s| s.id == *id) {
                Some(s) => AllocatedSlice::from(&Slice::from(s)),
                // The engine lists slices under an allocation only while it holds them; a
                // racing release can still remove one between the two reads.
                None => AllocatedSlice {
                    id: id.to_string(),
                    gpu: String::new(),
                    slice_type: a.slice_type.clone().unwrap_or_default(),
                    backend: String::new(),
                    numa_node: None,
                    mdev_uuid: None,
                    pci_address: None,
                    vfio_group: None,
                },
            })
            .collect();
        Allocation {
            id: a.id.to_string(),
            consumer: a.consumer.clone(),
            vm: a.vm.clone(),
            slice_type: a.slice_type.clone(),
            slices: held,
            placement_consumer: a.placement_consumer.map(|c| c.hyphenated().to_string()),
            pinning: a.pinning.as_ref().map(VmPinning::from),
            created: a.created,
        }
    }
}

/// What VM pinning did for an allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryPin>,
    /// Guest NUMA cells, when the slices sit on several host nodes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub guest_cells: Vec<GuestCellPin>,
    /// The managed part of the domain's persistent definition after the change.
    pub xml_fragment: String,
    /// What takes effect only when the guest is next started.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restart_needed: Vec<String>,
    /// Where policy `preferred` had to give up locality, why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub compromises: Vec<String>,
}

/// One vCPU pinned to one host CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct VcpuPin {
    /// The guest vCPU number.
    pub vcpu: u32,
    /// The host CPU.
    pub cpu: u32,
}

/// The memory binding applied to a VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MemoryPin {
    /// `strict`, `preferred`, `interleave` or `restrictive`.
    pub mode: String,
    /// Host NUMA nodes, as a list (`1`, `0-1`).
    pub nodes: String,
}

/// A guest NUMA cell and the host node it mirrors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GuestCellPin {
    /// Guest cell id.
    pub cell: u32,
    /// Host NUMA node.
    pub host_node: u16,
}

impl From<&engine::VmPinning> for VmPinning {
    fn from(p: &engine::VmPinning) -> Self {
        VmPinning {
            domain: p.domain.clone(),
            policy: p.policy.into(),
            vcpus: p
                .vcpus
                .iter()
                .map(|v| VcpuPin {
                    vcpu: v.vcpu,
                    cpu: v.cpu,
                })
                .collect(),
            emulator_cpus: p.emulator_cpus.clone(),
            memory: p.memory.as_ref().map(|m| MemoryPin {
                mode: m.mode.clone(),
                nodes: m.nodes.clone(),
            }),
            guest_cells: p
                .guest_cells
                .iter()
                .map(|c| GuestCellPin {
                    cell: c.cell,
                    host_node: c.host_node.0,
                })
                .collect(),
            xml_fragment: p.xml_fragment.clone(),
            restart_needed: p.restart_needed.clone(),
            compromises: p.compromises.clone(),
        }
    }
}

/// The nil UUID matches the id pattern the document declares, but the engine never makes one:
/// in a path it names nothing (404), as any other unknown id does, rather than being refused
/// as malformed.
const NIL_UUID: &str = "00000000-0000-0000-0000-000000000000";

/// Parses a slice id from a path: canonical UUID only.
pub fn slice_id(s: &str) -> Result<SliceId, ApiError> {
    if s == NIL_UUID {
        return Err(ApiError::NotFound(format!("no such slice {s}")));
    }
    s.parse::<SliceId>().map_err(ApiError::invalid)
}

/// Parses an allocation id from a path: canonical UUID only.
pub fn allocation_id(s: &str) -> Result<AllocationId, ApiError> {
    if s == NIL_UUID {
        return Err(ApiError::NotFound(format!("no such allocation {s}")));
    }
    s.parse::<AllocationId>().map_err(ApiError::invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_convert_both_ways() {
        let wire: SliceKind =
            serde_json::from_str(r#"{"backend":"mig","profile":"3g.40gb","start":4}"#).unwrap();
        let k = wire.to_engine().unwrap();
        assert_eq!(SliceKind::from(&k), wire);
        let bad: SliceKind =
            serde_json::from_str(r#"{"backend":"mdev","type_id":"../etc"}"#).unwrap();
        assert!(bad.to_engine().is_err());
        let bad: SliceKind =
            serde_json::from_str(r#"{"backend":"mig","profile":"3G.40GB"}"#).unwrap();
        assert!(bad.to_engine().is_err(), "not canonical");
        assert!(serde_json::from_str::<SliceKind>(r#"{"backend":"sriov-vf","x":1}"#).is_err());
        let vf: SliceKind = serde_json::from_str(r#"{"backend":"sriov-vf"}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&vf).unwrap(),
            r#"{"backend":"sriov-vf"}"#
        );
    }

    #[test]
    fn mdev_type_pattern() {
        assert!(is_mdev_type("nvidia-222"));
        assert!(is_mdev_type("i915-GVTg_V5_4"));
        for bad in ["", ".", "..", ".x", "a/b", "a:b", "a b"] {
            assert!(!is_mdev_type(bad), "{bad}");
        }
    }

    #[test]
    fn allocation_requests_are_checked() {
        let r: AllocationRequest =
            serde_json::from_str(r#"{"consumer":"c","request":{"type":"vf","count":65}}"#).unwrap();
        assert!(r.to_engine(None).is_err());
        let r: AllocationRequest = serde_json::from_str(
            r#"{"consumer":"c","request":{"type":"vf","gpu":"0000:07:00.0"}}"#,
        )
        .unwrap();
        let key = IdempotencyKey::parse("key", "k").unwrap();
        let e = r.to_engine(Some(key)).unwrap();
        assert_eq!(e.request.count, 1);
        assert_eq!(e.request.idempotency_key.as_deref(), Some("k"));
    }
}

/// `POST /v1/placement-score`: would this host take the request, and how well (nothing changes).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct PlacementScore {
    /// Whether the host can take the request now.
    pub feasible: bool,
    /// Higher is better; comparable between hosts running the same policy.
    pub score: f64,
    /// Expected waste the placement adds, in GPUs: capacity no common request could fill, or
    /// that its NUMA node's CPUs could not feed. Compare hosts on this first, then on
    /// `fragmentation_added`.
    pub waste_added: f64,
    /// Expected fragmentation the placement adds, in GPUs.
    pub fragmentation_added: f64,
    /// Whether the VM's CPUs and memory would sit on its slices' NUMA node.
    pub numa_local: bool,
    /// Free GPU capacity of the host after the placement, in GPUs.
    pub host_free_after: f64,
    /// The policy that scored it.
    pub policy: String,
    /// Why not, when infeasible.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where the slices would go, when feasible.
    pub placements: Vec<ScoredPlacement>,
    /// Every candidate with its score components, and why other GPUs were left out (the
    /// scheduler's own form; for people and logs).
    #[schema(value_type = Option<Object>)]
    pub explanation: Option<sched::Explanation>,
}

/// One slice of a dry-run placement.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ScoredPlacement {
    /// The GPU.
    pub gpu: String,
    /// The type of slice to create or reuse there (a MIG profile, an mdev type id, a vGPU type
    /// id, `vf`, `gpu`, or `fraction`).
    #[serde(rename = "type")]
    pub slice_type: String,
    /// The MIG start slot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<u32>,
}

impl From<&agent::service::PlacementScore> for PlacementScore {
    fn from(p: &agent::service::PlacementScore) -> Self {
        PlacementScore {
            feasible: p.feasible,
            score: finite(p.score),
            waste_added: finite(p.waste_added),
            fragmentation_added: finite(p.fragmentation_added),
            numa_local: p.numa_local,
            host_free_after: finite(p.host_free_after),
            policy: p.policy.clone(),
            reason: p.reason.clone(),
            placements: p.placements.iter().map(ScoredPlacement::from).collect(),
            // Serialized as it is: through a `serde_json::Value` it was 15 % of a score's CPU.
            explanation: p.explanation.clone(),
        }
    }
}

/// JSON has no infinities: an unbounded score is sent as the largest finite one.
fn finite(v: f64) -> f64 {
    if v.is_nan() {
        0.0
    } else {
        v.clamp(f64::MIN, f64::MAX)
    }
}

impl From<&sched::Placement> for ScoredPlacement {
    fn from(p: &sched::Placement) -> Self {
        use sched::SliceChoice as C;
        let (slice_type, start) = match &p.slice {
            C::Mig { profile, start } => (profile.to_string(), Some(u32::from(*start))),
            C::Vgpu(t) => (t.to_string(), None),
            C::Mdev(t) => (t.to_string(), None),
            C::Vf => ("vf".to_owned(), None),
            C::Whole => ("gpu".to_owned(), None),
            C::Fraction(n) => (format!("fraction:{n}"), None),
        };
        ScoredPlacement {
            gpu: p.gpu.to_string(),
            slice_type,
            start,
        }
    }
}
