//! Test drivers that every vgpud crate's tests share; a dev-dependency only, never shipped.
//!
//! - a simulated host from a built-in profile, an engine and a service over it ([`sim`],
//!   [`engine`], [`service`]);
//! - engine test helpers in short form ([`engine`](mod@engine) module, re-exported here);
//! - the REST router served on a unix socket ([`RestServer`]);
//! - a self-signed certificate and owner-only secrets for TLS listeners ([`tls`]);
//! - a real OpenStack Placement and Keystone from their venvs, served by gunicorn
//!   ([`placement`], [`keystone`]), and a test CA for https peers ([`tls::test_ca`]);
//! - the `engine-crash-child` binary the crash tests kill at random points.
//!
//! Test helpers panic on failure: a set-up that cannot be made is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod daemon;
pub mod engine;
mod gunicorn;
pub mod keystone;
pub mod placement;
mod rest;
mod sim_host;
pub mod tls;

pub use engine::*;
pub use hostwire::sim_access;
pub use rest::RestServer;
pub use sim_host::{
    TEST_VENDOR_TIMEOUT, engine, engine_with, service, service_async, service_on_profile, sim,
    sim_engine,
};
