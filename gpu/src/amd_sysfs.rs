//! [`AmdSysfs`]: the [`AmdSmi`] trait over the kernel's PCI and amdgpu sysfs files.
//! [`crate::amd_backend`] joins it to an AMD SMI library when one is installed.
//!
//! sysfs is the kernel's own interface: SR-IOV through `sriov_numvfs`, partitions through
//! `current_*_partition` by name (the library writes the same files). So it serves hosts without
//! ROCm, and the calls the library cannot answer safely (see [`crate::amd_real`]).
//!
//! `AmdError` carries a status, not a path: each failure is logged here with the file and the
//! kernel's error before it is reduced to a status.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ids::{PciAddress, PciDeviceId, PciVendorId};
use sysfs::{Op, Sysfs, SysfsError, SysfsExt, error_chain};

use crate::amd::{AmdError, AmdGpuInfo, AmdResult, AmdSmi, AmdStatus, PartitionState, VfCount};

pub(crate) const PCI_DEVICES: &str = "/sys/bus/pci/devices";
/// The call named when sysfs is asked for AMD VF counts.
const SRIOV_CALL: &str = "sriov_numvfs (AMD VFs are GIM's, through its host AMD SMI)";
const MIB: u64 = 1024 * 1024;

/// `AMDSMI_STATUS_IO`: the kernel refused for a reason with no closer status.
pub const STATUS_IO: AmdStatus = AmdStatus::IO;
/// `AMDSMI_STATUS_OUT_OF_RESOURCES`: the kernel enabled fewer VFs than asked.
pub const STATUS_OUT_OF_RESOURCES: AmdStatus = AmdStatus::OUT_OF_RESOURCES;
/// `AMDSMI_STATUS_UNEXPECTED_DATA`: a file held something that is not a valid value.
pub const STATUS_UNEXPECTED_DATA: AmdStatus = AmdStatus::UNEXPECTED_DATA;

/// The AMD SMI status for a failed sysfs access. The kernel's errno decides: `EBUSY` → `BUSY`,
/// `ERANGE`/`EINVAL` → `INVAL`, `EACCES`/`EPERM` → `NO_PERM`, a missing file → `NOT_SUPPORTED`
/// (the driver or device lacks the feature); garbage → `UNEXPECTED_DATA`; the rest → `IO`.
pub fn status_of(err: &SysfsError) -> AmdStatus {
    if err.op == Op::Parse {
        return STATUS_UNEXPECTED_DATA;
    }
    match err.errno() {
        Some(libc::EBUSY) => AmdStatus::BUSY,
        Some(libc::ERANGE | libc::EINVAL) => AmdStatus::INVAL,
        Some(libc::EACCES | libc::EPERM) => AmdStatus::NO_PERM,
        _ if err.is_not_found() => AmdStatus::NOT_SUPPORTED,
        _ => STATUS_IO,
    }
}

fn fail(call: &'static str, err: &SysfsError) -> AmdError {
    let status = status_of(err);
    let expected = [AmdStatus::BUSY, AmdStatus::INVAL, AmdStatus::NOT_SUPPORTED];
    if expected.contains(&status) {
        tracing::debug!(call, error = %error_chain(err), "AMD sysfs access refused");
    } else {
        tracing::warn!(call, error = %error_chain(err), "AMD sysfs access failed");
    }
    AmdError::new(call, status)
}

/// The product name of an AMD GPU by PCI device id; `AMD GPU <id>` for ids not in the table.
pub fn product_name(device: PciDeviceId) -> String {
    let known = match device.0 {
        0x74a1 => "AMD Instinct MI300X",
        0x74a5 => "AMD Instinct MI325X",
        0x740f => "AMD Instinct MI210",
        0x7408 => "AMD Instinct MI250X",
        _ => return format!("AMD GPU {device}"),
    };
    known.to_owned()
}

/// A partition mode as the kernel names it: a few upper-case letters and digits.
fn parse_mode(text: &str) -> Option<String> {
    let mode = text.trim().to_ascii_uppercase();
    let valid = (1..=8).contains(&mode.len())
        && mode
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    valid.then_some(mode)
}

/// `SPX, DPX, QPX, CPX` → the modes; `None` if any entry is not a mode.
fn parse_modes(text: &str) -> Option<Vec<String>> {
    text.split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(parse_mode)
        .collect()
}

/// The sysfs files of one partition kind.
struct PartitionFiles {
    current: &'static str,
    available: &'static str,
    get_call: &'static str,
    set_call: &'static str,
}

const COMPUTE: PartitionFiles = PartitionFiles {
    current: "current_compute_partition",
    available: "available_compute_partition",
    get_call: "sysfs current_compute_partition",
    set_call: "sysfs current_compute_partition write",
};

const MEMORY: PartitionFiles = PartitionFiles {
    current: "current_memory_partition",
    available: "available_memory_partition",
    get_call: "sysfs current_memory_partition",
    set_call: "sysfs current_memory_partition write",
};

/// AMD GPUs through sysfs alone.
#[derive(Debug, Clone)]
pub struct AmdSysfs {
    fs: Arc<dyn Sysfs>,
}

impl AmdSysfs {
    /// Reads and writes through `fs` (the host's `/`, a fixture tree or the simulator).
    pub fn new(fs: Arc<dyn Sysfs>) -> Self {
        Self { fs }
    }

    fn device_dir(&self, gpu: PciAddress) -> PathBuf {
        Path::new(PCI_DEVICES).join(gpu.to_string())
    }

    /// The directory of an AMD device, or `NOT_FOUND`.
    fn amd_device(&self, gpu: PciAddress) -> AmdResult<PathBuf> {
        const CALL: &str = "sysfs vendor";
        let dir = self.device_dir(gpu);
        match self.fs.read_parse_opt::<PciVendorId>(&dir.join("vendor")) {
            Ok(Some(PciVendorId::AMD)) => Ok(dir),
            Ok(_) => Err(AmdError::new(CALL, AmdStatus::NOT_FOUND)),
            Err(e) => Err(fail(CALL, &e)),
        }
    }

    /// What an AMD GPU physical function at `address` looks like, or `None` for anything else.
    fn probe(&self, address: PciAddress) -> Option<AmdGpuInfo> {
        let dir = self.device_dir(address);
        let vendor = self.fs.read_parse_opt::<PciVendorId>(&dir.join("vendor"));
        match vendor {
            Ok(Some(PciVendorId::AMD)) => {}
            Ok(_) => return None,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "PCI device left out");
                return None;
            }
        }
        if !self.is_gpu_class(&dir) || self.fs.exists(&dir.join("physfn")) {
            return None;
        }
        let name = match self.fs.read_parse::<PciDeviceId>(&dir.join("device")) {
            Ok(id) => product_name(id),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "AMD GPU device id unreadable");
                "AMD GPU".to_owned()
            }
        };
        Some(AmdGpuInfo {
            pci_address: address,
            uuid: self.optional_text(&dir.join("unique_id")),
            name,
            memory_total_mib: self.vram_mib(&dir),
        })
    }

    /// Display (0x03) or processing accelerator (0x12) class.
    fn is_gpu_class(&self, dir: &Path) -> bool {
        let path = dir.join("class");
        let text = match self.fs.read_text(&path) {
            Ok(text) => text,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "PCI class unreadable");
                return false;
            }
        };
        let digits = text.strip_prefix("0x").unwrap_or(&text);
        match u32::from_str_radix(digits, 16) {
            Ok(class) => matches!(class >> 16, 0x03 | 0x12),
            Err(_) => {
                let e = SysfsError::parse(&path, format!("{text:?} is not a PCI class"));
                tracing::warn!(error = %error_chain(&e), "PCI device left out");
                false
            }
        }
    }

    fn vram_mib(&self, dir: &Path) -> u64 {
        match self
            .fs
            .read_parse_opt::<u64>(&dir.join("mem_info_vram_total"))
        {
            Ok(bytes) => bytes.unwrap_or(0) / MIB,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "VRAM size unknown");
                0
            }
        }
    }

    fn optional_text(&self, path: &Path) -> Option<String> {
        match self.fs.read_text_opt(path) {
            Ok(text) => text.filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_graphic())),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "attribute unreadable");
                None
            }
        }
    }

    fn write(&self, call: &'static str, path: &Path, value: &str) -> AmdResult<()> {
        self.fs.write_str(path, value).map_err(|e| fail(call, &e))
    }

    fn read_mode(&self, call: &'static str, path: &Path) -> AmdResult<String> {
        let text = self.fs.read_text(path).map_err(|e| fail(call, &e))?;
        parse_mode(&text).ok_or_else(|| {
            fail(
                call,
                &SysfsError::parse(path, format!("{text:?} is not a partition mode")),
            )
        })
    }

    fn read_modes(&self, call: &'static str, path: &Path) -> AmdResult<Vec<String>> {
        let text = self.fs.read_text(path).map_err(|e| fail(call, &e))?;
        parse_modes(&text).ok_or_else(|| {
            fail(
                call,
                &SysfsError::parse(path, format!("{text:?} is not a list of modes")),
            )
        })
    }

    fn set_partition(&self, gpu: PciAddress, files: &PartitionFiles, mode: &str) -> AmdResult<()> {
        let dir = self.amd_device(gpu)?;
        let Some(wanted) = parse_mode(mode) else {
            return Err(AmdError::new(files.set_call, AmdStatus::INVAL));
        };
        let available = self.read_modes(files.get_call, &dir.join(files.available))?;
        if !available.contains(&wanted) {
            tracing::debug!(%gpu, mode = %wanted, ?available, "partition mode not offered");
            return Err(AmdError::new(files.set_call, AmdStatus::INVAL));
        }
        // The kernel would refuse too, but later and less clearly; a PF without SR-IOV has no
        // VFs to be busy with.
        let vfs = self.fs.read_parse_opt::<u32>(&dir.join("sriov_numvfs"));
        if vfs
            .map_err(|e| fail("sysfs sriov_numvfs", &e))?
            .unwrap_or(0)
            > 0
        {
            return Err(AmdError::new(files.set_call, AmdStatus::BUSY));
        }
        self.write(files.set_call, &dir.join(files.current), &wanted)
    }
}

impl AmdSmi for AmdSysfs {
    fn gpus(&self) -> AmdResult<Vec<AmdGpuInfo>> {
        let (names, skipped) = self
            .fs
            .list_names_opt(Path::new(PCI_DEVICES))
            .map_err(|e| fail("sysfs /sys/bus/pci/devices", &e))?;
        for e in &skipped {
            tracing::warn!(error = %error_chain(e), "PCI device left out");
        }
        let mut out: Vec<AmdGpuInfo> = names
            .iter()
            .filter_map(|name| name.parse::<PciAddress>().ok())
            .filter_map(|address| self.probe(address))
            .collect();
        out.sort_by_key(|g| g.pci_address);
        Ok(out)
    }

    /// `NOT_SUPPORTED`: the kernel gives no control over an AMD GPU's VFs. Neither amdgpu
    /// (`amdgpu_kms_pci_driver` has no `sriov_configure`) nor GIM implements `sriov_numvfs`;
    /// GIM makes the VFs itself (its `vf_num` parameter, or GIM's host AMD SMI). The VFs that
    /// exist are still in `sriov_numvfs` for anyone reading the PCI device.
    fn num_vf(&self, gpu: PciAddress) -> AmdResult<VfCount> {
        self.amd_device(gpu)?;
        Err(AmdError::new(SRIOV_CALL, AmdStatus::NOT_SUPPORTED))
    }

    /// `NOT_SUPPORTED`, writing nothing (see [`AmdSysfs::num_vf`]).
    fn set_num_vf(&self, gpu: PciAddress, _count: u32) -> AmdResult<()> {
        self.amd_device(gpu)?;
        Err(AmdError::new(SRIOV_CALL, AmdStatus::NOT_SUPPORTED))
    }

    fn partition(&self, gpu: PciAddress) -> AmdResult<PartitionState> {
        let dir = self.amd_device(gpu)?;
        Ok(PartitionState {
            compute: self.read_mode(COMPUTE.get_call, &dir.join(COMPUTE.current))?,
            compute_available: self.read_modes(COMPUTE.get_call, &dir.join(COMPUTE.available))?,
            memory: self.read_mode(MEMORY.get_call, &dir.join(MEMORY.current))?,
            memory_available: self.read_modes(MEMORY.get_call, &dir.join(MEMORY.available))?,
            compute_vf_counts: Default::default(),
        })
    }

    /// Accepts the mode in any case; `INVAL` unless the GPU lists it as available, `BUSY`
    /// while VFs are enabled.
    fn set_compute_partition(&self, gpu: PciAddress, mode: &str) -> AmdResult<()> {
        self.set_partition(gpu, &COMPUTE, mode)
    }

    /// As [`AmdSysfs::set_compute_partition`], for `NPS*` modes. amdgpu only records the
    /// request: it applies when the driver next loads (kernel commit "drm/amdgpu: Place NPS
    /// mode request on unload"), so `current_memory_partition` shows the old mode until then.
    fn set_memory_partition(&self, gpu: PciAddress, mode: &str) -> AmdResult<()> {
        self.set_partition(gpu, &MEMORY, mode)
    }

    /// `<dev>/xgmi_hive_info/xgmi_hive_id` (amdgpu_xgmi.c, decimal); absent or 0: no hive.
    fn xgmi_hive(&self, gpu: PciAddress) -> AmdResult<Option<u64>> {
        const CALL: &str = "sysfs xgmi_hive_id";
        let dir = self.amd_device(gpu)?;
        let path = dir.join("xgmi_hive_info").join("xgmi_hive_id");
        match self.fs.read_parse_opt::<u64>(&path) {
            Ok(id) => Ok(id.filter(|id| *id != 0)),
            Err(e) => Err(fail(CALL, &e)),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::ffi::OsString;
    use std::sync::Mutex;

    use sysfs::RealSysfs;
    use sysfs::fixture::Tree;

    use super::*;

    pub(crate) const PF: &str = "0000:c1:00.0";
    pub(crate) const PF_DIR: &str = "/sys/devices/pci0000:c0/0000:c0:01.1/0000:c1:00.0";

    pub(crate) fn pci_device(
        tree: &Tree,
        bdf: &str,
        vendor: &str,
        device: &str,
        class: &str,
    ) -> String {
        let dir = format!("/sys/devices/pci0000:c0/0000:c0:01.1/{bdf}");
        tree.file(&format!("{dir}/vendor"), &format!("{vendor}\n"));
        tree.file(&format!("{dir}/device"), &format!("{device}\n"));
        tree.file(&format!("{dir}/class"), &format!("{class}\n"));
        tree.link(
            &format!("/sys/bus/pci/devices/{bdf}"),
            &format!("../../../devices/pci0000:c0/0000:c0:01.1/{bdf}"),
        );
        dir
    }

    /// An MI300X PF (8 VFs possible, none enabled) beside devices that are not AMD GPU PFs.
    pub(crate) fn mi300x_host() -> (tempfile::TempDir, Tree) {
        let dir = tempfile::tempdir().unwrap();
        let tree = Tree::new(dir.path());
        let pf = pci_device(&tree, PF, "0x1002", "0x74a1", "0x120000");
        assert_eq!(pf, PF_DIR);
        tree.file(&format!("{pf}/mem_info_vram_total"), "206141652992\n");
        tree.file(&format!("{pf}/unique_id"), "0x5ca2b1d3e4f60718\n");
        tree.file(&format!("{pf}/sriov_totalvfs"), "8\n");
        tree.file(&format!("{pf}/sriov_numvfs"), "0\n");
        tree.file(&format!("{pf}/current_compute_partition"), "SPX\n");
        tree.file(
            &format!("{pf}/available_compute_partition"),
            "SPX, DPX, QPX, CPX\n",
        );
        tree.file(&format!("{pf}/current_memory_partition"), "NPS1\n");
        tree.file(&format!("{pf}/available_memory_partition"), "NPS1, NPS4\n");
        // One VF of it, an NVIDIA GPU, and AMD's HD audio function: none is an AMD GPU PF.
        let vf = pci_device(&tree, "0000:c1:02.0", "0x1002", "0x74b5", "0x038000");
        tree.link(&format!("{vf}/physfn"), "../0000:c1:00.0");
        pci_device(&tree, "0000:41:00.0", "0x10de", "0x2335", "0x030200");
        pci_device(&tree, "0000:c1:00.1", "0x1002", "0xab38", "0x040300");
        (dir, tree)
    }

    pub(crate) fn pf() -> PciAddress {
        PF.parse().unwrap()
    }

    pub(crate) fn sysfs_over(dir: &Path) -> AmdSysfs {
        AmdSysfs::new(Arc::new(RealSysfs::new(dir)))
    }

    /// RealSysfs over a fixture that records writes and fails them with a chosen errno.
    #[derive(Debug)]
    pub(crate) struct Kernel {
        inner: RealSysfs,
        writes: Mutex<Vec<(String, String)>>,
        fail_writes: Option<i32>,
    }

    impl Kernel {
        pub(crate) fn new(dir: &Path) -> Self {
            Self {
                inner: RealSysfs::new(dir),
                writes: Mutex::default(),
                fail_writes: None,
            }
        }
        pub(crate) fn writes(&self) -> Vec<(String, String)> {
            self.writes.lock().unwrap().clone()
        }
    }

    impl Sysfs for Kernel {
        fn read(&self, path: &Path, limit: usize) -> Result<Vec<u8>, SysfsError> {
            self.inner.read(path, limit)
        }
        fn write(&self, path: &Path, data: &[u8]) -> Result<(), SysfsError> {
            let value = String::from_utf8_lossy(data).into_owned();
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            self.writes
                .lock()
                .unwrap()
                .push((file.clone(), value.clone()));
            if let Some(errno) = self.fail_writes {
                return Err(SysfsError::errno_of(Op::Write, path, errno));
            }
            self.inner.write(path, data)
        }
        fn read_link(&self, path: &Path) -> Result<PathBuf, SysfsError> {
            self.inner.read_link(path)
        }
        fn list_dir(&self, path: &Path) -> Result<Vec<OsString>, SysfsError> {
            self.inner.list_dir(path)
        }
        fn exists(&self, path: &Path) -> bool {
            self.inner.exists(path)
        }
    }

    pub(crate) fn over_kernel(kernel: Kernel) -> (Arc<Kernel>, AmdSysfs) {
        let kernel = Arc::new(kernel);
        let fs: Arc<dyn Sysfs> = kernel.clone();
        (kernel, AmdSysfs::new(fs))
    }

    pub(crate) fn read(dir: &Path, host_path: &str) -> String {
        RealSysfs::new(dir).read_text(Path::new(host_path)).unwrap()
    }

    #[test]
    fn lists_only_amd_gpu_physical_functions() {
        let (dir, _tree) = mi300x_host();
        let gpus = sysfs_over(dir.path()).gpus().unwrap();
        assert_eq!(gpus.len(), 1, "{gpus:?}");
        let gpu = &gpus[0];
        assert_eq!(gpu.pci_address, pf());
        assert_eq!(gpu.name, "AMD Instinct MI300X");
        assert_eq!(gpu.memory_total_mib, 196_592);
        assert_eq!(gpu.uuid.as_deref(), Some("0x5ca2b1d3e4f60718"));
    }

    #[test]
    fn garbage_attributes_do_not_hide_or_break_discovery() {
        let (dir, tree) = mi300x_host();
        tree.file(&format!("{PF_DIR}/mem_info_vram_total"), "lots\n");
        tree.bytes(&format!("{PF_DIR}/unique_id"), &[0xff, 0xfe]);
        // A second GPU with an unknown id and no optional files, and devices with garbage.
        pci_device(&tree, "0000:e1:00.0", "0x1002", "0x1234", "0x030000");
        pci_device(&tree, "0000:e2:00.0", "garbage", "0x74a1", "0x120000");
        pci_device(&tree, "0000:e3:00.0", "0x1002", "0x74a1", "class?");
        tree.dir("/sys/bus/pci/devices/not-a-bdf");
        let gpus = sysfs_over(dir.path()).gpus().unwrap();
        let names: Vec<_> = gpus
            .iter()
            .map(|g| (g.pci_address.to_string(), g.name.clone()))
            .collect();
        assert_eq!(
            names,
            [
                ("0000:c1:00.0".to_owned(), "AMD Instinct MI300X".to_owned()),
                ("0000:e1:00.0".to_owned(), "AMD GPU 1234".to_owned()),
            ]
        );
        assert_eq!((gpus[0].memory_total_mib, gpus[0].uuid.clone()), (0, None));
        assert_eq!((gpus[1].memory_total_mib, gpus[1].uuid.clone()), (0, None));
    }

    #[test]
    fn no_pci_bus_means_no_gpus() {
        let dir = tempfile::tempdir().unwrap();
        assert!(sysfs_over(dir.path()).gpus().unwrap().is_empty());
    }

    #[test]
    fn vf_counts_are_not_the_kernels_to_give() {
        let (dir, tree) = mi300x_host();
        tree.file(&format!("{PF_DIR}/sriov_numvfs"), "2\n");
        let (kernel, amd) = over_kernel(Kernel::new(dir.path()));
        for err in [
            amd.num_vf(pf()).unwrap_err(),
            amd.set_num_vf(pf(), 4).unwrap_err(),
            amd.set_num_vf(pf(), 0).unwrap_err(),
        ] {
            assert_eq!(err.status, AmdStatus::NOT_SUPPORTED);
            assert!(err.call.contains("GIM"), "{err}");
        }
        assert!(kernel.writes().is_empty(), "sriov_numvfs is never written");
        assert_eq!(read(dir.path(), &format!("{PF_DIR}/sriov_numvfs")), "2");
        let absent: PciAddress = "0000:99:00.0".parse().unwrap();
        assert_eq!(amd.num_vf(absent).unwrap_err().status, AmdStatus::NOT_FOUND);
        let nvidia: PciAddress = "0000:41:00.0".parse().unwrap();
        assert_eq!(amd.num_vf(nvidia).unwrap_err().status, AmdStatus::NOT_FOUND);
    }

    #[test]
    fn kernel_errnos_become_statuses() {
        for (errno, status) in [
            (libc::EBUSY, AmdStatus::BUSY),
            (libc::ERANGE, AmdStatus::INVAL),
            (libc::EINVAL, AmdStatus::INVAL),
            (libc::EACCES, AmdStatus::NO_PERM),
            (libc::EPERM, AmdStatus::NO_PERM),
            (libc::ENOENT, AmdStatus::NOT_SUPPORTED),
            (libc::EIO, STATUS_IO),
        ] {
            let (dir, _tree) = mi300x_host();
            let kernel = Kernel {
                fail_writes: Some(errno),
                ..Kernel::new(dir.path())
            };
            let (_kernel, amd) = over_kernel(kernel);
            let err = amd.set_compute_partition(pf(), "CPX").unwrap_err();
            assert_eq!(err.status, status, "errno {errno}");
            assert_eq!(err.call, "sysfs current_compute_partition write");
        }
    }

    #[test]
    fn xgmi_hive_ids() {
        let (dir, tree) = mi300x_host();
        let amd = sysfs_over(dir.path());
        assert_eq!(amd.xgmi_hive(pf()).unwrap(), None, "no hive directory");
        tree.file(
            &format!("{PF_DIR}/xgmi_hive_info/xgmi_hive_id"),
            "10314187296432062042\n",
        );
        assert_eq!(amd.xgmi_hive(pf()).unwrap(), Some(10314187296432062042));
        tree.file(&format!("{PF_DIR}/xgmi_hive_info/xgmi_hive_id"), "0\n");
        assert_eq!(amd.xgmi_hive(pf()).unwrap(), None, "0 is no hive");
        tree.file(&format!("{PF_DIR}/xgmi_hive_info/xgmi_hive_id"), "hive\n");
        assert_eq!(
            amd.xgmi_hive(pf()).unwrap_err().status,
            STATUS_UNEXPECTED_DATA
        );
    }

    #[test]
    fn reads_partitions() {
        let (dir, _tree) = mi300x_host();
        let state = sysfs_over(dir.path()).partition(pf()).unwrap();
        assert_eq!(state.compute, "SPX");
        assert_eq!(state.compute_available, ["SPX", "DPX", "QPX", "CPX"]);
        assert_eq!(state.memory, "NPS1");
        assert_eq!(state.memory_available, ["NPS1", "NPS4"]);
    }

    #[test]
    fn partition_garbage_and_absence() {
        let (dir, tree) = mi300x_host();
        let amd = sysfs_over(dir.path());
        tree.file(
            &format!("{PF_DIR}/available_compute_partition"),
            "SPX, D/PX\n",
        );
        assert_eq!(
            amd.partition(pf()).unwrap_err().status,
            STATUS_UNEXPECTED_DATA
        );
        tree.file(&format!("{PF_DIR}/current_memory_partition"), "\u{1}\n");
        tree.file(&format!("{PF_DIR}/available_compute_partition"), "SPX\n");
        assert_eq!(
            amd.partition(pf()).unwrap_err().status,
            STATUS_UNEXPECTED_DATA
        );
        // An MI210: no partition files at all.
        pci_device(&tree, "0000:e1:00.0", "0x1002", "0x740f", "0x038000");
        let mi210: PciAddress = "0000:e1:00.0".parse().unwrap();
        assert_eq!(
            amd.partition(mi210).unwrap_err().status,
            AmdStatus::NOT_SUPPORTED
        );
    }

    #[test]
    fn sets_an_available_partition_by_name() {
        let (dir, _tree) = mi300x_host();
        let (kernel, amd) = over_kernel(Kernel::new(dir.path()));
        amd.set_compute_partition(pf(), "cpx").unwrap();
        amd.set_memory_partition(pf(), "NPS4").unwrap();
        assert_eq!(
            kernel.writes(),
            [
                ("current_compute_partition".to_owned(), "CPX".to_owned()),
                ("current_memory_partition".to_owned(), "NPS4".to_owned()),
            ]
        );
        assert_eq!(
            read(dir.path(), &format!("{PF_DIR}/current_compute_partition")),
            "CPX"
        );
    }

    #[test]
    fn refuses_unavailable_or_malformed_modes_and_busy_gpus() {
        let (dir, tree) = mi300x_host();
        let (kernel, amd) = over_kernel(Kernel::new(dir.path()));
        for mode in ["TPX", "NPS8", "", "SPX\nDPX", "../x", "SPXSPXSPX"] {
            assert_eq!(
                amd.set_compute_partition(pf(), mode).unwrap_err().status,
                AmdStatus::INVAL
            );
        }
        assert_eq!(
            amd.set_memory_partition(pf(), "NPS2").unwrap_err().status,
            AmdStatus::INVAL
        );
        tree.file(&format!("{PF_DIR}/sriov_numvfs"), "1\n");
        assert_eq!(
            amd.set_compute_partition(pf(), "DPX").unwrap_err().status,
            AmdStatus::BUSY
        );
        assert!(kernel.writes().is_empty());
    }

    #[test]
    fn product_names() {
        assert_eq!(product_name(PciDeviceId(0x74a5)), "AMD Instinct MI325X");
        assert_eq!(product_name(PciDeviceId(0x740f)), "AMD Instinct MI210");
        assert_eq!(product_name(PciDeviceId(0x7408)), "AMD Instinct MI250X");
        assert_eq!(product_name(PciDeviceId(0x0abc)), "AMD GPU 0abc");
    }
}
