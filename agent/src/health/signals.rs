//! What the GPUs' health signals mean for their service: quarantine, degraded, or fine.
//!
//! Sources: NVIDIA, "GPU Memory Error Management" (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt:
//! uncorrectable errors end the application that met them; "Row-remapping failure flag" is an
//! RMA criterion; pending remaps and retirements take effect at the next GPU reset) and
//! "Dynamic Page Retirement" (docs.nvidia.com/deploy/dynamic-page-retirement: pages pending
//! retirement stay usable until the driver reloads); NVML API reference for the counters and
//! `nvmlClocksEventReasons`. The rule:
//!
//! - volatile double-bit (uncorrectable) ECC count went up → quarantine: memory returned wrong
//!   data to someone since the last reading;
//! - pages pending retirement → quarantine until a reset retires them (new work must not land
//!   on memory known to be bad);
//! - a row remapping failed → quarantine (the bank has no spare rows; NVIDIA's RMA criterion);
//! - hardware slowdown, thermal slowdown (hardware or software) or power brake → degraded: the
//!   GPU works, slower. Software power capping alone is normal under load and says nothing.

use gpu::{
    CLOCK_EVENT_HW_POWER_BRAKE, CLOCK_EVENT_HW_SLOWDOWN, CLOCK_EVENT_HW_THERMAL,
    CLOCK_EVENT_SW_THERMAL, HealthSignals,
};

/// What one reading says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignalVerdict {
    /// Why the GPU must be quarantined, when it must.
    pub quarantine: Option<String>,
    /// Something new went wrong (new double-bit errors), not only a flag that stays up: it
    /// restarts a quarantined GPU's quiet period.
    pub news: bool,
    /// Why it is degraded (slowdowns); empty when it is not.
    pub degraded: Vec<String>,
}

/// Judges a reading against the previous one (`None`: the first; volatile counts start at 0
/// when the driver loads, so any double-bit error in a first reading is news).
pub fn judge(previous: Option<&HealthSignals>, now: &HealthSignals) -> SignalVerdict {
    let mut bad = Vec::new();
    let before = previous.and_then(|p| p.ecc_dbe_volatile).unwrap_or(0);
    let new_dbe = now.ecc_dbe_volatile.filter(|d| *d > before);
    if let Some(dbe) = new_dbe {
        bad.push(format!(
            "{} new double-bit ECC errors (volatile count {dbe})",
            dbe - before
        ));
    }
    if now.retired_pending == Some(true) {
        bad.push("memory pages are pending retirement (a GPU reset retires them)".to_owned());
    }
    if now.remap_failure == Some(true) {
        bad.push("a memory row remapping failed".to_owned());
    }
    SignalVerdict {
        quarantine: (!bad.is_empty()).then(|| bad.join("; ")),
        news: new_dbe.is_some(),
        degraded: slowdowns(now.clock_event_reasons.unwrap_or(0)),
    }
}

/// The slowdowns a clocks-event bitmask names.
fn slowdowns(reasons: u64) -> Vec<String> {
    [
        (CLOCK_EVENT_HW_SLOWDOWN, "hardware slowdown"),
        (CLOCK_EVENT_HW_THERMAL, "hardware thermal slowdown"),
        (CLOCK_EVENT_SW_THERMAL, "software thermal slowdown"),
        (CLOCK_EVENT_HW_POWER_BRAKE, "hardware power brake slowdown"),
    ]
    .into_iter()
    .filter(|(bit, _)| reasons & bit != 0)
    .map(|(_, what)| format!("clocks lowered: {what}"))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> HealthSignals {
        HealthSignals {
            ecc_sbe_volatile: Some(3),
            ecc_dbe_volatile: Some(0),
            remap_failure: Some(false),
            clock_event_reasons: Some(gpu::CLOCK_EVENT_SW_POWER_CAP),
            ..HealthSignals::default()
        }
    }

    #[test]
    fn a_healthy_reading_and_power_capping_are_fine() {
        assert_eq!(judge(None, &healthy()), SignalVerdict::default());
        assert_eq!(
            judge(None, &HealthSignals::default()),
            SignalVerdict::default()
        );
    }

    #[test]
    fn new_double_bit_errors_quarantine_old_ones_do_not() {
        let mut now = healthy();
        now.ecc_dbe_volatile = Some(2);
        let v = judge(Some(&healthy()), &now);
        assert_eq!(
            v.quarantine.as_deref(),
            Some("2 new double-bit ECC errors (volatile count 2)")
        );
        assert!(v.news);
        assert_eq!(judge(Some(&now), &now).quarantine, None);
    }

    #[test]
    fn pending_retirement_and_remap_failure_quarantine() {
        let mut now = healthy();
        now.retired_pending = Some(true);
        now.remap_failure = Some(true);
        let v = judge(Some(&healthy()), &now);
        assert!(!v.news, "flags that stay up are not news");
        let why = v.quarantine.unwrap_or_default();
        assert!(why.contains("pending retirement"), "{why}");
        assert!(why.contains("row remapping failed"), "{why}");
    }

    #[test]
    fn thermal_and_power_slowdowns_degrade_only() {
        let mut now = healthy();
        now.clock_event_reasons = Some(CLOCK_EVENT_HW_THERMAL | CLOCK_EVENT_HW_POWER_BRAKE);
        let v = judge(None, &now);
        assert_eq!(v.quarantine, None);
        assert_eq!(v.degraded.len(), 2, "{:?}", v.degraded);
    }
}
