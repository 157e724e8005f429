//! `vgpud run` refusing a lost state file on a host that shows vgpud's slices, and
//! `vgpud state recover` rebuilding it, as processes on a simulated vdi-mixed host.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agent::engine::{CreateSlice, Engine, EngineConfig, Identity, SliceKind, SliceSpec};

const PROFILE: &str = "vdi-mixed";
const T4: &str = "0000:41:00.0";
const TIMEOUT: Duration = Duration::from_secs(30);

/// Two mdevs made by an engine on the simulated host `vgpud run --sim` keeps in
/// `<state>/sim`, one mdev allocated; their UUIDs.
fn make_slices(state: &Path) -> Vec<String> {
    let profile = sim::Profile::builtin(PROFILE).unwrap();
    let host = sim::SimHost::open_or_create(&state.join("sim"), profile).unwrap();
    let e = Engine::open(EngineConfig::new(state, hostwire::sim_access(&host))).unwrap();
    let mut uuids = Vec::new();
    for _ in 0..2 {
        let s = e
            .create_slice(CreateSlice {
                spec: SliceSpec {
                    gpu: T4.parse().unwrap(),
                    kind: SliceKind::Mdev {
                        type_id: "nvidia-222".parse().unwrap(),
                    },
                },
                owner: None,
            })
            .unwrap();
        let Identity::Mdev { uuid } = s.identity else {
            panic!("{s:?}")
        };
        uuids.push(uuid.to_string());
    }
    e.allocate(agent::engine::AllocationRequest {
        consumer: "nova".into(),
        vm: None,
        request: serde_json::from_str(r#"{"type":"nvidia-222","count":1}"#).unwrap(),
        placement_consumer: None,
    })
    .unwrap();
    uuids
}

fn vgpud(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vgpud"));
    cmd.args(args)
        .arg("--config")
        .arg(dir.join("vgpud.toml"))
        .args(["--sim", PROFILE, "--state-dir"])
        .arg(dir.join("state"))
        .env(
            "DBUS_SYSTEM_BUS_ADDRESS",
            format!("unix:path={}", dir.join("no-bus").display()),
        )
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null());
    cmd
}

fn run_daemon(dir: &Path) -> Child {
    let mut cmd = vgpud(dir, &["run"]);
    cmd.arg("--socket")
        .arg(dir.join("api.sock"))
        .arg("--no-dbus")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("daemon.log")).unwrap());
    cmd.spawn().unwrap()
}

/// Waits for the daemon to exit (an error exit is expected) or to serve; kills it either way.
fn exit_or_serve(mut child: Child, dir: &Path) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if UnixStream::connect(dir.join("api.sock")).is_ok() {
            child.kill().unwrap();
            child.wait().unwrap();
            return None;
        }
        assert!(Instant::now() < deadline, "vgpud neither exited nor served");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn recover(dir: &Path) -> Output {
    vgpud(dir, &["state", "recover"]).output().unwrap()
}

#[test]
fn a_lost_state_file_stops_the_daemon_until_state_recover_rebuilds_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("vgpud.toml"), "").unwrap();
    let uuids = make_slices(&dir.join("state"));
    std::fs::remove_file(dir.join("state/vgpud-state.json")).unwrap();

    let status = exit_or_serve(run_daemon(dir), dir).expect("the daemon must not serve");
    assert_eq!(status.code(), Some(1));
    let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap();
    assert!(log.contains("is missing"), "{log}");
    assert!(log.contains("vgpud state recover --state-dir"), "{log}");
    for u in &uuids {
        assert!(log.contains(u.as_str()), "{log}");
    }

    let out = recover(dir);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("adopted 2 slice(s)"), "{stdout}");
    for u in &uuids {
        assert!(stdout.contains(u.as_str()), "{stdout}");
    }
    assert!(stdout.contains("\n  allocations:"), "{stdout}");
    assert!(
        stdout.contains("nothing on the host was created or destroyed"),
        "{stdout}"
    );

    // The rebuilt file is kept: a second recovery refuses.
    let again = recover(dir);
    let stderr = String::from_utf8(again.stderr).unwrap();
    assert_eq!(again.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("exists"), "{stderr}");

    assert!(
        exit_or_serve(run_daemon(dir), dir).is_none(),
        "the daemon serves on the recovered state:\n{}",
        std::fs::read_to_string(dir.join("daemon.log")).unwrap()
    );
}
