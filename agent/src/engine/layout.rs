//! Declarative layouts: per GPU or selector, the slices it should carry.
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
use serde::{Deserialize, Serialize};

use super::backend::mig_profile_id;
use super::error::{EngineError, Result, chain};
use super::events::Event;
use super::model::{SliceKind, SliceSpec};
use super::resolve::{check_type, gpus, layout_kind_on, mig_mode};
use super::state::OwnedSlice;
use super::vfs;
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

/// Most VFs a compute mode can carry, where the mode fixes it: one per compute partition. CPX
/// has one partition per XCD, which only the SR-IOV total bounds here.
fn mode_vf_limit(mode: &str) -> Option<u32> {
    match mode {
        "SPX" => Some(1),
        "DPX" => Some(2),
        "TPX" => Some(3),
        "QPX" => Some(4),
        _ => None,
    }
}

/// Whether the GPU is in the asked modes with the asked VFs enabled (any count, but some, when
/// the layout leaves it to the mode).
fn partition_reached(now: &gpu::PartitionState, want: &AmdPartition, enabled: u32) -> bool {
    now.compute == want.compute
        && now.memory == want.memory
        && want.vfs.is_none_or(|n| n == enabled)
        && (enabled > 0 || want.vfs == Some(0))
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
                if let Some(want) = &l.amd {
                    self.check_partition(&dev, l, want)?;
                }
                let mut kinds = Vec::new();
                for e in &l.slices {
                    match layout_kind_on(self.host(), &dev, e.slice_type.trim())? {
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
            match layout_kind_on(self.host(), dev, e.slice_type.trim()) {
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

impl Engine {
    /// Refuses a partition the GPU cannot take, before anything is touched.
    fn check_partition(
        &self,
        dev: &vfio::PciDevice,
        l: &Layout,
        want: &AmdPartition,
    ) -> Result<()> {
        let gpu = dev.address;
        let bad = |why: String| EngineError::InvalidRequest(format!("layout {}: {why}", l.name));
        let amd = self
            .host()
            .amd()
            .filter(|_| dev.vendor == ids::PciVendorId::AMD)
            .ok_or_else(|| bad(format!("GPU {gpu} has no AMD SMI partition modes")))?;
        let timeout = self.host().timeout();
        let now = amd.partition(gpu).map_err(|e| {
            EngineError::from_amd(
                format!("cannot read partitions of GPU {gpu}"),
                gpu,
                timeout,
                e,
            )
        })?;
        if !now.compute_available.contains(&want.compute) {
            return Err(bad(format!(
                "GPU {gpu} offers compute modes {:?}, not {:?}",
                now.compute_available, want.compute
            )));
        }
        if !now.memory_available.contains(&want.memory) {
            return Err(bad(format!(
                "GPU {gpu} offers memory modes {:?}, not {:?}",
                now.memory_available, want.memory
            )));
        }
        let total = dev.sriov.as_ref().map_or(0, |s| s.total_vfs);
        let mut limit = mode_vf_limit(&want.compute).unwrap_or(total).min(total);
        if now.compute == want.compute
            && let Ok(c) = amd.num_vf(gpu)
        {
            limit = limit.min(c.supported);
        }
        let vf_slices: u32 = l
            .slices
            .iter()
            .filter(|e| e.slice_type.trim() == "vf")
            .map(|e| e.count)
            .sum();
        let asked = want.vfs.unwrap_or(limit);
        if asked > limit || vf_slices > asked {
            return Err(bad(format!(
                "GPU {gpu} supports at most {limit} VFs in {}; {asked} VFs and {vf_slices} VF slices asked",
                want.compute
            )));
        }
        Ok(())
    }

    /// Brings the GPU to the partition modes and VF count; the slices follow. Called with the
    /// GPU lock held. The change runs under an intent opened before its first step and closed
    /// after its last: a crash (or a failure) mid-way leaves it open, and the reconciler
    /// finishes it before the agent reports ready.
    fn apply_partition(
        &self,
        gpu: PciAddress,
        want: &AmdPartition,
        pending: &mut Vec<String>,
        failed: &mut Vec<String>,
    ) -> Result<()> {
        let host = self.host();
        let Some(amd) = host.amd() else {
            failed.push(format!("GPU {gpu}: AMD SMI is not available"));
            return Ok(());
        };
        let now = match amd.partition(gpu) {
            Ok(p) => p,
            Err(e) => {
                let e = EngineError::from_amd(
                    format!("cannot read partitions of GPU {gpu}"),
                    gpu,
                    host.timeout(),
                    e,
                );
                failed.push(chain(&e));
                return Ok(());
            }
        };
        let enabled = host.vfs(gpu)?.len() as u32;
        if partition_reached(&now, want, enabled) {
            return Ok(());
        }
        if !self.clear_gpu_for_partition(gpu, pending, failed)? {
            return Ok(());
        }
        let n = self.write(|d| d.open_partition_intent(gpu.into(), want.clone()))?;
        match self.partition_steps(gpu, want) {
            Ok(()) => {
                self.write(|d| d.intents.remove(&n))?;
                tracing::info!(%gpu, compute = %want.compute, memory = %want.memory, "partition changed");
            }
            Err(e @ EngineError::Store(_)) => return Err(e),
            Err(e) => failed.push(chain(&e)),
        }
        Ok(())
    }

    /// The steps of a partition change, each only where the GPU still differs: VFs off, memory
    /// mode, compute mode, the asked VF count on (read back). Run by a layout under its intent,
    /// and by the reconciler to finish an intent a crash left open.
    pub(crate) fn partition_steps(&self, gpu: PciAddress, want: &AmdPartition) -> Result<()> {
        let host = self.host();
        let amd = host.amd().ok_or_else(|| {
            EngineError::Unsupported(format!("GPU {gpu}: AMD SMI is not available"))
        })?;
        let timeout = host.timeout();
        let amd_err = |what: String, e| EngineError::from_amd(what, gpu, timeout, e);
        let now = amd
            .partition(gpu)
            .map_err(|e| amd_err(format!("cannot read partitions of GPU {gpu}"), e))?;
        let enabled = host.vfs(gpu)?.len() as u32;
        if partition_reached(&now, want, enabled) {
            return Ok(());
        }
        if enabled > 0 {
            if vfs::in_use(host, gpu, &[])? {
                return Err(EngineError::Busy(format!(
                    "GPU {gpu} has VFs in use outside vgpud; the partition change waits for them"
                )));
            }
            vfs::set_count(host, gpu, 0).map_err(|e| {
                EngineError::host(
                    format!("cannot disable the VFs of GPU {gpu}"),
                    e.errno(),
                    Box::new(e),
                )
            })?;
        }
        if now.memory != want.memory {
            amd.set_memory_partition(gpu, &want.memory).map_err(|e| {
                amd_err(
                    format!("cannot set memory partition {} on GPU {gpu}", want.memory),
                    e,
                )
            })?;
        }
        if now.compute != want.compute {
            amd.set_compute_partition(gpu, &want.compute).map_err(|e| {
                amd_err(
                    format!("cannot set compute partition {} on GPU {gpu}", want.compute),
                    e,
                )
            })?;
        }
        let supported = amd
            .num_vf(gpu)
            .map_err(|e| amd_err(format!("cannot read VFs of GPU {gpu}"), e))?
            .supported;
        let asked = want.vfs.unwrap_or(supported);
        if asked > supported {
            return Err(EngineError::Unsupported(format!(
                "GPU {gpu} supports {supported} VFs in {}, {asked} asked",
                want.compute
            )));
        }
        if asked > 0 {
            let got = vfs::set_count(host, gpu, asked).map_err(|e| {
                EngineError::host(
                    format!("cannot enable {asked} VFs on GPU {gpu}"),
                    e.errno(),
                    Box::new(e),
                )
            })?;
            if got < asked {
                return Err(EngineError::NoCapacity(format!(
                    "GPU {gpu} enabled {got} of the {asked} VFs asked"
                )));
            }
        }
        Ok(())
    }

    /// Destroys the GPU's free owned slices so its VFs can go; false (with the reason) while an
    /// allocated slice or a VF someone else uses stands in the way.
    fn clear_gpu_for_partition(
        &self,
        gpu: PciAddress,
        pending: &mut Vec<String>,
        failed: &mut Vec<String>,
    ) -> Result<bool> {
        let owned: Vec<OwnedSlice> = self.read(|d| {
            d.slices
                .values()
                .filter(|s| s.spec.gpu == gpu)
                .cloned()
                .collect()
        });
        let allocated = self.read(|d| owned.iter().any(|s| d.holder(s.id).is_some()));
        for s in &owned {
            // An allocated slice blocks the change: keep the free ones until it can go too.
            if allocated && self.read(|d| d.holder(s.id).is_none()) {
                continue;
            }
            self.remove_surplus(s, pending, failed)?;
        }
        if !pending.is_empty() || !failed.is_empty() {
            pending.iter_mut().for_each(|r| {
                r.push_str("; the partition change waits for it");
            });
            return Ok(false);
        }
        if vfs::in_use(self.host(), gpu, &[])? {
            pending.push(format!(
                "GPU {gpu} has VFs in use outside vgpud; the partition change waits for them"
            ));
            return Ok(false);
        }
        Ok(true)
    }
}

/// Where a GPU's MIG mode is for a layout.
enum ModeStep {
    /// As the layout needs it: the slices can be made.
    Ready,
    /// Not yet, with why (slices on the GPU, a GPU reset to come).
    Wait(String),
    /// Cannot be, with why.
    Fail(String),
}

impl Engine {
    /// The MIG mode the kinds need: on for MIG slices and MIG-backed vGPU types, off for
    /// time-sliced vGPU types and the whole GPU, `None` when they do not care; `declared` (the
    /// layout's `mig`) decides when they do not care and must agree when they do. Both at once
    /// is `invalid_request`.
    fn wanted_mig_mode(
        &self,
        gpu: PciAddress,
        kinds: &[SliceKind],
        declared: Option<bool>,
    ) -> Result<Option<bool>> {
        let needed = self.mig_mode_needed(gpu, kinds)?;
        match (needed, declared) {
            (Some((need, why)), Some(said)) if need != said => {
                Err(EngineError::InvalidRequest(format!(
                    "GPU {gpu}: {why} needs MIG mode {}, but the layout sets it {}",
                    on_off(need),
                    on_off(said)
                )))
            }
            (Some((need, _)), _) => Ok(Some(need)),
            (None, said) => Ok(said),
        }
    }

    /// What the kinds need of MIG mode, with the kind that needs it.
    fn mig_mode_needed(
        &self,
        gpu: PciAddress,
        kinds: &[SliceKind],
    ) -> Result<Option<(bool, String)>> {
        let (mut on, mut off) = (None, None);
        for kind in kinds {
            let needs_on = match kind {
                SliceKind::Mig { .. } => true,
                SliceKind::NvidiaVfio { vgpu_type, .. } => {
                    mig_profile_id(self.host(), gpu, *vgpu_type)?.is_some()
                }
                SliceKind::Passthrough => false,
                SliceKind::Mdev { .. } | SliceKind::SriovVf => continue,
            };
            let slot = if needs_on { &mut on } else { &mut off };
            slot.get_or_insert_with(|| kind.to_string());
        }
        match (on, off) {
            (Some(a), Some(b)) => Err(EngineError::InvalidRequest(format!(
                "GPU {gpu}: {a} needs MIG mode on and {b} needs it off; one GPU cannot carry both"
            ))),
            (Some(a), None) => Ok(Some((true, a))),
            (None, Some(b)) => Ok(Some((false, b))),
            (None, None) => Ok(None),
        }
    }

    /// Brings the GPU's MIG mode to `on`: only while the GPU carries no slice (`blocked`: the
    /// layout already waits for one), never by resetting the GPU. Called with the GPU lock held.
    fn mig_mode_step(&self, gpu: PciAddress, on: bool, blocked: bool) -> Result<ModeStep> {
        let host = self.host();
        let what = if on { "on" } else { "off" };
        let mode = match mig_mode(host, gpu) {
            Ok(Some(m)) => m,
            // No MIG, or NVML does not see the GPU (bound to vfio-pci): nothing to turn off.
            Ok(None) if !on => return Ok(ModeStep::Ready),
            Ok(None) => {
                return Ok(ModeStep::Fail(format!(
                    "GPU {gpu} has no MIG mode NVML can set"
                )));
            }
            Err(e) => return Ok(ModeStep::Fail(chain(&e))),
        };
        let (nvml, index) = (host.nvml()?, host.nvml_index(gpu)?);
        let set = |why: &str| -> std::result::Result<(), String> {
            nvml.set_mig_mode(index, on).map_err(|e| {
                chain(&host.nvml_err(
                    format!("cannot turn MIG mode {what} on GPU {gpu}{why}"),
                    gpu,
                    e,
                ))
            })
        };
        if mode.current == on {
            // Someone asked for the other mode: withdraw it before a reset makes it happen.
            if mode.pending != on
                && let Err(why) = set(" (withdrawing a pending change)")
            {
                return Ok(ModeStep::Fail(why));
            }
            return Ok(ModeStep::Ready);
        }
        let waits = || {
            ModeStep::Wait(format!(
                "GPU {gpu}: MIG mode change waits for a GPU reset (vgpud never resets a GPU)"
            ))
        };
        if mode.pending == on {
            return Ok(waits());
        }
        if blocked {
            return Ok(ModeStep::Wait(format!(
                "GPU {gpu}: turning MIG mode {what} waits for them"
            )));
        }
        let carried = self.carried(gpu);
        if !carried.is_empty() {
            return Ok(ModeStep::Wait(format!(
                "GPU {gpu}: MIG mode cannot turn {what} while the GPU carries {}",
                carried.join(", ")
            )));
        }
        if let Err(why) = set("") {
            return Ok(ModeStep::Fail(why));
        }
        // NVML's answer is the commit point: read the mode back.
        match mig_mode(host, gpu) {
            Ok(Some(m)) if m.current == on => {
                tracing::info!(%gpu, mode = what, "MIG mode changed for a layout");
                Ok(ModeStep::Ready)
            }
            Ok(_) => Ok(waits()),
            Err(e) => Ok(ModeStep::Fail(chain(&e))),
        }
    }

    /// What the host shows on the GPU, owned or not: mdevs, typed or vfio-bound VFs, GPU
    /// instances, the GPU on vfio-pci.
    fn carried(&self, gpu: PciAddress) -> Vec<String> {
        self.inventory()
            .gpus
            .iter()
            .filter(|g| g.pci_address == gpu)
            .flat_map(|g| &g.slices)
            .map(|s| super::reconcile::describe(gpu, s))
            .collect()
    }
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
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
