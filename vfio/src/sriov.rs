//! SR-IOV: a physical function's VF count and its VFs.

use ids::PciAddress;
use sysfs::{Sysfs, SysfsExt};

use crate::device::Reader;
use crate::{VfioError, device_dir};

/// SR-IOV state of a physical function.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SriovInfo {
    /// Most VFs the function supports (`sriov_totalvfs`).
    pub total_vfs: u32,
    /// VFs enabled now (`sriov_numvfs`).
    pub num_vfs: u32,
    /// The enabled VFs, from the `virtfn<i>` links, ordered by `i`.
    pub vfs: Vec<PciAddress>,
}

/// `None` for a function without SR-IOV (no `sriov_totalvfs`), and when the counts are garbage
/// (recorded as problems).
pub(crate) fn read_sriov(r: &mut Reader<'_>) -> Option<SriovInfo> {
    if !r.exists("sriov_totalvfs") {
        return None;
    }
    let total_vfs = r.parsed::<u32>("sriov_totalvfs");
    let num_vfs = r.parsed::<u32>("sriov_numvfs");
    let vfs = read_virtfns(r);
    let (total_vfs, num_vfs) = (total_vfs?, num_vfs?);
    if vfs.len() != num_vfs as usize {
        r.problems.push(format!(
            "{} says {num_vfs} VFs are enabled but {} virtfn links exist",
            r.dir.join("sriov_numvfs").display(),
            vfs.len()
        ));
    }
    Some(SriovInfo {
        total_vfs,
        num_vfs,
        vfs,
    })
}

/// `virtfn10` must come after `virtfn9`: sort by the number, not the name.
fn read_virtfns(r: &mut Reader<'_>) -> Vec<PciAddress> {
    let names = match r.fs.list_names(&r.dir) {
        Ok((names, _not_utf8)) => names,
        Err(e) => {
            r.note(&e);
            return Vec::new();
        }
    };
    let mut indexed: Vec<(u32, String)> = names
        .into_iter()
        .filter_map(|n| Some((n.strip_prefix("virtfn")?.parse().ok()?, n)))
        .collect();
    indexed.sort();
    indexed
        .into_iter()
        .filter_map(|(_, name)| r.link_parsed(&name))
        .collect()
}

/// The PF's VFs from its `virtfn<i>` links, ordered by `i`.
pub(crate) fn virtfns(fs: &dyn Sysfs, pf: PciAddress) -> Result<Vec<PciAddress>, VfioError> {
    let dir = device_dir(pf);
    let (names, _not_utf8) = fs.list_names(&dir)?;
    let mut indexed: Vec<(u32, String)> = names
        .into_iter()
        .filter_map(|n| Some((n.strip_prefix("virtfn")?.parse().ok()?, n)))
        .collect();
    indexed.sort();
    let mut out = Vec::new();
    for (_, name) in indexed {
        let target = fs.link_name(&dir.join(&name))?;
        let addr = target
            .parse::<PciAddress>()
            .map_err(|e| VfioError::BadDeviceName {
                path: dir.join(&name),
                reason: e.to_string(),
            })?;
        out.push(addr);
    }
    Ok(out)
}

/// Writes `count` to the physical function's `sriov_numvfs` and returns what the kernel reports
/// afterwards: it may enable fewer VFs than asked and still succeed. A refusal keeps the kernel's
/// errno (`EBUSY` when changing one non-zero count to another, `ERANGE` above the total).
pub fn set_num_vfs(fs: &dyn Sysfs, pf: PciAddress, count: u32) -> Result<u32, VfioError> {
    let dir = device_dir(pf);
    if !fs.exists(&dir) {
        return Err(VfioError::DeviceNotFound(pf));
    }
    let path = dir.join("sriov_numvfs");
    if !fs.exists(&path) {
        return Err(VfioError::NotSriov(pf));
    }
    fs.write_str(&path, &count.to_string())?;
    Ok(fs.read_parse::<u32>(&path)?)
}
