//! `vgpud inventory` end to end, as a user runs it: the binary as a subprocess, JSON parsed back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

fn vgpud(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vgpud"))
        .args(args)
        .output()
        .expect("run vgpud");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn inventory_json(args: &[&str]) -> Value {
    let mut all = vec!["inventory", "--json"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = vgpud(&all);
    assert_eq!(code, 0, "vgpud {all:?} failed: {stderr}");
    serde_json::from_str(&stdout).expect("inventory is JSON")
}

fn gpus(inv: &Value) -> &Vec<Value> {
    inv["gpus"].as_array().expect("gpus array")
}

#[test]
fn dgx_a100_has_eight_mig_gpus_on_two_nodes() {
    let inv = inventory_json(&["--sim", "dgx-a100"]);
    let nodes = inv["numa_nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    for node in nodes {
        assert!(node["cpu_count"].as_u64().unwrap() > 0);
        assert!(node["memory_mib"].as_u64().unwrap() > 0);
    }
    let gpus = gpus(&inv);
    assert_eq!(gpus.len(), 8);
    let mut per_node: BTreeMap<u64, usize> = BTreeMap::new();
    for gpu in gpus {
        *per_node
            .entry(gpu["numa_node"].as_u64().expect("numa node"))
            .or_default() += 1;
        assert!(
            gpu["pci_address"]
                .as_str()
                .unwrap()
                .parse::<ids::PciAddress>()
                .is_ok()
        );
        assert!(gpu["iommu_group"].is_u64(), "{gpu}");
        assert_eq!(gpu["model"], "NVIDIA A100-SXM4-80GB");
        let mig = &gpu["mig"];
        assert_eq!(mig["enabled"], true);
        let profiles = mig["profiles"].as_array().unwrap();
        let find = |name: &str| profiles.iter().find(|p| p["name"] == name).cloned();
        let one_g = find("1g.10gb").expect("1g.10gb profile");
        let starts: Vec<u64> = one_g["placements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["start"].as_u64().unwrap())
            .collect();
        assert_eq!(starts, vec![0, 1, 2, 3, 4, 5, 6]);
        let three_g = find("3g.40gb").expect("3g.40gb profile");
        let starts: Vec<u64> = three_g["placements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["start"].as_u64().unwrap())
            .collect();
        assert_eq!(starts, vec![0, 4]);
        assert_eq!(find("7g.80gb").unwrap()["remaining"], 1);
    }
    assert_eq!(per_node, BTreeMap::from([(0, 4), (1, 4)]));
}

#[test]
fn hgx_h200_shows_vfs_with_creatable_vgpu_types() {
    let inv = inventory_json(&["--sim", "hgx-h200"]);
    let gpus = gpus(&inv);
    assert_eq!(gpus.len(), 8);
    for gpu in gpus {
        let sriov = &gpu["sriov"];
        assert!(sriov["enabled_vfs"].as_u64().unwrap() > 0, "{gpu}");
        let vfs = sriov["vfs"].as_array().unwrap();
        assert_eq!(vfs.len() as u64, sriov["enabled_vfs"].as_u64().unwrap());
        for vf in vfs {
            assert!(vf["iommu_group"].is_u64());
            let creatable = vf["creatable_vgpu_types"].as_array().unwrap();
            assert!(!creatable.is_empty(), "{vf}");
            assert!(
                creatable
                    .iter()
                    .all(|t| t["name"].as_str().unwrap().starts_with("NVIDIA H200"))
            );
        }
    }
}

#[test]
fn vdi_mixed_shows_mdev_types_and_the_amd_gpu_with_vfs() {
    let inv = inventory_json(&["--sim", "vdi-mixed"]);
    let gpus = gpus(&inv);
    let t4 = gpus
        .iter()
        .find(|g| g["device_id"] == "1eb8")
        .expect("a T4");
    let types = t4["mdev_types"].as_array().unwrap();
    let q1 = types
        .iter()
        .find(|t| t["name"] == "GRID T4-1Q")
        .expect("GRID T4-1Q");
    assert_eq!(q1["available_instances"], 16);
    let amd = gpus
        .iter()
        .find(|g| g["vendor"] == "amd")
        .expect("an AMD GPU");
    assert!(amd["sriov"]["total_vfs"].as_u64().unwrap() > 0);
    assert!(amd["amd"]["compute_partition"].is_string());
}

#[test]
fn every_builtin_profile_renders_as_a_tree() {
    let (code, names, _) = vgpud(&["sim", "profiles"]);
    assert_eq!(code, 0);
    for name in names.lines() {
        let (code, tree, stderr) = vgpud(&["inventory", "--sim", name]);
        assert_eq!(code, 0, "{name}: {stderr}");
        assert!(tree.contains("NUMA node 0"), "{name}: {tree}");
        assert!(tree.contains("GPU "), "{name}: {tree}");
    }
}

#[test]
fn real_host_inventory_lists_numa_nodes_and_pci_devices() {
    // The CI machine has no GPU and no NVML: that is a normal host, not an error.
    let inv = inventory_json(&[]);
    assert!(!inv["numa_nodes"].as_array().unwrap().is_empty());
    assert!(!inv["pci_devices"].as_array().unwrap().is_empty());
    assert_eq!(inv["source"], "host:/");
}

#[test]
fn unknown_profile_is_a_clear_error() {
    let (code, _, stderr) = vgpud(&["inventory", "--sim", "no-such-host"]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("unknown simulated host profile"),
        "{stderr}"
    );
    assert!(stderr.contains("dgx-a100"), "{stderr}");
}

#[test]
fn sim_state_survives_restart_and_reboot_clears_runtime_devices() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("host");
    let state = state.to_str().unwrap();
    let (code, _, stderr) = vgpud(&["sim", "init", "--profile", "hgx-h200", "--state-dir", state]);
    assert_eq!(code, 0, "{stderr}");
    let before = inventory_json(&["--state-dir", state]);
    let vfs = |inv: &Value| gpus(inv)[0]["sriov"]["enabled_vfs"].as_u64().unwrap();
    assert!(vfs(&before) > 0);
    // Another process changes the host: the inventory (a new process) sees it.
    let first = gpus(&before)[0]["pci_address"].as_str().unwrap().to_owned();
    let (code, _, stderr) = vgpud(&["sim", "remove-gpu", "--state-dir", state, &first]);
    assert_eq!(code, 0, "remove-gpu failed: {stderr}");
    let after = inventory_json(&["--state-dir", state]);
    assert_eq!(gpus(&after).len(), gpus(&before).len() - 1);
    assert!(
        gpus(&after)
            .iter()
            .all(|g| g["pci_address"] != first.as_str())
    );
    let (code, _, stderr) = vgpud(&["sim", "add-gpu", "--state-dir", state, &first]);
    assert_eq!(code, 0, "add-gpu failed: {stderr}");
    assert_eq!(
        gpus(&inventory_json(&["--state-dir", state])).len(),
        gpus(&before).len()
    );

    // Faults persist across processes until a reboot clears them.
    let fault = format!("write:/sys/bus/pci/devices/{first}/sriov_numvfs=EBUSY");
    let (code, _, stderr) = vgpud(&["sim", "fault", "--state-dir", state, &fault]);
    assert_eq!(code, 0, "{stderr}");
    let (_, listed, _) = vgpud(&["sim", "faults", "--state-dir", state]);
    assert!(listed.contains("sriov_numvfs"), "{listed}");
    let (code, _, stderr) = vgpud(&["sim", "reboot", "--state-dir", state]);
    assert_eq!(code, 0, "{stderr}");
    let (_, listed, _) = vgpud(&["sim", "faults", "--state-dir", state]);
    assert_eq!(listed.trim(), "[]");
    assert_eq!(vfs(&inventory_json(&["--state-dir", state])), vfs(&before));
}

#[test]
fn bad_fault_spec_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap().to_owned() + "/h";
    assert_eq!(
        vgpud(&[
            "sim",
            "init",
            "--profile",
            "single-gpu",
            "--state-dir",
            &state
        ])
        .0,
        0
    );
    let (code, _, stderr) = vgpud(&["sim", "fault", "--state-dir", &state, "write:/sys/x=EWHAT"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("fault"), "{stderr}");
    let (_, listed, _) = vgpud(&["sim", "faults", "--state-dir", &state]);
    assert_eq!(listed.trim(), "[]");
}

#[test]
fn sim_reset_gpu_commits_a_pending_mig_mode() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("host");
    let (code, _, stderr) = vgpud(&[
        "sim",
        "init",
        "--profile",
        "hgx-h200-vgpu",
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let gpu = "0000:18:00.0";
    let h = sim::SimHost::open(&state).unwrap();
    h.nvml().set_mig_mode(0, true).unwrap();
    assert!(!h.nvml().mig_mode(0).unwrap().current, "pending a reset");
    let (code, _, stderr) = vgpud(&[
        "sim",
        "reset-gpu",
        "--state-dir",
        state.to_str().unwrap(),
        gpu,
    ]);
    assert_eq!(code, 0, "reset-gpu failed: {stderr}");
    let m = h.nvml().mig_mode(0).unwrap();
    assert!(m.current && m.pending, "{m:?}");
}
