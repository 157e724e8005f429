//! The NVML calls nvml-wrapper offers only as raw functions (or wraps wrongly): MIG GPU and
//! compute instances, the NVLink remote device type, and the Xid event set.
//!
//! This is the crate's one place for NVML FFI. Every function pointer is taken from the library's
//! symbol table with [`sym`], which turns a missing symbol into `FUNCTION_NOT_FOUND`: the sys
//! crate's own convenience methods `expect()` the symbol and would panic on an older driver.
//! Raw instance handles never leave this module; callers see ids and plain values.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_uint};
use std::mem;
use std::ptr;
use std::sync::Arc;

use nvml_wrapper::{Device, Nvml as Wrapper};
use nvml_wrapper_sys::bindings as sys;

use crate::nvml::{NvlinkFabric, NvmlCode, NvmlError, NvmlResult, Placement};

/// `NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2)` from nvml.h: the struct size with the
/// version number in the top byte, so NVML knows which layout the caller passed.
pub(crate) const GPU_INSTANCE_PROFILE_INFO_V2: u32 =
    struct_version(mem::size_of::<sys::nvmlGpuInstanceProfileInfo_v2_t>(), 2);
/// `NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 2)`.
pub(crate) const COMPUTE_INSTANCE_PROFILE_INFO_V2: u32 = struct_version(
    mem::size_of::<sys::nvmlComputeInstanceProfileInfo_v2_t>(),
    2,
);

const fn struct_version(size: usize, version: u32) -> u32 {
    size as u32 | (version << 24)
}

/// MIG has at most 7 GPU instances and 8 compute slices; buffers are never smaller than this,
/// in case a profile reports a smaller instance count than NVML then writes.
const MIN_INSTANCE_BUFFER: usize = 8;

/// NVML's UUID buffer size (`NVML_DEVICE_UUID_V2_BUFFER_SIZE`).
const UUID_BUFFER: usize = sys::NVML_DEVICE_UUID_V2_BUFFER_SIZE as usize;

/// The function pointer of a symbol, or `FUNCTION_NOT_FOUND` when the loaded driver lacks it.
fn sym<F: Copy, E>(field: &Result<F, E>, call: &'static str) -> NvmlResult<F> {
    field
        .as_ref()
        .map(|f| *f)
        .map_err(|_| NvmlError::new(call, NvmlCode::FUNCTION_NOT_FOUND))
}

fn check(call: &'static str, ret: sys::nvmlReturn_t) -> NvmlResult<()> {
    if ret == sys::nvmlReturn_enum_NVML_SUCCESS {
        Ok(())
    } else {
        Err(NvmlError::new(call, NvmlCode(ret)))
    }
}

fn lib<'a>(device: &'a Device<'_>) -> &'a sys::NvmlLib {
    device.nvml().lib()
}

fn handle(device: &Device<'_>) -> sys::nvmlDevice_t {
    // SAFETY: reading the handle is harmless; it is only passed to NVML while `device`, and so
    // the library it came from, is alive.
    unsafe { device.handle() }
}

/// A C string in a fixed NVML buffer, up to its first NUL (the whole buffer if none).
pub(crate) fn c_buffer_to_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf.iter().map(|&c| c as u8).collect();
    match CStr::from_bytes_until_nul(&bytes) {
        Ok(s) => s.to_string_lossy().into_owned(),
        Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// `nvmlDeviceGetGpuInstanceProfileInfoV` for one profile index (`NVML_GPU_INSTANCE_PROFILE_*`).
pub(crate) fn gpu_instance_profile(
    device: &Device<'_>,
    profile_index: u32,
) -> NvmlResult<sys::nvmlGpuInstanceProfileInfo_v2_t> {
    const CALL: &str = "nvmlDeviceGetGpuInstanceProfileInfoV";
    let f = sym(&lib(device).nvmlDeviceGetGpuInstanceProfileInfoV, CALL)?;
    // SAFETY: the struct holds only integers and a char array; all zeroes is a valid value.
    let mut info: sys::nvmlGpuInstanceProfileInfo_v2_t = unsafe { mem::zeroed() };
    info.version = GPU_INSTANCE_PROFILE_INFO_V2;
    // SAFETY: `info` is a writable v2 struct and its `version` field tells NVML so; the device
    // handle is live.
    check(CALL, unsafe { f(handle(device), profile_index, &mut info) })?;
    Ok(info)
}

/// `nvmlDeviceGetGpuInstancePossiblePlacements_v2`: every placement of a profile, free or not.
pub(crate) fn gpu_instance_possible_placements(
    device: &Device<'_>,
    profile_id: u32,
) -> NvmlResult<Vec<Placement>> {
    const CALL: &str = "nvmlDeviceGetGpuInstancePossiblePlacements_v2";
    let f = sym(
        &lib(device).nvmlDeviceGetGpuInstancePossiblePlacements_v2,
        CALL,
    )?;
    let mut count: c_uint = 0;
    // SAFETY: a null array asks NVML for the number of placements only, written to `count`.
    check(CALL, unsafe {
        f(handle(device), profile_id, ptr::null_mut(), &mut count)
    })?;
    if count == 0 {
        return Ok(Vec::new());
    }
    let empty = sys::nvmlGpuInstancePlacement_t { start: 0, size: 0 };
    let mut buf = vec![empty; (count as usize).max(MIN_INSTANCE_BUFFER)];
    // SAFETY: `buf` holds at least `count` placements, the number NVML just reported; NVML
    // writes the placements and their number.
    check(CALL, unsafe {
        f(handle(device), profile_id, buf.as_mut_ptr(), &mut count)
    })?;
    buf.truncate(count as usize);
    Ok(buf
        .iter()
        .map(|p| Placement {
            start: p.start,
            size: p.size,
        })
        .collect())
}

/// `nvmlDeviceGetGpuInstanceRemainingCapacity`.
pub(crate) fn gpu_instance_remaining_capacity(
    device: &Device<'_>,
    profile_id: u32,
) -> NvmlResult<u32> {
    const CALL: &str = "nvmlDeviceGetGpuInstanceRemainingCapacity";
    let f = sym(&lib(device).nvmlDeviceGetGpuInstanceRemainingCapacity, CALL)?;
    let mut count: c_uint = 0;
    // SAFETY: `count` is a valid out-pointer; the device handle is live.
    check(CALL, unsafe { f(handle(device), profile_id, &mut count) })?;
    Ok(count)
}

/// What NVML says about a GPU instance (`nvmlGpuInstanceGetInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GpuInstanceInfo {
    pub id: u32,
    pub profile_id: u32,
    pub placement: Placement,
}

/// What NVML says about a compute instance (`nvmlComputeInstanceGetInfo_v2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ComputeInstanceInfo {
    pub id: u32,
    pub profile_id: u32,
    pub placement: Placement,
}

/// A GPU instance handle, valid while its device is borrowed (NVML handles live until the
/// instance is destroyed or the library shut down).
pub(crate) struct GpuInstance<'d> {
    device: &'d Device<'d>,
    raw: sys::nvmlGpuInstance_t,
}

/// `nvmlDeviceGetGpuInstances` for one profile, with each instance's info.
pub(crate) fn gpu_instances(
    device: &Device<'_>,
    profile_id: u32,
    max_instances: u32,
) -> NvmlResult<Vec<GpuInstanceInfo>> {
    const CALL: &str = "nvmlDeviceGetGpuInstances";
    let f = sym(&lib(device).nvmlDeviceGetGpuInstances, CALL)?;
    // NVML does not take the buffer size: the array must hold the profile's instance count.
    let mut buf: Vec<sys::nvmlGpuInstance_t> =
        vec![ptr::null_mut(); (max_instances as usize).max(MIN_INSTANCE_BUFFER)];
    let mut count: c_uint = 0;
    // SAFETY: `buf` is at least as long as the profile's instance count, the most NVML writes;
    // `count` is a valid out-pointer.
    check(CALL, unsafe {
        f(handle(device), profile_id, buf.as_mut_ptr(), &mut count)
    })?;
    buf.truncate(count as usize);
    buf.into_iter()
        .map(|raw| gpu_instance_info(device, raw))
        .collect()
}

fn gpu_instance_info(
    device: &Device<'_>,
    raw: sys::nvmlGpuInstance_t,
) -> NvmlResult<GpuInstanceInfo> {
    const CALL: &str = "nvmlGpuInstanceGetInfo";
    let f = sym(&lib(device).nvmlGpuInstanceGetInfo, CALL)?;
    // SAFETY: the struct holds a pointer and integers; all zeroes (null, 0) is a valid value.
    let mut info: sys::nvmlGpuInstanceInfo_t = unsafe { mem::zeroed() };
    // SAFETY: `raw` came from NVML for this device just now; `info` is a valid out-pointer.
    check(CALL, unsafe { f(raw, &mut info) })?;
    Ok(GpuInstanceInfo {
        id: info.id,
        profile_id: info.profileId,
        placement: Placement {
            start: info.placement.start,
            size: info.placement.size,
        },
    })
}

/// `nvmlDeviceCreateGpuInstanceWithPlacement`, then the new instance's info.
pub(crate) fn create_gpu_instance(
    device: &Device<'_>,
    profile_id: u32,
    placement: Placement,
) -> NvmlResult<GpuInstanceInfo> {
    const CALL: &str = "nvmlDeviceCreateGpuInstanceWithPlacement";
    let f = sym(&lib(device).nvmlDeviceCreateGpuInstanceWithPlacement, CALL)?;
    let wanted = sys::nvmlGpuInstancePlacement_t {
        start: placement.start,
        size: placement.size,
    };
    let mut raw: sys::nvmlGpuInstance_t = ptr::null_mut();
    // SAFETY: `wanted` is a valid placement read by NVML; `raw` is a valid out-pointer.
    check(CALL, unsafe {
        f(handle(device), profile_id, &wanted, &mut raw)
    })?;
    gpu_instance_info(device, raw)
}

impl<'d> GpuInstance<'d> {
    /// `nvmlDeviceGetGpuInstanceById`.
    pub(crate) fn by_id(device: &'d Device<'d>, id: u32) -> NvmlResult<Self> {
        const CALL: &str = "nvmlDeviceGetGpuInstanceById";
        let f = sym(&lib(device).nvmlDeviceGetGpuInstanceById, CALL)?;
        let mut raw: sys::nvmlGpuInstance_t = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the device handle is live.
        check(CALL, unsafe { f(handle(device), id, &mut raw) })?;
        Ok(Self { device, raw })
    }

    /// `nvmlGpuInstanceDestroy`.
    pub(crate) fn destroy(self) -> NvmlResult<()> {
        const CALL: &str = "nvmlGpuInstanceDestroy";
        let f = sym(&lib(self.device).nvmlGpuInstanceDestroy, CALL)?;
        // SAFETY: the handle came from NVML for this device; `self` is consumed, so it is not
        // used again after the instance is gone.
        check(CALL, unsafe { f(self.raw) })
    }

    /// `nvmlGpuInstanceGetComputeInstanceProfileInfoV` for one profile index, with the shared
    /// engine profile (the only one NVML defines).
    pub(crate) fn compute_instance_profile(
        &self,
        profile_index: u32,
    ) -> NvmlResult<sys::nvmlComputeInstanceProfileInfo_v2_t> {
        const CALL: &str = "nvmlGpuInstanceGetComputeInstanceProfileInfoV";
        let f = sym(
            &lib(self.device).nvmlGpuInstanceGetComputeInstanceProfileInfoV,
            CALL,
        )?;
        // SAFETY: the struct holds only integers and a char array; all zeroes is valid.
        let mut info: sys::nvmlComputeInstanceProfileInfo_v2_t = unsafe { mem::zeroed() };
        info.version = COMPUTE_INSTANCE_PROFILE_INFO_V2;
        let shared = sys::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED;
        // SAFETY: `info` is a writable v2 struct whose `version` says so; the handle is live.
        check(CALL, unsafe {
            f(self.raw, profile_index, shared, &mut info)
        })?;
        Ok(info)
    }

    /// `nvmlGpuInstanceGetComputeInstances` for one profile, with each instance's info.
    pub(crate) fn compute_instances(
        &self,
        profile_id: u32,
        max_instances: u32,
    ) -> NvmlResult<Vec<ComputeInstanceInfo>> {
        const CALL: &str = "nvmlGpuInstanceGetComputeInstances";
        let f = sym(&lib(self.device).nvmlGpuInstanceGetComputeInstances, CALL)?;
        let mut buf: Vec<sys::nvmlComputeInstance_t> =
            vec![ptr::null_mut(); (max_instances as usize).max(MIN_INSTANCE_BUFFER)];
        let mut count: c_uint = 0;
        // SAFETY: `buf` is at least as long as the profile's instance count, the most NVML
        // writes; `count` is a valid out-pointer.
        check(CALL, unsafe {
            f(self.raw, profile_id, buf.as_mut_ptr(), &mut count)
        })?;
        buf.truncate(count as usize);
        buf.into_iter()
            .map(|raw| self.compute_instance_info(raw))
            .collect()
    }

    fn compute_instance_info(
        &self,
        raw: sys::nvmlComputeInstance_t,
    ) -> NvmlResult<ComputeInstanceInfo> {
        const CALL: &str = "nvmlComputeInstanceGetInfo_v2";
        let f = sym(&lib(self.device).nvmlComputeInstanceGetInfo_v2, CALL)?;
        // SAFETY: the struct holds pointers and integers; all zeroes is a valid value.
        let mut info: sys::nvmlComputeInstanceInfo_t = unsafe { mem::zeroed() };
        // SAFETY: `raw` came from NVML for this GPU instance; `info` is a valid out-pointer.
        check(CALL, unsafe { f(raw, &mut info) })?;
        Ok(ComputeInstanceInfo {
            id: info.id,
            profile_id: info.profileId,
            placement: Placement {
                start: info.placement.start,
                size: info.placement.size,
            },
        })
    }

    /// `nvmlGpuInstanceCreateComputeInstance`, then the new instance's info.
    pub(crate) fn create_compute_instance(
        &self,
        profile_id: u32,
    ) -> NvmlResult<ComputeInstanceInfo> {
        const CALL: &str = "nvmlGpuInstanceCreateComputeInstance";
        let f = sym(&lib(self.device).nvmlGpuInstanceCreateComputeInstance, CALL)?;
        let mut raw: sys::nvmlComputeInstance_t = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the GPU instance handle is live.
        check(CALL, unsafe { f(self.raw, profile_id, &mut raw) })?;
        self.compute_instance_info(raw)
    }

    /// `nvmlGpuInstanceGetComputeInstanceById` then `nvmlComputeInstanceDestroy`.
    pub(crate) fn destroy_compute_instance(&self, id: u32) -> NvmlResult<()> {
        const BY_ID: &str = "nvmlGpuInstanceGetComputeInstanceById";
        const DESTROY: &str = "nvmlComputeInstanceDestroy";
        let by_id = sym(
            &lib(self.device).nvmlGpuInstanceGetComputeInstanceById,
            BY_ID,
        )?;
        let destroy = sym(&lib(self.device).nvmlComputeInstanceDestroy, DESTROY)?;
        let mut raw: sys::nvmlComputeInstance_t = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the GPU instance handle is live.
        check(BY_ID, unsafe { by_id(self.raw, id, &mut raw) })?;
        // SAFETY: `raw` was just returned by NVML and is not used after this call.
        check(DESTROY, unsafe { destroy(raw) })
    }
}

/// `nvmlDeviceGetNvLinkRemoteDeviceType`: `NVML_NVLINK_DEVICE_TYPE_*` of the link's far end.
/// (nvml-wrapper's `NvLink::remote_device_type` writes into a temporary and always answers
/// `Unknown`, so it cannot be used.)
pub(crate) fn nvlink_remote_device_type(device: &Device<'_>, link: u32) -> NvmlResult<u32> {
    const CALL: &str = "nvmlDeviceGetNvLinkRemoteDeviceType";
    let f = sym(&lib(device).nvmlDeviceGetNvLinkRemoteDeviceType, CALL)?;
    let mut kind: sys::nvmlIntNvLinkDeviceType_t =
        sys::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    // SAFETY: `kind` is a valid out-pointer; the device handle is live.
    check(CALL, unsafe { f(handle(device), link, &mut kind) })?;
    Ok(kind)
}

/// `nvmlDeviceGetActiveVgpus`: the handles of the GPU's active vGPU instances. NVML answers
/// `INSUFFICIENT_SIZE` with the count when the buffer is too small (NVML API reference,
/// `nvmlDeviceGetActiveVgpus`); the count can grow between the two calls, so it is asked again.
pub(crate) fn active_vgpus(device: &Device<'_>) -> NvmlResult<Vec<u32>> {
    const CALL: &str = "nvmlDeviceGetActiveVgpus";
    let f = sym(&lib(device).nvmlDeviceGetActiveVgpus, CALL)?;
    let mut count: c_uint = 0;
    for _ in 0..4 {
        let mut buf: Vec<sys::nvmlVgpuInstance_t> = vec![0; count as usize];
        let ptr = if buf.is_empty() {
            ptr::null_mut()
        } else {
            buf.as_mut_ptr()
        };
        // SAFETY: `buf` holds `count` elements (or the pointer is null with a count of 0, which
        // NVML documents as the size query); the device handle is live.
        let ret = unsafe { f(handle(device), &mut count, ptr) };
        if ret == sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
            continue;
        }
        check(CALL, ret)?;
        buf.truncate(count as usize);
        return Ok(buf);
    }
    Err(NvmlError::new(CALL, NvmlCode::UNKNOWN))
}

/// `nvmlDeviceGetVgpuUtilization`: the SM utilisation, percent, of each vGPU instance NVML has a
/// sample for since `lastSeenTimeStamp` 0 (its whole buffer). Instances without a sample are
/// left out; `NOT_FOUND` (no sample at all yet) is an empty answer (NVML API reference).
pub(crate) fn vgpu_utilization(
    device: &Device<'_>,
    instances: usize,
) -> NvmlResult<Vec<(u32, u32)>> {
    const CALL: &str = "nvmlDeviceGetVgpuUtilization";
    let f = sym(&lib(device).nvmlDeviceGetVgpuUtilization, CALL)?;
    if instances == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the sample struct is plain data (integers and a union of numbers).
    let zero: sys::nvmlVgpuInstanceUtilizationSample_t = unsafe { mem::zeroed() };
    let mut buf = vec![zero; instances.max(MIN_INSTANCE_BUFFER)];
    let mut count = buf.len() as c_uint;
    let mut kind: sys::nvmlValueType_t = 0;
    // SAFETY: `buf` holds `count` samples; `kind` and `count` are valid out-pointers.
    let ret = unsafe { f(handle(device), 0, &mut kind, &mut count, buf.as_mut_ptr()) };
    if ret == sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND {
        return Ok(Vec::new());
    }
    check(CALL, ret)?;
    buf.truncate((count as usize).min(buf.len()));
    Ok(buf
        .iter()
        .map(|s| (s.vgpuInstance, value_as_u32(kind, &s.smUtil)))
        .collect())
}

/// A sample value of the type NVML says it wrote.
fn value_as_u32(kind: sys::nvmlValueType_t, v: &sys::nvmlValue_t) -> u32 {
    // SAFETY: NVML names the union member it filled in `kind`; every member is a plain number.
    unsafe {
        match kind {
            sys::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG => {
                u32::try_from(v.ullVal).unwrap_or(u32::MAX)
            }
            sys::nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE => v.dVal.clamp(0.0, 1e9) as u32,
            _ => v.uiVal,
        }
    }
}

/// `nvmlDeviceGetGpuInstanceId` on a MIG device handle: the GPU instance it belongs to.
pub(crate) fn mig_device_gpu_instance_id(mig_device: &Device<'_>) -> NvmlResult<u32> {
    const CALL: &str = "nvmlDeviceGetGpuInstanceId";
    let f = sym(&lib(mig_device).nvmlDeviceGetGpuInstanceId, CALL)?;
    let mut id: c_uint = 0;
    // SAFETY: `id` is a valid out-pointer; the MIG device handle is live.
    check(CALL, unsafe { f(handle(mig_device), &mut id) })?;
    Ok(id)
}

/// What `nvmlDeviceGetRemappedRows` answers (Ampere and newer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RemappedRows {
    /// Rows remapped for correctable errors.
    pub(crate) correctable: u64,
    /// Rows remapped for uncorrectable errors.
    pub(crate) uncorrectable: u64,
    /// A remapping failed.
    pub(crate) failure: bool,
}

/// `nvmlDeviceGetRemappedRows`; `None` where the GPU has no row remapping (`NOT_SUPPORTED`, as
/// every pre-Ampere GPU answers) or the driver lacks the symbol. nvml-wrapper has no safe call.
pub(crate) fn remapped_rows(device: &Device<'_>) -> NvmlResult<Option<RemappedRows>> {
    const CALL: &str = "nvmlDeviceGetRemappedRows";
    let Ok(f) = sym(&lib(device).nvmlDeviceGetRemappedRows, CALL) else {
        return Ok(None);
    };
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: four valid out-pointers to `unsigned int`; the device handle is live.
    let ret = unsafe {
        f(
            handle(device),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failure,
        )
    };
    match check(CALL, ret) {
        Ok(()) => Ok(Some(RemappedRows {
            correctable: u64::from(corr),
            uncorrectable: u64::from(unc),
            failure: failure != 0,
        })),
        Err(e) if e.code == NvmlCode::NOT_SUPPORTED => Ok(None),
        Err(e) => Err(e),
    }
}

/// The far end of an NVLink is an NVSwitch (not a GPU).
pub(crate) const NVLINK_REMOTE_SWITCH: u32 =
    sys::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_SWITCH;
/// The far end of an NVLink is a GPU.
pub(crate) const NVLINK_REMOTE_GPU: u32 =
    sys::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_GPU;

/// `nvmlDeviceGetGpuFabricInfo` (Hopper and newer): where the GPU stands in the NVLink fabric.
/// The unversioned call and struct: present since R530, enough for the fields read here.
pub(crate) fn gpu_fabric_info(device: &Device<'_>) -> NvmlResult<NvlinkFabric> {
    const CALL: &str = "nvmlDeviceGetGpuFabricInfo";
    let f = sym(&lib(device).nvmlDeviceGetGpuFabricInfo, CALL)?;
    // SAFETY: a plain C struct of integers and byte arrays; all-zero is a valid value.
    let mut info: sys::nvmlGpuFabricInfo_t = unsafe { mem::zeroed() };
    // SAFETY: `info` is a valid out-pointer of the struct the call fills; the handle is live.
    check(CALL, unsafe { f(handle(device), &mut info) })?;
    Ok(fabric_of(&info))
}

/// The fabric a filled-in `nvmlGpuFabricInfo_t` names: only a completed, successful registration
/// puts the GPU on the fabric (NVML API reference, `nvmlDeviceGetGpuFabricInfo`); a GPU whose
/// fabric state is `NOT_SUPPORTED` cannot say, like a driver without the call.
pub(crate) fn fabric_of(info: &sys::nvmlGpuFabricInfo_t) -> NvlinkFabric {
    match u32::from(info.state) {
        sys::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED => NvlinkFabric::HostSwitches,
        sys::NVML_GPU_FABRIC_STATE_COMPLETED
            if info.status == sys::nvmlReturn_enum_NVML_SUCCESS =>
        {
            NvlinkFabric::Registered {
                cluster_uuid: info.clusterUuid,
                clique_id: info.cliqueId,
            }
        }
        _ => NvlinkFabric::Unregistered,
    }
}

/// One NVML event set registered for critical Xid errors on every GPU that accepts it.
///
/// Raw rather than nvml-wrapper's `EventSet`, which borrows the `Nvml` it came from and so
/// cannot be stored next to it; holding an `Arc` of the library here keeps NVML initialised
/// until the set is freed, and events that arrive between two waits stay queued in the set
/// (re-creating a set per wait would lose them).
pub(crate) struct XidEventSet {
    nvml: Arc<Wrapper>,
    set: sys::nvmlEventSet_t,
    registered: u32,
}

// SAFETY: the set handle is a pointer into NVML's state, usable from any thread. NVML event set
// operations are not thread-safe, so the owner keeps the set behind a Mutex (one thread at a
// time); `XidEventSet` is deliberately not `Sync`.
unsafe impl Send for XidEventSet {}

impl std::fmt::Debug for XidEventSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XidEventSet")
            .field("registered", &self.registered)
            .finish()
    }
}

impl XidEventSet {
    /// Creates the set and registers every device; devices that refuse are skipped.
    pub(crate) fn create(nvml: Arc<Wrapper>) -> NvmlResult<Self> {
        const CREATE: &str = "nvmlEventSetCreate";
        let f = sym(&nvml.lib().nvmlEventSetCreate, CREATE)?;
        let mut set: sys::nvmlEventSet_t = ptr::null_mut();
        // SAFETY: `set` is a valid out-pointer.
        check(CREATE, unsafe { f(&mut set) })?;
        let mut this = Self {
            nvml,
            set,
            registered: 0,
        };
        this.register_all();
        Ok(this)
    }

    fn register_all(&mut self) {
        const CALL: &str = "nvmlDeviceRegisterEvents";
        let Ok(register) = sym(&self.nvml.lib().nvmlDeviceRegisterEvents, CALL) else {
            return;
        };
        let count = self.nvml.device_count().unwrap_or(0);
        for index in 0..count {
            let Ok(device) = self.nvml.device_by_index(index) else {
                continue;
            };
            let xid = u64::from(sys::nvmlEventTypeXidCriticalError);
            // SAFETY: the device handle and the set are live and belong to the same library.
            let ret = unsafe { register(handle(&device), xid, self.set) };
            match check(CALL, ret) {
                Ok(()) => self.registered += 1,
                Err(e) => tracing::debug!(gpu = index, error = %e, "no Xid events from this GPU"),
            }
        }
    }

    /// How many GPUs the set listens to.
    pub(crate) fn registered(&self) -> u32 {
        self.registered
    }

    /// `nvmlEventSetWait_v2`: the next critical Xid as (GPU UUID, Xid), `None` on timeout.
    pub(crate) fn wait(&self, timeout_ms: u32) -> NvmlResult<Option<(String, u64)>> {
        const CALL: &str = "nvmlEventSetWait_v2";
        let f = sym(&self.nvml.lib().nvmlEventSetWait_v2, CALL)?;
        // SAFETY: the struct holds pointers and integers; all zeroes is a valid value.
        let mut data: sys::nvmlEventData_t = unsafe { mem::zeroed() };
        // SAFETY: the set is live (freed only on drop) and `data` is a valid out-pointer.
        let ret = unsafe { f(self.set, &mut data, timeout_ms) };
        if ret == sys::nvmlReturn_enum_NVML_ERROR_TIMEOUT {
            return Ok(None);
        }
        check(CALL, ret)?;
        if data.eventType & u64::from(sys::nvmlEventTypeXidCriticalError) == 0 {
            return Ok(None);
        }
        let uuid = self.uuid_of(data.device)?;
        Ok(Some((uuid, data.eventData)))
    }

    fn uuid_of(&self, device: sys::nvmlDevice_t) -> NvmlResult<String> {
        const CALL: &str = "nvmlDeviceGetUUID";
        if device.is_null() {
            return Err(NvmlError::new(CALL, NvmlCode::INVALID_ARGUMENT));
        }
        let f = sym(&self.nvml.lib().nvmlDeviceGetUUID, CALL)?;
        let mut buf: [c_char; UUID_BUFFER] = [0; UUID_BUFFER];
        // SAFETY: `device` is the handle NVML put in the event; `buf` is writable for the
        // length passed.
        check(CALL, unsafe {
            f(device, buf.as_mut_ptr(), UUID_BUFFER as c_uint)
        })?;
        Ok(c_buffer_to_string(&buf))
    }
}

impl Drop for XidEventSet {
    fn drop(&mut self) {
        if let Ok(free) = sym(&self.nvml.lib().nvmlEventSetFree, "nvmlEventSetFree") {
            // SAFETY: the set came from nvmlEventSetCreate, is freed once, and our `Arc` keeps
            // the library initialised until after this call.
            let _ = unsafe { free(self.set) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fabric_info(state: u32, status: sys::nvmlReturn_t) -> sys::nvmlGpuFabricInfo_t {
        sys::nvmlGpuFabricInfo_t {
            clusterUuid: [3; 16],
            status,
            cliqueId: 5,
            state: u8::try_from(state).unwrap(),
        }
    }

    #[test]
    fn only_a_completed_registration_puts_a_gpu_on_the_fabric() {
        let ok = sys::nvmlReturn_enum_NVML_SUCCESS;
        assert_eq!(
            fabric_of(&fabric_info(sys::NVML_GPU_FABRIC_STATE_COMPLETED, ok)),
            NvlinkFabric::Registered {
                cluster_uuid: [3; 16],
                clique_id: 5
            }
        );
        let failed = sys::nvmlReturn_enum_NVML_ERROR_UNKNOWN;
        for (state, status) in [
            (sys::NVML_GPU_FABRIC_STATE_COMPLETED, failed),
            (sys::NVML_GPU_FABRIC_STATE_IN_PROGRESS, ok),
            (sys::NVML_GPU_FABRIC_STATE_NOT_STARTED, ok),
        ] {
            assert_eq!(
                fabric_of(&fabric_info(state, status)),
                NvlinkFabric::Unregistered
            );
        }
        assert_eq!(
            fabric_of(&fabric_info(sys::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED, ok)),
            NvlinkFabric::HostSwitches
        );
    }

    #[test]
    fn struct_versions_match_nvml_h() {
        // nvml.h: sizeof(nvmlGpuInstanceProfileInfo_v2_t) is 152 on x86-64 and aarch64
        // (11 uints, 4 bytes padding, one u64, a 96-byte name).
        assert_eq!(mem::size_of::<sys::nvmlGpuInstanceProfileInfo_v2_t>(), 152);
        assert_eq!(GPU_INSTANCE_PROFILE_INFO_V2, 0x0200_0098);
        // 10 uints and a 96-byte name.
        assert_eq!(
            mem::size_of::<sys::nvmlComputeInstanceProfileInfo_v2_t>(),
            136
        );
        assert_eq!(COMPUTE_INSTANCE_PROFILE_INFO_V2, 0x0200_0088);
    }

    #[test]
    fn c_buffers_stop_at_nul_and_survive_garbage() {
        let mut buf = [0 as c_char; 16];
        for (i, b) in b"MIG 1g.18gb".iter().enumerate() {
            buf[i] = *b as c_char;
        }
        assert_eq!(c_buffer_to_string(&buf), "MIG 1g.18gb");
        let unterminated = [b'a' as c_char, 0xff_u8 as c_char, b'b' as c_char];
        assert_eq!(c_buffer_to_string(&unterminated), "a\u{fffd}b");
    }

    #[test]
    fn missing_symbols_are_function_not_found() {
        let missing: Result<fn(), &str> = Err("no such symbol");
        let err = sym(&missing, "nvmlGpuInstanceDestroy").unwrap_err();
        assert_eq!(err.code, NvmlCode::FUNCTION_NOT_FOUND);
        assert_eq!(err.call, "nvmlGpuInstanceDestroy");
        assert_eq!(
            check("x", 23).unwrap_err().code,
            NvmlCode::INSUFFICIENT_RESOURCES
        );
        assert!(check("x", 0).is_ok());
    }
}
