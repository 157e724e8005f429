//! The uevents the kernel emits for a change of the model, recorded with sequence numbers so
//! that a watcher (vgpud's simulated event source) sees what a netlink monitor would.
//!
//! What the kernel sends and in which order (lib/kobject_uevent.c, drivers/base/core.c and
//! dd.c; Documentation/core-api/kobject.rst, "Uevents"): `device_add` emits `add` before the
//! driver probe, which emits `bind` with `DRIVER` set (kernel 4.14+, commit 1455cf8dbfd0);
//! `device_del` releases the driver first (`unbind`, `DRIVER` already cleared), then emits
//! `remove`; a PCI function's removal removes its children first (its mdevs when the parent
//! driver unregisters, its VFs when the PF driver disables SR-IOV). Every uevent carries
//! `ACTION`, `DEVPATH` (the sysfs path without `/sys`), `SUBSYSTEM` and `SEQNUM`; PCI adds
//! `PCI_SLOT_NAME` (drivers/pci/pci-driver.c, `pci_uevent`), mdev adds `MDEV_TYPE`
//! (drivers/vfio/mdev/mdev_driver.c, `mdev_uevent`).
//!
//! Unlike the kernel, whose `uevent_seqnum` starts again at boot, the log's numbers keep rising
//! across a simulated reboot: a watcher of the shared state then never mistakes a new event for
//! one it has seen.

use std::collections::{BTreeMap, VecDeque};

use ids::{MdevUuid, PciAddress};
use serde::{Deserialize, Serialize};

use crate::state::{Hw, MdevState, State};
use crate::tree;

/// How many recent uevents the log keeps (a watcher that falls further behind misses some,
/// as a netlink socket whose buffer overflowed).
const KEEP: usize = 1024;

/// One uevent: its sequence number and its properties (`SEQNUM` among them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Uevent {
    /// The sequence number.
    pub seqnum: u64,
    /// `KEY=value` properties as the kernel sends them.
    pub properties: BTreeMap<String, String>,
}

/// The recorded uevents, persisted with the state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct UeventLog {
    /// The last sequence number handed out.
    pub seqnum: u64,
    pub recent: VecDeque<Uevent>,
}

impl UeventLog {
    /// The uevents after `seqnum`, oldest first.
    pub(crate) fn since(&self, seqnum: u64) -> Vec<Uevent> {
        self.recent
            .iter()
            .filter(|u| u.seqnum > seqnum)
            .cloned()
            .collect()
    }

    fn push(&mut self, mut properties: BTreeMap<String, String>) {
        self.seqnum += 1;
        properties.insert("SEQNUM".into(), self.seqnum.to_string());
        self.recent.push_back(Uevent {
            seqnum: self.seqnum,
            properties,
        });
        while self.recent.len() > KEEP {
            self.recent.pop_front();
        }
    }
}

fn props(action: &str, devpath: &str, subsystem: &str) -> BTreeMap<String, String> {
    let devpath = devpath.strip_prefix("/sys").unwrap_or(devpath);
    [
        ("ACTION", action),
        ("DEVPATH", devpath),
        ("SUBSYSTEM", subsystem),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

fn pci(
    action: &str,
    addr: PciAddress,
    dir: &str,
    driver: Option<&str>,
) -> BTreeMap<String, String> {
    let mut p = props(action, dir, "pci");
    p.insert("PCI_SLOT_NAME".into(), addr.to_string());
    if let Some(d) = driver {
        p.insert("DRIVER".into(), d.to_owned());
    }
    p
}

fn mdev(
    action: &str,
    state: &State,
    hw: &Hw,
    uuid: MdevUuid,
    m: &MdevState,
) -> Option<BTreeMap<String, String>> {
    let dirs = tree::device_dirs(state, hw);
    let parent = tree::parent_dir(state, &dirs, &m.parent)?;
    let mut p = props(action, &format!("{parent}/{uuid}"), "mdev");
    p.insert("MDEV_TYPE".into(), m.type_id.as_str().to_owned());
    Some(p)
}

/// Appends to `after`'s log the uevents of the change from `before` to `after`.
pub(crate) fn record(before: &State, after: &mut State, hw: &Hw) {
    let events = changes(before, after, hw);
    for e in events {
        after.uevents.push(e);
    }
}

fn changes(before: &State, after: &State, hw: &Hw) -> Vec<BTreeMap<String, String>> {
    let mut out = Vec::new();
    let old_dirs = tree::device_dirs(before, hw);
    let new_dirs = tree::device_dirs(after, hw);
    // Children go first: mdevs, then VFs, then the functions they hang off.
    for (uuid, m) in &before.mdevs {
        if after.mdevs.get(uuid).is_none_or(|n| n.parent != m.parent) {
            out.extend(mdev("remove", before, hw, *uuid, m));
        }
    }
    let mut gone: Vec<_> = before
        .pci
        .iter()
        .filter(|(a, _)| !after.pci.contains_key(a))
        .collect();
    gone.sort_by_key(|(a, p)| (p.vf.is_none(), **a));
    for (addr, p) in gone {
        let Some(dir) = old_dirs.get(addr) else {
            continue;
        };
        if p.driver.is_some() {
            out.push(pci("unbind", *addr, dir, None));
        }
        out.push(pci("remove", *addr, dir, None));
    }
    for (addr, p) in &after.pci {
        let (Some(old), Some(dir)) = (before.pci.get(addr), new_dirs.get(addr)) else {
            continue;
        };
        if old.driver == p.driver {
            continue;
        }
        if old.driver.is_some() {
            out.push(pci("unbind", *addr, dir, None));
        }
        if let Some(d) = &p.driver {
            out.push(pci("bind", *addr, dir, Some(d)));
        }
    }
    let mut new: Vec<_> = after
        .pci
        .iter()
        .filter(|(a, _)| !before.pci.contains_key(a))
        .collect();
    new.sort_by_key(|(a, p)| (p.vf.is_some(), **a));
    for (addr, p) in new {
        let Some(dir) = new_dirs.get(addr) else {
            continue;
        };
        out.push(pci("add", *addr, dir, None));
        if let Some(d) = &p.driver {
            out.push(pci("bind", *addr, dir, Some(d)));
        }
    }
    for (uuid, m) in &after.mdevs {
        if before.mdevs.get(uuid).is_none_or(|o| o.parent != m.parent) {
            out.extend(mdev("add", after, hw, *uuid, m));
        }
    }
    out
}
