//! Slice type → Placement resource class: `default_type` is the standard `VGPU`, a whole GPU
//! (`gpu`) is `PGPU`, a MIG profile `3g.40gb` is `CUSTOM_MIG_3G_40GB`, anything else is
//! `CUSTOM_` and the type normalised; `[placement.resource_classes]` overrides per type.

use std::collections::BTreeMap;

/// The standard classes (os-resource-classes) a slice may be reported as.
pub const STANDARD_CLASSES: &[&str] = &["VGPU", "PGPU", "PCI_DEVICE"];

/// Placement's limit on a resource class name (`resource_classes.name` is `VARCHAR(255)`).
const MAX_CLASS_LEN: usize = 255;

/// Whether Placement accepts `class` from vgpud: a standard class it may report, or a custom
/// one (`^CUSTOM_[A-Z0-9_]+$`, Placement's own schema for `PUT /resource_classes/{name}`).
pub fn is_valid_class(class: &str) -> bool {
    if STANDARD_CLASSES.contains(&class) {
        return true;
    }
    class.len() <= MAX_CLASS_LEN
        && class.strip_prefix("CUSTOM_").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        })
}

/// `CUSTOM_` and `text` upper-cased with every character outside `[A-Z0-9]` turned into `_`
/// (`NVIDIA A100-4C` → `CUSTOM_NVIDIA_A100_4C`): the custom-class and custom-trait spelling.
pub fn custom_name(text: &str) -> String {
    let body: String = text
        .chars()
        .map(|c| {
            let c = c.to_ascii_uppercase();
            if c.is_ascii_uppercase() || c.is_ascii_digit() {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("CUSTOM_{body}")
}

/// The mapping of one configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassMap {
    /// The type reported as `VGPU`.
    pub default_type: Option<String>,
    /// Per type, the class configured for it.
    pub overrides: BTreeMap<String, String>,
}

impl ClassMap {
    /// The resource class slices of `slice_type` are reported as.
    pub fn class_of(&self, slice_type: &str) -> String {
        if let Some(class) = self.overrides.get(slice_type) {
            return class.clone();
        }
        if self.default_type.as_deref() == Some(slice_type) {
            return "VGPU".to_owned();
        }
        if slice_type == "gpu" {
            return "PGPU".to_owned();
        }
        if slice_type.parse::<ids::MigProfileName>().is_ok() {
            return custom_name(&format!("MIG_{slice_type}"));
        }
        let class = custom_name(slice_type);
        // A type name over the class limit keeps its start; its end is rarely what tells two
        // types apart, and two that collide are caught per GPU.
        class.chars().take(MAX_CLASS_LEN).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_naming() {
        let map = ClassMap {
            default_type: Some("nvidia-222".into()),
            overrides: BTreeMap::new(),
        };
        assert_eq!(map.class_of("nvidia-222"), "VGPU");
        assert_eq!(map.class_of("gpu"), "PGPU");
        assert_eq!(map.class_of("3g.40gb"), "CUSTOM_MIG_3G_40GB");
        assert_eq!(map.class_of("1g.10gb+me"), "CUSTOM_MIG_1G_10GB_ME");
        assert_eq!(map.class_of("nvidia-223"), "CUSTOM_NVIDIA_223");
        assert_eq!(map.class_of("NVIDIA A100-4C"), "CUSTOM_NVIDIA_A100_4C");
        assert_eq!(map.class_of("vf"), "CUSTOM_VF");
        for t in [
            "nvidia-222",
            "gpu",
            "3g.40gb",
            "NVIDIA A100-4C",
            "vf",
            "ü x",
        ] {
            assert!(is_valid_class(&map.class_of(t)), "{t}");
        }
    }

    #[test]
    fn overrides_win() {
        let map = ClassMap {
            default_type: None,
            overrides: [("3g.40gb".to_owned(), "CUSTOM_HALF_A100".to_owned())].into(),
        };
        assert_eq!(map.class_of("3g.40gb"), "CUSTOM_HALF_A100");
        assert_eq!(map.class_of("4g.40gb"), "CUSTOM_MIG_4G_40GB");
    }

    #[test]
    fn class_validation() {
        for ok in [
            "VGPU",
            "PGPU",
            "PCI_DEVICE",
            "CUSTOM_X",
            "CUSTOM_MIG_3G_40GB",
            "CUSTOM__",
        ] {
            assert!(is_valid_class(ok), "{ok}");
        }
        for bad in [
            "",
            "CUSTOM_",
            "custom_x",
            "CUSTOM_x",
            "CUSTOM-X",
            "MEMORY_MB",
            "VGPU ",
        ] {
            assert!(!is_valid_class(bad), "{bad}");
        }
        assert!(!is_valid_class(&format!("CUSTOM_{}", "A".repeat(250))));
    }
}
