//! Host profiles: the hardware of a simulated host, as TOML (schema in `sim/profiles/README.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use ids::{MdevParentName, MdevTypeId, MigProfileName, PciAddress, PciDeviceId, PciVendorId};
use serde::{Deserialize, Serialize};

use crate::SimError;
use crate::mig::MigFamily;
use crate::util::parse_cpulist;

/// A simulated host's hardware and boot-time configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Profile name (`dgx-a100`).
    pub name: String,
    /// The host name the simulated host reports.
    pub hostname: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// NVIDIA driver version NVML reports.
    #[serde(default = "default_driver_version")]
    pub nvidia_driver_version: String,
    /// Seed of the telemetry random walk.
    #[serde(default)]
    pub telemetry_seed: u64,
    /// NVIDIA GPUs whose model has `nvlink = true` are all connected through NVSwitch.
    #[serde(default)]
    pub nvswitch: bool,
    /// NUMA nodes.
    pub numa_nodes: Vec<NumaNodeSpec>,
    /// PCI bridges: root ports and switch ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bridges: Vec<BridgeSpec>,
    /// GPU models, by a short key the GPUs refer to.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, GpuModel>,
    /// GPUs (physical functions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuSpec>,
    /// Other PCI functions (NICs, NVMe, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceSpec>,
    /// mdev parents other than NVIDIA GPUs: the kernel's sample drivers (`mtty`, `mdpy`,
    /// `mbochs`) under `/sys/devices/virtual`, or PCI functions of the profile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mdev_parents: Vec<MdevParentSpec>,
}

fn default_driver_version() -> String {
    "550.90.07".to_owned()
}

/// A NUMA node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumaNodeSpec {
    /// Node number.
    pub id: u16,
    /// CPU list (`0-63,128-191`); empty for a memory-only node.
    pub cpus: String,
    /// Memory, MiB.
    pub memory_mib: u64,
    /// Free memory, MiB (default: 95 % of `memory_mib`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_free_mib: Option<u64>,
    /// Distances to every node, in node order (`[10, 32]`).
    pub distances: Vec<u32>,
}

/// A PCI bridge (root port or switch port).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BridgeSpec {
    /// Address.
    pub address: PciAddress,
    /// Upstream bridge; none for a root port (it sits on root bus `pci<domain>:<bus>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<PciAddress>,
    /// Vendor id.
    pub vendor: PciVendorId,
    /// Device id.
    pub device: PciDeviceId,
    /// PCI class (default `0x060400`, a PCI-to-PCI bridge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// NUMA node sysfs reports (-1 for none).
    pub numa_node: i32,
    /// Driver (default `pcieport`; `""` for none, as for a conventional PCI bridge).
    #[serde(default = "default_bridge_driver")]
    pub driver: String,
    /// IOMMU group (default: assigned in address order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iommu_group: Option<u32>,
}

impl BridgeSpec {
    /// The driver bound at boot; none for an empty name.
    pub(crate) fn boot_driver(&self) -> Option<String> {
        (!self.driver.is_empty()).then(|| self.driver.clone())
    }
}

fn default_bridge_driver() -> String {
    "pcieport".to_owned()
}

/// A GPU model: what every GPU of this kind has in common.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuModel {
    /// Vendor id (`10de`, `1002`).
    pub vendor: PciVendorId,
    /// Device id.
    pub device: PciDeviceId,
    /// Subsystem vendor id (default: the vendor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsystem_vendor: Option<PciVendorId>,
    /// Subsystem device id (default: `0000`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsystem_device: Option<PciDeviceId>,
    /// PCI class, `0x030200` (3D controller), `0x030000` (VGA), `0x120000` (accelerator).
    pub class: String,
    /// Product name as the vendor library reports it (`NVIDIA A100-SXM4-80GB`).
    pub name: String,
    /// Framebuffer, MiB, as NVML / AMD SMI report it.
    pub memory_mib: u64,
    /// Framebuffer vGPU sizing divides (default `memory_mib`; NVIDIA sizes by the nominal GB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vgpu_framebuffer_mib: Option<u64>,
    /// Default driver (`nvidia`, `amdgpu`).
    pub driver: String,
    /// Link speed (`16.0 GT/s PCIe`).
    #[serde(default = "default_link_speed")]
    pub link_speed: String,
    /// Link width.
    #[serde(default = "default_link_width")]
    pub link_width: u32,
    /// MIG profile table, for MIG-capable NVIDIA GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<MigFamily>,
    /// SR-IOV capability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sriov: Option<SriovSpec>,
    /// NVIDIA vendor-specific VFIO vGPU types (created per VF).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vgpu_types: Vec<VgpuTypeSpec>,
    /// mdev types the GPU offers when bound to its default driver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mdev_types: Vec<MdevTypeSpec>,
    /// AMD partition modes and VFs per mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amd: Option<AmdSpec>,
    /// Has NVLink to NVSwitch (with the host's `nvswitch = true`): every link's far end is an
    /// NVSwitch (`nvmlDeviceGetNvLinkRemoteDeviceType` = SWITCH), none a GPU.
    #[serde(default)]
    pub nvlink: bool,
    /// Answers `nvmlDeviceGetGpuFabricInfo` (Hopper and newer): registered with Fabric Manager on
    /// the host's NVLink fabric. Without it (A100) the switch links join the host's one fabric.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fabric_info: bool,
    /// A MIG mode change is a vGPU host's: refused while the GPU has SR-IOV VFs and pending
    /// until a GPU reset (or reboot), even on an idle GPU (issue 13, fact 4; NVIDIA gpu-operator
    /// PR 2603 resets only GPUs without VFs). Without it the driver applies a change at once on
    /// an idle GPU, as bare-metal Hopper does (gpu-operator issue 2600).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mig_mode_needs_reset: bool,
    /// Board power limit, W (telemetry).
    #[serde(default = "default_power")]
    pub power_limit_w: u32,
    /// Idle power, W (telemetry).
    #[serde(default = "default_idle")]
    pub idle_power_w: u32,
    /// Highest SM clock, MHz (telemetry).
    #[serde(default = "default_sm_clock")]
    pub sm_clock_mhz: u32,
    /// Memory clock, MHz (telemetry).
    #[serde(default = "default_mem_clock")]
    pub mem_clock_mhz: u32,
}

fn default_link_speed() -> String {
    "16.0 GT/s PCIe".to_owned()
}
fn default_link_width() -> u32 {
    16
}
fn default_power() -> u32 {
    300
}
fn default_idle() -> u32 {
    50
}
fn default_sm_clock() -> u32 {
    1410
}
fn default_mem_clock() -> u32 {
    1215
}

/// SR-IOV capability of a physical function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SriovSpec {
    /// `sriov_totalvfs`.
    pub total_vfs: u32,
    /// First VF's routing-id offset from the PF.
    pub offset: u32,
    /// Routing-id distance between VFs.
    pub stride: u32,
    /// VF device id (default: the PF's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vf_device: Option<PciDeviceId>,
    /// Driver VFs bind to when they appear; none leaves them unbound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vf_driver: Option<String>,
    /// VFs a boot-time service enables (NVIDIA's `sriov-manage -e ALL`); 0 for none.
    #[serde(default)]
    pub boot_vfs: u32,
    /// What writing `0` to a VF's `nvidia/current_vgpu_type` answers while a VM holds the VF
    /// (field reports differ by driver release: `EBUSY` on some, `EPERM` on others).
    #[serde(default, skip_serializing_if = "VgpuInUseErrno::is_default")]
    pub vgpu_in_use: VgpuInUseErrno,
}

/// The errno of a vGPU removal refused because a VM holds the VF.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum VgpuInUseErrno {
    /// `EBUSY` (the default).
    #[default]
    Ebusy,
    /// `EPERM`.
    Eperm,
}

impl VgpuInUseErrno {
    fn is_default(&self) -> bool {
        *self == VgpuInUseErrno::default()
    }
}

/// An NVIDIA vendor-specific VFIO vGPU type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VgpuTypeSpec {
    /// Type id written to `current_vgpu_type`.
    pub id: u32,
    /// Name (`NVIDIA H200X-1-18C`).
    pub name: String,
    /// Class NVML reports (`Compute`, `Quadro`, `NVS`).
    #[serde(default = "default_vgpu_class")]
    pub class: String,
    /// Framebuffer per vGPU, MiB.
    pub framebuffer_mib: u64,
    /// Most vGPUs of this type on one GPU.
    pub max_instances: u32,
    /// MIG-backed types: the GPU-instance profile each vGPU takes (needs MIG mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_profile: Option<MigProfileName>,
}

fn default_vgpu_class() -> String {
    "Compute".to_owned()
}

/// An mdev type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MdevTypeSpec {
    /// Type id (`nvidia-230`).
    pub id: MdevTypeId,
    /// Name (`GRID T4-1Q`).
    pub name: String,
    /// `description` contents.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Class NVML reports (`Quadro`, `NVS`, `Compute`); default from the name's last letter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Framebuffer per device, MiB.
    pub framebuffer_mib: u64,
    /// Most devices (default: vGPU framebuffer / type framebuffer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_instances: Option<u32>,
}

/// AMD partition modes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmdSpec {
    /// Compute modes offered (`SPX`, `DPX`, `QPX`, `CPX`).
    pub compute_modes: Vec<String>,
    /// Memory modes offered (`NPS1`, `NPS4`).
    pub memory_modes: Vec<String>,
    /// Compute mode at first boot.
    pub compute: String,
    /// Memory mode at first boot.
    pub memory: String,
    /// The VF counts GIM allows in each compute mode (libgv's `support_vf_num` per accelerator
    /// profile: `{ SPX = [1], CPX = [1, 2, 4, 8] }`); unused on bare-metal amdgpu.
    pub vfs_per_mode: BTreeMap<String, Vec<u32>>,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// Address of the physical function.
    pub address: PciAddress,
    /// Upstream bridge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<PciAddress>,
    /// Key into `models`.
    pub model: String,
    /// UUID (default: derived from host name and address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// NUMA node sysfs reports; -1 for "firmware gave none"; default: the parent bridge's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<i32>,
    /// MIG mode at first boot (MIG-capable models).
    #[serde(default)]
    pub mig_enabled: bool,
    /// IOMMU group (default: assigned in address order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iommu_group: Option<u32>,
    /// NVLink peers besides NVSwitch all-to-all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvlink_peers: Vec<PciAddress>,
    /// AMD XGMI hive id (amdgpu's `xgmi_hive_info/xgmi_hive_id`); GPUs with the same id form
    /// one hive, which shares one memory partition request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xgmi_hive: Option<u64>,
}

/// Another PCI function (NIC, storage).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    /// Address.
    pub address: PciAddress,
    /// Upstream bridge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<PciAddress>,
    /// Vendor id.
    pub vendor: PciVendorId,
    /// Device id.
    pub device: PciDeviceId,
    /// Subsystem vendor id (default: the vendor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsystem_vendor: Option<PciVendorId>,
    /// Subsystem device id (default: `0000`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsystem_device: Option<PciDeviceId>,
    /// PCI class (`0x020000`).
    pub class: String,
    /// Default driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// NUMA node; default: the parent bridge's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<i32>,
    /// IOMMU group (default: assigned in address order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iommu_group: Option<u32>,
    /// Link speed.
    #[serde(default = "default_link_speed")]
    pub link_speed: String,
    /// Link width.
    #[serde(default = "default_link_width")]
    pub link_width: u32,
    /// SR-IOV capability (a NIC's VFs behave exactly like a GPU's at the sysfs level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sriov: Option<SriovSpec>,
}

/// An mdev parent that is not an NVIDIA GPU (whose types live in its model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MdevParentSpec {
    /// The name under `/sys/class/mdev_bus`: `mtty`, or the address of a device of the profile.
    pub name: MdevParentName,
    /// The parent device's directory, for a parent that is not a PCI function (default
    /// `/sys/devices/virtual/<name>/<name>`, where the kernel's samples register theirs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_path: Option<String>,
    /// How the types share the parent's capacity.
    pub capacity: MdevCapacity,
    /// The types under `mdev_supported_types`.
    pub types: Vec<MdevParentTypeSpec>,
}

/// How the types of an mdev parent share its capacity. NVIDIA GPUs (types in the GPU model)
/// follow a fourth rule, homogeneous: one type at a time, each limited by framebuffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum MdevCapacity {
    /// A pool of this many units (mtty: 24 ports; mbochs: MiB of video memory); a device of a
    /// type takes the type's `cost`, `available_instances` is free units / cost, and a create
    /// that does not fit fails in the driver's probe with `ENOSPC`.
    Pool(u32),
    /// The mdev core's own count (a driver with `max_instances` and no `get_available`, like
    /// mdpy): every type shows the same remaining count; at 0 the core refuses with `EUSERS`.
    Instances(u32),
    /// Each type has its own `max_instances`, independent of the others; exhausted → `EINVAL`.
    PerType,
}

/// A type of an [`MdevParentSpec`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MdevParentTypeSpec {
    /// Type id (`mtty-2`).
    pub id: MdevTypeId,
    /// `name` contents (`Dual port serial`).
    pub name: String,
    /// `description` contents; none leaves the file out, as drivers without one do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `device_api` (default `vfio-pci`).
    #[serde(default = "default_device_api")]
    pub device_api: String,
    /// Units of a `pool` one device takes (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<u32>,
    /// Most devices of this type, for `per-type` capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_instances: Option<u32>,
}

fn default_device_api() -> String {
    "vfio-pci".to_owned()
}

impl MdevParentSpec {
    /// The parent's device directory: the PCI function's for a PCI parent (`None` here; the
    /// caller knows PCI directories), else `device_path` or the samples' default.
    pub(crate) fn virtual_dir(&self) -> Option<String> {
        if self.name.pci_address().is_some() {
            return None;
        }
        Some(
            self.device_path
                .clone()
                .unwrap_or_else(|| format!("/sys/devices/virtual/{0}/{0}", self.name.as_str())),
        )
    }
}

const BUILTIN: &[(&str, &str)] = &[
    ("dgx-a100", include_str!("../profiles/dgx-a100.toml")),
    ("hgx-h200", include_str!("../profiles/hgx-h200.toml")),
    ("vdi-mixed", include_str!("../profiles/vdi-mixed.toml")),
    ("single-gpu", include_str!("../profiles/single-gpu.toml")),
    ("mi300x", include_str!("../profiles/mi300x.toml")),
];
const BUILTIN_NAMES: &[&str] = &[
    "dgx-a100",
    "hgx-h200",
    "vdi-mixed",
    "single-gpu",
    "mi300x",
    crate::vgpu_host::NAME,
    crate::gim_host::NAME,
];

impl Profile {
    /// A built-in profile by name.
    pub fn builtin(name: &str) -> Result<Profile, SimError> {
        if name == crate::vgpu_host::NAME {
            return Profile::builtin(crate::vgpu_host::BASE).map(crate::vgpu_host::derive);
        }
        if name == crate::gim_host::NAME {
            return Profile::builtin(crate::gim_host::BASE).map(crate::gim_host::derive);
        }
        let (_, text) =
            BUILTIN
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| SimError::UnknownProfile {
                    name: name.to_owned(),
                    known: BUILTIN_NAMES.join(", "),
                })?;
        Profile::from_toml(text)
    }

    /// Names of the built-in profiles.
    pub fn builtin_names() -> &'static [&'static str] {
        BUILTIN_NAMES
    }

    /// Parses and checks a profile.
    pub fn from_toml(text: &str) -> Result<Profile, SimError> {
        let profile: Profile = toml::from_str(text).map_err(SimError::ProfileSyntax)?;
        profile.validate()?;
        Ok(profile)
    }

    /// Reads a profile file.
    pub fn load(path: &Path) -> Result<Profile, SimError> {
        let text = std::fs::read_to_string(path).map_err(|e| SimError::io(path, e))?;
        Profile::from_toml(&text)
    }

    /// The profile as TOML.
    pub fn to_toml(&self) -> Result<String, SimError> {
        toml::to_string_pretty(self).map_err(SimError::ProfileEncode)
    }

    /// The model of a GPU.
    pub(crate) fn model_of(&self, gpu: &GpuSpec) -> Option<&GpuModel> {
        self.models.get(&gpu.model)
    }

    /// Checks that the profile describes a possible host.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |reason: String| Err(SimError::invalid_profile(&self.name, reason));
        if self.name.trim().is_empty() || self.hostname.trim().is_empty() {
            return bad("name and hostname must not be empty".into());
        }
        self.validate_numa().or_else(bad)?;
        // SR-IOV shapes first: a zero stride would otherwise read as VFs colliding.
        for (key, model) in &self.models {
            validate_model(model).or_else(|r| bad(format!("model {key:?}: {r}")))?;
        }
        for dev in &self.devices {
            if let Some(s) = &dev.sriov {
                validate_sriov(s).or_else(|r| bad(format!("device {}: {r}", dev.address)))?;
            }
        }
        self.validate_addresses().or_else(bad)?;
        self.validate_parents().or_else(bad)?;
        for gpu in &self.gpus {
            self.validate_gpu(gpu)
                .or_else(|r| bad(format!("GPU {}: {r}", gpu.address)))?;
        }
        for dev in &self.devices {
            check_driver_name(dev.driver.as_deref())
                .or_else(|r| bad(format!("device {}: {r}", dev.address)))?;
            self.check_node(dev.numa_node)
                .or_else(|r| bad(format!("device {}: {r}", dev.address)))?;
            parse_class(&dev.class)
                .map(|_| ())
                .or_else(|r| bad(format!("device {}: {r}", dev.address)))?;
        }
        for b in &self.bridges {
            check_driver_name(b.boot_driver().as_deref())
                .or_else(|r| bad(format!("bridge {}: {r}", b.address)))?;
            self.check_node(Some(b.numa_node))
                .or_else(|r| bad(format!("bridge {}: {r}", b.address)))?;
            if let Some(c) = &b.class {
                parse_class(c)
                    .map(|_| ())
                    .or_else(|r| bad(format!("bridge {}: {r}", b.address)))?;
            }
        }
        self.validate_mdev_parents().or_else(bad)?;
        Ok(())
    }

    fn validate_mdev_parents(&self) -> Result<(), String> {
        let mut names = BTreeSet::new();
        let mut dirs = BTreeSet::new();
        for p in &self.mdev_parents {
            let what = format!("mdev parent {}", p.name);
            if !names.insert(p.name.clone()) {
                return Err(format!("{what} is listed twice"));
            }
            match p.name.pci_address() {
                Some(addr) => self
                    .check_pci_parent(addr, p)
                    .map_err(|r| format!("{what}: {r}"))?,
                None => {
                    let dir = p.virtual_dir().unwrap_or_default();
                    check_virtual_dir(&dir).map_err(|r| format!("{what}: {r}"))?;
                    if !dirs.insert(dir.clone()) {
                        return Err(format!("{what}: device path {dir} is used twice"));
                    }
                }
            }
            validate_parent_types(p).map_err(|r| format!("{what}: {r}"))?;
        }
        Ok(())
    }

    fn check_pci_parent(&self, addr: PciAddress, p: &MdevParentSpec) -> Result<(), String> {
        if p.device_path.is_some() {
            return Err("a PCI parent's directory is its device's: leave device_path out".into());
        }
        let device = self.devices.iter().any(|d| d.address == addr);
        let gpu = self.gpus.iter().find(|g| g.address == addr);
        if gpu
            .and_then(|g| self.model_of(g))
            .is_some_and(|m| !m.mdev_types.is_empty())
        {
            return Err("the GPU's model already has mdev types".into());
        }
        if device || gpu.is_some() {
            Ok(())
        } else {
            Err("no device or GPU of the profile has this address".into())
        }
    }

    /// The SR-IOV capability of a physical function of the profile (GPU or other device).
    pub(crate) fn sriov_of(&self, pf: PciAddress) -> Option<&SriovSpec> {
        if let Some((_, model)) = self.gpu(pf) {
            return model.sriov.as_ref();
        }
        self.devices
            .iter()
            .find(|d| d.address == pf)
            .and_then(|d| d.sriov.as_ref())
    }

    /// Every physical function with SR-IOV, with its capability.
    pub(crate) fn sriov_pfs(&self) -> Vec<(PciAddress, &SriovSpec)> {
        let gpus = self
            .gpus
            .iter()
            .filter_map(|g| Some((g.address, self.model_of(g)?.sriov.as_ref()?)));
        let devices = self
            .devices
            .iter()
            .filter_map(|d| Some((d.address, d.sriov.as_ref()?)));
        gpus.chain(devices).collect()
    }

    fn validate_numa(&self) -> Result<(), String> {
        if self.numa_nodes.is_empty() {
            return Err("at least one NUMA node is needed".into());
        }
        let mut ids = BTreeSet::new();
        let mut all_cpus = BTreeSet::new();
        for n in &self.numa_nodes {
            if !ids.insert(n.id) {
                return Err(format!("NUMA node {} is listed twice", n.id));
            }
            if n.distances.len() != self.numa_nodes.len() {
                return Err(format!("NUMA node {} needs one distance per node", n.id));
            }
            let cpus = parse_cpulist(&n.cpus).map_err(|e| format!("NUMA node {}: {e}", n.id))?;
            if cpus.iter().any(|c| !all_cpus.insert(*c)) {
                return Err(format!("NUMA node {} shares CPUs with another node", n.id));
            }
            if n.memory_free_mib.is_some_and(|f| f > n.memory_mib) {
                return Err(format!(
                    "NUMA node {} has more free memory than memory",
                    n.id
                ));
            }
        }
        Ok(())
    }

    fn check_node(&self, node: Option<i32>) -> Result<(), String> {
        match node {
            None | Some(-1) => Ok(()),
            Some(n) if self.numa_nodes.iter().any(|x| i32::from(x.id) == n) => Ok(()),
            Some(n) => Err(format!("NUMA node {n} does not exist")),
        }
    }

    /// Every address in use, with the VFs SR-IOV could create.
    fn validate_addresses(&self) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        let mut claim = |a: PciAddress, what: &str| {
            if seen.insert(a) {
                Ok(())
            } else {
                Err(format!("address {a} is used twice ({what})"))
            }
        };
        for b in &self.bridges {
            claim(b.address, "bridge")?;
        }
        for d in &self.devices {
            claim(d.address, "device")?;
        }
        for g in &self.gpus {
            claim(g.address, "GPU")?;
        }
        for (pf, sriov) in self.sriov_pfs() {
            for i in 0..sriov.total_vfs {
                let vf = vf_address(pf, sriov, i)
                    .ok_or_else(|| format!("VF {i} of {pf} has no valid address"))?;
                claim(vf, "VF")?;
            }
        }
        Ok(())
    }

    fn validate_parents(&self) -> Result<(), String> {
        let bridges: BTreeMap<PciAddress, Option<PciAddress>> =
            self.bridges.iter().map(|b| (b.address, b.parent)).collect();
        let parents = self
            .bridges
            .iter()
            .map(|b| (b.address, b.parent))
            .chain(self.gpus.iter().map(|g| (g.address, g.parent)))
            .chain(self.devices.iter().map(|d| (d.address, d.parent)));
        for (addr, parent) in parents {
            let mut next = parent;
            for _ in 0..=bridges.len() {
                let Some(p) = next else { break };
                if p == addr {
                    return Err(format!("{addr} is its own ancestor"));
                }
                next = *bridges
                    .get(&p)
                    .ok_or_else(|| format!("{addr}: parent {p} is not a bridge of the profile"))?;
            }
            if next.is_some() {
                return Err(format!("{addr}: the bridges above it form a loop"));
            }
        }
        Ok(())
    }

    fn validate_gpu(&self, gpu: &GpuSpec) -> Result<(), String> {
        let model = self
            .model_of(gpu)
            .ok_or_else(|| format!("unknown model {:?}", gpu.model))?;
        self.check_node(gpu.numa_node)?;
        if gpu.mig_enabled && model.mig.is_none() {
            return Err("mig_enabled on a model without MIG".into());
        }
        for peer in &gpu.nvlink_peers {
            if !self
                .gpus
                .iter()
                .any(|g| g.address == *peer && g.address != gpu.address)
            {
                return Err(format!(
                    "NVLink peer {peer} is not another GPU of the profile"
                ));
            }
        }
        Ok(())
    }

    /// The GPU at an address.
    pub(crate) fn gpu(&self, addr: PciAddress) -> Option<(&GpuSpec, &GpuModel)> {
        let spec = self.gpus.iter().find(|g| g.address == addr)?;
        Some((spec, self.model_of(spec)?))
    }
}

fn validate_model(m: &GpuModel) -> Result<(), String> {
    parse_class(&m.class)?;
    check_driver_name(Some(&m.driver))?;
    let nvidia = m.vendor == PciVendorId::NVIDIA;
    if m.mig.is_some() && !nvidia {
        return Err("only NVIDIA GPUs have MIG".into());
    }
    if m.memory_mib == 0 {
        return Err("memory_mib must be positive".into());
    }
    if let Some(s) = &m.sriov {
        validate_sriov(s)?;
    }
    if !m.vgpu_types.is_empty() && (!nvidia || m.sriov.is_none()) {
        return Err("vendor-VFIO vGPU types need an NVIDIA GPU with SR-IOV".into());
    }
    let mut ids = BTreeSet::new();
    for t in &m.vgpu_types {
        if t.id == 0 || !ids.insert(t.id) || t.framebuffer_mib == 0 || t.max_instances == 0 {
            return Err(format!(
                "vGPU type {} needs a unique non-zero id, framebuffer and max_instances",
                t.id
            ));
        }
        if let Some(p) = &t.mig_profile {
            let family = m.mig.ok_or_else(|| {
                format!("vGPU type {} is MIG-backed on a model without MIG", t.id)
            })?;
            if family.profile_named(p).is_none() {
                return Err(format!(
                    "vGPU type {}: MIG profile {p} is not in {family:?}",
                    t.id
                ));
            }
        }
    }
    let mut names = BTreeSet::new();
    for t in &m.mdev_types {
        if !names.insert(t.id.clone()) || t.framebuffer_mib == 0 {
            return Err(format!(
                "mdev type {} needs a unique id and a framebuffer",
                t.id
            ));
        }
    }
    if let Some(a) = &m.amd {
        if !a.compute_modes.contains(&a.compute) || !a.memory_modes.contains(&a.memory) {
            return Err("the AMD boot partition modes must be among the available ones".into());
        }
        if let Some(k) = a.vfs_per_mode.keys().find(|k| !a.compute_modes.contains(k)) {
            return Err(format!("vfs_per_mode names unknown compute mode {k:?}"));
        }
        if a.compute_modes
            .iter()
            .chain(&a.memory_modes)
            .any(|x| x.is_empty() || x.contains([',', ' ', '\n']))
        {
            return Err("partition mode names must be single words".into());
        }
    }
    Ok(())
}

fn validate_sriov(s: &SriovSpec) -> Result<(), String> {
    check_driver_name(s.vf_driver.as_deref())?;
    if s.total_vfs == 0 || s.stride == 0 || s.offset == 0 || s.boot_vfs > s.total_vfs {
        return Err(
            "SR-IOV needs total_vfs, offset and stride above 0 and boot_vfs <= total_vfs".into(),
        );
    }
    Ok(())
}

/// A virtual parent's directory must be a plain absolute path under `/sys/devices`, outside
/// the PCI hierarchy the simulator renders.
fn check_virtual_dir(dir: &str) -> Result<(), String> {
    let rest = dir.strip_prefix("/sys/devices/").unwrap_or("");
    let plain = !rest.is_empty()
        && rest
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && c.len() <= 255);
    if !plain || rest.starts_with("pci") || rest.starts_with("system/") {
        return Err(format!(
            "device path {dir:?} must be a normalised path under /sys/devices outside pci* and system"
        ));
    }
    Ok(())
}

fn validate_parent_types(p: &MdevParentSpec) -> Result<(), String> {
    if p.types.is_empty() {
        return Err("it needs at least one type".into());
    }
    let mut ids = BTreeSet::new();
    for t in &p.types {
        if !ids.insert(t.id.clone()) {
            return Err(format!("type {} is listed twice", t.id));
        }
        if t.name.contains('\n') || t.device_api.is_empty() || t.device_api.contains('\n') {
            return Err(format!(
                "type {}: name and device_api must be one line",
                t.id
            ));
        }
        match p.capacity {
            MdevCapacity::Pool(_) if t.cost == Some(0) => {
                return Err(format!("type {}: a pool cost must be at least 1", t.id));
            }
            MdevCapacity::PerType if t.max_instances.is_none() => {
                return Err(format!(
                    "type {}: per-type capacity needs max_instances",
                    t.id
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_driver_name(name: Option<&str>) -> Result<(), String> {
    let Some(n) = name else { return Ok(()) };
    let ok = !n.is_empty()
        && n.len() <= 32
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!("driver name {n:?} is not a plain name"))
    }
}

/// Parses `0x030200`.
pub(crate) fn parse_class(text: &str) -> Result<u32, String> {
    let digits = text.strip_prefix("0x").unwrap_or(text);
    u32::from_str_radix(digits, 16)
        .ok()
        .filter(|c| *c <= 0xff_ffff && digits.len() == 6)
        .ok_or_else(|| format!("class {text:?} is not six hex digits like 0x030200"))
}

/// The address of VF `index` (0-based): routing id = PF's + offset + index × stride.
pub(crate) fn vf_address(pf: PciAddress, sriov: &SriovSpec, index: u32) -> Option<PciAddress> {
    let pf_rid =
        (u32::from(pf.bus()) << 8) | (u32::from(pf.device()) << 3) | u32::from(pf.function());
    let rid = pf_rid + sriov.offset + index * sriov.stride;
    if rid > 0xffff {
        return None;
    }
    PciAddress::new(
        pf.domain(),
        (rid >> 8) as u8,
        ((rid >> 3) & 0x1f) as u8,
        (rid & 7) as u8,
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse_and_round_trip() {
        for name in Profile::builtin_names() {
            let p = Profile::builtin(name).unwrap();
            assert_eq!(&p.name, name);
            let again = Profile::from_toml(&p.to_toml().unwrap()).unwrap();
            assert_eq!(again, p, "{name}");
        }
        assert!(matches!(
            Profile::builtin("nope"),
            Err(SimError::UnknownProfile { .. })
        ));
    }

    #[test]
    fn vf_addresses_follow_offset_and_stride() {
        let s = SriovSpec {
            total_vfs: 32,
            offset: 4,
            stride: 1,
            vf_device: None,
            vf_driver: None,
            boot_vfs: 0,
            vgpu_in_use: VgpuInUseErrno::Ebusy,
        };
        let pf: PciAddress = "0000:41:00.0".parse().unwrap();
        assert_eq!(vf_address(pf, &s, 0).unwrap().to_string(), "0000:41:00.4");
        assert_eq!(vf_address(pf, &s, 4).unwrap().to_string(), "0000:41:01.0");
    }

    #[test]
    fn inconsistent_profiles_are_refused() {
        let base = Profile::builtin("single-gpu").unwrap().to_toml().unwrap();
        let cases = [
            base.replace("model = \"l4\"", "model = \"l5\""),
            base.replace("distances = [10]", "distances = [10, 20]"),
            base.replace("class = \"0x030200\"", "class = \"3d\""),
            format!("{base}\nunknown_key = 1\n"),
            "name = 1".to_owned(),
        ];
        for text in cases {
            assert!(Profile::from_toml(&text).is_err(), "{text}");
        }
    }
}
