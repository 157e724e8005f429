//! `vgpud check-config` as a process: exit status, the effective configuration, the error's line.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::process::{Command, Output};

fn check_config(file: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vgpud"))
        .arg("check-config")
        .arg(file)
        .output()
        .unwrap()
}

#[test]
fn a_valid_file_prints_the_effective_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vgpud.toml");
    std::fs::write(
        &file,
        "state_dir = \"/srv/vgpud\"\n[metrics]\nlisten = \"127.0.0.1:9835\"\n",
    )
    .unwrap();
    let out = check_config(&file);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("is valid"), "{stdout}");
    // The effective configuration: the file's values and every default.
    let effective: toml::Table = toml::from_str(&stdout).unwrap();
    assert_eq!(effective["state_dir"].as_str(), Some("/srv/vgpud"));
    assert_eq!(
        effective["metrics"]["listen"].as_str(),
        Some("127.0.0.1:9835")
    );
    assert_eq!(
        effective["engine"]["reconcile_interval_s"].as_integer(),
        Some(60)
    );
    assert_eq!(
        effective["api"]["socket"].as_str(),
        Some("/run/vgpud/api.sock")
    );
}

#[test]
fn the_shipped_example_is_valid() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/vgpud.toml");
    let out = check_config(&file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bad_files_exit_1_naming_the_line_or_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vgpud.toml");
    let cases = [
        (
            "[api]\nsocket = \"/run/x.sock\"\nsocket_mod = \"0600\"\n",
            "line 3",
        ),
        ("[dbus]\nenabled = \"yes\"\n", "line 2"),
        (
            "[engine]\nreconcile_interval_s = 0\n",
            "engine.reconcile_interval_s",
        ),
        ("[scheduler]\npolicy = \"worst-fit\"\n", "scheduler.policy"),
        ("not toml at all", "line 1"),
    ];
    for (text, expected) in cases {
        std::fs::write(&file, text).unwrap();
        let out = check_config(&file);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{text}: {stderr}");
        assert!(
            stderr.contains(expected) && stderr.contains(file.to_str().unwrap()),
            "{text}: {stderr}"
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn a_missing_named_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = check_config(&dir.path().join("absent.toml"));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("absent.toml"), "{stderr}");
}
