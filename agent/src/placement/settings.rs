//! `[placement]` as the reporter uses it: parsed values (durations, options, the auth
//! strategy as a type) and the resolved root provider name.

use std::path::PathBuf;
use std::time::Duration;

use placement::{Auth, ClientConfig, KeystonePassword};

use crate::config::{Config, KeystoneConfig, PlacementConfig};

use super::classes::ClassMap;
use super::names;

/// Where a secret comes from: the file is read when it is needed, so a rotated token is
/// picked up without a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Secret {
    /// Given in the configuration.
    Inline(String),
    /// The first line of this file.
    File(PathBuf),
}

impl Secret {
    fn of(inline: &str, file: &str) -> Self {
        if file.is_empty() {
            Secret::Inline(inline.to_owned())
        } else {
            Secret::File(PathBuf::from(file))
        }
    }

    /// The secret now.
    pub fn read(&self) -> Result<String, String> {
        match self {
            Secret::Inline(s) => Ok(s.clone()),
            Secret::File(path) => std::fs::read_to_string(path)
                .map(|text| text.lines().next().unwrap_or("").trim().to_owned())
                .map_err(|e| format!("cannot read {}: {e}", path.display())),
        }
    }
}

/// How vgpud authenticates to Placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthSettings {
    /// Placement's `noauth2` strategy (tests, labs): the token is sent as is.
    NoAuth(Secret),
    /// A Keystone token obtained elsewhere.
    Token(Secret),
    /// Service credentials, the Keystone password flow.
    Keystone(KeystoneSettings),
}

/// `[placement.keystone]`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeystoneSettings {
    /// Keystone's URL.
    pub auth_url: String,
    /// The service user.
    pub username: String,
    /// Its password.
    pub password: Secret,
    /// The user's domain.
    pub user_domain_name: String,
    /// The project.
    pub project_name: String,
    /// The project's domain.
    pub project_domain_name: String,
    /// The catalog region; `None`: any.
    pub region: Option<String>,
    /// The catalog interface.
    pub interface: String,
}

/// Everything the reporter is configured with.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacementSettings {
    /// Report at all.
    pub enabled: bool,
    /// Placement's URL; `None`: from the Keystone catalog.
    pub endpoint: Option<String>,
    /// How to authenticate.
    pub auth: AuthSettings,
    /// CA bundle for https.
    pub ca_file: Option<PathBuf>,
    /// Per request.
    pub timeout: Duration,
    /// The root provider's name (the compute node), resolved.
    pub root_name: String,
    /// Create the root provider when missing.
    pub own_root: bool,
    /// GPU providers under per-NUMA-node providers.
    pub numa_subtree: bool,
    /// Type → class mapping (`default_type` and overrides).
    pub classes: ClassMap,
    /// Types reported on GPUs without a declared layout, first offered wins.
    pub on_demand_types: Vec<String>,
    /// Periodic full sync.
    pub sync_interval: Duration,
    /// Quiet time after an event before syncing.
    pub debounce: Duration,
    /// Refuse allocations Placement does not back.
    pub strict_consumers: bool,
    /// Remove unknown consumers' allocations on vgpud's providers.
    pub heal: bool,
    /// How long an unknown allocation must be seen before it is healed.
    pub heal_grace: Duration,
}

impl PlacementSettings {
    /// The settings of a validated `config`; `hostname` names the root when `compute_node` is
    /// empty (pass the inventory's, which a simulated host sets too).
    pub fn from_config(config: &Config, hostname: &str) -> Self {
        Self::from_section(&config.placement, hostname)
    }

    /// The settings of a validated `[placement]` section.
    pub fn from_section(p: &PlacementConfig, hostname: &str) -> Self {
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        let token = Secret::of(&p.token, &p.token_file);
        let auth = match p.auth.as_str() {
            "token" => AuthSettings::Token(token),
            "keystone" => AuthSettings::Keystone(keystone(&p.keystone)),
            // Validation admits only the three strategies.
            _ => AuthSettings::NoAuth(token),
        };
        Self {
            enabled: p.enabled,
            endpoint: non_empty(p.endpoint.trim_end_matches('/')),
            auth,
            ca_file: non_empty(&p.ca_file).map(PathBuf::from),
            timeout: Duration::from_millis(p.timeout_ms),
            root_name: names::root_name(&p.compute_node, hostname),
            own_root: p.own_root,
            numa_subtree: p.numa_subtree,
            classes: ClassMap {
                default_type: non_empty(&p.default_type),
                overrides: p.resource_classes.clone(),
            },
            on_demand_types: p.on_demand_types.clone(),
            sync_interval: Duration::from_secs(p.sync_interval_s),
            debounce: Duration::from_millis(p.debounce_ms),
            strict_consumers: p.strict_consumers,
            heal: p.heal,
            heal_grace: Duration::from_secs(p.heal_grace_s),
        }
    }
}

impl PlacementSettings {
    /// How the client reaches Placement, secrets read now (a token or password file that
    /// cannot be read is a configuration error).
    pub fn client_config(&self) -> Result<ClientConfig, placement::Error> {
        let secret = |s: &Secret| s.read().map_err(placement::Error::Config);
        let auth = match &self.auth {
            AuthSettings::NoAuth(token) => Auth::NoAuth {
                token: secret(token)?,
            },
            AuthSettings::Token(token) => Auth::Token {
                token: secret(token)?,
            },
            AuthSettings::Keystone(k) => Auth::Keystone(KeystonePassword {
                auth_url: k.auth_url.clone(),
                username: k.username.clone(),
                password: secret(&k.password)?,
                user_domain_name: k.user_domain_name.clone(),
                project_name: k.project_name.clone(),
                project_domain_name: k.project_domain_name.clone(),
                region: k.region.clone(),
                interface: k.interface.clone(),
            }),
        };
        Ok(ClientConfig {
            endpoint: self.endpoint.clone(),
            auth,
            ca_file: self.ca_file.clone(),
            timeout: self.timeout,
        })
    }
}

fn keystone(k: &KeystoneConfig) -> KeystoneSettings {
    KeystoneSettings {
        auth_url: k.auth_url.clone(),
        username: k.username.clone(),
        password: Secret::of(&k.password, &k.password_file),
        user_domain_name: k.user_domain_name.clone(),
        project_name: k.project_name.clone(),
        project_domain_name: k.project_domain_name.clone(),
        region: (!k.region.is_empty()).then(|| k.region.clone()),
        interface: k.interface.clone(),
    }
}
