//! Multi-GPU requests on an NVSwitch host: the scheduler's NVLink groups come from the
//! inventory's fabric peers.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use agent::engine::SliceRequest;
use agent::service::Service;
use testkit::*;

#[test]
fn all_eight_gpus_of_an_hgx_h200_are_one_nvlink_group() {
    // Every NVLink ends at an NVSwitch; the GPUs on the fabric are all peers, so a request for
    // all eight GPUs is placed inside one NVLink group.
    let h = sim("hgx-h200");
    let dir = tempfile::tempdir().unwrap();
    let s = Service::new(engine(&h, dir.path()));
    let score = s.placement_score(SliceRequest::new("gpu", 8)).unwrap();
    assert!(score.feasible, "{score:?}");
    assert_eq!(score.placements.len(), 8);
    let explanation = score.explanation.unwrap();
    assert!(
        explanation.candidates.iter().all(|c| c.nvlink_connected),
        "{explanation:?}"
    );
}
