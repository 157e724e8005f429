//! `allowed_subjects` entries of `[api.tcp]`: which client-certificate subjects a rule admits.
//!
//! An entry is a comma-separated list of `ATTR=value` pairs (`CN=nova-compute,O=Example`).
//! Anything else is a configuration error at start-up: an entry silently dropped or half read
//! would admit more than the operator wrote. A rule constrains exactly the attributes it names,
//! and for each of them it must name every value the subject has: a certificate with two CNs
//! does not pass a rule for one of them (`CN=a` does not admit `CN=a+CN=b` or `CN=a,CN=b`; the
//! rule `CN=a,CN=b` does). Attributes the rule does not name are not looked at.

use std::collections::BTreeMap;

/// Attribute names a rule may use, as the TLS listener names a subject's attributes
/// (x509-parser's abbreviations, else the OID registry's names); dotted OIDs are accepted too.
/// Compared without regard to case.
pub const ATTRIBUTES: &[&str] = &[
    "CN",
    "C",
    "L",
    "ST",
    "O",
    "OU",
    "DC",
    "Email",
    "uid",
    "serialNumber",
    "surname",
    "givenName",
    "initials",
    "title",
    "streetAddress",
    "postalCode",
    "generationQualifier",
    "dnQualifier",
];

/// A parsed `allowed_subjects` entry: per attribute (canonical name), the values it requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectRule {
    wanted: BTreeMap<String, Vec<String>>,
}

impl SubjectRule {
    /// Parses an entry; the error says what is wrong with it.
    pub fn parse(entry: &str) -> Result<SubjectRule, String> {
        let mut wanted: BTreeMap<String, Vec<String>> = BTreeMap::new();
        if entry.trim().is_empty() {
            return Err("an entry must name at least one ATTR=value pair".into());
        }
        for pair in entry.split(',') {
            let Some((attr, value)) = pair.split_once('=') else {
                return Err(format!(
                    "{:?} is not ATTR=value (such as CN=nova-compute)",
                    pair.trim()
                ));
            };
            let (attr, value) = (attr.trim(), value.trim());
            let name = canonical_attribute(attr).ok_or_else(|| {
                format!(
                    "unknown attribute {attr:?}: use one of {} or a dotted OID",
                    ATTRIBUTES.join(", ")
                )
            })?;
            if value.is_empty() {
                return Err(format!("{attr}= has an empty value"));
            }
            wanted.entry(name).or_default().push(value.to_owned());
        }
        for values in wanted.values_mut() {
            values.sort();
        }
        Ok(SubjectRule { wanted })
    }

    /// Whether a subject, as (attribute, value) pairs, passes the rule: for every attribute the
    /// rule names, the subject's values of it are exactly the rule's (values compared exactly).
    pub fn matches(&self, subject: &[(String, String)]) -> bool {
        self.wanted.iter().all(|(attr, values)| {
            let mut have: Vec<&str> = subject
                .iter()
                .filter(|(a, _)| canonical_attribute(a).as_deref() == Some(attr))
                .map(|(_, v)| v.as_str())
                .collect();
            have.sort_unstable();
            have == *values
        })
    }
}

/// The attribute's canonical spelling, or `None` when it is neither known nor a dotted OID.
fn canonical_attribute(attr: &str) -> Option<String> {
    if let Some(known) = ATTRIBUTES.iter().find(|a| a.eq_ignore_ascii_case(attr)) {
        return Some((*known).to_owned());
    }
    let dotted = attr.split('.').count() >= 2
        && attr
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    dotted.then(|| attr.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, v)| ((*a).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn malformed_entries_are_errors_not_ignored() {
        for bad in [
            "O:Example",
            "CN=nova,O:Example",
            "",
            " , ",
            "XX=1",
            "CN=",
            "CN= ,O=Example",
            "=nova",
        ] {
            assert!(SubjectRule::parse(bad).is_err(), "{bad:?}");
        }
        assert!(SubjectRule::parse("cn=nova, O=Example").is_ok());
        assert!(SubjectRule::parse("2.5.4.97=VATDE-123").is_ok());
    }

    #[test]
    fn a_rule_for_one_value_does_not_admit_a_subject_with_two() {
        let one = SubjectRule::parse("CN=nova-compute").unwrap();
        let plain = subject(&[("CN", "nova-compute"), ("O", "Example")]);
        assert!(one.matches(&plain), "other attributes are not looked at");
        let two = subject(&[("CN", "nova-compute"), ("CN", "admin"), ("O", "Example")]);
        assert!(!one.matches(&two));
        let both = SubjectRule::parse("CN=admin,CN=nova-compute").unwrap();
        assert!(both.matches(&two));
        assert!(!both.matches(&plain));
        let org = SubjectRule::parse("CN=nova-compute,O=Example").unwrap();
        assert!(org.matches(&plain));
        assert!(!org.matches(&subject(&[("CN", "nova-compute"), ("O", "Other")])));
        assert!(!org.matches(&subject(&[("CN", "nova-compute")])));
        // A repeated O counts like a repeated CN.
        let orgs = subject(&[("CN", "nova-compute"), ("O", "Example"), ("O", "Evil")]);
        assert!(!org.matches(&orgs));
    }
}
