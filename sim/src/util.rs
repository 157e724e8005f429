//! Small helpers: kernel CPU lists, relative link targets, stable hashes.

use std::collections::BTreeSet;

/// Parses a kernel CPU list (`0-31,64-95`, empty for none).
pub(crate) fn parse_cpulist(text: &str) -> Result<BTreeSet<u32>, String> {
    let mut cpus = BTreeSet::new();
    let text = text.trim();
    if text.is_empty() {
        return Ok(cpus);
    }
    for part in text.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let lo: u32 = lo
            .trim()
            .parse()
            .map_err(|_| format!("{part:?} is not a CPU range"))?;
        let hi: u32 = hi
            .trim()
            .parse()
            .map_err(|_| format!("{part:?} is not a CPU range"))?;
        if lo > hi || hi >= 65536 {
            return Err(format!("{part:?} is not a CPU range"));
        }
        cpus.extend(lo..=hi);
    }
    Ok(cpus)
}

/// Formats CPUs the way the kernel prints `cpulist` files.
pub(crate) fn format_cpulist(cpus: &BTreeSet<u32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = cpus.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(",")
}

/// The relative target a link at `link` needs to point at `target` (both absolute, normalised),
/// as the kernel writes sysfs links: `../../../devices/pci0000:40/0000:40:01.1/0000:41:00.0`.
pub(crate) fn relative_link(link: &str, target: &str) -> String {
    let from: Vec<&str> = link.split('/').filter(|s| !s.is_empty()).collect();
    let from = &from[..from.len().saturating_sub(1)];
    let to: Vec<&str> = target.split('/').filter(|s| !s.is_empty()).collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<&str> = vec![".."; from.len() - common];
    parts.extend(&to[common..]);
    parts.join("/")
}

/// FNV-1a, 64 bits: a stable hash for derived identifiers (UUIDs) and telemetry seeds.
pub(crate) fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A UUID-shaped string derived from a seed text, stable across runs.
pub(crate) fn derived_uuid(seed: &str) -> String {
    let a = fnv1a(seed.as_bytes());
    let b = fnv1a(format!("{seed}#2").as_bytes());
    let hex = format!("{a:016x}{b:016x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_round_trip() {
        let cpus = parse_cpulist("0-3,8,10-11").unwrap();
        assert_eq!(cpus.len(), 7);
        assert_eq!(format_cpulist(&cpus), "0-3,8,10-11");
        assert!(parse_cpulist("").unwrap().is_empty());
        assert!(parse_cpulist("3-1").is_err());
        assert!(parse_cpulist("a").is_err());
    }

    #[test]
    fn links_are_relative_like_the_kernel() {
        assert_eq!(
            relative_link(
                "/sys/bus/pci/devices/0000:41:00.0",
                "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0"
            ),
            "../../../devices/pci0000:40/0000:40:01.1/0000:41:00.0"
        );
        assert_eq!(
            relative_link("/sys/devices/p/a/virtfn0", "/sys/devices/p/b"),
            "../b"
        );
    }

    #[test]
    fn derived_uuids_are_stable_and_distinct() {
        assert_eq!(derived_uuid("x"), derived_uuid("x"));
        assert_ne!(derived_uuid("x"), derived_uuid("y"));
        assert_eq!(derived_uuid("x").len(), 36);
    }
}
