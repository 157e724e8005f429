//! SR-IOV on a PCI device that is not a GPU (the rig's igb NIC): the same rules as a GPU PF.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::path::Path;

use common::*;
use libc::{EBUSY, EINVAL, ENOENT, ERANGE};
use sim::{Profile, SimHost};
use sysfs::SysfsExt;

const PF: &str = "0000:81:00.0";

fn rig_guest() -> Profile {
    Profile::load(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/rig/rig-guest.toml"
    )))
    .unwrap()
}

#[test]
fn the_nic_pf_shows_its_sriov_capability_behind_the_expander_root_port() {
    let fs = SimHost::new(rig_guest()).unwrap().sysfs();
    assert_eq!(
        fs.resolve_link(Path::new(&format!("/sys/bus/pci/devices/{PF}")))
            .unwrap(),
        Path::new("/sys/devices/pci0000:80/0000:80:00.0/0000:81:00.0")
    );
    assert_eq!(read(&fs, &dev(PF, "sriov_totalvfs")), "7");
    assert_eq!(read(&fs, &dev(PF, "sriov_numvfs")), "0");
    assert_eq!(read(&fs, &dev(PF, "sriov_offset")), "128");
    assert_eq!(read(&fs, &dev(PF, "sriov_stride")), "2");
    assert_eq!(read(&fs, &dev(PF, "sriov_vf_device")), "10ca");
    assert_eq!(link_name(&fs, &dev(PF, "driver")).as_deref(), Some("igb"));
    assert_eq!(read(&fs, &dev(PF, "numa_node")), "1", "from the root port");
    assert_eq!(read(&fs, &dev("0000:00:02.0", "numa_node")), "-1");
    assert_eq!(read(&fs, &dev("0000:00:00.0", "class")), "0x060000");
    assert!(!exists(&fs, &dev("0000:00:00.0", "sriov_totalvfs")));
    assert!(link_name(&fs, &dev("0000:00:1f.2", "driver")).is_none());
    assert_eq!(
        names(&fs, "/sys/kernel/iommu_groups/3/devices"),
        ["0000:00:1f.0", "0000:00:1f.2", "0000:00:1f.3"]
    );
}

#[test]
fn vfs_follow_offset_and_stride_and_bind_to_the_vf_driver() {
    let fs = SimHost::new(rig_guest()).unwrap().sysfs();
    write(&fs, &dev(PF, "sriov_numvfs"), "2");
    assert_eq!(vfs(&fs, PF), ["0000:81:10.0", "0000:81:10.2"]);
    for (vf, group) in [("0000:81:10.0", 6), ("0000:81:10.2", 7)] {
        assert_eq!(read(&fs, &dev(vf, "device")), "0x10ca");
        assert_eq!(read(&fs, &dev(vf, "vendor")), "0x8086");
        assert_eq!(read(&fs, &dev(vf, "numa_node")), "1");
        assert_eq!(link_name(&fs, &dev(vf, "driver")).as_deref(), Some("igbvf"));
        assert_eq!(link_name(&fs, &dev(vf, "physfn")).as_deref(), Some(PF));
        assert_eq!(group_of(&fs, vf), group);
        assert!(!exists(&fs, &dev(vf, "nvidia")), "no vendor vGPU on a NIC");
    }
    assert_eq!(
        fs.resolve_link(Path::new(&dev("0000:81:10.2", "")))
            .unwrap(),
        Path::new("/sys/devices/pci0000:80/0000:80:00.0/0000:81:10.2")
    );
}

#[test]
fn the_nic_refuses_what_the_kernel_refuses() {
    let fs = SimHost::new(rig_guest()).unwrap().sysfs();
    let numvfs = dev(PF, "sriov_numvfs");
    assert_eq!(write_err(&fs, &numvfs, "8"), ERANGE);
    assert_eq!(write_err(&fs, &numvfs, "two"), EINVAL);
    write(&fs, &numvfs, "2");
    write(&fs, &numvfs, "2"); // the same count is a no-op
    assert_eq!(write_err(&fs, &numvfs, "3"), EBUSY);
    assert_eq!(vfs(&fs, PF).len(), 2);
    write(&fs, &numvfs, "0");
    assert!(vfs(&fs, PF).is_empty());
    // Without its PF driver nobody configures SR-IOV.
    write(&fs, &dev(PF, "driver/unbind"), PF);
    assert_eq!(write_err(&fs, &numvfs, "1"), ENOENT);
}

#[test]
fn a_nic_vf_binds_to_vfio_pci_and_back() {
    let fs = SimHost::new(rig_guest()).unwrap().sysfs();
    write(&fs, &dev(PF, "sriov_numvfs"), "2");
    let vf = "0000:81:10.2";
    write(&fs, &dev(vf, "driver_override"), "vfio-pci");
    write(&fs, &dev(vf, "driver/unbind"), vf);
    write(&fs, "/sys/bus/pci/drivers_probe", vf);
    assert_eq!(
        link_name(&fs, &dev(vf, "driver")).as_deref(),
        Some("vfio-pci")
    );
    assert!(exists(&fs, "/dev/vfio/7"));
    write(&fs, &dev(vf, "driver_override"), "\n");
    write(&fs, &dev(vf, "driver/unbind"), vf);
    write(&fs, "/sys/bus/pci/drivers_probe", vf);
    assert_eq!(link_name(&fs, &dev(vf, "driver")).as_deref(), Some("igbvf"));
    assert!(!exists(&fs, "/dev/vfio/7"));
}

#[test]
fn boot_vfs_on_a_nic_come_back_after_a_reboot() {
    let text = rig_guest()
        .to_toml()
        .unwrap()
        .replace("boot_vfs = 0", "boot_vfs = 3");
    let h = SimHost::new(Profile::from_toml(&text).unwrap()).unwrap();
    let fs = h.sysfs();
    assert_eq!(vfs(&fs, PF).len(), 3);
    write(&fs, &dev(PF, "sriov_numvfs"), "0");
    h.reboot().unwrap();
    assert_eq!(
        vfs(&fs, PF),
        ["0000:81:10.0", "0000:81:10.2", "0000:81:10.4"]
    );
}

#[test]
fn impossible_device_sriov_is_refused() {
    let base = rig_guest().to_toml().unwrap();
    let cases = [
        (base.replace("stride = 2", "stride = 0"), "stride above 0"),
        (
            base.replace("vf_driver = \"igbvf\"", "vf_driver = \"../igbvf\""),
            "not a plain name",
        ),
        (
            base.replace("boot_vfs = 0", "boot_vfs = 8"),
            "boot_vfs <= total_vfs",
        ),
        // VF 2 of the NIC (0000:81:10.4) collides with a device placed there.
        (
            format!(
                "{base}\n[[devices]]\naddress = \"0000:81:10.4\"\nvendor = \"8086\"\ndevice = \"1234\"\nclass = \"0x020000\"\n"
            ),
            "0000:81:10.4 is used twice",
        ),
    ];
    for (text, why) in cases {
        let err = sysfs::error_chain(&Profile::from_toml(&text).unwrap_err());
        assert!(err.contains(why), "{why:?} not in {err}");
    }
}
