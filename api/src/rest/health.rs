//! `POST /v1/gpus/{id}/quarantine` and `POST /v1/gpus/{id}/release`: an operator takes a GPU
//! out of service and brings it back.

use axum::Json;
use axum::extract::State;

use super::AppState;
use super::extract::{ApiJson, blocking};
use super::routes::PathId;
use crate::error::{ApiError, ErrorBody};
use crate::wire::health::{Quarantine, QuarantineRequest};

/// Quarantines a GPU by hand: no new slices or allocations on it (they are refused with
/// `409 quarantined`, naming since when and why) until an operator releases it; the health
/// probe never does. What runs on it stays. A GPU vgpud quarantined already becomes the
/// operator's (its time and reason stay).
#[utoipa::path(post, path = "/v1/gpus/{id}/quarantine", tag = "host",
    params(("id" = String, Path, description = "PCI address, canonical form", pattern = r"^[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$", example = "0000:07:00.0")),
    request_body = QuarantineRequest,
    responses(
        (status = 200, description = "The GPU's quarantine", body = Quarantine),
        (status = 400, description = "Malformed JSON or not a canonical PCI address", body = ErrorBody),
        (status = 401, description = "The connection carries no identity", body = ErrorBody),
        (status = 404, description = "No such GPU", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "Invalid reason", body = ErrorBody),
        (status = 503, description = "The state store failed", body = ErrorBody)))]
pub(super) async fn quarantine_gpu(
    State(st): State<AppState>,
    id: PathId,
    ApiJson(body): ApiJson<QuarantineRequest>,
) -> Result<Json<Quarantine>, ApiError> {
    let address = id.pci_address()?;
    let reason = body.reason()?.to_owned();
    let service = st.service.clone();
    let record = blocking(move || service.quarantine_gpu(address, &reason)).await?;
    Ok(Json(Quarantine::from(&record)))
}

/// Returns a quarantined GPU to service (whoever quarantined it); answers with the quarantine
/// that ended.
#[utoipa::path(post, path = "/v1/gpus/{id}/release", tag = "host",
    params(("id" = String, Path, description = "PCI address, canonical form", pattern = r"^[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$", example = "0000:07:00.0")),
    responses(
        (status = 200, description = "The quarantine that ended", body = Quarantine),
        (status = 400, description = "Not a canonical PCI address", body = ErrorBody),
        (status = 401, description = "The connection carries no identity", body = ErrorBody),
        (status = 409, description = "The GPU is not quarantined", body = ErrorBody),
        (status = 503, description = "The state store failed", body = ErrorBody)))]
pub(super) async fn release_gpu(
    State(st): State<AppState>,
    id: PathId,
) -> Result<Json<Quarantine>, ApiError> {
    let address = id.pci_address()?;
    let service = st.service.clone();
    let record = blocking(move || service.release_gpu(address)).await?;
    Ok(Json(Quarantine::from(&record)))
}
