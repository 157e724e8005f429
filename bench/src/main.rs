//! `vgpud-bench`: vgpud's benchmarks as a program. Each subcommand prints a table and writes a
//! JSON result; figures and the commands that produced them are recorded in `BENCHMARKS.md`.
//!
//! This binary owns measurement only; scheduling logic lives in the `sched` crate.

mod openb;
mod replay;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use serde_json::json;

use replay::ReplayPolicy;

#[derive(Parser)]
#[command(name = "vgpud-bench", about = "vgpud benchmarks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

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
        /// Where to write the JSON result.
        #[arg(long)]
        json: Option<PathBuf>,
    },
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
    pods: PathBuf,
    seeds: &str,
    policies: &str,
    load: f64,
    threads: Option<usize>,
    json_out: Option<PathBuf>,
) -> anyhow::Result<()> {
    let nodes = openb::read_nodes(&nodes)?;
    let pods = openb::read_pods(&pods)?;
    let seeds = parse_seeds(seeds)?;
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
                    let t = Instant::now();
                    let list = replay::inflate(&pods, &nodes, load / 100.0, seed);
                    let r = replay::replay(&nodes, &pods, &list, p, seed);
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
                        v.push((p, r));
                    }
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_default();
    let mut table = serde_json::Map::new();
    println!(
        "{:<14} {:>9} {:>9} {:>7} {:>12} {:>10} {:>7}",
        "policy", "alloc@100", "alloc@end", "stdev", "unallocated", "published", "diff"
    );
    for p in &policies {
        let at100: Vec<f64> = results
            .iter()
            .filter(|(q, _)| q == p)
            .map(|(_, r)| r.at_100)
            .collect();
        let at_end: Vec<f64> = results
            .iter()
            .filter(|(q, _)| q == p)
            .map(|(_, r)| r.at_end)
            .collect();
        let (m100, _) = mean_sd(&at100);
        let (m, sd) = mean_sd(&at_end);
        let pubd = published(*p);
        println!(
            "{:<14} {:>8.2}% {:>8.2}% {:>7.2} {:>11.2}% {:>10} {:>7}",
            p.name(),
            m100,
            m,
            sd,
            100.0 - m,
            pubd.map_or("-".to_owned(), |x| format!("{x:.2}%")),
            pubd.map_or("-".to_owned(), |x| format!("{:+.2}", m - x)),
        );
        table.insert(
            p.name().to_owned(),
            json!({"allocated_pct_at_100": m100, "allocated_pct_at_130": m, "stdev_at_130": sd}),
        );
    }
    println!(
        "{} runs ({} seeds) in {:.1} s on {threads} threads",
        jobs.len(),
        seeds.len(),
        start.elapsed().as_secs_f64()
    );
    if let Some(out) = json_out {
        let doc = json!({"policies": table, "seeds": seeds, "load_pct": load});
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
            json,
        } => sched_replay(nodes, pods, &seeds, &policies, load, threads, json),
    }
}
