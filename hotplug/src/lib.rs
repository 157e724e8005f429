//! Device events from the kernel, for vgpud: a PCI function added, removed, bound to or unbound
//! from a driver; an mdev added or removed.
//!
//! The kernel announces each of these as a uevent (a set of `KEY=value` properties: `ACTION`,
//! `DEVPATH`, `SUBSYSTEM`, `SEQNUM` and the bus's own, see the kernel's
//! Documentation/core-api/kobject.rst, "Uevents", and Documentation/ABI/testing/sysfs-uevent).
//! [`parse`] turns those properties into a typed [`DeviceEvent`]; it is total: anything it does
//! not understand is [`Ignored`] with why, never a panic. An [`EventSource`] delivers events: the
//! real one is the netlink monitor ([`NetlinkSource`], feature `netlink`), the simulator's reads
//! the uevents its model records, and both go through the same parser. [`next_batch`] coalesces a
//! burst (enabling VFs emits several events per VF) into one batch.
//!
//! An event only says "look again": what vgpud does is decided by re-reading the host, so a lost
//! or reordered event costs at most a delay until the next one or the periodic reconcile.
//!
//! This crate owns device events only. It must not read or change slices, inventory or state.

mod batch;
mod error;
mod event;
#[cfg(feature = "netlink")]
mod netlink;
mod parse;
mod source;

pub use batch::next_batch;
pub use error::HotplugError;
pub use event::{Action, Device, DeviceEvent};
#[cfg(feature = "netlink")]
pub use netlink::{Group, NetlinkSource};
pub use parse::{Ignored, SUBSYSTEMS, parse};
pub use source::{EventSource, QUEUE, Quiet, Subscription};
