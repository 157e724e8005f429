//! The daemon benchmark: the real `vgpud run --sim` measured over its unix socket, the way a
//! control plane sees it. Four parts, each on a daemon of its own in a fresh directory:
//!
//! - `latency`: p50/p99 of every read route and the placement score on one kept-alive
//!   connection; allocate (a slice created, then a free slice claimed), release, destroy;
//! - `throughput`: reads/s and allocations/s with 1, 8 and 64 concurrent clients;
//! - `startup`: process start → READY=1 with 0, 100 and 1,000 owned slices to reconcile
//!   (seeded through the daemon, then restarted);
//! - `footprint`: RSS and CPU, idle and with 1 s telemetry, on 8 and 16 GPUs; RSS around a
//!   burst of 5,000 connections.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use crate::daemon_http::{self as http, Conn};
use crate::daemon_proc::{self as proc, Daemon, Setup};
use crate::daemon_profile as profile;

/// The first GPU of the DGX A100 profile.
const GPU: &str = "0000:07:00.0";
/// The telemetry poller's default interval (`[metrics] poll_interval_ms`).
const DEFAULT_POLL_MS: u64 = 5000;
const ONE_SLICE: &str = r#"{"consumer":"bench","request":{"type":"1g.10gb"}}"#;
const SCORE: &str = r#"{"type":"1g.10gb","count":1}"#;
const MTTY_SLICE: &str = r#"{"gpu":"mtty","kind":{"backend":"mdev","type_id":"mtty-1"}}"#;

/// What to run and how much.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `vgpud` binary.
    pub vgpud: PathBuf,
    /// Where the daemons' directories go (removed and re-made per run).
    pub dir: PathBuf,
    /// Parts to run.
    pub parts: Vec<String>,
    /// Timed requests per read route.
    pub requests: usize,
    /// Allocate/release cycles timed.
    pub cycles: usize,
    /// Seconds per throughput point.
    pub seconds: f64,
    /// Owned-slice counts for the start-up part.
    pub slices: Vec<usize>,
    /// Restarts timed per slice count.
    pub restarts: usize,
    /// Seconds of each footprint window.
    pub window_s: f64,
    /// Connections of the burst.
    pub connections: usize,
}

/// Runs the parts asked for; their results by name.
pub fn run(o: &Options) -> anyhow::Result<Value> {
    let mut out = serde_json::Map::new();
    for part in &o.parts {
        let result = match part.as_str() {
            "latency" => latency(o)?,
            "throughput" => throughput(o)?,
            "startup" => startup(o)?,
            "footprint" => footprint(o)?,
            other => {
                anyhow::bail!("unknown part {other:?}: latency, throughput, startup, footprint")
            }
        };
        out.insert(part.clone(), result);
    }
    Ok(Value::Object(out))
}

fn setup(o: &Options, name: &str, profile: &str, poll_ms: u64) -> anyhow::Result<Setup> {
    let dir = o.dir.join(name);
    proc::fresh_dir(&dir)?;
    Ok(Setup {
        vgpud: o.vgpud.clone(),
        profile: profile.to_owned(),
        dir,
        poll_ms,
        extra_config: String::new(),
        env: Vec::new(),
    })
}

/// Percentiles of a sample, in microseconds.
struct Summary {
    n: usize,
    p50: f64,
    p99: f64,
    max: f64,
}

fn summary(mut us: Vec<f64>) -> Summary {
    us.sort_by(f64::total_cmp);
    let at = |q: f64| {
        us.get(((us.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    Summary {
        n: us.len(),
        p50: at(0.5),
        p99: at(0.99),
        max: at(1.0),
    }
}

fn row(name: &str, s: &Summary, rows: &mut Vec<Value>) {
    println!(
        "{name:<44} {:>6} {:>10.1} {:>10.1} {:>10.1}",
        s.n, s.p50, s.p99, s.max
    );
    rows.push(json!({"what": name, "n": s.n, "p50_us": s.p50, "p99_us": s.p99, "max_us": s.max}));
}

fn timed(f: impl FnOnce() -> anyhow::Result<http::Answer>) -> anyhow::Result<(f64, http::Answer)> {
    let t = Instant::now();
    let a = f()?.ok()?;
    Ok((t.elapsed().as_secs_f64() * 1e6, a))
}

/// The read routes, with one allocation of two slices on the host so lists are not empty.
fn read_routes(socket: &Path) -> anyhow::Result<Vec<(String, String, Option<&'static str>)>> {
    let seed = r#"{"consumer":"bench-seed","request":{"type":"3g.40gb","count":2}}"#;
    let a = http::once(socket, "POST", "/v1/allocations", Some(seed))?
        .ok()?
        .json()?;
    let aid = a["id"].as_str().context("no allocation id")?.to_owned();
    let sid = a["slices"][0]["id"]
        .as_str()
        .context("no slice id")?
        .to_owned();
    let get = |p: String| ("GET".to_owned(), p, None);
    Ok(vec![
        get("/healthz".into()),
        get("/v1/host".into()),
        get("/v1/gpus".into()),
        get(format!("/v1/gpus/{GPU}")),
        get("/v1/slices".into()),
        get(format!("/v1/slices/{sid}")),
        get("/v1/allocations".into()),
        get(format!("/v1/allocations/{aid}")),
        get("/v1/layouts".into()),
        get("/v1/placement".into()),
        get("/metrics".into()),
        ("POST".into(), "/v1/placement-score".into(), Some(SCORE)),
    ])
}

/// The id in a `/v1/slices/{id}` or `/v1/allocations/{id}` path, if any.
fn sid_of(path: &str) -> String {
    match path.rsplit_once('/') {
        Some((head, id)) if head == "/v1/slices" || head == "/v1/allocations" => id.to_owned(),
        _ => "\0".to_owned(),
    }
}

fn latency(o: &Options) -> anyhow::Result<Value> {
    let d = proc::start(&setup(o, "latency", profile::DGX, DEFAULT_POLL_MS)?)?;
    let routes = read_routes(&d.socket)?;
    let mut conn = Conn::connect(&d.socket)?;
    println!(
        "\n## latency on {} (one kept-alive connection), µs",
        profile::DGX
    );
    println!(
        "{:<44} {:>6} {:>10} {:>10} {:>10}",
        "request", "n", "p50", "p99", "max"
    );
    let mut rows = Vec::new();
    for (method, path, body) in &routes {
        for _ in 0..o.requests.div_ceil(20) {
            conn.request(method, path, *body, false)?.ok()?;
        }
        let mut us = Vec::with_capacity(o.requests);
        for _ in 0..o.requests {
            us.push(timed(|| conn.request(method, path, *body, false))?.0);
        }
        // Ids differ per run: the table names the route.
        let route = path.replace(&*sid_of(path), "{id}");
        row(&format!("{method} {route}"), &summary(us), &mut rows);
    }
    for (name, us) in alloc_cycles(&mut conn, o.cycles)? {
        row(name, &summary(us), &mut rows);
    }
    d.stop()?;
    Ok(Value::Array(rows))
}

/// The vendor calls that change a device (vgpud's `change` calls): the device operations an
/// allocation's overhead is counted over.
const DEVICE_CALLS: [&str; 8] = [
    "nvmlDeviceSetMigMode",
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlGpuInstanceDestroy",
    "nvmlComputeInstanceDestroy",
    "amdsmi_set_num_vf",
    "amdsmi_set_gpu_compute_partition",
    "amdsmi_set_gpu_memory_partition",
];

/// Seconds the daemon has spent in device-changing vendor calls so far, from its own
/// `vgpud_vendor_call_duration_seconds` histogram on `/metrics`.
fn device_call_seconds(conn: &mut Conn) -> anyhow::Result<f64> {
    let text = conn.request("GET", "/metrics", None, false)?.ok()?.body;
    let text = String::from_utf8_lossy(&text);
    let mut total = 0.0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("vgpud_vendor_call_duration_seconds_sum{") else {
            continue;
        };
        let (labels, value) = rest
            .split_once("} ")
            .context("a histogram sum without a value")?;
        if DEVICE_CALLS
            .iter()
            .any(|c| labels.contains(&format!("call=\"{c}\"")))
        {
            total += value.trim().parse::<f64>().context("a histogram sum")?;
        }
    }
    Ok(total)
}

/// Allocate → ready (the answer comes once the slice is made and recorded), release, claim the
/// freed slice, release, destroy it: so every cycle creates one slice. A created allocation's
/// row is followed by its overhead: the time less what the daemon spent in the device calls it
/// made (read from `/metrics` after each one, outside the timing; sysfs writes such as an mdev
/// create are not timed by the daemon and count as overhead).
fn alloc_cycles(conn: &mut Conn, cycles: usize) -> anyhow::Result<Vec<(&'static str, Vec<f64>)>> {
    let names = [
        "POST /v1/allocations (slice created)",
        "POST /v1/allocations (free slice claimed)",
        "DELETE /v1/allocations/{id} (release)",
        "DELETE /v1/slices/{id} (destroy)",
        "  created: overhead over device calls",
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..cycles {
        let mut made = Vec::new();
        for claim in [false, true] {
            let device_before = device_call_seconds(conn)?;
            let (us, a) =
                timed(|| conn.request("POST", "/v1/allocations", Some(ONE_SLICE), false))?;
            let device_us = (device_call_seconds(conn)? - device_before) * 1e6;
            let a = a.json()?;
            let sid = a["slices"][0]["id"]
                .as_str()
                .context("no slice")?
                .to_owned();
            let kind = usize::from(claim && made.contains(&sid));
            times[kind].push(us);
            if kind == 0 {
                times[4].push(us - device_us);
            }
            made.push(sid);
            let aid = a["id"].as_str().context("no allocation id")?;
            let path = format!("/v1/allocations/{aid}");
            times[2].push(timed(|| conn.request("DELETE", &path, None, false))?.0);
        }
        made.dedup();
        for sid in made {
            let path = format!("/v1/slices/{sid}");
            times[3].push(timed(|| conn.request("DELETE", &path, None, false))?.0);
        }
    }
    Ok(names.into_iter().zip(times).collect())
}

/// Runs `clients` threads for `seconds`, each on its own connection calling `step` until the
/// time is up; successful steps and failed ones.
fn load(
    socket: &Path,
    clients: usize,
    seconds: f64,
    step: impl Fn(&mut Conn, usize) -> anyhow::Result<bool> + Sync,
) -> anyhow::Result<(u64, u64)> {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let counts = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let step = &step;
                scope.spawn(move || -> anyhow::Result<(u64, u64)> {
                    let mut conn = Conn::connect(socket)?;
                    let (mut ok, mut failed, mut i) = (0, 0, c);
                    while Instant::now() < deadline {
                        if step(&mut conn, i)? {
                            ok += 1
                        } else {
                            failed += 1
                        }
                        i += 1;
                    }
                    Ok((ok, failed))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a client panicked")))
            })
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    Ok(counts.iter().fold((0, 0), |(a, b), (c, d)| (a + c, b + d)))
}

fn throughput(o: &Options) -> anyhow::Result<Value> {
    let d = proc::start(&setup(o, "throughput", profile::DGX, DEFAULT_POLL_MS)?)?;
    let routes = read_routes(&d.socket)?;
    let reads: Vec<_> = routes.iter().filter(|r| r.0 == "GET").collect();
    println!(
        "\n## throughput on {} over the unix socket, {} s per point",
        profile::DGX,
        o.seconds
    );
    println!(
        "{:<8} {:>12} {:>14} {:>10}",
        "clients", "reads/s", "allocations/s", "refused"
    );
    let mut rows = Vec::new();
    for clients in [1usize, 8, 64] {
        let (r, _) = load(&d.socket, clients, o.seconds, |c, i| {
            let (m, p, b) = reads[i % reads.len()];
            Ok(c.request(m, p, *b, false)?.status < 300)
        })?;
        let (a, refused) = load(&d.socket, clients, o.seconds, |c, _| alloc_release(c))?;
        let (rs, as_) = (r as f64 / o.seconds, a as f64 / o.seconds);
        println!("{clients:<8} {rs:>12.0} {as_:>14.1} {refused:>10}");
        rows.push(json!({"clients": clients, "reads_per_s": rs, "allocations_per_s": as_, "allocations_refused": refused}));
    }
    d.stop()?;
    Ok(Value::Array(rows))
}

/// One allocation of a 1g.10gb slice and its release; false when the host had no room (64
/// clients want more than the 56 slices of 8 A100s).
fn alloc_release(c: &mut Conn) -> anyhow::Result<bool> {
    let a = c.request("POST", "/v1/allocations", Some(ONE_SLICE), false)?;
    if a.status >= 300 {
        return Ok(false);
    }
    let aid = a.json()?["id"]
        .as_str()
        .context("no allocation id")?
        .to_owned();
    c.request("DELETE", &format!("/v1/allocations/{aid}"), None, false)?
        .ok()?;
    Ok(true)
}

fn startup(o: &Options) -> anyhow::Result<Value> {
    let most = o.slices.iter().copied().max().unwrap_or(0);
    let file = profile::write_dgx_mtty(&o.dir, u32::try_from(most + 24)?)?;
    let file = file.to_string_lossy().into_owned();
    println!("\n## start-up: process start → READY=1, DGX A100 + mtty, ms");
    println!(
        "{:<8} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "slices", "first", "restart", "worst", "seed s", "RSS MiB"
    );
    let mut rows = Vec::new();
    for &n in &o.slices {
        let s = setup(o, &format!("startup-{n}"), &file, DEFAULT_POLL_MS)?;
        let d = proc::start(&s)?;
        let first = d.ready_after;
        let t = Instant::now();
        let mut conn = Conn::connect(&d.socket)?;
        for _ in 0..n {
            conn.request("POST", "/v1/slices", Some(MTTY_SLICE), false)?
                .ok()?;
        }
        let seed_s = t.elapsed().as_secs_f64();
        drop(conn);
        d.stop()?;
        let (mut times, mut rss) = (Vec::new(), 0);
        for _ in 0..o.restarts.max(1) {
            let d = proc::start(&s)?;
            times.push(d.ready_after.as_secs_f64() * 1e3);
            rss = d.rss_kib()?;
            d.stop()?;
        }
        let sm = summary(times);
        let (ms, worst, rss_mib) = (sm.p50, sm.max, rss as f64 / 1024.0);
        let first_ms = first.as_secs_f64() * 1e3;
        println!("{n:<8} {first_ms:>10.1} {ms:>10.1} {worst:>10.1} {seed_s:>10.1} {rss_mib:>10.1}");
        rows.push(json!({"slices": n, "first_start_ms": first_ms, "restart_ms_median": ms, "restart_ms_max": worst, "seed_s": seed_s, "rss_mib_after_ready": rss_mib}));
    }
    Ok(Value::Array(rows))
}

fn footprint(o: &Options) -> anyhow::Result<Value> {
    let x16 = profile::write_dgx16(&o.dir)?.to_string_lossy().into_owned();
    println!("\n## footprint: RSS and CPU over {} s", o.window_s);
    println!(
        "{:<6} {:<14} {:>10} {:>12}",
        "GPUs", "telemetry", "RSS MiB", "CPU % core"
    );
    let mut rows = Vec::new();
    for (gpus, prof) in [(8, profile::DGX.to_owned()), (16, x16)] {
        for (label, poll) in [("every 5 s", DEFAULT_POLL_MS), ("every 1 s", 1000)] {
            let d = proc::start(&setup(o, &format!("footprint-{gpus}-{poll}"), &prof, poll)?)?;
            let (rss, cpu) = window(&d, o.window_s)?;
            println!("{gpus:<6} {label:<14} {rss:>10.1} {cpu:>12.2}");
            rows.push(json!({"gpus": gpus, "poll_ms": poll, "rss_mib": rss, "cpu_pct_core": cpu}));
            d.stop()?;
        }
    }
    let burst = burst(o)?;
    Ok(json!({"idle": rows, "burst": burst}))
}

/// After 2 s to settle: RSS (MiB) at the end of the window and CPU over it (% of one core).
fn window(d: &Daemon, seconds: f64) -> anyhow::Result<(f64, f64)> {
    std::thread::sleep(Duration::from_secs(2));
    let (c0, t0) = (d.cpu_time()?, Instant::now());
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let cpu = (d.cpu_time()? - c0).as_secs_f64() / t0.elapsed().as_secs_f64() * 100.0;
    Ok((d.rss_kib()? as f64 / 1024.0, cpu))
}

/// How long after a burst its RSS is read again: past the daemon's heap trim period (10 s,
/// `vgpud/src/daemon_memory.rs`), so the figure shows what the daemon gives back.
const SETTLE_AFTER_BURST: Duration = Duration::from_secs(12);

/// RSS before, right after and `SETTLE_AFTER_BURST` after `connections` connections (32 at
/// a time), each one `GET /v1/host` and closed. The daemon admits 64 connections per peer and
/// a closed one leaves its slot a moment later: a `503 busy` (or a connection the daemon shed)
/// is counted and the connection made again.
fn burst(o: &Options) -> anyhow::Result<Value> {
    let d = proc::start(&setup(o, "burst", profile::DGX, DEFAULT_POLL_MS)?)?;
    std::thread::sleep(Duration::from_secs(2));
    let before = d.rss_kib()? as f64 / 1024.0;
    let t = Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let busy = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let hs: Vec<_> = (0..32)
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<()> {
                    while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < o.connections {
                        while !http::once(&d.socket, "GET", "/v1/host", None)
                            .is_ok_and(|a| a.status == 200)
                        {
                            if busy.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                                > o.connections
                            {
                                anyhow::bail!(
                                    "the daemon refused more connections than the burst made"
                                );
                            }
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join()
                .map_err(|_| anyhow::anyhow!("a client panicked"))??;
        }
        Ok(())
    })?;
    let took = t.elapsed().as_secs_f64();
    let after = d.rss_kib()? as f64 / 1024.0;
    std::thread::sleep(SETTLE_AFTER_BURST);
    let settled = d.rss_kib()? as f64 / 1024.0;
    let busy = busy.into_inner();
    println!(
        "burst: {} connections in {took:.1} s ({busy} answered busy and made again); RSS {before:.1} MiB before, {after:.1} right after, {settled:.1} {} s later",
        o.connections,
        SETTLE_AFTER_BURST.as_secs()
    );
    d.stop()?;
    Ok(
        json!({"connections": o.connections, "busy_retried": busy, "seconds": took, "rss_mib_before": before, "rss_mib_after": after, "rss_mib_settled": settled, "settled_after_s": SETTLE_AFTER_BURST.as_secs()}),
    )
}
