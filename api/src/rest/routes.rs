//! The routes: each translates the wire form, makes one service call on the blocking pool and
//! translates the answer.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router, middleware};
use tokio_stream::{Stream, StreamExt, wrappers::BroadcastStream};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::extract::{ApiJson, blocking, blocking_ok, json_errors};
use super::{auth, metrics, openapi};
use crate::error::{ApiError, ErrorBody};
use crate::wire::demand_mix::DemandMix;
use crate::wire::events::Event;
use crate::wire::inventory::{Gpu, GpuDetail, Host};
use crate::wire::layouts::{LayoutsRequest, LayoutsView, Operation, etag_of};
use crate::wire::slices::{
    Allocation, AllocationRequest, CreateSliceRequest, PlacementScore, Slice, SliceRequest,
    allocation_id, slice_id,
};
use crate::wire::{IdempotencyKey, parse_pci};

/// The documented routes, before state is attached (also what [`openapi::openapi`] reads).
pub(super) fn documented() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(get_host))
        .routes(routes!(list_gpus))
        .routes(routes!(get_gpu))
        .routes(routes!(super::health::quarantine_gpu))
        .routes(routes!(super::health::release_gpu))
        .routes(routes!(list_slices, create_slice))
        .routes(routes!(get_slice, destroy_slice))
        .routes(routes!(list_allocations, create_allocation))
        .routes(routes!(get_allocation, release_allocation))
        .routes(routes!(placement_score))
        .routes(routes!(demand_mix))
        .routes(routes!(super::placement::get_placement))
        .routes(routes!(get_layouts, put_layouts))
        .routes(routes!(super::import::import_layouts))
        .routes(routes!(get_operation))
        .routes(routes!(events))
        .routes(routes!(healthz))
        .routes(routes!(metrics::metrics))
        .routes(routes!(openapi::get_openapi))
}

pub(super) fn build(state: AppState) -> Router {
    let limit = state.options.max_body_bytes;
    let counters = state.service.engine().metrics().clone();
    let (router, doc) = documented().split_for_parts();
    let doc = Arc::new(openapi::render(&doc));
    router
        .layer(axum::Extension(openapi::Document(doc)))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(auth::require_caller))
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::map_response(json_errors))
        .layer(middleware::from_fn_with_state(
            counters,
            super::request_metrics::count,
        ))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// A path parameter as text; a malformed one is a JSON 400, not axum's plain text.
pub(super) struct PathId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Path(id) =
            axum::extract::Path::<String>::from_request_parts(parts, state).await?;
        Ok(PathId(id))
    }
}

impl PathId {
    /// The parameter as a GPU's canonical PCI address (`/v1/gpus/{id}…`).
    pub(super) fn pci_address(&self) -> Result<ids::PciAddress, ApiError> {
        parse_pci("id", &self.0).map_err(|e| ApiError::invalid(e.to_string()))
    }
}

// ---- host and GPUs ----

/// The host: hostname, NUMA nodes, GPUs with their slicing capabilities and slices, PCI functions
/// (what `vgpud inventory --json` prints).
#[utoipa::path(get, path = "/v1/host", tag = "host",
    responses((status = 200, description = "The host", body = Host)))]
async fn get_host(State(st): State<AppState>) -> Result<Json<Host>, ApiError> {
    let service = st.service.clone();
    let inv = blocking_ok(move || service.host()).await?;
    Ok(Json(inv))
}

/// Every GPU of the host.
#[utoipa::path(get, path = "/v1/gpus", tag = "host",
    responses((status = 200, description = "GPUs by PCI address", body = Vec<Gpu>)))]
async fn list_gpus(State(st): State<AppState>) -> Result<Json<Vec<Gpu>>, ApiError> {
    let service = st.service.clone();
    let inv = blocking_ok(move || service.host()).await?;
    Ok(Json(inv.gpus))
}

/// One GPU, by canonical PCI address, with its health, utilisation and, for each slice type it
/// offers, how many more fit.
#[utoipa::path(get, path = "/v1/gpus/{id}", tag = "host",
    params(("id" = String, Path, description = "PCI address, canonical form", pattern = r"^[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$", example = "0000:07:00.0")),
    responses(
        (status = 200, description = "The GPU", body = GpuDetail),
        (status = 400, description = "Not a canonical PCI address", body = ErrorBody),
        (status = 404, description = "No such GPU", body = ErrorBody)))]
async fn get_gpu(State(st): State<AppState>, id: PathId) -> Result<Json<GpuDetail>, ApiError> {
    let address = id.pci_address()?;
    let service = st.service.clone();
    let gpu = blocking(move || service.gpu(address)).await?;
    Ok(Json(GpuDetail::from(&gpu)))
}

/// A dry run: would this host take the request, with what score. Nothing changes; the answer
/// is comparable between hosts running the same policy.
#[utoipa::path(post, path = "/v1/placement-score", tag = "allocations",
    request_body = SliceRequest,
    responses(
        (status = 200, description = "The score (feasible or not)", body = PlacementScore),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "The connection carries no identity", body = ErrorBody),
        (status = 404, description = "No such GPU", body = ErrorBody),
        (status = 409, description = "The named GPU is passed through whole and carries no slices", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "Invalid, or no GPU offers the type", body = ErrorBody),
        (status = 503, description = "libvirt does not answer", body = ErrorBody)))]
async fn placement_score(
    State(st): State<AppState>,
    ApiJson(body): ApiJson<SliceRequest>,
) -> Result<Json<PlacementScore>, ApiError> {
    let req = body.to_engine("", None)?;
    let service = st.service.clone();
    let score = blocking(move || service.placement_score(req)).await?;
    Ok(Json(PlacementScore::from(&score)))
}

/// The request mix the default policy scores against: the shapes of the allocation requests
/// this host was asked to place (granted or refused), older ones decayed, blended with a
/// prior of every shape the host offers until enough have been seen.
#[utoipa::path(get, path = "/v1/demand-mix", tag = "allocations",
    responses(
        (status = 200, description = "The learnt mix", body = DemandMix),
        (status = 401, description = "The connection carries no identity", body = ErrorBody)))]
async fn demand_mix(State(st): State<AppState>) -> Result<Json<DemandMix>, ApiError> {
    let service = st.service.clone();
    let mix = blocking_ok(move || service.demand_mix()).await?;
    Ok(Json(DemandMix::from(&mix)))
}

// ---- slices ----

/// Slices vgpud owns.
#[utoipa::path(get, path = "/v1/slices", tag = "slices",
    responses((status = 200, description = "Owned slices", body = Vec<Slice>)))]
async fn list_slices(State(st): State<AppState>) -> Result<Json<Vec<Slice>>, ApiError> {
    let service = st.service.clone();
    let slices = blocking_ok(move || service.slices()).await?;
    Ok(Json(slices.iter().map(Slice::from).collect()))
}

/// Creates one slice of an explicit kind on an explicit GPU (optionally handed to a consumer at
/// once). To let vgpud choose the GPU, allocate instead (`POST /v1/allocations`).
#[utoipa::path(post, path = "/v1/slices", tag = "slices",
    request_body = CreateSliceRequest,
    responses(
        (status = 201, description = "Created", body = Slice,
            headers(("Location" = String, description = "The new slice"))),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "The connection carries no identity", body = ErrorBody),
        (status = 404, description = "No such GPU", body = ErrorBody),
        (status = 409, description = "No capacity, busy, the GPU quarantined (code `quarantined`), or in conflict with the current state", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "Invalid or not offered", body = ErrorBody),
        (status = 502, description = "The kernel or a vendor library refused", body = ErrorBody),
        (status = 503, description = "The state store failed", body = ErrorBody),
        (status = 504, description = "A vendor call timed out", body = ErrorBody)))]
async fn create_slice(
    State(st): State<AppState>,
    ApiJson(body): ApiJson<CreateSliceRequest>,
) -> Result<Response, ApiError> {
    let req = body.to_engine()?;
    let service = st.service.clone();
    let slice = blocking(move || service.create_slice(req)).await?;
    let location = format!("/v1/slices/{}", slice.id);
    Ok(created(&location, Json(Slice::from(&slice))))
}

/// One owned slice.
#[utoipa::path(get, path = "/v1/slices/{id}", tag = "slices",
    params(("id" = String, Path, description = "Slice id (canonical UUID)", pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")),
    responses(
        (status = 200, description = "The slice", body = Slice),
        (status = 400, description = "Not a canonical UUID", body = ErrorBody),
        (status = 404, description = "No such slice", body = ErrorBody)))]
async fn get_slice(
    State(st): State<AppState>,
    PathId(id): PathId,
) -> Result<Json<Slice>, ApiError> {
    let id = slice_id(&id)?;
    let service = st.service.clone();
    let slice = blocking(move || service.slice(id)).await?;
    Ok(Json(Slice::from(&slice)))
}

/// Destroys an owned slice that no allocation holds.
#[utoipa::path(delete, path = "/v1/slices/{id}", tag = "slices",
    params(("id" = String, Path, description = "Slice id (canonical UUID)", pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")),
    responses(
        (status = 204, description = "Destroyed"),
        (status = 400, description = "Not a canonical UUID", body = ErrorBody),
        (status = 401, description = "The connection carries no identity", body = ErrorBody),
        (status = 404, description = "No such slice", body = ErrorBody),
        (status = 409, description = "Allocated or busy", body = ErrorBody),
        (status = 502, description = "The kernel or a vendor library refused", body = ErrorBody),
        (status = 503, description = "The state store failed", body = ErrorBody),
        (status = 504, description = "A vendor call timed out", body = ErrorBody)))]
async fn destroy_slice(
    State(st): State<AppState>,
    PathId(id): PathId,
) -> Result<StatusCode, ApiError> {
    let id = slice_id(&id)?;
    let service = st.service.clone();
    blocking(move || service.destroy_slice(id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- allocations ----

/// Every allocation.
#[utoipa::path(get, path = "/v1/allocations", tag = "allocations",
    responses((status = 200, description = "Allocations", body = Vec<Allocation>)))]
async fn list_allocations(State(st): State<AppState>) -> Result<Json<Vec<Allocation>>, ApiError> {
    let service = st.service.clone();
    let (allocs, slices) = blocking_ok(move || {
        let allocs = service.allocations();
        let slices = service.slices_held(&allocs);
        (allocs, slices)
    })
    .await?;
    Ok(Json(
        allocs.iter().map(|a| Allocation::new(a, &slices)).collect(),
    ))
}

/// Allocates slices to a consumer (and VM): all `count` or none. vgpud chooses the GPUs unless
/// `request.gpu` names one. With an `Idempotency-Key` header, a retried request (same consumer,
/// same key) returns the allocation the first attempt made instead of making a second one.
#[utoipa::path(post, path = "/v1/allocations", tag = "allocations",
    request_body = AllocationRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes a retried POST return the same allocation", min_length = 1, max_length = 64, pattern = r"^[\u0021-\u007E]+$")),
    responses(
        (status = 201, description = "Allocated", body = Allocation,
            headers(("Location" = String, description = "The new allocation"))),
        (status = 400, description = "Malformed JSON or header", body = ErrorBody),
        (status = 401, description = "The connection carries no identity", body = ErrorBody),
        (status = 404, description = "No such GPU", body = ErrorBody),
        (status = 409, description = "No capacity, busy, every candidate GPU quarantined (code `quarantined`, naming since when and why), the key was used for another request, or the Placement consumer holds no matching allocation here (code `placement_mismatch`, strict consumers)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "Invalid (a `placement_consumer` that is not a UUID too), or no GPU offers the type", body = ErrorBody),
        (status = 502, description = "The kernel or a vendor library refused", body = ErrorBody),
        (status = 503, description = "The state store failed, libvirt is unavailable, or Placement could not be asked about the consumer (code `placement_unavailable`, strict consumers)", body = ErrorBody),
        (status = 504, description = "A vendor call timed out", body = ErrorBody)))]
async fn create_allocation(
    State(st): State<AppState>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<AllocationRequest>,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers)?;
    let req = body.to_engine(key)?;
    let service = st.service.clone();
    let (alloc, slices) = blocking(move || {
        let a = service.allocate(req)?;
        let slices = service.slices_held(std::slice::from_ref(&a));
        Ok((a, slices))
    })
    .await?;
    let location = format!("/v1/allocations/{}", alloc.id);
    Ok(created(&location, Json(Allocation::new(&alloc, &slices))))
}

/// The `Idempotency-Key` header, checked as [`IdempotencyKey`] checks every front end's key.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    // A value that is not text at all is refused like any other bad key (as an empty one).
    let text = v.to_str().unwrap_or_default();
    IdempotencyKey::parse("Idempotency-Key", text).map(Some)
}

/// One allocation.
#[utoipa::path(get, path = "/v1/allocations/{id}", tag = "allocations",
    params(("id" = String, Path, description = "Allocation id (canonical UUID)", pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")),
    responses(
        (status = 200, description = "The allocation", body = Allocation),
        (status = 400, description = "Not a canonical UUID", body = ErrorBody),
        (status = 404, description = "No such allocation", body = ErrorBody)))]
async fn get_allocation(
    State(st): State<AppState>,
    PathId(id): PathId,
) -> Result<Json<Allocation>, ApiError> {
    let id = allocation_id(&id)?;
    let service = st.service.clone();
    let (alloc, slices) = blocking(move || {
        let a = service.allocation(id)?;
        let slices = service.slices_held(std::slice::from_ref(&a));
        Ok((a, slices))
    })
    .await?;
    Ok(Json(Allocation::new(&alloc, &slices)))
}

/// Releases an allocation; its slices stay, free for the next request.
#[utoipa::path(delete, path = "/v1/allocations/{id}", tag = "allocations",
    params(("id" = String, Path, description = "Allocation id (canonical UUID)", pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")),
    responses(
        (status = 204, description = "Released"),
        (status = 400, description = "Not a canonical UUID", body = ErrorBody),
        (status = 401, description = "The connection carries no identity", body = ErrorBody),
        (status = 404, description = "No such allocation", body = ErrorBody),
        (status = 503, description = "The state store failed", body = ErrorBody)))]
async fn release_allocation(
    State(st): State<AppState>,
    PathId(id): PathId,
) -> Result<StatusCode, ApiError> {
    let id = allocation_id(&id)?;
    let service = st.service.clone();
    blocking(move || service.release(id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- layouts and operations ----

/// The declared layouts with each selected GPU's apply status. The `ETag` header (and the `etag`
/// field) is the generation to send back in `If-Match`.
#[utoipa::path(get, path = "/v1/layouts", tag = "layouts",
    responses((status = 200, description = "Layouts and status", body = LayoutsView,
        headers(("ETag" = String, description = "Generation of the declared layouts")))))]
async fn get_layouts(State(st): State<AppState>) -> Result<Response, ApiError> {
    let service = st.service.clone();
    let view = LayoutsView::new(&blocking_ok(move || service.layouts()).await?);
    let etag = view.etag.clone();
    Ok(with_etag(&etag, Json(view).into_response()))
}

/// Replaces the declared layouts and applies them (diff-based: allocated slices stay). The apply
/// runs in the background: the answer is `202` with an operation to poll. `If-Match` with the
/// ETag read from `GET /v1/layouts` makes the replacement conditional (`412` when someone else
/// changed them first).
#[utoipa::path(put, path = "/v1/layouts", tag = "layouts",
    request_body = LayoutsRequest,
    params(("If-Match" = Option<String>, Header, description = "The ETag the change is based on, or *")),
    responses(
        (status = 202, description = "Accepted: poll the operation", body = Operation,
            headers(("Location" = String, description = "The operation"))),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "The connection carries no identity", body = ErrorBody),
        (status = 409, description = "Another layout apply is running", body = ErrorBody),
        (status = 412, description = "The layouts changed since the ETag was read", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "Invalid layouts", body = ErrorBody)))]
async fn put_layouts(
    State(st): State<AppState>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<LayoutsRequest>,
) -> Result<Response, ApiError> {
    let layouts = body.to_engine()?;
    // The engine's checks against the host, before the 202: an invalid layout is a 422 now,
    // not an operation that fails later. The apply checks again (the host may change).
    let (service, checked) = (st.service.clone(), layouts.clone());
    blocking(move || service.check_layouts(&checked)).await?;
    let (op, claim) = st.operations.start_apply(&st.service)?;
    // The check and the apply both happen while this apply holds the one slot, so nobody can
    // change the layouts in between.
    if let Err(e) = check_if_match(&st, &headers).await {
        st.operations.finish(&op.id, Err(e.body()));
        return Err(e);
    }
    let (service, ops, id) = (st.service.clone(), st.operations.clone(), op.id.clone());
    tokio::spawn(async move {
        let outcome = blocking(move || service.set_layouts(layouts)).await;
        drop(claim);
        ops.finish(
            &id,
            outcome.map(|v| LayoutsView::new(&v)).map_err(|e| e.body()),
        );
    });
    let location = format!("/v1/operations/{}", op.id);
    let mut response = (StatusCode::ACCEPTED, Json(op)).into_response();
    set_header(&mut response, header::LOCATION, &location);
    Ok(response)
}

async fn check_if_match(st: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(wanted) = headers.get(header::IF_MATCH) else {
        return Ok(());
    };
    let wanted = wanted
        .to_str()
        .map_err(|_| ApiError::invalid("If-Match: not text"))?
        .trim()
        .to_owned();
    let service = st.service.clone();
    let current = etag_of(&blocking_ok(move || service.layouts()).await?.layouts);
    let matches = wanted == "*" || wanted.split(',').any(|t| t.trim() == current);
    if matches {
        Ok(())
    } else {
        Err(ApiError::PreconditionFailed { current })
    }
}

/// A long operation (a layout apply).
#[utoipa::path(get, path = "/v1/operations/{id}", tag = "layouts",
    params(("id" = String, Path, description = "Operation id (UUID)", pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")),
    responses(
        (status = 200, description = "The operation", body = Operation),
        (status = 400, description = "Not a canonical UUID", body = ErrorBody),
        (status = 404, description = "No such operation (finished long ago, or before a restart)", body = ErrorBody)))]
async fn get_operation(
    State(st): State<AppState>,
    PathId(id): PathId,
) -> Result<Json<Operation>, ApiError> {
    let parsed = uuid::Uuid::try_parse(&id)
        .ok()
        .filter(|u| u.hyphenated().to_string() == id);
    if parsed.is_none() {
        return Err(ApiError::invalid(format!(
            "operation id {:?} is not a canonical UUID",
            id.chars().take(64).collect::<String>()
        )));
    }
    st.operations
        .get(&id)
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("operation {id}")))
}

// ---- events, health ----

/// Server-Sent Events: slice, allocation, drift, layout and reconcile events as they happen
/// (`event:` is the event's name, `data:` its JSON). A client that falls behind receives a
/// `lagged` event and should re-read the state.
#[utoipa::path(get, path = "/v1/events", tag = "events",
    responses((status = 200, description = "An endless text/event-stream; each data line is one Event",
        content_type = "text/event-stream", body = Event)))]
async fn events(
    State(st): State<AppState>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let stream = BroadcastStream::new(st.service.subscribe()).map(|item| {
        let event = match item {
            Ok(e) => Event::from(&e),
            Err(tokio_stream::wrappers::errors::BroadcastStreamRecvError::Lagged(missed)) => {
                Event::Lagged { missed }
            }
        };
        let data = serde_json::to_string(&event).unwrap_or_else(|_| "{}".to_owned());
        Ok(SseEvent::default().event(event.name()).data(data))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// Liveness: `ok` while the process serves requests.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "Serving", content_type = "text/plain", body = String)))]
pub(super) async fn healthz() -> &'static str {
    "ok\n"
}

// ---- helpers ----

fn created(location: &str, body: impl IntoResponse) -> Response {
    let mut response = (StatusCode::CREATED, body).into_response();
    set_header(&mut response, header::LOCATION, location);
    response
}

fn with_etag(etag: &str, mut response: Response) -> Response {
    set_header(&mut response, header::ETAG, etag);
    response
}

fn set_header(response: &mut Response, name: header::HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        response.headers_mut().insert(name, v);
    }
}
