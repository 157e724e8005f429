//! kubelet's device plugin (the `kubeplugin` crate), when `[kubernetes] enabled`: a task that
//! serves until the daemon stops and then removes its sockets. A change of the section takes
//! a restart (kubelet sees the plugin go and come back).

use agent::config::Config;
use agent::service::Service;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Refuses `[kubernetes] enabled` in a build without the plugin, before anything starts.
pub(crate) fn check(config: &Config) -> anyhow::Result<()> {
    if config.kubernetes.enabled && !cfg!(feature = "kubernetes") {
        anyhow::bail!(
            "[kubernetes] enabled = true, but this vgpud was built without the kubernetes feature"
        );
    }
    Ok(())
}

/// Starts the plugin when the section asks for it.
#[cfg(feature = "kubernetes")]
pub(crate) fn start(
    service: &Service,
    config: &Config,
    stop: &watch::Receiver<bool>,
) -> Option<JoinHandle<()>> {
    let k = &config.kubernetes;
    if !k.enabled {
        return None;
    }
    tracing::info!(
        dir = %k.device_plugin_dir.display(),
        pod_resources = %k.pod_resources_socket.display(),
        "serving kubelet's device plugin API"
    );
    Some(tokio::spawn(kubeplugin::run(
        service.clone(),
        k.clone(),
        stop.clone(),
    )))
}

/// Without the feature there is nothing to start ([`check`] refused `enabled`).
#[cfg(not(feature = "kubernetes"))]
pub(crate) fn start(_: &Service, _: &Config, _: &watch::Receiver<bool>) -> Option<JoinHandle<()>> {
    None
}
