//! GPU health as `vgpuctl gpu` shows it: what counts as degraded.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use agent::service::{GpuHealth, Service};
use testkit::*;

#[test]
fn a_healthy_gpu_with_mig_off_is_ok() {
    // Issue 13, fact 8: `vgpuctl gpu 0000:18:00.0` on `--sim hgx-h200` said `degraded` because
    // the MIG profile query answers NOT_SUPPORTED while MIG mode is off.
    let h = sim("hgx-h200");
    let dir = tempfile::tempdir().unwrap();
    let s = Service::new(engine(&h, dir.path()));
    let d = s.gpu(addr("0000:18:00.0")).unwrap();
    assert_eq!(d.health, GpuHealth::Ok, "{:?}", d.health_reasons);
    assert!(d.health_reasons.is_empty(), "{:?}", d.health_reasons);
}
