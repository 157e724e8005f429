//! Injected faults: errno, NVML codes, AMD statuses, hangs, partial SR-IOV enables.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::time::{Duration, Instant};

use common::*;
use gpu::{AmdStatus, NvmlCode, Placement};
use sim::{Fault, FaultAction, FaultTarget, SimError};

fn fault(spec: &str) -> Fault {
    spec.parse().unwrap()
}

const PF: &str = "0000:18:00.0";

#[test]
fn an_errno_fault_fails_the_write_and_changes_nothing() {
    let h = host("hgx-h200");
    let fs = h.sysfs();
    pf_on_stub_with_vfs(&fs, PF, 32);
    h.inject_fault(fault(&format!(
        "write:/sys/bus/pci/devices/{PF}/sriov_numvfs=EIO,times=1"
    )))
    .unwrap();
    assert_eq!(h.faults().unwrap().len(), 1);
    assert_eq!(write_err(&fs, &dev(PF, "sriov_numvfs"), "0"), libc::EIO);
    assert_eq!(vfs(&fs, PF).len(), 32, "the failed write changed nothing");
    assert!(h.faults().unwrap().is_empty(), "times=1 is used up");
    write(&fs, &dev(PF, "sriov_numvfs"), "0");
    assert!(vfs(&fs, PF).is_empty());
}

#[test]
fn faults_match_the_path_behind_the_link_and_prefixes() {
    let h = host("vdi-mixed");
    let fs = h.sysfs();
    let t4 = "0000:41:00.0";
    h.inject_fault(fault(&format!(
        "write:/sys/devices/pci0000:40/0000:40:01.1/{t4}/driver_override=EPERM"
    )))
    .unwrap();
    assert_eq!(
        write_err(&fs, &dev(t4, "driver_override"), "vfio-pci"),
        libc::EPERM
    );
    assert_eq!(read(&fs, &dev(t4, "driver_override")), "(null)");
    h.clear_faults().unwrap();
    h.inject_fault(fault("write:/sys/class/mdev_bus/*=ENOSPC"))
        .unwrap();
    let create = format!("/sys/class/mdev_bus/{t4}/mdev_supported_types/nvidia-230/create");
    assert_eq!(
        write_err(&fs, &create, "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"),
        libc::ENOSPC
    );
    assert_eq!(
        read(
            &fs,
            &format!(
                "/sys/class/mdev_bus/{t4}/mdev_supported_types/nvidia-230/available_instances"
            )
        ),
        "16"
    );
    assert!(names(&fs, "/sys/bus/mdev/devices").is_empty());
    assert_eq!(h.faults().unwrap().len(), 1, "without times a fault stays");
    h.clear_faults().unwrap();
    write(&fs, &create, "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001");
}

#[test]
fn read_faults_hit_reads_and_listings() {
    let h = host("single-gpu");
    let fs = h.sysfs();
    h.inject_fault(fault("read:/sys/devices/system/node/online=EIO,times=2"))
        .unwrap();
    assert_eq!(read_err(&fs, "/sys/devices/system/node/online"), libc::EIO);
    assert_eq!(read_err(&fs, "/sys/devices/system/node/online"), libc::EIO);
    assert_eq!(read(&fs, "/sys/devices/system/node/online"), "0");
    h.inject_fault(fault("read:/sys/bus/pci/devices=ENOMEM,times=1"))
        .unwrap();
    let e = fs
        .list_dir(std::path::Path::new("/sys/bus/pci/devices"))
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENOMEM));
    assert!(
        exists(&fs, "/sys/bus/pci/devices"),
        "exists is never faulted"
    );
}

#[test]
fn a_hang_delays_then_lets_the_write_happen() {
    let h = host("hgx-h200");
    let fs = h.sysfs();
    pf_on_stub_with_vfs(&fs, PF, 32);
    h.inject_fault(fault(&format!(
        "write:/sys/bus/pci/devices/{PF}/sriov_numvfs=hang:150,times=1"
    )))
    .unwrap();
    let start = Instant::now();
    write(&fs, &dev(PF, "sriov_numvfs"), "0");
    assert!(start.elapsed() >= Duration::from_millis(150));
    assert!(vfs(&fs, PF).is_empty());
    pf_to_nvidia(&fs, PF);
    // Other handles are not blocked while one access hangs.
    h.inject_fault(fault("nvml:nvmlDeviceGetUtilizationRates=hang:300,times=1"))
        .unwrap();
    let nvml = h.nvml();
    let slow = std::thread::spawn(move || nvml.telemetry(0).map(|_| ()));
    std::thread::sleep(Duration::from_millis(50));
    let quick = Instant::now();
    assert_eq!(h.nvml().device_count().unwrap(), 8);
    assert!(quick.elapsed() < Duration::from_millis(200));
    slow.join().unwrap().unwrap();
}

#[test]
fn partial_vfs_report_success_with_fewer_vfs() {
    let h = host("hgx-h200");
    let fs = h.sysfs();
    pf_on_stub_with_vfs(&fs, PF, 32);
    write(&fs, &dev(PF, "sriov_numvfs"), "0");
    h.inject_fault(fault(&format!(
        "write:/sys/bus/pci/devices/{PF}/sriov_numvfs=partial:2"
    )))
    .unwrap();
    write(&fs, &dev(PF, "sriov_numvfs"), "8");
    assert_eq!(
        read(&fs, &dev(PF, "sriov_numvfs")),
        "2",
        "read back to learn the truth"
    );
    assert_eq!(vfs(&fs, PF).len(), 2);

    let h = host("vdi-mixed");
    let amd = h.amd();
    let mi300 = addr("0000:c1:00.0");
    h.inject_fault(fault("amd:amdsmi_set_num_vf=partial:3,times=1"))
        .unwrap();
    amd.set_num_vf(mi300, 8).unwrap();
    assert_eq!(amd.num_vf(mi300).unwrap().enabled, 3);
}

#[test]
fn nvml_codes_per_call_and_gpu() {
    let h = host("dgx-a100");
    let nvml = h.nvml();
    h.inject_fault(fault(
        "nvml:nvmlDeviceCreateGpuInstanceWithPlacement@0000:07:00.0=INSUFFICIENT_RESOURCES,times=1",
    ))
    .unwrap();
    let one = Placement { start: 0, size: 1 };
    let e = nvml.create_gpu_instance(0, 19, one).unwrap_err();
    assert_eq!(
        (e.call, e.code),
        (
            "nvmlDeviceCreateGpuInstanceWithPlacement",
            NvmlCode::INSUFFICIENT_RESOURCES
        )
    );
    assert!(
        nvml.gpu_instances(0).unwrap().is_empty(),
        "the failed call changed nothing"
    );
    nvml.create_gpu_instance(1, 19, one).unwrap();
    nvml.create_gpu_instance(0, 19, one).unwrap();

    h.inject_fault(fault("nvml:*=GPU_IS_LOST")).unwrap();
    assert_eq!(nvml.device_count().unwrap_err().code, NvmlCode::GPU_IS_LOST);
    assert_eq!(nvml.telemetry(5).unwrap_err().code, NvmlCode::GPU_IS_LOST);
    h.clear_faults().unwrap();
    h.inject_fault(fault("nvml:*@0000:bd:00.0=GPU_IS_LOST"))
        .unwrap();
    assert_eq!(
        nvml.device_count().unwrap(),
        8,
        "calls without a GPU do not match a GPU fault"
    );
    assert_eq!(nvml.mig_mode(7).unwrap_err().code, NvmlCode::GPU_IS_LOST);
    assert!(nvml.mig_mode(6).is_ok());
}

#[test]
fn amd_statuses() {
    let h = host("vdi-mixed");
    h.inject_fault(fault(
        "amd:amdsmi_set_gpu_compute_partition@0000:c1:00.0=NO_PERM",
    ))
    .unwrap();
    let e = h
        .amd()
        .set_compute_partition(addr("0000:c1:00.0"), "SPX")
        .unwrap_err();
    assert_eq!(
        (e.call, e.status),
        ("amdsmi_set_gpu_compute_partition", AmdStatus::NO_PERM)
    );
}

#[test]
fn nonsense_faults_are_refused() {
    let h = host("single-gpu");
    let bad = Fault {
        target: FaultTarget::Nvml {
            call: "nvmlDeviceGetCount_v2".into(),
            gpu: None,
        },
        action: FaultAction::Errno(libc::EIO),
        times: None,
    };
    assert!(matches!(
        h.inject_fault(bad),
        Err(SimError::InvalidFault { .. })
    ));
    let zero = Fault {
        target: FaultTarget::SysfsWrite {
            path: "/sys/x".into(),
        },
        action: FaultAction::Errno(5),
        times: Some(0),
    };
    assert!(h.inject_fault(zero).is_err());
    assert!(h.faults().unwrap().is_empty());
}
