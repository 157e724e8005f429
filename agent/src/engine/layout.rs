//! Declarative layouts, the types: per GPU or selector, the slices it should carry, and each
//! GPU's status. Applying them is [`super::layout_apply`]'s; these types are also the store's
//! and the front ends', so they import nothing from the apply logic.

use ids::PciAddress;
use serde::{Deserialize, Serialize};

use super::error::{EngineError, Result};

/// The slices a set of GPUs should carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    /// A name for status and logs.
    pub name: String,
    /// Which GPUs; every criterion given must match (none given: every GPU).
    #[serde(default)]
    pub selector: GpuSelector,
    /// What each selected GPU carries.
    pub slices: Vec<LayoutEntry>,
    /// AMD partition modes and VF count the selected GPUs are set to before their slices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amd: Option<AmdPartition>,
    /// The MIG mode the selected GPUs must be in. Absent: whatever the slices need (on for MIG
    /// slices and MIG-backed vGPU types, off for time-sliced types and whole GPUs, unchanged for
    /// none); given, it must agree with them. mig-parted's `mig-enabled` becomes this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<bool>,
}

/// An AMD GPU's compute and memory partition modes and how many VFs to enable in them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmdPartition {
    /// Compute partition mode (`SPX`, `DPX`, `TPX`, `QPX`, `CPX`).
    pub compute: String,
    /// Memory partition mode (`NPS1`, `NPS2`, `NPS4`, `NPS8`).
    pub memory: String,
    /// VFs to enable; absent: as many as the mode supports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vfs: Option<u32>,
}

/// Which GPUs a layout is for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSelector {
    /// GPUs by PCI address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<PciAddress>,
    /// GPUs by index in PCI address order (0 = the first GPU).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub indices: Vec<u32>,
    /// GPUs by PCI id, `vendor:device` in hex (`10de:20b2`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pci_ids: Vec<String>,
    /// GPUs whose model name (as the inventory shows it) contains this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// `count` slices of one type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutEntry {
    /// The type, as in an allocation request.
    #[serde(rename = "type")]
    pub slice_type: String,
    /// How many.
    pub count: u32,
}

/// Where a GPU is with its layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayoutState {
    /// The GPU carries exactly what the layout says.
    Applied,
    /// Waiting: allocated or busy slices stand in the way.
    Pending,
    /// The layout cannot be applied as it is.
    Failed,
}

/// One GPU's layout status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuLayoutStatus {
    /// The GPU.
    pub gpu: PciAddress,
    /// The layout that selects it.
    pub layout: String,
    /// Its state.
    pub state: LayoutState,
    /// Why it is pending or failed.
    pub reasons: Vec<String>,
}

/// The declared layouts and each selected GPU's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutsView {
    /// Layouts, as declared.
    pub layouts: Vec<Layout>,
    /// Status per selected GPU, as of the last apply.
    pub status: Vec<GpuLayoutStatus>,
}

/// What a GPU looks like to selectors.
pub(crate) struct GpuFacts<'a> {
    pub(crate) dev: &'a vfio::PciDevice,
    pub(crate) index: u32,
    pub(crate) model: String,
}

impl GpuSelector {
    /// Whether the GPU meets every criterion given.
    pub(crate) fn matches(&self, g: &GpuFacts<'_>) -> bool {
        let pci_id = format!("{}:{}", hex(g.dev.vendor.0), hex(g.dev.device.0));
        (self.addresses.is_empty() || self.addresses.contains(&g.dev.address))
            && (self.indices.is_empty() || self.indices.contains(&g.index))
            && (self.pci_ids.is_empty()
                || self.pci_ids.iter().any(|p| p.eq_ignore_ascii_case(&pci_id)))
            && self
                .model
                .as_ref()
                .is_none_or(|m| g.model.contains(m.as_str()))
    }

    /// Checks the criteria's spelling (PCI ids), touching nothing.
    pub(crate) fn check(&self) -> Result<()> {
        for id in &self.pci_ids {
            let ok = id.split_once(':').is_some_and(|(v, d)| {
                v.len() == 4
                    && d.len() == 4
                    && u16::from_str_radix(v, 16).is_ok()
                    && u16::from_str_radix(d, 16).is_ok()
            });
            if !ok {
                return Err(EngineError::InvalidRequest(format!(
                    "PCI id {:?} is not vendor:device in hex (10de:20b2)",
                    id.chars().take(32).collect::<String>()
                )));
            }
        }
        Ok(())
    }
}

fn hex(v: u16) -> String {
    format!("{v:04x}")
}
