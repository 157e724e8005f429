//! AMD MI300X: partitions in sysfs and through AMD SMI, VF counts per mode.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use common::*;
use gpu::AmdStatus;
use libc::{EBUSY, EINVAL};

const MI300: &str = "0000:c1:00.0";

fn status<T: std::fmt::Debug>(r: gpu::AmdResult<T>) -> AmdStatus {
    r.expect_err("the call should fail").status
}

#[test]
fn gpus_and_vf_counts() {
    let h = host("vdi-mixed");
    let amd = h.amd();
    let gpus = amd.gpus().unwrap();
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0].pci_address, addr(MI300));
    assert_eq!(gpus[0].name, "AMD Instinct MI300X");
    assert_eq!(gpus[0].memory_total_mib, 196592);
    assert!(gpus[0].uuid.is_some());
    assert_eq!(
        amd.num_vf(addr(MI300)).unwrap(),
        gpu::VfCount {
            enabled: 1,
            supported: 1
        }
    );
    assert_eq!(
        status(amd.num_vf(addr("0000:41:00.0"))),
        AmdStatus::NOT_FOUND,
        "an NVIDIA GPU"
    );
    assert!(host("dgx-a100").amd().gpus().unwrap().is_empty());
}

#[test]
fn partitions_change_only_without_vfs() {
    let h = host("vdi-mixed");
    let amd = h.amd();
    let fs = h.sysfs();
    let p = amd.partition(addr(MI300)).unwrap();
    assert_eq!((p.compute.as_str(), p.memory.as_str()), ("SPX", "NPS1"));
    assert_eq!(p.compute_available, vec!["SPX", "DPX", "QPX", "CPX"]);
    assert_eq!(read(&fs, &dev(MI300, "current_compute_partition")), "SPX");
    assert_eq!(
        read(&fs, &dev(MI300, "available_compute_partition")),
        "SPX, DPX, QPX, CPX"
    );
    assert_eq!(
        read(&fs, &dev(MI300, "available_memory_partition")),
        "NPS1, NPS4"
    );

    assert_eq!(
        status(amd.set_compute_partition(addr(MI300), "CPX")),
        AmdStatus::BUSY,
        "a VF is enabled"
    );
    assert_eq!(
        write_err(&fs, &dev(MI300, "current_compute_partition"), "CPX"),
        EBUSY
    );
    assert_eq!(
        status(amd.set_compute_partition(addr(MI300), "XPX")),
        AmdStatus::INVAL
    );
    assert_eq!(
        write_err(&fs, &dev(MI300, "current_memory_partition"), "NPS8"),
        EINVAL
    );

    amd.set_num_vf(addr(MI300), 0).unwrap();
    assert_eq!(
        read(&fs, &dev(MI300, "sriov_numvfs")),
        "0",
        "AMD SMI and sysfs share the state"
    );
    amd.set_compute_partition(addr(MI300), "CPX").unwrap();
    write(&fs, &dev(MI300, "current_memory_partition"), "NPS4\n");
    let p = amd.partition(addr(MI300)).unwrap();
    assert_eq!((p.compute.as_str(), p.memory.as_str()), ("CPX", "NPS4"));
    assert_eq!(
        amd.num_vf(addr(MI300)).unwrap(),
        gpu::VfCount {
            enabled: 0,
            supported: 8
        }
    );

    amd.set_num_vf(addr(MI300), 8).unwrap();
    assert_eq!(vfs(&fs, MI300).len(), 8);
    assert_eq!(
        status(amd.set_num_vf(addr(MI300), 4)),
        AmdStatus::BUSY,
        "non-zero to non-zero"
    );
    assert_eq!(
        status(amd.set_num_vf(addr(MI300), 9)),
        AmdStatus::INVAL,
        "above the total"
    );
    // Back to SPX: only one VF fits.
    amd.set_num_vf(addr(MI300), 0).unwrap();
    write(&fs, &dev(MI300, "current_compute_partition"), "spx");
    assert_eq!(
        status(amd.set_num_vf(addr(MI300), 2)),
        AmdStatus::INVAL,
        "SPX supports one VF"
    );
    assert_eq!(write_err(&fs, &dev(MI300, "sriov_numvfs"), "2"), EINVAL);
    amd.set_num_vf(addr(MI300), 1).unwrap();
}

#[test]
fn partitions_survive_a_reboot_but_vfs_come_back_from_the_boot_service() {
    let h = host("vdi-mixed");
    let amd = h.amd();
    amd.set_num_vf(addr(MI300), 0).unwrap();
    amd.set_compute_partition(addr(MI300), "DPX").unwrap();
    h.reboot().unwrap();
    assert_eq!(amd.partition(addr(MI300)).unwrap().compute, "DPX");
    assert_eq!(
        amd.num_vf(addr(MI300)).unwrap(),
        gpu::VfCount {
            enabled: 1,
            supported: 2
        }
    );
}
