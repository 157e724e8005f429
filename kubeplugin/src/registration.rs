//! Serving every resource and keeping each registered with kubelet.
//!
//! kubelet learns of a plugin only from a `Register` call on its `kubelet.sock`, and forgets
//! all plugins when it restarts: it re-creates `kubelet.sock` and removes the plugins' sockets
//! (Kubernetes docs, "Device plugin implementation": a plugin must watch for the socket being
//! re-created and register again). So every second the registry checks the socket's identity
//! and its own sockets, serves again what vanished and registers again with a new kubelet.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use tokio::sync::watch;

use crate::context::Context;
use crate::plugin::options;
use crate::server::{FileId, Served, file_id, socket_name};
use crate::unix;
use crate::wire::deviceplugin::RegisterRequest;
use crate::wire::deviceplugin::registration_client::RegistrationClient;

/// The API version vgpud speaks, as `Register` names it.
pub const API_VERSION: &str = "v1beta1";
/// How often kubelet's socket and the plugins' sockets are checked.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// One served resource and the kubelet it is registered with.
struct Entry {
    served: Served,
    /// The `kubelet.sock` it was registered through; `None`: not registered yet.
    registered_with: Option<FileId>,
    /// The last registration failure, logged once until it changes.
    last_error: Option<String>,
}

/// Serves and registers every resource of the catalog until `stop`; then stops the servers
/// and removes their sockets.
pub async fn run(ctx: Context, mut stop: watch::Receiver<bool>) {
    let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
    let mut catalog = ctx.catalog.clone();
    let kubelet_socket = ctx.config.device_plugin_dir.join("kubelet.sock");
    loop {
        let resources: Vec<String> = catalog
            .borrow_and_update()
            .resources
            .keys()
            .cloned()
            .collect();
        for resource in resources {
            if !entries.contains_key(&resource) {
                start(&ctx, &resource, &mut entries);
            }
        }
        let kubelet = file_id(&kubelet_socket);
        let names: Vec<String> = entries.keys().cloned().collect();
        for resource in names {
            keep_registered(&ctx, &resource, &mut entries, kubelet, &kubelet_socket).await;
        }
        tokio::select! {
            () = tokio::time::sleep(CHECK_EVERY) => {}
            changed = catalog.changed() => if changed.is_err() { break },
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    for (_, entry) in entries {
        entry.served.stop().await;
    }
}

fn start(ctx: &Context, resource: &str, entries: &mut BTreeMap<String, Entry>) {
    match Served::start(ctx, resource) {
        Ok(served) => {
            tracing::info!(resource, socket = %served.socket.display(), "serving the device plugin");
            entries.insert(
                resource.to_owned(),
                Entry {
                    served,
                    registered_with: None,
                    last_error: None,
                },
            );
        }
        Err(e) => tracing::warn!(
            resource,
            dir = %ctx.config.device_plugin_dir.display(),
            "cannot serve the device plugin (retrying every second): {e}"
        ),
    }
}

/// Serves the resource again when its socket vanished or its server ended, and registers it
/// when the kubelet now listening is not the one it registered with.
async fn keep_registered(
    ctx: &Context,
    resource: &str,
    entries: &mut BTreeMap<String, Entry>,
    kubelet: Option<FileId>,
    kubelet_socket: &Path,
) {
    let broken = entries
        .get(resource)
        .is_some_and(|e| !e.served.socket_intact() || e.served.ended());
    if broken {
        if let Some(old) = entries.remove(resource) {
            tracing::info!(
                resource,
                "the plugin socket is gone (kubelet restarted?): serving it again"
            );
            old.served.stop().await;
        }
        start(ctx, resource, entries);
    }
    let Some(entry) = entries.get_mut(resource) else {
        return;
    };
    if kubelet.is_none() {
        entry.registered_with = None;
        return;
    }
    if entry.registered_with == kubelet {
        return;
    }
    match register(kubelet_socket, resource).await {
        Ok(()) => {
            tracing::info!(resource, "registered with kubelet");
            entry.registered_with = kubelet;
            entry.last_error = None;
        }
        Err(e) => {
            if entry.last_error.as_ref() != Some(&e) {
                tracing::warn!(
                    resource,
                    "cannot register with kubelet (retrying every second): {e}"
                );
            }
            entry.last_error = Some(e);
        }
    }
}

/// One `Register` call for `resource`.
async fn register(kubelet_socket: &Path, resource: &str) -> Result<(), String> {
    let channel = unix::channel(kubelet_socket)
        .await
        .map_err(|e| format!("connecting to {}: {e}", kubelet_socket.display()))?;
    let request = RegisterRequest {
        version: API_VERSION.to_owned(),
        endpoint: socket_name(resource),
        resource_name: resource.to_owned(),
        options: Some(options()),
    };
    RegistrationClient::new(channel)
        .register(request)
        .await
        .map(|_| ())
        .map_err(|s| format!("kubelet refused: {}", s.message()))
}
