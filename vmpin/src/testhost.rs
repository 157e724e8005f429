//! libvirt test-driver host files generated from NUMA data, so that in simulation mode libvirt
//! sees the host the scheduler saw, and the demo VM to pin.
//!
//! What libvirt 9.0's test driver takes from a `test:///path` file (checked in its source and by
//! the tests here): `<node><cpu>` with `nodes`, `sockets`, `cores`, `threads`, `active`, `mhz`,
//! `model`; `<memory>` in KiB; `<domain>`, `<device>` (node devices, PCI ones with `<numa
//! node>`), networks, pools. It does *not* take a per-cell topology: a file-based connection
//! reports no NUMA cells in its capabilities. So the file gets the node count, the CPU count and
//! numbering range, and the memory in libvirt's own elements, and the exact cells (CPU lists and
//! memory per node, reserved CPUs) in the agent's namespace, which libvirt ignores and
//! [`read_topology`] reads back. GPUs become PCI node devices carrying their NUMA node.

use std::path::Path;

use ids::{NumaNodeId, PciAddress};
use numa::CpuSet;

use crate::VmpinError;
use crate::domain::{NAMESPACE, PREFIX};
use crate::plan::{HostNode, HostTopology};
use crate::xml::{Document, Element};

/// The demo VM's name.
pub const DEMO_VM: &str = "vgpud-demo-vm";
/// The demo VM's vCPUs.
pub const DEMO_VM_VCPUS: u32 = 4;
/// The demo VM's memory, KiB (8 GiB).
pub const DEMO_VM_MEMORY_KIB: u64 = 8 * 1024 * 1024;

/// libvirt's `VIR_DOMAIN_SHUTOFF`, for the test driver's `<test:runstate>`.
const SHUTOFF: &str = "5";
const TEST_NS: &str = "http://libvirt.org/schemas/domain/test/1.0";

/// A GPU (or other PCI function) to show as a node device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestGpu {
    /// PCI address.
    pub address: PciAddress,
    /// NUMA node.
    pub node: NumaNodeId,
    /// PCI vendor id.
    pub vendor_id: u16,
    /// PCI device id.
    pub device_id: u16,
    /// Product name.
    pub product: String,
}

fn q(local: &str) -> String {
    format!("{PREFIX}:{local}")
}

fn text(name: &str, value: &str) -> Element {
    Element::new(name).with_text(value)
}

/// The demo VM's definition: 4 vCPUs, 8 GiB, a q35 machine with ACPI (libvirt 9 with QEMU 10
/// needs `<acpi/>`), nothing pinned.
pub fn demo_vm_xml() -> String {
    let mut doc = demo_vm_element();
    doc.indent(0);
    doc.to_xml() + "\n"
}

fn demo_vm_element() -> Element {
    Element::new("domain")
        .with_attr("type", "test")
        .with_child(text("name", DEMO_VM))
        .with_child(text("memory", &DEMO_VM_MEMORY_KIB.to_string()).with_attr("unit", "KiB"))
        .with_child(text("vcpu", &DEMO_VM_VCPUS.to_string()))
        .with_child(
            Element::new("os").with_child(
                text("type", "hvm")
                    .with_attr("arch", "x86_64")
                    .with_attr("machine", "q35"),
            ),
        )
        .with_child(Element::new("features").with_child(Element::new("acpi")))
        .with_child(
            Element::new("devices").with_child(
                Element::new("controller")
                    .with_attr("type", "pci")
                    .with_attr("index", "0")
                    .with_attr("model", "pcie-root"),
            ),
        )
}

/// The test-driver host description for `topology`, with `gpus` as PCI node devices and,
/// when `demo_vm`, the demo VM defined and shut off.
pub fn host_xml(
    topology: &HostTopology,
    gpus: &[TestGpu],
    demo_vm: bool,
) -> Result<String, VmpinError> {
    if topology.nodes.is_empty() {
        return Err(VmpinError::Topology("no NUMA nodes".into()));
    }
    let count = topology.nodes.len() as u32;
    let cpus: Vec<u32> = topology.nodes.iter().flat_map(|n| n.cpus.iter()).collect();
    let highest = cpus.iter().max().copied().unwrap_or(0);
    // libvirt sizes CPU bitmaps by nodes*sockets*cores*threads and counts `active` CPUs, so
    // sparse numbering (0-63,128-191) stays pinnable while the CPU count stays right.
    let cores = (highest + 1).div_ceil(count);
    let memory_kib: u64 = topology.nodes.iter().map(|n| n.memory_mib * 1024).sum();
    let mut node = Element::new("node")
        .with_child(
            Element::new("cpu")
                .with_child(text("mhz", "2000"))
                .with_child(text("model", "x86_64"))
                .with_child(text("nodes", &count.to_string()))
                .with_child(text("sockets", "1"))
                .with_child(text("cores", &cores.to_string()))
                .with_child(text("threads", "1"))
                .with_child(text("active", &cpus.len().to_string())),
        )
        .with_child(text("memory", &memory_kib.to_string()));
    let mut topo = Element::new(&q("topology")).with_attr(&format!("xmlns:{PREFIX}"), NAMESPACE);
    for n in &topology.nodes {
        topo.push(
            Element::new(&q("node"))
                .with_attr("id", &n.id.to_string())
                .with_attr("cpus", &n.cpus.to_string())
                .with_attr("memory-mib", &n.memory_mib.to_string()),
        );
    }
    topo.push(Element::new(&q("reserved")).with_attr("cpus", &topology.reserved_cpus.to_string()));
    node.push(topo);
    if demo_vm {
        let mut vm = demo_vm_element().with_attr("xmlns:test", TEST_NS);
        vm.push(text("test:runstate", SHUTOFF));
        node.push(vm);
    }
    for gpu in gpus {
        node.push(gpu_device(gpu));
    }
    node.indent(0);
    Ok(node.to_xml() + "\n")
}

fn gpu_device(gpu: &TestGpu) -> Element {
    let a = gpu.address;
    let name = format!(
        "pci_{:04x}_{:02x}_{:02x}_{:x}",
        a.domain(),
        a.bus(),
        a.device(),
        a.function()
    );
    Element::new("device")
        .with_child(text("name", &name))
        .with_child(text("parent", "computer"))
        .with_child(
            Element::new("capability")
                .with_attr("type", "pci")
                .with_child(text("class", "0x030200"))
                .with_child(text("domain", &a.domain().to_string()))
                .with_child(text("bus", &a.bus().to_string()))
                .with_child(text("slot", &a.device().to_string()))
                .with_child(text("function", &a.function().to_string()))
                .with_child(
                    text("product", &gpu.product)
                        .with_attr("id", &format!("0x{:04x}", gpu.device_id)),
                )
                .with_child(
                    Element::new("vendor").with_attr("id", &format!("0x{:04x}", gpu.vendor_id)),
                )
                .with_child(Element::new("numa").with_attr("node", &gpu.node.to_string())),
        )
}

/// Writes the host description to `path` (absolute) and returns its `test:///` URI.
pub fn write_host_file(
    path: &Path,
    topology: &HostTopology,
    gpus: &[TestGpu],
    demo_vm: bool,
) -> Result<String, VmpinError> {
    if !path.is_absolute() {
        return Err(VmpinError::Topology(format!(
            "{} is not an absolute path",
            path.display()
        )));
    }
    let xml = host_xml(topology, gpus, demo_vm)?;
    std::fs::write(path, xml).map_err(|source| VmpinError::Io {
        path: path.to_owned(),
        source,
    })?;
    Ok(format!("test://{}", path.display()))
}

/// Reads the exact topology back from a host file this module wrote.
pub fn read_topology(path: &Path) -> Result<HostTopology, VmpinError> {
    let text = std::fs::read_to_string(path).map_err(|source| VmpinError::Io {
        path: path.to_owned(),
        source,
    })?;
    let doc = Document::parse(&text)?;
    let topo = doc
        .root
        .elements()
        .find(|e| {
            e.local_name() == "topology"
                && e.prefix().and_then(|p| e.declared_namespace(p)).as_deref() == Some(NAMESPACE)
        })
        .ok_or_else(|| VmpinError::Topology(format!("{} has no vgpud topology", path.display())))?;
    let bad = |what: &str| VmpinError::Topology(format!("{}: {what}", path.display()));
    let mut out = HostTopology::default();
    for e in topo.elements() {
        match e.local_name() {
            "node" => out.nodes.push(HostNode {
                id: e
                    .attr("id")
                    .and_then(|i| i.parse().ok())
                    .ok_or_else(|| bad("a node has no id"))?,
                cpus: e
                    .attr("cpus")
                    .unwrap_or_default()
                    .parse::<CpuSet>()
                    .map_err(|_| bad("a CPU list is malformed"))?,
                memory_mib: e
                    .attr("memory-mib")
                    .and_then(|m| m.parse().ok())
                    .ok_or_else(|| bad("a node has no memory"))?,
            }),
            "reserved" => {
                out.reserved_cpus = e
                    .attr("cpus")
                    .unwrap_or_default()
                    .parse()
                    .map_err(|_| bad("the reserved CPU list is malformed"))?;
            }
            _ => {}
        }
    }
    Ok(out)
}
