//! The vgpud agent: the slice engine, the one internal service interface every front end uses,
//! VM pinning through libvirt, and the configuration.
//!
//! This crate must not parse HTTP or D-Bus (those front ends live in `api`), and it never knows
//! whether its host is real or simulated: it works on the [`inventory::HostAccess`] it is given.
//! Choosing and opening a host (real, a sysfs tree, the simulator) is `hostwire`'s job, and the
//! `vgpud` binary puts the pieces together.

pub mod apply_slot;
mod call_pool;
pub mod config;
pub mod engine;
pub mod health;
pub mod metrics;
pub mod pinning;
pub mod placement;
pub mod service;
pub mod subject_rule;
pub mod telemetry;
pub mod warm_pool;
