//! The simulated host the service-level targets share: built once per process (opening and
//! reconciling an engine takes milliseconds, far longer than one fuzz run), and put back to
//! its first state whenever a run changed it, so every input meets the same host.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use agent::engine::{Engine, EngineConfig};
use agent::service::Service;
use sim::{Profile, SimHost};

/// A simulated host and a service over it, with its state directory.
pub struct Host {
    /// The simulated host.
    pub sim: SimHost,
    /// The service the front ends call.
    pub service: Service,
    /// Kept for the process's life: the engine's state directory.
    _dir: tempfile::TempDir,
}

/// The shared host of a built-in profile (`vdi-mixed`: NVIDIA mdev vGPU and AMD SR-IOV;
/// `dgx-a100`: MIG), made on first use. Locked: one run at a time uses it.
pub fn shared(profile: &'static str) -> MutexGuard<'static, Host> {
    static HOSTS: OnceLock<Mutex<HashMap<&'static str, &'static Mutex<Host>>>> = OnceLock::new();
    let host: &'static Mutex<Host> = *HOSTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(profile)
        .or_insert_with(|| Box::leak(Box::new(Mutex::new(Host::new(profile)))));
    host.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Host {
    /// A fresh host of a built-in profile, reconciled once as the daemon does before serving.
    pub fn new(profile: &str) -> Host {
        let dir = tempfile::tempdir().expect("a temporary state directory");
        let sim = SimHost::new(Profile::builtin(profile).expect("a built-in profile"))
            .expect("the simulated host");
        let engine = Engine::open(EngineConfig::new(dir.path(), hostwire::sim_access(&sim)))
            .expect("the engine");
        engine.reconcile().expect("the first reconcile");
        Host {
            sim,
            service: Service::new(engine),
            _dir: dir,
        }
    }

    /// What the service shows: its slices, allocations and layouts. Two equal snapshots mean
    /// nothing the API can see changed.
    pub fn snapshot(&self) -> String {
        format!(
            "{:?}\n{:?}\n{:?}",
            self.service.slices(),
            self.service.allocations(),
            self.service.layouts()
        )
    }

    /// Releases every allocation and destroys every slice, back to the state after the first
    /// reconcile (the profile's host carries no slice of vgpud's). Panics when the service
    /// refuses: a slice vgpud made must always be destroyable on a healthy host.
    pub fn reset(&self) {
        for a in self.service.allocations() {
            self.service
                .release(a.id)
                .unwrap_or_else(|e| panic!("releasing allocation {}: {e}", a.id));
        }
        for s in self.service.slices() {
            self.service
                .destroy_slice(s.id)
                .unwrap_or_else(|e| panic!("destroying slice {}: {e}", s.id));
        }
    }
}
