//! The kernel's CPU list format (`0-3,8,10-11`), used by `cpulist`, `cpu/online` and
//! `node/online`.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use crate::NumaError;

/// The highest CPU (or node) number accepted. The kernel's `NR_CPUS` tops out at 8192 today; the
/// cap only exists so that a corrupt range such as `0-4294967295` cannot make us allocate a set
/// of four billion entries.
pub const MAX_CPU: u32 = 65_535;

/// A set of CPU numbers, parsed from and shown in the kernel's list format.
///
/// `""` is the empty set (a memory-only NUMA node). Display is canonical: ascending, runs of two
/// or more consecutive CPUs as `a-b`, so `"3,0-2"` reads back as `"0-3"`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet(BTreeSet<u32>);

impl CpuSet {
    /// The CPUs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }
    /// Number of CPUs.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// True for a node without CPUs.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }
    /// A set of the given CPUs (duplicates are merged).
    pub fn from_cpus(cpus: impl IntoIterator<Item = u32>) -> Self {
        Self(cpus.into_iter().collect())
    }
}

fn cpu_number(input: &str, token: &str) -> Result<u32, NumaError> {
    let bad = |reason: String| NumaError::CpuList {
        input: input.to_owned(),
        reason,
    };
    if token.is_empty() || !token.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad(format!("{token:?} is not a CPU number")));
    }
    match token.parse::<u32>() {
        Ok(n) if n <= MAX_CPU => Ok(n),
        _ => Err(bad(format!("CPU {token} is above the limit of {MAX_CPU}"))),
    }
}

impl FromStr for CpuSet {
    type Err = NumaError;
    fn from_str(s: &str) -> Result<Self, NumaError> {
        let text = s.trim();
        let mut cpus = BTreeSet::new();
        if text.is_empty() {
            return Ok(Self(cpus));
        }
        for item in text.split(',') {
            let (first, last) = match item.split_once('-') {
                Some((a, b)) => (cpu_number(s, a)?, cpu_number(s, b)?),
                None => {
                    let n = cpu_number(s, item)?;
                    (n, n)
                }
            };
            if first > last {
                let reason = format!("range {item:?} runs backwards");
                return Err(NumaError::CpuList {
                    input: s.to_owned(),
                    reason,
                });
            }
            cpus.extend(first..=last);
        }
        Ok(Self(cpus))
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for cpu in self.iter() {
            match runs.last_mut() {
                Some((_, end)) if end.checked_add(1) == Some(cpu) => *end = cpu,
                _ => runs.push((cpu, cpu)),
            }
        }
        for (i, (start, end)) in runs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_lists() {
        let set: CpuSet = "0-3,8,10-11\n".parse().unwrap();
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(set.len(), 7);
        assert!(set.contains(8) && !set.contains(9));
        assert!("".parse::<CpuSet>().unwrap().is_empty());
        assert!("\n".parse::<CpuSet>().unwrap().is_empty());
        assert_eq!("5".parse::<CpuSet>().unwrap(), CpuSet::from_cpus([5]));
    }

    #[test]
    fn displays_canonical_ranges() {
        assert_eq!(
            CpuSet::from_cpus([11, 0, 1, 2, 3, 8, 10, 3]).to_string(),
            "0-3,8,10-11"
        );
        assert_eq!(CpuSet::from_cpus([0, 1]).to_string(), "0-1");
        assert_eq!(CpuSet::from_cpus([]).to_string(), "");
        assert_eq!("3,0-2,1".parse::<CpuSet>().unwrap().to_string(), "0-3");
        let max = CpuSet::from_cpus([u32::MAX - 1, u32::MAX]);
        assert_eq!(max.to_string(), "4294967294-4294967295");
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "banana", "0-", "-3", "3-1", "0,,1", "0-3,", "1 2", "0x1", "0-99999", "+1",
        ] {
            let err = bad.parse::<CpuSet>().unwrap_err();
            assert!(matches!(err, NumaError::CpuList { .. }), "{bad:?}: {err}");
        }
        let err = "0-3,x".parse::<CpuSet>().unwrap_err();
        assert!(
            err.to_string().contains("\"x\" is not a CPU number"),
            "{err}"
        );
    }

    #[test]
    fn serde_as_string() {
        let set: CpuSet = "0-31,64-95".parse().unwrap();
        let json = serde_json::to_string(&set).unwrap();
        assert_eq!(json, "\"0-31,64-95\"");
        assert_eq!(serde_json::from_str::<CpuSet>(&json).unwrap(), set);
        assert!(serde_json::from_str::<CpuSet>("\"3-1\"").is_err());
    }
}
