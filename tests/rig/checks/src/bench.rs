//! `rig-checks bench`: the real-kernel benchmark (BENCHMARKS.md §7). Inside the rig's guest it
//! times, in one run, the raw sysfs operations against the real daemon (`vgpud run` on the
//! guest's real host, asked over its REST unix socket) doing the same thing, and mdevctl 1.4
//! against vgpud for listing and creating many mdevs. Everything measured comes back as one JSON
//! value; [`table`] renders it for people. A benchmark, not a test: it fails only when an
//! operation fails, never because something was slow.
//!
//! Programs are started the way the rig starts its own (the host's dynamic loader over 9p,
//! `RIG_LOADER` and `RIG_LIBRARY_PATH`), so a CLI's time includes loading it, as a user's would.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ids::MdevUuid;
use serde_json::{Value, json};

/// The mdev parent and type of every mdev measurement: `mtty` is the sample parent with the most
/// instances (its pool of serial ports; `mtty-1` takes one port).
const PARENT: &str = "mtty";
const TYPE: &str = "mtty-1";
const WORK: &str = "/tmp/vgpud-bench";

/// What to run and how often.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `vgpud` binary.
    pub vgpud: PathBuf,
    /// The `vgpuctl` binary.
    pub vgpuctl: PathBuf,
    /// The `mdevctl` binary (1.4, from crates.io); `None` skips the side by side.
    pub mdevctl: Option<PathBuf>,
    /// Create/remove cycles of one mdev, per path.
    pub mdev_reps: usize,
    /// VF enable + bind cycles, per path.
    pub vf_reps: usize,
    /// Timed runs of each listing command.
    pub list_reps: usize,
    /// At most this many mdevs for the N-mdev part (fewer when the parent has fewer).
    pub max_mdevs: usize,
}

/// Milliseconds since `t`.
fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// The nearest-rank percentile `p` (0 < p <= 1) of sorted samples.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `{n, p50, p99, min, max}` of samples in ms.
fn summary(samples: &[f64]) -> Value {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    json!({
        "n": s.len(),
        "p50": percentile(&s, 0.5),
        "p99": percentile(&s, 0.99),
        "min": s.first(),
        "max": s.last(),
    })
}

/// A command for `bin`, through the loader the guest runs host binaries with.
fn program(bin: &Path) -> Command {
    match (
        std::env::var_os("RIG_LOADER"),
        std::env::var_os("RIG_LIBRARY_PATH"),
    ) {
        (Some(loader), Some(libs)) => {
            let mut c = Command::new(loader);
            c.arg("--library-path").arg(libs).arg(bin);
            c
        }
        _ => Command::new(bin),
    }
}

/// Runs a command to the end, as a user's shell would (output read); fails on a bad status.
fn run_cli(bin: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = program(bin)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "{} {} exited {}: {}",
            bin.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Times `reps` runs of a command.
fn time_cli(bin: &Path, args: &[&str], reps: usize) -> anyhow::Result<Vec<f64>> {
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        run_cli(bin, args)?;
        v.push(ms(t));
    }
    Ok(v)
}

fn write(path: impl AsRef<Path>, value: &str) -> anyhow::Result<()> {
    let path = path.as_ref();
    std::fs::write(path, value).with_context(|| format!("writing {value:?} to {}", path.display()))
}

fn read_trim(path: impl AsRef<Path>) -> anyhow::Result<String> {
    let path = path.as_ref();
    Ok(std::fs::read_to_string(path)
        .with_context(|| format!("reading {}", path.display()))?
        .trim()
        .to_owned())
}

/// One kept-alive HTTP/1.1 connection to the daemon's unix socket.
struct Conn(BufReader<UnixStream>);

impl Conn {
    fn connect(socket: &Path) -> anyhow::Result<Self> {
        let s = UnixStream::connect(socket)
            .with_context(|| format!("connecting to {}", socket.display()))?;
        s.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(Self(BufReader::new(s)))
    }

    /// One request; the body of a 2xx answer, else an error with the daemon's answer.
    fn call(&mut self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let body = body.map(Value::to_string).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        );
        let s = self.0.get_mut();
        s.write_all(head.as_bytes())?;
        s.write_all(body.as_bytes())?;
        let (status, answer) = self
            .read_answer()
            .with_context(|| format!("{method} {path}"))?;
        if !(200..300).contains(&status) {
            bail!(
                "{method} {path}: HTTP {status}: {}",
                String::from_utf8_lossy(&answer)
            );
        }
        if answer.is_empty() {
            return Ok(Value::Null);
        }
        // `/healthz` answers plain text.
        Ok(serde_json::from_slice(&answer)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&answer).into_owned())))
    }

    fn read_answer(&mut self) -> anyhow::Result<(u16, Vec<u8>)> {
        let mut line = String::new();
        self.0.read_line(&mut line)?;
        let status: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("bad status line {line:?}"))?;
        let (mut length, mut chunked) = (0, false);
        loop {
            line.clear();
            if self.0.read_line(&mut line)? == 0 {
                bail!("the connection closed in the head");
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((name, value)) = l.split_once(':') {
                let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
                if name == "content-length" {
                    length = value.parse()?;
                } else if name == "transfer-encoding" {
                    chunked = value.eq_ignore_ascii_case("chunked");
                }
            }
        }
        if !chunked {
            let mut b = vec![0; length];
            self.0.read_exact(&mut b)?;
            return Ok((status, b));
        }
        let mut body = Vec::new();
        loop {
            line.clear();
            self.0.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .with_context(|| format!("bad chunk size {line:?}"))?;
            let start = body.len();
            body.resize(start + size + 2, 0);
            self.0.read_exact(&mut body[start..])?;
            body.truncate(start + size);
            if size == 0 {
                return Ok((status, body));
            }
        }
    }
}

/// The real daemon on the guest's real host: no NVML (absent, as on any host without NVIDIA's
/// driver), no D-Bus, its socket without a group (the guest has no `vgpud` group).
struct Daemon {
    child: Child,
    socket: PathBuf,
}

impl Daemon {
    fn start(bin: &Path) -> anyhow::Result<(Self, f64)> {
        let work = Path::new(WORK);
        let _ = std::fs::remove_dir_all(work);
        std::fs::create_dir_all(work)?;
        let socket = work.join("api.sock");
        let config = work.join("vgpud.toml");
        write(
            &config,
            &format!(
                "state_dir = \"{WORK}/state\"\n[api]\nsocket = \"{}\"\nsocket_group = \"\"\n\
                 [dbus]\nenabled = false\n",
                socket.display()
            ),
        )?;
        let log = std::fs::File::create(work.join("vgpud.log"))?;
        let t = Instant::now();
        let child = program(bin)
            .arg("run")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting vgpud run")?;
        let mut d = Self { child, socket };
        loop {
            if let Some(status) = d.child.try_wait()? {
                bail!("vgpud run exited {status} at start: {}", d.log_tail());
            }
            if let Ok(mut c) = Conn::connect(&d.socket)
                && c.call("GET", "/healthz", None).is_ok()
            {
                return Ok((d, ms(t)));
            }
            if t.elapsed() > Duration::from_secs(180) {
                bail!("vgpud did not answer within 180 s: {}", d.log_tail());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(Path::new(WORK).join("vgpud.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    fn conn(&self) -> anyhow::Result<Conn> {
        Conn::connect(&self.socket)
    }

    /// SIGTERM, then waits for it to exit.
    fn stop(mut self) -> anyhow::Result<()> {
        // Our own child, not reaped yet: its pid cannot have been reused. (The crate has no
        // unsafe code, so kill(1) rather than kill(2).)
        Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .context("kill -TERM vgpud")?;
        let t = Instant::now();
        while self.child.try_wait()?.is_none() {
            if t.elapsed() > Duration::from_secs(60) {
                self.child.kill()?;
                bail!("vgpud did not stop within 60 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn type_dir() -> PathBuf {
    Path::new("/sys/class/mdev_bus")
        .join(PARENT)
        .join("mdev_supported_types")
        .join(TYPE)
}

fn available() -> anyhow::Result<usize> {
    Ok(read_trim(type_dir().join("available_instances"))?.parse()?)
}

fn mdev_body() -> Value {
    json!({"gpu": PARENT, "kind": {"backend": "mdev", "type_id": TYPE}})
}

fn slice_id(v: &Value) -> anyhow::Result<String> {
    v["id"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no slice id in {v}"))
}

/// Part 1: one mdev created and removed, raw and through vgpud.
fn mdev_latency(d: &Daemon, reps: usize) -> anyhow::Result<Value> {
    let (mut raw_c, mut raw_r) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let uuid = MdevUuid::new_random().to_string();
        let t = Instant::now();
        write(type_dir().join("create"), &uuid)?;
        raw_c.push(ms(t));
        let t = Instant::now();
        write(format!("/sys/bus/mdev/devices/{uuid}/remove"), "1")?;
        raw_r.push(ms(t));
    }
    let mut c = d.conn()?;
    let (mut v_c, mut v_r) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        let id = slice_id(&c.call("POST", "/v1/slices", Some(&mdev_body()))?)?;
        v_c.push(ms(t));
        let t = Instant::now();
        c.call("DELETE", &format!("/v1/slices/{id}"), None)?;
        v_r.push(ms(t));
    }
    Ok(json!({
        "create": {"raw": summary(&raw_c), "vgpud": summary(&v_c)},
        "remove": {"raw": summary(&raw_r), "vgpud": summary(&v_r)},
    }))
}

fn pf_dir(pf: &str) -> PathBuf {
    Path::new("/sys/bus/pci/devices").join(pf)
}

fn set_numvfs(pf: &str, n: usize) -> anyhow::Result<()> {
    write(pf_dir(pf).join("sriov_numvfs"), &n.to_string())
}

fn vf_addresses(pf: &str, n: usize) -> anyhow::Result<Vec<String>> {
    (0..n)
        .map(|i| {
            let link = std::fs::read_link(pf_dir(pf).join(format!("virtfn{i}")))?;
            link.file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .context("a virtfn link without a name")
        })
        .collect()
}

fn driver_of(addr: &str) -> Option<String> {
    std::fs::read_link(pf_dir(addr).join("driver"))
        .ok()
        .and_then(|l| l.file_name().map(|f| f.to_string_lossy().into_owned()))
}

/// The raw bind: `driver_override`, unbind from the driver the kernel probed, `drivers_probe`.
fn raw_bind(vf: &str) -> anyhow::Result<()> {
    write(pf_dir(vf).join("driver_override"), "vfio-pci")?;
    if driver_of(vf).is_some() {
        write(pf_dir(vf).join("driver/unbind"), vf)?;
    }
    write("/sys/bus/pci/drivers_probe", vf)?;
    match driver_of(vf).as_deref() {
        Some("vfio-pci") => Ok(()),
        other => bail!("VF {vf} is on {other:?} after the raw bind"),
    }
}

fn raw_release(vf: &str) -> anyhow::Result<()> {
    if driver_of(vf).is_some() {
        write(pf_dir(vf).join("driver/unbind"), vf)?;
    }
    write(pf_dir(vf).join("driver_override"), "\n")
}

/// Part 2: the PF's VFs enabled (0 → all) and bound to vfio-pci, raw and through vgpud. vgpud
/// enables every VF on a PF's first VF slice and binds one per slice; the raw path does the
/// same writes in the same order. vgpud leaves the VFs enabled when its last VF slice goes, so
/// each cycle ends with a raw `sriov_numvfs` 0 (not timed).
fn vf_latency(d: &Daemon, pf: &str, total: usize, reps: usize) -> anyhow::Result<Value> {
    let (mut raw_first, mut raw_next, mut raw_all) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        set_numvfs(pf, 0)?;
        let t = Instant::now();
        set_numvfs(pf, total)?;
        let vfs = vf_addresses(pf, total)?;
        raw_bind(&vfs[0])?;
        raw_first.push(ms(t));
        for vf in &vfs[1..] {
            let t1 = Instant::now();
            raw_bind(vf)?;
            raw_next.push(ms(t1));
        }
        raw_all.push(ms(t));
        eprintln!("bench: raw VF cycle {:.0} ms", ms(t));
        for vf in &vfs {
            raw_release(vf)?;
        }
        set_numvfs(pf, 0)?;
    }
    let mut c = d.conn()?;
    let body = json!({"gpu": pf, "kind": {"backend": "sriov-vf"}});
    let (mut v_first, mut v_next, mut v_all, mut v_destroy) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        set_numvfs(pf, 0)?;
        let t = Instant::now();
        let mut ids = vec![slice_id(&c.call("POST", "/v1/slices", Some(&body))?)?];
        v_first.push(ms(t));
        for _ in 1..total {
            let t1 = Instant::now();
            ids.push(slice_id(&c.call("POST", "/v1/slices", Some(&body))?)?);
            v_next.push(ms(t1));
        }
        v_all.push(ms(t));
        eprintln!("bench: vgpud VF cycle {:.0} ms", ms(t));
        let on_vfio = vf_addresses(pf, total)?
            .iter()
            .filter(|vf| driver_of(vf).as_deref() == Some("vfio-pci"))
            .count();
        if on_vfio != total {
            bail!("vgpud made {total} VF slices but {on_vfio} VFs are on vfio-pci");
        }
        for id in ids {
            let t1 = Instant::now();
            c.call("DELETE", &format!("/v1/slices/{id}"), None)?;
            v_destroy.push(ms(t1));
        }
    }
    set_numvfs(pf, 0)?;
    Ok(json!({
        "vfs": total,
        "enable_bind_first": {"raw": summary(&raw_first), "vgpud": summary(&v_first)},
        "bind_next": {"raw": summary(&raw_next), "vgpud": summary(&v_next)},
        "enable_bind_all": {"raw": summary(&raw_all), "vgpud": summary(&v_all)},
        "vgpud_destroy": summary(&v_destroy),
    }))
}

fn as_str(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Part 3: N mdevs, vgpud against mdevctl: creating them, and listing them while they exist.
fn many_mdevs(d: &Daemon, o: &Options) -> anyhow::Result<Value> {
    let n = available()?.min(o.max_mdevs);
    let socket = d.socket.display().to_string();
    let ctl = |args: &[&str]| -> Vec<String> {
        let mut v = vec!["--socket".to_owned(), socket.clone()];
        v.extend(args.iter().map(|s| (*s).to_owned()));
        v
    };
    let mut c = d.conn()?;
    let mut out = json!({"n": n, "parent": PARENT, "type": TYPE});

    // vgpud creates N over REST, then they are listed by everyone.
    let t = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(slice_id(&c.call(
            "POST",
            "/v1/slices",
            Some(&mdev_body()),
        )?)?);
    }
    out["vgpud_create_rest_ms"] = json!(ms(t));
    let listed = c.call("GET", "/v1/slices", None)?;
    out["vgpud_listed"] = json!(listed.as_array().map_or(0, Vec::len));
    let mut rest = Vec::new();
    for _ in 0..o.list_reps {
        let t = Instant::now();
        c.call("GET", "/v1/slices", None)?;
        rest.push(ms(t));
    }
    out["list"] = json!({
        "vgpud_rest": summary(&rest),
        "vgpuctl_slices": summary(&time_cli(&o.vgpuctl, &as_str(&ctl(&["slices"])), o.list_reps)?),
        "vgpuctl_version": summary(&time_cli(&o.vgpuctl, &["--version"], o.list_reps)?),
    });
    if let Some(m) = &o.mdevctl {
        let lines = run_cli(m, &["list"])?.lines().count();
        out["mdevctl_listed"] = json!(lines);
        out["list"]["mdevctl_list"] = summary(&time_cli(m, &["list"], o.list_reps)?);
        out["list"]["mdevctl_version"] = summary(&time_cli(m, &["--version"], o.list_reps)?);
    }
    let t = Instant::now();
    for id in &ids {
        c.call("DELETE", &format!("/v1/slices/{id}"), None)?;
    }
    out["vgpud_destroy_rest_ms"] = json!(ms(t));

    // vgpud creates N through its CLI, as a user would.
    let t = Instant::now();
    for _ in 0..n {
        run_cli(
            &o.vgpuctl,
            &as_str(&ctl(&[
                "slice",
                "create",
                "--gpu",
                PARENT,
                "--kind",
                &format!("mdev:{TYPE}"),
            ])),
        )?;
    }
    out["vgpuctl_create_ms"] = json!(ms(t));
    let listed = c.call("GET", "/v1/slices", None)?;
    let ids: Vec<String> = listed
        .as_array()
        .map(|a| a.iter().filter_map(|s| slice_id(s).ok()).collect())
        .unwrap_or_default();
    if ids.len() != n {
        bail!("vgpuctl created {n} slices but vgpud lists {}", ids.len());
    }
    let t = Instant::now();
    for id in &ids {
        run_cli(&o.vgpuctl, &as_str(&ctl(&["slice", "destroy", id])))?;
    }
    out["vgpuctl_destroy_ms"] = json!(ms(t));

    if let Some(m) = &o.mdevctl {
        out["mdevctl"] = mdevctl_side(m, n, o.list_reps)?;
    }
    Ok(out)
}

/// mdevctl keeps definitions under /etc/mdevctl.d and refuses to run at all (even
/// `--version`) without it and its callout directories, which its package would make. The
/// guest's root is a writable initramfs and its /sys the real one, so the real paths are used
/// (no `MDEVCTL_ENV_ROOT`, which would move /sys too).
fn mdevctl_dirs() -> anyhow::Result<()> {
    for dir in [
        "/etc/mdevctl.d/scripts.d/callouts",
        "/etc/mdevctl.d/scripts.d/notifiers",
        "/usr/lib/mdevctl/scripts.d/callouts",
        "/usr/lib/mdevctl/scripts.d/notifiers",
    ] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {dir}"))?;
    }
    Ok(())
}

/// mdevctl making the same N mdevs: persistent (`define` + `start`) and transient (`start -p -t`).
fn mdevctl_side(m: &Path, n: usize, list_reps: usize) -> anyhow::Result<Value> {
    let uuids: Vec<String> = (0..n).map(|_| MdevUuid::new_random().to_string()).collect();
    let mut out = json!({});
    let t = Instant::now();
    for u in &uuids {
        run_cli(m, &["define", "-u", u, "-p", PARENT, "-t", TYPE])?;
        run_cli(m, &["start", "-u", u])?;
    }
    out["define_start_ms"] = json!(ms(t));
    let active = std::fs::read_dir("/sys/bus/mdev/devices")?.count();
    if active != n {
        bail!("mdevctl defined and started {n} mdevs but {active} exist");
    }
    out["list_defined"] = summary(&time_cli(m, &["list"], list_reps)?);
    out["list_defined_listed"] = json!(run_cli(m, &["list"])?.lines().count());
    let t = Instant::now();
    for u in &uuids {
        run_cli(m, &["stop", "-u", u])?;
        run_cli(m, &["undefine", "-u", u])?;
    }
    out["stop_undefine_ms"] = json!(ms(t));
    let t = Instant::now();
    for u in &uuids {
        run_cli(m, &["start", "-u", u, "-p", PARENT, "-t", TYPE])?;
    }
    out["start_transient_ms"] = json!(ms(t));
    let t = Instant::now();
    for u in &uuids {
        run_cli(m, &["stop", "-u", u])?;
    }
    out["stop_transient_ms"] = json!(ms(t));
    Ok(out)
}

/// Runs every part in the guest; the JSON result.
pub fn run(o: &Options) -> anyhow::Result<Value> {
    let pf = crate::find_pf(&sysfs::RealSysfs::host())
        .context("no SR-IOV PF in the guest")?
        .to_string();
    set_numvfs(&pf, 0)?;
    let total: usize = read_trim(pf_dir(&pf).join("sriov_totalvfs"))?.parse()?;
    let mut out = json!({
        "pf": pf,
        "mdev_available_instances": available()?,
        "reps": {"mdev": o.mdev_reps, "vf": o.vf_reps, "list": o.list_reps},
        "mdevctl": o.mdevctl.as_ref().map(|_| "1.4"),
    });
    if o.mdevctl.is_some() {
        mdevctl_dirs()?;
    }
    let (d, startup) = Daemon::start(&o.vgpud)?;
    out["vgpud_startup_ms"] = json!(startup);
    let parts = (|| -> anyhow::Result<()> {
        eprintln!("bench: one mdev, {} cycles per path", o.mdev_reps);
        out["mdev"] = mdev_latency(&d, o.mdev_reps)?;
        eprintln!("bench: VFs, {} cycles per path", o.vf_reps);
        out["vf"] = vf_latency(&d, &pf, total, o.vf_reps)?;
        eprintln!("bench: many mdevs");
        out["many"] = many_mdevs(&d, o)?;
        Ok(())
    })();
    if let Err(e) = parts {
        eprintln!("bench: vgpud's log ends with:\n{}", d.log_tail());
        return Err(e);
    }
    d.stop()?;
    Ok(out)
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// The result as a table for people.
pub fn table(r: &Value) -> String {
    let mut s = String::new();
    let row = |s: &mut String, what: &str, raw: &Value, v: &Value| {
        let (rp50, rp99, vp50, vp99) = (
            num(&raw["p50"]),
            num(&raw["p99"]),
            num(&v["p50"]),
            num(&v["p99"]),
        );
        s.push_str(&format!(
            "{what:<34} {rp50:>9.2} {rp99:>9.2} {vp50:>9.2} {vp99:>9.2} {:>9.2} {:>6}\n",
            vp50 - rp50,
            raw["n"].as_u64().unwrap_or(0)
        ));
    };
    s.push_str(&format!(
        "PF {}: {} VFs; {PARENT}/{TYPE}: {} instances; vgpud start to /healthz {:.0} ms\n\n",
        r["pf"].as_str().unwrap_or("?"),
        r["vf"]["vfs"],
        r["mdev_available_instances"],
        num(&r["vgpud_startup_ms"])
    ));
    s.push_str(&format!(
        "{:<34} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}\n",
        "operation, ms", "raw p50", "raw p99", "vgpud p50", "vgpud p99", "overhead", "n"
    ));
    let m = &r["mdev"];
    row(
        &mut s,
        "mdev create",
        &m["create"]["raw"],
        &m["create"]["vgpud"],
    );
    row(
        &mut s,
        "mdev remove",
        &m["remove"]["raw"],
        &m["remove"]["vgpud"],
    );
    let f = &r["vf"];
    for (key, what) in [
        ("enable_bind_first", "VFs 0->all + first VF on vfio-pci"),
        ("bind_next", "each further VF onto vfio-pci"),
        ("enable_bind_all", "VFs 0->all, all on vfio-pci"),
    ] {
        row(&mut s, what, &f[key]["raw"], &f[key]["vgpud"]);
    }
    let many = &r["many"];
    let n = many["n"].as_u64().unwrap_or(0);
    s.push_str(&format!(
        "\nN = {n} active {PARENT}/{TYPE} mdevs (vgpud lists {}, mdevctl lists {})\n",
        many["vgpud_listed"], many["mdevctl_listed"]
    ));
    let l = &many["list"];
    s.push_str(&format!(
        "{:<44} {:>9} {:>9}\n",
        "listing, ms", "p50", "p99"
    ));
    for (key, what) in [
        ("mdevctl_list", "mdevctl list"),
        ("vgpuctl_slices", "vgpuctl slices"),
        ("vgpud_rest", "GET /v1/slices (kept-alive socket)"),
        ("mdevctl_version", "mdevctl --version (start-up floor)"),
        ("vgpuctl_version", "vgpuctl --version (start-up floor)"),
    ] {
        s.push_str(&format!(
            "{what:<44} {:>9.2} {:>9.2}\n",
            num(&l[key]["p50"]),
            num(&l[key]["p99"])
        ));
    }
    let mc = &many["mdevctl"];
    s.push_str(&format!(
        "\n{:<44} {:>9} {:>9}\n",
        "creating N, ms", "total", "per mdev"
    ));
    for (v, what) in [
        (&mc["define_start_ms"], "mdevctl define + start"),
        (&mc["start_transient_ms"], "mdevctl start -p -t (transient)"),
        (&many["vgpuctl_create_ms"], "vgpuctl slice create"),
        (&many["vgpud_create_rest_ms"], "POST /v1/slices"),
        (&mc["stop_undefine_ms"], "mdevctl stop + undefine"),
        (&mc["stop_transient_ms"], "mdevctl stop (transient)"),
        (&many["vgpuctl_destroy_ms"], "vgpuctl slice destroy"),
        (&many["vgpud_destroy_rest_ms"], "DELETE /v1/slices/{id}"),
    ] {
        s.push_str(&format!(
            "{what:<44} {:>9.1} {:>9.2}\n",
            num(v),
            num(v) / n.max(1) as f64
        ));
    }
    let ratio = |a: &Value, b: &Value| num(a) / num(b);
    s.push_str(&format!(
        "\nratios: mdevctl list / vgpuctl slices {:.2}x; mdevctl list / GET /v1/slices {:.1}x; \
         mdevctl define+start / vgpuctl create {:.2}x; mdevctl start -t / vgpuctl create {:.2}x\n",
        ratio(&l["mdevctl_list"]["p50"], &l["vgpuctl_slices"]["p50"]),
        ratio(&l["mdevctl_list"]["p50"], &l["vgpud_rest"]["p50"]),
        ratio(&mc["define_start_ms"], &many["vgpuctl_create_ms"]),
        ratio(&mc["start_transient_ms"], &many["vgpuctl_create_ms"]),
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&s, 0.5), 5.0);
        assert_eq!(percentile(&s, 0.99), 10.0);
        assert_eq!(percentile(&[3.0], 0.99), 3.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn a_result_without_mdevctl_still_renders() {
        let r = json!({"pf": "0000:81:00.0", "mdev": {}, "vf": {"vfs": 7}, "many": {"n": 24}});
        let t = table(&r);
        assert!(t.contains("mdev create"));
        assert!(t.contains("N = 24"));
    }
}
