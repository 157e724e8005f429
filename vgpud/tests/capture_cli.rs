//! `vgpud capture-profile` as a command: on this machine's real /sys (no GPU needed) and on a
//! fixture root, to standard output and to a file; the result loads as a simulator profile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use sim::{Profile, SimHost};

fn vgpud(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vgpud"))
        .args(args)
        .output()
        .expect("run vgpud")
}

fn loads(text: &str) -> Profile {
    let profile =
        Profile::from_toml(text).unwrap_or_else(|e| panic!("{}\n{text}", sysfs::error_chain(&e)));
    SimHost::new(profile.clone()).unwrap();
    profile
}

#[test]
fn capturing_this_machine_gives_a_profile_that_loads() {
    let out = vgpud(&["capture-profile"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("# Simulated host profile captured"),
        "{text}"
    );
    assert!(
        text.contains("boot_vfs"),
        "runtime state is explained in the header"
    );
    let profile = loads(&text);
    assert!(!profile.numa_nodes.is_empty());
    let pci_here = std::fs::read_dir("/sys/bus/pci/devices").map_or(0, |d| d.count());
    if pci_here > 0 {
        let captured = profile.bridges.len() + profile.gpus.len() + profile.devices.len();
        assert!(captured > 0, "{pci_here} PCI functions here, none captured");
    }
}

#[test]
fn output_goes_to_a_file_with_dash_o() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("host.toml");
    let out = vgpud(&["capture-profile", "-o", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    Profile::load(&file).unwrap();
    // The file simulates: `vgpud inventory --sim FILE` reads it.
    let inv = vgpud(&["inventory", "--sim", file.to_str().unwrap(), "--json"]);
    assert!(
        inv.status.success(),
        "{}",
        String::from_utf8_lossy(&inv.stderr)
    );
}

#[test]
fn a_root_without_numa_information_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = vgpud(&["capture-profile", "--root", dir.path().to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("NUMA"), "{stderr}");
}

#[test]
fn a_fixture_root_is_captured() {
    let dir = tempfile::tempdir().unwrap();
    let tree = sysfs::fixture::Tree::new(dir.path());
    tree.file("/proc/sys/kernel/hostname", "tiny\n");
    tree.file("/sys/devices/system/node/online", "0\n");
    let node = "/sys/devices/system/node/node0";
    tree.file(&format!("{node}/cpulist"), "0-3\n");
    tree.file(&format!("{node}/distance"), "10\n");
    tree.file(
        &format!("{node}/meminfo"),
        "Node 0 MemTotal: 8192000 kB\nNode 0 MemFree: 4096000 kB\n",
    );
    let nic = "/sys/devices/pci0000:00/0000:00:1f.6";
    // Node 3 is not online: the capture records no locality rather than an invalid node.
    for (f, v) in [
        ("vendor", "0x8086"),
        ("device", "0x15bb"),
        ("class", "0x020000"),
        ("numa_node", "3"),
    ] {
        tree.file(&format!("{nic}/{f}"), &format!("{v}\n"));
    }
    tree.link_to("/sys/bus/pci/devices/0000:00:1f.6", nic);
    let out = vgpud(&["capture-profile", "--root", dir.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let profile = loads(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(profile.hostname, "tiny");
    assert_eq!(profile.devices.len(), 1);
    assert_eq!(profile.devices[0].numa_node, Some(-1));
    assert!(Path::new(dir.path()).exists());
}
