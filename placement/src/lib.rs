//! A client for OpenStack Placement, the service an IaaS scheduler asks for the hosts that can
//! take a request (<https://docs.openstack.org/api-ref/placement/>).
//!
//! This crate owns the wire: Placement's JSON documents ([`model`]), its microversion header,
//! its error bodies ([`Error`]), authentication ([`Auth`]: noauth2, a Keystone token, or
//! Keystone's password flow) and TLS (a CA bundle or the webpki roots). It knows nothing of
//! GPUs or of vgpud's state: what to report is the agent's (`agent::placement`).
//!
//! The [`Client`] is blocking (`ureq`): call it from a blocking thread.

mod auth;
mod client;
mod error;
pub mod keystone;
pub mod model;
mod tls;

pub use auth::{Auth, KeystonePassword, REFRESH_BEFORE};
pub use client::{BODY_LIMIT, Client, ClientConfig};
pub use error::{CONCURRENT_UPDATE, Error};
pub use model::{Inventory, Provider};
