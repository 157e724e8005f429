//! The vgpud agent: the slice engine, the one internal service interface every front end uses,
//! the configuration, and the wiring of host-access implementations (real or simulated).
//!
//! This crate must not parse HTTP or D-Bus; those front ends live in `api`, and the `vgpud`
//! binary (crate `vgpud`) puts the two together.

pub mod capture;
pub mod config;
pub mod engine;
pub mod host;
pub mod pinning;
pub mod service;
