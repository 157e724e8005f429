//! Tenants' consumer and VM names over D-Bus need `io.vgpud.read-tenants` (root: always): the
//! JSON methods redact them for anyone else, and the public properties always do. A real
//! private `dbus-daemon` and the fake polkit (`dbus_common`); the tests run as root, so the
//! agent is told to ask polkit for root too where a test stands for an unprivileged caller.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod dbus_common;

use std::collections::HashMap;

use agent::service::Service;
use api::dbus::{self, DbusOptions, MANAGER_PATH};
use dbus_common::{Bus, FakePolkit, call};
use zbus::{Connection, OwnedObjectPath, OwnedVariant};

const MANAGER: &str = "io.vgpud.Agent1.Manager";
const SLICE: &str = "io.vgpud.Agent1.Slice";
const REDACTED: &str = "(redacted)";

/// The agent on a bus; keep the whole tuple alive for the test.
async fn serve(
    bus: &Bus,
    root_asks_polkit: bool,
) -> (Connection, Service, sim::SimHost, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let (sim, service) = testkit::service("dgx-a100", state.path());
    let builder = zbus::connection::Builder::address(bus.address.as_str());
    let options = DbusOptions {
        root_asks_polkit,
        ..DbusOptions::default()
    };
    let conn = dbus::serve_with(service.clone(), builder, options)
        .await
        .unwrap();
    (conn, service, sim, state)
}

async fn allocate(conn: &Connection) -> (String, Vec<OwnedObjectPath>) {
    let options: HashMap<String, OwnedVariant> = HashMap::new();
    call(
        conn,
        MANAGER_PATH,
        MANAGER,
        "Allocate",
        &("tenant-nova", "1g.10gb", 1u32, options),
    )
    .await
    .unwrap()
}

async fn json(conn: &Connection, path: &str, iface: &str, method: &str) -> serde_json::Value {
    let text: String = call(conn, path, iface, method, &()).await.unwrap();
    serde_json::from_str(&text).unwrap()
}

async fn property(conn: &Connection, path: &str, name: &str) -> String {
    let v: OwnedVariant = call(
        conn,
        path,
        "org.freedesktop.DBus.Properties",
        "Get",
        &(SLICE, name),
    )
    .await
    .unwrap();
    String::try_from(v).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_need_read_tenants() {
    let Some(bus) = Bus::start() else { return };
    let _agent = serve(&bus, true).await;
    let (fake, _polkit) = FakePolkit::serve(&bus).await;
    let admin = bus.client().await;
    let other = bus.client().await;
    fake.allow(&admin, "io.vgpud.manage");
    let (id, paths) = allocate(&admin).await;
    let slice = paths[0].as_str();

    // Not authorised for read-tenants (admin only manages): redacted everywhere.
    for conn in [&admin, &other] {
        let all = json(conn, MANAGER_PATH, MANAGER, "AllocationsJson").await;
        assert_eq!(all[0]["consumer"], REDACTED, "{all}");
        let one: String = call(conn, MANAGER_PATH, MANAGER, "AllocationJson", &(&id,))
            .await
            .unwrap();
        assert!(!one.contains("tenant-nova"), "{one}");
        let s = json(conn, slice, SLICE, "Json").await;
        assert_eq!(s["consumer"], REDACTED, "{s}");
        let slices = json(conn, MANAGER_PATH, MANAGER, "SlicesJson").await;
        assert!(!slices.to_string().contains("tenant-nova"), "{slices}");
    }
    // Properties are public: always redacted, even for an authorised caller.
    fake.allow(&other, "io.vgpud.read-tenants");
    assert_eq!(property(&other, slice, "Consumer").await, REDACTED);

    // Authorised: the names.
    let all = json(&other, MANAGER_PATH, MANAGER, "AllocationsJson").await;
    assert_eq!(all[0]["consumer"], "tenant-nova", "{all}");
    let s = json(&other, slice, SLICE, "Json").await;
    assert_eq!(s["consumer"], "tenant-nova", "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_reads_names_without_asking_polkit() {
    let Some(bus) = Bus::start() else { return };
    let _agent = serve(&bus, false).await;
    let (fake, _polkit) = FakePolkit::serve(&bus).await;
    let root = bus.client().await; // the tests run as root
    fake.allow(&root, "io.vgpud.manage");
    allocate(&root).await;
    let all = json(&root, MANAGER_PATH, MANAGER, "AllocationsJson").await;
    assert_eq!(all[0]["consumer"], "tenant-nova", "{all}");
    let asked = fake.asked.lock().unwrap();
    assert!(
        !asked.iter().any(|a| a.action == "io.vgpud.read-tenants"),
        "root is not asked about"
    );
}
