//! The OpenStack Placement reporter's thread (its HTTP calls block) and the task that wakes it
//! on every engine event: slices, allocations, layouts, GPU health and hot-plug all change what
//! the host offers. Nothing here when `[placement] enabled = false`.

use std::sync::Arc;
use std::thread::JoinHandle;

use agent::config::Config;
use agent::engine::Engine;
use agent::placement::reporter::Reporter;
use agent::placement::settings::PlacementSettings;
use agent::service::Service;
use anyhow::Context;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle as TaskHandle;
use tracing::{info, warn};

/// The running reporter.
pub(crate) struct PlacementReporter {
    thread: JoinHandle<()>,
    events: TaskHandle<()>,
}

/// The reporter `[placement]` asks for; `None` when reporting is off. The compute node's
/// name defaults to the host's (a simulated host has one too).
pub(crate) fn reporter(config: &Config, engine: &Engine) -> anyhow::Result<Option<Arc<Reporter>>> {
    if !config.placement.enabled {
        return Ok(None);
    }
    let settings = PlacementSettings::from_config(config, &engine.inventory().hostname);
    let reporter = Reporter::new(settings).context("[placement]")?;
    Ok(Some(Arc::new(reporter)))
}

/// Starts the reporter when the service has one.
pub(crate) fn start(service: &Service, stop: &watch::Receiver<bool>) -> Option<PlacementReporter> {
    let reporter = service.placement_reporter()?.clone();
    let status = reporter.status();
    info!(
        root = %status.root_name,
        endpoint = status.endpoint.as_deref().unwrap_or("(from the Keystone catalog)"),
        "reporting to OpenStack Placement"
    );
    let events = tokio::spawn(forward_events(service.subscribe(), reporter.clone()));
    let thread = {
        let (engine, stop) = (service.engine().clone(), stop.clone());
        let reporter = reporter.clone();
        std::thread::Builder::new()
            .name("vgpud-placement".into())
            .spawn(move || reporter.run(&engine, &|| *stop.borrow()))
    };
    match thread {
        Ok(thread) => Some(PlacementReporter { thread, events }),
        Err(e) => {
            warn!("cannot start the Placement reporter thread: {e}");
            events.abort();
            None
        }
    }
}

impl PlacementReporter {
    /// Waits for the thread to see the stop (a request in flight may delay it by its timeout).
    pub(crate) async fn join(self) {
        self.events.abort();
        let _ = tokio::task::spawn_blocking(move || self.thread.join()).await;
    }
}

/// Every engine event is a local change the reporter must look at; a lagging receiver
/// missed some, which is a change too.
async fn forward_events(
    mut events: broadcast::Receiver<agent::engine::Event>,
    reporter: Arc<Reporter>,
) {
    loop {
        match events.recv().await {
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => reporter.poke(),
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}
