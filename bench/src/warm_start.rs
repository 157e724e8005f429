//! Start time, warm against cold: VM starts drawn from the openb trace replayed against the
//! real `vgpud run --sim dgx-a100` with the simulator's device-latency model on
//! (`sim/src/latency.rs`: MIG GPU and compute instance create and destroy at their cited
//! durations times `scale`), in three modes, each on a fresh daemon:
//!
//! - `on-demand`: every request creates its slice; the client destroys it at release;
//! - `warm-pool`: the same client, with `[warm_pool]` on, so a request claims a slice the
//!   daemon made ahead from the demand it has seen;
//! - `keep-free`: no pool, and the client leaves released slices free (the daemon's default),
//!   so a request claims one when an earlier VM of its type has gone;
//! - `warm-keep`: the pool on and the client leaving released slices free: the pool keeps
//!   them (they give way to a request short of room like its own) and trims what it holds
//!   beyond its size.
//!
//! Arrivals are Poisson, one VM start every `gap_s` seconds on average; each VM takes the MIG
//! profile of a sharing pod of the trace (its GPU share rounded up to A100 compute slices) and
//! that pod's lifetime, compressed so that the host's offered load is `load` of its 64 memory
//! slices. All times (gaps, lifetimes, the pool's top-up interval) are multiplied by `scale`,
//! the same factor as the device operations, so the run is the real one played faster.
//!
//! Measured per request: POST /v1/allocations to its answer, which comes once the slice is made
//! and recorded (request → ready); sampled every 100 ms: the free slices on the host (the idle
//! capacity a pool costs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use crate::daemon_http as http;
use crate::daemon_proc::{self as proc, Setup};
use crate::host::{self, Sample};
use bench::openb::Pod;

/// The DGX A100's memory slices: 8 GPUs × 8.
const HOST_MEMORY_SLICES: f64 = 64.0;
/// How often the idle capacity is sampled (wall time).
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `vgpud` binary.
    pub vgpud: PathBuf,
    /// Where the daemons' directories go.
    pub dir: PathBuf,
    /// Modes to run: `on-demand`, `warm-pool`, `keep-free`, `warm-keep`.
    pub modes: Vec<String>,
    /// Measured VM starts per mode (after a warm-up of a tenth as many).
    pub arrivals: usize,
    /// The time factor: device operations, gaps, lifetimes and the pool's interval.
    pub scale: f64,
    /// Mean gap between VM starts at scale 1, seconds.
    pub gap_s: f64,
    /// Offered load, a share of the host's memory slices.
    pub load: f64,
    /// `[warm_pool] size`.
    pub pool_size: u32,
    /// `[warm_pool] creates_per_pass`.
    pub creates_per_pass: u32,
    /// Random seed of the arrivals and draws.
    pub seed: u64,
}

/// The A100 80GB's MIG profiles by compute slices (NVIDIA MIG user guide, A100 profiles table).
const A100_LADDER: host::ProfileLadder = [
    ("1g.10gb", 1),
    ("2g.20gb", 2),
    ("3g.40gb", 4),
    ("4g.40gb", 4),
    ("7g.80gb", 8),
];

/// Maps a GPU share to the smallest A100 80GB profile with at least that share of compute.
fn a100_profile(milli: u32) -> (&'static str, u32) {
    host::smallest_profile(milli, &A100_LADDER)
}

/// Memory slices of an A100 80GB profile by name (1 for a name the table lacks).
fn memory_slices(profile: &str) -> u32 {
    match profile {
        "1g.20gb" => 2,
        _ => A100_LADDER
            .iter()
            .find(|(p, _)| *p == profile)
            .map_or(1, |(_, m)| *m),
    }
}

/// One VM start of the replay: when (wall seconds from the start), what, for how long.
#[derive(Debug, Clone)]
struct Start {
    at: f64,
    profile: String,
    life: f64,
    counted: bool,
}

/// The replay's VM starts, the same for every mode.
fn schedule(samples: &[Sample], o: &Options) -> Vec<Start> {
    let mut rng = fastrand::Rng::with_seed(o.seed);
    let n = samples.len().max(1) as f64;
    // E[slices × lifetime] of a draw: the offered load is rate × that over the capacity.
    let work = samples
        .iter()
        .map(|s| f64::from(s.slices) * s.lifetime)
        .sum::<f64>()
        / n;
    let compress = o.load * HOST_MEMORY_SLICES * o.gap_s / work.max(f64::MIN_POSITIVE);
    let warmup = o.arrivals / 10;
    let mut at = 0.0;
    (0..warmup + o.arrivals)
        .filter_map(|i| {
            at += -(1.0 - rng.f64()).ln() * o.gap_s * o.scale;
            let s = samples.get(rng.usize(..samples.len().max(1)))?;
            Some(Start {
                at,
                profile: s.profile.to_string(),
                life: s.lifetime * compress * o.scale,
                counted: i >= warmup,
            })
        })
        .collect()
}

/// What one VM saw.
#[derive(Debug, Clone)]
struct Outcome {
    profile: String,
    ready_ms: Option<f64>,
    counted: bool,
}

/// The end of the replay, which every live VM waits on as well as on its lifetime.
#[derive(Default)]
struct EndOfRun {
    over: Mutex<bool>,
    cv: Condvar,
}

impl EndOfRun {
    /// Sleeps `d` or until the run is over.
    fn sleep(&self, d: Duration) {
        let over = self.over.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self.cv.wait_timeout_while(over, d, |o| !*o);
    }
    fn finish(&self) {
        *self.over.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_all();
    }
    fn is_over(&self) -> bool {
        *self.over.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One VM: allocate, live, release (and destroy its slice unless `keep`).
fn vm(socket: &Path, start: &Start, id: usize, keep: bool, end: &EndOfRun) -> Outcome {
    let body = json!({"consumer": format!("vm{id}"), "request": {"type": start.profile}});
    let t = Instant::now();
    let answer = http::once(socket, "POST", "/v1/allocations", Some(&body.to_string()));
    let ready_ms = t.elapsed().as_secs_f64() * 1e3;
    let Some(a) = answer
        .ok()
        .filter(|a| (200..300).contains(&a.status))
        .and_then(|a| a.json().ok())
    else {
        return Outcome {
            profile: start.profile.clone(),
            ready_ms: None,
            counted: start.counted,
        };
    };
    end.sleep(Duration::from_secs_f64(start.life));
    if let Some(aid) = a["id"].as_str() {
        let _ = http::once(socket, "DELETE", &format!("/v1/allocations/{aid}"), None);
    }
    if !keep && let Some(sid) = a["slices"][0]["id"].as_str() {
        let _ = http::once(socket, "DELETE", &format!("/v1/slices/{sid}"), None);
    }
    Outcome {
        profile: start.profile.clone(),
        ready_ms: Some(ready_ms),
        counted: start.counted,
    }
}

/// Free slices on the host now and their memory slices.
fn idle(socket: &Path) -> Option<(u32, u32)> {
    let slices = http::once(socket, "GET", "/v1/slices", None)
        .ok()?
        .json()
        .ok()?;
    let free: Vec<&Value> = slices
        .as_array()?
        .iter()
        .filter(|s| s["state"] == "ready" && s.get("allocation").is_none())
        .collect();
    let units = free
        .iter()
        .map(|s| memory_slices(s["type"].as_str().unwrap_or_default()))
        .sum();
    Some((free.len() as u32, units))
}

/// Runs one mode; its figures.
fn mode(o: &Options, name: &str, starts: &[Start]) -> anyhow::Result<Value> {
    let dir = o.dir.join(name);
    proc::fresh_dir(&dir)?;
    let pool = matches!(name, "warm-pool" | "warm-keep");
    let interval_ms = ((1000.0 * o.scale).round() as u64).max(100);
    let extra_config = if pool {
        format!(
            "[warm_pool]\nenabled = true\nsize = {}\ninterval_ms = {interval_ms}\ncreates_per_pass = {}\n",
            o.pool_size, o.creates_per_pass
        )
    } else {
        String::new()
    };
    let d = proc::start(&Setup {
        vgpud: o.vgpud.clone(),
        profile: "dgx-a100".into(),
        dir,
        poll_ms: 5000,
        extra_config,
        env: vec![(sim::latency::ENV.to_owned(), o.scale.to_string())],
    })?;
    let socket = d.socket.clone();
    let keep = matches!(name, "keep-free" | "warm-keep");
    let end = Arc::new(EndOfRun::default());
    let began = Instant::now();
    let (outcomes, samples) = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut seen = Vec::new();
            while !end.is_over() {
                if let Some(s) = idle(&socket) {
                    seen.push(s);
                }
                std::thread::sleep(SAMPLE_EVERY);
            }
            seen
        });
        let mut vms = Vec::new();
        for (i, s) in starts.iter().enumerate() {
            let due = Duration::from_secs_f64(s.at);
            if let Some(wait) = due.checked_sub(began.elapsed()) {
                std::thread::sleep(wait);
            }
            let (socket, end) = (&socket, &end);
            vms.push(scope.spawn(move || vm(socket, s, i, keep, end)));
        }
        end.finish();
        let outcomes: Vec<Outcome> = vms.into_iter().filter_map(|h| h.join().ok()).collect();
        (outcomes, sampler.join().unwrap_or_default())
    });
    d.stop()?;
    let mut out = figures(name, &outcomes, &samples);
    out["by_profile"] = by_profile(&outcomes, o.scale);
    Ok(out)
}

/// Below this a request was a claim: the model's fastest create (a GPU instance, 1 s at scale
/// 1, before its compute instance) takes longer (`sim::latency`).
fn claim_limit_ms(scale: f64) -> f64 {
    1000.0 * scale
}

/// Per profile: requests, refusals, mean request → ready and the share answered as a claim
/// (faster than any create, [`claim_limit_ms`]): which shapes a pool serves and which miss.
fn by_profile(outcomes: &[Outcome], scale: f64) -> Value {
    let mut per: BTreeMap<&str, Vec<Option<f64>>> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| o.counted) {
        per.entry(o.profile.as_str()).or_default().push(o.ready_ms);
    }
    let limit = claim_limit_ms(scale);
    let mut rows = serde_json::Map::new();
    for (profile, seen) in per {
        let ready: Vec<f64> = seen.iter().flatten().copied().collect();
        let mean = ready.iter().sum::<f64>() / ready.len().max(1) as f64;
        let claims = ready.iter().filter(|ms| **ms < limit).count();
        let claimed_pct = 100.0 * claims as f64 / ready.len().max(1) as f64;
        println!(
            "  {profile:<9} {:>6} {:>7} {mean:>10.1}   claims {claimed_pct:>5.1} %",
            seen.len(),
            seen.len() - ready.len(),
        );
        rows.insert(
            profile.to_owned(),
            json!({"requests": seen.len(), "refused": seen.len() - ready.len(),
                   "mean_ms": mean, "claimed_pct": claimed_pct}),
        );
    }
    Value::Object(rows)
}

fn figures(name: &str, outcomes: &[Outcome], idle: &[(u32, u32)]) -> Value {
    let counted: Vec<&Outcome> = outcomes.iter().filter(|o| o.counted).collect();
    let mut ready: Vec<f64> = counted.iter().filter_map(|o| o.ready_ms).collect();
    ready.sort_by(f64::total_cmp);
    let at = |q: f64| {
        ready
            .get(((ready.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let mean = ready.iter().sum::<f64>() / ready.len().max(1) as f64;
    let n = idle.len().max(1) as f64;
    let idle_slices = idle.iter().map(|(s, _)| f64::from(*s)).sum::<f64>() / n;
    let idle_units = idle.iter().map(|(_, u)| f64::from(*u)).sum::<f64>() / n;
    let refused = counted.len() - ready.len();
    println!(
        "{name:<10} {:>6} {:>7} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>9.2} {:>8.1}",
        counted.len(),
        refused,
        mean,
        at(0.5),
        at(0.95),
        at(1.0),
        idle_slices,
        100.0 * idle_units / HOST_MEMORY_SLICES,
    );
    json!({
        "mode": name,
        "requests": counted.len(),
        "refused": refused,
        "ready_ms": {"mean": mean, "p50": at(0.5), "p95": at(0.95), "max": at(1.0)},
        "idle_free_slices_mean": idle_slices,
        "idle_memory_slices_pct": 100.0 * idle_units / HOST_MEMORY_SLICES,
    })
}

/// Runs every mode asked for on the same VM starts.
pub fn run(o: &Options, pods: &[(Pod, f64)]) -> anyhow::Result<Value> {
    let samples = host::samples_with(pods, a100_profile);
    anyhow::ensure!(!samples.is_empty(), "the pod list has no sharing pods");
    let starts = schedule(&samples, o);
    let mut mix: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &starts {
        *mix.entry(s.profile.as_str()).or_default() += 1;
    }
    println!(
        "{} VM starts ({} measured), scale {}, mean gap {:.2} s, load {:.2}: {mix:?}",
        starts.len(),
        o.arrivals,
        o.scale,
        o.gap_s,
        o.load
    );
    println!(
        "{:<10} {:>6} {:>7} {:>10} {:>10} {:>10} {:>10} {:>9} {:>8}",
        "mode", "starts", "refused", "mean ms", "p50 ms", "p95 ms", "max ms", "idle", "idle %"
    );
    let mut out = Vec::new();
    for m in &o.modes {
        anyhow::ensure!(
            ["on-demand", "warm-pool", "keep-free", "warm-keep"].contains(&m.as_str()),
            "unknown mode {m:?}: on-demand, warm-pool, keep-free, warm-keep"
        );
        out.push(mode(o, m, &starts).with_context(|| format!("mode {m}"))?);
    }
    Ok(json!({
        "scale": o.scale,
        "gap_s": o.gap_s,
        "load": o.load,
        "pool_size": o.pool_size,
        "creates_per_pass": o.creates_per_pass,
        "seed": o.seed,
        "arrivals": o.arrivals,
        "modes": out,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a100_shares_take_the_smallest_profile_with_enough_compute() {
        assert_eq!(a100_profile(100), ("1g.10gb", 1));
        assert_eq!(a100_profile(142), ("1g.10gb", 1));
        assert_eq!(a100_profile(143), ("2g.20gb", 2));
        assert_eq!(a100_profile(200), ("2g.20gb", 2));
        assert_eq!(a100_profile(400), ("3g.40gb", 4));
        assert_eq!(a100_profile(500), ("4g.40gb", 4));
        assert_eq!(a100_profile(999), ("7g.80gb", 8));
        assert_eq!(memory_slices("3g.40gb"), 4);
    }
}
