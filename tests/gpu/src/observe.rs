//! What one GPU shows through the read-only traits: NVML's view (identity, MIG mode, the
//! GPU-instance profile and placement tables, instances, vGPU types, NVLink) and its PCI files.
//! The same code observes the real host and the simulated one.

use gpu::{
    ComputeInstance, ComputeInstanceProfile, DeviceInfo, GpuInstance, GpuInstanceProfile, MigMode,
    NvmlError, Placement, VgpuTypeInfo,
};
use ids::PciAddress;
use serde::{Deserialize, Serialize};

use crate::nvml_extra::{LinkObservation, NvmlExtra, Reply};
use crate::pci_files::{PciObservation, observe_pci};
use crate::reads::{ReadNvml, ReadSysfs};

/// An NVML answer: the value, or the call and return code that refused it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer<T> {
    /// The call succeeded.
    Ok(T),
    /// The call failed.
    Error {
        /// The NVML function.
        call: String,
        /// NVML's return code.
        code: u32,
        /// Its description.
        message: String,
    },
}

impl<T> Answer<T> {
    /// The value, when there is one.
    pub fn ok(&self) -> Option<&T> {
        match self {
            Answer::Ok(v) => Some(v),
            Answer::Error { .. } => None,
        }
    }
}

impl<T> From<Result<T, NvmlError>> for Answer<T> {
    fn from(r: Result<T, NvmlError>) -> Self {
        match r {
            Ok(v) => Answer::Ok(v),
            Err(e) => Answer::Error {
                call: e.call.to_owned(),
                code: e.code.0,
                message: e.code.description().to_owned(),
            },
        }
    }
}

/// A GPU-instance profile with its placement table and what is left of it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileObservation {
    /// The profile.
    pub profile: GpuInstanceProfile,
    /// Every placement it allows.
    pub placements: Answer<Vec<Placement>>,
    /// How many more fit now.
    pub remaining_capacity: Answer<u32>,
}

/// An existing GPU instance with its compute instances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceObservation {
    /// The GPU instance.
    pub gpu_instance: GpuInstance,
    /// Its compute-instance profiles.
    pub compute_profiles: Answer<Vec<ComputeInstanceProfile>>,
    /// Its compute instances.
    pub compute_instances: Answer<Vec<ComputeInstance>>,
}

/// Everything recorded about one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuObservation {
    /// NVML index.
    pub index: u32,
    /// Identity and memory.
    pub info: Answer<DeviceInfo>,
    /// MIG mode.
    pub mig_mode: Answer<MigMode>,
    /// GPU-instance profiles (empty while MIG is off: NVML lists none then).
    pub gpu_instance_profiles: Answer<Vec<ProfileObservation>>,
    /// Existing GPU instances.
    pub gpu_instances: Answer<Vec<InstanceObservation>>,
    /// vGPU types the GPU supports.
    pub vgpu_types: Answer<Vec<VgpuTypeInfo>>,
    /// vGPU types NVML says are creatable now; `None`: not modelled by the source.
    pub creatable_vgpu_types: Option<Reply<Vec<String>>>,
    /// GPUs at the far end of active NVLinks.
    pub nvlink_peers: Answer<Vec<PciAddress>>,
    /// Each NVLink; `None`: not modelled by the source.
    pub nvlinks: Option<Vec<LinkObservation>>,
    /// The PF's and VFs' files; `None` when NVML gave no PCI address.
    pub pci: Option<PciObservation>,
}

/// Where the probe reads from: NVML, the extra NVML queries, sysfs.
#[derive(Clone, Copy)]
pub struct Sources<'a> {
    /// NVML's read-only queries.
    pub nvml: ReadNvml<'a>,
    /// The queries `gpu::Nvml` lacks.
    pub extra: &'a dyn NvmlExtra,
    /// sysfs and `/proc`, read-only.
    pub sysfs: ReadSysfs<'a>,
}

/// Observes GPU `index`.
pub fn observe_gpu(src: Sources<'_>, index: u32) -> GpuObservation {
    let nvml = src.nvml;
    let info = Answer::from(nvml.device_info(index));
    let pci = info.ok().map(|i| observe_pci(src.sysfs, i.pci_address));
    GpuObservation {
        index,
        mig_mode: nvml.mig_mode(index).into(),
        gpu_instance_profiles: profiles(nvml, index),
        gpu_instances: instances(nvml, index),
        vgpu_types: nvml.supported_vgpu_types(index).into(),
        creatable_vgpu_types: src.extra.creatable_vgpu_types(index),
        nvlink_peers: nvml.nvlink_peers(index).into(),
        nvlinks: src.extra.links(index),
        info,
        pci,
    }
}

fn profiles(nvml: ReadNvml<'_>, index: u32) -> Answer<Vec<ProfileObservation>> {
    let observe = |profile: GpuInstanceProfile| ProfileObservation {
        placements: nvml
            .gpu_instance_possible_placements(index, profile.id)
            .into(),
        remaining_capacity: nvml
            .gpu_instance_remaining_capacity(index, profile.id)
            .into(),
        profile,
    };
    nvml.gpu_instance_profiles(index)
        .map(|list| list.into_iter().map(observe).collect())
        .into()
}

fn instances(nvml: ReadNvml<'_>, index: u32) -> Answer<Vec<InstanceObservation>> {
    let observe = |gi: GpuInstance| InstanceObservation {
        compute_profiles: nvml.compute_instance_profiles(index, gi.id).into(),
        compute_instances: nvml.compute_instances(index, gi.id).into(),
        gpu_instance: gi,
    };
    nvml.gpu_instances(index)
        .map(|list| list.into_iter().map(observe).collect())
        .into()
}
