//! [`GimSmiLibrary`] against a C stub of GIM's host library (`stub_gim_smi.c`).

use std::path::{Path, PathBuf};

use super::*;

const STUB_SOURCE: &str = include_str!("stub_gim_smi.c");

/// The stub built with `cc` (present wherever Rust links), and the directory of its controls.
pub(crate) struct Stub {
    dir: tempfile::TempDir,
    library: PathBuf,
}

impl Stub {
    pub(crate) fn build() -> Self {
        Self::build_with(&[])
    }

    /// With `-D` defines: `NO_SET_NUM_VF`, `NO_PARTITIONS`, `NO_TOPOLOGY` leave functions out.
    pub(crate) fn build_with(defines: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("stub_gim_smi.c");
        let library = dir.path().join("libamdsmi.so");
        std::fs::write(&source, STUB_SOURCE).unwrap();
        let mut cc = std::process::Command::new("cc");
        cc.args(["-shared", "-fPIC", "-Wall", "-Werror", "-o"])
            .arg(&library)
            .arg(&source)
            .arg(format!("-DSTATE_DIR=\"{}\"", dir.path().display()));
        for define in defines {
            cc.arg(format!("-D{define}"));
        }
        let status = cc.status().expect("run cc to build the GIM SMI stub");
        assert!(status.success(), "cc failed to build the GIM SMI stub");
        Self { dir, library }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.library
    }

    pub(crate) fn load(&self) -> GimSmiLibrary {
        GimSmiLibrary::load_from(&self.library).unwrap()
    }

    /// The init, shut_down and set calls the library received, in order.
    pub(crate) fn calls(&self) -> Vec<String> {
        match std::fs::read_to_string(self.dir.path().join("calls")) {
            Ok(text) => text.lines().map(str::to_owned).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The set calls only.
    pub(crate) fn sets(&self) -> Vec<String> {
        let calls = self.calls();
        calls
            .into_iter()
            .filter(|c| c.starts_with("set_"))
            .collect()
    }

    pub(crate) fn flag(&self, name: &str, on: bool) {
        let path = self.dir.path().join(name);
        if on {
            std::fs::write(path, "").unwrap();
        } else {
            std::fs::remove_file(path).unwrap();
        }
    }
}

const C1: &str = "0000:c1:00.0";
const B41: &str = "0000:41:00.0";

fn gpu(bdf: &str) -> PciAddress {
    bdf.parse().unwrap()
}

fn status<T: fmt::Debug>(result: AmdResult<T>) -> AmdStatus {
    result.unwrap_err().status
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn library_is_send_and_sync() {
    assert_send_sync::<GimSmiLibrary>();
}

#[test]
fn load_from_missing_path_is_fail_load_module() {
    let err = GimSmiLibrary::load_from("/nonexistent/libamdsmi.so").unwrap_err();
    assert_eq!(err.status, AmdStatus::FAIL_LOAD_MODULE);
    assert!(err.to_string().contains("library load failed"), "{err}");
}

#[test]
fn load_without_gim_installed_is_fail_load_module() {
    if Path::new("/usr/local/lib/libamdsmi.so").exists() {
        return;
    }
    let err = GimSmiLibrary::load().unwrap_err();
    assert_eq!(err.status, AmdStatus::FAIL_LOAD_MODULE);
}

#[test]
fn a_library_without_set_num_vf_is_fail_load_symbol() {
    let stub = Stub::build_with(&["NO_SET_NUM_VF"]);
    let err = GimSmiLibrary::load_from(stub.path()).unwrap_err();
    assert_eq!(
        err,
        AmdError::new("amdsmi_set_num_vf", AmdStatus::FAIL_LOAD_SYMBOL)
    );
    assert!(
        stub.calls().is_empty(),
        "not initialised: {:?}",
        stub.calls()
    );
    // ROCm's bare-metal library has no VF calls either; libc stands in for any such library.
    let err = GimSmiLibrary::load_from("libc.so.6").unwrap_err();
    assert_eq!(err.status, AmdStatus::FAIL_LOAD_SYMBOL);
}

#[test]
fn inits_for_amd_gpus_and_shuts_down_on_drop() {
    let stub = Stub::build();
    let amd = stub.load();
    assert_eq!(stub.calls(), ["init 2"]);
    drop(amd);
    assert_eq!(stub.calls(), ["init 2", "shut_down"]);
}

#[test]
fn discovery_tolerates_missing_and_unterminated_details() {
    let stub = Stub::build();
    let gpus = stub.load().gpus().unwrap();
    let addresses: Vec<_> = gpus.iter().map(|g| g.pci_address.to_string()).collect();
    assert_eq!(addresses, [B41, C1], "sorted by address");
    let mi300x = &gpus[1];
    assert_eq!(mi300x.name, "AMD Instinct MI300X");
    assert_eq!(
        mi300x.uuid.as_deref(),
        Some("1cff74a1-0000-1000-80ff-c10000000000")
    );
    assert_eq!(mi300x.memory_total_mib, 196_608, "vram_size is in MB");
    // No UUID or VRAM call for it, and a market name filling its field without a NUL: the
    // name stops at the field, the rest is unknown, the GPU is still listed.
    let other = &gpus[0];
    assert_eq!(other.name, "M".repeat(256));
    assert_eq!((other.uuid.clone(), other.memory_total_mib), (None, 0));
}

#[test]
fn vf_counts_and_gims_refusals() {
    let stub = Stub::build();
    let amd = stub.load();
    let count = |bdf| amd.num_vf(gpu(bdf)).unwrap();
    assert_eq!(
        count(C1),
        VfCount {
            enabled: 1,
            supported: 8
        }
    );
    amd.set_num_vf(gpu(C1), 8).unwrap();
    assert_eq!(
        count(C1),
        VfCount {
            enabled: 8,
            supported: 8
        }
    );
    assert_eq!(count(B41).enabled, 1, "per GPU");
    assert_eq!(status(amd.set_num_vf(gpu(C1), 0)), AmdStatus::INVAL);
    assert_eq!(status(amd.set_num_vf(gpu(C1), 9)), AmdStatus::INVAL);
    stub.flag("guest_running", true);
    let err = amd.set_num_vf(gpu(C1), 4).unwrap_err();
    assert_eq!(err, AmdError::new("amdsmi_set_num_vf", AmdStatus::BUSY));
    assert_eq!(count(C1).enabled, 8);
    assert_eq!(
        stub.sets(),
        [
            "set_num_vf c100 8",
            "set_num_vf c100 0",
            "set_num_vf c100 9",
            "set_num_vf c100 4"
        ]
    );
    let absent = gpu("0000:99:00.0");
    assert_eq!(status(amd.num_vf(absent)), AmdStatus::NOT_FOUND);
    assert_eq!(status(amd.set_num_vf(absent, 1)), AmdStatus::NOT_FOUND);
}

#[test]
fn partitions_follow_the_vf_count() {
    let stub = Stub::build();
    let amd = stub.load();
    let state = amd.partition(gpu(C1)).unwrap();
    assert_eq!(
        state,
        PartitionState {
            compute: "SPX".to_owned(),
            compute_available: vec!["SPX".to_owned(), "CPX".to_owned()],
            memory: "NPS1".to_owned(),
            memory_available: vec!["NPS1".to_owned(), "NPS4".to_owned()],
            compute_vf_counts: [
                ("CPX", vec![1, 2, 4, 8]),
                ("DPX", vec![2]),
                ("QPX", vec![4]),
                ("SPX", vec![1]),
            ]
            .into_iter()
            .map(|(m, c)| (m.to_owned(), c))
            .collect(),
        }
    );
    amd.set_num_vf(gpu(C1), 8).unwrap();
    let state = amd.partition(gpu(C1)).unwrap();
    assert_eq!(
        (state.compute.as_str(), state.compute_available),
        ("CPX", vec!["CPX".to_owned()])
    );
    amd.set_num_vf(gpu(C1), 2).unwrap();
    let state = amd.partition(gpu(C1)).unwrap();
    assert_eq!(state.compute, "DPX");
    assert_eq!(state.compute_available, ["DPX", "CPX"]);
}

#[test]
fn compute_modes_go_by_name_through_the_current_list() {
    let stub = Stub::build();
    let amd = stub.load();
    // 1 VF: [0] SPX, [1] CPX.
    amd.set_compute_partition(gpu(C1), "cpx").unwrap();
    assert_eq!(amd.partition(gpu(C1)).unwrap().compute, "CPX");
    amd.set_compute_partition(gpu(C1), "SPX").unwrap();
    // 8 VFs: [0] CPX; an index kept from the 1-VF list would be refused.
    amd.set_num_vf(gpu(C1), 8).unwrap();
    amd.set_compute_partition(gpu(C1), "CPX").unwrap();
    // 2 VFs: [0] DPX, [1] CPX.
    amd.set_num_vf(gpu(C1), 2).unwrap();
    amd.set_compute_partition(gpu(C1), "CPX").unwrap();
    assert_eq!(amd.partition(gpu(C1)).unwrap().compute, "CPX");
    amd.set_compute_partition(gpu(C1), "DPX").unwrap();
    let profile_sets: Vec<_> = stub
        .sets()
        .into_iter()
        .filter(|c| c.starts_with("set_profile"))
        .collect();
    assert_eq!(
        profile_sets,
        [
            "set_profile c100 1",
            "set_profile c100 0",
            "set_profile c100 0",
            "set_profile c100 1",
            "set_profile c100 0"
        ]
    );
}

#[test]
fn compute_modes_not_listed_are_refused_without_a_call() {
    let stub = Stub::build();
    let amd = stub.load();
    amd.set_num_vf(gpu(C1), 8).unwrap();
    for mode in ["SPX", "DPX", "QPX", "TPX", "XPX", "", "CPX\n0"] {
        let err = amd.set_compute_partition(gpu(C1), mode).unwrap_err();
        assert_eq!(
            err,
            AmdError::new(
                "amdsmi_set_gpu_accelerator_partition_profile",
                AmdStatus::INVAL
            ),
            "{mode:?}"
        );
    }
    assert_eq!(stub.sets(), ["set_num_vf c100 8"]);
    // The library's own refusals come back as they are.
    stub.flag("guest_running", true);
    assert_eq!(
        status(amd.set_compute_partition(gpu(C1), "CPX")),
        AmdStatus::BUSY
    );
    stub.flag("guest_running", false);
    assert_eq!(
        status(amd.set_compute_partition(gpu("0000:99:00.0"), "CPX")),
        AmdStatus::NOT_FOUND
    );
}

#[test]
fn memory_modes_by_name_within_the_caps() {
    let stub = Stub::build();
    let amd = stub.load();
    amd.set_memory_partition(gpu(C1), "nps4").unwrap();
    assert_eq!(amd.partition(gpu(C1)).unwrap().memory, "NPS4");
    for mode in ["NPS2", "NPS8", "NPS3", "SPX", ""] {
        let err = amd.set_memory_partition(gpu(C1), mode).unwrap_err();
        assert_eq!(
            err,
            AmdError::new("amdsmi_set_gpu_memory_partition_mode", AmdStatus::INVAL),
            "{mode:?}"
        );
    }
    assert_eq!(stub.sets(), ["set_memory c100 4"]);
    // SPX needs NPS1: the library refuses the combination, and says so.
    assert_eq!(
        status(amd.set_compute_partition(gpu(C1), "SPX")),
        AmdStatus::INVAL
    );
    amd.set_compute_partition(gpu(C1), "CPX").unwrap();
    stub.flag("guest_running", true);
    assert_eq!(
        status(amd.set_memory_partition(gpu(C1), "NPS1")),
        AmdStatus::BUSY
    );
}

#[test]
fn hive_ids_come_from_the_lowest_member() {
    let stub = Stub::build();
    let amd = stub.load();
    // The hive of 0000:41:00.0 and 0000:c1:00.0: amdsmi_bdf_t 0x4100, plus one.
    assert_eq!(amd.xgmi_hive(gpu(C1)).unwrap(), Some(0x4101));
    assert_eq!(amd.xgmi_hive(gpu(B41)).unwrap(), Some(0x4101));
    stub.flag("no_xgmi", true);
    assert_eq!(amd.xgmi_hive(gpu(C1)).unwrap(), None);
}

#[test]
fn absent_optional_calls_are_not_supported() {
    let stub = Stub::build_with(&["NO_PARTITIONS", "NO_TOPOLOGY"]);
    let amd = stub.load();
    assert_eq!(amd.gpus().unwrap().len(), 2);
    assert_eq!(amd.num_vf(gpu(C1)).unwrap().supported, 8);
    assert_eq!(
        amd.partition(gpu(C1)).unwrap_err(),
        AmdError::new(
            "amdsmi_get_gpu_accelerator_partition_profile",
            AmdStatus::NOT_SUPPORTED
        )
    );
    assert_eq!(
        status(amd.set_compute_partition(gpu(C1), "CPX")),
        AmdStatus::NOT_SUPPORTED
    );
    assert_eq!(
        status(amd.set_memory_partition(gpu(C1), "NPS4")),
        AmdStatus::NOT_SUPPORTED
    );
    assert_eq!(
        amd.xgmi_hive(gpu(C1)).unwrap_err(),
        AmdError::new("amdsmi_get_link_topology_nearest", AmdStatus::NOT_SUPPORTED)
    );
}
