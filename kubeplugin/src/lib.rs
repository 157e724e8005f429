//! vgpud as a kubelet device plugin (API `v1beta1`): one resource per slice type, registered
//! with kubelet, streamed with health and NUMA node, allocated in vgpud's engine, released when
//! kubelet's PodResources no longer lists them. See docs/kubernetes.md.

pub mod allocate;
pub mod catalog;
pub mod context;
pub mod plugin;
pub mod pod_resources;
pub mod preferred;
pub mod refresh;
pub mod registration;
pub mod response;
pub mod server;
pub mod unix;
pub mod wire;

use std::sync::Arc;

use agent::config::KubernetesConfig;
use agent::service::Service;
use tokio::sync::watch;

use crate::catalog::Catalog;
use crate::context::Context;

/// Serves kubelet until `stop` turns true: the catalog kept current, every resource served and
/// registered, PodResources reconciled. Returns once the plugin sockets are removed.
pub async fn run(service: Service, config: KubernetesConfig, stop: watch::Receiver<bool>) {
    let (publish, catalog) = watch::channel(Arc::new(Catalog::default()));
    let ctx = Context {
        service,
        config: Arc::new(config),
        catalog,
    };
    let refresher = tokio::spawn(refresh::run(ctx.clone(), publish, stop.clone()));
    let reconciler = tokio::spawn(pod_resources::run(ctx.clone(), stop.clone()));
    registration::run(ctx, stop).await;
    let _ = refresher.await;
    let _ = reconciler.await;
}
