//! uevent properties → [`DeviceEvent`]. Total: whatever the properties hold (a message from
//! another sender on the netlink group, an action a newer kernel added, a name that is not a PCI
//! address or a UUID), the answer is an event or an [`Ignored`] that says why.
//!
//! The properties used, from the kernel: `ACTION`, `DEVPATH`, `SUBSYSTEM`, `SEQNUM`
//! (lib/kobject_uevent.c, `kobject_uevent_env`), `DRIVER` (drivers/base/core.c, `dev_uevent`,
//! set while a driver is bound, so on `bind` and not on `unbind`), `PCI_SLOT_NAME`
//! (drivers/pci/pci-driver.c, `pci_uevent`). An mdev's `DEVPATH` is its parent's followed by its
//! UUID (Documentation/driver-api/vfio-mediated-device.rst: `/sys/bus/mdev/devices/<uuid>` links
//! to `<parent>/<uuid>`).

use std::collections::BTreeMap;
use std::fmt;

use ids::{MdevParentName, MdevUuid, PciAddress};

use crate::event::{Action, Device, DeviceEvent};

/// The subsystems vgpud listens to.
pub const SUBSYSTEMS: [&str; 2] = ["pci", "mdev"];

/// The kernel's limit on a uevent's size (`UEVENT_BUFFER_SIZE`, include/linux/kobject.h): a
/// longer value did not come from the kernel.
const MAX_VALUE: usize = 2048;

/// Why properties were not turned into an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ignored {
    /// A property the event needs is absent.
    Missing(&'static str),
    /// A property is longer than any the kernel sends.
    TooLong(&'static str),
    /// A subsystem vgpud does not follow.
    Subsystem(String),
    /// An action vgpud does not know.
    Action(String),
    /// The device's name is not what its subsystem uses.
    Name {
        /// The subsystem.
        subsystem: &'static str,
        /// The name found.
        name: String,
    },
}

impl fmt::Display for Ignored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ignored::Missing(key) => write!(f, "no {key} property"),
            Ignored::TooLong(key) => write!(f, "the {key} property is longer than the kernel's"),
            Ignored::Subsystem(s) => write!(f, "subsystem {s:?} is not followed"),
            Ignored::Action(a) => write!(f, "unknown action {a:?}"),
            Ignored::Name { subsystem, name } => {
                write!(f, "{name:?} is not a {subsystem} device name")
            }
        }
    }
}

fn get<'a>(props: &'a BTreeMap<String, String>, key: &'static str) -> Result<&'a str, Ignored> {
    let value = props.get(key).ok_or(Ignored::Missing(key))?;
    if value.len() > MAX_VALUE {
        return Err(Ignored::TooLong(key));
    }
    Ok(value)
}

/// Turns a uevent's properties into a device event.
pub fn parse(props: &BTreeMap<String, String>) -> Result<DeviceEvent, Ignored> {
    let subsystem = get(props, "SUBSYSTEM")?;
    let devpath = get(props, "DEVPATH")?;
    let action = action(props)?;
    let device = match subsystem {
        "pci" => Device::Pci(pci_address(props, devpath)?),
        "mdev" => mdev(devpath)?,
        other => return Err(Ignored::Subsystem(other.to_owned())),
    };
    let seqnum = get(props, "SEQNUM").ok().and_then(|s| s.parse().ok());
    Ok(DeviceEvent {
        action,
        device,
        seqnum,
    })
}

fn action(props: &BTreeMap<String, String>) -> Result<Action, Ignored> {
    Ok(match get(props, "ACTION")? {
        "add" => Action::Added,
        "remove" => Action::Removed,
        "bind" => Action::Bound {
            driver: get(props, "DRIVER")?.to_owned(),
        },
        "unbind" => Action::Unbound,
        "change" | "move" | "online" | "offline" => Action::Changed,
        other => return Err(Ignored::Action(other.to_owned())),
    })
}

/// The last component of a device path (the device's name in sysfs).
fn last(devpath: &str) -> &str {
    devpath.rsplit('/').next().unwrap_or(devpath)
}

fn pci_address(props: &BTreeMap<String, String>, devpath: &str) -> Result<PciAddress, Ignored> {
    // PCI_SLOT_NAME and the path's last component are the same name; the path is always there.
    let name = match get(props, "PCI_SLOT_NAME") {
        Err(Ignored::Missing(_)) => last(devpath),
        other => other?,
    };
    name.parse().map_err(|_| Ignored::Name {
        subsystem: "pci",
        name: name.to_owned(),
    })
}

fn mdev(devpath: &str) -> Result<Device, Ignored> {
    let mut parts = devpath.rsplit('/');
    let name = parts.next().unwrap_or(devpath);
    let uuid: MdevUuid = name.parse().map_err(|_| Ignored::Name {
        subsystem: "mdev",
        name: name.to_owned(),
    })?;
    let parent = parts.next().and_then(|p| p.parse::<MdevParentName>().ok());
    Ok(Device::Mdev { uuid, parent })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    const GPU_PATH: &str = "/devices/pci0000:40/0000:40:01.1/0000:47:00.0";

    fn pci(action: &str, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut p = props(&[
            ("ACTION", action),
            ("DEVPATH", GPU_PATH),
            ("SUBSYSTEM", "pci"),
            ("SEQNUM", "4711"),
        ]);
        p.extend(props(extra));
        p
    }

    fn gpu() -> PciAddress {
        "0000:47:00.0".parse().unwrap()
    }

    #[test]
    fn pci_remove_as_the_kernel_sends_it() {
        let e = parse(&pci("remove", &[("PCI_SLOT_NAME", "0000:47:00.0")])).unwrap();
        assert_eq!(e.action, Action::Removed);
        assert_eq!(e.device, Device::Pci(gpu()));
        assert_eq!(e.seqnum, Some(4711));
        assert_eq!(e.to_string(), "PCI device 0000:47:00.0 removed");
    }

    #[test]
    fn pci_add_without_slot_name_takes_the_path() {
        let e = parse(&pci("add", &[])).unwrap();
        assert_eq!(e.action, Action::Added);
        assert_eq!(e.device, Device::Pci(gpu()));
    }

    #[test]
    fn bind_names_the_driver_and_unbind_needs_none() {
        let e = parse(&pci("bind", &[("DRIVER", "vfio-pci")])).unwrap();
        assert_eq!(
            e.action,
            Action::Bound {
                driver: "vfio-pci".into()
            }
        );
        assert_eq!(parse(&pci("unbind", &[])).unwrap().action, Action::Unbound);
        // A bind without its driver is not what the kernel sends.
        assert_eq!(parse(&pci("bind", &[])), Err(Ignored::Missing("DRIVER")));
    }

    #[test]
    fn mdev_with_pci_and_virtual_parents() {
        let uuid = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";
        let p = props(&[
            ("ACTION", "add"),
            ("DEVPATH", &format!("{GPU_PATH}/{uuid}")),
            ("SUBSYSTEM", "mdev"),
            ("MDEV_TYPE", "nvidia-63"),
        ]);
        let e = parse(&p).unwrap();
        let Device::Mdev { uuid: u, parent } = &e.device else {
            panic!("{e:?}");
        };
        assert_eq!(u.to_string(), uuid);
        assert_eq!(parent.as_ref().and_then(|p| p.pci_address()), Some(gpu()));
        assert_eq!(e.seqnum, None);
        let p = props(&[
            ("ACTION", "remove"),
            ("DEVPATH", &format!("/devices/virtual/mtty/mtty/{uuid}")),
            ("SUBSYSTEM", "mdev"),
        ]);
        let e = parse(&p).unwrap();
        assert_eq!(e.action, Action::Removed);
        assert_eq!(e.to_string(), format!("mdev {uuid} on mtty removed"));
    }

    #[test]
    fn other_subsystems_and_unknown_actions_are_ignored() {
        let mut p = pci("add", &[]);
        p.insert("SUBSYSTEM".into(), "usb".into());
        assert_eq!(parse(&p), Err(Ignored::Subsystem("usb".into())));
        assert_eq!(
            parse(&pci("frobnicate", &[])),
            Err(Ignored::Action("frobnicate".into()))
        );
        assert_eq!(parse(&pci("change", &[])).unwrap().action, Action::Changed);
        let mut p = pci("add", &[]);
        p.remove("ACTION");
        assert_eq!(parse(&p), Err(Ignored::Missing("ACTION")));
    }

    #[test]
    fn hostile_names_are_ignored_not_trusted() {
        for name in [
            "",
            "..",
            "0000:47:00.0/../../etc",
            "zzzz:47:00.0",
            "0000:47:00.9",
        ] {
            let p = pci("add", &[("PCI_SLOT_NAME", name)]);
            assert!(
                matches!(parse(&p), Err(Ignored::Name { .. })),
                "{name:?}: {:?}",
                parse(&p)
            );
        }
        for path in ["", "/", "/devices/virtual/mtty/mtty/not-a-uuid", "////"] {
            let p = props(&[("ACTION", "add"), ("DEVPATH", path), ("SUBSYSTEM", "mdev")]);
            assert!(matches!(parse(&p), Err(Ignored::Name { .. })), "{path:?}");
        }
        let long = "a".repeat(MAX_VALUE + 1);
        let p = pci("add", &[("PCI_SLOT_NAME", &long)]);
        assert_eq!(parse(&p), Err(Ignored::TooLong("PCI_SLOT_NAME")));
        // A sequence number that is not one is dropped, the event kept.
        let p = pci("add", &[("SEQNUM", "-1")]);
        assert_eq!(parse(&p).unwrap().seqnum, None);
    }
}
