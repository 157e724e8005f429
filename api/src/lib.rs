//! vgpud's front ends: the REST API (for the IaaS control plane) and the D-Bus API (for
//! operators with `busctl`). Both are thin adapters over [`agent::service::Service`]: they
//! translate wire formats, authentication and errors, and hold no business logic.

pub mod dbus;
pub mod error;
pub mod rest;
pub mod wire;
