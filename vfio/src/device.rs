//! Reading one PCI function: identity, driver, IOMMU group, NUMA locality, link, SR-IOV.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use ids::{IommuGroupId, NumaNodeId, PciAddress, PciDeviceId, PciVendorId};
use sysfs::{Sysfs, SysfsError, SysfsExt, error_chain};

use crate::sriov::{SriovInfo, read_sriov};
use crate::{PCI_DEVICES, VfioError, device_dir};

/// PCIe link state. Each field is `None` when the kernel says `Unknown` or the file is absent.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PcieLink {
    /// Current speed in GT/s (`16.0 GT/s PCIe` reads as 16.0).
    pub current_speed_gts: Option<f32>,
    /// Current number of lanes.
    pub current_width: Option<u32>,
    /// Highest speed the device supports, in GT/s.
    pub max_speed_gts: Option<f32>,
    /// Most lanes the device supports.
    pub max_width: Option<u32>,
}

/// Where a device's NUMA node came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NumaSource {
    /// The device's own `numa_node`.
    Device,
    /// The device said `-1`; the node is that of this upstream bridge in its sysfs path.
    Upstream(PciAddress),
    /// Neither the device nor any upstream bridge knows.
    Unknown,
}

/// One PCI function as sysfs shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PciDevice {
    /// The function's address.
    pub address: PciAddress,
    /// Vendor id.
    pub vendor: PciVendorId,
    /// Device id.
    pub device: PciDeviceId,
    /// Subsystem vendor id.
    pub subsystem_vendor: Option<PciVendorId>,
    /// Subsystem device id.
    pub subsystem_device: Option<PciDeviceId>,
    /// Class code, e.g. `0x030200` (base class, subclass, programming interface).
    pub class: u32,
    /// The bound driver's name, `None` when unbound.
    pub driver: Option<String>,
    /// `driver_override`; the kernel's `(null)` is `None`.
    pub driver_override: Option<String>,
    /// IOMMU group, `None` without an IOMMU.
    pub iommu_group: Option<IommuGroupId>,
    /// NUMA node, see `numa_source` for where it came from.
    pub numa_node: Option<NumaNodeId>,
    /// Where `numa_node` came from.
    pub numa_source: NumaSource,
    /// PCIe link, `None` when the device has no link attributes.
    pub link: Option<PcieLink>,
    /// SR-IOV state, for a physical function.
    pub sriov: Option<SriovInfo>,
    /// The physical function, for a virtual function.
    pub physfn: Option<PciAddress>,
    /// Optional attributes that were missing or garbage, one sentence each.
    pub problems: Vec<String>,
}

impl PciDevice {
    /// A display controller (VGA `0x0300xx`, 3D `0x0302xx`), or a processing accelerator
    /// (`0x1200xx`) from AMD or NVIDIA, which is how Instinct and some data-centre GPUs show up.
    pub fn is_gpu(&self) -> bool {
        is_gpu_class(self.vendor, self.class)
    }
    /// What [`read_identity`] reads of it, from what was read.
    pub fn identity(&self) -> PciIdentity {
        PciIdentity {
            address: self.address,
            vendor: self.vendor,
            class: self.class,
            is_vf: self.is_vf(),
            sriov_capable: self.sriov.is_some(),
            driver: self.driver.clone(),
            iommu_group: self.iommu_group,
        }
    }
    /// An SR-IOV virtual function (it has a `physfn` link).
    pub fn is_vf(&self) -> bool {
        self.physfn.is_some()
    }
}

/// The functions under `/sys/bus/pci/devices`, sorted. Entries that are not canonical PCI
/// addresses (or not UTF-8) are returned as errors beside the rest.
pub fn list_devices(fs: &dyn Sysfs) -> Result<(Vec<PciAddress>, Vec<VfioError>), VfioError> {
    let dir = Path::new(PCI_DEVICES);
    let (names, skipped) = fs.list_names(dir)?;
    let mut errors: Vec<VfioError> = skipped.into_iter().map(VfioError::from).collect();
    let mut found = Vec::new();
    for name in names {
        match canonical_address(&name) {
            Ok(addr) => found.push(addr),
            Err(reason) => errors.push(VfioError::BadDeviceName {
                path: dir.join(&name),
                reason,
            }),
        }
    }
    found.sort();
    Ok((found, errors))
}

/// A device name parsed as a PCI address, only in the kernel's own spelling: a name in another
/// spelling would make the paths built from the parsed address miss the entry.
pub(crate) fn canonical_address(name: &str) -> Result<PciAddress, String> {
    let addr: PciAddress = name.parse().map_err(|e: ids::IdError| e.to_string())?;
    if addr.to_string() != name {
        return Err(format!("the kernel spells it {addr}"));
    }
    Ok(addr)
}

/// Reads one function. Vendor, device and class are essential; everything else that is missing
/// or garbage is recorded in `problems` and left `None`.
pub fn read_device(fs: &dyn Sysfs, addr: PciAddress) -> Result<PciDevice, VfioError> {
    let (dir, vendor, class) = present(fs, addr)?;
    let device = (fs.read_parse(&dir.join("device"))).map_err(|e| essential(addr, e))?;
    let mut r = Reader {
        fs,
        dir,
        problems: Vec::new(),
    };
    let (numa_node, numa_source) = read_numa(&mut r);
    let mut dev = PciDevice {
        address: addr,
        vendor,
        device,
        subsystem_vendor: r.parsed("subsystem_vendor"),
        subsystem_device: r.parsed("subsystem_device"),
        class,
        driver: r.link_name("driver"),
        driver_override: r
            .text("driver_override")
            .filter(|s| !s.is_empty() && s != "(null)"),
        iommu_group: r.link_parsed("iommu_group"),
        numa_node,
        numa_source,
        link: read_pcie_link(&mut r),
        sriov: None,
        physfn: r.link_parsed("physfn"),
        problems: Vec::new(),
    };
    dev.sriov = read_sriov(&mut r);
    dev.problems = r.problems;
    Ok(dev)
}

/// What a function is, which driver has it and its IOMMU group, read with six attributes instead
/// of the whole device (a step that only checks what it is handed, again and again, needs no more).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciIdentity {
    /// The function.
    pub address: PciAddress,
    /// `vendor`.
    pub vendor: PciVendorId,
    /// `class`.
    pub class: u32,
    /// Whether it is an SR-IOV virtual function (it has a `physfn` link).
    pub is_vf: bool,
    /// Whether it can have VFs (it has `sriov_totalvfs`).
    pub sriov_capable: bool,
    /// The bound driver's name (the `driver` link), `None` when unbound.
    pub driver: Option<String>,
    /// The IOMMU group (the `iommu_group` link), `None` without an IOMMU or when unreadable.
    pub iommu_group: Option<IommuGroupId>,
}

impl PciIdentity {
    /// As [`PciDevice::is_gpu`].
    pub fn is_gpu(&self) -> bool {
        is_gpu_class(self.vendor, self.class)
    }
}

/// Reads what the function is ([`PciIdentity`]); `DeviceNotFound` when it is not present.
pub fn read_identity(fs: &dyn Sysfs, addr: PciAddress) -> Result<PciIdentity, VfioError> {
    let (dir, vendor, class) = present(fs, addr)?;
    Ok(PciIdentity {
        address: addr,
        vendor,
        class,
        is_vf: fs.exists(&dir.join("physfn")),
        sriov_capable: fs.exists(&dir.join("sriov_totalvfs")),
        driver: (fs.link_name_opt(&dir.join("driver"))).map_err(|e| essential(addr, e))?,
        iommu_group: Reader {
            fs,
            dir: dir.clone(),
            problems: Vec::new(),
        }
        .link_parsed("iommu_group"),
    })
}

/// The function's NUMA node as [`read_device`] finds it (its own `numa_node`, else the nearest
/// bridge's), without reading the rest; `None` where neither says or the function is gone.
pub fn numa_node(fs: &dyn Sysfs, addr: PciAddress) -> Option<NumaNodeId> {
    let mut r = Reader {
        fs,
        dir: device_dir(addr),
        problems: Vec::new(),
    };
    read_numa(&mut r).0
}

/// A present function's directory, vendor and class (every read of it needs them);
/// `DeviceNotFound` when it is not present.
fn present(fs: &dyn Sysfs, addr: PciAddress) -> Result<(PathBuf, PciVendorId, u32), VfioError> {
    let dir = device_dir(addr);
    if !fs.exists(&dir) {
        return Err(VfioError::DeviceNotFound(addr));
    }
    let vendor = fs
        .read_parse(&dir.join("vendor"))
        .map_err(|e| essential(addr, e))?;
    let class = read_class(fs, &dir.join("class")).map_err(|e| essential(addr, e))?;
    Ok((dir, vendor, class))
}

/// An attribute without which the function cannot be read.
fn essential(address: PciAddress, source: SysfsError) -> VfioError {
    VfioError::Device { address, source }
}

/// Whether `/sys/bus/pci/devices/<bdf>` exists (a VF that is not enabled has none).
pub fn device_exists(fs: &dyn Sysfs, addr: PciAddress) -> bool {
    fs.exists(&device_dir(addr))
}

/// Whether the function is an SR-IOV virtual function (it has a `physfn` link). Cheaper than
/// [`read_device`]: listing a host with hundreds of VFs checks this first.
pub fn is_virtual_function(fs: &dyn Sysfs, addr: PciAddress) -> bool {
    fs.exists(&device_dir(addr).join("physfn"))
}

/// The function's class code (`0x030200`) alone, without reading the rest of the device.
pub fn device_class(fs: &dyn Sysfs, addr: PciAddress) -> Result<u32, VfioError> {
    Ok(read_class(fs, &device_dir(addr).join("class"))?)
}

/// The name of the driver bound to the function (the `driver` link's target), `None` when it is
/// unbound.
pub fn bound_driver(fs: &dyn Sysfs, addr: PciAddress) -> Result<Option<String>, VfioError> {
    Ok(fs.link_name_opt(&device_dir(addr).join("driver"))?)
}

/// A VGA or 3D controller, or an AMD or NVIDIA processing accelerator.
fn is_gpu_class(vendor: PciVendorId, class: u32) -> bool {
    let class = class >> 8;
    let vendor_accel = matches!(vendor, PciVendorId::AMD | PciVendorId::NVIDIA);
    matches!(class, 0x0300 | 0x0302) || (class == 0x1200 && vendor_accel)
}

fn read_class(fs: &dyn Sysfs, path: &Path) -> Result<u32, SysfsError> {
    let text = fs.read_text(path)?;
    let digits = text.strip_prefix("0x").unwrap_or(&text);
    let valid = !digits.is_empty() && digits.len() <= 6;
    u32::from_str_radix(digits, 16)
        .ok()
        .filter(|_| valid)
        .ok_or_else(|| SysfsError::parse(path, format!("{text:?} is not a 24-bit class code")))
}

/// Reads optional attributes of one device directory, collecting what goes wrong.
pub(crate) struct Reader<'a> {
    pub(crate) fs: &'a dyn Sysfs,
    pub(crate) dir: PathBuf,
    pub(crate) problems: Vec<String>,
}

impl Reader<'_> {
    pub(crate) fn note(&mut self, err: &SysfsError) {
        self.problems.push(error_chain(err));
    }
    fn noted<T>(&mut self, result: Result<Option<T>, SysfsError>) -> Option<T> {
        result.unwrap_or_else(|e| {
            self.note(&e);
            None
        })
    }
    pub(crate) fn exists(&self, name: &str) -> bool {
        self.fs.exists(&self.dir.join(name))
    }
    pub(crate) fn text(&mut self, name: &str) -> Option<String> {
        let result = self.fs.read_text_opt(&self.dir.join(name));
        self.noted(result)
    }
    pub(crate) fn parsed<T: FromStr>(&mut self, name: &str) -> Option<T>
    where
        T::Err: Display,
    {
        let result = self.fs.read_parse_opt(&self.dir.join(name));
        self.noted(result)
    }
    pub(crate) fn link_name(&mut self, name: &str) -> Option<String> {
        let result = self.fs.link_name_opt(&self.dir.join(name));
        self.noted(result)
    }
    /// The name a link points to, parsed (`iommu_group` → 42, `physfn` → a PCI address).
    pub(crate) fn link_parsed<T: FromStr>(&mut self, name: &str) -> Option<T>
    where
        T::Err: Display,
    {
        let path = self.dir.join(name);
        let target = self.link_name(name)?;
        let parsed = target.parse::<T>().map_err(|e| {
            SysfsError::parse(&path, format!("link target {target:?} is not valid: {e}"))
        });
        self.noted(parsed.map(Some))
    }
}

fn read_numa(r: &mut Reader<'_>) -> (Option<NumaNodeId>, NumaSource) {
    let path = r.dir.join("numa_node");
    match r.parsed::<i64>("numa_node") {
        Some(-1) => upstream_numa(r),
        Some(n) => match u16::try_from(n) {
            Ok(n) => (Some(NumaNodeId(n)), NumaSource::Device),
            Err(_) => {
                r.note(&SysfsError::parse(&path, format!("{n} is not a NUMA node")));
                (None, NumaSource::Unknown)
            }
        },
        None => (None, NumaSource::Unknown),
    }
}

/// Firmware often leaves `numa_node` at -1 on endpoints while the root port or bridge above
/// knows it: take the nearest PCI ancestor in the resolved device path that has a node.
fn upstream_numa(r: &mut Reader<'_>) -> (Option<NumaNodeId>, NumaSource) {
    let real = match r.fs.resolve_link(&r.dir) {
        Ok(p) => p,
        Err(e) => {
            r.note(&e);
            return (None, NumaSource::Unknown);
        }
    };
    for ancestor in real.ancestors().skip(1) {
        let Some(bridge) = ancestor.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Ok(bridge) = bridge.parse::<PciAddress>() else {
            continue;
        };
        match r.fs.read_parse_opt::<i64>(&ancestor.join("numa_node")) {
            Ok(Some(n)) => {
                if let Ok(n) = u16::try_from(n) {
                    return (Some(NumaNodeId(n)), NumaSource::Upstream(bridge));
                }
            }
            Ok(None) => {}
            Err(e) => r.note(&e),
        }
    }
    (None, NumaSource::Unknown)
}

const LINK_FILES: [&str; 4] = [
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
];

fn read_pcie_link(r: &mut Reader<'_>) -> Option<PcieLink> {
    if !LINK_FILES.iter().any(|f| r.exists(f)) {
        return None;
    }
    Some(PcieLink {
        current_speed_gts: link_value(r, "current_link_speed", parse_speed),
        current_width: link_value(r, "current_link_width", parse_width),
        max_speed_gts: link_value(r, "max_link_speed", parse_speed),
        max_width: link_value(r, "max_link_width", parse_width),
    })
}

fn link_value<T>(
    r: &mut Reader<'_>,
    name: &str,
    parse: fn(&str) -> Result<Option<T>, String>,
) -> Option<T> {
    let text = r.text(name)?;
    match parse(&text) {
        Ok(v) => v,
        Err(why) => {
            r.note(&SysfsError::parse(
                r.dir.join(name),
                format!("{text:?}: {why}"),
            ));
            None
        }
    }
}

/// `16.0 GT/s PCIe` (kernel 5.x+), `16 GT/s` (older), `Unknown`.
fn parse_speed(text: &str) -> Result<Option<f32>, String> {
    if text.starts_with("Unknown") {
        return Ok(None);
    }
    let mut words = text.split_whitespace();
    let (number, unit) = (words.next().unwrap_or(""), words.next());
    if unit != Some("GT/s") {
        return Err("expected a speed in GT/s".to_owned());
    }
    match number.parse::<f32>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(Some(v)),
        _ => Err(format!("{number:?} is not a speed")),
    }
}

fn parse_width(text: &str) -> Result<Option<u32>, String> {
    if text.starts_with("Unknown") {
        return Ok(None);
    }
    let digits = text.strip_prefix('x').unwrap_or(text);
    digits
        .parse::<u32>()
        .map(Some)
        .map_err(|_| "expected a lane count".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds() {
        assert_eq!(parse_speed("16.0 GT/s PCIe"), Ok(Some(16.0)));
        assert_eq!(parse_speed("2.5 GT/s PCIe"), Ok(Some(2.5)));
        assert_eq!(parse_speed("16 GT/s"), Ok(Some(16.0)));
        assert_eq!(parse_speed("Unknown"), Ok(None));
        assert_eq!(parse_speed("Unknown speed"), Ok(None));
        for bad in [
            "",
            "fast",
            "16.0",
            "16.0 Gb/s",
            "NaN GT/s",
            "-8 GT/s",
            "inf GT/s",
        ] {
            assert!(parse_speed(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn widths() {
        assert_eq!(parse_width("16"), Ok(Some(16)));
        assert_eq!(parse_width("x8"), Ok(Some(8)));
        assert_eq!(parse_width("Unknown"), Ok(None));
        assert!(parse_width("wide").is_err());
        assert!(parse_width("-1").is_err());
    }

    #[test]
    fn canonical_names_only() {
        assert!(canonical_address("0000:41:00.0").is_ok());
        assert!(
            canonical_address("0000:AB:00.0")
                .unwrap_err()
                .contains("0000:ab:00.0")
        );
        assert!(canonical_address("pci0000:00").is_err());
    }

    fn dev(vendor: PciVendorId, class: u32) -> PciDevice {
        PciDevice {
            address: "0000:41:00.0".parse().unwrap(),
            vendor,
            device: PciDeviceId(0x2335),
            subsystem_vendor: None,
            subsystem_device: None,
            class,
            driver: None,
            driver_override: None,
            iommu_group: None,
            numa_node: None,
            numa_source: NumaSource::Unknown,
            link: None,
            sriov: None,
            physfn: None,
            problems: Vec::new(),
        }
    }

    /// A fixture function at `/sys/devices/pci0000:40/<bdf>`, linked from `/sys/bus/pci/devices`.
    fn function(tree: &sysfs::fixture::Tree, bdf: &str, class: &str) -> String {
        let dir = format!("/sys/devices/pci0000:40/{bdf}");
        tree.file(&format!("{dir}/class"), class);
        tree.link_to(&format!("/sys/bus/pci/devices/{bdf}"), &dir);
        dir
    }

    #[test]
    fn typed_helpers_read_one_function() {
        let tmp = tempfile::tempdir().unwrap();
        let tree = sysfs::fixture::Tree::new(tmp.path());
        let fs = sysfs::RealSysfs::new(tmp.path());
        let pf: PciAddress = "0000:41:00.0".parse().unwrap();
        let vf: PciAddress = "0000:41:00.4".parse().unwrap();
        let absent: PciAddress = "0000:41:01.0".parse().unwrap();
        let pf_dir = function(&tree, "0000:41:00.0", "0x030200\n");
        let vf_dir = function(&tree, "0000:41:00.4", "0x030200\n");
        tree.link_to(&format!("{vf_dir}/physfn"), &pf_dir);
        tree.dir("/sys/bus/pci/drivers/nvidia");
        tree.link_to(&format!("{pf_dir}/driver"), "/sys/bus/pci/drivers/nvidia");

        assert!(device_exists(&fs, pf) && device_exists(&fs, vf));
        assert!(!device_exists(&fs, absent));
        assert!(is_virtual_function(&fs, vf));
        assert!(!is_virtual_function(&fs, pf));
        assert_eq!(device_class(&fs, pf).unwrap(), 0x030200);
        assert!(device_class(&fs, absent).is_err());
        assert_eq!(bound_driver(&fs, pf).unwrap().as_deref(), Some("nvidia"));
        assert_eq!(bound_driver(&fs, vf).unwrap(), None);
        assert_eq!(bound_driver(&fs, absent).unwrap(), None);
    }

    #[test]
    fn garbage_class_codes_are_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let tree = sysfs::fixture::Tree::new(tmp.path());
        let fs = sysfs::RealSysfs::new(tmp.path());
        function(&tree, "0000:41:00.0", "display\n");
        let addr: PciAddress = "0000:41:00.0".parse().unwrap();
        assert!(device_class(&fs, addr).is_err());
    }

    #[test]
    fn gpu_classes() {
        assert!(dev(PciVendorId(0x8086), 0x030000).is_gpu());
        assert!(dev(PciVendorId::NVIDIA, 0x030200).is_gpu());
        assert!(dev(PciVendorId::AMD, 0x120000).is_gpu());
        assert!(dev(PciVendorId::NVIDIA, 0x120001).is_gpu());
        assert!(!dev(PciVendorId(0x8086), 0x120000).is_gpu());
        assert!(!dev(PciVendorId::NVIDIA, 0x040300).is_gpu()); // HDMI audio function
        assert!(!dev(PciVendorId::NVIDIA, 0x068000).is_gpu()); // NVSwitch bridge
        assert!(!dev(PciVendorId::NVIDIA, 0x030200).is_vf());
    }
}
