//! Typed edits of a libvirt domain definition: add an allocation's hostdevs and pinning, record
//! what was added and what it replaced in the agent's metadata namespace, and undo exactly that.
//!
//! Pinning lives in three parts of the domain that one VM has only once: `<cputune>` (vcpupin,
//! emulatorpin), `<numatune>` (memory, memnode) and `<cpu><numa>`. When a second allocation on
//! the same domain re-plans them, each allocation records what it replaced, so the records form a
//! stack per part. Releasing the top allocation restores what it replaced; releasing one below
//! hands what it had replaced to the allocation above it. Either way, once every allocation is
//! released the parts are as before the first one, in any release order.
//!
//! Hostdevs and controllers belong to exactly one allocation and are found again by identity
//! (mdev UUID, PCI address, controller index), not by text: libvirt adds attributes of its own
//! (`managed='no'` on mdev hostdevs, guest addresses) when it stores a definition.

use std::collections::{BTreeMap, BTreeSet};

use ids::{MdevUuid, NumaNodeId, PciAddress};
use numa::CpuSet;
use serde::{Deserialize, Serialize};

use crate::VmpinError;
use crate::plan::{DomainUsage, MemoryBinding, MemoryMode, PinPlan, Slice, SliceDevice};
use crate::xml::{Document, Element};

/// The agent's metadata namespace URI.
pub const NAMESPACE: &str = "https://vgpud.io/xmlns/pinning/1";
/// The prefix the agent writes for [`NAMESPACE`] (readers match on the URI, not the prefix).
pub const PREFIX: &str = "vgpud";

const PINNING: &str = "pinning";

/// One part of the domain the pinning owns while an allocation holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    CpuTune,
    NumaTune,
    GuestNuma,
}

impl Part {
    const ALL: [Part; 3] = [Part::CpuTune, Part::NumaTune, Part::GuestNuma];

    fn key(self) -> &'static str {
        match self {
            Part::CpuTune => "cputune",
            Part::NumaTune => "numatune",
            Part::GuestNuma => "guest-numa",
        }
    }

    fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.key() == key)
    }

    /// The element of `<domain>` holding the part.
    fn container(self) -> &'static str {
        match self {
            Part::CpuTune => "cputune",
            Part::NumaTune => "numatune",
            Part::GuestNuma => "cpu",
        }
    }

    /// The container's children the part owns.
    fn owns(self, name: &str) -> bool {
        match self {
            Part::CpuTune => name == "vcpupin" || name == "emulatorpin",
            Part::NumaTune => name == "memory" || name == "memnode",
            Part::GuestNuma => name == "numa",
        }
    }

    /// Where a new container goes: after the last of these `<domain>` children present
    /// (libvirt's own element order), else before `<devices>`.
    fn after(self) -> &'static [&'static str] {
        match self {
            Part::CpuTune => &["vcpu", "vcpus", "iothreads", "iothreadids"],
            Part::NumaTune => &["cputune", "vcpu", "vcpus", "iothreads", "iothreadids"],
            Part::GuestNuma => &["features", "os", "numatune", "cputune", "vcpu"],
        }
    }
}

/// The pinning an allocation applied, as recorded in the metadata (what `GET /v1/allocations`
/// shows).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pinning {
    /// Host CPU of each vCPU.
    pub vcpu_pins: Vec<u32>,
    /// Emulator CPUs.
    pub emulator_cpus: CpuSet,
    /// Memory binding.
    pub memory: Option<MemoryBinding>,
    /// Guest NUMA cells: (cell id, host node).
    pub guest_cells: Vec<(u32, NumaNodeId)>,
}

/// An allocation as recorded in a domain's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationRecord {
    /// The allocation id the engine gave.
    pub id: String,
    /// Devices it added, with their host nodes.
    pub slices: Vec<Slice>,
    /// Controller indexes it added (expander buses and root ports).
    pub controllers: Vec<u32>,
    /// The pinning it applied; `None` when it pinned nothing.
    pub pinning: Option<Pinning>,
}

/// What [`DomainXml::release`] took out, for the live side of a release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// The record that was removed.
    pub record: AllocationRecord,
    /// The pinning in force after the release, if it changed (the allocation was on top).
    pub restored: Option<Pinning>,
    /// Whether the release changed the pinning at all (false when an allocation above still
    /// holds it).
    pub pinning_changed: bool,
}

/// A parsed domain definition with the edits the agent makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainXml {
    doc: Document,
}

impl DomainXml {
    /// Parses a definition as libvirt returns it.
    pub fn parse(xml: &str) -> Result<Self, VmpinError> {
        let doc = Document::parse(xml)?;
        if doc.root.name() != "domain" {
            return Err(VmpinError::Domain(format!(
                "the root element is <{}>, not <domain>",
                doc.root.name()
            )));
        }
        Ok(Self { doc })
    }

    /// The definition as text.
    pub fn to_xml(&self) -> String {
        self.doc.to_xml()
    }

    /// `<name>`.
    pub fn name(&self) -> Option<String> {
        self.doc.root.child("name").map(Element::text)
    }

    /// `<vcpu>`: the maximum vCPU count.
    pub fn vcpus(&self) -> Result<u32, VmpinError> {
        let text = self
            .doc
            .root
            .child("vcpu")
            .map(Element::text)
            .ok_or_else(|| VmpinError::Domain("the definition has no <vcpu>".into()))?;
        text.parse()
            .map_err(|_| VmpinError::Domain(format!("<vcpu> {text:?} is not a count")))
    }

    /// `<memory>` in KiB.
    pub fn memory_kib(&self) -> Result<u64, VmpinError> {
        let el = self
            .doc
            .root
            .child("memory")
            .ok_or_else(|| VmpinError::Domain("the definition has no <memory>".into()))?;
        kib_of(&el.text(), el.attr("unit").as_deref())
            .ok_or_else(|| VmpinError::Domain(format!("<memory> {:?} is not a size", el.text())))
    }

    /// The allocations recorded in the agent's metadata, in the order they were applied.
    pub fn allocations(&self) -> Result<Vec<AllocationRecord>, VmpinError> {
        let Some(pinning) = self.pinning_element() else {
            return Ok(Vec::new());
        };
        let prefix = pinning.prefix().unwrap_or_default().to_owned();
        pinning
            .elements()
            .filter(|e| e.name() == qname(&prefix, "allocation"))
            .map(|e| read_record(e, &prefix))
            .collect()
    }

    /// CPUs pinned and memory bound per node by this domain (for [`crate::NumaAccounting`]).
    pub fn usage(&self) -> DomainUsage {
        let root = &self.doc.root;
        let mut pinned = BTreeSet::new();
        if let Some(tune) = root.child("cputune") {
            for e in tune.elements().filter(|e| Part::CpuTune.owns(e.name())) {
                if let Some(set) = e.attr("cpuset").and_then(|s| s.parse::<CpuSet>().ok()) {
                    pinned.extend(set.iter());
                }
            }
        }
        DomainUsage {
            domain: self.name().unwrap_or_default(),
            pinned_cpus: CpuSet::from_cpus(pinned),
            memory_mib_by_node: self.bound_memory(),
        }
    }

    fn bound_memory(&self) -> BTreeMap<NumaNodeId, u64> {
        let mut by_node: BTreeMap<NumaNodeId, u64> = BTreeMap::new();
        let root = &self.doc.root;
        let Some(tune) = root.child("numatune") else {
            return by_node;
        };
        let total = self.memory_kib().unwrap_or(0);
        let cells: BTreeMap<u32, u64> = root
            .child("cpu")
            .and_then(|c| c.child("numa"))
            .map(|n| {
                n.elements()
                    .filter_map(|c| {
                        let id = c.attr("id")?.parse().ok()?;
                        Some((id, kib_of(&c.attr("memory")?, c.attr("unit").as_deref())?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut covered = 0u64;
        let mut add = |nodes: Vec<NumaNodeId>, kib: u64| {
            if nodes.is_empty() {
                return;
            }
            let each = kib / nodes.len() as u64;
            for n in nodes {
                *by_node.entry(n).or_default() += each;
            }
        };
        for memnode in tune.elements().filter(|e| e.name() == "memnode") {
            let cell = memnode.attr("cellid").and_then(|c| c.parse::<u32>().ok());
            if let Some(kib) = cell.and_then(|c| cells.get(&c)) {
                add(nodes_of(memnode.attr("nodeset").as_deref()), *kib);
                covered += kib;
            }
        }
        if let Some(memory) = tune.child("memory") {
            add(
                nodes_of(memory.attr("nodeset").as_deref()),
                total.saturating_sub(covered),
            );
        }
        by_node
            .into_iter()
            .map(|(n, kib)| (n, kib.div_ceil(1024)))
            .collect()
    }

    /// The pinning currently in the definition (whoever wrote it).
    pub fn current_pinning(&self) -> Pinning {
        let root = &self.doc.root;
        let mut pinning = Pinning::default();
        if let Some(tune) = root.child("cputune") {
            let mut pins: BTreeMap<u32, u32> = BTreeMap::new();
            for e in tune.elements() {
                let set = e.attr("cpuset").and_then(|s| s.parse::<CpuSet>().ok());
                match (e.name(), set) {
                    ("vcpupin", Some(set)) => {
                        if let (Some(v), Some(c)) = (
                            e.attr("vcpu").and_then(|v| v.parse().ok()),
                            set.iter().next(),
                        ) {
                            pins.insert(v, c);
                        }
                    }
                    ("emulatorpin", Some(set)) => pinning.emulator_cpus = set,
                    _ => {}
                }
            }
            pinning.vcpu_pins = pins.into_values().collect();
        }
        pinning.memory = root
            .child("numatune")
            .and_then(|t| t.child("memory"))
            .and_then(|m| {
                Some(MemoryBinding {
                    mode: MemoryMode::parse(&m.attr("mode").unwrap_or_else(|| "strict".into()))?,
                    nodes: nodes_of(m.attr("nodeset").as_deref()).into_iter().collect(),
                })
            });
        pinning
    }

    /// Adds an allocation: its hostdevs (and expander buses), the plan's pinning, and the record.
    /// Fails without changing anything when the id is already recorded or a device is already
    /// in the domain.
    pub fn apply(&mut self, id: &str, slices: &[Slice], plan: &PinPlan) -> Result<(), VmpinError> {
        if self.allocations()?.iter().any(|a| a.id == id) {
            return Err(VmpinError::AllocationExists {
                id: id.to_owned(),
                domain: self.name().unwrap_or_default(),
            });
        }
        for s in slices {
            if self
                .devices()
                .is_some_and(|d| d.elements().any(|h| hostdev_matches(h, &s.device)))
            {
                return Err(VmpinError::DeviceAlreadyPresent {
                    device: s.device.to_string(),
                    domain: self.name().unwrap_or_default(),
                });
            }
        }
        let prefix = self
            .pinning_element()
            .and_then(|e| e.prefix().map(str::to_owned))
            .unwrap_or_else(|| PREFIX.to_owned());
        let mut record = Element::new(&qname(&prefix, "allocation")).with_attr("id", id);
        for s in slices {
            record.push(slice_record(&prefix, s));
        }
        let controllers = self.add_devices(slices, plan);
        for index in controllers {
            record.push(
                Element::new(&qname(&prefix, "controller")).with_attr("index", &index.to_string()),
            );
        }
        if !plan.is_unpinned() {
            write_pinning_record(&prefix, &mut record, plan);
            for (part, new) in plan_elements(plan) {
                let replaced = self.replace_part(&prefix, part, new);
                record.push(replaced);
            }
        }
        self.pinning_element_or_create().push(record);
        let pinning = self
            .pinning_element_mut()
            .ok_or_else(|| VmpinError::Domain("metadata vanished".into()))?;
        pinning.indent(2);
        Ok(())
    }

    /// Removes an allocation: its devices, its controllers, and its pinning (restoring what it
    /// replaced, or handing that to the allocation above it).
    pub fn release(&mut self, id: &str) -> Result<Released, VmpinError> {
        let domain = self.name().unwrap_or_default();
        let records = self.allocations()?;
        let position = records.iter().position(|a| a.id == id).ok_or_else(|| {
            VmpinError::AllocationNotFound {
                id: id.to_owned(),
                domain: domain.clone(),
            }
        })?;
        let record = records[position].clone();
        let pinning = self
            .pinning_element_mut()
            .ok_or_else(|| VmpinError::Domain("metadata vanished".into()))?;
        let prefix = pinning.prefix().unwrap_or_default().to_owned();
        let alloc_name = qname(&prefix, "allocation");
        let replaced_name = qname(&prefix, "replaced");
        let allocs: Vec<Element> = pinning
            .elements()
            .filter(|e| e.name() == alloc_name)
            .cloned()
            .collect();
        let mine = allocs[position].clone();
        let mut pinning_changed = false;
        for replaced in mine.elements().filter(|e| e.name() == replaced_name) {
            let Some(part) = replaced.attr("part").as_deref().and_then(Part::from_key) else {
                continue;
            };
            let above = allocs[position + 1..].iter().position(|a| {
                a.elements().any(|r| {
                    r.name() == replaced_name && r.attr("part").as_deref() == Some(part.key())
                })
            });
            match above {
                Some(offset) => {
                    // Hand what this allocation replaced to the next one up that replaced it.
                    let target = position + 1 + offset;
                    let pinning = self
                        .pinning_element_mut()
                        .ok_or_else(|| VmpinError::Domain("metadata vanished".into()))?;
                    let alloc = pinning
                        .find_mut({
                            let want = allocs[target].attr("id");
                            let name = alloc_name.clone();
                            move |e| e.name() == name && e.attr("id") == want
                        })
                        .ok_or_else(|| VmpinError::Domain("metadata vanished".into()))?;
                    let key = part.key();
                    let name = replaced_name.clone();
                    alloc.remove_where(move |e| {
                        e.name() == name && e.attr("part").as_deref() == Some(key)
                    });
                    alloc.push(replaced.clone());
                }
                None => {
                    self.restore_part(part, replaced);
                    pinning_changed = true;
                }
            }
        }
        self.remove_devices(&record);
        let pinning = self
            .pinning_element_mut()
            .ok_or_else(|| VmpinError::Domain("metadata vanished".into()))?;
        let want = Some(id.to_owned());
        pinning.remove_where(|e| e.name() == alloc_name && e.attr("id") == want);
        pinning.indent(2);
        self.drop_empty_pinning();
        let restored = pinning_changed.then(|| self.current_pinning());
        Ok(Released {
            record,
            restored,
            pinning_changed,
        })
    }

    /// The parts of the definition the agent manages, as an XML fragment: `<cputune>`,
    /// `<numatune>`, `<cpu>` and the hostdevs and controllers recorded in the metadata.
    pub fn fragment(&self) -> String {
        let root = &self.doc.root;
        let mut out = String::new();
        for name in ["cputune", "numatune", "cpu"] {
            if let Some(e) = root.child(name) {
                out.push_str("  ");
                out.push_str(&e.to_xml());
                out.push('\n');
            }
        }
        let records = self.allocations().unwrap_or_default();
        if let Some(devices) = self.devices() {
            for e in devices.elements() {
                let ours = records.iter().any(|r| {
                    r.slices.iter().any(|s| hostdev_matches(e, &s.device))
                        || (e.name() == "controller"
                            && e.attr("index")
                                .and_then(|i| i.parse().ok())
                                .is_some_and(|i: u32| r.controllers.contains(&i)))
                });
                if ours {
                    out.push_str("    ");
                    out.push_str(&e.to_xml());
                    out.push('\n');
                }
            }
        }
        out
    }

    /// The hostdev element for `device`, for hot-(un)plug: as the definition has it, without its
    /// guest `<address>`. That address is where the device sits from the next start; it may be
    /// behind a controller the running guest does not have yet (an expander bus added with it),
    /// so libvirt picks a free hot-pluggable slot now, and finds the device by its source when
    /// detaching.
    pub fn hostdev_xml(&self, device: &SliceDevice) -> Option<String> {
        self.devices()?
            .elements()
            .find(|e| hostdev_matches(e, device))
            .map(|e| {
                let mut e = e.clone();
                e.remove_where(|c| c.name() == "address");
                e.indent(0);
                e.to_xml()
            })
    }

    // ----- devices -----

    fn devices(&self) -> Option<&Element> {
        self.doc.root.child("devices")
    }

    fn devices_mut(&mut self) -> &mut Element {
        self.doc.root.child_or_insert("devices", usize::MAX, 0)
    }

    /// Adds hostdevs; with expander buses, one `pcie-expander-bus` per node and one root port per
    /// device. Returns the controller indexes added.
    ///
    /// An expander's `<node>` is a *guest* NUMA cell (libvirt refuses one missing from
    /// `<cpu><numa>`): the cell mirroring the slice's host node, and none when the plan gives the
    /// guest no cells (one node: there is no locality to show).
    fn add_devices(&mut self, slices: &[Slice], plan: &PinPlan) -> Vec<u32> {
        let mut added = Vec::new();
        let mut next_index = self
            .devices()
            .map(|d| {
                d.elements()
                    .filter(|e| {
                        e.name() == "controller" && e.attr("type").as_deref() == Some("pci")
                    })
                    .filter_map(|e| e.attr("index")?.parse::<u32>().ok())
                    .max()
                    .map_or(1, |m| m + 1)
            })
            .unwrap_or(1);
        let mut bus_of_node: BTreeMap<NumaNodeId, (u32, u32)> = BTreeMap::new();
        let devices = self.devices_mut();
        for s in slices {
            let mut hostdev = hostdev_element(&s.device);
            if plan.expander_bus {
                let (bus, slot) = bus_of_node.entry(s.node).or_insert_with(|| {
                    let mut pxb = Element::new("controller")
                        .with_attr("type", "pci")
                        .with_attr("index", &next_index.to_string())
                        .with_attr("model", "pcie-expander-bus");
                    if let Some(cell) = plan.guest_cells.iter().find(|c| c.host_node == s.node) {
                        pxb.push(
                            Element::new("target")
                                .with_child(Element::new("node").with_text(&cell.id.to_string())),
                        );
                    }
                    devices.append_indented(pxb, 1);
                    added.push(next_index);
                    next_index += 1;
                    (next_index - 1, 0)
                });
                let port = Element::new("controller")
                    .with_attr("type", "pci")
                    .with_attr("index", &next_index.to_string())
                    .with_attr("model", "pcie-root-port")
                    .with_child(guest_address(*bus, *slot));
                *slot += 1;
                devices.append_indented(port, 1);
                added.push(next_index);
                hostdev.push(guest_address(next_index, 0));
                next_index += 1;
            }
            devices.append_indented(hostdev, 1);
        }
        added
    }

    fn remove_devices(&mut self, record: &AllocationRecord) {
        let Some(devices) = self.doc.root.child_mut("devices") else {
            return;
        };
        let slices = record.slices.clone();
        let controllers = record.controllers.clone();
        devices.remove_where(move |e| {
            slices.iter().any(|s| hostdev_matches(e, &s.device))
                || (e.name() == "controller"
                    && e.attr("type").as_deref() == Some("pci")
                    && e.attr("index")
                        .and_then(|i| i.parse::<u32>().ok())
                        .is_some_and(|i| controllers.contains(&i)))
        });
    }

    // ----- pinning parts -----

    /// Puts `new` in place of the part's current elements; returns the `replaced` record.
    fn replace_part(&mut self, prefix: &str, part: Part, new: Vec<Element>) -> Element {
        let created = self.doc.root.child(part.container()).is_none();
        if created {
            let at = self.container_position(part);
            self.doc
                .root
                .insert_indented(at, Element::new(part.container()), 0);
        }
        let mut replaced = Element::new(&qname(prefix, "replaced"))
            .with_attr("part", part.key())
            .with_attr("container", if created { "created" } else { "existing" });
        if let Some(container) = self.doc.root.child_mut(part.container()) {
            let (old, first) = container.remove_where(|e| part.owns(e.name()));
            for mut e in old {
                e.indent(0);
                replaced.push(e);
            }
            let mut at = first.unwrap_or(usize::MAX);
            for e in new {
                container.insert_indented(at, e, 1);
                at = at.saturating_add(1);
            }
        }
        replaced
    }

    /// Takes the part's current elements out and puts back what `replaced` recorded.
    fn restore_part(&mut self, part: Part, replaced: &Element) {
        let created = replaced.attr("container").as_deref() == Some("created");
        let originals: Vec<Element> = replaced.elements().cloned().collect();
        if !originals.is_empty() && self.doc.root.child(part.container()).is_none() {
            let at = self.container_position(part);
            self.doc
                .root
                .insert_indented(at, Element::new(part.container()), 0);
        }
        if let Some(container) = self.doc.root.child_mut(part.container()) {
            let (_, first) = container.remove_where(|e| part.owns(e.name()));
            let mut at = first.unwrap_or(usize::MAX);
            for e in originals {
                container.insert_indented(at, e, 1);
                at = at.saturating_add(1);
            }
            let empty = !container.has_elements() && container.attr_names().next().is_none();
            if created && empty {
                let name = part.container();
                self.doc.root.remove_where(|e| e.name() == name);
            }
        }
    }

    fn container_position(&self, part: Part) -> usize {
        let names: Vec<&str> = self.doc.root.elements().map(Element::name).collect();
        if let Some(i) = names.iter().rposition(|n| part.after().contains(n)) {
            return i + 1;
        }
        names
            .iter()
            .position(|n| *n == "devices")
            .unwrap_or(names.len())
    }

    // ----- metadata -----

    fn is_our_pinning(e: &Element) -> bool {
        e.local_name() == PINNING
            && e.prefix().and_then(|p| e.declared_namespace(p)).as_deref() == Some(NAMESPACE)
    }

    fn pinning_element(&self) -> Option<&Element> {
        self.doc
            .root
            .child("metadata")?
            .elements()
            .find(|e| Self::is_our_pinning(e))
    }

    fn pinning_element_mut(&mut self) -> Option<&mut Element> {
        self.doc
            .root
            .child_mut("metadata")?
            .find_mut(Self::is_our_pinning)
    }

    fn pinning_element_or_create(&mut self) -> &mut Element {
        let created_meta = self.doc.root.child("metadata").is_none();
        let at = self
            .doc
            .root
            .elements()
            .position(|e| {
                !matches!(
                    e.name(),
                    "name" | "uuid" | "genid" | "title" | "description"
                )
            })
            .unwrap_or(usize::MAX);
        let meta = self.doc.root.child_or_insert("metadata", at, 0);
        if !meta.elements().any(Self::is_our_pinning) {
            let mut pinning = Element::new(&qname(PREFIX, PINNING))
                .with_attr(&format!("xmlns:{PREFIX}"), NAMESPACE);
            if created_meta {
                pinning.set_attr("metadata", "created");
            }
            meta.append_indented(pinning, 1);
        }
        let name = qname(PREFIX, PINNING);
        // An element of ours under another prefix is found by URI; a new one was written with PREFIX.
        let existing_prefix = meta
            .elements()
            .find(|e| Self::is_our_pinning(e))
            .map(|e| e.name().to_owned())
            .unwrap_or(name);
        meta.child_or_insert(&existing_prefix, usize::MAX, 1)
    }

    fn drop_empty_pinning(&mut self) {
        let Some(pinning) = self.pinning_element() else {
            return;
        };
        if pinning.has_elements() {
            return;
        }
        let created_meta = pinning.attr("metadata").as_deref() == Some("created");
        if let Some(meta) = self.doc.root.child_mut("metadata") {
            meta.remove_where(Self::is_our_pinning);
            if created_meta && !meta.has_elements() {
                self.doc.root.remove_where(|e| e.name() == "metadata");
            }
        }
    }
}

fn qname(prefix: &str, local: &str) -> String {
    if prefix.is_empty() {
        local.to_owned()
    } else {
        format!("{prefix}:{local}")
    }
}

fn nodes_of(nodeset: Option<&str>) -> Vec<NumaNodeId> {
    nodeset
        .and_then(|s| s.parse::<CpuSet>().ok())
        .map(|set| {
            set.iter()
                .filter_map(|n| u16::try_from(n).ok().map(NumaNodeId))
                .collect()
        })
        .unwrap_or_default()
}

/// A libvirt size with its unit, in KiB (libvirt's default unit).
fn kib_of(value: &str, unit: Option<&str>) -> Option<u64> {
    let n: u64 = value.trim().parse().ok()?;
    let bytes: u128 = match unit.unwrap_or("KiB") {
        "b" | "bytes" => 1,
        "KB" => 1000,
        "k" | "K" | "KiB" => 1 << 10,
        "MB" => 1_000_000,
        "M" | "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "G" | "GiB" => 1 << 30,
        "TB" => 1_000_000_000_000,
        "T" | "TiB" => 1 << 40,
        _ => return None,
    };
    u64::try_from(u128::from(n) * bytes / 1024).ok()
}

fn guest_address(bus: u32, slot: u32) -> Element {
    Element::new("address")
        .with_attr("type", "pci")
        .with_attr("domain", "0x0000")
        .with_attr("bus", &format!("0x{bus:02x}"))
        .with_attr("slot", &format!("0x{slot:02x}"))
        .with_attr("function", "0x0")
}

fn hostdev_element(device: &SliceDevice) -> Element {
    match device {
        SliceDevice::Mdev { uuid } => Element::new("hostdev")
            .with_attr("mode", "subsystem")
            .with_attr("type", "mdev")
            .with_attr("model", "vfio-pci")
            .with_child(
                Element::new("source")
                    .with_child(Element::new("address").with_attr("uuid", &uuid.to_string())),
            ),
        SliceDevice::Pci { address, managed } => Element::new("hostdev")
            .with_attr("mode", "subsystem")
            .with_attr("type", "pci")
            .with_attr("managed", if *managed { "yes" } else { "no" })
            .with_child(Element::new("source").with_child(pci_source_address(address))),
    }
}

fn pci_source_address(a: &PciAddress) -> Element {
    Element::new("address")
        .with_attr("domain", &format!("0x{:04x}", a.domain()))
        .with_attr("bus", &format!("0x{:02x}", a.bus()))
        .with_attr("slot", &format!("0x{:02x}", a.device()))
        .with_attr("function", &format!("0x{:x}", a.function()))
}

fn parse_hex(s: &str) -> Option<u32> {
    let t = s.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

/// Whether a `<devices>` child is the hostdev for `device`, however libvirt wrote it.
fn hostdev_matches(e: &Element, device: &SliceDevice) -> bool {
    if e.name() != "hostdev" {
        return false;
    }
    let Some(addr) = e.child("source").and_then(|s| s.child("address")) else {
        return false;
    };
    match device {
        SliceDevice::Mdev { uuid } => {
            e.attr("type").as_deref() == Some("mdev")
                && addr
                    .attr("uuid")
                    .and_then(|u| u.parse::<MdevUuid>().ok())
                    .as_ref()
                    == Some(uuid)
        }
        SliceDevice::Pci { address, .. } => {
            let part = |k: &str| addr.attr(k).as_deref().and_then(parse_hex);
            e.attr("type").as_deref() == Some("pci")
                && part("domain").unwrap_or(0) == address.domain()
                && part("bus") == Some(u32::from(address.bus()))
                && part("slot") == Some(u32::from(address.device()))
                && part("function") == Some(u32::from(address.function()))
        }
    }
}

fn slice_record(prefix: &str, s: &Slice) -> Element {
    let e = Element::new(&qname(prefix, "hostdev"));
    let e = match &s.device {
        SliceDevice::Mdev { uuid } => e
            .with_attr("type", "mdev")
            .with_attr("uuid", &uuid.to_string()),
        SliceDevice::Pci { address, managed } => e
            .with_attr("type", "pci")
            .with_attr("address", &address.to_string())
            .with_attr("managed", if *managed { "yes" } else { "no" }),
    };
    e.with_attr("node", &s.node.to_string())
}

fn write_pinning_record(prefix: &str, record: &mut Element, plan: &PinPlan) {
    for (vcpu, cpu) in plan.vcpu_pins.iter().enumerate() {
        record.push(
            Element::new(&qname(prefix, "vcpupin"))
                .with_attr("vcpu", &vcpu.to_string())
                .with_attr("cpuset", &cpu.to_string()),
        );
    }
    if !plan.emulator_cpus.is_empty() {
        record.push(
            Element::new(&qname(prefix, "emulatorpin"))
                .with_attr("cpuset", &plan.emulator_cpus.to_string()),
        );
    }
    if let Some(m) = &plan.memory {
        record.push(
            Element::new(&qname(prefix, "memory"))
                .with_attr("mode", m.mode.as_str())
                .with_attr("nodeset", &m.nodeset()),
        );
    }
    for c in &plan.guest_cells {
        record.push(
            Element::new(&qname(prefix, "cell"))
                .with_attr("id", &c.id.to_string())
                .with_attr("node", &c.host_node.to_string()),
        );
    }
}

/// The domain elements a plan writes, per part.
fn plan_elements(plan: &PinPlan) -> Vec<(Part, Vec<Element>)> {
    let mut parts = Vec::new();
    let mut tune: Vec<Element> = plan
        .vcpu_pins
        .iter()
        .enumerate()
        .map(|(v, c)| {
            Element::new("vcpupin")
                .with_attr("vcpu", &v.to_string())
                .with_attr("cpuset", &c.to_string())
        })
        .collect();
    if !plan.emulator_cpus.is_empty() {
        tune.push(Element::new("emulatorpin").with_attr("cpuset", &plan.emulator_cpus.to_string()));
    }
    parts.push((Part::CpuTune, tune));
    if let Some(m) = &plan.memory {
        let mut numatune = vec![
            Element::new("memory")
                .with_attr("mode", m.mode.as_str())
                .with_attr("nodeset", &m.nodeset()),
        ];
        for c in &plan.guest_cells {
            numatune.push(
                Element::new("memnode")
                    .with_attr("cellid", &c.id.to_string())
                    .with_attr("mode", m.mode.as_str())
                    .with_attr("nodeset", &c.host_node.to_string()),
            );
        }
        parts.push((Part::NumaTune, numatune));
    }
    if !plan.guest_cells.is_empty() {
        let mut numa = Element::new("numa");
        for c in &plan.guest_cells {
            numa.push(
                Element::new("cell")
                    .with_attr("id", &c.id.to_string())
                    .with_attr("cpus", &c.vcpus.to_string())
                    .with_attr("memory", &c.memory_kib.to_string())
                    .with_attr("unit", "KiB"),
            );
        }
        parts.push((Part::GuestNuma, vec![numa]));
    }
    parts
}

fn read_record(e: &Element, prefix: &str) -> Result<AllocationRecord, VmpinError> {
    let id = e
        .attr("id")
        .ok_or_else(|| VmpinError::Metadata("an allocation has no id".into()))?;
    let bad = |what: String| VmpinError::Metadata(format!("allocation {id}: {what}"));
    let mut record = AllocationRecord {
        id: id.clone(),
        slices: Vec::new(),
        controllers: Vec::new(),
        pinning: None,
    };
    let mut pinning = Pinning::default();
    let mut pinned = false;
    for child in e.elements() {
        let local = match child
            .name()
            .strip_prefix(prefix)
            .and_then(|r| r.strip_prefix(':'))
        {
            Some(l) if !prefix.is_empty() => l,
            _ if prefix.is_empty() => child.name(),
            _ => continue,
        };
        let attr = |k: &str| {
            child
                .attr(k)
                .ok_or_else(|| bad(format!("<{local}> has no {k}")))
        };
        match local {
            "hostdev" => {
                let node = attr("node")?.parse().map_err(|e| bad(format!("{e}")))?;
                let device = match attr("type")?.as_str() {
                    "mdev" => SliceDevice::Mdev {
                        uuid: attr("uuid")?.parse().map_err(|e| bad(format!("{e}")))?,
                    },
                    "pci" => SliceDevice::Pci {
                        address: attr("address")?.parse().map_err(|e| bad(format!("{e}")))?,
                        managed: attr("managed")? == "yes",
                    },
                    other => return Err(bad(format!("hostdev type {other:?} is unknown"))),
                };
                record.slices.push(Slice { device, node });
            }
            "controller" => record.controllers.push(
                attr("index")?
                    .parse()
                    .map_err(|_| bad("controller index is not a number".into()))?,
            ),
            "vcpupin" => {
                pinned = true;
                pinning.vcpu_pins.push(
                    attr("cpuset")?
                        .parse()
                        .map_err(|_| bad("vcpupin cpuset is not a CPU".into()))?,
                );
            }
            "emulatorpin" => {
                pinning.emulator_cpus = attr("cpuset")?.parse().map_err(|e| bad(format!("{e}")))?;
            }
            "memory" => {
                pinned = true;
                let mode = MemoryMode::parse(&attr("mode")?)
                    .ok_or_else(|| bad("memory mode is unknown".into()))?;
                pinning.memory = Some(MemoryBinding {
                    mode,
                    nodes: nodes_of(Some(&attr("nodeset")?)).into_iter().collect(),
                });
            }
            "cell" => {
                let id = attr("id")?
                    .parse()
                    .map_err(|_| bad("cell id is not a number".into()))?;
                let node = attr("node")?.parse().map_err(|e| bad(format!("{e}")))?;
                pinning.guest_cells.push((id, node));
            }
            _ => {}
        }
    }
    if pinned {
        record.pinning = Some(pinning);
    }
    Ok(record)
}
