//! The torture run: clients, the killer, then the invariants.
//!
//! Invariants (issue 14): no leaked device (after releasing and destroying everything through
//! the API, the simulated host carries no mdev, GPU instance or VF on vfio-pci); no allocation
//! lost (every acknowledged, unreleased allocation is there after the last restart) or duplicated
//! (one id per idempotency key, no allocation nobody asked for, no slice in two allocations);
//! the store and the host agree (the last start's reconcile finds nothing failed or foreign);
//! every unacknowledged allocation is answered by its idempotent retry; D-Bus and REST show the
//! same allocations.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::Rng;
use crate::daemon::Daemon;
use crate::http::{self, Answer, NoAnswer};
use crate::ledger::{AllocRecord, AllocState, Counts, Ledger};

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Built-in simulated profile.
    pub profile: String,
    /// Allocation types the clients ask for (what the profile offers).
    pub types: Vec<String>,
    /// SIGKILLs.
    pub kills: u32,
    /// REST clients (one more reads over D-Bus when a private bus can be started).
    pub clients: u32,
    /// Seed of every random choice.
    pub seed: u64,
    /// Longest time between a start and the next kill.
    pub max_uptime: Duration,
}

/// What a run did and found.
#[derive(Debug, Clone)]
pub struct Report {
    /// SIGKILLs done.
    pub kills: u32,
    /// Operation counts.
    pub counts: Counts,
    /// Allocation requests made.
    pub allocation_requests: usize,
    /// Allocations acknowledged (before the retries).
    pub acknowledged: usize,
    /// Allocations resolved by their idempotent retry at the end.
    pub resolved_by_retry: usize,
    /// Invariant violations (the run passes with none).
    pub violations: Vec<String>,
    /// Wall time.
    pub elapsed: Duration,
    /// Mean time from spawn to "ready".
    pub mean_start: Duration,
}

fn mean(times: &[Duration]) -> Duration {
    let n = u32::try_from(times.len()).unwrap_or(u32::MAX).max(1);
    times.iter().sum::<Duration>() / n
}

/// A private dbus-daemon for the D-Bus reader (none when dbus-daemon or busctl is missing).
struct Bus {
    child: Child,
    address: String,
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn private_bus(dir: &Path) -> Option<Bus> {
    if !have("dbus-daemon") || !have("busctl") {
        return None;
    }
    let path = dir.join("bus");
    let address = format!("unix:path={}", path.display());
    let child = Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--nopidfile"])
        .arg(format!("--address={address}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(Bus { child, address })
}

/// `AllocationsJson` over D-Bus, parsed; `None` when no answer.
fn dbus_allocations(address: &str) -> Option<Value> {
    let out = Command::new("busctl")
        .arg(format!("--address={address}"))
        .args([
            "--json=short",
            "call",
            "io.vgpud.Agent1",
            "/io/vgpud/Agent1",
            "io.vgpud.Agent1.Manager",
            "AllocationsJson",
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let reply: Value = serde_json::from_slice(&out.stdout).ok()?;
    serde_json::from_str(reply["data"][0].as_str()?).ok()
}

struct Shared {
    ledger: Mutex<Ledger>,
    stop: AtomicBool,
}

impl Shared {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One REST client: allocations with fresh keys, releases of its own, reads, and retries of
/// its unanswered requests, until told to stop.
fn rest_client(shared: Arc<Shared>, socket: &Path, cfg: &Config, n: u32) {
    let mut rng = Rng::new(cfg.seed ^ (u64::from(n) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut serial = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        match rng.below(10) {
            0..=4 => {
                serial += 1;
                let key = format!("c{n}-{serial}");
                let ty = &cfg.types[rng.below(cfg.types.len() as u64) as usize];
                let body =
                    json!({"consumer": format!("client-{n}"), "request": {"type": ty, "count": 1}});
                shared.ledger().allocations.insert(
                    key.clone(),
                    AllocRecord {
                        key: key.clone(),
                        body: body.clone(),
                        state: AllocState::Unanswered,
                        sent: false,
                    },
                );
                allocate(&shared, socket, &key, &body);
            }
            5..=7 => release_one(&shared, socket, &mut rng, n),
            8 => retry_one(&shared, socket, &mut rng, n),
            _ => {
                let path = if rng.below(2) == 0 {
                    "/v1/allocations"
                } else {
                    "/v1/slices"
                };
                match http::call(socket, "GET", path, None, None) {
                    Err(NoAnswer::NotConnected(_)) => {}
                    r => count(&shared, r.is_ok()),
                }
            }
        }
        std::thread::sleep(Duration::from_millis(rng.below(15)));
    }
}

fn count(shared: &Shared, answered: bool) {
    let mut l = shared.ledger();
    if answered {
        l.counts.answered += 1;
    } else {
        l.counts.unanswered += 1;
    }
}

/// Sends (or re-sends) one allocation request and records its answer. A request that could
/// not even connect was never sent: a new one is forgotten, a retry stays unanswered.
fn allocate(shared: &Shared, socket: &Path, key: &str, body: &Value) -> Option<Answer> {
    let answer = match http::call(socket, "POST", "/v1/allocations", Some(key), Some(body)) {
        Ok(a) => Some(a),
        Err(NoAnswer::NotConnected(_)) => {
            let mut l = shared.ledger();
            let fresh = l
                .allocations
                .get(key)
                .is_some_and(|r| r.state == AllocState::Unanswered && !r.sent);
            if fresh {
                l.allocations.remove(key);
            }
            return None;
        }
        Err(NoAnswer::Cut(_)) => None,
    };
    if let Some(r) = shared.ledger().allocations.get_mut(key) {
        r.sent = true;
    }
    count(shared, answer.is_some());
    let a = answer.as_ref()?;
    let mut l = shared.ledger();
    match (a.status, a.body["id"].as_str()) {
        (200 | 201, Some(id)) => l.acked(key, id.to_owned()),
        (409, _) if a.body["code"] == "no_capacity" => {
            if let Some(r) = l.allocations.get_mut(key)
                && r.state == AllocState::Unanswered
            {
                r.state = AllocState::Refused;
            }
        }
        (503 | 504, _) => {} // not ready or a vendor timeout: still unanswered
        (status, _) => l
            .violations
            .push(format!("allocate {key}: unexpected {status} {}", a.body)),
    }
    answer
}

fn mine(l: &Ledger, n: u32, pick: impl Fn(&AllocState) -> bool) -> Vec<AllocRecord> {
    let prefix = format!("c{n}-");
    l.allocations
        .values()
        .filter(|r| r.key.starts_with(&prefix) && pick(&r.state))
        .cloned()
        .collect()
}

fn release_one(shared: &Shared, socket: &Path, rng: &mut Rng, n: u32) {
    let held = mine(&shared.ledger(), n, |s| {
        matches!(s, AllocState::Acked(_) | AllocState::ReleaseUnanswered(_))
    });
    if held.is_empty() {
        return;
    }
    let rec = &held[rng.below(held.len() as u64) as usize];
    release(shared, socket, rec);
}

fn release(shared: &Shared, socket: &Path, rec: &AllocRecord) {
    let (AllocState::Acked(id) | AllocState::ReleaseUnanswered(id)) = &rec.state else {
        return;
    };
    let answer = http::call(
        socket,
        "DELETE",
        &format!("/v1/allocations/{id}"),
        None,
        None,
    );
    if matches!(answer, Err(NoAnswer::NotConnected(_))) {
        return;
    }
    count(shared, answer.is_ok());
    let Ok(a) = answer else {
        if let Some(r) = shared.ledger().allocations.get_mut(&rec.key) {
            r.state = AllocState::ReleaseUnanswered(id.clone());
        }
        return;
    };
    let mut l = shared.ledger();
    let retried = matches!(rec.state, AllocState::ReleaseUnanswered(_));
    match a.status {
        204 => {}
        // A retried release whose first try did happen.
        404 if retried => {}
        503 | 504 => return,
        status => {
            l.violations
                .push(format!("release {id}: unexpected {status} {}", a.body));
            return;
        }
    }
    l.counts.releases_acked += 1;
    if let Some(r) = l.allocations.get_mut(&rec.key) {
        r.state = AllocState::Released(id.clone());
    }
}

fn retry_one(shared: &Shared, socket: &Path, rng: &mut Rng, n: u32) {
    let open = mine(&shared.ledger(), n, |s| *s == AllocState::Unanswered);
    if open.is_empty() {
        return;
    }
    let rec = &open[rng.below(open.len() as u64) as usize];
    allocate(shared, socket, &rec.key, &rec.body);
}

/// Waits until the daemon answers a GET (it is ready after a start, but a vendor call may be
/// slow on a loaded machine).
fn wait_answering(socket: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while http::call(socket, "GET", "/healthz", None, None)
        .map(|a| a.status)
        .ok()
        != Some(200)
    {
        if Instant::now() > deadline {
            bail!("the daemon does not answer /healthz");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Runs the torture in `dir`.
pub fn torture(dir: &Path, cfg: &Config) -> anyhow::Result<Report> {
    let started = Instant::now();
    let bus = private_bus(dir);
    let mut daemon = Daemon::new(dir, &cfg.profile, bus.as_ref().map(|b| b.address.clone()))?;
    daemon.start()?;
    let shared = Arc::new(Shared {
        ledger: Mutex::new(Ledger::default()),
        stop: AtomicBool::new(false),
    });
    let socket = daemon.socket();
    let mut threads = Vec::new();
    for n in 0..cfg.clients {
        let (shared, socket, cfg) = (shared.clone(), socket.clone(), cfg.clone());
        threads.push(std::thread::spawn(move || {
            rest_client(shared, &socket, &cfg, n)
        }));
    }
    if let Some(address) = bus.as_ref().map(|b| b.address.clone()) {
        let shared = shared.clone();
        threads.push(std::thread::spawn(move || {
            while !shared.stop.load(Ordering::Relaxed) {
                if dbus_allocations(&address).is_some() {
                    shared.ledger().counts.dbus_reads += 1;
                }
                std::thread::sleep(Duration::from_millis(30));
            }
        }));
    }
    let mut rng = Rng::new(cfg.seed);
    let max = u64::try_from(cfg.max_uptime.as_millis())
        .unwrap_or(u64::MAX)
        .max(20);
    for _ in 0..cfg.kills {
        std::thread::sleep(Duration::from_millis(20 + rng.below(max)));
        daemon.kill();
        // Sometimes the clients find it down for a while.
        std::thread::sleep(Duration::from_millis(rng.below(50)));
        daemon.start().context("restart after SIGKILL")?;
    }
    shared.stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    wait_answering(&socket)?;
    let final_log = daemon.last_log();
    let acknowledged = shared.ledger().must_hold().len();
    let resolved_by_retry = resolve(&shared, &socket);
    let mut violations = shared.ledger().violations.clone();
    violations.extend(check_reconcile(&final_log));
    violations.extend(check_allocations(
        &shared,
        &socket,
        bus.as_ref().map(|b| b.address.as_str()),
    ));
    violations.extend(teardown(&socket));
    daemon.stop()?;
    violations.extend(check_host_clean(&daemon.state_dir().join("sim")));
    let l = shared.ledger();
    Ok(Report {
        kills: cfg.kills,
        counts: l.counts.clone(),
        allocation_requests: l.allocations.len(),
        acknowledged,
        resolved_by_retry,
        violations,
        elapsed: started.elapsed(),
        mean_start: mean(daemon.start_times()),
    })
}

/// Retries every unanswered allocation with its key and body, and every unanswered release.
fn resolve(shared: &Shared, socket: &Path) -> usize {
    let open: Vec<AllocRecord> = shared.ledger().allocations.values().cloned().collect();
    let mut resolved = 0;
    for rec in open {
        match rec.state {
            AllocState::Unanswered => {
                let answered = allocate(shared, socket, &rec.key, &rec.body).is_some();
                resolved += usize::from(answered);
            }
            AllocState::ReleaseUnanswered(_) => release(shared, socket, &rec),
            _ => {}
        }
    }
    let still: Vec<String> = shared
        .ledger()
        .allocations
        .values()
        .filter(|r| {
            matches!(
                r.state,
                AllocState::Unanswered | AllocState::ReleaseUnanswered(_)
            )
        })
        .map(|r| format!("{}: still unanswered after its retry", r.key))
        .collect();
    shared.ledger().violations.extend(still);
    resolved
}

/// The last start's first reconcile: nothing failed, nothing foreign (store and host agree).
fn check_reconcile(log: &str) -> Vec<String> {
    let Some(line) = log.lines().find(|l| l.contains("first reconcile:")) else {
        return vec!["the last start logged no first reconcile".into()];
    };
    if line.contains(" 0 failed") && line.contains(" 0 foreign") {
        Vec::new()
    } else {
        vec![format!("store and host disagree after a restart: {line}")]
    }
}

/// Every acknowledged allocation is there, nothing else is, no slice is in two; D-Bus agrees.
fn check_allocations(shared: &Shared, socket: &Path, bus: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    let listed = match http::call(socket, "GET", "/v1/allocations", None, None) {
        Ok(a) if a.status == 200 => a.body,
        other => return vec![format!("cannot list allocations: {other:?}")],
    };
    let list = listed.as_array().cloned().unwrap_or_default();
    let ids: Vec<String> = list
        .iter()
        .filter_map(|a| a["id"].as_str().map(str::to_owned))
        .collect();
    let must = shared.ledger().must_hold();
    for id in &must {
        if !ids.contains(id) {
            out.push(format!("acknowledged allocation {id} was lost"));
        }
    }
    for id in &ids {
        if !must.contains(id) {
            out.push(format!(
                "allocation {id} is held but no client holds it (duplicate or ghost)"
            ));
        }
    }
    let mut slices: Vec<&str> = list
        .iter()
        .flat_map(|a| a["slices"].as_array().into_iter().flatten())
        .filter_map(|s| s["id"].as_str())
        .collect();
    slices.sort_unstable();
    for pair in slices.windows(2) {
        if pair[0] == pair[1] {
            out.push(format!("slice {} is in two allocations", pair[0]));
        }
    }
    if let Some(address) = bus {
        match dbus_allocations(address) {
            Some(d) => {
                let mut over_dbus: Vec<String> = d
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a["id"].as_str().map(str::to_owned))
                    .collect();
                let mut rest = ids.clone();
                over_dbus.sort();
                rest.sort();
                if over_dbus != rest {
                    out.push(format!("D-Bus shows {over_dbus:?}, REST {rest:?}"));
                }
            }
            None => out.push("D-Bus AllocationsJson did not answer".into()),
        }
    }
    out
}

/// Releases every allocation and destroys every owned slice through the API.
fn teardown(socket: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let ids = |path: &str| -> Vec<String> {
        http::call(socket, "GET", path, None, None)
            .ok()
            .and_then(|a| a.body.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|v| v["id"].as_str().map(str::to_owned))
            .collect()
    };
    for id in ids("/v1/allocations") {
        let r = http::call(
            socket,
            "DELETE",
            &format!("/v1/allocations/{id}"),
            None,
            None,
        );
        if r.as_ref().map(|a| a.status).ok() != Some(204) {
            out.push(format!("cannot release {id}: {r:?}"));
        }
    }
    for id in ids("/v1/slices") {
        let r = http::call(socket, "DELETE", &format!("/v1/slices/{id}"), None, None);
        if r.as_ref().map(|a| a.status).ok() != Some(204) {
            out.push(format!("cannot destroy slice {id}: {r:?}"));
        }
    }
    out
}

/// After the teardown nothing vgpud made is left on the simulated host: no mdev, no MIG GPU
/// instance, no function on vfio-pci.
fn check_host_clean(sim_dir: &Path) -> Vec<String> {
    let host = match sim::SimHost::open(sim_dir) {
        Ok(h) => h,
        Err(e) => return vec![format!("cannot open the simulated host: {e}")],
    };
    let fs = host.sysfs();
    let mut out = Vec::new();
    let list = |p: &str| {
        fs.list_dir(Path::new(p))
            .map(|v| {
                v.into_iter()
                    .map(|n| n.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let mdevs = list("/sys/bus/mdev/devices");
    if !mdevs.is_empty() {
        out.push(format!("leaked mdevs: {mdevs:?}"));
    }
    let on_vfio = list("/sys/bus/pci/drivers/vfio-pci");
    let bound: Vec<_> = on_vfio.iter().filter(|n| n.contains(':')).collect();
    if !bound.is_empty() {
        out.push(format!("leaked functions on vfio-pci: {bound:?}"));
    }
    let nvml = host.nvml();
    let count = nvml.device_count().unwrap_or(0);
    for index in 0..count {
        if let Ok(gis) = nvml.gpu_instances(index)
            && !gis.is_empty()
        {
            out.push(format!(
                "leaked GPU instances on GPU {index}: {}",
                gis.len()
            ));
        }
    }
    out
}
