//! Declarative layouts: per GPU or selector, the slices it should carry.
//!
//! Applying is diff-based: owned slices that match the layout stay, surplus free ones are
//! destroyed, missing ones are created (largest MIG profiles first, so small instances do not
//! fragment the GPU). An allocated slice is never destroyed: the GPU reports `pending` with the
//! reason until it is released, then the next apply completes. Foreign slices are never touched.

use std::collections::BTreeSet;

use ids::PciAddress;
use serde::{Deserialize, Serialize};

use super::error::{EngineError, Result, chain};
use super::events::Event;
use super::model::{SliceKind, SliceSpec};
use super::resolve::{check_type, gpus, kind_on};
use super::state::OwnedSlice;
use super::{Engine, lock};

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
struct GpuFacts<'a> {
    dev: &'a vfio::PciDevice,
    index: u32,
    model: String,
}

impl GpuSelector {
    fn matches(&self, g: &GpuFacts<'_>) -> bool {
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

    fn check(&self) -> Result<()> {
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

/// Larger MIG instances first: placing small ones first can make a large one impossible.
fn creation_order(kind: &SliceKind) -> i32 {
    match kind {
        SliceKind::Mig { profile, .. } => -i32::from(profile.compute_slices()),
        _ => 0,
    }
}

impl Engine {
    /// Replaces the declared layouts (checked against the host first) and applies them.
    pub fn set_layouts(&self, layouts: Vec<Layout>) -> Result<LayoutsView> {
        self.check_layouts(&layouts)?;
        self.write(|d| d.layouts = layouts)?;
        lock(&self.inner.layout_status).clear();
        self.apply_layouts_on(&[])?;
        Ok(self.layouts())
    }

    /// The declared layouts and status per GPU.
    pub fn layouts(&self) -> LayoutsView {
        LayoutsView {
            layouts: self.read(|d| d.layouts.clone()),
            status: lock(&self.inner.layout_status).values().cloned().collect(),
        }
    }

    fn facts(&self) -> Result<Vec<(vfio::PciDevice, u32, String)>> {
        let inv = self.inventory();
        Ok(gpus(self.host())?
            .into_iter()
            .zip(0u32..)
            .map(|(dev, index)| {
                let model = inv
                    .gpus
                    .iter()
                    .find(|g| g.pci_address == dev.address)
                    .map(|g| g.model.clone())
                    .unwrap_or_default();
                (dev, index, model)
            })
            .collect())
    }

    fn check_layouts(&self, layouts: &[Layout]) -> Result<()> {
        let mut names = BTreeSet::new();
        for l in layouts {
            if l.name.is_empty() || !names.insert(l.name.clone()) {
                return Err(EngineError::InvalidRequest(format!(
                    "layout names must be non-empty and unique ({:?})",
                    l.name
                )));
            }
            l.selector.check()?;
            for e in &l.slices {
                check_type(&e.slice_type)?;
                if e.count > super::alloc::MAX_COUNT {
                    return Err(EngineError::InvalidRequest(format!(
                        "layout {}: count {} is too large",
                        l.name, e.count
                    )));
                }
            }
        }
        for (dev, index, model) in self.facts()? {
            let facts = GpuFacts {
                dev: &dev,
                index,
                model,
            };
            let chosen: Vec<&Layout> = layouts
                .iter()
                .filter(|l| l.selector.matches(&facts))
                .collect();
            if chosen.len() > 1 {
                return Err(EngineError::InvalidRequest(format!(
                    "GPU {} is selected by more than one layout ({}, {})",
                    dev.address, chosen[0].name, chosen[1].name
                )));
            }
            for l in chosen {
                for e in &l.slices {
                    if kind_on(self.host(), &dev, e.slice_type.trim())?.is_none() {
                        return Err(EngineError::InvalidRequest(format!(
                            "layout {}: GPU {} does not offer {:?}",
                            l.name, dev.address, e.slice_type
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Applies the layouts on the given GPUs (all when empty); returns their status.
    pub(crate) fn apply_layouts_on(
        &self,
        only: &[PciAddress],
    ) -> Result<Vec<super::layout::GpuLayoutStatus>> {
        let layouts = self.read(|d| d.layouts.clone());
        if layouts.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for (dev, index, model) in self.facts()? {
            if !only.is_empty() && !only.contains(&dev.address) {
                continue;
            }
            let facts = GpuFacts {
                dev: &dev,
                index,
                model,
            };
            let Some(layout) = layouts.iter().find(|l| l.selector.matches(&facts)) else {
                continue;
            };
            let status = self.apply_gpu(&dev, layout)?;
            let changed = lock(&self.inner.layout_status)
                .insert(dev.address, status.clone())
                .is_none_or(|old| old != status);
            if changed {
                self.emit(Event::LayoutStatus {
                    gpu: status.gpu,
                    state: status.state,
                    reasons: status.reasons.clone(),
                });
            }
            out.push(status);
        }
        Ok(out)
    }

    fn apply_gpu(&self, dev: &vfio::PciDevice, layout: &Layout) -> Result<GpuLayoutStatus> {
        let gpu = dev.address;
        let _gpu = self.inner.gpu_locks.lock(gpu);
        let mut pending = Vec::new();
        let mut failed = Vec::new();
        let mut want: Vec<(SliceKind, u32)> = Vec::new();
        for e in &layout.slices {
            match kind_on(self.host(), dev, e.slice_type.trim()) {
                Ok(Some(kind)) => want.push((kind, e.count)),
                Ok(None) => failed.push(format!("GPU {gpu} does not offer {:?}", e.slice_type)),
                Err(e) => failed.push(chain(&e)),
            }
        }
        want.sort_by_key(|(k, _)| creation_order(k));
        let owned: Vec<OwnedSlice> = self.read(|d| {
            d.slices
                .values()
                .filter(|s| s.spec.gpu == gpu)
                .cloned()
                .collect()
        });
        let mut surplus = Vec::new();
        for s in owned {
            match want
                .iter_mut()
                .find(|(k, n)| *n > 0 && s.spec.kind.satisfies(k))
            {
                Some(w) => w.1 -= 1,
                None => surplus.push(s),
            }
        }
        for s in surplus {
            self.remove_surplus(&s, &mut pending, &mut failed)?;
        }
        for (kind, n) in want {
            for _ in 0..n {
                let spec = SliceSpec {
                    gpu: gpu.into(),
                    kind: kind.clone(),
                };
                match self.create_locked(&spec, None) {
                    Ok(_) => {}
                    Err(e @ EngineError::Store(_)) => return Err(e),
                    Err(e) if !pending.is_empty() => {
                        pending.push(format!("cannot create {kind} yet: {e}"));
                        break;
                    }
                    Err(e) => {
                        failed.push(format!("cannot create {kind}: {}", chain(&e)));
                        break;
                    }
                }
            }
        }
        let state = if !failed.is_empty() {
            LayoutState::Failed
        } else if !pending.is_empty() {
            LayoutState::Pending
        } else {
            LayoutState::Applied
        };
        failed.extend(pending);
        Ok(GpuLayoutStatus {
            gpu,
            layout: layout.name.clone(),
            state,
            reasons: failed,
        })
    }

    /// Destroys an owned slice the layout does not want, unless it is allocated or in use.
    fn remove_surplus(
        &self,
        s: &OwnedSlice,
        pending: &mut Vec<String>,
        failed: &mut Vec<String>,
    ) -> Result<()> {
        let holder = self.read(|d| d.holder(s.id).map(|a| a.consumer.clone()));
        if let Some(consumer) = holder {
            pending.push(format!(
                "slice {} ({}) is allocated to {consumer:?}; the layout completes after its release",
                s.id, s.spec.kind
            ));
            return Ok(());
        }
        match self.destroy_locked(s.id) {
            Ok(()) => {}
            Err(e @ EngineError::Store(_)) => return Err(e),
            Err(
                e @ (EngineError::Busy(_) | EngineError::Conflict(_) | EngineError::Timeout { .. }),
            ) => {
                pending.push(format!("slice {} ({}): {e}", s.id, s.spec.kind));
            }
            Err(e) => failed.push(format!("cannot destroy slice {}: {}", s.id, chain(&e))),
        }
        Ok(())
    }
}
