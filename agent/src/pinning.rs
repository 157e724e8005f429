//! VM pinning for allocations that name a libvirt domain: the service's use of `vmpin`.
//!
//! Before an allocation is gathered, [`Pinner::prepare`] reads the domain (vCPUs, memory, the
//! allocations already recorded in it) and the host's free CPUs and memory per NUMA node from
//! every domain's pins, which the scheduler uses to keep the VM local. Once the slices exist,
//! [`Pinner::apply`] plans the pinning against the same accounting and writes it to the domain;
//! the engine commits the allocation only after that succeeded. [`Pinner::release`] undoes it
//! before the slices are released, and [`Pinner::scan`] rebuilds the allocation ↔ domain links
//! after a restart.
//!
//! This module must not decide placements (the scheduler does) or keep state of its own beyond
//! the connection and a half-minute reading of the host's NUMA cells (`kept_cells`): what was
//! applied lives in the domain's metadata and in the allocation.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use ids::NumaNodeId;
use inventory::HostInventory;
use numa::CpuSet;
use serde::{Deserialize, Serialize};
use vmpin::{
    DomainInfo, HostNode, HostTopology, Hypervisor, MemoryMode, NumaAccounting, PinPlan,
    PinRequest, PlanOptions, SliceDevice, VmpinError,
};

use crate::config::Config;

mod deadline;
mod kept_cells;
use crate::engine::{
    Allocation, AllocationId, EngineError, GuestCellPin, MemoryPin, NumaPolicy, Slice,
    SliceRequest, StaleVmLink, VcpuPin, VmPinning,
};
use deadline::Deadline;
use kept_cells::KeptCells;

type Result<T> = std::result::Result<T, EngineError>;

/// How VMs are pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinningConfig {
    /// libvirt URI (`qemu:///system`, `test:///default`, `test:///abs/host.xml`).
    pub uri: String,
    /// CPUs never given to VMs.
    pub reserved_cpus: CpuSet,
    /// `<numatune>` memory mode.
    pub memory_mode: MemoryMode,
    /// Show the slices' locality to guests (guest NUMA cells, `pcie-expander-bus`).
    pub guest_numa: bool,
    /// The host's NUMA topology to plan against when libvirt's capabilities describe none (its
    /// test driver, whose host file the wiring wrote); `None`: libvirt's, else the inventory's.
    pub topology: Option<HostTopology>,
    /// How long one libvirt call may take before it is given up (`libvirt_unavailable`).
    pub call_timeout: Duration,
}

/// `[libvirt] call_timeout_ms`'s default: libvirtd answers in milliseconds when it works; a
/// domain edit on a loaded host can take a few seconds.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

impl PinningConfig {
    /// Pinning through `uri` with the defaults (strict memory, no reserved CPUs).
    pub fn new(uri: &str) -> Self {
        Self {
            uri: uri.to_owned(),
            reserved_cpus: CpuSet::default(),
            memory_mode: MemoryMode::Strict,
            guest_numa: false,
            topology: None,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }

    /// `[libvirt]` and `[host] reserved_cpus`; `None` when `libvirt.uri` is empty.
    pub fn from_config(config: &Config) -> anyhow::Result<Option<Self>> {
        if config.libvirt.uri.trim().is_empty() {
            return Ok(None);
        }
        let reserved = config
            .host
            .reserved_cpus
            .parse::<CpuSet>()
            .context("host.reserved_cpus")?;
        let memory_mode = MemoryMode::parse(&config.libvirt.memory_mode).ok_or_else(|| {
            anyhow::anyhow!(
                "libvirt.memory_mode {:?} is not a memory mode",
                config.libvirt.memory_mode
            )
        })?;
        Ok(Some(Self {
            uri: config.libvirt.uri.clone(),
            reserved_cpus: reserved,
            memory_mode,
            guest_numa: config.libvirt.guest_numa,
            topology: None,
            call_timeout: Duration::from_millis(config.libvirt.call_timeout_ms),
        }))
    }
}

/// The allocation ↔ VM links found in the domains' records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmLinks {
    /// Records that match an allocation of the engine.
    pub links: Vec<VmLink>,
    /// Records that name allocations or slices that no longer exist.
    pub stale: Vec<StaleVmLink>,
    /// Domains whose records could not be read, and allocations whose domain lost its record.
    pub problems: Vec<String>,
}

/// One allocation pinned in one domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmLink {
    /// The domain.
    pub domain: String,
    /// The allocation.
    pub allocation: AllocationId,
    /// Whether the domain is running.
    pub active: bool,
}

/// What [`Pinner::prepare`] learned about a VM, for the scheduler and the plan.
#[derive(Debug)]
pub(crate) struct VmContext {
    hv: Arc<Hypervisor>,
    domain: DomainInfo,
    policy: NumaPolicy,
    vcpus: u32,
    memory_kib: u64,
    topology: HostTopology,
    accounting: NumaAccounting,
    /// Slices of allocations already recorded in the domain (the plan covers them too).
    earlier: Vec<vmpin::Slice>,
}

impl VmContext {
    /// Free CPUs and memory per node as the scheduler takes them.
    pub(crate) fn numa_states(&self) -> Vec<sched::NumaState> {
        numa_states(&self.accounting)
    }

    /// Whether vCPUs are pinned (policy other than `none`).
    pub(crate) fn pins_cpus(&self) -> bool {
        self.policy != NumaPolicy::None
    }

    /// The VM's vCPUs.
    pub(crate) fn vcpus(&self) -> u32 {
        self.vcpus
    }

    /// The VM's memory, MiB.
    pub(crate) fn memory_mib(&self) -> u64 {
        self.memory_kib.div_ceil(1024)
    }
}

/// The libvirt side of the service: a lazily opened connection and the pinning settings.
#[derive(Debug)]
pub(crate) struct Pinner {
    config: PinningConfig,
    hv: Mutex<Option<Arc<Hypervisor>>>,
    /// Held from planning to applying a VM's pinning.
    planning: Mutex<()>,
    /// Every libvirt call runs under it: a hung libvirtd costs a caller at most the timeout.
    deadline: Deadline,
    /// libvirt's NUMA cells of the host, read again every half minute.
    cells: KeptCells,
}

impl Pinner {
    pub(crate) fn new(config: PinningConfig) -> Self {
        Self {
            deadline: Deadline::new(config.call_timeout),
            config,
            hv: Mutex::new(None),
            planning: Mutex::new(()),
            cells: KeptCells::default(),
        }
    }

    pub(crate) fn uri(&self) -> &str {
        &self.config.uri
    }

    pub(crate) fn reserved_cpus(&self) -> &CpuSet {
        &self.config.reserved_cpus
    }

    /// One VM allocation at a time from planning to applying: the free CPUs come from the
    /// domains' pins, so two plans made at once would take the same CPUs.
    pub(crate) fn serialise(&self) -> std::sync::MutexGuard<'_, ()> {
        self.planning.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection, opened on first use: a libvirtd that is down when the agent starts does
    /// not stop it, and pinning works once libvirtd is back (`Hypervisor` reconnects itself).
    fn hv(&self) -> Result<Arc<Hypervisor>> {
        let mut guard = self.hv.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(hv) = guard.as_ref() {
            return Ok(hv.clone());
        }
        let uri = self.config.uri.clone();
        let hv = self.deadline.run(
            "connecting to libvirt",
            move || Hypervisor::open(&uri).map(Arc::new).map_err(vmpin_error),
            |_| {},
        )?;
        *guard = Some(hv.clone());
        Ok(hv)
    }

    /// One call on the connection, under the deadline; VmpinError left to the caller.
    fn call<T: Send + 'static>(
        &self,
        hv: &Arc<Hypervisor>,
        what: &str,
        f: impl FnOnce(&Hypervisor) -> std::result::Result<T, VmpinError> + Send + 'static,
    ) -> Result<std::result::Result<T, VmpinError>> {
        let hv = hv.clone();
        self.deadline.run(what, move || Ok(f(&hv)), |_| {})
    }

    /// The host as planning sees it: libvirt's NUMA cells, else the configured topology, else
    /// the inventory's nodes (`inventory` is only called then); with the configured reserved
    /// CPUs.
    fn topology(
        &self,
        hv: &Arc<Hypervisor>,
        inventory: impl FnOnce() -> HostInventory,
    ) -> Result<HostTopology> {
        let cells = self.cells.get_or_read(|| {
            self.call(hv, "reading the host's capabilities", |hv| {
                hv.host_topology()
            })?
            .map_err(vmpin_error)
        })?;
        let mut topology = match cells {
            Some(t) => t,
            None => match &self.config.topology {
                Some(t) => t.clone(),
                None => topology_of(&inventory(), &CpuSet::default())?,
            },
        };
        topology.reserved_cpus = CpuSet::from_cpus(
            topology
                .reserved_cpus
                .iter()
                .chain(self.config.reserved_cpus.iter()),
        );
        Ok(topology)
    }

    /// Free CPUs and memory per node given every domain's pins except `skip`'s own;
    /// `inventory` only when libvirt and the configuration describe no NUMA cells.
    pub(crate) fn free_numa(
        &self,
        inventory: impl FnOnce() -> HostInventory,
        skip: Option<&str>,
    ) -> Result<Vec<sched::NumaState>> {
        let hv = self.hv()?;
        let topology = self.topology(&hv, inventory)?;
        let usage = self
            .call(&hv, "reading the domains' pins", |hv| hv.usage())?
            .map_err(vmpin_error)?;
        let accounting = match skip {
            Some(domain) => NumaAccounting::for_domain(&topology, &usage, domain),
            None => NumaAccounting::new(&topology, &usage),
        };
        Ok(numa_states(&accounting))
    }

    /// Reads what planning needs about `vm` before anything is allocated (`inventory` as for
    /// [`Self::free_numa`]). A VM that is not a domain is `not_found`; libvirt down is
    /// `libvirt_unavailable`.
    pub(crate) fn prepare(
        &self,
        vm: &str,
        request: &SliceRequest,
        inventory: impl FnOnce() -> HostInventory,
    ) -> Result<VmContext> {
        let hv = self.hv()?;
        let name = vm.to_owned();
        let domain = self
            .call(&hv, "reading the domain", move |hv| hv.domain_info(&name))?
            .map_err(vmpin_error)?;
        if !domain.persistent {
            return Err(vmpin_error(VmpinError::Transient(vm.to_owned())));
        }
        let topology = self.topology(&hv, inventory)?;
        let usage = self
            .call(&hv, "reading the domains' pins", |hv| hv.usage())?
            .map_err(vmpin_error)?;
        let accounting = NumaAccounting::for_domain(&topology, &usage, vm);
        let name = vm.to_owned();
        let earlier = self
            .call(&hv, "reading the domain's allocations", move |hv| {
                hv.allocations(&name)
            })?
            .map_err(vmpin_error)?
            .into_iter()
            .flat_map(|r| r.slices)
            .collect();
        Ok(VmContext {
            policy: request.numa(),
            vcpus: request.vcpus.unwrap_or(domain.vcpus),
            memory_kib: request
                .memory_mib
                .map_or(domain.memory_kib, |m| m.saturating_mul(1024)),
            hv,
            domain,
            topology,
            accounting,
            earlier,
        })
    }

    /// Plans and applies the pinning of a gathered allocation. Under `required` a VM that
    /// cannot be local is `no_capacity` with the node and what is missing.
    pub(crate) fn apply(
        &self,
        vm: &VmContext,
        alloc: &Allocation,
        slices: &[Slice],
    ) -> Result<VmPinning> {
        let (planned, devices) = self.vm_slices(vm, slices);
        let mut all = vm.earlier.clone();
        all.extend(planned);
        let request = PinRequest {
            slices: all,
            vcpus: vm.vcpus,
            memory_kib: vm.memory_kib,
            policy: match vm.policy {
                NumaPolicy::Required => vmpin::Policy::Required,
                NumaPolicy::Preferred => vmpin::Policy::Preferred,
                NumaPolicy::None => vmpin::Policy::None,
            },
            options: PlanOptions {
                memory_mode: self.config.memory_mode,
                guest_numa: self.config.guest_numa,
                expander_bus: self.config.guest_numa,
                dedicated_emulator_cpus: 0,
            },
        };
        let plan = vm.accounting.plan(&request).map_err(|r| {
            EngineError::NoCapacity(format!(
                "VM {} cannot be placed under NUMA policy {}: {r}",
                vm.domain.name,
                vm.policy.as_str()
            ))
        })?;
        let report = self.apply_in_domain(vm, alloc.id, devices, plan.clone())?;
        tracing::info!(allocation = %alloc.id, domain = ?vm.domain.name, live = report.active, "VM pinned");
        Ok(pinning_of(&vm.domain.name, vm.policy, &plan, report))
    }

    /// Edits the domain for the allocation. Should libvirt answer only after the deadline, the
    /// allocation has been refused meanwhile: the worker undoes the edit it made.
    fn apply_in_domain(
        &self,
        vm: &VmContext,
        id: AllocationId,
        devices: Vec<vmpin::Slice>,
        plan: vmpin::PinPlan,
    ) -> Result<vmpin::ApplyReport> {
        let (hv, domain, key) = (vm.hv.clone(), vm.domain.name.clone(), id.to_string());
        // The call hands back what the undo needs, so a late answer can be undone on the worker.
        let (applied, ..) = self.deadline.run(
            "pinning the VM",
            move || Ok((hv.apply(&domain, &key, &devices, &plan), hv, domain, key)),
            |(late, hv, domain, key)| {
                if late.is_ok() {
                    let undone = hv.release(&domain, &key);
                    tracing::warn!(allocation = %key, domain = %domain, undone = undone.is_ok(), "libvirt pinned the VM after the allocation was refused; pinning undone");
                }
            },
        )?;
        applied.map_err(vmpin_error)
    }

    /// The slices as planning sees them (every slice, with its node) and as devices for the
    /// domain (MIG instances have no device of their own: a vGPU on top of them is the device).
    fn vm_slices(
        &self,
        vm: &VmContext,
        slices: &[Slice],
    ) -> (Vec<vmpin::Slice>, Vec<vmpin::Slice>) {
        let fallback = vm.topology.nodes.first().map_or(NumaNodeId(0), |n| n.id);
        let mut planned = Vec::new();
        let mut devices = Vec::new();
        for s in slices {
            let node = s.numa_node.unwrap_or(fallback);
            let device = match (&s.handles.mdev_uuid, s.handles.pci_address) {
                (Some(uuid), _) => Some(SliceDevice::Mdev { uuid: *uuid }),
                // The agent bound the function to vfio-pci itself.
                (None, Some(address)) => Some(SliceDevice::Pci {
                    address,
                    managed: false,
                }),
                (None, None) => None,
            };
            // A slice on a virtual mdev parent has no PCI function to plan with until it exists.
            let Some(planning_device) = device.clone().or_else(|| {
                let address = s.spec.gpu.pci()?;
                Some(SliceDevice::Pci {
                    address,
                    managed: false,
                })
            }) else {
                continue;
            };
            planned.push(vmpin::Slice {
                device: planning_device,
                node,
            });
            if let Some(device) = device {
                devices.push(vmpin::Slice { device, node });
            }
        }
        (planned, devices)
    }

    /// Undoes an allocation's pinning. A domain or record that is already gone is fine; libvirt
    /// down is `libvirt_unavailable`.
    pub(crate) fn release(&self, domain: &str, id: AllocationId) -> Result<()> {
        let hv = self.hv()?;
        let (name, key) = (domain.to_owned(), id.to_string());
        match self.call(&hv, "releasing the domain's pinning", move |hv| {
            hv.release(&name, &key)
        })? {
            Ok(report) => {
                tracing::info!(allocation = %id, domain, restart_needed = ?report.restart_needed, "VM pinning released");
                Ok(())
            }
            Err(VmpinError::AllocationNotFound { .. } | VmpinError::NoDomain(_)) => {
                tracing::warn!(allocation = %id, domain, "the domain no longer records the allocation's pinning");
                Ok(())
            }
            Err(e) => Err(vmpin_error(e)),
        }
    }

    /// Rebuilds the links from every domain's records and checks them against the engine's
    /// allocations and slices.
    pub(crate) fn scan(&self, allocations: &[Allocation], slices: &[Slice]) -> Result<VmLinks> {
        let hv = self.hv()?;
        let domains = self
            .call(&hv, "reading every domain's records", |hv| hv.scan())?
            .map_err(vmpin_error)?;
        let mut links = VmLinks::default();
        for d in &domains {
            if let Some(problem) = &d.problem {
                links
                    .problems
                    .push(format!("domain {}: {problem}", d.domain));
            }
            for record in &d.allocations {
                match check_record(&d.domain, record, allocations, slices) {
                    Ok(allocation) => links.links.push(VmLink {
                        domain: d.domain.clone(),
                        allocation,
                        active: d.active,
                    }),
                    Err(reason) => links.stale.push(StaleVmLink {
                        domain: d.domain.clone(),
                        allocation: record.id.clone(),
                        reason,
                    }),
                }
            }
        }
        for a in allocations {
            let Some(p) = &a.pinning else { continue };
            if !links.links.iter().any(|l| l.allocation == a.id) {
                links.problems.push(format!(
                    "allocation {} was pinned in domain {}, which no longer records it",
                    a.id, p.domain
                ));
            }
        }
        for s in &links.stale {
            tracing::warn!(domain = ?s.domain, allocation = %s.allocation, reason = %s.reason, "stale VM link");
        }
        Ok(links)
    }
}

/// Whether a domain's record matches an allocation, or why not.
fn check_record(
    domain: &str,
    record: &vmpin::AllocationRecord,
    allocations: &[Allocation],
    slices: &[Slice],
) -> std::result::Result<AllocationId, String> {
    let id: AllocationId = record
        .id
        .parse()
        .map_err(|_| format!("{:?} is not an allocation id of vgpud", record.id))?;
    let alloc = allocations
        .iter()
        .find(|a| a.id == id)
        .ok_or_else(|| format!("allocation {id} no longer exists"))?;
    if alloc.vm.as_deref() != Some(domain) {
        return Err(format!(
            "allocation {id} belongs to VM {:?}, not to this domain",
            alloc.vm.as_deref().unwrap_or("(none)")
        ));
    }
    let held: Vec<&Slice> = slices
        .iter()
        .filter(|s| alloc.slices.contains(&s.id))
        .collect();
    for s in &record.slices {
        let present = held.iter().any(|h| match &s.device {
            SliceDevice::Mdev { uuid } => h.handles.mdev_uuid.as_ref() == Some(uuid),
            SliceDevice::Pci { address, .. } => h.handles.pci_address == Some(*address),
        });
        if !present {
            return Err(format!(
                "{} of allocation {id} is no longer one of its slices",
                s.device
            ));
        }
    }
    Ok(id)
}

fn numa_states(accounting: &NumaAccounting) -> Vec<sched::NumaState> {
    accounting
        .nodes()
        .iter()
        .map(|n| sched::NumaState {
            node: n.node,
            free_cpus: n.free_cpus.iter().collect(),
            free_cpu_milli: None,
            free_memory_mib: n.free_memory_mib,
        })
        .collect()
}

fn pinning_of(
    domain: &str,
    policy: NumaPolicy,
    plan: &PinPlan,
    report: vmpin::ApplyReport,
) -> VmPinning {
    let mut restart_needed = report.restart_needed;
    restart_needed.extend(
        report
            .live
            .iter()
            .filter_map(|l| l.error.as_ref().map(|e| format!("{}: {e}", l.what))),
    );
    restart_needed.dedup();
    VmPinning {
        domain: domain.to_owned(),
        policy,
        vcpus: (0u32..)
            .zip(&plan.vcpu_pins)
            .map(|(vcpu, cpu)| VcpuPin { vcpu, cpu: *cpu })
            .collect(),
        emulator_cpus: plan.emulator_cpus.to_string(),
        memory: plan.memory.as_ref().map(|m| MemoryPin {
            mode: m.mode.as_str().to_owned(),
            nodes: m.nodeset(),
        }),
        guest_cells: plan
            .guest_cells
            .iter()
            .map(|c| GuestCellPin {
                cell: c.id,
                host_node: c.host_node,
            })
            .collect(),
        xml_fragment: report.fragment,
        restart_needed,
        compromises: plan.compromises.clone(),
    }
}

/// The inventory's NUMA nodes as planning sees them, with `reserved` kept for the host.
pub fn topology_of(inventory: &HostInventory, reserved: &CpuSet) -> Result<HostTopology> {
    let mut nodes = Vec::new();
    for n in &inventory.numa_nodes {
        let cpus = n.cpus.parse::<CpuSet>().map_err(|e| {
            EngineError::host(
                format!("NUMA node {} has an unusable CPU list {:?}", n.id, n.cpus),
                None,
                Box::new(e),
            )
        })?;
        nodes.push(HostNode {
            id: n.id,
            cpus,
            memory_mib: n.memory_mib,
        });
    }
    nodes.sort_by_key(|n| n.id);
    Ok(HostTopology {
        nodes,
        reserved_cpus: reserved.clone(),
    })
}

/// Maps a pinning failure to the engine's error codes.
pub(crate) fn vmpin_error(e: VmpinError) -> EngineError {
    let text = sysfs::error_chain(&e);
    match e {
        e if e.libvirt_unavailable() => EngineError::LibvirtUnavailable(text),
        VmpinError::NoDomain(d) => {
            EngineError::NotFound(format!("VM {d:?} is not a libvirt domain on this host"))
        }
        VmpinError::Transient(_) => EngineError::Unsupported(text),
        VmpinError::AllocationExists { .. } | VmpinError::DeviceAlreadyPresent { .. } => {
            EngineError::Conflict(text)
        }
        VmpinError::AllocationNotFound { .. } => EngineError::NotFound(text),
        VmpinError::Rejected(r) => EngineError::NoCapacity(format!("the VM cannot be placed: {r}")),
        other => EngineError::host("VM pinning failed", None, Box::new(other)),
    }
}
