//! The D-Bus API on the system bus: `io.vgpud.Agent1`.

use agent::service::Service;

/// The well-known bus name.
pub const BUS_NAME: &str = "io.vgpud.Agent1";
/// The manager object's path.
pub const MANAGER_PATH: &str = "/io/vgpud/Agent1";

/// The manager object.
struct Manager {
    service: Service,
}

#[zbus::interface(name = "io.vgpud.Agent1.Manager")]
impl Manager {
    /// The agent's version.
    #[zbus(property)]
    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_owned()
    }

    /// The host inventory as JSON (what `vgpud inventory --json` prints).
    fn inventory_json(&self) -> zbus::fdo::Result<String> {
        serde_json::to_string(&self.service.host())
            .map_err(|e| zbus::fdo::Error::Failed(e.to_string()))
    }
}

/// Connects to the system bus (or `DBUS_SYSTEM_BUS_ADDRESS`), serves the objects and takes the
/// well-known name without replacing another owner.
pub async fn serve(service: Service) -> zbus::Result<zbus::Connection> {
    zbus::connection::Builder::system()
        .serve_at(MANAGER_PATH, Manager { service })
        .name(BUS_NAME)
        .allow_name_replacements(false)
        .replace_existing_names(false)
        .build()
        .await
}
