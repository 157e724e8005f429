//! The AMD SMI C functions vgpud uses, resolved at run time from `libamd_smi.so`.
//!
//! The header is not available at build time, and AMD has changed struct layouts and enum values
//! between ROCm releases (`amdsmi_asic_info_t.market_name` grew from 64 to 256 bytes,
//! `amdsmi_vram_info_t` was replaced, the partition enums were renumbered). So only calls whose
//! C signature has been stable since the first ROCm 6 release are declared, structs are read
//! through generously sized, zeroed buffers, and every buffer length is passed explicitly.
//! This is the crate's one place for AMD FFI; handles never leave it.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_uint, c_void};
use std::ptr;

use super::FAIL_LOAD_SYMBOL;
use crate::amd::{AmdError, AmdResult, AmdStatus};

type Status = u32;
type Handle = *mut c_void;

const SUCCESS: Status = 0;
/// `AMDSMI_INIT_AMD_GPUS`: GPUs only, no CPU (HSMP) discovery.
const INIT_AMD_GPUS: u64 = 1 << 1;
/// `AMDSMI_MEM_TYPE_VRAM`.
const MEM_TYPE_VRAM: u32 = 0;
/// `AMDSMI_PROCESSOR_TYPE_AMD_GPU`.
const PROCESSOR_TYPE_AMD_GPU: u32 = 1;

/// Room for `amdsmi_asic_info_t` of any release (under 1 KiB today), 8-byte aligned.
const ASIC_INFO_WORDS: usize = 512;
/// `market_name` is the struct's first field, at most `AMDSMI_256_LENGTH` bytes.
const MARKET_NAME_MAX: usize = 256;
/// `AMDSMI_GPU_UUID_SIZE` is 38; the library refuses smaller buffers.
const UUID_BUFFER: usize = 128;
/// Partition names are a few letters ("SPX", "NPS1"); rocm_smi asks for at least 5.
const PARTITION_BUFFER: usize = 64;

/// The libraries tried, in order: the unversioned name (ldconfig or LD_LIBRARY_PATH), the
/// sonames of recent ROCm releases, then the default ROCm prefix.
const CANDIDATES: &[&str] = &[
    "libamd_smi.so",
    "libamd_smi.so.26",
    "libamd_smi.so.25",
    "libamd_smi.so.24",
    "/opt/rocm/lib/libamd_smi.so",
];

struct Api {
    init: unsafe extern "C" fn(u64) -> Status,
    shut_down: unsafe extern "C" fn() -> Status,
    socket_handles: unsafe extern "C" fn(*mut u32, *mut Handle) -> Status,
    processor_handles: unsafe extern "C" fn(Handle, *mut u32, *mut Handle) -> Status,
    processor_type: Option<unsafe extern "C" fn(Handle, *mut u32) -> Status>,
    device_bdf: unsafe extern "C" fn(Handle, *mut u64) -> Status,
    device_uuid: Option<unsafe extern "C" fn(Handle, *mut c_uint, *mut c_char) -> Status>,
    asic_info: Option<unsafe extern "C" fn(Handle, *mut c_void) -> Status>,
    memory_total: Option<unsafe extern "C" fn(Handle, u32, *mut u64) -> Status>,
    compute_partition: Option<unsafe extern "C" fn(Handle, *mut c_char, u32) -> Status>,
    memory_partition: Option<unsafe extern "C" fn(Handle, *mut c_char, u32) -> Status>,
}

/// An initialised AMD SMI library. Not thread-safe by itself: the owner serialises calls.
pub(crate) struct Library {
    api: Api,
    // Keeps the code behind `api` mapped; dropped after `Drop::drop` has shut the library down.
    _lib: libloading::Library,
}

fn check(call: &'static str, status: Status) -> AmdResult<()> {
    if status == SUCCESS {
        Ok(())
    } else {
        Err(AmdError::new(call, AmdStatus(status)))
    }
}

/// Looks a function up; `T` must be the C function's exact pointer type.
///
/// # Safety
/// `T` must match the symbol's real signature.
unsafe fn lookup<T: Copy>(lib: &libloading::Library, name: &str) -> Option<T> {
    // SAFETY: the caller guarantees `T` is the symbol's type; the value is copied out and only
    // used while `lib` stays loaded (it is stored next to the pointers in `Library`).
    unsafe { lib.get::<T>(name).ok().map(|sym| *sym) }
}

fn required<T>(name: &'static str, f: Option<T>) -> AmdResult<T> {
    f.ok_or_else(|| {
        tracing::warn!(symbol = name, "AMD SMI library lacks a required function");
        AmdError::new(name, FAIL_LOAD_SYMBOL)
    })
}

/// The text up to the first NUL of a C buffer (all of it when there is none).
pub(crate) fn c_text(bytes: &[u8]) -> String {
    match CStr::from_bytes_until_nul(bytes) {
        Ok(s) => s.to_string_lossy().trim().to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).trim().to_owned(),
    }
}

impl Library {
    /// Loads the first library that opens, resolves the functions and calls `amdsmi_init`.
    pub(crate) fn open() -> AmdResult<Self> {
        let lib = CANDIDATES
            .iter()
            .find_map(|name| {
                // SAFETY: loading runs the library's initialisers; libamd_smi's only set up its
                // own state. Nothing else of ours runs concurrently with it.
                unsafe { libloading::Library::new(*name) }.ok()
            })
            .ok_or_else(|| AmdError::new("dlopen libamd_smi.so", AmdStatus::FAIL_LOAD_MODULE))?;
        Self::init(lib)
    }

    /// Loads the library at `path` (for tests and unusual installs).
    pub(crate) fn open_path(path: &std::path::Path) -> AmdResult<Self> {
        // SAFETY: as in `open`.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|_| AmdError::new("dlopen libamd_smi.so", AmdStatus::FAIL_LOAD_MODULE))?;
        Self::init(lib)
    }

    fn init(lib: libloading::Library) -> AmdResult<Self> {
        // SAFETY: each function pointer type below is the function's signature in amdsmi.h,
        // unchanged since ROCm 6.0: handles are `void *`, enums are passed as 32-bit ints,
        // `amdsmi_bdf_t` is a union over one `uint64_t`.
        let api = unsafe {
            Api {
                init: required("amdsmi_init", lookup(&lib, "amdsmi_init"))?,
                shut_down: required("amdsmi_shut_down", lookup(&lib, "amdsmi_shut_down"))?,
                socket_handles: required(
                    "amdsmi_get_socket_handles",
                    lookup(&lib, "amdsmi_get_socket_handles"),
                )?,
                processor_handles: required(
                    "amdsmi_get_processor_handles",
                    lookup(&lib, "amdsmi_get_processor_handles"),
                )?,
                processor_type: lookup(&lib, "amdsmi_get_processor_type"),
                device_bdf: required(
                    "amdsmi_get_gpu_device_bdf",
                    lookup(&lib, "amdsmi_get_gpu_device_bdf"),
                )?,
                device_uuid: lookup(&lib, "amdsmi_get_gpu_device_uuid"),
                asic_info: lookup(&lib, "amdsmi_get_gpu_asic_info"),
                memory_total: lookup(&lib, "amdsmi_get_gpu_memory_total"),
                compute_partition: lookup(&lib, "amdsmi_get_gpu_compute_partition"),
                memory_partition: lookup(&lib, "amdsmi_get_gpu_memory_partition"),
            }
        };
        // SAFETY: `init` is amdsmi_init(uint64_t); the library is loaded.
        check("amdsmi_init", unsafe { (api.init)(INIT_AMD_GPUS) })?;
        Ok(Self { api, _lib: lib })
    }

    /// Every GPU processor handle of every socket.
    pub(crate) fn processors(&self) -> AmdResult<Vec<Processor<'_>>> {
        let mut out = Vec::new();
        for socket in self.sockets()? {
            for handle in self.processors_of(socket)? {
                let processor = Processor { lib: self, handle };
                if processor.is_gpu() {
                    out.push(processor);
                }
            }
        }
        Ok(out)
    }

    fn sockets(&self) -> AmdResult<Vec<Handle>> {
        const CALL: &str = "amdsmi_get_socket_handles";
        let f = self.api.socket_handles;
        let mut count: u32 = 0;
        // SAFETY: a null array asks for the count only.
        check(CALL, unsafe { f(&mut count, ptr::null_mut()) })?;
        let mut handles: Vec<Handle> = vec![ptr::null_mut(); count as usize];
        if count > 0 {
            // SAFETY: `handles` has room for `count` handles and `count` says so.
            check(CALL, unsafe { f(&mut count, handles.as_mut_ptr()) })?;
        }
        handles.truncate(count as usize);
        Ok(handles)
    }

    fn processors_of(&self, socket: Handle) -> AmdResult<Vec<Handle>> {
        const CALL: &str = "amdsmi_get_processor_handles";
        let f = self.api.processor_handles;
        let mut count: u32 = 0;
        // SAFETY: `socket` came from amdsmi_get_socket_handles; a null array asks for the count.
        check(CALL, unsafe { f(socket, &mut count, ptr::null_mut()) })?;
        let mut handles: Vec<Handle> = vec![ptr::null_mut(); count as usize];
        if count > 0 {
            // SAFETY: `handles` has room for `count` handles and `count` says so.
            check(CALL, unsafe { f(socket, &mut count, handles.as_mut_ptr()) })?;
        }
        handles.truncate(count as usize);
        Ok(handles)
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: amdsmi_init succeeded in `init`; no processor handle outlives `self`.
        let _ = unsafe { (self.api.shut_down)() };
    }
}

/// One GPU processor handle, valid while the library is borrowed.
pub(crate) struct Processor<'a> {
    lib: &'a Library,
    handle: Handle,
}

fn missing(call: &'static str) -> AmdError {
    AmdError::new(call, AmdStatus::NOT_SUPPORTED)
}

impl Processor<'_> {
    fn is_gpu(&self) -> bool {
        let Some(f) = self.lib.api.processor_type else {
            return true;
        };
        let mut kind: u32 = 0;
        // SAFETY: the handle is live; `kind` is a valid out-pointer for the 32-bit enum.
        let status = unsafe { f(self.handle, &mut kind) };
        // A library that cannot say is trusted: it was initialised for GPUs only.
        status != SUCCESS || kind == PROCESSOR_TYPE_AMD_GPU
    }

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

    /// `amdsmi_asic_info_t.market_name`.
    pub(crate) fn market_name(&self) -> AmdResult<String> {
        const CALL: &str = "amdsmi_get_gpu_asic_info";
        let f = self.lib.api.asic_info.ok_or_else(|| missing(CALL))?;
        let mut info = [0u64; ASIC_INFO_WORDS];
        // SAFETY: `info` is zeroed, 8-byte aligned and several times larger than any release's
        // `amdsmi_asic_info_t`, so the library writes inside it.
        check(CALL, unsafe { f(self.handle, info.as_mut_ptr().cast()) })?;
        let bytes: Vec<u8> = info.iter().flat_map(|w| w.to_ne_bytes()).collect();
        Ok(c_text(&bytes[..MARKET_NAME_MAX]))
    }

    /// Total VRAM in bytes (`amdsmi_get_gpu_memory_total`, `AMDSMI_MEM_TYPE_VRAM`).
    pub(crate) fn vram_total(&self) -> AmdResult<u64> {
        const CALL: &str = "amdsmi_get_gpu_memory_total";
        let f = self.lib.api.memory_total.ok_or_else(|| missing(CALL))?;
        let mut total: u64 = 0;
        // SAFETY: the handle is live; `total` is a valid out-pointer.
        check(CALL, unsafe { f(self.handle, MEM_TYPE_VRAM, &mut total) })?;
        Ok(total)
    }

    /// `amdsmi_get_gpu_compute_partition`: e.g. `SPX`.
    pub(crate) fn compute_partition(&self) -> AmdResult<String> {
        const CALL: &str = "amdsmi_get_gpu_compute_partition";
        self.partition(CALL, self.lib.api.compute_partition)
    }

    /// `amdsmi_get_gpu_memory_partition`: e.g. `NPS1`.
    pub(crate) fn memory_partition(&self) -> AmdResult<String> {
        const CALL: &str = "amdsmi_get_gpu_memory_partition";
        self.partition(CALL, self.lib.api.memory_partition)
    }

    fn partition(
        &self,
        call: &'static str,
        f: Option<unsafe extern "C" fn(Handle, *mut c_char, u32) -> Status>,
    ) -> AmdResult<String> {
        let f = f.ok_or_else(|| missing(call))?;
        let mut buf = [0u8; PARTITION_BUFFER];
        let len = (PARTITION_BUFFER - 1) as u32;
        // SAFETY: `buf` is writable for `len` bytes, one short of its size so a NUL remains.
        check(call, unsafe {
            f(self.handle, buf.as_mut_ptr().cast(), len)
        })?;
        Ok(c_text(&buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_fail_load_module() {
        let err = Library::open_path(std::path::Path::new("/nonexistent/libamd_smi.so"))
            .err()
            .unwrap();
        assert_eq!(err.status, AmdStatus::FAIL_LOAD_MODULE);
    }

    #[test]
    fn a_library_without_the_functions_is_fail_load_symbol() {
        // libc is loaded in every test process and has none of AMD SMI's symbols.
        let err = Library::open_path(std::path::Path::new("libc.so.6"))
            .err()
            .unwrap();
        assert_eq!(err.status, FAIL_LOAD_SYMBOL);
        assert_eq!(err.call, "amdsmi_init");
    }

    #[test]
    fn c_text_stops_at_nul_and_tolerates_garbage() {
        assert_eq!(c_text(b"AMD Instinct MI300X\0junk"), "AMD Instinct MI300X");
        assert_eq!(c_text(b"SPX"), "SPX");
        assert_eq!(c_text(b"\xffX\0"), "\u{fffd}X");
        assert_eq!(c_text(b"\0"), "");
    }
}
