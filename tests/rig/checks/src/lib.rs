//! Scenarios that exercise the real host-access code (`sysfs::RealSysfs` and the device crates'
//! primitive operations) on a real Linux kernel inside the QEMU rig, and the very same scenarios
//! on the simulator, so that the two can be compared observation by observation.
//!
//! Each scenario records *checks* (pass/fail with a reason, about the kernel's documented
//! behaviour) and *observations* (what the host answered: counts, errno names, drivers). The rig
//! passes when every check passes on the kernel and the simulator's observations equal the
//! kernel's.

pub mod bench;
pub mod engine_phases;
pub mod hotplug_phase;
pub mod libvirt_phase;
mod scenarios;

use std::collections::BTreeMap;

pub use scenarios::{find_pf, run_all};

/// The outcome of one check.
#[derive(Debug, Clone)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it held.
    pub passed: bool,
    /// What was seen.
    pub detail: String,
}

/// Everything a run produced.
#[derive(Debug, Default)]
pub struct Report {
    /// Checks in order.
    pub checks: Vec<Check>,
    /// Observations by key, compared between kernel and simulator.
    pub observations: BTreeMap<String, String>,
}

impl Report {
    /// Records a check.
    pub fn check(&mut self, name: &str, passed: bool, detail: impl Into<String>) {
        self.checks.push(Check {
            name: name.to_owned(),
            passed,
            detail: detail.into(),
        });
    }
    /// Records an observation.
    pub fn observe(&mut self, key: &str, value: impl ToString) {
        self.observations.insert(key.to_owned(), value.to_string());
    }
    /// Number of failed checks.
    pub fn failures(&self) -> usize {
        self.checks.iter().filter(|c| !c.passed).count()
    }
    /// Prints the checks and the summary line in libtest's spirit.
    pub fn print(&self, label: &str) {
        for c in &self.checks {
            println!(
                "{label}: {} {}: {}",
                if c.passed { "PASS" } else { "FAIL" },
                c.name,
                c.detail
            );
        }
        self.print_summary(label);
    }

    /// Prints the summary line only (for a run that printed its checks as they happened).
    pub fn print_summary(&self, label: &str) {
        println!(
            "{label}: {} passed, {} failed",
            self.checks.len() - self.failures(),
            self.failures()
        );
    }
}

/// Compares the simulator's observations with the kernel's; returns the differences.
pub fn compare(kernel: &BTreeMap<String, String>, sim: &BTreeMap<String, String>) -> Vec<String> {
    let mut diffs = Vec::new();
    for (key, k) in kernel {
        match sim.get(key) {
            Some(s) if s == k => {}
            Some(s) => diffs.push(format!("{key}: kernel {k:?}, simulator {s:?}")),
            None => diffs.push(format!("{key}: kernel {k:?}, simulator did not observe it")),
        }
    }
    for key in sim.keys().filter(|k| !kernel.contains_key(*k)) {
        diffs.push(format!("{key}: simulator only ({:?})", sim[key]));
    }
    diffs
}

/// Names an errno the way the kernel headers do, for readable observations.
pub fn errno_name(errno: Option<i32>) -> String {
    let Some(e) = errno else {
        return "no errno".to_owned();
    };
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ERANGE => "ERANGE",
        libc::ENOSPC => "ENOSPC",
        libc::EACCES => "EACCES",
        libc::EUSERS => "EUSERS",
        libc::EDQUOT => "EDQUOT",
        libc::ENOMEM => "ENOMEM",
        libc::E2BIG => "E2BIG",
        _ => return format!("errno {e}"),
    };
    name.to_owned()
}
