//! Workload mixes derived from one pod list (`sched-replay --mix`): a seeded re-weighting of its
//! pods, so that one class of pods carries a chosen share of the work. These are stand-ins for
//! the openb variant files, not the variants themselves.
//!
//! The rule, for a list of N pods:
//! - `gpushare=P` / `multigpu=P`: the CPU-only pods are kept as they are; the other N − C slots
//!   are refilled by drawing GPU pods with replacement, one at a time: from the class
//!   (GPU-sharing pods, `gpu_milli` < 1000; or multi-GPU pods, `num_gpu` > 1) while its GPU
//!   demand so far is under P % of the GPU demand drawn so far, otherwise from the other GPU
//!   pods. The class's share of GPU demand then ends within one pod's demand of P %.
//! - `cpu=P`: round(P % × N) pods are drawn with replacement from the CPU-only pods and the
//!   rest from the GPU pods.
//! - `gpuspec=P`: the list is kept, and each GPU pod without a model constraint gets one with
//!   probability P %: a single GPU model, drawn in proportion to the GPUs of that model on
//!   nodes large enough for the pod (so a constrained pod can still be placed somewhere).
//!
//! Draws are uniform within a class, so the class's own shapes keep their relative frequencies.

use std::fmt;
use std::str::FromStr;

use anyhow::{Context, bail};

use crate::openb::{Node, Pod};

/// Which class of pods a mix re-weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MixKind {
    /// GPU-sharing pods (`gpu_milli` < 1000) as a share of GPU demand.
    GpuShare,
    /// Multi-GPU pods (`num_gpu` > 1) as a share of GPU demand.
    MultiGpu,
    /// CPU-only pods as a share of the pod count.
    Cpu,
    /// GPU pods constrained to one GPU model, as a share of the GPU pods.
    GpuSpec,
}

/// A requested mix: `KIND=PCT`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mix {
    /// The class re-weighted.
    pub kind: MixKind,
    /// Its target share, in percent.
    pub pct: f64,
}

impl FromStr for Mix {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        let (kind, pct) = s
            .split_once('=')
            .with_context(|| format!("mix {s:?} is not KIND=PCT"))?;
        let kind = match kind.trim() {
            "gpushare" => MixKind::GpuShare,
            "multigpu" => MixKind::MultiGpu,
            "cpu" => MixKind::Cpu,
            "gpuspec" => MixKind::GpuSpec,
            other => bail!("unknown mix kind {other:?} (gpushare, multigpu, cpu or gpuspec)"),
        };
        let pct: f64 = pct
            .trim()
            .parse()
            .ok()
            .with_context(|| format!("mix share {pct:?} is not a number"))?;
        if !(0.0..=100.0).contains(&pct) {
            bail!("mix share {pct} is outside 0-100");
        }
        Ok(Mix { kind, pct })
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            MixKind::GpuShare => "gpushare",
            MixKind::MultiGpu => "multigpu",
            MixKind::Cpu => "cpu",
            MixKind::GpuSpec => "gpuspec",
        };
        write!(f, "{kind}={}", self.pct)
    }
}

fn is_cpu_only(p: &Pod) -> bool {
    p.total_milli() == 0
}

impl Mix {
    /// Whether `p` belongs to the re-weighted class.
    fn in_class(&self, p: &Pod) -> bool {
        match self.kind {
            MixKind::GpuShare => !is_cpu_only(p) && p.gpu_milli < 1000,
            MixKind::MultiGpu => !is_cpu_only(p) && p.num_gpu > 1,
            MixKind::Cpu => is_cpu_only(p),
            MixKind::GpuSpec => !is_cpu_only(p) && !p.gpu_spec.is_empty(),
        }
    }

    /// The re-weighted list: as many pods as `pods`, drawn with `seed` (see the module doc);
    /// `nodes` are the cluster's, which `gpuspec` draws its models from.
    pub fn apply(&self, pods: &[Pod], nodes: &[Node], seed: u64) -> anyhow::Result<Vec<Pod>> {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x004d_4958);
        if self.kind == MixKind::GpuSpec {
            return constrain_models(pods, nodes, self.pct, &mut rng);
        }
        let (class, rest): (Vec<&Pod>, Vec<&Pod>) = pods.iter().partition(|p| self.in_class(p));
        if self.pct > 0.0 && class.is_empty() {
            bail!("the pod list has no pods of the class {self} asks for");
        }
        if self.kind == MixKind::Cpu {
            let cpu = (self.pct / 100.0 * pods.len() as f64).round() as usize;
            if cpu < pods.len() && rest.is_empty() {
                bail!("the pod list has no GPU pods for {self}");
            }
            return Ok((0..pods.len())
                .filter_map(|i| draw(&mut rng, if i < cpu { &class } else { &rest }))
                .collect());
        }
        let others: Vec<&Pod> = rest.into_iter().filter(|p| !is_cpu_only(p)).collect();
        if self.pct < 100.0 && others.is_empty() {
            bail!("the pod list has no GPU pods outside the class {self} re-weights");
        }
        let mut out: Vec<Pod> = pods.iter().filter(|p| is_cpu_only(p)).cloned().collect();
        let (mut in_class, mut all) = (0u64, 0u64);
        while out.len() < pods.len() {
            let take_class = self.pct >= 100.0
                || (self.pct > 0.0 && (in_class as f64) < self.pct / 100.0 * all as f64)
                || (self.pct > 0.0 && all == 0);
            let Some(p) = draw(&mut rng, if take_class { &class } else { &others }) else {
                break;
            };
            if take_class {
                in_class += p.total_milli();
            }
            all += p.total_milli();
            out.push(p);
        }
        Ok(out)
    }

    /// The class's share in `pods`, in percent: of GPU demand, of the count for `cpu`, of the
    /// GPU pods' count for `gpuspec`.
    pub fn measure(&self, pods: &[Pod]) -> f64 {
        let class = pods.iter().filter(|p| self.in_class(p));
        match self.kind {
            MixKind::Cpu => return 100.0 * class.count() as f64 / pods.len().max(1) as f64,
            MixKind::GpuSpec => {
                let gpu = pods.iter().filter(|p| !is_cpu_only(p)).count();
                return 100.0 * class.count() as f64 / gpu.max(1) as f64;
            }
            _ => {}
        }
        let part: u64 = class.map(Pod::total_milli).sum();
        let all: u64 = pods.iter().map(Pod::total_milli).sum();
        100.0 * part as f64 / all.max(1) as f64
    }
}

/// `gpuspec=P`: the list with P % of its unconstrained GPU pods constrained to one model.
fn constrain_models(
    pods: &[Pod],
    nodes: &[Node],
    pct: f64,
    rng: &mut fastrand::Rng,
) -> anyhow::Result<Vec<Pod>> {
    let mut out = pods.to_vec();
    for pod in out
        .iter_mut()
        .filter(|p| !is_cpu_only(p) && p.gpu_spec.is_empty())
    {
        if rng.f64() * 100.0 >= pct {
            continue;
        }
        // GPUs per model on nodes that can hold the whole pod.
        let mut models: Vec<(&str, u64)> = Vec::new();
        for n in nodes.iter().filter(|n| n.gpus >= pod.num_gpu) {
            match models.iter_mut().find(|(m, _)| *m == n.model) {
                Some((_, g)) => *g += u64::from(n.gpus),
                None => models.push((&n.model, u64::from(n.gpus))),
            }
        }
        let total: u64 = models.iter().map(|(_, g)| g).sum();
        if total == 0 {
            bail!("no node has the {} GPUs a pod asks for", pod.num_gpu);
        }
        let mut pick = rng.u64(..total);
        for (model, gpus) in &models {
            if pick < *gpus {
                pod.gpu_spec = (*model).to_owned();
                break;
            }
            pick -= gpus;
        }
    }
    Ok(out)
}

fn draw(rng: &mut fastrand::Rng, from: &[&Pod]) -> Option<Pod> {
    if from.is_empty() {
        return None;
    }
    from.get(rng.usize(..from.len())).map(|p| (*p).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(cpu_milli: u32, num_gpu: u32, gpu_milli: u32) -> Pod {
        Pod {
            cpu_milli,
            memory_mib: 1024,
            num_gpu,
            gpu_milli,
            gpu_spec: String::new(),
        }
    }

    /// Two models: 8-GPU G2 nodes and 2-GPU T4 nodes (three times as many T4 GPUs).
    fn nodes() -> Vec<Node> {
        let node = |model: &str, gpus: u32| Node {
            name: format!("{model}-node"),
            cpu_milli: 96_000,
            memory_mib: 1 << 20,
            gpus,
            model: model.into(),
        };
        let mut v = vec![node("G2", 8); 10];
        v.extend(vec![node("T4", 2); 120]);
        v
    }

    #[test]
    fn gpuspec_constrains_the_share_asked_to_models_that_can_hold_the_pod() {
        let pods = trace_like();
        let mix: Mix = "gpuspec=40".parse().unwrap();
        let out = mix.apply(&pods, &nodes(), 3).unwrap();
        assert_eq!(out.len(), pods.len());
        // Only the constraint changes, and never on CPU-only pods.
        for (a, b) in pods.iter().zip(&out) {
            assert_eq!(
                (a.cpu_milli, a.num_gpu, a.gpu_milli),
                (b.cpu_milli, b.num_gpu, b.gpu_milli)
            );
            assert!(b.gpu_spec.is_empty() || b.num_gpu > 0);
        }
        // An 8-GPU pod only ever names G2; single-GPU pods name T4 about three times in four.
        assert!(
            out.iter()
                .filter(|p| p.num_gpu == 8)
                .all(|p| p.gpu_spec != "T4")
        );
        let single: Vec<&Pod> = out
            .iter()
            .filter(|p| p.num_gpu == 1 && !p.gpu_spec.is_empty())
            .collect();
        let t4 = single.iter().filter(|p| p.gpu_spec == "T4").count() as f64 / single.len() as f64;
        assert!((t4 - 0.75).abs() < 0.05, "{t4}");
        assert!(
            (mix.measure(&out) - 40.0).abs() < 2.0,
            "{}",
            mix.measure(&out)
        );
    }

    /// A list shaped like the default trace: shares, whole GPUs, multi-GPU pods, CPU-only pods.
    fn trace_like() -> Vec<Pod> {
        let shapes = [
            (pod(4000, 1, 500), 30),
            (pod(6000, 1, 250), 20),
            (pod(8000, 1, 810), 10),
            (pod(12000, 1, 1000), 25),
            (pod(24000, 2, 1000), 5),
            (pod(64000, 8, 1000), 1),
            (pod(2000, 0, 0), 9),
        ];
        shapes
            .iter()
            .flat_map(|(p, n)| std::iter::repeat_n(p.clone(), n * 80))
            .collect()
    }

    #[test]
    fn each_mix_produces_the_share_it_asks_for_within_one_percent() {
        let pods = trace_like();
        for spec in [
            "gpushare=20",
            "gpushare=40",
            "gpushare=60",
            "gpushare=80",
            "gpushare=100",
            "multigpu=20",
            "multigpu=50",
            "cpu=0",
            "cpu=20",
            "gpuspec=10",
            "gpuspec=33",
        ] {
            let mix: Mix = spec.parse().unwrap();
            let out = mix.apply(&pods, &nodes(), 42).unwrap();
            assert_eq!(out.len(), pods.len(), "{spec}");
            let got = mix.measure(&out);
            assert!((got - mix.pct).abs() <= 1.0, "{spec}: {got:.2} %");
        }
    }

    #[test]
    fn a_mix_is_a_reweighting_not_a_new_workload() {
        let pods = trace_like();
        let mix: Mix = "gpushare=80".parse().unwrap();
        let out = mix.apply(&pods, &nodes(), 7).unwrap();
        // Every pod drawn is a pod of the list, and the CPU-only pods are kept as they were.
        assert!(out.iter().all(|p| pods.contains(p)));
        let cpu = |l: &[Pod]| l.iter().filter(|p| p.num_gpu == 0).count();
        assert_eq!(cpu(&out), cpu(&pods));
        // The same seed gives the same list; another seed another draw.
        assert_eq!(out, mix.apply(&pods, &nodes(), 7).unwrap());
        assert_ne!(out, mix.apply(&pods, &nodes(), 8).unwrap());
    }

    #[test]
    fn bad_mixes_are_refused() {
        assert!("gpushare".parse::<Mix>().is_err());
        assert!("gpuspecs=10".parse::<Mix>().is_err());
        assert!("cpu=120".parse::<Mix>().is_err());
        assert!("cpu=x".parse::<Mix>().is_err());
        let only_whole = vec![pod(1000, 1, 1000); 10];
        let mix: Mix = "gpushare=50".parse().unwrap();
        assert!(mix.apply(&only_whole, &nodes(), 1).is_err());
    }
}
