//! Declared layouts, their apply status, and the operations that apply them.

use std::collections::BTreeSet;

use agent::engine;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{MAX_COUNT, MAX_GPU_INDEX, MAX_ITEMS, check_text, parse_pci};
use crate::error::{ApiError, ErrorBody};

/// Which GPUs a layout is for; every criterion given must match (none given: every GPU).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuSelector {
    /// GPUs by canonical PCI address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 64)]
    pub addresses: Vec<PciAddressText>,
    /// GPUs by index in PCI address order (0 = the first GPU).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 64)]
    pub indices: Vec<GpuIndex>,
    /// GPUs by PCI id, `vendor:device` in lower-case hex (`10de:20b2`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 64)]
    pub pci_ids: Vec<PciIdText>,
    /// GPUs whose model name contains this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F\u00AD\u061C\u180E\u200B-\u200F\u2028-\u202E\u2060-\u206F\uFEFF\uFFF9-\uFFFB\uDB40]+$"
    )]
    pub model: Option<String>,
}

/// A canonical PCI address (`0000:07:00.0`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PciAddressText(pub String);

/// A GPU's index in PCI address order (0 to 1023).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GpuIndex(#[serde(deserialize_with = "super::int::u32")] pub u32);

/// A PCI id, `vendor:device` in lower-case hex (`10de:20b2`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PciIdText(pub String);

super::text_schema!(PciAddressText, super::PCI_PATTERN, "0000:07:00.0");
super::text_schema!(PciIdText, r"^[0-9a-f]{4}:[0-9a-f]{4}$", "10de:20b2");

impl utoipa::PartialSchema for GpuIndex {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int32)))
            .minimum(Some(0))
            .maximum(Some(MAX_GPU_INDEX))
            .into()
    }
}

impl ToSchema for GpuIndex {}

/// `count` slices of one type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LayoutEntry {
    /// The type, as in an allocation request.
    #[serde(rename = "type")]
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F\u00AD\u061C\u180E\u200B-\u200F\u2028-\u202E\u2060-\u206F\uFEFF\uFFF9-\uFFFB\uDB40]+$",
        example = "1g.10gb"
    )]
    pub slice_type: String,
    /// How many.
    #[schema(minimum = 0, maximum = 64)]
    #[serde(deserialize_with = "super::int::u32")]
    pub count: u32,
}

/// The slices a set of GPUs should carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    /// A name for status and logs, unique among the layouts.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F\u00AD\u061C\u180E\u200B-\u200F\u2028-\u202E\u2060-\u206F\uFEFF\uFFF9-\uFFFB\uDB40]+$"
    )]
    pub name: String,
    /// Which GPUs.
    #[serde(default)]
    pub selector: GpuSelector,
    /// What each selected GPU carries.
    #[schema(max_items = 64)]
    pub slices: Vec<LayoutEntry>,
    /// AMD GPUs: the partition modes to set (and how many VFs to enable) before the slices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amd: Option<AmdPartition>,
    /// NVIDIA GPUs: the MIG mode to be in. Absent: what the slices need; given, it must agree
    /// with them. vgpud changes it only while the GPU carries nothing, and never resets a GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<bool>,
}

/// An AMD GPU's partition modes and VF count, set by a layout (VFs are disabled while the modes
/// change, so the GPU stays `pending` while any of its slices is allocated).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AmdPartition {
    /// Compute partition mode: `SPX`, `DPX`, `TPX`, `QPX` or `CPX`.
    #[schema(pattern = r"^(SPX|DPX|TPX|QPX|CPX)$", example = "CPX")]
    pub compute: String,
    /// Memory partition mode: `NPS1`, `NPS2`, `NPS4` or `NPS8`.
    #[schema(pattern = r"^NPS(1|2|4|8)$", example = "NPS4")]
    pub memory: String,
    /// VFs to enable; absent: as many as the mode supports.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::int::opt_u32"
    )]
    #[schema(minimum = 0, maximum = 64)]
    pub vfs: Option<u32>,
}

impl AmdPartition {
    fn to_engine(&self, at: &str) -> Result<engine::AmdPartition, ApiError> {
        let modes: [(&str, &str, &[&str]); 2] = [
            (
                "compute",
                &self.compute,
                &["SPX", "DPX", "TPX", "QPX", "CPX"],
            ),
            ("memory", &self.memory, &["NPS1", "NPS2", "NPS4", "NPS8"]),
        ];
        for (field, value, known) in modes {
            if !known.contains(&value) {
                return Err(ApiError::Unprocessable(format!(
                    "{at}.amd.{field}: {value:?} is not one of {}",
                    known.join(", ")
                )));
            }
        }
        if self.vfs.is_some_and(|v| v > MAX_ITEMS as u32) {
            return Err(ApiError::Unprocessable(format!(
                "{at}.amd.vfs: at most {MAX_ITEMS}"
            )));
        }
        Ok(engine::AmdPartition {
            compute: self.compute.clone(),
            memory: self.memory.clone(),
            vfs: self.vfs,
        })
    }
}

/// `PUT /v1/layouts`: the whole set of declared layouts (replaces the previous set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LayoutsRequest {
    /// The layouts.
    #[schema(max_items = 64)]
    pub layouts: Vec<Layout>,
}

impl LayoutsRequest {
    /// The engine's layouts, after the checks the schema declares (and unique names).
    pub fn to_engine(&self) -> Result<Vec<engine::Layout>, ApiError> {
        too_many("layouts", self.layouts.len())?;
        let mut names = BTreeSet::new();
        self.layouts
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let at = format!("layouts[{i}]");
                check_text(&format!("{at}.name"), &l.name)?;
                if !names.insert(l.name.as_str()) {
                    return Err(ApiError::Unprocessable(format!(
                        "{at}.name: {:?} is used twice",
                        l.name
                    )));
                }
                Ok(engine::Layout {
                    name: l.name.clone(),
                    selector: selector(&at, &l.selector)?,
                    slices: entries(&at, &l.slices)?,
                    amd: l.amd.as_ref().map(|a| a.to_engine(&at)).transpose()?,
                    mig: l.mig,
                })
            })
            .collect()
    }
}

fn too_many(field: &str, n: usize) -> Result<(), ApiError> {
    if n > MAX_ITEMS {
        return Err(ApiError::Unprocessable(format!(
            "{field}: more than {MAX_ITEMS} items"
        )));
    }
    Ok(())
}

fn selector(at: &str, s: &GpuSelector) -> Result<engine::GpuSelector, ApiError> {
    too_many(&format!("{at}.selector.addresses"), s.addresses.len())?;
    too_many(&format!("{at}.selector.indices"), s.indices.len())?;
    too_many(&format!("{at}.selector.pci_ids"), s.pci_ids.len())?;
    let addresses = s
        .addresses
        .iter()
        .map(|a| parse_pci(&format!("{at}.selector.addresses"), &a.0))
        .collect::<Result<_, _>>()?;
    if let Some(GpuIndex(i)) = s.indices.iter().find(|i| i.0 > MAX_GPU_INDEX) {
        return Err(ApiError::Unprocessable(format!(
            "{at}.selector.indices: {i} is larger than {MAX_GPU_INDEX}"
        )));
    }
    for PciIdText(id) in &s.pci_ids {
        if !is_pci_id(id) {
            return Err(ApiError::Unprocessable(format!(
                "{at}.selector.pci_ids: {:?} is not vendor:device in lower-case hex",
                id.chars().take(32).collect::<String>()
            )));
        }
    }
    if let Some(m) = &s.model {
        check_text(&format!("{at}.selector.model"), m)?;
    }
    Ok(engine::GpuSelector {
        addresses,
        indices: s.indices.iter().map(|i| i.0).collect(),
        pci_ids: s.pci_ids.iter().map(|p| p.0.clone()).collect(),
        model: s.model.clone(),
    })
}

fn entries(at: &str, e: &[LayoutEntry]) -> Result<Vec<engine::LayoutEntry>, ApiError> {
    too_many(&format!("{at}.slices"), e.len())?;
    e.iter()
        .map(|e| {
            check_text(&format!("{at}.slices.type"), &e.slice_type)?;
            if e.count > MAX_COUNT {
                return Err(ApiError::Unprocessable(format!(
                    "{at}.slices.count: {} is larger than {MAX_COUNT}",
                    e.count
                )));
            }
            Ok(engine::LayoutEntry {
                slice_type: e.slice_type.clone(),
                count: e.count,
            })
        })
        .collect()
}

fn is_pci_id(s: &str) -> bool {
    let hex4 = |p: &str| {
        p.len() == 4
            && p.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    };
    s.split_once(':').is_some_and(|(v, d)| hex4(v) && hex4(d))
}

impl From<&engine::Layout> for Layout {
    fn from(l: &engine::Layout) -> Self {
        Layout {
            name: l.name.clone(),
            selector: GpuSelector {
                addresses: l
                    .selector
                    .addresses
                    .iter()
                    .map(|a| PciAddressText(a.to_string()))
                    .collect(),
                indices: l.selector.indices.iter().map(|i| GpuIndex(*i)).collect(),
                pci_ids: l
                    .selector
                    .pci_ids
                    .iter()
                    .map(|p| PciIdText(p.clone()))
                    .collect(),
                model: l.selector.model.clone(),
            },
            slices: l
                .slices
                .iter()
                .map(|e| LayoutEntry {
                    slice_type: e.slice_type.clone(),
                    count: e.count,
                })
                .collect(),
            amd: l.amd.as_ref().map(|a| AmdPartition {
                compute: a.compute.clone(),
                memory: a.memory.clone(),
                vfs: a.vfs,
            }),
            mig: l.mig,
        }
    }
}

/// Where a GPU is with its layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LayoutState {
    /// The GPU carries exactly what the layout says.
    Applied,
    /// Waiting: allocated or busy slices stand in the way.
    Pending,
    /// The layout cannot be applied as it is.
    Failed,
}

impl From<engine::LayoutState> for LayoutState {
    fn from(s: engine::LayoutState) -> Self {
        match s {
            engine::LayoutState::Applied => LayoutState::Applied,
            engine::LayoutState::Pending => LayoutState::Pending,
            engine::LayoutState::Failed => LayoutState::Failed,
        }
    }
}

/// One GPU's layout status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GpuLayoutStatus {
    /// The GPU.
    pub gpu: String,
    /// The layout that selects it.
    pub layout: String,
    /// Its state.
    pub state: LayoutState,
    /// Why it is pending or failed.
    pub reasons: Vec<String>,
}

/// `GET /v1/layouts`: the declared layouts, each selected GPU's status, and the generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LayoutsView {
    /// The generation of the declared layouts, also sent as the `ETag` header: send it back in
    /// `If-Match` to replace exactly what you read.
    pub etag: String,
    /// Layouts, as declared.
    pub layouts: Vec<Layout>,
    /// Status per selected GPU, as of the last apply.
    pub status: Vec<GpuLayoutStatus>,
}

impl LayoutsView {
    /// The wire form of the engine's view.
    pub fn new(v: &engine::LayoutsView) -> Self {
        LayoutsView {
            etag: etag_of(&v.layouts),
            layouts: v.layouts.iter().map(Layout::from).collect(),
            status: v
                .status
                .iter()
                .map(|s| GpuLayoutStatus {
                    gpu: s.gpu.to_string(),
                    layout: s.layout.clone(),
                    state: s.state.into(),
                    reasons: s.reasons.clone(),
                })
                .collect(),
        }
    }
}

/// The ETag of a set of declared layouts: a digest of their JSON form. It is derived from the
/// content, so it survives restarts and needs no counter in the store.
pub fn etag_of(layouts: &[engine::Layout]) -> String {
    use sha2::Digest;
    let json = serde_json::to_vec(layouts).unwrap_or_default();
    let digest = sha2::Sha256::digest(&json);
    let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// Where a long operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OperationState {
    /// Still running.
    Running,
    /// Finished; `result` holds the outcome.
    Succeeded,
    /// Failed; `error` says why.
    Failed,
}

/// A long operation (a layout apply), polled at `/v1/operations/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Operation {
    /// Its id (UUID).
    #[schema(pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub id: String,
    /// What it does: `layout_apply`.
    pub kind: String,
    /// Where it is.
    pub state: OperationState,
    /// When it started, seconds since the Unix epoch.
    pub started: u64,
    /// When it finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished: Option<u64>,
    /// The outcome, once it succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<LayoutsView>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_checked_before_the_engine_sees_them() {
        let parse = |s: &str| {
            serde_json::from_str::<LayoutsRequest>(s)
                .unwrap()
                .to_engine()
        };
        assert!(
            parse(r#"{"layouts":[{"name":"a","slices":[{"type":"1g.10gb","count":7}]}]}"#).is_ok()
        );
        assert!(
            parse(r#"{"layouts":[{"name":"a","slices":[]},{"name":"a","slices":[]}]}"#).is_err()
        );
        assert!(
            parse(r#"{"layouts":[{"name":"a","selector":{"pci_ids":["10DE:20B2"]},"slices":[]}]}"#)
                .is_err()
        );
        assert!(
            parse(r#"{"layouts":[{"name":"a","selector":{"addresses":["7:0.0"]},"slices":[]}]}"#)
                .is_err()
        );
        assert!(
            parse(r#"{"layouts":[{"name":"a","slices":[{"type":"vf","count":65}]}]}"#).is_err()
        );
        let amd = r#"{"layouts":[{"name":"a","slices":[],"amd":{"compute":"CPX","memory":"NPS4","vfs":8}}]}"#;
        let layouts = parse(amd).unwrap();
        assert_eq!(
            layouts[0].amd.as_ref().map(|a| (a.compute.as_str(), a.vfs)),
            Some(("CPX", Some(8)))
        );
        assert_eq!(Layout::from(&layouts[0]).amd.unwrap().memory, "NPS4");
        for bad in [
            r#"{"layouts":[{"name":"a","slices":[],"amd":{"compute":"XPX","memory":"NPS4"}}]}"#,
            r#"{"layouts":[{"name":"a","slices":[],"amd":{"compute":"CPX","memory":"NPS3"}}]}"#,
            r#"{"layouts":[{"name":"a","slices":[],"amd":{"compute":"CPX","memory":"NPS4","vfs":65}}]}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<LayoutsRequest>(
            r#"{"layouts":[{"name":"a","slices":[],"amd":{"compute":"CPX","memory":"NPS4","x":1}}]}"#
        )
        .is_err());
    }

    #[test]
    fn etags_follow_the_content() {
        let a = vec![engine::Layout {
            name: "a".into(),
            selector: engine::GpuSelector::default(),
            slices: vec![],
            amd: None,
            mig: None,
        }];
        let mut b = a.clone();
        assert_eq!(etag_of(&a), etag_of(&b));
        b[0].name = "b".into();
        assert_ne!(etag_of(&a), etag_of(&b));
    }
}
