//! Discovery over the simulated hosts, including vendor libraries and sysfs that fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use inventory::{ExistingSlice, NumaSource, discover};
use testkit::{sim as host, sim_access as access};

#[test]
fn nvml_failing_everywhere_still_reports_every_gpu_from_sysfs() {
    let sim = host("dgx-a100");
    sim.inject_fault("nvml:*=UNKNOWN".parse().unwrap()).unwrap();
    let inv = discover(&access(&sim));
    assert_eq!(inv.gpus.len(), 8);
    assert!(inv.gpus.iter().all(|g| g.mig.is_none() && g.uuid.is_none()));
    assert!(
        inv.gpus
            .iter()
            .all(|g| g.numa_node.is_some() && g.iommu_group.is_some())
    );
    let all = inv.warnings.join("\n");
    assert!(all.contains("nvmlDeviceGetCount"), "{all}");
}

#[test]
fn nvml_absent_is_normal() {
    let sim = host("dgx-a100");
    let mut access = access(&sim);
    access.nvml = Err("NVML Shared Library Not Found".into());
    let inv = discover(&access);
    assert_eq!(inv.gpus.len(), 8);
    assert!(!inv.vendor_libraries.nvml.available);
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
}

#[test]
fn one_failing_call_is_reported_on_its_gpu_only() {
    let sim = host("dgx-a100");
    let fault = "nvml:nvmlDeviceGetGpuInstancePossiblePlacements_v2@0000:07:00.0=GPU_IS_LOST";
    sim.inject_fault(fault.parse().unwrap()).unwrap();
    let inv = discover(&access(&sim));
    let first = &inv.gpus[0];
    assert_eq!(first.pci_address.to_string(), "0000:07:00.0");
    assert!(
        first.warnings.iter().any(|w| w.contains("GPU is lost")),
        "{:?}",
        first.warnings
    );
    assert!(
        first
            .mig
            .as_ref()
            .unwrap()
            .profiles
            .iter()
            .all(|p| p.placements.is_empty())
    );
    let second = inv.gpus[1].mig.as_ref().unwrap();
    assert!(second.profiles.iter().all(|p| !p.placements.is_empty()));
}

#[test]
fn unreadable_sysfs_attribute_keeps_the_device() {
    let sim = host("single-gpu");
    let gpu = discover(&access(&sim)).gpus[0].pci_address;
    sim.inject_fault(
        format!("read:/sys/bus/pci/devices/{gpu}/numa_node=EIO")
            .parse()
            .unwrap(),
    )
    .unwrap();
    let inv = discover(&access(&sim));
    assert_eq!(inv.gpus.len(), 1);
    let g = &inv.gpus[0];
    // The GPU's own attribute failed; NVML or nobody gives the locality, and the problem is said.
    assert_ne!(g.numa_source, NumaSource::Device);
    assert!(
        g.warnings.iter().any(|w| w.contains("numa_node")),
        "{:?}",
        g.warnings
    );
}

#[test]
fn existing_slices_are_listed_whoever_made_them() {
    let sim = host("vdi-mixed");
    let fs = sim.sysfs();
    let inv = discover(&access(&sim));
    let t4 = inv.gpus.iter().find(|g| g.device_id == "1eb8").unwrap();
    let parent: ids::MdevParentName = t4.pci_address.into();
    let ty: ids::MdevTypeId = "nvidia-230".parse().unwrap();
    let uuid = ids::MdevUuid::new_random();
    mdev::create(fs.as_ref(), &parent, &ty, uuid).unwrap();
    let inv = discover(&access(&sim));
    let t4 = inv
        .gpus
        .iter()
        .find(|g| g.pci_address == t4.pci_address)
        .unwrap();
    let slice = t4.slices.iter().find_map(|s| match s {
        ExistingSlice::Mdev {
            uuid: u,
            type_id,
            iommu_group,
        } if *u == uuid => Some((type_id.clone(), *iommu_group)),
        _ => None,
    });
    let (type_id, group) = slice.expect("the new mdev is listed");
    assert_eq!(type_id, ty);
    assert!(group.is_some());
    // NVIDIA mdev GPUs are homogeneous: the other types have nothing left.
    let q2 = t4
        .mdev_types
        .iter()
        .find(|t| t.id.as_str() == "nvidia-231")
        .unwrap();
    assert_eq!(q2.available_instances, Some(0));
}

#[test]
fn mig_off_is_not_a_problem() {
    // hgx-h200: MIG-capable H200s with MIG mode off. NVML answers the profile queries
    // NOT_SUPPORTED while MIG is off (nvml.h, nvmlDeviceGetGpuInstanceProfileInfo); that is the
    // GPU's state, not a fault.
    let sim = host("hgx-h200");
    let inv = discover(&access(&sim));
    assert_eq!(inv.gpus.len(), 8);
    for g in &inv.gpus {
        let mig = g.mig.as_ref().expect("MIG-capable");
        assert!(!mig.enabled);
        assert!(g.warnings.is_empty(), "{}: {:?}", g.pci_address, g.warnings);
    }
}

#[test]
fn nvswitch_fabric_makes_every_gpu_a_peer() {
    // HGX H200: every NVLink ends at an NVSwitch, so no link names a GPU; all GPUs registered on
    // the same fabric are peers (NVML: nvmlDeviceGetNvLinkRemoteDeviceType = SWITCH,
    // nvmlDeviceGetGpuFabricInfo gives the fabric).
    let sim = host("hgx-h200");
    let inv = discover(&access(&sim));
    assert_eq!(inv.gpus.len(), 8);
    for g in &inv.gpus {
        let mut want: Vec<_> = inv
            .gpus
            .iter()
            .map(|o| o.pci_address)
            .filter(|a| *a != g.pci_address)
            .collect();
        want.sort();
        assert_eq!(g.nvlink_peers, want, "{}", g.pci_address);
    }
}
