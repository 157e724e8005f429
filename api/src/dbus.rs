//! The D-Bus API on the system bus, for operators with `busctl`: well-known name
//! `io.vgpud.Agent1`, a manager object at `/io/vgpud/Agent1` (with an ObjectManager), one object
//! per GPU under `/io/vgpud/Agent1/gpu/` and one per owned slice under `/io/vgpud/Agent1/slice/`.
//!
//! A thin adapter over [`Service`]: it translates arguments, errors and events, and holds no
//! business logic. Arguments are mapped onto the REST API's wire types and checked by their code
//! (`args`), and JSON answers are those types too, so both front ends accept, refuse and show
//! exactly the same things. Reading is open to every caller the bus policy lets through; every mutating
//! method asks polkit (`io.vgpud.manage`, `io.vgpud.layout`) about the caller's bus name and
//! refuses when polkit says no or cannot answer. Every service call runs on `spawn_blocking`.
//! The interfaces, errors and `busctl` examples are in `docs/dbus.md`.
//!
//! It must not decide anything the engine decides (what to create, where, whether a request is
//! sensible beyond its wire types), and it must never take the name from another instance.

/// The argument parsers, public so the fuzz targets (`fuzz/`) call exactly what the methods call.
pub mod args;
mod error;
mod objects;
mod paths;
mod polkit;
mod redact;
mod sync;
mod view;

use std::sync::Arc;

use agent::service::Service;
use zbus::Connection;
use zbus::fdo::{ObjectManager, RequestNameFlags};

pub use args::MAX_LAYOUTS_JSON;
pub use error::{DbusError, ERROR_PREFIX, error_name_for_code};
pub use paths::{
    GPU_PREFIX, MANAGER_PATH, SLICE_PREFIX, gpu_path, parse_gpu_path, parse_slice_path, slice_path,
};
pub use polkit::{Action, PolkitTimeouts};

/// The well-known bus name.
pub const BUS_NAME: &str = "io.vgpud.Agent1";
/// The manager's interface.
pub const MANAGER_INTERFACE: &str = "io.vgpud.Agent1.Manager";
/// The GPU objects' interface.
pub const GPU_INTERFACE: &str = "io.vgpud.Agent1.Gpu";
/// The slice objects' interface.
pub const SLICE_INTERFACE: &str = "io.vgpud.Agent1.Slice";

/// How to serve.
#[derive(Debug, Clone, Copy, Default)]
pub struct DbusOptions {
    /// How long to wait for polkit before refusing.
    pub polkit_timeouts: PolkitTimeouts,
    /// Ask polkit about `io.vgpud.read-tenants` for root callers too (normally root reads
    /// tenants' names without asking). Off by default; the tests, which run as root, turn it on
    /// to stand for an unprivileged caller.
    pub root_asks_polkit: bool,
}

/// Connects to the system bus (`DBUS_SYSTEM_BUS_ADDRESS` when set), exports the objects and takes
/// the well-known name without allowing replacement. Fails with `zbus::Error::NameTaken` when
/// another connection owns the name. The objects follow the engine's events until the returned
/// connection is closed ([`Connection::close`]); dropping it is not enough, as the task that
/// follows the events holds its own handle (so `graceful_shutdown` would wait for ever).
pub async fn serve(service: Service) -> zbus::Result<Connection> {
    serve_with(
        service,
        zbus::connection::Builder::system(),
        DbusOptions::default(),
    )
    .await
}

/// [`serve`] on the bus a builder connects to (tests use a private bus).
pub async fn serve_with(
    service: Service,
    bus: zbus::connection::Builder<'static>,
    options: DbusOptions,
) -> zbus::Result<Connection> {
    let shared = Arc::new(sync::Shared::new(service.clone(), options));
    // Subscribed before the first sync, so no event between the two is missed.
    let events = service.subscribe();
    let conn = bus
        .serve_at(MANAGER_PATH, objects::ManagerObject::new(shared.clone()))
        .serve_at(MANAGER_PATH, ObjectManager)
        .build()
        .await?;
    // Every object exists before the name does: a client that sees the name sees the tree.
    shared.sync(&conn, true).await;
    // No ALLOW_REPLACEMENT: nobody may take the name from us. DO_NOT_QUEUE: a second instance
    // fails now instead of waiting in line to take over silently.
    conn.request_name_with_flags(BUS_NAME, RequestNameFlags::DO_NOT_QUEUE)
        .await?;
    tokio::spawn(sync::follow_events(shared, conn.clone(), events));
    Ok(conn)
}
