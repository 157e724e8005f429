//! A simulated host, and an engine and a service over it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent::engine::{Engine, EngineConfig};
use agent::service::Service;
use sim::{Profile, SimHost};

/// The vendor-call timeout of test engines: short, so a test of a hanging call ends quickly.
pub const TEST_VENDOR_TIMEOUT: Duration = Duration::from_secs(5);

/// A simulated host in memory from a built-in profile (`dgx-a100`, `vdi-mixed`, …).
pub fn sim(profile: &str) -> SimHost {
    SimHost::new(Profile::builtin(profile).unwrap()).unwrap()
}

/// An engine over `sim` keeping its state in `dir`, with vendor calls abandoned after `timeout`.
pub fn engine_with(sim: &SimHost, dir: &Path, timeout: Duration) -> Engine {
    let mut cfg = EngineConfig::new(dir, hostwire::sim_access(sim));
    cfg.vendor_timeout = timeout;
    Engine::open(cfg).unwrap()
}

/// An engine over `sim` keeping its state in `dir`.
pub fn engine(sim: &SimHost, dir: &Path) -> Engine {
    engine_with(sim, dir, TEST_VENDOR_TIMEOUT)
}

/// A simulated host from a built-in profile and an engine over it, reconciled once (as the
/// daemon does before it serves).
pub fn sim_engine(profile: &str, state_dir: &Path) -> (SimHost, Engine) {
    let sim = sim(profile);
    let engine = engine(&sim, state_dir);
    engine.reconcile().unwrap();
    (sim, engine)
}

/// A service (default policy, no VM pinning) over a simulated host from a built-in profile,
/// reconciled once.
pub fn service(profile: &str, state_dir: &Path) -> (SimHost, Service) {
    service_on_profile(Profile::builtin(profile).unwrap(), state_dir)
}

/// [`service`] over any profile (a file's, not only a built-in one).
pub fn service_on_profile(profile: Profile, state_dir: &Path) -> (SimHost, Service) {
    let sim = SimHost::new(profile).unwrap();
    let engine = engine(&sim, state_dir);
    engine.reconcile().unwrap();
    (sim, Service::new(engine))
}

/// [`service`] made on a blocking thread, for async tests (opening and reconciling block).
pub async fn service_async(profile: &'static str, state_dir: PathBuf) -> (SimHost, Service) {
    tokio::task::spawn_blocking(move || service(profile, &state_dir))
        .await
        .unwrap()
}
