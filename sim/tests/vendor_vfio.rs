//! NVIDIA vendor-specific VFIO vGPU on SR-IOV VFs (vGPU 17+, H200).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::sync::Arc;

use common::*;
use gpu::{NvmlCode, Placement};
use libc::{EBUSY, EINVAL, EIO};

const PF: &str = "0000:18:00.0";

fn creatable(fs: &Arc<dyn sysfs::Sysfs>, vf: &str) -> Vec<(u32, String)> {
    let text = read(fs, &dev(vf, "nvidia/creatable_vgpu_types"));
    let mut lines = text.lines();
    assert_eq!(
        lines.next().map(str::trim),
        Some("ID    : vGPU Name"),
        "{text}"
    );
    lines
        .map(|l| {
            let (id, name) = l.split_once(':').unwrap();
            (id.trim().parse().unwrap(), name.trim().to_owned())
        })
        .collect()
}

fn ids_of(list: &[(u32, String)]) -> Vec<u32> {
    list.iter().map(|(i, _)| *i).collect()
}

#[test]
fn time_sliced_vgpus_share_the_framebuffer_and_one_size() {
    let h = host("hgx-h200");
    let fs = h.sysfs();
    let vfs = vfs(&fs, PF);
    let list = creatable(&fs, &vfs[0]);
    assert_eq!(
        ids_of(&list),
        vec![1420, 1421, 1422, 1423],
        "MIG is off: time-sliced types only"
    );
    assert_eq!(list[1].1, "NVIDIA H200X-35C");
    assert_eq!(read(&fs, &dev(&vfs[0], "nvidia/current_vgpu_type")), "0");
    let index = 0; // the first GPU by address
    let before = h.nvml().telemetry(index).unwrap().fb_used_mib;

    write(&fs, &dev(&vfs[0], "nvidia/current_vgpu_type"), "1421");
    assert_eq!(read(&fs, &dev(&vfs[0], "nvidia/current_vgpu_type")), "1421");
    assert!(
        creatable(&fs, &vfs[0]).is_empty(),
        "a VF with a vGPU offers nothing more"
    );
    assert_eq!(
        ids_of(&creatable(&fs, &vfs[1])),
        vec![1421],
        "only the 35C size while room remains"
    );
    assert_eq!(
        write_err(&fs, &dev(&vfs[1], "nvidia/current_vgpu_type"), "1420"),
        EIO,
        "a type that cannot be created now fails with EIO (issue 13, fact 2)"
    );
    assert_eq!(
        write_err(&fs, &dev(&vfs[0], "nvidia/current_vgpu_type"), "1421"),
        EBUSY
    );
    assert_eq!(
        write_err(&fs, &dev(&vfs[1], "nvidia/current_vgpu_type"), "abc"),
        EINVAL
    );
    assert!(
        exists(&fs, &format!("/dev/vfio/{}", group_of(&fs, &vfs[0]))),
        "typed VFs are VFIO devices"
    );
    assert!(!exists(
        &fs,
        &format!("/dev/vfio/{}", group_of(&fs, &vfs[1]))
    ));
    let after = h.nvml().telemetry(index).unwrap().fb_used_mib;
    assert_eq!(after - before, 35840, "fb_used reflects the vGPU");

    for vf in &vfs[1..4] {
        write(&fs, &dev(vf, "nvidia/current_vgpu_type"), "1421");
    }
    assert!(
        creatable(&fs, &vfs[4]).is_empty(),
        "the framebuffer is full"
    );
    assert_eq!(
        write_err(&fs, &dev(&vfs[4], "nvidia/current_vgpu_type"), "1421"),
        EIO,
        "an exhausted type fails with EIO (issue 13, fact 2)"
    );

    h.set_vfio_open(addr(&vfs[0]), true).unwrap();
    assert_eq!(
        write_err(&fs, &dev(&vfs[0], "nvidia/current_vgpu_type"), "0"),
        EBUSY
    );
    h.set_vfio_open(addr(&vfs[0]), false).unwrap();
    for vf in &vfs[0..4] {
        write(&fs, &dev(vf, "nvidia/current_vgpu_type"), "0");
    }
    assert_eq!(
        ids_of(&creatable(&fs, &vfs[4])),
        vec![1420, 1421, 1422, 1423]
    );
}

#[test]
fn the_nvidia_directory_needs_the_nvidia_driver() {
    let h = host("hgx-h200");
    let fs = h.sysfs();
    let vf = vfs(&fs, PF)[2].clone();
    write(&fs, &dev(&vf, "driver/unbind"), &vf);
    assert!(!exists(&fs, &dev(&vf, "nvidia")));
    write(&fs, "/sys/bus/pci/drivers_probe", &vf);
    assert!(exists(&fs, &dev(&vf, "nvidia/current_vgpu_type")));
}

#[test]
fn mig_backed_vgpus_take_a_gpu_instance() {
    let h = host("hgx-h200");
    let fs = h.sysfs();
    let nvml = h.nvml();
    let vfs = vfs(&fs, PF);
    assert_eq!(
        nvml.gpu_instance_profiles(0).unwrap_err().code,
        NvmlCode::NOT_SUPPORTED,
        "MIG is off"
    );
    h.set_mig_mode(addr(PF), true).unwrap();
    assert!(
        nvml.mig_mode(0).unwrap().current,
        "an idle GPU switches at once"
    );
    assert!(
        creatable(&fs, &vfs[0]).is_empty(),
        "MIG-backed types need a free GPU instance"
    );
    let gi = nvml
        .create_gpu_instance(0, 19, Placement { start: 0, size: 1 })
        .unwrap();
    assert_eq!(ids_of(&creatable(&fs, &vfs[0])), vec![1414]);
    write(&fs, &dev(&vfs[0], "nvidia/current_vgpu_type"), "1414");
    assert!(
        creatable(&fs, &vfs[1]).is_empty(),
        "the only 1g instance is taken"
    );
    assert_eq!(
        nvml.destroy_gpu_instance(0, gi.id).unwrap_err().code,
        NvmlCode::IN_USE
    );
    write(&fs, &dev(&vfs[0], "nvidia/current_vgpu_type"), "0");
    nvml.destroy_gpu_instance(0, gi.id).unwrap();
}

#[test]
fn nvml_sets_mig_mode_at_once_when_idle_else_after_a_reboot() {
    let h = host("hgx-h200");
    let fs = h.sysfs();
    let nvml = h.nvml();
    let vfs = vfs(&fs, PF);
    // NVML names the GPU-instance profile of a MIG-backed type, none for a time-sliced one.
    let types = nvml.supported_vgpu_types(0).unwrap();
    let profile_of = |id: u32| {
        types
            .iter()
            .find(|t| t.id.get() == id)
            .unwrap()
            .gpu_instance_profile_id
    };
    assert_eq!(profile_of(1414), Some(19), "1g.18gb");
    assert_eq!(profile_of(1421), None);

    nvml.set_mig_mode(0, true).unwrap();
    let mode = nvml.mig_mode(0).unwrap();
    assert!(mode.current && mode.pending, "idle: at once");
    nvml.set_mig_mode(0, false).unwrap();
    assert!(!nvml.mig_mode(0).unwrap().current);

    // A vGPU holds the GPU: the change waits.
    write(&fs, &dev(&vfs[0], "nvidia/current_vgpu_type"), "1421");
    nvml.set_mig_mode(0, true).unwrap();
    let mode = nvml.mig_mode(0).unwrap();
    assert!(!mode.current && mode.pending, "{mode:?}");
    // Asking for the current mode again withdraws the pending change.
    nvml.set_mig_mode(0, false).unwrap();
    let mode = nvml.mig_mode(0).unwrap();
    assert!(!mode.current && !mode.pending, "{mode:?}");
    write(&fs, &dev(&vfs[0], "nvidia/current_vgpu_type"), "0");

    // Client processes hold it: pending until a reboot, which ends them.
    h.set_gpu_clients(addr(PF), true).unwrap();
    nvml.set_mig_mode(0, true).unwrap();
    let mode = nvml.mig_mode(0).unwrap();
    assert!(!mode.current && mode.pending, "{mode:?}");
    h.reboot().unwrap();
    let mode = h.nvml().mig_mode(0).unwrap();
    assert!(mode.current && mode.pending, "{mode:?}");
    h.set_mig_mode(addr(PF), false).unwrap();
    assert!(!h.nvml().mig_mode(0).unwrap().current, "no clients left");

    // A fault on the call, and a GPU without MIG.
    h.inject_fault("nvml:nvmlDeviceSetMigMode=IN_USE,times=1".parse().unwrap())
        .unwrap();
    assert_eq!(
        h.nvml().set_mig_mode(0, true).unwrap_err().code,
        NvmlCode::IN_USE
    );
    assert!(
        !h.nvml().mig_mode(0).unwrap().pending,
        "a failed call changes nothing"
    );
    let l4 = host("single-gpu");
    assert_eq!(
        l4.nvml().set_mig_mode(0, true).unwrap_err().code,
        NvmlCode::NOT_SUPPORTED
    );
}

/// Every attribute of the VFs' `nvidia/` directories: its contents, or the errno of its read.
fn nvidia_dirs(fs: &Arc<dyn sysfs::Sysfs>, vfs: &[String]) -> Vec<(String, Result<String, i32>)> {
    let mut out = Vec::new();
    for vf in vfs {
        let dir = dev(vf, "nvidia");
        for name in names(fs, &dir) {
            let path = format!("{dir}/{name}");
            let got = sysfs::SysfsExt::read_text(&**fs, std::path::Path::new(&path))
                .map_err(|e| e.errno().unwrap_or(0));
            out.push((path, got));
        }
    }
    out
}

#[test]
fn after_an_instance_change_sysfs_shows_what_a_fresh_reader_sees() {
    // The handle that makes MIG instances keeps the sysfs it rendered when the change does not
    // show there (a compute instance in a GPU instance a type can still take); a second handle
    // on the same state directory renders it afresh each time.
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("host");
    let h = sim::SimHost::create(&state, sim::Profile::builtin("hgx-h200").unwrap()).unwrap();
    h.set_mig_mode(addr(PF), true).unwrap();
    let (fs, nvml) = (h.sysfs(), h.nvml());
    let vfs = vfs(&fs, PF);
    let same = |what: &str| {
        let fresh = sim::SimHost::open(&state).unwrap().sysfs();
        assert_eq!(nvidia_dirs(&fs, &vfs), nvidia_dirs(&fresh, &vfs), "{what}");
    };
    same("MIG on, no instance");
    let one = nvml
        .create_gpu_instance(0, 19, Placement { start: 0, size: 1 })
        .unwrap();
    assert_eq!(ids_of(&creatable(&fs, &vfs[0])), vec![1414]);
    same("a 1g GPU instance: type 1414 creatable");
    let ci_profile = nvml.compute_instance_profiles(0, one.id).unwrap()[0].id;
    let ci = nvml.create_compute_instance(0, one.id, ci_profile).unwrap();
    same("a compute instance in it (still creatable)");
    let two = nvml
        .create_gpu_instance(0, 19, Placement { start: 1, size: 1 })
        .unwrap();
    same("a second 1g GPU instance");
    write(&fs, &dev(&vfs[0], "nvidia/current_vgpu_type"), "1414");
    same("a MIG-backed vGPU in one of them");
    nvml.destroy_compute_instance(0, one.id, ci.id).unwrap();
    same("the compute instance gone");
    nvml.destroy_gpu_instance(0, two.id).unwrap_or_else(|_| {
        nvml.destroy_gpu_instance(0, one.id).unwrap();
    });
    same("a free GPU instance gone");
}
