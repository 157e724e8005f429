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
