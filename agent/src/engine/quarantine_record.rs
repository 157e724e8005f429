//! What a quarantine is: the record kept in the state file, and the refusal it gives.
//!
//! A quarantined GPU gets no new slices and no new allocations (the engine refuses them with
//! [`Quarantine::refusal`]; the scheduler sees it as unhealthy), keeps what it has, and comes
//! back by a successful probe (automatic quarantines only) or by an operator's release.

use ids::PciAddress;
use serde::{Deserialize, Serialize};

/// Who quarantined a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuarantineSource {
    /// vgpud's monitor (an Xid, a lost GPU, a health signal).
    Auto,
    /// An operator, by hand; only an operator releases it.
    Operator,
}

impl QuarantineSource {
    /// `auto` or `operator`.
    pub fn as_str(self) -> &'static str {
        match self {
            QuarantineSource::Auto => "auto",
            QuarantineSource::Operator => "operator",
        }
    }
}

/// How a GPU left quarantine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseHow {
    /// The active probe passed after a quiet period.
    Probe,
    /// An operator released it.
    Operator,
}

impl ReleaseHow {
    /// `probe` or `operator`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseHow::Probe => "probe",
            ReleaseHow::Operator => "operator",
        }
    }
}

/// One quarantined GPU, as the state file keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quarantine {
    /// The GPU.
    pub gpu: PciAddress,
    /// When it was quarantined, seconds since the Unix epoch.
    pub since: u64,
    /// Why, for people (`Xid 79 (GPU has fallen off the bus)`, an operator's words).
    pub reason: String,
    /// Who quarantined it.
    pub source: QuarantineSource,
    /// The Xid that did, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u64>,
}

impl Quarantine {
    /// The refusal a request on the GPU gets: `GPU 0000:07:00.0 is quarantined since
    /// 2026-12-02T16:50:01Z: Xid 79 (GPU has fallen off the bus)`.
    pub fn refusal(&self) -> String {
        format!(
            "GPU {} is quarantined since {}: {}",
            self.gpu,
            rfc3339(self.since),
            self.reason
        )
    }
}

/// Seconds since the Unix epoch as RFC 3339 UTC (`2026-12-02T16:50:01Z`).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, "chrono-Compatible Low-Level Date Algorithms").
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        // date -u -d 2026-12-02T16:50:01Z +%s
        assert_eq!(rfc3339(1_796_230_201), "2026-12-02T16:50:01Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn the_refusal_names_gpu_time_and_reason() {
        let q = Quarantine {
            gpu: "0000:07:00.0".parse().unwrap(),
            since: 1_796_230_201,
            reason: "Xid 79 (GPU has fallen off the bus)".into(),
            source: QuarantineSource::Auto,
            xid: Some(79),
        };
        assert_eq!(
            q.refusal(),
            "GPU 0000:07:00.0 is quarantined since 2026-12-02T16:50:01Z: Xid 79 (GPU has fallen off the bus)"
        );
    }
}
