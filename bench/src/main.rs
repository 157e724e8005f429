//! `vgpud-bench`: vgpud's benchmarks as a program. Each subcommand prints a table and writes a
//! JSON result; figures and the commands that produced them are recorded in `BENCHMARKS.md`.
//!
//! This binary owns measurement only; scheduling logic lives in the `sched` crate.

mod daemon;
mod daemon_http;
mod daemon_proc;
mod daemon_profile;
mod host;
mod latency;
mod mix;
mod online;
mod replay;
mod scrape;
mod simcost;
mod warm_start;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use bench::openb;
use clap::{Parser, Subcommand};
use serde_json::json;

use replay::ReplayPolicy;

#[derive(Parser)]
#[command(name = "vgpud-bench", about = "vgpud benchmarks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// The subcommand names are the interface (`sched-replay`, `sched-host`, `sched-latency`).
#[allow(clippy::enum_variant_names)]
#[derive(Subcommand)]
enum Cmd {
    /// Cluster replay of an openb trace with the FGD protocol.
    SchedReplay {
        /// Node list CSV.
        #[arg(long)]
        nodes: PathBuf,
        /// Pod list CSV.
        #[arg(long)]
        pods: PathBuf,
        /// Seeds, `A-B` or `A,B,C`.
        #[arg(long, default_value = "42-51")]
        seeds: String,
        /// Policies, comma-separated, or `all`.
        #[arg(long, default_value = "all")]
        policies: String,
        /// Arrived workload at the end, in percent of GPU capacity.
        #[arg(long, default_value_t = 130.0)]
        load: f64,
        /// Worker threads (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Re-weights the pod list before the protocol's resampling, `KIND=PCT`, a stand-in for
        /// the openb variant files (not those files). `gpushare=P` / `multigpu=P`: CPU-only pods
        /// are kept; the other slots are refilled by drawing GPU pods with replacement, from the
        /// class (gpu_milli < 1000, or num_gpu > 1) while its GPU demand so far is under P % of
        /// all GPU demand drawn so far, otherwise from the other GPU pods. `cpu=P`: round(P % of
        /// the list) pods drawn with replacement from the CPU-only pods, the rest from the GPU
        /// pods. `gpuspec=P`: P % of the unconstrained GPU pods get one GPU model, drawn in
        /// proportion to that model's GPUs on nodes large enough for the pod. The list keeps its
        /// size; the draw is seeded with each run's seed.
        #[arg(long)]
        mix: Option<mix::Mix>,
        /// Where FGD's and vgpud's expected demand mix comes from: `oracle` (the whole pod
        /// list, before the replay, as the FGD paper's simulator does) or `online` (the pods
        /// seen so far: vgpud with the daemon's estimator, FGD with its own rule).
        #[arg(long, default_value_t = online::MixSource::Oracle)]
        mix_source: online::MixSource,
        /// Where to write the JSON result.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// One 8-GPU H200 host (MIG) as a loss system at offered loads 0.6, 0.8 and 1.0.
    SchedHost {
        /// Pod list CSV (its GPU-sharing pods and lifetimes are sampled).
        #[arg(long)]
        pods: PathBuf,
        /// Arrivals per load, policy and seed (after a 10 % warm-up).
        #[arg(long, default_value_t = 100_000)]
        arrivals: u64,
        /// Offered loads, comma-separated.
        #[arg(long, default_value = "0.6,0.8,1.0")]
        loads: String,
        /// Seeds, `A-B` or `A,B,C`: the lifetimes are heavy-tailed, so one seed is noisy.
        #[arg(long, default_value = "42-51")]
        seeds: String,
        /// Policies by name (`first-fit,best-fit,spread,vgpud`), comma-separated, or `all`;
        /// best-fit always runs, as the paired baseline.
        #[arg(long, default_value = "all")]
        policies: String,
        /// The default policy's demand mix: `online` (learnt from the requests so far by the
        /// daemon's estimator, as the daemon runs it) or `oracle` (the samples' profile
        /// frequencies, known in advance).
        #[arg(long, default_value_t = online::MixSource::Online)]
        mix_source: online::MixSource,
        /// Where to write the JSON result.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Decision latency on a 16-GPU host with about 500 live slices.
    SchedLatency {
        /// Live slices to hold.
        #[arg(long, default_value_t = 500)]
        live: usize,
        /// Decisions to time per policy.
        #[arg(long, default_value_t = 5_000)]
        decisions: usize,
        /// Random seed.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Where to write the JSON result.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// `/metrics` scrape latency on 8 GPUs × 7 slices and 16 GPUs × 32 slices while every NVML
    /// call is delayed.
    MetricsScrape {
        /// Scrapes to time per host.
        #[arg(long, default_value_t = 2_000)]
        scrapes: usize,
        /// Delay of every NVML call, ms.
        #[arg(long, default_value_t = 200)]
        hang_ms: u64,
        /// Where to write the JSON result.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The simulator's own cost per call on dgx-a100: a sysfs read, a directory listing, an
    /// NVML query and a whole discovery, in memory and in a state directory.
    SimCost {
        /// Calls per kind (discoveries: a hundredth of it).
        #[arg(long, default_value_t = 20_000)]
        calls: usize,
        /// Where the state directory goes (removed and re-made).
        #[arg(long, default_value = "target/bench-simcost")]
        dir: PathBuf,
        /// Where to write the JSON result.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The real `vgpud run --sim` over its unix socket: route latency, throughput with 1, 8 and
    /// 64 clients, start-up with owned slices to reconcile, RSS and CPU.
    Daemon {
        /// The `vgpud` binary (default: the one next to this program).
        #[arg(long)]
        vgpud: Option<PathBuf>,
        /// Where the daemons' directories go (each run removes and re-makes its own).
        #[arg(long, default_value = "target/bench-daemon")]
        dir: PathBuf,
        /// Parts, comma-separated: latency, throughput, startup, footprint.
        #[arg(long, default_value = "latency,throughput,startup,footprint")]
        parts: String,
        /// Timed requests per read route.
        #[arg(long, default_value_t = 2_000)]
        requests: usize,
        /// Allocate/release cycles timed.
        #[arg(long, default_value_t = 200)]
        cycles: usize,
        /// Seconds per throughput point.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Owned-slice counts to start with, comma-separated.
        #[arg(long, default_value = "0,100,1000")]
        slices: String,
        /// Restarts timed per slice count.
        #[arg(long, default_value_t = 3)]
        restarts: usize,
        /// Seconds of each RSS/CPU window.
        #[arg(long, default_value_t = 10.0)]
        window: f64,
        /// Connections of the burst.
        #[arg(long, default_value_t = 5_000)]
        connections: usize,
        /// Where to write the JSON result.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Start time, warm against cold: openb VM starts on the simulated DGX A100 with the
    /// device-latency model on, slices made on demand, from a warm pool, or left free.
    WarmStart {
        /// Pod list CSV with creation and deletion times (its sharing pods are drawn).
        #[arg(long)]
        pods: PathBuf,
        /// The `vgpud` binary (default: the one next to this program).
        #[arg(long)]
        vgpud: Option<PathBuf>,
        /// Where the daemons' directories go (each mode removes and re-makes its own).
        #[arg(long, default_value = "target/bench-warm-start")]
        dir: PathBuf,
        /// Modes, comma-separated: on-demand, warm-pool, keep-free, warm-keep.
        #[arg(long, default_value = "on-demand,warm-pool,keep-free")]
        modes: String,
        /// Measured VM starts per mode (after a warm-up of a tenth as many).
        #[arg(long, default_value_t = 300)]
        arrivals: usize,
        /// Time factor for device operations, gaps, lifetimes and the pool's interval
        /// (`VGPUD_SIM_LATENCY`; 1 = the published durations).
        #[arg(long, default_value_t = 0.1)]
        scale: f64,
        /// Mean gap between VM starts at scale 1, seconds.
        #[arg(long, default_value_t = 3.0)]
        gap: f64,
        /// Offered load, a share of the host's memory slices.
        #[arg(long, default_value_t = 0.8)]
        load: f64,
        /// `[warm_pool] size`.
        #[arg(long, default_value_t = 8)]
        pool_size: u32,
        /// `[warm_pool] creates_per_pass`.
        #[arg(long, default_value_t = 4)]
        creates_per_pass: u32,
        /// Random seed.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Where to write the JSON result.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn host_policies(mix: sched::Workload) -> Vec<sched::Policy> {
    vec![
        sched::Policy::FirstFit,
        sched::Policy::BestFit,
        sched::Policy::Spread(sched::SpreadWeights::default()),
        sched::Policy::FragAware(mix),
    ]
}

fn sched_host(
    pods: PathBuf,
    arrivals: u64,
    loads: &str,
    seeds: &str,
    names: &str,
    source: online::MixSource,
    json_out: Option<PathBuf>,
) -> anyhow::Result<()> {
    let pods = openb::read_pods_with_lifetime(&pods)?;
    let samples = host::samples(&pods);
    if samples.is_empty() {
        bail!("the pod list has no GPU-sharing pods with a lifetime");
    }
    let loads: Vec<f64> = loads
        .split(',')
        .map(|l| l.trim().parse().with_context(|| format!("bad load {l:?}")))
        .collect::<anyhow::Result<_>>()?;
    let seeds = parse_seeds(seeds)?;
    let mut policies = host_policies(host::mix(&samples));
    if names != "all" {
        let wanted: Vec<&str> = names.split(',').map(str::trim).collect();
        if let Some(bad) = wanted
            .iter()
            .find(|w| !policies.iter().any(|p| p.name() == **w))
        {
            bail!("unknown policy {bad:?}");
        }
        policies.retain(|p| *p == sched::Policy::BestFit || wanted.contains(&p.name()));
    }
    let jobs: Vec<(usize, f64, u64)> = (0..policies.len())
        .flat_map(|p| {
            let seeds = &seeds;
            loads
                .iter()
                .flat_map(move |l| seeds.iter().map(move |s| (p, *l, *s)))
        })
        .collect();
    let start = Instant::now();
    let results = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..std::thread::available_parallelism().map_or(1, |n| n.get()) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((p, load, seed)) = jobs.get(i).copied() else {
                        break;
                    };
                    let Some(policy) = policies.get(p) else {
                        break;
                    };
                    let r = host::run(
                        &samples,
                        policy,
                        load,
                        arrivals,
                        seed,
                        source == online::MixSource::Online,
                    );
                    if let Ok(mut v) = results.lock() {
                        v.push((p, load, seed, r));
                    }
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_default();
    println!(
        "{:<6} {:<10} {:>15} {:>15} {:>10} {:>15} {:>11} {:>15}",
        "load",
        "policy",
        "accepted",
        "slice-weighted",
        "rejected",
        "avoidable",
        "NUMA-local",
        "vs best-fit"
    );
    let mut out = Vec::new();
    for load in &loads {
        let of_load = |p: usize| -> Vec<(u64, host::HostResult)> {
            let mut v: Vec<_> = results
                .iter()
                .filter(|(q, l, _, _)| *q == p && l == load)
                .map(|(_, _, s, r)| (*s, r.clone()))
                .collect();
            v.sort_by_key(|(s, _)| *s);
            v
        };
        let best_fit = policies
            .iter()
            .position(|x| *x == sched::Policy::BestFit)
            .map(of_load)
            .unwrap_or_default();
        for (p, policy) in policies.iter().enumerate() {
            let runs = of_load(p);
            let s = host::Summary::of(&runs, &best_fit);
            println!(
                "{:<6} {:<10} {:>7.2}% ±{:<5.2} {:>7.2}% ±{:<5.2} {:>10} {:>7.2}% ±{:<5.2} {:>10.2}% {:>+8.2} ±{:<5.2}",
                load,
                policy.name(),
                s.accepted.0,
                s.accepted.1,
                s.slice_weighted.0,
                s.slice_weighted.1,
                s.rejected,
                s.avoidable_pooled,
                s.avoidable.1,
                s.numa_local,
                s.vs_best_fit.0,
                s.vs_best_fit.1,
            );
            out.push(json!({
                "load": load, "policy": policy.name(), "seeds": runs.len(),
                "acceptance_pct": s.accepted.0, "acceptance_sd": s.accepted.1,
                "slice_weighted_acceptance_pct": s.slice_weighted.0,
                "slice_weighted_acceptance_sd": s.slice_weighted.1,
                "rejections": s.rejected,
                "avoidable_rejections_pct": s.avoidable_pooled,
                "avoidable_rejections_sd": s.avoidable.1,
                "numa_local_pct": s.numa_local,
                "acceptance_minus_best_fit": s.vs_best_fit.0,
                "acceptance_minus_best_fit_sd": s.vs_best_fit.1,
            }));
        }
    }
    println!(
        "{} runs ({} seeds) of {arrivals} arrivals in {:.1} s, {source} mix; ± is the standard deviation over seeds",
        jobs.len(),
        seeds.len(),
        start.elapsed().as_secs_f64()
    );
    if let Some(path) = json_out {
        std::fs::write(
            &path,
            serde_json::to_string_pretty(
                &json!({"seeds": seeds, "mix_source": source.to_string(), "results": out}),
            )?,
        )
        .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn sched_latency(
    live: usize,
    decisions: usize,
    seed: u64,
    json_out: Option<PathBuf>,
) -> anyhow::Result<()> {
    println!(
        "{:<10} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "policy", "live", "decisions", "p50 µs", "p90 µs", "p99 µs", "max µs"
    );
    let mut out = Vec::new();
    for policy in host_policies(sched::Workload::default()) {
        let l = latency::run(&policy, live, decisions, seed);
        println!(
            "{:<10} {:>6} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
            policy.name(),
            l.live,
            l.decisions,
            l.p50,
            l.p90,
            l.p99,
            l.max
        );
        out.push(
            json!({"policy": policy.name(), "live": l.live, "decisions": l.decisions,
            "p50_us": l.p50, "p90_us": l.p90, "p99_us": l.p99, "max_us": l.max}),
        );
    }
    if let Some(path) = json_out {
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&json!({"results": out}))?,
        )
        .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn parse_seeds(s: &str) -> anyhow::Result<Vec<u64>> {
    if let Some((a, b)) = s.split_once('-') {
        let (a, b): (u64, u64) = (a.trim().parse()?, b.trim().parse()?);
        if b < a {
            bail!("seed range {s:?} is empty");
        }
        return Ok((a..=b).collect());
    }
    s.split(',')
        .map(|x| x.trim().parse().with_context(|| format!("bad seed {x:?}")))
        .collect()
}

fn parse_policies(s: &str) -> anyhow::Result<Vec<ReplayPolicy>> {
    if s == "all" {
        return Ok(ReplayPolicy::ALL.to_vec());
    }
    s.split(',')
        .map(|p| ReplayPolicy::parse(p.trim()).with_context(|| format!("unknown policy {p:?}")))
        .collect()
}

/// The pod list the published figures were measured on.
const DEFAULT_POD_LIST: &str = "openb_pod_list_default.csv";

/// Allocated share at the end minus `base`'s on the same seed, in points: the mean over the
/// seeds and the worst seed. `None` when `base` did not run.
fn paired_vs(
    results: &[(ReplayPolicy, u64, replay::ReplayResult)],
    p: ReplayPolicy,
    base: ReplayPolicy,
) -> Option<(f64, f64)> {
    let diffs: Vec<f64> = results
        .iter()
        .filter(|(q, _, _)| *q == p)
        .filter_map(|(_, seed, r)| {
            let b = results.iter().find(|(q, s, _)| *q == base && s == seed)?;
            Some(r.at_end - b.2.at_end)
        })
        .collect();
    let worst = diffs.iter().copied().reduce(f64::min)?;
    Some((mean_sd(&diffs).0, worst))
}

/// [`paired_vs`] BestFit.
fn paired_vs_best_fit(
    results: &[(ReplayPolicy, u64, replay::ReplayResult)],
    p: ReplayPolicy,
) -> Option<(f64, f64)> {
    paired_vs(results, p, ReplayPolicy::BestFit)
}

/// Published means of the FGD paper on the default openb trace (allocated % at 130 %).
fn published(p: ReplayPolicy) -> Option<f64> {
    match p {
        ReplayPolicy::Random => Some(87.47),
        ReplayPolicy::DotProd => Some(90.85),
        ReplayPolicy::GpuClustering => Some(91.88),
        ReplayPolicy::GpuPacking => Some(92.00),
        ReplayPolicy::BestFit => Some(93.08),
        ReplayPolicy::Fgd => Some(95.39),
        ReplayPolicy::Vgpud => None,
    }
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (m, var.sqrt())
}

#[allow(clippy::too_many_arguments)]
fn sched_replay(
    nodes: PathBuf,
    pods_path: PathBuf,
    seeds: &str,
    policies: &str,
    load: f64,
    threads: Option<usize>,
    mix: Option<mix::Mix>,
    source: online::MixSource,
    json_out: Option<PathBuf>,
) -> anyhow::Result<()> {
    let nodes = openb::read_nodes(&nodes)?;
    let pods = openb::read_pods(&pods_path)?;
    let seeds = parse_seeds(seeds)?;
    // One re-weighted list per seed, shared by every policy so their runs stay paired.
    let mut lists = std::collections::HashMap::new();
    for seed in &seeds {
        let list = match &mix {
            Some(m) => {
                let list = m.apply(&pods, &nodes, *seed)?;
                eprintln!("mix {m} seed {seed}: {:.2} % measured", m.measure(&list));
                list
            }
            None => pods.clone(),
        };
        lists.insert(*seed, list);
    }
    let policies = parse_policies(policies)?;
    let threads = threads
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1)
        .max(1);
    let jobs: Vec<(ReplayPolicy, u64)> = policies
        .iter()
        .flat_map(|p| seeds.iter().map(move |s| (*p, *s)))
        .collect();
    let start = Instant::now();
    let results = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((p, seed)) = jobs.get(i).copied() else {
                        break;
                    };
                    let Some(pods) = lists.get(&seed) else {
                        break;
                    };
                    let t = Instant::now();
                    let list = replay::inflate(pods, &nodes, load / 100.0, seed);
                    let r = replay::replay(&nodes, pods, &list, p, seed, source);
                    eprintln!(
                        "{:>13} seed {seed}: {:.2} % at 100, {:.2} % at {load}, {} of {} pods failed ({:.1} s)",
                        p.name(),
                        r.at_100,
                        r.at_end,
                        r.failed,
                        r.pods,
                        t.elapsed().as_secs_f64()
                    );
                    if let Ok(mut v) = results.lock() {
                        v.push((p, seed, r));
                    }
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_default();
    // The published figures are for the default list; a variant or a mix has none.
    let is_default_list = mix.is_none()
        && source == online::MixSource::Oracle
        && pods_path.file_name() == Some(std::ffi::OsStr::new(DEFAULT_POD_LIST));
    let mut table = serde_json::Map::new();
    println!(
        "{:<14} {:>9} {:>9} {:>7} {:>12} {:>10} {:>7} {:>13}",
        "policy",
        "alloc@100",
        "alloc@end",
        "stdev",
        "unallocated",
        "published",
        "diff",
        "vs BestFit"
    );
    for p in &policies {
        let runs: Vec<&(ReplayPolicy, u64, replay::ReplayResult)> =
            results.iter().filter(|(q, _, _)| q == p).collect();
        let (m100, _) = mean_sd(&runs.iter().map(|(_, _, r)| r.at_100).collect::<Vec<_>>());
        let (m, sd) = mean_sd(&runs.iter().map(|(_, _, r)| r.at_end).collect::<Vec<_>>());
        let pubd = is_default_list.then(|| published(*p)).flatten();
        let vs_best_fit = paired_vs_best_fit(&results, *p);
        let vs_fgd = paired_vs(&results, *p, ReplayPolicy::Fgd);
        println!(
            "{:<14} {:>8.2}% {:>8.2}% {:>7.2} {:>11.2}% {:>10} {:>7} {:>13}",
            p.name(),
            m100,
            m,
            sd,
            100.0 - m,
            pubd.map_or("-".to_owned(), |x| format!("{x:.2}%")),
            pubd.map_or("-".to_owned(), |x| format!("{:+.2}", m - x)),
            vs_best_fit.map_or("-".to_owned(), |(d, worst)| format!(
                "{d:+.2} ({worst:+.2})"
            )),
        );
        table.insert(
            p.name().to_owned(),
            json!({"allocated_pct_at_100": m100, "allocated_pct_at_130": m, "stdev_at_130": sd,
                   "vs_best_fit_pts": vs_best_fit.map(|(d, _)| d),
                   "vs_best_fit_worst_seed_pts": vs_best_fit.map(|(_, w)| w),
                   "vs_fgd_pts": vs_fgd.map(|(d, _)| d),
                   "vs_fgd_worst_seed_pts": vs_fgd.map(|(_, w)| w)}),
        );
    }
    println!(
        "{} runs ({} seeds) in {:.1} s on {threads} threads, {source} mix",
        jobs.len(),
        seeds.len(),
        start.elapsed().as_secs_f64()
    );
    if let Some(out) = json_out {
        let mix = mix.map(|m| m.to_string());
        let doc = json!({"policies": table, "seeds": seeds, "load_pct": load, "mix": mix,
                         "mix_source": source.to_string(),
                         "pods": pods_path.display().to_string()});
        std::fs::write(&out, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::SchedReplay {
            nodes,
            pods,
            seeds,
            policies,
            load,
            threads,
            mix,
            mix_source,
            json,
        } => sched_replay(
            nodes, pods, &seeds, &policies, load, threads, mix, mix_source, json,
        ),
        Cmd::SchedHost {
            pods,
            arrivals,
            loads,
            seeds,
            policies,
            mix_source,
            json,
        } => sched_host(pods, arrivals, &loads, &seeds, &policies, mix_source, json),
        Cmd::SchedLatency {
            live,
            decisions,
            seed,
            json,
        } => sched_latency(live, decisions, seed, json),
        Cmd::SimCost { calls, dir, json } => {
            let result = simcost::run(calls, &dir)?;
            if let Some(path) = json {
                std::fs::write(&path, serde_json::to_string_pretty(&result)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            Ok(())
        }
        Cmd::Daemon {
            vgpud,
            dir,
            parts,
            requests,
            cycles,
            seconds,
            slices,
            restarts,
            window,
            connections,
            json,
        } => {
            let o = daemon::Options {
                vgpud: vgpud.unwrap_or_else(daemon_proc::default_vgpud),
                dir,
                parts: parts.split(',').map(|p| p.trim().to_owned()).collect(),
                requests,
                cycles,
                seconds,
                slices: slices
                    .split(',')
                    .map(|n| n.trim().parse().with_context(|| format!("bad count {n:?}")))
                    .collect::<anyhow::Result<_>>()?,
                restarts,
                window_s: window,
                connections,
            };
            let result = daemon::run(&o)?;
            if let Some(path) = json {
                std::fs::write(&path, serde_json::to_string_pretty(&result)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            Ok(())
        }
        Cmd::MetricsScrape {
            scrapes,
            hang_ms,
            json,
        } => metrics_scrape(scrapes, hang_ms, json),
        Cmd::WarmStart {
            pods,
            vgpud,
            dir,
            modes,
            arrivals,
            scale,
            gap,
            load,
            pool_size,
            creates_per_pass,
            seed,
            json,
        } => {
            let o = warm_start::Options {
                vgpud: vgpud.unwrap_or_else(daemon_proc::default_vgpud),
                dir,
                modes: modes.split(',').map(|m| m.trim().to_owned()).collect(),
                arrivals,
                scale,
                gap_s: gap,
                load,
                pool_size,
                creates_per_pass,
                seed,
            };
            let pods = openb::read_pods_with_lifetime(&pods)?;
            let result = warm_start::run(&o, &pods)?;
            if let Some(path) = json {
                std::fs::write(&path, serde_json::to_string_pretty(&result)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            Ok(())
        }
    }
}

fn metrics_scrape(scrapes: usize, hang_ms: u64, json_out: Option<PathBuf>) -> anyhow::Result<()> {
    println!(
        "{:<6} {:>5} {:>7} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6}",
        "host",
        "gpus",
        "slices",
        "series",
        "bytes",
        "scrapes",
        "p50 ms",
        "p99 ms",
        "max ms",
        "polls"
    );
    let mut out = Vec::new();
    for case in scrape::cases()? {
        let r = scrape::run(&case, scrapes, hang_ms)?;
        println!(
            "{:<6} {:>5} {:>7} {:>7} {:>8} {:>8} {:>8.3} {:>8.3} {:>8.3} {:>6}",
            r.case,
            r.gpus,
            r.slices,
            r.series,
            r.bytes,
            r.scrapes,
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            r.polls_during
        );
        out.push(r);
    }
    if let Some(path) = json_out {
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&json!({"hang_ms": hang_ms, "results": out}))?,
        )
        .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_end(at_end: f64) -> replay::ReplayResult {
        replay::ReplayResult {
            at_100: 0.0,
            at_end,
            failed: 0,
            pods: 0,
        }
    }

    #[test]
    fn replay_pairs_each_policy_with_best_fit_by_seed() {
        // Listed out of seed order, as the worker threads finish them.
        let results = vec![
            (ReplayPolicy::Vgpud, 43, at_end(95.0)),
            (ReplayPolicy::BestFit, 42, at_end(93.0)),
            (ReplayPolicy::Vgpud, 42, at_end(92.5)),
            (ReplayPolicy::BestFit, 43, at_end(91.0)),
        ];
        let (mean, worst) = paired_vs_best_fit(&results, ReplayPolicy::Vgpud).unwrap();
        // Seed 42: −0.5; seed 43: +4.0.
        assert!((mean - 1.75).abs() < 1e-9, "{mean}");
        assert!((worst + 0.5).abs() < 1e-9, "{worst}");
        assert_eq!(paired_vs_best_fit(&results, ReplayPolicy::Fgd), None);
        let without_best_fit = vec![(ReplayPolicy::Vgpud, 42, at_end(95.0))];
        assert_eq!(
            paired_vs_best_fit(&without_best_fit, ReplayPolicy::Vgpud),
            None
        );
    }
}
