//! Decision latency on a busy 16-GPU host: 4 H200 GPUs in MIG mode and 12 shared in fractions,
//! about 500 live slices, mixed requests; every decision is committed and an old slice released
//! so the host stays at the same fill.

use std::time::Instant;

use ids::{NumaNodeId, PciAddress};
use sched::{
    GpuMode, GpuState, MigGeometry, NumaState, Policy, Request, SliceRequest, Snapshot, Vendor,
    decide,
};

fn host() -> Snapshot {
    let gpus = (0..16u8)
        .filter_map(|i| {
            let address = PciAddress::new(0, 0x10 + i * 8, 0, 0).ok()?;
            Some(GpuState {
                address,
                vendor: Vendor::Nvidia,
                model: "H200".into(),
                healthy: true,
                unavailable: None,
                utilization_pct: i * 3,
                memory_mib: 141 * 1024,
                numa_node: Some(NumaNodeId(u16::from(i >= 8))),
                nvlink_peers: Vec::new(),
                mode: if i % 4 == 0 {
                    GpuMode::Mig {
                        geometry: MigGeometry::h200(),
                        instances: Vec::new(),
                    }
                } else {
                    GpuMode::Fractional { shares: Vec::new() }
                },
            })
        })
        .collect();
    let numa = (0..2u16)
        .map(|n| NumaState {
            node: NumaNodeId(n),
            free_cpus: (u32::from(n) * 128..u32::from(n) * 128 + 128).collect(),
            free_cpu_milli: Some(4_000_000),
            free_memory_mib: 4 * 1024 * 1024,
        })
        .collect();
    Snapshot { gpus, numa }
}

fn request(rng: &mut fastrand::Rng, n: u64) -> Request {
    let mig = |name: &str| name.parse().ok().map(SliceRequest::Mig);
    let slice = match rng.u32(..10) {
        0 => mig("1g.18gb"),
        1 => mig("2g.35gb"),
        2 => Some(SliceRequest::Generic {
            memory_mib: 8 * 1024,
            compute_milli: 100,
        }),
        _ => None,
    }
    .unwrap_or(SliceRequest::Fraction([5, 10, 15, 20][rng.usize(..4)]));
    let mut r = Request::new(&format!("vm{n}"), slice);
    r.cpu_milli = 2000;
    r.memory_mib = 8 * 1024;
    r
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone)]
pub struct Latency {
    /// Live slices when measuring (mean).
    pub live: usize,
    /// Decisions timed.
    pub decisions: usize,
    /// 50th, 90th, 99th percentile and maximum, microseconds.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

/// Fills the host to `live` slices, then times `decisions` decide calls.
pub fn run(policy: &Policy, live: usize, decisions: usize, seed: u64) -> Latency {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut snap = host();
    let mut held: Vec<(Request, sched::Decision)> = Vec::new();
    let mut n = 0u64;
    while held.len() < live && n < 100_000 {
        let r = request(&mut rng, n);
        n += 1;
        if let Ok(d) = decide(&snap, &r, policy) {
            snap.commit(&r, &d);
            held.push((r, d));
        }
    }
    let mut times = Vec::with_capacity(decisions);
    let mut live_sum = 0usize;
    for _ in 0..decisions {
        let r = request(&mut rng, n);
        n += 1;
        let t = Instant::now();
        let out = decide(&snap, &r, policy);
        times.push(t.elapsed().as_secs_f64() * 1e6);
        live_sum += held.len();
        if let Ok(d) = out {
            snap.commit(&r, &d);
            held.push((r, d));
        }
        while held.len() > live {
            let (r, d) = held.swap_remove(rng.usize(..held.len()));
            snap.release(&r, &d);
        }
    }
    times.sort_by(f64::total_cmp);
    let pct = |q: f64| {
        times
            .get(((times.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    Latency {
        live: live_sum / decisions.max(1),
        decisions,
        p50: pct(0.5),
        p90: pct(0.9),
        p99: pct(0.99),
        max: pct(1.0),
    }
}
