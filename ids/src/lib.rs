//! Typed identifiers used at every boundary of vgpud.
//!
//! Each type parses strictly, keeps one canonical form, and is the only way a value from outside
//! (a client, a sysfs file, a vendor library) becomes part of a sysfs path. Errors say what was
//! wrong with the input, not just that it was wrong.
//!
//! This crate owns parsing and formatting only; it must not touch the host.

mod iommu;
mod mdev;
mod mig;
mod numa;
#[cfg(feature = "openapi")]
mod openapi;
mod pci;
mod vgpu;

pub use iommu::IommuGroupId;
pub use mdev::{MdevParentName, MdevTypeId, MdevUuid};
pub use mig::MigProfileName;
pub use numa::NumaNodeId;
pub use pci::{PciAddress, PciDeviceId, PciVendorId};
pub use vgpu::VgpuTypeId;

/// Why a string was not accepted as an identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} {input:?}: {reason}")]
pub struct IdError {
    /// Which identifier was being parsed, e.g. "PCI address".
    pub kind: &'static str,
    /// The rejected input (truncated to 64 characters so hostile input cannot flood a log).
    pub input: String,
    /// What was wrong with it.
    pub reason: String,
}

impl IdError {
    pub(crate) fn new(kind: &'static str, input: &str, reason: impl Into<String>) -> Self {
        let input = input.chars().take(64).collect();
        Self {
            kind,
            input,
            reason: reason.into(),
        }
    }
}

/// Implements `Display`-based serde for a type that parses from `&str` via `FromStr`.
macro_rules! serde_via_str {
    ($ty:ty) => {
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
pub(crate) use serde_via_str;

/// Checks that `s` is a safe single path component made of `[A-Za-z0-9_.:-]`, not `.` or `..`.
pub(crate) fn check_path_component(kind: &'static str, s: &str, max: usize) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::new(kind, s, "it is empty"));
    }
    if s.len() > max {
        return Err(IdError::new(
            kind,
            s,
            format!("it is longer than {max} characters"),
        ));
    }
    if s == "." || s == ".." {
        return Err(IdError::new(kind, s, "it is a relative path component"));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "_.:-".contains(*c)))
    {
        return Err(IdError::new(
            kind,
            s,
            format!("character {c:?} is not allowed"),
        ));
    }
    Ok(())
}
