//! The health monitor's threads: one waits on NVML's Xid events, one checks every GPU each
//! `[health] check_interval_s` and probes quarantined ones whose quiet period is over. Both
//! block on NVML, so they are threads of their own, not tasks; they end at the daemon's stop.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agent::health::monitor::XidWait;
use agent::health::recovery::ProbeOutcome;
use agent::service::Service;
use tokio::sync::watch;
use tracing::{info, warn};

/// How long one Xid wait lasts: also how soon the thread sees a stop.
const XID_WAIT_MS: u32 = 500;
/// How often a sleeping thread looks for a stop: no sooner than the Xid thread sees one (one
/// wait), since the daemon's stop waits for both; every 100 ms was a tenth of an idle
/// daemon's wake-ups.
const STOP_POLL: Duration = Duration::from_millis(XID_WAIT_MS as u64);

/// The running monitor threads.
pub(crate) struct HealthThreads(Vec<JoinHandle<()>>);

/// Starts the monitor (nothing when `[health] enabled = false`).
pub(crate) fn spawn(service: &Service, stop: &watch::Receiver<bool>) -> HealthThreads {
    if !service.health().settings().enabled {
        info!("GPU health monitoring is off ([health] enabled = false)");
        return HealthThreads(Vec::new());
    }
    let threads = [
        start("vgpud-xid", service, stop, xid_loop),
        start("vgpud-health", service, stop, check_loop),
    ];
    HealthThreads(threads.into_iter().flatten().collect())
}

impl HealthThreads {
    /// Waits for the threads to see the stop (an NVML call in flight may delay it by its
    /// timeout).
    pub(crate) async fn join(self) {
        let _ = tokio::task::spawn_blocking(move || {
            for t in self.0 {
                let _ = t.join();
            }
        })
        .await;
    }
}

fn start(
    name: &str,
    service: &Service,
    stop: &watch::Receiver<bool>,
    body: fn(&Service, &watch::Receiver<bool>),
) -> Option<JoinHandle<()>> {
    let (service, stop) = (service.clone(), stop.clone());
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || body(&service, &stop))
        .map_err(|e| warn!("cannot start the {name} thread: {e}"))
        .ok()
}

fn stopping(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow()
}

/// Sleeps up to `d`; false when the daemon stops meanwhile.
fn sleep(d: Duration, stop: &watch::Receiver<bool>) -> bool {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if stopping(stop) {
            return false;
        }
        std::thread::sleep(STOP_POLL.min(until - Instant::now()));
    }
    !stopping(stop)
}

fn xid_loop(service: &Service, stop: &watch::Receiver<bool>) {
    let mut last_failure = String::new();
    while !stopping(stop) {
        match service.health().wait_xid(XID_WAIT_MS) {
            XidWait::Event(_) | XidWait::Quiet => last_failure.clear(),
            XidWait::NoNvml => {
                info!("no NVML on this host: no Xid events to watch");
                return;
            }
            XidWait::Failed(why) => {
                // Once per distinct failure: a broken event set must not flood the journal.
                if why != last_failure {
                    warn!("waiting for Xid events failed: {why}; retrying");
                    last_failure = why;
                }
                if !sleep(Duration::from_secs(1), stop) {
                    return;
                }
            }
        }
    }
}

fn check_loop(service: &Service, stop: &watch::Receiver<bool>) {
    let interval = service.health().settings().check_interval;
    loop {
        service.health().check();
        for outcome in service.health().recover() {
            if let ProbeOutcome::Released(gpu) = outcome {
                info!("GPU {gpu} passed its health probe and is back in service");
            }
        }
        if !sleep(interval, stop) {
            return;
        }
    }
}
