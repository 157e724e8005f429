//! `GET /v1/placement`: how the host stands with OpenStack Placement.

use axum::Json;
use axum::extract::State;

use super::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::wire::placement::PlacementStatus;

/// Whether vgpud reports this host to OpenStack Placement, and how that stands: in sync or
/// since when not, the last error, generation conflicts retried, and the allocations vgpud and
/// Placement disagree on. Never calls Placement: this is the reporter's last pass.
#[utoipa::path(get, path = "/v1/placement", tag = "host",
    responses(
        (status = 200, description = "The reporter's standing", body = PlacementStatus),
        (status = 401, description = "The connection carries no identity", body = ErrorBody)))]
pub(super) async fn get_placement(
    State(st): State<AppState>,
) -> Result<Json<PlacementStatus>, ApiError> {
    Ok(Json(PlacementStatus::from(
        st.service.placement_status().as_ref(),
    )))
}
