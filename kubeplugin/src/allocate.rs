//! `Allocate`: kubelet has chosen devices for a pod's containers; vgpud holds those slices
//! for `[kubernetes] consumer` (so no REST client and no other resource can take them) and
//! answers what the containers need to use them.
//!
//! kubelet is the authority on which of its devices are in use: it only allocates devices it
//! counts free (kubelet device manager: devices held by active pods are never offered again).
//! So a device held by an earlier kubelet allocation that kubelet allocates again was given
//! back by kubelet (its pod ended before PodResources reconciliation released it): that
//! allocation is released and the device held anew. The same devices allocated again as one
//! container (kubelet re-running Allocate for a restarted container) keep their allocation.

use std::collections::BTreeSet;

use agent::engine::{Allocation, AllocationId, EngineError, SliceId};
use tonic::Status;

use crate::catalog::Device;
use crate::context::Context;
use crate::response::container_response;
use crate::wire::deviceplugin::{AllocateRequest, AllocateResponse, ContainerAllocateResponse};

/// At most this many containers in one request (a pod has few; kubelet sends one per
/// container that requests the resource).
const MAX_CONTAINERS: usize = 64;

/// Holds the devices of every container request, all or none (blocking).
pub fn allocate(
    ctx: &Context,
    resource: &str,
    request: &AllocateRequest,
) -> Result<AllocateResponse, Status> {
    let containers = &request.container_requests;
    if containers.is_empty() || containers.len() > MAX_CONTAINERS {
        return Err(Status::invalid_argument(format!(
            "{} container requests: 1 to {MAX_CONTAINERS} may be allocated at once",
            containers.len()
        )));
    }
    let mut made = Vec::new();
    let mut responses = Vec::new();
    for c in containers {
        match hold_container(ctx, resource, &c.devices_ids) {
            Ok((response, new)) => {
                made.extend(new);
                responses.push(response);
            }
            Err(status) => {
                release_all(ctx, &made);
                return Err(status);
            }
        }
    }
    Ok(AllocateResponse {
        container_responses: responses,
    })
}

/// One container's devices: held (or found held already as exactly this set), and the answer.
/// The allocation made, when one was.
fn hold_container(
    ctx: &Context,
    resource: &str,
    device_ids: &[String],
) -> Result<(ContainerAllocateResponse, Option<AllocationId>), Status> {
    let ids = parse_ids(device_ids)?;
    let catalog = ctx.current_catalog();
    let devices = ids
        .iter()
        .map(|id| {
            let d = catalog
                .find(resource, *id)
                .ok_or_else(|| Status::not_found(format!("{id} is not a device of {resource}")))?;
            if d.healthy {
                Ok(d)
            } else {
                Err(Status::failed_precondition(format!(
                    "device {id} of {resource} is unhealthy"
                )))
            }
        })
        .collect::<Result<Vec<&Device>, Status>>()?;
    let response = container_response(resource, &devices, &ctx.config.cdi_kind);
    let wanted: BTreeSet<SliceId> = ids.iter().copied().collect();
    let earlier = kubelet_allocations_of(ctx, &wanted);
    if let [only] = earlier.as_slice()
        && only.slices.iter().copied().collect::<BTreeSet<_>>() == wanted
    {
        return Ok((response, None));
    }
    for a in &earlier {
        tracing::info!(allocation = %a.id, resource, "kubelet allocated its devices again: releasing the earlier allocation");
        ctx.service.release(a.id).map_err(status_of)?;
    }
    let alloc = ctx
        .service
        .hold_slices(&ctx.config.consumer, resource, &ids)
        .map_err(status_of)?;
    tracing::info!(allocation = %alloc.id, resource, devices = ids.len(), "kubelet allocated devices");
    Ok((response, Some(alloc.id)))
}

/// The kubelet consumer's allocations holding any of `ids`.
fn kubelet_allocations_of(ctx: &Context, ids: &BTreeSet<SliceId>) -> Vec<Allocation> {
    ctx.service
        .allocations()
        .into_iter()
        .filter(|a| a.consumer == ctx.config.consumer && a.slices.iter().any(|s| ids.contains(s)))
        .collect()
}

fn parse_ids(device_ids: &[String]) -> Result<Vec<SliceId>, Status> {
    if device_ids.is_empty() {
        return Err(Status::invalid_argument(
            "a container request names no device",
        ));
    }
    device_ids
        .iter()
        .map(|id| {
            id.parse::<SliceId>().map_err(|_| {
                Status::invalid_argument(format!("{:?} is not a vgpud device id", truncated(id)))
            })
        })
        .collect()
}

/// A client's text, cut to a length fit for an error message.
fn truncated(text: &str) -> String {
    text.chars().take(64).collect()
}

/// Gives back what this request held before it failed.
fn release_all(ctx: &Context, made: &[AllocationId]) {
    for id in made {
        if let Err(e) = ctx.service.release(*id) {
            tracing::warn!(allocation = %id, "cannot give back a failed Allocate's hold: {e}");
        }
    }
}

/// The gRPC status for an engine refusal: kubelet shows the message in the pod's events.
pub fn status_of(e: EngineError) -> Status {
    let message = e.to_string();
    match e {
        EngineError::NotFound(_) => Status::not_found(message),
        EngineError::InvalidRequest(_) => Status::invalid_argument(message),
        EngineError::Conflict(_) | EngineError::Quarantined(_) | EngineError::NoCapacity(_) => {
            Status::failed_precondition(message)
        }
        EngineError::Busy(_) | EngineError::Timeout { .. } => Status::unavailable(message),
        _ => Status::internal(message),
    }
}
