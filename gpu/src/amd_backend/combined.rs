//! The combined AMD backends: a library completed by sysfs.
//!
//! [`LibraryWithSysfs`] pairs ROCm's bare-metal library with sysfs, which answers what that
//! library cannot (see [`crate::amd_real`]). [`GimWithSysfs`] pairs GIM's host library, which
//! answers nearly everything on an MxGPU host, with sysfs for discovery and the hive id.

use ids::PciAddress;

use crate::amd::{AmdError, AmdGpuInfo, AmdResult, AmdSmi, AmdStatus, PartitionState, VfCount};
use crate::amd_real::{AmdSmiLibrary, FAIL_LOAD_SYMBOL};
use crate::amd_sysfs::AmdSysfs;
use crate::gim_real::GimSmiLibrary;

/// The library cannot answer: the call is absent from it or deliberately left to sysfs.
pub(crate) fn library_cannot(err: &AmdError) -> bool {
    [
        AmdStatus::NOT_SUPPORTED,
        AmdStatus::NOT_YET_IMPLEMENTED,
        FAIL_LOAD_SYMBOL,
    ]
    .contains(&err.status)
}

/// The GPUs sysfs sees (the PCI truth: a PF bound to another driver is invisible to the
/// library), each completed with what the library knows about the same address, plus any the
/// library alone reports.
pub fn merge_gpus(from_sysfs: Vec<AmdGpuInfo>, from_library: Vec<AmdGpuInfo>) -> Vec<AmdGpuInfo> {
    let mut out = from_sysfs;
    for lib_gpu in from_library {
        match out
            .iter_mut()
            .find(|g| g.pci_address == lib_gpu.pci_address)
        {
            Some(gpu) => {
                if lib_gpu.name != "AMD GPU" {
                    gpu.name = lib_gpu.name;
                }
                gpu.uuid = lib_gpu.uuid.or(gpu.uuid.take());
                if lib_gpu.memory_total_mib > 0 {
                    gpu.memory_total_mib = lib_gpu.memory_total_mib;
                }
            }
            None => out.push(lib_gpu),
        }
    }
    out.sort_by_key(|g| g.pci_address);
    out
}

/// Discovery from both; either alone when the other fails.
fn merged_gpus(sysfs: &AmdSysfs, lib: &dyn AmdSmi) -> AmdResult<Vec<AmdGpuInfo>> {
    match (sysfs.gpus(), lib.gpus()) {
        (Ok(sysfs), Ok(lib)) => Ok(merge_gpus(sysfs, lib)),
        (Ok(sysfs), Err(e)) => {
            tracing::warn!(error = %e, "AMD SMI discovery failed; using sysfs alone");
            Ok(sysfs)
        }
        (Err(_), Ok(lib)) => Ok(lib),
        (Err(e), Err(_)) => Err(e),
    }
}

/// ROCm's AMD SMI with sysfs for what the library cannot answer.
#[derive(Debug)]
pub(crate) struct LibraryWithSysfs {
    pub(crate) lib: AmdSmiLibrary,
    pub(crate) sysfs: AmdSysfs,
}

impl LibraryWithSysfs {
    fn lib_then_sysfs<T>(
        &self,
        lib: impl FnOnce(&AmdSmiLibrary) -> AmdResult<T>,
        sysfs: impl FnOnce(&AmdSysfs) -> AmdResult<T>,
    ) -> AmdResult<T> {
        match lib(&self.lib) {
            Err(e) if library_cannot(&e) => sysfs(&self.sysfs),
            other => other,
        }
    }
}

impl AmdSmi for LibraryWithSysfs {
    fn gpus(&self) -> AmdResult<Vec<AmdGpuInfo>> {
        merged_gpus(&self.sysfs, &self.lib)
    }

    fn num_vf(&self, gpu: PciAddress) -> AmdResult<VfCount> {
        self.lib_then_sysfs(|l| l.num_vf(gpu), |s| s.num_vf(gpu))
    }

    fn set_num_vf(&self, gpu: PciAddress, count: u32) -> AmdResult<()> {
        self.lib_then_sysfs(|l| l.set_num_vf(gpu, count), |s| s.set_num_vf(gpu, count))
    }

    /// sysfs first: only it lists the available modes.
    fn partition(&self, gpu: PciAddress) -> AmdResult<PartitionState> {
        match self.sysfs.partition(gpu) {
            Err(e) if e.status == AmdStatus::NOT_SUPPORTED => self.lib.partition(gpu),
            other => other,
        }
    }

    fn set_compute_partition(&self, gpu: PciAddress, mode: &str) -> AmdResult<()> {
        self.lib_then_sysfs(
            |l| l.set_compute_partition(gpu, mode),
            |s| s.set_compute_partition(gpu, mode),
        )
    }

    fn set_memory_partition(&self, gpu: PciAddress, mode: &str) -> AmdResult<()> {
        self.lib_then_sysfs(
            |l| l.set_memory_partition(gpu, mode),
            |s| s.set_memory_partition(gpu, mode),
        )
    }

    fn xgmi_hive(&self, gpu: PciAddress) -> AmdResult<Option<u64>> {
        self.lib_then_sysfs(|l| l.xgmi_hive(gpu), |s| s.xgmi_hive(gpu))
    }
}

/// GIM's host AMD SMI, with sysfs to complete discovery and, when the library has no XGMI
/// topology call, for the hive id. VF counts and partitions are the library's alone: under GIM
/// the kernel offers no `sriov_numvfs`, and amdgpu's partition files are absent (amdgpu does
/// not own the PFs).
#[derive(Debug)]
pub(crate) struct GimWithSysfs {
    pub(crate) lib: GimSmiLibrary,
    pub(crate) sysfs: AmdSysfs,
}

impl AmdSmi for GimWithSysfs {
    fn gpus(&self) -> AmdResult<Vec<AmdGpuInfo>> {
        merged_gpus(&self.sysfs, &self.lib)
    }

    fn num_vf(&self, gpu: PciAddress) -> AmdResult<VfCount> {
        self.lib.num_vf(gpu)
    }

    fn set_num_vf(&self, gpu: PciAddress, count: u32) -> AmdResult<()> {
        self.lib.set_num_vf(gpu, count)
    }

    fn partition(&self, gpu: PciAddress) -> AmdResult<PartitionState> {
        self.lib.partition(gpu)
    }

    fn set_compute_partition(&self, gpu: PciAddress, mode: &str) -> AmdResult<()> {
        self.lib.set_compute_partition(gpu, mode)
    }

    fn set_memory_partition(&self, gpu: PciAddress, mode: &str) -> AmdResult<()> {
        self.lib.set_memory_partition(gpu, mode)
    }

    fn xgmi_hive(&self, gpu: PciAddress) -> AmdResult<Option<u64>> {
        match self.lib.xgmi_hive(gpu) {
            Err(e) if e.status == AmdStatus::NOT_SUPPORTED => self.sysfs.xgmi_hive(gpu),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::amd_sysfs::tests::{Kernel, PF_DIR, mi300x_host, over_kernel, pf};
    use crate::gim_real::tests::Stub;

    fn info(bdf: &str, name: &str, uuid: Option<&str>, mib: u64) -> AmdGpuInfo {
        AmdGpuInfo {
            pci_address: bdf.parse().unwrap(),
            uuid: uuid.map(str::to_owned),
            name: name.to_owned(),
            memory_total_mib: mib,
        }
    }

    #[test]
    fn library_details_complete_sysfs_discovery() {
        let sysfs = vec![
            info(
                "0000:c1:00.0",
                "AMD Instinct MI300X",
                Some("0xabc"),
                196_596,
            ),
            info("0000:e1:00.0", "AMD GPU 1234", None, 0),
        ];
        let lib = vec![
            info(
                "0000:e1:00.0",
                "AMD Instinct MI300A",
                Some("1cff74a1-0000"),
                131_072,
            ),
            info("0000:c1:00.0", "AMD GPU", None, 0),
            info("0000:01:00.0", "AMD Radeon PRO", None, 32_768),
        ];
        let merged = merge_gpus(sysfs, lib);
        assert_eq!(merged.len(), 3);
        assert_eq!(
            merged[0],
            info("0000:01:00.0", "AMD Radeon PRO", None, 32_768)
        );
        assert_eq!(
            merged[1],
            info(
                "0000:c1:00.0",
                "AMD Instinct MI300X",
                Some("0xabc"),
                196_596
            )
        );
        let e1 = info(
            "0000:e1:00.0",
            "AMD Instinct MI300A",
            Some("1cff74a1-0000"),
            131_072,
        );
        assert_eq!(merged[2], e1);
    }

    #[test]
    fn only_unanswerable_library_errors_fall_back() {
        assert!(library_cannot(&AmdError::new(
            "x",
            AmdStatus::NOT_SUPPORTED
        )));
        assert!(library_cannot(&AmdError::new("x", FAIL_LOAD_SYMBOL)));
        assert!(!library_cannot(&AmdError::new("x", AmdStatus::BUSY)));
        assert!(!library_cannot(&AmdError::new("x", AmdStatus::NOT_FOUND)));
    }

    #[test]
    fn library_backend_falls_back_to_sysfs_where_it_cannot_answer() {
        let (dir, _tree) = mi300x_host();
        let lib_dir = tempfile::tempdir().unwrap();
        let lib = AmdSmiLibrary::load_from(crate::amd_real::tests::stub_amd_smi(lib_dir.path()));
        let (kernel, sysfs) = over_kernel(Kernel::new(dir.path()));
        let backend = LibraryWithSysfs {
            lib: lib.unwrap(),
            sysfs,
        };
        let gpus = backend.gpus().unwrap();
        let addresses: Vec<_> = gpus.iter().map(|g| g.pci_address.to_string()).collect();
        assert_eq!(addresses, ["0000:c1:00.0", "0002:41:01.0"]);
        assert_eq!(
            gpus[0].uuid.as_deref(),
            Some("1cff74a1-0000-1000-80ff-c10000000000")
        );
        assert_eq!(gpus[0].memory_total_mib, 196_608);
        // Neither the ROCm library nor sysfs can change AMD VFs (that is GIM's host library).
        let err = backend.num_vf(pf()).unwrap_err();
        assert_eq!(err.status, AmdStatus::NOT_SUPPORTED);
        assert_eq!(
            backend.set_num_vf(pf(), 8).unwrap_err().status,
            AmdStatus::NOT_SUPPORTED
        );
        assert_eq!(backend.partition(pf()).unwrap().compute_available.len(), 4);
        backend.set_compute_partition(pf(), "DPX").unwrap();
        let writes: Vec<_> = kernel.writes().into_iter().map(|(_, v)| v).collect();
        assert_eq!(writes, ["DPX"]);
    }

    fn gim_backend(stub: &Stub) -> (tempfile::TempDir, Arc<Kernel>, GimWithSysfs) {
        let (dir, _tree) = mi300x_host();
        let (kernel, sysfs) = over_kernel(Kernel::new(dir.path()));
        let lib = stub.load();
        (dir, kernel, GimWithSysfs { lib, sysfs })
    }

    #[test]
    fn gim_backend_takes_vfs_and_partitions_from_the_library() {
        let stub = Stub::build();
        let (_dir, kernel, backend) = gim_backend(&stub);
        let gpus = backend.gpus().unwrap();
        let addresses: Vec<_> = gpus.iter().map(|g| g.pci_address.to_string()).collect();
        // 0000:41:00.0 is the library's alone; 0000:c1:00.0 is in both.
        assert_eq!(addresses, ["0000:41:00.0", "0000:c1:00.0"]);
        assert_eq!(
            gpus[1].uuid.as_deref(),
            Some("1cff74a1-0000-1000-80ff-c10000000000")
        );
        assert_eq!(gpus[1].memory_total_mib, 196_608);
        backend.set_num_vf(pf(), 8).unwrap();
        assert_eq!(
            backend.num_vf(pf()).unwrap(),
            VfCount {
                enabled: 8,
                supported: 8
            }
        );
        // The library's list for 8 VFs, not the fixture's amdgpu partition files.
        let state = backend.partition(pf()).unwrap();
        assert_eq!(state.compute_available, ["CPX"]);
        assert_eq!(
            backend
                .set_compute_partition(pf(), "DPX")
                .unwrap_err()
                .status,
            AmdStatus::INVAL
        );
        backend.set_memory_partition(pf(), "NPS4").unwrap();
        assert!(kernel.writes().is_empty(), "{:?}", kernel.writes());
        assert_eq!(stub.sets(), ["set_num_vf c100 8", "set_memory c100 4"]);
        // The library's derived hive, though sysfs has none.
        assert_eq!(backend.xgmi_hive(pf()).unwrap(), Some(0x4101));
    }

    #[test]
    fn gim_backend_asks_sysfs_for_the_hive_only_when_the_library_cannot() {
        let stub = Stub::build_with(&["NO_TOPOLOGY"]);
        let (dir, _kernel, backend) = gim_backend(&stub);
        assert_eq!(backend.xgmi_hive(pf()).unwrap(), None);
        let tree = sysfs::fixture::Tree::new(dir.path());
        tree.file(&format!("{PF_DIR}/xgmi_hive_info/xgmi_hive_id"), "77\n");
        assert_eq!(backend.xgmi_hive(pf()).unwrap(), Some(77));
    }
}
