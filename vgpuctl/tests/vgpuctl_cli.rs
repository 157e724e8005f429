//! vgpuctl against a real router served on a temp unix socket over a simulated host.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use api::rest::RestOptions;
use serde_json::Value;
use testkit::RestServer;

const A100: &str = "0000:07:00.0";

struct Served {
    dir: tempfile::TempDir,
    socket: PathBuf,
    _sim: sim::SimHost,
    _server: RestServer,
}

async fn serve(profile: &'static str) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (sim, service) = tokio::task::spawn_blocking(move || testkit::service(profile, &state))
        .await
        .unwrap();
    let socket = dir.path().join("api.sock");
    let server = RestServer::start(service, RestOptions::default(), &socket).await;
    Served {
        dir,
        socket,
        _sim: sim,
        _server: server,
    }
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }
}

async fn vgpuctl(socket: &Path, args: &[&str]) -> Out {
    let socket = socket.to_owned();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_vgpuctl"))
            .arg("--socket")
            .arg(&socket)
            .args(&args)
            .env_remove("VGPUCTL_SOCKET")
            .output()
            .unwrap();
        Out {
            code: out.status.code().unwrap(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_allocate_list_release() {
    let s = serve("dgx-a100").await;
    let host = vgpuctl(&s.socket, &["host"]).await;
    assert_eq!(host.code, 0, "{}", host.stderr);
    assert!(host.stdout.starts_with("host "), "{}", host.stdout);
    assert!(host.stdout.contains(A100), "{}", host.stdout);
    assert_eq!(
        vgpuctl(&s.socket, &["--json", "host"]).await.json()["gpus"]
            .as_array()
            .unwrap()
            .len(),
        8
    );
    assert_eq!(
        vgpuctl(&s.socket, &["gpus", "--json"])
            .await
            .json()
            .as_array()
            .unwrap()
            .len(),
        8
    );
    let gpu = vgpuctl(&s.socket, &["gpu", A100]).await;
    assert!(
        gpu.stdout.contains("CREATABLE") && gpu.stdout.contains("1g.10gb"),
        "{}",
        gpu.stdout
    );

    let made = vgpuctl(
        &s.socket,
        &[
            "alloc",
            "create",
            "--consumer",
            "nova",
            "--vm",
            "vm-1",
            "--type",
            "3g.40gb",
            "--count",
            "2",
            "--idempotency-key",
            "k1",
        ],
    )
    .await;
    assert_eq!(made.code, 0, "{}", made.stderr);
    let lines: Vec<&str> = made.stdout.lines().collect();
    assert!(lines[0].starts_with("ALLOCATION"), "{}", made.stdout);
    assert_eq!(lines.len(), 3, "two slices: {}", made.stdout);
    let id = lines[1].split_whitespace().next().unwrap().to_owned();

    let again = vgpuctl(
        &s.socket,
        &[
            "--json",
            "alloc",
            "create",
            "--consumer",
            "nova",
            "--vm",
            "vm-1",
            "--type",
            "3g.40gb",
            "--count",
            "2",
            "--idempotency-key",
            "k1",
        ],
    )
    .await;
    assert_eq!(
        again.json()["id"],
        id.as_str(),
        "the retry returns the same allocation"
    );

    let list = vgpuctl(&s.socket, &["alloc", "list", "--json"])
        .await
        .json();
    assert_eq!(list.as_array().unwrap().len(), 1);
    let show = vgpuctl(&s.socket, &["alloc", "show", &id]).await;
    assert!(show.stdout.contains("vm-1"), "{}", show.stdout);
    let slices = vgpuctl(&s.socket, &["slices"]).await;
    assert_eq!(
        slices.stdout.matches("allocated").count(),
        2,
        "{}",
        slices.stdout
    );

    assert_eq!(vgpuctl(&s.socket, &["alloc", "release", &id]).await.code, 0);
    let twice = vgpuctl(&s.socket, &["alloc", "release", &id]).await;
    assert_eq!(twice.code, 1);
    assert!(twice.stderr.contains("not_found (404)"), "{}", twice.stderr);
    let bad = vgpuctl(
        &s.socket,
        &["alloc", "create", "--consumer", "c", "--type", "9g.99gb"],
    )
    .await;
    assert_eq!(bad.code, 1);
    assert!(bad.stderr.contains("invalid_request"), "{}", bad.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_layouts_score_and_events() {
    let s = serve("dgx-a100").await;
    let made = vgpuctl(
        &s.socket,
        &[
            "--json",
            "slice",
            "create",
            "--gpu",
            A100,
            "--kind",
            "mig:1g.10gb@6",
        ],
    )
    .await;
    assert_eq!(made.code, 0, "{}", made.stderr);
    let id = made.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(vgpuctl(&s.socket, &["slice", "destroy", &id]).await.code, 0);

    let file = s.dir.path().join("layouts.json");
    std::fs::write(&file, format!(r#"{{"layouts": [{{"name": "small", "selector": {{"addresses": ["{A100}"]}}, "slices": [{{"type": "1g.10gb", "count": 7}}]}}]}}"#)).unwrap();
    let set = vgpuctl(&s.socket, &["layouts", "set", file.to_str().unwrap()]).await;
    assert_eq!(set.code, 0, "{}", set.stderr);
    assert!(set.stdout.contains("applied"), "{}", set.stdout);
    let get = vgpuctl(&s.socket, &["layouts", "get", "--json"])
        .await
        .json();
    assert_eq!(get["layouts"][0]["name"], "small");
    let stale = vgpuctl(
        &s.socket,
        &[
            "layouts",
            "set",
            file.to_str().unwrap(),
            "--if-match",
            "\"old\"",
        ],
    )
    .await;
    assert_eq!(stale.code, 1);
    assert!(
        stale.stderr.contains("precondition_failed"),
        "{}",
        stale.stderr
    );

    let score = vgpuctl(&s.socket, &["score", "--type", "1g.10gb"]).await;
    assert_eq!(score.code, 0, "{}", score.stderr);
    assert!(
        score.stdout.starts_with("feasible true"),
        "{}",
        score.stdout
    );

    let socket = s.socket.clone();
    let follower =
        tokio::spawn(async move { vgpuctl(&socket, &["events", "--count", "1", "--json"]).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    vgpuctl(
        &s.socket,
        &["alloc", "create", "--consumer", "ev", "--type", "3g.40gb"],
    )
    .await;
    let events = tokio::time::timeout(Duration::from_secs(20), follower)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(events.code, 0, "{}", events.stderr);
    let first: Value = serde_json::from_str(events.stdout.lines().next().unwrap()).unwrap();
    assert!(first["event"].is_string(), "{}", events.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_statuses_completions_and_man_page() {
    let nowhere = vgpuctl(Path::new("/nonexistent/vgpud.sock"), &["host"]).await;
    assert_eq!(nowhere.code, 3, "{}", nowhere.stderr);
    assert!(
        nowhere.stderr.contains("cannot connect"),
        "{}",
        nowhere.stderr
    );
    let usage = vgpuctl(Path::new("/nonexistent"), &["alloc", "create"]).await;
    assert_eq!(usage.code, 2, "{}", usage.stderr);
    let unknown = vgpuctl(Path::new("/nonexistent"), &["frobnicate"]).await;
    assert_eq!(unknown.code, 2);

    let bash = vgpuctl(Path::new("/x"), &["completions", "bash"]).await;
    assert_eq!(bash.code, 0);
    assert!(
        bash.stdout.contains("_vgpuctl()") && bash.stdout.contains("layouts"),
        "{}",
        bash.stdout
    );
    let man = vgpuctl(Path::new("/x"), &["man"]).await;
    assert_eq!(man.code, 0);
    assert!(
        man.stdout.contains(".TH vgpuctl") && man.stdout.contains("VGPUCTL_SOCKET"),
        "{}",
        man.stdout
    );

    // The socket from the environment.
    let s = serve("single-gpu").await;
    let out = tokio::task::spawn_blocking({
        let socket = s.socket.clone();
        move || {
            Command::new(env!("CARGO_BIN_EXE_vgpuctl"))
                .args(["--json", "slices"])
                .env("VGPUCTL_SOCKET", socket)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}
