//! `[kubernetes]`: vgpud as kubelet's device plugin (docs/kubernetes.md).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `[kubernetes]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubernetesConfig {
    /// Serve kubelet's device plugin API for the slices vgpud holds free.
    pub enabled: bool,
    /// kubelet's device plugin directory: its `kubelet.sock` and the plugins' sockets.
    pub device_plugin_dir: PathBuf,
    /// kubelet's PodResources socket, read to release slices no pod holds any more.
    pub pod_resources_socket: PathBuf,
    /// The domain of every generated resource name; empty: the GPU vendor's (`nvidia.com`,
    /// `amd.com`, `intel.com`; `vgpud.io` for other mdev parents), as the vendors' own device
    /// plugins name theirs (`nvidia.com/mig-1g.10gb`).
    pub resource_prefix: String,
    /// Resource names by vgpud slice type (`"1g.10gb" = "example.com/small"`), replacing the
    /// generated name of that type.
    pub resource_names: BTreeMap<String, String>,
    /// The consumer the slices kubelet allocates are held for.
    pub consumer: String,
    /// A CDI device kind (`vendor.com/class`): when set, Allocate also answers the CDI names
    /// `KIND=<device id>` for container runtimes that resolve CDI.
    pub cdi_kind: String,
    /// How long a slice kubelet allocated may be missing from every pod in PodResources
    /// before it is released, s (kubelet lists a pod's devices only once its containers exist).
    pub release_grace_s: u64,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            device_plugin_dir: PathBuf::from("/var/lib/kubelet/device-plugins"),
            pod_resources_socket: PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"),
            resource_prefix: String::new(),
            resource_names: BTreeMap::new(),
            consumer: "kubernetes".into(),
            cdi_kind: String::new(),
            release_grace_s: 60,
        }
    }
}

/// Checks the section: absolute paths, names kubelet accepts.
pub(super) fn validate(k: &KubernetesConfig) -> Result<(), (&'static str, String)> {
    for (key, p) in [
        ("kubernetes.device_plugin_dir", &k.device_plugin_dir),
        ("kubernetes.pod_resources_socket", &k.pod_resources_socket),
    ] {
        if !p.is_absolute() {
            return Err((key, format!("{} is not an absolute path", p.display())));
        }
    }
    if !k.resource_prefix.is_empty() {
        check_domain(&k.resource_prefix).map_err(|e| ("kubernetes.resource_prefix", e))?;
    }
    for (slice_type, name) in &k.resource_names {
        check_resource_name(name)
            .map_err(|e| ("kubernetes.resource_names", format!("{slice_type:?}: {e}")))?;
    }
    if k.consumer.trim().is_empty() {
        return Err(("kubernetes.consumer", "must not be empty".into()));
    }
    if !k.cdi_kind.is_empty() {
        check_cdi_kind(&k.cdi_kind).map_err(|e| ("kubernetes.cdi_kind", e))?;
    }
    if !(1..=86_400).contains(&k.release_grace_s) {
        return Err(("kubernetes.release_grace_s", "must be 1 to 86400".into()));
    }
    Ok(())
}

/// Whether kubelet accepts `name` as an extended resource: `domain/name`, the domain a DNS
/// subdomain outside `kubernetes.io`, the name a qualified-name part of at most 63 characters
/// (Kubernetes API reference, "Extended resources"; IsQualifiedName in apimachinery's
/// validation).
pub fn check_resource_name(name: &str) -> Result<(), String> {
    let Some((domain, local)) = name.split_once('/') else {
        return Err(format!("{name:?} is not domain/name"));
    };
    check_domain(domain)?;
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let ends_ok = local.starts_with(|c: char| c.is_ascii_alphanumeric())
        && local.ends_with(|c: char| c.is_ascii_alphanumeric());
    if local.is_empty() || local.len() > 63 || !local.chars().all(ok_char) || !ends_ok {
        return Err(format!(
            "{local:?} in {name:?} is not 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// A DNS subdomain (lower case, dot-separated labels) that is not kubernetes.io's: extended
/// resources in the `kubernetes.io` domain are refused by the API server.
pub fn check_domain(domain: &str) -> Result<(), String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if domain.is_empty() || domain.len() > 253 || !domain.split('.').all(label_ok) {
        return Err(format!("{domain:?} is not a DNS subdomain"));
    }
    if domain == "kubernetes.io" || domain.ends_with(".kubernetes.io") {
        return Err(format!(
            "{domain:?}: the kubernetes.io domain is Kubernetes' own"
        ));
    }
    Ok(())
}

/// A CDI kind is `vendor/class` (CDI specification, "Fully qualified device name").
fn check_cdi_kind(kind: &str) -> Result<(), String> {
    let Some((vendor, class)) = kind.split_once('/') else {
        return Err(format!("{kind:?} is not vendor.com/class"));
    };
    check_domain(vendor)?;
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_');
    if class.is_empty() || !class.chars().all(ok) {
        return Err(format!(
            "class {class:?} is not letters, digits, '-' or '_'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_as_kubelet_takes_them() {
        for good in [
            "nvidia.com/mig-1g.10gb",
            "nvidia.com/GRID_T4-1Q",
            "nvidia.com/NVIDIA_A100-SXM4-80GB",
        ] {
            assert_eq!(check_resource_name(good), Ok(()), "{good}");
        }
        for bad in [
            "mig-1g.10gb",
            "nvidia.com/",
            "nvidia.com/-x",
            "nvidia.com/a b",
            "Nvidia.com/x",
            "kubernetes.io/gpu",
            "x.kubernetes.io/gpu",
            &format!("nvidia.com/{}", "a".repeat(64)),
        ] {
            assert!(check_resource_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_defaults_are_valid_and_bad_values_are_named() {
        assert_eq!(validate(&KubernetesConfig::default()), Ok(()));
        let relative = KubernetesConfig {
            device_plugin_dir: "plugins".into(),
            ..Default::default()
        };
        assert_eq!(
            validate(&relative).map_err(|e| e.0),
            Err("kubernetes.device_plugin_dir")
        );
        let cdi = KubernetesConfig {
            cdi_kind: "nvidia.com".into(),
            ..Default::default()
        };
        assert_eq!(validate(&cdi).map_err(|e| e.0), Err("kubernetes.cdi_kind"));
        let mapped = KubernetesConfig {
            resource_names: [("1g.10gb".to_owned(), "small".to_owned())].into(),
            ..Default::default()
        };
        assert_eq!(
            validate(&mapped).map_err(|e| e.0),
            Err("kubernetes.resource_names")
        );
    }
}
