//! Wire types of the API: what goes over HTTP as JSON, with OpenAPI schemas, and the
//! conversions to and from the engine's model. Both front ends use them: REST deserialises its
//! bodies into them, D-Bus maps its arguments onto them (`dbus::args`), and both serialise their
//! JSON answers from them.
//!
//! Requests reject unknown fields and are checked here, once for every front end, against
//! exactly the constraints their schema declares (lengths, patterns, ranges; the numbers are
//! [`agent::engine::limits`]), so a request the document calls valid is never refused for its
//! shape, and one it calls invalid never reaches the engine. Identifiers are accepted in their
//! canonical spelling only: nothing a client sends becomes a path on the host unchecked.

pub mod demand_mix;
pub mod events;
pub mod health;
pub mod import;
pub mod inventory;
pub mod layouts;
pub mod placement;
pub mod slices;

use std::str::FromStr;

use crate::error::ApiError;

pub use agent::engine::limits::{
    MAX_COUNT, MAX_GPU_INDEX, MAX_ITEMS, MAX_MEMORY_MIB, MAX_MIG_START, MAX_TEXT_CHARS, MAX_VCPUS,
};

/// The pattern of free text: no control characters, no invisible or bidi formatting ones.
pub use agent::engine::limits::TEXT_PATTERN;

/// The pattern of a canonical PCI address (`dddd:bb:dd.f`, lower case).
pub const PCI_PATTERN: &str = r"^[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$";

/// The pattern of a device that carries slices: a GPU by its canonical PCI address, or an mdev
/// parent that is not a PCI device (`mtty`) by its name, which never contains a colon.
pub const DEVICE_PATTERN: &str =
    r"^([0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]|[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})$";

/// The pattern of a canonical UUID (hyphenated, lower case).
pub const UUID_PATTERN: &str = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";

/// Implements the OpenAPI schema of a string newtype with a pattern.
macro_rules! text_schema {
    ($ty:ty, $pattern:expr, $example:literal) => {
        impl utoipa::PartialSchema for $ty {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .pattern(Some($pattern))
                    .examples([serde_json::json!($example)])
                    .into()
            }
        }
        impl utoipa::ToSchema for $ty {}
    };
}
pub(crate) use text_schema;

/// Integers in requests: JSON Schema's `integer` includes `2.0`, so an integral number written
/// with a fraction part is accepted; anything else that is not a whole non-negative number in
/// range is refused.
pub(crate) mod int {
    use serde::de::{Deserialize, Deserializer, Error};

    fn integral<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let n = serde_json::Number::deserialize(d)?;
        if let Some(u) = n.as_u64() {
            return Ok(u);
        }
        match n.as_f64() {
            // 2^64 is the first float past u64::MAX.
            Some(f) if f.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&f) => {
                Ok(f as u64)
            }
            _ => Err(D::Error::custom(format!(
                "invalid value: {n}, expected a whole non-negative number"
            ))),
        }
    }

    /// A `u32`.
    pub fn u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        let v = integral(d)?;
        u32::try_from(v).map_err(|_| D::Error::custom(format!("{v} is out of range for u32")))
    }

    /// An optional `u32`.
    pub fn opt_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        Option::<serde_json::Number>::deserialize(d)?
            .map(|n| u32(n).map_err(D::Error::custom))
            .transpose()
    }

    /// An optional `u64`.
    pub fn opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        Option::<serde_json::Number>::deserialize(d)?
            .map(|n| integral(n).map_err(D::Error::custom))
            .transpose()
    }

    #[cfg(test)]
    mod tests {
        #[derive(serde::Deserialize)]
        struct T {
            #[serde(deserialize_with = "super::u32")]
            n: u32,
        }

        #[test]
        fn whole_numbers_with_a_fraction_part_count() {
            let n = |s: &str| serde_json::from_str::<T>(s).map(|t| t.n);
            assert_eq!(n(r#"{"n": 32.0}"#).unwrap(), 32);
            assert_eq!(n(r#"{"n": 7}"#).unwrap(), 7);
            for bad in [
                r#"{"n": 1.5}"#,
                r#"{"n": -1}"#,
                r#"{"n": "2"}"#,
                r#"{"n": 4294967296}"#,
                r#"{"n": null}"#,
            ] {
                assert!(n(bad).is_err(), "{bad}");
            }
        }
    }
}

/// Checks free text (consumer, VM, key, type) against [`MAX_TEXT_CHARS`] and [`TEXT_PATTERN`]:
/// the engine's one text rule, with the field named.
pub fn check_text(field: &str, value: &str) -> Result<(), ApiError> {
    agent::engine::limits::check_text(value)
        .map_err(|fault| ApiError::Unprocessable(format!("{field}: {fault}")))
}

/// An idempotency key as both front ends take it (REST's `Idempotency-Key` header, D-Bus's
/// `idempotency_key` option): 1 to [`MAX_TEXT_CHARS`] visible ASCII characters, since a header
/// can carry nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Parses a key; `field` names it in the message. A refusal is `400 invalid_request`.
    pub fn parse(field: &str, text: &str) -> Result<Self, ApiError> {
        let visible = !text.is_empty() && text.bytes().all(|b| (0x21..=0x7e).contains(&b));
        if !visible || check_text(field, text).is_err() {
            return Err(ApiError::invalid(format!(
                "{field}: expected 1 to {MAX_TEXT_CHARS} visible ASCII characters"
            )));
        }
        Ok(Self(text.to_owned()))
    }

    /// The key.
    pub fn into_inner(self) -> String {
        self.0
    }
}

/// Parses a PCI address in its canonical form only (`0000:07:00.0`; not `7:0.0`, not upper case).
pub fn parse_pci(field: &str, value: &str) -> Result<ids::PciAddress, ApiError> {
    canonical(field, value, "a PCI address such as 0000:07:00.0")
}

/// Parses a device as [`DEVICE_PATTERN`] allows: a PCI address in canonical form, or the name of
/// a virtual mdev parent (no colon, so it can never be a misspelt PCI address).
pub fn parse_device(field: &str, value: &str) -> Result<agent::engine::DeviceRef, ApiError> {
    if value.contains(':') {
        return parse_pci(field, value).map(Into::into);
    }
    // ids' rule for parent names, plus the pattern's first character (no `.` or `-`).
    let first_ok = value.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
    match value.parse::<ids::MdevParentName>() {
        Ok(name) if first_ok => Ok(name.into()),
        _ => Err(ApiError::Unprocessable(format!(
            "{field}: {:?} is neither a PCI address such as 0000:07:00.0 nor an mdev parent name such as mtty",
            value.chars().take(64).collect::<String>()
        ))),
    }
}

/// Parses a value whose `Display` is its canonical form, refusing every other spelling.
pub fn canonical<T>(field: &str, value: &str, what: &str) -> Result<T, ApiError>
where
    T: FromStr + ToString,
{
    let shown: String = value.chars().take(64).collect();
    match value.parse::<T>() {
        Ok(v) if v.to_string() == value => Ok(v),
        _ => Err(ApiError::Unprocessable(format!(
            "{field}: {shown:?} is not {what} in canonical form"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses_only_in_canonical_form() {
        assert!(parse_pci("gpu", "0000:07:00.0").is_ok());
        for bad in [
            "7:0.0",
            "0000:07:00.0 ",
            "0000:07:00.A",
            "0000:07:00.8",
            "../x",
            "",
        ] {
            assert!(parse_pci("gpu", bad).is_err(), "{bad}");
        }
        assert!(parse_pci("gpu", "0000:0A:00.0").is_err());
    }

    #[test]
    fn text_limits_match_the_schema() {
        assert!(check_text("consumer", "nova").is_ok());
        assert!(check_text("consumer", &"é".repeat(MAX_TEXT_CHARS)).is_ok());
        assert!(check_text("consumer", &"a".repeat(MAX_TEXT_CHARS + 1)).is_err());
        assert!(check_text("consumer", "").is_err());
        assert!(check_text("consumer", "a\nb").is_err());
        assert!(check_text("consumer", "a\u{85}b").is_err());
    }
}
