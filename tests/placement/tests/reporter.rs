//! The reporter against a real OpenStack Placement (PyPI `openstack-placement`, SQLite,
//! noauth2): the tree it builds on a simulated DGX A100, what allocation candidates return for
//! it, how layouts, allocations and quarantine change the inventories, and how it behaves next
//! to other writers and through an outage.

// Helpers outside #[test] functions fail the test run on a broken peer, which is what they are for.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use agent::config::Config;
use agent::placement::reporter::Reporter;
use agent::placement::settings::PlacementSettings;
use agent::service::Service;
use placement::Client;
use placement::model::{ConsumerAllocations, Inventory, Provider, ProviderAllocation};
use sim::SimHost;
use testkit::placement::PlacementPeer;
use testkit::{addr, gpu_layout, request};
use uuid::Uuid;

/// The simulated DGX A100's GPUs by NUMA node (sim/profiles/dgx-a100.toml).
const NUMA0: [&str; 4] = [
    "0000:07:00.0",
    "0000:0f:00.0",
    "0000:47:00.0",
    "0000:4e:00.0",
];
const NUMA1: [&str; 4] = [
    "0000:87:00.0",
    "0000:90:00.0",
    "0000:b7:00.0",
    "0000:bd:00.0",
];

fn peer() -> Option<PlacementPeer> {
    placement_peer::placement()
}

/// The test's own client: "another service" looking at Placement.
fn client(peer: &PlacementPeer) -> Client {
    placement_peer::admin_client(&peer.url())
}

/// `[placement]` settings for `root`, with `extra` keys.
fn settings(peer: &PlacementPeer, root: &str, extra: &str) -> PlacementSettings {
    let text = format!(
        "[placement]\nenabled = true\nendpoint = \"{}\"\nauth = \"noauth2\"\ntoken = \"admin\"\n\
         compute_node = \"{root}\"\n{extra}\n",
        peer.url()
    );
    let config = Config::parse(&text, Path::new("vgpud.toml")).expect("config");
    PlacementSettings::from_config(&config, "unused-hostname")
}

/// A DGX A100 whose first GPU carries a declared layout of seven 1g.10gb (the VGPU class) and
/// second three 2g.20gb and one 1g.10gb; the others are on demand for 3g.40gb.
fn dgx(dir: &Path) -> (SimHost, Service) {
    let (sim, service) = testkit::service("dgx-a100", dir);
    service
        .set_layouts(vec![
            gpu_layout(NUMA0[0], &[("1g.10gb", 7)]),
            gpu_layout(NUMA0[1], &[("2g.20gb", 3), ("1g.10gb", 1)]),
        ])
        .expect("layouts");
    (sim, service)
}

const DGX: &str = "own_root = true\nnuma_subtree = true\ndefault_type = \"1g.10gb\"\n\
                   on_demand_types = [\"3g.40gb\"]";

fn gpu_name(root: &str, gpu: &str) -> String {
    format!("{root}_pci_{}", gpu.replace([':', '.'], "_"))
}

/// The tree under `root`, by provider name.
fn tree(c: &Client, root: &str) -> BTreeMap<String, Provider> {
    let r = c.provider_named(root).expect("read").expect("root exists");
    c.tree(r.uuid)
        .expect("tree")
        .into_iter()
        .map(|p| (p.name.clone(), p))
        .collect()
}

fn inventories(c: &Client, p: &Provider) -> BTreeMap<String, Inventory> {
    c.inventories(p.uuid).expect("inventories").inventories
}

fn traits(c: &Client, p: &Provider) -> BTreeSet<String> {
    c.traits(p.uuid)
        .expect("traits")
        .traits
        .into_iter()
        .collect()
}

/// The GPU providers (by name) of every candidate of `query`.
fn candidate_providers(c: &Client, query: &[(&str, &str)]) -> Vec<BTreeSet<Uuid>> {
    c.allocation_candidates(query)
        .expect("allocation candidates")
        .allocation_requests
        .into_iter()
        .map(|r| r.allocations.into_keys().collect())
        .collect()
}

#[test]
fn the_tree_appears_as_nova_names_it_and_answers_allocation_candidates() {
    let Some(peer) = peer() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_sim, service) = dgx(dir.path());
    let reporter = Reporter::new(settings(&peer, "dgx-01", DGX)).unwrap();
    let out = reporter.sync_now(service.engine()).expect("sync");
    assert_eq!(out.gpu_providers.len(), 8);
    let c = client(&peer);
    let t = tree(&c, "dgx-01");
    // Two NUMA subtree roots, eight GPUs under them.
    assert_eq!(t.len(), 2 + 8 + 1, "{:?}", t.keys());
    let numa0 = &t["dgx-01_numa_0"];
    assert!(traits(&c, numa0).contains("HW_NUMA_ROOT"));
    for (node, gpus) in [(numa0, NUMA0), (&t["dgx-01_numa_1"], NUMA1)] {
        for g in gpus {
            let p = &t[&gpu_name("dgx-01", g)];
            assert_eq!(p.parent_provider_uuid, Some(node.uuid), "{g}");
            let tr = traits(&c, p);
            for want in [
                "CUSTOM_VGPUD_OWNED",
                "CUSTOM_VGPUD_MIG_CAPABLE",
                "CUSTOM_VGPUD_BACKEND_MIG",
            ] {
                assert!(tr.contains(want), "{g} lacks {want}: {tr:?}");
            }
        }
    }
    // The declared layouts exactly; the on-demand GPUs what could be made of 3g.40gb.
    let inv = |g: &str| inventories(&c, &t[&gpu_name("dgx-01", g)]);
    let first = inv(NUMA0[0]);
    assert_eq!(first.keys().collect::<Vec<_>>(), ["VGPU"]);
    assert_eq!(
        (
            first["VGPU"].total,
            first["VGPU"].max_unit,
            first["VGPU"].reserved
        ),
        (7, 7, 0)
    );
    let second = inv(NUMA0[1]);
    assert_eq!(second["CUSTOM_MIG_2G_20GB"].total, 3);
    assert_eq!(second["VGPU"].total, 1);
    for g in NUMA0[2..].iter().chain(&NUMA1) {
        let i = inv(g);
        assert_eq!(i.keys().collect::<Vec<_>>(), ["CUSTOM_MIG_3G_40GB"], "{g}");
        assert_eq!(
            (
                i["CUSTOM_MIG_3G_40GB"].total,
                i["CUSTOM_MIG_3G_40GB"].step_size
            ),
            (2, 1)
        );
        assert_eq!(i["CUSTOM_MIG_3G_40GB"].allocation_ratio, 1.0);
    }

    let gpu = |g: &str| t[&gpu_name("dgx-01", g)].uuid;
    let one = |u: Uuid| BTreeSet::from([u]);
    // VGPU: the two GPUs with 1g.10gb slices.
    let vgpu: BTreeSet<_> = candidate_providers(&c, &[("resources", "VGPU:1")])
        .into_iter()
        .collect();
    assert_eq!(
        vgpu,
        BTreeSet::from([one(gpu(NUMA0[0])), one(gpu(NUMA0[1]))])
    );
    // Two of VGPU come from one provider (Placement never splits a class): only the first GPU.
    assert_eq!(
        candidate_providers(&c, &[("resources", "VGPU:2")]),
        vec![one(gpu(NUMA0[0]))]
    );
    // A custom class.
    assert_eq!(
        candidate_providers(&c, &[("resources", "CUSTOM_MIG_2G_20GB:3")]),
        vec![one(gpu(NUMA0[1]))]
    );
    assert_eq!(
        candidate_providers(&c, &[("resources", "CUSTOM_MIG_3G_40GB:1")]).len(),
        6
    );
    // required= traits: the model trait and one no GPU has.
    let model = traits(&c, &t[&gpu_name("dgx-01", NUMA0[0])])
        .into_iter()
        .find(|t| t.starts_with("CUSTOM_VGPUD_MODEL_"))
        .expect("a model trait");
    assert_eq!(
        candidate_providers(
            &c,
            &[("resources", "CUSTOM_MIG_3G_40GB:1"), ("required", &model)]
        )
        .len(),
        6
    );
    assert!(
        candidate_providers(
            &c,
            &[
                ("resources", "VGPU:1"),
                ("required", "!CUSTOM_VGPUD_MIG_CAPABLE")
            ]
        )
        .is_empty()
    );
    // same_subtree: two 3g.40gb on two different GPUs of one NUMA node.
    let same_numa = candidate_providers(
        &c,
        &[
            ("resources_A", "CUSTOM_MIG_3G_40GB:2"),
            ("resources_B", "CUSTOM_MIG_3G_40GB:2"),
            ("required_NUMA", "HW_NUMA_ROOT"),
            ("same_subtree", "_A,_B,_NUMA"),
            ("group_policy", "isolate"),
        ],
    );
    assert!(!same_numa.is_empty());
    let node_of = |u: &Uuid| {
        t.values()
            .find(|p| p.uuid == *u)
            .and_then(|p| p.parent_provider_uuid)
    };
    for cand in &same_numa {
        let parents: BTreeSet<_> = cand.iter().filter_map(node_of).collect();
        assert_eq!(parents.len(), 1, "a candidate spans NUMA nodes: {cand:?}");
    }
    let nodes: BTreeSet<_> = same_numa.iter().flatten().filter_map(node_of).collect();
    assert_eq!(nodes.len(), 2, "both NUMA nodes offer a pair");
    assert!(same_numa.iter().all(|c| c.len() == 2));
}

#[test]
fn layouts_allocations_and_quarantine_change_the_inventories() {
    let Some(peer) = peer() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_sim, service) = dgx(dir.path());
    let reporter = Reporter::new(settings(&peer, "dgx-02", DGX)).unwrap();
    reporter.sync_now(service.engine()).expect("sync");
    let c = client(&peer);
    let t = tree(&c, "dgx-02");
    let p = |g: &str| t[&gpu_name("dgx-02", g)].clone();

    // A new layout: the first GPU becomes one 7g.80gb.
    service
        .set_layouts(vec![gpu_layout(NUMA0[0], &[("7g.80gb", 1)])])
        .expect("layout");
    reporter.sync_now(service.engine()).expect("sync");
    let first = inventories(&c, &p(NUMA0[0]));
    assert_eq!(
        first.keys().collect::<Vec<_>>(),
        ["CUSTOM_MIG_7G_80GB"],
        "{first:?}"
    );
    // The second GPU lost its declared layout: its slices stay (owned), and the on-demand type
    // adds what still fits beside them.
    let second = inventories(&c, &p(NUMA0[1]));
    assert!(second.contains_key("CUSTOM_MIG_2G_20GB"), "{second:?}");

    // An allocation made without a Placement consumer: Placement cannot see it, so its slice
    // is reserved.
    let alloc = service
        .allocate(request("local", "3g.40gb", Some(NUMA1[3])))
        .expect("allocate");
    reporter.sync_now(service.engine()).expect("sync");
    let last = inventories(&c, &p(NUMA1[3]));
    assert_eq!(
        (
            last["CUSTOM_MIG_3G_40GB"].total,
            last["CUSTOM_MIG_3G_40GB"].reserved
        ),
        (2, 1)
    );
    service.release(alloc.id).expect("release");

    // Quarantine: reserved = total and the quarantine trait; release undoes both.
    service
        .quarantine_gpu(addr(NUMA1[0]), "fan replacement")
        .expect("quarantine");
    reporter.sync_now(service.engine()).expect("sync");
    let q = inventories(&c, &p(NUMA1[0]));
    let i = &q["CUSTOM_MIG_3G_40GB"];
    assert_eq!(i.reserved, i.total, "{q:?}");
    assert!(traits(&c, &p(NUMA1[0])).contains("CUSTOM_VGPUD_QUARANTINED"));
    assert!(
        !candidate_providers(&c, &[("resources", "CUSTOM_MIG_3G_40GB:1")])
            .iter()
            .any(|cand| cand.contains(&p(NUMA1[0]).uuid)),
        "a quarantined GPU is no candidate"
    );
    service.release_gpu(addr(NUMA1[0])).expect("release");
    reporter.sync_now(service.engine()).expect("sync");
    assert_eq!(
        inventories(&c, &p(NUMA1[0]))["CUSTOM_MIG_3G_40GB"].reserved,
        0
    );
    assert!(!traits(&c, &p(NUMA1[0])).contains("CUSTOM_VGPUD_QUARANTINED"));
}

#[test]
fn a_concurrent_writer_bumping_a_generation_is_retried() {
    let Some(peer) = peer() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_sim, service) = dgx(dir.path());
    let settings = settings(&peer, "dgx-03", DGX);
    let reporter = Reporter::new(settings.clone()).unwrap();
    reporter.sync_now(service.engine()).expect("sync");
    let c = client(&peer);
    let target = tree(&c, "dgx-03")[&gpu_name("dgx-03", NUMA1[2])].clone();

    // Change what vgpud wants there, and let another writer change the provider between
    // vgpud's read and its write: the desired tree is recomputed after each read.
    service
        .set_layouts(vec![gpu_layout(NUMA1[2], &[("1g.10gb", 7)])])
        .expect("layout");
    // sync_once reads the tree, then asks for the desired tree once; only a write that meets a
    // newer generation re-reads its provider and asks again. Another writer bumping the
    // target's generation right after the first two of those reads makes its inventory write
    // conflict twice (fewer than the five attempts a write gets); the third attempt lands.
    let calls = std::cell::Cell::new(0);
    let desired = || {
        calls.set(calls.get() + 1);
        if calls.get() <= 2 {
            // A real change: Placement leaves the generation alone when nothing changes.
            let other = format!("CUSTOM_SOMEONE_ELSE_{}", calls.get());
            c.ensure_trait(&other).unwrap();
            let now = c.traits(target.uuid).unwrap();
            let mut more = now.traits.clone();
            more.push(other);
            c.set_traits(target.uuid, now.resource_provider_generation, &more)
                .unwrap();
        }
        agent::placement::desired::desired_tree(&settings, service.engine())
    };
    let out = agent::placement::sync::sync_once(reporter.client(), "dgx-03", &desired, true)
        .expect("sync");
    assert_eq!(out.conflicts, 2, "{out:?}");
    assert_eq!(
        calls.get(),
        3,
        "the desired tree is recomputed only after a conflict"
    );
    let inv = inventories(&c, &target);
    assert_eq!(inv["VGPU"].total, 7, "{inv:?}");
}

#[test]
fn what_another_service_owns_is_left_as_it_was() {
    let Some(peer) = peer() else { return };
    let c = client(&peer);
    // Nova made the compute node with its own inventory and traits, and a GPU provider of its
    // own with one of vgpud's names (its libvirt driver names them the same way).
    let root = c.create_provider("nova-host", None, None).unwrap();
    let nova_inv = BTreeMap::from([
        ("VCPU".to_owned(), Inventory::whole(64)),
        ("MEMORY_MB".to_owned(), Inventory::whole(262_144)),
    ]);
    let root_inv = c
        .set_inventories(root.uuid, root.generation, &nova_inv)
        .unwrap();
    let nova_traits = vec!["COMPUTE_NODE".to_owned(), "HW_CPU_X86_AVX2".to_owned()];
    c.set_traits(
        root.uuid,
        root_inv.resource_provider_generation,
        &nova_traits,
    )
    .unwrap();
    let before = c.provider(root.uuid).unwrap().unwrap();
    let theirs = c
        .create_provider(&gpu_name("nova-host", NUMA0[0]), None, Some(root.uuid))
        .unwrap();
    let their_inv = BTreeMap::from([("VGPU".to_owned(), Inventory::whole(4))]);
    c.set_inventories(theirs.uuid, theirs.generation, &their_inv)
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let (_sim, service) = dgx(dir.path());
    let reporter = Reporter::new(settings(
        &peer,
        "nova-host",
        "on_demand_types = [\"3g.40gb\"]",
    ))
    .unwrap();
    let out = reporter.sync_now(service.engine()).expect("sync");
    assert_eq!(
        c.provider(root.uuid).unwrap().unwrap().generation,
        before.generation
    );
    assert_eq!(inventories(&c, &before), nova_inv);
    assert_eq!(traits(&c, &before), nova_traits.into_iter().collect());
    assert_eq!(inventories(&c, &theirs), their_inv);
    assert!(!traits(&c, &theirs).contains("CUSTOM_VGPUD_OWNED"));
    assert_eq!(
        out.gpu_providers.len(),
        7,
        "the other seven GPUs are reported"
    );
    assert!(
        out.warnings.iter().any(|w| w.contains("not vgpud's")),
        "{:?}",
        out.warnings
    );
}

#[test]
fn a_missing_compute_node_waits_for_nova_unless_vgpud_owns_it() {
    let Some(peer) = peer() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_sim, service) = dgx(dir.path());
    let reporter = Reporter::new(settings(&peer, "not-yet", "")).unwrap();
    let e = reporter.sync_now(service.engine()).unwrap_err();
    assert!(e.to_string().contains("own_root"), "{e}");
    let status = reporter.status();
    assert!(!status.in_sync && status.last_error.is_some(), "{status:?}");
    assert!(
        client(&peer).provider_named("not-yet").unwrap().is_none(),
        "nothing created"
    );
}

#[test]
fn after_a_placement_outage_the_host_converges_within_one_sync_interval() {
    let Some(mut peer) = peer() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_sim, service) = dgx(dir.path());
    let interval = Duration::from_secs(10);
    let extra = format!(
        "{DGX}\nsync_interval_s = {}\ndebounce_ms = 200",
        interval.as_secs()
    );
    let settings = settings(&peer, "dgx-04", &extra);
    let reporter = std::sync::Arc::new(Reporter::new(settings.clone()).unwrap());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let runner = {
        let (r, e, s) = (reporter.clone(), service.engine().clone(), stop.clone());
        std::thread::spawn(move || r.run(&e, &|| s.load(std::sync::atomic::Ordering::Relaxed)))
    };
    wait_for("the first sync", Duration::from_secs(30), || {
        reporter.status().in_sync
    });

    peer.stop();
    // Local operation goes on while Placement is away: allocate, change layouts, quarantine.
    let began = Instant::now();
    let a = service
        .allocate(request("during-outage", "3g.40gb", Some(NUMA1[1])))
        .expect("allocate");
    reporter.poke();
    service
        .set_layouts(vec![gpu_layout(NUMA0[0], &[("3g.40gb", 2)])])
        .expect("layout");
    reporter.poke();
    service
        .quarantine_gpu(addr(NUMA1[2]), "outage test")
        .expect("quarantine");
    reporter.poke();
    wait_for("the failure to show", Duration::from_secs(30), || {
        reporter.status().last_error.is_some()
    });
    let status = reporter.status();
    assert!(
        !status.in_sync && status.pending_since.is_some(),
        "{status:?}"
    );
    std::thread::sleep(Duration::from_secs(60).saturating_sub(began.elapsed()));

    peer.start_again().expect("Placement back");
    let back = Instant::now();
    wait_for("convergence", interval + Duration::from_secs(5), || {
        reporter.status().in_sync
    });
    assert!(back.elapsed() <= interval + Duration::from_secs(5));
    let c = client(&peer);
    let t = tree(&c, "dgx-04");
    let inv = |g: &str| inventories(&c, &t[&gpu_name("dgx-04", g)]);
    assert_eq!(inv(NUMA0[0])["CUSTOM_MIG_3G_40GB"].total, 2);
    assert_eq!(
        inv(NUMA1[1])["CUSTOM_MIG_3G_40GB"].reserved,
        1,
        "the outage's allocation"
    );
    let q = &inv(NUMA1[2])["CUSTOM_MIG_3G_40GB"];
    assert_eq!(q.reserved, q.total);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    runner.join().unwrap();
    service.release(a.id).unwrap();
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_class_the_layout_drops_stays_closed_while_a_consumer_holds_it() {
    let Some(peer) = peer() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_sim, service) = dgx(dir.path());
    let reporter = Reporter::new(settings(&peer, "dgx-05", DGX)).unwrap();
    reporter.sync_now(service.engine()).expect("sync");
    let c = client(&peer);
    let gpu = tree(&c, "dgx-05")[&gpu_name("dgx-05", NUMA0[0])].clone();
    // An upstream scheduler claims one VGPU (a 1g.10gb) on the first GPU...
    let consumer = Uuid::new_v4();
    let claim = placement::model::ConsumerAllocations {
        allocations: BTreeMap::from([(
            gpu.uuid,
            placement::model::ProviderAllocation {
                resources: BTreeMap::from([("VGPU".to_owned(), 1)]),
                generation: None,
            },
        )]),
        consumer_generation: None,
        project_id: Some(Uuid::new_v4().to_string()),
        user_id: Some(Uuid::new_v4().to_string()),
        consumer_type: Some("INSTANCE".into()),
    };
    c.put_consumer_allocations(consumer, &claim).unwrap();
    // ...then the operator re-lays the GPU out as one 7g.80gb: VGPU is no longer offered, but
    // Placement will not delete an inventory a consumer uses. It stays, closed.
    service
        .set_layouts(vec![gpu_layout(NUMA0[0], &[("7g.80gb", 1)])])
        .expect("layout");
    let out = reporter.sync_now(service.engine()).expect("sync");
    let inv = inventories(&c, &gpu);
    assert_eq!(inv["CUSTOM_MIG_7G_80GB"].total, 1, "{inv:?}");
    assert_eq!(inv["VGPU"].reserved, inv["VGPU"].total, "{inv:?}");
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("VGPU is no longer offered")),
        "{:?}",
        out.warnings
    );
    // Once the consumer is gone the class goes too.
    c.delete_consumer_allocations(consumer).unwrap();
    reporter.sync_now(service.engine()).expect("sync");
    let inv = inventories(&c, &gpu);
    assert_eq!(
        inv.keys().collect::<Vec<_>>(),
        ["CUSTOM_MIG_7G_80GB"],
        "{inv:?}"
    );
}

/// `[placement] heal`: a consumer vgpud holds nothing for loses its share on vgpud's GPU
/// providers once it has been seen for the grace period, and only that share (the rest of its
/// allocation is Nova's or another host's); a consumer vgpud does hold is left alone.
#[test]
fn healing_removes_only_an_unknown_consumers_share_of_this_hosts_gpus_after_the_grace() {
    let Some(peer) = peer() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_sim, service) = dgx(dir.path());
    let extra = format!("{DGX}\nheal = true\nheal_grace_s = 1");
    let reporter = Reporter::new(settings(&peer, "dgx-05", &extra)).unwrap();
    reporter.sync_now(service.engine()).expect("sync");
    let c = client(&peer);
    let gpu = tree(&c, "dgx-05")[&gpu_name("dgx-05", NUMA1[3])].clone();
    let elsewhere = c.create_provider("elsewhere", None, None).unwrap();
    let vcpus = BTreeMap::from([("VCPU".to_owned(), Inventory::whole(8))]);
    c.set_inventories(elsewhere.uuid, elsewhere.generation, &vcpus)
        .unwrap();
    let stray = Uuid::new_v4();
    let share = |class: &str, amount| ProviderAllocation {
        resources: [(class.to_owned(), amount)].into(),
        generation: None,
    };
    let claim = |parts: Vec<(Uuid, ProviderAllocation)>| ConsumerAllocations {
        allocations: parts.into_iter().collect(),
        consumer_generation: None,
        project_id: Some("project".into()),
        user_id: Some("user".into()),
        consumer_type: Some("INSTANCE".into()),
    };
    c.put_consumer_allocations(
        stray,
        &claim(vec![
            (gpu.uuid, share("CUSTOM_MIG_3G_40GB", 1)),
            (elsewhere.uuid, share("VCPU", 2)),
        ]),
    )
    .unwrap();
    let known = Uuid::new_v4();
    c.put_consumer_allocations(
        known,
        &claim(vec![(gpu.uuid, share("CUSTOM_MIG_3G_40GB", 1))]),
    )
    .unwrap();
    let mut req = request("vm-known", "3g.40gb", Some(NUMA1[3]));
    req.placement_consumer = Some(known);
    service.allocate(req).expect("allocate");

    // Seen once: counted, not yet healed.
    reporter.sync_now(service.engine()).expect("sync");
    let status = reporter.status();
    assert_eq!(
        (status.unknown_to_vgpud, status.healed),
        (1, 0),
        "{status:?}"
    );
    assert!(
        c.consumer_allocations(stray)
            .unwrap()
            .allocations
            .contains_key(&gpu.uuid)
    );

    std::thread::sleep(Duration::from_millis(1_200));
    reporter.sync_now(service.engine()).expect("sync");
    assert_eq!(reporter.status().healed, 1, "{:?}", reporter.status());
    let left = c.consumer_allocations(stray).unwrap();
    assert_eq!(
        left.allocations.keys().collect::<Vec<_>>(),
        [&elsewhere.uuid],
        "{left:?}"
    );
    assert_eq!(left.allocations[&elsewhere.uuid].resources["VCPU"], 2);
    let kept = c.consumer_allocations(known).unwrap();
    assert_eq!(
        kept.allocations[&gpu.uuid].resources["CUSTOM_MIG_3G_40GB"],
        1
    );
    // Healed: the next pass finds nothing unknown.
    reporter.sync_now(service.engine()).expect("sync");
    assert_eq!(reporter.status().unknown_to_vgpud, 0);
}
