//! [`SimAmd`]: the model seen through the [`gpu::AmdSmi`] trait.
//!
//! AMD SMI sees AMD physical functions that are present and bound to their driver. On a PF
//! bound to GIM it is GIM's host library: VF counts and partitions through [`crate::gim`] (errno
//! mapped to AMD SMI statuses as GIM's ioctl handlers do: `EINVAL` and `ERANGE` → `INVAL`, `EBUSY` → `BUSY`, `ENOENT` →
//! `NOT_SUPPORTED`). On a PF bound
//! to amdgpu it is the ROCm library, which has no VF calls (`NOT_SUPPORTED`). Partition
//! changes: `INVAL` for a mode the GPU does not offer, `BUSY` while VFs are enabled; a memory
//! mode under amdgpu waits for a driver reload ([`kernel::set_partition`]).

use std::time::Duration;

use gpu::{AmdError, AmdGpuInfo, AmdResult, AmdSmi, AmdStatus, PartitionState, VfCount};
use ids::{PciAddress, PciVendorId};

use crate::fault::{Access, FaultAction};
use crate::gim;
use crate::host::SimHost;
use crate::kernel::{self, PartitionAxis};
use crate::profile::GpuModel;
use crate::state::{Hw, State};
use crate::util::derived_uuid;

/// The simulated host's AMD SMI.
#[derive(Debug, Clone)]
pub struct SimAmd {
    host: SimHost,
}

const GPUS: &str = "amdsmi_get_processor_handles";
const GET_NUM_VF: &str = "amdsmi_get_num_vf";
const SET_NUM_VF: &str = "amdsmi_set_num_vf";
const GET_PARTITION: &str = "amdsmi_get_gpu_compute_partition";
const SET_COMPUTE: &str = "amdsmi_set_gpu_compute_partition";
const SET_MEMORY: &str = "amdsmi_set_gpu_memory_partition";
const GET_XGMI: &str = "amdsmi_get_xgmi_info";

fn visible(state: &State, hw: &Hw) -> Vec<PciAddress> {
    state.library_visible_gpus(hw, PciVendorId::AMD)
}

fn amd_gpu<'a>(state: &'a State, hw: &Hw, gpu: PciAddress) -> Result<&'a GpuModel, AmdStatus> {
    if !visible(state, hw).contains(&gpu) {
        return Err(AmdStatus::NOT_FOUND);
    }
    state.gpu(gpu).map(|(_, m)| m).ok_or(AmdStatus::NOT_FOUND)
}

/// VF counts are GIM's: the ROCm library has no VF calls (its `amdsmi_get_num_vf` exists only
/// in GIM's host library, amd/MxGPU-Virtualization smi-lib) and amdgpu enables no VFs on a host.
fn on_gim(state: &State, gpu: PciAddress) -> Result<(), AmdStatus> {
    gim::on_gim(state, gpu)
        .then_some(())
        .ok_or(AmdStatus::NOT_SUPPORTED)
}

fn status_of(errno: i32) -> AmdStatus {
    match errno {
        libc::EINVAL | libc::ERANGE => AmdStatus::INVAL,
        libc::EBUSY => AmdStatus::BUSY,
        libc::ENOENT => AmdStatus::NOT_SUPPORTED,
        libc::ENODEV => AmdStatus::NOT_FOUND,
        _ => AmdStatus::UNKNOWN,
    }
}

impl SimAmd {
    pub(crate) fn new(host: SimHost) -> Self {
        Self { host }
    }

    /// Applies a matching fault; `Some(n)` for a `partial:n` fault.
    fn fault(&self, call: &'static str, gpu: Option<PciAddress>) -> AmdResult<Option<u32>> {
        let access = Access::Amd { call, gpu };
        let unknown = |_| AmdError::new(call, AmdStatus::UNKNOWN);
        let faulty = self
            .host
            .store()
            .read(|v| v.state.has_fault(&access))
            .map_err(unknown)?;
        if !faulty {
            return Ok(None);
        }
        match self
            .host
            .change(|st, _| Ok(st.take_fault(&access)))
            .map_err(unknown)?
        {
            Some((FaultAction::AmdStatus(status), _)) => {
                Err(AmdError::new(call, AmdStatus(status)))
            }
            Some((FaultAction::Hang { millis }, _)) => {
                std::thread::sleep(Duration::from_millis(millis));
                Ok(None)
            }
            Some((FaultAction::PartialVfs { enabled }, _)) => Ok(Some(enabled)),
            _ => Ok(None),
        }
    }

    fn look<T>(
        &self,
        call: &'static str,
        gpu: Option<PciAddress>,
        f: impl FnOnce(&State, &Hw) -> Result<T, AmdStatus>,
    ) -> AmdResult<T> {
        self.fault(call, gpu)?;
        self.host
            .store()
            .read(|v| f(v.state, v.hw))
            .map_err(|_| AmdError::new(call, AmdStatus::UNKNOWN))?
            .map_err(|s| AmdError::new(call, s))
    }

    fn act(
        &self,
        call: &'static str,
        gpu: PciAddress,
        f: impl FnOnce(&mut State, &Hw, Option<u32>) -> Result<(), AmdStatus>,
    ) -> AmdResult<()> {
        let partial = self.fault(call, Some(gpu))?;
        self.host
            .store()
            .write(|st, hw| f(st, hw, partial))
            .map_err(|_| AmdError::new(call, AmdStatus::UNKNOWN))?
            .map_err(|s| AmdError::new(call, s))
    }

    fn set_partition(
        &self,
        call: &'static str,
        gpu: PciAddress,
        axis: PartitionAxis,
        mode: &str,
    ) -> AmdResult<()> {
        self.act(call, gpu, |st, hw, _| {
            let model = amd_gpu(st, hw, gpu)?;
            model.amd.as_ref().ok_or(AmdStatus::NOT_SUPPORTED)?;
            if gim::on_gim(st, gpu) {
                return gim::set_partition(st, gpu, axis, mode).map_err(status_of);
            }
            // The ROCm library writes amdgpu's sysfs files.
            kernel::set_partition(st, gpu, axis, mode).map_err(status_of)
        })
    }
}

impl AmdSmi for SimAmd {
    fn gpus(&self) -> AmdResult<Vec<AmdGpuInfo>> {
        self.look(GPUS, None, |st, hw| {
            Ok(visible(st, hw)
                .into_iter()
                .filter_map(|addr| {
                    let (spec, model) = st.gpu(addr)?;
                    let uuid = spec.uuid.clone().unwrap_or_else(|| {
                        derived_uuid(&format!("{}/{addr}", st.profile.hostname))
                    });
                    Some(AmdGpuInfo {
                        pci_address: addr,
                        uuid: Some(uuid),
                        name: model.name.clone(),
                        memory_total_mib: model.memory_mib,
                    })
                })
                .collect())
        })
    }

    fn num_vf(&self, gpu: PciAddress) -> AmdResult<VfCount> {
        self.look(GET_NUM_VF, Some(gpu), |st, hw| {
            let model = amd_gpu(st, hw, gpu)?;
            on_gim(st, gpu)?;
            let sriov = model.sriov.as_ref().ok_or(AmdStatus::NOT_SUPPORTED)?;
            // GIM reports the firmware's TotalVFs as supported, whatever the compute mode.
            Ok(VfCount {
                enabled: st.vfs_of(gpu).len() as u32,
                supported: sriov.total_vfs,
            })
        })
    }

    fn set_num_vf(&self, gpu: PciAddress, count: u32) -> AmdResult<()> {
        self.act(SET_NUM_VF, gpu, |st, hw, partial| {
            amd_gpu(st, hw, gpu)?
                .sriov
                .as_ref()
                .ok_or(AmdStatus::NOT_SUPPORTED)?;
            on_gim(st, gpu)?;
            gim::set_num_vfs(st, hw, gpu, count, partial).map_err(status_of)
        })
    }

    fn partition(&self, gpu: PciAddress) -> AmdResult<PartitionState> {
        self.look(GET_PARTITION, Some(gpu), |st, hw| {
            let amd = amd_gpu(st, hw, gpu)?
                .amd
                .as_ref()
                .ok_or(AmdStatus::NOT_SUPPORTED)?;
            let g = st.gpus.get(&gpu).ok_or(AmdStatus::NOT_FOUND)?;
            let on_gim = gim::on_gim(st, gpu);
            let compute_available = if on_gim {
                gim::compute_available(st, gpu).map_err(status_of)?
            } else {
                amd.compute_modes.clone()
            };
            let compute_vf_counts = if on_gim {
                amd.vfs_per_mode.clone()
            } else {
                Default::default()
            };
            Ok(PartitionState {
                compute: g
                    .compute_partition
                    .clone()
                    .unwrap_or_else(|| amd.compute.clone()),
                compute_available,
                memory: g
                    .memory_partition
                    .clone()
                    .unwrap_or_else(|| amd.memory.clone()),
                memory_available: amd.memory_modes.clone(),
                compute_vf_counts,
            })
        })
    }

    fn set_compute_partition(&self, gpu: PciAddress, mode: &str) -> AmdResult<()> {
        self.set_partition(SET_COMPUTE, gpu, PartitionAxis::Compute, mode)
    }

    fn set_memory_partition(&self, gpu: PciAddress, mode: &str) -> AmdResult<()> {
        self.set_partition(SET_MEMORY, gpu, PartitionAxis::Memory, mode)
    }

    fn xgmi_hive(&self, gpu: PciAddress) -> AmdResult<Option<u64>> {
        self.look(GET_XGMI, Some(gpu), |st, hw| {
            amd_gpu(st, hw, gpu)?;
            Ok(st.gpu(gpu).and_then(|(spec, _)| spec.xgmi_hive))
        })
    }
}
