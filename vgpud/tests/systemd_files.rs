//! The shipped systemd files agree with each other: the group the API socket is given can reach
//! the socket's directory once systemd has started the unit.

use std::path::Path;

fn shipped(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../systemd")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The values of `key=` in a unit file, in order.
fn unit_values<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
        .collect()
}

fn socket_group() -> String {
    let toml = shipped("vgpud.toml");
    let line = toml
        .lines()
        .find_map(|l| l.trim().strip_prefix("socket_group = "))
        .unwrap_or_else(|| panic!("vgpud.toml sets no socket_group"));
    line.trim_matches('"').to_owned()
}

#[test]
fn the_socket_group_can_enter_the_runtime_directory() {
    let unit = shipped("vgpud.service");
    let group = socket_group();
    // RuntimeDirectory= makes systemd chown the directory to the service's user and group
    // (root:root) at each start, overriding tmpfiles (systemd.exec(5), "RuntimeDirectory=").
    assert!(
        unit_values(&unit, "RuntimeDirectory").is_empty(),
        "RuntimeDirectory= would take /run/vgpud from group {group}"
    );
    let tmpfiles = shipped("vgpud.tmpfiles");
    let entry: Vec<&str> = tmpfiles
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("/run/vgpud"))
        .unwrap_or_else(|| panic!("tmpfiles makes no /run/vgpud"))
        .split_whitespace()
        .collect();
    assert_eq!(entry[0], "d");
    assert_eq!(entry[4], group, "the directory's group is the socket's");
    let mode = u32::from_str_radix(entry[2], 8).unwrap();
    assert_eq!(mode & 0o050, 0o050, "the group may enter and list");
    assert_eq!(mode & 0o007, 0, "nobody else may");
    let sysusers = shipped("vgpud.sysusers");
    assert!(
        sysusers
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["g", group.as_str()])),
        "sysusers makes group {group}"
    );
}

#[test]
fn the_service_can_write_where_it_keeps_state_and_its_socket() {
    let unit = shipped("vgpud.service");
    assert_eq!(unit_values(&unit, "ProtectSystem"), ["strict"]);
    let writable: Vec<&str> = unit_values(&unit, "ReadWritePaths")
        .iter()
        .flat_map(|v| v.split_whitespace())
        .map(|p| p.trim_start_matches('-'))
        .collect();
    assert!(writable.contains(&"/run/vgpud"), "{writable:?}");
    let pre = unit_values(&unit, "ExecStartPre");
    assert!(
        pre.iter()
            .any(|c| c.contains("systemd-tmpfiles --create vgpud.conf")),
        "the directory is made again if it went missing: {pre:?}"
    );
}

#[test]
fn sysfs_stays_writable_where_the_agent_writes_under_protect_kernel_tunables() {
    let unit = shipped("vgpud.service");
    assert_eq!(unit_values(&unit, "ProtectKernelTunables"), ["yes"]);
    let writable: Vec<&str> = unit_values(&unit, "ReadWritePaths")
        .iter()
        .flat_map(|v| v.split_whitespace())
        .collect();
    // Device attributes (sriov_numvfs, driver_override, mdev create/remove) live under
    // /sys/devices, the PCI drivers' bind/unbind/new_id and drivers_probe under /sys/bus/pci;
    // tests/system/in-guest measured that these two reopen them. No "-": both always exist, and a
    // missing one must fail loudly rather than leave sysfs read-only.
    for path in ["/sys/devices", "/sys/bus/pci"] {
        assert!(
            writable.contains(&path),
            "{path} is not writable: {writable:?}"
        );
    }
}

#[test]
fn only_the_device_nodes_the_agent_opens_are_allowed() {
    let unit = shipped("vgpud.service");
    assert_eq!(unit_values(&unit, "DevicePolicy"), ["closed"]);
    let allowed = unit_values(&unit, "DeviceAllow");
    for node in [
        "char-vfio rw",
        "/dev/vfio/vfio rw",
        "char-nvidia-frontend rw",
    ] {
        assert!(allowed.contains(&node), "{node} missing: {allowed:?}");
    }
}
