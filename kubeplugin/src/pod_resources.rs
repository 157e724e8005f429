//! Releasing what kubelet no longer holds. kubelet never tells a device plugin that a pod
//! ended; its PodResources API lists the devices every pod on the node holds (Kubernetes docs,
//! "Monitoring device plugin resources"). A kubelet allocation none of whose slices any pod
//! lists for `[kubernetes] release_grace_s` is released. A failed List releases nothing: an
//! unreachable kubelet is not evidence that its pods are gone.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use agent::engine::{AllocationId, SliceId};
use tokio::sync::watch;

use crate::context::Context;
use crate::unix;
use crate::wire::podresources::ListPodResourcesRequest;
use crate::wire::podresources::pod_resources_lister_client::PodResourcesListerClient;

/// How often kubelet is asked.
const EVERY: Duration = Duration::from_secs(10);
/// A node's pod list can be long; 16 MiB is tens of thousands of device ids.
const MAX_ANSWER_BYTES: usize = 16 << 20;

/// Reconciles until `stop`.
pub async fn run(ctx: Context, mut stop: watch::Receiver<bool>) {
    let grace = Duration::from_secs(ctx.config.release_grace_s);
    let mut unlisted_since: BTreeMap<AllocationId, Instant> = BTreeMap::new();
    let mut last_error: Option<String> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(EVERY) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        match listed_devices(&ctx).await {
            Ok(listed) => {
                if last_error.take().is_some() {
                    tracing::info!("kubelet's PodResources answers again");
                }
                release_unlisted(&ctx, &listed, &mut unlisted_since, grace).await;
            }
            Err(e) => {
                if last_error.as_ref() != Some(&e) {
                    tracing::warn!(
                        "cannot list kubelet's pod resources (nothing is released until it answers): {e}"
                    );
                }
                last_error = Some(e);
            }
        }
    }
}

/// Every device id some pod's container holds, whatever the resource.
async fn listed_devices(ctx: &Context) -> Result<BTreeSet<SliceId>, String> {
    let socket = &ctx.config.pod_resources_socket;
    let channel = unix::channel(socket)
        .await
        .map_err(|e| format!("connecting to {}: {e}", socket.display()))?;
    let answer = PodResourcesListerClient::new(channel)
        .max_decoding_message_size(MAX_ANSWER_BYTES)
        .list(ListPodResourcesRequest {})
        .await
        .map_err(|s| format!("List: {}", s.message()))?
        .into_inner();
    Ok(answer
        .pod_resources
        .iter()
        .flat_map(|p| &p.containers)
        .flat_map(|c| &c.devices)
        .flat_map(|d| &d.device_ids)
        .filter_map(|id| id.parse().ok())
        .collect())
}

/// Starts the clock on kubelet allocations no pod lists, releases those past `grace`.
async fn release_unlisted(
    ctx: &Context,
    listed: &BTreeSet<SliceId>,
    unlisted_since: &mut BTreeMap<AllocationId, Instant>,
    grace: Duration,
) {
    let ctx = ctx.clone();
    let listed = listed.clone();
    let mut clocks = std::mem::take(unlisted_since);
    let joined = tokio::task::spawn_blocking(move || {
        let now = Instant::now();
        let ours: Vec<_> = ctx
            .service
            .allocations()
            .into_iter()
            .filter(|a| a.consumer == ctx.config.consumer)
            .collect();
        clocks.retain(|id, _| ours.iter().any(|a| a.id == *id));
        for a in ours {
            if a.slices.iter().any(|s| listed.contains(s)) {
                clocks.remove(&a.id);
                continue;
            }
            let since = *clocks.entry(a.id).or_insert(now);
            if now.duration_since(since) < grace {
                continue;
            }
            match ctx.service.release(a.id) {
                Ok(()) => {
                    tracing::info!(allocation = %a.id, slices = a.slices.len(), "released: no pod holds these devices any more");
                    clocks.remove(&a.id);
                }
                Err(e) => tracing::warn!(allocation = %a.id, "cannot release devices no pod holds: {e}"),
            }
        }
        clocks
    })
    .await;
    match joined {
        Ok(clocks) => *unlisted_since = clocks,
        Err(e) => tracing::warn!("the PodResources reconcile task failed: {e}"),
    }
}
