//! [`amd_backend`]: which AMD backend serves this host.
//!
//! In order:
//! 1. GIM (AMD's MxGPU host driver) is loaded: GIM's host AMD SMI (`libamdsmi.so`) with sysfs
//!    (`GimWithSysfs`). Only that library can change VF counts and partitions under
//!    GIM. Without it, sysfs alone, with a warning naming what to install: the ROCm library
//!    does not work with GIM, which owns the PFs instead of amdgpu.
//! 2. Otherwise ROCm's `libamd_smi.so` with sysfs (`LibraryWithSysfs`) when it
//!    loads, sysfs alone when not (normal on hosts without ROCm).

mod combined;

use std::path::Path;
use std::sync::Arc;

use sysfs::Sysfs;

pub use combined::merge_gpus;
use combined::{GimWithSysfs, LibraryWithSysfs};

use crate::amd::{AmdResult, AmdSmi, AmdStatus};
use crate::amd_real::AmdSmiLibrary;
use crate::amd_sysfs::{AmdSysfs, PCI_DEVICES};
use crate::gim_real::GimSmiLibrary;

/// GIM's module directory (gim.ko; the kernel makes one per loaded module).
const GIM_MODULE: &str = "/sys/module/gim";
/// GIM's PCI driver name (`gim_drv.c`: `.name = "gim"`), the last part of a PF's `driver` link.
const GIM_DRIVER: &str = "gim";
/// Named in the backend description and in the warning when GIM's library is missing.
const GIM_LIBRARY: &str = "AMD's MxGPU-Virtualization smi-lib (libamdsmi.so)";

/// The AMD backend for this host and a description of it for status reports.
pub fn amd_backend(fs: Arc<dyn Sysfs>) -> (Arc<dyn AmdSmi>, String) {
    choose(fs, GimSmiLibrary::load, AmdSmiLibrary::load)
}

/// [`amd_backend`] with the library loaders given, so tests can choose what loads.
fn choose(
    fs: Arc<dyn Sysfs>,
    load_gim: impl FnOnce() -> AmdResult<GimSmiLibrary>,
    load_rocm: impl FnOnce() -> AmdResult<AmdSmiLibrary>,
) -> (Arc<dyn AmdSmi>, String) {
    let sysfs = AmdSysfs::new(fs.clone());
    if gim_loaded(fs.as_ref(), &sysfs) {
        return gim_backend(sysfs, load_gim());
    }
    match load_rocm() {
        Ok(lib) => {
            tracing::info!("AMD SMI library loaded");
            (
                Arc::new(LibraryWithSysfs { lib, sysfs }),
                "AMD SMI library with sysfs".to_owned(),
            )
        }
        Err(e) => {
            tracing::info!(reason = %e, "AMD SMI library not used; AMD GPUs through sysfs");
            (Arc::new(sysfs), format!("sysfs ({e})"))
        }
    }
}

fn gim_backend(sysfs: AmdSysfs, lib: AmdResult<GimSmiLibrary>) -> (Arc<dyn AmdSmi>, String) {
    match lib {
        Ok(lib) => {
            tracing::info!("GIM host AMD SMI library loaded");
            (
                Arc::new(GimWithSysfs { lib, sysfs }),
                "GIM host AMD SMI (libamdsmi.so) with sysfs".to_owned(),
            )
        }
        Err(e) => {
            if e.status == AmdStatus::FAIL_LOAD_MODULE {
                tracing::warn!(reason = %e, "GIM is loaded but its host AMD SMI library is \
                    missing: AMD VF counts and partitions cannot be changed; install {GIM_LIBRARY}");
            } else {
                tracing::warn!(reason = %e, "GIM's host AMD SMI library did not start: AMD VF \
                    counts and partitions cannot be changed");
            }
            (
                Arc::new(sysfs),
                format!("sysfs (GIM host without {GIM_LIBRARY}: {e})"),
            )
        }
    }
}

/// Whether GIM runs here: its module is loaded, or an AMD PF is bound to its PCI driver (the
/// same fact seen from the device, for trees captured without `/sys/module`).
fn gim_loaded(fs: &dyn Sysfs, sysfs: &AmdSysfs) -> bool {
    if fs.exists(Path::new(GIM_MODULE)) {
        return true;
    }
    let Ok(gpus) = sysfs.gpus() else {
        return false;
    };
    gpus.iter().any(|gpu| {
        let link = Path::new(PCI_DEVICES)
            .join(gpu.pci_address.to_string())
            .join("driver");
        fs.read_link(&link)
            .is_ok_and(|target| target.file_name().is_some_and(|n| n == GIM_DRIVER))
    })
}

#[cfg(test)]
mod tests;
