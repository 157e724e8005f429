//! The vgpud agent: wires the host-access implementations (real or simulated) to the layers
//! above them and carries the admin commands of the `vgpud` binary.
//!
//! Later issues add the slice engine, the desired-state store and the daemon here. This crate
//! must not parse HTTP or D-Bus; those front ends live in `api`.

pub mod capture;
pub mod cli;
pub mod config;
pub mod engine;
pub mod host;
