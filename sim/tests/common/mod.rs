//! Helpers shared by the simulator's integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use ids::PciAddress;
use sim::{Profile, SimHost};
use sysfs::{Sysfs, SysfsExt};

pub fn host(profile: &str) -> SimHost {
    SimHost::new(Profile::builtin(profile).unwrap()).unwrap()
}

pub fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}

pub fn dev(bdf: &str, attr: &str) -> String {
    format!("/sys/bus/pci/devices/{bdf}/{attr}")
}

pub fn read(fs: &Arc<dyn Sysfs>, path: &str) -> String {
    fs.read_text(Path::new(path))
        .unwrap_or_else(|e| panic!("read {path}: {}", sysfs::error_chain(&e)))
}

pub fn write(fs: &Arc<dyn Sysfs>, path: &str, value: &str) {
    fs.write_str(Path::new(path), value)
        .unwrap_or_else(|e| panic!("write {value:?} to {path}: {}", sysfs::error_chain(&e)))
}

/// The errno of a write that must fail.
pub fn write_err(fs: &Arc<dyn Sysfs>, path: &str, value: &str) -> i32 {
    let e = fs
        .write_str(Path::new(path), value)
        .expect_err(&format!("write {value:?} to {path} should fail"));
    e.errno()
        .unwrap_or_else(|| panic!("no errno: {}", sysfs::error_chain(&e)))
}

pub fn read_err(fs: &Arc<dyn Sysfs>, path: &str) -> i32 {
    let e = fs
        .read(Path::new(path), 4096)
        .expect_err(&format!("read {path} should fail"));
    e.errno()
        .unwrap_or_else(|| panic!("no errno: {}", sysfs::error_chain(&e)))
}

pub fn names(fs: &Arc<dyn Sysfs>, path: &str) -> Vec<String> {
    fs.list_names(Path::new(path))
        .unwrap_or_else(|e| panic!("list {path}: {}", sysfs::error_chain(&e)))
        .0
}

pub fn link_name(fs: &Arc<dyn Sysfs>, path: &str) -> Option<String> {
    fs.link_name_opt(Path::new(path)).unwrap()
}

pub fn exists(fs: &Arc<dyn Sysfs>, path: &str) -> bool {
    fs.exists(Path::new(path))
}

pub fn group_of(fs: &Arc<dyn Sysfs>, bdf: &str) -> u32 {
    link_name(fs, &dev(bdf, "iommu_group"))
        .unwrap()
        .parse()
        .unwrap()
}

pub fn vfs(fs: &Arc<dyn Sysfs>, pf: &str) -> Vec<String> {
    let mut out: Vec<(u32, String)> = names(fs, &format!("/sys/bus/pci/devices/{pf}"))
        .into_iter()
        .filter_map(|n| n.strip_prefix("virtfn").and_then(|i| i.parse().ok()))
        .map(|i: u32| (i, link_name(fs, &dev(pf, &format!("virtfn{i}"))).unwrap()))
        .collect();
    out.sort();
    out.into_iter().map(|(_, a)| a).collect()
}

/// Moves an NVIDIA PF from `nvidia` to `pci-pf-stub` the way `sriov-manage` does: the unbind
/// lock, the override, the unbind (which takes the PF's VFs with it), the probe.
pub fn pf_to_stub(fs: &Arc<dyn Sysfs>, pf: &str) {
    write(
        fs,
        &format!("/proc/driver/nvidia/gpus/{pf}/unbindLock"),
        "1",
    );
    write(fs, &dev(pf, "driver_override"), "pci-pf-stub");
    write(fs, &dev(pf, "driver/unbind"), pf);
    write(fs, "/sys/bus/pci/drivers_probe", pf);
}

/// Hands a PF on `pci-pf-stub` back to `nvidia`, then binds its VFs to `nvidia`.
pub fn pf_to_nvidia(fs: &Arc<dyn Sysfs>, pf: &str) {
    write(fs, &dev(pf, "driver_override"), "\n");
    write(fs, &dev(pf, "driver/unbind"), pf);
    write(fs, "/sys/bus/pci/drivers/nvidia/bind", pf);
    for vf in vfs(fs, pf) {
        write(fs, "/sys/bus/pci/drivers/nvidia/bind", &vf);
    }
}

/// Set-up for tests of `sriov_numvfs` itself on an NVIDIA GPU: the PF on `pci-pf-stub` (the
/// only driver of an NVIDIA GPU with `sriov_configure`) with `n` VFs enabled again, as the
/// boot-time `sriov-manage -e` had them.
pub fn pf_on_stub_with_vfs(fs: &Arc<dyn Sysfs>, pf: &str, n: u32) {
    pf_to_stub(fs, pf);
    if n > 0 {
        write(fs, &dev(pf, "sriov_numvfs"), &n.to_string());
    }
}

/// `sriov-manage -e <pf>`, step by step: every VF enabled, the PF and its VFs on `nvidia`.
pub fn sriov_manage_enable(fs: &Arc<dyn Sysfs>, pf: &str) {
    let total = read(fs, &dev(pf, "sriov_totalvfs"));
    pf_to_stub(fs, pf);
    write(fs, &dev(pf, "sriov_numvfs"), &total);
    pf_to_nvidia(fs, pf);
}
