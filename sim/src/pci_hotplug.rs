//! Logical hot-plug through sysfs: `<dev>/remove` and `/sys/bus/pci/rescan`
//! (Documentation/ABI/testing/sysfs-bus-pci): "Writing a non-zero value to this attribute will
//! hot-remove the PCI device and any of its children", and "will force a rescan of all PCI
//! buses in the system, and re-discover previously removed devices". Unlike a physical unplug
//! (`SimHost::remove_gpu`), the hardware is still there: a rescan or a reboot brings it back,
//! on its default driver (the probe), without VFs (SR-IOV starts disabled).
//!
//! The kernel parses the value with `kstrtoul` (EINVAL for anything else; 0 does nothing,
//! drivers/pci/pci-sysfs.c `remove_store`, `rescan_store`). A removal takes the function's
//! VFs (its driver disables SR-IOV), its mdevs (the parent driver unregisters) and the
//! functions behind it (a bridge's subordinate bus) with it. One difference, on purpose: while
//! a VM holds one of those devices open, the kernel's vfio-pci removal waits for the VM to let
//! go ("Relaying device request to user"); the model refuses with EBUSY instead of blocking.

use std::collections::BTreeSet;

use ids::{MdevParentName, PciAddress};
use libc::{EBUSY, EINVAL, ENODEV};

use crate::kernel::{Errno, text};
use crate::state::{Hw, PciState, State};

/// The value of a `remove` or `rescan` write: whether it asks for the action.
fn asked(data: &[u8]) -> Result<bool, Errno> {
    let s = text(data)?.trim();
    let n = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse::<u64>(),
    };
    Ok(n.map_err(|_| EINVAL)? != 0)
}

/// The present functions a removal of `addr` takes: itself, its VFs, and every hardware
/// function behind it.
fn removed_with(state: &State, hw: &Hw, addr: PciAddress) -> BTreeSet<PciAddress> {
    let below = hw
        .devices
        .get(&addr)
        .map(|d| format!("{}/", d.dir))
        .unwrap_or_default();
    let mut out: BTreeSet<PciAddress> = hw
        .devices
        .iter()
        .filter(|(a, d)| **a == addr || (!below.is_empty() && d.dir.starts_with(&below)))
        .map(|(a, _)| *a)
        .filter(|a| state.pci.contains_key(a))
        .collect();
    let vfs: Vec<PciAddress> = state
        .pci
        .iter()
        .filter(|(_, p)| p.vf.as_ref().is_some_and(|v| out.contains(&v.pf)))
        .map(|(a, _)| *a)
        .collect();
    out.extend(vfs);
    out
}

/// `<dev>/remove` of a (non-VF) function.
pub(crate) fn write_remove(
    state: &mut State,
    hw: &Hw,
    addr: PciAddress,
    data: &[u8],
) -> Result<(), Errno> {
    if !asked(data)? {
        return Ok(());
    }
    if !state.pci.contains_key(&addr) {
        return Err(ENODEV);
    }
    let gone = removed_with(state, hw, addr);
    let parents: BTreeSet<MdevParentName> = gone.iter().map(|a| MdevParentName::from(*a)).collect();
    let busy = gone
        .iter()
        .any(|a| state.pci.get(a).is_some_and(|p| p.open))
        || state
            .mdevs
            .values()
            .any(|m| m.open && parents.contains(&m.parent));
    if busy {
        return Err(EBUSY);
    }
    state.mdevs.retain(|_, m| !parents.contains(&m.parent));
    for a in &gone {
        let hardware = state.pci.get(a).is_some_and(|p| p.vf.is_none());
        state.pci.remove(a);
        if let Some(g) = state.gpus.get_mut(a) {
            g.gis.clear();
        }
        if hardware {
            state.detached.insert(*a);
        }
    }
    Ok(())
}

/// `/sys/bus/pci/rescan`: every function removed through sysfs comes back on its default driver.
pub(crate) fn write_rescan(state: &mut State, hw: &Hw, data: &[u8]) -> Result<(), Errno> {
    if !asked(data)? {
        return Ok(());
    }
    for addr in std::mem::take(&mut state.detached) {
        if let Some(dev) = hw.devices.get(&addr) {
            state.pci.insert(addr, PciState::hardware(dev));
        }
    }
    Ok(())
}
