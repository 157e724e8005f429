//! The fleet's host kinds against real simulated hosts (`vgpud run --sim`): each kind's
//! on-demand type is one its GPUs offer, its declared layout applies, and every slice the
//! workload mapping can ask for is offered by some kind — so a mapped request is never one no
//! host could take.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use two_level::fleet::{Fleet, KINDS, offers};
use two_level::host::Vgpud;
use two_level::workload::Want;

#[test]
fn every_kind_offers_its_types_and_every_mapped_type_has_a_kind() {
    let vgpud = torture::daemon::vgpud_binary().unwrap();
    let kinds: Vec<_> = KINDS.iter().collect();
    let fleet = Fleet::start(&vgpud, None, &kinds).unwrap();
    let mut offered = BTreeSet::new();
    for ((name, socket), kind) in fleet.hosts.iter().zip(&kinds) {
        let host = Vgpud::new(socket).unwrap();
        let gpus = host.call("GET", "/v1/gpus", None).unwrap();
        let mut on_demand = 0;
        let mut declared = 0;
        let mut addresses: Vec<&str> = gpus
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["pci_address"].as_str().unwrap())
            .collect();
        // Layout selectors count GPUs in PCI address order.
        addresses.sort();
        for (index, address) in addresses.into_iter().enumerate() {
            let detail = host
                .call("GET", &format!("/v1/gpus/{address}"), None)
                .unwrap();
            let capacity = detail["capacity"].as_array().unwrap();
            let count = |t: &str, field: &str| {
                capacity
                    .iter()
                    .find(|c| c["type"] == t)
                    .map_or(0, |c| c[field].as_u64().unwrap())
            };
            // The reporter reports the first on-demand type a GPU offers, with what could be
            // created.
            let first = kind
                .on_demand
                .iter()
                .find(|t| capacity.iter().any(|c| c["type"] == **t));
            if let Some(t) = first.filter(|t| count(t, "creatable") > 0) {
                on_demand += 1;
                offered.insert((*t).to_owned());
            }
            let index = u32::try_from(index).unwrap();
            for layout in kind.layouts.iter().filter(|l| l.gpus.contains(&index)) {
                for (t, n) in layout.slices {
                    assert_eq!(
                        count(t, "free"),
                        u64::from(*n),
                        "{name} {address}: declared {n} × {t}"
                    );
                    declared += 1;
                    offered.insert((*t).to_owned());
                }
            }
        }
        if !kind.on_demand.is_empty() {
            assert!(
                on_demand > 0,
                "{name} ({}): no GPU offers {:?}",
                kind.profile,
                kind.on_demand
            );
        }
        if !kind.layouts.is_empty() {
            assert!(
                declared > 0,
                "{name} ({}): the layout {:?} made no free slices",
                kind.profile,
                kind.layouts
            );
        }
        // The dry run agrees for the kind's first type.
        let first = kind
            .on_demand
            .first()
            .copied()
            .or(kind.layouts.first().map(|l| l.slices[0].0))
            .unwrap();
        let score = host.score(&Want::new(first, 1)).unwrap();
        assert!(score.feasible, "{name}: {first} is not feasible");
    }
    for offer in offers() {
        for slice in &offer.slices {
            assert!(
                offered.contains(&slice.slice_type),
                "{} ({}) is offered by no kind: {offered:?}",
                slice.slice_type,
                offer.name
            );
        }
    }
    assert!(
        offered.contains("gpu"),
        "no kind lends whole GPUs: {offered:?}"
    );
}
