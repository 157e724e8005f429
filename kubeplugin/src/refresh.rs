//! Keeping the published catalog current: recomputed after every engine event (slices,
//! allocations, quarantines, hot-plug) and every second (health checks that time out change
//! no engine state), published only when it changed, so streams send only real changes.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};

use crate::catalog::Catalog;
use crate::context::Context;

/// The longest a change outside the engine's events waits to be seen.
const EVERY: Duration = Duration::from_secs(1);

/// Publishes the catalog into `out` until `stop`.
pub async fn run(ctx: Context, out: watch::Sender<Arc<Catalog>>, mut stop: watch::Receiver<bool>) {
    let mut events = ctx.service.subscribe();
    loop {
        let now = {
            let ctx = ctx.clone();
            match tokio::task::spawn_blocking(move || ctx.current_catalog()).await {
                Ok(catalog) => catalog,
                Err(e) => {
                    tracing::warn!("the catalog task failed: {e}");
                    return;
                }
            }
        };
        out.send_if_modified(|published| {
            let changed = **published != now;
            if changed {
                *published = Arc::new(now);
            }
            changed
        });
        tokio::select! {
            () = tokio::time::sleep(EVERY) => {}
            event = events.recv() => match event {
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => drain(&mut events),
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// A burst of events (a layout applied, a reconcile) makes one recomputation.
fn drain(events: &mut broadcast::Receiver<agent::engine::Event>) {
    while let Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) = events.try_recv() {}
}
