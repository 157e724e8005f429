//! The backend choice over fixture trees, with the libraries' loading chosen by the test.

use sysfs::RealSysfs;
use sysfs::fixture::Tree;

use super::*;
use crate::amd::AmdError;
use crate::amd_sysfs::tests::{PF_DIR, mi300x_host, pf};
use crate::gim_real::tests::Stub;

fn missing<T>() -> AmdResult<T> {
    Err(AmdError::new(
        "dlopen libamdsmi.so",
        AmdStatus::FAIL_LOAD_MODULE,
    ))
}

fn never<T>() -> AmdResult<T> {
    panic!("this library must not be loaded on this host")
}

fn fs_of(tree: &Tree) -> Arc<dyn Sysfs> {
    Arc::new(RealSysfs::new(tree.root()))
}

fn kind(backend: &Arc<dyn AmdSmi>) -> String {
    let debug = format!("{backend:?}");
    debug
        .split([' ', '{'])
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn gim_module_and_its_library_give_the_gim_backend() {
    let (_dir, tree) = mi300x_host();
    tree.dir(GIM_MODULE);
    let stub = Stub::build();
    let (backend, description) = choose(
        fs_of(&tree),
        || GimSmiLibrary::load_from(stub.path()),
        never,
    );
    assert_eq!(kind(&backend), "GimWithSysfs");
    assert_eq!(description, "GIM host AMD SMI (libamdsmi.so) with sysfs");
    assert_eq!(backend.num_vf(pf()).unwrap().supported, 8);
}

#[test]
fn a_pf_bound_to_gim_is_enough() {
    let (_dir, tree) = mi300x_host();
    tree.dir("/sys/bus/pci/drivers/gim");
    tree.link(
        &format!("{PF_DIR}/driver"),
        "../../../../bus/pci/drivers/gim",
    );
    let stub = Stub::build();
    let (backend, _) = choose(
        fs_of(&tree),
        || GimSmiLibrary::load_from(stub.path()),
        never,
    );
    assert_eq!(kind(&backend), "GimWithSysfs");
}

#[test]
fn gim_without_its_library_is_sysfs_naming_what_to_install() {
    let (_dir, tree) = mi300x_host();
    tree.dir(GIM_MODULE);
    let (backend, description) = choose(
        fs_of(&tree),
        || GimSmiLibrary::load_from("/nonexistent/libamdsmi.so"),
        never,
    );
    assert_eq!(kind(&backend), "AmdSysfs");
    assert!(
        description.contains("MxGPU-Virtualization smi-lib (libamdsmi.so)"),
        "{description}"
    );
    assert!(description.contains("library load failed"), "{description}");
    assert_eq!(
        backend.num_vf(pf()).unwrap_err().status,
        AmdStatus::NOT_SUPPORTED
    );
}

#[test]
fn without_gim_the_rocm_library_is_tried() {
    let (_dir, tree) = mi300x_host();
    // A PF bound to amdgpu, and another module loaded: not GIM.
    tree.dir("/sys/module/amdgpu");
    tree.dir("/sys/bus/pci/drivers/amdgpu");
    tree.link(
        &format!("{PF_DIR}/driver"),
        "../../../../bus/pci/drivers/amdgpu",
    );
    let rocm_dir = tempfile::tempdir().unwrap();
    let rocm = crate::amd_real::tests::stub_amd_smi(rocm_dir.path());
    let (backend, description) = choose(fs_of(&tree), never, || AmdSmiLibrary::load_from(&rocm));
    assert_eq!(kind(&backend), "LibraryWithSysfs");
    assert_eq!(description, "AMD SMI library with sysfs");
    let (backend, description) = choose(fs_of(&tree), never, missing);
    assert_eq!(kind(&backend), "AmdSysfs");
    assert!(description.starts_with("sysfs ("), "{description}");
    assert_eq!(backend.partition(pf()).unwrap().compute, "SPX");
}

#[test]
fn backend_without_the_library_is_sysfs() {
    if Path::new("/opt/rocm/lib/libamd_smi.so").exists() {
        return;
    }
    let (dir, _tree) = mi300x_host();
    let (backend, _) = amd_backend(Arc::new(RealSysfs::new(dir.path())));
    assert!(
        format!("{backend:?}").starts_with("AmdSysfs"),
        "{backend:?}"
    );
    assert_eq!(backend.gpus().unwrap()[0].name, "AMD Instinct MI300X");
    assert_eq!(backend.partition(pf()).unwrap().compute, "SPX");
}
