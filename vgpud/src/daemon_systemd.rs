//! The daemon's side of systemd's notify protocol: `READY=1`, `STATUS=`, `STOPPING=1` and
//! watchdog pings. Outside systemd (no `NOTIFY_SOCKET`) every call does nothing.

use std::time::Duration;

use sd_notify::NotifyState;

/// Talks to the service manager, if there is one.
#[derive(Debug, Clone)]
pub struct Systemd {
    watchdog: Option<Duration>,
}

impl Systemd {
    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` from the environment.
    pub fn from_env() -> Self {
        Self {
            watchdog: sd_notify::watchdog_enabled(),
        }
    }

    /// How often to ping the watchdog: half its timeout, as sd_watchdog_enabled(3) advises.
    pub fn watchdog_period(&self) -> Option<Duration> {
        self.watchdog.map(|t| (t / 2).max(Duration::from_millis(1)))
    }

    /// Start-up is complete; `status` says what is served.
    pub fn ready(&self, status: &str) {
        send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// A one-line status for `systemctl status`.
    pub fn status(&self, status: &str) {
        send(&[NotifyState::Status(status)]);
    }

    /// The daemon is shutting down.
    pub fn stopping(&self, status: &str) {
        send(&[NotifyState::Stopping, NotifyState::Status(status)]);
    }

    /// The daemon is alive.
    pub fn watchdog_ping(&self) {
        send(&[NotifyState::Watchdog]);
    }
}

fn send(states: &[NotifyState]) {
    // The service manager going away is no reason to stop serving; the log says it happened.
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("cannot notify the service manager: {e}");
    }
}
