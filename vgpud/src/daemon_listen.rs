//! The daemon's listeners: the REST API's unix socket (with a check that no other process
//! serves it), the optional TLS TCP listener and the unauthenticated metrics listener. Each runs
//! as a task until the shutdown signal, then stops accepting and lets its requests finish.

use std::future::Future;
use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use agent::config::Config;
use anyhow::{Context, bail};
use axum::Router;
use tokio::task::JoinSet;

/// A listener task's outcome: which listener, and how it ended.
pub type ServerResult = (&'static str, anyhow::Result<()>);

/// Makes `path` free for a new socket: refuses when a live process answers on it, removes a
/// stale socket a crashed daemon left, creates the parent directory.
pub fn claim_socket_path(path: &Path) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating the socket directory {}", parent.display()))?;
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("examining {}", path.display())),
    };
    if !meta.file_type().is_socket() {
        bail!(
            "{} exists and is not a socket; remove it or choose another --socket",
            path.display()
        );
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        bail!(
            "{} is served by another process (another vgpud?); stop it or choose another --socket",
            path.display()
        );
    }
    std::fs::remove_file(path)
        .with_context(|| format!("removing the stale socket {}", path.display()))
}

/// Binds the REST API's unix socket now (so it accepts before `READY=1`) and serves `router` on
/// it in a task until `shutdown`; the socket file is removed when the task ends.
pub fn spawn_unix(
    tasks: &mut JoinSet<ServerResult>,
    router: Router,
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let path = config.api.socket.clone();
    claim_socket_path(&path)?;
    let listener = tokio::net::UnixListener::bind(&path)
        .with_context(|| format!("listening on {}", path.display()))?;
    let mode = config.api_mode().map_err(anyhow::Error::msg)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    tracing::info!("REST API on unix socket {}", path.display());
    tasks.spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
            .with_context(|| format!("serving {}", path.display()));
        remove_socket(&path);
        ("REST API socket", served)
    });
    Ok(())
}

fn remove_socket(path: &PathBuf) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("cannot remove the socket {}: {e}", path.display()),
    }
}

/// Serves `router` without authentication on the metrics address, when one is configured.
pub async fn spawn_metrics(
    tasks: &mut JoinSet<ServerResult>,
    router: Router,
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let Some(addr) = config.metrics.listen else {
        return Ok(());
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr} for /healthz and /metrics"))?;
    tracing::info!("/healthz and /metrics on http://{addr}");
    tasks.spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
            .with_context(|| format!("serving {addr}"));
        ("metrics listener", served)
    });
    Ok(())
}
