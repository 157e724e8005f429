//! `POST /v1/layouts/import`: an operator's mig-parted config or mdevctl definitions, sent as
//! content by the client (the daemon never opens a path a client names).

use axum::Json;
use axum::extract::State;

use super::AppState;
use super::extract::{ApiJson, blocking};
use crate::error::{ApiError, ErrorBody};
use crate::wire::import::{ImportOutcome, ImportRequest};
use crate::wire::layouts::LayoutsView;

/// Imports a mig-parted config (`format: mig-parted`: the named config's layouts replace the
/// declared layouts and are applied) or mdevctl definitions (`format: mdevctl`: each is adopted
/// when the mdev exists as defined, created otherwise, or skipped with the reason). The answer
/// holds the diff — layouts added, changed and removed, per GPU the slices made and destroyed,
/// per definition its fate — and, unless `dry_run`, what the apply gave. A mig-parted apply
/// answers when it has finished and counts as the one layout apply in flight (`409` while
/// another runs; it is also kept as an operation).
#[utoipa::path(post, path = "/v1/layouts/import", tag = "layouts",
    request_body = ImportRequest,
    responses(
        (status = 200, description = "The diff, and unless a dry run what was applied", body = ImportOutcome),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "The connection carries no identity", body = ErrorBody),
        (status = 404, description = "The file has no config of that name (the message lists them)", body = ErrorBody),
        (status = 409, description = "Another layout apply is running", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 422, description = "Not a mig-parted config (the message names line and column), too large, or layouts the host refuses", body = ErrorBody),
        (status = 502, description = "The kernel or a vendor library refused", body = ErrorBody),
        (status = 503, description = "The state store failed", body = ErrorBody),
        (status = 504, description = "A vendor call timed out", body = ErrorBody)))]
pub(super) async fn import_layouts(
    State(st): State<AppState>,
    ApiJson(body): ApiJson<ImportRequest>,
) -> Result<Json<ImportOutcome>, ApiError> {
    let source = body.to_engine()?;
    let dry_run = body.dry_run;
    let applies_layouts =
        !dry_run && matches!(source, agent::engine::import::ImportSource::Layouts(_));
    // Replacing the layouts takes the one apply slot, as PUT /v1/layouts does.
    let op = if applies_layouts {
        Some(st.operations.start_apply(&st.service)?)
    } else {
        None
    };
    let service = st.service.clone();
    let outcome = blocking(move || service.import_layouts(source, dry_run)).await;
    if let Some((op, _claim)) = op {
        let finished =
            match &outcome {
                Ok(o) => o.layouts.as_ref().map(LayoutsView::new).ok_or_else(|| {
                    ApiError::Internal("the import applied no layouts".into()).body()
                }),
                Err(e) => Err(e.body()),
            };
        st.operations.finish(&op.id, finished);
    }
    Ok(Json(ImportOutcome::new(&outcome?)))
}
