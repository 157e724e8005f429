//! [`AmdSmiLibrary`]: the [`AmdSmi`] trait over AMD's `libamd_smi.so`, loaded at run time.
//!
//! The bare-metal library answers discovery (PCI address, UUID, market name, VRAM) and the
//! current partition modes. What it cannot answer safely it reports as `NOT_SUPPORTED`, so the
//! combined backend ([`crate::amd_backend::amd_backend`]) takes it from sysfs instead:
//! - VF counts: `amdsmi_get_num_vf` / `amdsmi_set_num_vf` exist only in AMD's host
//!   virtualization SMI, not in the ROCm library;
//! - setting partitions: `amdsmi_set_gpu_*_partition` take enums AMD renumbered between ROCm
//!   releases (ROCm 6.1: `CPX = 1, SPX = 2`; later: `SPX = 1 … CPX = 5`; `NPS4` went from 3 to 4),
//!   so a number passed to a library of unknown vintage could select the wrong mode. The library
//!   itself writes the kernel's `current_*_partition` files, which take the mode by name;
//! - the modes a GPU accepts: no call for them is common to the ROCm releases in use.

mod ffi;

// GIM's host library shares the untrusted-C-string rule.
pub(crate) use ffi::c_text;

use std::fmt;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use ids::PciAddress;

use crate::amd::{AmdError, AmdGpuInfo, AmdResult, AmdSmi, AmdStatus, PartitionState, VfCount};

/// `AMDSMI_STATUS_FAIL_LOAD_SYMBOL`: the library lacks a function vgpud needs.
pub const FAIL_LOAD_SYMBOL: AmdStatus = AmdStatus::FAIL_LOAD_SYMBOL;

const MIB: u64 = 1024 * 1024;

/// AMD SMI as loaded from `libamd_smi.so`. Calls are serialised: the library's handles and
/// internal caches are shared state.
pub struct AmdSmiLibrary {
    lib: Mutex<ffi::Library>,
}

impl fmt::Debug for AmdSmiLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmdSmiLibrary").finish_non_exhaustive()
    }
}

/// The PCI address in an `amdsmi_bdf_t`: function bits 0–2, device 3–7, bus 8–15, domain 16–63.
/// `None` for a domain wider than the 32 bits a PCI address has.
pub fn decode_bdf(raw: u64) -> Option<PciAddress> {
    let function = (raw & 0x7) as u8;
    let device = ((raw >> 3) & 0x1f) as u8;
    let bus = ((raw >> 8) & 0xff) as u8;
    let domain = u32::try_from(raw >> 16).ok()?;
    PciAddress::new(domain, bus, device, function).ok()
}

impl AmdSmiLibrary {
    /// Loads `libamd_smi.so` (library path, then `/opt/rocm/lib`) and calls `amdsmi_init` for
    /// AMD GPUs. No library: `FAIL_LOAD_MODULE`; one without the functions: `FAIL_LOAD_SYMBOL`.
    pub fn load() -> AmdResult<Self> {
        Ok(Self {
            lib: Mutex::new(ffi::Library::open()?),
        })
    }

    /// Like [`AmdSmiLibrary::load`], with the library at `path`.
    pub fn load_from(path: impl AsRef<Path>) -> AmdResult<Self> {
        Ok(Self {
            lib: Mutex::new(ffi::Library::open_path(path.as_ref())?),
        })
    }

    fn lock(&self) -> MutexGuard<'_, ffi::Library> {
        // A panic elsewhere cannot leave the library half-updated: each step is one FFI call.
        self.lib
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn with_processor<T>(
        &self,
        gpu: PciAddress,
        f: impl FnOnce(&ffi::Processor<'_>) -> AmdResult<T>,
    ) -> AmdResult<T> {
        let lib = self.lock();
        for processor in lib.processors()? {
            if processor.bdf().ok().and_then(decode_bdf) == Some(gpu) {
                return f(&processor);
            }
        }
        Err(AmdError::new(
            "amdsmi_get_gpu_device_bdf",
            AmdStatus::NOT_FOUND,
        ))
    }
}

fn gpu_info(processor: &ffi::Processor<'_>) -> AmdResult<Option<AmdGpuInfo>> {
    let raw = processor.bdf()?;
    let Some(pci_address) = decode_bdf(raw) else {
        tracing::warn!(bdf = raw, "AMD SMI reported a PCI address that is not one");
        return Ok(None);
    };
    let uuid = processor.uuid().ok().filter(|u| !u.is_empty());
    let name = processor
        .market_name()
        .ok()
        .filter(|n| !n.is_empty() && n != "N/A");
    let memory_total_mib = match processor.vram_total() {
        Ok(bytes) => bytes / MIB,
        Err(e) => {
            tracing::debug!(gpu = %pci_address, error = %e, "VRAM size unknown");
            0
        }
    };
    Ok(Some(AmdGpuInfo {
        pci_address,
        uuid,
        name: name.unwrap_or_else(|| "AMD GPU".to_owned()),
        memory_total_mib,
    }))
}

impl AmdSmi for AmdSmiLibrary {
    fn gpus(&self) -> AmdResult<Vec<AmdGpuInfo>> {
        let lib = self.lock();
        let mut out = Vec::new();
        for processor in lib.processors()? {
            out.extend(gpu_info(&processor)?);
        }
        out.sort_by_key(|g| g.pci_address);
        Ok(out)
    }

    fn num_vf(&self, _gpu: PciAddress) -> AmdResult<VfCount> {
        Err(AmdError::new("amdsmi_get_num_vf", AmdStatus::NOT_SUPPORTED))
    }

    fn set_num_vf(&self, _gpu: PciAddress, _count: u32) -> AmdResult<()> {
        Err(AmdError::new("amdsmi_set_num_vf", AmdStatus::NOT_SUPPORTED))
    }

    /// Current modes from the library; the available lists are left empty (unknown).
    fn partition(&self, gpu: PciAddress) -> AmdResult<PartitionState> {
        self.with_processor(gpu, |p| {
            Ok(PartitionState {
                compute: p.compute_partition()?,
                compute_available: Vec::new(),
                memory: p.memory_partition()?,
                memory_available: Vec::new(),
                compute_vf_counts: Default::default(),
            })
        })
    }

    fn set_compute_partition(&self, _gpu: PciAddress, _mode: &str) -> AmdResult<()> {
        Err(AmdError::new(
            "amdsmi_set_gpu_compute_partition",
            AmdStatus::NOT_SUPPORTED,
        ))
    }

    fn set_memory_partition(&self, _gpu: PciAddress, _mode: &str) -> AmdResult<()> {
        Err(AmdError::new(
            "amdsmi_set_gpu_memory_partition",
            AmdStatus::NOT_SUPPORTED,
        ))
    }

    /// Left to sysfs: `amdsmi_get_xgmi_info`'s struct layout differs between ROCm releases.
    fn xgmi_hive(&self, _gpu: PciAddress) -> AmdResult<Option<u64>> {
        Err(AmdError::new(
            "amdsmi_get_xgmi_info",
            AmdStatus::NOT_SUPPORTED,
        ))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn library_is_send_and_sync() {
        assert_send_sync::<AmdSmiLibrary>();
    }

    #[test]
    fn load_without_rocm_is_fail_load_module() {
        if Path::new("/opt/rocm/lib/libamd_smi.so").exists() {
            return;
        }
        let err = AmdSmiLibrary::load().unwrap_err();
        assert_eq!(err.status, AmdStatus::FAIL_LOAD_MODULE);
        assert!(err.to_string().contains("library load failed"), "{err}");
    }

    #[test]
    fn load_from_missing_path_is_fail_load_module() {
        let err = AmdSmiLibrary::load_from("/nonexistent/libamd_smi.so").unwrap_err();
        assert_eq!(err.status, AmdStatus::FAIL_LOAD_MODULE);
    }

    /// A stand-in `libamd_smi.so` with two GPUs on one socket; it has no memory-partition call,
    /// as on a library older than the call.
    const STUB_AMD_SMI: &str = r#"
        #include <string.h>
        typedef unsigned long long u64;
        static int socket0, gpu0, gpu1;
        int amdsmi_init(u64 flags) { return flags == 2 ? 0 : 1; }
        int amdsmi_shut_down(void) { return 0; }
        int amdsmi_get_socket_handles(unsigned *c, void **h) {
            if (h) { if (*c < 1) return 41; h[0] = &socket0; }
            *c = 1;
            return 0;
        }
        int amdsmi_get_processor_handles(void *s, unsigned *c, void **h) {
            if (s != &socket0) return 1;
            if (h) { if (*c < 2) return 41; h[0] = &gpu1; h[1] = &gpu0; }
            *c = 2;
            return 0;
        }
        int amdsmi_get_processor_type(void *p, unsigned *t) { *t = 1; return 0; }
        int amdsmi_get_gpu_device_bdf(void *p, u64 *b) {
            *b = p == &gpu0 ? (0xc1u << 8) : ((u64)2 << 16) | (0x41u << 8) | (1u << 3);
            return 0;
        }
        int amdsmi_get_gpu_device_uuid(void *p, unsigned *len, char *u) {
            if (*len < 38) return 1;
            strcpy(u, p == &gpu0 ? "1cff74a1-0000-1000-80ff-c10000000000" : "");
            return 0;
        }
        int amdsmi_get_gpu_asic_info(void *p, char *info) {
            strcpy(info, p == &gpu0 ? "AMD Instinct MI300X" : "N/A");
            memset(info + 256, 0x7f, 600); /* the rest of a large struct */
            return 0;
        }
        int amdsmi_get_gpu_memory_total(void *p, unsigned type, u64 *v) {
            if (type != 0) return 2;
            *v = 206158430208ULL;
            return 0;
        }
        int amdsmi_get_gpu_compute_partition(void *p, char *b, unsigned len) {
            if (len < 5) return 1;
            strcpy(b, "CPX");
            return 0;
        }
    "#;

    /// Builds the stub with `cc` (present wherever Rust links) into `dir`.
    pub(crate) fn stub_amd_smi(dir: &Path) -> std::path::PathBuf {
        let source = dir.join("stub.c");
        let library = dir.join("libamd_smi.so");
        std::fs::write(&source, STUB_AMD_SMI).unwrap();
        let status = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&library)
            .arg(&source)
            .status()
            .expect("run cc to build the AMD SMI stub");
        assert!(status.success(), "cc failed to build the AMD SMI stub");
        library
    }

    #[test]
    fn stub_discovery_and_unsupported_calls() {
        let dir = tempfile::tempdir().unwrap();
        let amd = AmdSmiLibrary::load_from(stub_amd_smi(dir.path())).unwrap();
        let gpus = amd.gpus().unwrap();
        assert_eq!(gpus.len(), 2);
        let mi300x = &gpus[0];
        assert_eq!(mi300x.pci_address.to_string(), "0000:c1:00.0");
        assert_eq!(mi300x.name, "AMD Instinct MI300X");
        assert_eq!(
            mi300x.uuid.as_deref(),
            Some("1cff74a1-0000-1000-80ff-c10000000000")
        );
        assert_eq!(mi300x.memory_total_mib, 196_608);
        let other = &gpus[1];
        assert_eq!(other.pci_address.to_string(), "0002:41:01.0");
        assert_eq!((other.name.as_str(), other.uuid.clone()), ("AMD GPU", None));
        // No memory-partition symbol: NOT_SUPPORTED naming the call, not a crash.
        let err = amd.partition(mi300x.pci_address).unwrap_err();
        assert_eq!(
            err,
            AmdError::new("amdsmi_get_gpu_memory_partition", AmdStatus::NOT_SUPPORTED)
        );
        let absent: PciAddress = "0000:99:00.0".parse().unwrap();
        assert_eq!(
            amd.partition(absent).unwrap_err().status,
            AmdStatus::NOT_FOUND
        );
        assert_eq!(
            amd.num_vf(absent).unwrap_err().status,
            AmdStatus::NOT_SUPPORTED
        );
        let err = amd
            .set_compute_partition(mi300x.pci_address, "SPX")
            .unwrap_err();
        assert_eq!(err.status, AmdStatus::NOT_SUPPORTED);
    }

    #[test]
    fn bdf_bitfields_decode() {
        // 0000:c1:00.0, an MI300X PF on a typical host.
        assert_eq!(decode_bdf(0xc1 << 8).unwrap().to_string(), "0000:c1:00.0");
        // Domain 2, bus 0x41, device 0x1f, function 7.
        let raw = (2 << 16) | (0x41 << 8) | (0x1f << 3) | 7;
        assert_eq!(decode_bdf(raw).unwrap().to_string(), "0002:41:1f.7");
        assert!(
            decode_bdf(1 << 60).is_none(),
            "a 48-bit domain beyond u32 is refused"
        );
    }
}
