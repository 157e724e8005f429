//! Real-peer tests of the `placement` client (issue 16): OpenStack Placement 16 from PyPI,
//! started by `testkit::placement` with SQLite and noauth2 (or https with a test CA, or
//! Keystone's middleware) and stopped by its PID; Keystone from PyPI for the password flow.
//!
//! When a venv is missing the test is skipped with a message, except in CI (`CI` set), where it
//! fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use placement::{Auth, Client, ClientConfig};
pub use testkit::placement::{ADMIN_TOKEN, PlacementPeer};

/// A noauth2 admin client of the Placement at `url`.
pub fn admin_client(url: &str) -> Client {
    client_with_token(url, ADMIN_TOKEN)
}

/// A noauth2 client sending `token`.
pub fn client_with_token(url: &str, token: &str) -> Client {
    Client::new(ClientConfig {
        endpoint: Some(url.to_owned()),
        auth: Auth::NoAuth {
            token: token.to_owned(),
        },
        ca_file: None,
        timeout: Duration::from_secs(10),
    })
    .unwrap()
}

/// A Placement over http with noauth2, or `None` (skipped) without its venv.
pub fn placement() -> Option<PlacementPeer> {
    PlacementPeer::start().unwrap()
}
