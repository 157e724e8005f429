//! The `vgpud` program: its command line (admin commands over the `agent` library) and, with
//! `vgpud run`, the daemon that serves the `api` front ends over the agent's service.
//!
//! This crate only wires: no slicing logic (that is `agent`), no wire formats (that is `api`).

pub mod cli;
pub mod daemon;
mod daemon_config;
mod daemon_health;
mod daemon_hotplug;
mod daemon_kubernetes;
mod daemon_listen;
mod daemon_memory;
mod daemon_metrics;
mod daemon_placement;
mod daemon_systemd;
mod daemon_warm_pool;
pub mod state_cmd;
