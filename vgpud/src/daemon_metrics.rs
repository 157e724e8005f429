//! The telemetry poller behind `/metrics`: started once the first reconcile is done, stopped
//! when the daemon drops its handle. Changing `[metrics] poll_interval_ms` or the idle rule
//! takes a restart (a reload reports it).

use agent::config::MetricsConfig;
use agent::service::Service;
use agent::telemetry::{Poller, PollerHandle, PollerSettings};
use anyhow::Context;

/// Starts the poller filling the service's telemetry cache.
pub fn start(service: &Service, config: &MetricsConfig) -> anyhow::Result<PollerHandle> {
    let settings = PollerSettings::from_config(config);
    tracing::info!(
        interval_ms = settings.interval.as_millis() as u64,
        "telemetry poller started"
    );
    Poller::new(
        service.engine().clone(),
        service.telemetry_cache(),
        settings,
    )
    .with_health(service.health().clone())
    .spawn()
    .context("starting the telemetry poller")
}
