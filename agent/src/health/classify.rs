//! Which Xids quarantine a GPU: NVIDIA's device-plugin rule, made configurable.
//!
//! NVIDIA's Kubernetes device plugin marks a GPU unhealthy on every critical Xid except a fixed
//! list of application-caused ones, "Application errors: the GPU should still be healthy":
//! 13, 31, 43, 45, 68 and 109 (`internal/rm/health.go`, `getDisabledHealthCheckXids`, in
//! github.com/NVIDIA/k8s-device-plugin). Its `DP_DISABLE_HEALTHCHECKS` adds Xids to ignore and
//! `DP_ENABLE_HEALTHCHECKS` re-enables some, winning over both lists; vgpud's
//! `[health] ignored_xids` and `[health] quarantine_xids` do the same. Unknown Xids quarantine,
//! as there: a code this build has not heard of is no reason to trust the GPU.
//!
//! The descriptions are NVIDIA's Xid catalogue ("Xid Errors", docs.nvidia.com/deploy/xid-errors,
//! and its Ampere-and-newer catalogue "Analyzing Xid Errors with the Xid Catalog"); the dynamic
//! page retirement document names 48, 63 and 64 (docs.nvidia.com/deploy/dynamic-page-retirement).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The device plugin's application-caused Xids: they do not quarantine unless configured to.
pub const APPLICATION_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];

/// What an Xid does to its GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum XidAction {
    /// The GPU is quarantined.
    Quarantine,
    /// Counted and logged; the GPU stays in service.
    Ignore,
}

impl XidAction {
    /// The label value (`quarantine`, `ignore`).
    pub fn as_str(self) -> &'static str {
        match self {
            XidAction::Quarantine => "quarantine",
            XidAction::Ignore => "ignore",
        }
    }
}

/// The classification rule in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidPolicy {
    ignored: BTreeSet<u64>,
    quarantine: BTreeSet<u64>,
}

impl Default for XidPolicy {
    fn default() -> Self {
        Self::new(&APPLICATION_XIDS, &[])
    }
}

impl XidPolicy {
    /// `ignored` do not quarantine; `quarantine` always do, even when also in `ignored`
    /// (as `DP_ENABLE_HEALTHCHECKS` wins over `DP_DISABLE_HEALTHCHECKS`); every other Xid
    /// quarantines.
    pub fn new(ignored: &[u64], quarantine: &[u64]) -> Self {
        Self {
            ignored: ignored.iter().copied().collect(),
            quarantine: quarantine.iter().copied().collect(),
        }
    }

    /// What `xid` does.
    pub fn classify(&self, xid: u64) -> XidAction {
        if self.quarantine.contains(&xid) || !self.ignored.contains(&xid) {
            XidAction::Quarantine
        } else {
            XidAction::Ignore
        }
    }
}

/// NVIDIA's description of an Xid, for the codes vgpud's policy names; `None` for others.
pub fn describe(xid: u64) -> Option<&'static str> {
    Some(match xid {
        13 => "Graphics Engine Exception",
        31 => "GPU memory page fault",
        43 => "GPU stopped processing",
        45 => "Preemptive cleanup, due to previous errors",
        48 => "Double Bit ECC Error",
        63 => "ECC page retirement or row remapping recording event",
        64 => "ECC page retirement or row remapper recording failure",
        68 => "Video processor exception",
        74 => "NVLink Error",
        79 => "GPU has fallen off the bus",
        92 => "High single-bit ECC error rate",
        94 => "Contained ECC error",
        95 => "Uncontained ECC error",
        109 => "Context Switch Timeout Error",
        _ => return None,
    })
}

/// `Xid 79 (GPU has fallen off the bus)`, or `Xid 200` for a code without a description.
pub fn xid_reason(xid: u64) -> String {
    match describe(xid) {
        Some(d) => format!("Xid {xid} ({d})"),
        None => format!("Xid {xid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_plugin_rule_by_default() {
        let p = XidPolicy::default();
        for xid in APPLICATION_XIDS {
            assert_eq!(p.classify(xid), XidAction::Ignore, "Xid {xid}");
        }
        for xid in [48, 63, 64, 74, 79, 92, 94, 95, 1000] {
            assert_eq!(p.classify(xid), XidAction::Quarantine, "Xid {xid}");
        }
    }

    #[test]
    fn configured_lists_change_the_rule_and_quarantine_wins() {
        let p = XidPolicy::new(&[13, 79], &[13]);
        assert_eq!(p.classify(13), XidAction::Quarantine);
        assert_eq!(p.classify(79), XidAction::Ignore);
        assert_eq!(
            p.classify(31),
            XidAction::Quarantine,
            "not in the configured list"
        );
    }

    #[test]
    fn reasons_name_the_code_and_what_it_means() {
        assert_eq!(xid_reason(79), "Xid 79 (GPU has fallen off the bus)");
        assert_eq!(xid_reason(4242), "Xid 4242");
    }
}
