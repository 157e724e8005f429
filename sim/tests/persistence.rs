//! State directories: restart, several handles, reboot, corrupt files.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::fs;

use common::*;
use gpu::Placement;
use sim::{Profile, SimError, SimHost};

const T4: &str = "0000:41:00.0";
const U1: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";

fn create_1q(fs: &std::sync::Arc<dyn sysfs::Sysfs>, uuid: &str) {
    write(
        fs,
        &format!("/sys/class/mdev_bus/{T4}/mdev_supported_types/nvidia-230/create"),
        uuid,
    );
}

#[test]
fn state_survives_an_agent_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("host");
    {
        let h = SimHost::create(&state, Profile::builtin("vdi-mixed").unwrap()).unwrap();
        create_1q(&h.sysfs(), U1);
        h.inject_fault("write:/sys/x=EIO".parse().unwrap()).unwrap();
        write(
            &h.sysfs(),
            &dev("0000:42:00.0", "driver_override"),
            "vfio-pci",
        );
    }
    let h = SimHost::open(&state).unwrap();
    assert_eq!(h.profile_name(), "vdi-mixed");
    assert_eq!(h.hostname(), "vdi-mixed-sim");
    let fs = h.sysfs();
    assert!(exists(&fs, &format!("/sys/bus/mdev/devices/{U1}")));
    assert_eq!(
        read(&fs, &dev("0000:42:00.0", "driver_override")),
        "vfio-pci"
    );
    assert_eq!(h.faults().unwrap().len(), 1);
    let leftovers: Vec<_> = fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        leftovers.len(),
        2,
        "host.json and lock, no temporary files: {leftovers:?}"
    );
}

#[test]
fn two_handles_see_each_others_changes() {
    let dir = tempfile::tempdir().unwrap();
    let a = SimHost::create(dir.path(), Profile::builtin("dgx-a100").unwrap()).unwrap();
    let b = SimHost::open(dir.path()).unwrap();
    let one = Placement { start: 0, size: 1 };
    let gi = a.nvml().create_gpu_instance(0, 19, one).unwrap();
    assert_eq!(b.nvml().gpu_instances(0).unwrap().len(), 1);
    b.set_mig_instance_in_use(addr("0000:07:00.0"), gi.id, true)
        .unwrap();
    assert_eq!(
        a.nvml().destroy_gpu_instance(0, gi.id).unwrap_err().code,
        gpu::NvmlCode::IN_USE
    );
    b.remove_gpu(addr("0000:bd:00.0")).unwrap();
    assert_eq!(a.nvml().device_count().unwrap(), 7);
    assert!(!exists(&a.sysfs(), "/sys/bus/pci/devices/0000:bd:00.0"));
    a.inject_xid(addr("0000:07:00.0"), 79).unwrap();
    assert_eq!(b.nvml().wait_xid_event(100).unwrap().unwrap().xid, 79);
    assert_eq!(
        a.nvml().wait_xid_event(10).unwrap(),
        None,
        "delivered once, to either handle"
    );
}

#[test]
fn concurrent_writers_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    SimHost::create(dir.path(), Profile::builtin("vdi-mixed").unwrap()).unwrap();
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let path = dir.path().to_owned();
            std::thread::spawn(move || {
                let h = SimHost::open(&path).unwrap();
                for i in 0..8 {
                    create_1q(
                        &h.sysfs(),
                        &format!("83b8f4f2-509f-382f-3c1e-e6bfe0fa{w}{i:03}"),
                    );
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let fs = SimHost::open(dir.path()).unwrap().sysfs();
    assert_eq!(names(&fs, "/sys/bus/mdev/devices").len(), 16);
    assert_eq!(
        read(
            &fs,
            &format!(
                "/sys/class/mdev_bus/{T4}/mdev_supported_types/nvidia-230/available_instances"
            )
        ),
        "0"
    );
}

#[test]
fn reboot_clears_runtime_devices_and_keeps_hardware() {
    let mut profile = Profile::builtin("hgx-h200").unwrap();
    profile.name = "hgx-h200-no-boot-vfs".into();
    profile
        .models
        .get_mut("h200")
        .unwrap()
        .sriov
        .as_mut()
        .unwrap()
        .boot_vfs = 0;
    let h = SimHost::new(profile).unwrap();
    let fs = h.sysfs();
    let pf = "0000:18:00.0";
    assert_eq!(read(&fs, &dev(pf, "sriov_numvfs")), "0");
    pf_to_stub(&fs, pf);
    write(&fs, &dev(pf, "sriov_numvfs"), "4");
    pf_to_nvidia(&fs, pf);
    let vf = vfs(&fs, pf)[0].clone();
    write(&fs, &dev(&vf, "nvidia/current_vgpu_type"), "1422");
    // MIG on another GPU, with an instance in use.
    let other = addr("0000:2a:00.0");
    h.set_mig_mode(other, true).unwrap();
    let gi = h
        .nvml()
        .create_gpu_instance(1, 0, Placement { start: 0, size: 8 })
        .unwrap();
    h.set_mig_instance_in_use(other, gi.id, true).unwrap();
    // Passthrough of a third GPU.
    let third = "0000:3a:00.0";
    write(&fs, &dev(third, "driver_override"), "vfio-pci");
    write(&fs, &dev(third, "driver/unbind"), third);
    write(&fs, "/sys/bus/pci/drivers_probe", third);
    h.inject_fault("nvml:*=UNKNOWN".parse().unwrap()).unwrap();
    h.inject_xid(other, 13).unwrap();
    let devices_before = names(&fs, "/sys/bus/pci/devices").len();

    h.reboot().unwrap();
    assert!(h.faults().unwrap().is_empty());
    let nvml = h.nvml();
    assert_eq!(nvml.wait_xid_event(0).unwrap(), None);
    assert_eq!(read(&fs, &dev(pf, "sriov_numvfs")), "0");
    assert_eq!(
        names(&fs, "/sys/bus/pci/devices").len(),
        devices_before - 4,
        "the VFs are gone, the rest stays"
    );
    assert_eq!(read(&fs, &dev(third, "driver_override")), "(null)");
    assert_eq!(
        link_name(&fs, &dev(third, "driver")).as_deref(),
        Some("nvidia")
    );
    assert_eq!(nvml.device_count().unwrap(), 8);
    assert!(nvml.mig_mode(1).unwrap().current, "MIG mode persists");
    assert!(
        nvml.gpu_instances(1).unwrap().is_empty(),
        "MIG instances do not"
    );
    assert_eq!(read(&fs, &dev(pf, "sriov_totalvfs")), "32");
    assert_eq!(read(&fs, "/sys/devices/system/node/online"), "0-1");
}

#[test]
fn a_pending_mig_mode_change_takes_effect_at_reboot() {
    let h = host("dgx-a100");
    let nvml = h.nvml();
    nvml.create_gpu_instance(0, 0, Placement { start: 0, size: 8 })
        .unwrap();
    h.set_mig_mode(addr("0000:07:00.0"), false).unwrap();
    assert_eq!(
        nvml.mig_mode(0).unwrap(),
        gpu::MigMode {
            current: true,
            pending: false
        }
    );
    h.reboot().unwrap();
    assert_eq!(
        nvml.mig_mode(0).unwrap(),
        gpu::MigMode {
            current: false,
            pending: false
        }
    );
    assert!(matches!(
        host("vdi-mixed").set_mig_mode(addr(T4), true),
        Err(SimError::NotMigCapable(_))
    ));
}

#[test]
fn hot_unplug_and_replug() {
    let h = host("vdi-mixed");
    let fs = h.sysfs();
    create_1q(&fs, U1);
    h.remove_gpu(addr(T4)).unwrap();
    assert!(!exists(&fs, &format!("/sys/bus/pci/devices/{T4}")));
    assert!(!exists(&fs, &format!("/sys/bus/mdev/devices/{U1}")));
    assert!(matches!(
        h.remove_gpu(addr(T4)),
        Err(SimError::GpuState { .. })
    ));
    assert!(
        matches!(
            h.remove_gpu(addr("0000:01:00.0")),
            Err(SimError::UnknownGpu(_))
        ),
        "a NIC is not a GPU"
    );
    h.add_gpu(addr(T4)).unwrap();
    assert_eq!(
        link_name(&fs, &dev(T4, "driver")).as_deref(),
        Some("nvidia")
    );
    assert!(matches!(
        h.add_gpu(addr(T4)),
        Err(SimError::GpuState { .. })
    ));
    assert!(names(&fs, "/sys/bus/mdev/devices").is_empty());
}

#[test]
fn directory_mistakes_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        SimHost::open(dir.path()),
        Err(SimError::NoState { .. })
    ));
    SimHost::create(dir.path(), Profile::builtin("single-gpu").unwrap()).unwrap();
    let again = SimHost::create(dir.path(), Profile::builtin("single-gpu").unwrap());
    assert!(matches!(again, Err(SimError::StateExists { .. })));
    let other = SimHost::open_or_create(dir.path(), Profile::builtin("dgx-a100").unwrap());
    assert!(
        matches!(other, Err(SimError::ProfileMismatch { .. })),
        "{other:?}"
    );
    let same =
        SimHost::open_or_create(dir.path(), Profile::builtin("single-gpu").unwrap()).unwrap();
    assert_eq!(same.profile_name(), "single-gpu");
    let fresh = dir.path().join("new");
    let made = SimHost::open_or_create(&fresh, Profile::builtin("single-gpu").unwrap()).unwrap();
    assert_eq!(made.dir().as_deref(), Some(fresh.as_path()));
}

#[test]
fn a_corrupt_state_file_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let h = SimHost::create(dir.path(), Profile::builtin("single-gpu").unwrap()).unwrap();
    let file = dir.path().join("host.json");
    for garbage in ["", "{", "not json", "{\"format\": 1}", "[1, 2]"] {
        fs::write(&file, garbage).unwrap();
        let e = SimHost::open(dir.path()).unwrap_err();
        assert!(
            matches!(e, SimError::CorruptState { .. }),
            "{garbage:?}: {e}"
        );
        assert!(e.to_string().contains("host.json"), "{e}");
        // A handle opened before sees the error on its next access.
        let read = h
            .sysfs()
            .read(std::path::Path::new("/sys/devices/system/node/online"), 100);
        let msg = sysfs::error_chain(&read.unwrap_err());
        assert!(msg.contains("corrupt"), "{msg}");
        assert_eq!(
            h.nvml().device_count().unwrap_err().code,
            gpu::NvmlCode::UNKNOWN
        );
        assert!(h.faults().is_err());
    }
    fs::write(&file, "{\"format\": 99}").unwrap();
    assert!(matches!(
        SimHost::open(dir.path()),
        Err(SimError::StateFormat { found: 99, .. })
    ));
}

#[test]
fn profiles_load_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    let text = Profile::builtin("single-gpu")
        .unwrap()
        .to_toml()
        .unwrap()
        .replace("single-gpu-sim", "lab-7");
    fs::write(&path, text).unwrap();
    let p = Profile::load(&path).unwrap();
    assert_eq!(SimHost::new(p).unwrap().hostname(), "lab-7");
    assert!(matches!(
        Profile::load(&dir.path().join("missing.toml")),
        Err(SimError::Io { .. })
    ));
    fs::write(&path, "name = \"x\"\nhostname = \"y\"\nnuma_nodes = []\n").unwrap();
    assert!(matches!(
        Profile::load(&path),
        Err(SimError::InvalidProfile { .. })
    ));
}

/// The NVML index of the vdi-mixed profile's T4.
fn t4_index(h: &SimHost) -> u32 {
    let nvml = h.nvml();
    (0..nvml.device_count().unwrap())
        .find(|i| nvml.device_info(*i).unwrap().pci_address.to_string() == T4)
        .unwrap()
}

#[test]
fn a_telemetry_read_is_kept_in_memory_and_survives_another_handles_change() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("host");
    let a = SimHost::create(&state, Profile::builtin("vdi-mixed").unwrap()).unwrap();
    let index = t4_index(&a);
    let file = state.join("host.json");
    let written = fs::metadata(&file).unwrap().ino();
    let mut energy = a.nvml().telemetry(index).unwrap().energy_mj;
    for _ in 0..5 {
        let next = a.nvml().telemetry(index).unwrap().energy_mj;
        assert!(next > energy, "energy only grows");
        energy = next;
    }
    // Telemetry is not written through at every read (it was a write of the whole host).
    assert_eq!(fs::metadata(&file).unwrap().ino(), written);
    // Another handle changes the host from the file, which has none of those samples; the
    // first handle reloads it and must not hand out older figures than it already did.
    let b = SimHost::open(&state).unwrap();
    create_1q(&b.sysfs(), U1);
    assert_ne!(fs::metadata(&file).unwrap().ino(), written);
    let after = a.nvml().telemetry(index).unwrap().energy_mj;
    assert!(after > energy, "energy went back from {energy} to {after}");
    assert!(
        a.sysfs()
            .exists(std::path::Path::new(&format!("/sys/bus/mdev/devices/{U1}")))
    );
    // Dropped, it leaves its samples for the next process.
    drop((a, b));
    let c = SimHost::open(&state).unwrap();
    assert!(c.nvml().telemetry(index).unwrap().energy_mj > after);
}

#[test]
fn telemetry_continues_across_a_restart_and_leaves_sysfs_current() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("host");
    let energy = {
        let h = SimHost::create(&state, Profile::builtin("vdi-mixed").unwrap()).unwrap();
        let nvml = h.nvml();
        let index = t4_index(&h);
        let first = nvml.telemetry(index).unwrap().energy_mj;
        // A telemetry read between a change and the next sysfs read must not hide the change.
        create_1q(&h.sysfs(), U1);
        let last = nvml.telemetry(index).unwrap().energy_mj;
        assert!(last > first);
        assert!(
            h.sysfs()
                .exists(std::path::Path::new(&format!("/sys/bus/mdev/devices/{U1}")))
        );
        (index, last)
    };
    // Another process (a restarted agent) continues the walk where this one left it.
    let h = SimHost::open(&state).unwrap();
    assert!(h.nvml().telemetry(energy.0).unwrap().energy_mj > energy.1);
    assert!(
        h.sysfs()
            .exists(std::path::Path::new(&format!("/sys/bus/mdev/devices/{U1}")))
    );
}
