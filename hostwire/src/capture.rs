//! `vgpud capture-profile`: a simulator profile ([`sim::Profile`]) describing the host it runs
//! on, so users can simulate their own machine.
//!
//! Everything is read through the host-access traits of a [`HostAccess`] (sysfs, NVML, AMD SMI),
//! so a fixture tree or a simulated host can be captured as well as the real one.
//!
//! Only hardware goes into the profile. Runtime state does not: existing mdevs, enabled VFs
//! (every `boot_vfs` is 0), driver overrides, MIG instances. What sysfs cannot say is guessed and
//! listed as a note at the top of the output: a GPU's framebuffer without NVML, the VF driver of
//! a PF without VFs, the capacity rule of a non-NVIDIA mdev parent (inferred from the
//! `available_instances` it shows, see [`infer_capacity`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path};

use anyhow::Context;
use gpu::{AmdSmi, Nvml};
use ids::{MdevParentName, MigProfileName, PciAddress, PciDeviceId, PciVendorId};
use inventory::HostAccess;
use sim::{
    AmdSpec, BridgeSpec, DeviceSpec, GpuModel, GpuSpec, MdevCapacity, MdevParentSpec,
    MdevParentTypeSpec, MdevTypeSpec, MigFamily, NumaNodeSpec, Profile, SriovSpec, VgpuTypeSpec,
};
use sysfs::{Sysfs, SysfsExt, error_chain};

/// A captured profile with what had to be guessed.
#[derive(Debug, Clone)]
pub struct Captured {
    /// The profile (valid: [`Profile::validate`] passed).
    pub profile: Profile,
    /// Where it was read from (`host:/`, `root:<path>`, `sim:<profile>`).
    pub source: String,
    /// Guesses and omissions, one sentence each.
    pub notes: Vec<String>,
}

impl Captured {
    /// The profile as TOML, with a comment header saying what it leaves out and guesses.
    pub fn to_toml(&self) -> anyhow::Result<String> {
        let mut out = format!(
            "# Simulated host profile captured by `vgpud capture-profile` from {} ({}).\n\
             # Hardware only: runtime state is left out. Existing mdevs, enabled VFs (every boot_vfs\n\
             # is 0), driver overrides and MIG instances are not recorded; mdev capacities are the\n\
             # available_instances seen, plus the devices that existed.\n\
             # Simulate it with `vgpud inventory --sim FILE`.\n",
            self.profile.hostname, self.source
        );
        if !self.notes.is_empty() {
            out.push_str("#\n# Notes:\n");
            for note in &self.notes {
                out.push_str(&format!("# - {}\n", note.replace('\n', " ")));
            }
        }
        out.push('\n');
        out.push_str(&self.profile.to_toml()?);
        Ok(out)
    }
}

/// Captures the host behind `access`. Fails only when the result would not be a valid profile
/// (no NUMA information at all, say); everything else that cannot be read becomes a note.
pub fn capture(access: &HostAccess) -> anyhow::Result<Captured> {
    let fs = access.sysfs.as_ref();
    let mut c = Capturer {
        fs,
        nvml: access.nvml.as_ref().ok().map(|n| n.as_ref()),
        amd: access.amd.as_ref().ok().map(|(a, _)| a.as_ref()),
        notes: Vec::new(),
    };
    let hostname = access.hostname.clone().unwrap_or_else(|| c.hostname());
    let numa_nodes = c.numa()?;
    let mut pci = c.pci();
    c.forget_unknown_nodes(&mut pci, &numa_nodes);
    let parents = c.mdev_parents();
    let mut profile = Profile {
        name: format!("captured-{hostname}"),
        hostname: hostname.clone(),
        description: format!("Captured from {hostname} by vgpud capture-profile"),
        nvidia_driver_version: c.nvidia_driver_version(),
        telemetry_seed: 0,
        nvswitch: false,
        numa_nodes,
        bridges: Vec::new(),
        models: BTreeMap::new(),
        gpus: Vec::new(),
        devices: Vec::new(),
        mdev_parents: Vec::new(),
    };
    c.place_pci(&mut profile, &pci, &parents);
    c.place_mdev_parents(&mut profile, &pci, parents);
    profile
        .validate()
        .context("the captured host does not make a valid simulator profile")?;
    Ok(Captured {
        profile,
        source: access.source.clone(),
        notes: c.notes,
    })
}

/// One physical PCI function as captured.
struct Function {
    dev: vfio::PciDevice,
    /// The upstream PCI function in the device's sysfs path, if it is captured too.
    parent: Option<PciAddress>,
    /// `numa_node` as sysfs says it (-1 when firmware gave none).
    raw_numa: i32,
    link_speed: Option<String>,
    link_width: Option<u32>,
}

struct Capturer<'a> {
    fs: &'a dyn Sysfs,
    nvml: Option<&'a dyn Nvml>,
    amd: Option<&'a dyn AmdSmi>,
    notes: Vec<String>,
}

const PCI_DEVICES: &str = "/sys/bus/pci/devices";

impl Capturer<'_> {
    fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    fn hostname(&mut self) -> String {
        match self.fs.read_text(Path::new("/proc/sys/kernel/hostname")) {
            Ok(name) if !name.trim().is_empty() => name.trim().to_owned(),
            Ok(_) => "localhost".to_owned(),
            Err(e) => {
                self.note(format!("host name unknown: {}", error_chain(&e)));
                "localhost".to_owned()
            }
        }
    }

    fn nvidia_driver_version(&self) -> String {
        self.nvml
            .and_then(|n| n.driver_version().ok())
            .unwrap_or_else(|| "550.90.07".to_owned())
    }

    fn numa(&mut self) -> anyhow::Result<Vec<NumaNodeSpec>> {
        let (nodes, errors) = numa::nodes(self.fs).context("reading the NUMA nodes")?;
        for e in &errors {
            self.note(format!("NUMA node left out: {}", error_chain(e)));
        }
        let count = nodes.len();
        let mut out = Vec::new();
        for (i, n) in nodes.into_iter().enumerate() {
            let mut distances = n.distances;
            if distances.len() != count {
                self.note(format!(
                    "NUMA node {} lists {} distances for {count} nodes: 10 to itself, 20 to the others assumed",
                    n.id,
                    distances.len()
                ));
                distances = (0..count).map(|j| if i == j { 10 } else { 20 }).collect();
            }
            out.push(NumaNodeSpec {
                id: n.id.0,
                cpus: n.cpus.to_string(),
                memory_mib: n.memory_total_mib,
                memory_free_mib: Some(n.memory_free_mib.min(n.memory_total_mib)),
                distances,
            });
        }
        anyhow::ensure!(!out.is_empty(), "no NUMA node could be read");
        Ok(out)
    }

    /// Every physical function (VFs are runtime state), with its upstream function.
    fn pci(&mut self) -> BTreeMap<PciAddress, Function> {
        let (addresses, errors) = match vfio::list_devices(self.fs) {
            Ok(found) => found,
            Err(e) => {
                self.note(format!("no PCI devices captured: {}", error_chain(&e)));
                return BTreeMap::new();
            }
        };
        for e in &errors {
            self.note(format!("PCI device left out: {}", error_chain(e)));
        }
        let mut out = BTreeMap::new();
        let mut paths = BTreeMap::new();
        for addr in addresses {
            let dev = match vfio::read_device(self.fs, addr) {
                Ok(d) if d.is_vf() => continue,
                Ok(d) => d,
                Err(e) => {
                    self.note(format!("PCI device left out: {}", error_chain(&e)));
                    continue;
                }
            };
            let dir = Path::new(PCI_DEVICES).join(addr.to_string());
            paths.insert(addr, self.fs.resolve_link(&dir).ok());
            let raw_numa = self
                .fs
                .read_parse_opt::<i32>(&dir.join("numa_node"))
                .ok()
                .flatten()
                .unwrap_or(-1);
            let link_speed = self
                .fs
                .read_text_opt(&dir.join("max_link_speed"))
                .ok()
                .flatten();
            let link_width = self
                .fs
                .read_parse_opt::<u32>(&dir.join("max_link_width"))
                .ok()
                .flatten();
            let function = Function {
                dev,
                parent: None,
                raw_numa,
                link_speed,
                link_width,
            };
            out.insert(addr, function);
        }
        if !out.is_empty() && out.values().all(|f| f.dev.iommu_group.is_none()) {
            self.note(
                "the host shows no IOMMU groups: the simulated host numbers them in address order",
            );
        }
        let present: BTreeSet<PciAddress> = out.keys().copied().collect();
        for (addr, f) in out.iter_mut() {
            f.parent = paths
                .get(addr)
                .cloned()
                .flatten()
                .and_then(|p| upstream_function(&p, *addr, &present));
        }
        out
    }

    /// A device may name a node that is offline or was not captured: record "no locality".
    fn forget_unknown_nodes(
        &mut self,
        pci: &mut BTreeMap<PciAddress, Function>,
        nodes: &[NumaNodeSpec],
    ) {
        for (addr, f) in pci.iter_mut() {
            let known = nodes.iter().any(|n| i32::from(n.id) == f.raw_numa);
            if f.raw_numa != -1 && !known {
                self.notes.push(format!(
                    "{addr}: numa_node {} is not a captured NUMA node, -1 recorded",
                    f.raw_numa
                ));
                f.raw_numa = -1;
            }
        }
    }

    fn mdev_parents(&mut self) -> BTreeMap<MdevParentName, mdev::MdevParent> {
        let (names, errors) = match mdev::list_parents(self.fs) {
            Ok(found) => found,
            Err(e) => {
                self.note(format!("no mdev parents captured: {}", error_chain(&e)));
                return BTreeMap::new();
            }
        };
        for e in &errors {
            self.note(format!("mdev parent left out: {}", error_chain(e)));
        }
        let mut out = BTreeMap::new();
        for name in names {
            match mdev::read_parent(self.fs, &name) {
                Ok(p) => {
                    out.insert(name, p);
                }
                Err(e) => self.note(format!("mdev parent left out: {}", error_chain(&e))),
            }
        }
        out
    }

    fn place_pci(
        &mut self,
        profile: &mut Profile,
        pci: &BTreeMap<PciAddress, Function>,
        parents: &BTreeMap<MdevParentName, mdev::MdevParent>,
    ) {
        let bridges: BTreeSet<PciAddress> = pci.values().filter_map(|f| f.parent).collect();
        let nvml = self.nvml_devices();
        let amd = self.amd_gpus();
        for (addr, f) in pci {
            if bridges.contains(addr) {
                profile.bridges.push(self.bridge(f));
            } else if f.dev.is_gpu() {
                let gpu_parent = parents.get(&MdevParentName::from(*addr));
                let info = nvml.get(addr);
                let (spec, model) = self.gpu(f, info, amd.get(addr), gpu_parent);
                let key = model_key(&mut profile.models, model);
                profile.gpus.push(GpuSpec { model: key, ..spec });
            } else {
                profile.devices.push(self.device(f));
            }
        }
        // NVLink peers must be GPUs of the profile.
        let gpus: BTreeSet<PciAddress> = profile.gpus.iter().map(|g| g.address).collect();
        for g in &mut profile.gpus {
            g.nvlink_peers
                .retain(|p| gpus.contains(p) && *p != g.address);
        }
    }

    fn bridge(&mut self, f: &Function) -> BridgeSpec {
        let class = (f.dev.class != 0x060400).then(|| class_text(f.dev.class));
        BridgeSpec {
            address: f.dev.address,
            parent: f.parent,
            vendor: f.dev.vendor,
            device: f.dev.device,
            class,
            numa_node: f.raw_numa,
            driver: f.dev.driver.clone().unwrap_or_default(),
            iommu_group: f.dev.iommu_group.map(|g| g.0),
        }
    }

    fn device(&mut self, f: &Function) -> DeviceSpec {
        if f.dev.driver.as_deref() == Some(vfio::VFIO_PCI) {
            self.note(format!(
                "{} was bound to vfio-pci: the simulated host boots it there",
                f.dev.address
            ));
        }
        DeviceSpec {
            address: f.dev.address,
            parent: f.parent,
            vendor: f.dev.vendor,
            device: f.dev.device,
            subsystem_vendor: f.dev.subsystem_vendor,
            subsystem_device: f.dev.subsystem_device,
            class: class_text(f.dev.class),
            driver: f.dev.driver.clone(),
            numa_node: Some(f.raw_numa),
            iommu_group: f.dev.iommu_group.map(|g| g.0),
            link_speed: f.link_speed.clone().unwrap_or_else(|| "Unknown".to_owned()),
            link_width: f.link_width.unwrap_or(0),
            sriov: self.sriov(&f.dev),
        }
    }

    /// The SR-IOV capability; `None` when sysfs does not give offset and stride.
    fn sriov(&mut self, dev: &vfio::PciDevice) -> Option<SriovSpec> {
        let info = dev.sriov.as_ref().filter(|s| s.total_vfs > 0)?;
        let dir = Path::new(PCI_DEVICES).join(dev.address.to_string());
        let read_u32 = |name: &str| {
            self.fs
                .read_parse_opt::<u32>(&dir.join(name))
                .ok()
                .flatten()
                .filter(|v| *v > 0)
        };
        let (Some(offset), Some(stride)) = (read_u32("sriov_offset"), read_u32("sriov_stride"))
        else {
            self.note(format!(
                "{}: SR-IOV left out, sriov_offset or sriov_stride is unreadable",
                dev.address
            ));
            return None;
        };
        let vf_device = self
            .fs
            .read_text_opt(&dir.join("sriov_vf_device"))
            .ok()
            .flatten()
            .and_then(|t| format!("{:0>4}", t.trim()).parse::<PciDeviceId>().ok());
        let vf_driver = self.vf_driver(dev, &info.vfs);
        Some(SriovSpec {
            total_vfs: info.total_vfs,
            offset,
            stride,
            vf_device,
            vf_driver,
            boot_vfs: 0,
            vgpu_in_use: Default::default(),
        })
    }

    /// The driver VFs bind to: what an existing VF is bound to, else a well-known pairing.
    fn vf_driver(&mut self, pf: &vfio::PciDevice, vfs: &[PciAddress]) -> Option<String> {
        if let Some(vf) = vfs
            .first()
            .and_then(|a| vfio::read_device(self.fs, *a).ok())
            && vf.driver.as_deref() != Some(vfio::VFIO_PCI)
        {
            return vf.driver;
        }
        let guess = match pf.driver.as_deref()? {
            "igb" => "igbvf",
            "ixgbe" => "ixgbevf",
            "i40e" | "ice" => "iavf",
            "nvidia" => "nvidia",
            other @ ("mlx5_core" | "bnxt_en" | "qede" | "cxgb4") => other,
            _ => return None,
        };
        self.note(format!(
            "{}: no VF enabled, VF driver {guess} assumed from PF driver",
            pf.address
        ));
        Some(guess.to_owned())
    }

    fn nvml_devices(&mut self) -> BTreeMap<PciAddress, gpu::DeviceInfo> {
        let Some(nvml) = self.nvml else {
            return BTreeMap::new();
        };
        let count = nvml.device_count().unwrap_or_else(|e| {
            self.notes.push(format!("NVML lists no GPUs: {e}"));
            0
        });
        (0..count)
            .filter_map(|i| nvml.device_info(i).ok())
            .map(|d| (d.pci_address, d))
            .collect()
    }

    fn amd_gpus(&mut self) -> BTreeMap<PciAddress, gpu::AmdGpuInfo> {
        let Some(amd) = self.amd else {
            return BTreeMap::new();
        };
        match amd.gpus() {
            Ok(list) => list.into_iter().map(|g| (g.pci_address, g)).collect(),
            Err(e) => {
                self.note(format!("AMD GPUs not described: {e}"));
                BTreeMap::new()
            }
        }
    }

    fn gpu(
        &mut self,
        f: &Function,
        nv: Option<&gpu::DeviceInfo>,
        amd: Option<&gpu::AmdGpuInfo>,
        mdev_parent: Option<&mdev::MdevParent>,
    ) -> (GpuSpec, GpuModel) {
        let dev = &f.dev;
        let nvidia = dev.vendor == PciVendorId::NVIDIA;
        let name = nv
            .map(|n| n.name.clone())
            .or_else(|| amd.map(|a| a.name.clone()))
            .unwrap_or_else(|| format!("PCI device {}:{}", dev.vendor, dev.device));
        let known_memory = nv
            .map(|n| n.memory_total_mib)
            .or_else(|| amd.map(|a| a.memory_total_mib))
            .filter(|m| *m > 0);
        let sriov = self.sriov(dev);
        let mut model = GpuModel {
            vendor: dev.vendor,
            device: dev.device,
            subsystem_vendor: dev.subsystem_vendor,
            subsystem_device: dev.subsystem_device,
            class: class_text(dev.class),
            name,
            memory_mib: known_memory.unwrap_or(0),
            vgpu_framebuffer_mib: None,
            driver: self.gpu_driver(dev),
            link_speed: f.link_speed.clone().unwrap_or_else(|| "Unknown".to_owned()),
            link_width: f.link_width.unwrap_or(0),
            mig: None,
            sriov,
            vgpu_types: Vec::new(),
            mdev_types: Vec::new(),
            amd: None,
            nvlink: false,
            fabric_info: false,
            mig_mode_needs_reset: false,
            power_limit_w: 300,
            idle_power_w: 50,
            sm_clock_mhz: 1410,
            mem_clock_mhz: 1215,
        };
        let mut spec = GpuSpec {
            address: dev.address,
            parent: f.parent,
            model: String::new(),
            uuid: nv
                .map(|n| n.uuid.clone())
                .or_else(|| amd.and_then(|a| a.uuid.clone())),
            numa_node: Some(f.raw_numa),
            mig_enabled: false,
            iommu_group: dev.iommu_group.map(|g| g.0),
            nvlink_peers: Vec::new(),
            xgmi_hive: None,
        };
        if let (Some(parent), true) = (mdev_parent, nvidia) {
            let (types, vgpu_fb) = nvidia_mdev_types(parent, known_memory);
            model.mdev_types = types;
            if known_memory.is_none() {
                model.memory_mib = vgpu_fb.unwrap_or(0);
            }
            model.vgpu_framebuffer_mib = vgpu_fb.filter(|fb| *fb > model.memory_mib);
        }
        if let (Some(nv), Some(nvml)) = (nv, self.nvml) {
            self.nvidia_details(nvml, nv, &mut spec, &mut model);
        }
        if let (Some(_), Some(amd)) = (amd, self.amd) {
            model.amd = amd_spec(amd, dev.address);
            spec.xgmi_hive = amd.xgmi_hive(dev.address).ok().flatten();
            if let Some(a) = model.amd.as_ref().filter(|a| a.compute_modes.len() > 1) {
                self.note(format!(
                    "GPU {}: VFs per compute partition mode are known for {} only; the others allow none",
                    dev.address, a.compute
                ));
            }
        }
        if model.memory_mib == 0 {
            // The profile needs a size; 1 MiB keeps every framebuffer-based capacity at 0.
            model.memory_mib = 1;
            self.note(format!(
                "GPU {}: framebuffer unknown (no vendor library answered), 1 MiB recorded",
                dev.address
            ));
        }
        (spec, model)
    }

    /// The driver a GPU binds to at boot: the one bound now, unless that is vfio-pci.
    fn gpu_driver(&mut self, dev: &vfio::PciDevice) -> String {
        if let Some(d) = dev.driver.as_deref().filter(|d| *d != vfio::VFIO_PCI) {
            return d.to_owned();
        }
        let guess = match dev.vendor {
            PciVendorId::NVIDIA => "nvidia",
            PciVendorId::AMD => "amdgpu",
            PciVendorId(0x8086) => "i915",
            _ => vfio::VFIO_PCI,
        };
        self.note(format!(
            "GPU {} was {}: default driver {guess} assumed",
            dev.address,
            match &dev.driver {
                Some(d) => format!("bound to {d}"),
                None => "unbound".to_owned(),
            }
        ));
        guess.to_owned()
    }

    fn nvidia_details(
        &mut self,
        nvml: &dyn Nvml,
        nv: &gpu::DeviceInfo,
        spec: &mut GpuSpec,
        model: &mut GpuModel,
    ) {
        if let Ok(mode) = nvml.mig_mode(nv.index) {
            model.mig = MigFamily::from_product_name(&nv.name, nv.memory_total_mib);
            if model.mig.is_some() {
                spec.mig_enabled = mode.current;
            } else {
                self.note(format!(
                    "GPU {}: {} is MIG-capable but the simulator has no MIG table for it",
                    nv.pci_address, nv.name
                ));
            }
        }
        // Vendor-specific VFIO types live on VFs; without SR-IOV the types are mdev types.
        if model.sriov.is_some()
            && let Ok(types) = nvml.supported_vgpu_types(nv.index)
        {
            model.vgpu_types = vgpu_types(&types, model.mig);
            // Time-sliced types share the framebuffer: keep room for each type's maximum.
            let needed = model
                .vgpu_types
                .iter()
                .filter(|t| t.mig_profile.is_none())
                .map(|t| t.framebuffer_mib * u64::from(t.max_instances))
                .max()
                .unwrap_or(0);
            if needed
                > model
                    .memory_mib
                    .max(model.vgpu_framebuffer_mib.unwrap_or(0))
            {
                model.vgpu_framebuffer_mib = Some(needed);
            }
        }
        spec.nvlink_peers = nvml.nvlink_peers(nv.index).unwrap_or_default();
    }

    fn place_mdev_parents(
        &mut self,
        profile: &mut Profile,
        pci: &BTreeMap<PciAddress, Function>,
        parents: BTreeMap<MdevParentName, mdev::MdevParent>,
    ) {
        let nvidia_gpus: BTreeSet<PciAddress> = profile
            .gpus
            .iter()
            .filter(|g| {
                profile
                    .models
                    .get(&g.model)
                    .is_some_and(|m| !m.mdev_types.is_empty())
            })
            .map(|g| g.address)
            .collect();
        let listed: BTreeSet<PciAddress> = profile
            .gpus
            .iter()
            .map(|g| g.address)
            .chain(profile.devices.iter().map(|d| d.address))
            .collect();
        for (name, parent) in parents {
            let device_path = match name.pci_address() {
                Some(addr) if nvidia_gpus.contains(&addr) => continue,
                Some(addr) if listed.contains(&addr) && pci.contains_key(&addr) => None,
                Some(addr) => {
                    self.note(format!(
                        "mdev parent {addr} left out: it is not a physical function of the profile"
                    ));
                    continue;
                }
                None => virtual_path(&parent.device_path),
            };
            if parent.types.is_empty() {
                self.note(format!("mdev parent {name} left out: it lists no types"));
                continue;
            }
            let (capacity, types) = infer_capacity(&parent);
            if matches!(capacity, MdevCapacity::PerType) {
                self.note(format!(
                    "mdev parent {name}: capacity rule unknown, each type keeps the count it showed"
                ));
            }
            profile.mdev_parents.push(MdevParentSpec {
                name,
                device_path,
                capacity,
                types,
            });
        }
    }
}

/// The PCI function just above `addr` in its resolved sysfs path, if captured.
fn upstream_function(
    path: &Path,
    addr: PciAddress,
    present: &BTreeSet<PciAddress>,
) -> Option<PciAddress> {
    let names: Vec<&str> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => n.to_str(),
            _ => None,
        })
        .collect();
    let own = names.iter().rposition(|n| *n == addr.to_string())?;
    let above: PciAddress = names.get(own.checked_sub(1)?)?.parse().ok()?;
    present.contains(&above).then_some(above)
}

/// A virtual parent's directory as the profile records it: left to the default when it is the
/// samples' `/sys/devices/virtual/<name>/<name>`.
fn virtual_path(path: &Path) -> Option<String> {
    let text = path.to_str()?.to_owned();
    let default = path
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| format!("/sys/devices/virtual/{n}/{n}"));
    (default.as_deref() != Some(text.as_str())).then_some(text)
}

fn class_text(class: u32) -> String {
    format!("0x{class:06x}")
}

/// Adds a model under a key derived from its PCI ids, reusing an identical one.
fn model_key(models: &mut BTreeMap<String, GpuModel>, model: GpuModel) -> String {
    let base = format!("{}-{}", model.vendor, model.device);
    for n in 1.. {
        let key = if n == 1 {
            base.clone()
        } else {
            format!("{base}-{n}")
        };
        match models.get(&key) {
            Some(m) if *m == model => return key,
            Some(_) => continue,
            None => {
                models.insert(key.clone(), model);
                return key;
            }
        }
    }
    base
}

/// NVIDIA mdev types (homogeneous rule) and the vGPU framebuffer their capacities imply.
/// A type's capacity is what it showed plus its devices, unless another type had devices (the
/// GPU then shows 0 for it and its limit comes from the framebuffer alone).
fn nvidia_mdev_types(
    parent: &mdev::MdevParent,
    memory_mib: Option<u64>,
) -> (Vec<MdevTypeSpec>, Option<u64>) {
    let total: usize = parent.types.iter().map(|t| t.devices.len()).sum();
    let mut out = Vec::new();
    let mut vgpu_fb: Option<u64> = None;
    for t in &parent.types {
        let capacity = (total == t.devices.len())
            .then(|| t.available_instances.unwrap_or(0) + t.devices.len() as u32);
        let described = t
            .description
            .as_deref()
            .and_then(framebuffer_from_description);
        let framebuffer_mib = described
            .or_else(|| Some(memory_mib? / u64::from(capacity.filter(|c| *c > 0)?)))
            .unwrap_or(1024)
            .max(1);
        if let Some(c) = capacity {
            let needed = framebuffer_mib * u64::from(c);
            vgpu_fb = Some(vgpu_fb.unwrap_or(0).max(needed));
        }
        out.push(MdevTypeSpec {
            id: t.id.clone(),
            name: t.name.clone().unwrap_or_else(|| t.id.to_string()),
            description: t.description.clone().unwrap_or_default(),
            class: None,
            framebuffer_mib,
            max_instances: capacity,
        });
    }
    (out, vgpu_fb)
}

/// `framebuffer=1024M` in an NVIDIA type's description.
fn framebuffer_from_description(text: &str) -> Option<u64> {
    let rest = text.split("framebuffer=").nth(1)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let value: u64 = digits.parse().ok()?;
    match rest[digits.len()..].chars().next() {
        Some('G') => Some(value * 1024),
        Some('M') | None => Some(value),
        _ => None,
    }
}

/// The capacity rule of a non-NVIDIA parent, from the counts it shows (devices that exist are
/// added back to their type's count):
/// - every type shows the same count N: the mdev core's own count, `instances = N` (mdpy);
/// - else a pool of the largest count's units where each type costs largest / its count, if
///   that reproduces every count (mtty: 24 and 12 → pool 24, costs 1 and 2; mbochs: 4, 16, 64
///   → pool 64, costs 16, 4, 1);
/// - else `per-type`, each type keeping its own count.
///
/// With devices present the shared rules cannot be told apart from the counts: per-type.
pub fn infer_capacity(parent: &mdev::MdevParent) -> (MdevCapacity, Vec<MdevParentTypeSpec>) {
    let busy = parent.types.iter().any(|t| !t.devices.is_empty());
    let counts: Vec<u32> = parent
        .types
        .iter()
        .map(|t| t.available_instances.unwrap_or(0) + t.devices.len() as u32)
        .collect();
    let largest = counts.iter().copied().max().unwrap_or(0);
    let costs: Option<Vec<u32>> = (!busy && largest > 0)
        .then(|| {
            counts
                .iter()
                .map(|c| match c {
                    0 => largest + 1,
                    c => (largest + c / 2) / c,
                })
                .collect::<Vec<u32>>()
        })
        .filter(|costs| {
            costs
                .iter()
                .zip(&counts)
                .all(|(cost, c)| largest / cost == *c)
        });
    let (capacity, costs) = if !busy && counts.iter().all(|c| *c == largest) {
        (MdevCapacity::Instances(largest), None)
    } else if let Some(costs) = costs {
        (MdevCapacity::Pool(largest), Some(costs))
    } else {
        (MdevCapacity::PerType, None)
    };
    let types = parent
        .types
        .iter()
        .enumerate()
        .map(|(i, t)| MdevParentTypeSpec {
            id: t.id.clone(),
            name: t.name.clone().unwrap_or_else(|| t.id.to_string()),
            description: t.description.clone(),
            device_api: t
                .device_api
                .clone()
                .unwrap_or_else(|| "vfio-pci".to_owned()),
            cost: costs.as_ref().and_then(|c| c.get(i).copied()),
            max_instances: matches!(capacity, MdevCapacity::PerType)
                .then(|| counts.get(i).copied().unwrap_or(0)),
        })
        .collect();
    (capacity, types)
}

/// Vendor-VFIO vGPU types as NVML lists them; a MIG-backed type (`NVIDIA H200X-1-18C`) gets the
/// GPU-instance profile its name implies when the GPU's MIG table has it.
fn vgpu_types(types: &[gpu::VgpuTypeInfo], family: Option<MigFamily>) -> Vec<VgpuTypeSpec> {
    let mut seen = BTreeSet::new();
    types
        .iter()
        .filter(|t| t.framebuffer_mib > 0 && t.max_instances > 0 && seen.insert(t.id))
        .filter_map(|t| {
            let mig_profile = mig_profile_of(&t.name);
            let mig_profile = match (mig_profile, family) {
                (None, _) => None,
                (Some(p), Some(f)) if f.has_profile(&p) => Some(p),
                // A MIG-backed type the simulator cannot place.
                (Some(_), _) => return None,
            };
            Some(VgpuTypeSpec {
                id: t.id.get(),
                name: t.name.clone(),
                class: t.class.clone(),
                framebuffer_mib: t.framebuffer_mib,
                max_instances: t.max_instances,
                mig_profile,
            })
        })
        .collect()
}

/// `NVIDIA H200X-2-35C` → `2g.35gb`; `NVIDIA H200X-35C` (time-sliced) → none.
fn mig_profile_of(name: &str) -> Option<MigProfileName> {
    let mut parts = name.rsplit('-');
    let last = parts.next()?;
    let slices = parts.next()?;
    if slices.is_empty() || !slices.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let gb: String = last.chars().take_while(char::is_ascii_digit).collect();
    if gb.is_empty() || gb.len() == last.len() {
        return None;
    }
    format!("{slices}g.{gb}gb").parse().ok()
}

/// Partition modes and, on a GIM host, the VF counts each compute mode takes (its profile table
/// when the library gives it, else what runs now).
fn amd_spec(amd: &dyn AmdSmi, gpu: PciAddress) -> Option<AmdSpec> {
    let part = amd.partition(gpu).ok()?;
    let mut compute_modes = part.compute_available;
    compute_modes.extend(part.compute_vf_counts.keys().cloned());
    compute_modes.push(part.compute.clone());
    // Fewest partitions first: the order GIM picks a VF count's default mode in.
    let rank = |m: &String| {
        ["SPX", "DPX", "TPX", "QPX", "CPX"]
            .iter()
            .position(|k| k == m)
    };
    compute_modes.sort_by_key(|m| (rank(m).unwrap_or(usize::MAX), m.clone()));
    compute_modes.dedup();
    let mut memory_modes = part.memory_available;
    if !memory_modes.contains(&part.memory) {
        memory_modes.push(part.memory.clone());
    }
    let mut vfs_per_mode = part.compute_vf_counts;
    if let Ok(vf) = amd.num_vf(gpu)
        && vf.enabled > 0
        && vfs_per_mode.is_empty()
    {
        vfs_per_mode.insert(part.compute.clone(), vec![vf.enabled]);
    }
    Some(AmdSpec {
        compute_modes,
        memory_modes,
        compute: part.compute,
        memory: part.memory,
        vfs_per_mode,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_profiles_come_from_vgpu_type_names() {
        let p = |s: &str| mig_profile_of(s).map(|p| p.to_string());
        assert_eq!(p("NVIDIA H200X-1-18C").as_deref(), Some("1g.18gb"));
        assert_eq!(p("NVIDIA H200X-7-141C").as_deref(), Some("7g.141gb"));
        assert_eq!(p("NVIDIA H200X-18C"), None);
        assert_eq!(p("GRID T4-16Q"), None);
        assert_eq!(p("NVIDIA A16-4-4Q-x"), None);
    }

    #[test]
    fn framebuffers_come_from_nvidia_descriptions() {
        let d = "num_heads=4, frl_config=60, framebuffer=2048M, max_resolution=5120x2880";
        assert_eq!(framebuffer_from_description(d), Some(2048));
        assert_eq!(framebuffer_from_description("framebuffer=2G"), Some(2048));
        assert_eq!(framebuffer_from_description("no size"), None);
        assert_eq!(framebuffer_from_description("framebuffer=12x"), None);
    }

    fn parent(counts: &[(u32, usize)]) -> mdev::MdevParent {
        mdev::MdevParent {
            name: "x".parse().unwrap(),
            device_path: "/sys/devices/virtual/x/x".into(),
            pci_address: None,
            types: counts
                .iter()
                .enumerate()
                .map(|(i, (avail, devices))| mdev::MdevType {
                    id: format!("x-{i}").parse().unwrap(),
                    name: None,
                    description: None,
                    device_api: None,
                    available_instances: Some(*avail),
                    devices: (0..*devices).map(|_| ids::MdevUuid::new_random()).collect(),
                    problems: Vec::new(),
                })
                .collect(),
            problems: Vec::new(),
        }
    }

    #[test]
    fn capacity_rules_are_inferred_from_counts() {
        let costs = |types: &[MdevParentTypeSpec]| types.iter().map(|t| t.cost).collect::<Vec<_>>();
        let (cap, types) = infer_capacity(&parent(&[(24, 0), (12, 0)]));
        assert_eq!(cap, MdevCapacity::Pool(24));
        assert_eq!(costs(&types), [Some(1), Some(2)]);
        let (cap, types) = infer_capacity(&parent(&[(4, 0), (16, 0), (64, 0)]));
        assert_eq!(cap, MdevCapacity::Pool(64));
        assert_eq!(costs(&types), [Some(16), Some(4), Some(1)]);
        assert_eq!(
            infer_capacity(&parent(&[(4, 0), (4, 0), (4, 0)])).0,
            MdevCapacity::Instances(4)
        );
        // 7 and 3 fit a pool of 7 (costs 1 and 2); 5 and 4 fit no pool: independent counts.
        assert_eq!(
            infer_capacity(&parent(&[(7, 0), (3, 0)])).0,
            MdevCapacity::Pool(7)
        );
        let (cap, types) = infer_capacity(&parent(&[(5, 0), (4, 0)]));
        assert_eq!(cap, MdevCapacity::PerType);
        assert_eq!(
            types.iter().map(|t| t.max_instances).collect::<Vec<_>>(),
            [Some(5), Some(4)]
        );
        // Devices present: the shared rule cannot be told, counts include the devices.
        let (cap, types) = infer_capacity(&parent(&[(11, 1), (22, 0)]));
        assert_eq!(cap, MdevCapacity::PerType);
        assert_eq!(types[0].max_instances, Some(12));
    }

    #[test]
    fn upstream_functions_come_from_the_resolved_path() {
        let gpu: PciAddress = "0000:41:00.0".parse().unwrap();
        let port: PciAddress = "0000:40:01.1".parse().unwrap();
        let path = Path::new("/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0");
        let present = BTreeSet::from([gpu, port]);
        assert_eq!(upstream_function(path, gpu, &present), Some(port));
        assert_eq!(upstream_function(path, port, &present), None);
        assert_eq!(upstream_function(path, gpu, &BTreeSet::from([gpu])), None);
    }
}
