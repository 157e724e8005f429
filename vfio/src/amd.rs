//! AMD GPU partition modes as amdgpu shows them in sysfs (the fallback when AMD SMI is absent).

use ids::PciAddress;
use sysfs::{Sysfs, SysfsError};

use crate::device::Reader;
use crate::{VfioError, device_dir};

/// Compute and memory partition modes from amdgpu's sysfs attributes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AmdPartitionSysfs {
    /// `current_compute_partition`, e.g. `SPX`.
    pub current_compute: Option<String>,
    /// `available_compute_partition`, e.g. `SPX, DPX, QPX, CPX`.
    pub available_compute: Vec<String>,
    /// `current_memory_partition`, e.g. `NPS1`.
    pub current_memory: Option<String>,
    /// `available_memory_partition`, e.g. `NPS1, NPS4`.
    pub available_memory: Vec<String>,
    /// Attributes that were garbage or unreadable, one sentence each.
    pub problems: Vec<String>,
}

const FILES: [&str; 4] = [
    "current_compute_partition",
    "available_compute_partition",
    "current_memory_partition",
    "available_memory_partition",
];

/// The partition attributes of `dev`; `None` when it has none of them (not a partitionable
/// amdgpu device).
pub fn amd_partition(
    fs: &dyn Sysfs,
    dev: PciAddress,
) -> Result<Option<AmdPartitionSysfs>, VfioError> {
    let dir = device_dir(dev);
    if !fs.exists(&dir) {
        return Err(VfioError::DeviceNotFound(dev));
    }
    let mut r = Reader {
        fs,
        dir,
        problems: Vec::new(),
    };
    if !FILES.iter().any(|f| r.exists(f)) {
        return Ok(None);
    }
    let current_compute = modes(&mut r, FILES[0]).and_then(single);
    let available_compute = modes(&mut r, FILES[1]).unwrap_or_default();
    let current_memory = modes(&mut r, FILES[2]).and_then(single);
    let available_memory = modes(&mut r, FILES[3]).unwrap_or_default();
    Ok(Some(AmdPartitionSysfs {
        current_compute,
        available_compute,
        current_memory,
        available_memory,
        problems: r.problems,
    }))
}

fn single(mut modes: Vec<String>) -> Option<String> {
    (modes.len() == 1).then(|| modes.remove(0))
}

/// A comma-separated list of mode names (`SPX`, `NPS4`); garbage is a problem and `None`.
fn modes(r: &mut Reader<'_>, name: &str) -> Option<Vec<String>> {
    let text = r.text(name)?;
    let list: Vec<String> = text
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
        .collect();
    let valid = |m: &String| {
        m.len() <= 8
            && m.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    };
    let single_expected = name.starts_with("current_");
    if list.iter().all(valid) && (!single_expected || list.len() == 1) {
        return Some(list);
    }
    r.note(&SysfsError::parse(
        r.dir.join(name),
        format!("{text:?} is not a list of partition modes"),
    ));
    None
}
