//! vgpud as kubelet's device plugin, end to end: `vgpud run` on a simulated host with
//! `[kubernetes] enabled`, driven by a kubelet stand-in (tests/kubelet, Go, built on the
//! device plugin and PodResources APIs) that registers the plugin, watches its devices, asks
//! for preferred allocations and allocates as kubelet's device manager does.
//!
//! On the DGX A100 with 7 × 1g.10gb on each of the 8 GPUs: 56 healthy devices of
//! `nvidia.com/mig-1g.10gb` with their NUMA nodes; a preferred pair on one NUMA node and one
//! GPU; Allocate holds them in vgpud and answers the MIG devices; an Xid 79 turns exactly that
//! GPU's devices Unhealthy in the stream; a kubelet restart and a plugin restart both end in a
//! new registration; PodResources keeps a listed allocation, keeps everything while List
//! fails, and releases an unlisted one after the grace. On the VDI host (mdev) and the HGX
//! H200 (vendor-VFIO vGPUs on VFs): the environment variables and VFIO device nodes
//! KubeVirt's virt-launcher reads.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const MIG: &str = "nvidia.com/mig-1g.10gb";
/// Lines the stand-in prints on its own, not as the answer to a command.
const UNPROMPTED: &[&str] = &[
    "ready",
    "registered",
    "register_refused",
    "devices",
    "stream_closed",
];

/// A child process killed when the test ends, however it ends.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The stand-in binary, built once per test run from tests/kubelet (`None` when Go is not
/// installed and this is not CI: the test then says so and passes nothing).
fn standin() -> Option<PathBuf> {
    static BUILT: Mutex<Option<Option<PathBuf>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap();
    built
        .get_or_insert_with(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kubelet-standin");
            let status = Command::new(root.join("tests/kubelet/build"))
                .arg(&out)
                .current_dir(&root)
                .status()
                .unwrap();
            if status.success() {
                return Some(out.join("kubelet-standin"));
            }
            assert!(
                std::env::var_os("CI").is_none(),
                "tests/kubelet/build failed in CI ({status}): the stand-in is a required peer"
            );
            eprintln!("SKIPPED: the kubelet stand-in does not build here (Go, protoc: see tests/kubelet/README.md)");
            None
        })
        .clone()
}

/// The kubelet stand-in: commands on stdin, one JSON line per event or answer on stdout.
struct Kubelet {
    _child: Kill,
    stdin: ChildStdin,
    lines: Arc<Mutex<Vec<Value>>>,
    /// Lines already looked at by `answer`.
    read: usize,
}

impl Kubelet {
    fn start(bin: &Path, dir: &Path) -> Kubelet {
        let mut child = Command::new(bin)
            .arg("--plugin-dir")
            .arg(dir.join("plugins"))
            .arg("--pod-resources")
            .arg(dir.join("pod-resources.sock"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("the stand-in printed {line:?}: {e}"));
                sink.lock().unwrap().push(value);
            }
        });
        let k = Kubelet {
            _child: Kill(child),
            stdin,
            lines,
            read: 0,
        };
        k.wait_event("ready", |_| true, Duration::from_secs(10));
        k
    }

    fn all(&self) -> Vec<Value> {
        self.lines.lock().unwrap().clone()
    }

    /// Sends a command and returns its answer (the first prompted line after it).
    fn command(&mut self, line: &str) -> Value {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let lines = self.all();
            for (i, v) in lines.iter().enumerate().skip(self.read) {
                let event = v["event"].as_str().unwrap_or_default();
                if !UNPROMPTED.contains(&event) {
                    self.read = i + 1;
                    return v.clone();
                }
            }
            assert!(
                Instant::now() < deadline,
                "no answer to {line:?}: {lines:#?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for an unprompted `event` line that `accept` takes, printed from `since` on.
    fn wait_event_from(
        &self,
        since: usize,
        event: &str,
        accept: impl Fn(&Value) -> bool,
        timeout: Duration,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let lines = self.all();
            if let Some(v) = lines
                .iter()
                .skip(since)
                .find(|v| v["event"] == event && accept(v))
            {
                return v.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no {event} line as wanted in {timeout:?}: {lines:#?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_event(&self, event: &str, accept: impl Fn(&Value) -> bool, timeout: Duration) -> Value {
        self.wait_event_from(0, event, accept, timeout)
    }

    /// Waits, from line `since` on, for `resource` to be registered and its list of `n` devices.
    fn wait_registered_with_list(&self, since: usize, resource: &str, n: usize) {
        let timeout = Duration::from_secs(20);
        self.wait_event_from(since, "registered", |v| v["resource"] == resource, timeout);
        self.wait_event_from(since, "devices", is_list_of(resource, n), timeout);
    }

    fn mark(&self) -> usize {
        self.lines.lock().unwrap().len()
    }
}

/// `vgpud run --sim PROFILE` with `[kubernetes]` on the stand-in's sockets.
struct Daemon {
    child: Kill,
    dir: PathBuf,
    log: PathBuf,
}

impl Daemon {
    fn start(dir: &Path, profile: &str, name: &str) -> Daemon {
        let config = format!(
            "[kubernetes]\nenabled = true\ndevice_plugin_dir = {:?}\npod_resources_socket = {:?}\nrelease_grace_s = 2\n\n[health]\nquiet_period_s = 3600\ncheck_interval_s = 1\n",
            dir.join("plugins"),
            dir.join("pod-resources.sock"),
        );
        std::fs::write(dir.join("vgpud.toml"), config).unwrap();
        let log = dir.join(format!("{name}.log"));
        let mut vgpud = Command::new(env!("CARGO_BIN_EXE_vgpud"));
        let child = testkit::daemon::sim_run(&mut vgpud, dir, profile, None)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut child = Kill(child);
        let text = || std::fs::read_to_string(&log).unwrap_or_default();
        testkit::daemon::wait_ready(&mut child.0, text, Duration::from_secs(60)).unwrap();
        Daemon {
            child,
            dir: dir.to_owned(),
            log,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn rest(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let (status, _, body) =
            common::unix_request(&self.dir.join("api.sock"), method, path, body);
        let value = serde_json::from_str(&body).unwrap_or(Value::String(body));
        (status, value)
    }

    /// Declares one layout and waits until `count` slices are ready.
    fn lay_out(&self, layout: Value, count: usize) {
        let body = json!({ "layouts": [layout] }).to_string();
        let (status, answer) = self.rest("PUT", "/v1/layouts", Some(&body));
        assert_eq!(status, 202, "{answer}");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, slices) = self.rest("GET", "/v1/slices", None);
            let ready = slices
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["state"] == "ready")
                .count();
            if ready == count {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{ready} of {count} slices ready: {slices:#}\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every slice, by id.
    fn slices(&self) -> BTreeMap<String, Value> {
        let (_, slices) = self.rest("GET", "/v1/slices", None);
        slices
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["id"].as_str().unwrap().to_owned(), s.clone()))
            .collect()
    }

    fn allocations(&self) -> Vec<Value> {
        let (_, all) = self.rest("GET", "/v1/allocations", None);
        all.as_array().unwrap().clone()
    }

    fn sim(&self, args: &[&str]) {
        let status = Command::new(env!("CARGO_BIN_EXE_vgpud"))
            .arg("sim")
            .args(args)
            .arg("--state-dir")
            // The simulated host lives in the daemon's state directory, under sim/.
            .arg(self.dir.join("state/sim"))
            .status()
            .unwrap();
        assert!(status.success(), "vgpud sim {args:?}");
    }

    fn stop(mut self) {
        let pid = self.child.0.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let status = self.child.0.wait().unwrap();
        assert!(status.success(), "{status}:\n{}", self.log_text());
    }
}

/// The devices of the last list of `resource` the stand-in was streamed, by id.
fn devices(list: &Value) -> BTreeMap<String, Value> {
    list["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["id"].as_str().unwrap().to_owned(), d.clone()))
        .collect()
}

fn is_list_of(resource: &str, n: usize) -> impl Fn(&Value) -> bool + '_ {
    move |v| v["resource"] == resource && v["devices"].as_array().is_some_and(|d| d.len() == n)
}

fn ids_of(v: &Value) -> Vec<String> {
    v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_dgx_mig_slices_reach_kubelet_with_numa_health_and_release() {
    let Some(bin) = standin() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("plugins")).unwrap();
    let mut kubelet = Kubelet::start(&bin, dir);
    let daemon = Daemon::start(dir, "dgx-a100", "first");
    daemon.lay_out(
        json!({"name": "k8s", "slices": [{"type": "1g.10gb", "count": 7}]}),
        56,
    );

    // 56 devices, all healthy, each on its GPU's NUMA node.
    let registered = kubelet.wait_event(
        "registered",
        |v| v["resource"] == MIG,
        Duration::from_secs(20),
    );
    assert_eq!(registered["preferred_available"], true, "{registered}");
    let list = kubelet.wait_event("devices", is_list_of(MIG, 56), Duration::from_secs(20));
    let slices = daemon.slices();
    for (id, d) in devices(&list) {
        assert_eq!(d["health"], "Healthy", "{d}");
        let numa = slices[&id]["numa_node"].as_u64().unwrap();
        assert_eq!(d["numa"], json!([numa]), "{d} on {}", slices[&id]);
    }
    let nodes: BTreeSet<_> = slices
        .values()
        .map(|s| s["numa_node"].to_string())
        .collect();
    assert!(
        nodes.len() > 1,
        "the DGX has GPUs on several NUMA nodes: {nodes:?}"
    );

    // A preferred pair: one NUMA node, one GPU (packed). Allocate holds exactly those.
    let preferred = kubelet.command(&format!("preferred {MIG} 2"));
    assert_eq!(preferred["event"], "preferred", "{preferred}");
    let pair = ids_of(&preferred);
    assert_eq!(pair.len(), 2);
    let gpu = slices[&pair[0]]["gpu"].as_str().unwrap().to_owned();
    assert_eq!(slices[&pair[1]]["gpu"], gpu.as_str());
    assert_eq!(slices[&pair[0]]["numa_node"], slices[&pair[1]]["numa_node"]);
    let granted = kubelet.command(&format!("allocate {MIG} {}", pair.join(",")));
    assert_eq!(granted["event"], "allocated", "{granted}");
    let visible = granted["envs"]["NVIDIA_VISIBLE_DEVICES"].as_str().unwrap();
    assert_eq!(visible.split(',').count(), 2, "{granted}");
    assert!(
        visible.split(',').all(|d| d.starts_with("MIG-GPU-")),
        "{visible}"
    );
    let held: Vec<_> = daemon
        .allocations()
        .into_iter()
        .filter(|a| a["consumer"] == "kubernetes")
        .collect();
    assert_eq!(held.len(), 1, "{held:#?}");
    let held_ids: BTreeSet<_> = held[0]["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(held_ids, pair.iter().cloned().collect());
    // The next preference avoids what is held (kubelet no longer offers it) and stays on the
    // same GPU while it has room.
    let next = ids_of(&kubelet.command(&format!("preferred {MIG} 1")));
    assert!(!pair.contains(&next[0]));
    assert_eq!(slices[&next[0]]["gpu"], gpu.as_str());

    // An Xid 79 on that GPU: its 7 devices turn Unhealthy, the other 49 stay Healthy.
    let since = kubelet.mark();
    daemon.sim(&["xid", "--gpu", &gpu, "79"]);
    let unhealthy_on_gpu = |v: &Value| {
        is_list_of(MIG, 56)(v)
            && devices(v).iter().all(|(id, d)| {
                let on_gpu = slices[id]["gpu"] == gpu.as_str();
                d["health"] == if on_gpu { "Unhealthy" } else { "Healthy" }
            })
    };
    kubelet.wait_event_from(since, "devices", unhealthy_on_gpu, Duration::from_secs(20));

    // PodResources: listed, the allocation stays past the grace; List failing, it stays too.
    let pod = json!([{"name": "vm-a", "namespace": "default", "containers": [
        {"name": "compute", "devices": [{"resource": MIG, "ids": pair}]}]}]);
    kubelet.command(&format!("pods {pod}"));
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        daemon.allocations().len(),
        1,
        "a listed allocation was released"
    );
    kubelet.command("pods-fail on");
    kubelet.command("pods []");
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        daemon.allocations().len(),
        1,
        "released while kubelet did not answer"
    );
    assert!(kubelet.command("lists")["count"].as_u64().unwrap() >= 2);
    // List answers again without the pod: released after the grace.
    kubelet.command("pods-fail off");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !daemon.allocations().is_empty() {
        assert!(
            Instant::now() < deadline,
            "never released:\n{}",
            daemon.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    kubelet.command(&format!("free {MIG} {}", pair.join(",")));

    // kubelet restarts (its socket re-created, the plugin's connection gone): vgpud registers
    // again and streams the list to the new kubelet.
    let since = kubelet.mark();
    assert_eq!(kubelet.command("restart")["event"], "kubelet_restarted");
    kubelet.wait_registered_with_list(since, MIG, 56);

    // The plugin restarts: the stream ends, the socket goes, and the new vgpud registers.
    let since = kubelet.mark();
    daemon.stop();
    kubelet.wait_event_from(
        since,
        "stream_closed",
        |v| v["resource"] == MIG,
        Duration::from_secs(20),
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.join("plugins"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "kubelet.sock")
        .collect();
    assert!(leftovers.is_empty(), "sockets left behind: {leftovers:?}");
    let since = kubelet.mark();
    let again = Daemon::start(dir, "dgx-a100", "second");
    kubelet.wait_registered_with_list(since, MIG, 56);
    again.stop();
}

/// One allocation of `count` devices of `resource` on `profile` with `layout`; the answer.
fn allocate_on(
    profile: &str,
    layout: Value,
    slices: usize,
    resource: &str,
    count: usize,
) -> (Value, BTreeMap<String, Value>) {
    let bin = standin().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("plugins")).unwrap();
    let mut kubelet = Kubelet::start(&bin, dir);
    let daemon = Daemon::start(dir, profile, "vgpud");
    daemon.lay_out(layout, slices);
    kubelet.wait_event(
        "devices",
        // The layout's slices come one by one, each in a new list: wait for enough of them.
        |v| v["resource"] == resource && v["devices"].as_array().unwrap().len() >= count,
        Duration::from_secs(20),
    );
    let ids = ids_of(&kubelet.command(&format!("preferred {resource} {count}")));
    assert_eq!(ids.len(), count);
    let granted = kubelet.command(&format!("allocate {resource} {}", ids.join(",")));
    assert_eq!(
        granted["event"],
        "allocated",
        "{granted}\n{}",
        daemon.log_text()
    );
    let all = daemon.slices();
    let chosen = ids.iter().map(|id| (id.clone(), all[id].clone())).collect();
    daemon.stop();
    (granted, chosen)
}

/// The Allocate answer's `var` lists exactly the chosen slices' `field`, comma-separated, as
/// KubeVirt's virt-launcher reads it.
fn assert_env_lists(granted: &Value, var: &str, chosen: &BTreeMap<String, Value>, field: &str) {
    let expected: BTreeSet<String> = chosen
        .values()
        .map(|s| s[field].as_str().unwrap().to_owned())
        .collect();
    let env = granted["envs"][var].as_str().unwrap();
    assert_eq!(
        env.split(',').map(str::to_owned).collect::<BTreeSet<_>>(),
        expected,
        "{granted}"
    );
}

/// `/dev/vfio/vfio` and each slice's group, read-write.
fn assert_vfio_nodes(granted: &Value, chosen: &BTreeMap<String, Value>) {
    let mut expected: BTreeSet<String> = chosen
        .values()
        .map(|s| format!("/dev/vfio/{}", s["vfio_group"].as_u64().unwrap()))
        .collect();
    expected.insert("/dev/vfio/vfio".into());
    let specs = granted["devices"].as_array().unwrap();
    let got: BTreeSet<String> = specs
        .iter()
        .map(|d| d["host_path"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(got, expected, "{granted}");
    assert!(
        specs
            .iter()
            .all(|d| d["permissions"] == "rw" && d["container_path"] == d["host_path"])
    );
}

#[test]
fn an_mdev_vgpu_is_handed_to_kubevirt_by_uuid() {
    if standin().is_none() {
        return;
    }
    let resource = "nvidia.com/GRID_T4-1B";
    let (granted, chosen) = allocate_on(
        "vdi-mixed",
        json!({"name": "t4", "selector": {"model": "T4"}, "slices": [{"type": "nvidia-222", "count": 2}]}),
        4,
        resource,
        2,
    );
    assert_env_lists(
        &granted,
        "MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4-1B",
        &chosen,
        "mdev_uuid",
    );
    assert_vfio_nodes(&granted, &chosen);
}

#[test]
fn a_vendor_vfio_vgpu_is_handed_to_kubevirt_by_pci_address() {
    if standin().is_none() {
        return;
    }
    let resource = "nvidia.com/NVIDIA_H200X-1-18C";
    let (granted, chosen) = allocate_on(
        "hgx-h200",
        json!({"name": "h200", "slices": [{"type": "NVIDIA H200X-1-18C", "count": 2}]}),
        16,
        resource,
        2,
    );
    assert_env_lists(
        &granted,
        "PCI_RESOURCE_NVIDIA_COM_NVIDIA_H200X-1-18C",
        &chosen,
        "pci_address",
    );
    assert_vfio_nodes(&granted, &chosen);
}
