//! What a GPU's PCI functions show in sysfs and `/proc`: the SR-IOV files, driver links, the
//! NVIDIA driver's `unbindLock`, and every `nvidia/*` file of each VF with its contents or errno.

use std::collections::BTreeMap;
use std::path::Path;

use ids::PciAddress;
use serde::{Deserialize, Serialize};

use crate::paths;
use crate::reads::ReadSysfs;

/// Bigger than any attribute the probe reads; `creatable_vgpu_types` is the longest.
const READ_LIMIT: usize = sysfs::DEFAULT_READ_LIMIT;

/// PF attributes recorded as they are.
const PF_FILES: &[&str] = &[
    "vendor",
    "device",
    "subsystem_vendor",
    "subsystem_device",
    "sriov_totalvfs",
    "sriov_numvfs",
    "sriov_offset",
    "sriov_stride",
    "sriov_vf_device",
    "sriov_drivers_autoprobe",
    "reset_method",
];

/// One file as read: its text, a link's target name, or why it could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileObservation {
    /// The contents, surrounding whitespace removed.
    Text(String),
    /// The last component of a link's target (a driver's name).
    Link(String),
    /// The file exists (contents not read on purpose).
    Present,
    /// No such file.
    Absent,
    /// The read failed with this errno.
    Errno {
        /// The errno number.
        errno: i32,
        /// Its text (`Input/output error`).
        message: String,
    },
    /// The read failed otherwise (not UTF-8, too long).
    Error(String),
}

impl FileObservation {
    /// Reads a text file.
    pub fn read(fs: ReadSysfs<'_>, path: &Path) -> Self {
        match fs.read(path, READ_LIMIT) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => Self::Text(text.trim().to_owned()),
                Err(_) => Self::Error("not UTF-8".to_owned()),
            },
            Err(e) => Self::failed(&e),
        }
    }

    /// Reads a link's target name.
    pub fn link(fs: ReadSysfs<'_>, path: &Path) -> Self {
        match fs.read_link(path) {
            Ok(target) => match target.file_name().and_then(|n| n.to_str()) {
                Some(name) => Self::Link(name.to_owned()),
                None => Self::Error(format!("link target {target:?} has no name")),
            },
            Err(e) => Self::failed(&e),
        }
    }

    /// Whether the file exists, without reading it.
    pub fn presence(fs: ReadSysfs<'_>, path: &Path) -> Self {
        if fs.exists(path) {
            Self::Present
        } else {
            Self::Absent
        }
    }

    fn failed(e: &sysfs::SysfsError) -> Self {
        if e.is_not_found() {
            return Self::Absent;
        }
        match e.errno() {
            Some(errno) => Self::Errno {
                errno,
                message: std::io::Error::from_raw_os_error(errno).to_string(),
            },
            None => Self::Error(e.source.to_string()),
        }
    }
}

/// A VF of the GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VfObservation {
    /// Its address.
    pub address: PciAddress,
    /// `driver` (link) and every `nvidia/<name>` entry.
    pub files: BTreeMap<String, FileObservation>,
}

/// The GPU's physical function and its VFs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciObservation {
    /// The PF's address.
    pub address: PciAddress,
    /// [`PF_FILES`], `driver` (link), `nvidia/<name>` entries, and the `/proc` ones as
    /// `proc/unbindLock` (presence only) and `proc/information`.
    pub files: BTreeMap<String, FileObservation>,
    /// The VFs the `virtfn*` links name, in address order.
    pub vfs: Vec<VfObservation>,
}

/// Reads the PF's files and its VFs'.
pub fn observe_pci(fs: ReadSysfs<'_>, pf: PciAddress) -> PciObservation {
    let dir = paths::pci_device(pf);
    let mut files: BTreeMap<String, FileObservation> = PF_FILES
        .iter()
        .map(|name| {
            (
                (*name).to_owned(),
                FileObservation::read(fs, &dir.join(name)),
            )
        })
        .collect();
    files.insert(
        "driver".to_owned(),
        FileObservation::link(fs, &dir.join("driver")),
    );
    files.extend(nvidia_files(fs, &dir));
    let proc_dir = paths::nvidia_proc_gpu(pf);
    // Presence only: the lock is what `sriov-manage` takes; reading it is not needed to know
    // whether the sequence can run.
    files.insert(
        "proc/unbindLock".to_owned(),
        FileObservation::presence(fs, &proc_dir.join("unbindLock")),
    );
    files.insert(
        "proc/information".to_owned(),
        FileObservation::read(fs, &proc_dir.join("information")),
    );
    let vfs = vf_addresses(fs, &dir)
        .into_iter()
        .map(|vf| observe_vf(fs, vf))
        .collect();
    PciObservation {
        address: pf,
        files,
        vfs,
    }
}

fn observe_vf(fs: ReadSysfs<'_>, vf: PciAddress) -> VfObservation {
    let dir = paths::pci_device(vf);
    let mut files = BTreeMap::new();
    files.insert(
        "driver".to_owned(),
        FileObservation::link(fs, &dir.join("driver")),
    );
    files.extend(nvidia_files(fs, &dir));
    VfObservation { address: vf, files }
}

/// Every entry of `<dir>/nvidia/`, read; none when the directory is missing.
fn nvidia_files(fs: ReadSysfs<'_>, dir: &Path) -> BTreeMap<String, FileObservation> {
    let nvidia = dir.join("nvidia");
    let Ok(names) = fs.list_dir(&nvidia) else {
        return BTreeMap::new();
    };
    let mut names: Vec<String> = names
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let seen = FileObservation::read(fs, &nvidia.join(&name));
            (format!("nvidia/{name}"), seen)
        })
        .collect()
}

/// The VFs of a PF, from its `virtfnN` links.
fn vf_addresses(fs: ReadSysfs<'_>, dir: &Path) -> Vec<PciAddress> {
    let Ok(names) = fs.list_dir(dir) else {
        return Vec::new();
    };
    let mut vfs: Vec<PciAddress> = names
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .filter(|n| n.starts_with("virtfn"))
        .filter_map(|n| fs.read_link(&dir.join(n)).ok())
        .filter_map(|t| t.file_name()?.to_str()?.parse().ok())
        .collect();
    vfs.sort();
    vfs
}

/// NVIDIA PCI functions (vendor `0x10de`, class 03xx) sysfs lists, for the "no GPU" message.
pub fn nvidia_display_functions(fs: ReadSysfs<'_>) -> Vec<PciAddress> {
    let root = Path::new(paths::PCI_DEVICES);
    let Ok(names) = fs.list_dir(root) else {
        return Vec::new();
    };
    let text = |addr: &str, file: &str| match FileObservation::read(fs, &root.join(addr).join(file))
    {
        FileObservation::Text(t) => t,
        _ => String::new(),
    };
    let mut out: Vec<PciAddress> = names
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .filter(|n| text(n, "vendor") == "0x10de" && text(n, "class").starts_with("0x03"))
        .filter_map(|n| n.parse().ok())
        .collect();
    out.sort();
    out
}
