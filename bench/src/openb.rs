//! The openb trace format (Alibaba clusterdata `cluster-trace-gpu-v2023`): node and pod CSV
//! files as the FGD paper's simulator reads them.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, bail};

/// One GPU node of the cluster.
#[derive(Debug, Clone)]
pub struct Node {
    /// Serial name.
    pub name: String,
    /// CPU capacity in milli-CPUs.
    pub cpu_milli: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// GPUs.
    pub gpus: u32,
    /// GPU model code.
    pub model: String,
}

/// One pod (task) of the trace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pod {
    /// CPU request in milli-CPUs.
    pub cpu_milli: u32,
    /// Memory request in MiB.
    pub memory_mib: u64,
    /// GPUs requested.
    pub num_gpu: u32,
    /// Thousandths of each GPU (1000 for whole GPUs, 0 for CPU-only pods).
    pub gpu_milli: u32,
    /// Acceptable GPU models, `|`-separated (empty: any).
    pub gpu_spec: String,
}

impl Pod {
    /// GPU demand in thousandths of a GPU.
    pub fn total_milli(&self) -> u64 {
        u64::from(self.num_gpu) * u64::from(self.gpu_milli)
    }
    /// Whether the pod shares one GPU with others.
    pub fn is_share(&self) -> bool {
        self.num_gpu == 1 && self.gpu_milli < 1000
    }
    /// Models the pod accepts (empty: any).
    pub fn models(&self) -> Vec<String> {
        self.gpu_spec
            .split('|')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }
    /// Whether a node of `model` is acceptable.
    pub fn accepts(&self, model: &str) -> bool {
        self.gpu_spec.is_empty() || self.gpu_spec.split('|').any(|m| m == model)
    }
}

/// Where each wanted column sits in the header: `None` for an optional column the file lacks.
fn columns(
    header: &str,
    want: &[&str],
    optional: &[&str],
    file: &Path,
) -> anyhow::Result<Vec<Option<usize>>> {
    let names: Vec<&str> = header.trim().split(',').collect();
    want.iter()
        .map(|w| {
            let at = names.iter().position(|n| n == w);
            if at.is_none() && !optional.contains(w) {
                bail!("{} has no column {w:?}", file.display());
            }
            Ok(at)
        })
        .collect()
}

/// The `want` fields of every data row, in that order. Columns named in `optional` may be
/// missing from the file (the openb `multigpu*` lists have no `gpu_spec`): they read as empty.
fn rows(file: &Path, want: &[&str], optional: &[&str]) -> anyhow::Result<Vec<Vec<String>>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut lines = text.lines();
    let header = lines
        .next()
        .with_context(|| format!("{} is empty", file.display()))?;
    let idx = columns(header, want, optional, file)?;
    let mut out = Vec::new();
    for (n, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(',').collect();
        let row = idx
            .iter()
            .map(|i| match i {
                Some(i) => fields.get(*i).map(|s| s.trim().to_owned()),
                None => Some(String::new()),
            })
            .collect::<Option<Vec<_>>>()
            .with_context(|| format!("{} line {}: too few fields", file.display(), n + 2))?;
        out.push(row);
    }
    Ok(out)
}

fn num<T: std::str::FromStr>(s: &str, what: &str, file: &Path) -> anyhow::Result<T> {
    s.parse()
        .ok()
        .with_context(|| format!("{}: {what} {s:?} is not a number", file.display()))
}

/// Reads a node list.
pub fn read_nodes(file: &Path) -> anyhow::Result<Vec<Node>> {
    let nodes: Vec<Node> = rows(
        file,
        &["sn", "cpu_milli", "memory_mib", "gpu", "model"],
        &[],
    )?
    .into_iter()
    .map(|r| {
        Ok(Node {
            name: r[0].clone(),
            cpu_milli: num(&r[1], "cpu_milli", file)?,
            memory_mib: num(&r[2], "memory_mib", file)?,
            gpus: num(&r[3], "gpu", file)?,
            model: r[4].clone(),
        })
    })
    .collect::<anyhow::Result<_>>()?;
    if let Some(n) = nodes.iter().find(|n| n.gpus > 8) {
        bail!(
            "node {} has {} GPUs; at most 8 are supported",
            n.name,
            n.gpus
        );
    }
    Ok(nodes)
}

/// Reads a pod list.
pub fn read_pods(file: &Path) -> anyhow::Result<Vec<Pod>> {
    let want = [
        "cpu_milli",
        "memory_mib",
        "num_gpu",
        "gpu_milli",
        "gpu_spec",
    ];
    rows(file, &want, &["gpu_spec"])?
        .into_iter()
        .map(|r| {
            let pod = Pod {
                cpu_milli: num(&r[0], "cpu_milli", file)?,
                memory_mib: num(&r[1], "memory_mib", file)?,
                num_gpu: num(&r[2], "num_gpu", file)?,
                gpu_milli: num(&r[3], "gpu_milli", file)?,
                gpu_spec: r[4].clone(),
            };
            if pod.gpu_milli > 1000 || (pod.num_gpu > 1 && pod.gpu_milli < 1000) {
                bail!(
                    "{}: a pod asks for {} GPUs of {} thousandths each; shares above one GPU or of several GPUs are not a trace shape",
                    file.display(),
                    pod.num_gpu,
                    pod.gpu_milli
                );
            }
            Ok(pod)
        })
        .collect()
}

/// A typical pod shape and its probability (FGD's target workload).
#[derive(Debug, Clone)]
pub struct Typical {
    /// CPU request.
    pub cpu_milli: u32,
    /// GPU thousandths per GPU.
    pub gpu_milli: u32,
    /// GPUs.
    pub num_gpu: u32,
    /// Accepted models.
    pub gpu_spec: String,
    /// Probability.
    pub p: f64,
}

/// The most frequent pod shapes covering `threshold_pct` of the pods, renormalised: the
/// simulator's `GetTypicalPods` with its experiment settings (CPU pods included, threshold 95,
/// step 1, no GPU weighting).
pub fn typical_pods(pods: &[Pod], threshold_pct: f64) -> Vec<Typical> {
    let mut count: HashMap<(u32, u32, u32, String), f64> = HashMap::new();
    for p in pods {
        *count
            .entry((p.cpu_milli, p.gpu_milli, p.num_gpu, p.gpu_spec.clone()))
            .or_default() += 1.0;
    }
    let total = pods.len() as f64;
    let mut list: Vec<_> = count.into_iter().collect();
    // Most frequent first; equal counts in a fixed order so runs repeat.
    list.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
    let mut out = Vec::new();
    let mut cum = 0.0;
    for ((cpu, milli, n, spec), c) in list {
        if cum >= threshold_pct / 100.0 * total {
            break;
        }
        cum += c;
        out.push(Typical {
            cpu_milli: cpu,
            gpu_milli: milli,
            num_gpu: n,
            gpu_spec: spec,
            p: c,
        });
    }
    for t in &mut out {
        t.p /= cum;
    }
    out
}

/// Reads a pod list with each pod's lifetime (`deletion_time - creation_time`, seconds).
pub fn read_pods_with_lifetime(file: &Path) -> anyhow::Result<Vec<(Pod, f64)>> {
    let pods = read_pods(file)?;
    let times = rows(file, &["creation_time", "deletion_time"], &[])?;
    Ok(pods
        .into_iter()
        .zip(times)
        .map(|(p, t)| {
            let c: f64 = t[0].parse().unwrap_or(0.0);
            let d: f64 = t[1].parse().unwrap_or(0.0);
            (p, (d - c).max(0.0))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn a_pod_list_without_gpu_spec_reads_as_unconstrained() {
        // The shape of the openb multigpu* lists: five columns.
        let f = file(
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,88000,327680,8,1000\np1,4000,15258,1,220\n",
        );
        let pods = read_pods(f.path()).unwrap();
        assert_eq!(pods.len(), 2);
        assert_eq!((pods[0].num_gpu, pods[1].gpu_milli), (8, 220));
        assert!(
            pods.iter()
                .all(|p| p.gpu_spec.is_empty() && p.accepts("V100M32"))
        );
    }

    #[test]
    fn a_missing_required_column_is_named() {
        let f = file("name,cpu_milli,num_gpu,gpu_milli\np0,1000,1,500\n");
        let err = read_pods(f.path()).unwrap_err().to_string();
        assert!(err.contains("no column \"memory_mib\""), "{err}");
    }

    #[test]
    fn a_gpu_spec_column_is_read_when_present() {
        let f = file(
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,2048,1,500,G2|T4\n",
        );
        let pods = read_pods(f.path()).unwrap();
        assert!(pods[0].accepts("T4") && !pods[0].accepts("V100M32"));
    }
}
