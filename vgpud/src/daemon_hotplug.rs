//! Hot-plug wiring: the host's device events (netlink, or the simulated kernel's uevents) mark
//! the engine's inventory out of date and wake the daemon's reconcile loop at once instead of
//! at its next period. A burst (a VF enable, a
//! PF removal with its VFs) is coalesced into one wake-up; what the reconcile does about it is
//! the engine's (see `agent::engine` `presence`).

use std::sync::Arc;
use std::time::Duration;

use hotplug::EventSource;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

/// Quiet time after the last event of a burst before the reconcile runs.
const QUIET: Duration = Duration::from_millis(250);
/// The longest a steady stream of events delays the reconcile.
const LONGEST: Duration = Duration::from_secs(2);

/// Subscribes to the host's device events and wakes `wake` after each burst, until `stop`.
/// Without events (the source cannot start) the periodic reconcile still notices devices that
/// come and go: a warning, not an error.
pub(crate) fn start(
    source: &Arc<dyn EventSource>,
    engine: agent::engine::Engine,
    wake: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) -> Option<JoinHandle<()>> {
    let mut sub = match source.subscribe() {
        Ok(s) => s,
        Err(e) => {
            warn!(
                "hot-plug: device events unavailable ({:#}); the periodic reconcile still notices devices that come and go",
                anyhow::Error::from(e)
            );
            return None;
        }
    };
    info!("hot-plug: device events from {}", sub.origin);
    Some(tokio::spawn(async move {
        loop {
            let batch = tokio::select! {
                b = hotplug::next_batch(&mut sub.events, QUIET, LONGEST) => b,
                _ = stop.wait_for(|s| *s) => return,
            };
            let Some(batch) = batch else {
                warn!("hot-plug: the device event source stopped");
                return;
            };
            for e in &batch {
                debug!("device event: {e}");
            }
            // What the engine read about the host is out of date until the reconcile.
            engine.host_changed();
            if let Some(first) = batch.first() {
                let more = if batch.len() > 1 { ", …" } else { "" };
                info!(
                    "hot-plug: {} device events ({first}{more}): reconciling",
                    batch.len()
                );
            }
            wake.notify_one();
        }
    }))
}
