//! The binary on a host without a usable NVML: it says so and exits 77.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_gpu-probe");

#[test]
fn without_nvml_it_says_so_and_exits_77() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("report");
    let run = Command::new(BIN)
        .args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"])
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(77), "{stderr}");
    assert!(stderr.contains("no NVIDIA GPU to probe"), "{stderr}");
    assert!(stderr.contains("NVML not loadable"), "{stderr}");
    let summary = std::fs::read_to_string(dir.join("summary.txt")).unwrap();
    assert!(summary.contains("no NVIDIA GPU to probe"), "{summary}");
    assert!(!dir.join("report.json").exists());
}

/// On this machine (no GPU) 77; on a GPU machine a report.
#[test]
fn plain_run_skips_or_reports() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(BIN).arg(out.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    match run.status.code() {
        Some(77) => assert!(stderr.contains("no NVIDIA GPU to probe"), "{stderr}"),
        Some(0) => {
            let json = std::fs::read_to_string(out.path().join("report.json")).unwrap();
            let report: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(report["format"], "vgpud-gpu-probe/1");
        }
        other => panic!("exit {other:?}: {stderr}"),
    }
}

#[test]
fn bad_arguments_are_a_usage_error() {
    for args in [&[][..], &["--nvml-lib"][..], &["-x", "a", "b"][..]] {
        let run = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(run.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&run.stderr).contains("usage: gpu-probe"));
    }
}
