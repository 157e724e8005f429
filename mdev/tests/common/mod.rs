//! Fixture hosts for the mdev tests: mdev parents laid out as the kernel lays them out, and a
//! [`Probe`] (from `sysfs::fixture`) around the fixture's sysfs.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use sysfs::fixture::Tree;

pub use sysfs::fixture::TempHost as Host;

pub const MTTY: &str = "/sys/devices/virtual/mtty/mtty";
pub const T4: &str = "/sys/devices/pci0000:00/0000:00:03.0/0000:3b:00.0";
pub const T4_NAME: &str = "0000:3b:00.0";
/// An mdev that exists on the T4 from the start.
pub const EXISTING: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";

/// mdev parents, types and devices on a fixture host.
pub trait MdevHost: Sized {
    /// The kernel's `mtty` sample parent (types mtty-1, mtty-2) and an NVIDIA T4 at
    /// 0000:3b:00.0 (types nvidia-222, nvidia-223) with one nvidia-222 mdev in IOMMU group 70.
    fn standard() -> Self;
    /// An mdev parent `name` at the device directory `device`, listed in the mdev bus class.
    fn parent(&self, name: &str, device: &str);
    /// A type of `parent` with its name, device API and available instances.
    fn mdev_type(&self, parent: &str, id: &str, name: &str, api: &str, available: &str);
    /// An mdev as the kernel shows it once created.
    fn mdev(&self, parent: &str, ty: &str, uuid: &str, group: Option<u32>);
}

impl MdevHost for Host {
    fn standard() -> Self {
        let host = Self::new();
        host.parent("mtty", MTTY);
        host.mdev_type(MTTY, "mtty-1", "Single port serial", "vfio-pci", "24");
        host.mdev_type(MTTY, "mtty-2", "Dual port serial", "vfio-pci", "12");
        host.parent(T4_NAME, T4);
        host.mdev_type(T4, "nvidia-222", "GRID T4-1B", "vfio-pci", "15");
        host.tree.file(
            &format!("{T4}/mdev_supported_types/nvidia-222/description"),
            "num_heads=4, frl_config=45, framebuffer=1024M, max_resolution=5120x2880, max_instance=16\n",
        );
        host.mdev_type(T4, "nvidia-223", "GRID T4-2B", "vfio-pci", "7");
        host.mdev(T4, "nvidia-222", EXISTING, Some(70));
        host
    }

    fn parent(&self, name: &str, device: &str) {
        self.tree.dir(&format!("{device}/mdev_supported_types"));
        self.link(&format!("/sys/class/mdev_bus/{name}"), device);
    }

    fn mdev_type(&self, parent: &str, id: &str, name: &str, api: &str, available: &str) {
        let dir = format!("{parent}/mdev_supported_types/{id}");
        self.tree.file(&format!("{dir}/name"), &format!("{name}\n"));
        self.tree
            .file(&format!("{dir}/device_api"), &format!("{api}\n"));
        self.tree.file(
            &format!("{dir}/available_instances"),
            &format!("{available}\n"),
        );
        self.tree.file(&format!("{dir}/create"), "");
        self.tree.dir(&format!("{dir}/devices"));
    }

    fn mdev(&self, parent: &str, ty: &str, uuid: &str, group: Option<u32>) {
        add_mdev(&self.tree, parent, ty, uuid, group);
    }
}

/// Lays out an mdev as the kernel shows it once created: its directory under the parent, the
/// type and group links, and the links to it from the type and the mdev bus.
pub fn add_mdev(tree: &Tree, parent: &str, ty: &str, uuid: &str, group: Option<u32>) {
    let dev = format!("{parent}/{uuid}");
    let type_dir = format!("{parent}/mdev_supported_types/{ty}");
    tree.file(&format!("{dev}/remove"), "");
    tree.link_to(&format!("{dev}/mdev_type"), &type_dir);
    if let Some(n) = group {
        let g = format!("/sys/kernel/iommu_groups/{n}");
        tree.dir(&format!("{g}/devices"));
        tree.link_to(&format!("{dev}/iommu_group"), &g);
        tree.link_to(&format!("{g}/devices/{uuid}"), &dev);
    }
    tree.link_to(&format!("{type_dir}/devices/{uuid}"), &dev);
    tree.link_to(&format!("/sys/bus/mdev/devices/{uuid}"), &dev);
}

pub use sysfs::fixture::Probe;
