//! The latency model is applied to the operation it times. The model reads its scale from the
//! environment once per process, so the check runs in a child process of this test binary.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use sim::latency::{DeviceOp, ENV, Latency};

const PF: &str = "0000:18:00.0";
const SCALE: &str = "0.05";

#[test]
fn a_vf_enable_takes_the_models_time_and_other_writes_do_not() {
    let me = std::env::current_exe().unwrap();
    let out = Command::new(me)
        .args([
            "timed_writes_in_a_child",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(ENV, SCALE)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("1 passed"),
        "the child test did not run:\n{text}"
    );
}

/// Run only by the test above, with the model on.
#[test]
#[ignore = "run by a_vf_enable_takes_the_models_time_and_other_writes_do_not"]
fn timed_writes_in_a_child() {
    let model = Latency::parse(SCALE).unwrap();
    assert_eq!(sim::latency::current(), Some(model), "{ENV} is not set");
    let h = host("hgx-h200-vgpu");
    let fs = h.sysfs();
    let t = Instant::now();
    // nvidia.ko refuses it (ENOENT), but only after the time the enable takes.
    write_err(&fs, &dev(PF, "sriov_numvfs"), "32");
    let enable = t.elapsed();
    assert!(enable >= model.duration(DeviceOp::VfEnable), "{enable:?}");
    let t = Instant::now();
    write(&fs, &dev(PF, "sriov_numvfs"), "0");
    assert!(
        t.elapsed() < Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
}
