//! The scenarios. Each takes the sysfs to use, so the kernel and the simulator run the same code.

use std::path::Path;

use ids::{MdevParentName, MdevTypeId, MdevUuid, PciAddress, PciDeviceId, PciVendorId};
use sysfs::{Sysfs, SysfsExt, error_chain};

use crate::{Report, errno_name};

/// The SR-IOV device of the rig: QEMU's `igb` (Intel 82576) on NUMA node 1.
const IGB_PF: (PciVendorId, PciDeviceId) = (PciVendorId(0x8086), PciDeviceId(0x10c9));

/// Runs every scenario in order; later ones assume earlier ones left the host as they found it.
pub fn run_all(fs: &dyn Sysfs) -> Report {
    let mut r = Report::default();
    discovery(fs, &mut r);
    match find_pf(fs) {
        Some(pf) => {
            sriov(fs, pf, &mut r);
            vfio_binding(fs, pf, &mut r);
        }
        None => r.check("SR-IOV PF present", false, "no 8086:10c9 device"),
    }
    mdev_lifecycle(fs, &mut r);
    r
}

fn discovery(fs: &dyn Sysfs, r: &mut Report) {
    match numa::nodes(fs) {
        Ok((nodes, errors)) => {
            let ids: Vec<_> = nodes.iter().map(|n| n.id.to_string()).collect();
            r.check(
                "2 NUMA nodes",
                nodes.len() == 2 && errors.is_empty(),
                ids.join(","),
            );
            let all_have_cpus = nodes
                .iter()
                .all(|n| !n.cpus.is_empty() && n.memory_total_mib > 0);
            r.check(
                "every node has CPUs and memory",
                all_have_cpus,
                format!("{nodes:?}"),
            );
            for n in &nodes {
                r.observe(&format!("numa.node{}.cpus", n.id), &n.cpus);
                r.observe(
                    &format!("numa.node{}.distances", n.id),
                    format!("{:?}", n.distances),
                );
            }
        }
        Err(e) => r.check("2 NUMA nodes", false, error_chain(&e)),
    }
    let devices = match vfio::list_devices(fs) {
        Ok((list, _)) => list,
        Err(e) => return r.check("PCI devices listed", false, error_chain(&e)),
    };
    let mut grouped = 0;
    for addr in &devices {
        let Ok(dev) = vfio::read_device(fs, *addr) else {
            continue;
        };
        let in_group = dev.iommu_group.is_some_and(|g| {
            vfio::iommu_group(fs, g).is_ok_and(|group| group.devices.contains(addr))
        });
        grouped += usize::from(in_group);
    }
    r.check(
        "every PCI device is in the IOMMU group it links to",
        grouped == devices.len() && !devices.is_empty(),
        format!("{grouped} of {} devices", devices.len()),
    );
    mdev_parents(fs, r);
}

fn mdev_parents(fs: &dyn Sysfs, r: &mut Report) {
    let names = match mdev::list_parents(fs) {
        Ok((names, _)) => names,
        Err(e) => return r.check("mdev parents listed", false, error_chain(&e)),
    };
    let shown: Vec<_> = names.iter().map(|n| n.as_str()).collect();
    let has = |n: &str| shown.contains(&n);
    r.check(
        "mdev parents mtty and mdpy (not PCI addresses)",
        has("mtty") && has("mdpy"),
        shown.join(","),
    );
    r.observe("mdev.parents", shown.join(","));
    for name in ["mtty", "mdpy"] {
        let Ok(parent) = name.parse::<MdevParentName>() else {
            continue;
        };
        match mdev::read_parent(fs, &parent) {
            Ok(p) => {
                let types: Vec<_> = p
                    .types
                    .iter()
                    .map(|t| {
                        format!(
                            "{}[{}, {}, {}]",
                            t.id,
                            t.name.as_deref().unwrap_or("-"),
                            t.device_api.as_deref().unwrap_or("-"),
                            t.available_instances
                                .map(|a| a.to_string())
                                .unwrap_or_default()
                        )
                    })
                    .collect();
                r.check(
                    &format!("{name} types readable"),
                    !p.types.is_empty() && p.pci_address.is_none(),
                    types.join(" "),
                );
                r.observe(&format!("mdev.{name}.types"), types.join(" "));
            }
            Err(e) => r.check(&format!("{name} types readable"), false, error_chain(&e)),
        }
    }
}

/// The rig's SR-IOV physical function (QEMU's igb), if present.
pub fn find_pf(fs: &dyn Sysfs) -> Option<PciAddress> {
    let (devices, _) = vfio::list_devices(fs).ok()?;
    devices.into_iter().find(|a| {
        vfio::read_device(fs, *a).is_ok_and(|d| (d.vendor, d.device) == IGB_PF && d.sriov.is_some())
    })
}

fn vf_list(fs: &dyn Sysfs, pf: PciAddress) -> Vec<vfio::PciDevice> {
    let Ok(dev) = vfio::read_device(fs, pf) else {
        return Vec::new();
    };
    let vfs = dev.sriov.map(|s| s.vfs).unwrap_or_default();
    vfs.into_iter()
        .filter_map(|vf| vfio::read_device(fs, vf).ok())
        .collect()
}

fn sriov(fs: &dyn Sysfs, pf: PciAddress, r: &mut Report) {
    let Ok(dev) = vfio::read_device(fs, pf) else {
        return r.check("PF readable", false, "");
    };
    let total = dev.sriov.as_ref().map(|s| s.total_vfs).unwrap_or(0);
    r.check(
        "PF on NUMA node 1",
        dev.numa_node.map(|n| n.0) == Some(1),
        format!("{:?}", dev.numa_node),
    );
    r.observe(
        "sriov.pf.numa_node",
        format!("{:?}", dev.numa_node.map(|n| n.0)),
    );
    r.observe("sriov.pf.total_vfs", total);
    r.observe("sriov.pf.driver", dev.driver.as_deref().unwrap_or("-"));

    let enabled = vfio::set_num_vfs(fs, pf, 2);
    let vfs = vf_list(fs, pf);
    let groups: std::collections::BTreeSet<_> = vfs.iter().filter_map(|v| v.iommu_group).collect();
    let own_groups = groups.len() == 2
        && !groups.contains(&dev.iommu_group.unwrap_or(ids::IommuGroupId(u32::MAX)));
    let on_node1 = vfs.iter().all(|v| v.numa_node.map(|n| n.0) == Some(1));
    r.check(
        "enable 2 VFs: each its own IOMMU group, NUMA node 1",
        matches!(enabled, Ok(2)) && vfs.len() == 2 && own_groups && on_node1,
        format!("{enabled:?}, groups {groups:?}"),
    );
    r.observe("sriov.enable2.count", vfs.len());
    r.observe("sriov.enable2.own_groups", own_groups);
    r.observe(
        "sriov.vf.driver",
        vfs.first()
            .and_then(|v| v.driver.clone())
            .unwrap_or_default(),
    );
    r.observe(
        "sriov.vf.physfn_is_pf",
        vfs.iter().all(|v| v.physfn == Some(pf)),
    );

    let again = vfio::set_num_vfs(fs, pf, 2);
    r.observe("sriov.2to2", format!("{again:?}"));
    let busy = vfio::set_num_vfs(fs, pf, 3).map_err(|e| errno_name(e.errno()));
    r.check(
        "2 -> 3 VFs refused with EBUSY",
        busy == Err("EBUSY".into()),
        format!("{busy:?}"),
    );
    r.observe("sriov.2to3", format!("{busy:?}"));
    r.observe("sriov.after_2to3.count", vf_list(fs, pf).len());
    let range = vfio::set_num_vfs(fs, pf, total + 1).map_err(|e| errno_name(e.errno()));
    r.check(
        "above sriov_totalvfs refused with ERANGE",
        range == Err("ERANGE".into()),
        format!("{range:?}"),
    );
    r.observe("sriov.above_total", format!("{range:?}"));
    let garbage = fs
        .write_str(&pci_attr(pf, "sriov_numvfs"), "two")
        .map_err(|e| errno_name(e.errno()));
    r.observe("sriov.garbage_write", format!("{garbage:?}"));
}

fn pci_attr(addr: PciAddress, name: &str) -> std::path::PathBuf {
    Path::new("/sys/bus/pci/devices")
        .join(addr.to_string())
        .join(name)
}

fn vfio_binding(fs: &dyn Sysfs, pf: PciAddress, r: &mut Report) {
    let vfs = vf_list(fs, pf);
    let Some(vf) = vfs.get(1) else {
        return r.check("a VF to bind", false, "none enabled");
    };
    let (addr, group) = (vf.address, vf.iommu_group);
    let original = vf.driver.clone();
    let bound = vfio::bind_to_vfio(fs, addr);
    let node = group.is_some_and(|g| vfio::vfio_node_present(fs, g));
    r.check(
        "bind a VF to vfio-pci through driver_override: /dev/vfio/<group> appears",
        bound.is_ok() && node,
        format!("{bound:?}, node present {node}"),
    );
    r.observe(
        "vfio.bind.previous",
        format!(
            "{:?}",
            bound.as_ref().ok().map(|b| b.previous_driver.clone())
        ),
    );
    r.observe("vfio.bind.node_present", node);
    if let Some(g) = group {
        let viable = vfio::group_viability(fs, g).map(|v| v.viable);
        r.check(
            "the VF's group is viable",
            matches!(viable, Ok(true)),
            format!("{viable:?}"),
        );
        r.observe("vfio.group.viable", format!("{viable:?}"));
    }
    let again = vfio::bind_to_vfio(fs, addr).map(|b| b.already_bound);
    r.observe("vfio.bind.again", format!("{again:?}"));
    let released = vfio::release_from_vfio(fs, addr, original.as_deref());
    let driver = vfio::read_device(fs, addr).ok().and_then(|d| d.driver);
    let gone = group.is_some_and(|g| !vfio::vfio_node_present(fs, g));
    r.check(
        "release restores the original driver and /dev/vfio/<group> goes",
        released.is_ok() && driver == original && gone,
        format!("{released:?}, driver {driver:?}, node gone {gone}"),
    );
    r.observe("vfio.release.driver", format!("{driver:?}"));
    r.observe("vfio.release.node_gone", gone);
    let disabled = vfio::set_num_vfs(fs, pf, 0);
    let left = vf_list(fs, pf).len();
    r.check(
        "disable VFs: they disappear",
        matches!(disabled, Ok(0)) && left == 0,
        format!("{disabled:?}, {left} left"),
    );
    r.observe("sriov.disable.left", left);
}

fn available(fs: &dyn Sysfs, parent: &MdevParentName, ty: &MdevTypeId) -> Option<u32> {
    mdev::read_type(fs, parent, ty)
        .ok()
        .and_then(|t| t.available_instances)
}

fn mdev_lifecycle(fs: &dyn Sysfs, r: &mut Report) {
    let (Ok(parent), Ok(two), Ok(one)) = (
        "mtty".parse::<MdevParentName>(),
        "mtty-2".parse::<MdevTypeId>(),
        "mtty-1".parse::<MdevTypeId>(),
    ) else {
        return;
    };
    let before = (available(fs, &parent, &two), available(fs, &parent, &one));
    let uuid = MdevUuid::new_random();
    let created = mdev::create(fs, &parent, &two, uuid);
    let after = (available(fs, &parent, &two), available(fs, &parent, &one));
    let listed = mdev::list_devices(fs).is_ok_and(|(d, _)| d.iter().any(|m| m.uuid == uuid));
    r.check(
        "create an mdev: it appears and available_instances drops",
        created.is_ok() && listed && after.0 < before.0,
        format!("{before:?} -> {after:?}"),
    );
    r.observe("mdev.create.available_before", format!("{before:?}"));
    r.observe("mdev.create.available_after", format!("{after:?}"));
    if let Ok(dev) = &created {
        let node = dev
            .iommu_group
            .is_some_and(|g| vfio::vfio_node_present(fs, g));
        r.check(
            "the mdev has an IOMMU group with a /dev/vfio node",
            node,
            format!("{:?}", dev.iommu_group),
        );
        r.observe("mdev.create.vfio_node", node);
    }
    let dup = mdev::create(fs, &parent, &one, uuid).map_err(|e| errno_name(e.errno()));
    r.check(
        "a duplicate UUID is refused with EEXIST",
        dup.as_ref().err().map(String::as_str) == Some("EEXIST"),
        format!("{:?}", dup.as_ref().err()),
    );
    r.observe("mdev.duplicate", format!("{:?}", dup.err()));
    let bad = fs
        .write_str(&type_create_path(&parent, &two), "not-a-uuid")
        .map_err(|e| errno_name(e.errno()));
    r.observe("mdev.invalid_uuid", format!("{bad:?}"));

    let mut made = vec![uuid];
    while available(fs, &parent, &two).is_some_and(|a| a > 0) && made.len() < 64 {
        let u = MdevUuid::new_random();
        match mdev::create(fs, &parent, &two, u) {
            Ok(_) => made.push(u),
            Err(e) => {
                r.check("fill the parent", false, error_chain(&e));
                break;
            }
        }
    }
    let exhausted = fs
        .write_str(
            &type_create_path(&parent, &two),
            &MdevUuid::new_random().to_string(),
        )
        .map_err(|e| errno_name(e.errno()));
    r.check(
        "create with none left fails",
        exhausted.is_err(),
        format!("{exhausted:?} after {} devices", made.len()),
    );
    r.observe("mdev.exhausted.count", made.len());
    r.observe("mdev.exhausted", format!("{exhausted:?}"));
    r.observe(
        "mdev.exhausted.other_type",
        format!("{:?}", available(fs, &parent, &one)),
    );

    let removed = made
        .iter()
        .filter(|u| mdev::remove(fs, **u).is_ok())
        .count();
    let restored = (available(fs, &parent, &two), available(fs, &parent, &one));
    r.check(
        "remove every mdev: counts come back",
        removed == made.len() && restored == before,
        format!("{removed} removed, {restored:?}"),
    );
    r.observe("mdev.restored", format!("{restored:?}"));
    let unknown = mdev::remove(fs, MdevUuid::new_random());
    r.check(
        "removing an unknown mdev is refused",
        matches!(unknown, Err(mdev::MdevError::NotFound { .. })),
        format!("{unknown:?}"),
    );
}

fn type_create_path(parent: &MdevParentName, ty: &MdevTypeId) -> std::path::PathBuf {
    Path::new("/sys/class/mdev_bus")
        .join(parent.as_str())
        .join("mdev_supported_types")
        .join(ty.as_str())
        .join("create")
}
