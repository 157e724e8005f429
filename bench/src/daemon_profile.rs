//! The simulated hosts of the daemon benchmark, written as profile files the daemon loads with
//! `--sim FILE`: the built-in DGX A100 (8 GPUs), the same host doubled to 16 GPUs, and the DGX
//! A100 with an `mtty` parent wide enough to hold 1,000 owned slices for the start-up figure.

use std::path::{Path, PathBuf};

use anyhow::Context;
use ids::PciAddress;
use sim::Profile;

/// The 8-GPU host: the built-in profile by name.
pub const DGX: &str = "dgx-a100";

/// Writes the 16-GPU host: the DGX A100 with a second set of eight A100s, each behind a root
/// port of its own on the same root complex (NUMA node) as its twin. Returns the file.
pub fn write_dgx16(dir: &Path) -> anyhow::Result<PathBuf> {
    let mut p = Profile::builtin(DGX)?;
    p.name = "dgx-a100-x16".into();
    let (bridges, gpus) = (p.bridges.clone(), p.gpus.clone());
    for gpu in gpus {
        let parent = gpu.parent.context("a DGX GPU without a root port")?;
        let bridge = bridges
            .iter()
            .find(|b| b.address == parent)
            .context("a GPU's root port is not in the profile")?;
        let mut twin_bridge = bridge.clone();
        // Root ports 0x11-0x1f are unused on the DGX profile; the bus after the GPU's is free.
        twin_bridge.address = PciAddress::new(0, parent.bus(), parent.device() + 0x10, 1)?;
        twin_bridge.iommu_group = None;
        let mut twin = gpu.clone();
        twin.address = PciAddress::new(0, gpu.address.bus() + 1, 0, 0)?;
        twin.parent = Some(twin_bridge.address);
        twin.uuid = None;
        twin.iommu_group = None;
        p.bridges.push(twin_bridge);
        p.gpus.push(twin);
    }
    p.validate()?;
    write(dir, "dgx-a100-x16.toml", &p.to_toml()?)
}

/// Writes the DGX A100 with an `mtty` parent of `ports` ports (the kernel sample's pool is 24,
/// MAX_MTTYS in samples/vfio-mdev/mtty.c; widened here only so that one host can hold 1,000
/// owned slices, each a `mtty-1` device taking one port).
pub fn write_dgx_mtty(dir: &Path, ports: u32) -> anyhow::Result<PathBuf> {
    let mut text = Profile::builtin(DGX)?.to_toml()?;
    text.push_str(&format!(
        "\n[[mdev_parents]]\nname = \"mtty\"\ncapacity = {{ pool = {ports} }}\n\n\
         [[mdev_parents.types]]\nid = \"mtty-1\"\nname = \"Single port serial\"\ncost = 1\n"
    ));
    Profile::from_toml(&text)?.validate()?;
    write(dir, "dgx-a100-mtty.toml", &text)
}

fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    Ok(path)
}
