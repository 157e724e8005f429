//! The Placement client against a real Placement 16: the calls vgpud's reporter and the
//! two-level scheduler make, with Placement's own answers to stale generations, unknown traits,
//! inventories in use, outages and TLS.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use placement::model::{ConsumerAllocations, ProviderAllocation};
use placement::{Auth, Client, ClientConfig, Error, Inventory};
use placement_peer::{PlacementPeer, admin_client, client_with_token, placement};
use uuid::Uuid;

fn inventories(classes: &[(&str, Inventory)]) -> BTreeMap<String, Inventory> {
    classes
        .iter()
        .map(|(class, inv)| ((*class).to_owned(), inv.clone()))
        .collect()
}

/// A root and a GPU child with `VGPU: total`; returns (root, child).
fn host_with_gpu(client: &Client, name: &str, total: u32) -> (Uuid, Uuid) {
    let root = client.create_provider(name, None, None).unwrap();
    let gpu = client
        .create_provider(&format!("{name}_pci_0000_84_00_0"), None, Some(root.uuid))
        .unwrap();
    client
        .set_inventories(
            gpu.uuid,
            gpu.generation,
            &inventories(&[("VGPU", Inventory::whole(total))]),
        )
        .unwrap();
    (root.uuid, gpu.uuid)
}

fn allocation(rp: Uuid, class: &str, amount: u32, generation: Option<u64>) -> ConsumerAllocations {
    ConsumerAllocations {
        allocations: [(
            rp,
            ProviderAllocation {
                resources: [(class.to_owned(), amount)].into(),
                generation: None,
            },
        )]
        .into(),
        consumer_generation: generation,
        project_id: Some(Uuid::new_v4().simple().to_string()),
        user_id: Some(Uuid::new_v4().simple().to_string()),
        consumer_type: Some("INSTANCE".into()),
    }
}

#[test]
fn a_nested_tree_is_created_and_read_back() {
    let Some(peer) = placement() else { return };
    let client = admin_client(&peer.url());
    assert_eq!(client.endpoint().unwrap(), peer.url());
    assert_eq!(client.provider_named("host1").unwrap(), None);

    let wanted = Uuid::new_v4();
    let root = client.create_provider("host1", Some(wanted), None).unwrap();
    assert_eq!((root.uuid, root.generation), (wanted, 0));
    let child = client
        .create_provider("host1_pci_0000_84_00_0", None, Some(root.uuid))
        .unwrap();
    assert_eq!(child.parent_provider_uuid, Some(root.uuid));
    assert_eq!(child.root_provider_uuid, Some(root.uuid));

    assert_eq!(client.provider_named("host1").unwrap(), Some(root.clone()));
    assert_eq!(client.provider(child.uuid).unwrap(), Some(child.clone()));
    assert_eq!(client.provider(Uuid::new_v4()).unwrap(), None);
    let mut tree: Vec<String> = client
        .tree(root.uuid)
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    tree.sort();
    assert_eq!(tree, ["host1", "host1_pci_0000_84_00_0"]);

    // A second provider of the same name: Placement refuses it.
    let dup = client.create_provider("host1", None, None).unwrap_err();
    assert!(matches!(dup, Error::Conflict { .. }), "{dup:?}");

    // A root with a child cannot go; the child can, then the root.
    let err = client.delete_provider(root.uuid).unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
    client.delete_provider(child.uuid).unwrap();
    client.delete_provider(root.uuid).unwrap();
    assert!(matches!(
        client.delete_provider(root.uuid),
        Err(Error::NotFound(_))
    ));
    assert_eq!(client.tree(root.uuid).unwrap(), []);
}

#[test]
fn inventories_carry_generations_and_a_stale_one_is_a_generation_conflict() {
    let Some(peer) = placement() else { return };
    let client = admin_client(&peer.url());
    let gpu = client.create_provider("gpu", None, None).unwrap();

    let four = inventories(&[("VGPU", Inventory::whole(4))]);
    let set = client.set_inventories(gpu.uuid, 0, &four).unwrap();
    assert_eq!(set.resource_provider_generation, 1);
    assert_eq!(set.inventories, four);
    assert_eq!(client.inventories(gpu.uuid).unwrap(), set);

    // Another writer bumped the generation: the write is refused and nothing changes.
    let eight = inventories(&[("VGPU", Inventory::whole(8))]);
    let err = client.set_inventories(gpu.uuid, 0, &eight).unwrap_err();
    assert!(err.is_generation_conflict(), "{err:?}");
    assert!(!err.is_unavailable());
    assert_eq!(client.inventories(gpu.uuid).unwrap().inventories, four);

    // A quarantined GPU: reserved == total (microversion 1.26 allows it).
    let quarantined = inventories(&[(
        "VGPU",
        Inventory {
            reserved: 4,
            ..Inventory::whole(4)
        },
    )]);
    let set = client.set_inventories(gpu.uuid, 1, &quarantined).unwrap();
    assert_eq!(set.inventories["VGPU"].reserved, 4);
    assert_eq!(set.resource_provider_generation, 2);
    let none = client
        .allocation_candidates(&[("resources", "VGPU:1")])
        .unwrap();
    assert!(none.allocation_requests.is_empty(), "{none:?}");

    // An inventory Placement refuses (max_unit 0): a 400, nothing changes.
    let bad = inventories(&[(
        "VGPU",
        Inventory {
            max_unit: 0,
            ..Inventory::whole(4)
        },
    )]);
    let err = client.set_inventories(gpu.uuid, 2, &bad).unwrap_err();
    assert!(matches!(err, Error::Http { status: 400, .. }), "{err:?}");
    assert_eq!(
        client
            .inventories(gpu.uuid)
            .unwrap()
            .resource_provider_generation,
        2
    );

    let err = client.inventories(Uuid::new_v4()).unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
}

#[test]
fn custom_traits_are_created_before_use_and_standard_ones_checked() {
    let Some(peer) = placement() else { return };
    let client = admin_client(&peer.url());
    let gpu = client.create_provider("gpu", None, None).unwrap();
    let ours = vec![
        "CUSTOM_VGPUD_OWNED".to_owned(),
        "CUSTOM_VGPUD_MIG_CAPABLE".to_owned(),
        "HW_NUMA_ROOT".to_owned(),
    ];

    // A custom trait Placement does not know yet is refused.
    let err = client.set_traits(gpu.uuid, 0, &ours).unwrap_err();
    assert!(matches!(err, Error::Http { status: 400, .. }), "{err:?}");

    for name in &ours {
        client.ensure_trait(name).unwrap();
        client.ensure_trait(name).unwrap(); // idempotent
    }
    let err = client.ensure_trait("HW_NO_SUCH_TRAIT").unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");

    let set = client.set_traits(gpu.uuid, 0, &ours).unwrap();
    assert_eq!(set.resource_provider_generation, 1);
    let mut read = client.traits(gpu.uuid).unwrap();
    read.traits.sort();
    let mut want = ours.clone();
    want.sort();
    assert_eq!(read.traits, want);

    let err = client.set_traits(gpu.uuid, 0, &[]).unwrap_err();
    assert!(err.is_generation_conflict(), "{err:?}");
    let cleared = client.set_traits(gpu.uuid, 1, &[]).unwrap();
    assert!(cleared.traits.is_empty());
}

#[test]
fn custom_resource_classes_are_created_and_standard_ones_checked() {
    let Some(peer) = placement() else { return };
    let client = admin_client(&peer.url());
    let gpu = client.create_provider("gpu", None, None).unwrap();
    let classes = inventories(&[
        ("CUSTOM_MIG_3G_40GB", Inventory::whole(2)),
        ("VGPU", Inventory::whole(1)),
    ]);
    let err = client.set_inventories(gpu.uuid, 0, &classes).unwrap_err();
    assert!(matches!(err, Error::Http { status: 400, .. }), "{err:?}");

    client.ensure_resource_class("CUSTOM_MIG_3G_40GB").unwrap();
    client.ensure_resource_class("CUSTOM_MIG_3G_40GB").unwrap();
    client.ensure_resource_class("VGPU").unwrap();
    client.ensure_resource_class("PGPU").unwrap();
    let err = client.ensure_resource_class("NO_SUCH_CLASS").unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    // Names that are not resource class names never become another path.
    let err = client.ensure_resource_class("CUSTOM_A/../B").unwrap_err();
    assert!(
        matches!(err, Error::Http { status: 400, .. } | Error::NotFound(_)),
        "{err:?}"
    );

    let set = client.set_inventories(gpu.uuid, 0, &classes).unwrap();
    assert_eq!(set.inventories, classes);
}

#[test]
fn allocation_candidates_honour_resources_required_and_same_subtree() {
    let Some(peer) = placement() else { return };
    let client = admin_client(&peer.url());
    for name in [
        "HW_NUMA_ROOT",
        "CUSTOM_VGPUD_OWNED",
        "CUSTOM_VGPUD_MIG_CAPABLE",
    ] {
        client.ensure_trait(name).unwrap();
    }
    client.ensure_resource_class("CUSTOM_MIG_3G_40GB").unwrap();

    // host1: NUMA 0 holds gpu0 (VGPU x4) and gpu1 (MIG 3g x2, MIG-capable); NUMA 1 holds gpu2
    // (VGPU x4).
    let root = client.create_provider("host1", None, None).unwrap();
    let mut numa = Vec::new();
    for n in 0..2 {
        let p = client
            .create_provider(&format!("host1_numa_{n}"), None, Some(root.uuid))
            .unwrap();
        client
            .set_traits(
                p.uuid,
                p.generation,
                &["HW_NUMA_ROOT".into(), "CUSTOM_VGPUD_OWNED".into()],
            )
            .unwrap();
        numa.push(p.uuid);
    }
    let gpu = |name: &str, parent: Uuid, class: &str, total: u32, traits: &[&str]| {
        let p = client.create_provider(name, None, Some(parent)).unwrap();
        let inv = client
            .set_inventories(
                p.uuid,
                p.generation,
                &inventories(&[(class, Inventory::whole(total))]),
            )
            .unwrap();
        let traits: Vec<String> = traits.iter().map(|t| (*t).to_owned()).collect();
        client
            .set_traits(p.uuid, inv.resource_provider_generation, &traits)
            .unwrap();
        p.uuid
    };
    let owned = "CUSTOM_VGPUD_OWNED";
    let gpu0 = gpu("host1_pci_0000_17_00_0", numa[0], "VGPU", 4, &[owned]);
    let gpu1 = gpu(
        "host1_pci_0000_31_00_0",
        numa[0],
        "CUSTOM_MIG_3G_40GB",
        2,
        &[owned, "CUSTOM_VGPUD_MIG_CAPABLE"],
    );
    let gpu2 = gpu("host1_pci_0000_b1_00_0", numa[1], "VGPU", 4, &[owned]);

    let providers = |query: &[(&str, &str)]| -> Vec<Vec<Uuid>> {
        let ac = client.allocation_candidates(query).unwrap();
        let mut found: Vec<Vec<Uuid>> = ac
            .allocation_requests
            .iter()
            .map(|r| r.allocations.keys().copied().collect())
            .collect();
        found.iter_mut().for_each(|rps| rps.sort());
        found.sort();
        found
    };
    let sorted = |mut v: Vec<Uuid>| {
        v.sort();
        v
    };

    let mut vgpu = providers(&[("resources", "VGPU:1")]);
    vgpu.sort();
    let mut want = vec![vec![gpu0], vec![gpu2]];
    want.sort();
    assert_eq!(vgpu, want);
    // Placement never splits one class across providers: 5 VGPUs fit nowhere.
    assert!(providers(&[("resources", "VGPU:5")]).is_empty());
    assert_eq!(
        providers(&[("resources", "CUSTOM_MIG_3G_40GB:2")]),
        [vec![gpu1]]
    );
    assert_eq!(
        providers(&[
            ("resources", "CUSTOM_MIG_3G_40GB:1"),
            ("required", "CUSTOM_VGPUD_MIG_CAPABLE"),
        ]),
        [vec![gpu1]]
    );
    assert!(
        providers(&[
            ("resources", "VGPU:1"),
            ("required", "CUSTOM_VGPUD_MIG_CAPABLE")
        ])
        .is_empty()
    );

    // A vGPU and a MIG slice: without locality any VGPU GPU pairs with gpu1. same_subtree
    // (1.36) wants the providers of its groups rooted at one of them, so sibling GPUs need a
    // resourceless group for their NUMA provider (Nova's `required_NUMA=HW_NUMA_ROOT` form):
    // `same_subtree=_A,_B` alone matches no siblings.
    let a_and_b = [
        ("resources_A", "VGPU:1"),
        ("resources_B", "CUSTOM_MIG_3G_40GB:1"),
        ("group_policy", "none"),
    ];
    let apart = providers(&a_and_b);
    let mut want = vec![sorted(vec![gpu0, gpu1]), sorted(vec![gpu2, gpu1])];
    want.sort();
    assert_eq!(apart, want);
    let siblings_only = [&a_and_b[..], &[("same_subtree", "_A,_B")]].concat();
    assert!(providers(&siblings_only).is_empty());
    let local = [
        &a_and_b[..],
        &[
            ("required_NUMA", "HW_NUMA_ROOT"),
            ("same_subtree", "_NUMA,_A,_B"),
        ],
    ]
    .concat();
    assert_eq!(providers(&local), [sorted(vec![gpu0, gpu1])]);
    let ac = client.allocation_candidates(&local).unwrap();
    let mappings = &ac.allocation_requests[0].mappings;
    assert_eq!(mappings["_A"], [gpu0]);
    assert_eq!(mappings["_B"], [gpu1]);
    assert_eq!(mappings["_NUMA"], [numa[0]]);
    assert!(ac.provider_summaries.contains_key(&gpu0));

    // A query Placement refuses: a 400 with its reason.
    let err = client
        .allocation_candidates(&[("resources", "VGPU:x")])
        .unwrap_err();
    assert!(matches!(err, Error::Http { status: 400, .. }), "{err:?}");
}

#[test]
fn consumer_allocations_are_put_read_and_deleted() {
    let Some(peer) = placement() else { return };
    let client = admin_client(&peer.url());
    let (_, gpu) = host_with_gpu(&client, "host1", 4);
    let consumer = Uuid::new_v4();

    let none = client.consumer_allocations(consumer).unwrap();
    assert!(none.allocations.is_empty());
    assert_eq!(none.consumer_generation, None);

    let claim = allocation(gpu, "VGPU", 2, None);
    client.put_consumer_allocations(consumer, &claim).unwrap();
    let read = client.consumer_allocations(consumer).unwrap();
    assert_eq!(read.allocations[&gpu].resources["VGPU"], 2);
    assert_eq!(read.consumer_generation, Some(1));
    assert_eq!(read.project_id, claim.project_id);
    assert_eq!(read.consumer_type.as_deref(), Some("INSTANCE"));

    let on_gpu = client.provider_allocations(gpu).unwrap();
    assert_eq!(on_gpu.allocations[&consumer].resources["VGPU"], 2);

    // The consumer exists now: a write claiming it is new is a generation conflict.
    let err = client
        .put_consumer_allocations(consumer, &allocation(gpu, "VGPU", 1, None))
        .unwrap_err();
    assert!(err.is_generation_conflict(), "{err:?}");
    // What was read can be written back (its per-provider generations are not sent).
    let mut resized = read.clone();
    resized
        .allocations
        .get_mut(&gpu)
        .unwrap()
        .resources
        .insert("VGPU".into(), 3);
    client.put_consumer_allocations(consumer, &resized).unwrap();
    assert_eq!(
        client.consumer_allocations(consumer).unwrap().allocations[&gpu].resources["VGPU"],
        3
    );

    // More than the GPU has: refused, nothing changes.
    let other = Uuid::new_v4();
    let err = client
        .put_consumer_allocations(other, &allocation(gpu, "VGPU", 2, None))
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
    assert!(!err.is_generation_conflict());
    assert!(
        client
            .consumer_allocations(other)
            .unwrap()
            .allocations
            .is_empty()
    );

    client.delete_consumer_allocations(consumer).unwrap();
    assert!(
        client
            .consumer_allocations(consumer)
            .unwrap()
            .allocations
            .is_empty()
    );
    assert!(
        client
            .provider_allocations(gpu)
            .unwrap()
            .allocations
            .is_empty()
    );
    let err = client.delete_consumer_allocations(consumer).unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
}

#[test]
fn an_inventory_in_use_cannot_be_deleted() {
    let Some(peer) = placement() else { return };
    let client = admin_client(&peer.url());
    let (_, gpu) = host_with_gpu(&client, "host1", 4);
    client
        .put_consumer_allocations(Uuid::new_v4(), &allocation(gpu, "VGPU", 1, None))
        .unwrap();
    let generation = client
        .inventories(gpu)
        .unwrap()
        .resource_provider_generation;

    let err = client
        .set_inventories(gpu, generation, &BTreeMap::new())
        .unwrap_err();
    match &err {
        Error::Conflict { code, .. } => {
            assert_eq!(code.as_deref(), Some("placement.inventory.inuse"), "{err}")
        }
        other => panic!("{other:?}"),
    }
    assert!(!err.is_generation_conflict());
    assert_eq!(client.inventories(gpu).unwrap().inventories.len(), 1);

    // Shrinking below what is used is refused too; reserving it all is accepted.
    let all_reserved = inventories(&[(
        "VGPU",
        Inventory {
            reserved: 4,
            ..Inventory::whole(4)
        },
    )]);
    client
        .set_inventories(gpu, generation, &all_reserved)
        .unwrap();
}

#[test]
fn a_stopped_placement_is_unavailable_and_back_with_its_data() {
    let Some(mut peer) = placement() else { return };
    let client = admin_client(&peer.url());
    let root = client.create_provider("host1", None, None).unwrap();

    peer.stop();
    let err = client.provider_named("host1").unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    let err = client
        .set_inventories(root.uuid, 0, &inventories(&[("VGPU", Inventory::whole(1))]))
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");

    peer.start_again().unwrap();
    assert_eq!(client.provider_named("host1").unwrap(), Some(root));
}

#[test]
fn tokens_are_checked_by_placement() {
    let Some(peer) = placement() else { return };
    // noauth2: any token but "admin" lacks the admin role.
    let err = client_with_token(&peer.url(), "nobody")
        .provider_named("host1")
        .unwrap_err();
    assert!(matches!(err, Error::Denied { status: 403, .. }), "{err:?}");
}

#[test]
fn https_placement_is_reached_with_its_ca_and_refused_without() {
    let dir = tempfile::tempdir().unwrap();
    let ca = testkit::tls::test_ca(dir.path());
    let Some(peer) = PlacementPeer::start_tls(&ca.cert, &ca.key).unwrap() else {
        return;
    };
    assert!(peer.url().starts_with("https://127.0.0.1:"));
    let config = |ca_file: Option<std::path::PathBuf>| ClientConfig {
        endpoint: Some(peer.url()),
        auth: Auth::NoAuth {
            token: "admin".into(),
        },
        ca_file,
        timeout: Duration::from_secs(10),
    };

    let trusted = Client::new(config(Some(ca.ca_cert.clone()))).unwrap();
    let root = trusted.create_provider("host1", None, None).unwrap();
    assert_eq!(trusted.provider_named("host1").unwrap(), Some(root));

    // The webpki roots do not include the test CA.
    let err = Client::new(config(None))
        .unwrap()
        .provider_named("host1")
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(err.to_string().contains("ca_file"), "{err}");

    // Trusting another CA is no better.
    let other_dir = tempfile::tempdir().unwrap();
    let other = testkit::tls::test_ca(other_dir.path());
    let err = Client::new(config(Some(other.ca_cert)))
        .unwrap()
        .provider_named("host1")
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
}
