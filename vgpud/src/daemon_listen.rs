//! The daemon's listeners, each a task running one of `api::rest`'s servers until the shutdown
//! signal: the REST API's unix socket, the optional TLS TCP listener and the unauthenticated
//! `/healthz` + `/metrics` listener. Addresses are taken here, before `READY=1`, so a busy port or
//! a socket another daemon serves stops the start instead of failing later.

use std::future::Future;
use std::io::ErrorKind;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::time::{Duration, Instant};

use agent::config::Config;
use anyhow::{Context, bail};
use axum::Router;
use tokio::task::JoinSet;

/// A listener task's outcome: which listener, and how it ended.
pub type ServerResult = (&'static str, anyhow::Result<()>);

/// How long the REST socket may take to appear once its server task started.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(10);

/// Refuses a socket path a live process serves (another daemon with another state directory),
/// before anything of ours can answer on it; creates the parent directory. A stale socket is
/// left for `serve_unix` to replace.
pub fn check_socket_path(path: &Path) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating the socket directory {}", parent.display()))?;
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("examining {}", path.display())),
    };
    if meta.file_type().is_socket() && std::os::unix::net::UnixStream::connect(path).is_ok() {
        bail!(
            "{} is served by another process (another vgpud?); stop it or choose another --socket",
            path.display()
        );
    }
    Ok(())
}

/// The socket's group: the configured one, except that a simulated host on a machine without
/// that group (a developer's laptop) keeps the daemon's own group rather than failing.
pub fn socket_group(config: &Config, simulated: bool) -> Option<String> {
    let group = config.api.socket_group.as_str();
    if group.is_empty() {
        return None;
    }
    if simulated && !group_exists(group) {
        tracing::warn!(
            "group {group:?} does not exist: the socket keeps the daemon's group (simulated host)"
        );
        return None;
    }
    Some(group.to_owned())
}

fn group_exists(name: &str) -> bool {
    name.parse::<u32>().is_ok()
        || std::fs::read_to_string("/etc/group").is_ok_and(|text| {
            text.lines()
                .any(|line| line.split(':').next() == Some(name))
        })
}

/// Serves the REST API on its unix socket and returns once the socket accepts connections.
pub async fn spawn_unix(
    tasks: &mut JoinSet<ServerResult>,
    router: Router,
    config: &Config,
    group: Option<String>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let path = config.api.socket.clone();
    check_socket_path(&path)?;
    let mode = config.api_mode().map_err(anyhow::Error::msg)?;
    let limits = api::rest::ConnLimits::from(&config.api);
    let task = tasks.spawn({
        let path = path.clone();
        async move {
            let group = group.as_deref();
            let served =
                api::rest::serve_unix_limited(router, &path, mode, group, limits, shutdown)
                    .await
                    .map_err(anyhow::Error::from);
            ("REST API socket", served)
        }
    });
    let deadline = Instant::now() + SOCKET_TIMEOUT;
    while tokio::net::UnixStream::connect(&path).await.is_err() {
        if task.is_finished() {
            return match tasks.join_next().await {
                Some(Ok((_, Err(e)))) => Err(e),
                _ => Err(anyhow::anyhow!(
                    "the REST API server on {} stopped at once",
                    path.display()
                )),
            };
        }
        if Instant::now() > deadline {
            bail!(
                "the REST API socket {} did not appear in time",
                path.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Serves the REST API over TLS when `[api.tcp]` is set; the port is bound before returning.
pub async fn spawn_tls(
    tasks: &mut JoinSet<ServerResult>,
    router: Router,
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let Some(tcp) = &config.api.tcp else {
        return Ok(());
    };
    let listener = tokio::net::TcpListener::bind(tcp.listen)
        .await
        .with_context(|| format!("listening on {} (api.tcp.listen)", tcp.listen))?;
    let options = api::rest::TlsOptions::from(tcp);
    let limits = api::rest::ConnLimits::from(&config.api);
    tasks.spawn(async move {
        let served =
            api::rest::serve_tls_listener_limited(router, listener, options, limits, shutdown)
                .await
                .map_err(anyhow::Error::from);
        ("TLS listener", served)
    });
    Ok(())
}

/// Serves `/healthz` and `/metrics` without authentication when `metrics.listen` is set.
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
        .with_context(|| format!("listening on {addr} (metrics.listen)"))?;
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
