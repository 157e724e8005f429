//! Two-level scheduling (issue 16, item 5) against a real Placement and real vgpuds
//! (`vgpud run --sim`): the global scheduler of `examples/two-level` claims in Placement and
//! allocates on the chosen host; a vgpud refusal deletes the claim and the next candidate is
//! used; a small fleet places an openb workload with no refusal after Placement said yes.
//!
//! The hosts' providers are written here through the client, as vgpud's reporter writes them
//! (FORMATS.md, "OpenStack Placement": a root per host, a GPU provider per GPU named
//! `<root>_pci_<address>`, the on-demand type's class with what could be created).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use agent::placement::names::gpu_provider;
use placement::{Client, Inventory};
use placement_peer::{admin_client, placement};
use serde_json::json;
use two_level::candidates::by_host;
use two_level::classes::class_of;
use two_level::fleet::{self, Fleet, HostKind};
use two_level::host::Vgpud;
use two_level::scheduler::{Claimant, Outcome, Policy, Scheduler};
use two_level::workload::{Offer, Want, wants};
use uuid::Uuid;

/// L4 hosts, quarter vGPUs (`nvidia-930`, four per GPU) on demand.
const L4: &HostKind = &HostKind {
    profile: "single-gpu",
    on_demand: &["nvidia-930"],
    layouts: &[],
};
/// H200 hosts, time-sliced quarter vGPUs (four per GPU) on demand.
const H200: &HostKind = &HostKind {
    profile: "hgx-h200",
    on_demand: &["NVIDIA H200X-35C"],
    layouts: &[],
};

fn claimant() -> Claimant {
    Claimant {
        project_id: "test-project".to_owned(),
        user_id: "test-user".to_owned(),
    }
}

/// What the reporter would write for each host of `fleet`: the root, and per GPU its provider
/// with `kind`'s first on-demand type the GPU offers, total = what could be created (the
/// kinds here declare no layouts).
fn register_by_hand(client: &Client, fleet: &Fleet, kinds: &[&HostKind]) {
    for ((name, socket), kind) in fleet.hosts.iter().zip(kinds) {
        let host = Vgpud::new(socket).unwrap();
        let root = client.create_provider(name, None, None).unwrap();
        let gpus = host.call("GET", "/v1/gpus", None).unwrap();
        for gpu in gpus.as_array().unwrap() {
            let address = gpu["pci_address"].as_str().unwrap();
            let detail = host
                .call("GET", &format!("/v1/gpus/{address}"), None)
                .unwrap();
            let offered = detail["capacity"].as_array().unwrap();
            let Some((slice_type, creatable)) = kind.on_demand.iter().find_map(|t| {
                offered
                    .iter()
                    .find(|c| c["type"] == *t)
                    .map(|c| (*t, c["creatable"].as_u64().unwrap() as u32))
            }) else {
                continue;
            };
            if creatable == 0 {
                continue;
            }
            let rp_name = gpu_provider(name, address.parse().unwrap());
            let rp = client
                .create_provider(&rp_name, None, Some(root.uuid))
                .unwrap();
            let class = class_of(slice_type);
            client.ensure_resource_class(&class).unwrap();
            let inventories = BTreeMap::from([(class, Inventory::whole(creatable))]);
            client
                .set_inventories(rp.uuid, rp.generation, &inventories)
                .unwrap();
        }
    }
}

fn gpu_providers(client: &Client, root_name: &str) -> Vec<Uuid> {
    let root = client.provider_named(root_name).unwrap().unwrap();
    client
        .tree(root.uuid)
        .unwrap()
        .into_iter()
        .filter(|p| p.name.contains("_pci_"))
        .map(|p| p.uuid)
        .collect()
}

#[test]
fn a_vgpud_refusal_deletes_the_claim_and_the_next_candidate_is_used() {
    let Some(peer) = placement() else { return };
    let client = admin_client(&peer.url());
    let vgpud = torture::daemon::vgpud_binary().unwrap();
    let kinds = [L4, L4];
    let fleet = Fleet::start(&vgpud, None, &kinds).unwrap();
    register_by_hand(&client, &fleet, &kinds);

    // The host Placement lists first: its GPU is quarantined behind Placement's back (the
    // reporter has not synced yet), so its vgpud refuses what Placement promised.
    let want = Want::new("nvidia-930", 1);
    let query = want.query(10);
    let query: Vec<(&str, &str)> = query
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let hosts = by_host(&client.allocation_candidates(&query).unwrap()).unwrap();
    assert_eq!(hosts.len(), 2, "both hosts are candidates");
    let first = client.provider(hosts[0].root).unwrap().unwrap().name;
    let other = fleet
        .hosts
        .iter()
        .map(|(n, _)| n)
        .find(|n| **n != first)
        .unwrap()
        .clone();
    let (_, socket) = fleet.hosts.iter().find(|(n, _)| *n == first).unwrap();
    let quarantined = Vgpud::new(socket).unwrap();
    let gpus = quarantined.call("GET", "/v1/gpus", None).unwrap();
    let address = gpus[0]["pci_address"].as_str().unwrap();
    quarantined
        .call(
            "POST",
            &format!("/v1/gpus/{address}/quarantine"),
            Some(&json!({"reason": "fan"})),
        )
        .unwrap();

    let mut scheduler = Scheduler::new(
        client.clone(),
        fleet.vgpuds().unwrap(),
        claimant(),
        Policy::FirstCandidate,
    );
    let decision = scheduler.place(std::slice::from_ref(&want)).unwrap();

    assert_eq!(decision.refusals.len(), 1, "{decision:?}");
    assert_eq!(decision.refusals[0].0, first);
    assert_eq!(decision.refusals[0].1.code, "quarantined", "{decision:?}");
    let Outcome::Placed { host, consumer, .. } = &decision.outcome else {
        panic!("not placed on the next candidate: {decision:?}");
    };
    assert_eq!(*host, other);
    // The refused claim is gone; the placed one is on the other host's GPU.
    for rp in gpu_providers(&client, &first) {
        assert!(
            client
                .provider_allocations(rp)
                .unwrap()
                .allocations
                .is_empty()
        );
    }
    let held = client.consumer_allocations(*consumer).unwrap();
    let other_gpus = gpu_providers(&client, &other);
    assert_eq!(held.allocations.len(), 1);
    assert!(held.allocations.keys().all(|rp| other_gpus.contains(rp)));
    assert_eq!(held.consumer_type.as_deref(), Some("INSTANCE"));
    // The other vgpud holds the allocation for that consumer.
    let (_, socket) = fleet.hosts.iter().find(|(n, _)| *n == other).unwrap();
    let allocations = Vgpud::new(socket)
        .unwrap()
        .call("GET", "/v1/allocations", None)
        .unwrap();
    let consumer = consumer.to_string();
    assert!(
        allocations
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["consumer"] == consumer.as_str()),
        "{allocations}"
    );
}

#[test]
fn two_level_scoring_skips_a_host_its_vgpud_would_refuse() {
    let Some(peer) = placement() else { return };
    let client = admin_client(&peer.url());
    let vgpud = torture::daemon::vgpud_binary().unwrap();
    let kinds = [L4, L4];
    let fleet = Fleet::start(&vgpud, None, &kinds).unwrap();
    register_by_hand(&client, &fleet, &kinds);
    // Quarantine every GPU of host 0 behind Placement's back: the dry run says infeasible.
    let host0 = Vgpud::new(&fleet.hosts[0].1).unwrap();
    for gpu in host0
        .call("GET", "/v1/gpus", None)
        .unwrap()
        .as_array()
        .unwrap()
    {
        let address = gpu["pci_address"].as_str().unwrap();
        host0
            .call(
                "POST",
                &format!("/v1/gpus/{address}/quarantine"),
                Some(&json!({"reason": "fan"})),
            )
            .unwrap();
    }
    let mut scheduler = Scheduler::new(
        client,
        fleet.vgpuds().unwrap(),
        claimant(),
        Policy::TwoLevel,
    );
    for _ in 0..4 {
        let decision = scheduler.place(&[Want::new("nvidia-930", 1)]).unwrap();
        assert!(decision.refusals.is_empty(), "{decision:?}");
        assert!(decision.score_calls >= 2);
        let Outcome::Placed { host, .. } = &decision.outcome else {
            panic!("not placed: {decision:?}");
        };
        assert_eq!(*host, fleet.hosts[1].0);
    }
    // Host 1's GPU is full (four quarters): nothing feasible is left.
    let decision = scheduler.place(&[Want::new("nvidia-930", 1)]).unwrap();
    assert_eq!(decision.outcome, Outcome::NoHostFeasible, "{decision:?}");
}

#[test]
fn a_small_fleet_places_an_openb_workload_with_no_refusal_after_placement_said_yes() {
    let Some(peer) = placement() else { return };
    let client = admin_client(&peer.url());
    let vgpud = torture::daemon::vgpud_binary().unwrap();
    let kinds = [L4, H200, L4, H200];
    let fleet = Fleet::start(&vgpud, None, &kinds).unwrap();
    register_by_hand(&client, &fleet, &kinds);
    let pods = fleet::draw_pods(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/openb/openb_pod_list_default.csv"),
        42,
        Some(200),
    )
    .unwrap();
    // Every share maps onto one of this fleet's quarter vGPUs (or a whole GPU, which it lends
    // none of: those are Placement's "no candidate").
    let offers = [
        Offer::new("l4-vgpu", &[("nvidia-930", 250)]),
        Offer::new("h200-vgpu", &[("NVIDIA H200X-35C", 250)]),
    ];
    assert!(
        pods.iter()
            .any(|p| !wants(p.num_gpu, p.gpu_milli, &offers).is_empty())
    );
    let mut scheduler = Scheduler::new(
        client.clone(),
        fleet.vgpuds().unwrap(),
        claimant(),
        Policy::TwoLevel,
    );
    let figures = fleet::place_workload_with(&mut scheduler, &pods, 200, &offers).unwrap();
    assert!(figures.placed > 0, "{figures:?}");
    assert_eq!(figures.refused_after_yes, 0, "{figures:?}");
    // 2 L4 (4 quarters each) + 2 H200 × 8 GPUs × 4 quarters: the fleet holds 72 quarters.
    assert!(figures.placed <= 72, "{figures:?}");
    // Every claim in Placement is an allocation on its host.
    let mut held = 0;
    for (name, socket) in &fleet.hosts {
        let allocations = Vgpud::new(socket)
            .unwrap()
            .call("GET", "/v1/allocations", None)
            .unwrap();
        let on_host = allocations.as_array().unwrap().len();
        let claimed: usize = gpu_providers(&client, name)
            .into_iter()
            .map(|rp| client.provider_allocations(rp).unwrap().allocations.len())
            .sum();
        assert_eq!(on_host, claimed, "{name}");
        held += on_host;
    }
    assert_eq!(held, figures.placed);
}

#[test]
fn several_whole_gpus_on_one_numa_node_are_asked_with_same_subtree() {
    let Some(peer) = placement() else { return };
    let client = admin_client(&peer.url());
    // One host as the reporter writes it with `numa_subtree`: one GPU on node 0, two on node 1.
    let root = client.create_provider("numa-host", None, None).unwrap();
    let mut gpus_by_node: Vec<Vec<Uuid>> = Vec::new();
    for (node, buses) in [(0, &["07"][..]), (1, &["87", "90"][..])] {
        let numa = client
            .create_provider(&format!("numa-host_numa_{node}"), None, Some(root.uuid))
            .unwrap();
        client
            .set_traits(numa.uuid, numa.generation, &["HW_NUMA_ROOT".to_owned()])
            .unwrap();
        let mut ids = Vec::new();
        for bus in buses {
            let rp = client
                .create_provider(
                    &format!("numa-host_pci_0000_{bus}_00_0"),
                    None,
                    Some(numa.uuid),
                )
                .unwrap();
            let inventories = BTreeMap::from([("PGPU".to_owned(), Inventory::whole(1))]);
            client
                .set_inventories(rp.uuid, rp.generation, &inventories)
                .unwrap();
            ids.push(rp.uuid);
        }
        gpus_by_node.push(ids);
    }
    let candidates = |want: &Want| {
        let query = want.query(50);
        let query: Vec<(&str, &str)> = query
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        client.allocation_candidates(&query).unwrap()
    };
    let mut want = Want::new("gpu", 2);
    // Any two of the three GPUs, each its own provider (isolate).
    let any = candidates(&want);
    assert!(any.allocation_requests.len() >= 3, "{any:?}");
    assert!(
        any.allocation_requests
            .iter()
            .all(|r| r.allocations.len() == 2)
    );
    // Under one NUMA provider: only the pair on node 1.
    want.same_numa = true;
    let local = candidates(&want);
    assert!(!local.allocation_requests.is_empty(), "{local:?}");
    for r in &local.allocation_requests {
        let mut got: Vec<Uuid> = r.allocations.keys().copied().collect();
        got.sort();
        let mut node1 = gpus_by_node[1].clone();
        node1.sort();
        assert_eq!(got, node1);
    }
    let hosts = by_host(&local).unwrap();
    assert_eq!(hosts.len(), 1);
    assert_eq!(hosts[0].root, root.uuid);
    // Three GPUs on one node do not exist.
    want.count = 3;
    assert!(candidates(&want).allocation_requests.is_empty());
}
