//! The NVML view: devices, MIG placement rules, compute instances, telemetry, vGPU types,
//! NVLink and Xid events.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::time::{Duration, Instant};

use common::*;
use gpu::{NvmlCode, Placement};

fn code<T: std::fmt::Debug>(r: gpu::NvmlResult<T>) -> NvmlCode {
    r.expect_err("the call should fail").code
}

fn at(start: u32, size: u32) -> Placement {
    Placement { start, size }
}

const P1G: u32 = 19;
const P1G_ME: u32 = 20;
const P2G: u32 = 14;
const P3G: u32 = 9;
const P4G: u32 = 5;
const P7G: u32 = 0;

#[test]
fn devices_in_pci_order_with_identity() {
    let h = host("dgx-a100");
    let nvml = h.nvml();
    assert_eq!(nvml.device_count().unwrap(), 8);
    assert_eq!(nvml.driver_version().unwrap(), "550.90.07");
    let infos: Vec<gpu::DeviceInfo> = (0..8).map(|i| nvml.device_info(i).unwrap()).collect();
    let addrs: Vec<String> = infos.iter().map(|i| i.pci_address.to_string()).collect();
    let mut sorted = addrs.clone();
    sorted.sort();
    assert_eq!(addrs, sorted);
    assert_eq!(addrs[0], "0000:07:00.0");
    let i = &infos[4];
    assert_eq!(
        (i.index, i.name.as_str(), i.memory_total_mib),
        (4, "NVIDIA A100-SXM4-80GB", 81920)
    );
    assert_eq!(i.numa_node, Some(ids::NumaNodeId(1)));
    assert!(
        i.uuid.starts_with("GPU-") && i.uuid.len() == 40,
        "{}",
        i.uuid
    );
    assert_eq!(
        host("dgx-a100").nvml().device_info(4).unwrap().uuid,
        i.uuid,
        "UUIDs are stable"
    );
    let uuids: std::collections::BTreeSet<_> = infos.iter().map(|i| i.uuid.clone()).collect();
    assert_eq!(uuids.len(), 8);
    assert_eq!(code(nvml.device_info(8)), NvmlCode::INVALID_ARGUMENT);
}

#[test]
fn vfs_and_other_vendors_are_not_nvml_devices_and_nvml_knows_the_node() {
    assert_eq!(host("hgx-h200").nvml().device_count().unwrap(), 8);
    let nvml = host("vdi-mixed").nvml();
    assert_eq!(
        nvml.device_count().unwrap(),
        6,
        "2 T4 + 4 A16, not the MI300X"
    );
    let a16 = (0..6)
        .map(|i| nvml.device_info(i).unwrap())
        .find(|d| d.pci_address.to_string() == "0000:84:00.0")
        .unwrap();
    assert_eq!(
        a16.numa_node,
        Some(ids::NumaNodeId(1)),
        "sysfs says -1, NVML knows better"
    );
}

#[test]
fn mig_mode_and_non_mig_gpus() {
    let nvml = host("dgx-a100").nvml();
    let mode = nvml.mig_mode(0).unwrap();
    assert!(mode.current && mode.pending);
    let t4 = host("vdi-mixed").nvml();
    assert_eq!(code(t4.mig_mode(0)), NvmlCode::NOT_SUPPORTED);
    assert_eq!(code(t4.gpu_instance_profiles(0)), NvmlCode::NOT_SUPPORTED);
    assert_eq!(
        code(t4.create_gpu_instance(0, P1G, at(0, 1))),
        NvmlCode::NOT_SUPPORTED
    );
    assert_eq!(
        code(t4.gpu_instance_remaining_capacity(0, P1G)),
        NvmlCode::NOT_SUPPORTED
    );
    // MIG-capable with the mode off: not supported either.
    let h200 = host("hgx-h200").nvml();
    assert_eq!(
        h200.mig_mode(0).unwrap(),
        gpu::MigMode {
            current: false,
            pending: false
        }
    );
    assert_eq!(code(h200.gpu_instances(0)), NvmlCode::NOT_SUPPORTED);
}

#[test]
fn profiles_and_placements() {
    let nvml = host("dgx-a100").nvml();
    let profiles = nvml.gpu_instance_profiles(0).unwrap();
    let by_name = |n: &str| {
        profiles
            .iter()
            .find(|p| p.name.to_string() == n)
            .unwrap()
            .clone()
    };
    let one = by_name("1g.10gb");
    assert_eq!(
        (
            one.id,
            one.profile_index,
            one.slice_count,
            one.instance_count
        ),
        (P1G, 0, 1, 7)
    );
    assert_eq!(by_name("1g.10gb+me").profile_index, 7);
    assert_eq!(by_name("1g.20gb").profile_index, 9);
    assert_eq!(by_name("7g.80gb").id, P7G);
    let starts = |id| nvml.gpu_instance_possible_placements(0, id).unwrap();
    assert_eq!(starts(P1G), (0..7).map(|s| at(s, 1)).collect::<Vec<_>>());
    assert_eq!(starts(P2G), vec![at(0, 2), at(2, 2), at(4, 2)]);
    assert_eq!(starts(P3G), vec![at(0, 4), at(4, 4)]);
    assert_eq!(starts(P4G), vec![at(0, 4)]);
    assert_eq!(starts(P7G), vec![at(0, 8)]);
    assert_eq!(
        code(nvml.gpu_instance_possible_placements(0, 99)),
        NvmlCode::INVALID_ARGUMENT
    );
    assert_eq!(nvml.gpu_instance_remaining_capacity(0, P1G).unwrap(), 7);
    assert_eq!(nvml.gpu_instance_remaining_capacity(0, P7G).unwrap(), 1);
}

#[test]
fn fragmentation_decides_where_a_3g_fits() {
    let nvml = host("dgx-a100").nvml();
    nvml.create_gpu_instance(0, P1G, at(0, 1)).unwrap();
    nvml.create_gpu_instance(0, P1G, at(1, 1)).unwrap();
    nvml.create_gpu_instance(0, P2G, at(2, 2)).unwrap();
    assert_eq!(
        code(nvml.create_gpu_instance(0, P3G, at(0, 4))),
        NvmlCode::INSUFFICIENT_RESOURCES
    );
    let gi = nvml.create_gpu_instance(0, P3G, at(4, 4)).unwrap();
    assert_eq!(gi.placement, at(4, 4));
    let list = nvml.gpu_instances(0).unwrap();
    assert_eq!(list.len(), 4);
    assert_eq!(nvml.gpu_instance_remaining_capacity(0, P1G).unwrap(), 0);
    assert_eq!(
        code(nvml.create_gpu_instance(0, P7G, at(0, 8))),
        NvmlCode::INSUFFICIENT_RESOURCES
    );
    // Other GPUs are untouched.
    assert_eq!(nvml.gpu_instances(1).unwrap().len(), 0);
}

#[test]
fn a_4g_and_a_3g_fill_a_gpu() {
    let nvml = host("dgx-a100").nvml();
    nvml.create_gpu_instance(2, P4G, at(0, 4)).unwrap();
    nvml.create_gpu_instance(2, P3G, at(4, 4)).unwrap();
    for p in nvml.gpu_instance_profiles(2).unwrap() {
        assert_eq!(
            nvml.gpu_instance_remaining_capacity(2, p.id).unwrap(),
            0,
            "{}",
            p.name
        );
    }
}

#[test]
fn placement_errors() {
    let nvml = host("dgx-a100").nvml();
    assert_eq!(
        code(nvml.create_gpu_instance(0, 99, at(0, 1))),
        NvmlCode::INVALID_ARGUMENT,
        "unknown profile"
    );
    assert_eq!(
        code(nvml.create_gpu_instance(0, P3G, at(2, 4))),
        NvmlCode::INVALID_ARGUMENT,
        "start not allowed"
    );
    assert_eq!(
        code(nvml.create_gpu_instance(0, P1G, at(7, 1))),
        NvmlCode::INVALID_ARGUMENT,
        "slot 7 is not a 1g start"
    );
    assert_eq!(
        code(nvml.create_gpu_instance(0, P2G, at(0, 1))),
        NvmlCode::INVALID_ARGUMENT,
        "wrong size"
    );
    nvml.create_gpu_instance(0, P1G_ME, at(3, 1)).unwrap();
    assert_eq!(
        code(nvml.create_gpu_instance(0, P1G_ME, at(5, 1))),
        NvmlCode::INSUFFICIENT_RESOURCES,
        "one +me per GPU"
    );
    assert_eq!(
        code(nvml.create_gpu_instance(0, P1G, at(3, 1))),
        NvmlCode::INSUFFICIENT_RESOURCES,
        "occupied"
    );
    assert_eq!(code(nvml.destroy_gpu_instance(0, 42)), NvmlCode::NOT_FOUND);
    assert_eq!(
        nvml.gpu_instances(0).unwrap().len(),
        1,
        "failed calls change nothing"
    );
}

#[test]
fn compute_instances_and_busy_instances() {
    let h = host("dgx-a100");
    let nvml = h.nvml();
    let gi = nvml.create_gpu_instance(0, P3G, at(0, 4)).unwrap();
    let profiles = nvml.compute_instance_profiles(0, gi.id).unwrap();
    let shapes: Vec<(u32, u32, u32)> = profiles
        .iter()
        .map(|p| (p.id, p.slice_count, p.instance_count))
        .collect();
    assert_eq!(shapes, vec![(0, 1, 3), (1, 2, 1), (2, 3, 1)]);
    assert_eq!(
        code(nvml.compute_instance_profiles(0, 77)),
        NvmlCode::NOT_FOUND
    );
    let c0 = nvml.create_compute_instance(0, gi.id, 0).unwrap();
    let c1 = nvml.create_compute_instance(0, gi.id, 0).unwrap();
    let c2 = nvml.create_compute_instance(0, gi.id, 0).unwrap();
    assert_eq!((c0.id, c1.id, c2.id), (0, 1, 2));
    assert_eq!(
        code(nvml.create_compute_instance(0, gi.id, 0)),
        NvmlCode::INSUFFICIENT_RESOURCES
    );
    assert_eq!(
        code(nvml.create_compute_instance(0, gi.id, 4)),
        NvmlCode::INVALID_ARGUMENT,
        "7c does not fit a 3g"
    );
    assert_eq!(nvml.compute_instances(0, gi.id).unwrap().len(), 3);

    assert_eq!(
        code(nvml.destroy_gpu_instance(0, gi.id)),
        NvmlCode::IN_USE,
        "it has compute instances"
    );
    h.set_mig_instance_in_use(addr("0000:07:00.0"), gi.id, true)
        .unwrap();
    assert_eq!(
        code(nvml.destroy_compute_instance(0, gi.id, c0.id)),
        NvmlCode::IN_USE,
        "processes run"
    );
    h.set_mig_instance_in_use(addr("0000:07:00.0"), gi.id, false)
        .unwrap();
    for c in [c0, c1, c2] {
        nvml.destroy_compute_instance(0, gi.id, c.id).unwrap();
    }
    assert_eq!(
        code(nvml.destroy_compute_instance(0, gi.id, 0)),
        NvmlCode::NOT_FOUND
    );
    h.set_mig_instance_in_use(addr("0000:07:00.0"), gi.id, true)
        .unwrap();
    assert_eq!(
        code(nvml.destroy_gpu_instance(0, gi.id)),
        NvmlCode::IN_USE,
        "processes run on it"
    );
    h.set_mig_instance_in_use(addr("0000:07:00.0"), gi.id, false)
        .unwrap();
    nvml.destroy_gpu_instance(0, gi.id).unwrap();
    assert!(nvml.gpu_instances(0).unwrap().is_empty());
    assert!(
        h.set_mig_instance_in_use(addr("0000:07:00.0"), gi.id, true)
            .is_err(),
        "it is gone"
    );
    let one = nvml.create_gpu_instance(0, P1G, at(6, 1)).unwrap();
    assert_eq!(
        nvml.create_compute_instance(0, one.id, 0)
            .unwrap()
            .placement,
        at(0, 1)
    );
}

#[test]
fn telemetry_walks_within_bounds() {
    let h = host("dgx-a100");
    let nvml = h.nvml();
    let samples: Vec<gpu::Telemetry> = (0..60).map(|_| nvml.telemetry(3).unwrap()).collect();
    let utils: std::collections::BTreeSet<u32> = samples.iter().map(|s| s.gpu_util_pct).collect();
    assert!(utils.len() > 3, "utilisation moves: {utils:?}");
    for w in samples.windows(2) {
        assert!(w[1].energy_mj > w[0].energy_mj, "energy only grows");
        assert!(
            w[1].gpu_util_pct.abs_diff(w[0].gpu_util_pct) <= 12,
            "a walk, not noise"
        );
    }
    for s in &samples {
        assert!(s.gpu_util_pct <= 100 && s.mem_copy_util_pct <= 100);
        assert!((25..=90).contains(&s.temperature_c), "{s:?}");
        assert!(s.power_mw >= 50_000 && s.power_mw <= 400_000, "{s:?}");
        assert_eq!(s.fb_used_mib + s.fb_free_mib, 81920);
        assert!(s.sm_clock_mhz <= 1410 && s.sm_clock_mhz > 0);
    }
    let before = nvml.telemetry(3).unwrap().fb_used_mib;
    let gpu3 = 3;
    nvml.create_gpu_instance(gpu3, P3G, at(0, 4)).unwrap();
    let after = nvml.telemetry(3).unwrap().fb_used_mib;
    assert_eq!(after - before, 40192, "a 3g.40gb instance uses its memory");
    // The same seed walks the same way.
    let again: Vec<u32> = {
        let n = host("dgx-a100").nvml();
        (0..60)
            .map(|_| n.telemetry(3).unwrap().gpu_util_pct)
            .collect()
    };
    assert_eq!(
        again,
        samples.iter().map(|s| s.gpu_util_pct).collect::<Vec<_>>()
    );
}

#[test]
fn vgpu_types_from_the_profile() {
    let h200 = host("hgx-h200").nvml();
    let types = h200.supported_vgpu_types(0).unwrap();
    assert_eq!(types.len(), 10);
    let t = types.iter().find(|t| t.id.get() == 1414).unwrap();
    assert_eq!(
        (t.name.as_str(), t.class.as_str(), t.max_instances),
        ("NVIDIA H200X-1-18C", "Compute", 7)
    );
    let t4 = host("vdi-mixed").nvml();
    let types = t4.supported_vgpu_types(0).unwrap();
    let q1 = types.iter().find(|t| t.name == "GRID T4-1Q").unwrap();
    assert_eq!(
        (
            q1.id.get(),
            q1.class.as_str(),
            q1.framebuffer_mib,
            q1.max_instances
        ),
        (230, "Quadro", 1024, 16)
    );
    assert!(
        host("dgx-a100")
            .nvml()
            .supported_vgpu_types(0)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn nvswitch_connects_every_gpu_and_hot_unplug_drops_a_peer() {
    let h = host("dgx-a100");
    let nvml = h.nvml();
    let peers = nvml.nvlink_peers(0).unwrap();
    assert_eq!(peers.len(), 7);
    assert!(!peers.contains(&addr("0000:07:00.0")));
    h.remove_gpu(addr("0000:bd:00.0")).unwrap();
    assert_eq!(nvml.device_count().unwrap(), 7);
    assert_eq!(nvml.nvlink_peers(0).unwrap().len(), 6);
    assert!(host("vdi-mixed").nvml().nvlink_peers(0).unwrap().is_empty());
}

#[test]
fn xid_events_are_delivered_once_then_the_wait_times_out() {
    let h = host("dgx-a100");
    let nvml = h.nvml();
    h.inject_xid(addr("0000:47:00.0"), 79).unwrap();
    h.inject_xid(addr("0000:07:00.0"), 48).unwrap();
    let uuid = nvml.device_info(2).unwrap().uuid;
    let first = nvml.wait_xid_event(1000).unwrap().unwrap();
    assert_eq!((first.gpu_uuid.as_str(), first.xid), (uuid.as_str(), 79));
    assert_eq!(nvml.wait_xid_event(1000).unwrap().unwrap().xid, 48);
    let start = Instant::now();
    assert_eq!(nvml.wait_xid_event(60).unwrap(), None);
    assert!(start.elapsed() >= Duration::from_millis(60));
    assert!(
        h.inject_xid(addr("0000:01:00.0"), 13).is_err(),
        "not a GPU of the profile"
    );
    // A waiter sees an Xid injected while it waits.
    let waiter = {
        let nvml = nvml.clone();
        std::thread::spawn(move || nvml.wait_xid_event(2000))
    };
    std::thread::sleep(Duration::from_millis(50));
    h.inject_xid(addr("0000:90:00.0"), 31).unwrap();
    assert_eq!(waiter.join().unwrap().unwrap().unwrap().xid, 31);
}

#[test]
fn hgx_h200_links_end_at_nvswitches_and_the_fabric_makes_peers() {
    // HGX H200: every NVLink ends at an NVSwitch and each GPU is registered on the baseboard's
    // fabric (nvmlDeviceGetGpuFabricInfo), so all 8 GPUs are peers of each other.
    let h = host("hgx-h200");
    let nvml = h.nvml();
    for i in 0..8 {
        let own = nvml.device_info(i).unwrap().pci_address;
        let peers = nvml.nvlink_peers(i).unwrap();
        assert_eq!(peers.len(), 7, "{own}: {peers:?}");
        assert!(!peers.contains(&own));
    }
    // The fabric query is one of the calls behind the answer, and fails as NVML would.
    let gpu = nvml.device_info(3).unwrap().pci_address;
    h.inject_fault(
        format!("nvml:nvmlDeviceGetGpuFabricInfo@{gpu}=UNKNOWN")
            .parse()
            .unwrap(),
    )
    .unwrap();
    let err = nvml.nvlink_peers(3).unwrap_err();
    assert_eq!(
        (err.call, err.code),
        ("nvmlDeviceGetGpuFabricInfo", NvmlCode::UNKNOWN)
    );
}
