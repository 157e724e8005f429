//! The limits of a request, defined once: the front ends' wire types check what clients send
//! against them (and publish them in the OpenAPI document), and the engine checks data that does
//! not come through a front end (layouts files, imports, direct callers) against the same ones.
//!
//! The numbers are part of the public API (`docs/api.md`, `api/openapi.json`): raising one is
//! compatible, lowering one is not.

use std::fmt;

/// Longest free text (consumer, VM, idempotency key, slice type, layout name, model), in
/// characters. Text ends up in logs, the store and libvirt metadata; 64 holds a UUID with room
/// for a prefix.
pub const MAX_TEXT_CHARS: usize = 64;

/// Most slices one allocation may hold, and one layout entry may declare (a host has at most a
/// few dozen GPU functions; 64 leaves room for eight GPUs of seven MIG slices each).
pub const MAX_COUNT: u32 = 64;

/// Most vCPUs a request may name (libvirt's own limit for a KVM guest is of this order).
pub const MAX_VCPUS: u32 = 4096;

/// Most memory a request may name, MiB (1 PiB).
pub const MAX_MEMORY_MIB: u64 = 1 << 30;

/// Highest MIG start slot (a GPU has eight memory slices, 0 to 7).
pub const MAX_MIG_START: u32 = 7;

/// Most layouts in one document, and most selector items or entries in one layout.
pub const MAX_ITEMS: usize = 64;

/// Highest GPU index a layout selector may name.
pub const MAX_GPU_INDEX: u32 = 1023;

/// Largest mig-parted config an import takes, characters (NVIDIA's default config, every GPU
/// model, is about 10 KiB); at four bytes a character it stays within a 1 MiB body.
pub const MAX_IMPORT_CONFIG_CHARS: usize = 256 * 1024;

/// Longest mig-parted config name, characters: imported layouts are named `<config>#<entry>`,
/// which must stay within [`MAX_TEXT_CHARS`].
pub const MAX_IMPORT_CONFIG_NAME_CHARS: usize = 56;

/// Most mdevctl definitions in one import.
pub const MAX_IMPORT_DEFINITIONS: usize = 256;

/// Largest mdevctl definition, characters (mdevctl writes a few hundred).
pub const MAX_IMPORT_DEFINITION_CHARS: usize = 4096;

/// Why a piece of free text is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFault {
    /// It is empty.
    Empty,
    /// It is longer than [`MAX_TEXT_CHARS`].
    TooLong,
    /// It contains control characters (C0, DEL or C1).
    Control,
    /// It contains a character that changes how text around it is shown without being seen
    /// itself: bidirectional overrides and isolates, zero-width and other format characters,
    /// line and paragraph separators, Unicode tag characters.
    Invisible(char),
}

impl fmt::Display for TextFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TextFault::Empty => f.write_str("must not be empty"),
            TextFault::TooLong => write!(f, "longer than {MAX_TEXT_CHARS} characters"),
            TextFault::Control => f.write_str("contains control characters"),
            TextFault::Invisible(c) => write!(
                f,
                "contains the invisible or bidirectional formatting character U+{:04X}",
                u32::from(*c)
            ),
        }
    }
}

/// Characters refused in free text besides control characters: the Unicode format characters
/// (general category Cf) of the Basic Multilingual Plane that occur in real text, the line and
/// paragraph separators, and the whole block of tag characters and supplementary variation
/// selectors (U+E0000 to U+E03FF, one UTF-16 high surrogate, so the OpenAPI pattern can say
/// it). They reorder or hide what a log line or a listing shows (CVE-2021-42574, "Trojan
/// Source"; Unicode TR #9 for the bidi controls, TR #36 for invisible characters).
pub const INVISIBLE: &[(char, char)] = &[
    ('\u{00AD}', '\u{00AD}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{180E}', '\u{180E}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{2028}', '\u{202E}'),
    ('\u{2060}', '\u{206F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFF9}', '\u{FFFB}'),
    ('\u{E0000}', '\u{E03FF}'),
];

/// The pattern of free text as the OpenAPI document publishes it: no control characters and
/// none of [`INVISIBLE`] (`\uDB40` is the high surrogate of U+E0000 to U+E03FF).
pub const TEXT_PATTERN: &str = r"^[^\u0000-\u001F\u007F-\u009F\u00AD\u061C\u180E\u200B-\u200F\u2028-\u202E\u2060-\u206F\uFEFF\uFFF9-\uFFFB\uDB40]+$";

/// Checks free text: non-empty, at most [`MAX_TEXT_CHARS`] characters, no control characters
/// and none of [`INVISIBLE`].
pub fn check_text(value: &str) -> Result<(), TextFault> {
    let n = value.chars().count();
    if n == 0 {
        return Err(TextFault::Empty);
    }
    if n > MAX_TEXT_CHARS {
        return Err(TextFault::TooLong);
    }
    if value.chars().any(char::is_control) {
        return Err(TextFault::Control);
    }
    if let Some(c) = value.chars().find(|c| is_invisible(*c)) {
        return Err(TextFault::Invisible(c));
    }
    Ok(())
}

fn is_invisible(c: char) -> bool {
    INVISIBLE.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c))
}

/// Checks a count of slices: 1 to [`MAX_COUNT`].
pub fn count_in_range(n: u32) -> bool {
    (1..=MAX_COUNT).contains(&n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_counted_in_characters() {
        assert_eq!(check_text("nova"), Ok(()));
        assert_eq!(check_text(&"é".repeat(MAX_TEXT_CHARS)), Ok(()));
        assert_eq!(
            check_text(&"a".repeat(MAX_TEXT_CHARS + 1)),
            Err(TextFault::TooLong)
        );
        assert_eq!(check_text(""), Err(TextFault::Empty));
        assert_eq!(check_text("a\nb"), Err(TextFault::Control));
        assert_eq!(check_text("a\u{85}b"), Err(TextFault::Control));
        assert!(count_in_range(1) && count_in_range(MAX_COUNT));
    }

    #[test]
    fn bidi_overrides_and_invisible_characters_are_refused() {
        for (text, c) in [
            ("nova\u{202E}gpj.exe", '\u{202E}'),
            ("\u{2066}admin\u{2069}", '\u{2066}'),
            ("no\u{200B}va", '\u{200B}'),
            ("nova\u{FEFF}", '\u{FEFF}'),
            ("a\u{2028}b", '\u{2028}'),
            ("tag\u{E0041}", '\u{E0041}'),
            ("soft\u{AD}hyphen", '\u{AD}'),
        ] {
            assert_eq!(check_text(text), Err(TextFault::Invisible(c)), "{text:?}");
        }
        // Letters of any script, emoji and joiners inside words stay allowed where they are
        // not format characters.
        for ok in ["nova-compute", "Ärzte GmbH", "東京", "vm🙂", "שלום"] {
            assert_eq!(check_text(ok), Ok(()), "{ok}");
        }
        assert!(!count_in_range(0) && !count_in_range(MAX_COUNT + 1));
    }
}
