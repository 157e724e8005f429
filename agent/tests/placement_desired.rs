//! The tree this host should have in Placement, from simulated hosts: names, classes,
//! inventories (owned slices, on-demand capacity, reserved), traits, NUMA subtrees.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::path::Path;

use agent::config::{Config, ConfigError};
use agent::engine::Engine;
use agent::health::quarantine::{QuarantineSource, ReleaseHow};
use agent::placement::classes::is_valid_class;
use agent::placement::{
    DesiredGpu, DesiredTree, HostFacts, PlacementSettings, desired_from, desired_tree,
};
use testkit::*;

const A100: &str = "0000:07:00.0";
const T4: &str = "0000:41:00.0";

fn settings(e: &Engine, text: &str) -> PlacementSettings {
    let c = Config::parse(text, Path::new("test.toml")).unwrap();
    PlacementSettings::from_config(&c, &e.inventory().hostname)
}

fn on_demand(types: &str) -> String {
    format!("[placement]\non_demand_types = [{types}]\n")
}

/// The tree, after checking what Placement requires of every inventory.
fn tree(s: &PlacementSettings, e: &Engine) -> DesiredTree {
    let t = desired_tree(s, e);
    check_inventories(&t);
    t
}

fn check_inventories(t: &DesiredTree) {
    for g in &t.gpus {
        assert_eq!(
            g.inventories.keys().collect::<Vec<_>>(),
            g.types.keys().collect::<Vec<_>>(),
            "{g:?}"
        );
        for (class, inv) in &g.inventories {
            assert!(is_valid_class(class), "{class}");
            assert!(
                inv.total > 0 && inv.reserved <= inv.total,
                "{class}: {inv:?}"
            );
            assert_eq!(inv.max_unit, inv.total, "{class}");
            assert_eq!((inv.min_unit, inv.step_size), (1, 1), "{class}");
            assert_eq!(inv.allocation_ratio, 1.0, "{class}");
        }
        assert!(g.traits.contains("CUSTOM_VGPUD_OWNED"), "{g:?}");
    }
}

fn gpu<'a>(t: &'a DesiredTree, address: &str) -> &'a DesiredGpu {
    let a = addr(address);
    t.gpus.iter().find(|g| g.gpu == a).unwrap()
}

/// `(total, reserved)` of `class` on `address`; `None` when the class is not reported.
fn units(t: &DesiredTree, address: &str, class: &str) -> Option<(u32, u32)> {
    gpu(t, address)
        .inventories
        .get(class)
        .map(|i| (i.total, i.reserved))
}

/// The engine's own count of how many more of `slice_type` fit on `address`.
fn creatable(e: &Engine, address: &str, slice_type: &str) -> u32 {
    let a = addr(address);
    e.capacity(&e.inventory(), &e.slices())
        .into_iter()
        .find(|c| c.gpu == a)
        .unwrap()
        .types
        .into_iter()
        .find(|t| t.slice_type == slice_type)
        .map_or(0, |t| t.creatable)
}

#[test]
fn a_declared_mig_layout_is_reported_slice_for_slice() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, e) = sim_engine("dgx-a100", dir.path());
    let layout = gpu_layout(A100, &[("3g.40gb", 1), ("2g.20gb", 1), ("1g.10gb", 1)]);
    let view = e.set_layouts(vec![layout]).unwrap();
    assert_eq!(
        view.status[0].state,
        agent::engine::LayoutState::Applied,
        "{view:?}"
    );
    let s = settings(&e, &on_demand("\"1g.10gb\""));
    let t = tree(&s, &e);
    assert_eq!(t.root_name, "dgx-a100-sim");
    assert_eq!(t.gpus.len(), 8);
    let laid_out = gpu(&t, A100);
    assert_eq!(laid_out.name, "dgx-a100-sim_pci_0000_07_00_0");
    // Exactly the layout's slices: no on-demand capacity on top, though 1g.10gb is listed.
    let reported: Vec<(&str, u32, u32)> = laid_out
        .inventories
        .iter()
        .map(|(c, i)| (c.as_str(), i.total, i.reserved))
        .collect();
    assert_eq!(
        reported,
        vec![
            ("CUSTOM_MIG_1G_10GB", 1, 0),
            ("CUSTOM_MIG_2G_20GB", 1, 0),
            ("CUSTOM_MIG_3G_40GB", 1, 0),
        ]
    );
    assert_eq!(laid_out.types["CUSTOM_MIG_3G_40GB"], "3g.40gb");
    // Every other GPU reports what could be created there: seven 1g.10gb on an A100 80GB.
    for g in t.gpus.iter().filter(|g| g.gpu != addr(A100)) {
        let one = &g.inventories["CUSTOM_MIG_1G_10GB"];
        assert_eq!((one.total, one.reserved), (7, 0), "{g:?}");
        assert_eq!(g.inventories.len(), 1);
    }
    for tr in [
        "CUSTOM_VGPUD_VENDOR_NVIDIA",
        "CUSTOM_VGPUD_MODEL_NVIDIA_A100_SXM4_80GB",
        "CUSTOM_VGPUD_BACKEND_MIG",
        "CUSTOM_VGPUD_MIG_CAPABLE",
    ] {
        assert!(laid_out.traits.contains(tr), "{tr}: {:?}", laid_out.traits);
    }
    assert!(!laid_out.traits.contains("CUSTOM_VGPUD_QUARANTINED"));
    assert!(t.numa.is_empty() && laid_out.numa_node.is_none());
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
}

#[test]
fn an_on_demand_gpu_reports_what_could_be_created_and_keeps_its_total_when_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, e) = sim_engine("dgx-a100", dir.path());
    // The first listed type the GPU offers wins: an A100 offers no mdev type.
    let s = settings(&e, &on_demand("\"nvidia-222\", \"1g.10gb\", \"gpu\""));
    let t = tree(&s, &e);
    assert_eq!(creatable(&e, A100, "1g.10gb"), 7);
    assert_eq!(units(&t, A100, "CUSTOM_MIG_1G_10GB"), Some((7, 0)));
    assert_eq!(units(&t, A100, "PGPU"), None);

    // An allocation made without a Placement consumer: the slice moves from "could be
    // created" to "owned", the total stays, and Placement must not hand it out again.
    e.allocate(request("vm1", "1g.10gb", Some(A100))).unwrap();
    assert_eq!(creatable(&e, A100, "1g.10gb"), 6);
    let t = tree(&s, &e);
    assert_eq!(units(&t, A100, "CUSTOM_MIG_1G_10GB"), Some((7, 1)));

    // A slice of another type takes room: the 1g.10gb total falls to what is left, and the
    // new type is reported with its one (free) slice.
    create(&e, A100, mig_kind("3g.40gb", None)).unwrap();
    let left = creatable(&e, A100, "1g.10gb");
    assert!(left < 6, "{left}");
    let t = tree(&s, &e);
    assert_eq!(units(&t, A100, "CUSTOM_MIG_1G_10GB"), Some((1 + left, 1)));
    assert_eq!(units(&t, A100, "CUSTOM_MIG_3G_40GB"), Some((1, 0)));
    // The other GPUs did not move.
    assert_eq!(
        units(&t, "0000:0f:00.0", "CUSTOM_MIG_1G_10GB"),
        Some((7, 0))
    );
}

#[test]
fn slices_held_without_a_placement_consumer_are_reserved_with_one_they_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, e) = sim_engine("dgx-a100", dir.path());
    let s = settings(&e, &on_demand("\"1g.10gb\""));
    let first = e.allocate(request("vm1", "1g.10gb", Some(A100))).unwrap();
    e.allocate(request("vm2", "1g.10gb", Some(A100))).unwrap();
    let mut facts = HostFacts::gather(&s, &e);
    let t = desired_from(&s, &facts);
    check_inventories(&t);
    assert_eq!(units(&t, A100, "CUSTOM_MIG_1G_10GB"), Some((7, 2)));
    // The same host, with the first allocation answering a Placement consumer: Placement
    // already counts that slice in the consumer's allocation, so it is not reserved.
    let a = facts
        .allocations
        .iter_mut()
        .find(|a| a.id == first.id)
        .unwrap();
    a.placement_consumer = Some(uuid::Uuid::new_v4());
    let t = desired_from(&s, &facts);
    assert_eq!(units(&t, A100, "CUSTOM_MIG_1G_10GB"), Some((7, 1)));
    for a in &mut facts.allocations {
        a.placement_consumer = Some(uuid::Uuid::new_v4());
    }
    let t = desired_from(&s, &facts);
    assert_eq!(units(&t, A100, "CUSTOM_MIG_1G_10GB"), Some((7, 0)));
    // Released, the slice is free: visible, not reserved.
    e.release(first.id).unwrap();
    let t = tree(&s, &e);
    assert_eq!(units(&t, A100, "CUSTOM_MIG_1G_10GB"), Some((7, 1)));
}

#[test]
fn a_quarantined_gpu_reserves_everything_until_it_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, e) = sim_engine("dgx-a100", dir.path());
    let s = settings(&e, &on_demand("\"1g.10gb\""));
    create(&e, A100, mig_kind("3g.40gb", None)).unwrap();
    e.quarantine(addr(A100), "test", QuarantineSource::Operator, None)
        .unwrap();
    let t = tree(&s, &e);
    let q = gpu(&t, A100);
    assert!(!q.inventories.is_empty());
    for (class, inv) in &q.inventories {
        assert_eq!(inv.reserved, inv.total, "{class}");
    }
    assert!(q.traits.contains("CUSTOM_VGPUD_QUARANTINED"));
    let other = gpu(&t, "0000:0f:00.0");
    assert!(!other.traits.contains("CUSTOM_VGPUD_QUARANTINED"));
    assert_eq!(
        units(&t, "0000:0f:00.0", "CUSTOM_MIG_1G_10GB"),
        Some((7, 0))
    );

    e.release_gpu(addr(A100), ReleaseHow::Operator).unwrap();
    let t = tree(&s, &e);
    let q = gpu(&t, A100);
    assert!(!q.traits.contains("CUSTOM_VGPUD_QUARANTINED"));
    assert_eq!(units(&t, A100, "CUSTOM_MIG_3G_40GB"), Some((1, 0)));
}

#[test]
fn the_default_type_is_vgpu() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, e) = sim_engine("vdi-mixed", dir.path());
    let s = settings(
        &e,
        "[placement]\ndefault_type = \"nvidia-222\"\non_demand_types = [\"nvidia-222\"]\n",
    );
    let t = tree(&s, &e);
    let n = creatable(&e, T4, "nvidia-222");
    assert!(n > 1, "{n}");
    assert_eq!(units(&t, T4, "VGPU"), Some((n, 0)));
    assert_eq!(gpu(&t, T4).types["VGPU"], "nvidia-222");
    assert!(gpu(&t, T4).traits.contains("CUSTOM_VGPUD_BACKEND_MDEV"));
    e.allocate(request("vm1", "nvidia-222", Some(T4))).unwrap();
    let t = tree(&s, &e);
    assert_eq!(units(&t, T4, "VGPU"), Some((n, 1)));
    // An A16 does not offer the T4's type: nothing to report there.
    assert!(gpu(&t, "0000:84:00.0").inventories.is_empty());
}

#[test]
fn a_whole_gpu_is_pgpu() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, e) = sim_engine("dgx-a100", dir.path());
    let s = settings(&e, &on_demand("\"gpu\""));
    let t = tree(&s, &e);
    for g in &t.gpus {
        let p = &g.inventories["PGPU"];
        assert_eq!((p.total, p.reserved), (1, 0), "{g:?}");
        assert_eq!(g.types["PGPU"], "gpu");
    }
    e.allocate(request("vm1", "gpu", Some(A100))).unwrap();
    let t = tree(&s, &e);
    assert_eq!(units(&t, A100, "PGPU"), Some((1, 1)));
}

#[test]
fn numa_subtree_puts_gpus_under_their_node() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, e) = sim_engine("dgx-a100", dir.path());
    let s = settings(
        &e,
        "[placement]\nnuma_subtree = true\ncompute_node = \"cn1\"\non_demand_types = [\"1g.10gb\"]\n",
    );
    let t = tree(&s, &e);
    assert_eq!(t.root_name, "cn1");
    let names: Vec<&str> = t.numa.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, vec!["cn1_numa_0", "cn1_numa_1"]);
    for n in &t.numa {
        assert!(n.traits.contains("HW_NUMA_ROOT") && n.traits.contains("CUSTOM_VGPUD_OWNED"));
    }
    let inventory = e.inventory();
    for g in &t.gpus {
        let known = inventory
            .gpus
            .iter()
            .find(|i| i.pci_address == g.gpu)
            .unwrap()
            .numa_node
            .map(|n| u32::from(n.0));
        assert!(known.is_some());
        assert_eq!(g.numa_node, known, "{}", g.name);
        // NUMA providers carry no inventory: the GPU's stays on the GPU's provider.
        assert!(g.inventories.contains_key("CUSTOM_MIG_1G_10GB"));
    }
    assert_eq!(gpu(&t, A100).numa_node, Some(0));
    assert_eq!(gpu(&t, "0000:bd:00.0").numa_node, Some(1));
}

#[test]
fn resource_classes_override_the_naming_and_a_shared_class_is_warned() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, e) = sim_engine("dgx-a100", dir.path());
    let layout = gpu_layout(A100, &[("3g.40gb", 1), ("2g.20gb", 1), ("1g.10gb", 1)]);
    e.set_layouts(vec![layout]).unwrap();
    let s = settings(
        &e,
        "[placement]\non_demand_types = [\"1g.10gb\"]\n[placement.resource_classes]\n\
         \"1g.10gb\" = \"CUSTOM_SMALL_SLICE\"\n\"3g.40gb\" = \"CUSTOM_HALF\"\n\"2g.20gb\" = \"CUSTOM_HALF\"\n",
    );
    let t = tree(&s, &e);
    assert_eq!(
        units(&t, "0000:0f:00.0", "CUSTOM_SMALL_SLICE"),
        Some((7, 0))
    );
    assert_eq!(units(&t, "0000:0f:00.0", "CUSTOM_MIG_1G_10GB"), None);
    let g = gpu(&t, A100);
    assert_eq!(units(&t, A100, "CUSTOM_SMALL_SLICE"), Some((1, 0)));
    // Two types for one class on one GPU: the first seen is reported, the second skipped and
    // warned about; never both under one class (a consumer's class must mean one type).
    assert_eq!(units(&t, A100, "CUSTOM_HALF"), Some((1, 0)));
    assert!(["3g.40gb", "2g.20gb"].contains(&g.types["CUSTOM_HALF"].as_str()));
    assert_eq!(t.warnings.len(), 1, "{:?}", t.warnings);
    let w = &t.warnings[0];
    assert!(
        w.contains("CUSTOM_HALF") && w.contains("3g.40gb") && w.contains("2g.20gb"),
        "{w}"
    );
}

#[test]
fn provider_names_are_novas() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, e) = sim_engine("vdi-mixed", dir.path());
    let t = tree(&settings(&e, ""), &e);
    assert_eq!(t.root_name, "vdi-mixed-sim");
    assert_eq!(
        gpu(&t, "0000:84:00.0").name,
        "vdi-mixed-sim_pci_0000_84_00_0"
    );
    let t = tree(&settings(&e, "[placement]\ncompute_node = \"host1\"\n"), &e);
    assert_eq!(gpu(&t, "0000:84:00.0").name, "host1_pci_0000_84_00_0");
    assert_eq!(gpu(&t, "0000:c1:00.0").name, "host1_pci_0000_c1_00_0");
    // Without on-demand types or layouts nothing is offered, but every GPU has its provider.
    assert_eq!(t.gpus.len(), e.inventory().gpus.len());
    assert!(t.gpus.iter().all(|g| g.inventories.is_empty()));
}

#[test]
fn an_invalid_placement_section_is_refused_with_the_remedy() {
    let cases = [
        (
            "[placement.resource_classes]\n\"3g.40gb\" = \"mig-3g\"\n",
            "placement.resource_classes",
            "CUSTOM_",
        ),
        (
            "[placement]\nenabled = true\ntoken = \"admin\"\n",
            "placement.endpoint",
            "http://controller:8778",
        ),
        (
            "[placement]\nenabled = true\nendpoint = \"http://c:8778\"\n",
            "placement.token",
            "admin",
        ),
    ];
    for (text, key, remedy) in cases {
        match Config::parse(text, Path::new("vgpud.toml")) {
            Err(e @ ConfigError::Invalid { .. }) => {
                let message = e.to_string();
                assert!(
                    message.contains(key) && message.contains(remedy),
                    "{message}"
                );
            }
            other => panic!("{text}: {other:?}"),
        }
    }
    let e = Config::parse("[placement]\nendpont = \"x\"\n", Path::new("vgpud.toml")).unwrap_err();
    assert!(e.to_string().contains("endpont"), "{e}");
}

#[test]
fn a_mixed_vdi_host_reports_mdev_types_and_amd_vfs() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, e) = sim_engine("vdi-mixed", dir.path());
    let s = settings(&e, &on_demand("\"nvidia-222\", \"vf\""));
    let t = tree(&s, &e);
    let n = creatable(&e, T4, "nvidia-222");
    assert_eq!(units(&t, T4, "CUSTOM_NVIDIA_222"), Some((n, 0)));
    assert!(gpu(&t, T4).traits.contains("CUSTOM_VGPUD_MODEL_TESLA_T4"));
    let amd = gpu(&t, "0000:c1:00.0");
    let vfs = creatable(&e, "0000:c1:00.0", "vf");
    assert!(vfs > 0);
    assert_eq!(units(&t, "0000:c1:00.0", "CUSTOM_VF"), Some((vfs, 0)));
    for tr in [
        "CUSTOM_VGPUD_VENDOR_AMD",
        "CUSTOM_VGPUD_MODEL_AMD_INSTINCT_MI300X",
        "CUSTOM_VGPUD_BACKEND_SRIOV",
    ] {
        assert!(amd.traits.contains(tr), "{tr}: {:?}", amd.traits);
    }
    assert!(!amd.traits.contains("CUSTOM_VGPUD_MIG_CAPABLE"));
    // A T4 slice of another mdev type: reported under its own class, and the listed type's
    // capacity is what the engine says is left.
    create(&e, T4, mdev_kind("nvidia-223")).unwrap();
    let t = tree(&s, &e);
    assert_eq!(units(&t, T4, "CUSTOM_NVIDIA_223"), Some((1, 0)));
    let left = creatable(&e, T4, "nvidia-222");
    assert!(left < n, "{left} < {n}");
    assert_eq!(
        units(&t, T4, "CUSTOM_NVIDIA_222").map(|u| u.0),
        (left > 0).then_some(left)
    );
}

#[test]
fn a_bare_metal_mi300x_host_reports_whole_gpus_not_vfs_amdgpu_cannot_make() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, e) = sim_engine("mi300x", dir.path());
    let s = settings(&e, &on_demand("\"vf\", \"gpu\""));
    let t = tree(&s, &e);
    assert_eq!(t.gpus.len(), 8);
    for g in &t.gpus {
        assert!(g.traits.contains("CUSTOM_VGPUD_VENDOR_AMD"));
        assert!(g.traits.contains("CUSTOM_VGPUD_MODEL_AMD_INSTINCT_MI300X"));
        // amdgpu enables no VFs (only GIM does): no VF class, no SR-IOV backend.
        assert!(!g.traits.contains("CUSTOM_VGPUD_BACKEND_SRIOV"), "{g:?}");
        assert!(!g.traits.contains("CUSTOM_VGPUD_MIG_CAPABLE"));
        assert_eq!(g.types.keys().collect::<Vec<_>>(), vec!["PGPU"], "{g:?}");
        assert_eq!(g.inventories["PGPU"].total, 1);
    }
    let first = t.gpus[0].gpu.to_string();
    assert_eq!(creatable(&e, &first, "vf"), 0);
    e.allocate(request("vm1", "gpu", Some(&first))).unwrap();
    let t = tree(&s, &e);
    assert_eq!(units(&t, &first, "PGPU"), Some((1, 1)));
}

/// What Placement would still hand out for `class` on `address` while no allocation names a
/// Placement consumer: total less reserved (slices held without a consumer are reserved).
fn promised(t: &DesiredTree, address: &str, class: &str) -> u32 {
    units(t, address, class).map_or(0, |(total, reserved)| total - reserved)
}

#[test]
fn an_on_demand_vgpu_inventory_never_promises_a_slice_the_host_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, e) = sim_engine("hgx-h200", dir.path());
    let s = settings(&e, &on_demand("\"NVIDIA H200X-70C\""));
    let gpus: Vec<String> = e
        .inventory()
        .gpus
        .iter()
        .map(|g| g.pci_address.to_string())
        .collect();
    let class = "CUSTOM_NVIDIA_H200X_70C";
    for g in &gpus {
        let mut made = 0;
        loop {
            let t = tree(&s, &e);
            let before = promised(&t, g, class);
            let r = e.allocate(request(&format!("vm{made}"), "NVIDIA H200X-70C", Some(g)));
            if before == 0 {
                assert!(r.is_err(), "{g}: Placement said no, the host said yes");
                break;
            }
            r.unwrap_or_else(|err| panic!("{g}: promised {before}, refused: {err}"));
            made += 1;
        }
        assert!(made > 0, "{g}");
    }
}

/// The sync reads what vgpud holds, then discovers the host: a slice made between the two
/// reads is in neither the holdings nor, as free, the inventory, so it is promised nowhere.
/// (Read the other way round, the inventory from before the slice showed its GPU free while
/// the holdings from after counted it as held: one more than the host could make, and the
/// two-level fleet's first-candidate claims met "bound to vfio-pci already" and "cannot take
/// another vGPU".)
#[test]
fn a_slice_made_while_the_tree_is_read_is_never_promised_twice() {
    for (config, ty, class) in [
        ("\"gpu\"", "gpu", "PGPU"),
        (
            "\"NVIDIA H200X-70C\"",
            "NVIDIA H200X-70C",
            "CUSTOM_NVIDIA_H200X_70C",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (_h, e) = sim_engine("hgx-h200", dir.path());
        let s = settings(&e, &on_demand(config));
        let first = e.inventory().gpus[0].pci_address.to_string();
        let held = e.holdings();
        let made = e.allocate(request("vm1", ty, Some(&first))).unwrap();
        let facts = HostFacts::from_parts(&s, &e, held, e.inventory());
        let t = desired_from(&s, &facts);
        check_inventories(&t);
        // Placement counts the new slice in its consumer's claim; what it may still hand out
        // on this GPU must be what the host can still make.
        let promised = units(&t, &first, class).map_or(0, |(total, reserved)| total - reserved);
        assert_eq!(promised, creatable(&e, &first, ty), "{ty}: {t:?}");
        e.release(made.id).unwrap();
    }
}
