//! [`SimNvml`]: the model seen through the [`gpu::Nvml`] trait.
//!
//! NVML sees the NVIDIA physical functions that are present and bound to the NVIDIA driver, in
//! PCI address order (a GPU handed to vfio-pci or hot-removed disappears and the indexes after
//! it shift, as on a real host; VFs are never NVML devices). Return codes follow NVML's
//! documentation: MIG calls on a GPU without MIG, or with MIG mode off, return `NOT_SUPPORTED`;
//! an unknown profile or a start slot the profile does not allow `INVALID_ARGUMENT`; an occupied
//! placement or too few free slices `INSUFFICIENT_RESOURCES`; an unknown instance `NOT_FOUND`;
//! destroying an instance with compute instances, processes or a vGPU `IN_USE`. A MIG mode
//! change reports its activation status apart from the return code (`State::set_mig_mode_call`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use gpu::nvml::{NvlinkFabric, fabric_peers};
use gpu::{
    ComputeInstance, ComputeInstanceProfile, DeviceInfo, GpuInstance, GpuInstanceProfile,
    MigActivation, MigMemory, MigMode, Nvml, NvmlCode, NvmlError, NvmlResult, Placement, Telemetry,
    VgpuTypeInfo, VgpuUsage, XidEvent,
};
use ids::{PciAddress, PciVendorId, VgpuTypeId};

use crate::fault::{Access, FaultAction};
use crate::host::SimHost;
use crate::mig::{self, MigFamily};
use crate::profile::GpuModel;
use crate::state::{CiState, GiState, GpuState, Hw, State};
use crate::store::Change;
use crate::telemetry;
use crate::util::derived_uuid;
use crate::vgpu_usage as vgpu;

/// How often a waiter for Xid events looks at the host's queue. The driver wakes its waiter
/// when the event happens; the model, whose events may be injected by another process, looks
/// this often instead, so an event is seen up to this late. At 20 ms the looks were most of an
/// idle daemon's CPU (8 GPUs: 1.0 % of a core in all against 0.5 % at 200 ms, BENCHMARKS.md §6).
const XID_POLL: Duration = Duration::from_millis(200);

/// The simulated host's NVML.
#[derive(Debug, Clone)]
pub struct SimNvml {
    host: SimHost,
}

/// NVML function names per trait method; faults name any of them.
mod calls {
    pub const DRIVER_VERSION: &[&str] = &["nvmlSystemGetDriverVersion"];
    pub const COUNT: &[&str] = &["nvmlDeviceGetCount_v2"];
    pub const INFO: &[&str] = &[
        "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetPciInfo_v3",
        "nvmlDeviceGetMemoryInfo",
    ];
    pub const MIG_MODE: &[&str] = &["nvmlDeviceGetMigMode"];
    pub const SET_MIG_MODE: &[&str] = &["nvmlDeviceSetMigMode"];
    pub const GI_PROFILES: &[&str] = &["nvmlDeviceGetGpuInstanceProfileInfoV"];
    pub const PLACEMENTS: &[&str] = &["nvmlDeviceGetGpuInstancePossiblePlacements_v2"];
    pub const CAPACITY: &[&str] = &["nvmlDeviceGetGpuInstanceRemainingCapacity"];
    pub const GIS: &[&str] = &["nvmlDeviceGetGpuInstances"];
    pub const CREATE_GI: &[&str] = &["nvmlDeviceCreateGpuInstanceWithPlacement"];
    pub const DESTROY_GI: &[&str] = &["nvmlGpuInstanceDestroy"];
    pub const CI_PROFILES: &[&str] = &["nvmlGpuInstanceGetComputeInstanceProfileInfoV"];
    pub const CIS: &[&str] = &["nvmlGpuInstanceGetComputeInstances"];
    pub const CREATE_CI: &[&str] = &["nvmlGpuInstanceCreateComputeInstance"];
    pub const DESTROY_CI: &[&str] = &["nvmlComputeInstanceDestroy"];
    pub const TELEMETRY: &[&str] = &[
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetCurrPcieLinkGeneration",
        "nvmlDeviceGetCurrPcieLinkWidth",
    ];
    pub const VGPU_USAGE: &[&str] = &[
        "nvmlDeviceGetActiveVgpus",
        "nvmlVgpuInstanceGetMdevUUID",
        "nvmlVgpuInstanceGetGpuInstanceId",
        "nvmlVgpuInstanceGetFbUsage",
        "nvmlDeviceGetVgpuUtilization",
    ];
    pub const MIG_MEMORY: &[&str] = &[
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetMemoryInfo",
    ];
    pub const VGPU_TYPES: &[&str] = &["nvmlDeviceGetSupportedVgpus"];
    pub const NVLINK: &[&str] = &[
        "nvmlDeviceGetNvLinkRemotePciInfo_v2",
        "nvmlDeviceGetNvLinkRemoteDeviceType",
        "nvmlDeviceGetGpuFabricInfo",
    ];
    pub const XID: &[&str] = &["nvmlEventSetWait_v2"];
    pub const HEALTH: &[&str] = &[
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetRetiredPages_v2",
        "nvmlDeviceGetRetiredPagesPendingStatus",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetCurrentClocksEventReasons",
    ];
}

/// The access an NVML call is (the GPU its index names) and whether a fault is armed for it.
fn armed(
    state: &State,
    hw: &Hw,
    calls: &'static [&'static str],
    index: Option<u32>,
) -> (Access<'static>, bool) {
    let gpu = index.and_then(|i| visible_gpus(state, hw).get(i as usize).copied());
    let access = Access::Nvml { calls, gpu };
    let faulty = state.has_fault(&access);
    (access, faulty)
}

/// The NVIDIA GPUs NVML sees, in index order.
pub(crate) fn visible_gpus(state: &State, hw: &Hw) -> Vec<PciAddress> {
    // NVML numbers devices in PCI address order, whatever order the profile lists them in.
    let mut gpus = state.library_visible_gpus(hw, PciVendorId::NVIDIA);
    gpus.sort();
    gpus
}

/// The UUID NVML reports for a GPU.
pub(crate) fn gpu_uuid(state: &State, gpu: PciAddress) -> String {
    match state.gpu(gpu).and_then(|(s, _)| s.uuid.clone()) {
        Some(u) => u,
        None => format!(
            "GPU-{}",
            derived_uuid(&format!("{}/{gpu}", state.profile.hostname))
        ),
    }
}

fn nvidia_driver_loaded(state: &State) -> bool {
    state
        .profile
        .models
        .values()
        .any(|m| m.vendor == PciVendorId::NVIDIA)
}

/// One GPU as an operation sees it.
struct Gpu<'a> {
    addr: PciAddress,
    model: &'a GpuModel,
}

fn gpu_at<'a>(state: &'a State, hw: &Hw, index: u32) -> Result<Gpu<'a>, NvmlCode> {
    if !nvidia_driver_loaded(state) {
        return Err(NvmlCode::DRIVER_NOT_LOADED);
    }
    let addr = *visible_gpus(state, hw)
        .get(index as usize)
        .ok_or(NvmlCode::INVALID_ARGUMENT)?;
    let (_, model) = state.gpu(addr).ok_or(NvmlCode::INVALID_ARGUMENT)?;
    Ok(Gpu { addr, model })
}

/// The MIG family of a GPU with MIG mode on.
fn mig_on(state: &State, gpu: &Gpu<'_>) -> Result<MigFamily, NvmlCode> {
    let family = gpu.model.mig.ok_or(NvmlCode::NOT_SUPPORTED)?;
    let on = state.gpus.get(&gpu.addr).is_some_and(|g| g.mig_current);
    if on {
        Ok(family)
    } else {
        Err(NvmlCode::NOT_SUPPORTED)
    }
}

/// Where a GPU's NVLinks lead: on an NVSwitch host every link of an NVLink GPU ends at a switch;
/// a GPU with fabric info is registered on the host's one fabric (cluster UUID all zero, clique 0,
/// as on a single HGX baseboard), one without it just has switch links.
fn fabric_of(state: &State, addr: PciAddress) -> NvlinkFabric {
    match state.gpu(addr) {
        Some((_, m)) if state.profile.nvswitch && m.nvlink && m.fabric_info => {
            NvlinkFabric::Registered {
                cluster_uuid: [0; 16],
                clique_id: 0,
            }
        }
        Some((_, m)) if state.profile.nvswitch && m.nvlink => NvlinkFabric::HostSwitches,
        _ => NvlinkFabric::NoSwitch,
    }
}

fn gpu_state_mut(state: &mut State, addr: PciAddress) -> Result<&mut GpuState, NvmlCode> {
    state.gpus.get_mut(&addr).ok_or(NvmlCode::UNKNOWN)
}

fn gi_of(state: &State, addr: PciAddress, id: u32) -> Result<&GiState, NvmlCode> {
    state
        .gpus
        .get(&addr)
        .and_then(|g| g.gis.iter().find(|x| x.id == id))
        .ok_or(NvmlCode::NOT_FOUND)
}

/// Framebuffer in use: the driver's reservation plus MIG instances, vGPUs and mdevs.
fn fb_used(state: &State, addr: PciAddress, model: &GpuModel) -> u64 {
    let reserved = (model.memory_mib / 100).min(600);
    let gis: u64 = state
        .gpus
        .get(&addr)
        .map_or(0, |g| g.gis.iter().map(|x| x.memory_mib).sum());
    let vgpus: u64 = state
        .vfs_of(addr)
        .iter()
        .filter_map(|(_, p)| p.vf.as_ref()?.vgpu_type)
        .filter_map(|id| model.vgpu_types.iter().find(|t| t.id == id))
        .filter(|t| t.mig_profile.is_none())
        .map(|t| t.framebuffer_mib)
        .sum();
    let mdevs: u64 = state
        .mdevs
        .values()
        .filter(|m| m.parent.pci_address() == Some(addr))
        .filter_map(|m| model.mdev_types.iter().find(|t| t.id == m.type_id))
        .map(|t| t.framebuffer_mib)
        .sum();
    reserved + gis + vgpus + mdevs
}

fn mdev_class(name: &str) -> &'static str {
    match name.chars().last() {
        Some('Q') => "Quadro",
        Some('B') => "NVS",
        Some('C') => "Compute",
        Some('A') => "GRID",
        _ => "Unknown",
    }
}

impl SimNvml {
    pub(crate) fn new(host: SimHost) -> Self {
        Self { host }
    }

    fn err(calls: &'static [&'static str], code: NvmlCode) -> NvmlError {
        NvmlError::new(calls.first().copied().unwrap_or("nvml"), code)
    }

    /// Applies a matching fault (after resolving the GPU the call is about).
    fn fault(&self, calls: &'static [&'static str], index: Option<u32>) -> NvmlResult<()> {
        let unknown = |_| Self::err(calls, NvmlCode::UNKNOWN);
        // One look at the store for both (each look checks the state file: a `stat`).
        let (access, faulty) = self
            .host
            .store()
            .read(|v| armed(v.state, v.hw, calls, index))
            .map_err(unknown)?;
        if !faulty {
            return Ok(());
        }
        let hit = self
            .host
            .change(|st, _| Ok(st.take_fault(&access)))
            .map_err(unknown)?;
        match hit {
            Some((FaultAction::NvmlCode(code), call)) => Err(NvmlError::new(call, NvmlCode(code))),
            Some((FaultAction::Hang { millis }, _)) => {
                std::thread::sleep(Duration::from_millis(millis));
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A call that only looks.
    fn look<T>(
        &self,
        calls: &'static [&'static str],
        index: Option<u32>,
        f: impl Fn(&State, &Hw) -> Result<T, NvmlCode>,
    ) -> NvmlResult<T> {
        // Without a fault armed for it (the usual case), the call is answered in the same look
        // at the store as the fault check.
        let unfaulted = (self.host.store())
            .read(|v| (!armed(v.state, v.hw, calls, index).1).then(|| f(v.state, v.hw)));
        if let Ok(Some(answer)) = unfaulted {
            return answer.map_err(|c| Self::err(calls, c));
        }
        self.fault(calls, index)?;
        Self::answer(calls, self.host.store().read(|v| f(v.state, v.hw)))
    }

    /// A call that changes the GPU, a change of this kind; a failure changes nothing.
    fn act<T>(
        &self,
        kind: Change,
        calls: &'static [&'static str],
        index: u32,
        f: impl FnOnce(&mut State, &Hw) -> Result<T, NvmlCode>,
    ) -> NvmlResult<T> {
        self.fault(calls, Some(index))?;
        Self::answer(calls, self.host.store().change(kind, f))
    }

    /// Takes the oldest queued Xid event, if one is still there.
    fn take_xid(&self) -> NvmlResult<Option<XidEvent>> {
        let taken = self.host.store().write(|st, _| {
            Ok::<_, NvmlCode>(st.xids.pop_front().map(|x| XidEvent {
                gpu_uuid: gpu_uuid(st, x.gpu),
                xid: x.xid,
            }))
        });
        Self::answer(calls::XID, taken)
    }

    /// A store call's outcome as NVML answers: a store that failed is `UNKNOWN`.
    fn answer<T>(
        calls: &'static [&'static str],
        out: Result<Result<T, NvmlCode>, crate::SimError>,
    ) -> NvmlResult<T> {
        out.map_err(|_| Self::err(calls, NvmlCode::UNKNOWN))?
            .map_err(|c| Self::err(calls, c))
    }
}

impl Nvml for SimNvml {
    fn driver_version(&self) -> NvmlResult<String> {
        self.look(calls::DRIVER_VERSION, None, |st, _| {
            if !nvidia_driver_loaded(st) {
                return Err(NvmlCode::DRIVER_NOT_LOADED);
            }
            Ok(st.profile.nvidia_driver_version.clone())
        })
    }

    fn device_count(&self) -> NvmlResult<u32> {
        self.look(calls::COUNT, None, |st, hw| {
            if !nvidia_driver_loaded(st) {
                return Err(NvmlCode::DRIVER_NOT_LOADED);
            }
            Ok(visible_gpus(st, hw).len() as u32)
        })
    }

    fn device_info(&self, index: u32) -> NvmlResult<DeviceInfo> {
        self.look(calls::INFO, Some(index), |st, hw| {
            let g = gpu_at(st, hw, index)?;
            let numa_node = hw
                .devices
                .get(&g.addr)
                .and_then(|d| d.near_node)
                .map(ids::NumaNodeId);
            Ok(DeviceInfo {
                index,
                uuid: gpu_uuid(st, g.addr),
                name: g.model.name.clone(),
                pci_address: g.addr,
                memory_total_mib: g.model.memory_mib,
                numa_node,
            })
        })
    }

    fn mig_mode(&self, index: u32) -> NvmlResult<MigMode> {
        self.look(calls::MIG_MODE, Some(index), |st, hw| {
            let g = gpu_at(st, hw, index)?;
            g.model.mig.ok_or(NvmlCode::NOT_SUPPORTED)?;
            let s = st.gpus.get(&g.addr).ok_or(NvmlCode::UNKNOWN)?;
            Ok(MigMode {
                current: s.mig_current,
                pending: s.mig_pending,
            })
        })
    }

    fn set_mig_mode(&self, index: u32, enabled: bool) -> NvmlResult<MigActivation> {
        self.act(Change::Shown, calls::SET_MIG_MODE, index, |st, hw| {
            let addr = gpu_at(st, hw, index)?.addr;
            st.set_mig_mode_call(addr, enabled)
        })
    }

    fn gpu_instance_profiles(&self, index: u32) -> NvmlResult<Vec<GpuInstanceProfile>> {
        self.look(calls::GI_PROFILES, Some(index), |st, hw| {
            let g = gpu_at(st, hw, index)?;
            Ok(mig_on(st, &g)?
                .profiles()
                .into_iter()
                .map(|p| p.info)
                .collect())
        })
    }

    fn gpu_instance_possible_placements(
        &self,
        index: u32,
        profile_id: u32,
    ) -> NvmlResult<Vec<Placement>> {
        self.look(calls::PLACEMENTS, Some(index), |st, hw| {
            let g = gpu_at(st, hw, index)?;
            let p = mig_on(st, &g)?
                .profile(profile_id)
                .ok_or(NvmlCode::INVALID_ARGUMENT)?;
            Ok(p.placements())
        })
    }

    fn gpu_instance_remaining_capacity(&self, index: u32, profile_id: u32) -> NvmlResult<u32> {
        self.look(calls::CAPACITY, Some(index), |st, hw| {
            let g = gpu_at(st, hw, index)?;
            let p = mig_on(st, &g)?
                .profile(profile_id)
                .ok_or(NvmlCode::INVALID_ARGUMENT)?;
            let gis = st
                .gpus
                .get(&g.addr)
                .map(|s| s.gis.as_slice())
                .unwrap_or_default();
            Ok(mig::remaining_capacity(&p, gis))
        })
    }

    fn gpu_instances(&self, index: u32) -> NvmlResult<Vec<GpuInstance>> {
        self.look(calls::GIS, Some(index), |st, hw| {
            let g = gpu_at(st, hw, index)?;
            mig_on(st, &g)?;
            let mut out: Vec<GpuInstance> = st
                .gpus
                .get(&g.addr)
                .map(|s| {
                    s.gis
                        .iter()
                        .map(|x| GpuInstance {
                            id: x.id,
                            profile_id: x.profile_id,
                            placement: x.placement(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            out.sort_by_key(|x| x.id);
            Ok(out)
        })
    }

    fn create_gpu_instance(
        &self,
        index: u32,
        profile_id: u32,
        placement: Placement,
    ) -> NvmlResult<GpuInstance> {
        crate::latency::pause(crate::latency::DeviceOp::GiCreate);
        self.act(Change::Instances, calls::CREATE_GI, index, |st, hw| {
            let g = gpu_at(st, hw, index)?;
            let addr = g.addr;
            let p = mig_on(st, &g)?
                .profile(profile_id)
                .ok_or(NvmlCode::INVALID_ARGUMENT)?;
            let gpu = gpu_state_mut(st, addr)?;
            let id = mig::check_create(&p, &gpu.gis, placement)?;
            gpu.gis.push(GiState::new(id, &p, placement.start));
            Ok(GpuInstance {
                id,
                profile_id,
                placement,
            })
        })
    }

    fn destroy_gpu_instance(&self, index: u32, gpu_instance_id: u32) -> NvmlResult<()> {
        crate::latency::pause(crate::latency::DeviceOp::GiDestroy);
        self.act(Change::Instances, calls::DESTROY_GI, index, |st, hw| {
            let g = gpu_at(st, hw, index)?;
            let addr = g.addr;
            mig_on(st, &g)?;
            let gi = gi_of(st, addr, gpu_instance_id)?;
            let backs_vgpu = st
                .vfs_of(addr)
                .iter()
                .any(|(_, p)| p.vf.as_ref().and_then(|v| v.gpu_instance) == Some(gpu_instance_id));
            if !gi.cis.is_empty() || gi.in_use || backs_vgpu {
                return Err(NvmlCode::IN_USE);
            }
            gpu_state_mut(st, addr)?
                .gis
                .retain(|x| x.id != gpu_instance_id);
            Ok(())
        })
    }

    fn compute_instance_profiles(
        &self,
        index: u32,
        gpu_instance_id: u32,
    ) -> NvmlResult<Vec<ComputeInstanceProfile>> {
        self.look(calls::CI_PROFILES, Some(index), |st, hw| {
            let g = gpu_at(st, hw, index)?;
            mig_on(st, &g)?;
            Ok(mig::ci_profiles(gi_of(st, g.addr, gpu_instance_id)?))
        })
    }

    fn compute_instances(
        &self,
        index: u32,
        gpu_instance_id: u32,
    ) -> NvmlResult<Vec<ComputeInstance>> {
        self.look(calls::CIS, Some(index), |st, hw| {
            let g = gpu_at(st, hw, index)?;
            mig_on(st, &g)?;
            let gi = gi_of(st, g.addr, gpu_instance_id)?;
            let mut out: Vec<ComputeInstance> = gi
                .cis
                .iter()
                .map(|c| ComputeInstance {
                    id: c.id,
                    gpu_instance_id,
                    profile_id: c.profile_id,
                    placement: c.placement,
                })
                .collect();
            out.sort_by_key(|c| c.id);
            Ok(out)
        })
    }

    fn create_compute_instance(
        &self,
        index: u32,
        gpu_instance_id: u32,
        profile_id: u32,
    ) -> NvmlResult<ComputeInstance> {
        crate::latency::pause(crate::latency::DeviceOp::CiCreate);
        self.act(Change::Instances, calls::CREATE_CI, index, |st, hw| {
            let g = gpu_at(st, hw, index)?;
            let addr = g.addr;
            mig_on(st, &g)?;
            let (id, placement) = mig::place_ci(gi_of(st, addr, gpu_instance_id)?, profile_id)?;
            let gi = gpu_state_mut(st, addr)?
                .gis
                .iter_mut()
                .find(|x| x.id == gpu_instance_id)
                .ok_or(NvmlCode::NOT_FOUND)?;
            gi.cis.push(CiState {
                id,
                profile_id,
                placement,
            });
            Ok(ComputeInstance {
                id,
                gpu_instance_id,
                profile_id,
                placement,
            })
        })
    }

    fn destroy_compute_instance(
        &self,
        index: u32,
        gpu_instance_id: u32,
        compute_instance_id: u32,
    ) -> NvmlResult<()> {
        crate::latency::pause(crate::latency::DeviceOp::CiDestroy);
        self.act(Change::Instances, calls::DESTROY_CI, index, |st, hw| {
            let g = gpu_at(st, hw, index)?;
            let addr = g.addr;
            mig_on(st, &g)?;
            let gi = gi_of(st, addr, gpu_instance_id)?;
            if !gi.cis.iter().any(|c| c.id == compute_instance_id) {
                return Err(NvmlCode::NOT_FOUND);
            }
            if gi.in_use {
                return Err(NvmlCode::IN_USE);
            }
            let gi = gpu_state_mut(st, addr)?
                .gis
                .iter_mut()
                .find(|x| x.id == gpu_instance_id)
                .ok_or(NvmlCode::NOT_FOUND)?;
            gi.cis.retain(|c| c.id != compute_instance_id);
            Ok(())
        })
    }

    fn telemetry(&self, index: u32) -> NvmlResult<Telemetry> {
        self.act(Change::Volatile, calls::TELEMETRY, index, |st, hw| {
            let g = gpu_at(st, hw, index)?;
            let (addr, model) = (g.addr, g.model.clone());
            let used = fb_used(st, addr, &model);
            let seed = st.profile.telemetry_seed;
            let t = &mut gpu_state_mut(st, addr)?.telemetry;
            telemetry::step(t, seed, addr, &model);
            Ok(telemetry::sample(t, &model, used))
        })
    }

    fn vgpu_usage(&self, index: u32) -> NvmlResult<Vec<VgpuUsage>> {
        self.look(calls::VGPU_USAGE, Some(index), |st, hw| {
            let g = gpu_at(st, hw, index)?;
            Ok(vgpu::active(st, g.addr, g.model))
        })
    }

    fn mig_memory(&self, index: u32) -> NvmlResult<Vec<MigMemory>> {
        self.look(calls::MIG_MEMORY, Some(index), |st, hw| {
            let g = gpu_at(st, hw, index)?;
            mig_on(st, &g)?;
            let gis = st
                .gpus
                .get(&g.addr)
                .map(|x| x.gis.as_slice())
                .unwrap_or(&[]);
            let util = st.gpus.get(&g.addr).map_or(0, |x| x.telemetry.gpu_util);
            Ok(gis.iter().map(|gi| vgpu::mig_memory(gi, util)).collect())
        })
    }

    fn supported_vgpu_types(&self, index: u32) -> NvmlResult<Vec<VgpuTypeInfo>> {
        self.look(calls::VGPU_TYPES, Some(index), |st, hw| {
            let g = gpu_at(st, hw, index)?;
            let mut out: Vec<VgpuTypeInfo> = g
                .model
                .vgpu_types
                .iter()
                .filter_map(|t| {
                    Some(VgpuTypeInfo {
                        id: VgpuTypeId::new(t.id)?,
                        name: t.name.clone(),
                        class: t.class.clone(),
                        framebuffer_mib: t.framebuffer_mib,
                        max_instances: t.max_instances,
                        gpu_instance_profile_id: t
                            .mig_profile
                            .as_ref()
                            .and_then(|p| g.model.mig?.profile_named(p))
                            .map(|p| p.info.id),
                    })
                })
                .collect();
            // NVML's vGPU type id of an mdev type is the number in its `nvidia-<n>` name.
            let fb = g.model.vgpu_framebuffer_mib.unwrap_or(g.model.memory_mib);
            out.extend(g.model.mdev_types.iter().filter_map(|t| {
                let id = t.id.as_str().strip_prefix("nvidia-")?.parse::<u32>().ok()?;
                let by_fb = u32::try_from(fb / t.framebuffer_mib.max(1)).unwrap_or(u32::MAX);
                Some(VgpuTypeInfo {
                    id: VgpuTypeId::new(id)?,
                    name: t.name.clone(),
                    class: t
                        .class
                        .clone()
                        .unwrap_or_else(|| mdev_class(&t.name).to_owned()),
                    framebuffer_mib: t.framebuffer_mib,
                    max_instances: t.max_instances.map_or(by_fb, |m| m.min(by_fb)),
                    gpu_instance_profile_id: None,
                })
            }));
            Ok(out)
        })
    }

    fn nvlink_peers(&self, index: u32) -> NvmlResult<Vec<PciAddress>> {
        self.look(calls::NVLINK, Some(index), |st, hw| {
            let g = gpu_at(st, hw, index)?;
            let visible = visible_gpus(st, hw);
            // Switch links: the same fabric rule as the real library.
            let others: Vec<(PciAddress, NvlinkFabric)> = visible
                .iter()
                .filter(|a| **a != g.addr)
                .map(|a| (*a, fabric_of(st, *a)))
                .collect();
            let mut peers: BTreeSet<PciAddress> = fabric_peers(fabric_of(st, g.addr), &others)
                .into_iter()
                .collect();
            // Direct GPU-to-GPU links (NVLink bridges), either side may name them.
            if let Some((spec, _)) = st.gpu(g.addr) {
                peers.extend(
                    spec.nvlink_peers
                        .iter()
                        .copied()
                        .filter(|a| visible.contains(a)),
                );
            }
            peers.extend(
                st.profile
                    .gpus
                    .iter()
                    .filter(|o| o.nvlink_peers.contains(&g.addr) && visible.contains(&o.address))
                    .map(|o| o.address),
            );
            peers.remove(&g.addr);
            Ok(peers.into_iter().collect())
        })
    }

    fn health_signals(&self, index: u32) -> NvmlResult<gpu::HealthSignals> {
        self.look(calls::HEALTH, Some(index), |st, hw| {
            let g = gpu_at(st, hw, index)?;
            let addr = g.addr;
            let set = st.gpus.get(&addr).and_then(|s| s.health);
            Ok(set.unwrap_or_else(crate::state::default_health_signals))
        })
    }

    fn wait_xid_event(&self, timeout_ms: u32) -> NvmlResult<Option<XidEvent>> {
        self.fault(calls::XID, None)?;
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
        loop {
            // Looked at before taken: the real call blocks in the driver at no CPU cost, and a
            // store write (exclusive lock, a copy and a comparison of the whole host) every
            // 20 ms was most of an idle daemon's CPU.
            let queued = self
                .host
                .store()
                .read(|v| !v.state.xids.is_empty())
                .map_err(|_| Self::err(calls::XID, NvmlCode::UNKNOWN))?;
            let next = if queued { self.take_xid()? } else { None };
            let now = Instant::now();
            if next.is_some() || now >= deadline {
                return Ok(next);
            }
            std::thread::sleep((deadline - now).min(XID_POLL));
        }
    }
}
