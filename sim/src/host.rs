//! [`SimHost`]: the handle to one simulated host, and the test/demo controls the real host does
//! not have (faults, Xids, hot-unplug, "a VM has this open", "processes run on this instance").

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ids::{MdevParentName, MdevUuid, PciAddress};

use crate::SimError;
use crate::amd_view::SimAmd;
use crate::fault::Fault;
use crate::kernel;
use crate::nvml_view::SimNvml;
use crate::profile::Profile;
use crate::state::{Hw, PciState, PendingXid, State};
use crate::store::Store;
use crate::sysfs_view::SimSysfs;
use crate::uevent::Uevent;

/// A simulated host. Cheap to clone; clones share the model. With a state directory, other
/// `SimHost`s on the same directory (in this or another process) see every change.
#[derive(Clone)]
pub struct SimHost {
    store: Arc<Store>,
}

impl fmt::Debug for SimHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimHost")
            .field("profile", &self.profile_name())
            .field("dir", &self.store.dir())
            .finish()
    }
}

/// A device a VM can hold open through VFIO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VfioDevice {
    /// A PCI function bound to vfio-pci, or an NVIDIA VF with a vGPU type.
    Pci(PciAddress),
    /// An mdev device.
    Mdev(MdevUuid),
}

impl From<PciAddress> for VfioDevice {
    fn from(a: PciAddress) -> Self {
        VfioDevice::Pci(a)
    }
}

impl From<MdevUuid> for VfioDevice {
    fn from(u: MdevUuid) -> Self {
        VfioDevice::Mdev(u)
    }
}

impl fmt::Display for VfioDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VfioDevice::Pci(a) => write!(f, "PCI device {a}"),
            VfioDevice::Mdev(u) => write!(f, "mdev {u}"),
        }
    }
}

fn boot(profile: Profile) -> Result<State, SimError> {
    profile.validate()?;
    let hw = Hw::build(&profile);
    Ok(State::first_boot(profile, &hw))
}

impl SimHost {
    /// A host that lives in memory only.
    pub fn new(profile: Profile) -> Result<SimHost, SimError> {
        Ok(Self {
            store: Arc::new(Store::in_memory(boot(profile)?)),
        })
    }

    /// A new host persisted in `dir` (created if needed); fails if `dir` already holds one.
    pub fn create(dir: &Path, profile: Profile) -> Result<SimHost, SimError> {
        Ok(Self {
            store: Arc::new(Store::create(dir, boot(profile)?)?),
        })
    }

    /// The host persisted in `dir`.
    pub fn open(dir: &Path) -> Result<SimHost, SimError> {
        Ok(Self {
            store: Arc::new(Store::open(dir)?),
        })
    }

    /// The host in `dir`, created from `profile` if there is none; fails if `dir` holds a host
    /// of another profile (compared by name).
    pub fn open_or_create(dir: &Path, profile: Profile) -> Result<SimHost, SimError> {
        let host = match SimHost::open(dir) {
            Ok(h) => h,
            Err(SimError::NoState { .. }) => match SimHost::create(dir, profile.clone()) {
                // Another process created it between our two calls.
                Err(SimError::StateExists { .. }) => SimHost::open(dir)?,
                other => return other,
            },
            Err(e) => return Err(e),
        };
        let found = host.profile_name();
        if found != profile.name {
            return Err(SimError::ProfileMismatch {
                dir: dir.to_owned(),
                found,
                wanted: profile.name,
            });
        }
        Ok(host)
    }

    /// The sysfs view (implements [`sysfs::Sysfs`]).
    pub fn sysfs(&self) -> Arc<dyn sysfs::Sysfs> {
        Arc::new(SimSysfs::new(self.clone()))
    }

    /// The NVML view (implements [`gpu::Nvml`]).
    pub fn nvml(&self) -> Arc<dyn gpu::Nvml> {
        Arc::new(SimNvml::new(self.clone()))
    }

    /// The AMD SMI view (implements [`gpu::AmdSmi`]).
    pub fn amd(&self) -> Arc<dyn gpu::AmdSmi> {
        Arc::new(SimAmd::new(self.clone()))
    }

    /// The state directory, for a persisted host.
    pub fn dir(&self) -> Option<PathBuf> {
        self.store.dir().map(Path::to_path_buf)
    }

    /// The profile's name (`dgx-a100`).
    pub fn profile_name(&self) -> String {
        self.store.peek(|s| s.profile.name.clone())
    }

    /// The host name the simulated host reports.
    pub fn hostname(&self) -> String {
        self.store.peek(|s| s.profile.hostname.clone())
    }

    /// The profile the host was built from.
    pub fn profile(&self) -> Profile {
        self.store.peek(|s| s.profile.clone())
    }

    /// Host reboot: mdevs, VFs, vGPU types, MIG GPU/compute instances, driver overrides and
    /// in-use flags are gone, every device is back on its default driver, faults and pending
    /// Xids are cleared; hardware, removed GPUs, MIG mode (a pending change takes effect) and AMD
    /// partition modes stay. Then the profile's boot services run (`boot_vfs`).
    pub fn reboot(&self) -> Result<(), SimError> {
        self.change(|st, hw| {
            st.boot(hw);
            Ok(())
        })
    }

    /// Adds a fault (see [`crate::fault`] for what it hits).
    pub fn inject_fault(&self, fault: Fault) -> Result<(), SimError> {
        fault.validate()?;
        self.change(|st, _| {
            st.faults.push(fault);
            Ok(())
        })
    }

    /// Removes every fault.
    pub fn clear_faults(&self) -> Result<(), SimError> {
        self.change(|st, _| {
            st.faults.clear();
            Ok(())
        })
    }

    /// The faults in force, with their remaining counts.
    pub fn faults(&self) -> Result<Vec<Fault>, SimError> {
        self.store.read(|v| v.state.faults.clone())
    }

    /// Queues an Xid event on an NVIDIA GPU; `wait_xid_event` delivers it once.
    pub fn inject_xid(&self, gpu: PciAddress, xid: u64) -> Result<(), SimError> {
        self.change(|st, _| {
            present_gpu(st, gpu)?;
            if st
                .gpu(gpu)
                .is_some_and(|(_, m)| m.vendor != ids::PciVendorId::NVIDIA)
            {
                return Err(SimError::NotNvidia(gpu));
            }
            st.xids.push_back(PendingXid { gpu, xid });
            Ok(())
        })
    }

    /// Sets what NVML's memory-error and clocks-event queries answer for an NVIDIA GPU (fields
    /// left `None` answer `NOT_SUPPORTED`, as on a board without the feature).
    pub fn set_health_signals(
        &self,
        gpu: PciAddress,
        signals: gpu::HealthSignals,
    ) -> Result<(), SimError> {
        self.change(|st, _| {
            present_gpu(st, gpu)?;
            if st
                .gpu(gpu)
                .is_some_and(|(_, m)| m.vendor != ids::PciVendorId::NVIDIA)
            {
                return Err(SimError::NotNvidia(gpu));
            }
            let g = st.gpus.get_mut(&gpu).ok_or(SimError::UnknownGpu(gpu))?;
            g.health = Some(signals);
            Ok(())
        })
    }

    /// Hot-unplug of a GPU of the profile: it vanishes from sysfs, NVML and AMD SMI with its
    /// VFs, mdevs and MIG instances.
    pub fn remove_gpu(&self, gpu: PciAddress) -> Result<(), SimError> {
        self.change(|st, _| {
            present_gpu(st, gpu)?;
            st.pci
                .retain(|a, p| *a != gpu && p.vf.as_ref().is_none_or(|v| v.pf != gpu));
            let parent = MdevParentName::from(gpu);
            st.mdevs.retain(|_, m| m.parent != parent);
            if let Some(g) = st.gpus.get_mut(&gpu) {
                g.gis.clear();
            }
            st.removed.insert(gpu);
            Ok(())
        })
    }

    /// Replug of a removed GPU: it comes back on its default driver, without VFs or instances.
    pub fn add_gpu(&self, gpu: PciAddress) -> Result<(), SimError> {
        self.change(|st, hw| {
            st.gpu(gpu).ok_or(SimError::UnknownGpu(gpu))?;
            if !st.removed.remove(&gpu) {
                return Err(SimError::GpuState {
                    gpu,
                    state: "already present",
                });
            }
            let dev = hw.devices.get(&gpu).ok_or(SimError::UnknownGpu(gpu))?;
            st.pci.insert(
                gpu,
                PciState {
                    driver: dev.driver.clone(),
                    driver_override: None,
                    iommu_group: dev.iommu_group,
                    open: false,
                    vf: None,
                },
            );
            Ok(())
        })
    }

    /// Marks a MIG GPU instance as running processes (or not): while it does, destroying it or
    /// its compute instances fails with `IN_USE`.
    pub fn set_mig_instance_in_use(
        &self,
        gpu: PciAddress,
        gi: u32,
        in_use: bool,
    ) -> Result<(), SimError> {
        self.change(|st, _| {
            present_gpu(st, gpu)?;
            let g = st.gpus.get_mut(&gpu).ok_or(SimError::UnknownGpu(gpu))?;
            let inst =
                g.gis
                    .iter_mut()
                    .find(|x| x.id == gi)
                    .ok_or(SimError::UnknownGpuInstance {
                        gpu,
                        gpu_instance: gi,
                    })?;
            inst.in_use = in_use;
            Ok(())
        })
    }

    /// Requests a MIG mode, as an operator's setup before vgpud runs (with any reset it needed
    /// on a vGPU host). The change is pending until the GPU is idle (no GPU instances, vGPUs,
    /// mdevs or client processes), when it takes effect at once, or else at the next reboot.
    /// NVML's `nvmlDeviceSetMigMode` follows the same rule except on a vGPU host, where it is
    /// refused while the GPU has VFs and pending until [`SimHost::reset_gpu`].
    pub fn set_mig_mode(&self, gpu: PciAddress, enabled: bool) -> Result<(), SimError> {
        self.change(|st, _| {
            present_gpu(st, gpu)?;
            if st.request_mig_mode(gpu, enabled) {
                Ok(())
            } else {
                Err(SimError::NotMigCapable(gpu))
            }
        })
    }

    /// A GPU reset (`nvidia-smi -r -i <n>`): a pending MIG mode takes effect and the GPU's
    /// instances are gone. Refused while the GPU is in use: a VM holds one of its VFs, a VF has
    /// a vGPU, processes run on a GPU instance or hold the GPU.
    pub fn reset_gpu(&self, gpu: PciAddress) -> Result<(), SimError> {
        self.change(|st, _| {
            present_gpu(st, gpu)?;
            if let Some(state) = st.reset_blocker(gpu) {
                return Err(SimError::GpuState { gpu, state });
            }
            st.reset_gpu(gpu);
            Ok(())
        })
    }

    /// Reloads the amdgpu driver (`modprobe -r amdgpu && modprobe amdgpu`): every GPU bound to
    /// it takes its requested memory (NPS) mode. Refused while a process holds one of them.
    /// Returns the GPUs whose mode changed.
    pub fn reload_amdgpu(&self) -> Result<Vec<PciAddress>, SimError> {
        self.change(|st, _| {
            crate::kernel::reload_amdgpu(st).map_err(|_| SimError::DriverBusy { driver: "amdgpu" })
        })
    }

    /// Marks a GPU as held by client processes (a CUDA application, a monitoring agent) or not:
    /// while it is, a MIG mode change stays pending until the next reboot, as NVML's "in use by
    /// another client". A reboot ends the processes.
    pub fn set_gpu_clients(&self, gpu: PciAddress, clients: bool) -> Result<(), SimError> {
        self.change(|st, _| {
            present_gpu(st, gpu)?;
            let g = st.gpus.get_mut(&gpu).ok_or(SimError::UnknownGpu(gpu))?;
            g.clients = clients;
            Ok(())
        })
    }

    /// A VM opens (or closes) a device's VFIO group: while open, removing the device, its VFs
    /// or its vGPU, or unbinding it, fails with `EBUSY`.
    pub fn set_vfio_open(&self, device: impl Into<VfioDevice>, open: bool) -> Result<(), SimError> {
        let device = device.into();
        self.change(|st, _| {
            let refuse = |reason| SimError::NotVfioDevice {
                device: device.to_string(),
                reason,
            };
            match device {
                VfioDevice::Pci(addr) => {
                    if open {
                        kernel::vfio_openable(st, addr).map_err(refuse)?;
                    }
                    let p = st.pci.get_mut(&addr).ok_or(refuse("it is not present"))?;
                    p.open = open;
                }
                VfioDevice::Mdev(uuid) => {
                    let m = st.mdevs.get_mut(&uuid).ok_or(refuse("it does not exist"))?;
                    m.open = open;
                }
            }
            Ok(())
        })
    }

    /// The uevents the kernel would have sent since sequence number `seqnum` (see the `uevent`
    /// module), oldest first: what a netlink monitor on this host receives.
    pub fn uevents_since(&self, seqnum: u64) -> Result<Vec<Uevent>, SimError> {
        self.store.read(|v| v.state.uevents.since(seqnum))
    }

    /// The last uevent sequence number (`/sys/kernel/uevent_seqnum`).
    pub fn uevent_seqnum(&self) -> Result<u64, SimError> {
        self.store.read(|v| v.state.uevents.seqnum)
    }

    /// Applies a change to the model under the store's locks.
    pub(crate) fn change<T>(
        &self,
        f: impl FnOnce(&mut State, &Hw) -> Result<T, SimError>,
    ) -> Result<T, SimError> {
        self.store.write(f)?
    }

    /// The store, for the trait views.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }
}

fn present_gpu(st: &State, gpu: PciAddress) -> Result<(), SimError> {
    st.gpu(gpu).ok_or(SimError::UnknownGpu(gpu))?;
    if st.removed.contains(&gpu) || st.detached.contains(&gpu) {
        return Err(SimError::GpuState {
            gpu,
            state: "removed",
        });
    }
    Ok(())
}
