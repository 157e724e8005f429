//! The hostile-client suite (issue 14): the real `vgpud` daemon on a simulated host, attacked
//! over its unix socket and its TLS port on loopback, while a well-behaved client keeps asking
//! `GET /healthz` on the socket. Every test bounds its attack in count and time, asserts the
//! well-behaved client's p99 latency stays under [`P99_LIMIT`] and that the allocations are
//! unchanged afterwards, and prints its figures (`eprintln!`, shown by `cargo nextest run -p
//! hostile --no-capture`, and on failure).
//!
//! - [`daemon`]: starting the daemon (TLS port, a soft file-descriptor limit) and stopping it.
//! - [`probe`]: the well-behaved client and its latency figures.
//! - [`raw`]: raw sockets for the attackers.

pub mod daemon;
pub mod probe;
pub mod raw;

use std::time::Duration;

/// The well-behaved client's p99 latency bound under attack.
pub const P99_LIMIT: Duration = Duration::from_millis(50);
