//! The fleet benchmark: N simulated hosts, each a real `vgpud run --sim` with its own state
//! directory, socket and `vgpud.toml` reporting to one Placement; a workload drawn from the
//! openb pod list placed in arrival order, with no departures, until `max_failures` requests in
//! a row fail or the list ends; once per policy, each on a fresh fleet.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use placement::Client;
use serde_json::{Value, json};

use crate::host::Vgpud;
use crate::scheduler::{Claimant, Outcome, Policy, Scheduler};
use crate::workload::{Offer, wants};

/// Slices declared on some GPUs of a host (`PUT /v1/layouts`).
#[derive(Debug, Clone)]
pub struct DeclaredLayout {
    /// The GPUs, by index in PCI address order.
    pub gpus: &'static [u32],
    /// What each carries, `(type, count)`.
    pub slices: &'static [(&'static str, u32)],
}

/// A kind of host in the fleet: a simulator profile, the slice type its GPUs report on demand,
/// and the MIG layouts declared on it (if any).
#[derive(Debug, Clone)]
pub struct HostKind {
    /// The `sim/profiles` name.
    pub profile: &'static str,
    /// `[placement] on_demand_types`.
    pub on_demand: &'static [&'static str],
    /// The layouts declared.
    pub layouts: &'static [DeclaredLayout],
}

/// The mix, host `n` being of kind `n % 5`, sized to the openb list's demand (of its GPU pods
/// 55 % ask for whole GPUs, 20 % for a share above 4/7 of one, 13 % for (4/7, 3/7], 12 % for
/// less):
/// - a DGX A100 with declared MIG layouts: GPUs 0–3 3g.40gb + 2g.20gb + 2 × 1g.10gb, GPUs 4–7
///   4g.40gb + 3g.40gb (seven compute slices each, valid A100 placements);
/// - an HGX H200 lending whole GPUs (`gpu`);
/// - an HGX H200 with time-sliced half vGPUs (`NVIDIA H200X-70C`, two per GPU);
/// - a VDI host: quarter T4 vGPUs (`nvidia-232`, GRID T4-4Q) and half A16 vGPUs (`nvidia-707`,
///   A16-8Q), mdev;
/// - an L4 host lending its GPU whole.
pub const KINDS: [HostKind; 5] = [
    HostKind {
        profile: "dgx-a100",
        on_demand: &[],
        layouts: &[
            DeclaredLayout {
                gpus: &[0, 1, 2, 3],
                slices: &[("3g.40gb", 1), ("2g.20gb", 1), ("1g.10gb", 2)],
            },
            DeclaredLayout {
                gpus: &[4, 5, 6, 7],
                slices: &[("4g.40gb", 1), ("3g.40gb", 1)],
            },
        ],
    },
    HostKind {
        profile: "hgx-h200",
        on_demand: &["gpu"],
        layouts: &[],
    },
    HostKind {
        profile: "hgx-h200",
        on_demand: &["NVIDIA H200X-70C"],
        layouts: &[],
    },
    HostKind {
        profile: "vdi-mixed",
        on_demand: &["nvidia-232", "nvidia-707"],
        layouts: &[],
    },
    HostKind {
        profile: "single-gpu",
        on_demand: &["gpu"],
        layouts: &[],
    },
];

/// The slice menus of [`KINDS`], for mapping the trace's shares (`workload`): a MIG profile's
/// share is its compute slices over seven; a vGPU type's is one over its instances per GPU
/// (`max_instances` in the profiles: H200X-70C 2, T4-4Q 4, A16-8Q 2).
pub fn offers() -> Vec<Offer> {
    vec![
        Offer::new(
            "a100-mig",
            &[
                ("1g.10gb", 142),
                ("2g.20gb", 285),
                ("3g.40gb", 428),
                ("4g.40gb", 571),
            ],
        ),
        Offer::new("h200-vgpu", &[("NVIDIA H200X-70C", 500)]),
        Offer::new("t4-vgpu", &[("nvidia-232", 250)]),
        Offer::new("a16-vgpu", &[("nvidia-707", 500)]),
    ]
}

/// What to run.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// Hosts.
    pub agents: usize,
    /// Seed of the pod draw.
    pub seed: u64,
    /// Placement's URL; none: a fresh one per policy (`testkit::placement`).
    pub placement: Option<String>,
    /// The `vgpud` binary.
    pub vgpud: PathBuf,
    /// The openb pod list.
    pub pods: PathBuf,
    /// Stop after this many requests in a row that could not be placed.
    pub max_failures: usize,
    /// Stop after this many requests (all: `None`).
    pub max_pods: Option<usize>,
    /// How long the hosts may take to appear in Placement.
    pub ready_timeout: Duration,
}

/// N running vgpuds; killed when dropped.
pub struct Fleet {
    _dir: tempfile::TempDir,
    children: Vec<Child>,
    /// Root provider name → socket.
    pub hosts: Vec<(String, PathBuf)>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The name host `n` reports as its compute node.
pub fn host_name(n: usize) -> String {
    format!("fleet-host-{n:02}")
}

fn config(placement: &str, name: &str, kind: &HostKind) -> String {
    let types: Vec<String> = kind.on_demand.iter().map(|t| format!("{t:?}")).collect();
    format!(
        "[placement]\nenabled = true\nendpoint = {placement:?}\nauth = \"noauth2\"\ntoken = \"admin\"\n\
         compute_node = {name:?}\nown_root = true\nnuma_subtree = true\non_demand_types = [{}]\n\
         debounce_ms = 200\n",
        types.join(", ")
    )
}

impl Fleet {
    /// Starts one host per entry of `kinds` (host `n` named [`host_name`]`(n)`), reporting to
    /// `placement` (none: no `[placement]` section, for tests that write Placement by hand),
    /// declares their layouts, and waits until each is ready (its socket answers).
    pub fn start(
        vgpud: &Path,
        placement: Option<&str>,
        kinds: &[&HostKind],
    ) -> anyhow::Result<Fleet> {
        // TWO_LEVEL_KEEP keeps each host's directory (vgpud.log, state) for diagnosis.
        let keep = std::env::var_os("TWO_LEVEL_KEEP").is_some();
        let dir = tempfile::Builder::new()
            .prefix("two-level-fleet")
            .disable_cleanup(keep)
            .tempdir()?;
        let base = dir.path().to_owned();
        if keep {
            eprintln!(
                "two-level: keeping the hosts' directories in {}",
                base.display()
            );
        }
        let mut fleet = Fleet {
            _dir: dir,
            children: Vec::new(),
            hosts: Vec::new(),
        };
        for (n, kind) in kinds.iter().enumerate() {
            let name = host_name(n);
            let host_dir = base.join(&name);
            std::fs::create_dir_all(&host_dir)?;
            let toml = placement
                .map(|url| config(url, &name, kind))
                .unwrap_or_default();
            std::fs::write(host_dir.join("vgpud.toml"), toml)?;
            let log_path = host_dir.join("vgpud.log");
            let mut child =
                testkit::daemon::sim_run(&mut Command::new(vgpud), &host_dir, kind.profile, None)
                    .stderr(std::fs::File::create(&log_path)?)
                    .spawn()
                    .with_context(|| format!("starting {}", vgpud.display()))?;
            let ready = testkit::daemon::wait_ready(
                &mut child,
                || std::fs::read_to_string(&log_path).unwrap_or_default(),
                Duration::from_secs(60),
            );
            fleet.children.push(child);
            ready.with_context(|| format!("{name} ({})", kind.profile))?;
            fleet.hosts.push((name, host_dir.join("api.sock")));
        }
        for ((name, socket), kind) in fleet.hosts.iter().zip(kinds) {
            declare_layouts(&Vgpud::new(socket)?, kind.layouts).with_context(|| name.clone())?;
        }
        Ok(fleet)
    }

    /// The hosts' vgpuds by root provider name, for a [`Scheduler`].
    pub fn vgpuds(&self) -> anyhow::Result<BTreeMap<String, Vgpud>> {
        self.hosts
            .iter()
            .map(|(n, s)| Ok((n.clone(), Vgpud::new(s)?)))
            .collect()
    }

    /// Waits until every host's root provider has a GPU provider with inventory in Placement.
    pub fn wait_in_placement(&self, client: &Client, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        for (name, _) in &self.hosts {
            while !reported(client, name)? {
                if Instant::now() > deadline {
                    bail!(
                        "{name} has no GPU provider with inventory in Placement after {timeout:?}"
                    );
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        Ok(())
    }
}

fn reported(client: &Client, name: &str) -> anyhow::Result<bool> {
    let Some(root) = client.provider_named(name)? else {
        return Ok(false);
    };
    for p in client.tree(root.uuid)? {
        if p.name.contains("_pci_") && !client.inventories(p.uuid)?.inventories.is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Declares `layouts` on a host and waits for the layout apply to finish.
pub fn declare_layouts(host: &Vgpud, layouts: &[DeclaredLayout]) -> anyhow::Result<()> {
    if layouts.is_empty() {
        return Ok(());
    }
    let layouts: Vec<Value> = layouts
        .iter()
        .enumerate()
        .map(|(n, l)| {
            let slices: Vec<Value> = l
                .slices
                .iter()
                .map(|(t, c)| json!({"type": t, "count": c}))
                .collect();
            json!({"name": format!("fleet-{n}"), "selector": {"indices": l.gpus}, "slices": slices})
        })
        .collect();
    let body = json!({ "layouts": layouts });
    let mut op = host
        .call("PUT", "/v1/layouts", Some(&body))
        .map_err(|r| anyhow::anyhow!("declaring the layout: {}: {}", r.code, r.message))?;
    let id = op["id"].as_str().unwrap_or_default().to_owned();
    while op["state"] == "running" {
        std::thread::sleep(Duration::from_millis(100));
        op = host
            .call("GET", &format!("/v1/operations/{id}"), None)
            .map_err(|r| anyhow::anyhow!("polling the layout apply: {}: {}", r.code, r.message))?;
    }
    if op["state"] == "failed" {
        bail!("the layout apply failed: {}", op["error"]);
    }
    Ok(())
}

/// The figures of one policy's run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Figures {
    /// The policy.
    pub policy: String,
    /// Requests tried.
    pub tried: usize,
    /// Requests placed.
    pub placed: usize,
    /// vgpud refusals after Placement had taken the claim (goal 0).
    pub refused_after_yes: usize,
    /// Those refusals by the vgpud's error code and message (what lagged or disagreed).
    pub refusal_reasons: BTreeMap<String, usize>,
    /// Claims Placement refused.
    pub claim_conflicts: usize,
    /// Requests Placement had no candidate for.
    pub no_candidate: usize,
    /// Requests with candidates no vgpud would take.
    pub no_host_feasible: usize,
    /// Placed ÷ tried.
    pub acceptance: f64,
    /// Score calls per decision, mean.
    pub score_calls_mean: f64,
    /// Decision time, milliseconds: mean, p50, p99.
    pub decision_ms: [f64; 3],
    /// GPU thousandths placed, by slice type.
    pub placed_by_type: BTreeMap<String, usize>,
}

/// Places the workload with `scheduler` on [`KINDS`]' offers (see the module doc).
pub fn place_workload(
    scheduler: &mut Scheduler,
    pods: &[bench::openb::Pod],
    max_failures: usize,
) -> anyhow::Result<Figures> {
    place_workload_with(scheduler, pods, max_failures, &offers())
}

/// Places the workload with `scheduler`, shares mapped onto `offers`.
pub fn place_workload_with(
    scheduler: &mut Scheduler,
    pods: &[bench::openb::Pod],
    max_failures: usize,
    offers: &[Offer],
) -> anyhow::Result<Figures> {
    let mut f = Figures {
        policy: scheduler.policy.name().to_owned(),
        ..Figures::default()
    };
    let mut times = Vec::new();
    let mut calls = 0u64;
    let mut failures_in_a_row = 0;
    for pod in pods {
        let alternatives = wants(pod.num_gpu, pod.gpu_milli, offers);
        if alternatives.is_empty() {
            continue;
        }
        let d = scheduler.place(&alternatives)?;
        f.tried += 1;
        times.push(d.elapsed.as_secs_f64() * 1000.0);
        calls += u64::from(d.score_calls);
        f.refused_after_yes += d.refusals.len();
        for (host, r) in &d.refusals {
            *f.refusal_reasons
                .entry(format!("{host}: {}: {}", r.code, r.message))
                .or_default() += 1;
        }
        f.claim_conflicts += d.claim_conflicts as usize;
        match d.outcome {
            Outcome::Placed { want, .. } => {
                f.placed += 1;
                *f.placed_by_type.entry(want.slice_type).or_default() += 1;
                failures_in_a_row = 0;
            }
            other => {
                match other {
                    Outcome::NoCandidate => f.no_candidate += 1,
                    Outcome::NoHostFeasible => f.no_host_feasible += 1,
                    _ => {}
                }
                failures_in_a_row += 1;
                if failures_in_a_row >= max_failures {
                    break;
                }
            }
        }
    }
    f.acceptance = if f.tried == 0 {
        0.0
    } else {
        f.placed as f64 / f.tried as f64
    };
    f.score_calls_mean = if f.tried == 0 {
        0.0
    } else {
        calls as f64 / f.tried as f64
    };
    f.decision_ms = summary(&mut times);
    Ok(f)
}

fn summary(times: &mut [f64]) -> [f64; 3] {
    if times.is_empty() {
        return [0.0; 3];
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    [
        times.iter().sum::<f64>() / times.len() as f64,
        at(0.5),
        at(0.99),
    ]
}

/// The pods of `file` with a GPU request, shuffled with `seed`, at most `max`.
pub fn draw_pods(
    file: &Path,
    seed: u64,
    max: Option<usize>,
) -> anyhow::Result<Vec<bench::openb::Pod>> {
    let mut pods: Vec<_> = bench::openb::read_pods(file)?
        .into_iter()
        .filter(|p| p.num_gpu > 0)
        .collect();
    fastrand::Rng::with_seed(seed).shuffle(&mut pods);
    if let Some(max) = max {
        pods.truncate(max);
    }
    Ok(pods)
}

/// A Placement client for `url` (noauth2 admin).
pub fn placement_client(url: &str) -> anyhow::Result<Client> {
    Ok(Client::new(placement::ClientConfig {
        endpoint: Some(url.to_owned()),
        auth: placement::Auth::NoAuth {
            token: "admin".to_owned(),
        },
        ca_file: None,
        timeout: Duration::from_secs(30),
    })?)
}

/// The mix of `agents` hosts: host `n` of kind `n % 5` ([`KINDS`]).
pub fn mix(agents: usize) -> Vec<&'static HostKind> {
    (0..agents).map(|n| &KINDS[n % KINDS.len()]).collect()
}

/// One policy on a fresh fleet (and a fresh Placement unless `options.placement` names one).
pub fn run_policy(options: &FleetOptions, policy: Policy) -> anyhow::Result<Figures> {
    let peer = match &options.placement {
        Some(_) => None,
        None => Some(testkit::placement::PlacementPeer::start()?.context(
            "no Placement venv (scripts/lib.sh ensure_placement_venv), and no --placement",
        )?),
    };
    let url = options
        .placement
        .clone()
        .or_else(|| peer.as_ref().map(|p| p.url()))
        .unwrap_or_default();
    let client = placement_client(&url)?;
    let fleet = Fleet::start(&options.vgpud, Some(&url), &mix(options.agents))?;
    fleet.wait_in_placement(&client, options.ready_timeout)?;
    let claimant = Claimant {
        project_id: "fleet-project".to_owned(),
        user_id: "fleet-user".to_owned(),
    };
    let mut scheduler = Scheduler::new(client, fleet.vgpuds()?, claimant, policy);
    let pods = draw_pods(&options.pods, options.seed, options.max_pods)?;
    let figures = place_workload(&mut scheduler, &pods, options.max_failures);
    // A Placement named on the command line outlives the run, and the next policy's fleet
    // reuses the host names: it must find no claims of this one.
    scheduler.release_claims()?;
    drop(fleet);
    figures
}
