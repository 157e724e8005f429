//! `[placement]`: reporting this host to OpenStack Placement (docs/placement.md), its keys,
//! defaults and validation.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize, Serializer};

/// `[placement]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlacementConfig {
    /// Report this host to Placement at all.
    pub enabled: bool,
    /// Placement's URL (`http://controller:8778`); empty with `auth = "keystone"`: from the
    /// service catalog.
    pub endpoint: String,
    /// `noauth2`, `token` or `keystone`.
    pub auth: String,
    /// noauth2: the token to send (`admin` for Placement's noauth2 admin); token: a Keystone
    /// token. Never printed by `check-config`.
    #[serde(serialize_with = "redacted")]
    pub token: String,
    /// Read the token from this file (one line) instead; wins over `token`.
    pub token_file: String,
    /// PEM CA bundle for https endpoints; empty: the webpki roots.
    pub ca_file: String,
    /// Longest one request may take, ms.
    pub timeout_ms: u64,
    /// The root provider's name: the compute node as Nova names it; empty: the hostname.
    pub compute_node: String,
    /// Create the root provider when it is missing (else wait for Nova to create it).
    pub own_root: bool,
    /// GPU providers under one provider per NUMA node, with `HW_NUMA_ROOT`.
    pub numa_subtree: bool,
    /// The slice type reported as the standard `VGPU` class; empty for none.
    pub default_type: String,
    /// For GPUs without a declared layout: the first of these the GPU offers is reported, with
    /// how many could be created.
    pub on_demand_types: Vec<String>,
    /// Periodic full sync, s.
    pub sync_interval_s: u64,
    /// After an event, wait this long for more before syncing, ms.
    pub debounce_ms: u64,
    /// Refuse an allocation whose Placement consumer holds no matching allocation here.
    pub strict_consumers: bool,
    /// Remove, from consumers vgpud does not know, their allocations on vgpud's providers.
    pub heal: bool,
    /// How long such an allocation must have been seen before it is healed, s.
    pub heal_grace_s: u64,
    /// Slice type → resource class, overriding the default naming.
    pub resource_classes: BTreeMap<String, String>,
    /// The Keystone password flow, for `auth = "keystone"`.
    pub keystone: KeystoneConfig,
}

/// `[placement.keystone]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeystoneConfig {
    /// Keystone's URL, e.g. `https://keystone:5000/v3`.
    pub auth_url: String,
    /// The service user.
    pub username: String,
    /// Its password. Never printed by `check-config`.
    #[serde(serialize_with = "redacted")]
    pub password: String,
    /// Read the password from this file (one line) instead; wins over `password`.
    pub password_file: String,
    /// The user's domain.
    pub user_domain_name: String,
    /// The project the token is scoped to.
    pub project_name: String,
    /// The project's domain.
    pub project_domain_name: String,
    /// The catalog region; empty: any.
    pub region: String,
    /// The catalog interface: `public`, `internal` or `admin`.
    pub interface: String,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            endpoint: String::new(),
            auth: "noauth2".to_owned(),
            token: String::new(),
            token_file: String::new(),
            ca_file: String::new(),
            timeout_ms: 10_000,
            compute_node: String::new(),
            own_root: false,
            numa_subtree: false,
            default_type: String::new(),
            on_demand_types: Vec::new(),
            sync_interval_s: 60,
            debounce_ms: 1000,
            strict_consumers: false,
            heal: false,
            heal_grace_s: 300,
            resource_classes: BTreeMap::new(),
            keystone: KeystoneConfig::default(),
        }
    }
}

impl Default for KeystoneConfig {
    fn default() -> Self {
        Self {
            auth_url: String::new(),
            username: String::new(),
            password: String::new(),
            password_file: String::new(),
            user_domain_name: "Default".to_owned(),
            project_name: String::new(),
            project_domain_name: "Default".to_owned(),
            region: String::new(),
            interface: "internal".to_owned(),
        }
    }
}

/// The auth strategies vgpud speaks to Placement with.
pub const AUTH_STRATEGIES: &[&str] = &["noauth2", "token", "keystone"];

/// The Keystone catalog interfaces.
pub const INTERFACES: &[&str] = &["public", "internal", "admin"];

/// The longest root name that still leaves room for a GPU provider's `_pci_0000_00_00_0`
/// within Placement's 200-character provider names.
pub const MAX_ROOT_NAME: usize = 200 - "_pci_0000_00_00_0".len();

/// A secret shows as set or unset, never as its value (`check-config` prints the effective
/// configuration, and its output lands in tickets).
fn redacted<S: Serializer>(value: &str, s: S) -> Result<S::Ok, S::Error> {
    if value.is_empty() {
        s.serialize_str("")
    } else {
        s.serialize_str("<redacted>")
    }
}

type Refusal = (&'static str, String);

/// Checks `[placement]`: spelling and ranges always, completeness (endpoint, credentials) only
/// when it is enabled, so a disabled section may be half written.
pub(super) fn validate_placement(p: &PlacementConfig) -> Result<(), Refusal> {
    validate_ranges(p)?;
    validate_names(p)?;
    validate_classes(p)?;
    validate_files(p)?;
    if p.enabled {
        validate_reachable(p)?;
    }
    Ok(())
}

fn validate_ranges(p: &PlacementConfig) -> Result<(), Refusal> {
    if !AUTH_STRATEGIES.contains(&p.auth.as_str()) {
        return Err((
            "placement.auth",
            format!("{:?} is not one of {}", p.auth, AUTH_STRATEGIES.join(", ")),
        ));
    }
    if !(100..=600_000).contains(&p.timeout_ms) {
        return Err((
            "placement.timeout_ms",
            "must be 100 ms to 10 minutes".into(),
        ));
    }
    if !(1..=86_400).contains(&p.sync_interval_s) {
        return Err(("placement.sync_interval_s", "must be 1 s to 1 day".into()));
    }
    if !(1..=600_000).contains(&p.debounce_ms) {
        return Err(("placement.debounce_ms", "must be 1 ms to 10 minutes".into()));
    }
    if !(1..=30 * 86_400).contains(&p.heal_grace_s) {
        return Err(("placement.heal_grace_s", "must be 1 s to 30 days".into()));
    }
    if !p.endpoint.is_empty()
        && !(p.endpoint.starts_with("http://") || p.endpoint.starts_with("https://"))
    {
        return Err((
            "placement.endpoint",
            format!(
                "{:?} is not an http:// or https:// URL (e.g. http://controller:8778)",
                p.endpoint
            ),
        ));
    }
    if !INTERFACES.contains(&p.keystone.interface.as_str()) {
        return Err((
            "placement.keystone.interface",
            format!(
                "{:?} is not one of {}",
                p.keystone.interface,
                INTERFACES.join(", ")
            ),
        ));
    }
    Ok(())
}

/// Names end up in provider names and resource classes: no blanks, no control characters.
fn validate_names(p: &PlacementConfig) -> Result<(), Refusal> {
    let node = &p.compute_node;
    if node.len() > MAX_ROOT_NAME {
        return Err((
            "placement.compute_node",
            format!("longer than {MAX_ROOT_NAME} characters"),
        ));
    }
    if node.trim() != node || node.chars().any(char::is_control) {
        return Err((
            "placement.compute_node",
            format!("{node:?} has leading or trailing blanks or control characters"),
        ));
    }
    if p.default_type.trim() != p.default_type {
        return Err((
            "placement.default_type",
            format!("{:?} has leading or trailing blanks", p.default_type),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for t in &p.on_demand_types {
        if t.trim().is_empty() || t.trim() != t {
            return Err((
                "placement.on_demand_types",
                format!("{t:?} is not a slice type"),
            ));
        }
        if !seen.insert(t) {
            return Err((
                "placement.on_demand_types",
                format!("{t:?} is listed twice"),
            ));
        }
    }
    Ok(())
}

fn validate_classes(p: &PlacementConfig) -> Result<(), Refusal> {
    let key = "placement.resource_classes";
    for (slice_type, class) in &p.resource_classes {
        if slice_type.trim().is_empty() || slice_type.trim() != slice_type {
            return Err((key, format!("{slice_type:?} is not a slice type")));
        }
        if !crate::placement::classes::is_valid_class(class) {
            return Err((
                key,
                format!(
                    "{slice_type:?} = {class:?}: a resource class is VGPU, PGPU, PCI_DEVICE or \
                     matches ^CUSTOM_[A-Z0-9_]+$ (e.g. CUSTOM_MIG_3G_40GB)"
                ),
            ));
        }
        if *slice_type == p.default_type {
            return Err((
                key,
                format!(
                    "{slice_type:?} is placement.default_type, reported as VGPU: \
                     drop one of the two"
                ),
            ));
        }
    }
    Ok(())
}

fn validate_files(p: &PlacementConfig) -> Result<(), Refusal> {
    let files = [
        ("placement.token_file", &p.token_file, true),
        (
            "placement.keystone.password_file",
            &p.keystone.password_file,
            true,
        ),
        ("placement.ca_file", &p.ca_file, false),
    ];
    for (key, file, secret) in files {
        if file.is_empty() {
            continue;
        }
        let path = Path::new(file);
        if !path.is_absolute() || !path.is_file() {
            return Err((
                key,
                format!("{file} is not an absolute path to an existing file"),
            ));
        }
        if secret {
            super::check_secret_mode(path).map_err(|why| (key, why))?;
        }
    }
    Ok(())
}

/// An enabled reporter must be able to find Placement and authenticate to it.
fn validate_reachable(p: &PlacementConfig) -> Result<(), Refusal> {
    let keystone = p.auth == "keystone";
    if p.endpoint.is_empty() && !keystone {
        return Err((
            "placement.endpoint",
            "empty, and only auth = \"keystone\" can find Placement in the service catalog: \
             set endpoint (e.g. http://controller:8778) or use keystone"
                .into(),
        ));
    }
    let has_token = !p.token.is_empty() || !p.token_file.is_empty();
    match p.auth.as_str() {
        "noauth2" if !has_token => Err((
            "placement.token",
            "noauth2 still sends a token: set token = \"admin\" (Placement's noauth2 admin) \
             or token_file"
                .into(),
        )),
        "token" if !has_token => Err((
            "placement.token",
            "auth = \"token\" needs a Keystone token in token or token_file".into(),
        )),
        "keystone" => validate_keystone(&p.keystone),
        _ => Ok(()),
    }
}

fn validate_keystone(k: &KeystoneConfig) -> Result<(), Refusal> {
    let required = [
        ("placement.keystone.auth_url", &k.auth_url),
        ("placement.keystone.username", &k.username),
        ("placement.keystone.project_name", &k.project_name),
        ("placement.keystone.user_domain_name", &k.user_domain_name),
        (
            "placement.keystone.project_domain_name",
            &k.project_domain_name,
        ),
    ];
    if let Some((key, _)) = required.iter().find(|(_, v)| v.trim().is_empty()) {
        return Err((key, "auth = \"keystone\" needs it".into()));
    }
    if !(k.auth_url.starts_with("http://") || k.auth_url.starts_with("https://")) {
        return Err((
            "placement.keystone.auth_url",
            format!(
                "{:?} is not an http:// or https:// URL (e.g. https://keystone:5000/v3)",
                k.auth_url
            ),
        ));
    }
    if k.password.is_empty() && k.password_file.is_empty() {
        return Err((
            "placement.keystone.password",
            "auth = \"keystone\" needs password or password_file".into(),
        ));
    }
    Ok(())
}
