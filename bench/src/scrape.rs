//! Scrape latency of `/metrics` over the daemon's real request path (the metrics router served
//! by axum on a TCP listener, as `[metrics] listen` does; a fresh connection per scrape, as a
//! Prometheus server that does not keep connections alive makes) while every NVML call is
//! delayed (sim fault `nvml:*=hang:MILLIS`) and the telemetry poller keeps polling.
//!
//! Hosts: the simulated DGX A100 with 7 `1g.10gb` MIG instances on each of its 8 GPUs, and a
//! generated 16-GPU host with 32 mdev vGPUs (`A40-1B`) on each GPU. Every slice is allocated.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::engine::{AllocationRequest, Engine, EngineConfig, SliceRequest};
use agent::service::Service;
use agent::telemetry::{Poller, PollerSettings};
use anyhow::{Context, bail};
use sim::{Profile, SimHost};

/// One host to measure.
pub struct Case {
    /// `8x7`, `16x32`.
    pub name: &'static str,
    profile: Profile,
    slice_type: &'static str,
    per_gpu: u32,
}

/// What one case measured, in milliseconds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScrapeResult {
    /// The case.
    pub case: String,
    /// GPUs × slices per GPU.
    pub gpus: usize,
    /// Owned slices.
    pub slices: usize,
    /// Sample lines in one scrape.
    pub series: usize,
    /// Bytes in one scrape.
    pub bytes: usize,
    /// Scrapes timed.
    pub scrapes: usize,
    /// Median latency.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
    /// Telemetry polls that finished while the scrapes ran (the hung vendor calls keep them
    /// slow; the scrapes do not wait for them).
    pub polls_during: u64,
}

/// A 16-GPU host whose GPUs offer 32 mdev vGPUs each. The A40's 1 GB B-series profile allows 32
/// instances per GPU (NVIDIA Virtual GPU Software User Guide, "NVIDIA A40 virtual GPU types");
/// the mdev type id is illustrative.
fn sixteen_gpu_host() -> anyhow::Result<Profile> {
    let mut text = String::from(
        r#"name = "bench-16x32"
hostname = "bench-16x32"
description = "16 x A40 with mdev vGPU, 2 NUMA nodes"
nvidia_driver_version = "535.183.04"
telemetry_seed = 1616

[[numa_nodes]]
id = 0
cpus = "0-63"
memory_mib = 524288
distances = [10, 32]

[[numa_nodes]]
id = 1
cpus = "64-127"
memory_mib = 524288
distances = [32, 10]

[models.a40]
vendor = "10de"
device = "2235"
subsystem_vendor = "10de"
subsystem_device = "145a"
class = "0x030200"
name = "NVIDIA A40"
memory_mib = 46068
vgpu_framebuffer_mib = 49152
driver = "nvidia"
link_speed = "16.0 GT/s PCIe"
link_width = 16
power_limit_w = 300
idle_power_w = 30
sm_clock_mhz = 1740
mem_clock_mhz = 7251

[[models.a40.mdev_types]]
id = "nvidia-555"
name = "NVIDIA A40-1B"
description = "num_heads=4, frl_config=45, framebuffer=1024M, max_resolution=5120x2880, max_instance=32"
framebuffer_mib = 1024
"#,
    );
    for i in 0..16u32 {
        let bus = 0x10 + i * 8;
        let node = u32::from(i >= 8);
        text.push_str(&format!(
            "\n[[bridges]]\naddress = \"0000:{:02x}:01.0\"\nvendor = \"8086\"\ndevice = \"352a\"\nnuma_node = {node}\n\n[[gpus]]\naddress = \"0000:{:02x}:00.0\"\nparent = \"0000:{:02x}:01.0\"\nmodel = \"a40\"\n",
            bus - 1,
            bus,
            bus - 1
        ));
    }
    Profile::from_toml(&text).map_err(|e| anyhow::anyhow!("the 16-GPU profile: {e}"))
}

/// The two hosts the issue names.
pub fn cases() -> anyhow::Result<Vec<Case>> {
    Ok(vec![
        Case {
            name: "8x7",
            profile: Profile::builtin("dgx-a100").map_err(|e| anyhow::anyhow!("dgx-a100: {e}"))?,
            slice_type: "1g.10gb",
            per_gpu: 7,
        },
        Case {
            name: "16x32",
            profile: sixteen_gpu_host()?,
            slice_type: "nvidia-555",
            per_gpu: 32,
        },
    ])
}

/// A service over the case's host with every slice allocated, reconciled as the daemon does.
fn host(case: &Case, dir: &std::path::Path) -> anyhow::Result<(SimHost, Service)> {
    let sim = SimHost::new(case.profile.clone()).map_err(|e| anyhow::anyhow!("sim: {e}"))?;
    let engine = Engine::open(EngineConfig::new(dir, hostwire::sim_access(&sim)))?;
    let service = Service::new(engine);
    service.reconcile()?;
    for g in service.host().gpus {
        for n in 0..case.per_gpu {
            let mut request = SliceRequest::new(case.slice_type, 1);
            request.gpu = Some(g.pci_address);
            service
                .allocate(AllocationRequest {
                    consumer: format!("tenant-{}", n % 4),
                    vm: Some(format!("vm-{}-{n}", g.pci_address)),
                    request,
                    placement_consumer: None,
                })
                .with_context(|| format!("slice {n} on {}", g.pci_address))?;
        }
    }
    Ok((sim, service))
}

/// One scrape over a new connection; the body.
fn scrape(addr: SocketAddr) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)?;
    if !reply.starts_with("HTTP/1.1 200") {
        bail!("scrape answered {}", reply.lines().next().unwrap_or(""));
    }
    let body = reply.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok(body.to_owned())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(f64::NAN)
}

fn polls(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("vgpud_telemetry_poll_duration_seconds_count "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Measures one case: `scrapes` scrapes with every NVML call delayed by `hang_ms`.
pub fn run(case: &Case, scrapes: usize, hang_ms: u64) -> anyhow::Result<ScrapeResult> {
    let dir = tempfile::tempdir()?;
    let (sim, service) = host(case, dir.path())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    let router = api::rest::metrics_router(service.clone());
    runtime.spawn(async move { axum::serve(listener, router).await });
    // The first snapshot before the vendor library slows down, then the poller runs on.
    let cache = service.telemetry_cache();
    let settings = PollerSettings {
        interval: Duration::from_millis(1000),
        ..PollerSettings::default()
    };
    Poller::new(service.engine().clone(), Arc::clone(&cache), settings).poll_once();
    sim.inject_fault(
        format!("nvml:*=hang:{hang_ms}")
            .parse()
            .map_err(|e| anyhow::anyhow!("fault: {e}"))?,
    )
    .map_err(|e| anyhow::anyhow!("fault: {e}"))?;
    let _poller = Poller::new(service.engine().clone(), cache, settings).spawn()?;
    let first = scrape(addr)?;
    let before = polls(&first);
    let mut times = Vec::with_capacity(scrapes);
    let mut last = first.clone();
    for _ in 0..scrapes {
        let t = Instant::now();
        last = scrape(addr)?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(ScrapeResult {
        case: case.name.to_owned(),
        gpus: service.host().gpus.len(),
        slices: service.slices().len(),
        series: first.lines().filter(|l| !l.starts_with('#')).count(),
        bytes: first.len(),
        scrapes,
        p50_ms: percentile(&times, 0.5),
        p99_ms: percentile(&times, 0.99),
        max_ms: times.last().copied().unwrap_or(f64::NAN),
        polls_during: polls(&last).saturating_sub(before),
    })
}
