use std::fmt;
use std::str::FromStr;

use crate::{IdError, serde_via_str};

/// A MIG GPU-instance profile name such as `3g.40gb` or `1g.10gb+me`.
///
/// The grammar is `<compute slices>g.<memory>gb` followed by optional attributes (`+me`,
/// `+me.all`, `-me`, `+gfx`). NVML reports names with a `MIG ` prefix (`MIG 1g.10gb`), which is
/// accepted and dropped. Profile *ids* differ by driver and device, so a name is resolved to an id
/// through NVML at run time, never hard-coded.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MigProfileName {
    compute_slices: u8,
    memory_gb: u32,
    attributes: String,
}

const MIG: &str = "MIG profile name";

impl MigProfileName {
    /// Number of GPU (compute) slices: the `3` of `3g.40gb`.
    pub fn compute_slices(&self) -> u8 {
        self.compute_slices
    }
    /// Memory size in GB as named: the `40` of `3g.40gb`.
    pub fn memory_gb(&self) -> u32 {
        self.memory_gb
    }
    /// Attribute suffix, e.g. `+me`, or empty.
    pub fn attributes(&self) -> &str {
        &self.attributes
    }
}

fn parse_attributes(input: &str, mut rest: &str) -> Result<String, IdError> {
    let all = rest;
    while !rest.is_empty() {
        // By char, not by byte: the text after the size may start with any character.
        let (sign, body) = match rest.chars().next() {
            Some(c @ ('+' | '-')) => (c, &rest[1..]),
            _ => {
                return Err(IdError::new(
                    MIG,
                    input,
                    format!("unexpected {rest:?} after the size"),
                ));
            }
        };
        let end = body.find(['+', '-']).unwrap_or(body.len());
        let attr = &body[..end];
        let valid = !attr.is_empty()
            && attr
                .split('.')
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase()));
        if !valid {
            return Err(IdError::new(
                MIG,
                input,
                format!("attribute {sign}{attr:?} is malformed"),
            ));
        }
        rest = &body[end..];
    }
    Ok(all.to_owned())
}

impl FromStr for MigProfileName {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        let lower = s.trim().to_ascii_lowercase();
        let name = lower.strip_prefix("mig ").unwrap_or(&lower);
        let (slices, rest) = name
            .split_once("g.")
            .ok_or_else(|| IdError::new(MIG, s, "expected <n>g.<m>gb, e.g. 3g.40gb"))?;
        let compute_slices = match slices.parse::<u8>() {
            Ok(n @ 1..=8) if slices.len() == 1 => n,
            _ => return Err(IdError::new(MIG, s, "compute slices must be 1 to 8")),
        };
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let memory_gb = rest[..digits_end]
            .parse::<u32>()
            .ok()
            .filter(|m| *m > 0 && digits_end <= 4)
            .ok_or_else(|| IdError::new(MIG, s, "memory size must be a whole number of GB"))?;
        let after = rest[digits_end..]
            .strip_prefix("gb")
            .ok_or_else(|| IdError::new(MIG, s, "memory size must end in \"gb\""))?;
        let attributes = parse_attributes(s, after)?;
        Ok(Self {
            compute_slices,
            memory_gb,
            attributes,
        })
    }
}

impl fmt::Display for MigProfileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}g.{}gb{}",
            self.compute_slices, self.memory_gb, self.attributes
        )
    }
}
serde_via_str!(MigProfileName);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nvidia_names() {
        for (input, canonical) in [
            ("3g.40gb", "3g.40gb"),
            ("1g.10gb+me", "1g.10gb+me"),
            ("MIG 7g.141gb", "7g.141gb"),
            ("1G.18GB", "1g.18gb"),
            ("1g.24gb+me.all", "1g.24gb+me.all"),
            ("2g.35gb-me", "2g.35gb-me"),
            ("1g.23gb+gfx", "1g.23gb+gfx"),
        ] {
            let p: MigProfileName = input.parse().unwrap();
            assert_eq!(p.to_string(), canonical);
        }
        let p: MigProfileName = "3g.40gb".parse().unwrap();
        assert_eq!(
            (p.compute_slices(), p.memory_gb(), p.attributes()),
            (3, 40, "")
        );
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "3g",
            "3g.40",
            "0g.10gb",
            "9g.10gb",
            "3g.0gb",
            "3g.40gb+",
            "3g.40gb+ME1",
            "3g.40gbx",
            "1c.3g.40gb",
            "10g.40gb",
            "3g.40gb/..",
            // Found by fuzz/ids_roundtrip: a multi-byte character after the size panicked.
            "1g.10gb\u{558}\u{467}",
            "1g.10gb+me\u{e9}",
        ] {
            assert!(bad.parse::<MigProfileName>().is_err(), "{bad:?}");
        }
    }
}
