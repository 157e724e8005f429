//! Slices in short form for the vmpin tests.
#![allow(dead_code, clippy::unwrap_used)]

use ids::NumaNodeId;
use vmpin::{Slice, SliceDevice};

/// An mdev slice on host node `node`.
pub fn mdev(uuid: &str, node: u16) -> Slice {
    Slice {
        device: SliceDevice::Mdev {
            uuid: uuid.parse().unwrap(),
        },
        node: NumaNodeId(node),
    }
}

/// A PCI function (VF or whole GPU) handed over unmanaged, on host node `node`.
pub fn vf(addr: &str, node: u16) -> Slice {
    Slice {
        device: SliceDevice::Pci {
            address: addr.parse().unwrap(),
            managed: false,
        },
        node: NumaNodeId(node),
    }
}
