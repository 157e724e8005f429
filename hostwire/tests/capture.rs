//! `capture-profile`: a captured profile, simulated, describes the same host as the original.
//!
//! Two sources: a fixture tree read through the real sysfs code (no NVML, AMD through sysfs),
//! and every built-in simulated host (NVML and AMD SMI simulated). Each capture goes through
//! TOML and `Profile::from_toml` into a new simulated host, whose inventory must equal the
//! original's in what is hardware; runtime state (VFs enabled at boot, slices) is left aside.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hostwire::capture::capture;
use hostwire::{real_access, sim_access};
use inventory::{Gpu, HostInventory, discover};
use sim::{Profile, SimHost};
use sysfs::fixture::Tree;

/// A PCI function at `dir` (an absolute `/sys/devices/...` path) with its bus and group links.
fn pci(tree: &Tree, dir: &str, ids: (&str, &str, &str), numa: i32, group: u32) {
    let bdf = dir.rsplit('/').next().unwrap();
    let (vendor, device, class) = ids;
    tree.file(&format!("{dir}/vendor"), &format!("{vendor}\n"));
    tree.file(&format!("{dir}/device"), &format!("{device}\n"));
    tree.file(&format!("{dir}/class"), &format!("{class}\n"));
    tree.file(&format!("{dir}/numa_node"), &format!("{numa}\n"));
    tree.file(&format!("{dir}/max_link_speed"), "16.0 GT/s PCIe\n");
    tree.file(&format!("{dir}/max_link_width"), "16\n");
    tree.link_to(&format!("/sys/bus/pci/devices/{bdf}"), dir);
    let group_dir = format!("/sys/kernel/iommu_groups/{group}");
    tree.link_to(&format!("{dir}/iommu_group"), &group_dir);
    tree.link_to(&format!("{group_dir}/devices/{bdf}"), dir);
}

fn driver(tree: &Tree, dir: &str, name: &str) {
    tree.link_to(
        &format!("{dir}/driver"),
        &format!("/sys/bus/pci/drivers/{name}"),
    );
}

fn sriov(tree: &Tree, dir: &str, total: u32, offset: u32, stride: u32, vf_device: &str) {
    tree.file(&format!("{dir}/sriov_totalvfs"), &format!("{total}\n"));
    tree.file(&format!("{dir}/sriov_numvfs"), "0\n");
    tree.file(&format!("{dir}/sriov_offset"), &format!("{offset}\n"));
    tree.file(&format!("{dir}/sriov_stride"), &format!("{stride}\n"));
    tree.file(&format!("{dir}/sriov_vf_device"), &format!("{vf_device}\n"));
}

fn mdev_type(tree: &Tree, parent_dir: &str, id: &str, attrs: &[(&str, &str)]) {
    let dir = format!("{parent_dir}/mdev_supported_types/{id}");
    for (name, value) in attrs {
        tree.file(&format!("{dir}/{name}"), &format!("{value}\n"));
    }
    tree.dir(&format!("{dir}/devices"));
}

const PORT0: &str = "/sys/devices/pci0000:40/0000:40:01.1";
const T4: &str = "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0";
const NIC: &str = "/sys/devices/pci0000:00/0000:00:03.0";
const PORT1: &str = "/sys/devices/pci0000:c0/0000:c0:01.1";
const MI300X: &str = "/sys/devices/pci0000:c0/0000:c0:01.1/0000:c1:00.0";
const MTTY: &str = "/sys/devices/virtual/mtty/mtty";
const MDPY: &str = "/sys/devices/virtual/mdpy/mdpy";

/// Two NUMA nodes; a T4 with mdev types behind a root port (firmware gave it no node); an igb
/// NIC with SR-IOV; an MI300X with partitions and SR-IOV; the mtty and mdpy samples.
fn fixture_host(tree: &Tree) {
    tree.file("/proc/sys/kernel/hostname", "fixture-host\n");
    tree.file("/sys/devices/system/node/online", "0-1\n");
    for (n, cpus, dist) in [(0, "0-7", "10 21"), (1, "8-15", "21 10")] {
        let dir = format!("/sys/devices/system/node/node{n}");
        tree.file(&format!("{dir}/cpulist"), &format!("{cpus}\n"));
        tree.file(&format!("{dir}/distance"), &format!("{dist}\n"));
        tree.file(
            &format!("{dir}/meminfo"),
            &format!(
                "Node {n} MemTotal:       65536000 kB\nNode {n} MemFree:        60000000 kB\n"
            ),
        );
    }
    pci(
        tree,
        "/sys/devices/pci0000:00/0000:00:00.0",
        ("0x1022", "0x1480", "0x060000"),
        0,
        0,
    );
    pci(tree, PORT0, ("0x1022", "0x1483", "0x060400"), 0, 30);
    driver(tree, PORT0, "pcieport");
    pci(tree, T4, ("0x10de", "0x1eb8", "0x030200"), -1, 31);
    tree.file(&format!("{T4}/subsystem_vendor"), "0x10de\n");
    tree.file(&format!("{T4}/subsystem_device"), "0x12a2\n");
    driver(tree, T4, "nvidia");
    tree.link_to("/sys/class/mdev_bus/0000:41:00.0", T4);
    for (id, name, fb, count) in [
        ("nvidia-230", "GRID T4-1Q", 1024, 16),
        ("nvidia-231", "GRID T4-2Q", 2048, 8),
        ("nvidia-234", "GRID T4-16Q", 16384, 1),
    ] {
        let description = format!("num_heads=4, frl_config=60, framebuffer={fb}M");
        let count = count.to_string();
        mdev_type(
            tree,
            T4,
            id,
            &[
                ("name", name),
                ("description", &description),
                ("device_api", "vfio-pci"),
                ("available_instances", &count),
            ],
        );
    }
    pci(tree, NIC, ("0x8086", "0x10c9", "0x020000"), 0, 5);
    driver(tree, NIC, "igb");
    sriov(tree, NIC, 7, 128, 2, "10ca");
    pci(tree, PORT1, ("0x1022", "0x1483", "0x060400"), 1, 40);
    driver(tree, PORT1, "pcieport");
    pci(tree, MI300X, ("0x1002", "0x74a1", "0x120000"), 1, 41);
    driver(tree, MI300X, "amdgpu");
    sriov(tree, MI300X, 8, 2, 1, "74b5");
    tree.file(&format!("{MI300X}/mem_info_vram_total"), "206141652992\n");
    tree.file(&format!("{MI300X}/current_compute_partition"), "SPX\n");
    tree.file(
        &format!("{MI300X}/available_compute_partition"),
        "SPX, DPX, QPX, CPX\n",
    );
    tree.file(&format!("{MI300X}/current_memory_partition"), "NPS1\n");
    tree.file(
        &format!("{MI300X}/available_memory_partition"),
        "NPS1, NPS4\n",
    );
    tree.link_to("/sys/class/mdev_bus/mtty", MTTY);
    mdev_type(
        tree,
        MTTY,
        "mtty-1",
        &[
            ("name", "Single port serial"),
            ("device_api", "vfio-pci"),
            ("available_instances", "24"),
        ],
    );
    mdev_type(
        tree,
        MTTY,
        "mtty-2",
        &[
            ("name", "Dual port serial"),
            ("device_api", "vfio-pci"),
            ("available_instances", "12"),
        ],
    );
    tree.link_to("/sys/class/mdev_bus/mdpy", MDPY);
    for (id, res) in [("mdpy-hd", "1920x1080"), ("mdpy-vga", "640x480")] {
        let description = format!("virtual display, {res} framebuffer");
        mdev_type(
            tree,
            MDPY,
            id,
            &[
                ("name", id),
                ("description", &description),
                ("device_api", "vfio-pci"),
                ("available_instances", "4"),
            ],
        );
    }
}

/// The capture of `access`, through TOML, as a new simulated host.
fn recaptured(access: &inventory::HostAccess) -> (SimHost, String) {
    let captured = capture(access).unwrap();
    let text = captured.to_toml().unwrap();
    let profile = Profile::from_toml(&text).unwrap_or_else(|e| {
        panic!("{}\n{text}", sysfs::error_chain(&e));
    });
    (SimHost::new(profile).unwrap(), text)
}

/// A GPU without runtime state: VFs, slices, the VF count and read problems set aside.
fn hardware(gpu: &Gpu) -> Gpu {
    let mut g = gpu.clone();
    if let Some(s) = g.sriov.as_mut() {
        s.enabled_vfs = 0;
        s.vfs.clear();
    }
    if let Some(a) = g.amd.as_mut() {
        a.vfs_enabled = None;
    }
    g.slices.clear();
    g.warnings.clear();
    g
}

/// Asserts two inventories describe the same hardware, field by field for clear failures.
fn assert_same_hardware(original: &HostInventory, copy: &HostInventory, compare_vendor_data: bool) {
    assert_eq!(copy.hostname, original.hostname);
    assert_eq!(copy.numa_nodes, original.numa_nodes);
    let physical = |inv: &HostInventory| {
        inv.pci_devices
            .iter()
            .filter(|d| d.physfn.is_none())
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(physical(copy), physical(original));
    assert_eq!(copy.other_mdev_parents, original.other_mdev_parents);
    assert_eq!(copy.gpus.len(), original.gpus.len());
    for (c, o) in copy.gpus.iter().zip(&original.gpus) {
        let what = o.pci_address;
        assert_eq!(c.pci_address, o.pci_address);
        assert_eq!(
            (c.vendor, &c.vendor_id, &c.device_id),
            (o.vendor, &o.vendor_id, &o.device_id),
            "{what}"
        );
        assert_eq!(c.model, o.model, "{what}");
        assert_eq!(
            (c.numa_node, c.numa_source),
            (o.numa_node, o.numa_source),
            "{what}"
        );
        assert_eq!(c.iommu_group, o.iommu_group, "{what}");
        assert_eq!(c.driver, o.driver, "{what}");
        assert_eq!(c.mdev_types, o.mdev_types, "{what}");
        assert_eq!(
            c.sriov.as_ref().map(|s| s.total_vfs),
            o.sriov.as_ref().map(|s| s.total_vfs),
            "{what}"
        );
        assert_eq!(hardware(c).amd, hardware(o).amd, "{what}");
        if compare_vendor_data {
            assert_eq!(hardware(c), hardware(o), "{what}");
        }
    }
}

#[test]
fn a_fixture_host_captured_and_simulated_is_the_same_host() {
    let dir = tempfile::tempdir().unwrap();
    let tree = Tree::new(dir.path());
    fixture_host(&tree);
    let access = real_access(dir.path());
    let original = discover(&access);
    assert!(original.warnings.is_empty(), "{:?}", original.warnings);
    let (sim, text) = recaptured(&access);
    let copy = discover(&sim_access(&sim));
    assert_same_hardware(&original, &copy, false);
    assert_eq!(original.gpus.len(), 2);
    assert_eq!(original.other_mdev_parents.len(), 2);

    // What the profile says, beyond what the inventory shows.
    let p = sim.profile();
    assert!(
        text.starts_with("# Simulated host profile captured"),
        "{text}"
    );
    assert!(text.contains("Hardware only"));
    let nic = p
        .devices
        .iter()
        .find(|d| d.address.to_string() == "0000:00:03.0")
        .unwrap();
    let s = nic.sriov.as_ref().unwrap();
    assert_eq!(
        (s.total_vfs, s.offset, s.stride, s.boot_vfs),
        (7, 128, 2, 0)
    );
    assert_eq!(s.vf_device.map(|d| d.to_string()).as_deref(), Some("10ca"));
    assert_eq!(s.vf_driver.as_deref(), Some("igbvf"), "guessed from igb");
    let t4 = p
        .gpus
        .iter()
        .find(|g| g.address.to_string() == "0000:41:00.0")
        .unwrap();
    assert_eq!(
        t4.parent.map(|a| a.to_string()).as_deref(),
        Some("0000:40:01.1")
    );
    assert_eq!(t4.numa_node, Some(-1));
    let model = &p.models[&t4.model];
    assert_eq!(
        model.memory_mib, 16384,
        "framebuffer from the 16Q type without NVML"
    );
    assert!(text.contains("mtty"), "{text}");
    let mtty = p
        .mdev_parents
        .iter()
        .find(|m| m.name.as_str() == "mtty")
        .unwrap();
    assert_eq!(mtty.capacity, sim::MdevCapacity::Pool(24));
    assert_eq!(mtty.device_path, None, "the samples' default path");
    let mdpy = p
        .mdev_parents
        .iter()
        .find(|m| m.name.as_str() == "mdpy")
        .unwrap();
    assert_eq!(mdpy.capacity, sim::MdevCapacity::Instances(4));

    // The simulated copy behaves: the NIC makes VFs at the captured offset and stride.
    let fs = sim.sysfs();
    vfio::set_num_vfs(fs.as_ref(), "0000:00:03.0".parse().unwrap(), 2).unwrap();
    let vf = vfio::read_device(fs.as_ref(), "0000:00:13.2".parse().unwrap()).unwrap();
    assert_eq!(vf.driver.as_deref(), Some("igbvf"));
}

#[test]
fn every_builtin_simulated_host_and_the_rig_guest_captured_are_the_same_host() {
    let rig_guest = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/rig/rig-guest.toml");
    let mut profiles: Vec<(&str, Profile)> = Profile::builtin_names()
        .iter()
        .map(|n| (*n, Profile::builtin(n).unwrap()))
        .collect();
    profiles.push((
        "rig-guest",
        Profile::load(std::path::Path::new(rig_guest)).unwrap(),
    ));
    for (name, profile) in profiles {
        let original_host = SimHost::new(profile).unwrap();
        let access = sim_access(&original_host);
        let original = discover(&access);
        let (copy_host, text) = recaptured(&access);
        // Enable the VFs the original booted with: they must come out the same (addresses,
        // groups, drivers, creatable vGPU types).
        let copy_fs = copy_host.sysfs();
        for g in &original.gpus {
            if let Some(s) = g.sriov.as_ref().filter(|s| s.enabled_vfs > 0) {
                let fs = copy_fs.as_ref();
                let dev = vfio::read_device(fs, g.pci_address).unwrap();
                if dev.vendor == ids::PciVendorId::NVIDIA {
                    // nvidia has no sriov_configure: NVIDIA's own sequence enables them all.
                    let runner = vfio::SystemRunner::default();
                    vfio::set_nvidia_vfs(fs, &runner, g.pci_address, true).unwrap();
                } else if dev.vendor == ids::PciVendorId::AMD {
                    // GIM has none either: its host AMD SMI makes them.
                    copy_host
                        .amd()
                        .set_num_vf(g.pci_address, s.enabled_vfs)
                        .unwrap();
                } else {
                    vfio::set_num_vfs(fs, g.pci_address, s.enabled_vfs).unwrap();
                }
            }
        }
        let copy = discover(&sim_access(&copy_host));
        for (c, o) in copy.gpus.iter().zip(&original.gpus) {
            assert_eq!(c.sriov, o.sriov, "{name} {}", o.pci_address);
        }
        assert_eq!(copy.pci_devices, original.pci_devices, "{name}");
        // The same warnings, if any (a host without NVIDIA GPUs has no NVML driver).
        assert_eq!(copy.warnings, original.warnings, "{name}\n{text}");
        assert_same_hardware(&original, &copy, true);
    }
}

#[test]
fn capture_leaves_runtime_state_out() {
    let host = SimHost::new(Profile::builtin("vdi-mixed").unwrap()).unwrap();
    let fs = host.sysfs();
    let t4: ids::MdevParentName = "0000:41:00.0".parse().unwrap();
    let q1: ids::MdevTypeId = "nvidia-230".parse().unwrap();
    mdev::create(fs.as_ref(), &t4, &q1, ids::MdevUuid::new_random()).unwrap();
    let captured = capture(&sim_access(&host)).unwrap();
    let copy = SimHost::new(captured.profile.clone()).unwrap();
    let inv = discover(&sim_access(&copy));
    let gpu = inv
        .gpus
        .iter()
        .find(|g| g.pci_address.to_string() == "0000:41:00.0")
        .unwrap();
    assert!(gpu.slices.is_empty(), "no mdev in the copy");
    let q1_now = gpu.mdev_types.iter().find(|t| t.id == q1).unwrap();
    assert_eq!(
        q1_now.available_instances,
        Some(16),
        "the existing device counts as capacity"
    );
    let mi300x = inv
        .gpus
        .iter()
        .find(|g| g.vendor == inventory::Vendor::Amd)
        .unwrap();
    assert_eq!(
        mi300x.sriov.as_ref().map(|s| s.enabled_vfs),
        Some(0),
        "no VF at boot"
    );
    assert!(
        captured
            .profile
            .models
            .values()
            .filter_map(|m| m.sriov.as_ref())
            .all(|s| s.boot_vfs == 0)
    );
}
