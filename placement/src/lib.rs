//! A client for OpenStack Placement, the service an IaaS scheduler asks for the hosts that can
//! take a request (<https://docs.openstack.org/api-ref/placement/>).
//!
//! This crate owns the wire: Placement's JSON documents ([`model`]), its microversion header,
//! its error bodies, authentication and TLS. It knows nothing of GPUs or of vgpud's state: what
//! to report is the agent's (`agent::placement`).

pub mod model;

pub use model::{Inventory, Provider};
