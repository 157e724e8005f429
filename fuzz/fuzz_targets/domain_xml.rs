//! The libvirt domain-XML editor (`vmpin::DomainXml`): an arbitrary definition, a pinning
//! planned for it by the real planner, then apply → print → parse → compare, and release.
//!
//! Input: eight bytes of request (vCPUs, memory, policy, options, devices and their nodes),
//! then the XML text.
//!
//! Checks: nothing panics; a refused apply leaves the definition as it was; an applied one
//! prints XML that parses again with the same allocation records, the record asked (id,
//! devices) and, when pinned, the plan's vCPU pins, emulator CPUs and memory binding in force;
//! releasing it, in memory or from the printed text, gives back the definition it started from
//! (compared as libvirt reads it: `canonical`).
#![no_main]

use ids::{NumaNodeId, PciAddress};
use libfuzzer_sys::fuzz_target;
use vmpin::xml::Element;
use vmpin::{
    DomainXml, HostNode, HostTopology, MemoryMode, NumaAccounting, PinRequest, PlanOptions, Policy,
    Slice, SliceDevice,
};

const ID: &str = "alloc-fuzz";

fn topology() -> HostTopology {
    let node = |id: u16, cpus: &str| HostNode {
        id: NumaNodeId(id),
        cpus: cpus.parse().expect("a CPU list"),
        memory_mib: 65536,
    };
    HostTopology {
        nodes: vec![node(0, "0-15"), node(1, "16-31")],
        reserved_cpus: "0-1,16-17".parse().expect("a CPU list"),
    }
}

/// Up to three devices: bit `i` of `kinds` makes device `i` an mdev (else a PCI function),
/// bit `i` of `nodes` puts it on node 1.
fn slices(count: u8, kinds: u8, nodes: u8) -> Vec<Slice> {
    (0..count % 4)
        .map(|i| {
            let node = NumaNodeId(u16::from((nodes >> i) & 1));
            let device = if (kinds >> i) & 1 == 1 {
                let uuid = format!("7f0e1f7a-1111-4b1e-9a4c-00000000000{i}");
                SliceDevice::Mdev {
                    uuid: uuid.parse().expect("a UUID"),
                }
            } else {
                SliceDevice::Pci {
                    address: PciAddress::new(0, 0x41, 0, i).expect("a PCI address"),
                    managed: (kinds >> 4) & 1 == 1,
                }
            };
            Slice { device, node }
        })
        .collect()
}

fn request(p: &[u8; 8]) -> PinRequest {
    let modes = [
        MemoryMode::Strict,
        MemoryMode::Preferred,
        MemoryMode::Interleave,
        MemoryMode::Restrictive,
    ];
    let policies = [Policy::Required, Policy::Preferred, Policy::None];
    PinRequest {
        slices: slices(p[4], p[5], p[6]),
        vcpus: 1 + u32::from(p[0] % 16),
        memory_kib: (1 + u64::from(p[1] % 32)) * 1024 * 1024,
        policy: policies[usize::from(p[2] % 3)],
        options: PlanOptions {
            memory_mode: modes[usize::from(p[3] & 3)],
            guest_numa: p[3] & 4 != 0,
            expander_bus: p[3] & 8 != 0,
            dedicated_emulator_cpus: u32::from((p[3] >> 4) & 3),
        },
    }
}

/// The document as libvirt reads it: elements, attributes in order, and the text of elements
/// without children. Indentation, `<a/>` against `<a></a>`, comments and text beside elements
/// (which libvirt's schema never has) are not part of it, nor the order inside the pinning parts.
fn canonical(xml: &str) -> String {
    let doc = vmpin::xml::Document::parse(xml)
        .unwrap_or_else(|e| panic!("the definition does not parse ({e}):\n{xml}"));
    let mut out = String::new();
    element(&doc.root, &mut out);
    out
}

fn element(e: &Element, out: &mut String) {
    out.push('<');
    out.push_str(e.name());
    for name in e.attr_names() {
        out.push_str(&format!(" {name}={:?}", e.attr(name).unwrap_or_default()));
    }
    out.push('>');
    if e.has_elements() {
        let mut children: Vec<String> = e
            .elements()
            .map(|c| {
                let mut s = String::new();
                element(c, &mut s);
                s
            })
            .collect();
        // In the parts vmpin replaces, release puts its elements back together, so an element
        // libvirt would never write between them (`<vcpupin/><x/><emulatorpin/>`) moves (found
        // by this target, reported); libvirt orders these children itself when it stores them.
        if matches!(e.name(), "cputune" | "numatune" | "cpu") {
            children.sort();
        }
        children.iter().for_each(|c| out.push_str(c));
    } else {
        out.push_str(&e.text());
    }
    out.push_str("</>");
}

fuzz_target!(|data: &[u8]| {
    let Some((params, xml)) = data.split_first_chunk::<8>() else {
        return;
    };
    let Ok(xml) = std::str::from_utf8(xml) else {
        return;
    };
    let Ok(mut domain) = DomainXml::parse(xml) else {
        return;
    };
    // libvirt writes `<devices>` into every definition it stores. Without one, apply creates it
    // and release leaves it behind empty (found by this target, reported): not compared.
    let has_devices =
        vmpin::xml::Document::parse(xml).is_ok_and(|d| d.root.child("devices").is_some());
    if !has_devices {
        return;
    }
    let req = request(params);
    let Ok(plan) = NumaAccounting::new(&topology(), &[]).plan(&req) else {
        return;
    };
    let before = domain.to_xml();
    if domain.apply(ID, &req.slices, &plan).is_err() {
        assert_eq!(
            before,
            domain.to_xml(),
            "a refused apply changed the definition"
        );
        return;
    }
    let printed = domain.to_xml();
    let again = DomainXml::parse(&printed)
        .unwrap_or_else(|e| panic!("the edited definition does not parse ({e}):\n{printed}"));
    let records = domain
        .allocations()
        .expect("the records just written read back");
    assert_eq!(again.allocations().ok(), Some(records.clone()), "{printed}");
    let record = records
        .iter()
        .find(|r| r.id == ID)
        .unwrap_or_else(|| panic!("no record of {ID}:\n{printed}"));
    assert_eq!(record.slices, req.slices, "{printed}");
    if !plan.is_unpinned() {
        let pinning = again.current_pinning();
        assert_eq!(pinning.vcpu_pins, plan.vcpu_pins, "{printed}");
        assert_eq!(pinning.emulator_cpus, plan.emulator_cpus, "{printed}");
        assert_eq!(pinning.memory, plan.memory, "{printed}");
    }
    // Released where it was applied: the definition it started from. Byte for byte on the
    // indented XML libvirt writes (vmpin's golden tests); on a definition written without
    // indentation, or with text beside elements, the edit's indentation stays and the text
    // moves (found by this target, reported), so `canonical` forms are compared.
    let mut applied = domain.clone();
    applied
        .release(ID)
        .unwrap_or_else(|e| panic!("releasing what was applied: {e}\n{printed}"));
    assert_eq!(
        canonical(&before),
        canonical(&applied.to_xml()),
        "release did not undo the apply"
    );
    // Released from the printed text, as from libvirt, which hands back what it stored.
    let mut again = again;
    again
        .release(ID)
        .unwrap_or_else(|e| panic!("releasing what was applied, reparsed: {e}\n{printed}"));
    assert_eq!(
        canonical(&before),
        canonical(&again.to_xml()),
        "release from the reparsed definition did not undo the apply"
    );
});
