//! The `DevicePlugin` service of one resource, as kubelet's device manager calls it.

use std::sync::Arc;

use agent::engine::SliceId;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::catalog::{Catalog, Device};
use crate::context::Context;
use crate::preferred;
use crate::wire::deviceplugin as dp;

/// kubelet's health words (device plugin API: `Healthy`, `Unhealthy`).
const HEALTHY: &str = "Healthy";
const UNHEALTHY: &str = "Unhealthy";

/// One resource's plugin.
pub struct Plugin {
    ctx: Context,
    resource: String,
    /// Ends the streams when this plugin's server stops.
    stop: watch::Receiver<bool>,
}

impl Plugin {
    /// The plugin serving `resource`.
    pub fn new(ctx: Context, resource: String, stop: watch::Receiver<bool>) -> Self {
        Self {
            ctx,
            resource,
            stop,
        }
    }
}

/// The device list kubelet is sent for `resource` of `catalog`.
pub fn device_list(catalog: &Catalog, resource: &str) -> dp::ListAndWatchResponse {
    dp::ListAndWatchResponse {
        devices: catalog.devices(resource).iter().map(wire_device).collect(),
    }
}

fn wire_device(d: &Device) -> dp::Device {
    dp::Device {
        id: d.id().to_string(),
        health: if d.healthy { HEALTHY } else { UNHEALTHY }.to_owned(),
        topology: d.numa().map(|id| dp::TopologyInfo {
            nodes: vec![dp::NumaNode { id }],
        }),
    }
}

/// Device ids kubelet sent; an id that is not a slice id cannot be one of ours and is skipped
/// (a preference is advice; Allocate refuses such ids).
fn slice_ids(ids: &[String]) -> Vec<SliceId> {
    ids.iter().filter_map(|id| id.parse().ok()).collect()
}

#[tonic::async_trait]
impl dp::device_plugin_server::DevicePlugin for Plugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<dp::DevicePluginOptions>, Status> {
        Ok(Response::new(options()))
    }

    type ListAndWatchStream = ReceiverStream<Result<dp::ListAndWatchResponse, Status>>;

    /// The current list at once, then a new one on every change, until kubelet hangs up or
    /// this plugin stops (kubelet then sees the stream end and waits for a new registration).
    async fn list_and_watch(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let (tx, rx) = mpsc::channel(4);
        let mut catalog = self.ctx.catalog.clone();
        let mut stop = self.stop.clone();
        let resource = self.resource.clone();
        tokio::spawn(async move {
            let mut last = None;
            loop {
                let list = device_list(&catalog.borrow_and_update(), &resource);
                if last.as_ref() != Some(&list) {
                    if tx.send(Ok(list.clone())).await.is_err() {
                        return;
                    }
                    last = Some(list);
                }
                tokio::select! {
                    changed = catalog.changed() => if changed.is_err() { return },
                    _ = stop.wait_for(|s| *s) => return,
                    () = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<dp::PreferredAllocationRequest>,
    ) -> Result<Response<dp::PreferredAllocationResponse>, Status> {
        let catalog = Arc::clone(&self.ctx.catalog.borrow());
        let devices = catalog.devices(&self.resource);
        let container_responses = request
            .into_inner()
            .container_requests
            .iter()
            .map(|c| {
                let size = usize::try_from(c.allocation_size).unwrap_or(0);
                let ids = preferred::choose(
                    devices,
                    &slice_ids(&c.available_device_i_ds),
                    &slice_ids(&c.must_include_device_i_ds),
                    size,
                );
                dp::ContainerPreferredAllocationResponse {
                    device_i_ds: ids.iter().map(ToString::to_string).collect(),
                }
            })
            .collect();
        Ok(Response::new(dp::PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<dp::AllocateRequest>,
    ) -> Result<Response<dp::AllocateResponse>, Status> {
        let (ctx, resource) = (self.ctx.clone(), self.resource.clone());
        let request = request.into_inner();
        tokio::task::spawn_blocking(move || crate::allocate::allocate(&ctx, &resource, &request))
            .await
            .map_err(|e| Status::internal(format!("allocate task: {e}")))?
            .map(Response::new)
    }

    async fn pre_start_container(
        &self,
        _: Request<dp::PreStartContainerRequest>,
    ) -> Result<Response<dp::PreStartContainerResponse>, Status> {
        // Not asked for (options: pre_start_required = false); answered for old kubelets.
        Ok(Response::new(dp::PreStartContainerResponse {}))
    }
}

/// What the plugin asks of kubelet: preferred allocations yes, pre-start calls no (the
/// slices exist before kubelet sees them).
pub fn options() -> dp::DevicePluginOptions {
    dp::DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}
