//! The D-Bus API through a real `dbus-daemon` (a private bus started by each test) with a fake
//! polkit authority on the same bus that answers per caller and action and records what it was
//! asked (`dbus_common`). Skipped, with a message, where `dbus-daemon` is not installed (a
//! failure when `CI` is set). The bus policy file and the real polkitd are exercised by
//! `tests/dbus/run`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod dbus_common;

use std::collections::HashMap;
use std::time::Duration;

use agent::service::Service;
use api::dbus::{self, BUS_NAME, DbusOptions, MANAGER_PATH, PolkitTimeouts};
use dbus_common::{Bus, FakePolkit, Mode, call, error_name};
use tokio_stream::StreamExt;
use zbus::message::Type as MessageType;
use zbus::{Connection, MatchRule, MessageStream, OwnedObjectPath, OwnedVariant};

const MANAGER: &str = "io.vgpud.Agent1.Manager";
const SLICE: &str = "io.vgpud.Agent1.Slice";
const GPU: &str = "io.vgpud.Agent1.Gpu";
const DENIED: &str = "org.freedesktop.DBus.Error.AccessDenied";

/// vgpud's D-Bus service over a simulated host, on a bus.
struct Agent {
    service: Service,
    conn: Connection,
    _sim: sim::SimHost,
    _state: tempfile::TempDir,
}

fn engine_on(profile: &str) -> (Service, sim::SimHost, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let (sim, service) = testkit::service(profile, state.path());
    (service, sim, state)
}

async fn serve_on(bus: &Bus, service: Service, options: DbusOptions) -> zbus::Result<Connection> {
    let builder = zbus::connection::Builder::address(bus.address.as_str());
    dbus::serve_with(service, builder, options).await
}

impl Agent {
    async fn start(bus: &Bus, profile: &str) -> Agent {
        Self::start_with(bus, profile, DbusOptions::default()).await
    }

    async fn start_with(bus: &Bus, profile: &str, options: DbusOptions) -> Agent {
        let (service, sim, state) = engine_on(profile);
        let conn = serve_on(bus, service.clone(), options).await.unwrap();
        Agent {
            service,
            conn,
            _sim: sim,
            _state: state,
        }
    }
}

async fn get<T>(conn: &Connection, path: &str, iface: &str, property: &str) -> T
where
    T: TryFrom<OwnedVariant>,
    T::Error: std::fmt::Debug,
{
    try_get(conn, path, iface, property).await.unwrap()
}

async fn try_get<T>(conn: &Connection, path: &str, iface: &str, property: &str) -> zbus::Result<T>
where
    T: TryFrom<OwnedVariant>,
    T::Error: std::fmt::Debug,
{
    let value: OwnedVariant = call(
        conn,
        path,
        "org.freedesktop.DBus.Properties",
        "Get",
        &(iface, property),
    )
    .await?;
    Ok(T::try_from(value).unwrap())
}

fn no_options() -> HashMap<String, OwnedVariant> {
    HashMap::new()
}

async fn allocate(
    conn: &Connection,
    consumer: &str,
    slice_type: &str,
    count: u32,
) -> zbus::Result<(String, Vec<OwnedObjectPath>)> {
    call(
        conn,
        MANAGER_PATH,
        MANAGER,
        "Allocate",
        &(consumer, slice_type, count, no_options()),
    )
    .await
}

async fn signals(conn: &Connection, interface: &str) -> MessageStream {
    let rule = MatchRule::builder()
        .msg_type(MessageType::Signal)
        .interface(interface)
        .build()
        .unwrap();
    MessageStream::for_match_rule(rule, conn, None)
        .await
        .unwrap()
}

/// The next signal named `member` on the stream, skipping others.
async fn next_signal(stream: &mut MessageStream, member: &str) -> zbus::Message {
    let wait = async {
        loop {
            let msg = stream.next().await.unwrap().unwrap();
            if msg.header().member().is_some_and(|m| m.as_str() == member) {
                return msg;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .unwrap_or_else(|_| panic!("no {member} signal within 10 s"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_open_and_the_tree_mirrors_the_host() {
    let Some(bus) = Bus::start() else { return };
    let agent = Agent::start(&bus, "dgx-a100").await;
    let client = bus.client().await;

    let xml: String = call(
        &client,
        MANAGER_PATH,
        "org.freedesktop.DBus.Introspectable",
        "Introspect",
        &(),
    )
    .await
    .unwrap();
    for needle in [
        "interface name=\"io.vgpud.Agent1.Manager\"",
        "interface name=\"org.freedesktop.DBus.ObjectManager\"",
        "method name=\"Allocate\"",
        "signal name=\"AllocationCreated\"",
        "node name=\"gpu\"",
    ] {
        assert!(xml.contains(needle), "{needle} missing from\n{xml}");
    }
    let version: String = get(&client, MANAGER_PATH, MANAGER, "Version").await;
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    let hostname: String = get(&client, MANAGER_PATH, MANAGER, "Hostname").await;
    assert_eq!(hostname, "dgx-a100-sim");

    let gpus: Vec<OwnedObjectPath> = get(&client, MANAGER_PATH, MANAGER, "Gpus").await;
    assert_eq!(gpus.len(), 8);
    let inventory = agent.service.host();
    for (path, gpu) in gpus.iter().zip(&inventory.gpus) {
        assert_eq!(path, &dbus::gpu_path(&gpu.pci_address));
        let address: String = get(&client, path, GPU, "Address").await;
        assert_eq!(address, gpu.pci_address.to_string());
        let mig: bool = get(&client, path, GPU, "MigEnabled").await;
        assert!(mig);
        let node: i32 = get(&client, path, GPU, "NumaNode").await;
        assert_eq!(node, i32::from(gpu.numa_node.unwrap().0));
    }
    let json: String = call(&client, gpus[0].as_str(), GPU, "Json", &())
        .await
        .unwrap();
    let detail: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(
        json.contains(&inventory.gpus[0].pci_address.to_string()),
        "{detail}"
    );

    let inv_json: String = call(&client, MANAGER_PATH, MANAGER, "InventoryJson", &())
        .await
        .unwrap();
    let inv: serde_json::Value = serde_json::from_str(&inv_json).unwrap();
    assert_eq!(inv["gpus"].as_array().unwrap().len(), 8);

    let managed: zbus::fdo::ManagedObjects = call(
        &client,
        MANAGER_PATH,
        "org.freedesktop.DBus.ObjectManager",
        "GetManagedObjects",
        &(),
    )
    .await
    .unwrap();
    // zbus also lists the bare parent node `/io/vgpud/Agent1/gpu`, with no interface.
    let mut keys: Vec<&str> = managed
        .iter()
        .filter(|(_, ifaces)| !ifaces.is_empty())
        .map(|(k, _)| k.as_str())
        .collect();
    keys.sort();
    assert_eq!(keys.len(), 8, "the GPUs and no slice yet: {keys:?}");
    let props = &managed[&gpus[0]];
    let gpu_props = props
        .iter()
        .find(|(k, _)| k.as_str() == GPU)
        .map(|(_, v)| v)
        .unwrap();
    assert_eq!(gpu_props.len(), 14, "{gpu_props:?}");
    let slices: Vec<OwnedObjectPath> = get(&client, MANAGER_PATH, MANAGER, "Slices").await;
    assert!(slices.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutations_fail_closed_when_polkit_cannot_answer() {
    let Some(bus) = Bus::start() else { return };
    let options = DbusOptions {
        polkit_timeouts: PolkitTimeouts {
            plain: Duration::from_millis(500),
            interactive: Duration::from_millis(500),
        },
        ..DbusOptions::default()
    };
    let agent = Agent::start_with(&bus, "dgx-a100", options).await;
    let client = bus.client().await;

    // No polkit on the bus at all.
    let e = allocate(&client, "nova", "1g.10gb", 1).await.unwrap_err();
    assert_eq!(error_name(&e), DENIED, "{e}");
    let e = call::<_, String>(&client, MANAGER_PATH, MANAGER, "Reconcile", &())
        .await
        .unwrap_err();
    assert_eq!(error_name(&e), DENIED, "{e}");

    // A polkit that fails, then one that never answers, then one that wants a password.
    let (fake, _polkit) = FakePolkit::serve(&bus).await;
    fake.allow(&client, "io.vgpud.manage");
    for mode in [Mode::Fail, Mode::Hang, Mode::Challenge] {
        fake.set_mode(mode);
        let started = std::time::Instant::now();
        let e = allocate(&client, "nova", "1g.10gb", 1).await.unwrap_err();
        assert_eq!(error_name(&e), DENIED, "{mode:?}: {e}");
        if mode == Mode::Challenge {
            assert!(e.to_string().contains("authentication is required"), "{e}");
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{mode:?}");
    }
    assert!(agent.service.allocations().is_empty());
    assert!(agent.service.slices().is_empty());
    // Reading still works.
    let gpus: Vec<OwnedObjectPath> = get(&client, MANAGER_PATH, MANAGER, "Gpus").await;
    assert_eq!(gpus.len(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorized_caller_allocates_and_the_objects_follow() {
    let Some(bus) = Bus::start() else { return };
    let agent = Agent::start(&bus, "dgx-a100").await;
    let (fake, _polkit) = FakePolkit::serve(&bus).await;
    let admin = bus.client().await;
    let other = bus.client().await;
    fake.allow(&admin, "io.vgpud.manage");
    let mut manager_signals = signals(&other, MANAGER).await;
    let mut om_signals = signals(&other, "org.freedesktop.DBus.ObjectManager").await;
    let mut prop_signals = signals(&other, "org.freedesktop.DBus.Properties").await;

    // Someone polkit does not know is refused, and nothing happens.
    let e = allocate(&other, "nova", "1g.10gb", 2).await.unwrap_err();
    assert_eq!(error_name(&e), DENIED, "{e}");
    assert!(agent.service.allocations().is_empty());

    let (allocation, paths) = allocate(&admin, "nova", "1g.10gb", 2).await.unwrap();
    assert_eq!(paths.len(), 2);
    {
        let asked = fake.asked.lock().unwrap();
        let last = asked.last().unwrap();
        assert_eq!(last.subject_kind, "system-bus-name");
        assert_eq!(last.name, admin.unique_name().unwrap().as_str());
        assert_eq!(last.action, "io.vgpud.manage");
        assert_eq!(last.flags & !1, 0);
        assert!(
            asked
                .iter()
                .any(|a| a.name == other.unique_name().unwrap().as_str())
        );
    }
    // The reply's objects exist as soon as the reply arrives, with the engine's view.
    for path in &paths {
        let state: String = get(&other, path, SLICE, "State").await;
        assert_eq!(state, "allocated");
        // Public properties never carry tenants' names (io.vgpud.read-tenants: JSON methods).
        let consumer: String = get(&other, path, SLICE, "Consumer").await;
        assert_eq!(consumer, "(redacted)");
        let owner: String = get(&other, path, SLICE, "Allocation").await;
        assert_eq!(owner, allocation);
        let slice_type: String = get(&other, path, SLICE, "Type").await;
        assert_eq!(slice_type, "1g.10gb");
        let id: String = get(&other, path, SLICE, "Id").await;
        assert_eq!(dbus::slice_path(&id.parse().unwrap()), *path);
    }
    let listed: Vec<OwnedObjectPath> = get(&other, MANAGER_PATH, MANAGER, "Slices").await;
    assert_eq!(listed.len(), 2);
    let allocations: Vec<String> = get(&other, MANAGER_PATH, MANAGER, "Allocations").await;
    assert_eq!(allocations, vec![allocation.clone()]);

    // Signals: the ObjectManager announced the slices, the manager the allocation.
    let added = next_signal(&mut om_signals, "InterfacesAdded").await;
    let (added_path, _): (
        OwnedObjectPath,
        HashMap<String, HashMap<String, OwnedVariant>>,
    ) = added.body().deserialize().unwrap();
    assert!(paths.contains(&added_path), "{added_path}");
    let created = next_signal(&mut manager_signals, "AllocationCreated").await;
    let (id, consumer, slices): (String, String, Vec<OwnedObjectPath>) =
        created.body().deserialize().unwrap();
    assert_eq!(
        (id.as_str(), consumer.as_str()),
        (allocation.as_str(), "(redacted)")
    );
    assert_eq!(slices, paths);

    // Releasing: the slices stay, free, and say so with PropertiesChanged.
    let e = call::<_, ()>(
        &other,
        MANAGER_PATH,
        MANAGER,
        "Release",
        &(allocation.as_str(),),
    )
    .await
    .unwrap_err();
    assert_eq!(error_name(&e), DENIED);
    call::<_, ()>(
        &admin,
        MANAGER_PATH,
        MANAGER,
        "Release",
        &(allocation.as_str(),),
    )
    .await
    .unwrap();
    let state: String = get(&other, &paths[0], SLICE, "State").await;
    assert_eq!(state, "ready");
    let consumer: String = get(&other, &paths[0], SLICE, "Consumer").await;
    assert_eq!(consumer, "");
    loop {
        let changed = next_signal(&mut prop_signals, "PropertiesChanged").await;
        let (iface, values, _): (String, HashMap<String, OwnedVariant>, Vec<String>) =
            changed.body().deserialize().unwrap();
        if iface == SLICE && changed.header().path().unwrap().as_str() == paths[0].as_str() {
            let state = String::try_from(values["State"].try_clone().unwrap()).unwrap();
            if state == "ready" {
                assert!(values.contains_key("Consumer"));
                break;
            }
        }
    }
    next_signal(&mut manager_signals, "AllocationReleased").await;

    // Destroying through the slice object removes it.
    call::<_, ()>(&admin, paths[0].as_str(), SLICE, "Destroy", &())
        .await
        .unwrap();
    let e = try_get::<String>(&other, &paths[0], SLICE, "State")
        .await
        .unwrap_err();
    assert!(
        error_name(&e).starts_with("org.freedesktop.DBus.Error.Unknown"),
        "{e}"
    );
    let removed = next_signal(&mut om_signals, "InterfacesRemoved").await;
    let (removed_path, ifaces): (OwnedObjectPath, Vec<String>) =
        removed.body().deserialize().unwrap();
    assert_eq!(removed_path, paths[0]);
    assert_eq!(ifaces, vec![SLICE.to_owned()]);
    let destroyed = next_signal(&mut manager_signals, "SliceDestroyed").await;
    let (path, _, _): (OwnedObjectPath, String, String) = destroyed.body().deserialize().unwrap();
    assert_eq!(path, paths[0]);
    assert_eq!(agent.service.slices().len(), 1);
    let listed: Vec<OwnedObjectPath> = get(&other, MANAGER_PATH, MANAGER, "Slices").await;
    assert_eq!(listed, vec![paths[1].clone()]);

    // The layout action is separate from the manage action.
    let layouts = r#"[{"name": "small", "selector": {"indices": [7]}, "slices": [{"type": "1g.10gb", "count": 7}]}]"#;
    let e = call::<_, String>(&admin, MANAGER_PATH, MANAGER, "ApplyLayouts", &(layouts,))
        .await
        .unwrap_err();
    assert_eq!(error_name(&e), DENIED);
    fake.allow(&admin, "io.vgpud.layout");
    let view: String = call(&admin, MANAGER_PATH, MANAGER, "ApplyLayouts", &(layouts,))
        .await
        .unwrap();
    let view: serde_json::Value = serde_json::from_str(&view).unwrap();
    assert_eq!(view["status"][0]["state"], "applied", "{view}");
    let gpu7 = dbus::gpu_path(&agent.service.host().gpus[7].pci_address);
    let on_gpu7: Vec<OwnedObjectPath> = get(&other, &gpu7, GPU, "Slices").await;
    assert_eq!(on_gpu7.len(), 7);
    next_signal(&mut manager_signals, "LayoutStatus").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_the_engine_codes() {
    let Some(bus) = Bus::start() else { return };
    let agent = Agent::start(&bus, "dgx-a100").await;
    let (fake, _polkit) = FakePolkit::serve(&bus).await;
    let admin = bus.client().await;
    fake.allow(&admin, "io.vgpud.manage");
    fake.allow(&admin, "io.vgpud.layout");

    let unknown = "6f1c2b7a-0d3e-4c5b-9a8f-1e2d3c4b5a69";
    let bad_option = HashMap::from([("colour".to_owned(), OwnedVariant::from(1u32))]);
    let cases: Vec<(&str, zbus::Result<()>)> = vec![
        (
            "io.vgpud.Agent1.Error.NotFound",
            call(&admin, MANAGER_PATH, MANAGER, "Release", &(unknown,)).await,
        ),
        (
            "io.vgpud.Agent1.Error.NotFound",
            call(&admin, MANAGER_PATH, MANAGER, "DestroySlice", &(unknown,)).await,
        ),
        (
            "io.vgpud.Agent1.Error.InvalidRequest",
            call(&admin, MANAGER_PATH, MANAGER, "Release", &("../../etc",)).await,
        ),
        (
            "io.vgpud.Agent1.Error.InvalidRequest",
            call(
                &admin,
                MANAGER_PATH,
                MANAGER,
                "Release",
                &(unknown.to_uppercase(),),
            )
            .await,
        ),
        (
            "io.vgpud.Agent1.Error.InvalidRequest",
            call(
                &admin,
                MANAGER_PATH,
                MANAGER,
                "ApplyLayouts",
                &("{not json",),
            )
            .await
            .map(|_: String| ()),
        ),
        (
            "io.vgpud.Agent1.Error.InvalidRequest",
            call(
                &admin,
                MANAGER_PATH,
                MANAGER,
                "CreateSlice",
                &("0000:07:00.0", "mig", "", no_options()),
            )
            .await
            .map(|_: OwnedObjectPath| ()),
        ),
        (
            "io.vgpud.Agent1.Error.InvalidRequest",
            allocate_with(&admin, "nova", "1g.10gb", 1, bad_option).await,
        ),
        (
            "org.freedesktop.DBus.Error.InvalidArgs",
            call(&admin, MANAGER_PATH, MANAGER, "Release", &(1u32,)).await,
        ),
    ];
    for (want, got) in cases {
        let e = got.unwrap_err();
        assert_eq!(error_name(&e), want, "{e}");
    }
    let e = allocate(&admin, "nova", "7g.80gb", 9).await.unwrap_err();
    assert_eq!(error_name(&e), "io.vgpud.Agent1.Error.NoCapacity", "{e}");
    let e = allocate(&admin, "nova", "no-such-type", 1)
        .await
        .unwrap_err();
    assert_eq!(
        error_name(&e),
        "io.vgpud.Agent1.Error.InvalidRequest",
        "{e}"
    );
    // An explicit slice handed over at once cannot be destroyed while allocated.
    let gpu = agent.service.host().gpus[0].pci_address.to_string();
    let options = HashMap::from([(
        "consumer".to_owned(),
        OwnedVariant::try_from(zbus::Variant::from("nova")).unwrap(),
    )]);
    let path: OwnedObjectPath = call(
        &admin,
        MANAGER_PATH,
        MANAGER,
        "CreateSlice",
        &(gpu.as_str(), "mig", "3g.40gb", options),
    )
    .await
    .unwrap();
    let e = call::<_, ()>(&admin, path.as_str(), SLICE, "Destroy", &())
        .await
        .unwrap_err();
    assert_eq!(error_name(&e), "io.vgpud.Agent1.Error.Conflict", "{e}");
    let json: String = call(&admin, path.as_str(), SLICE, "Json", &())
        .await
        .unwrap();
    let slice: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(slice["state"], "allocated", "{slice}");
}

async fn allocate_with(
    conn: &Connection,
    consumer: &str,
    slice_type: &str,
    count: u32,
    options: HashMap<String, OwnedVariant>,
) -> zbus::Result<()> {
    call(
        conn,
        MANAGER_PATH,
        MANAGER,
        "Allocate",
        &(consumer, slice_type, count, options),
    )
    .await
    .map(|_: (String, Vec<OwnedObjectPath>)| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_instance_cannot_take_the_name() {
    let Some(bus) = Bus::start() else { return };
    let first = Agent::start(&bus, "single-gpu").await;
    let (service, _sim, _state) = engine_on("single-gpu");
    let second = serve_on(&bus, service, DbusOptions::default()).await;
    assert!(matches!(second, Err(zbus::Error::NameTaken)), "{second:?}");
    // Asking to replace it does not work either: the owner did not allow replacement.
    let thief = bus.client().await;
    let reply = thief
        .request_name_with_flags(
            BUS_NAME,
            zbus::fdo::RequestNameFlags::REPLACE_EXISTING
                | zbus::fdo::RequestNameFlags::DO_NOT_QUEUE,
        )
        .await;
    assert!(matches!(reply, Err(zbus::Error::NameTaken)), "{reply:?}");
    let client = bus.client().await;
    let reply = client
        .call_method(
            Some("org.freedesktop.DBus"),
            "/org/freedesktop/DBus",
            Some("org.freedesktop.DBus"),
            "GetNameOwner",
            &(BUS_NAME,),
        )
        .await
        .unwrap();
    let owner: String = reply.body().deserialize().unwrap();
    assert_eq!(owner, first.conn.unique_name().unwrap().as_str());
}

/// `ImportLayouts` takes `POST /v1/layouts/import`'s body under the layout action: a dry run
/// answers the diff and changes nothing, the apply makes the config's GPU instances, and a bad
/// request gets the REST route's refusal as the engine's error name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_layouts_takes_the_rest_request() {
    let Some(bus) = Bus::start() else { return };
    let agent = Agent::start(&bus, "dgx-a100").await;
    let (fake, _polkit) = FakePolkit::serve(&bus).await;
    let admin = bus.client().await;
    let config = include_str!("../../tests/fixtures/mig-parted-config.yaml");
    let request = |dry_run: bool| {
        serde_json::json!({"format": "mig-parted", "config": "all-1g.10gb", "content": config, "dry_run": dry_run})
            .to_string()
    };
    let e = call::<_, String>(
        &admin,
        MANAGER_PATH,
        MANAGER,
        "ImportLayouts",
        &(request(true),),
    )
    .await
    .unwrap_err();
    assert_eq!(error_name(&e), DENIED);
    fake.allow(&admin, "io.vgpud.layout");
    let plan: String = call(
        &admin,
        MANAGER_PATH,
        MANAGER,
        "ImportLayouts",
        &(request(true),),
    )
    .await
    .unwrap();
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(plan["gpus"].as_array().unwrap().len(), 8, "{plan}");
    assert!(agent.service.slices().is_empty(), "a dry run makes nothing");
    let done: String = call(
        &admin,
        MANAGER_PATH,
        MANAGER,
        "ImportLayouts",
        &(request(false),),
    )
    .await
    .unwrap();
    let done: serde_json::Value = serde_json::from_str(&done).unwrap();
    assert!(
        done["result"]["status"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["state"] == "applied"),
        "{done}"
    );
    assert_eq!(agent.service.slices().len(), 56);
    let unknown = serde_json::json!({"format": "mig-parted", "config": "nope", "content": config});
    let e = call::<_, String>(
        &admin,
        MANAGER_PATH,
        MANAGER,
        "ImportLayouts",
        &(unknown.to_string(),),
    )
    .await
    .unwrap_err();
    assert_eq!(error_name(&e), "io.vgpud.Agent1.Error.NotFound", "{e}");
    let path = serde_json::json!({"format": "mdevctl", "definitions": [
        {"parent": "../../etc", "uuid": "b1c7a1d2-0000-4000-8000-000000000001", "content": "{}"}]});
    let e = call::<_, String>(
        &admin,
        MANAGER_PATH,
        MANAGER,
        "ImportLayouts",
        &(path.to_string(),),
    )
    .await
    .unwrap_err();
    assert_eq!(
        error_name(&e),
        "io.vgpud.Agent1.Error.InvalidRequest",
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_quarantines_and_releases_a_gpu_over_dbus() {
    let Some(bus) = Bus::start() else { return };
    let agent = Agent::start(&bus, "dgx-a100").await;
    let (fake, _polkit) = FakePolkit::serve(&bus).await;
    let admin = bus.client().await;
    let other = bus.client().await;
    fake.allow(&admin, "io.vgpud.manage");
    let mut manager_signals = signals(&other, MANAGER).await;
    let path = "/io/vgpud/Agent1/gpu/0000_07_00_0";

    let e = call::<_, String>(&other, path, GPU, "Quarantine", &("fan swap",))
        .await
        .unwrap_err();
    assert_eq!(error_name(&e), DENIED, "{e}");
    let e = call::<_, String>(&admin, path, GPU, "Quarantine", &("",))
        .await
        .unwrap_err();
    assert_eq!(
        error_name(&e),
        "io.vgpud.Agent1.Error.InvalidRequest",
        "{e}"
    );
    assert!(agent.service.engine().quarantines().is_empty());

    let json: String = call(&admin, path, GPU, "Quarantine", &("fan swap",))
        .await
        .unwrap();
    let record: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(record["source"], "operator");
    assert_eq!(record["reason"], "fan swap");
    let msg = next_signal(&mut manager_signals, "GpuQuarantined").await;
    let (gpu, reason, source): (String, String, String) = msg.body().deserialize().unwrap();
    let quarantined: bool = get(&other, path, GPU, "Quarantined").await;
    let why: String = get(&other, path, GPU, "QuarantineReason").await;
    assert!(quarantined);
    assert!(
        why.starts_with("GPU 0000:07:00.0 is quarantined since") && why.ends_with("fan swap"),
        "{why}"
    );
    assert_eq!(
        (gpu.as_str(), reason.as_str(), source.as_str()),
        ("0000:07:00.0", "fan swap", "operator")
    );

    let mut options = no_options();
    options.insert(
        "gpu".into(),
        OwnedVariant::try_from(zbus::Variant::from("0000:07:00.0")).unwrap(),
    );
    let e = call::<_, (String, Vec<OwnedObjectPath>)>(
        &admin,
        MANAGER_PATH,
        MANAGER,
        "Allocate",
        &("nova", "1g.10gb", 1u32, options),
    )
    .await
    .unwrap_err();
    assert_eq!(error_name(&e), "io.vgpud.Agent1.Error.Quarantined", "{e}");
    assert!(e.to_string().contains("fan swap"), "{e}");

    let _: String = call(&admin, path, GPU, "Release", &()).await.unwrap();
    let msg = next_signal(&mut manager_signals, "GpuReleased").await;
    let (gpu, how): (String, String) = msg.body().deserialize().unwrap();
    assert_eq!((gpu.as_str(), how.as_str()), ("0000:07:00.0", "operator"));
    let quarantined: bool = get(&other, path, GPU, "Quarantined").await;
    assert!(!quarantined);
    let e = call::<_, String>(&admin, path, GPU, "Release", &())
        .await
        .unwrap_err();
    assert_eq!(error_name(&e), "io.vgpud.Agent1.Error.Conflict", "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_gpu_and_its_return_are_signalled_with_its_slices() {
    let Some(bus) = Bus::start() else { return };
    let agent = Agent::start(&bus, "dgx-a100").await;
    let client = bus.client().await;
    let mut manager_signals = signals(&client, MANAGER).await;
    let service = agent.service.clone();
    let made = tokio::task::spawn_blocking(move || {
        service.allocate(agent::engine::AllocationRequest {
            consumer: "nova".into(),
            vm: None,
            request: agent::engine::SliceRequest::new("3g.40gb", 1),
            placement_consumer: None,
        })
    })
    .await
    .unwrap()
    .unwrap();
    let slice = made.slices[0];
    let gpu = agent.service.slices()[0].spec.gpu.to_string();

    agent._sim.remove_gpu(gpu.parse().unwrap()).unwrap();
    let service = agent.service.clone();
    tokio::task::spawn_blocking(move || service.reconcile())
        .await
        .unwrap()
        .unwrap();
    let removed = next_signal(&mut manager_signals, "DeviceRemoved").await;
    let (device, slices, reason): (String, Vec<OwnedObjectPath>, String) =
        removed.body().deserialize().unwrap();
    assert_eq!(device, gpu);
    assert_eq!(slices, vec![dbus::slice_path(&slice)]);
    assert_eq!(reason, format!("GPU {gpu} was removed from the PCI bus"));
    let state: String = get(&client, slices[0].as_str(), SLICE, "State").await;
    assert_eq!(state, "failed");

    agent._sim.add_gpu(gpu.parse().unwrap()).unwrap();
    let service = agent.service.clone();
    tokio::task::spawn_blocking(move || service.reconcile())
        .await
        .unwrap()
        .unwrap();
    let added = next_signal(&mut manager_signals, "DeviceAdded").await;
    let (device, slices): (String, Vec<OwnedObjectPath>) = added.body().deserialize().unwrap();
    assert_eq!((device, slices), (gpu, vec![dbus::slice_path(&slice)]));
}
