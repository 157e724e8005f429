use std::fmt;
use std::str::FromStr;

use crate::IdError;

/// A NUMA node id as the kernel numbers nodes under `/sys/devices/system/node/node<N>`.
///
/// The kernel's `-1` ("no locality known") is not a node: callers read it as `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NumaNodeId(pub u16);

impl FromStr for NumaNodeId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        let t = s.trim();
        if t == "-1" {
            return Err(IdError::new(
                "NUMA node id",
                s,
                "-1 means the locality is unknown",
            ));
        }
        if t.is_empty() || !t.chars().all(|c| c.is_ascii_digit()) || t.len() > 5 {
            return Err(IdError::new(
                "NUMA node id",
                s,
                "expected a decimal node number",
            ));
        }
        t.parse::<u16>()
            .map(Self)
            .map_err(|_| IdError::new("NUMA node id", s, "node number is out of range"))
    }
}

impl fmt::Display for NumaNodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

// NUMA node ids travel as numbers in JSON (`"numa_node": 1`), unlike the string-shaped ids.
impl serde::Serialize for NumaNodeId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u16(self.0)
    }
}
impl<'de> serde::Deserialize<'de> for NumaNodeId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        u16::deserialize(d).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!("1\n".parse::<NumaNodeId>().unwrap(), NumaNodeId(1));
        assert!(
            "-1".parse::<NumaNodeId>()
                .unwrap_err()
                .reason
                .contains("unknown")
        );
        for bad in ["", "x", "1.0", "+1", "999999"] {
            assert!(bad.parse::<NumaNodeId>().is_err(), "{bad:?}");
        }
        assert_eq!(serde_json::to_string(&NumaNodeId(3)).unwrap(), "3");
    }
}
