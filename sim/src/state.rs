//! The host model: hardware (derived from the profile) and runtime state (persisted).
//!
//! [`State`] is what `host.json` holds: the profile and everything that changes at run time.
//! [`Hw`] is an index of the profile's hardware computed on load (sysfs directories, IOMMU
//! groups, NUMA locality), never persisted, so a state file cannot disagree with its profile.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use gpu::{MigActivation, NvmlCode, Placement};
use ids::{MdevParentName, MdevTypeId, MdevUuid, PciAddress, PciDeviceId, PciVendorId};
use serde::{Deserialize, Serialize};

use crate::fault::{Access, Fault, FaultAction};
use crate::mig::GiProfile;
use crate::profile::{GpuModel, GpuSpec, Profile, parse_class};
use crate::uevent::UeventLog;
use crate::util::parse_cpulist;

/// Version of the `host.json` layout.
pub(crate) const FORMAT: u32 = 1;

/// Everything the simulated host knows; serialised to `host.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct State {
    pub format: u32,
    pub profile: Profile,
    /// Every PCI function present now: the profile's hardware (minus removed GPUs) and VFs.
    pub pci: BTreeMap<PciAddress, PciState>,
    /// Runtime state of every GPU of the profile (kept while a GPU is removed: MIG mode and
    /// partition modes live in the GPU).
    pub gpus: BTreeMap<PciAddress, GpuState>,
    pub mdevs: BTreeMap<MdevUuid, MdevState>,
    pub removed: BTreeSet<PciAddress>,
    pub faults: Vec<Fault>,
    pub xids: VecDeque<PendingXid>,
    pub boots: u64,
    /// Functions removed through sysfs (`<dev>/remove`): a rescan or a reboot brings them back.
    #[serde(default)]
    pub detached: BTreeSet<PciAddress>,
    /// The uevents the changes so far emitted (see [`crate::uevent`]).
    #[serde(default)]
    pub uevents: UeventLog,
}

/// A PCI function's runtime state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PciState {
    pub driver: Option<String>,
    pub driver_override: Option<String>,
    pub iommu_group: u32,
    /// A VM holds the device's VFIO group open.
    pub open: bool,
    pub vf: Option<VfState>,
}

/// What makes a PCI function a VF.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct VfState {
    pub pf: PciAddress,
    /// 0-based VF number (`virtfn<index>`).
    pub index: u32,
    /// NVIDIA vendor-VFIO vGPU type on this VF.
    pub vgpu_type: Option<u32>,
    /// The GPU instance a MIG-backed vGPU occupies.
    pub gpu_instance: Option<u32>,
}

/// Runtime state of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct GpuState {
    pub mig_current: bool,
    pub mig_pending: bool,
    /// Processes hold the GPU (a CUDA application, a monitoring agent): a MIG mode change stays
    /// pending until the next reset. They end at a reboot.
    #[serde(default)]
    pub clients: bool,
    /// `/proc/driver/nvidia/gpus/<bdf>/unbindLock` is held: the NVIDIA driver lets no new
    /// client open the GPU, so its PF can be unbound without waiting. Dropped when the driver
    /// lets go of the GPU.
    #[serde(default)]
    pub unbind_lock: bool,
    pub gis: Vec<GiState>,
    pub compute_partition: Option<String>,
    pub memory_partition: Option<String>,
    /// A memory (NPS) mode written to amdgpu's `current_memory_partition` that applies when the
    /// driver next loads (see [`crate::kernel::set_partition`]).
    #[serde(default)]
    pub memory_partition_requested: Option<String>,
    pub telemetry: TelemetryState,
    /// Memory-error and clocks-event signals set by a test ([`crate::SimHost::set_health_signals`]);
    /// `None`: a healthy board's answers ([`default_health_signals`]).
    #[serde(default)]
    pub health: Option<gpu::HealthSignals>,
}

/// What a healthy A100/H100-class board reports: ECC on with zero volatile errors, row
/// remapping with nothing remapped, no clocks event. Page retirement is `None` because Ampere
/// and newer replace it with row remapping and answer `NOT_SUPPORTED` to the retired-pages
/// queries (NVIDIA, "GPU Memory Error Management", sections "Page Retirement" and "Row
/// Remapping": row remapping "replaces dynamic page offlining" from the A100 on).
pub(crate) fn default_health_signals() -> gpu::HealthSignals {
    gpu::HealthSignals {
        ecc_sbe_volatile: Some(0),
        ecc_dbe_volatile: Some(0),
        retired_sbe: None,
        retired_dbe: None,
        retired_pending: None,
        remapped_correctable: Some(0),
        remapped_uncorrectable: Some(0),
        remap_failure: Some(false),
        clock_event_reasons: Some(0),
    }
}

/// A MIG GPU instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct GiState {
    pub id: u32,
    pub profile_id: u32,
    pub start: u32,
    pub size: u32,
    pub compute_slices: u32,
    pub memory_mib: u64,
    pub multiprocessors: u32,
    /// Processes run on it.
    pub in_use: bool,
    pub cis: Vec<CiState>,
}

impl GiState {
    pub(crate) fn new(id: u32, p: &GiProfile, start: u32) -> Self {
        Self {
            id,
            profile_id: p.info.id,
            start,
            size: p.memory_slices,
            compute_slices: p.info.slice_count,
            memory_mib: p.info.memory_mib,
            multiprocessors: p.info.multiprocessor_count,
            in_use: false,
            cis: Vec::new(),
        }
    }
    pub(crate) fn placement(&self) -> Placement {
        Placement {
            start: self.start,
            size: self.size,
        }
    }
}

/// A MIG compute instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CiState {
    pub id: u32,
    pub profile_id: u32,
    pub placement: Placement,
}

/// An mdev device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MdevState {
    pub parent: MdevParentName,
    pub type_id: MdevTypeId,
    pub iommu_group: u32,
    pub open: bool,
}

/// An Xid not yet delivered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PendingXid {
    pub gpu: PciAddress,
    pub xid: u64,
}

/// Telemetry random-walk state of one GPU.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub(crate) struct TelemetryState {
    pub tick: u64,
    pub gpu_util: u32,
    pub mem_util: u32,
    pub temperature_c: u32,
    pub power_mw: u32,
    pub energy_mj: u64,
}

/// A PCI function of the profile, resolved.
#[derive(Debug, Clone)]
pub(crate) struct HwDev {
    pub vendor: PciVendorId,
    pub device: PciDeviceId,
    pub subsystem_vendor: PciVendorId,
    pub subsystem_device: PciDeviceId,
    pub class: u32,
    /// What sysfs `numa_node` says (-1 possible).
    pub numa_node: i32,
    /// The device's own node, else the nearest upstream bridge's.
    pub near_node: Option<u16>,
    pub driver: Option<String>,
    pub iommu_group: u32,
    pub link_speed: String,
    pub link_width: u32,
    /// Absolute sysfs directory: `/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0`.
    pub dir: String,
}

/// The NUMA layout, resolved.
#[derive(Debug, Clone)]
pub(crate) struct HwNode {
    pub id: u16,
    pub cpus: BTreeSet<u32>,
    pub memory_mib: u64,
    pub memory_free_mib: u64,
    pub distances: Vec<u32>,
}

/// Index of the profile's hardware.
#[derive(Debug, Clone)]
pub(crate) struct Hw {
    pub devices: BTreeMap<PciAddress, HwDev>,
    pub nodes: Vec<HwNode>,
}

impl Hw {
    /// Indexes a validated profile.
    pub(crate) fn build(p: &Profile) -> Hw {
        let mut devices = BTreeMap::new();
        let parents: BTreeMap<PciAddress, Option<PciAddress>> = p
            .bridges
            .iter()
            .map(|b| (b.address, b.parent))
            .chain(p.gpus.iter().map(|g| (g.address, g.parent)))
            .chain(p.devices.iter().map(|d| (d.address, d.parent)))
            .collect();
        let bridge_nodes: BTreeMap<PciAddress, i32> =
            p.bridges.iter().map(|b| (b.address, b.numa_node)).collect();
        let dir_of = |addr: PciAddress| sysfs_dir(addr, &parents);
        let node_of = |own: Option<i32>, parent: Option<PciAddress>| -> i32 {
            own.unwrap_or_else(|| {
                parent
                    .and_then(|pa| bridge_nodes.get(&pa).copied())
                    .unwrap_or(-1)
            })
        };
        let mut explicit: BTreeMap<PciAddress, Option<u32>> = BTreeMap::new();
        for b in &p.bridges {
            explicit.insert(b.address, b.iommu_group);
            devices.insert(
                b.address,
                HwDev {
                    vendor: b.vendor,
                    device: b.device,
                    subsystem_vendor: b.vendor,
                    subsystem_device: PciDeviceId(0),
                    class: b
                        .class
                        .as_deref()
                        .and_then(|c| parse_class(c).ok())
                        .unwrap_or(0x060400),
                    numa_node: b.numa_node,
                    near_node: None,
                    driver: b.boot_driver(),
                    iommu_group: 0,
                    link_speed: "16.0 GT/s PCIe".to_owned(),
                    link_width: 16,
                    dir: dir_of(b.address),
                },
            );
        }
        for g in &p.gpus {
            let Some(m) = p.model_of(g) else { continue };
            explicit.insert(g.address, g.iommu_group);
            devices.insert(
                g.address,
                HwDev {
                    vendor: m.vendor,
                    device: m.device,
                    subsystem_vendor: m.subsystem_vendor.unwrap_or(m.vendor),
                    subsystem_device: m.subsystem_device.unwrap_or(PciDeviceId(0)),
                    class: parse_class(&m.class).unwrap_or(0x030200),
                    numa_node: node_of(g.numa_node, g.parent),
                    near_node: None,
                    driver: Some(m.driver.clone()),
                    iommu_group: 0,
                    link_speed: m.link_speed.clone(),
                    link_width: m.link_width,
                    dir: dir_of(g.address),
                },
            );
        }
        for d in &p.devices {
            explicit.insert(d.address, d.iommu_group);
            devices.insert(
                d.address,
                HwDev {
                    vendor: d.vendor,
                    device: d.device,
                    subsystem_vendor: d.subsystem_vendor.unwrap_or(d.vendor),
                    subsystem_device: d.subsystem_device.unwrap_or(PciDeviceId(0)),
                    class: parse_class(&d.class).unwrap_or(0),
                    numa_node: node_of(d.numa_node, d.parent),
                    near_node: None,
                    driver: d.driver.clone(),
                    iommu_group: 0,
                    link_speed: d.link_speed.clone(),
                    link_width: d.link_width,
                    dir: dir_of(d.address),
                },
            );
        }
        assign_groups(&mut devices, &explicit);
        let snapshot: BTreeMap<PciAddress, i32> =
            devices.iter().map(|(a, d)| (*a, d.numa_node)).collect();
        for (addr, dev) in devices.iter_mut() {
            dev.near_node = near_node(*addr, &parents, &snapshot);
        }
        let nodes = p
            .numa_nodes
            .iter()
            .map(|n| HwNode {
                id: n.id,
                cpus: parse_cpulist(&n.cpus).unwrap_or_default(),
                memory_mib: n.memory_mib,
                memory_free_mib: n.memory_free_mib.unwrap_or(n.memory_mib / 20 * 19),
                distances: n.distances.clone(),
            })
            .collect();
        Hw { devices, nodes }
    }

    /// Every CPU of the host.
    pub(crate) fn all_cpus(&self) -> BTreeSet<u32> {
        self.nodes
            .iter()
            .flat_map(|n| n.cpus.iter().copied())
            .collect()
    }

    /// CPUs of a node, all CPUs when the node is unknown (as the kernel prints `local_cpulist`).
    pub(crate) fn cpus_near(&self, node: Option<u16>) -> BTreeSet<u32> {
        match node.and_then(|id| self.nodes.iter().find(|n| n.id == id)) {
            Some(n) => n.cpus.clone(),
            None => self.all_cpus(),
        }
    }

    /// Hardware IOMMU group numbers.
    pub(crate) fn groups(&self) -> BTreeSet<u32> {
        self.devices.values().map(|d| d.iommu_group).collect()
    }
}

fn sysfs_dir(addr: PciAddress, parents: &BTreeMap<PciAddress, Option<PciAddress>>) -> String {
    let mut chain = vec![addr];
    let mut cur = addr;
    while let Some(Some(p)) = parents.get(&cur) {
        if chain.contains(p) || chain.len() > 32 {
            break;
        }
        chain.push(*p);
        cur = *p;
    }
    let top = chain.last().copied().unwrap_or(addr);
    let mut dir = format!("/sys/devices/pci{:04x}:{:02x}", top.domain(), top.bus());
    for a in chain.iter().rev() {
        dir.push('/');
        dir.push_str(&a.to_string());
    }
    dir
}

fn near_node(
    addr: PciAddress,
    parents: &BTreeMap<PciAddress, Option<PciAddress>>,
    nodes: &BTreeMap<PciAddress, i32>,
) -> Option<u16> {
    let mut cur = Some(addr);
    for _ in 0..=32 {
        let a = cur?;
        if let Some(n) = nodes.get(&a).and_then(|n| u16::try_from(*n).ok()) {
            return Some(n);
        }
        cur = parents.get(&a).copied().flatten();
    }
    None
}

fn assign_groups(
    devices: &mut BTreeMap<PciAddress, HwDev>,
    explicit: &BTreeMap<PciAddress, Option<u32>>,
) {
    let taken: BTreeSet<u32> = explicit.values().flatten().copied().collect();
    let mut next = 0u32;
    for (addr, dev) in devices.iter_mut() {
        dev.iommu_group = match explicit.get(addr).copied().flatten() {
            Some(g) => g,
            None => {
                while taken.contains(&next) {
                    next += 1;
                }
                next += 1;
                next - 1
            }
        };
    }
}

impl State {
    /// A freshly booted host.
    pub(crate) fn first_boot(profile: Profile, hw: &Hw) -> State {
        let gpus = profile
            .gpus
            .iter()
            .map(|g| {
                let model = profile.model_of(g);
                let amd = model.and_then(|m| m.amd.as_ref());
                let state = GpuState {
                    mig_current: g.mig_enabled,
                    mig_pending: g.mig_enabled,
                    clients: false,
                    unbind_lock: false,
                    gis: Vec::new(),
                    compute_partition: amd.map(|a| a.compute.clone()),
                    memory_partition: amd.map(|a| a.memory.clone()),
                    memory_partition_requested: None,
                    telemetry: TelemetryState::default(),
                    health: None,
                };
                (g.address, state)
            })
            .collect();
        let mut st = State {
            format: FORMAT,
            profile,
            pci: BTreeMap::new(),
            gpus,
            mdevs: BTreeMap::new(),
            removed: BTreeSet::new(),
            faults: Vec::new(),
            xids: VecDeque::new(),
            boots: 0,
            detached: BTreeSet::new(),
            uevents: UeventLog::default(),
        };
        st.boot(hw);
        st
    }

    /// A host reboot: runtime devices go, hardware and persistent GPU settings stay, then the
    /// boot-time services of the profile run (SR-IOV enables).
    pub(crate) fn boot(&mut self, hw: &Hw) {
        self.boots += 1;
        self.mdevs.clear();
        self.faults.clear();
        self.xids.clear();
        self.pci.clear();
        // A function removed through sysfs is still in the machine: the boot finds it again.
        self.detached.clear();
        for (addr, dev) in &hw.devices {
            if !self.removed.contains(addr) {
                self.pci.insert(*addr, PciState::hardware(dev));
            }
        }
        for gpu in self.gpus.values_mut() {
            gpu.mig_current = gpu.mig_pending;
            gpu.gis.clear();
            gpu.clients = false;
            gpu.unbind_lock = false;
            // The driver loads afresh: a requested NPS mode takes effect.
            if let Some(mode) = gpu.memory_partition_requested.take() {
                gpu.memory_partition = Some(mode);
            }
        }
        self.run_boot_services(hw);
    }

    fn run_boot_services(&mut self, hw: &Hw) {
        let enables: Vec<(PciAddress, u32)> = self
            .profile
            .sriov_pfs()
            .into_iter()
            .filter(|(pf, s)| s.boot_vfs > 0 && self.pci.contains_key(pf))
            .map(|(pf, s)| (pf, s.boot_vfs))
            .collect();
        for (pf, n) in enables {
            // A refusal here (no driver bound, say) leaves the GPU without VFs, as a failed
            // boot-time service would.
            let _ = crate::kernel::enable_vfs(self, hw, pf, n);
            crate::gim::settle_compute_mode(self, pf);
        }
    }

    /// The GPU spec and model of a GPU PF of the profile.
    pub(crate) fn gpu(&self, addr: PciAddress) -> Option<(&GpuSpec, &GpuModel)> {
        self.profile.gpu(addr)
    }

    /// VFs of a PF, by index.
    /// Asks for a MIG mode, as an operator's setup does (`SimHost::set_mig_mode`): the mode
    /// becomes pending, and takes effect at once only when nothing holds the GPU (no GPU
    /// instances, vGPUs, mdevs or client processes); otherwise at the next reboot. `false` when
    /// the GPU has no MIG.
    pub(crate) fn request_mig_mode(&mut self, gpu: PciAddress, enabled: bool) -> bool {
        self.set_mig_mode_idle_rule(gpu, enabled).is_some()
    }

    /// The bare-metal rule of [`State::request_mig_mode`], with the activation status NVML
    /// would give: `InUse` while something holds the GPU (NVML's reference: "if device unbind
    /// fails because the device isn't idle, NVML_ERROR_IN_USE"). `None` without MIG.
    fn set_mig_mode_idle_rule(&mut self, gpu: PciAddress, enabled: bool) -> Option<MigActivation> {
        if self.gpu(gpu).is_none_or(|(_, model)| model.mig.is_none()) {
            return None;
        }
        let parent = MdevParentName::from(gpu);
        let vgpus = self.mdevs.values().any(|m| m.parent == parent)
            || self
                .vfs_of(gpu)
                .iter()
                .any(|(_, p)| p.vf.as_ref().is_some_and(|v| v.vgpu_type.is_some()));
        let g = self.gpus.get_mut(&gpu)?;
        g.mig_pending = enabled;
        if g.mig_current == enabled || (!vgpus && !g.clients && g.gis.is_empty()) {
            g.mig_current = enabled;
            Some(MigActivation::Applied)
        } else {
            Some(MigActivation::InUse)
        }
    }

    /// `nvmlDeviceSetMigMode`: the activation status, or the call's own failure. On a vGPU
    /// host ([`GpuModel::mig_mode_needs_reset`]) a change is refused with `IN_USE` while the GPU
    /// has VFs and otherwise stays pending until a GPU reset (issue 13 review: NVIDIA's vGPU
    /// hosts change MIG mode with the VFs off and reset the GPU after; gpu-operator PR 2603
    /// resets only GPUs without VFs). Asking for the current mode withdraws a pending change.
    pub(crate) fn set_mig_mode_call(
        &mut self,
        gpu: PciAddress,
        enabled: bool,
    ) -> Result<MigActivation, NvmlCode> {
        let needs_reset = match self.gpu(gpu) {
            Some((_, m)) if m.mig.is_some() => m.mig_mode_needs_reset,
            _ => return Err(NvmlCode::NOT_SUPPORTED),
        };
        if !needs_reset {
            return self
                .set_mig_mode_idle_rule(gpu, enabled)
                .ok_or(NvmlCode::NOT_SUPPORTED);
        }
        let has_vfs = !self.vfs_of(gpu).is_empty();
        let g = self.gpus.get_mut(&gpu).ok_or(NvmlCode::UNKNOWN)?;
        if g.mig_current == enabled {
            g.mig_pending = enabled;
            return Ok(MigActivation::Applied);
        }
        if has_vfs {
            return Err(NvmlCode::IN_USE);
        }
        g.mig_pending = enabled;
        Ok(MigActivation::PendingReset)
    }

    /// What holds a GPU so that a reset must wait: a VM on one of its VFs, a vGPU on a VF,
    /// processes on a GPU instance or on the GPU (`nvidia-smi -r` refuses a GPU in use).
    pub(crate) fn reset_blocker(&self, gpu: PciAddress) -> Option<&'static str> {
        let vfs = self.vfs_of(gpu);
        if vfs.iter().any(|(_, p)| p.open) {
            return Some("in use (a VM holds one of its VFs)");
        }
        if vfs
            .iter()
            .any(|(_, p)| p.vf.as_ref().is_some_and(|v| v.vgpu_type.is_some()))
        {
            return Some("in use (a vGPU exists on one of its VFs)");
        }
        let g = self.gpus.get(&gpu)?;
        if g.gis.iter().any(|x| x.in_use) {
            return Some("in use (processes run on a GPU instance)");
        }
        if g.clients {
            return Some("in use (client processes hold it)");
        }
        None
    }

    /// A GPU reset: a pending MIG mode takes effect and the GPU instances are gone.
    pub(crate) fn reset_gpu(&mut self, gpu: PciAddress) {
        if let Some(g) = self.gpus.get_mut(&gpu) {
            g.mig_current = g.mig_pending;
            g.gis.clear();
            // Volatile ECC counts restart with the GPU and pending retirements take effect
            // (NVML API reference, `nvmlDeviceGetTotalEccErrors`: "Volatile counts are reset
            // each time the driver loads"; `nvmlDeviceGetRetiredPagesPendingStatus`: pages are
            // retired "on the next reboot or driver reload"). Remap failures and retired pages
            // are permanent.
            if let Some(h) = g.health.as_mut() {
                h.ecc_sbe_volatile = h.ecc_sbe_volatile.map(|_| 0);
                h.ecc_dbe_volatile = h.ecc_dbe_volatile.map(|_| 0);
                h.retired_pending = h.retired_pending.map(|_| false);
            }
        }
    }

    pub(crate) fn vfs_of(&self, pf: PciAddress) -> Vec<(PciAddress, &PciState)> {
        let mut vfs: Vec<(PciAddress, &PciState)> = self
            .pci
            .iter()
            .filter(|(_, s)| s.vf.as_ref().is_some_and(|v| v.pf == pf))
            .map(|(a, s)| (*a, s))
            .collect();
        vfs.sort_by_key(|(_, s)| s.vf.as_ref().map_or(0, |v| v.index));
        vfs
    }

    /// The driver a function binds to without an override.
    pub(crate) fn default_driver(&self, hw: &Hw, addr: PciAddress) -> Option<String> {
        match self.pci.get(&addr).and_then(|p| p.vf.as_ref()) {
            Some(vf) => self.profile.sriov_of(vf.pf)?.vf_driver.clone(),
            None => hw.devices.get(&addr)?.driver.clone(),
        }
    }

    /// Drivers registered on the PCI bus: every default driver of the profile and vfio-pci.
    pub(crate) fn drivers(&self, hw: &Hw) -> BTreeSet<String> {
        let mut set: BTreeSet<String> = hw
            .devices
            .values()
            .filter_map(|d| d.driver.clone())
            .collect();
        for (_, s) in self.profile.sriov_pfs() {
            set.extend(s.vf_driver.clone());
        }
        set.insert(VFIO_PCI.to_owned());
        if self.nvidia_vgpu_host() {
            // `sriov-manage` moves the PF to pci-pf-stub to enable VFs (docs/sysfs.md), so a
            // vGPU host has it registered; other hosts are left as they were.
            set.insert(PCI_PF_STUB.to_owned());
        }
        set
    }

    /// Whether a GPU of the profile has VFs for NVIDIA's vendor-specific VFIO vGPU (its VFs
    /// bind to `nvidia`): the host has NVIDIA's vGPU host driver and `sriov-manage`.
    pub(crate) fn nvidia_vgpu_host(&self) -> bool {
        self.profile
            .gpus
            .iter()
            .filter_map(|g| self.profile.model_of(g))
            .any(|m| {
                m.sriov
                    .as_ref()
                    .is_some_and(|s| s.vf_driver.as_deref() == Some(NVIDIA))
            })
    }

    /// IOMMU groups in use (hardware, VFs, mdevs).
    pub(crate) fn groups_in_use(&self, hw: &Hw) -> BTreeSet<u32> {
        let mut g = hw.groups();
        g.extend(self.pci.values().map(|p| p.iommu_group));
        g.extend(self.mdevs.values().map(|m| m.iommu_group));
        g
    }

    /// The lowest free IOMMU group number, as the kernel's IDA hands them out.
    pub(crate) fn free_group(&self, hw: &Hw) -> u32 {
        let used = self.groups_in_use(hw);
        (0..).find(|g| !used.contains(g)).unwrap_or(u32::MAX)
    }

    /// Whether a function is a VFIO device now: bound to vfio-pci, or an NVIDIA VF with a vGPU
    /// type (the vendor's VFIO variant driver exposes it).
    pub(crate) fn is_vfio_function(&self, addr: PciAddress) -> bool {
        let Some(p) = self.pci.get(&addr) else {
            return false;
        };
        p.driver.as_deref() == Some(VFIO_PCI)
            || p.vf.as_ref().is_some_and(|v| v.vgpu_type.is_some())
    }

    /// Groups that have a `/dev/vfio/<n>` node.
    pub(crate) fn vfio_groups(&self) -> BTreeSet<u32> {
        let mut g: BTreeSet<u32> = self
            .pci
            .iter()
            .filter(|(a, _)| self.is_vfio_function(**a))
            .map(|(_, p)| p.iommu_group)
            .collect();
        g.extend(self.mdevs.values().map(|m| m.iommu_group));
        g
    }

    /// The mdev parents registered now: a PCI parent while bound to its default driver (the
    /// vendor driver registers it), a virtual one (a loaded sample module) always.
    pub(crate) fn mdev_parents(&self, hw: &Hw) -> Vec<MdevParentName> {
        let gpus = self
            .profile
            .gpus
            .iter()
            .filter(|g| {
                self.profile
                    .model_of(g)
                    .is_some_and(|m| !m.mdev_types.is_empty())
            })
            .map(|g| MdevParentName::from(g.address));
        let others = self.profile.mdev_parents.iter().map(|p| p.name.clone());
        gpus.chain(others)
            .filter(|name| {
                name.pci_address()
                    .is_none_or(|addr| self.bound_to_default(hw, addr))
            })
            .collect()
    }

    /// The profile's GPUs from `vendor` that its library can see: present and bound to their
    /// default driver (a GPU on vfio-pci disappears from NVML and AMD SMI). Profile order.
    pub(crate) fn library_visible_gpus(&self, hw: &Hw, vendor: PciVendorId) -> Vec<PciAddress> {
        self.profile
            .gpus
            .iter()
            .filter(|g| self.profile.model_of(g).is_some_and(|m| m.vendor == vendor))
            .filter(|g| self.bound_to_default(hw, g.address))
            .map(|g| g.address)
            .collect()
    }

    /// The GPUs of `gpu`'s XGMI hive, `gpu` included; just `gpu` when it is in none.
    pub(crate) fn hive_of(&self, gpu: PciAddress) -> Vec<PciAddress> {
        let hive = self.gpu(gpu).and_then(|(spec, _)| spec.xgmi_hive);
        match hive {
            None => vec![gpu],
            Some(id) => self
                .profile
                .gpus
                .iter()
                .filter(|g| g.xgmi_hive == Some(id) && self.pci.contains_key(&g.address))
                .map(|g| g.address)
                .collect(),
        }
    }

    /// Whether a present function is bound to its default driver.
    pub(crate) fn bound_to_default(&self, hw: &Hw, addr: PciAddress) -> bool {
        let bound = self.pci.get(&addr).and_then(|p| p.driver.clone());
        bound.is_some() && bound == self.default_driver(hw, addr)
    }

    /// Finds the first fault covering an access, uses it up once, and returns its action and
    /// the call name it matched.
    pub(crate) fn take_fault(
        &mut self,
        access: &Access<'_>,
    ) -> Option<(FaultAction, &'static str)> {
        let pos = self
            .faults
            .iter()
            .position(|f| f.target.matches(access).is_some())?;
        let fault = self.faults.get_mut(pos)?;
        let call = fault.target.matches(access).unwrap_or("");
        let action = fault.action;
        if let Some(n) = fault.times.as_mut() {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.faults.remove(pos);
            }
        }
        Some((action, call))
    }

    /// Whether any fault could cover the access (a read-only check).
    pub(crate) fn has_fault(&self, access: &Access<'_>) -> bool {
        self.faults
            .iter()
            .any(|f| f.target.matches(access).is_some())
    }
}

/// The generic VFIO PCI driver.
pub(crate) const VFIO_PCI: &str = "vfio-pci";
/// NVIDIA's kernel driver (`nvidia.ko`), for PFs and, on vGPU hosts, their VFs.
pub(crate) const NVIDIA: &str = "nvidia";
/// The kernel's stub PF driver (drivers/pci/pci-pf-stub.c): binds nothing by id on an NVIDIA
/// GPU, only through `driver_override`, and has `sriov_configure` (`pci_sriov_configure_simple`).
pub(crate) const PCI_PF_STUB: &str = "pci-pf-stub";
/// AMD's bare-metal kernel driver. Its `pci_driver` (amdgpu_drv.c, `amdgpu_kms_pci_driver`) has
/// no `sriov_configure`: on a host it enables no VFs.
pub(crate) const AMDGPU: &str = "amdgpu";
/// AMD's MxGPU host driver (GIM, amd/MxGPU-Virtualization). It creates VFs itself (its `vf_num`
/// parameter at load, or the host AMD SMI's `amdsmi_set_num_vf`) and has no `sriov_configure`.
pub(crate) const GIM: &str = "gim";

impl PciState {
    pub(crate) fn hardware(dev: &HwDev) -> Self {
        Self {
            driver: dev.driver.clone(),
            driver_override: None,
            iommu_group: dev.iommu_group,
            open: false,
            vf: None,
        }
    }
}
