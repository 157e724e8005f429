//! Imports of what operators have (`POST /v1/layouts/import`, D-Bus `ImportLayouts`): an NVIDIA
//! mig-parted config as layouts, mdevctl's persisted definitions as owned slices.
//!
//! The client reads the file or directory and sends its content; nothing here names a path on
//! the host. A mig-parted config is parsed here and its layouts get exactly the checks of
//! `PUT /v1/layouts`, so an import never declares what a `PUT` would refuse.

use std::collections::BTreeSet;

use agent::engine::{self, import};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::layouts::{Layout, LayoutEntry, LayoutsRequest, LayoutsView};
use super::slices::type_name;
use super::{canonical, check_text, parse_device};
use crate::error::ApiError;

/// The import limits, defined once with the others ([`agent::engine::limits`]).
pub use agent::engine::limits::{
    MAX_IMPORT_CONFIG_CHARS as MAX_CONFIG_CHARS,
    MAX_IMPORT_CONFIG_NAME_CHARS as MAX_CONFIG_NAME_CHARS,
    MAX_IMPORT_DEFINITION_CHARS as MAX_DEFINITION_CHARS, MAX_IMPORT_DEFINITIONS as MAX_DEFINITIONS,
};

/// What is imported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ImportFormat {
    /// An NVIDIA mig-parted config file (`version: v1`): one named config becomes the layouts.
    MigParted,
    /// mdevctl's persisted definitions (`/etc/mdevctl.d/<parent>/<uuid>`).
    Mdevctl,
}

/// One mdevctl definition file, as the client read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MdevctlDefinition {
    /// The parent directory's name: a GPU's canonical PCI address or a virtual parent (`mtty`).
    #[schema(
        pattern = r"^([0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]|[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})$",
        example = "0000:41:00.0"
    )]
    pub parent: String,
    /// The file's name: the mdev's UUID, canonical.
    #[schema(pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub uuid: String,
    /// The file's content: mdevctl's JSON (`mdev_type`, `start`, `attrs`).
    #[schema(
        max_length = 4096,
        example = r#"{"mdev_type": "nvidia-222", "start": "auto", "attrs": []}"#
    )]
    pub content: String,
}

/// `POST /v1/layouts/import`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    /// What `content` or `definitions` hold.
    pub format: ImportFormat,
    /// mig-parted: the config to import; absent: the file's only config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        min_length = 1,
        max_length = 56,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F\u00AD\u061C\u180E\u200B-\u200F\u2028-\u202E\u2060-\u206F\uFEFF\uFFF9-\uFFFB\uDB40]+$",
        example = "all-balanced"
    )]
    pub config: Option<String>,
    /// mig-parted: the config file's text (YAML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 262144)]
    pub content: Option<String>,
    /// mdevctl: the definition files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 256)]
    pub definitions: Vec<MdevctlDefinition>,
    /// Only show what would change; nothing is applied.
    #[serde(default)]
    pub dry_run: bool,
}

impl ImportRequest {
    /// The engine's import, after the checks the schema declares and, for mig-parted, those of
    /// `PUT /v1/layouts` on the layouts the config declares.
    pub fn to_engine(&self) -> Result<import::ImportSource, ApiError> {
        match self.format {
            ImportFormat::MigParted => self.mig_parted(),
            ImportFormat::Mdevctl => self.mdevctl(),
        }
    }

    fn mig_parted(&self) -> Result<import::ImportSource, ApiError> {
        if !self.definitions.is_empty() {
            return Err(ApiError::Unprocessable(
                "definitions: only with format mdevctl".into(),
            ));
        }
        let content = self.content.as_deref().unwrap_or_default();
        if content.is_empty() {
            return Err(ApiError::Unprocessable(
                "content: the mig-parted config's text is required".into(),
            ));
        }
        let chars = content.chars().count();
        if chars > MAX_CONFIG_CHARS {
            return Err(ApiError::Unprocessable(format!(
                "content: {chars} characters; at most {MAX_CONFIG_CHARS} are accepted"
            )));
        }
        if let Some(name) = &self.config {
            check_text("config", name)?;
            if name.chars().count() > MAX_CONFIG_NAME_CHARS {
                return Err(ApiError::Unprocessable(format!(
                    "config: longer than {MAX_CONFIG_NAME_CHARS} characters"
                )));
            }
        }
        let layouts = import::mig_parted_import(content, self.config.as_deref())?;
        let wire = LayoutsRequest {
            layouts: layouts.iter().map(Layout::from).collect(),
        };
        Ok(import::ImportSource::Layouts(wire.to_engine()?))
    }

    fn mdevctl(&self) -> Result<import::ImportSource, ApiError> {
        if self.content.is_some() || self.config.is_some() {
            return Err(ApiError::Unprocessable(
                "content, config: only with format mig-parted".into(),
            ));
        }
        if self.definitions.len() > MAX_DEFINITIONS {
            return Err(ApiError::Unprocessable(format!(
                "definitions: more than {MAX_DEFINITIONS} items"
            )));
        }
        let mut seen = BTreeSet::new();
        self.definitions
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let at = format!("definitions[{i}]");
                parse_device(&format!("{at}.parent"), &d.parent)?;
                let parent: ids::MdevParentName =
                    canonical(&format!("{at}.parent"), &d.parent, "an mdev parent")?;
                let uuid: ids::MdevUuid = canonical(&format!("{at}.uuid"), &d.uuid, "a UUID")?;
                if !seen.insert(uuid) {
                    return Err(ApiError::Unprocessable(format!(
                        "{at}.uuid: {uuid} is defined twice"
                    )));
                }
                let chars = d.content.chars().count();
                if chars > MAX_DEFINITION_CHARS {
                    return Err(ApiError::Unprocessable(format!(
                        "{at}.content: {chars} characters; at most {MAX_DEFINITION_CHARS} are accepted"
                    )));
                }
                Ok(import::MdevctlFile {
                    parent,
                    uuid,
                    text: d.content.clone(),
                })
            })
            .collect::<Result<_, _>>()
            .map(import::ImportSource::Mdevctl)
    }
}

/// How the declared layouts change, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LayoutChanges {
    /// New layouts.
    pub added: Vec<Layout>,
    /// Declared layouts with new content.
    pub changed: Vec<Layout>,
    /// Declared layouts that go (their GPUs' slices stay as they are).
    pub removed: Vec<String>,
    /// Declared layouts that stay as they are.
    pub unchanged: Vec<String>,
}

/// An owned slice the new layouts do not want.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PlannedRemoval {
    /// The slice id.
    pub slice: String,
    /// Its type, as allocation requests spell it.
    #[serde(rename = "type")]
    pub slice_type: String,
    /// Allocated: it stays until released, the GPU `pending` until then.
    pub allocated: bool,
}

/// What the layouts would do on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GpuPlan {
    /// The GPU.
    pub gpu: String,
    /// The layout that selects it; absent: none does, and its slices stay as they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// Slices to make.
    pub create: Vec<LayoutEntry>,
    /// Owned slices to destroy.
    pub destroy: Vec<PlannedRemoval>,
    /// The MIG mode to set, when it differs from the current one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig: Option<bool>,
    /// The destructive VF step: present when the apply would enable the VFs of an NVIDIA GPU
    /// that has MIG GPU instances (for its first vendor-VFIO vGPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vf_enable: Option<PlannedVfEnable>,
}

/// Enabling an NVIDIA GPU's VFs hands its PF back to the NVIDIA driver, which destroys every MIG
/// GPU instance on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PlannedVfEnable {
    /// The GPU instances the step destroys (`GPU instance <id> (start <s>, size <n>)`).
    pub destroys: Vec<String>,
    /// Slices (ids) of vgpud's on them, free, destroyed first.
    pub gives_up: Vec<String>,
    /// Why the apply refuses the step (an instance of an allocated slice, or one not vgpud's);
    /// absent: it goes ahead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// What becomes of an mdevctl definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MdevAction {
    /// The mdev exists as defined: vgpud owns it from now on, untouched.
    Adopt,
    /// The mdev does not exist: created with the defined UUID.
    Create,
    /// Not imported (`reason`).
    Skip,
}

/// One mdevctl definition's fate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MdevPlan {
    /// The parent.
    pub parent: String,
    /// The UUID.
    pub uuid: String,
    /// The type it defines, when the definition parses.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub mdev_type: Option<String>,
    /// What happens to it.
    pub action: MdevAction,
    /// Why it is skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What an mdevctl import did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ImportReport {
    /// Slices (ids) of existing mdevs now owned.
    pub adopted: Vec<String>,
    /// Slices (ids) created with their defined UUIDs.
    pub created: Vec<String>,
    /// Definitions not imported, with why.
    pub skipped: Vec<String>,
}

/// The answer of an import: the diff, and what the apply gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ImportOutcome {
    /// Nothing was applied.
    pub dry_run: bool,
    /// What was imported.
    pub format: ImportFormat,
    /// mig-parted: how the declared layouts change (the imported ones replace them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layouts: Option<LayoutChanges>,
    /// mig-parted: per GPU, the slices made and destroyed.
    pub gpus: Vec<GpuPlan>,
    /// mdevctl: per definition, adopted, created or skipped.
    pub definitions: Vec<MdevPlan>,
    /// mig-parted, applied: the layouts with each GPU's status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<LayoutsView>,
    /// mdevctl, applied: what was adopted, created and skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<ImportReport>,
}

impl ImportOutcome {
    /// The wire form of the engine's outcome.
    pub fn new(o: &import::ImportOutcome) -> Self {
        let mut out = ImportOutcome {
            dry_run: o.dry_run,
            format: ImportFormat::Mdevctl,
            layouts: None,
            gpus: Vec::new(),
            definitions: Vec::new(),
            result: o.layouts.as_ref().map(LayoutsView::new),
            report: o.report.as_ref().map(ImportReport::from),
        };
        match &o.plan {
            import::ImportPlan::Layouts { changes, gpus, .. } => {
                out.format = ImportFormat::MigParted;
                out.layouts = Some(LayoutChanges::from(changes));
                out.gpus = gpus.iter().map(GpuPlan::from).collect();
            }
            import::ImportPlan::Mdevs(defs) => {
                out.definitions = defs.iter().map(MdevPlan::from).collect();
            }
        }
        out
    }
}

impl From<&import::LayoutChanges> for LayoutChanges {
    fn from(c: &import::LayoutChanges) -> Self {
        LayoutChanges {
            added: c.added.iter().map(Layout::from).collect(),
            changed: c.changed.iter().map(Layout::from).collect(),
            removed: c.removed.clone(),
            unchanged: c.unchanged.clone(),
        }
    }
}

impl From<&import::GpuPlan> for GpuPlan {
    fn from(g: &import::GpuPlan) -> Self {
        GpuPlan {
            gpu: g.gpu.to_string(),
            layout: g.layout.clone(),
            create: g
                .create
                .iter()
                .map(|e| LayoutEntry {
                    slice_type: e.slice_type.clone(),
                    count: e.count,
                })
                .collect(),
            destroy: g
                .destroy
                .iter()
                .map(|r| PlannedRemoval {
                    slice: r.slice.to_string(),
                    slice_type: type_name(&r.kind),
                    allocated: r.allocated,
                })
                .collect(),
            mig: g.mig,
            vf_enable: g.vf_enable.as_ref().map(|v| PlannedVfEnable {
                destroys: v.destroys.clone(),
                gives_up: v.gives_up.iter().map(ToString::to_string).collect(),
                refused: v.refused.clone(),
            }),
        }
    }
}

impl From<&import::MdevPlan> for MdevPlan {
    fn from(m: &import::MdevPlan) -> Self {
        MdevPlan {
            parent: m.parent.to_string(),
            uuid: m.uuid.to_string(),
            mdev_type: m.mdev_type.clone(),
            action: match m.action {
                import::MdevAction::Adopt => MdevAction::Adopt,
                import::MdevAction::Create => MdevAction::Create,
                import::MdevAction::Skip => MdevAction::Skip,
            },
            reason: m.reason.clone(),
        }
    }
}

impl From<&import::ImportReport> for ImportReport {
    fn from(r: &import::ImportReport) -> Self {
        let ids = |v: &[engine::SliceId]| v.iter().map(ToString::to_string).collect();
        ImportReport {
            adopted: ids(&r.adopted),
            created: ids(&r.created),
            skipped: r.skipped.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"1g.10gb\": 7\n  b:\n    - devices: [0]\n      mig-enabled: false\n";

    fn request(json: serde_json::Value) -> Result<import::ImportSource, ApiError> {
        serde_json::from_value::<ImportRequest>(json)
            .map_err(|e| ApiError::Unprocessable(e.to_string()))?
            .to_engine()
    }

    fn code(r: Result<import::ImportSource, ApiError>) -> String {
        r.unwrap_err().body().code
    }

    #[test]
    fn a_mig_parted_config_becomes_checked_layouts() {
        let source = request(serde_json::json!({
            "format": "mig-parted", "config": "a", "content": YAML, "dry_run": true
        }))
        .unwrap();
        let import::ImportSource::Layouts(layouts) = source else {
            panic!("{source:?}");
        };
        assert_eq!(layouts[0].name, "a#0");
        assert_eq!(layouts[0].slices[0].count, 7);
        // Unknown name: the names the file has.
        let e =
            request(serde_json::json!({"format": "mig-parted", "config": "c", "content": YAML}))
                .unwrap_err();
        assert_eq!(e.body().code, "not_found");
        assert!(e.to_string().contains("a, b"), "{e}");
        // No name, two configs: choose.
        assert_eq!(
            code(request(
                serde_json::json!({"format": "mig-parted", "content": YAML})
            )),
            "invalid_request"
        );
        // Counts over the layout limit are refused as PUT /v1/layouts refuses them.
        let big = YAML.replace("\": 7", "\": 65");
        let e = request(serde_json::json!({"format": "mig-parted", "config": "a", "content": big}))
            .unwrap_err();
        assert!(e.to_string().contains("layouts[0].slices.count"), "{e}");
    }

    #[test]
    fn malformed_and_oversized_requests_are_refused() {
        let bad = [
            serde_json::json!({"format": "mig-parted"}),
            serde_json::json!({"format": "mig-parted", "content": "x".repeat(MAX_CONFIG_CHARS + 1)}),
            serde_json::json!({"format": "mig-parted", "content": YAML, "config": "a".repeat(57)}),
            serde_json::json!({"format": "mig-parted", "content": YAML, "config": "a\n"}),
            serde_json::json!({"format": "mig-parted", "content": "{{{", "config": "a"}),
            serde_json::json!({"format": "mdevctl", "content": YAML}),
            serde_json::json!({"format": "mdevctl", "definitions": [
                {"parent": "0000:41:00.0", "uuid": "B1C7A1D2-0000-4000-8000-000000000001", "content": "{}"}]}),
            serde_json::json!({"format": "mdevctl", "definitions": [
                {"parent": "../x", "uuid": "b1c7a1d2-0000-4000-8000-000000000001", "content": "{}"}]}),
            serde_json::json!({"format": "mdevctl", "definitions": [
                {"parent": "0000:41:00.0", "uuid": "b1c7a1d2-0000-4000-8000-000000000001", "content": "x".repeat(MAX_DEFINITION_CHARS + 1)}]}),
            serde_json::json!({"format": "mdevctl", "definitions": [
                {"parent": "mtty", "uuid": "b1c7a1d2-0000-4000-8000-000000000001", "content": "{}"},
                {"parent": "mtty", "uuid": "b1c7a1d2-0000-4000-8000-000000000001", "content": "{}"}]}),
            serde_json::json!({"format": "mdevctl", "extra": 1}),
            serde_json::json!({"format": "tarball"}),
        ];
        for b in bad {
            assert_eq!(code(request(b.clone())), "invalid_request", "{b}");
        }
        let ok = request(serde_json::json!({"format": "mdevctl", "definitions": [
            {"parent": "mtty", "uuid": "b1c7a1d2-0000-4000-8000-000000000001", "content": "{}"},
            {"parent": "0000:41:00.0", "uuid": "b1c7a1d2-0000-4000-8000-000000000002", "content": "{}"}]}))
        .unwrap();
        assert!(
            matches!(ok, import::ImportSource::Mdevctl(ref f) if f.len() == 2),
            "{ok:?}"
        );
    }
}
