//! NVIDIA vendor-specific VFIO vGPU (vGPU 17+): per-VF `nvidia/` attributes.

use std::path::{Path, PathBuf};

use ids::{PciAddress, VgpuTypeId};
use sysfs::{Sysfs, SysfsError, SysfsExt};

use crate::{VfioError, device_dir};

/// One line of `creatable_vgpu_types`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VgpuTypeEntry {
    /// The type id to write to `current_vgpu_type`.
    pub id: VgpuTypeId,
    /// The profile name, e.g. `NVIDIA H200X-1-18C`.
    pub name: String,
}

fn nvidia_attr(vf: PciAddress, name: &str) -> PathBuf {
    device_dir(vf).join("nvidia").join(name)
}

/// Whether the VF has the vendor vGPU interface (`nvidia/current_vgpu_type` exists).
pub fn has_vendor_vgpu(fs: &dyn Sysfs, vf: PciAddress) -> bool {
    fs.exists(&nvidia_attr(vf, "current_vgpu_type"))
}

/// The vGPU types the VF can take now (the list shrinks as the GPU's framebuffer fills). An empty
/// file is an empty list.
pub fn creatable_vgpu_types(
    fs: &dyn Sysfs,
    vf: PciAddress,
) -> Result<Vec<VgpuTypeEntry>, VfioError> {
    let path = nvidia_attr(vf, "creatable_vgpu_types");
    let text = fs.read_text(&path)?;
    Ok(parse_creatable(&path, &text)?)
}

/// `<id> : <name>` per line; some drivers print a `ID : vGPU Name` header first, which is
/// skipped. Any other line that does not parse fails the whole list rather than hiding a type.
fn parse_creatable(path: &Path, text: &str) -> Result<Vec<VgpuTypeEntry>, SysfsError> {
    let mut entries = Vec::new();
    for (index, line) in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let bad = |why: &str| SysfsError::parse(path, format!("line {line:?}: {why}"));
        let (id, name) = line
            .split_once(':')
            .ok_or_else(|| bad("expected <id> : <name>"))?;
        let (id, name) = (id.trim(), name.trim());
        let is_header = index == 0 && id.eq_ignore_ascii_case("ID");
        if is_header {
            continue;
        }
        let id = id.parse::<VgpuTypeId>().map_err(|e| bad(&e.to_string()))?;
        if name.is_empty() {
            return Err(bad("the type has no name"));
        }
        entries.push(VgpuTypeEntry {
            id,
            name: name.to_owned(),
        });
    }
    Ok(entries)
}

/// The vGPU type the VF has now; `0` in sysfs reads as `None`.
pub fn current_vgpu_type(fs: &dyn Sysfs, vf: PciAddress) -> Result<Option<VgpuTypeId>, VfioError> {
    let id: u32 = fs.read_parse(&nvidia_attr(vf, "current_vgpu_type"))?;
    Ok(VgpuTypeId::new(id))
}

/// Creates the vGPU (writes the type id) or destroys it (`None` writes `0`). The driver's errno is
/// kept in the error; callers read [`current_vgpu_type`] back to confirm.
pub fn set_current_vgpu_type(
    fs: &dyn Sysfs,
    vf: PciAddress,
    ty: Option<VgpuTypeId>,
) -> Result<(), VfioError> {
    let value = ty.map_or(0, |t| t.get()).to_string();
    fs.write_str(&nvidia_attr(vf, "current_vgpu_type"), &value)?;
    Ok(())
}

/// Where the driver put a VF's MIG-backed vGPU: `nvidia/gpu_instance_id` and
/// `nvidia/placement_id`, which the driver fills in when the type is written (kubevirt issue
/// 17642 lists both files; bigstack-oss/cubecos's GPU configuration code reads them back and
/// found `gpu_instance_id` matching the carved instance every time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VgpuGpuInstance {
    /// The MIG GPU instance id the vGPU sits in.
    pub gpu_instance_id: u32,
    /// The driver's placement id. Sources disagree on what it counts: the GI's start slot, or
    /// the vGPU's offset inside its GI (cubecos); callers decide by `gpu_instance_id` alone.
    pub placement_id: u32,
}

/// The GPU instance the VF's vGPU sits in; `None` while the VF has no vGPU (the driver answers
/// `ENXIO` then) and on drivers without the files (`ENOENT`).
pub fn vgpu_gpu_instance(
    fs: &dyn Sysfs,
    vf: PciAddress,
) -> Result<Option<VgpuGpuInstance>, VfioError> {
    let (Some(gpu_instance_id), Some(placement_id)) = (
        read_placement_attr(fs, vf, "gpu_instance_id")?,
        read_placement_attr(fs, vf, "placement_id")?,
    ) else {
        return Ok(None);
    };
    Ok(Some(VgpuGpuInstance {
        gpu_instance_id,
        placement_id,
    }))
}

/// One of the two read-back attributes; ENXIO (no vGPU yet) and ENOENT (older driver) are `None`.
fn read_placement_attr(
    fs: &dyn Sysfs,
    vf: PciAddress,
    name: &str,
) -> Result<Option<u32>, VfioError> {
    match fs.read_parse::<u32>(&nvidia_attr(vf, name)) {
        Ok(v) => Ok(Some(v)),
        Err(e) if matches!(e.errno(), Some(libc::ENXIO | libc::ENOENT)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<VgpuTypeEntry>, SysfsError> {
        parse_creatable(Path::new("/x/creatable_vgpu_types"), text)
    }

    #[test]
    fn creatable_lines() {
        let list =
            parse("ID    : vGPU Name\n1414  : NVIDIA H200X-1-18C\n1415 : NVIDIA H200X-2-35C\n")
                .unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(
            (list[0].id.get(), list[0].name.as_str()),
            (1414, "NVIDIA H200X-1-18C")
        );
        assert_eq!(list[1].id.get(), 1415);
        assert!(parse("").unwrap().is_empty());
        assert_eq!(parse("  1414 : A : B\n").unwrap()[0].name, "A : B");
    }

    #[test]
    fn creatable_garbage() {
        for bad in [
            "1414\n",
            "1414 :\n",
            "0 : zero\n",
            "1414 : A\nnope : B\n",
            "x1 : A\n1 : B\n",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(
                sysfs::error_chain(&err).contains("creatable_vgpu_types"),
                "{bad:?}"
            );
        }
    }
}
