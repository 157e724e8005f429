//! Applying declarative layouts ([`super::layout`]): per GPU or selector, the slices it should
//! carry.
//!
//! Applying is diff-based: owned slices that match the layout stay, surplus free ones are
//! destroyed, missing ones are created (largest MIG profiles first, so small instances do not
//! fragment the GPU). An allocated slice is never destroyed: the GPU reports `pending` with the
//! reason until it is released, then the next apply completes. Foreign slices are never touched.
//!
//! A layout also sets what its slices need of the GPU: MIG mode on for MIG slices and MIG-backed
//! vGPU types, off for time-sliced vGPU types and the whole GPU (only while the GPU carries
//! nothing; a change NVML leaves pending waits for a GPU reset, which vgpud never does), and an
//! AMD GPU's partition modes (under an intent, so a crash mid-way is finished by the reconciler).

use std::collections::BTreeSet;

use ids::PciAddress;

use super::error::{EngineError, Result, chain};
use super::events::Event;
use super::handle::Engine;
use super::layout::{GpuFacts, GpuLayoutStatus, Layout, LayoutState, LayoutsView};
use super::layout_mig_mode::ModeStep;
use super::locks::lock;
use super::model::{SliceKind, SliceSpec};
use super::resolve::{check_type, gpus, layout_kind_on};
use super::state::OwnedSlice;

/// Vendor-VFIO vGPUs first: on NVIDIA the first one enables the GPU's VFs, which destroys every
/// MIG GPU instance on it (docs/sysfs.md, "NVIDIA SR-IOV"), so MIG slices come after. Then larger
/// MIG instances first: placing small ones first can make a large one impossible.
fn creation_order(kind: &SliceKind) -> i32 {
    match kind {
        SliceKind::NvidiaVfio { .. } => i32::MIN,
        SliceKind::Mig { profile, .. } => -i32::from(profile.compute_slices()),
        _ => 0,
    }
}

fn status(
    gpu: PciAddress,
    layout: &Layout,
    pending: Vec<String>,
    mut failed: Vec<String>,
) -> GpuLayoutStatus {
    let state = if !failed.is_empty() {
        LayoutState::Failed
    } else if !pending.is_empty() {
        LayoutState::Pending
    } else {
        LayoutState::Applied
    };
    failed.extend(pending);
    GpuLayoutStatus {
        gpu,
        layout: layout.name.clone(),
        state,
        reasons: failed,
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

    /// Checks layouts against the host without changing anything: what [`Engine::set_layouts`]
    /// refuses, so a front end can refuse it before accepting the apply.
    pub fn check_layouts(&self, layouts: &[Layout]) -> Result<()> {
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
                if e.count > super::limits::MAX_COUNT {
                    return Err(EngineError::InvalidRequest(format!(
                        "layout {}: count {} is too large",
                        l.name, e.count
                    )));
                }
            }
        }
        let mut partitions = Vec::new();
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
            partitions.push((dev.address, chosen.first().and_then(|l| l.amd.as_ref())));
            let id = dev.identity();
            for l in chosen {
                if let Some(want) = &l.amd {
                    self.check_partition(&dev, l, want)?;
                }
                let mut kinds = Vec::new();
                for e in &l.slices {
                    match layout_kind_on(self.host(), &id, e.slice_type.trim())? {
                        Some(kind) if e.count > 0 => kinds.push(kind),
                        Some(_) => {}
                        None => {
                            return Err(EngineError::InvalidRequest(format!(
                                "layout {}: GPU {} does not offer {:?}",
                                l.name, dev.address, e.slice_type
                            )));
                        }
                    }
                }
                self.wanted_mig_mode(dev.address, &kinds, l.mig)
                    .map_err(|e| match e {
                        EngineError::InvalidRequest(why) => {
                            EngineError::InvalidRequest(format!("layout {}: {why}", l.name))
                        }
                        e => e,
                    })?;
            }
        }
        self.check_partition_hives(&partitions)?;
        Ok(())
    }

    /// Applies the layouts on the given GPUs (all when empty); returns their status.
    pub(crate) fn apply_layouts_on(&self, only: &[PciAddress]) -> Result<Vec<GpuLayoutStatus>> {
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
        let id = dev.identity();
        for e in &layout.slices {
            match layout_kind_on(self.host(), &id, e.slice_type.trim()) {
                Ok(Some(kind)) => want.push((kind, e.count)),
                Ok(None) => failed.push(format!("GPU {gpu} does not offer {:?}", e.slice_type)),
                Err(e) => failed.push(chain(&e)),
            }
        }
        want.sort_by_key(|(k, _)| creation_order(k));
        let kinds: Vec<SliceKind> = want
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, _)| k.clone())
            .collect();
        let mig = match self.wanted_mig_mode(gpu, &kinds, layout.mig) {
            Ok(m) => m,
            Err(e) => {
                failed.push(chain(&e));
                None
            }
        };
        if let Some(part) = &layout.amd
            && failed.is_empty()
        {
            self.apply_partition(gpu, part, &mut pending, &mut failed)?;
            if !pending.is_empty() || !failed.is_empty() {
                return Ok(status(gpu, layout, pending, failed));
            }
        }
        let owned = self.owned_on(gpu);
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
        if let Some(on) = mig
            && failed.is_empty()
        {
            match self.mig_mode_step(gpu, on, !pending.is_empty())? {
                ModeStep::Ready => {}
                ModeStep::Wait(why) => {
                    pending.push(why);
                    return Ok(status(gpu, layout, pending, failed));
                }
                ModeStep::Fail(why) => {
                    failed.push(why);
                    return Ok(status(gpu, layout, pending, failed));
                }
            }
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
        Ok(status(gpu, layout, pending, failed))
    }

    /// Destroys an owned slice the layout does not want, unless it is allocated or in use.
    /// Destroys a surplus free slice; an allocated or busy one makes the GPU pending instead.
    pub(super) fn remove_surplus(
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

impl Engine {
    /// Each GPU with the layout of `layouts` that would select it, after the checks
    /// [`Engine::set_layouts`] makes (an import's dry run shows what the apply would do).
    pub(super) fn layout_choices<'a>(
        &self,
        layouts: &'a [Layout],
    ) -> Result<Vec<(vfio::PciDevice, Option<&'a Layout>)>> {
        self.check_layouts(layouts)?;
        Ok(self
            .facts()?
            .into_iter()
            .map(|(dev, index, model)| {
                let facts = GpuFacts {
                    dev: &dev,
                    index,
                    model,
                };
                let chosen = layouts.iter().find(|l| l.selector.matches(&facts));
                (dev, chosen)
            })
            .collect())
    }
}
