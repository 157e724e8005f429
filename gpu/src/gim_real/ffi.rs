//! The C functions of GIM's host `libamdsmi.so` that vgpud uses, resolved at run time.
//!
//! Signatures from GIM's `smi-lib/interface/amdsmi.h` (@195468d6): handles are `void *`, enums
//! are 32-bit ints, `amdsmi_bdf_t` is a union over one `uint64_t`. The struct layouts are in
//! [`super::layout`]. This is the module's one place for FFI; handles never leave it.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_uint, c_void};
use std::path::Path;
use std::ptr;

use super::layout::{
    AsicInfo, GlobalProfileConfig, INIT_AMD_GPUS, MAX_NEAREST, MemoryConfig, NAME_LENGTH, Plain,
    Profile, ProfileConfig, TopologyNearest, UUID_SIZE, VramInfo,
};
use crate::amd::{AmdError, AmdResult, AmdStatus};
use crate::amd_real::c_text;

type Status = u32;
type Handle = *mut c_void;

const SUCCESS: Status = 0;
/// The library's name, and where GIM's `make install` in `smi-lib/` puts it
/// (`smi-lib/docs/install/install.md`). ROCm's library is `libamd_smi.so`, another codebase.
const CANDIDATES: &[&str] = &["libamdsmi.so", "/usr/local/lib/libamdsmi.so"];
/// Room for the ids of the current profile's partitions. The header does not say how many
/// the library writes; `AMDSMI_MAX_ACCELERATOR_PARTITIONS` is 8, so 64 leaves a wide margin.
const PARTITION_IDS: usize = 64;
/// `AMDSMI_GPU_UUID_SIZE` and more, plus a NUL the library cannot overwrite.
const UUID_BUFFER: usize = 2 * UUID_SIZE;

type HandleOut<T> = unsafe extern "C" fn(Handle, *mut T) -> Status;

struct Api {
    init: unsafe extern "C" fn(u64) -> Status,
    shut_down: unsafe extern "C" fn() -> Status,
    processor_handles: unsafe extern "C" fn(Handle, *mut u32, *mut Handle) -> Status,
    device_bdf: HandleOut<u64>,
    get_num_vf: unsafe extern "C" fn(Handle, *mut u32, *mut u32) -> Status,
    set_num_vf: unsafe extern "C" fn(Handle, u32) -> Status,
    device_uuid: Option<unsafe extern "C" fn(Handle, *mut c_uint, *mut c_char) -> Status>,
    asic_info: Option<HandleOut<AsicInfo>>,
    vram_info: Option<HandleOut<VramInfo>>,
    profile_config: Option<HandleOut<ProfileConfig>>,
    profile_config_global: Option<HandleOut<GlobalProfileConfig>>,
    current_profile: Option<unsafe extern "C" fn(Handle, *mut Profile, *mut u32) -> Status>,
    set_profile: Option<unsafe extern "C" fn(Handle, u32) -> Status>,
    memory_config: Option<HandleOut<MemoryConfig>>,
    set_memory: Option<unsafe extern "C" fn(Handle, u32) -> Status>,
    nearest: Option<unsafe extern "C" fn(Handle, u32, *mut TopologyNearest) -> Status>,
}

/// An initialised GIM host library. Not thread-safe by itself: the owner serialises calls.
pub(crate) struct Library {
    api: Api,
    // Keeps the code behind `api` mapped; dropped after `Drop::drop` has shut the library down.
    _lib: libloading::Library,
}

fn check(call: &'static str, status: Status) -> AmdResult<()> {
    if status == SUCCESS {
        Ok(())
    } else {
        // Same numbering as `AmdStatus` (both follow `amdsmi_status_t`).
        Err(AmdError::new(call, AmdStatus(status)))
    }
}

fn missing(call: &'static str) -> AmdError {
    AmdError::new(call, AmdStatus::NOT_SUPPORTED)
}

/// Looks a function up.
///
/// # Safety
/// `T` must be the C function's exact pointer type.
unsafe fn lookup<T: Copy>(lib: &libloading::Library, name: &str) -> Option<T> {
    // SAFETY: the caller guarantees `T` is the symbol's type; the value is copied out and only
    // used while `lib` stays loaded (it is stored next to the pointers in `Library`).
    unsafe { lib.get::<T>(name).ok().map(|sym| *sym) }
}

/// Looks up a function vgpud cannot work without.
///
/// # Safety
/// As [`lookup`].
unsafe fn required<T: Copy>(lib: &libloading::Library, name: &'static str) -> AmdResult<T> {
    // SAFETY: forwarded from the caller.
    unsafe { lookup(lib, name) }.ok_or_else(|| {
        tracing::warn!(
            symbol = name,
            "GIM host AMD SMI library lacks a required function"
        );
        AmdError::new(name, AmdStatus::FAIL_LOAD_SYMBOL)
    })
}

impl Library {
    /// Loads the first candidate that opens, resolves the functions and calls `amdsmi_init`.
    pub(crate) fn open() -> AmdResult<Self> {
        let lib = CANDIDATES
            .iter()
            .find_map(|name| {
                // SAFETY: loading runs the library's initialisers, which only set up its own
                // state. Nothing else of ours runs concurrently with it.
                unsafe { libloading::Library::new(*name) }.ok()
            })
            .ok_or_else(|| AmdError::new("dlopen libamdsmi.so", AmdStatus::FAIL_LOAD_MODULE))?;
        Self::init(lib)
    }

    /// Loads the library at `path`.
    pub(crate) fn open_path(path: &Path) -> AmdResult<Self> {
        // SAFETY: as in `open`.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|_| AmdError::new("dlopen libamdsmi.so", AmdStatus::FAIL_LOAD_MODULE))?;
        Self::init(lib)
    }

    fn init(lib: libloading::Library) -> AmdResult<Self> {
        // SAFETY: each pointer type is the function's signature in GIM's amdsmi.h (see the
        // module doc); the struct pointee types match its layouts (asserted in `layout`).
        let api = unsafe {
            Api {
                init: required(&lib, "amdsmi_init")?,
                shut_down: required(&lib, "amdsmi_shut_down")?,
                processor_handles: required(&lib, "amdsmi_get_processor_handles")?,
                device_bdf: required(&lib, "amdsmi_get_gpu_device_bdf")?,
                get_num_vf: required(&lib, "amdsmi_get_num_vf")?,
                set_num_vf: required(&lib, "amdsmi_set_num_vf")?,
                device_uuid: lookup(&lib, "amdsmi_get_gpu_device_uuid"),
                asic_info: lookup(&lib, "amdsmi_get_gpu_asic_info"),
                vram_info: lookup(&lib, "amdsmi_get_gpu_vram_info"),
                profile_config: lookup(&lib, "amdsmi_get_gpu_accelerator_partition_profile_config"),
                profile_config_global: lookup(
                    &lib,
                    "amdsmi_get_gpu_accelerator_partition_profile_config_global",
                ),
                current_profile: lookup(&lib, "amdsmi_get_gpu_accelerator_partition_profile"),
                set_profile: lookup(&lib, "amdsmi_set_gpu_accelerator_partition_profile"),
                memory_config: lookup(&lib, "amdsmi_get_gpu_memory_partition_config"),
                set_memory: lookup(&lib, "amdsmi_set_gpu_memory_partition_mode"),
                nearest: lookup(&lib, "amdsmi_get_link_topology_nearest"),
            }
        };
        // SAFETY: `init` is amdsmi_init(uint64_t); the library is loaded.
        check("amdsmi_init", unsafe { (api.init)(INIT_AMD_GPUS) })?;
        Ok(Self { api, _lib: lib })
    }

    /// Every GPU handle. The host library has no sockets (its calls for them answer
    /// `NOT_SUPPORTED`) and ignores the socket argument, so it gets NULL. It never reports a
    /// short buffer, so the count is asked for first.
    pub(crate) fn processors(&self) -> AmdResult<Vec<Processor<'_>>> {
        const CALL: &str = "amdsmi_get_processor_handles";
        let f = self.api.processor_handles;
        let mut count: u32 = 0;
        // SAFETY: a null array asks for the count only.
        check(CALL, unsafe {
            f(ptr::null_mut(), &mut count, ptr::null_mut())
        })?;
        let mut handles: Vec<Handle> = vec![ptr::null_mut(); count as usize];
        if count > 0 {
            // SAFETY: `handles` has room for `count` handles and `count` says so.
            check(CALL, unsafe {
                f(ptr::null_mut(), &mut count, handles.as_mut_ptr())
            })?;
        }
        handles.truncate(count as usize);
        Ok(handles
            .into_iter()
            .map(|handle| Processor { lib: self, handle })
            .collect())
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: amdsmi_init succeeded in `init`; no processor handle outlives `self`.
        let _ = unsafe { (self.api.shut_down)() };
    }
}

/// One GPU handle, valid while the library is borrowed.
pub(crate) struct Processor<'a> {
    lib: &'a Library,
    handle: Handle,
}

/// Calls `f(handle, &mut out)` on a zeroed heap value; NOT_SUPPORTED when `f` is absent.
fn fetch<T: Plain>(
    call: &'static str,
    handle: Handle,
    f: Option<HandleOut<T>>,
) -> AmdResult<Box<T>> {
    let f = f.ok_or_else(|| missing(call))?;
    let mut out = T::zeroed();
    // SAFETY: `f`'s pointee type is `T` (see `Library::init`); `out` is a valid, zeroed `T`.
    check(call, unsafe { f(handle, &mut *out) })?;
    Ok(out)
}

impl Processor<'_> {
    /// The raw `amdsmi_bdf_t` value (function 3 bits, device 5, bus 8, domain 48).
    pub(crate) fn bdf(&self) -> AmdResult<u64> {
        let mut bdf: u64 = 0;
        // SAFETY: `amdsmi_bdf_t` is a union over one `uint64_t`; `bdf` is a valid out-pointer.
        check("amdsmi_get_gpu_device_bdf", unsafe {
            (self.lib.api.device_bdf)(self.handle, &mut bdf)
        })?;
        Ok(bdf)
    }

    /// `amdsmi_get_gpu_device_uuid`.
    pub(crate) fn uuid(&self) -> AmdResult<String> {
        const CALL: &str = "amdsmi_get_gpu_device_uuid";
        let f = self.lib.api.device_uuid.ok_or_else(|| missing(CALL))?;
        let mut buf = [0u8; UUID_BUFFER];
        // One byte kept back so the text always ends in a NUL.
        let mut len = (UUID_BUFFER - 1) as c_uint;
        // SAFETY: `buf` is writable for `len` bytes and `len` says so.
        check(CALL, unsafe {
            f(self.handle, &mut len, buf.as_mut_ptr().cast())
        })?;
        Ok(c_text(&buf))
    }

    /// `amdsmi_asic_info_t.market_name` (at most 256 bytes, NUL or not).
    pub(crate) fn market_name(&self) -> AmdResult<String> {
        let info = fetch(
            "amdsmi_get_gpu_asic_info",
            self.handle,
            self.lib.api.asic_info,
        )?;
        Ok(c_text(&info.market_name[..NAME_LENGTH]))
    }

    /// `amdsmi_vram_info_t.vram_size`, in MB.
    pub(crate) fn vram_mb(&self) -> AmdResult<u64> {
        let info = fetch(
            "amdsmi_get_gpu_vram_info",
            self.handle,
            self.lib.api.vram_info,
        )?;
        Ok(info.vram_size_mb)
    }

    /// `amdsmi_get_num_vf`: (enabled, supported).
    pub(crate) fn num_vf(&self) -> AmdResult<(u32, u32)> {
        let (mut enabled, mut supported) = (0u32, 0u32);
        // SAFETY: the handle is live; both are valid out-pointers.
        check("amdsmi_get_num_vf", unsafe {
            (self.lib.api.get_num_vf)(self.handle, &mut enabled, &mut supported)
        })?;
        Ok((enabled, supported))
    }

    /// `amdsmi_set_num_vf`.
    pub(crate) fn set_num_vf(&self, count: u32) -> AmdResult<()> {
        // SAFETY: the handle is live; the count is passed by value.
        check("amdsmi_set_num_vf", unsafe {
            (self.lib.api.set_num_vf)(self.handle, count)
        })
    }

    /// `amdsmi_get_gpu_accelerator_partition_profile_config`: the profiles valid now.
    pub(crate) fn profile_config(&self) -> AmdResult<Box<ProfileConfig>> {
        fetch(
            "amdsmi_get_gpu_accelerator_partition_profile_config",
            self.handle,
            self.lib.api.profile_config,
        )
    }

    /// `amdsmi_get_gpu_accelerator_partition_profile_config_global`: every profile, with the VF
    /// counts each takes.
    pub(crate) fn profile_config_global(&self) -> AmdResult<Box<GlobalProfileConfig>> {
        fetch(
            "amdsmi_get_gpu_accelerator_partition_profile_config_global",
            self.handle,
            self.lib.api.profile_config_global,
        )
    }

    /// `amdsmi_get_gpu_accelerator_partition_profile`: the current profile.
    pub(crate) fn current_profile(&self) -> AmdResult<Box<Profile>> {
        const CALL: &str = "amdsmi_get_gpu_accelerator_partition_profile";
        let f = self.lib.api.current_profile.ok_or_else(|| missing(CALL))?;
        let mut profile = Profile::zeroed();
        let mut ids = [0u32; PARTITION_IDS];
        // SAFETY: `profile` is a valid zeroed profile; `ids` has room for far more partition
        // ids than a GPU has partitions (see PARTITION_IDS).
        check(CALL, unsafe {
            f(self.handle, &mut *profile, ids.as_mut_ptr())
        })?;
        Ok(profile)
    }

    /// `amdsmi_set_gpu_accelerator_partition_profile`.
    pub(crate) fn set_profile(&self, profile_index: u32) -> AmdResult<()> {
        const CALL: &str = "amdsmi_set_gpu_accelerator_partition_profile";
        let f = self.lib.api.set_profile.ok_or_else(|| missing(CALL))?;
        // SAFETY: the handle is live; the index is passed by value.
        check(CALL, unsafe { f(self.handle, profile_index) })
    }

    /// `amdsmi_get_gpu_memory_partition_config`.
    pub(crate) fn memory_config(&self) -> AmdResult<Box<MemoryConfig>> {
        fetch(
            "amdsmi_get_gpu_memory_partition_config",
            self.handle,
            self.lib.api.memory_config,
        )
    }

    /// `amdsmi_set_gpu_memory_partition_mode`.
    pub(crate) fn set_memory(&self, mode: u32) -> AmdResult<()> {
        const CALL: &str = "amdsmi_set_gpu_memory_partition_mode";
        let f = self.lib.api.set_memory.ok_or_else(|| missing(CALL))?;
        // SAFETY: the handle is live; the enum is passed by value as a 32-bit int.
        check(CALL, unsafe { f(self.handle, mode) })
    }

    /// The GPUs linked to this one by XGMI (`amdsmi_get_link_topology_nearest`).
    pub(crate) fn xgmi_peers(&self) -> AmdResult<Vec<Processor<'_>>> {
        const CALL: &str = "amdsmi_get_link_topology_nearest";
        let f = self.lib.api.nearest.ok_or_else(|| missing(CALL))?;
        let mut nearest = TopologyNearest::zeroed();
        // SAFETY: the handle is live; `nearest` is a valid zeroed struct.
        check(CALL, unsafe {
            f(self.handle, super::layout::LINK_TYPE_XGMI, &mut *nearest)
        })?;
        // The count is the library's word; the array is fixed.
        let count = (nearest.count as usize).min(MAX_NEAREST);
        Ok(nearest.processor_list[..count]
            .iter()
            .filter(|h| !h.is_null() && **h != self.handle)
            .map(|&handle| Processor {
                lib: self.lib,
                handle,
            })
            .collect())
    }
}
