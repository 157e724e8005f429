//! Wires a host for vgpud: which host-access implementations a command works on (the machine
//! itself, a sysfs tree under another root, or a simulated host), what a simulated host adds
//! around them (libvirt's test driver, described from the simulated topology), and capturing a
//! host as a simulator profile.
//!
//! This is the only crate besides the binary that knows a host can be simulated: `agent`, `api`
//! and the device crates work on the [`inventory::HostAccess`] they are handed. Tests share these
//! openers through the dev-only `testkit` crate.

mod access;
pub mod capture;
mod choice;
mod sim_events;
mod sim_libvirt;

pub use access::{real_access, sim_access};
pub use choice::{HostChoice, load_profile, open, open_sim};
pub use sim_libvirt::{TEST_HOST_FILE, pin_to_test_host, write_test_host};
