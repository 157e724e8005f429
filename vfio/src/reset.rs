//! PCI function reset through sysfs.

use ids::PciAddress;
use sysfs::Sysfs;

use crate::{VfioError, device_dir};

/// Resets one PCI function by writing `1` to its `reset` attribute ("Some devices allow an
/// individual function to be reset without affecting other functions in the same device ...
/// Writing 1 to this file will perform reset", Documentation/ABI/testing/sysfs-bus-pci). The
/// kernel's refusal (EBUSY for a device in use, EINVAL, ENOTTY where no reset method works)
/// keeps its errno.
pub fn reset_function(fs: &dyn Sysfs, addr: PciAddress) -> Result<(), VfioError> {
    let dir = device_dir(addr);
    if !fs.exists(&dir) {
        return Err(VfioError::DeviceNotFound(addr));
    }
    let path = dir.join("reset");
    if !fs.exists(&path) {
        return Err(VfioError::NoReset(addr));
    }
    fs.write(&path, b"1")?;
    Ok(())
}
