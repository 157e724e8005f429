//! AMD MI300X on GIM, AMD's MxGPU host driver (profiles `vdi-mixed`, TotalVFs 8, and
//! `mi300x-gim`, eight GPUs in one XGMI hive with the shipped firmware's one VF): VF counts and
//! partitions through GIM's host AMD SMI, never through `sriov_numvfs`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use common::*;
use gpu::AmdStatus;
use libc::ENOENT;

const MI300: &str = "0000:c1:00.0";
const GIM0: &str = "0000:05:00.0";
const GIM7: &str = "0000:e5:00.0";

fn status<T: std::fmt::Debug>(r: gpu::AmdResult<T>) -> AmdStatus {
    r.expect_err("the call should fail").status
}

fn first_vf(fs: &std::sync::Arc<dyn sysfs::Sysfs>, pf: &str) -> ids::PciAddress {
    addr(&vfs(fs, pf)[0])
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
    // GIM's vf_num made one VF at load; supported is the firmware's TotalVFs.
    assert_eq!(
        amd.num_vf(addr(MI300)).unwrap(),
        gpu::VfCount {
            enabled: 1,
            supported: 8
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
fn gim_takes_no_sriov_numvfs_writes() {
    let h = host("vdi-mixed");
    let fs = h.sysfs();
    assert_eq!(
        link_name(&fs, &dev(MI300, "driver")).as_deref(),
        Some("gim")
    );
    assert_eq!(write_err(&fs, &dev(MI300, "sriov_numvfs"), "0"), ENOENT);
    assert_eq!(vfs(&fs, MI300).len(), 1);
    // amdgpu's partition files are not GIM's; GIM has its own memory_partition_mode.
    assert!(!exists(&fs, &dev(MI300, "current_compute_partition")));
    assert_eq!(
        read(&fs, &dev(MI300, "memory_partition_mode")),
        "memory_partition_mode: NPS1"
    );
}

#[test]
fn vf_counts_pick_the_compute_modes() {
    let h = host("vdi-mixed");
    let amd = h.amd();
    let fs = h.sysfs();
    let p = amd.partition(addr(MI300)).unwrap();
    assert_eq!((p.compute.as_str(), p.memory.as_str()), ("SPX", "NPS1"));
    assert_eq!(
        p.compute_available,
        ["SPX", "CPX"],
        "the modes one VF allows"
    );
    for bad in [0, 3, 9] {
        assert_eq!(
            status(amd.set_num_vf(addr(MI300), bad)),
            AmdStatus::INVAL,
            "{bad} VFs"
        );
    }
    amd.set_num_vf(addr(MI300), 8).unwrap();
    assert_eq!(vfs(&fs, MI300).len(), 8);
    let p = amd.partition(addr(MI300)).unwrap();
    assert_eq!(
        p.compute, "CPX",
        "GIM resets the mode to the count's default"
    );
    assert_eq!(p.compute_available, ["CPX"]);
    assert_eq!(
        status(amd.set_compute_partition(addr(MI300), "SPX")),
        AmdStatus::INVAL,
        "SPX takes one VF only"
    );
    amd.set_num_vf(addr(MI300), 2).unwrap();
    assert_eq!(amd.partition(addr(MI300)).unwrap().compute, "DPX");
    amd.set_num_vf(addr(MI300), 1).unwrap();
    amd.set_compute_partition(addr(MI300), "cpx").unwrap();
    assert_eq!(amd.partition(addr(MI300)).unwrap().compute, "CPX");
}

#[test]
fn a_guest_on_a_vf_blocks_vf_and_partition_changes() {
    let h = host("vdi-mixed");
    let amd = h.amd();
    let fs = h.sysfs();
    let vf = first_vf(&fs, MI300);
    write(&fs, &dev(&vf.to_string(), "driver_override"), "vfio-pci");
    write(&fs, "/sys/bus/pci/drivers_probe", &vf.to_string());
    h.set_vfio_open(vf, true).unwrap();
    assert_eq!(status(amd.set_num_vf(addr(MI300), 2)), AmdStatus::BUSY);
    assert_eq!(
        status(amd.set_memory_partition(addr(MI300), "NPS4")),
        AmdStatus::BUSY
    );
    assert_eq!(
        status(amd.set_compute_partition(addr(MI300), "CPX")),
        AmdStatus::BUSY
    );
    amd.set_memory_partition(addr(MI300), "NPS1").unwrap();
    // GIM's sysfs store reports success for a refused change.
    write(&fs, &dev(MI300, "memory_partition_mode"), "NPS4\n");
    assert_eq!(amd.partition(addr(MI300)).unwrap().memory, "NPS1");

    h.set_vfio_open(vf, false).unwrap();
    amd.set_memory_partition(addr(MI300), "NPS4").unwrap();
    assert_eq!(
        amd.partition(addr(MI300)).unwrap().memory,
        "NPS4",
        "at once: no driver reload under GIM"
    );
}

#[test]
fn partitions_are_hive_wide_and_the_firmware_allows_one_vf() {
    let h = host("mi300x-gim");
    let amd = h.amd();
    let fs = h.sysfs();
    assert_eq!(amd.gpus().unwrap().len(), 8);
    assert_eq!(
        amd.num_vf(addr(GIM0)).unwrap(),
        gpu::VfCount {
            enabled: 1,
            supported: 1
        }
    );
    assert_eq!(status(amd.set_num_vf(addr(GIM0), 8)), AmdStatus::INVAL);
    assert_eq!(
        amd.xgmi_hive(addr(GIM0)).unwrap(),
        amd.xgmi_hive(addr(GIM7)).unwrap()
    );

    amd.set_compute_partition(addr(GIM0), "CPX").unwrap();
    assert_eq!(amd.partition(addr(GIM7)).unwrap().compute, "CPX");

    let vf = first_vf(&fs, GIM7);
    write(&fs, &dev(&vf.to_string(), "driver_override"), "vfio-pci");
    write(&fs, "/sys/bus/pci/drivers_probe", &vf.to_string());
    h.set_vfio_open(vf, true).unwrap();
    assert_eq!(
        status(amd.set_memory_partition(addr(GIM0), "NPS4")),
        AmdStatus::BUSY,
        "a guest on another GPU of the hive"
    );
}

#[test]
fn partitions_survive_a_reboot_and_gim_makes_vf_num_vfs_again() {
    let h = host("vdi-mixed");
    let amd = h.amd();
    amd.set_num_vf(addr(MI300), 2).unwrap();
    amd.set_memory_partition(addr(MI300), "NPS4").unwrap();
    h.reboot().unwrap();
    let p = amd.partition(addr(MI300)).unwrap();
    assert_eq!(p.memory, "NPS4");
    assert_eq!(p.compute, "SPX", "DPX does not take vf_num's one VF");
    assert_eq!(amd.num_vf(addr(MI300)).unwrap().enabled, 1);
}
