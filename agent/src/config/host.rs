//! `[host]`'s `simulate` key: which simulated host the installed agent runs on.
//!
//! The agent library does not know the simulator's profiles (it never knows whether the host is
//! real); this checks the shape only. The program that opens the host (vgpud) resolves the name
//! and reports an unknown one with the list of built-in profiles.

use std::path::Path;

/// `simulate` is empty (the real host), a profile name (lower-case letters, digits and `-`), or
/// an absolute path to a profile file; a simulated host has no sysfs tree of its own, so
/// `sysfs_root` must stay `/`.
pub(super) fn validate_simulate(
    simulate: &str,
    sysfs_root: &Path,
) -> Result<(), (&'static str, String)> {
    if simulate.is_empty() {
        return Ok(());
    }
    let is_name = simulate
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !is_name && !Path::new(simulate).is_absolute() {
        return Err((
            "host.simulate",
            format!("{simulate:?} is neither a profile name (e.g. dgx-a100) nor an absolute path"),
        ));
    }
    if sysfs_root != Path::new("/") {
        return Err((
            "host.simulate",
            format!(
                "a simulated host cannot be combined with sysfs_root = {:?}",
                sysfs_root.display().to_string()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_absolute_paths_are_accepted() {
        let root = Path::new("/");
        for ok in ["", "dgx-a100", "hgx-h200", "/etc/vgpud/host.toml"] {
            assert_eq!(validate_simulate(ok, root), Ok(()), "{ok}");
        }
        for bad in ["DGX", "a b", "rel/profile.toml", "dgx_a100"] {
            let (key, why) = validate_simulate(bad, root).unwrap_err();
            assert_eq!(key, "host.simulate");
            assert!(why.contains(bad), "{why}");
        }
        let (_, why) = validate_simulate("dgx-a100", Path::new("/srv/tree")).unwrap_err();
        assert!(why.contains("/srv/tree"), "{why}");
    }
}
