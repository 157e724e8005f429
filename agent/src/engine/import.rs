//! Bringing what operators have: NVIDIA mig-parted YAML as layouts, mdevctl's persisted
//! definitions as owned slices (adopted in place when the device exists, created otherwise).

use std::collections::BTreeMap;
use std::path::Path;

use ids::{MdevParentName, MdevTypeId, MdevUuid};
use serde::{Deserialize, Serialize};

use super::Engine;
use super::error::{EngineError, Result};
use super::layout::{GpuSelector, Layout, LayoutEntry};
use super::model::{DeviceRef, Identity, SliceId, SliceKind, SliceSpec};
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
    let doc: MigParted = serde_norway::from_str(yaml)
        .map_err(|e| EngineError::InvalidRequest(format!("not a mig-parted config: {e}")))?;
    if doc.version != "v1" {
        return Err(EngineError::InvalidRequest(format!(
            "mig-parted config version {:?} is not supported (v1 is)",
            doc.version
        )));
    }
    let entries = doc.configs.get(config).ok_or_else(|| {
        let names: Vec<&str> = doc.configs.keys().map(String::as_str).collect();
        EngineError::NotFound(format!(
            "mig-parted config {config:?}; the file has {}",
            names.join(", ")
        ))
    })?;
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| entry_layout(config, i, e))
        .collect()
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

impl Engine {
    /// Imports mdevctl's persisted definitions (`<dir>/<parent>/<uuid>`, normally
    /// `/etc/mdevctl.d`) on GPUs and on virtual parents (`mtty`, …): an mdev that exists with that
    /// UUID and type is adopted as it is; one that does not is created with that UUID.
    pub fn import_mdevctl(&self, dir: &Path) -> Result<ImportReport> {
        let mut report = ImportReport::default();
        for (parent, uuid, path) in definition_files(dir)? {
            match self.import_one(parent, uuid, &path) {
                Ok((id, true)) => report.adopted.push(id),
                Ok((id, false)) => report.created.push(id),
                Err(e) => report.skipped.push(format!("{}: {e}", path.display())),
            }
        }
        Ok(report)
    }

    fn import_one(
        &self,
        parent: MdevParentName,
        uuid: MdevUuid,
        path: &Path,
    ) -> Result<(SliceId, bool)> {
        let def = read_definition(path)?;
        if !def.attrs.is_empty() {
            return Err(EngineError::Unsupported(
                "mdev attributes are not supported".into(),
            ));
        }
        let device = DeviceRef::from(parent);
        let type_id: MdevTypeId = def
            .mdev_type
            .parse()
            .map_err(|e: ids::IdError| EngineError::InvalidRequest(e.to_string()))?;
        let spec = SliceSpec {
            gpu: device.clone(),
            kind: SliceKind::Mdev { type_id },
        };
        let identity = Identity::Mdev { uuid };
        let _device = self.inner.gpu_locks.lock(device);
        if let Some(id) = self.read(|d| {
            d.slices
                .values()
                .find(|s| s.identity == identity)
                .map(|s| s.id)
        }) {
            return Err(EngineError::Conflict(format!(
                "mdev {uuid} is owned already (slice {id})"
            )));
        }
        let be = super::backend::of_slice(&spec, &identity);
        be.validate(self.host(), &spec)?;
        match be.observe(self.host(), &spec, &identity)? {
            super::backend::Observed::Present(_) => {
                let entry = OwnedSlice {
                    id: SliceId::new_random(),
                    spec,
                    identity,
                    created: now(),
                };
                // Nothing on the host changes: no intent needed.
                self.write(|d| d.slices.insert(entry.id, entry.clone()))?;
                Ok((entry.id, true))
            }
            super::backend::Observed::Changed(why) => Err(EngineError::Conflict(why)),
            super::backend::Observed::Absent => {
                Ok((self.create_locked(&spec, Some(identity))?.id, false))
            }
        }
    }
}

fn read_definition(path: &Path) -> Result<MdevctlDefinition> {
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
    serde_json::from_slice(&text)
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
}
