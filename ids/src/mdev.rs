use std::fmt;
use std::str::FromStr;

use crate::{IdError, check_path_component, serde_via_str};

/// The UUID of a mediated device. Canonical form: hyphenated lower case, the form the kernel
/// shows under `/sys/bus/mdev/devices`. The nil UUID is rejected: no kernel or tool uses it and
/// it usually means an uninitialised value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MdevUuid(uuid::Uuid);

const UUID: &str = "mdev UUID";

impl MdevUuid {
    /// A fresh random (version 4) UUID.
    pub fn new_random() -> Self {
        Self(uuid::Uuid::new_v4())
    }

    /// A UUID the caller laid out (e.g. a creator's marked UUIDv8); `None` for the nil UUID.
    pub fn from_uuid(u: uuid::Uuid) -> Option<Self> {
        (!u.is_nil()).then_some(Self(u))
    }

    /// The UUID.
    pub fn as_uuid(&self) -> &uuid::Uuid {
        &self.0
    }
}

impl FromStr for MdevUuid {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        // Only the 36-character hyphenated form: the kernel and mdevctl use nothing else, and
        // accepting braces or URNs would give one device several spellings.
        if s.len() != 36 {
            return Err(IdError::new(
                UUID,
                s,
                "expected 36 characters, 8-4-4-4-12 hex digits",
            ));
        }
        let u = uuid::Uuid::try_parse(s).map_err(|e| IdError::new(UUID, s, e.to_string()))?;
        if u.is_nil() {
            return Err(IdError::new(UUID, s, "the nil UUID is not a device"));
        }
        Ok(Self(u))
    }
}

impl fmt::Display for MdevUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.hyphenated())
    }
}
serde_via_str!(MdevUuid);

/// An mdev type id as the parent driver enumerates it under `mdev_supported_types`, e.g.
/// `nvidia-222`, `mtty-2`, `i915-GVTg_V5_4`. Case is kept: the kernel's names are case sensitive.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MdevTypeId(String);

impl MdevTypeId {
    /// The type id as the kernel spells it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for MdevTypeId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        check_path_component("mdev type id", s, 128)?;
        if s.contains(':') {
            return Err(IdError::new(
                "mdev type id",
                s,
                "character ':' is not allowed",
            ));
        }
        Ok(Self(s.to_owned()))
    }
}

impl fmt::Display for MdevTypeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
serde_via_str!(MdevTypeId);

/// The name of an mdev parent under `/sys/class/mdev_bus`. For GPUs it is a PCI address, but
/// not always: the kernel's sample drivers register parents named `mtty`, `mdpy`, `mbochs`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MdevParentName(String);

impl MdevParentName {
    /// The parent's name as the kernel spells it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// The PCI address, when the parent is a PCI function.
    pub fn pci_address(&self) -> Option<crate::PciAddress> {
        self.0.parse().ok()
    }
}

impl FromStr for MdevParentName {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        check_path_component("mdev parent", s, 128)?;
        // Keep one spelling per PCI parent so lookups by address and by name agree.
        match s.parse::<crate::PciAddress>() {
            Ok(addr) => Ok(Self(addr.to_string())),
            Err(_) => Ok(Self(s.to_owned())),
        }
    }
}

impl From<crate::PciAddress> for MdevParentName {
    fn from(addr: crate::PciAddress) -> Self {
        Self(addr.to_string())
    }
}

impl fmt::Display for MdevParentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
serde_via_str!(MdevParentName);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_canonical_and_strict() {
        let u: MdevUuid = "83B8F4F2-509F-382F-3C1E-E6BFE0FA1001".parse().unwrap();
        assert_eq!(u.to_string(), "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001");
        let nil = "00000000-0000-0000-0000-000000000000"
            .parse::<MdevUuid>()
            .unwrap_err();
        assert!(nil.reason.contains("nil"));
        for bad in [
            "83b8f4f2509f382f3c1ee6bfe0fa1001",
            "{83b8f4f2-509f-382f-3c1e-e6bfe0fa1001}",
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa100g",
            "../../../../etc/passwd-aaaaaaaaaaaaaa",
        ] {
            assert!(bad.parse::<MdevUuid>().is_err(), "{bad}");
        }
        assert_ne!(MdevUuid::new_random(), MdevUuid::new_random());
    }

    #[test]
    fn type_ids() {
        assert_eq!(
            "nvidia-222".parse::<MdevTypeId>().unwrap().as_str(),
            "nvidia-222"
        );
        assert_eq!(
            "i915-GVTg_V5_4".parse::<MdevTypeId>().unwrap().as_str(),
            "i915-GVTg_V5_4"
        );
        for bad in ["", "..", "a/b", "nvidia 222", "x:y", "ñ"] {
            assert!(bad.parse::<MdevTypeId>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn parents() {
        assert_eq!(
            "mtty".parse::<MdevParentName>().unwrap().pci_address(),
            None
        );
        let p: MdevParentName = "0000:3B:00.0".parse().unwrap();
        assert_eq!(p.as_str(), "0000:3b:00.0");
        assert!(p.pci_address().is_some());
        assert!("../mtty".parse::<MdevParentName>().is_err());
    }
}
