//! Domain XML edits without libvirt: round trips, golden files, release in any order.
//!
//! Golden files live in `tests/golden/`; `VMPIN_UPDATE_GOLDEN=1 cargo test -p vmpin` rewrites
//! them from the current output (review the diff before committing).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::{mdev, vf};
use ids::NumaNodeId;
use numa::CpuSet;
use vmpin::{
    DomainXml, HostNode, HostTopology, NumaAccounting, PinPlan, PinRequest, PlanOptions, Policy,
    Slice, SliceDevice, VmpinError,
};

const OPERATOR_VM: &str = include_str!("data/operator-vm.xml");

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("VMPIN_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (VMPIN_UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(
        actual,
        expected,
        "{} differs (VMPIN_UPDATE_GOLDEN=1 rewrites it)",
        path.display()
    );
}

fn topology() -> HostTopology {
    HostTopology {
        nodes: vec![
            HostNode {
                id: NumaNodeId(0),
                cpus: "0-15".parse().unwrap(),
                memory_mib: 65536,
            },
            HostNode {
                id: NumaNodeId(1),
                cpus: "16-31".parse().unwrap(),
                memory_mib: 65536,
            },
        ],
        reserved_cpus: "0-1,16-17".parse().unwrap(),
    }
}

fn plan(slices: &[Slice], options: PlanOptions) -> PinPlan {
    let req = PinRequest {
        slices: slices.to_vec(),
        vcpus: 4,
        memory_kib: 8 * 1024 * 1024,
        policy: Policy::Required,
        options,
    };
    NumaAccounting::new(&topology(), &[]).plan(&req).unwrap()
}

const M1: &str = "7f0e1f7a-1111-4b1e-9a4c-000000000001";
const M2: &str = "7f0e1f7a-2222-4b1e-9a4c-000000000002";

#[test]
fn parse_and_serialise_is_the_identity() {
    let xml = DomainXml::parse(OPERATOR_VM).unwrap();
    assert_eq!(xml.to_xml(), OPERATOR_VM);
    assert_eq!(xml.name().as_deref(), Some("operator-vm"));
    assert_eq!(
        (xml.vcpus().unwrap(), xml.memory_kib().unwrap()),
        (4, 8 * 1024 * 1024)
    );
    assert!(xml.allocations().unwrap().is_empty());
}

#[test]
fn one_node_allocation_matches_golden_and_releases_exactly() {
    let slices = [mdev(M1, 1), vf("0000:41:00.5", 1)];
    let mut xml = DomainXml::parse(OPERATOR_VM).unwrap();
    xml.apply("alloc-1", &slices, &plan(&slices, PlanOptions::default()))
        .unwrap();
    golden("operator-vm.alloc-1.xml", &xml.to_xml());
    golden("operator-vm.alloc-1.fragment.xml", &xml.fragment());
    let records = xml.allocations().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].slices, slices);
    let pinning = records[0].pinning.clone().unwrap();
    assert_eq!(pinning.vcpu_pins, vec![18, 19, 20, 21]);
    assert_eq!(pinning.emulator_cpus.to_string(), "18-21");
    assert_eq!(xml.current_pinning().vcpu_pins, vec![18, 19, 20, 21]);
    let usage = xml.usage();
    assert_eq!(usage.pinned_cpus.to_string(), "18-21");
    assert_eq!(usage.memory_mib_by_node.get(&NumaNodeId(1)), Some(&8192));
    // Reparsing what we wrote reads the same record.
    assert_eq!(
        DomainXml::parse(&xml.to_xml())
            .unwrap()
            .allocations()
            .unwrap(),
        records
    );

    let released = xml.release("alloc-1").unwrap();
    assert!(released.pinning_changed);
    assert_eq!(released.record.id, "alloc-1");
    assert_eq!(xml.to_xml(), OPERATOR_VM);
}

#[test]
fn two_node_allocation_with_guest_cells_and_expander_buses() {
    let slices = [mdev(M1, 0), mdev(M2, 1)];
    let options = PlanOptions {
        expander_bus: true,
        ..PlanOptions::default()
    };
    let mut xml = DomainXml::parse(OPERATOR_VM).unwrap();
    xml.apply("alloc-2n", &slices, &plan(&slices, options))
        .unwrap();
    golden("operator-vm.two-nodes.xml", &xml.to_xml());
    let text = xml.to_xml();
    assert!(
        text.contains("<cell id='0' cpus='0-1' memory='4194304' unit='KiB'/>"),
        "{text}"
    );
    assert!(
        text.contains("<memnode cellid='1' mode='strict' nodeset='1'/>"),
        "{text}"
    );
    assert!(text.contains("model='pcie-expander-bus'"), "{text}");
    // The operator's <cpu mode='host-passthrough'> keeps its attributes and gains <numa>.
    assert!(
        text.contains("<cpu mode='host-passthrough' check='none' migratable='on'>"),
        "{text}"
    );
    assert_eq!(xml.allocations().unwrap()[0].controllers, vec![2, 3, 4, 5]);
    xml.release("alloc-2n").unwrap();
    assert_eq!(xml.to_xml(), OPERATOR_VM);
}

#[test]
fn two_allocations_release_in_either_order() {
    let a = [mdev(M1, 1)];
    let b = [vf("0000:41:00.5", 1)];
    let both: Vec<Slice> = a.iter().chain(&b).cloned().collect();
    for order in [["a", "b"], ["b", "a"]] {
        let mut xml = DomainXml::parse(OPERATOR_VM).unwrap();
        xml.apply("a", &a, &plan(&a, PlanOptions::default()))
            .unwrap();
        let after_a = xml.to_xml();
        // The second allocation re-plans the whole VM (both slices, here on two nodes' worth).
        let mut plan_b = plan(&both, PlanOptions::default());
        plan_b.vcpu_pins = vec![24, 25, 26, 27];
        plan_b.emulator_cpus = CpuSet::from_cpus([24, 25, 26, 27]);
        xml.apply("b", &b, &plan_b).unwrap();
        assert_eq!(xml.current_pinning().vcpu_pins, vec![24, 25, 26, 27]);
        let first = xml.release(order[0]).unwrap();
        if order[0] == "b" {
            // b was on top: a's pinning comes back and the domain is exactly as after a.
            assert!(first.pinning_changed);
            assert_eq!(xml.to_xml(), after_a);
        } else {
            // a was below: b's pinning stays, and b now remembers the operator's original.
            assert!(!first.pinning_changed);
            assert_eq!(xml.current_pinning().vcpu_pins, vec![24, 25, 26, 27]);
            assert!(!xml.to_xml().contains(M1));
        }
        xml.release(order[1]).unwrap();
        assert_eq!(xml.to_xml(), OPERATOR_VM, "order {order:?}");
    }
}

#[test]
fn policy_none_adds_only_devices() {
    let slices = [mdev(M1, 0)];
    let req = PinRequest {
        slices: slices.to_vec(),
        vcpus: 4,
        memory_kib: 1024,
        policy: Policy::None,
        options: PlanOptions::default(),
    };
    let p = NumaAccounting::new(&topology(), &[]).plan(&req).unwrap();
    let mut xml = DomainXml::parse(OPERATOR_VM).unwrap();
    xml.apply("n", &slices, &p).unwrap();
    let text = xml.to_xml();
    assert!(text.contains(M1));
    assert!(
        text.contains("<vcpupin vcpu='0' cpuset='0-15'/>"),
        "operator pinning kept"
    );
    assert_eq!(xml.allocations().unwrap()[0].pinning, None);
    xml.release("n").unwrap();
    assert_eq!(xml.to_xml(), OPERATOR_VM);
}

#[test]
fn refuses_duplicates_and_unknown_ids_without_changing_anything() {
    let slices = [mdev(M1, 1)];
    let p = plan(&slices, PlanOptions::default());
    let mut xml = DomainXml::parse(OPERATOR_VM).unwrap();
    xml.apply("a", &slices, &p).unwrap();
    let before = xml.to_xml();
    assert!(matches!(
        xml.apply("a", &[mdev(M2, 1)], &p),
        Err(VmpinError::AllocationExists { .. })
    ));
    assert!(matches!(
        xml.apply("b", &slices, &p),
        Err(VmpinError::DeviceAlreadyPresent { .. })
    ));
    // The operator's own NIC counts as present too.
    let nic = [Slice {
        device: SliceDevice::Pci {
            address: "0000:3b:00.1".parse().unwrap(),
            managed: true,
        },
        node: NumaNodeId(0),
    }];
    assert!(matches!(
        xml.apply("c", &nic, &p),
        Err(VmpinError::DeviceAlreadyPresent { .. })
    ));
    assert!(matches!(
        xml.release("zzz"),
        Err(VmpinError::AllocationNotFound { .. })
    ));
    assert_eq!(xml.to_xml(), before);
}

#[test]
fn a_domain_without_metadata_or_tuning_gets_them_and_loses_them() {
    let bare = "<domain type='test'>\n  <name>bare</name>\n  <memory unit='KiB'>1048576</memory>\n  <vcpu placement='static'>2</vcpu>\n  <os>\n    <type arch='x86_64'>hvm</type>\n  </os>\n  <devices>\n  </devices>\n</domain>\n";
    let slices = [mdev(M1, 0), mdev(M2, 1)];
    let req = PinRequest {
        slices: slices.to_vec(),
        vcpus: 2,
        memory_kib: 1048576,
        policy: Policy::Required,
        options: PlanOptions::default(),
    };
    let p = NumaAccounting::new(&topology(), &[]).plan(&req).unwrap();
    let mut xml = DomainXml::parse(bare).unwrap();
    xml.apply("x", &slices, &p).unwrap();
    golden("bare.two-nodes.xml", &xml.to_xml());
    xml.release("x").unwrap();
    assert_eq!(xml.to_xml(), bare);
}

#[test]
fn unreadable_metadata_is_an_error_naming_the_allocation() {
    let text = OPERATOR_VM.replace(
        "  </metadata>",
        "    <v:pinning xmlns:v=\"https://vgpud.io/xmlns/pinning/1\"><v:allocation id=\"a\"><v:hostdev type=\"mdev\" uuid=\"not-a-uuid\" node=\"0\"/></v:allocation></v:pinning>\n  </metadata>",
    );
    let err = DomainXml::parse(&text).unwrap().allocations().unwrap_err();
    assert!(err.to_string().contains("allocation a"), "{err}");
    assert!(DomainXml::parse("<network/>").is_err());
    assert!(DomainXml::parse("<domain>").is_err());
}

#[test]
fn records_under_another_prefix_are_found_by_namespace() {
    let slices = [mdev(M1, 1)];
    let mut xml = DomainXml::parse(OPERATOR_VM).unwrap();
    xml.apply("a", &slices, &plan(&slices, PlanOptions::default()))
        .unwrap();
    let renamed = xml
        .to_xml()
        .replace("vgpud:", "pin:")
        .replace("xmlns:vgpud", "xmlns:pin");
    let mut other = DomainXml::parse(&renamed).unwrap();
    assert_eq!(other.allocations().unwrap().len(), 1);
    other
        .apply("b", &[mdev(M2, 1)], &PinPlan::default())
        .unwrap();
    assert!(
        other.to_xml().contains("<pin:allocation id='b'>"),
        "{}",
        other.to_xml()
    );
    other.release("a").unwrap();
    other.release("b").unwrap();
    assert_eq!(other.to_xml(), OPERATOR_VM);
}

/// The `<node>` of a `pcie-expander-bus` is a *guest* NUMA cell: libvirt refuses a definition
/// whose expander names a node missing from `<cpu><numa>` ("pcie-expander-bus with index 2 is
/// configured for a NUMA node (1) not present in the domain's <cpu><numa> array (0)", seen on
/// libvirt 9.0's QEMU driver in the rig).
fn expander_nodes(xml: &DomainXml) -> Vec<Option<String>> {
    let doc = vmpin::xml::Document::parse(&xml.to_xml()).unwrap();
    doc.root
        .child("devices")
        .unwrap()
        .elements()
        .filter(|e| e.attr("model").as_deref() == Some("pcie-expander-bus"))
        .map(|e| {
            e.child("target")
                .and_then(|t| t.child("node"))
                .map(|n| n.text())
        })
        .collect()
}

#[test]
fn one_node_expander_bus_names_no_guest_node() {
    let slices = [mdev(M1, 1), vf("0000:41:00.5", 1)];
    let options = PlanOptions {
        expander_bus: true,
        ..PlanOptions::default()
    };
    let plan = plan(&slices, options);
    assert!(plan.guest_cells.is_empty());
    let mut xml = DomainXml::parse(OPERATOR_VM).unwrap();
    xml.apply("alloc-1n", &slices, &plan).unwrap();
    assert_eq!(expander_nodes(&xml), vec![None]);
    xml.release("alloc-1n").unwrap();
    assert_eq!(xml.to_xml(), OPERATOR_VM);
}

#[test]
fn expander_buses_name_the_guest_cell_of_their_host_node() {
    let topology = HostTopology {
        nodes: (0..4)
            .map(|n| HostNode {
                id: NumaNodeId(n),
                cpus: CpuSet::from_cpus(u32::from(n) * 8..u32::from(n) * 8 + 8),
                memory_mib: 65536,
            })
            .collect(),
        reserved_cpus: CpuSet::default(),
    };
    // Host nodes 3 and 2, in that order: guest cells 0 and 1 mirror nodes 2 and 3.
    let slices = [mdev(M1, 3), mdev(M2, 2)];
    let req = PinRequest {
        slices: slices.to_vec(),
        vcpus: 2,
        memory_kib: 2 * 1024 * 1024,
        policy: Policy::Required,
        options: PlanOptions {
            expander_bus: true,
            ..PlanOptions::default()
        },
    };
    let plan = NumaAccounting::new(&topology, &[]).plan(&req).unwrap();
    let cells: Vec<(u32, NumaNodeId)> = plan
        .guest_cells
        .iter()
        .map(|c| (c.id, c.host_node))
        .collect();
    assert_eq!(cells, vec![(0, NumaNodeId(2)), (1, NumaNodeId(3))]);
    let mut xml = DomainXml::parse(OPERATOR_VM).unwrap();
    xml.apply("alloc", &slices, &plan).unwrap();
    // M1 (host node 3) comes first and gets the first expander: guest cell 1.
    assert_eq!(
        expander_nodes(&xml),
        vec![Some("1".to_owned()), Some("0".to_owned())]
    );
    assert!(
        xml.to_xml()
            .contains("<memnode cellid='1' mode='strict' nodeset='3'/>")
    );
    xml.release("alloc").unwrap();
    assert_eq!(xml.to_xml(), OPERATOR_VM);
}

/// Hot-(un)plug XML carries the device's source only: its guest address in the definition may be
/// behind an expander bus the running guest gets at its next start ("Invalid PCI address
/// 0000:04:00.0. Only PCI buses up to 2 are available", libvirt 9.0 in the rig).
#[test]
fn hotplug_xml_has_the_source_but_no_guest_address() {
    let slices = [mdev(M1, 1), vf("0000:41:00.5", 1)];
    let options = PlanOptions {
        expander_bus: true,
        ..PlanOptions::default()
    };
    let mut xml = DomainXml::parse(OPERATOR_VM).unwrap();
    xml.apply("alloc", &slices, &plan(&slices, options))
        .unwrap();
    assert!(xml.to_xml().contains("<address type='pci'"));
    let mdev_xml = xml.hostdev_xml(&slices[0].device).unwrap();
    assert!(
        mdev_xml.contains(&format!("<address uuid='{M1}'/>")),
        "{mdev_xml}"
    );
    assert!(!mdev_xml.contains("type='pci'"), "{mdev_xml}");
    let vf_xml = xml.hostdev_xml(&slices[1].device).unwrap();
    assert_eq!(
        vf_xml,
        "<hostdev mode='subsystem' type='pci' managed='no'>\n  <source>\n    \
         <address domain='0x0000' bus='0x41' slot='0x00' function='0x5'/>\n  </source>\n</hostdev>"
    );
}
