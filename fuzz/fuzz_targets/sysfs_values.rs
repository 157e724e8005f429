//! sysfs value parsers: the device crates' readers (`vfio`, `mdev`, `numa`) and the whole of
//! discovery (`inventory::discover`) over a sysfs whose every file, link and directory is the
//! fuzz input ([`vgpud_fuzz::fs::FuzzFs`]); then the typed lists a host prints.
//!
//! Checks: nothing panics and no reader writes; the NVIDIA `creatable_vgpu_types` list and a
//! kernel CPU list that parse print back (`<id> : <name>` lines, `0-3,8`) to text that parses
//! to the same value.
#![no_main]

use std::sync::Arc;

use ids::{IommuGroupId, MdevParentName, MdevUuid, NumaNodeId, PciAddress};
use libfuzzer_sys::fuzz_target;
use numa::CpuSet;
use vgpud_fuzz::fs::FuzzFs;

const ADDR: &str = "0000:41:00.0";

fn readers(fs: &FuzzFs) {
    let addr: PciAddress = ADDR.parse().expect("a PCI address");
    let _ = vfio::list_devices(fs);
    let _ = vfio::read_device(fs, addr);
    let _ = vfio::bound_driver(fs, addr);
    let _ = vfio::device_class(fs, addr);
    let _ = vfio::iommu_group(fs, IommuGroupId(7));
    let _ = vfio::group_viability(fs, IommuGroupId(7));
    let _ = vfio::current_vgpu_type(fs, addr);
    let _ = vfio::vgpu_gpu_instance(fs, addr);
    let _ = vfio::interrupted_sequence(fs, addr);
    let _ = vfio::amd_partition(fs, addr);
    let _ = mdev::list_parents(fs);
    let _ = mdev::list_devices(fs);
    let parent: MdevParentName = ADDR.parse().expect("a parent");
    let _ = mdev::read_parent(fs, &parent);
    let uuid: MdevUuid = "7f0e1f7a-1111-4b1e-9a4c-000000000001"
        .parse()
        .expect("a UUID");
    let _ = mdev::read_device(fs, uuid);
    let _ = numa::online_nodes(fs);
    let _ = numa::nodes(fs);
    let _ = numa::read_node(fs, NumaNodeId(0));
}

/// The creatable list, printed back as the driver prints it, parses to the same list.
fn creatable_round_trip(fs: &FuzzFs, text: &str) {
    let addr: PciAddress = ADDR.parse().expect("a PCI address");
    let Ok(list) = vfio::creatable_vgpu_types(fs, addr) else {
        return;
    };
    let printed: String = list
        .iter()
        .map(|t| format!("{} : {}\n", t.id, t.name))
        .collect();
    let again = vfio::creatable_vgpu_types(&FuzzFs::new(printed.as_bytes()), addr)
        .unwrap_or_else(|e| panic!("{printed:?} (from {text:?}) does not parse: {e}"));
    assert_eq!(list, again, "{text:?} printed as {printed:?}");
}

fn cpulist_round_trip(text: &str) {
    let Ok(set) = text.trim().parse::<CpuSet>() else {
        return;
    };
    let printed = set.to_string();
    let again: CpuSet = printed
        .parse()
        .unwrap_or_else(|e| panic!("{printed:?} (from {text:?}) does not parse: {e}"));
    assert_eq!(set, again, "{text:?} printed as {printed:?}");
}

fuzz_target!(|data: &[u8]| {
    let fs = FuzzFs::new(data);
    readers(&fs);
    let host = inventory::HostAccess {
        source: "fuzz".into(),
        sysfs: Arc::new(fs.clone()),
        nvml: Err("no NVML in the fuzz host".into()),
        amd: Err("no AMD SMI in the fuzz host".into()),
        hostname: Some("fuzz".into()),
        events: Arc::new(hotplug::Quiet::new("no device events in the fuzz host")),
    };
    let _ = inventory::discover(&host);
    if let Ok(text) = std::str::from_utf8(data) {
        creatable_round_trip(&FuzzFs::new(data), text);
        cpulist_round_trip(text);
    }
});
