//! Bringing what operators have: NVIDIA mig-parted YAML as layouts, mdevctl's persisted
//! definitions as owned slices (adopted in place when the device exists, created otherwise).
//!
//! Front ends never hand the engine a path a client named: they pass the content the client
//! read ([`ImportSource`]). [`Engine::plan_import`] says what an import would change (the
//! layouts added, changed and removed, per GPU the slices made and destroyed, per mdevctl
//! definition whether it is adopted, created or skipped) without touching anything;
//! [`Engine::import`] applies it.

use std::collections::BTreeMap;
use std::path::Path;

use ids::{MdevParentName, MdevTypeId, MdevUuid, PciAddress};
use serde::{Deserialize, Serialize};

use super::error::{EngineError, Result};
use super::handle::Engine;
use super::layout::{GpuSelector, Layout, LayoutEntry, LayoutsView};
use super::model::{DeviceRef, Identity, SliceId, SliceKind, SliceSpec};
use super::resolve::{layout_kind_on, mig_mode};
use super::state::{OwnedSlice, now};
/// The largest import file read (mig-parted configs and mdevctl definitions are small).
const MAX_FILE: u64 = 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MigParted {
    version: String,
    #[serde(rename = "mig-configs")]
    configs: BTreeMap<String, Vec<MigPartedEntry>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct MigPartedEntry {
    devices: Devices,
    #[serde(default)]
    device_filter: Option<OneOrMany>,
    mig_enabled: bool,
    #[serde(default)]
    mig_devices: BTreeMap<String, u32>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Devices {
    Named(String),
    Indices(Vec<u32>),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// mig-parted's device filter `0x20B210DE` (device id, then vendor id) as `10de:20b2`.
fn pci_id(filter: &str) -> Result<String> {
    let digits = filter
        .trim()
        .trim_start_matches("0x")
        .trim_start_matches("0X");
    let valid = digits.len() == 8 && digits.chars().all(|c| c.is_ascii_hexdigit());
    if !valid {
        return Err(EngineError::InvalidRequest(format!(
            "device-filter {:?} is not a PCI id like 0x20B210DE",
            filter.chars().take(32).collect::<String>()
        )));
    }
    let lower = digits.to_ascii_lowercase();
    Ok(format!("{}:{}", &lower[4..], &lower[..4]))
}

/// The layouts of one named configuration of a mig-parted file (`version: v1`). `mig-enabled`
/// becomes the layout's MIG mode: `false` is a layout with no slices that turns MIG off (once the
/// GPU carries nothing; vgpud never resets a GPU).
pub fn mig_parted_layouts(yaml: &str, config: &str) -> Result<Vec<Layout>> {
    mig_parted_import(yaml, Some(config))
}

/// As [`mig_parted_layouts`]; without a config name, the file's only config (a file with
/// several is refused, naming them).
pub fn mig_parted_import(yaml: &str, config: Option<&str>) -> Result<Vec<Layout>> {
    if yaml.len() as u64 > MAX_FILE {
        return Err(too_large("the mig-parted config", yaml.len()));
    }
    // serde_norway's message ends with the line and column of the fault.
    let doc: MigParted = serde_norway::from_str(yaml)
        .map_err(|e| EngineError::InvalidRequest(format!("not a mig-parted config: {e}")))?;
    if doc.version != "v1" {
        return Err(EngineError::InvalidRequest(format!(
            "mig-parted config version {:?} is not supported (v1 is)",
            doc.version
        )));
    }
    let names = || {
        doc.configs
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (config, entries) = match config {
        Some(name) => doc.configs.get_key_value(name).ok_or_else(|| {
            EngineError::NotFound(format!(
                "mig-parted config {name:?}; the file has {}",
                names()
            ))
        })?,
        None if doc.configs.len() == 1 => doc
            .configs
            .iter()
            .next()
            .ok_or_else(|| EngineError::InvalidRequest("the file has no config".into()))?,
        None => {
            return Err(EngineError::InvalidRequest(format!(
                "the file has {} configs: name one of {}",
                doc.configs.len(),
                names()
            )));
        }
    };
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| entry_layout(config, i, e))
        .collect()
}

fn too_large(what: &str, len: usize) -> EngineError {
    EngineError::InvalidRequest(format!(
        "{what} is {len} bytes; at most {MAX_FILE} are accepted"
    ))
}

fn entry_layout(config: &str, i: usize, e: &MigPartedEntry) -> Result<Layout> {
    let indices = match &e.devices {
        Devices::Named(all) if all == "all" => Vec::new(),
        Devices::Named(other) => {
            return Err(EngineError::InvalidRequest(format!(
                "devices {other:?} must be \"all\" or a list of indices"
            )));
        }
        Devices::Indices(list) => list.clone(),
    };
    let pci_ids = match &e.device_filter {
        None => Vec::new(),
        Some(OneOrMany::One(f)) => vec![pci_id(f)?],
        Some(OneOrMany::Many(fs)) => fs.iter().map(|f| pci_id(f)).collect::<Result<_>>()?,
    };
    let slices = if e.mig_enabled {
        e.mig_devices
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(profile, count)| LayoutEntry {
                slice_type: profile.clone(),
                count: *count,
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(Layout {
        name: format!("{config}#{i}"),
        selector: GpuSelector {
            indices,
            pci_ids,
            ..GpuSelector::default()
        },
        slices,
        amd: None,
        mig: Some(e.mig_enabled),
    })
}

/// One mdevctl definition file.
#[derive(Debug, Deserialize)]
struct MdevctlDefinition {
    mdev_type: String,
    #[serde(default)]
    #[allow(dead_code)] // start mode: vgpud starts every owned slice
    start: Option<String>,
    #[serde(default)]
    attrs: Vec<serde_json::Value>,
}

/// One mdevctl definition as a client read it: `<parent>/<uuid>` and the file's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MdevctlFile {
    /// The parent directory's name: a PCI address or a virtual parent (`mtty`).
    pub parent: MdevParentName,
    /// The file's name.
    pub uuid: MdevUuid,
    /// The file's content (mdevctl's JSON: `mdev_type`, `start`, `attrs`).
    pub text: String,
}

/// What to import: content, never a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportSource {
    /// Layouts (a mig-parted config's, from [`mig_parted_import`]) that replace the declared
    /// layouts.
    Layouts(Vec<Layout>),
    /// mdevctl definitions, adopted or created as owned slices (the layouts stay).
    Mdevctl(Vec<MdevctlFile>),
}

/// What an mdevctl import did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportReport {
    /// Existing mdevs now owned by vgpud, unchanged.
    pub adopted: Vec<SliceId>,
    /// Defined mdevs that did not exist and were created with their UUIDs.
    pub created: Vec<SliceId>,
    /// Definitions not imported, with why.
    pub skipped: Vec<String>,
}

impl ImportReport {
    /// Files one definition's outcome: adopted, created, or skipped with why (`what` names it).
    fn record(&mut self, what: impl std::fmt::Display, imported: Result<(SliceId, bool)>) {
        match imported {
            Ok((id, true)) => self.adopted.push(id),
            Ok((id, false)) => self.created.push(id),
            Err(e) => self.skipped.push(format!("{what}: {e}")),
        }
    }
}

/// How the declared layouts would change, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayoutChanges {
    /// Layouts that are new.
    pub added: Vec<Layout>,
    /// Layouts whose name is declared already, with their new content.
    pub changed: Vec<Layout>,
    /// Names of declared layouts that go.
    pub removed: Vec<String>,
    /// Names of declared layouts that stay as they are.
    pub unchanged: Vec<String>,
}

/// An owned slice a layout change would destroy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRemoval {
    /// The slice.
    pub slice: SliceId,
    /// What it is.
    pub kind: SliceKind,
    /// Allocated: it stays until released, and the GPU is `pending` until then.
    pub allocated: bool,
}

/// What applying the layouts would do on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlan {
    /// The GPU.
    pub gpu: PciAddress,
    /// The layout that would select it; `None`: no layout, its slices stay as they are.
    pub layout: Option<String>,
    /// Slices to make, by type.
    pub create: Vec<LayoutEntry>,
    /// Owned slices the layout does not want.
    pub destroy: Vec<PlannedRemoval>,
    /// The MIG mode the layout sets, when it differs from the current one.
    pub mig: Option<bool>,
    /// The destructive VF step, when the apply would enable the VFs of an NVIDIA GPU that has
    /// MIG GPU instances (for the first vendor-VFIO vGPU it makes).
    pub vf_enable: Option<PlannedVfEnable>,
}

/// Enabling an NVIDIA GPU's VFs hands its PF back to the NVIDIA driver, which destroys every
/// MIG GPU instance on it: what the apply would lose, or why it would refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedVfEnable {
    /// The GPU instances the step destroys (`GPU instance <id> (start <s>, size <n>)`).
    pub destroys: Vec<String>,
    /// vgpud's free slices on them, destroyed first.
    pub gives_up: Vec<SliceId>,
    /// Why the apply refuses the step (an instance of an allocated slice, or one not vgpud's);
    /// `None`: it goes ahead. The slices needing VFs then fail (`conflict`) or wait.
    pub refused: Option<String>,
}

/// What an mdevctl definition would become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MdevAction {
    /// The mdev exists with that UUID and type: owned as it is.
    Adopt,
    /// The mdev does not exist: created with that UUID.
    Create,
    /// Not imported (`reason` says why).
    Skip,
}

/// One mdevctl definition's fate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MdevPlan {
    /// The parent.
    pub parent: MdevParentName,
    /// The UUID.
    pub uuid: MdevUuid,
    /// The type the definition names, when it parses.
    pub mdev_type: Option<String>,
    /// What happens to it.
    pub action: MdevAction,
    /// Why it is skipped.
    pub reason: Option<String>,
}

/// What an import changes (or, in a dry run, would change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportPlan {
    /// A mig-parted config.
    Layouts {
        /// The layouts it declares, replacing the declared ones.
        layouts: Vec<Layout>,
        /// How the declared layouts change.
        changes: LayoutChanges,
        /// Per GPU, what the apply makes and destroys.
        gpus: Vec<GpuPlan>,
    },
    /// mdevctl definitions.
    Mdevs(Vec<MdevPlan>),
}

/// The answer of an import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportOutcome {
    /// Nothing was applied.
    pub dry_run: bool,
    /// The diff, as computed before applying.
    pub plan: ImportPlan,
    /// After a mig-parted import: the layouts with each GPU's status.
    pub layouts: Option<LayoutsView>,
    /// After an mdevctl import: what was adopted, created and skipped.
    pub report: Option<ImportReport>,
}

impl Engine {
    /// What importing `source` would change; nothing is touched. The layouts get the checks
    /// [`Engine::set_layouts`] makes, so a plan that is refused here is refused by the apply.
    pub fn plan_import(&self, source: &ImportSource) -> Result<ImportPlan> {
        match source {
            ImportSource::Layouts(layouts) => Ok(ImportPlan::Layouts {
                layouts: layouts.clone(),
                changes: self.layout_changes(layouts),
                gpus: self.gpu_plans(layouts)?,
            }),
            ImportSource::Mdevctl(files) => Ok(ImportPlan::Mdevs(
                files.iter().map(|f| self.mdev_plan(f)).collect(),
            )),
        }
    }

    /// Imports `source` (or, with `dry_run`, only plans it): layouts replace the declared
    /// layouts and are applied; mdevctl definitions become owned slices.
    pub fn import(&self, source: &ImportSource, dry_run: bool) -> Result<ImportOutcome> {
        let plan = self.plan_import(source)?;
        let mut outcome = ImportOutcome {
            dry_run,
            plan,
            layouts: None,
            report: None,
        };
        if dry_run {
            return Ok(outcome);
        }
        match source {
            ImportSource::Layouts(layouts) => {
                outcome.layouts = Some(self.set_layouts(layouts.clone())?);
            }
            ImportSource::Mdevctl(files) => {
                outcome.report = Some(self.import_mdevctl_files(files));
            }
        }
        Ok(outcome)
    }

    /// Imports mdevctl's persisted definitions (`<dir>/<parent>/<uuid>`, normally
    /// `/etc/mdevctl.d`) on GPUs and on virtual parents (`mtty`, …): an mdev that exists with that
    /// UUID and type is adopted as it is; one that does not is created with that UUID.
    pub fn import_mdevctl(&self, dir: &Path) -> Result<ImportReport> {
        let mut report = ImportReport::default();
        for (parent, uuid, path) in definition_files(dir)? {
            let imported = read_definition(&path)
                .and_then(|text| self.import_one(&MdevctlFile { parent, uuid, text }));
            report.record(path.display(), imported);
        }
        Ok(report)
    }

    /// As [`Engine::import_mdevctl`], from definitions a client read.
    pub fn import_mdevctl_files(&self, files: &[MdevctlFile]) -> ImportReport {
        let mut report = ImportReport::default();
        for file in files {
            let what = format!("{}/{}", file.parent, file.uuid);
            report.record(what, self.import_one(file));
        }
        report
    }

    fn import_one(&self, file: &MdevctlFile) -> Result<(SliceId, bool)> {
        let (spec, identity) = definition_spec(file)?;
        let _device = self.inner.gpu_locks.lock(spec.gpu.clone());
        if self.mdev_present(&spec, &identity)? {
            let entry = OwnedSlice {
                id: SliceId::new_random(),
                spec,
                identity,
                created: now(),
            };
            // Nothing on the host changes: no intent needed.
            self.write(|d| d.slices.insert(entry.id, entry.clone()))?;
            Ok((entry.id, true))
        } else {
            Ok((self.create_locked(&spec, Some(identity))?.id, false))
        }
    }

    /// Whether the defined mdev exists as defined (`false`: it can be created); an error when
    /// it cannot be imported (owned already, something else in its place, not offered).
    fn mdev_present(&self, spec: &SliceSpec, identity: &Identity) -> Result<bool> {
        if let Some(id) = self.read(|d| {
            d.slices
                .values()
                .find(|s| s.identity == *identity)
                .map(|s| s.id)
        }) {
            let what = match identity {
                Identity::Mdev { uuid } => format!("mdev {uuid}"),
                other => format!("{other:?}"),
            };
            return Err(EngineError::Conflict(format!(
                "{what} is owned already (slice {id})"
            )));
        }
        let be = super::backend::of_slice(spec, identity);
        be.validate(self.host(), spec)?;
        match be.observe(self.host(), spec, identity)? {
            super::backend::Observed::Present(_) => Ok(true),
            super::backend::Observed::Changed(why) => Err(EngineError::Conflict(why)),
            super::backend::Observed::Absent => Ok(false),
        }
    }

    fn mdev_plan(&self, file: &MdevctlFile) -> MdevPlan {
        let mdev_type = parse_definition(&file.text).ok().map(|d| d.mdev_type);
        let found = definition_spec(file).and_then(|(spec, identity)| {
            let _device = self.inner.gpu_locks.lock(spec.gpu.clone());
            self.mdev_present(&spec, &identity)
        });
        let (action, reason) = match found {
            Ok(true) => (MdevAction::Adopt, None),
            Ok(false) => (MdevAction::Create, None),
            Err(e) => (MdevAction::Skip, Some(e.to_string())),
        };
        MdevPlan {
            parent: file.parent.clone(),
            uuid: file.uuid,
            mdev_type,
            action,
            reason,
        }
    }

    fn layout_changes(&self, layouts: &[Layout]) -> LayoutChanges {
        let declared = self.read(|d| d.layouts.clone());
        let mut changes = LayoutChanges::default();
        for l in layouts {
            match declared.iter().find(|d| d.name == l.name) {
                None => changes.added.push(l.clone()),
                Some(d) if d == l => changes.unchanged.push(l.name.clone()),
                Some(_) => changes.changed.push(l.clone()),
            }
        }
        changes.removed = declared
            .into_iter()
            .filter(|d| !layouts.iter().any(|l| l.name == d.name))
            .map(|d| d.name)
            .collect();
        changes
    }

    /// Per GPU, what applying `layouts` would make and destroy: owned slices the layout wants
    /// stay, the others go, the missing ones are made (as the apply matches them).
    fn gpu_plans(&self, layouts: &[Layout]) -> Result<Vec<GpuPlan>> {
        let mut plans = Vec::new();
        for (dev, layout) in self.layout_choices(layouts)? {
            let gpu = dev.address;
            let mut plan = GpuPlan {
                gpu,
                layout: layout.map(|l| l.name.clone()),
                create: Vec::new(),
                destroy: Vec::new(),
                mig: None,
                vf_enable: None,
            };
            let Some(layout) = layout else {
                plans.push(plan);
                continue;
            };
            let mut want: Vec<(SliceKind, u32, &str)> = Vec::new();
            let id = dev.identity();
            for e in &layout.slices {
                if let Some(kind) = layout_kind_on(self.host(), &id, e.slice_type.trim())? {
                    want.push((kind, e.count, e.slice_type.as_str()));
                }
            }
            let owned: Vec<(SliceId, SliceKind, bool)> = self.read(|d| {
                d.slices
                    .values()
                    .filter(|s| s.spec.gpu == gpu)
                    .map(|s| (s.id, s.spec.kind.clone(), d.holder(s.id).is_some()))
                    .collect()
            });
            for (slice, kind, allocated) in owned {
                match want
                    .iter_mut()
                    .find(|(k, n, _)| *n > 0 && kind.satisfies(k))
                {
                    Some(w) => w.1 -= 1,
                    None => plan.destroy.push(PlannedRemoval {
                        slice,
                        kind,
                        allocated,
                    }),
                }
            }
            let needs_vfs = want
                .iter()
                .any(|(k, n, _)| *n > 0 && super::backend::needs_vfs(k.backend()));
            if needs_vfs && self.host().vfs(gpu)?.is_empty() {
                plan.vf_enable = self.planned_vf_enable(gpu, &plan.destroy)?;
            }
            plan.create = want
                .into_iter()
                .filter(|(_, n, _)| *n > 0)
                .map(|(_, count, t)| LayoutEntry {
                    slice_type: t.to_owned(),
                    count,
                })
                .collect();
            let current = mig_mode(self.host(), gpu)?.map(|m| m.current);
            plan.mig = layout.mig.filter(|on| current.is_some_and(|c| c != *on));
            plans.push(plan);
        }
        Ok(plans)
    }
}

impl Engine {
    /// The VF step of a plan: the apply destroys its free surplus slices first, then the first
    /// vendor-VFIO vGPU enables the VFs ([`Engine::enable_vfs`]).
    fn planned_vf_enable(
        &self,
        gpu: PciAddress,
        destroy: &[PlannedRemoval],
    ) -> Result<Option<PlannedVfEnable>> {
        let first: Vec<SliceId> = destroy
            .iter()
            .filter(|r| !r.allocated)
            .map(|r| r.slice)
            .collect();
        let Some((lost, loss)) = self.planned_instance_loss(gpu, &first)? else {
            return Ok(None);
        };
        Ok(Some(PlannedVfEnable {
            destroys: lost
                .iter()
                .map(|gi| {
                    format!(
                        "GPU instance {} (start {}, size {})",
                        gi.id, gi.placement.start, gi.placement.size
                    )
                })
                .collect(),
            gives_up: loss.ours.iter().map(|s| s.id).collect(),
            refused: loss.refusal(gpu),
        }))
    }
}

/// The slice a definition stands for, checked as far as the text goes.
fn definition_spec(file: &MdevctlFile) -> Result<(SliceSpec, Identity)> {
    let def = parse_definition(&file.text)?;
    if !def.attrs.is_empty() {
        return Err(EngineError::Unsupported(
            "mdev attributes are not supported".into(),
        ));
    }
    let type_id: MdevTypeId = def
        .mdev_type
        .parse()
        .map_err(|e: ids::IdError| EngineError::InvalidRequest(e.to_string()))?;
    let spec = SliceSpec {
        gpu: DeviceRef::from(file.parent.clone()),
        kind: SliceKind::Mdev { type_id },
    };
    Ok((spec, Identity::Mdev { uuid: file.uuid }))
}

fn parse_definition(text: &str) -> Result<MdevctlDefinition> {
    if text.len() as u64 > MAX_FILE {
        return Err(too_large("the definition", text.len()));
    }
    serde_json::from_str(text)
        .map_err(|e| EngineError::InvalidRequest(format!("not an mdevctl definition: {e}")))
}

fn read_definition(path: &Path) -> Result<String> {
    let io = |e: std::io::Error| {
        EngineError::host(
            format!("cannot read {}", path.display()),
            e.raw_os_error(),
            Box::new(e),
        )
    };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > MAX_FILE {
        return Err(EngineError::InvalidRequest(format!(
            "{} is too large",
            path.display()
        )));
    }
    let text = std::fs::read(path).map_err(io)?;
    // Not UTF-8 is as bad as not JSON.
    String::from_utf8(text)
        .map_err(|e| EngineError::InvalidRequest(format!("not an mdevctl definition: {e}")))
}

/// `<dir>/<parent>/<uuid>` entries with valid names, sorted; other entries are ignored.
fn definition_files(dir: &Path) -> Result<Vec<(MdevParentName, MdevUuid, std::path::PathBuf)>> {
    let io = |e: std::io::Error| {
        EngineError::host(
            format!("cannot list {}", dir.display()),
            e.raw_os_error(),
            Box::new(e),
        )
    };
    let mut out = Vec::new();
    for parent in std::fs::read_dir(dir).map_err(io)? {
        let parent = parent.map_err(io)?;
        let Some(pname) = parent
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<MdevParentName>().ok())
        else {
            continue;
        };
        let Ok(entries) = std::fs::read_dir(parent.path()) else {
            continue;
        };
        for entry in entries.flatten() {
            if let Some(uuid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<MdevUuid>().ok())
            {
                out.push((pname.clone(), uuid, entry.path()));
            }
        }
    }
    out.sort_by(|a, b| a.2.cmp(&b.2));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = r#"
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-3g.40gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
  custom:
    - device-filter: ["0x20B210DE"]
      devices: [0, 1]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
"#;

    #[test]
    fn mig_parted_configs() {
        let l = mig_parted_layouts(YAML, "all-3g.40gb").unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(
            l[0].slices,
            vec![LayoutEntry {
                slice_type: "3g.40gb".into(),
                count: 2
            }]
        );
        assert_eq!(l[0].selector, GpuSelector::default());
        let c = mig_parted_layouts(YAML, "custom").unwrap();
        assert_eq!(c[0].selector.indices, vec![0, 1]);
        assert_eq!(c[0].selector.pci_ids, vec!["10de:20b2".to_owned()]);
        let off = &mig_parted_layouts(YAML, "all-disabled").unwrap()[0];
        assert!(off.slices.is_empty());
        assert_eq!(off.mig, Some(false));
        assert_eq!(l[0].mig, Some(true));
        assert_eq!(
            mig_parted_layouts(YAML, "nope").unwrap_err().code(),
            "not_found"
        );
        assert_eq!(
            mig_parted_layouts("version: v2\nmig-configs: {}\n", "x")
                .unwrap_err()
                .code(),
            "invalid_request"
        );
        assert_eq!(
            mig_parted_layouts("{{{", "x").unwrap_err().code(),
            "invalid_request"
        );
        let bad = YAML.replace("0x20B210DE", "nvidia");
        assert_eq!(
            mig_parted_layouts(&bad, "custom").unwrap_err().code(),
            "invalid_request"
        );
    }

    #[test]
    fn config_choice_errors_and_sizes() {
        // Without a name: the only config, or a refusal that names them.
        let one =
            "version: v1\nmig-configs:\n  only:\n    - devices: all\n      mig-enabled: false\n";
        assert_eq!(mig_parted_import(one, None).unwrap()[0].name, "only#0");
        let e = mig_parted_import(YAML, None).unwrap_err();
        assert_eq!(e.code(), "invalid_request");
        assert!(
            e.to_string().contains("all-3g.40gb, all-disabled, custom"),
            "{e}"
        );
        let e = mig_parted_layouts(YAML, "nope").unwrap_err();
        assert!(
            e.to_string().contains("all-3g.40gb, all-disabled, custom"),
            "{e}"
        );
        // Bad YAML names where.
        let typo = YAML.replace(
            "mig-enabled: true\n      mig-devices:\n        \"3g",
            "mig-enabled: true\n      mig-device:\n        \"3g",
        );
        let e = mig_parted_layouts(&typo, "all-3g.40gb").unwrap_err();
        assert!(e.to_string().contains("line 10 column 7"), "{e}");
        let e = mig_parted_layouts("version: v1\nmig-configs: [\n", "x").unwrap_err();
        assert!(e.to_string().contains("line"), "{e}");
        // Too large.
        let huge = format!("{YAML}#{}\n", "x".repeat(MAX_FILE as usize));
        let e = mig_parted_layouts(&huge, "custom").unwrap_err();
        assert!(e.to_string().contains("bytes; at most"), "{e}");
        assert!(parse_definition(&" ".repeat(MAX_FILE as usize + 1)).is_err());
    }
}
