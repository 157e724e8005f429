//! Partition mode names and the numbers GIM's host library uses for them.
//!
//! `amdsmi_accelerator_partition_type_t` (SPX 1, DPX 2, TPX 3, QPX 4, CPX 5) and
//! `amdsmi_memory_partition_type_t` (NPS1 1, NPS2 2, NPS4 4, NPS8 8) from GIM's
//! `smi-lib/interface/amdsmi.h` (@195468d6). These are the GIM header's values; the ROCm
//! library renumbered its own enums between releases (see `crate::amd_real`), so they are not
//! shared with it.

/// Compute partition types by number.
const COMPUTE: [(u32, &str); 5] = [(1, "SPX"), (2, "DPX"), (3, "TPX"), (4, "QPX"), (5, "CPX")];
/// Memory partition modes by number; each one's `amdsmi_nps_caps_t` bit is `log2(number)`.
const MEMORY: [(u32, &str); 4] = [(1, "NPS1"), (2, "NPS2"), (4, "NPS4"), (8, "NPS8")];

fn by_name(table: &[(u32, &'static str)], name: &str) -> Option<u32> {
    let name = name.trim();
    table
        .iter()
        .find(|(_, n)| n.eq_ignore_ascii_case(name))
        .map(|(v, _)| *v)
}

fn by_value(table: &[(u32, &'static str)], value: u32) -> Option<&'static str> {
    table.iter().find(|(v, _)| *v == value).map(|(_, n)| *n)
}

/// `SPX` for 1 …; `None` for `INVALID` (0) and numbers the header does not define.
pub(crate) fn compute_name(profile_type: u32) -> Option<&'static str> {
    by_value(&COMPUTE, profile_type)
}

/// The profile type of a compute mode name, in any case.
pub(crate) fn compute_type(name: &str) -> Option<u32> {
    by_name(&COMPUTE, name)
}

/// `NPS1` for 1 …; `None` for `UNKNOWN` (0) and numbers the header does not define.
pub(crate) fn memory_name(mode: u32) -> Option<&'static str> {
    by_value(&MEMORY, mode)
}

/// The `amdsmi_memory_partition_type_t` of a memory mode name, in any case.
pub(crate) fn memory_type(name: &str) -> Option<u32> {
    by_name(&MEMORY, name)
}

/// Whether `nps_caps` allows memory mode `mode` (bit 0 NPS1, bit 1 NPS2, bit 2 NPS4, bit 3 NPS8).
pub(crate) fn caps_allow(nps_caps: u32, mode: u32) -> bool {
    mode.is_power_of_two() && nps_caps & (1 << mode.trailing_zeros()) != 0
}

/// The memory modes `nps_caps` allows, smallest first.
pub(crate) fn caps_names(nps_caps: u32) -> Vec<String> {
    MEMORY
        .iter()
        .filter(|(mode, _)| caps_allow(nps_caps, *mode))
        .map(|(_, name)| (*name).to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        assert_eq!(compute_type("cpx"), Some(5));
        assert_eq!(compute_type(" QPX\n"), Some(4));
        assert_eq!(compute_type("XPX"), None);
        assert_eq!(compute_name(3), Some("TPX"));
        assert_eq!(compute_name(0), None);
        assert_eq!(
            compute_name(6),
            None,
            "AMDSMI_ACCELERATOR_PARTITION_MAX is no mode"
        );
        assert_eq!(memory_type("nps4"), Some(4));
        assert_eq!(memory_type("NPS3"), None);
        assert_eq!(memory_name(8), Some("NPS8"));
        assert_eq!(memory_name(3), None);
    }

    #[test]
    fn nps_caps_bits() {
        // MI300X: NPS1 and NPS4.
        let caps = 0b101;
        assert_eq!(caps_names(caps), ["NPS1", "NPS4"]);
        assert!(caps_allow(caps, 4));
        assert!(!caps_allow(caps, 2));
        assert!(!caps_allow(caps, 3), "not a mode");
        assert!(!caps_allow(u32::MAX, 0));
        assert_eq!(caps_names(0b1010), ["NPS2", "NPS8"]);
    }
}
