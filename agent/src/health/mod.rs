//! GPU health: Xid events and health signals classified, bad GPUs quarantined, good ones
//! brought back without restarting the agent.
//!
//! - [`classify`]: which Xids quarantine (NVIDIA's device-plugin rule, configurable);
//! - [`signals`]: which ECC, retired-page, row-remap and clocks-event readings quarantine or
//!   degrade;
//! - [`quarantine`]: the record a quarantine leaves in the state file and the refusal it gives
//!   (the engine enforces it);
//! - [`monitor`]: the Xid wait and the periodic check that feed [`Health`];
//! - [`recovery`]: the quiet period, the active probe and the optional reset that release a GPU;
//! - [`view`]: what the metrics and the CLI read ([`Health::view`]).
//!
//! [`Health`] holds what is not worth a durable write: counters, the last readings, when each
//! GPU last misbehaved. The quarantines themselves are the engine's (in the state file).

pub mod classify;
mod ledger;
pub mod monitor;
/// What a quarantine is: the engine keeps the records, so the types live there.
pub use crate::engine::quarantine_record as quarantine;
pub mod recovery;
pub mod signals;
pub mod view;

use std::sync::Mutex;
use std::time::Duration;

use crate::config::HealthConfig;
use crate::engine::Engine;

use self::classify::XidPolicy;
use self::ledger::Ledger;

/// How health is watched and recovered (`[health]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSettings {
    /// Whether the monitor runs at all.
    pub enabled: bool,
    /// Which Xids quarantine.
    pub xids: XidPolicy,
    /// How long an automatic quarantine waits without a new event before the probe.
    pub quiet_period: Duration,
    /// How often the GPUs are checked (and quiet periods looked at).
    pub check_interval: Duration,
    /// Reset a GPU with no allocated slice before the probe releases it.
    pub reset_before_release: bool,
}

impl Default for HealthSettings {
    fn default() -> Self {
        Self::from_config(&HealthConfig::default())
    }
}

impl HealthSettings {
    /// The settings `[health]` describes.
    pub fn from_config(c: &HealthConfig) -> Self {
        Self {
            enabled: c.enabled,
            xids: XidPolicy::new(&c.ignored_xids, &c.quarantine_xids),
            quiet_period: Duration::from_secs(c.quiet_period_s),
            check_interval: Duration::from_secs(c.check_interval_s),
            reset_before_release: c.reset_before_release,
        }
    }
}

/// The health monitor's state, shared by the monitor threads and the service.
#[derive(Debug)]
pub struct Health {
    engine: Engine,
    settings: HealthSettings,
    ledger: Mutex<Ledger>,
}

impl Health {
    /// Health watching for an engine.
    pub fn new(engine: Engine, settings: HealthSettings) -> Self {
        Self {
            engine,
            settings,
            ledger: Mutex::new(Ledger::default()),
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &HealthSettings {
        &self.settings
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
