//! D-Bus and REST share the agent's one layout apply slot: an apply held by either front end
//! makes the other's apply a `conflict` (REST `409`, D-Bus `io.vgpud.Agent1.Error.Conflict`).
//! Both front ends here serve one [`agent::service::Service`] over a simulated host; the D-Bus
//! side runs on a private `dbus-daemon` with the fake polkit (`dbus_common`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod dbus_common;
mod rest_common;

use api::dbus::{self, DbusOptions, MANAGER_PATH};
use dbus_common::{Bus, FakePolkit, call, error_name};
use rest_common::{A100, Rig};
use serde_json::json;

const MANAGER: &str = "io.vgpud.Agent1.Manager";
const CONFLICT: &str = "io.vgpud.Agent1.Error.Conflict";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_layout_apply_at_a_time_across_rest_and_dbus() {
    let Some(bus) = Bus::start() else { return };
    let rig = Rig::start("dgx-a100").await;
    let builder = zbus::connection::Builder::address(bus.address.as_str());
    let _served = dbus::serve_with(rig.service.clone(), builder, DbusOptions::default())
        .await
        .unwrap();
    let (fake, _polkit) = FakePolkit::serve(&bus).await;
    let admin = bus.client().await;
    fake.allow(&admin, "io.vgpud.layout");
    let layouts = json!([{"name": "small", "selector": {"addresses": [A100]},
        "slices": [{"type": "1g.10gb", "count": 7}]}]);
    let text = layouts.to_string();

    // An apply in flight (held here as a front end holds it for its apply).
    let held = rig.service.claim_apply("held-by-test").unwrap();
    let e = call::<_, String>(&admin, MANAGER_PATH, MANAGER, "ApplyLayouts", &(&text,))
        .await
        .unwrap_err();
    assert_eq!(error_name(&e), CONFLICT, "{e}");
    assert!(e.to_string().contains("held-by-test"), "{e}");
    let put = rig
        .send_json("PUT", "/v1/layouts", &json!({"layouts": layouts}))
        .await;
    assert_eq!(put.status, 409);
    assert!(
        put.json()["message"]
            .as_str()
            .unwrap()
            .contains("held-by-test")
    );
    assert!(rig.service.layouts().layouts.is_empty(), "nothing applied");

    // Invalid layouts are refused before the slot, over D-Bus as over REST (422 there).
    let bad = r#"[{"name": "x", "selector": {"indices": [0]}, "slices": [{"type": "nope", "count": 1}]}]"#;
    let e = call::<_, String>(&admin, MANAGER_PATH, MANAGER, "ApplyLayouts", &(bad,))
        .await
        .unwrap_err();
    assert_ne!(error_name(&e), CONFLICT, "checks come first: {e}");

    // Freed, D-Bus applies; the slot is free again afterwards for REST.
    drop(held);
    let _: String = call(&admin, MANAGER_PATH, MANAGER, "ApplyLayouts", &(&text,))
        .await
        .unwrap();
    assert_eq!(rig.service.layouts().layouts.len(), 1);
    let claim = rig
        .service
        .claim_apply("after")
        .expect("D-Bus freed the slot");
    drop(claim);
}
