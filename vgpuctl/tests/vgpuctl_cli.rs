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
    sim: sim::SimHost,
    _server: RestServer,
}

async fn serve(profile: &'static str) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (sim, service) = testkit::service_async(profile, state).await;
    let socket = dir.path().join("api.sock");
    let server = RestServer::start(service, RestOptions::default(), &socket).await;
    Served {
        dir,
        socket,
        sim,
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
async fn alloc_carries_a_placement_consumer() {
    let s = serve("dgx-a100").await;
    let instance = "9b3e2f1a-0c4d-4e5f-8a6b-7c8d9e0f1a2b";
    let made = vgpuctl(
        &s.socket,
        &[
            "alloc",
            "create",
            "--consumer",
            "nova",
            "--type",
            "1g.10gb",
            "--placement-consumer",
            instance,
        ],
    )
    .await;
    assert_eq!(made.code, 0, "{}", made.stderr);
    let lines: Vec<&str> = made.stdout.lines().collect();
    assert!(lines[0].contains("PLACEMENT"), "{}", made.stdout);
    let id = lines[1].split_whitespace().next().unwrap().to_owned();
    let show = vgpuctl(&s.socket, &["alloc", "show", &id]).await;
    assert!(show.stdout.contains(instance), "{}", show.stdout);
    let json = vgpuctl(&s.socket, &["--json", "alloc", "show", &id]).await;
    assert_eq!(json.json()["placement_consumer"], instance);
    // The server checks it, as for every front end.
    let bad = vgpuctl(
        &s.socket,
        &[
            "alloc",
            "create",
            "--consumer",
            "nova",
            "--type",
            "1g.10gb",
            "--placement-consumer",
            "instance-1",
        ],
    )
    .await;
    assert_eq!(bad.code, 1);
    assert!(
        bad.stderr.contains("invalid_request (422)"),
        "{}",
        bad.stderr
    );
    assert!(bad.stderr.contains("placement_consumer"), "{}", bad.stderr);
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

/// The mig-parted config the import tests use (mig-parted's format, NVIDIA's configs).
const MIG_PARTED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/mig-parted-config.yaml"
);

/// Per GPU in PCI address order: its GPU instances' profiles, sorted, and whether every one has
/// a single compute instance over it (as mig-parted makes them), as the inventory reads them
/// back from the simulated NVML.
async fn gpu_instances(socket: &Path) -> Vec<(Vec<String>, bool)> {
    let gpus = vgpuctl(socket, &["--json", "gpus"]).await.json();
    let mut gpus = gpus.as_array().unwrap().clone();
    gpus.sort_by_key(|g| g["pci_address"].as_str().unwrap().to_owned());
    gpus.iter()
        .map(|g| {
            let instances = g["mig"]["instances"].as_array().unwrap();
            let mut profiles: Vec<String> = instances
                .iter()
                .map(|i| i["profile"].as_str().unwrap().to_owned())
                .collect();
            profiles.sort();
            let whole = instances
                .iter()
                .all(|i| i["compute_instances"].as_array().unwrap().len() == 1);
            (profiles, whole)
        })
        .collect()
}

fn profiles(spec: &[(&str, usize)]) -> Vec<String> {
    let mut v: Vec<String> = spec
        .iter()
        .flat_map(|(p, n)| std::iter::repeat_n((*p).to_owned(), *n))
        .collect();
    v.sort();
    v
}

/// mig-parted's configs imported on a fresh simulated DGX A100 each give, per GPU, the GPU
/// instances mig-parted would make: the config's `mig-devices` for that GPU (the 80GB entry of
/// a device-filtered config; by index in the per-GPU one), each with one compute instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mig_parted_configs_give_the_instances_mig_parted_makes() {
    let balanced = profiles(&[("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)]);
    let cases: Vec<(&str, Vec<Vec<String>>)> = vec![
        ("all-1g.10gb", vec![profiles(&[("1g.10gb", 7)]); 8]),
        ("all-balanced", vec![balanced.clone(); 8]),
        (
            "custom-config",
            vec![
                vec![],
                vec![],
                vec![],
                vec![],
                profiles(&[("1g.10gb", 7)]),
                profiles(&[("2g.20gb", 3)]),
                profiles(&[("3g.40gb", 2)]),
                balanced,
            ],
        ),
    ];
    for (config, want) in cases {
        let s = serve("dgx-a100").await;
        let dry = vgpuctl(
            &s.socket,
            &[
                "layouts",
                "import",
                "--mig-parted",
                MIG_PARTED,
                "--config",
                config,
                "--dry-run",
            ],
        )
        .await;
        assert_eq!(dry.code, 0, "{config}: {}", dry.stderr);
        assert!(
            dry.stdout.starts_with("dry run: nothing applied"),
            "{}",
            dry.stdout
        );
        assert!(
            dry.stdout.contains(&format!("{config}#0")) && dry.stdout.contains("added"),
            "{}",
            dry.stdout
        );
        assert_eq!(
            vgpuctl(&s.socket, &["--json", "slices"])
                .await
                .stdout
                .trim(),
            "[]",
            "a dry run makes nothing"
        );
        assert!(
            gpu_instances(&s.socket)
                .await
                .iter()
                .all(|(p, _)| p.is_empty()),
            "{config}"
        );

        let applied = vgpuctl(
            &s.socket,
            &[
                "--json",
                "layouts",
                "import",
                "--mig-parted",
                MIG_PARTED,
                "--config",
                config,
            ],
        )
        .await;
        assert_eq!(applied.code, 0, "{config}: {}", applied.stderr);
        let outcome = applied.json();
        assert_eq!(outcome["dry_run"], false);
        let status = outcome["result"]["status"].as_array().unwrap();
        assert_eq!(status.len(), 8, "{outcome}");
        for st in status {
            assert_eq!(st["state"], "applied", "{config}: {st}");
        }
        let got = gpu_instances(&s.socket).await;
        let (profiles, whole): (Vec<_>, Vec<_>) = got.into_iter().unzip();
        assert_eq!(profiles, want, "{config}");
        assert!(
            whole.iter().all(|w| *w),
            "{config}: one compute instance per GPU instance"
        );
        let layouts = vgpuctl(&s.socket, &["--json", "layouts", "get"])
            .await
            .json();
        assert!(
            layouts["layouts"]
                .as_array()
                .unwrap()
                .iter()
                .all(|l| l["name"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("{config}#"))),
            "{layouts}"
        );
        if config == "custom-config" {
            // mig-enabled: false on GPUs 0-3: MIG turned off (nothing was on them).
            let gpus = vgpuctl(&s.socket, &["--json", "gpus"]).await.json();
            let mut off: Vec<(String, bool)> = gpus
                .as_array()
                .unwrap()
                .iter()
                .map(|g| {
                    (
                        g["pci_address"].as_str().unwrap().to_owned(),
                        g["mig"]["enabled"] == true,
                    )
                })
                .collect();
            off.sort();
            let enabled: Vec<bool> = off.iter().map(|(_, on)| *on).collect();
            assert_eq!(
                enabled,
                [false, false, false, false, true, true, true, true]
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mig_parted_import_errors_are_clear() {
    let s = serve("dgx-a100").await;
    let import = |args: Vec<String>| {
        let socket = s.socket.clone();
        async move {
            let mut all = vec!["layouts".to_owned(), "import".to_owned()];
            all.extend(args);
            let refs: Vec<&str> = all.iter().map(String::as_str).collect();
            vgpuctl(&socket, &refs).await
        }
    };
    let names = "all-1g.10gb, all-1g.5gb, all-balanced, all-disabled, custom-config";
    let unknown = import(vec![
        "--mig-parted".into(),
        MIG_PARTED.into(),
        "--config".into(),
        "all-9g".into(),
    ])
    .await;
    assert_eq!(unknown.code, 1);
    assert!(
        unknown.stderr.contains("not_found (404)") && unknown.stderr.contains(names),
        "{}",
        unknown.stderr
    );
    let unnamed = import(vec!["--mig-parted".into(), MIG_PARTED.into()]).await;
    assert_eq!(unnamed.code, 1);
    assert!(
        unnamed.stderr.contains("invalid_request") && unnamed.stderr.contains(names),
        "{}",
        unnamed.stderr
    );
    // A 40GB part's profile on the 80GB GPUs: refused before anything is declared.
    let small = import(vec![
        "--mig-parted".into(),
        MIG_PARTED.into(),
        "--config".into(),
        "all-1g.5gb".into(),
        "--dry-run".into(),
    ])
    .await;
    assert_eq!(small.code, 1);
    assert!(small.stderr.contains("1g.5gb"), "{}", small.stderr);

    let bad = s.dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enable: true\n",
    )
    .unwrap();
    let typo = import(vec!["--mig-parted".into(), bad.to_str().unwrap().into()]).await;
    assert_eq!(typo.code, 1);
    assert!(
        typo.stderr.contains("unknown field `mig-enable`")
            && typo.stderr.contains("line 5 column 7"),
        "{}",
        typo.stderr
    );
    let huge = s.dir.path().join("huge.yaml");
    std::fs::write(&huge, "#".repeat(300 * 1024)).unwrap();
    let large = import(vec!["--mig-parted".into(), huge.to_str().unwrap().into()]).await;
    assert_eq!(large.code, 1);
    assert!(
        large
            .stderr
            .contains("too large: 307200 characters; vgpud accepts at most 262144 characters"),
        "{}",
        large.stderr
    );
    let missing = import(vec!["--mig-parted".into(), "/nonexistent.yaml".into()]).await;
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains("/nonexistent.yaml"),
        "{}",
        missing.stderr
    );
    let both = import(vec![
        "--mig-parted".into(),
        MIG_PARTED.into(),
        "--mdevctl".into(),
        "/etc/mdevctl.d".into(),
    ])
    .await;
    assert_eq!(both.code, 2, "{}", both.stderr);
    assert_eq!(import(vec![]).await.code, 2);
    assert_eq!(
        vgpuctl(&s.socket, &["--json", "layouts", "get"])
            .await
            .json()["layouts"],
        serde_json::json!([]),
        "nothing was declared"
    );
}

/// A directory as mdevctl writes it (`<parent>/<uuid>` JSON files, a `scripts.d`) on the VDI
/// host: the mdev that exists is adopted, the one that does not is created with its UUID, one
/// with attributes is skipped; a dry run shows that and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mdevctl_definitions_are_adopted_or_created() {
    let s = serve("vdi-mixed").await;
    let t4 = "0000:41:00.0";
    let existing = ids::MdevUuid::new_random();
    mdev::create(
        s.sim.sysfs().as_ref(),
        &t4.parse::<ids::PciAddress>().unwrap().into(),
        &"nvidia-222".parse().unwrap(),
        existing,
    )
    .unwrap();
    let missing = ids::MdevUuid::new_random();
    let with_attrs = ids::MdevUuid::new_random();
    let defs = s.dir.path().join("mdevctl.d");
    let parent = defs.join(t4);
    std::fs::create_dir_all(&parent).unwrap();
    std::fs::create_dir_all(defs.join("scripts.d/callouts")).unwrap();
    let def = r#"{"mdev_type": "nvidia-222", "start": "auto", "attrs": []}"#;
    std::fs::write(parent.join(existing.to_string()), def).unwrap();
    std::fs::write(parent.join(missing.to_string()), def).unwrap();
    std::fs::write(
        parent.join(with_attrs.to_string()),
        r#"{"mdev_type": "nvidia-222", "start": "manual", "attrs": [{"x": "1"}]}"#,
    )
    .unwrap();
    std::fs::write(parent.join(format!("{missing}~")), def).unwrap();
    let dir = defs.to_str().unwrap();

    let dry = vgpuctl(
        &s.socket,
        &["--json", "layouts", "import", "--mdevctl", dir, "--dry-run"],
    )
    .await;
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    let plan = dry.json();
    let action = |uuid: ids::MdevUuid| {
        plan["definitions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["uuid"] == uuid.to_string())
            .map(|d| d["action"].as_str().unwrap().to_owned())
    };
    assert_eq!(plan["definitions"].as_array().unwrap().len(), 3, "{plan}");
    assert_eq!(action(existing).as_deref(), Some("adopt"));
    assert_eq!(action(missing).as_deref(), Some("create"));
    assert_eq!(action(with_attrs).as_deref(), Some("skip"));
    assert_eq!(
        vgpuctl(&s.socket, &["--json", "slices"])
            .await
            .stdout
            .trim(),
        "[]"
    );

    let applied = vgpuctl(&s.socket, &["layouts", "import", "--mdevctl", dir]).await;
    assert_eq!(applied.code, 0, "{}", applied.stderr);
    assert!(
        applied.stdout.contains("adopted 1, created 1, skipped 1"),
        "{}",
        applied.stdout
    );
    let slices = vgpuctl(&s.socket, &["--json", "slices"]).await.json();
    let mut uuids: Vec<String> = slices
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["mdev_uuid"].as_str().unwrap().to_owned())
        .collect();
    uuids.sort();
    let mut want = vec![existing.to_string(), missing.to_string()];
    want.sort();
    assert_eq!(uuids, want);

    std::fs::write(parent.join(with_attrs.to_string()), " ".repeat(5000)).unwrap();
    let large = vgpuctl(&s.socket, &["layouts", "import", "--mdevctl", dir]).await;
    assert_eq!(large.code, 1);
    assert!(
        large
            .stderr
            .contains("too large: 5000 characters; vgpud accepts at most 4096 characters"),
        "{}",
        large.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_quarantine_and_release() {
    let s = serve("dgx-a100").await;
    let q = vgpuctl(
        &s.socket,
        &["gpu", "quarantine", A100, "--reason", "fan swap"],
    )
    .await;
    assert_eq!(q.code, 0, "{}", q.stderr);
    assert!(
        q.stdout
            .starts_with("GPU 0000:07:00.0 quarantined since 20")
            && q.stdout.contains(": fan swap"),
        "{}",
        q.stdout
    );
    let shown = vgpuctl(&s.socket, &["--json", "gpu", A100]).await;
    assert_eq!(shown.json()["health"], "quarantined");
    let refused = vgpuctl(
        &s.socket,
        &[
            "alloc",
            "create",
            "--consumer",
            "c",
            "--type",
            "1g.10gb",
            "--gpu",
            A100,
        ],
    )
    .await;
    assert_eq!(refused.code, 1);
    assert!(
        refused.stderr.contains("quarantined") && refused.stderr.contains("fan swap"),
        "{}",
        refused.stderr
    );
    let bad = vgpuctl(&s.socket, &["gpu", "quarantine", A100, "--reason", ""]).await;
    assert_eq!(bad.code, 1, "{}", bad.stderr);
    let usage = vgpuctl(&s.socket, &["gpu", "quarantine", A100]).await;
    assert_eq!(usage.code, 2, "--reason is required");
    let released = vgpuctl(&s.socket, &["--json", "gpu", "release", A100]).await;
    assert_eq!(released.code, 0, "{}", released.stderr);
    assert_eq!(released.json()["source"], "operator");
    let again = vgpuctl(&s.socket, &["gpu", "release", A100]).await;
    assert_eq!(again.code, 1);
    assert!(again.stderr.contains("not quarantined"), "{}", again.stderr);
}
