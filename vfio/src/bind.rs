//! Moving a PCI function onto vfio-pci and back, through `driver_override`.
//!
//! The order matters: `driver_override` is set before the unbind so that nothing (udev, a
//! driver's own probe on a rescan) can re-bind the old driver in between, and the kernel's
//! answer is read back from the `driver` link at the end, because `drivers_probe` succeeds even
//! when no driver took the device.

use std::path::{Path, PathBuf};

use ids::PciAddress;
use sysfs::{Sysfs, SysfsExt};

use crate::{VFIO_PCI, VfioError, device_dir};

pub(crate) const DRIVERS_PROBE: &str = "/sys/bus/pci/drivers_probe";
/// Longer than any kernel driver name; only here to bound what becomes a path component.
const MAX_DRIVER_NAME: usize = 64;

/// What [`bind_to_vfio`] found before it bound the device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Binding {
    /// The driver the device was bound to before (`Some("vfio-pci")` when it already was).
    pub previous_driver: Option<String>,
    /// True when the device was on vfio-pci already and nothing was written: a caller that
    /// undoes its own work should then not release it.
    pub already_bound: bool,
}

/// Binds `addr` to vfio-pci: `driver_override` := `vfio-pci`, unbind from the current driver
/// (if any), `drivers_probe`, then checks the `driver` link. A device already on vfio-pci is left
/// untouched. On a failed step the device is left as that step left it; the error's path names
/// the step.
pub fn bind_to_vfio(fs: &dyn Sysfs, addr: PciAddress) -> Result<Binding, VfioError> {
    let dir = existing_device(fs, addr)?;
    let previous = fs.link_name_opt(&dir.join("driver"))?;
    if previous.as_deref() == Some(VFIO_PCI) {
        return Ok(Binding {
            previous_driver: previous,
            already_bound: true,
        });
    }
    let bdf = addr.to_string();
    fs.write_str(&dir.join("driver_override"), VFIO_PCI)?;
    if previous.is_some() {
        fs.write_str(&dir.join("driver").join("unbind"), &bdf)?;
    }
    fs.write_str(Path::new(DRIVERS_PROBE), &bdf)?;
    let now = fs.link_name_opt(&dir.join("driver"))?;
    if now.as_deref() != Some(VFIO_PCI) {
        return Err(VfioError::NotBoundToVfio {
            address: addr,
            bound: now,
        });
    }
    Ok(Binding {
        previous_driver: previous,
        already_bound: false,
    })
}

/// Hands `addr` back from vfio-pci: clears `driver_override` (writes `\n`), unbinds from
/// vfio-pci if bound, then binds `restore_driver` through `/sys/bus/pci/drivers/<name>/bind`
/// when given, else lets `drivers_probe` pick the default driver. The driver name is checked
/// before anything is written, and a device held by another driver is refused untouched.
pub fn release_from_vfio(
    fs: &dyn Sysfs,
    addr: PciAddress,
    restore_driver: Option<&str>,
) -> Result<(), VfioError> {
    let restore_bind = restore_driver.map(driver_bind_path).transpose()?;
    let dir = existing_device(fs, addr)?;
    let current = fs.link_name_opt(&dir.join("driver"))?;
    if let Some(driver) = current.as_ref().filter(|d| *d != VFIO_PCI) {
        return Err(VfioError::BoundElsewhere {
            address: addr,
            driver: driver.clone(),
        });
    }
    let bdf = addr.to_string();
    fs.write_str(&dir.join("driver_override"), "\n")?;
    if current.is_some() {
        fs.write_str(&dir.join("driver").join("unbind"), &bdf)?;
    }
    let target = restore_bind.unwrap_or_else(|| PathBuf::from(DRIVERS_PROBE));
    fs.write_str(&target, &bdf)?;
    Ok(())
}

fn existing_device(fs: &dyn Sysfs, addr: PciAddress) -> Result<PathBuf, VfioError> {
    let dir = device_dir(addr);
    if !fs.exists(&dir) {
        return Err(VfioError::DeviceNotFound(addr));
    }
    Ok(dir)
}

/// `/sys/bus/pci/drivers/<name>/bind`, for a name made only of `[A-Za-z0-9_-]`.
pub(crate) fn driver_bind_path(name: &str) -> Result<PathBuf, VfioError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_DRIVER_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid {
        let shown = name.chars().take(MAX_DRIVER_NAME).collect();
        return Err(VfioError::BadDriverName { name: shown });
    }
    Ok(Path::new("/sys/bus/pci/drivers").join(name).join("bind"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_names_are_checked() {
        let ok = driver_bind_path("nvidia").unwrap();
        assert_eq!(ok, Path::new("/sys/bus/pci/drivers/nvidia/bind"));
        assert!(driver_bind_path("snd_hda_intel").is_ok());
        assert!(driver_bind_path("vfio-pci").is_ok());
        for bad in [
            "",
            "..",
            "../../../etc",
            "a/b",
            "nvidia\n",
            "a b",
            "ñ",
            &"x".repeat(65),
        ] {
            assert!(
                matches!(driver_bind_path(bad), Err(VfioError::BadDriverName { .. })),
                "{bad:?}"
            );
        }
    }
}
