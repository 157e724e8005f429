//! [`NvmlLibrary`]: the [`Nvml`] trait over NVIDIA's real `libnvidia-ml.so.1`, loaded at run
//! time through `nvml-wrapper`.
//!
//! The safe wrapper serves discovery, telemetry, vGPU types and NVLink (`nvlink`: link ends and
//! NVSwitch fabric peers); MIG instances, the NVLink remote device type, the fabric info and the
//! Xid event set go through [`raw`], the crate's one NVML FFI module.
//! A host without the driver is normal: [`NvmlLibrary::load`] then returns `LIBRARY_NOT_FOUND`
//! or `DRIVER_NOT_LOADED`, never panics.

mod nvlink;
mod raw;

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use ids::{MigProfileName, NumaNodeId, PciAddress, VgpuTypeId};
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::error::NvmlError as WrapperError;
use nvml_wrapper::{Device, Nvml as Wrapper};
use nvml_wrapper_sys::bindings as sys;

use crate::nvml::HealthSignals;
use crate::nvml::{
    ComputeInstance, ComputeInstanceProfile, DeviceInfo, GpuInstance, GpuInstanceProfile,
    MigActivation, MigMemory, MigMode, Nvml, NvmlCode, NvmlError, NvmlResult, Placement, Telemetry,
    VgpuTypeInfo, VgpuUsage, XidEvent,
};

const MIB: u64 = 1024 * 1024;

/// NVML's return code for an nvml-wrapper error. The wrapper's own failures have no NVML code:
/// a library that would not load is `LIBRARY_NOT_FOUND`, a missing symbol `FUNCTION_NOT_FOUND`,
/// the rest (bad UTF-8 and the like) `UNKNOWN`. Codes newer than the wrapper keep their number.
pub(crate) fn code_of(err: WrapperError) -> NvmlCode {
    match err {
        WrapperError::LibloadingError(_) => NvmlCode::LIBRARY_NOT_FOUND,
        WrapperError::FailedToLoadSymbol(_) => NvmlCode::FUNCTION_NOT_FOUND,
        other => NvmlCode(sys::nvmlReturn_t::from(other)),
    }
}

fn wrap(call: &'static str) -> impl FnOnce(WrapperError) -> NvmlError {
    move |err| NvmlError::new(call, code_of(err))
}

/// NVML's answer for an index (profile, link) the GPU does not have.
fn is_not_applicable(err: &NvmlError) -> bool {
    err.code == NvmlCode::NOT_SUPPORTED || err.code == NvmlCode::INVALID_ARGUMENT
}

/// NVML as loaded from the driver's `libnvidia-ml.so.1`. `Send + Sync`; each call looks the
/// device up by index, as NVML itself does.
pub struct NvmlLibrary {
    // Declared first so it drops first; it holds its own `Arc` of the library anyway.
    xid: Mutex<Option<raw::XidEventSet>>,
    nvml: Arc<Wrapper>,
}

impl fmt::Debug for NvmlLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NvmlLibrary").finish_non_exhaustive()
    }
}

impl NvmlLibrary {
    /// Loads `libnvidia-ml.so.1` from the library path and initialises NVML (`nvmlInit_v2`).
    pub fn load() -> NvmlResult<Self> {
        Self::from_init(Wrapper::init())
    }

    /// Like [`NvmlLibrary::load`], with the library at `path`.
    pub fn load_from(path: impl AsRef<Path>) -> NvmlResult<Self> {
        Self::from_init(
            Wrapper::builder()
                .lib_path(path.as_ref().as_os_str())
                .init(),
        )
    }

    fn from_init(init: Result<Wrapper, WrapperError>) -> NvmlResult<Self> {
        let nvml = init.map_err(wrap("nvmlInit_v2"))?;
        Ok(Self {
            xid: Mutex::new(None),
            nvml: Arc::new(nvml),
        })
    }

    fn device(&self, index: u32) -> NvmlResult<Device<'_>> {
        self.nvml
            .device_by_index(index)
            .map_err(wrap("nvmlDeviceGetHandleByIndex_v2"))
    }
}

fn parse_bus_id(call: &'static str, bus_id: &str) -> NvmlResult<PciAddress> {
    bus_id.parse().map_err(|e| {
        tracing::warn!(bus_id, error = %e, "NVML returned a PCI bus id that does not parse");
        NvmlError::new(call, NvmlCode::UNKNOWN)
    })
}

fn gpu_instance_profile(
    index: u32,
    info: &sys::nvmlGpuInstanceProfileInfo_v2_t,
) -> Option<GpuInstanceProfile> {
    let raw_name = raw::c_buffer_to_string(&info.name);
    let name = match raw_name.parse::<MigProfileName>() {
        Ok(name) => name,
        Err(e) => {
            tracing::warn!(profile_index = index, error = %e, "MIG profile left out");
            return None;
        }
    };
    Some(GpuInstanceProfile {
        profile_index: index,
        id: info.id,
        name,
        slice_count: info.sliceCount,
        instance_count: info.instanceCount,
        memory_mib: info.memorySizeMB,
        multiprocessor_count: info.multiprocessorCount,
        copy_engine_count: info.copyEngineCount,
        decoder_count: info.decoderCount,
        encoder_count: info.encoderCount,
        jpeg_count: info.jpegCount,
        ofa_count: info.ofaCount,
    })
}

fn compute_instance_profile(
    index: u32,
    info: &sys::nvmlComputeInstanceProfileInfo_v2_t,
) -> ComputeInstanceProfile {
    ComputeInstanceProfile {
        profile_index: index,
        id: info.id,
        slice_count: info.sliceCount,
        instance_count: info.instanceCount,
        multiprocessor_count: info.multiprocessorCount,
    }
}

/// A telemetry value, or 0 when the GPU does not offer it (utilisation is `NOT_SUPPORTED` in MIG
/// mode, energy on older boards): one missing counter must not hide the others.
fn optional<T: Default>(call: &'static str, value: Result<T, WrapperError>) -> NvmlResult<T> {
    match value.map_err(wrap(call)) {
        Err(e) if e.code == NvmlCode::NOT_SUPPORTED || e.code == NvmlCode::FUNCTION_NOT_FOUND => {
            tracing::debug!(error = %e, "telemetry value unavailable");
            Ok(T::default())
        }
        other => other,
    }
}

/// A health signal, or `None` when the GPU does not report it: NOT_SUPPORTED (ECC off, no row
/// remapping before Ampere, no page retirement after it) and a symbol the driver lacks are
/// absence, not failure; GPU_IS_LOST and the rest stay errors.
fn signal<T>(call: &'static str, value: Result<T, WrapperError>) -> NvmlResult<Option<T>> {
    match value.map_err(wrap(call)) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code == NvmlCode::NOT_SUPPORTED || e.code == NvmlCode::FUNCTION_NOT_FOUND => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

impl NvmlLibrary {
    fn compute_profiles(gi: &raw::GpuInstance<'_>) -> NvmlResult<Vec<ComputeInstanceProfile>> {
        let mut out = Vec::new();
        for index in 0..sys::NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
            match gi.compute_instance_profile(index) {
                Ok(info) => out.push(compute_instance_profile(index, &info)),
                Err(e) if is_not_applicable(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// The GPU-instance profile a MIG-backed vGPU type occupies; `None` for a time-sliced type (NVML
/// answers `INVALID_GPU_INSTANCE_PROFILE_ID`) or a driver without the call.
fn mig_profile_of(vgpu: &nvml_wrapper::vgpu::VgpuType<'_>) -> NvmlResult<Option<u32>> {
    match vgpu
        .instance_profile_id()
        .map_err(wrap("nvmlVgpuTypeGetGpuInstanceProfileId"))
    {
        Ok(id) if id == sys::INVALID_GPU_INSTANCE_PROFILE_ID => Ok(None),
        Ok(id) => Ok(Some(id)),
        Err(e) if e.code == NvmlCode::NOT_SUPPORTED || e.code == NvmlCode::FUNCTION_NOT_FOUND => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

impl Nvml for NvmlLibrary {
    fn driver_version(&self) -> NvmlResult<String> {
        self.nvml
            .sys_driver_version()
            .map_err(wrap("nvmlSystemGetDriverVersion"))
    }

    fn device_count(&self) -> NvmlResult<u32> {
        self.nvml
            .device_count()
            .map_err(wrap("nvmlDeviceGetCount_v2"))
    }

    fn device_info(&self, index: u32) -> NvmlResult<DeviceInfo> {
        const PCI: &str = "nvmlDeviceGetPciInfo_v3";
        let device = self.device(index)?;
        let pci = device.pci_info().map_err(wrap(PCI))?;
        let memory = device
            .memory_info()
            .map_err(wrap("nvmlDeviceGetMemoryInfo_v2"))?;
        // Older drivers lack the call and some boards answer NOT_SUPPORTED: locality unknown.
        let numa_node = device
            .numa_node_id()
            .ok()
            .and_then(|n| u16::try_from(n).ok());
        Ok(DeviceInfo {
            index,
            uuid: device.uuid().map_err(wrap("nvmlDeviceGetUUID"))?,
            name: device.name().map_err(wrap("nvmlDeviceGetName"))?,
            pci_address: parse_bus_id(PCI, &pci.bus_id)?,
            memory_total_mib: memory.total / MIB,
            numa_node: numa_node.map(NumaNodeId),
        })
    }

    fn mig_mode(&self, index: u32) -> NvmlResult<MigMode> {
        let mode = self
            .device(index)?
            .mig_mode()
            .map_err(wrap("nvmlDeviceGetMigMode"))?;
        let enabled = sys::NVML_DEVICE_MIG_ENABLE;
        Ok(MigMode {
            current: mode.current == enabled,
            pending: mode.pending == enabled,
        })
    }

    fn set_mig_mode(&self, index: u32, enabled: bool) -> NvmlResult<MigActivation> {
        // The return value says whether the call was accepted; whether the mode took effect
        // is in the `activationStatus` out-parameter, which the wrapper hands back.
        self.device(index)?
            .set_mig_mode(enabled)
            .map(|status| MigActivation::from_code(NvmlCode(status)))
            .map_err(wrap("nvmlDeviceSetMigMode"))
    }

    fn gpu_instance_profiles(&self, index: u32) -> NvmlResult<Vec<GpuInstanceProfile>> {
        let device = self.device(index)?;
        let mut out = Vec::new();
        for profile_index in 0..sys::NVML_GPU_INSTANCE_PROFILE_COUNT {
            match raw::gpu_instance_profile(&device, profile_index) {
                Ok(info) => out.extend(gpu_instance_profile(profile_index, &info)),
                Err(e) if is_not_applicable(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    fn gpu_instance_possible_placements(
        &self,
        index: u32,
        profile_id: u32,
    ) -> NvmlResult<Vec<Placement>> {
        raw::gpu_instance_possible_placements(&self.device(index)?, profile_id)
    }

    fn gpu_instance_remaining_capacity(&self, index: u32, profile_id: u32) -> NvmlResult<u32> {
        raw::gpu_instance_remaining_capacity(&self.device(index)?, profile_id)
    }

    fn gpu_instances(&self, index: u32) -> NvmlResult<Vec<GpuInstance>> {
        let profiles = self.gpu_instance_profiles(index)?;
        let device = self.device(index)?;
        let mut out = Vec::new();
        for profile in &profiles {
            for info in raw::gpu_instances(&device, profile.id, profile.instance_count)? {
                out.push(GpuInstance {
                    id: info.id,
                    profile_id: info.profile_id,
                    placement: info.placement,
                });
            }
        }
        out.sort_by_key(|gi| gi.id);
        out.dedup_by_key(|gi| gi.id);
        Ok(out)
    }

    fn create_gpu_instance(
        &self,
        index: u32,
        profile_id: u32,
        placement: Placement,
    ) -> NvmlResult<GpuInstance> {
        let info = raw::create_gpu_instance(&self.device(index)?, profile_id, placement)?;
        Ok(GpuInstance {
            id: info.id,
            profile_id: info.profile_id,
            placement: info.placement,
        })
    }

    fn destroy_gpu_instance(&self, index: u32, gpu_instance_id: u32) -> NvmlResult<()> {
        let device = self.device(index)?;
        raw::GpuInstance::by_id(&device, gpu_instance_id)?.destroy()
    }

    fn compute_instance_profiles(
        &self,
        index: u32,
        gpu_instance_id: u32,
    ) -> NvmlResult<Vec<ComputeInstanceProfile>> {
        let device = self.device(index)?;
        let gi = raw::GpuInstance::by_id(&device, gpu_instance_id)?;
        Self::compute_profiles(&gi)
    }

    fn compute_instances(
        &self,
        index: u32,
        gpu_instance_id: u32,
    ) -> NvmlResult<Vec<ComputeInstance>> {
        let device = self.device(index)?;
        let gi = raw::GpuInstance::by_id(&device, gpu_instance_id)?;
        let mut out = Vec::new();
        for profile in Self::compute_profiles(&gi)? {
            for info in gi.compute_instances(profile.id, profile.instance_count)? {
                out.push(ComputeInstance {
                    id: info.id,
                    gpu_instance_id,
                    profile_id: info.profile_id,
                    placement: info.placement,
                });
            }
        }
        out.sort_by_key(|ci| ci.id);
        out.dedup_by_key(|ci| ci.id);
        Ok(out)
    }

    fn create_compute_instance(
        &self,
        index: u32,
        gpu_instance_id: u32,
        profile_id: u32,
    ) -> NvmlResult<ComputeInstance> {
        let device = self.device(index)?;
        let gi = raw::GpuInstance::by_id(&device, gpu_instance_id)?;
        let info = gi.create_compute_instance(profile_id)?;
        Ok(ComputeInstance {
            id: info.id,
            gpu_instance_id,
            profile_id: info.profile_id,
            placement: info.placement,
        })
    }

    fn destroy_compute_instance(
        &self,
        index: u32,
        gpu_instance_id: u32,
        compute_instance_id: u32,
    ) -> NvmlResult<()> {
        let device = self.device(index)?;
        raw::GpuInstance::by_id(&device, gpu_instance_id)?
            .destroy_compute_instance(compute_instance_id)
    }

    fn telemetry(&self, index: u32) -> NvmlResult<Telemetry> {
        let device = self.device(index)?;
        let util = optional(
            "nvmlDeviceGetUtilizationRates",
            device.utilization_rates().map(Some),
        )?;
        let memory = optional("nvmlDeviceGetMemoryInfo_v2", device.memory_info().map(Some))?;
        Ok(Telemetry {
            gpu_util_pct: util.as_ref().map_or(0, |u| u.gpu),
            mem_copy_util_pct: util.as_ref().map_or(0, |u| u.memory),
            fb_used_mib: memory.as_ref().map_or(0, |m| m.used / MIB),
            fb_free_mib: memory.as_ref().map_or(0, |m| m.free / MIB),
            temperature_c: optional(
                "nvmlDeviceGetTemperature",
                device.temperature(TemperatureSensor::Gpu),
            )?,
            power_mw: optional("nvmlDeviceGetPowerUsage", device.power_usage())?,
            energy_mj: optional(
                "nvmlDeviceGetTotalEnergyConsumption",
                device.total_energy_consumption(),
            )?,
            sm_clock_mhz: optional("nvmlDeviceGetClockInfo", device.clock_info(Clock::SM))?,
            mem_clock_mhz: optional("nvmlDeviceGetClockInfo", device.clock_info(Clock::Memory))?,
            pcie_link_gen: optional(
                "nvmlDeviceGetCurrPcieLinkGeneration",
                device.current_pcie_link_gen(),
            )?,
            pcie_link_width: optional(
                "nvmlDeviceGetCurrPcieLinkWidth",
                device.current_pcie_link_width(),
            )?,
        })
    }

    fn vgpu_usage(&self, index: u32) -> NvmlResult<Vec<VgpuUsage>> {
        let device = self.device(index)?;
        let handles = match raw::active_vgpus(&device) {
            // A driver without vGPU has no active instances.
            Err(e)
                if e.code == NvmlCode::NOT_SUPPORTED || e.code == NvmlCode::FUNCTION_NOT_FOUND =>
            {
                return Ok(Vec::new());
            }
            other => other?,
        };
        let util = match raw::vgpu_utilization(&device, handles.len()) {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(error = %e, "vGPU utilisation unavailable");
                Vec::new()
            }
        };
        handles
            .into_iter()
            .map(|h| {
                let vgpu = nvml_wrapper::vgpu::VgpuInstance::new(h, &device);
                Ok(VgpuUsage {
                    instance: h,
                    mdev_uuid: vgpu.mdev_uuid().ok().filter(|u| !u.is_empty()),
                    gpu_instance_id: vgpu
                        .gpu_instance_id()
                        .ok()
                        // NVML answers INVALID_GPU_INSTANCE_ID (0xFFFFFFFF) for a time-sliced vGPU.
                        .filter(|id| *id != u32::MAX),
                    fb_used_bytes: vgpu
                        .fb_usage()
                        .map_err(wrap("nvmlVgpuInstanceGetFbUsage"))?,
                    sm_util_pct: util.iter().find(|(i, _)| *i == h).map(|(_, u)| *u),
                })
            })
            .collect()
    }

    fn mig_memory(&self, index: u32) -> NvmlResult<Vec<MigMemory>> {
        let device = self.device(index)?;
        let count = device
            .mig_device_count()
            .map_err(wrap("nvmlDeviceGetMaxMigDeviceCount"))?;
        let mut out = Vec::new();
        for i in 0..count {
            // Indices without a MIG device answer NOT_FOUND or INVALID_ARGUMENT.
            let mig = match device
                .mig_device_by_index(i)
                .map_err(wrap("nvmlDeviceGetMigDeviceHandleByIndex"))
            {
                Ok(m) => m,
                Err(e) if e.code == NvmlCode::NOT_FOUND || is_not_applicable(&e) => continue,
                Err(e) => return Err(e),
            };
            let memory = mig.memory_info().map_err(wrap("nvmlDeviceGetMemoryInfo"))?;
            out.push(MigMemory {
                gpu_instance_id: raw::mig_device_gpu_instance_id(&mig)?,
                used_bytes: memory.used,
                total_bytes: memory.total,
            });
        }
        // One MIG device per compute instance: a GPU instance with several is counted once.
        out.sort_by_key(|m| m.gpu_instance_id);
        out.dedup_by_key(|m| m.gpu_instance_id);
        Ok(out)
    }

    fn supported_vgpu_types(&self, index: u32) -> NvmlResult<Vec<VgpuTypeInfo>> {
        let device = self.device(index)?;
        let types = match device
            .vgpu_supported_types()
            .map_err(wrap("nvmlDeviceGetSupportedVgpus"))
        {
            // A driver without vGPU support says so either way.
            Err(e)
                if e.code == NvmlCode::NOT_SUPPORTED || e.code == NvmlCode::FUNCTION_NOT_FOUND =>
            {
                return Ok(Vec::new());
            }
            other => other?,
        };
        let mut out = Vec::new();
        for vgpu in types {
            // Type id 0 is "no vGPU" everywhere vGPU types appear; NVML never lists it.
            let Some(id) = VgpuTypeId::new(vgpu.id()) else {
                continue;
            };
            out.push(VgpuTypeInfo {
                id,
                name: vgpu.name().map_err(wrap("nvmlVgpuTypeGetName"))?,
                class: vgpu.class_name().map_err(wrap("nvmlVgpuTypeGetClass"))?,
                framebuffer_mib: vgpu
                    .framebuffer_size()
                    .map_err(wrap("nvmlVgpuTypeGetFramebufferSize"))?
                    / MIB,
                max_instances: vgpu
                    .max_instances()
                    .map_err(wrap("nvmlVgpuTypeGetMaxInstances"))?,
                gpu_instance_profile_id: mig_profile_of(&vgpu)?,
            });
        }
        Ok(out)
    }

    fn nvlink_peers(&self, index: u32) -> NvmlResult<Vec<PciAddress>> {
        self.nvlink_peers_of(index)
    }

    fn health_signals(&self, index: u32) -> NvmlResult<HealthSignals> {
        use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, RetirementCause};
        const ECC: &str = "nvmlDeviceGetTotalEccErrors";
        const RETIRED: &str = "nvmlDeviceGetRetiredPages_v2";
        let device = self.device(index)?;
        let ecc = |kind| signal(ECC, device.total_ecc_errors(kind, EccCounter::Volatile));
        let retired =
            |cause| signal(RETIRED, device.retired_pages(cause)).map(|p| p.map(|p| p.len() as u64));
        let rows = raw::remapped_rows(&device)?;
        Ok(HealthSignals {
            ecc_sbe_volatile: ecc(MemoryError::Corrected)?,
            ecc_dbe_volatile: ecc(MemoryError::Uncorrected)?,
            retired_sbe: retired(RetirementCause::MultipleSingleBitEccErrors)?,
            retired_dbe: retired(RetirementCause::DoubleBitEccError)?,
            retired_pending: signal(
                "nvmlDeviceGetRetiredPagesPendingStatus",
                device.are_pages_pending_retired(),
            )?,
            remapped_correctable: rows.map(|r| r.correctable),
            remapped_uncorrectable: rows.map(|r| r.uncorrectable),
            remap_failure: rows.map(|r| r.failure),
            clock_event_reasons: signal(
                "nvmlDeviceGetCurrentClocksEventReasons",
                device.current_throttle_reasons().map(|r| r.bits()),
            )?,
        })
    }

    fn wait_xid_event(&self, timeout_ms: u32) -> NvmlResult<Option<XidEvent>> {
        let mut slot = self
            .xid
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if slot.is_none() {
            *slot = Some(raw::XidEventSet::create(Arc::clone(&self.nvml))?);
        }
        let Some(set) = slot.as_ref() else {
            return Err(NvmlError::new("nvmlEventSetCreate", NvmlCode::UNKNOWN));
        };
        if set.registered() == 0 {
            // Waiting on an empty set would only ever time out: say so instead.
            return Err(NvmlError::new(
                "nvmlDeviceRegisterEvents",
                NvmlCode::NOT_SUPPORTED,
            ));
        }
        let event = set.wait(timeout_ms)?;
        Ok(event.map(|(gpu_uuid, xid)| XidEvent { gpu_uuid, xid }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn library_is_send_and_sync() {
        assert_send_sync::<NvmlLibrary>();
    }

    #[test]
    fn load_without_driver_is_a_clean_error() {
        // CI machines have no driver; on a GPU host this test is moot.
        if Path::new("/dev/nvidiactl").exists() {
            return;
        }
        let err = NvmlLibrary::load().unwrap_err();
        // LIBRARY_NOT_FOUND here; DRIVER_NOT_LOADED where the library is installed without the
        // kernel module (a container with the user-space driver mounted, say).
        let expected = [NvmlCode::LIBRARY_NOT_FOUND, NvmlCode::DRIVER_NOT_LOADED];
        assert!(expected.contains(&err.code), "{err}");
        assert_eq!(err.call, "nvmlInit_v2");
    }

    #[test]
    fn load_from_missing_path_is_library_not_found() {
        let err = NvmlLibrary::load_from("/nonexistent/libnvidia-ml.so.1").unwrap_err();
        assert_eq!(err.code, NvmlCode::LIBRARY_NOT_FOUND);
        assert!(
            err.to_string().contains("NVML Shared Library Not Found"),
            "{err}"
        );
    }

    #[test]
    fn load_from_a_file_that_is_no_library_is_library_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("libnvidia-ml.so.1");
        std::fs::write(&fake, b"not an ELF file").unwrap();
        let err = NvmlLibrary::load_from(&fake).unwrap_err();
        assert_eq!(err.code, NvmlCode::LIBRARY_NOT_FOUND);
    }

    #[test]
    fn wrapper_errors_keep_nvml_codes() {
        assert_eq!(
            code_of(WrapperError::DriverNotLoaded),
            NvmlCode::DRIVER_NOT_LOADED
        );
        assert_eq!(code_of(WrapperError::NotSupported), NvmlCode::NOT_SUPPORTED);
        assert_eq!(
            code_of(WrapperError::InvalidArg),
            NvmlCode::INVALID_ARGUMENT
        );
        assert_eq!(code_of(WrapperError::NoPermission), NvmlCode::NO_PERMISSION);
        assert_eq!(code_of(WrapperError::NotFound), NvmlCode::NOT_FOUND);
        assert_eq!(code_of(WrapperError::Timeout), NvmlCode::TIMEOUT);
        assert_eq!(code_of(WrapperError::GpuLost), NvmlCode::GPU_IS_LOST);
        assert_eq!(
            code_of(WrapperError::ResetRequired),
            NvmlCode::RESET_REQUIRED
        );
        assert_eq!(code_of(WrapperError::InUse), NvmlCode::IN_USE);
        assert_eq!(
            code_of(WrapperError::Uninitialized),
            NvmlCode::UNINITIALIZED
        );
        assert_eq!(code_of(WrapperError::Unknown), NvmlCode::UNKNOWN);
        assert_eq!(
            code_of(WrapperError::InsufficientSize(Some(8))),
            NvmlCode(7)
        );
        assert_eq!(
            code_of(WrapperError::LibraryNotFound),
            NvmlCode::LIBRARY_NOT_FOUND
        );
        assert_eq!(
            code_of(WrapperError::FunctionNotFound),
            NvmlCode::FUNCTION_NOT_FOUND
        );
        // INSUFFICIENT_RESOURCES is newer than the wrapper's enum: the number survives.
        assert_eq!(
            code_of(WrapperError::UnexpectedVariant(23)),
            NvmlCode::INSUFFICIENT_RESOURCES
        );
    }

    #[test]
    fn wrapper_only_errors_map_to_loader_codes_or_unknown() {
        let symbol = WrapperError::FailedToLoadSymbol("nvmlDeviceGetMigMode".into());
        assert_eq!(code_of(symbol), NvmlCode::FUNCTION_NOT_FOUND);
        assert_eq!(code_of(WrapperError::GetPciInfoFailed), NvmlCode::UNKNOWN);
        let bytes = vec![0xff_u8];
        let bad_utf8 = std::str::from_utf8(&bytes).unwrap_err();
        assert_eq!(
            code_of(WrapperError::Utf8Error(bad_utf8)),
            NvmlCode::UNKNOWN
        );
        let err = wrap("nvmlDeviceGetUUID")(WrapperError::GpuLost);
        assert_eq!(
            err,
            NvmlError::new("nvmlDeviceGetUUID", NvmlCode::GPU_IS_LOST)
        );
    }

    #[test]
    fn telemetry_values_tolerate_unsupported_counters() {
        assert_eq!(optional::<u32>("x", Err(WrapperError::NotSupported)), Ok(0));
        let missing = WrapperError::FailedToLoadSymbol("x".into());
        assert_eq!(optional::<u64>("x", Err(missing)), Ok(0));
        assert_eq!(optional::<u32>("x", Ok(42)), Ok(42));
        let lost = optional::<u32>("nvmlDeviceGetPowerUsage", Err(WrapperError::GpuLost));
        assert_eq!(lost.unwrap_err().code, NvmlCode::GPU_IS_LOST);
    }

    #[test]
    fn absent_health_signals_are_none_and_a_lost_gpu_an_error() {
        assert_eq!(
            signal::<u64>("x", Err(WrapperError::NotSupported)),
            Ok(None)
        );
        let missing = WrapperError::FailedToLoadSymbol("x".into());
        assert_eq!(signal::<bool>("x", Err(missing)), Ok(None));
        assert_eq!(signal::<u64>("x", Ok(7)), Ok(Some(7)));
        let lost = signal::<u64>("nvmlDeviceGetTotalEccErrors", Err(WrapperError::GpuLost));
        assert_eq!(lost.unwrap_err().code, NvmlCode::GPU_IS_LOST);
    }

    #[test]
    fn profiles_convert_from_the_v2_struct() {
        let mut info = sys::nvmlGpuInstanceProfileInfo_v2_t {
            version: raw::GPU_INSTANCE_PROFILE_INFO_V2,
            id: 19,
            isP2pSupported: 0,
            sliceCount: 1,
            instanceCount: 7,
            multiprocessorCount: 16,
            copyEngineCount: 1,
            decoderCount: 1,
            encoderCount: 0,
            jpegCount: 1,
            ofaCount: 0,
            memorySizeMB: 16384,
            name: [0; 96],
        };
        for (i, b) in b"MIG 1g.18gb".iter().enumerate() {
            info.name[i] = *b as std::ffi::c_char;
        }
        let p = gpu_instance_profile(0, &info).unwrap();
        assert_eq!(p.name.to_string(), "1g.18gb");
        assert_eq!(
            (p.id, p.slice_count, p.instance_count, p.memory_mib),
            (19, 1, 7, 16384)
        );
        info.name = [0; 96];
        assert!(
            gpu_instance_profile(0, &info).is_none(),
            "a nameless profile is left out"
        );
    }

    /// A stand-in `libnvidia-ml.so.1` with a handful of functions: enough to drive the real
    /// loading, error and raw-call paths without a GPU. Every other symbol is missing, as on a
    /// driver older than the call.
    const STUB_NVML: &str = r#"
        typedef struct { unsigned start, size; } placement_t;
        typedef struct {
            unsigned version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
                copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
            unsigned long long memorySizeMB;
            char name[96];
        } gi_profile_v2_t;
        typedef struct { void *device; unsigned id, profileId; placement_t placement; } gi_info_t;
        static int gpu, gi;
        int nvmlInit_v2(void) { return INIT_RESULT; }
        int nvmlShutdown(void) { return 0; }
        int nvmlDeviceGetCount_v2(unsigned *c) { *c = 1; return 0; }
        int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **d) {
            if (i != 0) return 2;
            *d = &gpu;
            return 0;
        }
        int nvmlDeviceGetGpuInstanceProfileInfoV(void *d, unsigned p, gi_profile_v2_t *info) {
            if (info->version != (sizeof(*info) | (2u << 24))) return 25;
            if (p == 1) return 3;
            if (p != 0) return 2;
            info->id = 19; info->sliceCount = 1; info->instanceCount = 7;
            info->memorySizeMB = 16384;
            const char *n = "MIG 1g.18gb";
            for (int i = 0; n[i]; i++) info->name[i] = n[i];
            return 0;
        }
        int nvmlDeviceGetGpuInstancePossiblePlacements_v2(void *d, unsigned p, placement_t *pl,
                                                         unsigned *c) {
            *c = 7;
            if (pl) for (unsigned i = 0; i < 7; i++) { pl[i].start = i; pl[i].size = 1; }
            return 0;
        }
        int nvmlDeviceGetGpuInstanceRemainingCapacity(void *d, unsigned p, unsigned *c) {
            *c = 6;
            return p == 19 ? 0 : 2;
        }
        int nvmlDeviceGetGpuInstances(void *d, unsigned p, void **gis, unsigned *c) {
            *c = 0;
            if (p == 19) { gis[0] = &gi; *c = 1; }
            return 0;
        }
        int nvmlGpuInstanceGetInfo(void *g, gi_info_t *info) {
            info->device = &gpu; info->id = 1; info->profileId = 19;
            info->placement.start = 2; info->placement.size = 1;
            return 0;
        }
    "#;

    /// Builds the stub with `cc` (present wherever Rust links) into `dir`.
    fn stub_nvml(dir: &Path, init_result: u32) -> std::path::PathBuf {
        build_stub(dir, STUB_NVML, init_result)
    }

    /// Builds one stub library from C `code` into `dir`.
    fn build_stub(dir: &Path, code: &str, init_result: u32) -> std::path::PathBuf {
        let source = dir.join("stub.c");
        let library = dir.join("libnvidia-ml.so.1");
        std::fs::write(&source, code).unwrap();
        let status = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&library)
            .arg(format!("-DINIT_RESULT={init_result}"))
            .arg(&source)
            .status()
            .expect("run cc to build the NVML stub");
        assert!(status.success(), "cc failed to build the NVML stub");
        library
    }

    /// An HGX-like stub: four GPUs whose four active NVLinks each end at an NVSwitch
    /// (`nvmlDeviceGetNvLinkRemoteDeviceType` = `NVML_NVLINK_DEVICE_TYPE_SWITCH`, 2). GPUs 0-2
    /// completed fabric registration on one clique; GPU 3 is still registering.
    const STUB_HGX: &str = r#"
        typedef struct {
            char busIdLegacy[16];
            unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
            char busId[32];
        } pci_t;
        typedef struct {
            unsigned char clusterUuid[16];
            int status;
            unsigned cliqueId;
            unsigned char state;
        } fabric_t;
        static int gpus[4];
        static int which(void *d) { return (int *)d - gpus; }
        int nvmlInit_v2(void) { return INIT_RESULT; }
        int nvmlShutdown(void) { return 0; }
        int nvmlDeviceGetCount_v2(unsigned *c) { *c = 4; return 0; }
        int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **d) {
            if (i > 3) return 2;
            *d = &gpus[i];
            return 0;
        }
        int nvmlDeviceGetPciInfo_v3(void *d, pci_t *p) {
            const char *ids[] = {"00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0",
                                 "00000000:5D:00.0"};
            const char *id = ids[which(d)];
            for (int i = 0; id[i]; i++) p->busId[i] = id[i];
            return 0;
        }
        int nvmlDeviceGetNvLinkState(void *d, unsigned link, int *on) {
            if (link >= 18) return 2;
            *on = link < 4;
            return 0;
        }
        int nvmlDeviceGetNvLinkRemoteDeviceType(void *d, unsigned link, int *kind) {
            *kind = 2;
            return 0;
        }
        int nvmlDeviceGetGpuFabricInfo(void *d, fabric_t *f) {
            for (int i = 0; i < 16; i++) f->clusterUuid[i] = 0xab;
            f->status = 0;
            f->cliqueId = 1;
            f->state = which(d) == 3 ? 2 : 3;
            return 0;
        }
    "#;

    /// A vGPU host with MIG on: two active vGPUs (an mdev one, time-sliced, and one in GPU
    /// instance 3, which NVML has a utilisation sample for) and two MIG devices (GPU instances 3
    /// and 4) behind a three-slot MIG device table.
    const STUB_USAGE: &str = r#"
        typedef struct { unsigned version; unsigned long long total, reserved, free, used; } mem2_t;
        typedef struct {
            unsigned vgpuInstance;
            unsigned long long timeStamp;
            unsigned long long smUtil, memUtil, encUtil, decUtil;
        } sample_t;
        static int gpu, migs[2];
        int nvmlInit_v2(void) { return INIT_RESULT; }
        int nvmlShutdown(void) { return 0; }
        int nvmlDeviceGetCount_v2(unsigned *c) { *c = 1; return 0; }
        int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **d) {
            if (i != 0) return 2;
            *d = &gpu;
            return 0;
        }
        int nvmlDeviceGetActiveVgpus(void *d, unsigned *count, unsigned *ids) {
            if (*count < 2) { *count = 2; return 7; }
            ids[0] = 11; ids[1] = 12; *count = 2;
            return 0;
        }
        int nvmlVgpuInstanceGetMdevUUID(unsigned id, char *buf, unsigned size) {
            const char *u = id == 11 ? "5b6f7c2e-1a2b-4c3d-8e9f-0a1b2c3d4e5f" : "";
            for (unsigned i = 0; i < size; i++) { buf[i] = u[i]; if (!u[i]) break; }
            return 0;
        }
        int nvmlVgpuInstanceGetGpuInstanceId(unsigned id, unsigned *gi) {
            *gi = id == 11 ? 0xFFFFFFFFu : 3;
            return 0;
        }
        int nvmlVgpuInstanceGetFbUsage(unsigned id, unsigned long long *fb) {
            *fb = (unsigned long long)(id - 10) << 30;
            return 0;
        }
        int nvmlDeviceGetVgpuUtilization(void *d, unsigned long long last, int *type,
                                         unsigned *count, sample_t *s) {
            if (*count < 1) return 7;
            *type = 1;
            s[0].vgpuInstance = 12; s[0].timeStamp = 1;
            s[0].smUtil = 37;
            *count = 1;
            return 0;
        }
        int nvmlDeviceGetMaxMigDeviceCount(void *d, unsigned *c) { *c = 3; return 0; }
        int nvmlDeviceGetMigDeviceHandleByIndex(void *d, unsigned i, void **m) {
            if (i >= 2) return 6;
            *m = &migs[i];
            return 0;
        }
        int nvmlDeviceGetGpuInstanceId(void *m, unsigned *id) {
            *id = 3 + (unsigned)((int *)m - migs);
            return 0;
        }
        int nvmlDeviceGetMemoryInfo_v2(void *m, mem2_t *info) {
            if (info->version != (sizeof(*info) | (2u << 24))) return 25;
            info->total = 20ull << 30; info->used = (1ull << 20) * (1 + ((int *)m - migs));
            info->free = info->total - info->used;
            return 0;
        }
    "#;

    #[test]
    fn stub_vgpu_usage_and_mig_memory() {
        let dir = tempfile::tempdir().unwrap();
        let nvml = NvmlLibrary::load_from(build_stub(dir.path(), STUB_USAGE, 0)).unwrap();
        let usage = nvml.vgpu_usage(0).unwrap();
        assert_eq!(
            usage,
            [
                VgpuUsage {
                    instance: 11,
                    mdev_uuid: Some("5b6f7c2e-1a2b-4c3d-8e9f-0a1b2c3d4e5f".into()),
                    gpu_instance_id: None,
                    fb_used_bytes: 1 << 30,
                    sm_util_pct: None,
                },
                VgpuUsage {
                    instance: 12,
                    mdev_uuid: None,
                    gpu_instance_id: Some(3),
                    fb_used_bytes: 2 << 30,
                    sm_util_pct: Some(37),
                },
            ]
        );
        let mig = nvml.mig_memory(0).unwrap();
        assert_eq!(
            mig,
            [
                MigMemory {
                    gpu_instance_id: 3,
                    used_bytes: 1 << 20,
                    total_bytes: 20 << 30
                },
                MigMemory {
                    gpu_instance_id: 4,
                    used_bytes: 2 << 20,
                    total_bytes: 20 << 30
                },
            ]
        );
    }

    #[test]
    fn stub_without_vgpu_symbols_has_no_vgpus_and_no_mig_devices() {
        // A bare-metal driver: the vGPU calls are missing (FUNCTION_NOT_FOUND).
        let dir = tempfile::tempdir().unwrap();
        let nvml = NvmlLibrary::load_from(stub_nvml(dir.path(), 0)).unwrap();
        assert_eq!(nvml.vgpu_usage(0), Ok(Vec::new()));
        assert_eq!(
            nvml.mig_memory(0).unwrap_err().code,
            NvmlCode::FUNCTION_NOT_FOUND
        );
    }

    #[test]
    fn stub_nvswitch_fabric_peers() {
        let dir = tempfile::tempdir().unwrap();
        let nvml = NvmlLibrary::load_from(build_stub(dir.path(), STUB_HGX, 0)).unwrap();
        let a = |s: &str| s.parse::<PciAddress>().unwrap();
        // No link names a GPU, yet the registered GPUs are each other's peers.
        assert_eq!(
            nvml.nvlink_peers(0).unwrap(),
            vec![a("0000:2a:00.0"), a("0000:3a:00.0")]
        );
        assert_eq!(
            nvml.nvlink_peers(2).unwrap(),
            vec![a("0000:18:00.0"), a("0000:2a:00.0")]
        );
        // Still registering with Fabric Manager: no NVLink peer-to-peer yet.
        assert!(nvml.nvlink_peers(3).unwrap().is_empty());
    }

    #[test]
    fn stub_switch_links_without_fabric_info_are_one_fabric() {
        // A DGX A100 or an older driver: no nvmlDeviceGetGpuFabricInfo symbol.
        let dir = tempfile::tempdir().unwrap();
        let code = STUB_HGX.replace("nvmlDeviceGetGpuFabricInfo", "not_nvml_fabric_info");
        let nvml = NvmlLibrary::load_from(build_stub(dir.path(), &code, 0)).unwrap();
        let peers: Vec<String> = nvml
            .nvlink_peers(3)
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(peers, ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"]);
    }

    #[test]
    fn stub_driver_not_loaded_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let err = NvmlLibrary::load_from(stub_nvml(dir.path(), 9)).unwrap_err();
        assert_eq!(
            err,
            NvmlError::new("nvmlInit_v2", NvmlCode::DRIVER_NOT_LOADED)
        );
    }

    #[test]
    fn stub_raw_mig_calls_and_missing_symbols() {
        let dir = tempfile::tempdir().unwrap();
        let nvml = NvmlLibrary::load_from(stub_nvml(dir.path(), 0)).unwrap();
        assert_eq!(nvml.device_count(), Ok(1));
        assert_eq!(
            nvml.mig_mode(1).unwrap_err().code,
            NvmlCode::INVALID_ARGUMENT
        );
        // The struct version matched the C sizeof, NOT_SUPPORTED and INVALID_ARGUMENT skipped.
        let profiles = nvml.gpu_instance_profiles(0).unwrap();
        assert_eq!(profiles.len(), 1);
        assert_eq!(
            (profiles[0].id, profiles[0].name.to_string()),
            (19, "1g.18gb".to_owned())
        );
        let placements = nvml.gpu_instance_possible_placements(0, 19).unwrap();
        assert_eq!(placements.len(), 7);
        assert_eq!(placements[6], Placement { start: 6, size: 1 });
        assert_eq!(nvml.gpu_instance_remaining_capacity(0, 19), Ok(6));
        let err = nvml.gpu_instance_remaining_capacity(0, 99).unwrap_err();
        assert_eq!(err.code, NvmlCode::INVALID_ARGUMENT);
        let gis = nvml.gpu_instances(0).unwrap();
        let expected = GpuInstance {
            id: 1,
            profile_id: 19,
            placement: Placement { start: 2, size: 1 },
        };
        assert_eq!(gis, [expected]);
        // Symbols the stub lacks: an error naming the call, never a panic.
        let err = nvml
            .create_gpu_instance(0, 19, Placement { start: 0, size: 1 })
            .unwrap_err();
        assert_eq!(
            err,
            NvmlError::new(
                "nvmlDeviceCreateGpuInstanceWithPlacement",
                NvmlCode::FUNCTION_NOT_FOUND
            )
        );
        assert_eq!(
            nvml.destroy_gpu_instance(0, 1).unwrap_err().code,
            NvmlCode::FUNCTION_NOT_FOUND
        );
        assert_eq!(
            nvml.compute_instances(0, 1).unwrap_err().code,
            NvmlCode::FUNCTION_NOT_FOUND
        );
        assert_eq!(
            nvml.device_info(0).unwrap_err().code,
            NvmlCode::FUNCTION_NOT_FOUND
        );
        assert_eq!(
            nvml.mig_mode(0).unwrap_err().code,
            NvmlCode::FUNCTION_NOT_FOUND
        );
        assert_eq!(nvml.supported_vgpu_types(0), Ok(Vec::new()));
        assert_eq!(
            nvml.nvlink_peers(0).unwrap_err().code,
            NvmlCode::FUNCTION_NOT_FOUND
        );
        let telemetry = nvml.telemetry(0).unwrap();
        assert_eq!(telemetry, Telemetry::default());
        let err = nvml.wait_xid_event(1).unwrap_err();
        assert_eq!(
            err,
            NvmlError::new("nvmlEventSetCreate", NvmlCode::FUNCTION_NOT_FOUND)
        );
    }

    /// Tier 4: read-only calls on a real GPU (`cargo test -p gpu -- --ignored real_gpu
    /// --nocapture`). Changes nothing on the GPU: no MIG mode change, no instance created.
    #[test]
    #[ignore = "needs an NVIDIA GPU and driver"]
    fn real_gpu_read_only_probe() {
        let nvml = NvmlLibrary::load().unwrap();
        println!("driver {}", nvml.driver_version().unwrap());
        let count = nvml.device_count().unwrap();
        assert!(count >= 1);
        for index in 0..count {
            let info = nvml.device_info(index).unwrap();
            println!("{info:?}");
            assert!(info.uuid.starts_with("GPU-"), "{info:?}");
            assert!(info.memory_total_mib > 0);
            println!("mig {:?}", nvml.mig_mode(index));
            println!("telemetry {:?}", nvml.telemetry(index).unwrap());
            for p in nvml.gpu_instance_profiles(index).unwrap_or_default() {
                let placements = nvml.gpu_instance_possible_placements(index, p.id);
                let remaining = nvml.gpu_instance_remaining_capacity(index, p.id);
                println!("profile {p:?} placements {placements:?} remaining {remaining:?}");
            }
            let instances = nvml.gpu_instances(index);
            println!("gpu instances {instances:?}");
            for gi in instances.unwrap_or_default() {
                println!(
                    "  ci profiles {:?}",
                    nvml.compute_instance_profiles(index, gi.id)
                );
                println!("  cis {:?}", nvml.compute_instances(index, gi.id));
            }
            println!("vgpu types {:?}", nvml.supported_vgpu_types(index));
            println!("nvlink peers {:?}", nvml.nvlink_peers(index));
            // A data-centre GPU with ECC on answers the counters; what it lacks is `None`.
            let signals = nvml.health_signals(index).unwrap();
            println!("health signals {signals:?}");
        }
        println!("xid {:?}", nvml.wait_xid_event(100));
    }

    #[test]
    fn bus_ids_with_eight_digit_domains_parse() {
        let a = parse_bus_id("x", "00000000:1B:00.0").unwrap();
        assert_eq!(a.to_string(), "0000:1b:00.0");
        assert_eq!(
            parse_bus_id("x", "garbage").unwrap_err().code,
            NvmlCode::UNKNOWN
        );
    }
}
