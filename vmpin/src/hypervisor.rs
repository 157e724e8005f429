//! The libvirt connection: apply and release allocations on domains, scan domains' records.
//!
//! Every method blocks on libvirt; the daemon calls them from a blocking thread.
//!
//! **libvirtd down or restarting.** Opening fails with [`VmpinError::Connect`]. Later, each
//! call first checks the connection is alive and reopens it if not; a call that fails because
//! the connection broke drops it, so the next call reconnects. Nothing here retries or sleeps:
//! the failure reaches the caller at once (an apply either recorded its allocation in the
//! persistent definition or did not), and the engine decides when to try again.
//!
//! **What runs live.** For a running domain the persistent definition is redefined first (the
//! record of what was added lives there, so a failure halfway can still be released), then:
//! hostdevs are hot-(un)plugged with `virDomainAttachDeviceFlags(LIVE)` (the result is checked:
//! `virt`'s plain `attach_device` reports success when libvirt refused), vCPUs and the emulator
//! are re-pinned, and the memory nodeset is changed through the NUMA parameters. Guest NUMA cells,
//! expander buses, a memory *mode* change, and anything libvirt refused live, take effect at the
//! next guest start: the report lists them. A hot-unplug needs the guest's acknowledgement:
//! libvirt waits a few seconds for it and reports success either way, so the device may leave
//! the running domain's XML after `release` returned.

use std::sync::{Mutex, MutexGuard};

use numa::CpuSet;
use serde::{Deserialize, Serialize};
use virt::connect::Connect;
use virt::domain::{Domain, NUMAParameters};
use virt::error::{ErrorDomain, ErrorNumber};

use crate::VmpinError;
use crate::domain::{AllocationRecord, DomainXml, Pinning};
use crate::plan::{DomainUsage, HostNode, HostTopology, PinPlan, Slice};

/// A domain's shape, for planning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainInfo {
    /// Name.
    pub name: String,
    /// UUID as libvirt prints it.
    pub uuid: String,
    /// Running (or paused).
    pub active: bool,
    /// Has a persistent definition.
    pub persistent: bool,
    /// vCPU count of the persistent definition.
    pub vcpus: u32,
    /// Memory of the persistent definition, KiB.
    pub memory_kib: u64,
}

/// One change made to a running domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveAction {
    /// What (e.g. `pin vCPU 0 to 8`, `attach mdev ...`).
    pub what: String,
    /// libvirt's refusal, when it refused; the change then waits for a guest restart.
    pub error: Option<String>,
}

/// What applying an allocation did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyReport {
    /// Domain name.
    pub domain: String,
    /// Allocation id.
    pub allocation: String,
    /// Whether the domain was running (live changes were attempted).
    pub active: bool,
    /// Live changes, in order, with libvirt's answer.
    pub live: Vec<LiveAction>,
    /// What takes effect only when the guest is next started.
    pub restart_needed: Vec<String>,
    /// The managed part of the resulting persistent definition (`<cputune>`, `<numatune>`,
    /// `<cpu>`, the allocations' hostdevs and controllers).
    pub fragment: String,
}

/// What releasing an allocation did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseReport {
    /// Domain name.
    pub domain: String,
    /// The record that was removed.
    pub record: AllocationRecord,
    /// Whether the domain was running.
    pub active: bool,
    /// Live changes, in order, with libvirt's answer.
    pub live: Vec<LiveAction>,
    /// What is undone only when the guest is next started.
    pub restart_needed: Vec<String>,
}

/// The allocations recorded in one domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainAllocations {
    /// Domain name.
    pub domain: String,
    /// UUID.
    pub uuid: String,
    /// Running.
    pub active: bool,
    /// Records, in the order applied.
    pub allocations: Vec<AllocationRecord>,
    /// Why the records could not be read, when they could not (the other domains still scan).
    pub problem: Option<String>,
}

/// A libvirt connection.
pub struct Hypervisor {
    uri: String,
    conn: Mutex<Option<Connect>>,
}

impl std::fmt::Debug for Hypervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hypervisor")
            .field("uri", &self.uri)
            .finish_non_exhaustive()
    }
}

impl Drop for Hypervisor {
    fn drop(&mut self) {
        // virt 0.4's Connect does not close itself.
        if let Ok(mut guard) = self.conn.lock()
            && let Some(mut c) = guard.take()
        {
            let _ = c.close();
        }
    }
}

fn open(uri: &str) -> Result<Connect, VmpinError> {
    // libvirt prints every error to stderr by default; errors reach the caller as values instead.
    virt::error::clear_error_callback();
    Connect::open(Some(uri)).map_err(|source| VmpinError::Connect {
        uri: uri.to_owned(),
        source,
    })
}

pub(crate) fn connection_broken(e: &virt::error::Error) -> bool {
    matches!(
        e.code(),
        ErrorNumber::SystemError
            | ErrorNumber::NoConnect
            | ErrorNumber::InvalidConn
            | ErrorNumber::Rpc
    ) || matches!(e.domain(), ErrorDomain::Rpc | ErrorDomain::Remote)
}

/// A CPU bitmap as libvirt's pinning calls take it, `len` bytes long.
fn cpumap(cpus: &CpuSet, len: usize) -> Vec<u8> {
    let mut map = vec![0u8; len];
    for cpu in cpus.iter() {
        if let Some(byte) = map.get_mut(cpu as usize / 8) {
            *byte |= 1 << (cpu % 8);
        }
    }
    map
}

impl Hypervisor {
    /// Connects to `uri` (`test:///default`, `test:///abs/host.xml`, `qemu:///system`, ...).
    pub fn open(uri: &str) -> Result<Self, VmpinError> {
        let conn = open(uri)?;
        Ok(Self {
            uri: uri.to_owned(),
            conn: Mutex::new(Some(conn)),
        })
    }

    /// The URI this connects to.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    fn lock(&self) -> MutexGuard<'_, Option<Connect>> {
        // A poisoned lock only means another call panicked; the connection itself is still valid.
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on a live connection, reconnecting first when needed and dropping the
    /// connection when `f` failed because it broke.
    fn with<T>(&self, f: impl FnOnce(&Connect) -> Result<T, VmpinError>) -> Result<T, VmpinError> {
        let mut guard = self.lock();
        let alive = guard
            .as_ref()
            .is_some_and(|c| c.is_alive().unwrap_or(false));
        if !alive {
            if let Some(mut old) = guard.take() {
                let _ = old.close();
            }
            *guard = Some(open(&self.uri)?);
        }
        let Some(conn) = guard.as_ref() else {
            return Err(VmpinError::Domain("no connection".into()));
        };
        let result = f(conn);
        if let Err(VmpinError::Libvirt { source, .. }) = &result
            && connection_broken(source)
            && let Some(mut c) = guard.take()
        {
            let _ = c.close();
        }
        result
    }

    /// Node facts libvirt reports: (NUMA nodes, CPUs, memory KiB).
    pub fn node_summary(&self) -> Result<(u32, u32, u64), VmpinError> {
        self.with(|c| {
            let info = c
                .get_node_info()
                .map_err(|e| libvirt("virNodeGetInfo", &self.uri, e))?;
            Ok((info.nodes, info.cpus, info.memory))
        })
    }

    /// The host NUMA topology from libvirt's capabilities; `None` when libvirt reports no cells
    /// (the test driver opened from a file never does: read the file with
    /// [`crate::testhost::read_topology`] instead).
    pub fn host_topology(&self) -> Result<Option<HostTopology>, VmpinError> {
        let caps = self.with(|c| {
            c.get_capabilities()
                .map_err(|e| libvirt("virConnectGetCapabilities", &self.uri, e))
        })?;
        topology_from_capabilities(&caps)
    }

    /// A node device's XML (e.g. `pci_0000_41_00_0`).
    pub fn node_device_xml(&self, name: &str) -> Result<String, VmpinError> {
        self.with(|c| {
            let dev = virt::nodedev::NodeDevice::lookup_by_name(c, name)
                .map_err(|e| libvirt("virNodeDeviceLookupByName", name, e))?;
            dev.get_xml_desc(0)
                .map_err(|e| libvirt("virNodeDeviceGetXMLDesc", name, e))
        })
    }

    /// Defines (or redefines) a domain; returns its name.
    pub fn define(&self, xml: &str) -> Result<String, VmpinError> {
        self.with(|c| {
            let d = Domain::define_xml(c, xml)
                .map_err(|e| libvirt("virDomainDefineXML", &self.uri, e))?;
            d.get_name()
                .map_err(|e| libvirt("virDomainGetName", &self.uri, e))
        })
    }

    /// Starts a defined domain.
    pub fn start(&self, domain: &str) -> Result<(), VmpinError> {
        self.with(|c| {
            let d = lookup(c, domain)?;
            d.create()
                .map(|_| ())
                .map_err(|e| libvirt("virDomainCreate", domain, e))
        })
    }

    /// Stops a domain at once (like pulling the plug).
    pub fn destroy(&self, domain: &str) -> Result<(), VmpinError> {
        self.with(|c| {
            let d = lookup(c, domain)?;
            d.destroy()
                .map_err(|e| libvirt("virDomainDestroy", domain, e))
        })
    }

    /// The domain's XML: the persistent definition (`inactive`) or the running one.
    pub fn domain_xml(&self, domain: &str, inactive: bool) -> Result<String, VmpinError> {
        self.with(|c| {
            let d = lookup(c, domain)?;
            xml_of(&d, domain, inactive)
        })
    }

    /// A domain's state and size.
    pub fn domain_info(&self, domain: &str) -> Result<DomainInfo, VmpinError> {
        self.with(|c| {
            let d = lookup(c, domain)?;
            let (active, persistent) = flags(&d, domain)?;
            let xml = DomainXml::parse(&xml_of(&d, domain, persistent)?)?;
            Ok(DomainInfo {
                name: domain.to_owned(),
                uuid: d
                    .get_uuid_string()
                    .map_err(|e| libvirt("virDomainGetUUIDString", domain, e))?,
                active,
                persistent,
                vcpus: xml.vcpus()?,
                memory_kib: xml.memory_kib()?,
            })
        })
    }

    /// Every domain's pinned CPUs and bound memory: the running definition of running domains,
    /// the persistent one of stopped domains (their pins return when they start).
    pub fn usage(&self) -> Result<Vec<DomainUsage>, VmpinError> {
        self.with(|c| {
            let mut out = Vec::new();
            for d in c
                .list_all_domains(0)
                .map_err(|e| libvirt("virConnectListAllDomains", &self.uri, e))?
            {
                let name = d
                    .get_name()
                    .map_err(|e| libvirt("virDomainGetName", &self.uri, e))?;
                let (active, _) = flags(&d, &name)?;
                let xml = DomainXml::parse(&xml_of(&d, &name, !active)?)?;
                out.push(xml.usage());
            }
            Ok(out)
        })
    }

    /// Every domain's recorded allocations, for the reconciler after a restart. A domain whose
    /// records are unreadable is reported with its problem; the scan goes on.
    pub fn scan(&self) -> Result<Vec<DomainAllocations>, VmpinError> {
        self.with(|c| {
            let mut out = Vec::new();
            for d in c
                .list_all_domains(0)
                .map_err(|e| libvirt("virConnectListAllDomains", &self.uri, e))?
            {
                let name = d
                    .get_name()
                    .map_err(|e| libvirt("virDomainGetName", &self.uri, e))?;
                let uuid = d
                    .get_uuid_string()
                    .map_err(|e| libvirt("virDomainGetUUIDString", &name, e))?;
                let (active, persistent) = flags(&d, &name)?;
                let read =
                    xml_of(&d, &name, persistent).and_then(|x| DomainXml::parse(&x)?.allocations());
                let (allocations, problem) = match read {
                    Ok(a) => (a, None),
                    Err(e) => (Vec::new(), Some(error_text(&e))),
                };
                out.push(DomainAllocations {
                    domain: name,
                    uuid,
                    active,
                    allocations,
                    problem,
                });
            }
            Ok(out)
        })
    }

    /// The allocations recorded in one domain.
    pub fn allocations(&self, domain: &str) -> Result<Vec<AllocationRecord>, VmpinError> {
        DomainXml::parse(&self.domain_xml(domain, true)?)?.allocations()
    }

    /// Adds an allocation to a domain: persistent definition always, the running domain where
    /// libvirt allows.
    pub fn apply(
        &self,
        domain: &str,
        allocation: &str,
        slices: &[Slice],
        plan: &PinPlan,
    ) -> Result<ApplyReport, VmpinError> {
        self.with(|c| {
            let d = lookup(c, domain)?;
            let (active, persistent) = flags(&d, domain)?;
            if !persistent {
                return Err(VmpinError::Transient(domain.to_owned()));
            }
            let mut xml = DomainXml::parse(&xml_of(&d, domain, true)?)?;
            xml.apply(allocation, slices, plan)?;
            Domain::define_xml(c, &xml.to_xml())
                .map_err(|e| libvirt("virDomainDefineXML", domain, e))?;
            // Report what libvirt stored (it adds attributes of its own), and make sure it kept
            // the record release depends on.
            let stored = DomainXml::parse(&xml_of(&d, domain, true)?)?;
            if !stored.allocations()?.iter().any(|a| a.id == allocation) {
                return Err(VmpinError::Metadata(format!(
                    "libvirt did not keep the record of allocation {allocation} in domain {domain}"
                )));
            }
            let mut report = ApplyReport {
                domain: domain.to_owned(),
                allocation: allocation.to_owned(),
                active,
                live: Vec::new(),
                restart_needed: Vec::new(),
                fragment: stored.fragment(),
            };
            if active {
                apply_live(
                    c,
                    &d,
                    &xml,
                    slices,
                    plan,
                    &mut report.live,
                    &mut report.restart_needed,
                )?;
            }
            tracing::info!(domain, allocation, active, "pinning applied");
            Ok(report)
        })
    }

    /// Removes an allocation from a domain, restoring what it replaced.
    pub fn release(&self, domain: &str, allocation: &str) -> Result<ReleaseReport, VmpinError> {
        self.with(|c| {
            let d = lookup(c, domain)?;
            let (active, persistent) = flags(&d, domain)?;
            if !persistent {
                return Err(VmpinError::Transient(domain.to_owned()));
            }
            let mut xml = DomainXml::parse(&xml_of(&d, domain, true)?)?;
            let hostdevs: Vec<(String, String)> = xml
                .allocations()?
                .into_iter()
                .filter(|a| a.id == allocation)
                .flat_map(|a| a.slices)
                .filter_map(|s| {
                    xml.hostdev_xml(&s.device)
                        .map(|x| (s.device.to_string(), x))
                })
                .collect();
            let released = xml.release(allocation)?;
            Domain::define_xml(c, &xml.to_xml())
                .map_err(|e| libvirt("virDomainDefineXML", domain, e))?;
            let mut report = ReleaseReport {
                domain: domain.to_owned(),
                record: released.record.clone(),
                active,
                live: Vec::new(),
                restart_needed: Vec::new(),
            };
            if active {
                for (what, hostdev) in hostdevs {
                    let r = d.detach_device_flags(&hostdev, virt::sys::VIR_DOMAIN_AFFECT_LIVE);
                    record_live(
                        &mut report.live,
                        &mut report.restart_needed,
                        format!("detach {what}"),
                        r.map(|_| ()),
                    );
                }
                if released.pinning_changed {
                    let restored = released.restored.unwrap_or_default();
                    repin_live(
                        c,
                        &d,
                        domain,
                        &restored,
                        xml.vcpus()?,
                        &mut report.live,
                        &mut report.restart_needed,
                    )?;
                }
                if released
                    .record
                    .pinning
                    .as_ref()
                    .is_some_and(|p| !p.guest_cells.is_empty())
                    && released.pinning_changed
                {
                    report
                        .restart_needed
                        .push("guest NUMA cells are removed at the next start".into());
                }
                if !released.record.controllers.is_empty() {
                    report
                        .restart_needed
                        .push("expander buses are removed at the next start".into());
                }
            }
            tracing::info!(domain, allocation, active, "pinning released");
            Ok(report)
        })
    }
}

fn libvirt(call: &'static str, target: &str, source: virt::error::Error) -> VmpinError {
    VmpinError::Libvirt {
        call,
        target: target.to_owned(),
        source,
    }
}

fn error_text(e: &VmpinError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn lookup(c: &Connect, domain: &str) -> Result<Domain, VmpinError> {
    Domain::lookup_by_name(c, domain).map_err(|e| match e.code() {
        ErrorNumber::NoDomain => VmpinError::NoDomain(domain.to_owned()),
        _ => libvirt("virDomainLookupByName", domain, e),
    })
}

fn flags(d: &Domain, domain: &str) -> Result<(bool, bool), VmpinError> {
    let active = d
        .is_active()
        .map_err(|e| libvirt("virDomainIsActive", domain, e))?;
    let persistent = d
        .is_persistent()
        .map_err(|e| libvirt("virDomainIsPersistent", domain, e))?;
    Ok((active, persistent))
}

fn xml_of(d: &Domain, domain: &str, inactive: bool) -> Result<String, VmpinError> {
    let flags = if inactive {
        virt::sys::VIR_DOMAIN_XML_INACTIVE
    } else {
        0
    };
    d.get_xml_desc(flags)
        .map_err(|e| libvirt("virDomainGetXMLDesc", domain, e))
}

fn record_live(
    live: &mut Vec<LiveAction>,
    restart: &mut Vec<String>,
    what: String,
    result: Result<(), virt::error::Error>,
) {
    let error = result.err().map(|e| e.message().to_owned());
    if let Some(reason) = &error {
        tracing::warn!(action = %what, %reason, "live change refused; it waits for a guest restart");
        restart.push(format!("{what} (refused live: {reason})"));
    }
    live.push(LiveAction { what, error });
}

/// The length of libvirt's CPU bitmaps on this host.
fn map_len(c: &Connect) -> Result<usize, VmpinError> {
    let info = c
        .get_node_info()
        .map_err(|e| libvirt("virNodeGetInfo", "the host", e))?;
    let max = info.nodes.max(1) * info.sockets.max(1) * info.cores.max(1) * info.threads.max(1);
    Ok((max.max(info.cpus) as usize).div_ceil(8))
}

fn all_cpus(c: &Connect) -> Result<CpuSet, VmpinError> {
    let info = c
        .get_node_info()
        .map_err(|e| libvirt("virNodeGetInfo", "the host", e))?;
    Ok(CpuSet::from_cpus(0..info.cpus))
}

#[allow(clippy::too_many_arguments)]
fn apply_live(
    c: &Connect,
    d: &Domain,
    xml: &DomainXml,
    slices: &[Slice],
    plan: &PinPlan,
    live: &mut Vec<LiveAction>,
    restart: &mut Vec<String>,
) -> Result<(), VmpinError> {
    for s in slices {
        if let Some(hostdev) = xml.hostdev_xml(&s.device) {
            let r = d.attach_device_flags(&hostdev, virt::sys::VIR_DOMAIN_AFFECT_LIVE);
            record_live(live, restart, format!("attach {}", s.device), r.map(|_| ()));
        }
    }
    if plan.is_unpinned() {
        return Ok(());
    }
    let name = xml.name().unwrap_or_default();
    let pinning = Pinning {
        vcpu_pins: plan.vcpu_pins.clone(),
        emulator_cpus: plan.emulator_cpus.clone(),
        memory: plan.memory.clone(),
        guest_cells: Vec::new(),
    };
    repin_live(c, d, &name, &pinning, xml.vcpus()?, live, restart)?;
    if !plan.guest_cells.is_empty() {
        restart.push("guest NUMA cells take effect at the next start".into());
    }
    if plan.expander_bus {
        restart.push("expander buses take effect at the next start".into());
    }
    Ok(())
}

/// Pins a running domain to `pinning`; vCPUs it does not name float over the whole host.
fn repin_live(
    c: &Connect,
    d: &Domain,
    domain: &str,
    pinning: &Pinning,
    vcpus: u32,
    live: &mut Vec<LiveAction>,
    restart: &mut Vec<String>,
) -> Result<(), VmpinError> {
    let len = map_len(c)?;
    let everywhere = all_cpus(c)?;
    for vcpu in 0..vcpus {
        let (set, what) = match pinning.vcpu_pins.get(vcpu as usize) {
            Some(cpu) => (
                CpuSet::from_cpus([*cpu]),
                format!("pin vCPU {vcpu} to {cpu}"),
            ),
            None => (everywhere.clone(), format!("unpin vCPU {vcpu}")),
        };
        // virDomainPinVcpu changes the running domain only; the test driver refuses the _flags form.
        let r = d.pin_vcpu(vcpu, &cpumap(&set, len));
        record_live(live, restart, what, r.map(|_| ()));
    }
    let (set, what) = if pinning.emulator_cpus.is_empty() {
        (everywhere, "unpin the emulator".to_owned())
    } else {
        (
            pinning.emulator_cpus.clone(),
            format!("pin the emulator to {}", pinning.emulator_cpus),
        )
    };
    let r = d.pin_emulator(&cpumap(&set, len), virt::sys::VIR_DOMAIN_AFFECT_LIVE);
    record_live(live, restart, what, r.map(|_| ()));
    let Some(memory) = &pinning.memory else {
        restart.push("the memory binding is lifted at the next start".into());
        return Ok(());
    };
    let current = d
        .get_numa_parameters(virt::sys::VIR_DOMAIN_AFFECT_LIVE)
        .map_err(|e| libvirt("virDomainGetNumaParameters", domain, e))?;
    if current
        .mode
        .is_some_and(|m| m != memory.mode.libvirt_code())
    {
        restart.push(format!(
            "memory mode {} takes effect at the next start",
            memory.mode.as_str()
        ));
    }
    // libvirt 9.0 changes the nodeset of a running domain that has a <numatune> only in mode
    // restrictive: after a release left the binding in place, binding to the same nodes again
    // would be refused although nothing changes.
    let nodeset = memory.nodeset();
    let live_nodes = current
        .node_set
        .as_deref()
        .and_then(|s| s.parse::<CpuSet>().ok());
    if live_nodes.is_some() && live_nodes == nodeset.parse::<CpuSet>().ok() {
        live.push(LiveAction {
            what: format!("memory already bound to node {nodeset}"),
            error: None,
        });
        return Ok(());
    }
    let params = NUMAParameters {
        node_set: Some(nodeset),
        mode: None,
    };
    let r = d.set_numa_parameters(params, virt::sys::VIR_DOMAIN_AFFECT_LIVE);
    record_live(
        live,
        restart,
        format!("bind memory to node {}", memory.nodeset()),
        r.map(|_| ()),
    );
    Ok(())
}

/// Reads `<host><topology><cells>` from libvirt's capabilities XML.
fn topology_from_capabilities(caps: &str) -> Result<Option<HostTopology>, VmpinError> {
    let doc = crate::xml::Document::parse(caps)?;
    let Some(cells) = doc
        .root
        .child("host")
        .and_then(|h| h.child("topology"))
        .and_then(|t| t.child("cells"))
    else {
        return Ok(None);
    };
    let mut nodes = Vec::new();
    for cell in cells.elements().filter(|e| e.name() == "cell") {
        let id = cell
            .attr("id")
            .and_then(|i| i.parse().ok())
            .ok_or_else(|| VmpinError::Topology("a capabilities cell has no id".into()))?;
        let memory_kib: u64 = cell
            .child("memory")
            .and_then(|m| m.text().parse().ok())
            .unwrap_or(0);
        let cpus = cell
            .child("cpus")
            .map(|c| {
                c.elements()
                    .filter_map(|cpu| cpu.attr("id")?.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .unwrap_or_default();
        nodes.push(HostNode {
            id,
            cpus: CpuSet::from_cpus(cpus),
            memory_mib: memory_kib / 1024,
        });
    }
    if nodes.is_empty() {
        return Ok(None);
    }
    Ok(Some(HostTopology {
        nodes,
        reserved_cpus: CpuSet::default(),
    }))
}
