//! `vgpud man` and `vgpud completions`: what scripts/package installs as vgpud(8) and the shell
//! completions.

use std::process::Command;

fn vgpud(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_vgpud"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running vgpud: {e}"));
    assert!(out.status.success(), "vgpud {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap_or_else(|e| panic!("vgpud {args:?} wrote non-UTF-8: {e}"))
}

#[test]
fn the_man_page_is_section_8_and_names_the_commands() {
    let page = vgpud(&["man"]);
    let th = page
        .lines()
        .find(|l| l.starts_with(".TH"))
        .unwrap_or_else(|| panic!("no .TH line"));
    assert!(th.starts_with(".TH vgpud 8"), "{th}");
    // roff escapes the hyphens of the subcommands' page names.
    for command in [r"vgpud\-run", r"vgpud\-check\-config", r"vgpud\-inventory"] {
        assert!(
            page.contains(command),
            "{command} missing from the man page"
        );
    }
}

#[test]
fn completions_cover_the_subcommands() {
    let bash = vgpud(&["completions", "bash"]);
    assert!(
        bash.contains("_vgpud()") && bash.contains("check-config"),
        "{bash}"
    );
    let fish = vgpud(&["completions", "fish"]);
    assert!(fish.contains("complete -c vgpud"), "{fish}");
}
