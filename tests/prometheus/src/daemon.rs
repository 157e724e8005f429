//! `vgpud run --sim dgx-a100` with its TCP metrics listener on a loopback port, in a temporary
//! directory of its own, and the REST traffic that makes slice, capacity and business series.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use torture::http;

/// How long a start may take (a debug build on a loaded 2-core machine).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The consumer whose VM holds two MIG slices.
pub const VM_CONSUMER: &str = "tenant-a";
/// The libvirt test-driver domain the simulated host ships (see README's demo).
pub const VM_NAME: &str = "vgpud-demo-vm";
/// The GPUs of the simulated DGX A100.
pub const GPUS: usize = 8;
/// The GPU that reports an application Xid during the traffic.
pub const XID_GPU: &str = "0000:47:00.0";

/// A running daemon; killed when dropped.
pub struct Daemon {
    dir: tempfile::TempDir,
    child: Child,
    /// The metrics listener's port on 127.0.0.1.
    pub metrics_port: u16,
}

impl Daemon {
    /// Starts the daemon with the metrics listener on a free port, a reconcile every second
    /// and, where this binary knows the keys, a telemetry poll every half second and a
    /// one-second idle window (so the series move while Prometheus watches). Returns notes on
    /// what it could not configure.
    pub fn start() -> anyhow::Result<(Daemon, Vec<String>)> {
        Self::start_on("dgx-a100")
    }

    /// As [`Daemon::start`], on simulator profile `profile`.
    pub fn start_on(profile: &str) -> anyhow::Result<(Daemon, Vec<String>)> {
        let dir = tempfile::tempdir()?;
        let metrics_port = crate::peer::free_port()?;
        let notes = write_config(dir.path(), metrics_port)?;
        let child = spawn(dir.path(), profile)?;
        let mut d = Daemon {
            dir,
            child,
            metrics_port,
        };
        d.wait_ready()?;
        Ok((d, notes))
    }

    /// The REST socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("api.sock")
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("vgpud.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let log = self.dir.path().join("vgpud.log");
        let read = || std::fs::read_to_string(&log).unwrap_or_default();
        testkit::daemon::wait_ready(&mut self.child, read, START_TIMEOUT)
    }

    /// `POST path` with a JSON body: the status and body, whatever the status.
    pub fn post(&self, path: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
        match http::call(&self.socket(), "POST", path, None, Some(body)) {
            Ok(a) => Ok((a.status, a.body)),
            Err(e) => bail!("POST {path}: {e:?}\n{}", self.log()),
        }
    }

    /// `POST path`, which must answer `want`.
    pub fn post_expect(&self, path: &str, body: &Value, want: u16) -> anyhow::Result<Value> {
        let (status, answer) = self.post(path, body)?;
        if status != want {
            bail!("POST {path} {body}: {status} {answer} (wanted {want})");
        }
        Ok(answer)
    }

    /// One scrape of `/metrics` on the metrics listener: content type and body.
    pub fn scrape(&self) -> anyhow::Result<(String, String)> {
        let answer = crate::http::get(self.metrics_port, "/metrics")?;
        if answer.status != 200 {
            bail!("GET /metrics: {} {}", answer.status, answer.body);
        }
        Ok((answer.content_type, answer.body))
    }

    /// Arms a fault in the simulated host (`vgpud sim fault`), e.g. a vendor call that fails.
    pub fn fault(&self, spec: &str) -> anyhow::Result<()> {
        let status = Command::new(torture::daemon::vgpud_binary()?)
            .args(["sim", "fault", "--state-dir"])
            .arg(self.dir.path().join("state/sim"))
            .arg(spec)
            .stdout(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("vgpud sim fault {spec}: {status}");
        }
        Ok(())
    }

    /// The state before anything watches: an allocation of two 3g.40gb MIG slices for the VM
    /// (allocated slices with a VM and consumer), and two ready 1g.10gb slices on another GPU
    /// (free capacity).
    pub fn populate(&self) -> anyhow::Result<()> {
        self.post_expect(
            "/v1/allocations",
            &json!({"consumer": VM_CONSUMER, "vm": VM_NAME,
                    "request": {"type": "3g.40gb", "count": 2}}),
            201,
        )?;
        for _ in 0..2 {
            self.post_expect(
                "/v1/slices",
                &json!({"gpu": "0000:0f:00.0", "kind": {"backend": "mig", "profile": "1g.10gb"}}),
                201,
            )?;
        }
        Ok(())
    }

    /// On the simulated `vdi-mixed` host: a time-sliced mdev vGPU (`nvidia-222` on the T4
    /// 0000:41:00.0) allocated to a VM, whose VFIO device the simulator then opens as a running
    /// guest does (`vgpud sim vm-open`): NVML lists only running vGPUs, so only then are its
    /// framebuffer and utilisation reported. A MIG instance has no utilisation of its own in
    /// NVML, so the DGX host alone cannot feed the dashboard's slice-utilisation panel.
    pub fn populate_running_vgpu(&self) -> anyhow::Result<()> {
        let a = self.post_expect(
            "/v1/allocations",
            &json!({"consumer": "desk", "vm": VM_NAME,
                    "request": {"type": "nvidia-222", "count": 1, "gpu": "0000:41:00.0"}}),
            201,
        )?;
        let uuid = a["slices"][0]["mdev_uuid"]
            .as_str()
            .with_context(|| format!("no mdev_uuid in {a}"))?;
        let out = Command::new(torture::daemon::vgpud_binary()?)
            .args(["sim", "vm-open", "--state-dir"])
            .arg(self.dir.path().join("state/sim"))
            .arg(uuid)
            .output()?;
        if !out.status.success() {
            bail!(
                "vgpud sim vm-open {uuid}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Reports Xid `xid` on `gpu` through the simulator (`vgpud sim xid`); the failure's text
    /// when the binary cannot (the command came with the health work of issue 15).
    pub fn xid(&self, gpu: &str, xid: u32) -> Result<(), String> {
        let out = Command::new(torture::daemon::vgpud_binary().map_err(|e| e.to_string())?)
            .args(["sim", "xid", "--state-dir"])
            .arg(self.dir.path().join("state/sim"))
            .args(["--gpu", gpu, &xid.to_string()])
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "vgpud sim xid {xid} on {gpu}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Traffic while Prometheus scrapes, so rates and histograms move: an application Xid (13,
    /// which must not quarantine), a successful allocation, one refused for want of capacity,
    /// and one whose vendor call fails once (of a type that leaves the free 1g.10gb slices be).
    /// Set-up steps this binary cannot do go to `notes` (their series will be missing, and the
    /// checks say so).
    pub fn traffic(&self, notes: &mut Vec<String>) -> anyhow::Result<()> {
        if let Err(e) = self.xid(XID_GPU, 13) {
            notes.push(e);
        }
        self.post_expect(
            "/v1/allocations",
            &json!({"consumer": "tenant-b", "request": {"type": "2g.20gb", "count": 1}}),
            201,
        )?;
        let (status, body) = self.post(
            "/v1/allocations",
            &json!({"consumer": "tenant-c", "request": {"type": "7g.80gb", "count": 64}}),
        )?;
        if status < 400 || body["code"] != "no_capacity" {
            bail!("64 whole-GPU MIG slices on 8 GPUs: {status} {body}");
        }
        // Whether the engine then tries another GPU is its business; the vendor error counts.
        self.fault("nvml:nvmlDeviceCreateGpuInstanceWithPlacement=INSUFFICIENT_RESOURCES,times=1")?;
        self.post(
            "/v1/allocations",
            &json!({"consumer": "tenant-c", "request": {"type": "1g.20gb", "count": 2}}),
        )
        .context("allocation with a failing vendor call")?;
        Ok(())
    }
}

impl Daemon {
    /// SIGKILL, and wait until the process is gone (the host "goes down" for Prometheus).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The config, with the telemetry keys when `vgpud check-config` accepts them (they came with
/// the telemetry poller of issue 15; an older binary refuses unknown keys).
fn write_config(dir: &Path, metrics_port: u16) -> anyhow::Result<Vec<String>> {
    let base = format!(
        "[engine]\nreconcile_interval_s = 1\n\n[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n"
    );
    let path = dir.join("vgpud.toml");
    std::fs::write(
        &path,
        format!("{base}poll_interval_ms = 500\nidle_window_s = 1\n"),
    )?;
    let check = Command::new(torture::daemon::vgpud_binary()?)
        .arg("check-config")
        .arg(&path)
        .output()?;
    if check.status.success() {
        return Ok(Vec::new());
    }
    std::fs::write(&path, base)?;
    Ok(vec![format!(
        "this vgpud refuses [metrics] poll_interval_ms/idle_window_s ({}): telemetry keeps its own pace",
        String::from_utf8_lossy(&check.stderr)
            .lines()
            .next()
            .unwrap_or("")
    )])
}

fn spawn(dir: &Path, profile: &str) -> anyhow::Result<Child> {
    testkit::daemon::sim_run(
        &mut Command::new(torture::daemon::vgpud_binary()?),
        dir,
        profile,
        None,
    )
    .stderr(std::fs::File::create(dir.join("vgpud.log"))?)
    .spawn()
    .context("spawn vgpud")
}
