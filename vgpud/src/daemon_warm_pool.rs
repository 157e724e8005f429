//! The warm pool's top-up task, when `[warm_pool] enabled`: every `interval_ms` one pass of
//! `agent::warm_pool::WarmPool::refill` on the blocking pool (it creates slices), until the daemon stops.
//! A pass in progress finishes (the slice it is making is recorded like any other).

use std::sync::Arc;
use std::time::Duration;

use agent::config::WarmPoolConfig;
use agent::service::Service;
use agent::warm_pool::WarmPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Starts the task when the section asks for it.
pub(crate) fn start(
    service: &Service,
    config: &WarmPoolConfig,
    stop: &watch::Receiver<bool>,
) -> Option<JoinHandle<()>> {
    if !config.enabled {
        return None;
    }
    tracing::info!(size = config.size, "keeping a warm pool of free slices");
    let period = Duration::from_millis(config.interval_ms);
    let pool = Arc::new(WarmPool::new(config.clone()));
    let (engine, mut stop) = (service.engine().clone(), stop.clone());
    Some(tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let (engine, pool) = (engine.clone(), pool.clone());
            if let Err(e) = tokio::task::spawn_blocking(move || pool.refill(&engine)).await {
                tracing::warn!("the warm pool task failed: {e}");
            }
        }
    }))
}
