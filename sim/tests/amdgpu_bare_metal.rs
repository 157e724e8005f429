//! AMD MI300X on bare-metal amdgpu (profile `mi300x`): no SR-IOV through the kernel, compute
//! partitions applied live, NPS requests that wait for a driver reload, one request per XGMI
//! hive.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use common::*;
use gpu::AmdStatus;
use libc::{EINVAL, ENOENT};

const GPU0: &str = "0000:05:00.0";
const GPU7: &str = "0000:e5:00.0";

fn status<T: std::fmt::Debug>(r: gpu::AmdResult<T>) -> AmdStatus {
    r.expect_err("the call should fail").status
}

#[test]
fn amdgpu_enables_no_vfs() {
    let h = host("mi300x");
    let fs = h.sysfs();
    assert_eq!(read(&fs, &dev(GPU0, "sriov_totalvfs")), "8");
    assert_eq!(read(&fs, &dev(GPU0, "sriov_numvfs")), "0");
    // sriov_numvfs_store: "driver does not support SR-IOV configuration via sysfs".
    assert_eq!(write_err(&fs, &dev(GPU0, "sriov_numvfs"), "1"), ENOENT);
    assert!(vfs(&fs, GPU0).is_empty());
    // The ROCm library has no VF calls.
    let amd = h.amd();
    assert_eq!(status(amd.num_vf(addr(GPU0))), AmdStatus::NOT_SUPPORTED);
    assert_eq!(
        status(amd.set_num_vf(addr(GPU0), 1)),
        AmdStatus::NOT_SUPPORTED
    );
}

#[test]
fn compute_modes_apply_at_once_memory_modes_at_the_next_driver_load() {
    let h = host("mi300x");
    let fs = h.sysfs();
    let amd = h.amd();
    write(&fs, &dev(GPU0, "current_compute_partition"), "CPX\n");
    assert_eq!(read(&fs, &dev(GPU0, "current_compute_partition")), "CPX");
    assert_eq!(amd.partition(addr(GPU0)).unwrap().compute, "CPX");

    amd.set_memory_partition(addr(GPU0), "NPS4").unwrap();
    assert_eq!(read(&fs, &dev(GPU0, "current_memory_partition")), "NPS1");
    assert_eq!(
        amd.partition(addr(GPU0)).unwrap().memory,
        "NPS1",
        "only requested"
    );
    assert_eq!(
        write_err(&fs, &dev(GPU0, "current_memory_partition"), "NPS2"),
        EINVAL,
        "not offered"
    );

    // A process on any GPU of the driver blocks the reload; nothing changes.
    h.set_gpu_clients(addr(GPU7), true).unwrap();
    assert!(h.reload_amdgpu().is_err());
    assert_eq!(read(&fs, &dev(GPU0, "current_memory_partition")), "NPS1");
    h.set_gpu_clients(addr(GPU7), false).unwrap();

    let changed = h.reload_amdgpu().unwrap();
    assert_eq!(
        changed.len(),
        8,
        "the request was the whole hive's: {changed:?}"
    );
    for gpu in [GPU0, GPU7] {
        assert_eq!(read(&fs, &dev(gpu, "current_memory_partition")), "NPS4");
    }
    assert!(
        h.reload_amdgpu().unwrap().is_empty(),
        "nothing left to apply"
    );
}

#[test]
fn asking_for_the_current_mode_withdraws_a_request_and_a_reboot_applies_one() {
    let h = host("mi300x");
    let amd = h.amd();
    amd.set_memory_partition(addr(GPU0), "NPS4").unwrap();
    amd.set_memory_partition(addr(GPU7), "NPS1").unwrap();
    assert!(
        h.reload_amdgpu().unwrap().is_empty(),
        "withdrawn for the hive"
    );

    amd.set_memory_partition(addr(GPU7), "NPS4").unwrap();
    h.reboot().unwrap();
    assert_eq!(amd.partition(addr(GPU0)).unwrap().memory, "NPS4");
}

#[test]
fn hive_ids_in_sysfs_and_amd_smi() {
    let h = host("mi300x");
    let fs = h.sysfs();
    let amd = h.amd();
    let id = read(&fs, &dev(GPU0, "xgmi_hive_info/xgmi_hive_id"));
    assert_eq!(id, read(&fs, &dev(GPU7, "xgmi_hive_info/xgmi_hive_id")));
    assert_eq!(
        amd.xgmi_hive(addr(GPU0)).unwrap(),
        Some(id.parse().unwrap())
    );
    // The real sysfs backend reads the same file.
    let real = gpu::amd_sysfs::AmdSysfs::new(fs.clone());
    assert_eq!(
        real.xgmi_hive(addr(GPU7)).unwrap(),
        Some(id.parse().unwrap())
    );
    use gpu::AmdSmi;
    assert_eq!(
        real.partition(addr(GPU0)).unwrap().memory_available,
        ["NPS1", "NPS4"]
    );
}
