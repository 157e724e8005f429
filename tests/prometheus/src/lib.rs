//! Real-peer tests of vgpud's metrics (issue 15): the daemon on a simulated DGX A100 with its
//! TCP metrics listener, scraped by a real Prometheus server and linted by `promtool`; the
//! shipped scrape job, alert rules and Grafana dashboard (`packaging/`) checked against them.
//!
//! Every test here is a Prometheus peer test: it starts the programs it needs itself and stops
//! them by their PID. When `prometheus` or `promtool` is missing the test is skipped with a
//! message, except in CI (`CI` set), where it fails.

pub mod daemon;
pub mod dashboard;
pub mod http;
pub mod openmetrics;
pub mod peer;
pub mod server;

use std::path::PathBuf;

/// The repository's root (this crate is `tests/prometheus`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A file shipped under `packaging/`.
pub fn packaging(rel: &str) -> PathBuf {
    repo_root().join("packaging").join(rel)
}
