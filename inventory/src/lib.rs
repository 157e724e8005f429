//! Host discovery: everything vgpud knows about a host, as one [`HostInventory`] value.
//!
//! Discovery reads through the host-access traits only (`sysfs::Sysfs`, `gpu::Nvml`,
//! `gpu::AmdSmi`), so the same code describes a real host, a fixture tree and the simulator. It
//! joins what the vendor libraries say about a GPU with its PCI device, IOMMU group, NUMA node,
//! SR-IOV functions and mdev types.
//!
//! A failure to read one thing never hides the rest: each problem becomes a warning (on the
//! host or on the GPU it concerns) and discovery carries on. This crate owns no state and makes
//! no changes to the host.

mod discover;
mod model;
mod refresh;
mod render;

pub use discover::{HostAccess, discover};
pub use model::*;
pub use refresh::refresh;
pub use render::render_tree;
