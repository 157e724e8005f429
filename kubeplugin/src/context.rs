//! What every part of the plugin shares: the agent's service, the `[kubernetes]` section and
//! the latest catalog.

use std::sync::Arc;

use agent::config::KubernetesConfig;
use agent::service::Service;
use tokio::sync::watch;

use crate::catalog::{self, Catalog};

/// The plugin's shared state.
#[derive(Clone)]
pub struct Context {
    /// The agent.
    pub service: Service,
    /// `[kubernetes]`.
    pub config: Arc<KubernetesConfig>,
    /// The catalog as last computed (the refresher keeps it current).
    pub catalog: watch::Receiver<Arc<Catalog>>,
}

impl Context {
    /// The catalog as the agent has it now (blocking: reads the engine). Allocation decisions
    /// use this, not the last published one, which may be a second old.
    pub fn current_catalog(&self) -> Catalog {
        let service = &self.service;
        catalog::build(
            &service.slices(),
            &service.host(),
            &service.health_view(),
            &self.config,
        )
    }
}
